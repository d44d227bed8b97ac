"""Tokenizer setup and batch encoding, checked against Hugging Face's own padding/truncation."""

import numpy as np
import pytest

from archer_jax import models

TEXTS = ["Questions:\nIs it an animal? Yes.\nIs it a dog? No.\n", "Questions:\n", "Is it a fruit?"]


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return {kind: models.build_tiny(kind, root / kind) for kind in ("gpt2", "roberta")}


def test_gpt2_pads_with_eos_on_the_left(tiny_dirs):
    tokenizer = models.load_tokenizer(tiny_dirs["gpt2"])
    assert tokenizer.pad_token == tokenizer.eos_token == "<|endoftext|>"
    assert tokenizer.padding_side == "left" and tokenizer.truncation_side == "left"


def test_roberta_pads_on_the_right_with_its_pad_token(tiny_dirs):
    tokenizer = models.load_tokenizer(tiny_dirs["roberta"])
    assert tokenizer.padding_side == "right" and tokenizer.pad_token_id == 1


@pytest.mark.parametrize("kind", ["gpt2", "roberta"])
@pytest.mark.parametrize("max_length", [6, 64])
def test_encode_matches_hugging_face_padding_and_truncation(tiny_dirs, kind, max_length):
    tokenizer = models.load_tokenizer(tiny_dirs[kind])
    ours = models.encode(tokenizer, TEXTS, max_length=max_length)
    expected = tokenizer(TEXTS, truncation=True, max_length=max_length, padding="max_length")
    length = ours.input_ids.shape[1]
    assert length == models.bucket_length(int(np.sum(expected["attention_mask"], 1).max()), max_length)
    side = slice(-length, None) if tokenizer.padding_side == "left" else slice(0, length)
    np.testing.assert_array_equal(ours.input_ids, np.asarray(expected["input_ids"])[:, side])
    np.testing.assert_array_equal(ours.attention_mask, np.asarray(expected["attention_mask"])[:, side])


def test_left_truncation_keeps_the_end(tiny_dirs):
    tokenizer = models.load_tokenizer(tiny_dirs["gpt2"])
    text = "Questions:\n" + "Is it a dog? No.\n" * 20 + "Is it a cat? Yes.\n"
    full = tokenizer(text)["input_ids"]
    ids = models.encode(tokenizer, [text], max_length=10).input_ids[0]
    np.testing.assert_array_equal(ids, full[-10:])
    assert tokenizer.decode(ids).endswith("Is it a cat? Yes.\n")


def test_roberta_truncation_keeps_special_tokens_and_the_end(tiny_dirs):
    tokenizer = models.load_tokenizer(tiny_dirs["roberta"])
    text = "Is it a dog? No.\n" * 20 + "Is it a cat? Yes."
    ids = models.encode(tokenizer, [text], max_length=8).input_ids[0]
    assert ids[0] == tokenizer.bos_token_id and ids[-1] == tokenizer.eos_token_id
    assert tokenizer.decode(ids[1:-1]).endswith("cat? Yes.")


@pytest.mark.parametrize(
    "length, max_length, expected", [(0, 512, 16), (16, 512, 16), (17, 512, 32), (300, 512, 512), (600, 512, 512)]
)
def test_bucket_length(length, max_length, expected):
    assert models.bucket_length(length, max_length) == expected


def test_explicit_length_too_short(tiny_dirs):
    tokenizer = models.load_tokenizer(tiny_dirs["gpt2"])
    with pytest.raises(ValueError, match="length 2"):
        models.encode(tokenizer, TEXTS, max_length=64, length=2)


def test_directory_without_tokenizer_files(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "gpt2"}')
    with pytest.raises(models.ModelLoadError, match=str(tmp_path)) as info:
        models.load_tokenizer(tmp_path)
    assert "\n" not in str(info.value)


def test_bad_padding_side_is_named_before_any_lookup(tmp_path):
    with pytest.raises(ValueError, match="padding_side must be 'left' or 'right', got 'middle'"):
        models.load_tokenizer(tmp_path / "does-not-exist", padding_side="middle")
