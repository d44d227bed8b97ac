"""The actor: the policy (any causal LM: GPT-2, the Llama family), optionally with a per-token value head (the token-level baseline).

Log-probs of an action are computed on the correctly packed sequence ``observation + action``:
the observation left-padded, the action right-padded, so the real tokens are contiguous and the
position ids (counted from the mask) run on without a gap. The official code concatenated
separately padded pieces, leaving pad tokens between them and shifting the positions.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from archer_jax.models.tokenizer import Tokens
from archer_jax.models.layers import DType, annotated
from archer_jax.models.token_distribution import TokenDistribution, token_logprobs

Array = jax.Array


def pack(observation: Tokens, action: Tokens) -> Tokens:
    """``[left-padded observation | right-padded action]`` as one sequence."""
    return Tokens(
        jnp.concatenate([observation.ids, action.ids], axis=1),
        jnp.concatenate([observation.mask, action.mask], axis=1).astype(jnp.int32),
    )


def action_hidden(model: nnx.Module, observation: Tokens, action: Tokens) -> Array:
    """The final hidden states of a causal LM that predicted each action token (``[batch,
    action_len, embed]``), from one pass over the packed ``observation + action``."""
    obs_len, act_len = observation.ids.shape[1], action.ids.shape[1]
    sequence = pack(observation, action)
    out = model(sequence.ids, sequence.mask, return_logits=False)
    # The hidden state at position p predicts token p + 1: the action's tokens are predicted from
    # the last observation position onwards.
    return out.hidden_state[:, obs_len - 1 : obs_len - 1 + act_len]


def packed_action_hidden(model: nnx.Module, packed, prompt_length: Array, action_length: int) -> Array:
    """:func:`action_hidden` for sequences ``observation + action`` packed several to a row by group
    (:class:`~archer_jax.learners.packed_batches.PackedTokens`, ``[groups, rows, length]``), with
    ``prompt_length`` (``[groups, sequences]``) each observation's tokens: ``[groups * sequences,
    action_length, embed]``, group by group in input order. Positions past a sequence's end
    (an action shorter than ``action_length``) read its row's last column; their mask is 0."""
    groups, rows, length = packed.ids.shape
    flat = lambda a: a.reshape(groups * rows, length)  # noqa: E731
    h = model(flat(packed.ids), segment_ids=flat(packed.segments), position_ids=flat(packed.positions),
              return_logits=False).hidden_state
    h = h.reshape(groups, rows, length, h.shape[-1])
    # The hidden state at a sequence's column c predicts its token c + 1: the action's from the
    # observation's last token on.
    columns = packed.starts[..., 1, None] + prompt_length[..., None] - 1 + jnp.arange(action_length)
    columns = jnp.minimum(columns, length - 1)  # [groups, sequences, action_length]
    hidden = jax.vmap(lambda hg, r, c: hg[r[:, None], c])(h, packed.starts[..., 0], columns)
    return hidden.reshape(-1, action_length, hidden.shape[-1])


def action_logprobs(policy: nnx.Module, observation: Tokens, action: Tokens,
                    distribution: TokenDistribution = TokenDistribution()) -> tuple[Array, Array]:
    """Per-token ``log q(a_t | s, a_<t)`` (``[batch, action_len]``, 0 at padding) and the final
    hidden states that predicted each action token (``[batch, action_len, embed]``); ``q`` is the
    policy's logits under ``distribution`` (temperature, top-k, top-p: the one the actions were
    sampled from, :func:`archer_jax.models.token_distribution.token_logprobs`)."""
    hidden = action_hidden(policy, observation, action)
    logprobs = token_logprobs(policy.lm_logits(hidden), action.ids, distribution)
    return logprobs * action.mask, hidden


class TokenBaseline(nnx.Module):
    """``b_t``: a linear value head on the policy's hidden state per token, gradient-stopped
    (``detach``: ArCHer's token baseline, a probe that leaves the policy alone) or not (PPO's
    shared actor-critic: the value loss trains the policy's layers too)."""

    def __init__(self, features: int, *, detach: bool = True, param_dtype: DType = jnp.float32, rngs: nnx.Rngs):
        self.detach = detach
        self.head = nnx.Linear(
            features,
            1,
            param_dtype=param_dtype,
            kernel_init=annotated(nnx.initializers.zeros_init(), ("embed", None)),
            bias_init=annotated(nnx.initializers.zeros_init(), (None,)),
            rngs=rngs,
        )

    def __call__(self, hidden: Array) -> Array:
        hidden = jax.lax.stop_gradient(hidden) if self.detach else hidden
        return self.head(hidden.astype(jnp.float32))[..., 0]


class ValueModel(nnx.Module):
    """PPO's separate critic: a causal LM of its own (e.g. a second copy of the policy's
    initial weights) with a linear value head per action token, trained by the value loss only."""

    def __init__(self, model: nnx.Module, *, rngs: nnx.Rngs):
        self.model = model
        self.head = TokenBaseline(model.config.hidden_size, detach=False, rngs=rngs)

    def __call__(self, observation: Tokens, action: Tokens) -> Array:
        return self.head(action_hidden(self.model, observation, action))


class Actor(nnx.Module):
    """What the actor step trains: ``policy`` and, for the token-level baseline (or PPO's value
    head), ``baseline``: a head on the policy's hidden states, gradient-stopped from the policy
    unless ``baseline_gradient``, or with ``value_model`` a :class:`ValueModel` of its own."""

    def __init__(self, policy: nnx.Module, *, token_baseline: bool = False, baseline_gradient: bool = False,
                 value_model: nnx.Module | None = None, rngs: nnx.Rngs | None = None):
        self.policy = policy
        rngs = rngs if rngs is not None else nnx.Rngs(0)
        if value_model is not None:  # the values come from a model of their own (ValueModel)
            self.baseline = ValueModel(value_model, rngs=rngs)
        else:
            self.baseline = (TokenBaseline(policy.config.hidden_size, detach=not baseline_gradient, rngs=rngs)
                             if token_baseline else None)

    def __call__(self, observation: Tokens, action: Tokens,
                 distribution: TokenDistribution = TokenDistribution()) -> tuple[Array, Array | None]:
        """Per-token action log-probs (under ``distribution``) and, with a value head, ``b_t`` per action token."""
        logprobs, hidden = action_logprobs(self.policy, observation, action, distribution)
        if isinstance(self.baseline, ValueModel):
            return logprobs, self.baseline(observation, action)
        return logprobs, None if self.baseline is None else self.baseline(hidden)

    def packed(self, sequences, prompt_length: Array, action: Tokens,
               distribution: TokenDistribution = TokenDistribution()) -> tuple[Array, Array | None]:
        """:meth:`__call__` on ``observation + action`` sequences packed by group
        (:func:`packed_action_hidden`); ``action`` (``[groups * sequences, action_len]``) the same
        actions right-padded, for their ids and mask. Not with a separate value model."""
        if isinstance(self.baseline, ValueModel):
            raise ValueError("a separate value model (PPO's value_head='separate') takes padded batches")
        hidden = packed_action_hidden(self.policy, sequences, prompt_length, action.ids.shape[-1])
        logprobs = token_logprobs(self.policy.lm_logits(hidden), action.ids, distribution) * action.mask
        return logprobs, None if self.baseline is None else self.baseline(hidden)
