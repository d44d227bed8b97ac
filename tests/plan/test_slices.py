"""TPU slices by their gcloud names: chips, hosts and chip figures as Google publishes them, and
one-line errors for names that are none."""

import subprocess
import sys

import pytest

from archer_jax.plan import slices


@pytest.mark.parametrize("name, chips, hosts, hbm_gib", [
    ("v4-8", 4, 1, 32), ("v4-32", 16, 4, 32), ("v4-64", 32, 8, 32),  # v4-N: N TensorCores, 2 per chip
    ("v5p-8", 4, 1, 95), ("v5litepod-1", 1, 1, 16), ("v5litepod-8", 8, 1, 16), ("v5litepod-16", 16, 4, 16),
    ("v6e-8", 8, 1, 32), ("v6e-16", 16, 4, 32),
])
def test_slices_as_gcloud_names_them(name, chips, hosts, hbm_gib):
    target = slices.get(name)
    assert (target.chips, target.hosts, target.chip.hbm_bytes) == (chips, hosts, hbm_gib * 2**30)
    assert target.is_tpu and name in slices.names()


def test_chip_peaks():
    assert slices.CHIPS["v5e"].peak_flops == 197e12 and slices.CHIPS["v5e"].hbm_bandwidth == 819e9
    assert slices.CHIPS["v4"].peak_flops == 275e12 and slices.CHIPS["v6e"].peak_flops == 918e12


@pytest.mark.parametrize("name, says", [("v5litepod-3", "no v5litepod slice of 3"), ("v9-8", "not a TPU type")])
def test_a_name_that_is_no_slice_is_one_line(name, says):
    with pytest.raises(slices.TargetError, match=says):
        slices.get(name)
    done = subprocess.run([sys.executable, "-m", "archer_jax.plan", "--config=configs/20q.py:micro", f"--target={name}"],
                          capture_output=True, text=True, timeout=120, cwd=slices.__file__.rsplit("/archer_jax/", 1)[0])
    assert done.returncode == 1 and done.stderr.strip().count("\n") == 0 and says in done.stderr, done.stderr[-2000:]


def test_local_is_this_machines_devices():
    import jax

    local = slices.get("local")
    assert not local.is_tpu and local.chips == len(jax.devices()) and local.devices() == jax.devices()
