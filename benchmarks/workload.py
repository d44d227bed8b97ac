"""One ArCHer iteration as a fixed workload: the same shapes, counts and random data for both sides.

:mod:`iteration` runs it with archer_jax and :mod:`reference_torch` with PyTorch / Hugging Face.
An iteration is

  * rollouts: ``turns`` turns of ``rollout_batch`` dialogues in lockstep; at turn t every prompt
    has ``first_prompt + t * turn_growth`` tokens and every dialogue samples ``new_tokens`` tokens;
  * ``critic_epochs`` critic steps of ``micro_batches x batch`` transitions, each with a fresh
    ``a_π`` of ``new_tokens`` tokens sampled for its observations;
  * ``actor_epochs`` actor steps of the same size, each with a fresh ``a_π``.

Token ids are random and every generation runs to exactly ``new_tokens`` tokens (stop strings and
EOS off on both sides), so both implementations process the same number of tokens. Text
(detokenizing an action, tokenizing it again for the critic) is left out on both sides: a_π's
critic ids are its policy ids modulo the critic's vocabulary.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from archer_jax import models
from archer_jax.models import tiny


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    policy: models.GPT2Config
    critic: models.RobertaConfig
    rollout_batch: int
    turns: int
    first_prompt: int
    turn_growth: int
    new_tokens: int
    batch: int
    micro_batches: int
    critic_epochs: int
    actor_epochs: int
    observation: int  # tokens per observation in learner batches (policy and critic side alike)
    temperature: float = 1.0
    top_p: float = 1.0
    gamma: float = 0.95
    tau: float = 0.1
    critic_lr: float = 2e-5
    lm_lr: float = 1e-6
    max_grad_norm: float = 1.0

    @property
    def transitions(self) -> int:
        """Transitions per learner step."""
        return self.micro_batches * self.batch

    def prompt_length(self, turn: int) -> int:
        return self.first_prompt + turn * self.turn_growth

    def describe(self) -> dict:
        out = {k: v for k, v in dataclasses.asdict(self).items() if k not in ("policy", "critic")}
        out.update(policy=f"GPT-2 {self.policy.n_layer}x{self.policy.n_embd}, vocab {self.policy.vocab_size}",
                   critic=f"RoBERTa {self.critic.num_hidden_layers}x{self.critic.hidden_size}, "
                          f"vocab {self.critic.vocab_size}")
        return out


TINY_VOCAB = 866  # the tiny preset's tokenizers


def workloads(base_micro_batches: int = 4, base_turns: int = 2) -> dict[str, Workload]:
    """``tiny``: the embedded preset's iteration (configs/20q.py:tiny) at its own counts.
    ``base``: GPT-2-124M + RoBERTa-base with the official batch layout (micro-batches of 8) at
    reduced counts (``base_micro_batches`` micro-batches, one critic and one actor step,
    ``base_turns`` rollout turns), so that a CPU finishes in minutes.
    ``paper``: what configs/20q.py (the official archer_20q.yaml) does per iteration: rollouts of
    128 dialogues over up to 20 turns (prompts from 8 tokens, 12 more per turn: a question and its
    answer), 50 critic steps and 3 actor steps of 32 x 8 transitions with 128-token observations.
    An accelerator's workload: hours per iteration on a CPU."""
    return dict(
        tiny=Workload(
            name="tiny", policy=tiny.tiny_config("gpt2", TINY_VOCAB), critic=tiny.tiny_config("roberta", TINY_VOCAB),
            rollout_batch=32, turns=12, first_prompt=32, turn_growth=18, new_tokens=32, batch=32, micro_batches=1,
            critic_epochs=10, actor_epochs=3, observation=256, temperature=0.7, top_p=0.9, critic_lr=1e-4,
            lm_lr=1e-5,
        ),
        base=Workload(
            name="base", policy=models.GPT2Config(), critic=models.RobertaConfig(), rollout_batch=32,
            turns=base_turns, first_prompt=64, turn_growth=64, new_tokens=32, batch=8,
            micro_batches=base_micro_batches, critic_epochs=1, actor_epochs=1, observation=128,
        ),
        paper=Workload(
            name="paper", policy=models.GPT2Config(), critic=models.RobertaConfig(), rollout_batch=128, turns=20,
            first_prompt=8, turn_growth=12, new_tokens=32, batch=8, micro_batches=32, critic_epochs=50,
            actor_epochs=3, observation=128,
        ),
    )


@dataclasses.dataclass
class Data:
    """The iteration's inputs (NumPy): rollout prompts per turn and one sample per learner step.

    At fixed lengths a sample's token fields are ``[transitions, length]`` arrays; at real lengths
    (``lengths``) they are lists of one row per transition, and ``pi_length`` gives how many of
    a_π's sampled tokens each transition's learner rows keep (its utterance up to the stop string)."""

    prompts: list[np.ndarray]  # [rollout_batch, prompt_length(t)] policy ids
    critic_samples: list[dict]  # per critic step, one entry per transition each
    actor_samples: list[dict]  # per actor step
    lengths: str | None = None  # the workload whose games give the real lengths; None: fixed

    @property
    def real_lengths(self) -> bool:
        return self.lengths is not None


REAL_LENGTHS = {"tiny": "tiny", "base": "paper", "paper": "paper"}  # whose games give each size's lengths
UTTERANCE = (6, 16)  # an utterance's tokens (a question, an answer; a_π up to its stop string)


def row_limit(w: Workload) -> int:
    """The longest observation row at real lengths: the policy's prompt limit and the critic's
    positions (less <s> and </s>), whichever is shorter."""
    return min(w.policy.n_positions - w.new_tokens, w.critic.max_position_embeddings - 4)


def make_data(w: Workload, seed: int = 0, lengths: Workload | None = None) -> Data:
    """The iteration's inputs: every learner row ``w.observation`` tokens long, or, with ``lengths``,
    at the real length distribution of a replay of ``lengths``' games (:func:`transition_lengths`;
    utterances of :data:`UTTERANCE` tokens; critic rows in <s> ... </s>)."""
    rng = np.random.default_rng(seed)
    pv, cv = w.policy.vocab_size, w.critic.vocab_size
    n, obs, act = w.transitions, w.observation, w.new_tokens

    def ids(vocab: int, *shape: int) -> np.ndarray:
        return rng.integers(3, vocab, shape).astype(np.int32)

    def critic_rows(lengths_: np.ndarray) -> list[np.ndarray]:
        return [np.array([0, *ids(cv, int(k)), 2], np.int32) for k in lengths_]

    def learner_sample(critic: bool) -> dict:
        if lengths is None:
            out = dict(policy_observation=ids(pv, n, obs), observation=ids(cv, n, obs))
            if critic:
                out.update(action=ids(cv, n, act), next_observation=ids(cv, n, obs))
        else:
            drawn = {k: np.minimum(v, row_limit(w)) for k, v in transition_lengths(lengths, rng, n).items()}
            utterance = lambda: rng.integers(UTTERANCE[0], UTTERANCE[1] + 1, n)  # noqa: E731
            out = dict(policy_observation=[ids(pv, int(k)) for k in drawn["observation"]],
                       observation=critic_rows(drawn["observation"]), pi_length=np.minimum(utterance(), act))
            if critic:
                out.update(action=critic_rows(utterance()), next_observation=critic_rows(drawn["next_observation"]))
        if critic:
            out.update(reward=-rng.integers(0, 2, n).astype(np.float32),
                       terminal=(rng.random(n) < 0.1).astype(np.float32))
        return out

    return Data(
        prompts=[ids(pv, w.rollout_batch, w.prompt_length(t)) for t in range(w.turns)],
        critic_samples=[learner_sample(True) for _ in range(w.critic_epochs)],
        actor_samples=[learner_sample(False) for _ in range(w.actor_epochs)],
        lengths=None if lengths is None else lengths.name,
    )


def transition_lengths(w: Workload, rng: np.random.Generator, count: int | None = None) -> dict[str, np.ndarray]:
    """Observation lengths of one learner step's transitions at the real distribution of a replay
    of ``w``'s games: a transition of turn t (uniform over the ``turns`` turns, as in a buffer of
    games that run to their limit, a weak policy's) observes ``prompt_length(t)`` tokens and its
    next observation ``prompt_length(t + 1)``; ``count`` of them (default: ``w``'s transitions a
    step). (The fixed workloads use ``observation`` for all.)"""
    turn = rng.integers(0, w.turns, w.transitions if count is None else count)
    return dict(observation=w.prompt_length(turn), next_observation=w.prompt_length(turn + 1))


def to_critic_ids(policy_ids: np.ndarray, critic_vocab: int) -> np.ndarray:
    """a_π's ids for the critic (in place of detokenizing and tokenizing again)."""
    return (3 + policy_ids % (critic_vocab - 3)).astype(np.int32)


def _dims(config) -> tuple[int, int, int]:
    """(layers, width, MLP width) of a GPT-2 or RoBERTa config."""
    if isinstance(config, models.GPT2Config):
        return config.n_layer, config.n_embd, 4 * config.n_embd
    return config.num_hidden_layers, config.hidden_size, config.intermediate_size


def forward_flops(config, batch: int, length: int) -> float:
    """Matmul FLOPs of one encoder/decoder forward over ``batch`` sequences of ``length`` tokens
    (projections + attention scores and mixing; no LM head)."""
    layers, d, inner = _dims(config)
    matmul_params = layers * (4 * d * d + 2 * d * inner)
    return 2.0 * matmul_params * batch * length + 4.0 * layers * batch * length * length * d


def phase_times(w: Workload, rollout_s: float, critic_s: float, actor_s: float, tokens: int) -> dict[str, float]:
    """An iteration's phase seconds and what the ratio table reads from them (both sides)."""
    return dict(rollout_s=rollout_s, critic_s=critic_s, actor_s=actor_s, iteration_s=rollout_s + critic_s + actor_s,
                critic_step_s=critic_s / max(1, w.critic_epochs), actor_step_s=actor_s / max(1, w.actor_epochs),
                rollout_tokens=tokens, rollout_tokens_per_s=tokens / rollout_s)


def step_flops(w: Workload) -> dict[str, float]:
    """FLOPs of one critic step and one actor step (learner program only, a_π sampling excluded):
    a backward pass costs twice its forward."""
    n, obs, act = w.transitions, w.observation, w.new_tokens
    c, p = w.critic, w.policy
    critic = (3 * (forward_flops(c, n, obs) + forward_flops(c, n, act))  # online s and a, with gradient
              + 2 * forward_flops(c, n, obs) + forward_flops(c, n, act))  # target: s, s' and a_π
    head = 2.0 * p.n_embd * p.vocab_size * n * act
    actor = (3 * (forward_flops(p, n, obs + act) + head)  # log π(a_π | s), with gradient
             + forward_flops(c, n, obs) + forward_flops(c, n, act))  # online critic: A(s, a_π)
    return dict(critic=critic, actor=actor)


def real_step_flops(w: Workload, data: Data) -> dict[str, float]:
    """:func:`step_flops` at real lengths: the mean over the data's learner samples of each
    transition's FLOPs at its own rows' lengths (the work a step must do, whatever its padding)."""
    c, p = w.critic, w.policy
    f = lambda config, length: forward_flops(config, 1, int(length))  # noqa: E731

    def critic(s: dict) -> float:
        return sum(3 * (f(c, len(o)) + f(c, len(a))) + f(c, len(o)) + f(c, len(n)) + f(c, k + 2)
                   for o, a, n, k in zip(s["observation"], s["action"], s["next_observation"], s["pi_length"]))

    def actor(s: dict) -> float:
        return sum(3 * (f(p, len(po) + k) + 2.0 * p.n_embd * p.vocab_size * k) + f(c, len(o)) + f(c, k + 2)
                   for po, o, k in zip(s["policy_observation"], s["observation"], s["pi_length"]))

    return dict(critic=float(np.mean([critic(s) for s in data.critic_samples])),
                actor=float(np.mean([actor(s) for s in data.actor_samples])))
