"""Config files: presets and the official values (docs/algorithms.md)."""

import importlib.util
from pathlib import Path

import pytest

from archer_jax import config as config_lib
from archer_jax import config_docs

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, CONFIGS / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_20q_default_is_the_papers_setting():
    c = load("20q.py").get_config()
    # docs/algorithms.md, official online hyperparameters.
    assert (c.model.policy, c.model.critic, c.agent) == ("gpt2", "roberta-base", "archer")
    assert (c.capacity, c.rollout_size, c.eval_size, c.batch_size, c.grad_accum_steps) == (100000, 128, 32, 8, 32)
    assert (c.critic_steps, c.actor_steps, c.warmup_iter, c.iterations) == (50, 3, 20, 2000)
    l = c.learner
    assert (l.critic_lr, l.actor_lr, l.gamma, l.tau, l.max_grad_norm) == (2e-5, 1e-6, 0.95, 0.1, 1.0)
    assert (c.sampling.max_new_tokens, c.sampling.temperature, c.save_freq, c.eval_freq) == (32, 1.0, 25, 25)


def test_tiny_preset_needs_no_download_and_unknown_presets_fail():
    module = load("20q.py")
    tiny = module.get_config("tiny")
    assert tiny.model.policy.startswith("tiny:") and tiny.model.critic.startswith("tiny:") and tiny.sft.steps > 0
    assert set(tiny.keys()) == set(module.get_config().keys())  # presets change values, never keys
    with pytest.raises(ValueError, match="unknown preset 'big'"):
        module.get_config("big")


@pytest.mark.parametrize("name", ["20q.py", "20q_subset.py", "city.py", "detective.py", "webshop.py"])
def test_every_config_file_has_exactly_the_base_keys_and_validates(name, tmp_path):
    from archer_jax import config as config_lib

    c = load(name).get_config()
    assert sorted(c.keys()) == sorted(config_lib.base_config().keys())
    # Offline (as in tests), hub names must be in the HF cache; the rest of the config is checked
    # with the offline tiny models instead.
    c.model.policy, c.model.critic = "tiny:gpt2", "tiny:roberta"
    if name == "detective.py":  # needs the game file, which is not shipped
        with pytest.raises(config_lib.ConfigError, match="config.env.options.game_path: missing"):
            config_lib.validate(c)
        game = tmp_path / "detective.z5"
        game.write_bytes(b"\0")
        c.env.options.game_path = str(game)
    config_lib.validate(c)
    with pytest.raises(ValueError, match="unknown preset"):
        load(name).get_config("nope")


def test_env_specific_settings_follow_the_official_code():
    assert (load("city.py").get_config().learner.actor_lr, load("city.py").get_config().warmup_iter) == (1e-5, 10)
    detective = load("detective.py").get_config()
    assert (detective.env.name, detective.env.max_turns, detective.warmup_iter, detective.learner.actor_lr) == (
        "detective", 50, 10, 1e-5)
    webshop = load("webshop.py").get_config()
    assert (webshop.env.name, webshop.env.max_turns, webshop.rollout_size) == ("webshop", 10, 512)
    assert load("20q_subset.py").get_config().env.name == "twenty_questions_subset"


# ---- keys, their docs and the validation gaps of issue 19 (item 7) -------------------------


def test_every_key_has_one_line_of_doc():
    from archer_jax import config as config_lib

    keys = list(config_lib.flat_defaults())
    assert sorted(config_docs.KEY_DOCS) == sorted(keys)
    assert all(doc.strip() and "\n" not in doc for doc in config_docs.KEY_DOCS.values())


def test_the_docs_key_table_is_the_one_the_fields_declare():
    """docs/algorithms.md's key table is generated from the keys' fields: a key whose line or
    official name changed without the table fails here (python -m archer_jax.config_docs
    docs/algorithms.md regenerates it)."""
    docs = Path(__file__).resolve().parents[1] / "docs" / "algorithms.md"
    text = docs.read_text()
    assert config_docs.with_table(text) == text
    rows = config_docs.key_table().splitlines()[2:]
    assert [row.split("`")[1] for row in rows] == list(config_docs.KEY_DOCS)  # every key, once
    assert "| `learner.critic_lr` | `critic_lr` | 2e-05 | Adam learning rate of the critic |" in rows
    stale = text.replace("| Adam learning rate of the critic |", "| the critic's learning rate |")
    assert config_docs.with_table(stale) != stale  # the check can fail


def test_validate_returns_the_typed_config_the_run_reads():
    from archer_jax.agents import archer
    from archer_jax.models.lora import LoRAConfig
    from archer_jax.sampling import SamplingParams

    c = _tiny()
    run = config_lib.validate(c)
    assert isinstance(run, config_lib.RunConfig) and run.source is c
    assert isinstance(run.sampling, SamplingParams) and run.sampling.temperature == c.sampling.temperature
    assert isinstance(run.model.lora, LoRAConfig) and run.env.options == c.env.options.to_dict()
    assert run.algorithm == archer.ArCHer.config_of(c) and run.batch_size == c.batch_size
    assert run.algorithm.learner.distribution.temperature == c.sampling.temperature  # scored as sampled
    c.offline.split = "validation"  # an online run's offline keys are checked too (no key is read unchecked)
    with pytest.raises(config_lib.ConfigError, match=r"^config.offline.split: unknown value 'validation'"):
        config_lib.validate(c)


def test_build_agent_refuses_the_raw_config(tmp_path):
    from archer_jax.train import build_agent

    with pytest.raises(TypeError, match=r"build_agent\(validate\(config\), workdir\)"):
        build_agent(_tiny(), tmp_path)


def _tiny():
    c = load("20q.py").get_config("micro")
    return c


@pytest.mark.parametrize(
    "group, key, value, message",
    [
        ("learner", "tau", 0.0, r"^config.learner.tau: must be in \(0, 1\], got 0.0$"),
        ("learner", "tau", 1.5, r"^config.learner.tau: must be in \(0, 1\], got 1.5$"),
        ("learner", "max_grad_norm", 0.0, r"^config.learner.max_grad_norm: must be finite and > 0 .*got 0.0$"),
        ("learner", "max_grad_norm", -1.0, r"^config.learner.max_grad_norm: must be finite and > 0 .*got -1.0$"),
        ("learner", "max_grad_norm", float("inf"), r"^config.learner.max_grad_norm: must be finite and > 0 .*got inf$"),
        ("learner", "gamma", 1.5, r"^config.learner.gamma: must be in \[0, 1\], got 1.5$"),
        ("sampling", "top_p", 0.0, r"^config.sampling.top_p: must be in \(0, 1\], got 0.0$"),
    ],
)
def test_out_of_range_values_are_one_line(group, key, value, message):
    from archer_jax import config as config_lib

    c = _tiny()
    c[group][key] = value
    with pytest.raises(config_lib.ConfigError, match=message):
        config_lib.validate(c)


def test_edges_that_stay_valid():
    from archer_jax import config as config_lib

    c = _tiny()
    c.learner.tau, c.learner.gamma, c.learner.max_grad_norm = 1.0, 0.0, 1e9
    config_lib.validate(c)


def test_clipping_cannot_be_turned_off_silently():
    import optax

    from archer_jax.learners import train_state

    for norm in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="max_grad_norm must be finite and > 0"):
            train_state.optimizer(1e-3, norm)
    assert isinstance(train_state.optimizer(1e-3, None), optax.GradientTransformation)  # the library's explicit "off"


def test_unknown_keys_name_the_closest_known_key():
    from archer_jax import config as config_lib

    assert config_lib.suggest("learner.critic_lrr") == "learner.critic_lr"
    assert config_lib.suggest("critic_lrr") == "learner.critic_lr"
    assert config_lib.suggest("sft.stpes") == "sft.steps"
    assert config_lib.suggest("completely_different") is None
    c = _tiny()
    c.learner.critic_lrr = 1e-4
    with pytest.raises(config_lib.ConfigError,
                       match=r"^config.learner.critic_lrr: unknown config key; did you mean learner.critic_lr\?$"):
        config_lib.validate(c)


@pytest.mark.parametrize("key, value, message", [
    ("rank", -1, "config.model.lora.rank: must be >= 0"),
    ("alpha", 0.0, "config.model.lora.alpha: must be > 0"),
    ("dropout", 1.0, r"config.model.lora.dropout: must be in \[0, 1\)"),
    ("targets", " , ", "config.model.lora.targets: name at least one projection"),
])
def test_lora_keys_are_checked(key, value, message):
    c = config_lib.base_config()
    c.model.policy, c.model.critic, c.model.lora.rank = "tiny:llama", "tiny:roberta", 4
    c.model.lora[key] = value
    with pytest.raises(config_lib.ConfigError, match=message):
        config_lib.validate(c)
