"""Offline dialogue datasets (Twenty Questions, Guess My City): file formats, TFDS builders, random access.

:mod:`~archer_jax.data.dialogues` reads and writes the JSON formats and turns games into
transitions; :mod:`~archer_jax.data.twenty_questions` and :mod:`~archer_jax.data.guess_my_city`
are the TFDS builders (array_record); :mod:`~archer_jax.data.sources` builds and reads them with
random access; :mod:`~archer_jax.data.offline_replay` serves a dataset to the offline agents as
their replay buffer; ``python -m archer_jax.data.generate`` writes games played by the scripted
experts.

Importing this package imports none of them: an online run never loads tensorflow_datasets.
"""
