"""T5 (flan-t5 and T5 v1.0) against Hugging Face's PyTorch model: logits, greedy decoding,
relative position buckets, and the round trip through our save_pretrained; checkpoints as
transformers 5 saves them (``tie_word_embeddings: true`` with flan-t5's own head in the file) and
as transformers 4 wrote them."""

import json

import jax.numpy as jnp
import numpy as np
import pytest

from archer_jax import models
from archer_jax.models import hub
from archer_jax.models.t5.generate import greedy
from archer_jax.models.t5.model import relative_position_bucket
from tests import hf_reference as ref

torch = ref.torch
KINDS = tuple(ref.T5_KINDS)


@pytest.fixture(scope="module", params=KINDS)
def pair(request, tmp_path_factory):
    """A checkpoint saved by transformers 5, the reference model, and ours loaded from it."""
    directory = tmp_path_factory.mktemp(f"t5_{request.param}")
    hf = ref.t5(request.param, directory, seed=KINDS.index(request.param))
    return request.param, hf, models.load_t5(directory), directory


def batch(seed: int = 0):
    """Right-padded encoder inputs (lengths 19, 9, 4: past the 12-token bucket distance) and
    decoder inputs that start with the decoder start token."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(2, ref.VOCAB, (3, 19))
    mask = np.zeros_like(ids)
    for row, length in enumerate((19, 9, 4)):
        mask[row, :length] = 1
    ids = ids * mask
    decoder = rng.integers(2, ref.VOCAB, (3, 15))
    decoder[:, 0] = 0
    return ids, mask, decoder


def hf_logits(hf, ids, mask, decoder):
    with torch.no_grad():
        return hf(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
                  decoder_input_ids=torch.tensor(decoder)).logits.numpy()


def test_the_kinds_differ_as_intended(pair):
    kind, hf, ours, directory = pair
    saved = json.loads((directory / "config.json").read_text())
    assert saved["tie_word_embeddings"] is True  # transformers 5 writes it for every T5
    assert saved["scale_decoder_outputs"] is (kind == "v1") and hf.config.scale_decoder_outputs is (kind == "v1")
    assert ("lm_head.weight" in hub.WeightReader(directory)) == (kind == "flan")
    if kind == "flan":
        assert ours.lm_head is not None and ours.config.gated and not ours.config.scales_output
        assert not torch.equal(hf.lm_head.weight, hf.shared.weight)
    else:
        assert ours.lm_head is None and not ours.config.gated and ours.config.scales_output
    assert len(ours.decoder.blocks) == hf.config.num_decoder_layers


def test_logits_match_hugging_face(pair):
    _, hf, ours, _ = pair
    ids, mask, decoder = batch()
    expected = hf_logits(hf, ids, mask, decoder)
    out = ours(jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(decoder))
    assert out.dtype == jnp.float32 and out.shape == expected.shape
    assert ref.relative_error(out, expected) < 1e-4


@pytest.mark.parametrize("kind", KINDS)
def test_a_transformers4_checkpoint_matches_pytorch(kind, tmp_path):
    """The layout transformers 4 wrote: flan-t5 ``tie_word_embeddings: false`` with its head in the
    file, T5 v1.0 tied without one; neither has ``scale_decoder_outputs``."""
    hf = ref.t5(kind, tmp_path, seed=KINDS.index(kind), layout="transformers4")
    saved = json.loads((tmp_path / "config.json").read_text())
    assert "scale_decoder_outputs" not in saved and saved["tie_word_embeddings"] is (kind == "v1")
    ours = models.load_t5(tmp_path)
    assert (ours.lm_head is None) == (kind == "v1") and ours.config.scales_output == (kind == "v1")
    ids, mask, decoder = batch()
    assert ref.relative_error(ours(ids, mask, decoder), hf_logits(hf, ids, mask, decoder)) < 1e-4


def test_a_head_equal_to_the_embedding_stays_tied(pair, tmp_path):
    """A ``pytorch_model.bin`` state dict holds ``lm_head.weight`` even when it is the embedding:
    tied where equal to it (T5 v1.0), a head of its own where not (flan-t5)."""
    kind, hf, _, _ = pair
    ours = models.load_t5(ref.save(hf, tmp_path, "bin"))
    assert "lm_head.weight" in hub.WeightReader(tmp_path)
    assert (ours.lm_head is None) == (kind == "v1")
    ids, mask, decoder = batch()
    assert ref.relative_error(ours(ids, mask, decoder), hf_logits(hf, ids, mask, decoder)) < 1e-4


def test_an_untied_config_without_a_head_is_refused(tmp_path):
    """``tie_word_embeddings: false`` and no ``lm_head.weight``: transformers 4 gave the model an
    untrained random head (transformers 5 would use the embedding, unscaled), so loading names the
    missing tensor instead of guessing."""
    ref.t5("v1", tmp_path, layout="transformers4")
    saved = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**saved, "tie_word_embeddings": False}))
    with pytest.raises(hub.ModelLoadError, match=r"missing tensors lm_head.weight"):
        models.load_t5(tmp_path)


def test_encoder_states_ignore_padding(pair):
    """A row's encoding is the same alone and padded in a batch (mask over the padding keys)."""
    _, _, ours, _ = pair
    ids, mask, _ = batch()
    together = np.asarray(ours.encode(jnp.asarray(ids), jnp.asarray(mask)))
    alone = np.asarray(ours.encode(jnp.asarray(ids[2:, :4]), jnp.asarray(mask[2:, :4])))
    np.testing.assert_allclose(together[2, :4], alone[0], atol=1e-5)


def test_cached_decoding_equals_the_full_pass(pair):
    """Token by token through the KV cache = teacher forcing over the whole decoder input."""
    _, _, ours, _ = pair
    ids, mask, decoder = batch(1)
    full = np.asarray(ours(jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(decoder)))
    context = ours.cross_kv(ours.encode(jnp.asarray(ids), jnp.asarray(mask)))
    cache = ours.init_cache(3, decoder.shape[1])
    steps = []
    for t in range(decoder.shape[1]):
        logits, cache = ours.decode(jnp.asarray(decoder[:, t : t + 1]), jnp.asarray(mask), context, cache=cache, cache_index=t)
        steps.append(np.asarray(logits[:, 0]))
    np.testing.assert_allclose(np.stack(steps, 1), full, atol=1e-4 * np.abs(full).max())


# Inputs on which a row of each test model emits the end token within 12 steps (found by trying
# seeds; the assertion below keeps the case from going vacuous).
ENDING = {"flan": 3, "v1": 5}


def test_greedy_decoding_is_token_identical_to_hugging_face(pair):
    """Greedy continuations equal HF's generate, including pad tokens after a row's EOS."""
    kind, hf, ours, _ = pair
    new, ended = 12, False
    for seed in (2, ENDING[kind]):
        ids, mask, _ = batch(seed)
        with torch.no_grad():  # HF stops when every row has ended; its cache assumes as many decoder as encoder layers
            expected = hf.generate(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask), do_sample=False,
                                   max_new_tokens=new, use_cache=False).numpy()[:, 1:]
        out = np.asarray(greedy(ours, ids, mask, new))
        assert out.shape == (3, new)
        np.testing.assert_array_equal(out[:, : expected.shape[1]], expected)
        assert (out[:, expected.shape[1] :] == hf.config.pad_token_id).all()
        for row in out:
            ends = np.flatnonzero(row == hf.config.eos_token_id)
            if ends.size and ends[0] < new - 1:
                ended = True
                assert (row[ends[0] + 1 :] == hf.config.pad_token_id).all()
    assert ended, "no row emitted the end token early: the padding after it went untested"


@pytest.mark.parametrize("bidirectional", [True, False])
def test_relative_position_buckets_equal_hugging_face(bidirectional):
    from transformers.models.t5.modeling_t5 import T5Attention

    relative = np.arange(-300, 300)[None, :] - np.zeros((1, 1), np.int64)
    for buckets, distance in ((32, 128), (8, 12)):
        expected = T5Attention._relative_position_bucket(torch.tensor(relative), bidirectional=bidirectional,
                                                         num_buckets=buckets, max_distance=distance).numpy()
        ours = relative_position_bucket(jnp.asarray(relative, jnp.int32), bidirectional=bidirectional,
                                        num_buckets=buckets, max_distance=distance)
        np.testing.assert_array_equal(np.asarray(ours), expected)


def test_save_pretrained_round_trip(pair, tmp_path):
    """Our save_pretrained writes a directory Hugging Face loads to the same logits."""
    _, hf, ours, _ = pair
    models.save_pretrained(ours, tmp_path)
    again = ref.transformers.T5ForConditionalGeneration.from_pretrained(tmp_path).eval()
    ids, mask, decoder = batch()
    np.testing.assert_allclose(hf_logits(again, ids, mask, decoder), hf_logits(hf, ids, mask, decoder), atol=1e-6)
