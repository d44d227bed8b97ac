"""archer_jax's default XLA flags: added when absent, never over a user's own setting."""

import os
import subprocess
import sys

import pytest

from archer_jax.runtime import xla_flags


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


def test_importing_archer_jax_changes_no_flag():
    code = "import os, archer_jax, archer_jax.train, archer_jax.sampling; print(os.environ.get('XLA_FLAGS', '<unset>'))"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=True)
    assert out.stdout.strip() == "<unset>"


def test_the_test_session_set_it_as_the_train_app_does():
    if not xla_flags.options_known():
        pytest.skip("the installed jaxlib is not one the options were checked against")
    assert xla_flags.decode_compiler_options("cpu") == xla_flags.DECODE_CPU_OPTIONS
    assert xla_flags.decode_compiler_options("gpu") is None
    assert "--xla_cpu_experimental_ynn_fusion_type" in os.environ["XLA_FLAGS"]


def test_no_tpu_backend_is_started_where_no_tpu_is_attached():
    # The test extra installs libtpu (to compile programs for TPU slices); its backend would print
    # warnings to stderr at every start on a machine without a TPU.
    if xla_flags.tpu_attached():
        pytest.skip("a TPU is attached to this machine")
    code = "from archer_jax.runtime import xla_flags; xla_flags.quiet_tpu_probe(); import jax; print(jax.devices()[0].platform)"
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr[-2000:]
    assert done.stdout.strip() in ("cpu", "gpu", "cuda")
    assert not xla_flags.skip_absent_tpu({"JAX_PLATFORMS": "cpu"})  # the user's choice stands


@pytest.mark.parametrize("code", [
    "import archer_jax; import jax; print(jax.devices()[0].platform)",  # the README's Python snippets
    "import jax; from archer_jax import models; print(jax.devices()[0].platform)",  # jax first, then any module
])
def test_importing_archer_jax_alone_keeps_the_tpu_probe_quiet(code):
    if xla_flags.tpu_attached():
        pytest.skip("a TPU is attached to this machine")
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and "libtpu" not in done.stderr and "TPU" not in done.stderr, done.stderr[-2000:]


def test_importing_archer_jax_keeps_transformers_advice_that_pytorch_is_missing_quiet():
    code = "import sys; sys.modules['torch'] = None; import archer_jax; import transformers; transformers.AutoConfig"
    env = {k: v for k, v in os.environ.items() if k != "TRANSFORMERS_NO_ADVISORY_WARNINGS"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and "PyTorch was not found" not in done.stderr, done.stderr[-2000:]
