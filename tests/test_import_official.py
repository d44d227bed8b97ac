"""Importing the official ArCHer oracle files: a tiny official-format ``.pt`` (``torch.save`` of
``{"model_state_dict": T5ForConditionalGeneration.state_dict()}``, made here) becomes an HF
directory whose logits and greedy answers equal the PyTorch model's; bad files are one-line errors."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from archer_jax.config import validate
from archer_jax import import_official, models
from archer_jax import model_oracle
from archer_jax.models.t5.generate import greedy
from archer_jax.models.tiny import build_tiny
from tests import hf_reference as ref

torch = ref.torch
pytestmark = pytest.mark.parity  # compares logits with PyTorch: "highest" matmul precision


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A T5 tokenizer directory, the --base of the conversion (flan-t5-small's role)."""
    return build_tiny("t5", tmp_path_factory.mktemp("base") / "tiny_t5")


# The oracles: flan-t5 with its own head; a flan-t5 trained under transformers 5, whose head is
# the embedding (unscaled); T5 v1.0 (the embedding as the head, scaled).
ORACLES = {"flan": "flan", "flan_tied_head": "flan", "v1": "v1"}
# Each one's --base config.json, as it says whether the decoder output is scaled: flan-t5-small's
# as transformers 4 wrote it (the tiny base's: untied, no scaling), as transformers 5 writes it,
# and t5-small's (tied, hence scaled).
BASE_CONFIG = {"flan": {}, "flan_tied_head": {"tie_word_embeddings": True, "scale_decoder_outputs": False},
               "v1": {"tie_word_embeddings": True, "feed_forward_proj": "relu"}}


def based(base, directory, **changes):
    """A copy of the tiny base with ``changes`` to its config.json."""
    shutil.copytree(base, directory)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, **changes}))
    return directory


@pytest.fixture(scope="module", params=tuple(ORACLES))
def official(request, tmp_path_factory, base):
    """An official-format oracle file of a random T5 whose vocabulary fits the base tokenizer, and
    whose bucket distance is the base's (128, flan-t5's): the one size the shapes do not tell;
    and its base."""
    import transformers

    kind = request.param
    tokenizer = transformers.AutoTokenizer.from_pretrained(base)
    directory = tmp_path_factory.mktemp(f"hf_{kind}")
    hf = ref.t5(ORACLES[kind], directory, seed=3, own_head=kind == "flan", vocab_size=len(tokenizer),
                relative_attention_num_buckets=32, relative_attention_max_distance=128)
    path = directory / "20q_t5_oracle.pt"
    torch.save({"model_state_dict": hf.state_dict()}, path)
    return kind, hf, path, based(base, directory / "base", **BASE_CONFIG[kind])


def test_the_file_has_the_official_layout(official):
    kind, hf, path, _ = official
    state = torch.load(path, weights_only=True)
    assert list(state) == ["model_state_dict"]
    names = set(state["model_state_dict"])
    assert {"shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight"} <= names
    assert torch.equal(hf.lm_head.weight, hf.shared.weight) == (kind != "flan")
    assert hf.config.scale_decoder_outputs == (kind == "v1")


def test_converted_oracle_matches_pytorch(official, tmp_path):
    kind, hf, path, base = official
    out = import_official.convert_t5_oracle(path, tmp_path / "oracle", base=str(base))
    ours = models.load_t5(out)
    assert ours.config.num_decoder_layers == hf.config.num_decoder_layers
    assert (ours.lm_head is None) == (kind != "flan") and ours.config.gated == (kind != "v1")
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


def test_the_env_option_takes_the_official_file(official, tmp_path, monkeypatch):
    """``oracle=t5:FILE.pt`` converts the file once into the user's cache and answers from it."""
    _, _, path, base = official
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    oracle = model_oracle.load(f"t5:{path}", "twenty_questions", base=str(base))
    assert oracle.answer("Dog", "Is it alive?") in ("Yes.", "No.", "Invalid Question.")
    converted = list((tmp_path / "cache" / "archer_jax" / "oracles").iterdir())
    assert len(converted) == 1 and converted[0].name.startswith("20q_t5_oracle-")
    model_oracle.load(f"t5:{path}", "twenty_questions", base=str(base))
    assert len(list(converted[0].parent.iterdir())) == 1  # not converted again


class NotATensor:
    pass


def test_bad_files_are_one_line_errors(tmp_path, official):
    _, hf, _, base = official
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


def test_cli(official, tmp_path, capsys):
    _, _, path, base = official
    assert import_official.main([str(path), "--out", str(tmp_path / "cli"), "--base", str(base)]) == 0
    assert (tmp_path / "cli" / "config.json").is_file()
    assert import_official.main([str(tmp_path / "missing.pt"), "--out", str(tmp_path / "x"), "--base", str(base)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "missing.pt: no such file" in err[0]


def test_an_out_that_cannot_be_a_directory_is_one_line_before_any_work(official, tmp_path, capsys):
    _, _, path, base = official
    (tmp_path / "file").write_text("")
    for out, message in [(tmp_path / "file", f"--out: {tmp_path / 'file'} is a file, not a directory"),
                         (tmp_path / "file" / "oracle", f"--out: {tmp_path / 'file'} is a file, not a directory")]:
        assert import_official.main([str(path), "--out", str(out), "--base", str(base)]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [f"error: {message}"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_base_without_a_tokenizer_fails_before_writing(official, tmp_path, capsys):
    _, _, path, base = official
    (tmp_path / "no_tokenizer").mkdir()
    shutil.copy(base / "config.json", tmp_path / "no_tokenizer")
    out = tmp_path / "out"
    assert import_official.main([str(path), "--out", str(out), "--base", str(tmp_path / "no_tokenizer")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "no_tokenizer has no tokenizer files" in err[0]
    assert not out.exists()


# ---- the official policy and trainer checkpoints -------------------------------------------------


class OfficialCritic(torch.nn.Module):
    """The official ArCHer critic, as its code builds it: a RoBERTa ``base_lm`` whose pooler output
    embeds the observation and the action in two passes, and four ReLU MLP heads (Q on both, V on
    the observation)."""

    def __init__(self, base_dir, seed: int):
        super().__init__()
        import transformers

        torch.manual_seed(seed)
        self.base_lm = transformers.RobertaModel.from_pretrained(base_dir)
        d = self.base_lm.config.hidden_size

        def head(width: int):
            return torch.nn.Sequential(torch.nn.Linear(width, d), torch.nn.ReLU(), torch.nn.Linear(d, d), torch.nn.ReLU(),
                                       torch.nn.Linear(d, 1))

        self.critic1, self.critic2, self.v_critic1, self.v_critic2 = head(2 * d), head(2 * d), head(d), head(d)
        ref.randomize(self, seed, scale=0.1)

    def forward(self, obs_ids, obs_mask, action_ids, action_mask):
        s = self.base_lm(obs_ids, attention_mask=obs_mask).pooler_output
        a = self.base_lm(action_ids, attention_mask=action_mask).pooler_output
        both = torch.cat([s, a], dim=-1)
        return [x[:, 0] for x in (self.critic1(both), self.critic2(both), self.v_critic1(s), self.v_critic2(s))]


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    root = tmp_path_factory.mktemp("bases")
    return build_tiny("gpt2", root / "gpt2"), build_tiny("roberta", root / "roberta")


@pytest.fixture(scope="module")
def trainer_file(tmp_path_factory, bases):
    """A ``trainer.save`` file in the official layout, made here from random tiny networks."""
    import transformers

    policy_base, critic_base = bases
    policy = ref.randomize(transformers.GPT2LMHeadModel.from_pretrained(policy_base), seed=5)
    critic, target = OfficialCritic(critic_base, seed=6), OfficialCritic(critic_base, seed=7)
    path = tmp_path_factory.mktemp("official") / "trainer.pt"
    torch.save({
        "model_state_dict": policy.state_dict(),
        "critic_state_dict": critic.state_dict(),
        "target_critic_state_dict": target.state_dict(),
        "critic_optimizer_state_dict": torch.optim.Adam(critic.parameters()).state_dict(),
        "lm_optimizer_state_dict": torch.optim.Adam(policy.parameters()).state_dict(),
    }, path)
    return path, policy, critic, target


def test_sft_policy_checkpoint_imports(tmp_path, bases, trainer_file):
    _, policy, _, _ = trainer_file
    path = tmp_path / "sft.pt"
    torch.save({"model_state_dict": policy.state_dict(), "optimizer_state_dict": {}}, path)
    written = import_official.convert(path, tmp_path / "out", base=str(bases[0]))
    assert set(written) == {"policy"}
    ours = models.load_causal_lm(written["policy"])
    ids, mask = ref.padded_batch((9, 5), 12, "left", pad_id=0)
    expected = ref.causal_logits(policy, ids, mask)
    assert ref.relative_error(np.asarray(ours(ids, mask).logits), expected, mask) < 1e-4


def test_trainer_checkpoint_imports_with_the_critics_values(tmp_path, bases, trainer_file):
    """Q1, Q2, V1, V2 of the imported critic and of its target equal the official PyTorch critic's
    on fixed texts."""
    from flax import nnx
    from safetensors.numpy import load_file

    from archer_jax.learners import official_critic
    from archer_jax.learners.critic import DoubleCritic
    from archer_jax.models.tokenizer import Tokens

    path, _, critic, target = trainer_file
    written = import_official.convert(path, tmp_path / "out", base=str(bases[0]), critic_base=str(bases[1]))
    assert set(written) == {"policy", "critic", "critic_init"}
    tensors = load_file(written["critic_init"])
    module = DoubleCritic(models.load_roberta(written["critic"]), rngs=nnx.Rngs(0))
    graphdef, template = nnx.split(module)
    ids, mask = ref.padded_batch((11, 6, 3), 12, "right", pad_id=1)
    action_ids, action_mask = ref.padded_batch((4, 7, 2), 8, "right", pad_id=1, seed=1)
    for prefix, official in (("critic.", critic), ("target_critic.", target)):
        params = official_critic.params(tensors, template, module.encoder.config, prefix)
        ours = nnx.merge(graphdef, params)(Tokens(ids, mask), Tokens(action_ids, action_mask))
        with torch.no_grad():
            expected = official(*(torch.tensor(x) for x in (ids, mask, action_ids, action_mask)))
        for got, want in zip(ours, expected):
            np.testing.assert_allclose(np.asarray(got), want.numpy(), rtol=1e-4, atol=1e-4 * float(np.abs(want.numpy()).max()))


def test_trainer_file_missing_a_head_names_it(tmp_path, bases, trainer_file):
    path, policy, critic, target = trainer_file
    state = {k: v for k, v in critic.state_dict().items() if not k.startswith("v_critic2.")}
    broken = tmp_path / "broken.pt"
    torch.save({"model_state_dict": policy.state_dict(), "critic_state_dict": state,
                "target_critic_state_dict": target.state_dict()}, broken)
    with pytest.raises(import_official.OfficialFileError, match=r"critic_state_dict: missing tensors critic.v_critic2.0.weight"):
        import_official.convert(broken, tmp_path / "out", base=str(bases[0]), critic_base=str(bases[1]))
    # The policy was converted before the critic failed: nothing of it is left, in --out or beside it.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.pt"]
    unknown = tmp_path / "unknown.pt"
    torch.save({"weights": {"x": torch.zeros(2)}}, unknown)
    with pytest.raises(import_official.OfficialFileError, match=r"not an official oracle, policy or trainer file"):
        import_official.convert(unknown, tmp_path / "out")


def test_a_run_starts_from_the_imported_critic(tmp_path, bases, trainer_file):
    """--config.model.critic_init: the run's critic and target are the official ones, with a fresh optimizer."""
    from archer_jax.run.warm_start import critic_from_file
    from archer_jax.train import build_agent
    from archer_jax.learners import official_critic
    from safetensors.numpy import load_file
    from tests.run.test_train_app import micro

    path, _, _, _ = trainer_file
    written = import_official.convert(path, tmp_path / "out", base=str(bases[0]), critic_base=str(bases[1]))
    c = micro(sft__steps=0)
    c.model.policy, c.model.critic = str(written["policy"]), str(written["critic"])
    c.model.critic_init = str(written["critic_init"])
    agent = build_agent(validate(c), tmp_path / "run")
    run = agent.parts
    states = critic_from_file(agent, agent.init_states(), c.model.critic_init)
    tensors = load_file(written["critic_init"])
    expected = official_critic.params(tensors, states.critic.params, run.encoder_config, "target_critic.")
    for got, want in zip(jax_leaves(states.critic.target), jax_leaves(expected)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert int(states.critic.step) == 0


def jax_leaves(tree):
    import jax

    return jax.tree.leaves(tree)


def test_critic_init_config_errors(tmp_path):
    from archer_jax import config as config_lib
    from archer_jax.errors import ConfigError
    from tests.run.test_train_app import micro

    c = micro(sft__steps=0)
    c.model.critic_init = str(tmp_path / "missing.safetensors")
    with pytest.raises(ConfigError, match=r"config.model.critic_init: .*missing.safetensors does not exist"):
        config_lib.validate(c)
    (tmp_path / "critic_init.safetensors").write_bytes(b"")
    c.model.critic_init, c.init_from = str(tmp_path / "critic_init.safetensors"), str(tmp_path)
    with pytest.raises(ConfigError, match=r"config.model.critic_init: init_from already gives"):
        config_lib.validate(c)
