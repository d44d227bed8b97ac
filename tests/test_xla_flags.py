"""archer_jax's default XLA flags: added when absent, never over a user's own setting."""

import os

from archer_jax import xla_flags


def test_the_flag_is_added_to_other_flags():
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    flags = xla_flags.set_default_flags(env)
    assert env["XLA_FLAGS"] == flags
    assert flags.split() == ["--xla_force_host_platform_device_count=8", "--xla_cpu_experimental_ynn_fusion_type="]


def test_a_users_own_setting_is_kept():
    env = {"XLA_FLAGS": "--xla_cpu_experimental_ynn_fusion_type=dot"}
    assert xla_flags.set_default_flags(env) == "--xla_cpu_experimental_ynn_fusion_type=dot"
    assert xla_flags.set_default_flags({}) == "--xla_cpu_experimental_ynn_fusion_type="


def test_importing_archer_jax_set_it_for_this_process():
    assert "--xla_cpu_experimental_ynn_fusion_type" in os.environ["XLA_FLAGS"]
