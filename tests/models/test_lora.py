"""LoRA adapters against Hugging Face PEFT: the same adapter weights give the same logits and
gradients, in both directions of the adapter format."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from safetensors.numpy import load_file, save_file

from archer_jax import models
from archer_jax.models import lora
from archer_jax.models.hub import ModelLoadError
from archer_jax.runtime import sharding
from tests import hf_reference as ref

torch = ref.torch
transformers = ref.transformers
peft = pytest.importorskip("peft", reason="the LoRA reference is Hugging Face PEFT (pip install -e '.[test]')")

LENGTHS = (11, 4, 8)  # left-padded rows of different lengths
SIZES = dict(vocab_size=ref.VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, bos_token_id=0, eos_token_id=0, pad_token_id=0)
ALL_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("llama")
    ref.randomize(transformers.LlamaForCausalLM(transformers.LlamaConfig(**SIZES)), seed=1).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def qwen2_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("qwen2")
    config = transformers.Qwen2Config(**SIZES, tie_word_embeddings=True)
    ref.randomize(transformers.Qwen2ForCausalLM(config), seed=2).save_pretrained(directory)
    return directory


def hf_model(directory):
    return transformers.AutoModelForCausalLM.from_pretrained(directory, attn_implementation="eager").eval()


def batch():
    ids, mask = ref.padded_batch(LENGTHS, 12, "left", pad_id=0)
    return ids, mask


def logits(model, ids, mask) -> np.ndarray:
    return np.asarray(model(jnp.asarray(ids), jnp.asarray(mask)).logits)


def randomize_adapters(model, seed: int) -> None:
    """Random nonzero A and B in every adapter (B is zero after apply_lora)."""
    rng = np.random.default_rng(seed)
    for path in lora.lora_modules(model).values():
        layer = lora._node(model, path)
        for variable in (layer.lora_a, layer.lora_b):
            variable.set_value(jnp.asarray(0.3 * rng.standard_normal(variable.shape), jnp.float32))


def with_random_adapters(directory, config, seed=0):
    ours = models.load_causal_lm(directory)
    lora.apply_lora(ours, config, rngs=nnx.Rngs(seed))
    randomize_adapters(ours, seed)
    return ours


def test_our_adapters_give_peft_logits(llama_dir, tmp_path):
    ours = with_random_adapters(llama_dir, lora.LoRAConfig(rank=4, alpha=8.0))
    lora.save_peft(ours, tmp_path / "adapter", base_model_name_or_path=str(llama_dir))
    hf = hf_model(llama_dir)
    ids, mask = batch()
    base = ref.causal_logits(hf, ids, mask)
    reference = peft.PeftModel.from_pretrained(hf, tmp_path / "adapter").eval()
    assert len([n for n, _ in reference.named_modules() if n.endswith("lora_A.default")]) == 8
    expected = ref.causal_logits(reference, ids, mask)
    assert ref.relative_error(base, expected, mask) > 1e-2  # the adapters matter
    assert ref.relative_error(logits(ours, ids, mask), expected, mask) < 1e-4


def test_peft_adapters_load_into_ours(llama_dir, tmp_path):
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"], lora_dropout=0.0)
    reference = peft.get_peft_model(hf_model(llama_dir), config)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in reference.named_parameters():
            if "lora_B" in name:  # PEFT starts B at zero
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
    reference.save_pretrained(tmp_path / "adapter")
    ours = models.load_causal_lm(llama_dir)
    loaded = lora.load_peft(ours, tmp_path / "adapter")
    assert len(loaded) == 6 and "model.layers.1.mlp.up_proj" in loaded
    assert lora.lora_config(ours) == lora.LoRAConfig(4, 8.0, 0.0, ("q_proj", "v_proj", "up_proj"))
    ids, mask = batch()
    expected = ref.causal_logits(reference.eval(), ids, mask)
    assert ref.relative_error(logits(ours, ids, mask), expected, mask) < 1e-4


def test_qwen2_with_every_projection_matches_peft(qwen2_dir, tmp_path):
    """Qwen2's query/key/value biases stay in the base layers; the MLP is adapted too."""
    ours = with_random_adapters(qwen2_dir, lora.LoRAConfig(rank=3, alpha=5.0, targets=ALL_TARGETS), seed=4)
    assert ours.layers[0].self_attn.query.base.bias is not None
    lora.save_peft(ours, tmp_path / "adapter")
    assert json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())["target_modules"] == list(ALL_TARGETS)
    reference = peft.PeftModel.from_pretrained(hf_model(qwen2_dir), tmp_path / "adapter").eval()
    ids, mask = batch()
    expected = ref.causal_logits(reference, ids, mask)
    assert ref.relative_error(logits(ours, ids, mask), expected, mask) < 1e-4


def test_fresh_adapters_change_nothing_and_merging_round_trips(llama_dir, tmp_path):
    ours = models.load_causal_lm(llama_dir)
    ids, mask = batch()
    base = logits(ours, ids, mask)
    config = lora.LoRAConfig(rank=4, targets=("q_proj", "o_proj", "down_proj"))
    wrapped = lora.apply_lora(ours, config, rngs=nnx.Rngs(0))
    assert len(wrapped) == 6 and isinstance(ours.layers[1].mlp.down_proj, lora.LoRADense)
    np.testing.assert_array_equal(logits(ours, ids, mask), base)  # B = 0
    randomize_adapters(ours, 5)
    adapted = logits(ours, ids, mask)
    assert ref.relative_error(adapted, base, mask) > 1e-2
    layer = ours.layers[0].self_attn.out
    kernel = np.asarray(layer.base.kernel[...])
    for path in lora.lora_modules(ours).values():
        lora._node(ours, path).merge()
    assert layer.merged and np.abs(np.asarray(layer.base.kernel[...]) - kernel).max() > 1e-3
    assert ref.relative_error(logits(ours, ids, mask), adapted, mask) < 1e-5
    for path in lora.lora_modules(ours).values():
        lora._node(ours, path).unmerge()
    np.testing.assert_allclose(np.asarray(layer.base.kernel[...]), kernel, atol=1e-6)

    before = np.asarray(layer.base.kernel[...])
    plain = lora.merged_copy(ours)
    assert not any(isinstance(m, lora.LoRADense) for _, m in nnx.iter_graph(plain))
    assert not jax.tree.leaves(nnx.state(plain, nnx.LoRAParam))
    assert isinstance(ours.layers[0].self_attn.out, lora.LoRADense) and not layer.merged  # the input is unchanged
    np.testing.assert_array_equal(np.asarray(ours.layers[0].self_attn.out.base.kernel[...]), before)
    assert ref.relative_error(logits(plain, ids, mask), adapted, mask) < 1e-5
    exported = models.load_causal_lm(models.save_pretrained(plain, tmp_path / "merged"))
    assert ref.relative_error(logits(exported, ids, mask), adapted, mask) < 1e-5


def test_dropout_only_in_a_training_view(llama_dir):
    ours = with_random_adapters(llama_dir, lora.LoRAConfig(rank=4, dropout=0.5, targets=("v_proj",)))
    ids, mask = batch()
    plain = logits(ours, ids, mask)
    np.testing.assert_array_equal(logits(ours, ids, mask), plain)
    training = nnx.view(ours, only=nnx.Dropout, deterministic=False)
    assert ref.relative_error(logits(training, ids, mask), plain, mask) > 1e-3
    no_dropout = with_random_adapters(llama_dir, lora.LoRAConfig(rank=4, targets=("v_proj",)))
    view = nnx.view(no_dropout, only=nnx.Dropout, deterministic=False)
    np.testing.assert_array_equal(logits(view, ids, mask), logits(no_dropout, ids, mask))


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
def test_only_the_adapters_are_trainable_and_their_gradients_match_peft(llama_dir, tmp_path):
    assert lora.trainable_filter is nnx.LoRAParam
    ours = models.load_causal_lm(llama_dir)
    config = lora.LoRAConfig(rank=4, alpha=8.0, targets=("k_proj", "gate_proj"))
    wrapped = lora.apply_lora(ours, config, rngs=nnx.Rngs(0))
    graphdef, adapters, rest = nnx.split(ours, lora.trainable_filter, ...)
    assert len(jax.tree.leaves(adapters)) == 2 * len(wrapped) == 8
    ids, mask = batch()
    weights = np.random.default_rng(0).normal(size=(*ids.shape, ref.VOCAB)).astype(np.float32) * mask[..., None]

    def loss(adapters):
        out = nnx.merge(graphdef, adapters, rest)(jnp.asarray(ids), jnp.asarray(mask)).logits
        return jnp.sum(jax.nn.log_softmax(out) * weights)

    grads = dict(nnx.to_flat_state(jax.grad(loss)(adapters)))
    a_path, b_path = ("layers", 0, "self_attn", "key", "lora_a"), ("layers", 0, "self_attn", "key", "lora_b")
    assert np.abs(np.asarray(grads[b_path][...])).max() > 0 and not np.asarray(grads[a_path][...]).any()  # B = 0

    randomize_adapters(ours, 6)
    graphdef, adapters, rest = nnx.split(ours, lora.trainable_filter, ...)
    grads = {path: np.asarray(g[...]) for path, g in nnx.to_flat_state(jax.grad(loss)(adapters))}
    assert all(np.isfinite(g).all() and np.abs(g).max() > 0 for g in grads.values())
    lora.save_peft(ours, tmp_path / "adapter")
    reference = peft.PeftModel.from_pretrained(hf_model(llama_dir), tmp_path / "adapter", is_trainable=True)
    hf_loss = (torch.log_softmax(ref.gpt2_forward_logits(reference, ids, mask), -1) * torch.tensor(weights)).sum()
    hf_loss.backward()
    hf_grads = {n: p.grad.numpy() for n, p in reference.named_parameters() if p.grad is not None}
    assert len(hf_grads) == 8
    prefix = "base_model.model.model.layers.1.mlp.gate_proj"
    as_hf = {"lora_a": ("lora_A", lambda g: g.reshape(-1, 4).T), "lora_b": ("lora_B", lambda g: g.reshape(4, -1).T)}
    for ours_name, (hf_name, flat) in as_hf.items():
        expected = hf_grads[f"{prefix}.{hf_name}.default.weight"]
        got = flat(grads[("layers", 1, "mlp", "gate_proj", ours_name)])
        assert np.abs(got - expected).max() < 1e-4 * np.abs(expected).max()


def test_bad_configs_and_adapter_directories_are_one_line_errors(llama_dir, tmp_path):
    for kwargs, field in ((dict(rank=-1), "rank"), (dict(rank=4, alpha=0.0), "alpha"), (dict(rank=4, dropout=1.0), "dropout"),
                          (dict(rank=4, targets=()), "targets"), (dict(rank=4, targets=" , "), "targets")):
        with pytest.raises(ValueError, match=field) as error:
            lora.LoRAConfig(**kwargs)
        assert "\n" not in str(error.value)
    ours = models.load_causal_lm(llama_dir)
    with pytest.raises(ValueError, match=r"'qproj' matches no layer; available: .*q_proj.*down_proj"):
        lora.apply_lora(ours, lora.LoRAConfig(rank=4, targets=("q_proj", "qproj")), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="rank: 0 means no adapters"):
        lora.apply_lora(ours, lora.LoRAConfig(), rngs=nnx.Rngs(0))
    assert lora.LoRAConfig(rank=4, targets="q_proj, v_proj") == lora.LoRAConfig(rank=4, targets=("q_proj", "v_proj"))
    assert lora.lora_config(ours) is None  # nothing was wrapped
    lora.apply_lora(ours, lora.LoRAConfig(rank=4), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="already has LoRA adapters"):
        lora.apply_lora(ours, lora.LoRAConfig(rank=4), rngs=nnx.Rngs(0))
    good = lora.save_peft(ours, tmp_path / "good")

    def broken(name, edit_config=None, edit_tensors=None):
        directory = tmp_path / name
        directory.mkdir()
        config = json.loads((good / "adapter_config.json").read_text())
        (directory / "adapter_config.json").write_text(json.dumps(edit_config(config) if edit_config else config))
        if edit_tensors is not False:
            tensors = load_file(good / "adapter_model.safetensors")
            save_file(edit_tensors(tensors) if edit_tensors else tensors, directory / "adapter_model.safetensors")
        return directory

    key = "base_model.model.model.layers.1.self_attn.v_proj.lora_A.weight"
    cases = [
        (tmp_path / "nowhere", "nowhere/adapter_config.json does not exist"),
        (broken("ia3", edit_config=lambda c: {**c, "peft_type": "IA3"}), "peft_type 'IA3'"),
        (broken("no_weights", edit_tensors=False), "no_weights/adapter_model.safetensors does not exist"),
        (broken("missing", edit_tensors=lambda t: {k: v for k, v in t.items() if k != key}), f"lacks tensor {key}"),
        (broken("extra", edit_tensors=lambda t: {**t, "base_model.model.lm_head.lora_A.weight": t[key]}),
         "no adapter of the model takes: base_model.model.lm_head.lora_A.weight"),
        (broken("shape", edit_tensors=lambda t: {**t, key: t[key][:, :-1].copy()}), rf"{key} has shape \(4, 31\)"),
        (broken("rslora", edit_config=lambda c: {**c, "use_rslora": True}), "use_rslora=True is not supported"),
    ]
    fresh = models.load_causal_lm(llama_dir)
    for directory, message in cases:
        with pytest.raises(ModelLoadError, match=message) as error:
            lora.load_peft(fresh, directory)
        assert "\n" not in str(error.value)
    assert lora.lora_config(fresh) is None  # a failed load leaves the model as it was
    with pytest.raises(ModelLoadError, match="holds adapters .* but the model has"):
        lora.load_peft(ours, broken("other_rank", edit_config=lambda c: {**c, "r": 8}))
    assert lora.load_peft(ours, good)  # the matching adapters load into the model that has them


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 devices (tests/conftest.py forces 8 CPU devices)")
def test_sharded_lora_forward_equals_the_unsharded_one(llama_dir):
    ours = with_random_adapters(llama_dir, lora.LoRAConfig(rank=4, targets=ALL_TARGETS))
    ids, mask = batch()
    ids, mask = np.concatenate([ids, ids[:1]]), np.concatenate([mask, mask[:1]])  # 4 rows: the batch axes split them
    expected = logits(ours, ids, mask)
    mesh = sharding.make_mesh(2, 2, 2)
    graphdef, state = nnx.split(ours)
    shardings = sharding.state_shardings(state, mesh)
    flat = dict(nnx.to_flat_state(shardings))
    assert flat[("layers", 0, "self_attn", "query", "lora_a")].spec == jax.sharding.PartitionSpec("fsdp", None)
    assert flat[("layers", 0, "self_attn", "query", "lora_b")].spec == jax.sharding.PartitionSpec(None, "tensor", None)
    assert flat[("layers", 0, "mlp", "down_proj", "lora_a")].spec == jax.sharding.PartitionSpec("tensor", None)
    state = jax.device_put(state, shardings)
    batch_sharding = sharding.batch_sharding(mesh)
    forward = jax.jit(lambda s, i, m: nnx.merge(graphdef, s)(i, m).logits)
    out = forward(state, *(jax.device_put(jnp.asarray(x), batch_sharding) for x in (ids, mask)))
    assert ref.relative_error(np.asarray(out), expected, mask) < 1e-5
