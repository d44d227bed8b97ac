"""One run per workdir: a lock file (``WORKDIR/run.lock``) that names the run holding it.

    with WorkdirLock(workdir):      # refuses (WorkdirInUse) while another live run holds it
        ...train...                 # released on every exit: return, error or signal

The file holds the holder's host, pid, the start of its process (so a reused pid is not taken for
it) and the time it started; a thread refreshes it every :data:`REFRESH_S` seconds. A lock left by
a process that is gone is taken over with a warning: on the same host when its pid is no longer
the same process, on another host (where a pid cannot be checked, e.g. a preempted TPU VM) when
it has not been refreshed for :data:`STALE_AFTER_S` seconds.

Several processes of one run (a pod slice) share the workdir: only the primary process holds the
lock, and every process learns its verdict, so a run never refuses itself and a second run's
processes all stop with the same line.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from archer_jax.errors import TrainingError
from archer_jax.runtime import distributed

log = logging.getLogger("archer_jax")

LOCK = "run.lock"
REFRESH_S = 60.0
STALE_AFTER_S = 3 * REFRESH_S  # another host's lock not refreshed for three rounds: its run is gone


class WorkdirInUse(TrainingError):
    """Another live run holds the workdir's lock; the message names its host, pid and start."""


def _process_start(pid: int) -> str | None:
    """When process ``pid`` started, in clock ticks since boot (Linux's /proc), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22 of stat; the fields after the name


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    except OSError:
        return False
    return True


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(t))


def _write(path: Path, token: str, holder: dict[str, Any], exclusive: bool) -> bool:
    """Writes the lock file ``path`` whole (``exclusive``: only if there is none); whether it was
    written. The holder goes to a file named by the lock's ``token`` first, then is published:
    linked into place when exclusive (so that no other run ever reads it half-written), renamed
    over it otherwise. A file system without hard links (gcsfuse) gets an exclusive create."""
    temp = path.with_name(f"{LOCK}.{token}")
    temp.write_bytes(json.dumps(holder).encode())
    if not exclusive:
        os.replace(temp, path)
        return True
    try:
        os.link(temp, path)
        return True
    except FileExistsError:
        return False
    except OSError:  # no hard links here
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(temp.read_bytes())
        return True
    finally:
        temp.unlink(missing_ok=True)


def _parse(raw: bytes) -> dict[str, Any]:
    """The holder a lock file's bytes name; {} for anything this module did not write whole."""
    try:
        holder = json.loads(raw.decode())
    except ValueError:  # not UTF-8 (UnicodeDecodeError) or not JSON
        return {}
    return holder if isinstance(holder, dict) else {}


def _take_over(path: Path, token: str, stale: bytes) -> None:
    """Moves the lock file whose bytes are ``stale`` aside, unless another run did first (then the
    file it moved is put back): two runs that find one stale lock never both take it. Compared as
    bytes, so that a file of any content (garbage, JSON that is no holder) is taken over once."""
    aside = path.with_name(f"{LOCK}.stale.{token}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:  # another run moved it first
        return
    try:
        moved = aside.read_bytes()
    except OSError:
        moved = None
    if moved != stale:  # a lock taken since we looked: it stays
        try:
            os.link(aside, path)
        except OSError:
            pass
    aside.unlink(missing_ok=True)


class WorkdirLock:
    """The lock on ``workdir`` (a context manager); see the module's docstring."""

    def __init__(self, workdir: str | Path, refresh_s: float = REFRESH_S, stale_after_s: float = STALE_AFTER_S):
        self.path = Path(workdir) / LOCK
        self.workdir = Path(workdir)
        self.refresh_s, self.stale_after_s = refresh_s, stale_after_s
        self.token = uuid.uuid4().hex
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.held = False

    # ---- the file --------------------------------------------------------------------------

    def _mine(self) -> dict[str, Any]:
        pid = os.getpid()
        now = time.time()
        return dict(host=socket.gethostname(), pid=pid, process_start=_process_start(pid), started=now,
                    refreshed=now, token=self.token)

    def read(self) -> dict[str, Any] | None:
        """The holder the lock file names (None when there is no file; {} when it is unreadable)."""
        raw = self._read_bytes()
        return None if raw is None else _parse(raw)

    def _read_bytes(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return None

    def _write(self, holder: dict[str, Any], exclusive: bool) -> bool:
        return _write(self.path, self.token, holder, exclusive)

    def live(self, holder: dict[str, Any]) -> bool:
        """Whether the run ``holder`` names may still be running."""
        try:
            pid = int(holder["pid"])
            if holder.get("host") == socket.gethostname():
                start = _process_start(pid)
                return _pid_alive(pid) and (start is None or holder.get("process_start") in (None, start))
            return time.time() - float(holder["refreshed"]) < self.stale_after_s
        except (KeyError, TypeError, ValueError):  # a file this module did not write whole
            return False

    # ---- taking and releasing ----------------------------------------------------------------

    def acquire(self) -> None:
        """Takes the lock (this process alone), or raises :class:`WorkdirInUse`."""
        try:
            for _ in range(5):  # another run may take or release it between two looks
                if self._write(self._mine(), exclusive=True):
                    break
                raw = self._read_bytes()
                if raw is None:
                    continue
                holder = _parse(raw)
                if self.live(holder):
                    raise WorkdirInUse(self._refusal(holder))
                log.warning("%s names %s, which is no longer running: taking it over", self.path,
                            self._describe(holder) if holder else "nothing readable")
                _take_over(self.path, self.token, raw)
            if (self.read() or {}).get("token") != self.token:
                raise WorkdirInUse(self._refusal(self.read() or {}))
        except OSError as e:
            raise TrainingError(f"--workdir {self.workdir}: cannot write its lock file {self.path}: "
                                f"{e.strerror or e}") from None
        self.held = True
        self._thread = threading.Thread(target=self._refresh, name="workdir-lock", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Removes the lock file if this lock holds it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.held:
            self.held = False
            try:
                if (self.read() or {}).get("token") == self.token:
                    self.path.unlink()
            except OSError as e:
                log.warning("could not remove the lock file %s: %s", self.path, e)

    def _refresh(self) -> None:
        while not self._stop.wait(self.refresh_s):
            try:
                holder = self.read()
                if not holder or holder.get("token") != self.token:
                    log.warning("%s no longer names this run (%s)", self.path,
                                self._describe(holder) if holder else "removed")
                    return
                self._write(dict(holder, refreshed=time.time()), exclusive=False)
            except OSError as e:
                log.warning("could not refresh the lock file %s: %s", self.path, e)

    def _describe(self, holder: dict[str, Any]) -> str:
        started = holder.get("started")
        when = _when(float(started)) if isinstance(started, (int, float)) else "an unknown time"
        return f"the run started at {when} on host {holder.get('host', '?')}, pid {holder.get('pid', '?')}"

    def _refusal(self, holder: dict[str, Any]) -> str:
        other_host = holder.get("host") != socket.gethostname()
        wait = (f" (its lock {self.path} counts as stale {self.stale_after_s:.0f} s after its last refresh)"
                if other_host else "")
        return (f"--workdir {self.workdir} is in use by {self._describe(holder)}{wait}; stop that run first "
                f"(SIGTERM saves a checkpoint; tpu/stop.sh on a TPU VM) or use another --workdir")

    # ---- one run, any number of processes ----------------------------------------------------

    def __enter__(self) -> WorkdirLock:
        refusal = None
        if distributed.is_primary():
            try:
                self.acquire()
            except TrainingError as e:
                refusal = (type(e).__name__, str(e))
        if distributed.multiprocess():  # every process stops, with the primary's line
            refusal = distributed.allgather_objects(refusal)[0]
        if refusal is not None:
            kind, message = refusal
            raise (WorkdirInUse if kind == WorkdirInUse.__name__ else TrainingError)(message)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
