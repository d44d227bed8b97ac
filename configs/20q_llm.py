"""ArCHer with a 7B policy and LoRA: the official ``archer_llm`` setting (archer_llm_20q.yaml).

    python -m archer_jax.train --config=configs/20q_llm.py --workdir=runs/20q_llm
    python -m archer_jax.train --config=configs/20q_llm.py:tiny_llm --workdir=runs/20q_llm_tiny

The official setting: policy ``mistralai/Mistral-7B-Instruct-v0.2`` with LoRA (r 16, alpha 32,
dropout 0.05, on q/k/v/o), max_new_tokens 64, 32 rollouts, batch 4 x 64 accumulation steps, 20 critic steps and one
actor step per iteration, critic lr 1e-5, actor lr 2e-6, 20 warm-up iterations, RoBERTa-base critic,
on the 10-object subset of Twenty Questions. The base weights load in bfloat16, sharded over the mesh
(FSDP by default), and the adapters train in float32.

Prompts are the official agent's instruction (``model.prompt_format="mistral_20q"``,
archer_jax/sampling/prompts.py) in the tokenizer's chat template; the env gets the question of the policy's
JSON answer, decoded as the official code does. The 20Q oracle is the embedded one; the official
T5 oracle is ``--config.env.options.oracle=t5:DIR`` (README, "Environments").

``tiny_llm`` (or ``tiny``): a random tiny Llama-shaped policy (RMSNorm, RoPE, grouped-query attention, SwiGLU;
built offline with its embedded tokenizer), the tiny RoBERTa critic, an SFT warm start on the
scripted experts, and CPU-sized counts: it runs on a laptop CPU in minutes. Its random base has no
pretraining for adapters to build on, so it trains every weight (LoRA rank 0), on plain prompts (the
long instruction would cost it most of its 256 prompt tokens). ``micro``: seconds, for tests, with
LoRA on every projection and the official prompt format (the 7B path: frozen base, adapters only).
"""

from __future__ import annotations

import ml_collections

from archer_jax.config import TINY, base_config, with_preset

PRESETS = ("", "tiny", "micro")  # "tiny_llm" is another name for "tiny"


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The config for ``preset``: "" (official archer_llm), "tiny" (= "tiny_llm") or "micro"."""
    preset = "tiny" if preset == "tiny_llm" else preset
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r} for configs/20q_llm.py; known: '' (official), 'tiny_llm', 'micro'")
    c = base_config()
    c.env.name = "twenty_questions_subset"
    c.model.policy = "mistralai/Mistral-7B-Instruct-v0.2"
    c.model.critic = "roberta-base"
    c.model.param_dtype = "bfloat16"
    c.model.prompt_format = "mistral_20q"  # the official instruction, in the tokenizer's chat template
    c.model.remat = "full"
    c.model.lora.update(dict(rank=16, alpha=32.0, dropout=0.05, targets="q_proj,k_proj,v_proj,o_proj"))
    c.mesh.update(dict(data=1, fsdp=-1, tensor=1))
    c.model.critic_sharding = "replicated"  # the 125M critic whole on each device, the 7B policy split
    c.sampling.max_new_tokens = 64
    c.update(dict(rollout_size=32, eval_size=32, capacity=100_000, batch_size=4, grad_accum_steps=64, critic_steps=20,
                  actor_steps=1, warmup_iter=20, iterations=2000))
    c.learner.update(dict(critic_lr=1e-5, actor_lr=2e-6, gamma=0.95, tau=0.1))
    if preset == "":
        return c
    # A random tiny base has learned nothing for adapters to adjust (LoRA-only SFT moved its loss from
    # 62.9 to 60.8 in 300 steps): tiny_llm trains every weight; micro keeps LoRA, so tests run that path.
    tiny = {**TINY, "model.policy": "tiny:llama", "model.param_dtype": "float32", "model.remat": "none",
            "model.lora.rank": 0, "model.prompt_format": "plain", "model.critic_sharding": "mesh",
            "mesh.fsdp": 1, "mesh.data": -1, "sampling.max_new_tokens": 32, "batch_size": 32, "grad_accum_steps": 1,
            "critic_steps": 10, "actor_steps": 3, "warmup_iter": 5, "iterations": 30, "rollout_size": 32,
            "eval_size": 32, "env.max_turns": 12, "learner.actor_lr": 1e-5,
            "sft.steps": 300, "sft.lr": 1e-3, "sft.batch_size": 32, "sft.dialogues": 256,
            "sft.experts": "optimal,random_order"}
    micro = {"model.lora.rank": 16, "model.prompt_format": "mistral_20q", "model.lora.targets": "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
             "rollout_size": 4, "eval_size": 4, "env.max_turns": 4, "sft.steps": 4, "sft.batch_size": 8,
             "sft.dialogues": 4}
    return with_preset(c, "micro" if preset == "micro" else "tiny", "configs/20q_llm.py", tiny=tiny, micro=micro)
