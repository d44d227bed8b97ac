"""A 7B LoRA policy on one accelerator: our sampler and learner steps against transformers + peft.

Mistral-7B-Instruct-v0.2 shapes (32 layers, 4096 wide, 32 heads, 8 key/value heads, MLP 14336,
vocabulary 32000, no sliding window, RoPE theta 1e6) with random weights, built on the device
(nothing is downloaded); bfloat16 weights and compute; LoRA rank 16, alpha 32 on q/k/v/o (float32
adapters, the base frozen); the critic is RoBERTa-base-shaped (float32 parameters, bfloat16
compute): the official ``archer_llm`` setting (``configs/20q_llm.py``). Every shape can be
overridden (``--layers 2 --hidden 256 ...``), and ``--scale smoke`` sets small ones that a CPU
runs in a minute, to check the script end to end. Measured, ours and the reference in the same
process on the same device (ours first, then the reference):

  * ``decode``: ``--decode-batch`` prompts of ``--prompt`` random tokens, exactly
    ``--new-tokens`` greedy new tokens each (EOS and stop strings off), through the policy with
    its adapters (as rollouts sample). Ours: :class:`archer_jax.sampling.decoding.Decoder`
    (jitted prefill + while-loop decode); reference: the peft model's ``generate(do_sample=False,
    min_new_tokens=max_new_tokens)``. ``gen tokens/s`` = batch x new tokens / total time;
    the decode step = (total - a one-token run's time) / (new tokens - 1). On a GPU/TPU the step
    is set against the memory-bandwidth roofline: each step reads every parameter and the whole KV
    cache (prompt + new slots, every layer) once, so the roofline is ``batch x bandwidth /
    (parameter bytes + cache bytes)`` tokens/s (bandwidths: ``common.PEAK_BANDWIDTH``).
  * ``actor``: one actor step on ``--batch`` transitions (``--observation`` + ``--action``
    tokens, one micro-batch). Ours: :func:`archer_jax.agents.archer.actor_step` (the online
    critic's advantage, log-probs of the packed sequence, backward through the frozen base into
    the adapters, clipping, Adam). Reference: the same work in eager PyTorch: the critic's
    advantage without gradient, the peft model's forward on the packed sequence (logits of the
    action positions only, ``logits_to_keep``), ``-mean(log π(a|s) x A)``, ``backward()``,
    ``clip_grad_norm_`` and ``torch.optim.Adam`` over the adapters.
  * ``critic``: one critic step on the same batch in critic tokens. Ours:
    :func:`~archer_jax.agents.archer.critic_step`; reference: ``RobertaModel`` + four MLP heads
    (``reference_torch.DoubleCritic``) under bfloat16 autocast, the online pass on (s, a) with
    gradient, the target's passes on s, s' and a_π without, the four MSE losses, clipping, Adam and
    the Polyak update (the same encoder passes as ours).

``--remat`` (default ``full``, as ``configs/20q_llm.py``) checkpoints our layers and turns on
gradient checkpointing in the reference (both policy and critic), so both sides recompute the
same. Each measurement is warmed up once (ours: compilation, reported as ``compile s``), then
timed ``--repeats`` times (median). Memory per device: ours from the states' shards
(:func:`archer_jax.plan.memory.device_bytes`) and the device's peak (``memory_stats()``, where it
reports one: cumulative over the run so far); the reference's from
``torch.cuda.max_memory_allocated()`` per part (CUDA only). JAX is told not to preallocate GPU
memory (``XLA_PYTHON_CLIENT_PREALLOCATE=false`` unless set), so that PyTorch finds room after it.

Targets (issue 20): decode at >= 60% of the roofline; the actor step >= 3x faster than the
reference at equal batch.

    python llm_7b.py                                   # on a GPU: 7B shapes
    python llm_7b.py --scale smoke --tag smoke         # on a CPU: reduced shapes, results/llm_7b_cpu_smoke.json
Prints a table; writes benchmarks/results/llm_7b_<backend>[_<tag>].json (or ``--out``).
"""

from __future__ import annotations

import argparse
import gc
import os
import shlex
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # before JAX starts: leave room for PyTorch

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from archer_jax import learners, models  # noqa: E402
from archer_jax.agents.steps import Steps  # noqa: E402
from archer_jax.models.llama.model import LlamaForCausalLM, MistralConfig  # noqa: E402
from archer_jax.models.lora import LoRAConfig, apply_lora  # noqa: E402
from archer_jax.plan import memory as memory_plan  # noqa: E402
from archer_jax.runtime import sharding as shd  # noqa: E402
from archer_jax.sampling.decoding import Decoder, SamplingParams  # noqa: E402
from common import RESULTS, machine, peak_bandwidth, portable, print_table, time_call, write_result  # noqa: E402

GIB = 2**30

# Shapes and sizes per --scale; any flag given overrides its preset value.
SCALES: dict[str, dict] = {
    "full": dict(layers=32, hidden=4096, heads=32, kv_heads=8, intermediate=14336, vocab=32000,
                 critic_layers=12, critic_hidden=768, critic_heads=12, critic_intermediate=3072, critic_vocab=50265,
                 prompt=512, new_tokens=64, decode_batch=32, batch=8, observation=512, action=64, repeats=3),
    "smoke": dict(layers=2, hidden=256, heads=4, kv_heads=2, intermediate=512, vocab=1024,
                  critic_layers=2, critic_hidden=128, critic_heads=2, critic_intermediate=512, critic_vocab=1024,
                  prompt=64, new_tokens=16, decode_batch=4, batch=4, observation=64, action=16, repeats=2),
}

TARGETS = {"decode_roofline_fraction": 0.6, "actor_speedup": 3.0}
SHAPE_KEYS = ("layers", "hidden", "heads", "kv_heads", "intermediate", "vocab", "prompt", "new_tokens", "decode_batch",
              "batch", "observation", "action")  # the targets are set for these at their full values


def reduced(args) -> bool:
    """Whether any shape is below the 7B setting the targets are set for."""
    return any(getattr(args, key) != SCALES["full"][key] for key in SHAPE_KEYS)


# ---- configuration ---------------------------------------------------------------------------


def policy_config(args) -> MistralConfig:
    """Mistral-7B-Instruct-v0.2's config.json at the chosen shapes (no sliding window, theta 1e6)."""
    return MistralConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
                         num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                         rope_theta=1e6, sliding_window=None)


def critic_config(args) -> models.RobertaConfig:
    """RoBERTa-base's config at the chosen shapes."""
    return models.RobertaConfig(vocab_size=args.critic_vocab, hidden_size=args.critic_hidden,
                                num_hidden_layers=args.critic_layers, num_attention_heads=args.critic_heads,
                                intermediate_size=args.critic_intermediate)


def lora_config(args) -> LoRAConfig:
    return LoRAConfig(rank=args.lora_rank, alpha=args.lora_alpha, targets=tuple(args.lora_targets))


def param_count(config: MistralConfig) -> int:
    """Parameters of the base policy (no adapters)."""
    c = config
    attention = c.hidden_size * c.head_dim * (2 * c.num_attention_heads + 2 * c.num_key_value_heads)
    layer = attention + 3 * c.hidden_size * c.intermediate_size + 2 * c.hidden_size
    return c.num_hidden_layers * layer + 2 * c.vocab_size * c.hidden_size + c.hidden_size


# ---- data ------------------------------------------------------------------------------------


class Data:
    """Random token ids for every part, shared by both sides (NumPy, int32; no padding)."""

    def __init__(self, args, seed: int = 0):
        rng = np.random.default_rng(seed)
        ids = lambda rows, length, vocab: rng.integers(3, vocab, (rows, length)).astype(np.int32)  # noqa: E731
        b, obs, act, cobs = args.batch, args.observation, args.action, args.critic_observation
        self.prompts = ids(args.decode_batch, args.prompt, args.vocab)
        self.observation, self.action = ids(b, obs, args.vocab), ids(b, act, args.vocab)
        self.critic_observation, self.critic_action = ids(b, cobs, args.critic_vocab), ids(b, act, args.critic_vocab)
        self.next_observation, self.pi_action = ids(b, cobs, args.critic_vocab), ids(b, act, args.critic_vocab)
        self.reward = rng.normal(size=b).astype(np.float32)
        self.terminal = rng.integers(0, 2, b).astype(np.float32)


def _tokens(ids: np.ndarray) -> learners.Tokens:
    return learners.Tokens(ids, np.ones_like(ids))


# ---- ours ------------------------------------------------------------------------------------


def build_policy(args) -> nnx.Module:
    """The policy with adapters, initialised by one jitted program straight into its shardings
    (one copy of the weights on the device; nothing on the host)."""
    config, dtype = policy_config(args), jnp.dtype(args.dtype)

    def build() -> nnx.Module:
        model = LlamaForCausalLM(config, dtype=dtype, param_dtype=jnp.dtype(args.param_dtype), remat=args.remat,
                                 rngs=nnx.Rngs(args.seed))
        apply_lora(model, lora_config(args), rngs=nnx.Rngs(args.seed + 1))
        return model

    graphdef, abstract = nnx.split(nnx.eval_shape(build))
    shardings = shd.state_shardings(abstract, shd.single_device_mesh())
    state = jax.jit(lambda: nnx.split(build())[1], out_shardings=shardings)()
    return nnx.merge(graphdef, state)


def build_critic(args) -> learners.DoubleCritic:
    dtype, kw = jnp.dtype(args.dtype), dict(param_dtype=jnp.float32, rngs=nnx.Rngs(args.seed + 2))
    encoder = models.RobertaModel(critic_config(args), dtype=dtype, remat=args.remat, **kw)
    return learners.DoubleCritic(encoder, dtype=dtype, **kw)


def peak_bytes() -> int | None:
    """The device's peak bytes in use so far (None where it reports none, e.g. CPUs)."""
    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use")


def bench_ours(args, data: Data, bandwidth: float | None) -> tuple[list[dict], dict]:
    """Our rows (decode, actor, critic, as ``--parts`` asks) and memory per device."""
    start = time.perf_counter()
    policy = build_policy(args)
    critic = build_critic(args)
    jax.block_until_ready(nnx.state(policy))
    build_s = time.perf_counter() - start
    config = policy.config
    rows, memory = [], {"build_s": build_s}

    if "decode" in args.parts:
        decoder = Decoder(policy, lambda sampling: np.zeros(config.vocab_size, bool), pad_id=0)
        mask = np.ones_like(data.prompts)
        times, compile_s = {}, None
        for new in (1, args.new_tokens):
            params = SamplingParams(max_new_tokens=new, greedy=True, stop_strings=(), stop_at_eos=False)

            def run():
                jax.block_until_ready(decoder.generate_tokens(data.prompts, mask, jax.random.key(0), params).tokens)

            first, times[new] = time_call(run, args.repeats)
            if new == args.new_tokens:
                compile_s = first - times[new]
        rows.append(decode_row("archer_jax", args, times[args.new_tokens], times[1], compile_s))
        rows[-1]["peak_gib"] = _gib(peak_bytes())
        batch, slots = decoder.batch_bucket(len(data.prompts)), data.prompts.shape[1] + args.new_tokens
        param_bytes = memory_plan.device_bytes(decoder.model_state)
        cache_bytes = 2 * config.num_hidden_layers * batch * slots * config.num_key_value_heads * config.head_dim \
            * jnp.dtype(args.dtype).itemsize
        memory.update(decode_param_bytes=param_bytes, kv_cache_bytes=cache_bytes, decode_rows=batch, decode_slots=slots)
        if bandwidth:
            step_bytes = param_bytes + cache_bytes
            memory["roofline"] = dict(bandwidth_bytes_per_s=bandwidth, bytes_per_step=step_bytes,
                                      step_ms=1e3 * step_bytes / bandwidth,
                                      tokens_per_s=len(data.prompts) * bandwidth / step_bytes)
        del decoder

    if "actor" in args.parts or "critic" in args.parts:
        learner = Steps(learners.Actor(policy), critic, learners.LearnerConfig(
            critic_lr=1e-5, actor_lr=2e-6, micro_batch_size=args.batch))
        states = {"critic": learner.init_critic(), "actor": learner.init_actor()}
        actor_batch = learners.ActorBatch(_tokens(data.observation), _tokens(data.action),
                                          _tokens(data.critic_observation), _tokens(data.critic_action))
        critic_batch = learners.CriticBatch(_tokens(data.critic_observation), _tokens(data.critic_action),
                                            _tokens(data.next_observation), _tokens(data.pi_action), data.reward,
                                            data.terminal)

        def actor_step():
            states["actor"], metrics = learner.actor_step(states["actor"], states["critic"].params, actor_batch)
            jax.block_until_ready(metrics)

        def critic_step():
            states["critic"], metrics = learner.critic_step(states["critic"], critic_batch)
            jax.block_until_ready(metrics)

        for part, fn in (("actor", actor_step), ("critic", critic_step)):
            if part in args.parts:
                first, median = time_call(fn, args.repeats)
                rows.append(step_row(part, "archer_jax", args, median, first - median))
                rows[-1]["peak_gib"] = _gib(peak_bytes())
        actor, critic_state = states["actor"], states["critic"]
        memory.update(
            policy_base_bytes=memory_plan.device_bytes(actor.frozen),
            lora_bytes=memory_plan.device_bytes(actor.params),
            lora_adam_bytes=memory_plan.device_bytes(actor.opt_state),
            critic_bytes=memory_plan.device_bytes(critic_state.params),
            critic_target_bytes=memory_plan.device_bytes(critic_state.target),
            critic_adam_bytes=memory_plan.device_bytes(critic_state.opt_state),
            micro_batch_size={name: sorted({x.size for x in program.layouts.values()})
                              for name, program in learner.programs().items() if program.layouts},
        )
        memory["state_bytes"] = sum(memory[k] for k in ("policy_base_bytes", "lora_bytes", "lora_adam_bytes",
                                                         "critic_bytes", "critic_target_bytes", "critic_adam_bytes"))
        del learner, states, actor, critic_state
    else:
        memory["policy_base_bytes"] = memory_plan.device_bytes(nnx.state(policy, nnx.Not(nnx.LoRAParam)))
    memory["peak_bytes"] = peak_bytes()
    del policy, critic
    gc.collect()
    return rows, memory


# ---- the reference ---------------------------------------------------------------------------


def bench_reference(args, data: Data, device: str) -> tuple[list[dict], dict]:
    """transformers + peft (and reference_torch's double critic) on ``device``: the same parts."""
    import peft
    import torch
    import transformers

    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")  # gradient_checkpointing_* renames
    if args.threads:
        torch.set_num_threads(args.threads)

    from reference_torch import DoubleCritic

    torch.manual_seed(args.seed)
    cuda = device == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def reset_peak():
        if cuda:
            torch.cuda.reset_peak_memory_stats()

    def peak():
        return torch.cuda.max_memory_allocated() if cuda else None

    start = time.perf_counter()
    hf_config = transformers.MistralConfig(**policy_config(args).to_hf_dict())
    dtype_kw = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    with torch.device(device):  # parameters made on the device, in bfloat16
        base = transformers.AutoModelForCausalLM.from_config(hf_config, attn_implementation="sdpa",
                                                             **{dtype_kw: getattr(torch, args.param_dtype)})
    lora = lora_config(args)
    model = peft.get_peft_model(base, peft.LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=0.0,
                                                      target_modules=list(lora.target_names()), task_type="CAUSAL_LM"))
    # Dropout off, as in ours (and its train mode keeps the gradient checkpointing on).
    critic = DoubleCritic(transformers.RobertaConfig(**critic_config(args).to_hf_dict(), hidden_dropout_prob=0.0,
                                                     attention_probs_dropout_prob=0.0)).to(device)
    if args.remat != "none":
        for module in (model, critic.base_lm):
            module.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    sync()
    memory = {"build_s": time.perf_counter() - start, "model_bytes": torch.cuda.memory_allocated() if cuda else None}
    tensor = lambda a: torch.from_numpy(np.asarray(a)).to(device)  # noqa: E731
    long = lambda a: tensor(a).long()  # noqa: E731
    autocast = lambda: torch.autocast(device_type=device, dtype=getattr(torch, args.dtype))  # noqa: E731
    rows = []

    if "decode" in args.parts:
        model.eval()
        ids = long(data.prompts)
        times = {}
        reset_peak()
        for new in (1, args.new_tokens):

            def run():
                with torch.no_grad():
                    model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                   max_new_tokens=new, min_new_tokens=new, pad_token_id=0)
                sync()

            _, times[new] = time_call(run, args.repeats)
        rows.append(decode_row("hf-peft", args, times[args.new_tokens], times[1], None))
        rows[-1]["peak_gib"] = _gib(peak())

    lora_params = [p for p in model.parameters() if p.requires_grad]
    critic_params = list(critic.parameters())
    actor_opt = torch.optim.Adam(lora_params, lr=2e-6)
    critic_opt = torch.optim.Adam(critic_params, lr=1e-5)
    target = DoubleCritic(critic.base_lm.config).to(device)
    target.load_state_dict(critic.state_dict())
    target.requires_grad_(False)
    obs, act = long(data.observation), long(data.action)
    c_obs, c_act = long(data.critic_observation), long(data.critic_action)
    next_obs, pi_act = long(data.next_observation), long(data.pi_action)
    reward, terminal = tensor(data.reward), tensor(data.terminal)
    ones = torch.ones_like

    def embed(net, x):
        return net.base_lm(input_ids=x, attention_mask=ones(x)).pooler_output

    def actor_step():
        model.train()
        actor_opt.zero_grad(set_to_none=True)
        with torch.no_grad(), autocast():  # A(s, a_π) = min Q - min V under the online critic
            s = embed(critic, c_obs)
            both = torch.cat([s, embed(critic, c_act)], dim=-1)
            adv = (torch.minimum(critic.critic1(both), critic.critic2(both))
                   - torch.minimum(critic.v_critic1(s), critic.v_critic2(s))).flatten().float()
        sequence = torch.cat([obs, act], dim=1)
        logits = model(input_ids=sequence, attention_mask=ones(sequence), use_cache=False,
                       logits_to_keep=act.shape[1] + 1).logits[:, :-1]
        logprobs = torch.log_softmax(logits.float(), dim=-1).gather(-1, act.unsqueeze(-1)).squeeze(-1)
        loss = -torch.mean(logprobs.sum(dim=1) * adv)  # actor_pg: -mean(A · Σ_t log π_t)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(lora_params, 1.0)
        actor_opt.step()
        sync()

    def critic_step():
        critic.train()
        critic_opt.zero_grad(set_to_none=True)
        mse = torch.nn.functional.mse_loss
        with autocast():
            s, a = embed(critic, c_obs), embed(critic, c_act)
            both = torch.cat([s, a], dim=-1)
            q1, q2, v1, v2 = (critic.critic1(both), critic.critic2(both), critic.v_critic1(s), critic.v_critic2(s))
            with torch.no_grad():
                ts, t_next, t_pi = embed(target, c_obs), embed(target, next_obs), embed(target, pi_act)
                t_both = torch.cat([ts, t_pi], dim=-1)
                keep = 0.95 * (1 - terminal)
                y1, y2 = reward + keep * target.v_critic1(t_next).flatten(), reward + keep * target.v_critic2(t_next).flatten()
                z1, z2 = target.critic1(t_both).flatten(), target.critic2(t_both).flatten()
        loss = (mse(q1.flatten().float(), y1.float()) + mse(q2.flatten().float(), y2.float())
                + mse(v1.flatten().float(), z1.float()) + mse(v2.flatten().float(), z2.float()))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(critic_params, 1.0)
        critic_opt.step()
        with torch.no_grad():
            torch._foreach_lerp_(list(target.parameters()), critic_params, 0.1)
        sync()

    for part, fn in (("actor", actor_step), ("critic", critic_step)):
        if part in args.parts:
            reset_peak()
            _, median = time_call(fn, args.repeats)
            rows.append(step_row(part, "hf-peft" if part == "actor" else "hf-torch", args, median, None))
            rows[-1]["peak_gib"] = _gib(peak())
    del model, base, critic, target, actor_opt, critic_opt
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return rows, memory


# ---- rows ------------------------------------------------------------------------------------


def _gib(value: int | None) -> float | None:
    return None if value is None else value / GIB


def decode_row(impl: str, args, total: float, prefill: float, compile_s: float | None) -> dict:
    step = (total - prefill) / (args.new_tokens - 1)
    batch = args.decode_batch
    return dict(part="decode", impl=impl, batch=batch, total_s=total, prefill_s=prefill, decode_step_ms=1e3 * step,
                gen_tokens_per_s=batch * args.new_tokens / total, decode_tokens_per_s=batch / step if step > 0 else None,
                compile_s=compile_s, time_s=total, rate=batch * args.new_tokens / total, rate_unit="gen tokens/s")


def step_row(part: str, impl: str, args, seconds: float, compile_s: float | None) -> dict:
    length = args.observation + args.action if part == "actor" else args.critic_observation + args.action
    return dict(part=part, impl=impl, batch=args.batch, step_s=seconds, steps_per_s=1 / seconds,
                tokens_per_s=args.batch * length / seconds, compile_s=compile_s, time_s=seconds, rate=1 / seconds,
                rate_unit="steps/s")


def compare(rows: list[dict], memory: dict, judge: bool) -> dict:
    """Ours against the reference per part, the roofline fraction, and the targets (``met`` is
    None unless ``judge``: they are set for 7B shapes on an accelerator)."""
    by = {(r["part"], r["impl"].split("-")[0]): r for r in rows}
    out: dict = {}
    decode, ref_decode = by.get(("decode", "archer_jax")), by.get(("decode", "hf"))
    if decode and ref_decode:
        decode["speedup_vs_ref"] = decode["gen_tokens_per_s"] / ref_decode["gen_tokens_per_s"]
        out["decode_speedup"] = decode["speedup_vs_ref"]
    roofline = memory.get("roofline")
    for r in rows:
        if r["part"] == "decode" and roofline and r["decode_tokens_per_s"]:
            r["roofline_fraction"] = r["decode_tokens_per_s"] / roofline["tokens_per_s"]
    if decode:
        out["decode_roofline_fraction"] = decode.get("roofline_fraction")
    for part in ("actor", "critic"):
        ours, ref = by.get((part, "archer_jax")), by.get((part, "hf"))
        if ours and ref:
            ours["speedup_vs_ref"] = ref["step_s"] / ours["step_s"]
            out[f"{part}_speedup"] = ours["speedup_vs_ref"]
    out["targets"] = {name: dict(target=target, measured=out.get(name),
                                 met=None if out.get(name) is None or not judge else out[name] >= target)
                      for name, target in TARGETS.items()}
    return out


# ---- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", choices=sorted(SCALES), default="full",
                        help="preset shapes: full (7B, for an accelerator) or smoke (a CPU check); flags override")
    add = lambda name, help_: parser.add_argument(name, type=int, default=None, help=help_)  # noqa: E731
    add("--layers", "policy layers (32)")
    add("--hidden", "policy width (4096)")
    add("--heads", "policy attention heads (32)")
    add("--kv-heads", "policy key/value heads (8)")
    add("--intermediate", "policy MLP width (14336)")
    add("--vocab", "policy vocabulary (32000)")
    add("--critic-layers", "critic layers (12)")
    add("--critic-hidden", "critic width (768)")
    add("--critic-heads", "critic heads (12)")
    add("--critic-intermediate", "critic MLP width (3072)")
    add("--critic-vocab", "critic vocabulary (50265)")
    add("--prompt", "decode: prompt tokens per row (512)")
    add("--new-tokens", "decode: new tokens per row (64)")
    add("--decode-batch", "decode: prompts (32)")
    add("--batch", "actor/critic step: transitions, one micro-batch (8)")
    add("--observation", "actor/critic step: observation tokens (512)")
    add("--action", "actor/critic step: action tokens (64)")
    add("--repeats", "timed calls after the warm-up (median; 3)")
    parser.add_argument("--lora-rank", type=int, default=16)
    parser.add_argument("--lora-alpha", type=float, default=32.0)
    parser.add_argument("--lora-targets", nargs="+", default=["q_proj", "k_proj", "v_proj", "o_proj"])
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16", help="compute dtype")
    parser.add_argument("--param-dtype", choices=["bfloat16", "float32"], default="bfloat16", help="policy weights")
    parser.add_argument("--remat", choices=["none", "dots", "full"], default="full",
                        help="ours: layer checkpointing; the reference: gradient checkpointing unless none")
    parser.add_argument("--parts", nargs="+", choices=["decode", "actor", "critic"], default=["decode", "actor", "critic"])
    parser.add_argument("--no-reference", action="store_true", help="skip transformers + peft")
    parser.add_argument("--peak-bandwidth", type=float, default=None, help="bytes/s, for a device not in common.py")
    parser.add_argument("--threads", type=int, default=0, help="PyTorch CPU threads (0: its default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tag", default="", help="suffix of the result file's name")
    parser.add_argument("--out", type=Path, default=None, help="result file (default results/llm_7b_<backend>[_<tag>].json)")
    args = parser.parse_args(argv)
    for key, value in SCALES[args.scale].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.critic_observation = min(args.observation, critic_config(args).max_length)
    if args.new_tokens < 2:
        parser.error("--new-tokens must be >= 2 (the decode step is total minus the one-token run)")
    return args


def main() -> None:
    args = parse_args()
    device = jax.devices()[0]
    bandwidth = peak_bandwidth(device, args.peak_bandwidth)
    data = Data(args, args.seed)
    notes = []
    judge = not reduced(args) and jax.default_backend() != "cpu"
    if reduced(args):
        notes.append("Reduced shapes (a smoke run that checks the script end to end), not a 7B measurement: its "
                     "timings and ratios say nothing about the 7B targets, which are left unjudged (met: null).")
    elif not judge:
        notes.append("Ran on a CPU: the targets (set for an accelerator) are left unjudged (met: null).")
    load_before = os.getloadavg()
    if jax.device_count() > 1:
        notes.append(f"{jax.device_count()} devices present; everything runs on the first one.")
    if not bandwidth:
        notes.append("No memory-bandwidth peak is known for this device (CPUs have none in common.py): no roofline.")

    rows, memory = bench_ours(args, data, bandwidth)
    reference_memory = None
    torch_device = None
    if not args.no_reference:
        try:
            import torch
        except ImportError:
            torch = None
            notes.append("PyTorch is not installed: no reference.")
        if torch is not None:
            backend = jax.default_backend()
            if backend == "gpu" and torch.cuda.is_available():
                torch_device = "cuda"
            elif backend == "cpu":
                torch_device = "cpu"
            else:
                notes.append(f"Ours ran on {backend}, where PyTorch has no device here: no reference.")
    if torch_device:
        ref_rows, reference_memory = bench_reference(args, data, torch_device)
        rows += ref_rows
        if torch_device == "cpu":
            notes.append("The reference's memory is not measured on CPUs (torch.cuda.max_memory_allocated is CUDA only).")
    if peak_bytes() is None:
        notes.append("This device reports no peak memory (jax memory_stats() is None): ours is given as state bytes only.")
    summary = compare(rows, memory, judge)

    info = machine()
    pc = policy_config(args)
    print(f"{info['device_kind'] or info['backend']}, {info['date']}: Mistral {args.layers}x{args.hidden} "
          f"({param_count(pc) / 1e9:.2f}B), LoRA r{args.lora_rank}, {args.param_dtype} weights, {args.dtype} compute, "
          f"remat {args.remat}; decode {args.decode_batch} x ({args.prompt} + {args.new_tokens}); steps of {args.batch} x "
          f"({args.observation} + {args.action}); critic RoBERTa {args.critic_layers}x{args.critic_hidden}")
    print_table(rows, [("part", "part", ""), ("impl", "impl", ""), ("time_s", "time s", ".4f"), ("rate", "rate", ".2f"),
                       ("rate_unit", "unit", ""), ("decode_step_ms", "step ms", ".2f"),
                       ("speedup_vs_ref", "ours/ref", ".2f"), ("roofline_fraction", "roofline", ".3f"),
                       ("compile_s", "compile s", ".1f"), ("peak_gib", "peak GiB", ".2f")])
    for name, target in summary["targets"].items():
        measured = "not measured" if target["measured"] is None else f"{target['measured']:.3f}"
        print(f"target {name} >= {target['target']}: {measured}" + ("" if target["met"] is None else
                                                                     f" ({'met' if target['met'] else 'not met'})"))
    print(f"ours per device: state {_fmt(memory.get('state_bytes'))}, KV cache {_fmt(memory.get('kv_cache_bytes'))}, "
          f"peak {_fmt(memory.get('peak_bytes'))}")
    for note in notes:
        print("note:", note)

    config = {k: v for k, v in vars(args).items() if k != "out"}
    config.update(policy=pc.to_hf_dict(), policy_params=param_count(pc), critic=critic_config(args).to_hf_dict(),
                  lora=dict(rank=args.lora_rank, alpha=args.lora_alpha, targets=args.lora_targets))
    name = f"llm_7b_{jax.default_backend()}" + (f"_{args.tag}" if args.tag else "")
    out = args.out if args.out is not None else RESULTS / f"{name}.json"
    extra = dict(command="python llm_7b.py " + shlex.join(map(str, portable(sys.argv[1:]))),
                 reference_device=torch_device, summary=summary,
                 load_average=dict(before=load_before, after=os.getloadavg(), cpus=os.cpu_count()),
                 memory=dict(ours=memory, reference=reference_memory), note=" ".join(notes) or None,
                 notes_on_method=METHOD_NOTES)
    path = write_result(out.stem, config | {"out": str(out)}, rows, out.parent, extra)
    print(f"wrote {path}")


def _fmt(value: int | None) -> str:
    return "-" if value is None else f"{value / GIB:.2f} GiB"


METHOD_NOTES = [
    "Ours runs first, then the reference, in one process on one device; each part warmed up once, then the median of "
    "--repeats timed calls.",
    "Decode: greedy, exactly --new-tokens tokens per row on both sides, the policy with its adapters (not merged). "
    "Roofline bytes per step = every parameter (adapters included) + the whole KV cache (prompt + new slots).",
    "Actor step: both sides compute the online critic's advantage, the packed sequence's forward (the reference keeps "
    "only the action positions' logits), backward into the adapters only, clipping and Adam; one micro-batch.",
    "Critic step: the same encoder passes on both sides (online s, a with gradient; target s, s', a_pi without), "
    "the four MSE losses, clipping, Adam, Polyak; the reference under bfloat16 autocast with float32 parameters.",
    "Ours' peak memory is the device's cumulative peak after each part (JAX cannot reset it); the reference's is "
    "torch.cuda.max_memory_allocated per part, reset before each.",
]


if __name__ == "__main__":
    main()
