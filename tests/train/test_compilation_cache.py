"""config.compilation_cache: the run turns on JAX's persistent cache unless one is already set."""

import jax

from archer_jax import train


def test_the_cache_directory_is_made_and_used_unless_one_is_set(tmp_path):
    before = jax.config.jax_compilation_cache_dir
    try:
        jax.config.update("jax_compilation_cache_dir", None)
        train._use_compilation_cache("")  # off
        assert not jax.config.jax_compilation_cache_dir
        train._use_compilation_cache(str(tmp_path / "xla"))
        assert jax.config.jax_compilation_cache_dir == str(tmp_path / "xla")
        assert (tmp_path / "xla").is_dir()
        train._use_compilation_cache(str(tmp_path / "other"))  # one already set (e.g. JAX_COMPILATION_CACHE_DIR) wins
        assert jax.config.jax_compilation_cache_dir == str(tmp_path / "xla")
    finally:
        jax.config.update("jax_compilation_cache_dir", before)
