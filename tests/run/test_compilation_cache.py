"""config.compilation_cache: the run turns on JAX's persistent cache unless one is already set."""

import jax

from archer_jax.run import loop as train


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


def test_every_program_is_cached_unless_the_user_set_a_threshold(tmp_path, monkeypatch):
    before = (jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs)
    try:
        jax.config.update("jax_compilation_cache_dir", None)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)  # JAX's own default
        monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "1.0")
        train._use_compilation_cache(str(tmp_path / "a"))
        assert jax.config.jax_persistent_cache_min_compile_time_secs == 1.0  # the user's setting stays
        jax.config.update("jax_compilation_cache_dir", None)
        monkeypatch.delenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS")
        train._use_compilation_cache(str(tmp_path / "b"))
        assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.0
    finally:
        jax.config.update("jax_compilation_cache_dir", before[0])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", before[1])
