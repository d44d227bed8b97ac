"""Saving, reloading, and the errors of the loader."""

import json
import sys

import jax.numpy as jnp
import numpy as np
import pytest

from archer_jax import models
from tests import hf_reference as ref


def _gpt2_dir(tmp_path, name="hf", fmt="safetensors", seed=0):
    return ref.save(ref.gpt2(seed=seed), tmp_path / name, fmt)


@pytest.mark.parametrize("kind", ["gpt2", "roberta"])
def test_save_then_reload_is_exact(tmp_path, kind):
    hf = ref.gpt2(seed=1) if kind == "gpt2" else ref.roberta(seed=1)
    model = models.load_pretrained(ref.save(hf, tmp_path / "hf", "safetensors"))
    models.save_pretrained(model, tmp_path / "ours")
    again = models.load_pretrained(tmp_path / "ours")
    assert again.config == model.config
    before, after = models.params_as_numpy(model), models.params_as_numpy(again)
    assert before.keys() == after.keys()
    for path in before:
        np.testing.assert_array_equal(after[path], before[path], err_msg=str(path))


def test_hugging_face_loads_our_gpt2_and_matches(tmp_path):
    hf = ref.gpt2(seed=2)
    model = models.load_gpt2(ref.save(hf, tmp_path / "hf", "bin"))
    models.save_pretrained(model, tmp_path / "ours")
    reloaded, info = ref.transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "ours", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    ids, mask = ref.padded_batch((7, 2), 8, "left", pad_id=0)
    ours = model(jnp.asarray(ids), jnp.asarray(mask)).logits
    assert ref.max_abs_error(ours, ref.gpt2_logits(reloaded.eval(), ids, mask), mask) < 1e-4


def test_hugging_face_loads_our_roberta_and_matches(tmp_path):
    model = models.load_roberta(ref.save(ref.roberta(seed=3), tmp_path / "hf", "safetensors"))
    models.save_pretrained(model, tmp_path / "ours")
    reloaded, info = ref.transformers.RobertaModel.from_pretrained(tmp_path / "ours", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    ids, mask = ref.padded_batch((7, 2), 8, "right", pad_id=1)
    hidden, pooled = ref.roberta_outputs(reloaded.eval(), ids, mask)
    out = model(jnp.asarray(ids), jnp.asarray(mask))
    assert ref.max_abs_error(out.last_hidden_state, hidden, mask) < 1e-4
    assert ref.max_abs_error(out.pooler_output, pooled) < 1e-4


def test_bfloat16_parameters_save_and_reload(tmp_path):
    model = models.load_gpt2(_gpt2_dir(tmp_path), param_dtype=jnp.bfloat16)
    models.save_pretrained(model, tmp_path / "ours")
    assert json.loads((tmp_path / "ours" / "config.json").read_text())["dtype"] == "bfloat16"
    again = models.load_gpt2(tmp_path / "ours", param_dtype=jnp.bfloat16)
    a, b = models.params_as_numpy(model), models.params_as_numpy(again)
    assert all(np.array_equal(a[k], b[k]) and b[k].dtype == jnp.bfloat16 for k in a)


def _one_line_error(fn, *args, **kwargs) -> str:
    with pytest.raises(models.ModelLoadError) as info:
        fn(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("name", ["gpt2", "roberta-base"])
def test_uncached_hub_name_offline(tmp_path, monkeypatch, name):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    message = _one_line_error(models.load_pretrained, name)
    assert repr(name) in message and "HF_HUB_OFFLINE" in message and "local directory" in message


def test_directory_without_weights(tmp_path):
    directory = _gpt2_dir(tmp_path)
    (directory / "model.safetensors").unlink()
    message = _one_line_error(models.load_gpt2, directory)
    assert str(directory) in message and "no weights" in message


def test_config_of_another_architecture(tmp_path):
    directory = ref.save(ref.roberta(), tmp_path / "encoder", "safetensors")
    message = _one_line_error(models.load_gpt2, directory)
    assert str(directory) in message and "'roberta'" in message and "'gpt2'" in message


def test_unsupported_architecture(tmp_path):
    directory = tmp_path / "bert"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({"model_type": "bert"}))
    message = _one_line_error(models.load_pretrained, directory)
    assert str(directory) in message and "'bert'" in message


def test_missing_directory_and_missing_config(tmp_path):
    assert str(tmp_path / "nope") in _one_line_error(models.load_gpt2, tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    message = _one_line_error(models.load_gpt2, tmp_path / "empty")
    assert str(tmp_path / "empty") in message and "config.json" in message


def test_bin_checkpoint_without_torch_says_so(tmp_path, monkeypatch):
    directory = _gpt2_dir(tmp_path, fmt="bin")
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    message = _one_line_error(models.load_gpt2, directory)
    assert "pytorch_model.bin" in message and "torch" in message


def test_checkpoint_that_does_not_fit_the_config(tmp_path):
    directory = _gpt2_dir(tmp_path)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "n_embd": 64}))
    message = _one_line_error(models.load_gpt2, directory)
    assert str(directory) in message and "shape" in message
    (directory / "config.json").write_text(json.dumps({**config, "n_layer": 3}))
    message = _one_line_error(models.load_gpt2, directory)
    assert "transformer.h.2" in message


def test_sharded_safetensors_checkpoint(tmp_path):
    hf = ref.gpt2(seed=5)
    directory = tmp_path / "sharded"
    hf.save_pretrained(directory, max_shard_size="20KB")
    assert (directory / "model.safetensors.index.json").is_file()
    ids, mask = ref.padded_batch((5, 3), 6, "left", pad_id=0)
    ours = models.load_gpt2(directory)(jnp.asarray(ids), jnp.asarray(mask)).logits
    assert ref.max_abs_error(ours, ref.gpt2_logits(hf, ids, mask), mask) < 1e-4


def test_cached_hub_name_loads_offline(tmp_path, monkeypatch):
    """A hub name already in the Hugging Face cache loads with HF_HUB_OFFLINE=1."""
    import huggingface_hub.constants

    revision = "0" * 40
    repo = tmp_path / "hub" / "models--someone--tiny-gpt2"
    hf = ref.gpt2(seed=6)
    ref.save(hf, repo / "snapshots" / revision, "safetensors")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    ids, mask = ref.padded_batch((5, 2), 6, "left", pad_id=0)
    ours = models.load_gpt2("someone/tiny-gpt2")(jnp.asarray(ids), jnp.asarray(mask)).logits
    assert ref.max_abs_error(ours, ref.gpt2_logits(hf, ids, mask), mask) < 1e-4


@pytest.mark.parametrize("name", ["./not-here", "a/b/c", "~/not-here-either"])
def test_path_like_names_are_not_sent_to_the_hub(name):
    message = _one_line_error(models.load_gpt2, name)
    assert "does not exist" in message
