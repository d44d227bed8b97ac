"""The critic's warm start: masked-LM pretraining of its encoder on the game's own text before RL.

The paper's critic starts from a pretrained RoBERTa, whose pooled embeddings already tell
utterances apart; a small critic built offline (``tiny:roberta``, ``small:roberta``) starts from
random weights, its pooled embeddings barely differ between dialogues and the heads have nothing
to separate them with. ``config.critic_pretrain.steps`` masked-LM steps
(:mod:`archer_jax.learners.masked_lm`) on the texts the critic will read, the SFT demonstrations'
observations and actions, give it that start; the LM head is then dropped, and the critic (its
target too) starts RL from the trained encoder.

    config.critic_pretrain.steps = 300     # 0 = off (the paper's pretrained roberta-base needs none)

Results are kept in ``config.sft.cache`` beside the SFT's (:mod:`archer_jax.pretraining.sft_cache`), keyed by
the texts, the encoder's weights before it, these keys and everything else the computation
depends on.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import jax
import numpy as np
from flax import nnx

from archer_jax.errors import TrainingError
from archer_jax.learners import train_state
from archer_jax.learners.masked_lm import MaskedLM, MLMBatch, mask_tokens, mlm_step
from archer_jax.learners.step_program import StepProgram
from archer_jax.learners.train_state import TrainState
from archer_jax.models.tokenizer import Tokens, next_power_of_two, token_rows
from archer_jax.pretraining import sft_cache
from archer_jax.records.progress import progress_bar
from archer_jax.runtime import distributed
from archer_jax.runtime import sharding as shd
from archer_jax.runtime.config_keys import key

if TYPE_CHECKING:  # only for type hints: the agent is built above this module
    from archer_jax.agents.agent import Agent

MIN_LENGTH = 16  # the shortest length bucket of a batch


@dataclasses.dataclass(frozen=True)
class CriticPretrainConfig:
    """``config.critic_pretrain``: masked-LM steps on the critic's encoder before RL (0 = off),
    their learning rate, batch and masking rate; ``__post_init__`` raises ValueError naming the key."""

    steps: int = key(
        0, "masked-LM steps on the critic's encoder before RL, on the SFT demonstrations' texts (0 = off)",
        official="— (the official critic is the pretrained `roberta-base`)")
    lr: float = key(1e-3, "the critic pretraining's Adam learning rate")
    batch_size: int = key(32, "texts per critic pretraining step")
    mask_rate: float = key(0.15, "fraction of each text's tokens masked and predicted")
    seed: int = key(0, "the critic pretraining's seed (its LM head and its masks)")

    def __post_init__(self):
        for name in ("steps", "seed"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr: must be > 0, got {self.lr}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size: must be > 0, got {self.batch_size}")
        if not 0 < self.mask_rate < 1:
            raise ValueError(f"mask_rate: must be in (0, 1), got {self.mask_rate}")


def texts(observations: Sequence[str], actions: Sequence[str]) -> list[str]:
    """The distinct texts a critic reads of demonstrations, in first-seen order: each observation
    (the dialogue so far) and each action."""
    return list(dict.fromkeys([*observations, *actions]))


class Pretraining:
    """The masked-LM program on a critic's encoder: ``critic`` (a :class:`DoubleCritic` module
    with the run's parameters merged in) shares its encoder with the model trained here, so
    :meth:`critic_params` reads the trained encoder back into the critic's parameters."""

    def __init__(self, critic: nnx.Module, tokenizer, config: CriticPretrainConfig, *, mesh, max_length: int,
                 matmul_precision: str | None = None, micro_batch_size="auto", limit: int | None = None,
                 max_grad_norm: float = 1.0):
        self.critic, self.tokenizer, self.config, self.max_length = critic, tokenizer, config, max_length
        self.model = MaskedLM(critic.encoder, rngs=nnx.Rngs(config.seed))
        self.graphdef, params = train_state.split_params(self.model)
        self.tx = train_state.optimizer(config.lr, max_grad_norm)
        create = functools.partial(train_state.create, tx=self.tx, with_target=False)
        shardings = train_state.shardings(jax.eval_shape(create, params), self.tx, mesh, shd.DEFAULT_RULES)
        self.state: TrainState = jax.jit(create, out_shardings=shardings)(params)
        batch = shd.batch_sharding(mesh, 2, batch_dim=0)
        self.step = StepProgram(functools.partial(mlm_step, self.graphdef, self.tx), shardings,
                                MLMBatch(Tokens(batch, batch), batch, batch), mesh=mesh,
                                micro_batch_size=micro_batch_size, limit=limit, matmul_precision=matmul_precision)

    @property
    def encoder_params(self) -> nnx.State:
        """The encoder's parameters in the training state (the LM head's left out)."""
        return self.state.params["encoder"]

    def train(self, corpus: Sequence[str], progress: Callable[[int, dict], None] | None = None) -> list[dict]:
        """``config.steps`` steps on batches drawn uniformly from ``corpus``; each step's metrics."""
        c, tok = self.config, self.tokenizer
        rows = token_rows(tok, corpus, max_length=self.max_length)
        rng = np.random.default_rng([c.seed, 13])
        specials = tok.all_special_ids
        history = []
        for step in range(c.steps):
            chosen = [rows[i] for i in rng.integers(0, len(rows), c.batch_size)]
            length = min(max(MIN_LENGTH, next_power_of_two(max(len(r) for r in chosen))), self.max_length)
            batch = mask_tokens(chosen, rng, mask_id=tok.mask_token_id, vocab_size=len(tok), special_ids=specials,
                                pad_id=tok.pad_token_id, length=length, rate=c.mask_rate)
            self.state, metrics = self.step(self.state, batch)
            metrics = {k: float(v) for k, v in metrics.items()}
            history.append(metrics)
            if progress is not None:
                progress(step + 1, metrics)
        return history

    def critic_params(self, encoder: nnx.State | None = None) -> nnx.State:
        """The critic's parameters with its encoder's replaced by ``encoder`` (default: the trained one)."""
        nnx.update(self.model.encoder, self.encoder_params if encoder is None else encoder)
        return train_state.split_params(self.critic)[1]


def settings(config, mesh, limit: int | None) -> dict:
    """What a pretraining's result depends on besides its texts and starting weights (the cache key's)."""
    devices = mesh.devices
    return dict(kind="critic_masked_lm", critic_pretrain=dataclasses.asdict(config.critic_pretrain), limit=limit,
                max_length=config.model.max_critic_length, max_grad_norm=config.learner.max_grad_norm,
                precision=str(jax.config.jax_default_matmul_precision), mesh=dict(mesh.shape),
                devices=[devices.flat[0].platform, devices.flat[0].device_kind, devices.size])


def warm_start(agent: Agent, critic: TrainState, observations: Sequence[str], actions: Sequence[str],
               limit: int | None = None) -> tuple[TrainState, dict, list[dict]]:
    """The critic's state after masked-LM pretraining of its encoder on the demonstrations' texts
    (or the result kept in ``config.sft.cache``), its target equal to it and Adam fresh; with its
    summary and each step's metrics."""
    parts = agent.parts
    c = parts.config
    networks = agent.networks
    module = nnx.merge(networks.critic_graphdef, critic.params)
    pretraining = Pretraining(module, parts.pipeline.critic_tokenizer, c.critic_pretrain,
                              mesh=parts.mesh, max_length=c.model.max_critic_length,
                              matmul_precision=networks.matmul_precision, micro_batch_size=c.learner.micro_batch_size,
                              limit=limit, max_grad_norm=c.learner.max_grad_norm)
    corpus = texts(observations, actions)
    start = time.perf_counter()
    entry = found = None
    if c.sft.cache and not distributed.multiprocess():
        entry = sft_cache.key(pretraining.encoder_params, corpus, (), settings(c, parts.mesh, limit))
        found = sft_cache.load(c.sft.cache, entry, pretraining.encoder_params)
    if found is not None:
        encoder, history, info = found
        info = dict(info, cache=str(Path(c.sft.cache).expanduser() / entry))
    else:
        with progress_bar(c.critic_pretrain.steps, "critic pretraining", "step") as bar:
            def progress(step: int, metrics: dict) -> None:
                bar.update(1)
                bar.set_postfix(loss=f"{metrics['loss']:.3f}")

            history = pretraining.train(corpus, progress)
        if all(m["nonfinite"] for m in history):
            raise TrainingError(f"critic pretraining: all {len(history)} steps had a non-finite loss or gradient")
        encoder = pretraining.encoder_params
        info = dict(texts=len(corpus), steps=c.critic_pretrain.steps, first_loss=history[0]["loss"],
                    last_loss=history[-1]["loss"], last_accuracy=history[-1]["accuracy"],
                    seconds=time.perf_counter() - start)
        path = None if entry is None else sft_cache.save_or_warn(c.sft.cache, entry, encoder, history, info,
                                                                 "critic pretraining")
        if path is not None:  # another run may have stored it first: every run starts from the stored one
            encoder, history, info = sft_cache.load(c.sft.cache, entry, encoder)
            info = dict(info, cache=str(path))
    params = pretraining.critic_params(encoder)
    return agent.init_critic(params, params), info, history
