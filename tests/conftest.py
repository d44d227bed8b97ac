"""Test-wide setup: no network, no progress bars, no tokenizer thread pools, 8 CPU devices."""

import os

# Tests never touch the network: Hugging Face reads these at import time.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Eight host devices, so that sharding tests run meshes such as (2, 2, 2) on a CPU. JAX reads
# this when it starts its CPU backend: it must be set before the first computation.
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

# Tests compile hundreds of small programs and run most of them once or twice: LLVM's optimisation
# of the CPU code then costs more than it saves (the suite ran about 10% faster without it). The
# HLO passes and fusions are the same at this level; float32 results can differ in their last bits
# (LLVM contracts and orders some arithmetic differently), which every tolerance here allows.
if "xla_backend_optimization_level" not in os.environ["XLA_FLAGS"]:
    os.environ["XLA_FLAGS"] += " --xla_backend_optimization_level=0"

# archer_jax's default XLA flags, as the train app sets them (importing archer_jax does not).
from archer_jax.runtime import xla_flags  # noqa: E402

xla_flags.set_default_flags()
xla_flags.quiet_tpu_probe()  # with libtpu installed (the test extra), no TPU backend probe here

# One persistent compilation cache for the whole session, this process and the training runs it
# starts as subprocesses: the training-app tests run the same programs several times.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    import tempfile

    import atexit
    import shutil

    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="archer_jax_test_jit_cache_")
    # One per session, removed at its end (each session used to leave one in /tmp).
    atexit.register(shutil.rmtree, os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"


# ---- the precision policy in tests -------------------------------------------------------------
# Tests that compare numbers with an independent reference (Hugging Face PyTorch, NumPy, one
# device against a mesh) run with float32 matmuls at "highest" precision, so they hold on GPUs
# (TF32 by default) and TPUs (one bfloat16 pass by default) as on CPUs. Every other test runs
# with the platform's default, as a user's run does.
import pytest  # noqa: E402

PARITY = ("tests/models/", "tests/learners/", "tests/sampling/test_sampling.py", "tests/runtime/test_sharding.py")
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pytest_collection_modifyitems(items):
    for item in items:
        if os.path.relpath(str(item.path), _ROOT).replace(os.sep, "/").startswith(PARITY):
            item.add_marker(pytest.mark.parity)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    if item.get_closest_marker("parity") is not None:
        import jax

        jax.config.update("jax_default_matmul_precision", "highest")
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    import jax

    jax.config.update("jax_default_matmul_precision", None)


# ---- memory: one pytest process runs the whole suite ------------------------------------------
# Every jitted program compiled in a test module stays in JAX's in-memory caches for the rest of
# the session; over the suite they grew the process to most of a 24 GB CI machine, and a training
# run started later (the multi-host test) then found ~1 MiB free. The persistent compilation
# cache above keeps a program compiled again in a later module cheap.
@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    yield
    import gc

    import jax

    from archer_jax import model_oracle

    model_oracle.shared.cache_clear()
    jax.clear_caches()
    gc.collect()
