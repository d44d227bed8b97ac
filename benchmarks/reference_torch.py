"""One ArCHer iteration the way the official PyTorch code does it (the reference for iteration.py).

It follows the official ``archer`` trainer and agent (github.com/YifeiZhou02/ArCHer), on the
token-level workload of :mod:`workload` (same model sizes, shapes and counts as ours):

  * rollouts: one Hugging Face ``generate`` per turn over the batch of dialogues;
  * a critic step: for each of ``micro_batches`` micro-batches of ``batch`` transitions, a fresh
    ``a_π`` from ``generate`` for that micro-batch, the double critic (``RobertaModel`` pooler
    output + four MLP heads) on (s, a) with gradient, the target critic on (s, a_π) and on
    (s', a) without, the four MSE losses and ``backward()``; then gradient clipping, ``Adam`` and
    the Polyak update of the target, parameter by parameter;
  * an actor step: per micro-batch ``generate`` for ``a_π``, the log-probability of ``a_π`` (the
    whole sequence's logits, softmax, gather), the online critic's advantage without gradient,
    ``backward()``; then clipping and ``Adam``.

The official code's own defects that change no amount of work are kept out (gradients are
averaged over micro-batches; the observation and action are packed without a pad gap). At real
lengths (``Data.real_lengths``) each micro-batch is padded to its longest row, as the official
code's tokenizer calls (``padding=True``) pad it, with attention masks; a_π keeps its utterance's
tokens (``pi_length``) in the log-probability and the critic.

    python benchmarks/reference_torch.py --size tiny
Prints the phase times of one iteration (after a warm-up iteration).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import time

import numpy as np
import torch
import transformers
from torch import nn

from workload import REAL_LENGTHS, Data, Workload, make_data, phase_times, to_critic_ids, workloads


Tokens = tuple[torch.Tensor, torch.Tensor]  # (ids, attention mask)
TOKEN_FIELDS = ("policy_observation", "observation", "action", "next_observation")


def padded(rows: list[np.ndarray], pad_id: int, left: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Rows padded to the longest (``left``: on the left, as for ``generate``), and their mask."""
    width = max(len(r) for r in rows)
    ids, mask = np.full((len(rows), width), pad_id, np.int64), np.zeros((len(rows), width), np.int64)
    for i, r in enumerate(rows):
        cut = slice(width - len(r), width) if left else slice(0, len(r))
        ids[i, cut], mask[i, cut] = r, 1
    return ids, mask


def _mlp(d_in: int, d: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, d), nn.ReLU(), nn.Linear(d, d), nn.ReLU(), nn.Linear(d, 1))


class DoubleCritic(nn.Module):
    """The official ``DoubleCritic``: one RoBERTa, Q heads on [e(s); e(a)], V heads on e(s)."""

    def __init__(self, config: transformers.RobertaConfig):
        super().__init__()
        self.base_lm = transformers.RobertaModel(config)
        d = config.hidden_size
        self.critic1, self.critic2 = _mlp(2 * d, d), _mlp(2 * d, d)
        self.v_critic1, self.v_critic2 = _mlp(d, d), _mlp(d, d)

    def forward(self, observation: Tokens, action: Tokens):
        s = self.base_lm(input_ids=observation[0], attention_mask=observation[1]).pooler_output
        a = self.base_lm(input_ids=action[0], attention_mask=action[1]).pooler_output
        both = torch.cat([s, a], dim=-1)
        return self.critic1(both), self.critic2(both), self.v_critic1(s), self.v_critic2(s)


class TorchArcher:
    """Policy, critic, target critic and their Adam optimizers, as in the official agent."""

    def __init__(self, w: Workload, device: str = "cpu", seed: int = 0):
        torch.manual_seed(seed)
        self.w, self.device = w, device
        self.policy = transformers.GPT2LMHeadModel(transformers.GPT2Config(**w.policy.to_hf_dict())).to(device)
        self.critic = DoubleCritic(transformers.RobertaConfig(**w.critic.to_hf_dict())).to(device)
        self.target_critic = copy.deepcopy(self.critic)
        self.lm_optimizer = torch.optim.Adam(self.policy.parameters(), lr=w.lm_lr)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=w.critic_lr)
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.generated_tokens = 0

    def tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(array).to(self.device)

    def get_action(self, observation: torch.Tensor | Tokens) -> torch.Tensor:
        """``generate`` exactly ``new_tokens`` sampled tokens per row; returns the new ids."""
        w = self.w
        observation, mask = observation if isinstance(observation, tuple) else (observation, torch.ones_like(observation))
        with torch.no_grad():
            out = self.policy.generate(
                input_ids=observation, attention_mask=mask, do_sample=True,
                max_new_tokens=w.new_tokens, min_new_tokens=w.new_tokens, temperature=w.temperature, top_p=w.top_p,
                top_k=0, pad_token_id=w.policy.eos_token_id,
            )
        self.generated_tokens += out.shape[0] * (out.shape[1] - observation.shape[1])
        return out[:, observation.shape[1]:]

    def critic_ids(self, policy_ids: torch.Tensor, lengths: np.ndarray | None = None) -> Tokens:
        """a_π in critic ids: all its tokens, or (real lengths) <s>, its first ``lengths`` tokens, </s>."""
        ids = to_critic_ids(policy_ids.cpu().numpy(), self.w.critic.vocab_size)
        if lengths is None:
            ids = self.tensor(ids)
            return ids, torch.ones_like(ids)
        return tuple(self.tensor(x) for x in padded([np.array([0, *r[:k], 2]) for r, k in zip(ids, lengths)], 1))

    # ---- rollouts ---------------------------------------------------------------------------

    def rollout(self, prompts: list[np.ndarray]) -> None:
        self.policy.eval()
        for turn_prompts in prompts:
            self.get_action(self.tensor(turn_prompts))

    # ---- critic -----------------------------------------------------------------------------

    def critic_loss(self, micro: dict[str, torch.Tensor]) -> torch.Tensor:
        q1, q2, v1, v2 = self.critic(micro["observation"], micro["action"])
        with torch.no_grad():
            pi_action = self.critic_ids(self.get_action(micro["policy_observation"]), micro.get("pi_length"))
            target_q1, target_q2, _, _ = self.target_critic(micro["observation"], pi_action)
            _, _, target_v1, target_v2 = self.target_critic(micro["next_observation"], micro["action"])
            keep = self.w.gamma * (1 - micro["terminal"])
            target_v1 = micro["reward"] + keep * target_v1.flatten()
            target_v2 = micro["reward"] + keep * target_v2.flatten()
        mse = nn.functional.mse_loss
        loss = (mse(q1.flatten(), target_v1) + mse(q2.flatten(), target_v2)
                + mse(v1.flatten(), target_q1.flatten()) + mse(v2.flatten(), target_q2.flatten()))
        (loss / self.w.micro_batches).backward()
        return loss.detach()

    def soft_update_target_critic(self) -> None:
        tau = self.w.tau
        for target_param, param in zip(self.target_critic.parameters(), self.critic.parameters()):
            target_param.data.copy_(target_param.data * (1.0 - tau) + param.data * tau)

    def critic_step(self, sample: dict[str, np.ndarray]) -> float:
        self.critic_optimizer.zero_grad()
        losses = [self.critic_loss(micro) for micro in self._micro_batches(sample)]
        nn.utils.clip_grad_norm_(self.critic.parameters(), self.w.max_grad_norm)
        self.critic_optimizer.step()
        self.soft_update_target_critic()
        return float(torch.stack(losses).mean())

    # ---- actor ------------------------------------------------------------------------------

    def get_log_prob(self, observation: Tokens, action: Tokens) -> torch.Tensor:
        """Σ_t log π(a_t | s, a_<t), as the official agent computes it (softmax over every position)."""
        sequence = torch.cat([observation[0], action[0]], dim=1)
        logits = self.policy(input_ids=sequence, attention_mask=torch.cat([observation[1], action[1]], dim=1)).logits
        probs = torch.softmax(logits, dim=-1)
        start = observation[0].shape[1] - 1
        selected = torch.take_along_dim(probs[:, start:-1], action[0].unsqueeze(2), dim=2).squeeze(2)
        return torch.sum(torch.where(action[1] > 0, torch.log(selected), 0.0), dim=1)

    def actor_loss(self, micro: dict[str, torch.Tensor]) -> torch.Tensor:
        self.policy.eval()
        pi_action = self.get_action(micro["policy_observation"])
        self.policy.train()
        lengths = micro.get("pi_length")
        if lengths is None:
            action = (pi_action, torch.ones_like(pi_action))
        else:  # the utterance's tokens, right-padded to the micro-batch's longest
            width = int(lengths.max())
            action = (pi_action[:, :width], self.tensor((np.arange(width) < lengths[:, None]).astype(np.int64)))
        log_prob = self.get_log_prob(micro["policy_observation"], action)
        with torch.no_grad():
            q1, q2, v1, v2 = self.critic(micro["observation"], self.critic_ids(pi_action, lengths))
            advantage = (torch.minimum(q1, q2) - torch.minimum(v1, v2)).flatten()
        loss = -torch.mean(log_prob.flatten() * advantage)
        (loss / self.w.micro_batches).backward()
        return loss.detach()

    def actor_step(self, sample: dict[str, np.ndarray]) -> float:
        self.lm_optimizer.zero_grad()
        losses = [self.actor_loss(micro) for micro in self._micro_batches(sample)]
        nn.utils.clip_grad_norm_(self.policy.parameters(), self.w.max_grad_norm)
        self.lm_optimizer.step()
        return float(torch.stack(losses).mean())

    def _micro_batches(self, sample: dict):
        """Micro-batches of ``batch`` transitions: token fields as (ids, mask), rows of several
        lengths padded to the micro-batch's longest (the policy's on the left, with its EOS)."""
        b = self.w.batch
        for start in range(0, self.w.transitions, b):
            micro = {}
            for k, v in sample.items():
                v = v[start:start + b]
                if k == "pi_length":
                    micro[k] = v
                elif k not in TOKEN_FIELDS:
                    micro[k] = self.tensor(v)
                elif isinstance(v, np.ndarray):
                    micro[k] = self.tensor(v), torch.ones_like(self.tensor(v))
                else:
                    pad = self.w.policy.eos_token_id if k == "policy_observation" else 1
                    micro[k] = tuple(self.tensor(x) for x in padded(v, pad, left=k == "policy_observation"))
            yield micro

    def sync(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()


def run_iteration(agent: TorchArcher, data: Data) -> dict[str, float]:
    """One iteration; seconds per phase, the mean critic/actor step and rollout tokens/s."""
    times = {}

    def timed(name, fn, *args):
        agent.sync()
        start = time.perf_counter()
        fn(*args)
        agent.sync()
        times[name] = time.perf_counter() - start

    agent.generated_tokens = 0
    timed("rollout", agent.rollout, data.prompts)
    rollout_tokens = agent.generated_tokens
    timed("critic", lambda: [agent.critic_step(s) for s in data.critic_samples])
    timed("actor", lambda: [agent.actor_step(s) for s in data.actor_samples])
    return phase_times(agent.w, times["rollout"], times["critic"], times["actor"], rollout_tokens)


def warm_up(agent: TorchArcher, data: Data) -> None:
    """One turn and one micro-batch of each step, so that allocator and kernel set-up stay out of
    the timings."""
    agent.rollout(data.prompts[:1])
    full, agent.w = agent.w, dataclasses.replace(agent.w, micro_batches=1)
    one = lambda s: {k: v[: agent.w.batch] for k, v in s.items()}  # noqa: E731
    agent.critic_step(one(data.critic_samples[0]))
    agent.actor_step(one(data.actor_samples[0]))
    agent.w = full


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=("tiny", "base"), default="tiny")
    parser.add_argument("--base-micro-batches", type=int, default=4)
    parser.add_argument("--lengths", choices=("real", "fixed"), default="real", help="as iteration.py's")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    sizes = workloads(args.base_micro_batches)
    w = sizes[args.size]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    agent = TorchArcher(w, device)
    data = make_data(w, lengths=sizes[REAL_LENGTHS[args.size]] if args.lengths == "real" else None)
    warm_up(agent, data)
    for k, v in run_iteration(agent, data).items():
        print(f"{k:>22}: {v:.4g}")


if __name__ == "__main__":
    main()
