"""How the process runs on its hardware, below everything else.

- ``xla_flags``: XLA flags set before JAX starts (the TPU probe kept quiet, CPU thread defaults).
- ``sharding``: the device mesh (``data``, ``fsdp``, ``tensor``) and the partition rules.
- ``precision``: compute dtypes and the matmul precision of a run.
- ``distributed``: multi-host start-up and the helpers that share work between processes.
- ``hub_names``: model names and paths, the offline switch and the local Hugging Face cache.
"""
