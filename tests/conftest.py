"""Test-wide setup: no network, no progress bars, no tokenizer thread pools."""

import os

# Tests never touch the network: Hugging Face reads these at import time.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
