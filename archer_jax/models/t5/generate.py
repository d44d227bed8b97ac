"""Greedy decoding with a T5 model: one jitted program per (batch, input length, new tokens)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx

from archer_jax.models.t5.model import T5ForConditionalGeneration

Array = jax.Array


@functools.partial(jax.jit, static_argnames=("graphdef", "max_new_tokens"))
def _greedy(graphdef: nnx.GraphDef, state: nnx.State, input_ids: Array, attention_mask: Array, max_new_tokens: int) -> Array:
    model = nnx.merge(graphdef, state)
    config = model.config
    batch = input_ids.shape[0]
    context = model.cross_kv(model.encode(input_ids, attention_mask))

    def step(carry, t):
        token, cache, done = carry
        logits, cache = model.decode(token[:, None], attention_mask, context, cache=cache, cache_index=t)
        token = jnp.where(done, config.pad_token_id, jnp.argmax(logits[:, -1], axis=-1).astype(jnp.int32))
        return (token, cache, done | (token == config.eos_token_id)), token

    start = jnp.full((batch,), config.decoder_start_token_id, jnp.int32)
    carry = (start, model.init_cache(batch, max_new_tokens, model.dtype), jnp.zeros((batch,), bool))
    _, tokens = jax.lax.scan(step, carry, jnp.arange(max_new_tokens))
    return tokens.T


def greedy(model: T5ForConditionalGeneration, input_ids: Array, attention_mask: Array, max_new_tokens: int) -> Array:
    """``[batch, max_new_tokens]`` int32 greedy continuations of right-padded ``input_ids``, as
    Hugging Face's ``generate(do_sample=False)`` without the decoder start token: after a row's
    EOS come pad tokens."""
    graphdef, state = nnx.split(model)
    return _greedy(graphdef, state, jnp.asarray(input_ids, jnp.int32), jnp.asarray(attention_mask, jnp.int32),
                   max_new_tokens)
