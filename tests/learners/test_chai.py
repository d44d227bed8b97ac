"""Fresh a_pi from the sampler into learner batches, and CHAI's choice by the target critic."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from archer_jax import acting, learners, models
from archer_jax.agents import chai
from archer_jax.models.tokenizer import token_rows
from tests.learners import text_batches as batches
from archer_jax.sampling import Sampler, SamplingParams
from tests.learners.conftest import OBSERVATIONS, make_modules


@pytest.fixture(scope="module")
def sampler(tiny_dirs, tokenizers):
    return Sampler(models.load_gpt2(tiny_dirs[0]), tokenizers[0])


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
def test_actor_batch_from_the_sampler_reproduces_its_logprobs(tiny_dirs, tokenizers, sampler):
    """The actor scores exactly what was sampled: packed log-probs == the sampler's (< 1e-4)."""
    observations = OBSERVATIONS * 2
    limit = sampler.prompt_limit(SamplingParams(max_new_tokens=8))
    batch, generation = acting.sampled_actor_batch(
        sampler, tokenizers[1], token_rows(tokenizers[0], observations, max_length=limit),
        token_rows(tokenizers[1], observations, max_length=512), jax.random.key(0), SamplingParams(max_new_tokens=8),
    )
    assert batch.observation.ids.shape[0] == 8 and batch.action.ids.shape[1] == 8
    policy = models.load_gpt2(tiny_dirs[0])
    device = lambda t: learners.Tokens(*map(jnp.asarray, t))  # noqa: E731
    logprobs, _ = learners.action_logprobs(policy, device(batch.observation), device(batch.action))
    np.testing.assert_allclose(np.asarray(logprobs), generation.logprobs, atol=1e-4)
    # The critic sees the a_pi texts (cut before the stop string), in its own tokens.
    critic_ids = batch.critic_action.ids
    decoded = tokenizers[1].batch_decode(critic_ids, skip_special_tokens=True)
    assert decoded == generation.texts


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
def test_the_actor_scores_the_sampled_tokens_under_the_sampled_distribution(tiny_dirs, tokenizers, sampler):
    """At temperature 0.7 and top_p 0.9 the actor's log-probs of a_π (under the sampling
    distribution, the nucleus renormalised) are the sampler's own ``sample_logprobs`` (< 1e-4), and
    differ from the untempered model's."""
    sampling = SamplingParams(max_new_tokens=8, temperature=0.7, top_p=0.9)
    observations = OBSERVATIONS * 2
    batch, generation = acting.sampled_actor_batch(
        sampler, tokenizers[1], token_rows(tokenizers[0], observations, max_length=sampler.prompt_limit(sampling)),
        token_rows(tokenizers[1], observations, max_length=512), jax.random.key(5), sampling,
    )
    policy = models.load_gpt2(tiny_dirs[0])
    device = lambda t: learners.Tokens(*map(jnp.asarray, t))  # noqa: E731
    scored, _ = learners.action_logprobs(policy, device(batch.observation), device(batch.action), sampling.distribution)
    np.testing.assert_allclose(np.asarray(scored), generation.sample_logprobs, atol=1e-4)
    model, _ = learners.action_logprobs(policy, device(batch.observation), device(batch.action))
    assert np.abs(np.asarray(model) - generation.sample_logprobs).max() > 0.1


def test_without_the_stop_token_the_actor_scores_a_pi_up_to_it(tokenizers, sampler):
    """``learner.score_stop_token = False`` (the official code's rule): a row that ended on the stop
    string loses its last token, the others keep all theirs; the critic's texts are the same (the
    stop string here a letter, which the random tiny policy samples often)."""
    sampling = SamplingParams(max_new_tokens=8, stop_strings=("i",))
    observations = OBSERVATIONS * 2
    policy_rows = token_rows(tokenizers[0], observations, max_length=sampler.prompt_limit(sampling))
    critic_rows = token_rows(tokenizers[1], observations, max_length=512)
    kept, generation = acting.sampled_actor_rows(sampler, tokenizers[1], policy_rows, critic_rows, jax.random.key(3),
                                                 sampling)
    cut, _ = acting.sampled_actor_rows(sampler, tokenizers[1], policy_rows, critic_rows, jax.random.key(3), sampling,
                                       stop_token=False)
    assert "stop" in generation.finish_reasons and set(generation.finish_reasons) != {"stop"}
    for a, b, reason in zip(kept.actions, cut.actions, generation.finish_reasons):
        np.testing.assert_array_equal(b, a[:-1] if reason == "stop" else a)
    assert all(np.array_equal(a, b) for a, b in zip(kept.critic_actions, cut.critic_actions))


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
def test_chai_acts_with_the_best_pessimistic_target_q(tiny_dirs, tokenizers, sampler):
    _, critic = make_modules(tiny_dirs, seed=3)
    graphdef, params = learners.split_params(critic)
    obs = OBSERVATIONS[:3]
    choice = chai.chai_actions(
        sampler, graphdef, params, tokenizers[1], obs, jax.random.key(1), SamplingParams(max_new_tokens=6), k=4
    )
    assert choice.values.shape == (3, 4) and len(choice.candidates.texts) == 12
    for i, o in enumerate(obs):  # score each candidate alone, unpadded
        scores = []
        for j in range(4):
            text = choice.candidates.texts[i * 4 + j]
            s = batches.tokenize(tokenizers[1], [o], 64)
            a = batches.tokenize(tokenizers[1], [text], 64)
            v = critic(learners.Tokens(*map(jnp.asarray, s)), learners.Tokens(*map(jnp.asarray, a)))
            scores.append(float(jnp.minimum(v.q1, v.q2)[0]))
        np.testing.assert_allclose(choice.values[i], scores, atol=1e-4)
        assert choice.index[i] == int(np.argmax(scores))
        assert choice.texts[i] == choice.candidates.texts[i * 4 + choice.index[i]]


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
def test_in_context_the_critic_reads_each_action_after_its_observation(tiny_dirs, tokenizers, sampler):
    """``model.critic_action="in_context"``: replay rows, a fresh a_π's rows and CHAI's candidates
    are all the critic's tokens of the observation followed by the utterance (CHAI's scores equal
    each candidate scored alone that way)."""
    from archer_jax.input_pipeline import InputPipeline

    pipeline = InputPipeline(*tokenizers, 64, 64, 8, critic_action_in_context=True)
    obs = OBSERVATIONS[:3]
    acts = ["Is it a dog?", "Is it red?", "Is it a pen?"]
    rows = pipeline.critic_action_rows(obs, acts)
    assert tokenizers[1].batch_decode(rows, skip_special_tokens=True) == [o + a for o, a in zip(obs, acts)]
    assert pipeline.critic_action_texts(obs, acts) == [o + a for o, a in zip(obs, acts)]
    assert InputPipeline(*tokenizers, 64, 64, 8).critic_action_texts(obs, acts) == acts
    sampling = SamplingParams(max_new_tokens=6)
    actor_rows, generation = acting.sampled_actor_rows(
        sampler, tokenizers[1], token_rows(tokenizers[0], obs, max_length=sampler.prompt_limit(sampling)),
        token_rows(tokenizers[1], obs, max_length=512), jax.random.key(2), sampling, context=obs)
    assert tokenizers[1].batch_decode(actor_rows.critic_actions, skip_special_tokens=True) == \
        [o + t for o, t in zip(obs, generation.texts)]
    _, critic = make_modules(tiny_dirs, seed=3)
    graphdef, params = learners.split_params(critic)
    choice = chai.chai_actions(sampler, graphdef, params, tokenizers[1], obs, jax.random.key(1), sampling, k=2,
                                 action_in_context=True)
    for i, o in enumerate(obs):
        for j in range(2):
            s = batches.tokenize(tokenizers[1], [o], 64)
            a = batches.tokenize(tokenizers[1], [o + choice.candidates.texts[i * 2 + j]], 64)
            v = critic(learners.Tokens(*map(jnp.asarray, s)), learners.Tokens(*map(jnp.asarray, a)))
            np.testing.assert_allclose(choice.values[i, j], float(jnp.minimum(v.q1, v.q2)[0]), atol=1e-4)
