"""The critic's masked-LM pretraining: the head against Hugging Face's RobertaForMaskedLM, BERT's
masking rule, and that its steps learn on the game's text and leave the critic's heads alone."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
from flax import nnx

from archer_jax import learners, models
from archer_jax.learners import train_state
from archer_jax.learners.masked_lm import MaskedLM, mask_tokens, mlm_step
from archer_jax.pretraining import critic as cp
from archer_jax.runtime import sharding as shd
from tests import hf_reference as ref
from tests.learners.conftest import ACTIONS, OBSERVATIONS

PAD, MASK = 1, 4


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
@pytest.mark.parity
def test_the_head_matches_hugging_faces_masked_lm(tmp_path):
    """Logits of our encoder + head with HF's weights == RobertaForMaskedLM's (< 1e-4), and the
    masked-LM loss of a masked batch == HF's cross-entropy over the masked positions."""
    hf = ref.roberta(seed=5, masked_lm=True)
    encoder = models.load_roberta(ref.save(hf, tmp_path / "m", "safetensors"))
    ours = MaskedLM(encoder, rngs=nnx.Rngs(0))
    head = hf.lm_head
    ours.dense.kernel[...] = jnp.asarray(head.dense.weight.detach().numpy().T)
    ours.dense.bias[...] = jnp.asarray(head.dense.bias.detach().numpy())
    ours.norm.scale[...] = jnp.asarray(head.layer_norm.weight.detach().numpy())
    ours.norm.bias[...] = jnp.asarray(head.layer_norm.bias.detach().numpy())
    ours.bias[...] = jnp.asarray(head.bias.detach().numpy())
    rows = [np.random.default_rng(i).integers(5, ref.VOCAB, n).astype(np.int32) for i, n in enumerate((9, 3, 6))]
    batch = mask_tokens(rows, np.random.default_rng(0), mask_id=MASK, vocab_size=ref.VOCAB, special_ids=(0, 1, 2, 3, 4),
                        pad_id=PAD, length=10)
    with torch.no_grad():
        want = hf(input_ids=torch.tensor(np.asarray(batch.inputs.ids), dtype=torch.long),
                  attention_mask=torch.tensor(np.asarray(batch.inputs.mask), dtype=torch.long)).logits.numpy()
    logits = np.asarray(ours(learners.Tokens(*map(jnp.asarray, batch.inputs))))
    mask = np.asarray(batch.inputs.mask)
    assert ref.max_abs_error(logits, want, mask) < 1e-4
    labels = np.where(np.asarray(batch.weights) > 0, np.asarray(batch.targets), -100)
    hf_loss = torch.nn.functional.cross_entropy(torch.tensor(want).reshape(-1, ref.VOCAB),
                                                torch.tensor(labels.reshape(-1), dtype=torch.long)).item()
    graphdef, params = train_state.split_params(ours)
    tx = optax.sgd(0.0)
    _, metrics = jax.jit(functools.partial(mlm_step, graphdef, tx))(train_state.create(params, tx), batch)
    np.testing.assert_allclose(float(metrics["loss"]), hf_loss, rtol=1e-4)


def test_masking_follows_berts_rule():
    """15% of the real, non-special tokens are scored (at least one a row), never a special token or
    padding; 80% of the scored become the mask token, 10% a random token, 10% stay."""
    rng = np.random.default_rng(1)
    rows = [np.concatenate([[0], rng.integers(5, 500, n), [2]]).astype(np.int32) for n in rng.integers(1, 60, 400)]
    batch = mask_tokens(rows, np.random.default_rng(2), mask_id=MASK, vocab_size=500, special_ids=(0, 1, 2, 3, 4),
                        pad_id=PAD, length=64)
    ids, weights, inputs = batch.targets, batch.weights.astype(bool), batch.inputs.ids
    special = np.isin(ids, (0, 1, 2, 3, 4))
    assert not (weights & special).any() and not (weights & (batch.inputs.mask == 0)).any()
    assert weights.any(axis=1).all()
    assert (inputs[~weights] == ids[~weights]).all()  # only scored positions change
    real = (~special & (batch.inputs.mask == 1)).sum()
    assert abs(weights.sum() / real - 0.15) < 0.02
    scored = weights.sum()
    assert abs((inputs[weights] == MASK).sum() / scored - 0.8) < 0.03
    assert abs((inputs[weights] == ids[weights]).sum() / scored - 0.1) < 0.03


@pytest.mark.slow
def test_pretraining_learns_the_games_text_and_leaves_the_heads(tiny_dirs, tokenizers):
    """40 steps on the dialogues lower the masked-LM loss and spread the pooled embeddings of
    different dialogues apart (a random encoder's are nearly identical); the critic's parameters
    come back with the encoder trained and the Q and V heads as they were."""
    critic = learners.DoubleCritic(models.load_roberta(tiny_dirs[1]), rngs=nnx.Rngs(0))
    _, before = train_state.split_params(critic)
    before = jax.device_get(before)
    corpus = cp.texts(OBSERVATIONS * 4, ACTIONS)
    pretraining = cp.Pretraining(critic, tokenizers[1], cp.CriticPretrainConfig(steps=40, lr=3e-3),
                                 mesh=shd.single_device_mesh(), max_length=64)

    def spread(params):
        nnx.update(critic, params)
        t = models.tokenizer.pad_rows(models.tokenizer.token_rows(tokenizers[1], OBSERVATIONS, max_length=64), PAD,
                                      left=False, max_length=64)
        e = np.asarray(critic.embed(learners.Tokens(jnp.asarray(t.ids), jnp.asarray(t.mask))))
        return float(e.std(0).mean() / np.abs(e).mean())

    history = pretraining.train(corpus)
    after = jax.device_get(pretraining.critic_params())
    assert np.mean([h["loss"] for h in history[-5:]]) < 0.7 * np.mean([h["loss"] for h in history[:5]])
    for name in ("q1", "q2", "v1", "v2"):
        for a, b in zip(jax.tree.leaves(before[name]), jax.tree.leaves(after[name])):
            np.testing.assert_array_equal(a, b)
    assert any(not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(before["encoder"]),
                                                        jax.tree.leaves(after["encoder"])))
    assert spread(after) > 5 * spread(before)
