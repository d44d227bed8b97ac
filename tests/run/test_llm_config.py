"""configs/20q_llm.py end to end: its micro preset trains a tiny Llama policy through LoRA (frozen
base, adapters only) in the train app, and a resumed run equals a straight one."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import numpy as np
import pytest

from archer_jax.config import validate
from archer_jax.records.checkpoint import Checkpoints
from archer_jax.train import build_agent
from archer_jax.train import train_and_evaluate

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "20q_llm.py"


def config(preset: str):
    spec = importlib.util.spec_from_file_location("config_20q_llm", CONFIG)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(preset)


def test_the_official_setting_is_archer_llm():
    c = config("")
    assert c.model.policy == "mistralai/Mistral-7B-Instruct-v0.2" and c.model.critic == "roberta-base"
    assert (c.model.lora.rank, c.model.lora.alpha, c.model.lora.dropout, c.model.lora.targets) == (
        16, 32.0, 0.05, "q_proj,k_proj,v_proj,o_proj")
    assert (c.sampling.max_new_tokens, c.rollout_size, c.batch_size, c.grad_accum_steps) == (64, 32, 4, 64)
    assert (c.critic_steps, c.actor_steps, c.warmup_iter) == (20, 1, 20)
    assert (c.learner.critic_lr, c.learner.actor_lr, c.model.param_dtype) == (1e-5, 2e-6, "bfloat16")
    assert config("tiny_llm").to_dict() == config("tiny").to_dict()


@pytest.mark.slow
def test_micro_trains_the_adapters_only_and_resumes_exactly(tmp_path):
    c = config("micro")
    c.iterations = 2
    straight = train_and_evaluate(c, tmp_path / "straight")
    first = c.copy_and_resolve_references()
    first.iterations = 1
    train_and_evaluate(first, tmp_path / "resumed")
    resumed = train_and_evaluate(c, tmp_path / "resumed")
    assert resumed["eval_return_after"] == straight["eval_return_after"]

    agent = build_agent(validate(c), tmp_path / "straight")
    run = agent.parts
    try:
        states = agent.init_states()
        assert states.actor.frozen is not None  # the base is frozen ...
        names = {str(path[-1]) for path, _ in jax.tree_util.tree_flatten_with_path(states.actor.params)[0]}
        assert {n.strip(".'[]") for n in names} <= {"lora_a", "lora_b", "value"}  # ... and only adapters train
        a = Checkpoints(tmp_path / "straight" / "checkpoints").restore(2, actor=states.actor, critic=states.critic)
        b = Checkpoints(tmp_path / "resumed" / "checkpoints").restore(2, actor=states.actor, critic=states.critic)
    finally:
        run.close()
    for x, y in zip(jax.tree.leaves((a[0].params, a[0].opt_state, a[1].params)),
                    jax.tree.leaves((b[0].params, b[0].opt_state, b[1].params)), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert int(a[0].step) == c.actor_steps  # the actor stepped (iteration 2, after warm-up)


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 devices: XLA_FLAGS=--xla_force_host_platform_device_count=8")
def test_the_official_setting_starts_on_a_mistral_directory(tmp_path):
    """The official config unchanged but for the model names: a (small, random) Mistral directory
    loads in bfloat16 straight into an FSDP mesh over 8 devices, gets LoRA on q/k/v/o, and the
    sampler generates one batch of official-format prompts."""
    import transformers

    from archer_jax.models import tiny

    tokenizer = tiny.train_tokenizer("llama", tmp_path / "mistral")
    hf = transformers.MistralForCausalLM(transformers.MistralConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=1024, sliding_window=None, bos_token_id=0, eos_token_id=0))
    hf.save_pretrained(tmp_path / "mistral")
    c = config("")
    c.model.policy, c.model.critic = str(tmp_path / "mistral"), "tiny:roberta"
    c.env.workers = 0
    agent = build_agent(validate(c), tmp_path / "run")
    run = agent.parts
    try:
        policy = run.actor_module.policy
        gate = policy.layers[0].mlp.gate_proj.kernel[...]
        assert gate.dtype == jax.numpy.bfloat16 and gate.sharding.spec[0] == "fsdp"
        assert len(gate.sharding.device_set) == 8
        states = agent.init_states()
        assert {x.dtype for x in jax.tree.leaves(states.actor.params)} == {np.dtype("float32")}  # adapters
        observations = ["Questions:\n", "Questions:\nIs the object alive? No.\n"]
        texts = run.acting.sample(agent.policy(states), observations, jax.random.key(0))
        assert len(texts) == 2 and all(isinstance(t, str) for t in texts)
        (prompt,) = run.pipeline.policy_rows(observations[:1])
        assert "[INST] Please play Twenty Questions" in run.pipeline.policy_tokenizer.decode(prompt)
    finally:
        run.close()
