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
