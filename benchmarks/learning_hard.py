"""Learning where the methods separate: ArCHer against PPO + GAE, GRPO, online filtered BC and CHAI
on settings harder than the tiny preset, several seeds, at equal env samples; and ArCHer's
departures from the official recipe, one at a time.

Settings (``--setting``):

* ``weak``: ``configs/20q.py:weak``, the 10-object subset from a weak SFT start (about a quarter of
  the evaluation games won), every method 3 seeds (PPO + GAE at lambda 1, the weak start's
  best-tuned PPO, and at its default 0.95), all from one SFT.
* ``ablate``: the same start, seed 0, ArCHer with one departure changed at a time (below).
* ``full``: ``configs/20q.py:small``, all 157 objects and 20 turns with a 4-layer GPT-2 and RoBERTa
  (SFT on the optimal expert: about a third of the games won): ArCHer, PPO + GAE at lambda 1, GRPO,
  filtered BC and CHAI, 30 iterations, 3 seeds, all from one SFT (``sft.cache``, seeded from the
  one kept with the results).
* ``city``: Guess My City on the official 950 dialogues: offline ArCHer, online ArCHer from it
  (``init_from``) and online ArCHer from SFT, 3 seeds.

Every run is the train app on the setting's config with only the agent, a variant's keys and the
seed changed (``benchmarks/learning.py``'s ``run_one``), in ``--workdir/<setting>/<method>/``. A
finished run is not trained again and an interrupted one resumes from its last checkpoint, so the
benchmark resumes with the same command. After each run finishes, the results of every finished
run of every setting are written again (``benchmarks/results/learning_hard.{json,png,md}``), and
with ``--commit`` committed, so that work done is never lost. A run those results hold is kept in
them, and not trained again, when its workdir is gone (a fresh machine); to train it again, remove
it from the JSON or pass another ``--out``; ``--same-start`` trains again the runs from an SFT start
other than the one kept with the results (``SFT_KEPT``), so that a setting's methods share one.

    python benchmarks/learning_hard.py --setting weak --jobs 2 --commit
    python benchmarks/learning_hard.py --setting ablate --jobs 2 --commit
    python benchmarks/learning_hard.py --report        # train nothing: tables from the finished runs

The measures are ``benchmarks/sample_efficiency.py``'s: per method and seed, the env samples at the
first evaluation at or above a return threshold, and from the first one after which every later one
stays at or above it. Two thresholds are taken: halfway from the SFT start to the best method's
final mean return (ratios to the best-tuned ArCHer: the ArCHer method, its default or a variant,
with the best final mean return), and the best-tuned PPO + GAE's final mean return (the paper's
claim: ArCHer reaches it in a fraction of PPO's samples; ratios to PPO's env samples).

Each is read twice. Once on the greedy evaluations (the same fixed games every ``eval_freq``
iterations; CHAI plays its best of k samples there too). And once on the train-time return: the
mean return of the games the method itself played in its last ``WINDOW`` iterations (sampled at
the rollout temperature, about 160 games; the start is the first iteration's games, played by the
SFT policy before any update). The official ArCHer code evaluates greedily (``do_sample=False`` in
its train loop), as the first reading does. A policy can win more of its sampled games while its
greedy utterance stays the same, and the two readings show it.

``ablate`` is the weak start again, seed 0, with one of ArCHer's departures from the official recipe
changed at a time (the critic's pretraining, the update-to-data ratio, the actor's learning rate
and batch, the stop token in the gradient, a batch-centred advantage, the warm-up length), so that
each one's effect is measured against the default's.

The results of the code before three fixes to the recipe around ArCHer's losses (the actor scored
its samples at temperature 1 without the nucleus while the rollouts sampled at 0.7 and top-p 0.9;
a game lost at its turn limit was bootstrapped as if cut; the small critics started from random
weights) are kept in ``results/learning_hard_before.{json,png,md}``; the tables here show their
ArCHer runs again beside the fixed code's, labelled "before the fixes". Each run's per-iteration
critic diagnostics (``diagnostics``: the critic's Q spread over a batch, the advantage's mean and
spread, the sampled a_π's log-prob and length, the actor's gradient norm) are kept with it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import learning
import sample_efficiency as se
from common import RESULTS, commit_files, machine, portable

ROOT = Path(__file__).resolve().parent.parent
WEAK, SMALL, CITY, CITY_OFFLINE = "configs/20q.py:weak", "configs/20q.py:small", "configs/city.py:tiny", \
    "configs/city_offline.py:tiny"
CITY_DATA = ROOT.parent / "shared" / "data" / "guess_my_city.json"  # the official 950 dialogues
# configs/city.py:tiny's turn limit and SFT warm start, for the offline city run.
CITY_SFT = ("env.max_turns=15", "sft.steps=300", "sft.lr=1e-3", "sft.batch_size=32", "sft.dialogues=256",
            "sft.experts=optimal,random_order")
X1 = ["critic_steps=10", "actor_steps=3", "critic_init_value=0.0"]  # the tiny preset's recipe on the weak start
# method: (label, agent, overrides, config or None for the setting's). "{offline}" in an override is
# the path of the same seed's "offline_archer" run, trained first.
METHODS = {
    "archer": ("ArCHer", "archer", [], None),
    "ppo_gae": ("PPO + gae", "ppo", ["ppo.adv_estimator=gae"], None),
    "ppo_grpo": ("PPO + grpo", "ppo", ["ppo.adv_estimator=grpo", "rollout_group_size=4"], None),
    "filtered_bc": ("filtered BC (online)", "filtered_bc", [], None),
    "chai": ("CHAI", "chai", [], None),
    # The update-to-data ratio: critic and actor steps per iteration (configs/20q.py:tiny takes 10 and 3).
    "archer_utd2": ("ArCHer, 2x steps (20 critic, 6 actor)", "archer", ["critic_steps=20", "actor_steps=6"], None),
    "archer_utd4": ("ArCHer, 4x steps (40 critic, 12 actor)", "archer", ["critic_steps=40", "actor_steps=12"], None),
    # The critic's step size: at 1e-4 the tiny critic's values are still moving toward the returns'
    # scale (about -10) after 40 iterations, so the actor sees a near-constant negative advantage.
    "archer_critic_lr": ("ArCHer, critic_lr 1e-3", "archer", ["learner.critic_lr=1e-3"], None),
    # The paper's warm-up: the critic alone for 20 iterations (800 steps here, 1000 in the paper) before
    # the actor moves, so that it starts from values near the returns' scale.
    "archer_warm": ("ArCHer, 4x steps, critic alone for 20 iterations", "archer",
                    ["critic_steps=40", "actor_steps=12", "warmup_iter=20"], None),
    # The warm-up's price in samples: the actor does not move for its first 20 iterations (about 7000
    # env samples here), then climbs faster than PPO does. Half the warm-up (400 critic steps).
    "archer_warm10": ("ArCHer, 4x steps, critic alone for 10 iterations", "archer",
                      ["critic_steps=40", "actor_steps=12", "warmup_iter=10"], None),
    # The paper's warm-up with 20 more iterations: on the full game the critic's values are still
    # falling toward the returns' scale when the 30-iteration budget's actor starts, and its actor gets
    # 10 iterations. Its first 30 iterations are archer_warm's run (the same seed and keys).
    "archer_warm_long": ("ArCHer, 4x steps, critic alone for 20 iterations, 50 iterations", "archer",
                         ["critic_steps=40", "actor_steps=12", "warmup_iter=20", "iterations=50"], None),
    # The critic started at the values' scale instead of walking there: its heads' output bias at -17
    # (near -1/(1 - gamma) = -20 for games lost at the turn limit, which both the weak start and the
    # full game's mostly lose), and a short warm-up (5 critic-only iterations, 200 steps) to learn the
    # differences.
    "archer_init": ("ArCHer, 4x steps, critic from -17, critic alone for 5 iterations", "archer",
                    ["critic_steps=40", "actor_steps=12", "warmup_iter=5", "critic_init_value=-17.0"], None),
    # PPO's own tuning at the same budget (its defaults: 4 epochs, minibatches of 32, actor_lr 1e-5).
    "ppo_gae_lr3": ("PPO + gae, actor_lr 3e-5", "ppo", ["ppo.adv_estimator=gae", "learner.actor_lr=3e-5"], None),
    # At 1e-5 and 3e-5 PPO drifts to invalid questions (70% of the weak start's sampled turns, over 95%
    # ten iterations on) and loses every game: a smaller step.
    "ppo_gae_lr03": ("PPO + gae, actor_lr 3e-6", "ppo", ["ppo.adv_estimator=gae", "learner.actor_lr=3e-6"], None),
    # GAE with lam < 1 over tokens favours long utterances while the value model is still flat: the
    # -1 at a turn's end reaches the first tokens of a 32-token utterance with weight 0.95^31 = 0.2,
    # those of a 6-token one with 0.77. From the weak start the long utterances are garbage.
    "ppo_gae_lam1": ("PPO + gae, lam 1", "ppo", ["ppo.adv_estimator=gae", "ppo.lam=1.0"], None),
    # PPO's epochs and minibatches are tuned around lam 1, the only PPO that climbs from the weak start:
    # more passes over each rollout (PPO's own data reuse, beside ArCHer's update-to-data ratio) and
    # twice the updates per epoch at half the batch.
    "ppo_gae_epochs8": ("PPO + gae, lam 1, 8 epochs", "ppo", ["ppo.adv_estimator=gae", "ppo.lam=1.0", "ppo.epochs=8"], None),
    "ppo_gae_mb16": ("PPO + gae, lam 1, minibatches of 16", "ppo",
                     ["ppo.adv_estimator=gae", "ppo.lam=1.0", "batch_size=16"], None),
    # The fixed recipe's departures from the official one, one at a time (setting "ablate"), against
    # "archer" (the weak preset: 40 critic and 12 actor steps an iteration, the critic's heads from -9,
    # 5 critic-only iterations, actor_lr 1e-5 on batches of 32, the critic's encoder pretrained, the
    # stop token scored, each network's gradient clipped at 1).
    "archer_no_pretrain": ("ArCHer, critic encoder not pretrained", "archer", ["critic_pretrain.steps=0"], None),
    "archer_init0": ("ArCHer, critic from 0", "archer", ["critic_init_value=0.0"], None),
    "archer_lr1e6": ("ArCHer, actor_lr 1e-6 (the official 20Q rate)", "archer", ["learner.actor_lr=1e-6"], None),
    "archer_official_batch": ("ArCHer, actor_lr 1e-6 on batches of 256 (the official)", "archer",
                              ["learner.actor_lr=1e-6", "grad_accum_steps=8"], None),
    "archer_no_stop": ("ArCHer, a_pi scored without its stop token (the official)", "archer",
                       ["learner.score_stop_token=False"], None),
    "archer_center": ("ArCHer, batch-centred advantage", "archer", ["learner.center_advantage=True"], None),
    "archer_warmup20": ("ArCHer, critic alone for 20 iterations", "archer", ["warmup_iter=20"], None),
    # Gradient clipping off for both networks: whether clipping changes the update at all (the
    # official code clips the actor's gradient by a norm that also counts the critic's last one).
    "archer_no_clip": ("ArCHer, no gradient clipping", "archer", ["learner.max_grad_norm=1e9"], None),
    # The setting that spread the policy in an earlier version (log-probs already at the sampling
    # temperature): top_p 1 and a critic from random weights.
    "archer_top_p1_no_pretrain": ("ArCHer, top_p 1, critic encoder not pretrained", "archer",
                                  ["sampling.top_p=1.0", "critic_pretrain.steps=0"], None),
    # Not a departure but an option: the critic reads each utterance after the dialogue it answers,
    # so that its encoder can see a question asked before (the separately encoded utterance cannot).
    "archer_in_context": ("ArCHer, the critic reads a_pi in its dialogue", "archer", ["model.critic_action=in_context"],
                          None),
    # The same departures first measured on the tiny preset's recipe (setting "ablate_1x": 10 critic
    # and 3 actor steps an iteration, the critic from 0), which showed the update-to-data ratio and
    # the critic's start to be what the weak start needs.
    **{f"x1_{name}": (f"ArCHer 1x, {label}", "archer", [*X1, *keys], None) for name, label, keys in (
        ("default", "the tiny preset's recipe", []),
        ("no_pretrain", "critic encoder not pretrained", ["critic_pretrain.steps=0"]),
        ("init9", "critic from -9", ["critic_init_value=-9.0"]),
        ("center", "batch-centred advantage", ["learner.center_advantage=True"]),
        ("no_stop", "a_pi scored without its stop token", ["learner.score_stop_token=False"]),
        ("lr1e6", "actor_lr 1e-6", ["learner.actor_lr=1e-6"]),
        ("warmup20", "critic alone for 20 iterations", ["warmup_iter=20"]))},
    # Guess My City: offline ArCHer on the official dialogues, online ArCHer from it and from SFT. All
    # three start from the same SFT warm start (configs/city.py:tiny's) and play the same 15 turns,
    # so offline ArCHer's gain is over that start; from a random tiny GPT-2 its 250 actor steps on
    # 950 dialogues win no game.
    "offline_archer": ("offline ArCHer (official dialogues)", "offline_archer",
                       [f"offline.dataset={CITY_DATA}", *CITY_SFT], CITY_OFFLINE),
    "online_from_offline": ("online ArCHer from offline ArCHer", "archer", ["init_from={offline}", "sft.steps=0"], CITY),
    "online_from_sft": ("online ArCHer from SFT", "archer", [], CITY),
}
SETTINGS = {  # setting: (title, config, methods, seeds)
    "weak": ("20Q subset, weak SFT start (configs/20q.py:weak)", WEAK,
             ("archer", "ppo_gae_lam1", "ppo_gae", "ppo_grpo", "filtered_bc", "chai"), (0, 1, 2)),
    "ablate": ("20Q subset, weak start: ArCHer's departures from the official recipe, one at a time (seed 0)", WEAK,
               ("archer_no_pretrain", "archer_init0", "archer_lr1e6", "archer_official_batch", "archer_no_stop",
                "archer_center", "archer_warmup20", "archer_no_clip", "archer_in_context", "archer_top_p1_no_pretrain"),
               (0,)),
    "ablate_1x": ("20Q subset, weak start, the tiny preset's recipe (1x steps, critic from 0): one change at a time "
                  "(seed 0)", WEAK, tuple(m for m in METHODS if m.startswith("x1_")), (0,)),
    "full": ("20Q, all 157 objects, small models (configs/20q.py:small)", SMALL,
             ("archer", "ppo_gae_lam1", "ppo_grpo", "filtered_bc", "chai"), (0, 1, 2)),
    "city": ("Guess My City: offline, offline then online, online from SFT", CITY,
             ("offline_archer", "online_from_offline", "online_from_sft"), (0, 1, 2)),
}
# Keys every run of a setting adds to its method's. The weak start's settings read the sampled policy
# from the games it played; an offline run plays none, so these evaluate it sampled. A setting's SFT
# (and the critic's pretraining) is the same for every seed and method: its runs share it
# ("{workdir}": --workdir; the weak start's ablations share the weak start's).
SETTING_OVERRIDES = {"weak": ["sft.cache={workdir}/weak/sft_cache"], "ablate": ["sft.cache={workdir}/weak/sft_cache"],
                     "ablate_1x": ["sft.cache={workdir}/weak/sft_cache"],
                     "city": ["eval_sampled=True"], "full": ["eval_sampled=True", "sft.cache={workdir}/full/sft_cache"]}
# The full game's SFT start, kept with the results: XLA's CPU programs round differently on another
# host, so an SFT recomputed elsewhere is another start (greedy -16.34 on one host, -16.06 on the
# next). Its entries are copied into the workdir's cache before any run, so that every run on any
# host starts from them while this package's source (part of the cache key) is unchanged.
SFT_KEPT = {"full": RESULTS / "learning_hard_sft"}
# The runs a setting's tables take from another setting (the same config and method): both ablations
# are read against the weak start's ArCHer (the kept recipe).
BORROWS = {"ablate": {"weak": ("archer",)}, "ablate_1x": {"weak": ("archer",)}}
# The code before the fixes to ArCHer's recipe: its results, and the ArCHer runs of each setting that
# the tables show beside the fixed code's ("before_<method>"). Its runs of the methods whose code path
# the fixes left alone (CARRIED: no critic and no policy gradient, or offline on a dataset) are this
# code's runs too, and are read as such; filtered BC's were checked to be bit-identical on seed 0.
BEFORE = RESULTS / "learning_hard_before.json"
BEFORE_ARCHER = {"weak": ("archer", "archer_warm", "archer_init"),
                 "full": ("archer_warm10", "archer_warm", "archer_warm_long", "archer_init")}
CARRIED = {("weak", "filtered_bc"), ("full", "filtered_bc"), ("city", "offline_archer")}
for _method in sorted({m for ms in BEFORE_ARCHER.values() for m in ms}):
    _label = "ArCHer 1x (the tiny preset's recipe)" if _method == "archer" else METHODS[_method][0]
    METHODS[f"before_{_method}"] = (f"{_label}, before the fixes", "archer", METHODS[_method][2], None)
# A method whose runs start from another method's run of the same seed, trained first.
STARTS_FROM = {"online_from_offline": "offline_archer"}
FILES = ("learning_hard.json", "learning_hard.png", "learning_hard.md")
# Per-iteration diagnostics kept with each run, from its history.jsonl (a key a run lacks is left out).
DIAGNOSTICS = {
    "q1_std": "critic/q1/std", "q1_mean": "critic/q1/mean", "advantage_mean": "actor/advantage/mean",
    "advantage_std": "actor/advantage/std", "action_logprob": "actor/action_logprob/mean",
    "action_tokens": "actor/action_tokens/mean", "actor_grad_norm": "actor/grad_norm",
    "invalid": "rollout/invalid", "return": "rollout/return", "eval_return": "eval/return",
}
WINDOW = 5  # iterations of train-time games per point of the sampled reading (an eval_freq apart)


def sft_cache_dir(setting: str, workdir: Path) -> Path | None:
    """The SFT cache a setting's runs share (its ``sft.cache`` override), or None."""
    caches = [o.split("=", 1)[1] for o in SETTING_OVERRIDES.get(setting, []) if o.startswith("sft.cache=")]
    return Path(caches[0].format(workdir=workdir)) if caches else None


def seed_sft_cache(workdir: Path, settings: list[str]) -> None:
    """Copies the kept SFT entries of ``settings`` (``SFT_KEPT``) missing from the workdir's caches."""
    for setting in settings:
        kept = SFT_KEPT.get(setting)
        cache = sft_cache_dir(setting, workdir)
        if kept is None or not kept.is_dir() or cache is None:
            continue
        for entry in sorted(p for p in kept.iterdir() if p.is_dir()):
            if not (cache / entry.name).exists():
                cache.mkdir(parents=True, exist_ok=True)
                shutil.copytree(entry, cache / f".{entry.name}.tmp", dirs_exist_ok=True)
                (cache / f".{entry.name}.tmp").rename(cache / entry.name)


def run_dir(workdir: Path, setting: str, method: str, seed: int) -> Path:
    return workdir / setting / method / f"{METHODS[method][1]}_seed{seed}"


def train(setting: str, method: str, seed: int, workdir: Path) -> dict:
    """One run's summary (trained now, or found finished), labelled with its method; a run that
    starts from another method's run trains that one first (or finds it finished)."""
    label, agent, overrides, config = METHODS[method]
    overrides = overrides + SETTING_OVERRIDES.get(setting, [])
    first = STARTS_FROM.get(method)
    if first is not None:
        train(setting, first, seed, workdir)
    offline = run_dir(workdir, setting, first, seed) if first is not None else None
    overrides = [o.format(offline=offline, workdir=workdir) for o in overrides]
    summary = learning.run_one(config or SETTINGS[setting][1], workdir / setting / method, agent, seed, overrides)
    return dict(summary, agent=label, method=method)


def finished(setting: str, method: str, seed: int, workdir: Path) -> dict | None:
    """A finished run's summary (None when it has not finished, or stopped before its last
    iteration: a stopped run writes its summary too), labelled with its method, with its
    iterations' train-time games (``rollouts``: iteration, env samples, mean return, success, and
    the fraction of turns the env found invalid)."""
    path = run_dir(workdir, setting, method, seed)
    summary = learning.finished_summary(path)
    if summary is None:
        return None
    log = path / "history.jsonl"
    history = [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []
    rollouts = [dict(iteration=h["iteration"], env_samples=h["env_samples"], ret=h["rollout/return"],
                     success=h["rollout/success"], invalid=h.get("rollout/invalid")) for h in history
                if "rollout/return" in h]
    diagnostics = [dict(iteration=h["iteration"], **{name: h[key] for name, key in DIAGNOSTICS.items() if key in h})
                   for h in history]
    # The env samples collected before the policy's first update (None: it has none, as CHAI's, or
    # plays no games, as an offline run).
    actor_from = next((h["env_samples"] for h in history if h.get("time/actor", 0.0) > 0), None) if rollouts else None
    return dict(summary, agent=METHODS[method][0], method=method, rollouts=rollouts, actor_from=actor_from,
                diagnostics=diagnostics)


def sampled(summary: dict, window: int = WINDOW) -> dict | None:
    """The run read on its train-time games: the summary with its evaluations replaced by the mean
    return of the games played in each ``window`` iterations (at the env samples of the window's
    last one), the first point being the first iteration's games. None for a run that plays none
    (offline)."""
    games = summary.get("rollouts") or []
    if len(games) < window:
        return None

    def mean(key: str, part: list[dict]) -> float | None:
        values = [g[key] for g in part if g.get(key) is not None]
        return statistics.mean(values) if values else None

    evals = [{"env_samples": 0, "iteration": 0, "eval/return": games[0]["ret"], "eval/success": games[0]["success"],
              "eval/invalid": games[0].get("invalid")}]
    for end in range(window, len(games) + 1, window):
        part = games[end - window:end]
        evals.append({"env_samples": part[-1]["env_samples"], "iteration": part[-1]["iteration"],
                      "eval/return": mean("ret", part), "eval/success": mean("success", part),
                      "eval/invalid": mean("invalid", part)})
    return read_as(summary, evals)


def read_as(summary: dict, evals: list[dict]) -> dict:
    """``summary`` with ``evals`` in place of its greedy evaluations, and its before/after from them."""
    return dict(summary, evals=evals, eval_return_before=evals[0]["eval/return"],
                eval_return_after=evals[-1]["eval/return"], eval_success_after=evals[-1]["eval/success"])


def recorded(out: Path, path: Path | None = None) -> dict[tuple[str, int, int], dict]:
    """The runs the results file in ``out`` holds (or the one at ``path``), by (setting, method,
    seed), in the shape of a finished run's summary: the tables keep a run whose workdir is gone
    (another machine, a cleaned disk), and it is not trained again. The setting is the one that
    trains the run, which a borrowing setting's table names too."""
    path = path or out / FILES[0]
    if not path.is_file():
        return {}
    try:
        settings = json.loads(path.read_text())["settings"]
    except (ValueError, KeyError, TypeError) as error:
        raise SystemExit(f"{path}: not a learning_hard results file ({error}); move it away to start afresh")
    kept = {}
    for entry in settings:
        for run in entry["runs"]:
            method, seed, evals = run["method"], run["seed"], run["evals"]
            if method not in METHODS or not evals:
                continue
            origin = run.get("setting") or _trained_in(entry["setting"], method)
            kept[(origin, method, seed)] = dict(
                method=method, agent=METHODS[method][0], config=dict(seed=seed), evals=evals,
                rollouts=run.get("rollouts") or [], env_samples=run["env_samples"], wall_time_s=run["wall_time_s"],
                benchmark_wall_s=run.get("benchmark_wall_s"), actor_from=run.get("actor_from"),
                eval_return_before=evals[0]["eval/return"], eval_return_after=evals[-1]["eval/return"],
                eval_success_after=evals[-1]["eval/success"], sft=run.get("sft"), recorded_in=path.name,
                diagnostics=run.get("diagnostics") or [])
    return kept


def recorded_before(path: Path | None = None) -> dict[tuple[str, int, int], dict]:
    """The runs of the code before the fixes that the tables show: each setting's ArCHer runs of
    ``BEFORE_ARCHER`` as ``before_<method>`` (the weak start's tuned ones were trained in its old
    "utd" setting), and the ``CARRIED`` ones as they are."""
    kept = {}
    for (origin, method, seed), run in recorded(RESULTS, path or BEFORE).items():
        setting = "weak" if origin == "utd" else origin
        if (origin, method) in CARRIED:
            kept[(origin, method, seed)] = run
        elif method in BEFORE_ARCHER.get(setting, ()):
            name = f"before_{method}"
            kept[(setting, name, seed)] = dict(run, method=name, agent=METHODS[name][0])
    return kept


def _trained_in(setting: str, method: str) -> str:
    """The setting that trains ``method``'s runs shown in ``setting``'s table (its own, or the one it
    borrows them from)."""
    if method in SETTINGS[setting][2]:
        return setting
    return next((other for other, borrowed in BORROWS.get(setting, {}).items() if method in borrowed), setting)


def summaries_of(setting: str, workdir: Path, kept: dict | None = None) -> list[dict]:
    """The finished runs a setting's tables read: its own, and those it borrows; from the workdir, else
    as ``kept`` (``recorded``) holds them."""
    _, _, methods, seeds = SETTINGS[setting]
    runs = [(setting, m, s) for m in methods for s in seeds]
    for other, borrowed in BORROWS.get(setting, {}).items():
        runs = [(other, m, s) for m in borrowed for s in seeds] + runs
    runs = [(setting, f"before_{m}", s) for m in BEFORE_ARCHER.get(setting, ()) for s in seeds] + runs
    found = (finished(*run, workdir) or (kept or {}).get(run) for run in runs)
    return [s for s in found if s is not None]


def best_of(summaries: list[dict], family: str) -> str | None:
    """The method of ``family`` (its default, named ``family``, or one of its variants, named
    ``family_...``) with the best final mean return; the default on a tie."""
    finals = {}
    for s in summaries:
        if s["method"] == family or s["method"].startswith(family + "_"):
            finals.setdefault(s["method"], []).append(s["eval_return_after"])
    return max(finals, key=lambda m: (statistics.mean(finals[m]), m == family)) if finals else None


def best_ppo(summaries: list[dict]) -> str | None:
    """The PPO + GAE method (its default or one of its tunings) with the best final mean return."""
    return best_of(summaries, "ppo_gae")


def target(rows: list[dict], summaries: list[dict], ppo: str | None = None) -> dict | None:
    """The paper's claim at PPO's final mean return (``ppo``: the best-tuned PPO + GAE unless named):
    each method's mean samples to reach it (first, and from which it holds), as a fraction of PPO's
    mean env samples in all."""
    ppo = ppo or best_ppo(summaries)
    ppo_runs = [s for s in summaries if s["method"] == ppo]
    if not ppo_runs:
        return None
    budget = statistics.mean(s["env_samples"] for s in ppo_runs)
    fraction = lambda v: v / budget if v is not None else None  # noqa: E731
    return dict(ppo=ppo, ppo_label=METHODS[ppo][0] if ppo in METHODS else ppo,
                ppo_start_return=statistics.mean(s["eval_return_before"] for s in ppo_runs),
                ppo_final_return=statistics.mean(s["eval_return_after"] for s in ppo_runs),
                ppo_env_samples=budget,
                methods={r["method"]: dict(label=r["label"], mean_samples=r["mean_samples"], reached=r["reached"],
                                           mean_held=r["mean_held"], held=r["held"], seeds=r["seeds"],
                                           first_fraction_of_ppo=fraction(r["mean_samples"]),
                                           held_fraction_of_ppo=fraction(r["mean_held"])) for r in rows})


def target_table(t: dict) -> str:
    lines = [f"At the best PPO + gae's final mean return ({t.get('ppo_label', t['ppo'])}: {t['ppo_final_return']:.2f}, "
             f"after {t['ppo_env_samples']:.0f} env samples):",
             "", "| method | first reaches it: mean env samples (seeds) | fraction of PPO's samples "
             "| stays from: mean env samples (seeds) | fraction of PPO's samples |", "|---|---|---|---|---|"]
    if t["ppo_final_return"] <= t["ppo_start_return"]:  # every method is there at 0 samples: no table
        return lines[0] + (f" PPO ends at or below its start ({t['ppo_start_return']:.2f}), so every method is there "
                           "from the start and this measure tells them apart in nothing.")
    cell = lambda v, n, seeds: f"{v:.0f} ({n}/{seeds})" if v is not None else f"never (0/{seeds})"  # noqa: E731
    frac = lambda v: f"{v:.2f}" if v is not None else "-"  # noqa: E731
    for m in t["methods"].values():
        lines.append(f"| {m['label']} | {cell(m['mean_samples'], m['reached'], m['seeds'])} | "
                     f"{frac(m['first_fraction_of_ppo'])} | {cell(m['mean_held'], m['held'], m['seeds'])} | "
                     f"{frac(m['held_fraction_of_ppo'])} |")
    return "\n".join(lines)


def threshold_of(summaries: list[dict]) -> tuple[float | None, str]:
    """The return the "first" and "stays from" measures ask for, and what it is: halfway from the SFT
    start (the best-tuned ArCHer's evaluation before RL) to the best final mean return of any method,
    where that is above the start; None when no method ends above it."""
    reference = best_of(summaries, "archer")
    archer = [s for s in summaries if s["method"] == reference]
    if not archer:
        return None, ""
    start = statistics.mean(s["eval_return_before"] for s in archer)
    finals = {}
    for s in summaries:
        finals.setdefault(s["method"], []).append(s["eval_return_after"])
    best = max(finals, key=lambda m: (statistics.mean(finals[m]), m == "archer"))
    end = statistics.mean(finals[best])
    if end <= start:
        return None, f"no method ends above the SFT start ({start:.2f})"
    return start + 0.5 * (end - start), (f"halfway from the SFT start ({start:.2f}) to the best final mean return, "
                                         f"{METHODS[best][0]}'s ({end:.2f})")


def measures(summaries: list[dict]) -> dict:
    """The tables of one reading of a setting's runs: final returns, the halfway threshold and the
    samples to it, the paper's measure at the best PPO's final return, and the curves."""
    quality = learning.aggregate(summaries)
    threshold, basis = threshold_of(summaries)
    reference = best_of(summaries, "archer") or "archer"  # ratios are to the best-tuned ArCHer
    rows = se.efficiency(summaries, threshold, reference) if threshold is not None else []
    ppo = best_ppo(summaries)
    paper = None if ppo is None else target(se.efficiency(summaries, statistics.mean(
        s["eval_return_after"] for s in summaries if s["method"] == ppo)), summaries, ppo)
    invalid = {}  # per method: the invalid-turn fraction at the first and the last point, mean over seeds
    for s in summaries:
        first, last = s["evals"][0].get("eval/invalid"), s["evals"][-1].get("eval/invalid")
        if first is not None and last is not None:
            invalid.setdefault(s["agent"], []).append((first, last))
    after_warmup = {}  # per method: env samples from the policy's first update to the threshold, per seed
    for r in rows:
        for s in (s for s in summaries if s["method"] == r["method"] and s.get("actor_from") is not None):
            reached = r["samples_to_threshold"][s["config"]["seed"]]
            after_warmup.setdefault(r["label"], []).append(None if reached is None else max(0, reached - s["actor_from"]))
    return dict(threshold=threshold, threshold_basis=basis, rows=rows, quality=quality, target=paper,
                curves=learning.curves(summaries), after_first_update=after_warmup,
                invalid={a: [statistics.mean(v[0] for v in pairs), statistics.mean(v[1] for v in pairs)]
                         for a, pairs in invalid.items()})


def sampled_evaluation(summary: dict) -> dict | None:
    """The run read on its sampled evaluations (``eval_sampled``: the fixed games, sampled), or None
    for a run without them."""
    evals = summary["evals"]
    if not evals or any("eval_sampled/return" not in e for e in evals):
        return None
    evals = [dict(iteration=e["iteration"], env_samples=e["env_samples"],
                  **{f"eval/{k.split('/', 1)[1]}": v for k, v in e.items() if k.startswith("eval_sampled/")})
             for e in evals]
    return read_as(summary, evals)


def _first_updates(summaries: list[dict]) -> dict[str, list[int]]:
    """Per method (label): each seed's env samples before the policy's first update."""
    out = {}
    for s in summaries:
        if s.get("actor_from") is not None:
            out.setdefault(s["agent"], []).append(s["actor_from"])
    return out


def report(setting: str, workdir: Path, kept: dict | None = None) -> dict | None:
    """One setting's tables from its finished runs (None when none has finished): on the greedy
    evaluations, (``sampled``) on the train-time games, and (``sampled_evaluation``) on the sampled
    evaluations where the runs have them. ``kept``: runs recorded in the results (``recorded``)."""
    summaries = summaries_of(setting, workdir, kept)
    if not summaries:
        return None
    order = {m: i for i, m in enumerate(METHODS)}
    summaries.sort(key=lambda s: (order[s["method"]], s["config"]["seed"]))
    played = [p for p in map(sampled, summaries) if p is not None]
    evaluated = [e for e in map(sampled_evaluation, summaries) if e is not None]
    title, config, methods, seeds = SETTINGS[setting]
    return dict(setting=setting, title=title, config=config, **measures(summaries),
                sampled=dict(window=WINDOW, **measures(played)) if played else None,
                sampled_evaluation=measures(evaluated) if evaluated else None,
                overrides={m: [o.replace(str(ROOT.parent), "..") for o in METHODS[m][2] + (
                    [] if m.startswith("before_") else SETTING_OVERRIDES.get(setting, []))]
                           for m in dict.fromkeys(s["method"] for s in summaries)},
                first_update={a: statistics.mean(v) for a, v in _first_updates(summaries).items()},
                sft_starts=sft_starts(summaries),
                runs=[{k: s.get(k) for k in ("method", "agent", "env_samples", "evals", "rollouts", "actor_from",
                                             "wall_time_s", "benchmark_wall_s", "diagnostics")}
                      | dict(seed=s["config"]["seed"], setting=_trained_in(setting, s["method"]), sft=sft_start(s))
                      for s in summaries])


SFT_KEYS = ("steps", "pairs", "first_loss", "last_loss")


def sft_start(summary: dict) -> dict | None:
    """What identifies a run's SFT warm start (its steps, pairs and first and last loss); None when
    the run had none or its record does not say."""
    sft = summary.get("sft")
    return {k: sft[k] for k in SFT_KEYS} if sft and all(k in sft for k in SFT_KEYS) else None


def sft_starts(summaries: list[dict]) -> list[dict]:
    """The distinct SFT starts of a setting's runs, each with the runs from it (``method:seed``):
    one, where the methods are compared from the same policy."""
    starts: dict[tuple, dict] = {}
    for s in summaries:
        start = sft_start(s)
        if start is not None:
            entry = starts.setdefault(tuple(start.values()), dict(start, runs=[]))
            entry["runs"].append(f"{s['method']}:{s['config']['seed']}")
    return list(starts.values())


def _reading(parts: list[str], r: dict, measure: str) -> None:
    if r.get("threshold_basis"):
        parts += [f"Threshold: {r['threshold_basis']}" + (f": {r['threshold']:.2f}." if r["threshold"] is not None
                                                            else "; the table has no threshold."), ""]
    if r["rows"]:
        parts += [se.table(r["rows"], r["quality"], r["threshold"], measure), ""]
    else:
        parts += [learning.table(r["quality"]), ""]
    if r.get("invalid"):
        parts += ["Invalid turns (questions the game does not understand), first point -> last, mean over seeds: "
                  + "; ".join(f"{a} {v[0]:.2f} -> {v[1]:.2f}" for a, v in r["invalid"].items()) + ".", ""]
    if r.get("after_first_update"):
        cell = lambda v: "never" if v is None else f"{v:.0f}"  # noqa: E731
        parts += ["From the policy's first update (after any critic-only warm-up) to the threshold, env samples "
                  "per seed: " + "; ".join(f"{a} {', '.join(map(cell, v))}" for a, v in r["after_first_update"].items())
                  + ".", ""]
    if r["target"]:
        parts += [target_table(r["target"]), ""]


def markdown(results: list[dict]) -> str:
    parts = []
    for r in results:
        parts += [f"## {r['title']}", "", f"Config `{r['config']}` unless a method names its own; each method's keys:", ""]
        parts += [f"- {m}: {'`' + METHODS[m][3] + '` ' if METHODS[m][3] else ''}agent={METHODS[m][1]} {' '.join(o)}"
                  for m, o in r["overrides"].items()] + [""]
        starts = r.get("sft_starts") or []
        if len(starts) == 1:
            parts += [f"Every run with a recorded SFT starts from one: {starts[0]['steps']} steps on {starts[0]['pairs']} "
                      f"pairs, loss {starts[0]['first_loss']:.3f} -> {starts[0]['last_loss']:.4f}.", ""]
        elif starts:
            parts += [f"**The runs start from {len(starts)} different SFT results**, so their comparison mixes starts: "
                      + "; ".join(f"loss -> {s['last_loss']:.4f}: {', '.join(s['runs'])}" for s in starts) + ".", ""]
        if r.get("first_update"):
            parts += ["Env samples collected before the policy's first update, mean over seeds (a critic-only warm-up "
                      "delays it; CHAI has none, its critic chooses among the policy's samples from the start): "
                      + "; ".join(f"{a} {v:.0f}" for a, v in r["first_update"].items()) + ".", ""]
        parts += ["### Greedy evaluation (fixed games; CHAI: its best of k samples)", ""]
        _reading(parts, r, "eval return")
        if r.get("sampled_evaluation"):
            parts += ["### Sampled evaluation (the same fixed games, sampled as the rollouts are; `eval_sampled`)", ""]
            _reading(parts, r["sampled_evaluation"], "sampled eval return")
        if r.get("sampled"):
            parts += [f"### Train-time return (the games each method played, mean over {r['sampled']['window']} "
                      "iterations; \"before\" is the first iteration's games)", ""]
            _reading(parts, r["sampled"], "train-time return")
    return "\n".join(parts)


def write(workdir: Path, out: Path, seconds: float) -> list[dict]:
    """learning_hard.{json,png,md} from every setting's finished runs: those in the workdir, and those
    the results in ``out`` already hold."""
    kept = recorded_before() | recorded(out)
    results = [r for r in (report(s, workdir, kept) for s in SETTINGS) if r is not None]
    if not results:
        return results
    out.mkdir(parents=True, exist_ok=True)
    plots = [r for r in results if r["curves"]]
    _plot(plots, out / FILES[1])
    (out / FILES[2]).write_text(markdown(results))
    (out / FILES[0]).write_text(json.dumps(portable(dict(
        benchmark="learning_hard", machine=machine(), seconds_this_invocation=seconds, settings=results)), indent=2) + "\n")
    return results


def _plot(results: list[dict], path: Path) -> None:
    """One column per setting: the greedy evaluations above; below, the sampled evaluations where the
    runs have them, else the train-time return."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(results), figsize=(9.0 * len(results), 9.2), squeeze=False)
    for column, r in enumerate(results):
        below = ("eval return, fixed games (sampled)", r["sampled_evaluation"]) if r.get("sampled_evaluation") \
            else ("train-time return (its own games, sampled)", r.get("sampled"))
        for row, (ylabel, reading) in enumerate((("eval return, fixed games (greedy; CHAI: best of k)", r), below)):
            ax = axes[row][column]
            ax.set_title(r["title"] + "\nmean over seeds, band min..max", fontsize="medium")
            ax.set_xlabel("env samples (transitions collected)")
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
            if not reading:
                continue
            for label, c in reading["curves"].items():
                if not any(c["env_samples"]):  # an offline run collects no samples: its final return, as a line
                    ax.axhline(c["mean"][-1], color="black", linestyle=":", linewidth=1.2,
                               label=f"{label}: final {c['mean'][-1]:.2f}")
                    continue
                (line,) = ax.plot(c["env_samples"], c["mean"], marker="o", markersize=3, label=label)
                ax.fill_between(c["env_samples"], c["low"], c["high"], color=line.get_color(), alpha=0.15)
            if reading["threshold"] is not None:
                ax.axhline(reading["threshold"], color="gray", linestyle="--", linewidth=1,
                           label=f"halfway {reading['threshold']:.2f}")
            ax.legend(fontsize="x-small", loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def kept_starts(setting: str) -> list[dict]:
    """The SFT starts kept with the results for ``setting`` (``SFT_KEPT``), as :func:`sft_start` reads
    a run's."""
    kept = SFT_KEPT.get(setting)
    metas = sorted(kept.glob("*/meta.json")) if kept is not None and kept.is_dir() else []
    starts = (sft_start(dict(sft=json.loads(m.read_text()).get("info"))) for m in metas)
    return [s for s in starts if s is not None]


def from_other_start(setting: str, summary: dict) -> bool:
    """Whether a run of ``setting`` records an SFT start other than the kept ones (none kept: False)."""
    starts, start = kept_starts(setting), sft_start(summary)
    return bool(starts) and start is not None and start not in starts


def to_train(settings: list[str], methods: list[str] | None, seeds: list[int] | None, workdir: Path,
             kept: dict | None = None, same_start: bool = False) -> list[tuple]:
    """The (setting, method, seed) runs to train, seed by seed: each setting's methods and seeds unless
    given, less the finished ones (in the workdir, or ``kept`` in the results), and less those another
    run starts from (that run trains them first). ``same_start``: a finished run from an SFT start
    other than the setting's kept one (:func:`from_other_start`) is trained again, from the kept one."""
    jobs = [(setting, m, s) for setting in settings for s in (seeds or SETTINGS[setting][3])
            for m in (methods or SETTINGS[setting][2])]
    if any(METHODS[m][3] == CITY_OFFLINE for _, m, _ in jobs) and not CITY_DATA.is_file():
        raise SystemExit(f"{CITY_DATA}: missing (the official Guess My City dialogues, needed by offline_archer)")
    jobs = [(g, m, s) for g, m, s in jobs
            if not any(STARTS_FROM.get(d) == m and (g, d, s) in jobs for d in STARTS_FROM)]

    def done(job: tuple) -> bool:
        summary = finished(*job, workdir) or (kept or {}).get(job)
        return summary is not None and not (same_start and from_other_start(job[0], summary))

    return [j for j in jobs if not done(j)]


def set_aside(job: tuple, workdir: Path) -> None:
    """Renames a finished run of ``job`` in the workdir (one from another SFT start, trained again)
    to ``<run>.other_start``, so that the job trains afresh and nothing is lost."""
    path = run_dir(workdir, *job)
    if finished(*job, workdir) is not None:
        aside = path.with_name(f"{path.name}.other_start")
        if aside.exists():
            raise SystemExit(f"{aside}: already there; move it away to train {path} again")
        path.rename(aside)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setting", nargs="+", default=[], choices=SETTINGS)
    parser.add_argument("--methods", nargs="+", default=None, choices=METHODS, help="default: the setting's")
    parser.add_argument("--seeds", nargs="+", type=int, default=None, help="default: the setting's")
    parser.add_argument("--workdir", type=Path, default=ROOT / "runs" / "learning_hard")
    parser.add_argument("--jobs", type=int, default=1, help="runs trained at once (2 fills a 2-core CPU best)")
    parser.add_argument("--report", action="store_true", help="train nothing: write the results from the finished runs")
    parser.add_argument("--commit", action="store_true", help="git-commit the results files after each finished run")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--same-start", action="store_true",
                        help="train again the finished runs whose SFT start is not the one kept with the results "
                             "(a run in the workdir is renamed <run>.other_start first)")
    args = parser.parse_args()

    start = time.perf_counter()
    workdir = args.workdir.resolve()
    jobs = [] if args.report else to_train(args.setting, args.methods, args.seeds, workdir,
                                           recorded_before() | recorded(args.out),
                                           args.same_start)
    for job in jobs:
        set_aside(job, workdir)
    seed_sft_cache(workdir, sorted({setting for setting, _, _ in jobs}))
    results = None  # written (and committed) as each run finishes; else once, below
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(train, *j, workdir): j for j in jobs}
        for future in as_completed(futures):
            setting, method, seed = futures[future]
            try:
                summary = future.result()
            except RuntimeError as error:  # one failed run (its train.log says why) stops no other
                print(error, flush=True)
                continue
            results = write(workdir, args.out, time.perf_counter() - start)  # as_completed yields here, in this thread
            print(f"{setting} {method} seed {seed}: eval return {summary['eval_return_before']:.2f} -> "
                  f"{summary['eval_return_after']:.2f}, {summary['env_samples']} env samples", flush=True)
            if args.commit:
                commit_files([args.out / f for f in FILES], f"learning_hard: {setting} {method} seed {seed} finished "
                             f"(eval return {summary['eval_return_before']:.2f} -> {summary['eval_return_after']:.2f})")
    if results is None:
        results = write(workdir, args.out, time.perf_counter() - start)
    print(markdown(results))


if __name__ == "__main__":
    main()
