"""Action log-probs on packed observation + action sequences, against Hugging Face PyTorch."""

import jax.numpy as jnp
import numpy as np
import pytest

from archer_jax import learners, models
from tests.learners import text_batches as batches
from tests import hf_reference as ref
from tests.learners.conftest import ACTIONS, OBSERVATIONS


def test_packed_logprobs_match_unpadded_hugging_face_rows(tiny_dirs, tokenizers):
    policy_tok, _ = tokenizers
    policy = models.load_gpt2(tiny_dirs[0])
    hf = ref.transformers.GPT2LMHeadModel.from_pretrained(tiny_dirs[0]).eval()
    bc = batches.bc_batch(policy_tok, OBSERVATIONS, ACTIONS)
    obs = learners.Tokens(jnp.asarray(bc.observation.ids), jnp.asarray(bc.observation.mask))
    act = learners.Tokens(jnp.asarray(bc.action.ids), jnp.asarray(bc.action.mask))
    ours, _ = learners.action_logprobs(policy, obs, act)
    ours = np.asarray(ours)
    for i, (o, a) in enumerate(zip(OBSERVATIONS, ACTIONS)):
        o_ids = policy_tok(o)["input_ids"]
        a_ids = policy_tok(a + "\n", add_special_tokens=False)["input_ids"]
        row = np.array([o_ids + a_ids])
        logits = ref.gpt2_logits(hf, row, np.ones_like(row))[0].astype(np.float64)
        logits -= logits.max(-1, keepdims=True)
        logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        expected = [logp[len(o_ids) - 1 + t, a_ids[t]] for t in range(len(a_ids))]
        n = int(bc.action.mask[i].sum())
        assert n == len(a_ids)  # the stop token "\n" is among the trained tokens
        np.testing.assert_allclose(ours[i, :n], expected, atol=1e-4)
        assert (ours[i, n:] == 0).all()


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
def test_token_baseline_head_sees_no_policy_gradient(tiny_dirs, tokenizers):
    import jax
    from flax import nnx

    actor = learners.Actor(models.load_gpt2(tiny_dirs[0]), token_baseline=True, rngs=nnx.Rngs(0))
    bc = batches.bc_batch(tokenizers[0], OBSERVATIONS, ACTIONS)
    obs = learners.Tokens(*(jnp.asarray(x) for x in bc.observation))
    act = learners.Tokens(*(jnp.asarray(x) for x in bc.action))
    graphdef, params = nnx.split(actor)

    def baseline_sum(p):
        _, b = nnx.merge(graphdef, p)(obs, act)
        return jnp.sum(b)

    grads = jax.grad(baseline_sum)(params)
    assert all(float(jnp.abs(g).max()) == 0 for g in jax.tree.leaves(grads["policy"]))
    assert any(float(jnp.abs(g).max()) > 0 for g in jax.tree.leaves(grads["baseline"]))
