"""One run per workdir (archer_jax/records/workdir_lock.py): a second run on a locked workdir is refused in
one line, a lock left by a process that is gone is taken over with a warning, and the lock goes
with the run (tests/run/test_train_app.py checks that a finished run leaves none)."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from archer_jax.errors import TrainingError
from archer_jax.records import workdir_lock
from archer_jax.records.workdir_lock import LOCK, WorkdirInUse, WorkdirLock

ROOT = Path(__file__).resolve().parents[2]


def write_lock(workdir: Path, **holder) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / LOCK).write_text(json.dumps(holder))


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


def test_a_second_run_on_a_locked_workdir_is_refused_in_one_line(tmp_path):
    with WorkdirLock(tmp_path) as first:
        holder = json.loads((tmp_path / LOCK).read_text())
        assert holder["host"] == socket.gethostname() and holder["pid"] == os.getpid()
        with pytest.raises(WorkdirInUse) as refused:
            WorkdirLock(tmp_path).acquire()
        message = str(refused.value)
        assert "\n" not in message
        assert message.startswith(f"--workdir {tmp_path} is in use by the run started at "
                                  f"{time.strftime('%Y-%m-%d', time.localtime(holder['started']))}")
        assert f"on host {socket.gethostname()}, pid {os.getpid()}; stop that run first" in message
        assert json.loads((tmp_path / LOCK).read_text())["token"] == first.token  # the refusal changed nothing
    assert not (tmp_path / LOCK).exists()


def test_the_train_command_refuses_a_workdir_held_by_a_live_process(tmp_path):
    """The lock of a live process (this test's) on this host: the command's last and only error line."""
    start = workdir_lock._process_start(os.getpid())
    write_lock(tmp_path, host=socket.gethostname(), pid=os.getpid(), process_start=start, started=1.0e9,
               refreshed=time.time(), token="other")
    done = subprocess.run([sys.executable, "-m", "archer_jax.train", f"--config={ROOT / 'configs' / '20q.py'}:micro",
                           f"--workdir={tmp_path}"], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "JAX_PLATFORMS": "cpu", "HF_HUB_OFFLINE": "1"})
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:") or "Traceback" in line]
    assert done.returncode != 0 and len(errors) == 1, done.stderr[-3000:]
    assert errors[0].startswith(f"error: --workdir {tmp_path} is in use by the run started at "), errors
    assert f"on host {socket.gethostname()}, pid {os.getpid()};" in errors[0]
    assert json.loads((tmp_path / LOCK).read_text())["token"] == "other"
    assert not (tmp_path / "checkpoints").exists()


def test_a_lock_of_a_dead_process_on_this_host_is_taken_over_with_a_warning(tmp_path, caplog):
    pid = dead_pid()
    write_lock(tmp_path, host=socket.gethostname(), pid=pid, process_start="1", started=1.0e9, refreshed=time.time())
    with caplog.at_level(logging.WARNING, logger="archer_jax"), WorkdirLock(tmp_path):
        assert json.loads((tmp_path / LOCK).read_text())["pid"] == os.getpid()
    assert f"pid {pid}, which is no longer running: taking it over" in caplog.text
    assert not (tmp_path / LOCK).exists()


def test_a_reused_pid_does_not_keep_the_lock(tmp_path, caplog):
    """A live pid whose process started at another time is not the run that wrote the lock."""
    if workdir_lock._process_start(os.getpid()) is None:
        pytest.skip("no /proc: process start times are unknown here")
    write_lock(tmp_path, host=socket.gethostname(), pid=os.getpid(), process_start="-1", started=1.0e9,
               refreshed=time.time())
    with caplog.at_level(logging.WARNING, logger="archer_jax"), WorkdirLock(tmp_path):
        pass
    assert "no longer running: taking it over" in caplog.text


def test_another_hosts_lock_holds_while_it_is_refreshed_and_is_taken_over_when_stale(tmp_path, caplog):
    write_lock(tmp_path, host="another-host", pid=1234, started=1.0e9, refreshed=time.time() - 10)
    with pytest.raises(WorkdirInUse, match=r"on host another-host, pid 1234 \(its lock .* counts as stale 180 s"):
        WorkdirLock(tmp_path).acquire()
    write_lock(tmp_path, host="another-host", pid=1234, started=1.0e9, refreshed=time.time() - 181)
    with caplog.at_level(logging.WARNING, logger="archer_jax"), WorkdirLock(tmp_path):
        pass
    assert "on host another-host, pid 1234, which is no longer running: taking it over" in caplog.text


def test_two_runs_that_find_one_stale_lock_do_not_both_take_it(tmp_path):
    write_lock(tmp_path, host="another-host", pid=1234, started=1.0e9, refreshed=time.time() - 1000)
    late, early = WorkdirLock(tmp_path), WorkdirLock(tmp_path)
    stale = (tmp_path / LOCK).read_bytes()  # both judged it stale; the early one takes it over first
    early.acquire()
    try:
        workdir_lock._take_over(late.path, late.token, stale)  # the late one moves aside the file it finds: the early one's, put back
        assert json.loads((tmp_path / LOCK).read_text())["token"] == early.token
        with pytest.raises(WorkdirInUse, match="is in use by the run started at"):
            late.acquire()
    finally:
        early.release()
    assert not list(tmp_path.glob(f"{LOCK}*"))  # no lock, no temporary or moved-aside file left


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2, 3]", b'"a string"', b"null", b"", bytes(range(256)),
                                     b'{"pid": "x", "host": 7}'])
def test_a_lock_of_any_content_is_taken_over_once(tmp_path, caplog, content):
    """Garbage, JSON that is no holder, bytes that are not UTF-8: taken over with one warning."""
    (tmp_path / LOCK).write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="archer_jax"), WorkdirLock(tmp_path) as lock:
        assert lock.read()["token"] == lock.token
    assert caplog.text.count("which is no longer running: taking it over") == 1, caplog.text
    assert not list(tmp_path.glob(f"{LOCK}*"))


def test_the_lock_is_refreshed_and_released_when_the_run_fails(tmp_path):
    with pytest.raises(RuntimeError, match="boom"), WorkdirLock(tmp_path, refresh_s=0.05):
        first = json.loads((tmp_path / LOCK).read_text())["refreshed"]
        deadline = time.time() + 30
        while json.loads((tmp_path / LOCK).read_text())["refreshed"] == first and time.time() < deadline:
            time.sleep(0.05)
        assert json.loads((tmp_path / LOCK).read_text())["refreshed"] > first
        raise RuntimeError("boom")
    assert not (tmp_path / LOCK).exists() and not list(tmp_path.glob(f"{LOCK}.*"))


def test_a_workdir_that_cannot_hold_a_lock_is_one_line(tmp_path):
    missing = tmp_path / "not" / "made"
    with pytest.raises(TrainingError, match=rf"^--workdir {missing}: cannot write its lock file {missing / LOCK}: "):
        WorkdirLock(missing).acquire()


HOST = """
import sys
import jax
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(sys.argv[1], 2, int(sys.argv[2]))
from archer_jax.records.workdir_lock import WorkdirInUse, WorkdirLock
try:
    with WorkdirLock(sys.argv[3]) as lock:
        print("held" if lock.held else "shared", flush=True)
except WorkdirInUse as e:
    print("error:", e, flush=True)
"""


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
def test_the_processes_of_one_run_share_the_lock_and_all_refuse_a_held_workdir(tmp_path):
    """Two processes (jax.distributed on localhost): the primary holds the lock, the other does not
    refuse its own run; on a workdir another run holds, both stop with the same line."""
    from tests.run.test_multihost import free_port

    def both() -> list[str]:
        port = free_port()
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "3"}
        hosts = [subprocess.Popen([sys.executable, "-c", HOST, f"localhost:{port}", str(i), str(tmp_path)],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env) for i in range(2)]
        return [host.communicate(timeout=120)[0].strip().splitlines()[-1] for host in hosts]  # after gloo's lines

    assert both() == ["held", "shared"]
    assert not (tmp_path / LOCK).exists()
    write_lock(tmp_path, host="another-host", pid=1234, started=1.0e9, refreshed=time.time())
    first, second = both()
    assert first == second and first.startswith(f"error: --workdir {tmp_path} is in use by the run started at ")
