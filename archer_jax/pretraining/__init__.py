"""The starts before RL: the policy's SFT, the critic encoder's masked-LM pretraining and their cache.

- ``sft``: supervised fine-tuning of the policy on scripted experts' dialogues.
- ``critic``: masked-LM steps of the critic's encoder on the SFT dialogues' texts.
- ``sft_cache``: where a start is stored, keyed by what it was made from.

The run's warm start (``archer_jax.run.warm_start``) calls them before the first iteration.
"""
