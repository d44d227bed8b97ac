"""The tiny preset: offline tokenizer training, HF-format directories, HF compatibility."""

import subprocess
import sys

import jax.numpy as jnp
import pytest

from archer_jax import models
from archer_jax.models import tiny
from tests import hf_reference as ref


def test_tokenizer_saved_and_reloaded_encodes_identically(tmp_path):
    trained = tiny.train_tokenizer("gpt2", tmp_path / "tok")
    reloaded = ref.transformers.AutoTokenizer.from_pretrained(tmp_path / "tok")
    text = "Questions:\nIs it a piano? Yes.\nGo north, then unlock the door with the key. Ünïcödé 42"
    assert reloaded(text)["input_ids"] == trained(text)["input_ids"]
    assert reloaded.decode(reloaded(text)["input_ids"]) == text  # byte-level: lossless on any text
    assert len(trained(text)["input_ids"]) < len(text.encode()) / 2  # the merges compress the corpus' style


def test_tokenizer_training_is_deterministic(tmp_path):
    a = tiny.train_tokenizer("roberta", tmp_path / "a")
    b = tiny.train_tokenizer("roberta", tmp_path / "b")
    assert a.get_vocab() == b.get_vocab()


@pytest.mark.parametrize("kind, size", [("gpt2", "tiny"), ("roberta", "tiny"), ("gpt2", "small"), ("roberta", "small")])
def test_tiny_model_is_an_hf_directory_that_torch_loads(tmp_path, kind, size):
    directory = models.build_tiny(kind, tmp_path / kind, size=size)
    layers, width = {"tiny": (2, 64), "small": (4, 128)}[size]
    hf_config = ref.transformers.AutoConfig.from_pretrained(directory)
    assert (hf_config.num_hidden_layers, hf_config.hidden_size) == (layers, width)
    model = models.load_pretrained(directory)
    tokenizer = models.load_tokenizer(directory)
    assert model.config.vocab_size == len(tokenizer)
    batch = models.encode(tokenizer, ["Questions:\nIs it a dog? No.\n", "Is it red?"], max_length=64)
    out = model(jnp.asarray(batch.input_ids), jnp.asarray(batch.attention_mask))
    if kind == "gpt2":
        hf = ref.transformers.GPT2LMHeadModel.from_pretrained(directory).eval()
        expected = ref.gpt2_logits(hf, batch.input_ids, batch.attention_mask)
        assert ref.max_abs_error(out.logits, expected, batch.attention_mask) < 1e-4
    else:
        hf = ref.transformers.RobertaModel.from_pretrained(directory).eval()
        hidden, pooled = ref.roberta_outputs(hf, batch.input_ids, batch.attention_mask)
        assert ref.max_abs_error(out.last_hidden_state, hidden, batch.attention_mask) < 1e-4
        assert ref.max_abs_error(out.pooler_output, pooled) < 1e-4


def test_build_tiny_reuses_an_existing_directory(tmp_path):
    directory = models.build_tiny("gpt2", tmp_path / "g", seed=0)
    first = (directory / "model.safetensors").read_bytes()
    models.build_tiny("gpt2", directory, seed=1)
    assert (directory / "model.safetensors").read_bytes() == first
    with pytest.raises(ValueError, match="holds another model than a small gpt2"):
        models.build_tiny("gpt2", directory, size="small")
    assert (directory / "model.safetensors").read_bytes() == first


def test_model_names_of_both_sizes_are_built_under_the_workdir(tmp_path):
    assert tiny.offline_model("small:roberta") == ("small", "roberta") and tiny.offline_model("gpt2") is None
    assert tiny.offline_model("models/small:x") is None  # a path, not a size
    assert tiny.model_directory("small:gpt2", tmp_path) == str(tmp_path / "models" / "small_gpt2")
    assert tiny.model_directory("gpt2-medium", tmp_path) == "gpt2-medium"
    with pytest.raises(ValueError, match="'small:bert' is not a model built offline"):
        tiny.model_directory("small:bert", tmp_path)


BUILDER = """
import sys
from archer_jax.models.tiny import build_tiny
print(build_tiny("roberta", sys.argv[1]))
"""
READER = """
import sys
from pathlib import Path
from archer_jax import models
directory = Path(sys.argv[1])
while not (directory / "config.json").exists():  # reads the moment the directory looks built
    pass
models.build_tiny("roberta", directory)
print(len(models.load_tokenizer(directory)), models.load_pretrained(directory).config.vocab_size)
"""


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
def test_a_process_never_reads_a_tiny_model_another_is_still_writing(tmp_path):
    # The hosts of a multi-process run on one machine build the tiny models into one workdir.
    directory = tmp_path / "models" / "tiny_roberta"
    reader = subprocess.Popen([sys.executable, "-c", READER, str(directory)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    builder = subprocess.run([sys.executable, "-c", BUILDER, str(directory)], capture_output=True, text=True,
                             timeout=300)
    assert builder.returncode == 0, builder.stderr[-2000:]
    out, err = reader.communicate(timeout=300)
    assert reader.returncode == 0, err[-2000:]
    tokens, vocab = out.split()
    assert tokens == vocab
    assert sorted(p.name for p in directory.parent.iterdir()) == ["tiny_roberta"]  # no staging left behind


def test_unknown_kind():
    with pytest.raises(ValueError, match="'bert'"):
        tiny.tiny_config("bert", 10)
    with pytest.raises(ValueError, match="'bert'"):
        tiny.train_tokenizer("bert", "unused")
