"""RoBERTa against Hugging Face's PyTorch RobertaModel."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from archer_jax import models
from archer_jax.models import attention
from tests import hf_reference as ref

LENGTHS = (9, 3, 6)  # rows of different lengths, right-padded
PAD = 1


@pytest.mark.parametrize("fmt, blocked", [("safetensors", False), ("bin", False), ("safetensors", True)])
def test_float32_hidden_states_and_pooled_output_match(tmp_path, monkeypatch, fmt, blocked):
    if blocked:  # attention over one batch row at a time, as on CPUs at training sizes
        monkeypatch.setattr(attention, "CPU_BLOCK_BYTES", 1)
        monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
    hf = ref.roberta(seed=1)
    ours = models.load_roberta(ref.save(hf, tmp_path / fmt, fmt))
    ids, mask = ref.padded_batch(LENGTHS, 10, "right", pad_id=PAD)
    hidden, pooled = ref.roberta_outputs(hf, ids, mask)
    out = ours(jnp.asarray(ids), jnp.asarray(mask))
    assert ref.max_abs_error(out.last_hidden_state, hidden, mask) < 1e-4
    assert ref.max_abs_error(out.pooler_output, pooled) < 1e-4


def test_bfloat16_within_2e_2_relative(tmp_path):
    hf = ref.roberta(seed=2)
    ours = models.load_roberta(ref.save(hf, tmp_path / "m", "safetensors"), dtype=jnp.bfloat16)
    ids, mask = ref.padded_batch(LENGTHS, 10, "right", pad_id=PAD)
    hidden, pooled = ref.roberta_outputs(hf, ids, mask)
    out = ours(jnp.asarray(ids), jnp.asarray(mask))
    assert ref.relative_error(out.last_hidden_state, hidden, mask) < 2e-2
    assert ref.relative_error(out.pooler_output, pooled) < 2e-2


def test_left_padded_row_equals_the_row_alone(tmp_path):
    """Positions come from the mask, so left padding gives a row the same hidden states."""
    ours = models.load_roberta(ref.save(ref.roberta(seed=3), tmp_path / "m", "safetensors"))
    ids, mask = ref.padded_batch(LENGTHS, 10, "left", pad_id=PAD)
    batch = ours(jnp.asarray(ids), jnp.asarray(mask)).last_hidden_state
    alone = ours(jnp.asarray(ids[2:3, -LENGTHS[2] :])).last_hidden_state
    np.testing.assert_allclose(np.asarray(batch[2, -LENGTHS[2] :]), np.asarray(alone[0]), atol=1e-5)


def test_masked_lm_checkpoint_without_pooler(tmp_path, caplog):
    """roberta-base on the hub is a RobertaForMaskedLM checkpoint: `roberta.` prefix, an lm_head,
    no pooler. The encoder loads; the pooler is freshly initialised and the log says so."""
    hf = ref.roberta(seed=4, masked_lm=True)
    with caplog.at_level(logging.WARNING):
        ours = models.load_roberta(ref.save(hf, tmp_path / "m", "safetensors"), seed=7)
    assert "pooler.dense.weight" in caplog.text
    ids, mask = ref.padded_batch(LENGTHS, 10, "right", pad_id=PAD)
    hidden, _ = ref.roberta_outputs(hf.roberta, ids, mask)
    out = ours(jnp.asarray(ids), jnp.asarray(mask))
    assert ref.max_abs_error(out.last_hidden_state, hidden, mask) < 1e-4
    assert float(jnp.abs(ours.pooler.kernel[...]).max()) > 0  # initialised, not zeros
    again = models.load_roberta(tmp_path / "m", seed=7)
    np.testing.assert_array_equal(np.asarray(again.pooler.kernel[...]), np.asarray(ours.pooler.kernel[...]))
