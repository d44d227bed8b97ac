"""The pieces of a training run, built from a config: models, sampler, learner, envs, replay.

:mod:`archer_jax.train` runs the algorithm with these; each method here is one of its phases
(rollouts, critic epochs, actor epochs, filtered BC, evaluation), so the loop there reads like
the paper's algorithm box. Randomness is derived from ``config.seed`` and the iteration (JAX keys
by ``fold_in``, env seeds by ``SeedSequence``), plus the replay buffer's own generator, which is
checkpointed: a resumed run draws exactly what an uninterrupted one would have.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from archer_jax import rollout
from archer_jax import sharding as shd
from archer_jax.config import TINY_PREFIX
from archer_jax.envs import registry
from archer_jax.envs.pool import EnvPool
from archer_jax.learners import batches
from archer_jax.learners.actor import Actor
from archer_jax.learners.chai import chai_actions
from archer_jax.learners.critic import DoubleCritic
from archer_jax.learners.learner import Learner, LearnerConfig
from archer_jax.learners.selection import filtered_bc_mask
from archer_jax.learners.train_state import TrainState
from archer_jax.models import build_tiny, load_gpt2, load_roberta, load_tokenizer
from archer_jax.models.tokenizer import token_rows
from archer_jax.replay import ReplayBuffer
from archer_jax.sampling import Sampler, SamplingParams

log = logging.getLogger("archer_jax")

# Purposes folded into the run's key, so each phase draws its own numbers.
ROLLOUT, CRITIC, ACTOR, EVAL = range(4)
EVAL_SEED = 10**6  # evaluation dialogues use fixed seeds, the same every evaluation


class TrainingError(RuntimeError):
    """The run cannot go on (e.g. repeated non-finite losses); the message says why and what is kept."""


def model_directory(name: str, kind: str, workdir: Path) -> str:
    """``tiny:<kind>`` is built (offline) under ``workdir/models``; anything else is a hub name or
    directory for the loaders."""
    if name.startswith(TINY_PREFIX):
        return str(build_tiny(kind, workdir / "models" / f"tiny_{kind}"))
    return name


@dataclasses.dataclass
class States:
    """What the learner trains: the actor and (unless filtered BC) the critic with its target."""

    actor: TrainState
    critic: TrainState | None


class StepMetrics:
    """Per-phase metric means over the steps of an iteration, and the non-finite watchdog."""

    def __init__(self, limit: int):
        self.limit = limit
        self.consecutive = 0
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def add(self, prefix: str, metrics: dict) -> None:
        metrics = jax.device_get(metrics)
        nonfinite = int(metrics.get("nonfinite", 0))
        self.consecutive = self.consecutive + 1 if nonfinite else 0
        for k, v in metrics.items():
            key = f"{prefix}/{k}"
            if k in ("skipped",):
                self.sums[key], self.counts[key] = float(v), 1  # a running counter: keep the last
                continue
            self.sums[key] = self.sums.get(key, 0.0) + float(v)
            self.counts[key] = self.counts.get(key, 0) + 1
        if self.consecutive >= self.limit:
            raise TrainingError(
                f"{self.consecutive} consecutive {prefix} steps had a non-finite loss or gradient "
                f"(config.max_nonfinite_steps={self.limit}); each was skipped, parameters unchanged"
            )

    def means(self) -> dict[str, float]:
        out = {}
        for k, v in self.sums.items():
            if k.endswith("/nonfinite"):
                out[k] = v  # how many steps of the iteration were skipped
            else:
                out[k] = v / self.counts[k]
        self.sums, self.counts = {}, {}
        return out


class Trainer:
    """Builds everything a run needs from ``config`` (already validated)."""

    def __init__(self, config, workdir: Path):
        self.config = c = config
        self.workdir = Path(workdir)
        self.key = jax.random.key(c.seed)
        self.mesh = shd.make_mesh(**c.mesh.to_dict())
        dtype = jnp.bfloat16 if c.dtype == "bfloat16" else jnp.float32

        policy_dir = model_directory(c.policy, "gpt2", self.workdir)
        self.policy_tokenizer = load_tokenizer(policy_dir)
        policy = load_gpt2(policy_dir, dtype=dtype)
        room = policy.config.n_positions - c.max_new_tokens
        self.sampler = Sampler(policy, self.policy_tokenizer, mesh=self.mesh, max_prompt_length=min(c.max_prompt_length, room))
        self.max_prompt_length = self.sampler.max_prompt_length
        actor = Actor(policy, token_baseline=c.actor_loss == "actor_token_baseline", rngs=nnx.Rngs(c.seed))

        critic = None
        if c.agent != "filtered_bc":
            critic_dir = model_directory(c.critic, "roberta", self.workdir)
            self.critic_tokenizer = load_tokenizer(critic_dir)
            encoder = load_roberta(critic_dir, dtype=dtype, seed=c.seed)
            critic = DoubleCritic(encoder, embedding=c.critic_embedding, rngs=nnx.Rngs(c.seed))
            self.max_critic_length = min(c.max_critic_length, encoder.config.max_position_embeddings - 2)
        learner_config = LearnerConfig(
            gamma=c.gamma, tau=c.tau, critic_lr=c.critic_lr, lm_lr=c.lm_lr, max_grad_norm=c.max_grad_norm,
            actor_loss=c.actor_loss,
        )
        self.learner = Learner(actor, critic, learner_config, mesh=self.mesh)
        self._actor, self._critic = actor, critic
        self.sample_params = SamplingParams(
            max_new_tokens=c.max_new_tokens, temperature=c.temperature, top_k=c.top_k, top_p=c.top_p
        )
        self.greedy_params = dataclasses.replace(self.sample_params, greedy=True)
        self.batch = c.batch_size * c.grad_accum_steps
        self.pool = EnvPool(
            registry.env_factory(c), max(c.rollout_size, c.eval_size), num_workers=c.env_workers, timeout_s=c.env_timeout_s
        )
        self.watchdog = StepMetrics(c.max_nonfinite_steps)

    # ---- states -----------------------------------------------------------------------------

    def init_states(self) -> States:
        critic = self.learner.init_critic() if self.learner.has_critic else None
        return States(self.learner.init_actor(), critic)

    def new_replay(self) -> ReplayBuffer:
        return ReplayBuffer(self.config.capacity, seed=self.config.seed)

    def sft_learner(self) -> Learner:
        """A learner whose actor optimizer runs at ``config.sft_lr`` (for the warm start)."""
        c = self.config
        return Learner(self._actor, None, LearnerConfig(lm_lr=c.sft_lr, max_grad_norm=c.max_grad_norm), mesh=self.mesh)

    def policy(self, states: States):
        return self.learner.policy_params(states.actor)

    def _key(self, *path: int) -> jax.Array:
        key = self.key
        for p in path:
            key = jax.random.fold_in(key, p)
        return key

    # ---- acting -----------------------------------------------------------------------------

    def _act(self, states: States, key: jax.Array, params: SamplingParams):
        policy = self.policy(states)

        def act(observations: list[str], turn: int) -> list[str]:
            k = jax.random.fold_in(key, turn)
            if self.config.agent == "chai":
                return self._chai(states, observations, k).texts
            return self.sampler.generate(observations, k, params, model_state=policy).texts

        return act

    def _chai(self, states: States, observations: Sequence[str], key: jax.Array):
        return chai_actions(
            self.sampler, self.learner.critic_graphdef, states.critic.target, self.critic_tokenizer, observations, key,
            self.sample_params, k=self.config.chai_samples, model_state=self.policy(states),
            max_length=self.max_critic_length,
        )

    def _play(self, act, seeds: Sequence[int], label: str) -> list[rollout.Episode]:
        from tqdm.auto import tqdm

        with tqdm(total=self.config.max_turns, desc=label, unit="turn", leave=False, disable=None) as bar:
            return rollout.play(
                self.pool, act, seeds, max_turns=self.config.max_turns, progress=lambda t: bar.update(t - bar.n)
            )

    def collect(self, states: States, iteration: int) -> list[rollout.Episode]:
        """``rollout_size`` dialogues with the acting policy (sampling; CHAI's choice for chai)."""
        c = self.config
        seeds = np.random.SeedSequence([c.seed, iteration]).generate_state(c.rollout_size)
        act = self._act(states, self._key(ROLLOUT, iteration), self.sample_params)
        return self._play(act, seeds, f"rollouts {iteration}")

    def evaluate(self, states: States) -> list[rollout.Episode]:
        """``eval_size`` dialogues, greedy (CHAI: its choice among samples), on the same games in
        every evaluation and for every run seed."""
        seeds = [EVAL_SEED + i for i in range(self.config.eval_size)]
        act = self._act(states, self._key(EVAL), self.greedy_params)
        return self._play(act, seeds, "eval")

    # ---- replay -----------------------------------------------------------------------------

    def store(self, replay: ReplayBuffer, episodes: Sequence[rollout.Episode], first_episode: int) -> int:
        """Adds the episodes' transitions (texts and their token ids) to ``replay``; returns the
        number of transitions added."""
        rows: dict[str, list] = {k: [] for k in ("observation", "action", "next_observation", "reward", "terminal",
                                                  "episode", "episode_return")}
        for number, episode in enumerate(episodes, first_episode):
            n = len(episode)
            rows["observation"] += episode.observations
            rows["action"] += episode.actions
            rows["next_observation"] += episode.next_observations
            rows["reward"] += episode.rewards
            rows["terminal"] += [float(t) for t in episode.terminals]
            rows["episode"] += [number] * n
            rows["episode_return"] += [episode.total_return] * n
        if not rows["observation"]:
            return 0
        policy_rows = lambda texts: token_rows(self.policy_tokenizer, texts, max_length=self.max_prompt_length)  # noqa: E731
        rows["policy_observation"] = policy_rows(rows["observation"])
        rows["policy_action"] = batches.action_rows(
            self.policy_tokenizer, rows["action"], max_action_length=self.config.max_new_tokens
        )
        if self.learner.has_critic:
            critic_rows = lambda texts: token_rows(self.critic_tokenizer, texts, max_length=self.max_critic_length)  # noqa: E731
            rows["critic_observation"] = critic_rows(rows["observation"])
            rows["critic_action"] = critic_rows(rows["action"])
            rows["critic_next_observation"] = critic_rows(rows["next_observation"])
        replay.add(**rows)
        return len(rows["observation"])

    # ---- learning phases --------------------------------------------------------------------

    def _pi_actions(self, states: States, sample: dict, key: jax.Array) -> list[str]:
        """Fresh ``a_π`` from the acting policy (CHAI's choice for chai) for the sampled observations."""
        if self.config.agent == "chai":
            return self._chai(states, sample["observation"], key).texts
        return self.sampler.generate_rows(
            sample["policy_observation"], key, self.sample_params, model_state=self.policy(states)
        ).texts

    def critic_epochs(self, states: States, replay: ReplayBuffer, iteration: int) -> States:
        """``epochs`` critic steps, each on a fresh uniform batch with fresh ``a_π``; Polyak inside."""
        c = self.config
        critic = states.critic
        for epoch in range(c.epochs):
            sample = replay.sample(self.batch)
            pi_texts = self._pi_actions(States(states.actor, critic), sample, self._key(CRITIC, iteration, epoch))
            batch = batches.critic_batch_from_rows(
                self.critic_tokenizer,
                sample["critic_observation"],
                sample["critic_action"],
                sample["critic_next_observation"],
                token_rows(self.critic_tokenizer, pi_texts, max_length=self.max_critic_length),
                sample["reward"],
                sample["terminal"],
                micro_batch_count=c.grad_accum_steps,
                max_length=self.max_critic_length,
            )
            critic, metrics = self.learner.critic_step(critic, batch)
            self.watchdog.add("critic", metrics)
        return States(states.actor, critic)

    def actor_epochs(self, states: States, replay: ReplayBuffer, iteration: int) -> States:
        """``actor_epochs`` policy-gradient steps with the online critic's advantage of a fresh ``a_π``."""
        c = self.config
        actor = states.actor
        for epoch in range(c.actor_epochs):
            sample = replay.sample(self.batch)
            batch, _ = batches.sampled_actor_batch_from_rows(
                self.sampler, self.critic_tokenizer, sample["policy_observation"], sample["critic_observation"],
                self._key(ACTOR, iteration, epoch), self.sample_params, micro_batch_count=c.grad_accum_steps,
                model_state=self.learner.policy_params(actor), max_length=self.max_critic_length,
            )
            actor, metrics = self.learner.actor_step(actor, states.critic.params, batch)
            self.watchdog.add("actor", metrics)
        return States(actor, states.critic)

    def filtered_bc_epochs(self, states: States, replay: ReplayBuffer) -> States:
        """``epochs`` BC steps on the transitions of the best ``filtered_bc_fraction`` of the
        trajectories in the buffer (by return)."""
        c = self.config
        episode = replay.columns["episode"][: len(replay)]
        returns = replay.columns["episode_return"][: len(replay)]
        numbers, first = np.unique(episode, return_index=True)
        keep = numbers[filtered_bc_mask(returns[first], c.filtered_bc_fraction)]
        positions = np.flatnonzero(np.isin(episode, keep))
        actor = states.actor
        for _ in range(c.epochs):
            sample = replay.sample_from(positions, self.batch)
            batch = batches.bc_batch_from_rows(
                self.policy_tokenizer,
                sample["policy_observation"],
                sample["policy_action"],
                micro_batch_count=c.grad_accum_steps,
                max_length=self.max_prompt_length,
                max_action_length=c.max_new_tokens,
            )
            actor, metrics = self.learner.bc_step(actor, batch)
            self.watchdog.add("bc", metrics)
        return States(actor, states.critic)

    def close(self) -> None:
        self.pool.close()


def timed(fn, *args):
    """``(fn(*args), seconds)``."""
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start
