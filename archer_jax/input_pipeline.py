"""The run's input pipeline: text to token rows, and token rows to learner batches.

    pipeline = InputPipeline(policy_tokenizer, critic_tokenizer, max_prompt_length=512,
                             max_critic_length=512, max_action_length=32)
    replay.add(**pipeline.transitions(episodes, first_episode=0))
    batch = pipeline.critic_batch(replay.sample(256), pi_action_rows)
    batch = pipeline.policy_batch(replay.sample(256))

The replay buffer keeps every transition's texts with their token rows in the policy's and the
critic's tokenizers, so learner batches (:mod:`archer_jax.learners.batches`) only pad and lay
out rows: :meth:`InputPipeline.critic_batch`, :meth:`~InputPipeline.policy_batch`,
:meth:`~InputPipeline.dataset_actor_batch`, and PPO's dialogue rows
(:meth:`~InputPipeline.dialogue_rows`, :mod:`archer_jax.learners.dialogue_rows`). Observations are truncated from the left (the latest turns matter most); an action is
tokenized on its own with the stop string, as the sampler produced it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from archer_jax.learners.batches import ActorBatch, BCBatch, CriticBatch, actor_batch, bc_batch, critic_batch, pad
from archer_jax.learners.packed_batches import PackedCriticBatch, packed_critic_batch
from archer_jax.learners.dialogue_rows import DialogueRows
from archer_jax.models.tokenizer import Tokens, action_rows, next_power_of_two, token_rows
from archer_jax.sampling.prompts import PROMPT_FORMATS, Prompter

if TYPE_CHECKING:  # only for type hints: rollouts are played above the pipeline
    from archer_jax.rollout import Episode


@dataclasses.dataclass(frozen=True)
class InputPipeline:
    """The run's tokenizers and token limits; ``critic_tokenizer`` is None without a critic;
    ``prompter`` turns observations into the policy's prompts (default: the observation itself)."""

    policy_tokenizer: Any
    critic_tokenizer: Any | None
    max_prompt_length: int
    max_critic_length: int
    max_action_length: int
    prompter: Prompter | None = None
    # The critic's action text: the utterance alone (the official critic's), or (``model.critic_action
    # = "in_context"``) the dialogue so far followed by it, one text its encoder reads together.
    critic_action_in_context: bool = False

    def __post_init__(self):
        if self.prompter is None:
            object.__setattr__(self, "prompter", Prompter(PROMPT_FORMATS["plain"], self.policy_tokenizer))

    @property
    def action_bucket(self) -> int:
        """The shortest length bucket of actions in learner batches: the sampler's action length
        (its ``max_new_tokens``), so that short and long actions share one compiled step."""
        return next_power_of_two(self.max_action_length)

    def policy_rows(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Observations as the policy's prompts, in token rows (left-truncated to ``max_prompt_length``)."""
        return token_rows(self.policy_tokenizer, [self.prompter.prompt(t) for t in texts], max_length=self.max_prompt_length,
                          add_special_tokens=self.prompter.add_special_tokens)

    def action_rows(self, actions: Sequence[str]) -> list[np.ndarray]:
        """The policy's utterances + the stop string in policy token rows, as the sampler produces them."""
        return action_rows(self.policy_tokenizer, actions, stop_string=self.prompter.stop_strings[0],
                           max_action_length=self.max_action_length)

    def demonstration_rows(self, actions: Sequence[str]) -> list[np.ndarray]:
        """Env actions of demonstrations (SFT) as the policy would say them, in token rows."""
        return self.action_rows([self.prompter.policy_text(a) for a in actions])

    def critic_rows(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Texts in critic token rows (left-truncated to ``max_critic_length``)."""
        return token_rows(self.critic_tokenizer, texts, max_length=self.max_critic_length)

    def critic_action_texts(self, observations: Sequence[str], actions: Sequence[str]) -> list[str]:
        """What the critic reads as each action: the utterance, or the observation followed by it
        (``critic_action_in_context``; left-truncated, so the utterance and the latest turns stay)."""
        if not self.critic_action_in_context:
            return list(actions)
        return [f"{o}{a}" for o, a in zip(observations, actions, strict=True)]

    def critic_action_rows(self, observations: Sequence[str], actions: Sequence[str]) -> list[np.ndarray]:
        """:meth:`critic_action_texts` in critic token rows."""
        return self.critic_rows(self.critic_action_texts(observations, actions))

    def transitions(self, episodes: Sequence[Episode], first_episode: int) -> dict[str, list]:
        """The replay columns of ``episodes`` (numbered from ``first_episode``): texts, rewards,
        terminals, where the turn limit ended a dialogue (``at_limit``: 1 on its last transition,
        whose ``terminal`` says whether the limit ended the game or cut it), episode numbers and
        returns, the staleness of the policy that played them, and the token rows the learners need."""
        rows: dict[str, list] = {k: [] for k in ("observation", "action", "next_observation", "reward", "terminal",
                                                  "at_limit", "episode", "episode_return", "staleness")}
        for number, episode in enumerate(episodes, first_episode):
            n = len(episode)
            rows["observation"] += episode.observations
            rows["action"] += episode.actions
            rows["next_observation"] += episode.next_observations
            rows["reward"] += episode.rewards
            rows["terminal"] += [float(t) for t in episode.terminals]
            rows["at_limit"] += [0.0] * (n - 1) + [float(episode.at_limit)] if n else []
            rows["episode"] += [number] * n
            rows["episode_return"] += [episode.total_return] * n
            rows["staleness"] += [episode.staleness] * n
        if not rows["observation"]:
            return {}
        rows.update(self.token_columns(rows["observation"], rows["action"], rows["next_observation"]))
        return rows

    def token_columns(self, observations: Sequence[str], actions: Sequence[str], next_observations: Sequence[str], *,
                      demonstrations: bool = False) -> dict[str, list[np.ndarray]]:
        """The token rows the learners read of transitions' texts: ``policy_observation``,
        ``policy_action`` and, with a critic, ``critic_observation/action/next_observation``.
        ``demonstrations``: the actions are env actions of a dataset, which the policy says in its
        prompt format (:meth:`demonstration_rows`), not its own utterances."""
        rows = dict(policy_observation=self.policy_rows(observations),
                    policy_action=self.demonstration_rows(actions) if demonstrations else self.action_rows(actions))
        if self.critic_tokenizer is not None:
            rows.update(critic_observation=self.critic_rows(observations),
                        critic_action=self.critic_action_rows(observations, actions),
                        critic_next_observation=self.critic_rows(next_observations))
        return rows

    # ---- learner batches from token rows ------------------------------------------------------

    def critic_batch(self, sample: dict, pi_actions: Sequence[np.ndarray]) -> CriticBatch:
        """A replay sample's transitions with ``a_π`` (critic token rows), as a critic batch."""
        return critic_batch(self.critic_tokenizer, sample["critic_observation"], sample["critic_action"],
                            sample["critic_next_observation"], pi_actions, sample["reward"], sample["terminal"],
                            max_length=self.max_critic_length, min_action_bucket=self.action_bucket)

    def packed_critic_batch(self, sample: dict, pi_actions: Sequence[np.ndarray], groups: int) -> PackedCriticBatch:
        """:meth:`critic_batch` with each encoder's sequences packed several to a row, in ``groups``
        runs of transitions (:mod:`archer_jax.learners.packed_batches`)."""
        return packed_critic_batch(self.critic_tokenizer, sample["critic_observation"], sample["critic_action"],
                                   sample["critic_next_observation"], pi_actions, sample["reward"], sample["terminal"],
                                   groups=groups, max_length=self.max_critic_length)

    def policy_batch(self, sample: dict) -> BCBatch:
        """A replay sample's observations and actions in policy tokens (BC, and PPO's rows)."""
        return self.policy_rows_batch(sample["policy_observation"], sample["policy_action"])

    def policy_rows_batch(self, observations: Sequence[np.ndarray], actions: Sequence[np.ndarray]) -> BCBatch:
        """Observation rows (left-padded) and action rows (right-padded), as a BC batch."""
        return bc_batch(self.policy_tokenizer, observations, actions, max_length=self.max_prompt_length,
                        max_action_length=self.max_action_length, min_action_bucket=self.action_bucket)

    def dataset_actor_batch(self, sample: dict) -> ActorBatch:
        """An actor batch of a dataset's own actions (offline ArCHer's AWR), in both tokenizers."""
        policy = self.policy_batch(sample)
        return actor_batch(policy.observation, policy.action, self.critic_tokenizer, sample["critic_observation"],
                           sample["critic_action"], max_length=self.max_critic_length,
                           min_action_bucket=self.action_bucket)

    def critic_tokens(self, rows: Sequence[np.ndarray], *, action: bool = False) -> Tokens:
        """Critic token rows padded (``action``: to at least the action bucket)."""
        return pad(self.critic_tokenizer, rows, self.max_critic_length,
                   **({"min_bucket": self.action_bucket} if action else {}))

    def dialogue_rows(self, episodes: np.ndarray, action_lengths: np.ndarray) -> DialogueRows:
        """Where each transition's action tokens sit when its dialogue's turns are laid out as one
        row (PPO's token-level estimators): ``episodes`` each transition's dialogue, grouped and in
        turn order."""
        return DialogueRows.of(episodes, action_lengths)
