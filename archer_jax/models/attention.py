"""Multi-head attention shared by every model family: GPT-2 and the Llama family (causal, KV cache,
GQA, rotary positions), RoBERTa (bidirectional) and T5 (relative position biases, cross-attention)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from archer_jax.models.layers import DType, dense
from archer_jax.runtime import sharding as shd
from archer_jax.runtime.precision import program_name

Array = jax.Array


class KVCache(NamedTuple):
    """Keys and values of one attention layer for every cache slot: ``[batch, heads, slots, head_dim]``
    (head-major, the layout the attention dots read, so a decode step copies no cache)."""

    key: Array
    value: Array


# On CPUs, attention over blocks of batch rows whose scores fit in about this many bytes (a core's
# L2 cache), so that the scores, the softmax and both dots stay in cache. Measured at the tiny
# preset's critic shape [32, 4, 256, 16] on a 2-core x86-64: forward 48 -> 17 ms, forward+backward
# 113 -> 57 ms (benchmarks/attention.py; benchmarks/README.md, "Speed work"). GPUs and TPUs take
# the whole batch at once.
CPU_BLOCK_BYTES = 2 << 20


def block_rows(batch: int, heads: int, q_len: int, kv_len: int, block_bytes: int | None, shards: int = 1) -> int | None:
    """Rows per block for :func:`dot_product_attention`: ``shards`` times the largest divisor of
    each shard's ``batch / shards`` rows whose float32 scores fit in ``block_bytes`` (at least 1);
    None (one block) when a shard's rows all fit or ``block_bytes`` is None."""
    per_row = 4 * heads * q_len * kv_len
    if batch % shards:
        shards = 1
    local = batch // shards
    if block_bytes is None or local * per_row <= block_bytes:
        return None
    fit = max(1, block_bytes // per_row)
    return shards * max(r for r in range(1, min(fit, local) + 1) if local % r == 0)


@contextlib.contextmanager
def _pushed(stack: list, value):
    """``value`` on top of ``stack`` while the block runs (the innermost setting wins)."""
    stack.append(value)
    try:
        yield
    finally:
        stack.pop()


_BATCH_SHARDS: list[int] = []  # how many devices split the batch axis of the program being traced
_MESHES: list = []  # the mesh of the program being traced (kernels that XLA cannot split run per device)


def batch_shards(shards: int):
    """Programs traced inside have their batch axis split over ``shards`` devices: attention's CPU
    blocks then take rows from every device's share (each device loops over its own rows, and no
    rows move between devices)."""
    return _pushed(_BATCH_SHARDS, shards)


def with_batch_shards(fn: Callable, mesh) -> Callable:
    """``fn``, traced inside :func:`batch_shards` for ``mesh``'s batch split and with ``mesh`` as
    the mesh that kernels XLA cannot partition (TPU flash attention) are mapped over (no mesh or
    a one-device mesh: ``fn`` itself)."""
    if mesh is None or mesh.size == 1:
        return fn
    shards = shd.batch_size_multiple(mesh)

    def traced(*args, **kwargs):
        with batch_shards(shards), _pushed(_MESHES, mesh):
            return fn(*args, **kwargs)

    traced.__name__ = program_name(fn)  # what XLA names the program
    return traced


_TARGET_PLATFORM: list[str] = []  # the platform programs are built for, when not this process's backend


def building_for(platform: str):
    """Programs traced inside are built for ``platform`` ("cpu", "gpu", "tpu"), not for JAX's
    default backend: a plan compiling for a TPU slice on a CPU host takes the TPU's attention path."""
    return _pushed(_TARGET_PLATFORM, platform)


def target_platform() -> str:
    """The platform programs are built for: JAX's default backend, unless :func:`building_for` says otherwise."""
    return _TARGET_PLATFORM[-1] if _TARGET_PLATFORM else jax.default_backend()


def default_block_bytes() -> int | None:
    """:data:`CPU_BLOCK_BYTES` when programs are built for a CPU (:func:`target_platform`), else None."""
    return CPU_BLOCK_BYTES if target_platform() == "cpu" else None


@functools.partial(jax.tree_util.register_dataclass, data_fields=["allowed", "q_segments", "kv_segments"],
                   meta_fields=["causal"])
@dataclasses.dataclass(frozen=True)
class SegmentMask:
    """An attention mask together with the segment ids it was built from.

    ``allowed`` is the boolean mask every path may use (broadcastable to ``[batch, heads, q_len,
    kv_len]``). At every real query it equals "the key's segment is the query's" (and "at or before
    it" when ``causal``), where ``q_segments`` and ``kv_segments`` (``[batch, len]`` int32) are 0
    on padding and 1, 2, ... on the sequences of a row. A padding query's row may differ; callers
    ignore those outputs. A kernel that takes segment ids (TPU flash attention) reads the ids and
    never builds the scores or the mask.
    """

    allowed: Array
    q_segments: Array
    kv_segments: Array
    causal: bool = False


def dense_mask(mask: Array | SegmentMask) -> Array:
    """The boolean mask of ``mask``."""
    return mask.allowed if isinstance(mask, SegmentMask) else mask


FLASH_BLOCK = 128  # the TPU flash kernel's blocks: sequences are padded to multiples of this


def _tpu_flash_fits(q: Array, k: Array, mask, bias) -> bool:
    """Whether this attention runs in the TPU flash kernel: built for a TPU, a :class:`SegmentMask`,
    no score bias, and query and key lengths of at least :data:`FLASH_BLOCK` (shorter ones, whose
    scores are small, would be padded to a block)."""
    return (isinstance(mask, SegmentMask) and bias is None and target_platform() == "tpu"
            and min(q.shape[2], k.shape[2]) >= FLASH_BLOCK)


def _to_blocks(x: Array, axis: int) -> Array:
    """``x`` padded with zeros along ``axis`` to a multiple of :data:`FLASH_BLOCK`."""
    pad = -x.shape[axis] % FLASH_BLOCK
    return x if not pad else jnp.pad(x, [(0, pad if a == axis else 0) for a in range(x.ndim)])


def _tpu_flash(q: Array, k: Array, v: Array, mask: SegmentMask, scale: float) -> Array:
    """Pallas's TPU flash attention (scores kept in VMEM blocks, never written to HBM). The kernel is
    a custom call XLA cannot partition, so on a mesh it runs per device over the batch's shards
    (and the heads' over ``tensor``), with no collective."""
    from jax.experimental.pallas.ops.tpu import flash_attention as tpu_flash  # TPU programs only

    def attend(q, k, v, q_segments, kv_segments):
        # Lengths padded to the kernel's blocks: padded keys are in segment 0, which no real query
        # reads, and padded queries' outputs are cut off.
        q_len = q.shape[2]
        q, k, v = _to_blocks(q, 2), _to_blocks(k, 2), _to_blocks(v, 2)
        ids = tpu_flash.SegmentIds(_to_blocks(q_segments, 1), _to_blocks(kv_segments, 1))
        return tpu_flash.flash_attention(q, k, v, segment_ids=ids, causal=mask.causal, sm_scale=scale)[:, :, :q_len]

    mesh = _MESHES[-1] if _MESHES else None
    if mesh is None:
        return attend(q, k, v, mask.q_segments, mask.kv_segments)
    batch_axes = tuple(a for a in shd.BATCH_AXES if mesh.shape.get(a, 1) > 1)
    batch = batch_axes if q.shape[0] % shd.batch_size_multiple(mesh) == 0 else None
    heads = "tensor" if mesh.shape.get("tensor", 1) > 1 and q.shape[1] % mesh.shape["tensor"] == 0 else None
    P = jax.sharding.PartitionSpec
    return jax.shard_map(attend, mesh=mesh, in_specs=(P(batch, heads),) * 3 + (P(batch),) * 2,
                         out_specs=P(batch, heads), check_vma=False)(q, k, v, mask.q_segments, mask.kv_segments)


def _masked_scores(q: Array, k: Array, mask: Array, scale: float, bias: Array | None = None) -> Array:
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k, preferred_element_type=jnp.float32) * scale
    if bias is not None:
        scores = scores + bias.astype(jnp.float32)
    return jnp.where(mask, scores, jnp.finfo(jnp.float32).min)


def _attend(q: Array, k: Array, v: Array, mask: Array, scale: float) -> tuple[Array, Array, Array]:
    """Output, row max and row sum of the exponentials (the softmax statistics) of one block."""
    scores = _masked_scores(q, k, mask, scale)
    row_max = jnp.max(scores, axis=-1, keepdims=True)
    exp = jnp.exp(scores - row_max)
    row_sum = jnp.sum(exp, axis=-1, keepdims=True)
    out = jnp.einsum("bhqk,bhkd->bhqd", (exp / row_sum).astype(v.dtype), v)
    return out, row_max, row_sum


def _attend_grads(q, k, v, mask, out, row_max, row_sum, d_out, scale: float) -> tuple[Array, Array, Array]:
    """Gradients of one block's output with respect to q, k, v (none through masked scores, which
    are constants, so a row with no allowed key passes gradient to v only). The probabilities are recomputed
    from the saved softmax statistics rather than kept from the forward pass, once as ``[q, k]``
    (for ``d_q``) and once transposed as ``[k, q]`` (for ``d_k``, ``d_v``): every dot then
    contracts a minor axis, which XLA:CPU runs ~3x faster than contracting the query axis."""
    f32 = lambda x: x.astype(jnp.float32)  # noqa: E731
    swap = lambda x: jnp.swapaxes(x, -1, -2)  # noqa: E731
    d_out = f32(d_out)
    delta = jnp.sum(d_out * f32(out), axis=-1, keepdims=True)  # [b, h, q, 1]
    probs = jnp.exp(_masked_scores(q, k, mask, scale) - row_max) / row_sum  # [b, h, q, k]
    d_scores = jnp.where(mask, probs * (jnp.einsum("bhqd,bhkd->bhqk", d_out, f32(v)) - delta) * scale, 0.0)
    d_q = jnp.einsum("bhqk,bhkd->bhqd", d_scores, f32(k))
    probs_t = jnp.exp(_masked_scores(k, q, swap(mask), scale) - swap(row_max)) / swap(row_sum)  # [b, h, k, q]
    d_v = jnp.einsum("bhkq,bhqd->bhkd", probs_t, d_out)
    d_scores_t = jnp.where(swap(mask), probs_t * (jnp.einsum("bhkd,bhqd->bhkq", f32(v), d_out) - swap(delta)) * scale, 0.0)
    d_k = jnp.einsum("bhkq,bhqd->bhkd", d_scores_t, f32(q))
    return d_q.astype(q.dtype), d_k.astype(k.dtype), d_v.astype(v.dtype)


def _blocks(x: Array, rows: int, strided: bool) -> Array:
    """``[batch, ...]`` as ``[blocks, rows, ...]``: consecutive rows, or (``strided``) rows
    ``blocks`` apart, so that a batch split over devices in contiguous shards gives each block
    the same number of rows from every shard and the loop over blocks stays on each device."""
    if not strided:
        return x.reshape(x.shape[0] // rows, rows, *x.shape[1:])
    return jnp.swapaxes(x.reshape(rows, x.shape[0] // rows, *x.shape[1:]), 0, 1)


def _unblock(x: Array, strided: bool) -> Array:
    if strided:
        x = jnp.swapaxes(x, 0, 1)
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6))
def _blocked_attention(q: Array, k: Array, v: Array, mask: Array, scale: float, rows: int, strided: bool) -> Array:
    return _blocked_forward(q, k, v, mask, scale, rows, strided)[0]


def _blocked_forward(q, k, v, mask, scale, rows, strided):
    blocks = tuple(_blocks(x, rows, strided) for x in (q, k, v, mask))
    out, row_max, row_sum = (_unblock(x, strided) for x in jax.lax.map(lambda b: _attend(*b, scale), blocks))
    return out, (q, k, v, mask, out, row_max, row_sum)


def _blocked_backward(scale, rows, strided, saved, d_out):
    blocks = tuple(_blocks(x, rows, strided) for x in (*saved, d_out))
    d_q, d_k, d_v = (_unblock(x, strided) for x in jax.lax.map(lambda b: _attend_grads(*b, scale), blocks))
    return d_q, d_k, d_v, None


_blocked_attention.defvjp(_blocked_forward, _blocked_backward)


def dot_product_attention(
    q: Array,
    k: Array,
    v: Array,
    mask: Array | SegmentMask,
    scale: float,
    *,
    block_bytes: int | None | str = "auto",
    bias: Array | None = None,
) -> Array:
    """Softmax attention with float32 scores, on head-major arrays.

    Args:
      q: ``[batch, heads, q_len, head_dim]``.
      k, v: ``[batch, heads, kv_len, head_dim]``.
      mask: boolean, broadcastable to ``[batch, heads, q_len, kv_len]``; True = may attend. A
        :class:`SegmentMask` runs in the TPU flash kernel where it fits (:func:`_tpu_flash_fits`);
        elsewhere its boolean mask takes the paths below.
      scale: multiplies the scores.
      block_bytes: when the float32 scores of the whole batch exceed this, run over blocks of
        batch rows (:func:`block_rows`), one after another, with a backward pass that recomputes
        each block's probabilities instead of storing them (memory-efficient attention).
        ``"auto"``: :func:`default_block_bytes` (blocks on CPUs only); None: never.
      bias: added to the scaled scores, broadcastable to ``[batch, heads, q_len, kv_len]`` (T5's
        relative position biases). Attention with a bias always takes the whole batch at once.

    Returns ``[batch, heads, q_len, head_dim]``. A query row with no allowed key (a padding
    position) gets uniform weights rather than NaN; its output is meaningless and callers ignore it.
    Head-major operands make both dots plain batched matrix products; with the heads inside the
    batch axes XLA:CPU transposed every operand, a third of the attention's time.
    """
    if _tpu_flash_fits(q, k, mask, bias):
        return _tpu_flash(q, k, v, mask, scale)
    mask = dense_mask(mask)
    if block_bytes == "auto":
        block_bytes = default_block_bytes()
    batch, heads, q_len, _ = q.shape
    shards = _BATCH_SHARDS[-1] if _BATCH_SHARDS else 1
    rows = None if bias is not None else block_rows(batch, heads, q_len, k.shape[2], block_bytes, shards)
    if rows is None:
        probs = jax.nn.softmax(_masked_scores(q, k, mask, scale, bias), axis=-1).astype(v.dtype)
        return jnp.einsum("bhqk,bhkd->bhqd", probs, v)
    mask = jnp.broadcast_to(mask, (batch, *mask.shape[1:]))
    return _blocked_attention(q, k, v, mask, scale, rows, batch % shards == 0 and shards > 1)


def grouped_attention(q: Array, k: Array, v: Array, mask: Array | SegmentMask, scale: float,
                      bias: Array | None = None) -> Array:
    """:func:`dot_product_attention` with fewer key/value heads than query heads (GQA/MQA).

    ``q`` is ``[batch, heads, q_len, d]``, ``k``/``v`` ``[batch, kv_heads, kv_len, d]``. Each
    key/value head serves ``heads // kv_heads`` consecutive query heads, as in Hugging Face. The
    query heads of a group are folded into the query axis, so the keys and values are read in
    place, never repeated (a decode step with a 7B model's cache would otherwise copy it 4x).
    """
    batch, heads, q_len, d = q.shape
    kv_heads = k.shape[1]
    if heads == kv_heads:
        return dot_product_attention(q, k, v, mask, scale, bias=bias)
    if bias is not None:
        raise ValueError("a score bias with grouped key/value heads is not supported")
    group = heads // kv_heads
    if _tpu_flash_fits(q, k, mask, bias):  # the kernel takes as many key/value heads as query heads
        return _tpu_flash(q, jnp.repeat(k, group, axis=1), jnp.repeat(v, group, axis=1), mask, scale)
    mask = dense_mask(mask)
    q = q.reshape(batch, kv_heads, group * q_len, d)
    mask = jnp.tile(mask, (1, 1, group, 1))  # [.., q_len, kv] -> [.., group * q_len, kv], group-major
    out = dot_product_attention(q, k, v, mask, scale)
    return out.reshape(batch, heads, q_len, d)


class MultiHeadAttention(nnx.Module):
    """Separate query/key/value/output projections over ``(heads, head_dim)``.

    Shared by every model family: GPT-2 and RoBERTa (biases everywhere), the Llama family
    (no biases, or query/key/value biases in Qwen2; fewer key/value heads with GQA; rotary
    positions applied to the queries and keys by the caller's ``rotary``) and T5 (no biases,
    unscaled scores plus relative position biases, and cross-attention to the encoder).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        init_std: float,
        dtype: DType,
        param_dtype: DType,
        rngs: nnx.Rngs,
        num_kv_heads: int | None = None,
        head_dim: int | None = None,
        qkv_bias: bool = True,
        out_bias: bool = True,
    ):
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if head_dim is None and embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        if num_heads % num_kv_heads:
            raise ValueError(f"num_heads {num_heads} is not a multiple of num_kv_heads {num_kv_heads}")
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = embed_dim // num_heads if head_dim is None else head_dim
        heads, kv_heads = (num_heads, self.head_dim), (num_kv_heads, self.head_dim)
        kw = dict(init_std=init_std, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.query = dense(embed_dim, heads, ("embed",), ("heads", "kv"), use_bias=qkv_bias, **kw)
        self.key = dense(embed_dim, kv_heads, ("embed",), ("kv_heads", "kv"), use_bias=qkv_bias, **kw)
        self.value = dense(embed_dim, kv_heads, ("embed",), ("kv_heads", "kv"), use_bias=qkv_bias, **kw)
        self.out = dense(heads, embed_dim, ("heads", "kv"), ("embed",), use_bias=out_bias, **kw)

    def __call__(
        self,
        x: Array,
        mask: Array,
        *,
        scale: float,
        cache: KVCache | None = None,
        cache_index: Array | int = 0,
        rotary: Callable[[Array], Array] | None = None,
        bias: Array | None = None,
        context: KVCache | None = None,
    ) -> tuple[Array, KVCache | None]:
        """Attends from ``x`` (``[batch, len, embed]``) to itself, or to the cache, or to a context.

        With ``cache``, this call's keys/values are written into slots
        ``[cache_index, cache_index + len)`` and the queries attend over all slots; ``mask`` then
        has the cache's slot count as its last dimension. ``rotary`` (e.g. RoPE at each token's
        position) is applied to the queries and keys (``[batch, len, heads, head_dim]``) before
        the keys are cached. ``bias`` is added to the scaled scores. ``context`` (from
        :meth:`context_kv`) is cross-attention: the queries attend to its keys and values, and
        ``mask`` covers its length. Returns the output and the new cache.
        """
        if context is not None:
            q = jnp.swapaxes(self.query(x), 1, 2)
            out = grouped_attention(q, context.key.astype(q.dtype), context.value.astype(q.dtype), mask, scale, bias)
            return self.out(jnp.swapaxes(out, 1, 2)), None
        q, k, v = self.query(x), self.key(x), self.value(x)  # [b, len, h, d]
        if rotary is not None:
            q, k = rotary(q), rotary(k)
        q, k, v = (jnp.swapaxes(t, 1, 2) for t in (q, k, v))  # [b, h, len, d]
        if cache is not None:
            k = jax.lax.dynamic_update_slice_in_dim(cache.key, k.astype(cache.key.dtype), cache_index, 2)
            v = jax.lax.dynamic_update_slice_in_dim(cache.value, v.astype(cache.value.dtype), cache_index, 2)
            cache = KVCache(k, v)
            k, v = k.astype(q.dtype), v.astype(q.dtype)
        return self.out(jnp.swapaxes(grouped_attention(q, k, v, mask, scale, bias), 1, 2)), cache

    def context_kv(self, context: Array) -> KVCache:
        """The head-major keys and values of ``context`` (``[batch, len, embed]``) for
        cross-attention, computed once per context and reused at every decoding step."""
        return KVCache(jnp.swapaxes(self.key(context), 1, 2), jnp.swapaxes(self.value(context), 1, 2))
