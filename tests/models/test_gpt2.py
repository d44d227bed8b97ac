"""GPT-2 against Hugging Face's PyTorch GPT2LMHeadModel."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from archer_jax import models
from archer_jax.models import attention, layers
from archer_jax.models.packing import pack
from tests import hf_reference as ref

torch = ref.torch

LENGTHS = (11, 4, 8)  # rows of different lengths, left-padded


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
def test_float32_logits_match_hugging_face(tmp_path, fmt):
    hf = ref.gpt2(seed=1)
    ours = models.load_gpt2(ref.save(hf, tmp_path / fmt, fmt))
    ids, mask = ref.padded_batch(LENGTHS, 12, "left", pad_id=0)
    expected = ref.gpt2_logits(hf, ids, mask)
    out = ours(jnp.asarray(ids), jnp.asarray(mask))
    assert out.logits.dtype == jnp.float32
    assert ref.max_abs_error(out.logits, expected, mask) < 1e-4


def test_left_padding_does_not_change_a_row(tmp_path):
    """A row's logits are the same alone and inside a left-padded batch."""
    ours = models.load_gpt2(ref.save(ref.gpt2(seed=2), tmp_path / "m", "safetensors"))
    ids, mask = ref.padded_batch(LENGTHS, 12, "left", pad_id=0)
    batch = ours(jnp.asarray(ids), jnp.asarray(mask)).logits
    alone = ours(jnp.asarray(ids[1:2, -LENGTHS[1] :])).logits
    np.testing.assert_allclose(np.asarray(batch[1, -LENGTHS[1] :]), np.asarray(alone[0]), atol=1e-5)


def test_config_variants_match_hugging_face(tmp_path):
    """Sizes and options all come from config.json: untied head, n_inner, exact gelu,
    inverse-layer-index attention scaling."""
    hf = ref.gpt2(
        seed=3,
        n_layer=3,
        n_embd=48,
        n_head=3,
        n_inner=40,
        activation_function="gelu",
        scale_attn_by_inverse_layer_idx=True,
        tie_word_embeddings=False,
    )
    ours = models.load_gpt2(ref.save(hf, tmp_path / "m", "safetensors"))
    assert ours.lm_head is not None and ours.config.n_layer == 3
    ids, mask = ref.padded_batch(LENGTHS, 12, "left", pad_id=0)
    expected = ref.gpt2_logits(hf, ids, mask)
    assert ref.max_abs_error(ours(jnp.asarray(ids), jnp.asarray(mask)).logits, expected, mask) < 1e-4


def test_scanned_blocks_match_hugging_face_values_and_gradients(tmp_path):
    """With SCAN_MIN_LAYERS or more blocks the forward is one lax.scan over stacked block
    parameters: logits and the gradients of every block's parameters match PyTorch autograd."""
    n_layer = max(layers.SCAN_MIN_LAYERS, 4)
    hf = ref.gpt2(seed=6, n_layer=n_layer)
    ours = models.load_gpt2(ref.save(hf, tmp_path / "m", "safetensors"))
    ids, mask = ref.padded_batch(LENGTHS, 12, "left", pad_id=0)
    weights = np.random.default_rng(0).normal(size=(*ids.shape, ref.VOCAB)).astype(np.float32) * mask[..., None]

    graphdef, params = nnx.split(ours)

    def loss(params):
        logits = nnx.merge(graphdef, params)(jnp.asarray(ids), jnp.asarray(mask)).logits
        return jnp.sum(jax.nn.log_softmax(logits) * weights)

    assert "scan" in str(jax.make_jaxpr(loss)(params))
    value, grads = jax.value_and_grad(loss)(params)

    hf_loss = (torch.log_softmax(ref.gpt2_forward_logits(hf, ids, mask), -1) * torch.tensor(weights)).sum()
    hf_loss.backward()
    assert abs(float(value) - hf_loss.item()) < 1e-3 * abs(hf_loss.item())
    hf_grads = {name: p.grad.numpy() for name, p in hf.named_parameters()}
    for i in range(n_layer):  # per-block gradients: a mixed-up or dropped layer fails here
        block = grads["h"][i]
        pairs = [
            (block["ln_1"]["scale"], hf_grads[f"transformer.h.{i}.ln_1.weight"]),
            (block["ln_2"]["bias"], hf_grads[f"transformer.h.{i}.ln_2.bias"]),
            (block["mlp"]["proj"]["kernel"], hf_grads[f"transformer.h.{i}.mlp.c_proj.weight"]),
        ]
        for got, expected in pairs:
            np.testing.assert_allclose(np.asarray(got[...]), expected, atol=2e-4 * np.abs(expected).max())
    wte = hf_grads["transformer.wte.weight"]  # tied: the embedding and the LM head
    np.testing.assert_allclose(np.asarray(grads["wte"]["embedding"][...]), wte, atol=2e-4 * np.abs(wte).max())


def test_bfloat16_logits_within_2e_2_relative(tmp_path):
    hf = ref.gpt2(seed=4)
    ours = models.load_gpt2(ref.save(hf, tmp_path / "m", "safetensors"), dtype=jnp.bfloat16)
    ids, mask = ref.padded_batch(LENGTHS, 12, "left", pad_id=0)
    out = ours(jnp.asarray(ids), jnp.asarray(mask))
    assert out.logits.dtype == jnp.float32  # logits stay float32 under bfloat16 compute
    assert out.hidden_state.dtype == jnp.bfloat16
    assert ref.relative_error(out.logits, ref.gpt2_logits(hf, ids, mask), mask) < 2e-2


@pytest.mark.parametrize("blocked", [False, True])
def test_kv_cache_prefill_then_decode_matches_full_forward(tmp_path, monkeypatch, blocked):
    """Prefill a left-padded prompt, decode token by token (jitted, traced cache index): each
    step's logits equal the full-sequence forward's at that position. ``blocked``: attention over
    one batch row at a time, as on CPUs at training sizes."""
    if blocked:
        monkeypatch.setattr(attention, "CPU_BLOCK_BYTES", 1)
        monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
    hf = ref.gpt2(seed=5)
    model = models.load_gpt2(ref.save(hf, tmp_path / "m", "safetensors"))
    prompt_len, new = 8, 5
    ids, mask = ref.padded_batch((8, 3, 6), prompt_len + new, "left", pad_id=0)
    # Put the padding before the prompt only: the last `new` columns are real for every row.
    mask[:, prompt_len:] = 1
    full = np.asarray(model(jnp.asarray(ids), jnp.asarray(mask)).logits)
    assert ref.max_abs_error(full, ref.gpt2_logits(hf, ids, mask), mask) < 1e-4

    slots = prompt_len + new
    cache = models.init_cache(model.config, ids.shape[0], slots)
    cache_mask = np.zeros_like(mask)
    cache_mask[:, :prompt_len] = mask[:, :prompt_len]
    out = model(jnp.asarray(ids[:, :prompt_len]), jnp.asarray(cache_mask), cache=cache, cache_index=0)
    valid = mask[:, :prompt_len].astype(bool)
    assert np.abs(np.asarray(out.logits) - full[:, :prompt_len])[valid].max() < 1e-4

    graphdef, state = nnx.split(model)

    @jax.jit
    def decode(state, token, cache_mask, cache, index):
        m = nnx.merge(graphdef, state)
        return m(token, cache_mask, cache=cache, cache_index=index)

    cache = out.cache
    for t in range(prompt_len, slots):
        cache_mask[:, t] = 1
        step = decode(state, jnp.asarray(ids[:, t : t + 1]), jnp.asarray(cache_mask), cache, jnp.int32(t))
        cache = step.cache
        np.testing.assert_allclose(np.asarray(step.logits[:, 0]), full[:, t], atol=1e-4)


def test_init_cache_rejects_more_slots_than_positions():
    config = models.GPT2Config(n_positions=16, n_layer=1, n_embd=8, n_head=2, vocab_size=10)
    with pytest.raises(ValueError, match="exceeds the model.s 16 positions"):
        models.init_cache(config, 1, 17)


def test_packed_rows_match_hugging_face_per_sequence(tmp_path):
    """Sequences packed several to a row (segment ids, positions restarting at 0) give each
    sequence Hugging Face's logits of it alone."""
    hf = ref.gpt2(seed=3)
    ours = models.load_gpt2(ref.save(hf, tmp_path / "m", "safetensors"))
    ids, mask = ref.padded_batch(LENGTHS, 12, "right", pad_id=0)
    expected = ref.gpt2_logits(hf, ids, mask)
    packed = pack([row[m == 1] for row, m in zip(ids, mask)], 0, max_length=16)
    assert packed.ids.shape[0] < len(LENGTHS)  # sequences share rows
    out = np.asarray(ours(jnp.asarray(packed.ids), segment_ids=jnp.asarray(packed.segments),
                          position_ids=jnp.asarray(packed.positions)).logits)
    for i, n in enumerate(LENGTHS):
        r, c = packed.starts[i]
        assert ref.max_abs_error(out[r, c:c + n], expected[i, :n]) < 1e-4
    with pytest.raises(ValueError, match="segment_ids"):
        ours(jnp.asarray(packed.ids), jnp.ones(packed.ids.shape, jnp.int32), segment_ids=jnp.asarray(packed.segments),
             position_ids=jnp.asarray(packed.positions))
