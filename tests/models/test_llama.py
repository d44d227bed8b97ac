"""The Llama family (Llama, Mistral, Qwen2) against Hugging Face's PyTorch models."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from archer_jax import models
from archer_jax.models import layers
from archer_jax.models.llama import LlamaConfig
from archer_jax.models.packing import pack
from archer_jax.models.rope import RopeScaling, inverse_frequencies
from archer_jax.runtime import sharding
from tests import hf_reference as ref

torch = ref.torch
FAMILY = ("llama", "mistral", "qwen2")
LENGTHS = (14, 5, 9)  # longer than the windows (5 and 4 tokens): the windows matter


@pytest.fixture(scope="module", params=FAMILY)
def pair(request, tmp_path_factory):
    hf = ref.llama_family(request.param, seed=FAMILY.index(request.param))
    directory = tmp_path_factory.mktemp(request.param)
    hf.save_pretrained(directory)
    return request.param, hf, models.load_causal_lm(directory), directory


def test_logits_match_hugging_face(pair):
    kind, hf, ours, _ = pair
    assert ours.config.model_type == kind
    ids, mask = ref.padded_batch(LENGTHS, 16, "left", pad_id=0)
    expected = ref.causal_logits(hf, ids, mask)
    out = ours(jnp.asarray(ids), jnp.asarray(mask))
    assert out.logits.dtype == jnp.float32
    assert ref.relative_error(out.logits, expected, mask) < 1e-4


def test_the_family_options_are_in_force(pair):
    """Each test model exercises its family's option: dropping it changes the logits."""
    kind, _, ours, _ = pair
    ids, mask = ref.padded_batch(LENGTHS, 16, "left", pad_id=0)
    base = np.asarray(ours(jnp.asarray(ids), jnp.asarray(mask)).logits)
    if kind == "llama":
        changed = ours.config.replace(rope_scaling=RopeScaling())
    else:
        changed = ours.config.replace(sliding_window=None, layer_types=("full_attention",) * ours.config.num_layers)
    graphdef, state = nnx.split(ours)
    other = nnx.merge(graphdef, state)
    other.config = changed
    for layer in other.layers:
        layer.windowed = False
    assert np.abs(np.asarray(other(jnp.asarray(ids), jnp.asarray(mask)).logits) - base)[mask == 1].max() > 1e-3
    if kind == "qwen2":
        assert ours.layers[0].self_attn.query.bias is not None and ours.lm_head is None
    if kind == "mistral":
        assert ours.layers[0].self_attn.key.kernel.shape == (32, 1, 16)


def test_llama3_frequencies_equal_hugging_face():
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    hf = ref.llama_family("llama").config
    expected, _ = ROPE_INIT_FUNCTIONS["llama3"](hf, "cpu")
    ours = LlamaConfig.from_hf_dict(hf.to_dict())
    np.testing.assert_allclose(inverse_frequencies(ours.head_dim, ours.rope_theta, ours.rope_scaling),
                               expected.numpy(), rtol=1e-6)


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
def test_scanned_layers_match_hugging_face_gradients(tmp_path):
    """Four layers run as one lax.scan; the loss and every layer's gradients match autograd."""
    n = max(layers.SCAN_MIN_LAYERS, 4)
    hf = ref.llama_family("llama", seed=5, num_hidden_layers=n)
    hf.save_pretrained(tmp_path)
    ours = models.load_causal_lm(tmp_path)
    ids, mask = ref.padded_batch(LENGTHS, 16, "left", pad_id=0)
    weights = np.random.default_rng(0).normal(size=(*ids.shape, ref.VOCAB)).astype(np.float32) * mask[..., None]
    graphdef, params = nnx.split(ours)

    def loss(params):
        logits = nnx.merge(graphdef, params)(jnp.asarray(ids), jnp.asarray(mask)).logits
        return jnp.sum(jax.nn.log_softmax(logits) * weights)

    assert "scan" in str(jax.make_jaxpr(loss)(params))
    value, grads = jax.value_and_grad(loss)(params)
    hf_loss = (torch.log_softmax(ref.gpt2_forward_logits(hf, ids, mask), -1) * torch.tensor(weights)).sum()
    hf_loss.backward()
    assert abs(float(value) - hf_loss.item()) < 1e-4 * abs(hf_loss.item())
    for i in range(n):
        expected = hf.model.layers[i].mlp.down_proj.weight.grad.numpy().T
        got = np.asarray(grads["layers"][i]["mlp"]["down_proj"]["kernel"][...])
        np.testing.assert_allclose(got, expected, atol=1e-4 * np.abs(expected).max())


def test_kv_cache_prefill_then_decode_matches_full_forward(pair):
    """Prefill a left-padded prompt, then decode token by token: each step's logits equal the
    full forward pass at that position (windows and grouped heads over the cache)."""
    _, _, ours, _ = pair
    ids, mask = ref.padded_batch(LENGTHS, 16, "left", pad_id=0)
    prompt, new = 10, 6
    full = np.asarray(ours(jnp.asarray(ids), jnp.asarray(mask)).logits)
    cache = models.init_cache(ours.config, ids.shape[0], 16)
    slot_mask = np.concatenate([mask[:, :prompt], np.zeros((3, new), np.int32)], axis=1)
    out = ours(jnp.asarray(ids[:, :prompt]), jnp.asarray(slot_mask), cache=cache, cache_index=0)
    real = mask[:, prompt - 1] == 1  # a row may have no real token in the prompt yet
    np.testing.assert_allclose(np.asarray(out.logits[real, -1]), full[real, prompt - 1], atol=1e-4)
    cache = out.cache
    for t in range(prompt, 16):
        slot_mask[:, t] = mask[:, t]
        step = ours(jnp.asarray(ids[:, t : t + 1]), jnp.asarray(slot_mask), cache=cache, cache_index=t)
        cache = step.cache
        rows = mask[:, t] == 1
        np.testing.assert_allclose(np.asarray(step.logits[rows, 0]), full[rows, t], atol=1e-4)


def test_greedy_generation_is_token_identical_to_hugging_face(pair):
    from archer_jax.sampling import SamplingParams
    from archer_jax.sampling.decoding import Decoder

    _, hf, ours, _ = pair
    ids, mask = ref.padded_batch(LENGTHS, 16, "left", pad_id=0)
    eos = np.arange(ref.VOCAB) == 0  # the test models' EOS ends a row (and pads it), in ours as in HF
    decoder = Decoder(ours, lambda sampling: eos, pad_id=0)
    params = SamplingParams(max_new_tokens=12, greedy=True)
    out = decoder.generate_tokens(ids, mask, jax.random.key(0), params)
    with torch.no_grad():
        config = ref.transformers.GenerationConfig(do_sample=False, max_new_tokens=12, eos_token_id=0, pad_token_id=0)
        generated = hf.generate(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
                                generation_config=config)
    expected = generated[:, ids.shape[1]:].numpy()
    np.testing.assert_array_equal(np.asarray(out.tokens)[: len(LENGTHS), : expected.shape[1]], expected)
    assert (expected != 0).sum() > 12 and len({tuple(r) for r in expected}) == len(LENGTHS)  # not a trivial output


def test_save_pretrained_round_trips_through_hugging_face(pair, tmp_path):
    kind, hf, ours, _ = pair
    models.save_pretrained(ours, tmp_path)
    back = ref.transformers.AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert type(back) is type(hf)
    ids, mask = ref.padded_batch(LENGTHS, 16, "left", pad_id=0)
    np.testing.assert_allclose(ref.causal_logits(back, ids, mask)[mask == 1], ref.causal_logits(hf, ids, mask)[mask == 1],
                               atol=1e-5)


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 devices: XLA_FLAGS=--xla_force_host_platform_device_count=8")
def test_loading_into_a_mesh_shards_each_tensor_and_computes_the_same(pair):
    """Loaded straight into (data 2, fsdp 2, tensor 2) shardings: every weight is split by its
    logical axes, each device holding its shard only, and the logits equal the unsharded model's."""
    _, _, ours, directory = pair
    mesh = sharding.make_mesh(2, 2, 2)
    sharded = models.load_causal_lm(directory, mesh=mesh)
    gate = sharded.layers[0].mlp.gate_proj.kernel[...]
    assert gate.sharding.spec == jax.sharding.PartitionSpec("fsdp", "tensor")
    assert gate.addressable_shards[0].data.shape == (16, 24)
    query = sharded.layers[0].self_attn.query.kernel[...]
    assert query.sharding.spec == jax.sharding.PartitionSpec("fsdp", "tensor", None)
    ids, mask = ref.padded_batch((16, 5, 9, 12), 16, "left", pad_id=0)
    graphdef, state = nnx.split(sharded)
    forward = jax.jit(lambda s, i, m: nnx.merge(graphdef, s)(i, m).logits)
    got = forward(state, jax.device_put(ids, sharding.batch_sharding(mesh)), jax.device_put(mask, sharding.batch_sharding(mesh)))
    expected = ours(jnp.asarray(ids), jnp.asarray(mask)).logits
    np.testing.assert_allclose(np.asarray(got)[mask == 1], np.asarray(expected)[mask == 1], atol=1e-5)


def test_bad_configs_give_one_line_errors(tmp_path):
    with pytest.raises(ValueError, match="rope_type 'yarn' is not supported"):
        LlamaConfig.from_hf_dict({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}})
    with pytest.raises(ValueError, match="num_heads 4 is not a multiple of num_kv_heads 3"):
        models.LlamaForCausalLM(LlamaConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=3,
                                            num_hidden_layers=1, vocab_size=10), rngs=nnx.Rngs(0))
    hf = ref.llama_family("llama")
    hf.save_pretrained(tmp_path)
    with pytest.raises(models.ModelLoadError, match="describes a 'llama' model, not 'gpt2'"):
        models.load_gpt2(tmp_path)


def test_packed_rows_match_hugging_face_per_sequence(pair):
    """Sequences packed several to a row (segment ids, positions restarting at 0) give each
    sequence Hugging Face's logits of it alone: no attention across sequences, windows within one."""
    _, hf, ours, _ = pair
    ids, mask = ref.padded_batch(LENGTHS, 16, "right", pad_id=0)
    expected = ref.causal_logits(hf, ids, mask)
    packed = pack([row[m == 1] for row, m in zip(ids, mask)], 0, max_length=16)
    assert packed.ids.shape[0] < len(LENGTHS)  # two sequences share a row
    out = np.asarray(ours(jnp.asarray(packed.ids), segment_ids=jnp.asarray(packed.segments),
                          position_ids=jnp.asarray(packed.positions)).logits)
    for i, n in enumerate(LENGTHS):
        r, c = packed.starts[i]
        assert ref.relative_error(out[r, c:c + n], expected[i, :n]) < 1e-4
