"""Several processes (hosts) training one run: start-up, this host's share, and gathering.

A run is multi-process on a TPU pod slice (every worker runs the same command), or when it is
given a coordinator: ``--coordinator=host:port --num_processes=N --process_id=i`` on the train
command, or the environment variables ``ARCHER_JAX_COORDINATOR``, ``ARCHER_JAX_NUM_PROCESSES``
and ``ARCHER_JAX_PROCESS_ID``. :func:`initialize` then calls ``jax.distributed.initialize`` before
any computation. How the work divides (``docs/multihost.md``):

* rollouts and evaluations: each host plays its contiguous share of the games
  (:func:`host_share`) through its own env worker pool and a sampler on its own devices; every
  dialogue's samples come from a key folded with its global game index, so they do not depend on
  the number of hosts. The episodes are then gathered to every host (:func:`allgather_objects`).
* the replay buffer: every host keeps a replica of the whole buffer (it adds every gathered
  episode) and draws the same sample with the same generator, so a step's global batch is the one
  a single process would draw.
* learner steps: a step's batch is one global array on the run's mesh; each host samples the
  fresh ``a_π`` of its share of the rows, and the rows are gathered before the batch is laid out.
* checkpoints: every host writes and restores its shards of the networks (orbax); the primary
  host writes the replay buffer (every host reads it back), the summary, plots and TensorBoard.

A host that dies (killed, preempted) breaks the next exchange on every other host: each survivor
ends at once with one line naming the process that stopped responding (:func:`lost_host`,
:class:`HostLost`, :func:`exit_at_once`), instead of waiting at JAX's shutdown barrier for the dead
one and then aborting. The same command on every host resumes from the last intact checkpoint.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import re
import socket
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, NoReturn

import jax
import numpy as np

from archer_jax.errors import TrainingError

log = logging.getLogger(__name__)

ENV = dict(coordinator="ARCHER_JAX_COORDINATOR", num_processes="ARCHER_JAX_NUM_PROCESSES",
           process_id="ARCHER_JAX_PROCESS_ID")


class DistributedError(ValueError):
    """The multi-process settings are incomplete or inconsistent; the message names them."""


class DivergenceError(TrainingError):
    """Hosts that should hold identical replicas do not (the message names them)."""


class HostLost(TrainingError):
    """Another process of the run stopped responding (the message names it and the checkpoint to
    resume from); the CLI ends this process at once with that line (:func:`exit_at_once`)."""


# Every process's host name and pid, by process index, exchanged at start-up (to name a dead one).
_IDENTITIES: dict[int, dict[str, Any]] = {}
# What a broken exchange with another process says: gloo's closed or reset connections, the
# coordination service's unavailable peers and missed heartbeats.
_LOST_SIGNS = ("Gloo", "Connection closed by peer", "Connection reset by peer", "heartbeat", "UNAVAILABLE",
               "Socket closed", "failed to connect")


def _cluster_detected() -> list[str]:
    """The clusters JAX recognises and could initialise itself (Cloud TPU VMs and pod slices, GKE
    TPU, SLURM, Open MPI, Kubernetes), by name; empty when there is none. Opt-in ones (mpi4py, present
    wherever it is installed) are left out, as JAX's own detection leaves them out."""
    try:
        from jax._src import clusters

        return [env.__name__ for env in clusters.ClusterEnv._cluster_types
                if not getattr(env, "opt_in_only_method", False) and env.is_env_present()]
    except (ImportError, AttributeError):  # a JAX without that module: only explicit settings
        return []


def settings(coordinator: str | None = None, num_processes: int | None = None,
             process_id: int | None = None, environ=os.environ) -> dict[str, Any] | None:
    """The explicit multi-process settings (arguments first, then ``ARCHER_JAX_*`` variables), or
    None when none is given; a :class:`DistributedError` when only some are."""
    given = dict(coordinator=coordinator, num_processes=num_processes, process_id=process_id)
    for name, variable in ENV.items():
        if given[name] is None and environ.get(variable):
            given[name] = environ[variable]
    if all(v is None for v in given.values()):
        return None
    missing = [f"--{name} ({ENV[name]})" for name, v in given.items() if v is None]
    if missing:
        raise DistributedError(f"multi-process training needs {', '.join(missing)} as well")
    try:
        count, index = int(given["num_processes"]), int(given["process_id"])
    except ValueError:
        raise DistributedError(f"--num_processes and --process_id must be integers, got {given['num_processes']!r}, "
                               f"{given['process_id']!r}") from None
    if count < 1 or not 0 <= index < count:
        raise DistributedError(f"--process_id must be in [0, --num_processes={count}), got {index}")
    return dict(coordinator_address=str(given["coordinator"]), num_processes=count, process_id=index)


def initialize(coordinator: str | None = None, num_processes: int | None = None, process_id: int | None = None) -> bool:
    """Starts JAX's distributed runtime when the run is multi-process (explicit settings, or a
    cluster JAX detects); returns whether it did. Call before any computation."""
    explicit = settings(coordinator, num_processes, process_id)
    detected = [] if explicit else _cluster_detected()
    if explicit is None and not detected:
        return False
    try:  # CPU devices of different processes talk through gloo (GPU and TPU programs are unaffected)
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    except (AttributeError, ValueError):
        pass
    timeout = start_timeout()
    watchdog = StartWatchdog(timeout, explicit)
    watchdog.start()
    try:  # JAX's own deadline is later: it aborts the process (a C++ stack), the watchdog ends it in one line
        jax.distributed.initialize(**(explicit or {}), initialization_timeout=timeout + 60)
    except ValueError as e:  # a cluster environment that is no multi-process job: JAX finds no coordinator
        if explicit:
            raise
        log.warning("JAX recognised a cluster (%s) but could not start a multi-process run from it (%s); training "
                    "as one process (--coordinator, --num_processes and --process_id start several)",
                    ", ".join(detected), e)
        return False
    finally:
        watchdog.stop()
    _exchange_identities()
    log.info("process %d of %d: %d local devices, %d in all", jax.process_index(), jax.process_count(),
             jax.local_device_count(), jax.device_count())
    return True


START_TIMEOUT_ENV = "ARCHER_JAX_START_TIMEOUT"  # seconds every process may take to join (default 300)


def start_timeout(environ=os.environ) -> int:
    """How long a process waits for the others to join (``ARCHER_JAX_START_TIMEOUT``, seconds)."""
    text = environ.get(START_TIMEOUT_ENV, "300")
    try:
        value = int(text)
    except ValueError:
        raise DistributedError(f"{START_TIMEOUT_ENV}: must be a whole number of seconds, got {text!r}") from None
    if value < 1:
        raise DistributedError(f"{START_TIMEOUT_ENV}: must be >= 1, got {value}")
    return value


class StartWatchdog(threading.Thread):
    """While a process joins a multi-process run: says what it waits for after a few seconds and
    every 30 s, and at ``timeout`` ends the process with one line (JAX would abort it later with a
    C++ stack trace and no word of what was missing)."""

    FIRST_S, EVERY_S = 5.0, 30.0

    def __init__(self, timeout: int, explicit: dict[str, Any] | None):
        super().__init__(name="archer_jax start watchdog", daemon=True)
        self.timeout, self.done = timeout, threading.Event()
        if explicit:
            me, count, address = explicit["process_id"], explicit["num_processes"], explicit["coordinator_address"]
            self.who = f"process {me} of {count}"
            self.waits_for = (f"the other {count - 1} process(es) to connect to this coordinator at {address}" if me == 0
                              else f"the coordinator (process 0) at {address} and the other processes")
        else:
            self.who, self.waits_for = "this host", "the other hosts of the cluster JAX detected"

    def run(self) -> None:
        start, wait = time.monotonic(), self.FIRST_S
        while not self.done.wait(min(wait, max(0.0, self.timeout - (time.monotonic() - start)))):
            waited = time.monotonic() - start
            if waited >= self.timeout:
                sys.stderr.write(
                    f"error: {self.who}: the multi-process run did not start within {self.timeout} s, waiting for "
                    f"{self.waits_for}; start every process with the same --coordinator and --num_processes and its own "
                    f"--process_id, and check that the coordinator's port is reachable ({START_TIMEOUT_ENV} sets the "
                    "wait)\n")
                sys.stderr.flush()
                os._exit(1)
            log.warning("%s: waiting for %s (%.0f s of %d s)", self.who, self.waits_for, waited, self.timeout)
            wait = self.EVERY_S

    def stop(self) -> None:
        self.done.set()


def _identity() -> dict[str, Any]:
    """This process's host name, its addresses and pid."""
    host = socket.gethostname()
    try:
        addresses = sorted(set(socket.gethostbyname_ex(host)[2]))
    except OSError:
        addresses = []
    return dict(host=host, addresses=addresses, pid=os.getpid())


def _exchange_identities(timeout_s: float = 60.0) -> None:
    """Publishes this process's :func:`_identity` through JAX's coordination service and keeps
    every process's (so that a survivor can name a dead one without asking anyone)."""
    try:
        from jax._src.distributed import global_state

        client, me = global_state.client, jax.process_index()
        client.key_value_set(f"archer_jax/identity/{me}", json.dumps(_identity()))
        for i in range(jax.process_count()):
            _IDENTITIES[i] = json.loads(client.blocking_key_value_get(f"archer_jax/identity/{i}", int(timeout_s * 1000)))
    except Exception as e:  # a JAX without this client: a dead process is named by its index alone
        log.warning("could not exchange host names between processes (%s); a process that stops responding "
                    "is named by its index only", str(e).splitlines()[0] if str(e) else type(e).__name__)


def describe_process(index: int) -> str:
    """``process 1 of 2 (host NAME, pid 123)``; the coordinator's address for process 0."""
    known = _IDENTITIES.get(index)
    details = [f"host {known['host']}", f"pid {known['pid']}"] if known else []
    if index == 0:
        try:  # JAX's private state: a JAX without it names the coordinator by its index alone
            from jax._src.distributed import global_state

            address = getattr(global_state, "coordinator_address", None)
        except ImportError:
            address = None
        if address:
            details.append(f"the coordinator at {address}")
    return f"process {index} of {jax.process_count()}" + (f" ({', '.join(details)})" if details else "")


def _short_reason(error: BaseException) -> str:
    """An error's first line without its status code and source locations."""
    line = next((part.strip() for part in str(error).splitlines() if part.strip()), type(error).__name__)
    line = re.sub(r"^[A-Z_]+: ", "", line)
    return re.sub(r"\[[\w./-]+\.(?:cc|h|cpp):\d+\] ", "", line)


def lost_host(error: BaseException) -> str | None:
    """When ``error`` (of a multi-process run) says another process stopped responding: that
    process in words (:func:`describe_process`, or its address where several could be meant)
    and what failed; None for any other error. Only a runtime error (JAX's are) qualifies: a bug's
    exception that happens to say "heartbeat" keeps its traceback."""
    if (not multiprocess() or not isinstance(error, RuntimeError)
            or not any(sign in str(error) for sign in _LOST_SIGNS)):
        return None
    text, me = str(error), jax.process_index()
    others = [i for i in range(jax.process_count()) if i != me]
    task = re.search(r"[Tt]ask[s]? (\d+)", text)
    address = re.search(r"\[([0-9A-Fa-f.:]+)\]:(\d+)", text)
    if task and int(task.group(1)) in others:
        candidates = [int(task.group(1))]
    elif len(others) == 1:
        candidates = others
    elif address:  # several hosts: the one whose address the broken connection names, if only one has it
        candidates = [i for i in others if address.group(1) in _IDENTITIES.get(i, {}).get("addresses", ())]
    else:
        candidates = []
    if len(candidates) == 1:
        who = describe_process(candidates[0])
    else:
        who = f"the process at {address.group(1)}" if address else "another process"
    return f"{who} stopped responding ({_short_reason(error)})"


def exit_at_once(line: str, code: int = 1) -> NoReturn:
    """Writes ``line`` to stderr and ends this process now: a normal exit would first wait at JAX's
    shutdown barrier for every process, which a dead one never reaches (JAX then aborts)."""
    logging.shutdown()  # flushes the log handlers
    sys.stdout.flush()
    sys.stderr.write(line.rstrip("\n") + "\n")
    sys.stderr.flush()
    os._exit(code)


def is_primary() -> bool:
    """Whether this process writes the run's reports (process 0)."""
    return jax.process_index() == 0


def multiprocess() -> bool:
    return jax.process_count() > 1


def barrier(name: str) -> None:
    """Waits until every process reaches ``name`` (nothing to wait for in one process)."""
    if multiprocess():
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def host_share(n: int, index: int | None = None, count: int | None = None) -> range:
    """This host's contiguous share of ``n`` items: near-equal, the first hosts one more when
    ``n`` does not divide (host ``index`` of ``count``; default: this process)."""
    index = jax.process_index() if index is None else index
    count = jax.process_count() if count is None else count
    base, extra = divmod(n, count)
    start = index * base + min(index, extra)
    return range(start, start + base + (index < extra))


def allgather_objects(obj: Any) -> list[Any]:
    """Every process's ``obj`` (picklable), in process order, on every process."""
    if not multiprocess():
        return [obj]
    from jax.experimental import multihost_utils

    data = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
    sizes = multihost_utils.process_allgather(np.int64(data.size))
    padded = np.zeros(int(sizes.max()), np.uint8)
    padded[: data.size] = data
    gathered = multihost_utils.process_allgather(padded)
    return [pickle.loads(gathered[i, : int(sizes[i])].tobytes()) for i in range(len(sizes))]


def concat_gathered(items: Sequence[Any]) -> list[Any]:
    """This host's list of items joined with every other host's, in process order."""
    return [item for part in allgather_objects(list(items)) for item in part]


def _leaf_digests(tree: Any) -> list[tuple[str, str]]:
    """(path, SHA-256) of this process's copy of each fully replicated array in ``tree`` (an array
    split across hosts has no whole copy here and is left out)."""
    import hashlib

    out = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if isinstance(leaf, jax.Array):
            if not leaf.sharding.is_fully_replicated:
                continue
            data = np.asarray(leaf.addressable_shards[0].data)
        else:
            data = np.asarray(leaf)
            if data.dtype == object:  # not a numeric leaf (its bytes would be addresses)
                continue
        name = jax.tree_util.keystr(path) or f"leaf {len(out)}"
        out.append((f"{name} {data.dtype}{list(data.shape)}", hashlib.sha256(data.tobytes()).hexdigest()))
    return out


def digest(tree: Any) -> str:
    """One SHA-256 over this process's copies of the fully replicated arrays in ``tree``."""
    import hashlib

    return hashlib.sha256("".join(d for _, d in _leaf_digests(tree)).encode()).hexdigest()


def assert_hosts_agree(tree: Any, what: str) -> str:
    """The :func:`digest` of ``tree``, after checking that every host computed the same one; a
    :class:`DivergenceError` names the hosts and the first array that differ."""
    mine = _leaf_digests(tree)
    every = allgather_objects(mine)
    differing = [i for i, d in enumerate(every) if d != every[0]]
    if differing:
        other = every[differing[0]]
        first = next((path for (path, a), (_, b) in zip(every[0], other) if a != b),
                     f"{len(every[0])} arrays on host 0, {len(other)} on host {differing[0]}")
        raise DivergenceError(f"{what}: hosts {differing} hold different values than host 0 (first: {first})")
    return digest(tree)
