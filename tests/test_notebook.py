"""notebooks/archer_jax_colab.ipynb runs from top to bottom on a CPU (with SMOKE=1: the micro
preset), so the notebook cannot rot: it trains, plots, saves the policy, loads it and plays. Its
install cell's decisions (the source, the one-line failure, the TPU extra) are checked without
network, and its install command installs this checkout into a fresh venv."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "archer_jax_colab.ipynb"


def tagged(tag: str) -> str:
    """The source of the notebook's code cell tagged ``tag``."""
    (cell,) = [c for c in json.loads(NOTEBOOK.read_text())["cells"] if tag in c.get("metadata", {}).get("tags", [])]
    return "".join(cell["source"])


@pytest.fixture
def install_cell(monkeypatch):
    """The install cell's definitions (the cell that only defines; the next one acts)."""
    monkeypatch.delenv("ARCHER_JAX_SOURCE", raising=False)
    namespace: dict = {}
    exec(compile(tagged("install-logic"), "install-logic", "exec"), namespace)
    return namespace


@pytest.mark.slow
def test_the_colab_notebook_runs_on_cpu(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat", reason="the test extra installs nbformat")
    nbclient = pytest.importorskip("nbclient", reason="the test extra installs nbclient")
    pytest.importorskip("ipykernel", reason="the test extra installs ipykernel")
    monkeypatch.setenv("SMOKE", "1")
    monkeypatch.setenv("WORKDIR", str(tmp_path / "run"))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = "\n".join(output.get("text", "") for cell in nb.cells if cell.cell_type == "code" for output in cell.outputs)
    assert "greedy eval return" in text and "saved" in text
    assert (tmp_path / "run" / "policy" / "model.safetensors").is_file()
    turns = re.findall(r"^\s*(\d+)\. '.*' +-> (.+)$", text, flags=re.M)
    assert turns and [int(n) for n, _ in turns] == list(range(1, len(turns) + 1)), "no game printed turn by turn"
    assert all(answer in ("Yes.", "No.", "Invalid Question.") for _, answer in turns), turns
    assert "questions; the object was" in text
    images = [o for cell in nb.cells for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
    assert images, "the learning curve was not drawn"


def test_the_install_cell_finds_a_source_or_says_what_to_set_in_one_line(install_cell, tmp_path):
    find, error = install_cell["find_source"], install_cell["SetupError"]
    assert install_cell["SOURCE"] == ""  # nothing to edit when the notebook sits in a checkout
    empty = tmp_path / "empty"
    empty.mkdir()
    assert find("", [empty, ROOT / "notebooks", ROOT]) == str(ROOT)  # the notebook's own checkout
    url = "https://example.org/me/archer_jax.git"
    assert find(url, [ROOT]) == url
    assert find(str(ROOT), [empty]) == str(ROOT)
    with pytest.raises(error) as nothing:
        find("", [empty])
    with pytest.raises(error, match=r"^SOURCE='archer_jax' is neither a git URL nor a directory holding"):
        find("archer_jax", [ROOT])  # a name pip cannot install is refused, not tried
    (line,) = nothing.value._render_traceback_()  # what IPython prints instead of a traceback
    assert line.startswith("error: archer_jax is not installed and no checkout was found: set SOURCE in the install cell")


def test_the_install_cell_adds_jax_tpu_on_a_tpu_runtime_only(install_cell, tmp_path):
    on_tpu = install_cell["on_tpu"]
    assert not on_tpu({}, tmp_path)
    assert on_tpu({"COLAB_TPU_ADDR": "10.0.0.2:8470"}, tmp_path) and on_tpu({"TPU_NAME": "local"}, tmp_path)
    device = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:00:04.0"
    device.mkdir(parents=True)
    (device / "vendor").write_text("0x10de\n")  # an NVIDIA GPU
    assert not on_tpu({}, tmp_path)
    (device / "vendor").write_text("0x1ae0\n")  # Google: a TPU chip
    assert on_tpu({}, tmp_path)
    commands = []
    install_cell["run"] = commands.append  # install() looks run up in the cell's namespace
    install_cell["install"](str(ROOT), True, python="python")
    install_cell["install"]("https://example.org/me/archer_jax.git", False, python="python", clone_to=tmp_path / "src")
    assert [list(map(str, c)) for c in commands] == [
        ["python", "-m", "pip", "install", "-q", "-e", str(ROOT), "jax[tpu]"],
        ["git", "clone", "--depth=1", "https://example.org/me/archer_jax.git", str(tmp_path / "src")],
        ["python", "-m", "pip", "install", "-q", "-e", str(tmp_path / "src")]]


def test_the_install_cell_adds_the_cuda_extra_on_an_nvidia_gpu_runtime_and_leaves_drive_alone(install_cell, tmp_path):
    import configparser

    on_gpu = install_cell["on_nvidia_gpu"]
    assert not on_gpu(tmp_path)
    device = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:00:04.0"
    device.mkdir(parents=True)
    (device / "vendor").write_text("0x10de\n")
    (device / "class").write_text("0x040300\n")  # an NVIDIA audio function: no GPU
    assert not on_gpu(tmp_path)
    (device / "class").write_text("0x030200\n")  # a 3D controller: an NVIDIA GPU
    assert on_gpu(tmp_path)
    (tmp_path / "dev").mkdir()
    (device / "vendor").write_text("0x1ae0\n")
    (tmp_path / "dev" / "nvidia0").touch()  # the driver's device file alone
    assert on_gpu(tmp_path)
    commands = []
    install_cell["run"] = commands.append
    install_cell["install"](str(ROOT), False, python="python", gpu=True)
    assert [list(map(str, c)) for c in commands] == [["python", "-m", "pip", "install", "-q", "-e", f"{ROOT}[cuda]"]]
    extras = configparser.ConfigParser()
    extras.read(ROOT / "setup.cfg")
    assert extras["options.extras_require"]["cuda"].split() == ["jax[cuda12]"]  # the extra it names exists
    assert install_cell["USE_DRIVE"] is False  # no Drive prompt unless asked for


def test_the_install_cell_installs_this_checkout_into_a_fresh_venv(install_cell, tmp_path, monkeypatch):
    """Its own install command, on a venv with nothing installed: --no-deps and no build isolation
    keep it offline (the build backend is this environment's setuptools, on PYTHONPATH)."""
    import setuptools

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=120)
    python = venv / "bin" / "python"
    backend = tmp_path / "backend"
    backend.mkdir()
    (backend / "setuptools").symlink_to(Path(setuptools.__file__).parent)
    monkeypatch.setenv("PYTHONPATH", str(backend))
    checkout = install_cell["install"](install_cell["find_source"]("", [ROOT / "notebooks", ROOT]), False, python=python,
                                       pip_options=("--no-deps", "--no-build-isolation", "--no-index"))
    monkeypatch.delenv("PYTHONPATH")
    assert checkout == ROOT
    found = subprocess.run([python, "-c", "import importlib.util; print(importlib.util.find_spec('archer_jax').origin)"],
                           capture_output=True, text=True, timeout=60)
    assert found.stdout.strip() == str(ROOT / "archer_jax" / "__init__.py"), found.stderr
    assert (venv / "bin" / "archer-jax-train").is_file()
