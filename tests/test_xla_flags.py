"""archer_jax's default XLA flags: added when absent, never over a user's own setting."""

import os

import pytest

from archer_jax import xla_flags


def test_the_flag_is_added_to_other_flags():
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    flags = xla_flags.set_default_flags(env, known=True)
    assert env["XLA_FLAGS"] == flags
    assert flags.split() == ["--xla_force_host_platform_device_count=8", "--xla_cpu_experimental_ynn_fusion_type="]


def test_a_users_own_setting_is_kept():
    env = {"XLA_FLAGS": "--xla_cpu_experimental_ynn_fusion_type=dot"}
    assert xla_flags.set_default_flags(env, known=True) == "--xla_cpu_experimental_ynn_fusion_type=dot"
    assert xla_flags.set_default_flags({}, known=True) == "--xla_cpu_experimental_ynn_fusion_type="


def test_an_xla_that_may_not_know_the_options_gets_none():
    """XLA aborts on an unknown flag: on unchecked jaxlib versions nothing is added."""
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    assert xla_flags.set_default_flags(env, known=False) == "--xla_force_host_platform_device_count=8"
    assert env["XLA_FLAGS"] == "--xla_force_host_platform_device_count=8"


def test_importing_archer_jax_set_it_for_this_process():
    if not xla_flags.options_known():
        pytest.skip("the installed jaxlib is not one the options were checked against")
    assert xla_flags.decode_compiler_options("cpu") == xla_flags.DECODE_CPU_OPTIONS
    assert xla_flags.decode_compiler_options("gpu") is None
    assert "--xla_cpu_experimental_ynn_fusion_type" in os.environ["XLA_FLAGS"]
