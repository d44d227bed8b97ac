"""Two processes on localhost train one run (jax.distributed with a local coordinator, 2 CPU
devices each): one killed after a checkpoint, the other ends with one line naming it; resumed,
they end where one process with the same 4 devices ends, and hold the same parameters (the app
checks a digest at every checkpoint)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from archer_jax.records.checkpoint import Checkpoints
from archer_jax.runtime import distributed
from tests.run.test_train_app import CONFIG, micro, restored, without_time

pytestmark = pytest.mark.slow

FLAGS = ("--config.iterations=2", "--config.save_freq=1", "--config.eval_freq=2", "--config.sft.steps=2")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def env_with_devices(devices: int) -> dict[str, str]:
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if "xla_force_host_platform_device_count" not in f]
    return {**os.environ, "XLA_FLAGS": " ".join([*flags, f"--xla_force_host_platform_device_count={devices}"]),
            "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "3"}


def command(workdir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "archer_jax.train", f"--config={CONFIG}:micro", f"--workdir={workdir}", *FLAGS, *extra]


def start_hosts(workdir: Path, logs: Path, processes: int = 2) -> list[subprocess.Popen]:
    port = free_port()
    return [
        subprocess.Popen(command(workdir, f"--coordinator=localhost:{port}", f"--num_processes={processes}",
                                 f"--process_id={i}"),
                         env=env_with_devices(2), stdout=subprocess.DEVNULL, stderr=open(logs / f"host{i}.log", "w"))
        for i in range(processes)
    ]


def wait_all(hosts: list[subprocess.Popen], logs: Path, timeout: float = 600) -> None:
    deadline = time.time() + timeout
    for i, host in enumerate(hosts):
        try:
            host.wait(max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            for h in hosts:
                h.kill()
            raise AssertionError(f"host {i} timed out:\n{(logs / f'host{i}.log').read_text()[-3000:]}")
        assert host.returncode == 0, f"host {i} failed:\n{(logs / f'host{i}.log').read_text()[-3000:]}"


def complete(workdir: Path) -> set[int]:
    directory = workdir / "checkpoints"
    return {int(p.name) for p in directory.iterdir() if p.name.isdigit()} if directory.is_dir() else set()


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """The reference: one process with the same 4 devices and the same global batches."""
    workdir = tmp_path_factory.mktemp("one_process")
    done = subprocess.run(command(workdir), env=env_with_devices(4), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return workdir


def test_two_hosts_killed_and_resumed_match_one_process(one_process, tmp_path):
    workdir, logs = tmp_path / "run", tmp_path
    hosts = start_hosts(workdir, logs)
    deadline = time.time() + 600
    while 1 not in complete(workdir) or not Checkpoints(workdir / "checkpoints").latest():
        assert all(h.poll() is None for h in hosts), "a host ended before its first checkpoint:\n" + \
            (logs / "host0.log").read_text()[-3000:] + (logs / "host1.log").read_text()[-3000:]
        assert time.time() < deadline, "no checkpoint after 10 minutes"
        time.sleep(0.05)
    hosts[1].send_signal(signal.SIGKILL)  # host 1 dies after checkpoint 1 (a preempted VM)
    hosts[1].wait()
    try:  # host 0 notices at its next exchange with host 1 and ends with one line
        hosts[0].wait(300)
    except subprocess.TimeoutExpired:
        hosts[0].kill()
        raise AssertionError("host 0 did not stop after host 1 died:\n" + (logs / "host0.log").read_text()[-3000:])
    survivor = (logs / "host0.log").read_text()
    last = [line for line in survivor.splitlines() if line.strip()][-1]
    assert re.fullmatch(r"error: process 1 of 2 \(host [^,]+, pid \d+\) stopped responding \(Gloo .+\) at iteration 2; "
                        r"checkpoint 1 is intact: the same command on every host resumes from it", last), survivor[-3000:]
    assert "Traceback" not in survivor and "Fatal Python error" not in survivor, survivor[-3000:]
    assert 2 not in complete(workdir)

    hosts = start_hosts(workdir, logs)  # the same command resumes
    wait_all(hosts, logs)
    assert "resumed from" in (logs / "host0.log").read_text()

    c = micro(iterations=2, save_freq=1, eval_freq=2, sft__steps=2)
    actor, critic, replay, loop = restored(workdir, c)
    ref_actor, ref_critic, ref_replay, ref_loop = restored(one_process, c)
    assert loop["iteration"] == ref_loop["iteration"] == 2
    # The hosts agreed on their parameters at every checkpoint (a digest each, the same on both).
    assert set(loop["host_digests"]) == {"0", "1", "2"} and not ref_loop["host_digests"]
    # The same games, samples and batches: the same metrics, the same parameters to float tolerance.
    assert loop["evals"] == ref_loop["evals"]
    assert replay.columns["action"][: len(replay)] == ref_replay.columns["action"][: len(ref_replay)]
    for row, ref in zip(without_time(loop["history"]), without_time(ref_loop["history"])):
        assert row.keys() == ref.keys()
        for key in ref:
            assert abs(row[key] - ref[key]) <= 1e-4 * max(1.0, abs(ref[key])), (key, row[key], ref[key])
    # Parameters to float tolerance, relative to each network's scale: the gradient all-reduce runs
    # across processes (gloo) instead of within one, so sums round differently, and Adam moves a
    # parameter whose gradient is ~0 by about the learning rate whatever that gradient's rounding.
    for ours, theirs in ((actor.params, ref_actor.params), (critic.params, ref_critic.params),
                         (critic.target, ref_critic.target)):
        scale = max(np.abs(np.asarray(b)).max() for b in jax.tree.leaves(theirs))
        error = max(np.abs(np.asarray(a) - np.asarray(b)).max() for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)))
        assert error <= 1e-5 * scale, (error, scale)
    # Only the primary host wrote the reports.
    assert (workdir / "summary.json").is_file() and (workdir / "history.jsonl").is_file()


def test_host_shares_and_settings():
    assert [list(distributed.host_share(10, i, 3)) for i in range(3)] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert [len(distributed.host_share(2, i, 4)) for i in range(4)] == [1, 1, 0, 0]
    assert distributed.settings(environ={}) is None
    assert distributed.settings("h:1", 2, 1, environ={}) == dict(coordinator_address="h:1", num_processes=2, process_id=1)
    env = {"ARCHER_JAX_COORDINATOR": "h:2", "ARCHER_JAX_NUM_PROCESSES": "4", "ARCHER_JAX_PROCESS_ID": "3"}
    assert distributed.settings(environ=env)["process_id"] == 3
    with pytest.raises(distributed.DistributedError, match=r"needs --num_processes \(ARCHER_JAX_NUM_PROCESSES\), "
                                                            r"--process_id \(ARCHER_JAX_PROCESS_ID\) as well"):
        distributed.settings("h:1", environ={})
    with pytest.raises(distributed.DistributedError, match=r"--process_id must be in \[0, --num_processes=2\), got 2"):
        distributed.settings("h:1", 2, 2, environ={})
    assert distributed.allgather_objects({"a": 1}) == [{"a": 1}]  # one process: itself


def test_lost_host_names_the_process(monkeypatch):
    monkeypatch.setattr(jax, "process_count", lambda: 3)
    monkeypatch.setattr(jax, "process_index", lambda: 0)
    monkeypatch.setattr(distributed, "_IDENTITIES", {
        0: dict(host="a", addresses=["10.0.0.1"], pid=10), 1: dict(host="b", addresses=["10.0.0.2"], pid=11),
        2: dict(host="c", addresses=["10.0.0.3"], pid=12)})
    gloo = RuntimeError("UNKNOWN: Gloo AllGather failed: [external/gloo/gloo/transport/tcp/pair.cc:547] "
                        "Connection closed by peer [10.0.0.3]:59312")
    assert distributed.lost_host(gloo) == ("process 2 of 3 (host c, pid 12) stopped responding "
                                           "(Gloo AllGather failed: Connection closed by peer [10.0.0.3]:59312)")
    heartbeat = RuntimeError("UNAVAILABLE: Task 1 heartbeat timeout. This indicates that the remote task has failed")
    assert distributed.lost_host(heartbeat).startswith("process 1 of 3 (host b, pid 11) stopped responding (Task 1 ")
    unknown = RuntimeError("Gloo AllGather failed: Connection closed by peer [10.9.9.9]:1")
    assert distributed.lost_host(unknown).startswith("the process at 10.9.9.9 stopped responding")
    assert distributed.lost_host(ValueError("operands could not be broadcast together")) is None
    assert distributed.lost_host(KeyError("Gloo heartbeat UNAVAILABLE")) is None  # a bug's error, not a lost host
    monkeypatch.setattr(jax, "process_count", lambda: 1)  # one process: no other host to lose
    assert distributed.lost_host(gloo) is None


def test_missing_settings_are_one_line(tmp_path):
    done = subprocess.run(command(tmp_path / "run", "--coordinator=localhost:1"), env=env_with_devices(2),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: multi-process training needs --num_processes")


class _ClusterWithoutCoordinator:
    """A cluster environment JAX recognises but cannot start from (no coordinator in it)."""
    name, opt_in_only_method = "no_coordinator", False
    is_env_present = staticmethod(lambda: True)
    get_coordinator_address = staticmethod(lambda **_: None)
    get_process_count = get_process_id = get_local_process_id = staticmethod(lambda: None)


def test_a_recognised_cluster_without_a_coordinator_trains_as_one_process(monkeypatch, caplog):
    from jax._src import clusters, xla_bridge

    monkeypatch.setattr(clusters.ClusterEnv, "_cluster_types", [_ClusterWithoutCoordinator])
    monkeypatch.setattr(xla_bridge, "backends_are_initialized", lambda: False)  # as at the start of a run
    assert distributed._cluster_detected() == ["_ClusterWithoutCoordinator"]
    with caplog.at_level("WARNING"):
        assert distributed.initialize() is False
    assert "recognised a cluster (_ClusterWithoutCoordinator)" in caplog.text and "training as one process" in caplog.text
    assert jax.process_count() == 1
    opt_in = type("OptIn", (_ClusterWithoutCoordinator,), dict(opt_in_only_method=True))  # as mpi4py's
    monkeypatch.setattr(clusters.ClusterEnv, "_cluster_types", [opt_in])
    caplog.clear()
    assert distributed._cluster_detected() == [] and distributed.initialize() is False
    assert "recognised a cluster" not in caplog.text  # no cluster: nothing to start, nothing said
