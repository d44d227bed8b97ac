"""The config.json copies shipped with archer_jax: found offline with an empty cache, parsed by
transformers and by our config classes, and holding the published sizes of each model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from archer_jax.models import hub
from archer_jax.models.pretrained import ARCHITECTURES

MISTRAL = "mistralai/Mistral-7B-Instruct-v0.2"
FLAN_T5 = "google/flan-t5-small"
NAMES = ["gpt2", "roberta-base", MISTRAL, FLAN_T5]


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    """Offline, with a Hugging Face cache that holds nothing."""
    import huggingface_hub.constants

    home = tmp_path / "hf_home"
    cache = home / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HOME", str(home))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    return cache


def _packaged_dir(name: str) -> Path:
    return Path(hub.__file__).resolve().parent.parent / "assets" / "model_configs" / name.replace("/", "--")


def test_packaged_config_names():
    assert hub.packaged_config_names() == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_known_config_offline_with_an_empty_cache(empty_cache, name):
    assert hub.peek_config(name) is None  # not in the cache, and offline
    found = hub.known_config(name)
    assert found == json.loads((_packaged_dir(name) / "config.json").read_text())
    assert not any(empty_cache.iterdir())  # nothing was written to the cache


def test_known_config_prefers_a_model_directory(empty_cache, tmp_path):
    directory = tmp_path / "gpt2"  # a local directory named like a packaged model
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 2}))
    assert hub.known_config(directory)["n_layer"] == 2


def test_known_config_of_an_unknown_name_is_none(empty_cache, tmp_path):
    assert hub.known_config("no-such-owner/no-such-model") is None
    assert hub.known_config("gpt2-xl") is None
    assert hub.known_config(tmp_path / "missing" / "dir") is None


@pytest.mark.parametrize("name", NAMES)
def test_transformers_reads_each_packaged_config(name):
    import transformers

    directory = _packaged_dir(name)
    d = json.loads((directory / "config.json").read_text())
    from_dir = transformers.AutoConfig.from_pretrained(directory)
    assert from_dir.model_type == d["model_type"]
    assert type(transformers.AutoConfig.for_model(**d)) is type(from_dir)


@pytest.mark.parametrize("name", NAMES)
def test_our_config_classes_read_each_packaged_config(empty_cache, name):
    d = hub.known_config(name)
    config = ARCHITECTURES[d["model_type"]].config_cls.from_hf_dict(d)
    assert config.model_type == d["model_type"]


def _ours(name):
    d = hub.known_config(name)
    return ARCHITECTURES[d["model_type"]].config_cls.from_hf_dict(d)


def test_mistral_7b_sizes(empty_cache):
    d = hub.known_config(MISTRAL)
    assert d["model_type"] == "mistral" and d["architectures"] == ["MistralForCausalLM"]
    assert (d["hidden_size"], d["num_hidden_layers"], d["num_attention_heads"], d["num_key_value_heads"]) == (4096, 32, 32, 8)
    assert (d["intermediate_size"], d["vocab_size"], d["max_position_embeddings"]) == (14336, 32000, 32768)
    assert d["rope_theta"] == 1e6 and d["sliding_window"] is None and d["tie_word_embeddings"] is False
    ours = _ours(MISTRAL)
    assert (ours.hidden_size, ours.num_hidden_layers, ours.num_attention_heads, ours.num_key_value_heads) == (4096, 32, 32, 8)
    assert (ours.intermediate_size, ours.vocab_size, ours.rope_theta) == (14336, 32000, 1e6)


def test_gpt2_sizes(empty_cache):
    d = hub.known_config("gpt2")
    assert (d["n_embd"], d["n_layer"], d["n_head"], d["vocab_size"], d["n_positions"]) == (768, 12, 12, 50257, 1024)
    ours = _ours("gpt2")
    assert (ours.n_embd, ours.n_layer, ours.n_head, ours.vocab_size, ours.n_positions) == (768, 12, 12, 50257, 1024)


def test_roberta_base_sizes(empty_cache):
    d = hub.known_config("roberta-base")
    assert (d["hidden_size"], d["num_hidden_layers"], d["num_attention_heads"]) == (768, 12, 12)
    assert (d["intermediate_size"], d["vocab_size"], d["max_position_embeddings"]) == (3072, 50265, 514)
    assert (d["pad_token_id"], d["type_vocab_size"]) == (1, 1)
    ours = _ours("roberta-base")
    assert (ours.hidden_size, ours.num_hidden_layers, ours.vocab_size, ours.max_position_embeddings) == (768, 12, 50265, 514)


def test_flan_t5_small_sizes(empty_cache):
    d = hub.known_config(FLAN_T5)
    assert (d["d_model"], d["num_layers"], d["num_decoder_layers"], d["num_heads"]) == (512, 8, 8, 6)
    assert (d["d_kv"], d["d_ff"], d["vocab_size"], d["feed_forward_proj"]) == (64, 1024, 32128, "gated-gelu")
    assert d["tie_word_embeddings"] is False
    ours = _ours(FLAN_T5)
    assert (ours.d_model, ours.num_layers, ours.num_heads, ours.d_ff, ours.vocab_size) == (512, 8, 6, 1024, 32128)
    assert ours.feed_forward_proj == "gated-gelu" and ours.tie_word_embeddings is False


@pytest.mark.parametrize("name", NAMES)
def test_known_config_online_with_an_empty_cache_never_asks_the_hub_for_a_packaged_model(empty_cache, name,
                                                                                        monkeypatch):
    """A hub that cannot be reached costs a run's plan nothing (its retries took ~46 s): the copy
    that ships with the package serves before any download is tried."""
    import huggingface_hub

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(hub, "is_offline", lambda: False)

    def unreachable(*args, **kwargs):
        raise AssertionError("the hub was asked")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", unreachable)
    assert hub.known_config(name) == json.loads((_packaged_dir(name) / "config.json").read_text())
