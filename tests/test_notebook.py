"""notebooks/archer_jax_colab.ipynb runs from top to bottom on a CPU (with SMOKE=1: the micro
preset), so the notebook cannot rot: it trains, plots, saves the policy, loads it and plays."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "archer_jax_colab.ipynb"


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
