"""The device side of batched generation: token ids in, sampled ids and log-probs out, with one
jitted prefill and one jitted decode loop per shape bucket (:class:`Decoder`).

Text (tokenizing prompts, cutting actions at stop strings) is :mod:`archer_jax.sampling.sampler`'s.

How it runs:

* Prompts are tokenized with left truncation and left-padded to a power-of-two length bucket;
  the batch is padded to a power-of-two row bucket (a multiple of the mesh's batch axes), so a
  run compiles one prefill and one decode program per bucket and sampling setting.
* The prefill writes the prompt into a KV cache of ``prompt bucket + max_new_tokens`` slots and
  samples the first token. The decode program is a ``lax.while_loop`` over the donated state
  (cache included) that stops when every row is done or ``max_new_tokens`` tokens exist.
* A row is done when it samples EOS or a token whose text contains a stop string (ArCHer's is
  ``"\\n"``). The stop token stays in ``tokens`` so that the actor can learn to end its turn.
  A multi-character stop string split across two tokens is also found, on the host: the text and
  tokens are cut there, though the device kept sampling that row until its other limits.
* Randomness is per row: row ``i``'s draw at step ``t`` is a uniform from
  ``fold_in(fold_in(key, i), t)``, so a row's sample depends on its prompt and the key, not on the
  batch around it or the mesh. The prefill draws every row's uniforms for all steps in one call
  (on CPUs each threefry call is a small loop of its own: some 200 tiny ops per decode step).
* Given a mesh, batch arrays are split over its ``data``/``fsdp`` axes, the KV cache's heads
  over ``tensor``, and the parameters by their logical axes (:mod:`archer_jax.runtime.sharding`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding

from archer_jax.learners.step_program import abstract, is_abstract
from archer_jax.models import token_distribution
from archer_jax.models.attention import KVCache, with_batch_shards
from archer_jax.models.causal_lm import CausalLMConfig, init_cache
from archer_jax.models.token_distribution import TokenDistribution
from archer_jax.models.tokenizer import bucket_length, next_power_of_two
from archer_jax.runtime import sharding as shd
from archer_jax.runtime.config_keys import key
from archer_jax.runtime.precision import program_name, traced_with
from archer_jax.runtime.xla_flags import decode_compiler_options

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """How to pick tokens. ``greedy`` ignores temperature, top-k and top-p.

    ``top_k = 0`` and ``top_p = 1.0`` switch those filters off. Temperature is applied first,
    then top-k, then top-p (the order Hugging Face uses).
    """

    max_new_tokens: int = key(
        32, "token limit of one utterance (must leave room for a prompt in the policy's positions)",
        official="`max_new_tokens`")
    greedy: bool = False
    temperature: float = key(1.0, "rollout sampling temperature (evaluation is greedy)", official="`temperature`")
    top_k: int = key(0, "sample from the k likeliest tokens only (0 = off)")
    top_p: float = key(1.0, "nucleus sampling: the smallest set of tokens with this much mass, in (0, 1] (1 = off)")
    decode_chunk: int = key(
        0, "decode steps between the sampler's checks for finished rows (0 = the platform's default: "
        "8 on GPU, where each check waits on the device, 1 elsewhere); the tokens do not depend on it")
    stop_strings: tuple[str, ...] = ("\n",)
    stop_at_eos: bool = True

    def __post_init__(self):
        if isinstance(self.stop_strings, str):
            object.__setattr__(self, "stop_strings", (self.stop_strings,))
        object.__setattr__(self, "stop_strings", tuple(self.stop_strings))
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens: must be > 0, got {self.max_new_tokens!r}")
        if not self.temperature > 0:  # greedy=True takes the argmax
            raise ValueError(f"temperature: must be > 0, got {self.temperature!r}")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k: must be >= 0, got {self.top_k!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p: must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.decode_chunk, int) or self.decode_chunk < 0:
            raise ValueError(f"decode_chunk: must be >= 0 (0 = the platform's default), got {self.decode_chunk!r}")
        if any(not s for s in self.stop_strings):
            raise ValueError(f"stop_strings may not contain an empty string: {self.stop_strings!r}")

    @property
    def distribution(self) -> TokenDistribution:
        """What a sampled token is drawn from (temperature, top-k, top-p): what learners score it under."""
        return TokenDistribution(self.temperature, self.top_k, self.top_p)


class SampledTokens(NamedTuple):
    """Device-side result of :meth:`Decoder.generate_tokens`, rows of the padded batch."""

    tokens: Array  # [batch, max_new_tokens] int32
    lengths: Array  # [batch] int32
    logprobs: Array  # [batch, max_new_tokens] float32
    sample_logprobs: Array  # [batch, max_new_tokens] float32


class DecodeState(NamedTuple):
    """Everything the decode loop carries, on device."""

    cache: tuple  # KV cache per layer, [batch, heads, slots, head_dim]
    slot_mask: Array  # [batch, slots] 1 where a slot holds a real token
    step: Array  # () number of tokens sampled so far
    tokens: Array  # [batch, max_new_tokens]
    logprobs: Array
    sample_logprobs: Array
    lengths: Array  # [batch]
    done: Array  # [batch]
    uniforms: Array  # [batch, max_new_tokens] float32: row i's draw at step t (unused when greedy)
    greedy: Array  # () bool: argmax instead of sampling (a run-time flag: one program serves both)


def filter_logits(logits: Array, sampling: SamplingParams) -> Array:
    """``logits / temperature`` with everything outside top-k / top-p set to ``-inf``
    (:func:`archer_jax.models.token_distribution.filter_logits` of ``sampling.distribution``)."""
    return token_distribution.filter_logits(logits, sampling.distribution)


def row_uniforms(key: Array, row_ids: Array | int, steps: int) -> Array:
    """``[rows, steps]`` uniforms in [0, 1): entry (i, t) is drawn from ``fold_in(fold_in(key, row_ids[i]), t)``
    (``row_ids`` an int: ``arange(row_ids)``). ``key`` is one key, or one per row (``[rows]``: rows
    at different turns of their dialogues, each with the key of its own turn)."""
    ids = jnp.arange(row_ids) if isinstance(row_ids, int) else row_ids
    draw = lambda k, r, t: jax.random.uniform(jax.random.fold_in(jax.random.fold_in(k, r), t), ())  # noqa: E731
    if not jnp.ndim(key):
        return jax.vmap(lambda r: jax.vmap(lambda t: draw(key, r, t))(jnp.arange(steps)))(ids)
    return jax.vmap(lambda k, r: jax.vmap(lambda t: draw(k, r, t))(jnp.arange(steps)))(key, ids)


def row_keys(key: Array, turns: Sequence[int]) -> Array:
    """``[rows]`` keys, ``fold_in(key, turns[i])`` each: rows at different turns sample, in one
    batch, what each would sample in a batch of its own turn (whose key is ``fold_in(key, turn)``)."""
    return jax.vmap(lambda t: jax.random.fold_in(key, t))(jnp.asarray(turns, jnp.int32))


def sample_categorical(u: Array, logits: Array) -> Array:
    """One draw per row from ``softmax(logits)`` by inverting the CDF with the row's uniform
    ``u`` (``[batch]``; ``-inf`` logits are never drawn). Exact, and far fewer random bits than
    Gumbel-max."""
    probs = jax.nn.softmax(logits, axis=-1)
    cdf = jnp.cumsum(probs, axis=-1)
    below = jnp.sum(cdf <= (u * cdf[:, -1])[:, None], axis=-1)
    # Rounding can put u * total at the very top of the CDF: stay on a token with mass.
    last = logits.shape[-1] - 1 - jnp.argmax((probs > 0)[:, ::-1], axis=-1)
    return jnp.minimum(below, last).astype(jnp.int32)


def choose_tokens(
    logits: Array, u: Array, sampling: SamplingParams, greedy: Array | None = None
) -> tuple[Array, Array, Array]:
    """Picks one token per row of ``logits`` (``[batch, vocab]``) with ``u`` (one uniform per row).

    ``greedy`` (a traced bool), when given, decides at run time between the argmax and a sample
    from the filtered distribution, so one compiled program serves both; otherwise
    ``sampling.greedy`` decides. Returns the tokens, their log-probs under the model
    (``log_softmax(logits)``), and their log-probs under the sampling distribution (0 for greedy).
    """
    model_logprobs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    argmax = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    if greedy is None and sampling.greedy:
        tokens, sample_lp = argmax, jnp.zeros(argmax.shape, jnp.float32)
    else:
        filtered = filter_logits(logits, sampling)
        tokens = sample_categorical(u, filtered)
        sample_lp = jnp.take_along_axis(jax.nn.log_softmax(filtered, axis=-1), tokens[:, None], -1)[:, 0]
        if greedy is not None:  # argmax rows have no sampling distribution: log-prob 0
            tokens, sample_lp = jnp.where(greedy, argmax, tokens), jnp.where(greedy, 0.0, sample_lp)
    model_lp = jnp.take_along_axis(model_logprobs, tokens[:, None], -1)[:, 0]
    return tokens, model_lp, sample_lp


def _record(
    state: DecodeState, step: Array, logits: Array, stop_table: Array, sampling: SamplingParams
) -> DecodeState:
    """Samples token ``step`` from ``logits`` for the rows not yet done and updates the state."""
    u = jax.lax.dynamic_index_in_dim(state.uniforms, step, axis=1, keepdims=False)
    token, lp, slp = choose_tokens(logits, u, sampling, state.greedy)
    # A step past max_new_tokens (the end of a decode chunk) changes nothing: every row is done by
    # then, and the column index, clamped to the last, keeps what it holds.
    live = ~state.done & (step < sampling.max_new_tokens)

    def column(a: Array, v: Array) -> Array:  # column `step` of a, v where the row is live
        kept = jax.lax.dynamic_index_in_dim(a, step, axis=1, keepdims=False)
        return jax.lax.dynamic_update_slice_in_dim(a, jnp.where(live, v.astype(a.dtype), kept)[:, None], step, axis=1)

    return state._replace(
        step=step + 1,
        tokens=column(state.tokens, token),
        logprobs=column(state.logprobs, lp),
        sample_logprobs=column(state.sample_logprobs, slp),
        lengths=jnp.where(live, step + 1, state.lengths),
        done=state.done | (live & stop_table[token]),
    )


def prefill(
    graphdef: nnx.GraphDef,
    sampling: SamplingParams,
    pad_id: int,
    state_shardings: DecodeState | None,
    model_state: nnx.State,
    prompt_ids: Array,
    prompt_mask: Array,
    active: Array,
    stop_table: Array,
    key: Array,
    greedy: Array,
    row_ids: Array,
    samples: int = 1,
) -> DecodeState:
    """Runs the prompt through the model into a fresh KV cache and samples the first token.

    ``greedy`` (a bool scalar) picks argmax tokens instead of samples in the same program. Row
    ``i`` draws from ``fold_in(key, row_ids[i])`` (sample ``j`` of it from ``row_ids[i] * samples + j``).
    With ``samples > 1`` the prompts are run once and their cache, mask and last logits are
    repeated ``samples`` times (prompt-major rows), so k samples per prompt cost one prefill.
    """
    model = nnx.merge(graphdef, model_state)  # a causal LM (archer_jax.models.causal_lm)
    batch, prompt_length = prompt_ids.shape
    new = sampling.max_new_tokens
    cache = init_cache(model.config, batch, prompt_length + new, model.dtype)
    slot_mask = jnp.concatenate([prompt_mask.astype(jnp.int32), jnp.zeros((batch, new), jnp.int32)], axis=1)
    out = model(prompt_ids, slot_mask, cache=cache, cache_index=0, return_logits=False)
    logits = model.lm_logits(out.hidden_state[:, -1])
    cache = out.cache
    if samples > 1:
        fan_out = lambda x: jnp.repeat(x, samples, axis=0)  # noqa: E731
        cache, slot_mask, logits, active = jax.tree.map(fan_out, (cache, slot_mask, logits, active))
        row_ids = (row_ids[:, None] * samples + jnp.arange(samples)[None]).reshape(-1)
        if jnp.ndim(key):  # one key per prompt: each of its samples draws from it
            key = jnp.repeat(key, samples)
        batch *= samples
    if state_shardings is not None:
        cache = jax.lax.with_sharding_constraint(cache, state_shardings.cache)
    state = DecodeState(
        cache=cache,
        slot_mask=slot_mask,
        step=jnp.zeros((), jnp.int32),
        tokens=jnp.full((batch, new), pad_id, jnp.int32),
        logprobs=jnp.zeros((batch, new), jnp.float32),
        sample_logprobs=jnp.zeros((batch, new), jnp.float32),
        lengths=jnp.zeros((batch,), jnp.int32),
        done=~active.astype(bool),
        uniforms=row_uniforms(key, row_ids, new),
        greedy=jnp.asarray(greedy, bool),
    )
    return _record(state, state.step, logits, stop_table, sampling)


def decode(
    graphdef: nnx.GraphDef,
    sampling: SamplingParams,
    model_state: nnx.State,
    state: DecodeState,
    stop_table: Array,
    chunk: int = 1,
) -> DecodeState:
    """Samples tokens until every row is done or ``max_new_tokens`` exist (a while loop).

    The loop checks for that every ``chunk`` tokens (a fixed-length inner loop between checks):
    on a GPU each check waits for the device and copies the flag to the host. Steps after every
    row is done sample nothing, so the tokens are those of ``chunk = 1``. The state (KV cache
    included) is donated by the caller and updated in place.
    """
    model = nnx.merge(graphdef, model_state)  # a causal LM (archer_jax.models.causal_lm)
    prompt_length = state.slot_mask.shape[1] - sampling.max_new_tokens  # the slot of the first new token

    def not_finished(s: DecodeState) -> Array:
        return (s.step < sampling.max_new_tokens) & ~jnp.all(s.done)

    def next_token(s: DecodeState) -> DecodeState:
        previous = jax.lax.dynamic_slice_in_dim(s.tokens, s.step - 1, 1, axis=1)  # [batch, 1]
        slot = prompt_length + s.step - 1
        slot_mask = jax.lax.dynamic_update_slice_in_dim(
            s.slot_mask, jnp.ones((s.slot_mask.shape[0], 1), jnp.int32), slot, axis=1
        )
        out = model(previous, slot_mask, cache=s.cache, cache_index=slot, return_logits=False)
        logits = model.lm_logits(out.hidden_state[:, 0])
        s = s._replace(cache=out.cache, slot_mask=slot_mask)
        return _record(s, s.step, logits, stop_table, sampling)

    if chunk == 1:
        return jax.lax.while_loop(not_finished, next_token, state)
    next_chunk = lambda s: jax.lax.fori_loop(0, chunk, lambda _, s: next_token(s), s)  # noqa: E731
    return jax.lax.while_loop(not_finished, next_chunk, state)


GPU_DECODE_CHUNK = 8  # tokens between a GPU decode loop's checks (each is a device-to-host wait)


def decode_chunk(sampling: SamplingParams, platform: str) -> int:
    """The decode steps between checks for finished rows: ``sampling.decode_chunk``, or by default
    :data:`GPU_DECODE_CHUNK` on a GPU and 1 elsewhere (a CPU or TPU tests the loop's flag on the
    device itself: a longer chunk only adds steps after the last row is done)."""
    if sampling.decode_chunk:
        return sampling.decode_chunk
    return GPU_DECODE_CHUNK if platform in ("gpu", "cuda", "rocm") else 1


def decode_state_shardings(mesh: Mesh, rules: shd.Rules, config: CausalLMConfig, batch: int, slots: int) -> DecodeState:
    """Where each :class:`DecodeState` array lives: rows over the mesh's batch axes, the KV
    cache's heads by ``rules``, the step replicated."""
    rows = shd.batch_sharding(mesh, 1)
    matrix = shd.batch_sharding(mesh, 2)
    cache_spec = shd.logical_to_mesh(
        ("batch", "kv_heads", None, "kv"), (batch, config.num_kv_heads, slots, config.head_dim), mesh, rules
    )
    cache = NamedSharding(mesh, cache_spec)
    scalar = shd.replicated(mesh)
    return DecodeState(
        cache=tuple(KVCache(cache, cache) for _ in range(config.num_layers)),
        slot_mask=matrix,
        step=scalar,
        tokens=matrix,
        logprobs=matrix,
        sample_logprobs=matrix,
        lengths=rows,
        done=rows,
        uniforms=matrix,
        greedy=scalar,
    )


def _prompt_arrays(prompt_ids: np.ndarray, prompt_mask: np.ndarray, samples: int) -> tuple[np.ndarray, np.ndarray]:
    """The prompts as numpy arrays, after the checks that need no sampling setting."""
    if not isinstance(samples, int) or samples < 1:
        raise ValueError(f"samples must be an integer >= 1, got {samples!r}")
    prompt_ids, prompt_mask = np.asarray(prompt_ids), np.asarray(prompt_mask)
    if prompt_ids.ndim != 2 or prompt_ids.shape != prompt_mask.shape:
        raise ValueError(
            f"prompt_ids and prompt_mask must be equal [batch, length] arrays, got {prompt_ids.shape} and {prompt_mask.shape}"
        )
    if prompt_ids.shape[0] == 0:
        raise ValueError("prompt_ids is empty: nothing to generate from")
    return prompt_ids, prompt_mask


def _longest_prompt(prompt_mask: np.ndarray, limit: int, max_new_tokens: int, n_positions: int) -> int:
    """The longest prompt's length, after checking that it fits and that prompts are left-padded."""
    longest = int(prompt_mask.sum(1).max())
    if longest > limit:
        raise ValueError(
            f"a prompt has {longest} tokens; at most {limit} fit before {max_new_tokens} new tokens "
            f"in the model's n_positions ({n_positions})"
        )
    if prompt_mask[:, -1].min() == 0:
        raise ValueError("prompts must be left-padded with at least one token each (prompt_mask[:, -1] == 1)")
    return longest


def _placed(mesh: Mesh, ids: np.ndarray, mask: np.ndarray, active: np.ndarray, numbers: np.ndarray) -> tuple:
    """A padded batch on ``mesh``'s devices, rows over its batch axes (with several processes,
    JAX takes no NumPy arrays for sharded arguments)."""
    rows, matrix = shd.batch_sharding(mesh, 1), shd.batch_sharding(mesh, 2)
    return (*jax.device_put((ids, mask), matrix), *jax.device_put((active, numbers), rows))


def _row_ids(row_ids: Sequence[int] | None, prompts: int, rows: int) -> np.ndarray:
    """The ``[rows]`` key numbers of a padded batch: ``row_ids`` for the prompts (default: their
    positions); padding rows keep their positions (their samples are dropped)."""
    ids = np.arange(rows, dtype=np.int32)
    if row_ids is not None:
        given = np.asarray(row_ids, np.int64)
        if given.shape != (prompts,):
            raise ValueError(f"row_ids has shape {given.shape}, expected ({prompts},): one id per prompt")
        ids[:prompts] = given
    return ids


def _padded_keys(key: Array, prompts: int, rows: int) -> Array:
    """One key, or one per prompt padded to ``rows`` (padding rows take the first prompt's: their
    samples are dropped)."""
    if not jnp.ndim(key):
        return key
    if key.shape != (prompts,):
        raise ValueError(f"key has shape {key.shape}, expected () or ({prompts},): one key, or one per prompt")
    return jnp.concatenate([key, jnp.repeat(key[:1], rows - prompts)]) if rows > prompts else key


def _pad_to_buckets(
    prompt_ids: np.ndarray, prompt_mask: np.ndarray, rows: int, bucket: int, pad_id: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``[rows, bucket]`` ids and mask (left-padded, the prompts' ends kept) and the ``[rows]``
    flags of the rows that hold a prompt."""
    batch, length = prompt_ids.shape
    ids = np.full((rows, bucket), pad_id, np.int32)
    mask = np.zeros((rows, bucket), np.int32)
    keep = min(length, bucket)
    ids[:batch, -keep:] = prompt_ids[:, -keep:]
    mask[:batch, -keep:] = prompt_mask[:, -keep:]
    return ids, mask, np.arange(rows) < batch


def prompt_limit(n_positions: int, max_prompt_length: int | None, max_new_tokens: int) -> int:
    """The longest prompt that fits with ``max_new_tokens`` in ``n_positions``: ``max_prompt_length``,
    or by default all the room there is; a ValueError if it does not fit."""
    room = n_positions - max_new_tokens
    if max_prompt_length is None:
        if room < 1:
            raise ValueError(
                f"max_new_tokens ({max_new_tokens}) leaves no room for a prompt in the model's n_positions ({n_positions})"
            )
        return room
    if max_prompt_length > room:
        raise ValueError(
            f"max_prompt_length ({max_prompt_length}) + max_new_tokens ({max_new_tokens}) "
            f"exceeds the model's n_positions ({n_positions})"
        )
    return max_prompt_length


# The shortest prompt bucket. Padding a short prompt is cheap (a first turn's prompt of 8-30
# tokens becomes 64: a few more KV-cache slots read per decoded token), and every bucket below 64
# was a prefill and a decode program of its own: a 20Q run compiled 16 and 32 as well (2 + 2
# programs, ~4 s of compilation at the tiny preset on a CPU, more at GPT-2 size).
MIN_PROMPT_BUCKET = 64


def _placed_state(state: nnx.State, shardings: nnx.State) -> nnx.State:
    """The model's parameters on their shardings; a model built under ``nnx.eval_shape`` (no
    weights) stays shapes with shardings: its programs lower and compile (:meth:`Decoder.lower`)
    for devices that hold nothing, such as a TPU topology's, and cannot run."""
    return abstract(state, shardings) if is_abstract(state) else jax.device_put(state, shardings)


class Decoder:
    """Samples token ids from a causal-LM policy on device; compiled once per (bucket, sampling setting).

    Args:
      model: the policy; its graph (architecture) is fixed here, its parameters can be passed
        per call (``model_state``) so a training loop samples from its latest weights.
      stop_table: ``stop_table(sampling)`` is the host ``[vocab_size]`` boolean table of the ids
        that end a row under ``sampling`` (its stop strings, and EOS when ``stop_at_eos``). It is
        the one place text matters here: :class:`~archer_jax.sampling.sampler.Sampler` builds it
        from its tokenizer. Called once per ``(stop_strings, stop_at_eos)``; the device copy is kept.
      pad_id: the id written into padding and past each row's length.
      mesh: shard batches and the cache over this mesh (default: one device).
      rules: logical-axis rules for the parameters (:data:`archer_jax.runtime.sharding.DEFAULT_RULES`).
      max_prompt_length: the longest prompt in tokens (default: the model's ``n_positions``
        minus ``max_new_tokens``).
      min_prompt_bucket: the shortest prompt length bucket (:data:`MIN_PROMPT_BUCKET`).
      matmul_precision: the programs' matmul precision (:mod:`archer_jax.runtime.precision`; None: the
        ambient ``jax.default_matmul_precision``).
    """

    def __init__(
        self,
        model: nnx.Module,
        stop_table: Callable[[SamplingParams], np.ndarray],
        *,
        pad_id: int,
        mesh: Mesh | None = None,
        rules: shd.Rules = shd.DEFAULT_RULES,
        max_prompt_length: int | None = None,
        min_prompt_bucket: int | None = None,
        matmul_precision: str | None = None,
    ):
        self.graphdef, state = nnx.split(model)
        self.config = model.config
        self.dtype = model.dtype
        self.mesh = mesh if mesh is not None else shd.single_device_mesh()
        self.rules = rules
        self.max_prompt_length = max_prompt_length
        self.min_prompt_bucket = MIN_PROMPT_BUCKET if min_prompt_bucket is None else min_prompt_bucket
        self.matmul_precision = matmul_precision
        self.pad_id = int(pad_id)
        self.param_shardings = shd.state_shardings(state, self.mesh, rules)
        self.model_state = _placed_state(state, self.param_shardings)
        self._host_stop_table = stop_table
        self._programs: dict = {}
        self._stop_tables: dict = {}
        self.traces = 0  # how many times a program was traced (each trace compiles once)

    def prompt_limit(self, sampling: SamplingParams) -> int:
        """The longest prompt (in tokens) that fits with ``max_new_tokens`` in the positions."""
        return prompt_limit(self.config.max_positions, self.max_prompt_length, sampling.max_new_tokens)

    def batch_bucket(self, batch: int) -> int:
        """Rows are padded to a power of two, and to a multiple of the mesh's batch axes."""
        multiple = shd.batch_size_multiple(self.mesh)
        return -(-next_power_of_two(batch) // multiple) * multiple

    def _traced(self, fn, *static, **kw):
        """``fn`` with its static arguments bound, traced under the matmul precision and the mesh's
        batch split, and counted in :attr:`traces` each time it is traced (that is, compiled)."""
        program = with_batch_shards(traced_with(functools.partial(fn, *static, **kw), self.matmul_precision), self.mesh)

        def counted(*args):
            self.traces += 1  # runs at trace time only
            return program(*args)

        counted.__name__ = program_name(fn)  # what jit and the compile logs call it
        return counted

    def _state_shardings(self, batch: int, slots: int) -> DecodeState:
        return decode_state_shardings(self.mesh, self.rules, self.config, batch, slots)

    def _compiled(self, sampling: SamplingParams, batch: int, prompt_length: int, samples: int = 1):
        """The jitted (prefill, decode) pair for one sampling setting, shape bucket and fan-out.
        Greedy and sampled calls share it (``greedy`` is an argument of the programs)."""
        sampling = dataclasses.replace(sampling, greedy=False)
        signature = (sampling, batch, prompt_length, samples)
        if signature not in self._programs:
            state_sh = self._state_shardings(batch * samples, prompt_length + sampling.max_new_tokens)
            rows, matrix, scalar = shd.batch_sharding(self.mesh, 1), shd.batch_sharding(self.mesh, 2), shd.replicated(self.mesh)

            prefill_fn = jax.jit(
                self._traced(prefill, self.graphdef, sampling, self.pad_id, state_sh, samples=samples),
                in_shardings=(self.param_shardings, matrix, matrix, rows, scalar, scalar, scalar, rows),
                out_shardings=state_sh,
            )
            platform = self.mesh.devices.flat[0].platform
            decode_fn = jax.jit(
                self._traced(decode, self.graphdef, sampling, chunk=decode_chunk(sampling, platform)),
                in_shardings=(self.param_shardings, state_sh, scalar), out_shardings=state_sh, donate_argnums=(1,),
                compiler_options=decode_compiler_options(platform),
            )
            self._programs[signature] = (prefill_fn, decode_fn)
        return self._programs[signature]

    def lower(self, sampling: SamplingParams, rows: int, prompt_length: int, samples: int = 1) -> tuple:
        """The (prefill, decode) programs of one bucket, lowered (``jax.stages.Lowered``: their HLO,
        or ``.compile()`` ahead of time)."""
        prefill_fn, decode_fn = self._compiled(sampling, rows, prompt_length, samples)
        ids = jax.ShapeDtypeStruct((rows, prompt_length), jnp.int32)
        flags = jax.ShapeDtypeStruct((rows,), jnp.bool_)
        stop = jax.ShapeDtypeStruct((self.config.vocab_size,), jnp.bool_)
        key = jax.eval_shape(lambda: jax.random.key(0))
        prefill = prefill_fn.lower(self.model_state, ids, ids, flags, stop, key, jax.ShapeDtypeStruct((), jnp.bool_),
                                   jax.ShapeDtypeStruct((rows,), jnp.int32))
        return prefill, decode_fn.lower(self.model_state, prefill.out_info, stop)

    def _stop_table(self, sampling: SamplingParams) -> Array:
        """The device copy of ``stop_table(sampling)``, replicated (built once per stop setting)."""
        signature = (sampling.stop_strings, sampling.stop_at_eos)
        if signature not in self._stop_tables:
            table = self._host_stop_table(sampling)
            if table.shape != (self.config.vocab_size,):
                raise ValueError(f"stop_table must give [vocab_size={self.config.vocab_size}] booleans, got {table.shape}")
            self._stop_tables[signature] = jax.device_put(table, shd.replicated(self.mesh))
        return self._stop_tables[signature]

    def generate_tokens(
        self,
        prompt_ids: np.ndarray,
        prompt_mask: np.ndarray,
        key: Array,
        sampling: SamplingParams = SamplingParams(),
        *,
        model_state: nnx.State | None = None,
        samples: int = 1,
        row_ids: Sequence[int] | None = None,
    ) -> SampledTokens:
        """Generates from already tokenized, left-padded ``[batch, length]`` prompts (padded to their
        buckets here); returns device arrays over the padded batch times ``samples``, prompt-major
        (prompt i's samples in rows ``i * samples ...``). Prompt ``i`` samples with the key folded with
        ``row_ids[i]`` (default ``i``): a dialogue keyed by its game number samples the same whatever
        else runs beside it, on however many hosts. ``model_state`` defaults to the model's parameters.
        """
        prompt_ids, prompt_mask = _prompt_arrays(prompt_ids, prompt_mask, samples)
        limit = self.prompt_limit(sampling)
        longest = _longest_prompt(prompt_mask, limit, sampling.max_new_tokens, self.config.max_positions)
        bucket = bucket_length(longest, limit, min(self.min_prompt_bucket, limit))
        rows = self.batch_bucket(prompt_ids.shape[0])
        ids, mask, active = _pad_to_buckets(prompt_ids, prompt_mask, rows, bucket, self.pad_id)

        prefill_fn, decode_fn = self._compiled(sampling, rows, bucket, samples)
        model_state = self.model_state if model_state is None else jax.device_put(model_state, self.param_shardings)
        stop_table = self._stop_table(sampling)
        ids, mask, active, numbers = _placed(self.mesh, ids, mask, active, _row_ids(row_ids, prompt_ids.shape[0], rows))
        key = _padded_keys(key, prompt_ids.shape[0], rows)
        state = prefill_fn(model_state, ids, mask, active, stop_table, key, np.asarray(sampling.greedy), numbers)
        state = decode_fn(model_state, state, stop_table)
        return SampledTokens(state.tokens, state.lengths, state.logprobs, state.sample_logprobs)
