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

# archer_jax's default XLA flags, as the train app sets them (importing archer_jax does not).
from archer_jax import xla_flags  # noqa: E402

xla_flags.set_default_flags()

# One persistent compilation cache for the whole session, this process and the training runs it
# starts as subprocesses: the training-app tests run the same programs several times.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    import tempfile

    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="archer_jax_test_jit_cache_")
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"
