"""python -m archer_jax.evaluate and python -m archer_jax.play on a finished micro run: seed 0
replays the run's own logged evaluations (greedy and sampled) of its last checkpoint exactly,
another seed plays other games, the JSON holds every dialogue, the policy exports to a Hugging
Face directory, a person can answer as the oracle, and bad input is one line; the run's own
evaluations wrote example dialogues."""

from __future__ import annotations

import json
import re

import pytest

from archer_jax import evaluate, play
from archer_jax.errors import ConfigError
from archer_jax.trained import TrainedRun
from archer_jax.train import train_and_evaluate
from tests.run.test_train_app import micro

pytestmark = pytest.mark.slow
METRICS = ("return", "success", "invalid", "length")


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("run")
    summary = train_and_evaluate(micro(iterations=2, save_freq=1, eval_sampled=True), workdir)
    return workdir, summary


@pytest.fixture(scope="module")
def last(finished):
    """The run's newest checkpoint, loaded once for the tests below."""
    with TrainedRun.load(finished[0]) as run:
        yield run


def test_the_command_replays_the_runs_greedy_evaluation_and_prints_dialogues(finished, capsys):
    workdir, summary = finished
    size = micro().eval_size
    assert evaluate.main(["--workdir", str(workdir), "--episodes", str(size), "--dialogues", "1"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    written = workdir / "evaluations" / "checkpoint_2_greedy_seed0.json"
    assert out[-1].startswith(f"checkpoint 2 of {workdir} (archer on twenty_questions_subset): {size} greedy games, "
                              "seed 0: return ") and out[-1].endswith(f"; wrote {written}")
    assert out[0] == "== game 1000000 ==" and out[1] == "Questions:"
    record = json.loads(written.read_text())
    assert {k: record["metrics"][k] for k in METRICS} == {k: summary["evals"][-1][f"eval/{k}"] for k in METRICS}
    assert len(record["dialogues"]) == size and record["dialogues"][0]["actions"]


def test_sampled_replays_the_runs_sampled_evaluation_another_seed_plays_other_games(finished, last, tmp_path):
    _, summary = finished
    size = micro().eval_size
    record = evaluate.evaluate(last, episodes=size, sampled=True, export_policy=tmp_path / "policy")
    assert {k: record["metrics"][k] for k in METRICS} == {k: summary["evals"][-1][f"eval_sampled/{k}"] for k in METRICS}
    other = evaluate.evaluate(last, episodes=3, seed=5, sampled=True)
    assert other["dialogues"] == evaluate.evaluate(last, episodes=3, seed=5, sampled=True)["dialogues"]  # reproducible
    assert [d["seed"] for d in other["dialogues"]] != [10**6, 10**6 + 1, 10**6 + 2]
    from archer_jax import models

    assert models.load_gpt2(record["exported_policy"]) is not None and (tmp_path / "policy" / "config.json").is_file()


def test_an_older_checkpoint_and_bad_input(finished, tmp_path, capsys):
    workdir, _ = finished
    assert evaluate.evaluate(workdir, checkpoint=1, episodes=1)["checkpoint"] == 1
    assert evaluate.main(["--workdir", str(tmp_path / "nothing")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: --workdir: {tmp_path / 'nothing'} has no readable config.json; it is not a run's workdir "
        "(python -m archer_jax.train writes one there)"]
    assert evaluate.main(["--workdir", str(workdir), "--checkpoint", "7"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: --checkpoint: {workdir} has no checkpoint 7; it has 1, 2"]


def test_a_person_answers_as_the_oracle(last):
    prompts, said = [], []
    replies = iter(["dog"] + ["n"] * 20)

    def ask(prompt: str) -> str:
        prompts.append(prompt)
        return next(replies)

    ended = play.play(last, ask, said.append)
    closing = said[-1]
    with pytest.raises(ConfigError, match=r"^secret: 'unicorn' is not one of the env's 10 \(e.g. 'Football'\)$"):
        play.play(last, lambda prompt: "unicorn", said.append)
    greedy = last.play(1, seed=0)[0]  # the same policy on its own oracle: its first question is the same
    assert said[0].startswith("Think of one of these and type it") and "Dog" in said[0]
    assert prompts[0] == "your secret: "
    questions = [p.split("\n")[0] for p in prompts[1:]]
    max_turns = micro().env.max_turns
    assert ended == dict(ended="ran out of questions", turns=max_turns, success=False)
    assert len(questions) == max_turns and greedy.next_observations[0].splitlines()[1].startswith(questions[0])
    assert closing == f"the policy ran out of questions in {max_turns} questions (return {-max_turns})"


def test_each_evaluation_of_the_run_wrote_example_dialogues(finished):
    workdir, summary = finished
    iterations = [e["iteration"] for e in summary["evals"]]
    assert sorted(p.name for p in (workdir / "dialogues").iterdir()) == [f"iteration_{i:04d}.txt" for i in iterations]
    text = (workdir / "dialogues" / f"iteration_{iterations[-1]:04d}.txt").read_text()
    assert text.startswith(f"evaluation after iteration {iterations[-1]}\n\ngame 1 (greedy):\nQuestions:\n")
    assert text.count("(greedy):") == 3 and text.count("(sampled):") == 3
    assert len(re.findall(r"\n-- (won|lost|cut short): return -?\d+ in \d+ turns", text)) == 6
