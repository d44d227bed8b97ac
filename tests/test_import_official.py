"""Importing the official ArCHer oracle files: a tiny official-format ``.pt`` (``torch.save`` of
``{"model_state_dict": T5ForConditionalGeneration.state_dict()}``, made here) becomes an HF
directory whose logits and greedy answers equal the PyTorch model's; bad files are one-line errors."""

from __future__ import annotations

import numpy as np
import pytest

from archer_jax import import_official, models
from archer_jax.envs import model_oracle
from archer_jax.models.t5.generate import greedy
from archer_jax.models.tiny import build_tiny
from tests import hf_reference as ref

torch = ref.torch
pytestmark = pytest.mark.parity  # compares logits with PyTorch: "highest" matmul precision


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A T5 tokenizer directory, the --base of the conversion (flan-t5-small's role)."""
    return build_tiny("t5", tmp_path_factory.mktemp("base") / "tiny_t5")


@pytest.fixture(scope="module", params=tuple(ref.T5_KINDS))
def official(request, tmp_path_factory, base):
    """An official-format oracle file of a random T5 whose vocabulary fits the base tokenizer, and
    whose bucket distance is the base's (128, flan-t5's): the one size the shapes do not tell."""
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(base)
    directory = tmp_path_factory.mktemp(f"hf_{request.param}")
    hf = ref.t5(request.param, directory, seed=3, vocab_size=len(tokenizer), relative_attention_num_buckets=32,
                relative_attention_max_distance=128)
    path = directory / "20q_t5_oracle.pt"
    torch.save({"model_state_dict": hf.state_dict()}, path)
    return request.param, hf, path


def test_the_file_has_the_official_layout(official):
    _, _, path = official
    state = torch.load(path, weights_only=True)
    assert list(state) == ["model_state_dict"]
    names = set(state["model_state_dict"])
    assert {"shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight"} <= names


def test_converted_oracle_matches_pytorch(official, base, tmp_path):
    kind, hf, path = official
    out = import_official.convert_t5_oracle(path, tmp_path / "oracle", base=str(base))
    ours = models.load_t5(out)
    assert ours.config.num_decoder_layers == hf.config.num_decoder_layers
    assert (ours.lm_head is None) == (kind == "v1") and ours.config.gated == (kind == "flan")
    rng = np.random.default_rng(0)
    ids = rng.integers(3, hf.config.vocab_size, (2, 13))
    mask = np.ones_like(ids)
    mask[1, 6:] = 0
    decoder = rng.integers(3, hf.config.vocab_size, (2, 7))
    decoder[:, 0] = 0
    with torch.no_grad():
        expected = hf(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
                      decoder_input_ids=torch.tensor(decoder)).logits.numpy()
        generated = hf.generate(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask), do_sample=False,
                                max_new_tokens=8, use_cache=False).numpy()[:, 1:]
    assert ref.relative_error(np.asarray(ours(ids, mask, decoder)), expected) < 1e-4
    tokens = np.asarray(greedy(ours, ids, mask, 8))
    np.testing.assert_array_equal(tokens[:, : generated.shape[1]], generated)
    assert (out / "tokenizer.json").is_file() or (out / "tokenizer_config.json").is_file()


def test_the_env_option_takes_the_official_file(official, base, tmp_path, monkeypatch):
    """``oracle=t5:FILE.pt`` converts the file once into the user's cache and answers from it."""
    _, _, path = official
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    oracle = model_oracle.load(f"t5:{path}", "twenty_questions", base=str(base))
    assert oracle.answer("Dog", "Is it alive?") in ("Yes.", "No.", "Invalid Question.")
    converted = list((tmp_path / "cache" / "archer_jax" / "oracles").iterdir())
    assert len(converted) == 1 and converted[0].name.startswith("20q_t5_oracle-")
    model_oracle.load(f"t5:{path}", "twenty_questions", base=str(base))
    assert len(list(converted[0].parent.iterdir())) == 1  # not converted again


class NotATensor:
    pass


def test_bad_files_are_one_line_errors(tmp_path, base, official):
    _, hf, _ = official
    with pytest.raises(import_official.OfficialFileError, match="no such file"):
        import_official.convert_t5_oracle(tmp_path / "missing.pt", tmp_path / "out", base=str(base))
    pickled = tmp_path / "object.pt"
    torch.save({"model_state_dict": NotATensor()}, pickled)
    with pytest.raises(import_official.OfficialFileError, match=r"not a plain state dict .*weights_only"):
        import_official.convert_t5_oracle(pickled, tmp_path / "out", base=str(base))
    numbers = tmp_path / "numbers.pt"
    torch.save({"epoch": 3}, numbers)
    with pytest.raises(import_official.OfficialFileError, match=r"expected a state dict of tensors under 'model_state_dict'; found epoch"):
        import_official.convert_t5_oracle(numbers, tmp_path / "out", base=str(base))
    state = {k: v for k, v in hf.state_dict().items() if "decoder.block.1.layer.2" not in k}
    partial = tmp_path / "partial.pt"
    torch.save({"model_state_dict": state}, partial)
    with pytest.raises(import_official.OfficialFileError, match=r"missing tensors decoder.block.1.layer.2"):
        import_official.convert_t5_oracle(partial, tmp_path / "out", base=str(base))
    with pytest.raises(import_official.OfficialFileError, match=r"its tokenizer comes from --base"):
        import_official.convert_t5_oracle(partial, tmp_path / "out", base=str(tmp_path / "no_base"))


def test_cli(official, base, tmp_path, capsys):
    _, _, path = official
    assert import_official.main([str(path), "--out", str(tmp_path / "cli"), "--base", str(base)]) == 0
    assert (tmp_path / "cli" / "config.json").is_file()
    assert import_official.main([str(tmp_path / "missing.pt"), "--out", str(tmp_path / "x"), "--base", str(base)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "missing.pt: no such file" in err[0]
