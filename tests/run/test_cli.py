"""Bad input fails with one line naming the key or path, before any model is built
(archer_jax.run.preflight), and the command line around it: typo'd keys, ``--help``, the TPU noise.

Most checks call preflight/parse_flags directly; a few run the command line in a subprocess.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from archer_jax import config as config_lib
from archer_jax import config_docs
from archer_jax.errors import ConfigError
from archer_jax.pretraining import sft
from archer_jax.run import cli, preflight
from archer_jax.run import loop as train
from archer_jax.runtime import xla_flags
from tests.run.test_train_app import CONFIG, micro

# ---- helpers ------------------------------------------------------------------------------


def one_line_error(fn, *args) -> str:
    """The message of the ConfigError that ``fn(*args)`` raises, checked to be one line."""
    with pytest.raises(ConfigError) as info:
        fn(*args)
    message = str(info.value)
    assert message and "\n" not in message, message
    return message


@pytest.fixture
def no_cache_set():
    """No compilation cache set yet (conftest sets one for the session), as in a user's run."""
    before = jax.config.jax_compilation_cache_dir
    jax.config.update("jax_compilation_cache_dir", None)
    try:
        yield
    finally:
        jax.config.update("jax_compilation_cache_dir", before)


def gpt2_config_dir(directory: Path, **fields) -> Path:
    """A model directory holding only a config.json (enough for validate and preflight)."""
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps({"model_type": "gpt2", **fields}))
    return directory


def assert_match(text: str, pattern: str) -> None:
    assert re.match(pattern, text), f"{text!r} does not match {pattern!r}"


def jsonl(tmp_path: Path, text: str | bytes) -> str:
    path = tmp_path / "demos.jsonl"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(path)


# ---- every bad input: one line naming the key or path, before any model --------------------

BAD_INPUTS = {
    # name: (overrides of micro(), workdir relative to tmp_path or a callable making it, expected message)
    "workdir is a file": (dict(), "file", r"--workdir: .*/file is a file, not a directory"),
    "workdir under a file": (dict(), "file/run", r"--workdir: .*/file/run cannot be made: .*/file is a file"),
    "mesh larger than the devices": (dict(mesh__data=3), "run",
                                     r"config.mesh: mesh data=3 x fsdp=1 x tensor=1 needs 3 devices, have \d+"),
    "max_new_tokens fills the positions": (dict(sampling__max_new_tokens=512), "run",
                                           r"config.sampling.max_new_tokens: 512 leaves no room for a prompt in the 512 "
                                           r"positions of model.policy tiny:gpt2 \(must be < 512\)"),
    "tau zero": (dict(learner__tau=0.0), "run", r"config.learner.tau: must be in \(0, 1\], got 0.0"),
    "capacity below one batch": (dict(capacity=4), "run", r"config.capacity: 4 transitions hold less than one optimizer "
                                 r"step's batch \(batch_size 8 x grad_accum_steps 1 = 8\)"),
    "max_grad_norm zero": (dict(learner__max_grad_norm=0.0), "run", r"config.learner.max_grad_norm: must be finite and > 0"),
    "max_grad_norm negative": (dict(learner__max_grad_norm=-1.0), "run", r"config.learner.max_grad_norm: .* got -1.0"),
    "typo'd key in a config object": (dict(), "run", r"config.learner.critic_lrr: unknown config key; did you mean learner.critic_lr\?"),
}


def _make(name: str, tmp_path: Path):
    overrides, workdir, message = BAD_INPUTS[name]
    (tmp_path / "file").write_text("not a directory")
    c = micro(**overrides)
    if name == "typo'd key in a config object":
        c.learner.unlock()
        c.learner.critic_lrr = 1e-4
    return c, tmp_path / workdir, message


@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_bad_input_is_one_line_from_preflight(name, tmp_path):
    c, workdir, message = _make(name, tmp_path)
    assert_match(one_line_error(preflight.check, c, workdir), message)


@pytest.mark.parametrize("workdir", ["", "  ", "runs/ /x", " runs", "runs/x "])
def test_blank_workdir_is_refused(workdir, tmp_path, monkeypatch):
    """An unset ``$WORKDIR`` (``--workdir=``) or a name of spaces would train in the current
    directory or in one named " ": refused in one line, and nothing is made."""
    monkeypatch.chdir(tmp_path)
    message = one_line_error(preflight.check, micro(), workdir)
    assert message.startswith(f"--workdir: {workdir!r} "), message
    assert one_line_error(train.train_and_evaluate, micro(), workdir) == message
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def no_models(monkeypatch):
    """Fails the test if a run builds its parts (models, sampler, env pool)."""

    def built(*args, **kwargs):
        raise AssertionError("the run's parts were built before the bad input was reported")

    monkeypatch.setattr(train, "Parts", built)


@pytest.mark.parametrize("name", ["workdir is a file", "mesh larger than the devices", "max_new_tokens fills the positions",
                                  "tau zero"])
def test_train_reports_bad_input_before_building_anything(name, tmp_path, no_models):
    c, workdir, message = _make(name, tmp_path)
    with pytest.raises(ConfigError, match=message):
        train.train_and_evaluate(c, workdir)
    assert not (tmp_path / "run").exists()


def test_unwritable_workdir_and_compilation_cache(tmp_path, monkeypatch, no_cache_set):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    if os.geteuid() == 0:  # root writes anywhere: take the permission bits as a user would
        real_access = os.access
        monkeypatch.setattr(os, "access",
                            lambda p, mode, **kw: real_access(p, mode, **kw) and not str(p).startswith(str(locked)))
    try:
        c = micro()
        assert_match(one_line_error(preflight.check, c, locked), r"--workdir: .*/locked is not writable$")
        assert_match(one_line_error(preflight.check, c, "gs://bucket/run"),
                     r"--workdir: gs://bucket/run is a URL; .*mount it with gcsfuse")
        assert_match(one_line_error(preflight.check, c, locked / "run"),
                     r"--workdir: .*/locked is not writable \(it would be made in .*/locked\)")
        c.compilation_cache = str(locked / "xla")
        assert_match(one_line_error(preflight.check, c, tmp_path / "run"), r"config.compilation_cache: .*/locked is not writable")
        (tmp_path / "file").write_text("")
        c.compilation_cache = str(tmp_path / "file" / "xla")
        assert_match(one_line_error(preflight.check, c, tmp_path / "run"),
                     r"config.compilation_cache: .*/file/xla cannot be made: .*/file is a file")
        c.compilation_cache = str(tmp_path / "xla")
        preflight.check(c, tmp_path / "run")  # a cache that can be made
        assert not (tmp_path / "xla").exists() and not (tmp_path / "run").exists()  # preflight writes nothing
        c.sft.cache = str(locked / "sft")  # found before the SFT, not after it
        assert_match(one_line_error(preflight.check, c, tmp_path / "run"),
                     r"config.sft.cache: .*/locked is not writable \(it would be made in .*/locked\)")
        c.sft.cache = str(locked)  # there, read-only: it may hold the entry (storing one only warns)
        preflight.check(c, tmp_path / "run")
    finally:
        locked.chmod(0o755)


def test_mesh_is_checked_against_the_device_count():
    c = micro(mesh__data=3)
    assert one_line_error(preflight.check_mesh, c.mesh, 1) == (
        "config.mesh: mesh data=3 x fsdp=1 x tensor=1 needs 3 devices, have 1 (make the axes multiply to 1, or set one of them to -1)")
    c = micro(mesh__fsdp=3)
    assert "8 devices do not divide" in one_line_error(preflight.check_mesh, c.mesh, 8)
    preflight.check_mesh(micro(mesh__data=2, mesh__fsdp=-1).mesh, 8)


def test_policy_positions_and_architecture_come_from_config_json(tmp_path):
    small = gpt2_config_dir(tmp_path / "small_gpt2", n_positions=32)
    c = micro(model__policy=str(small))
    assert one_line_error(preflight.check, c, tmp_path / "run") == (
        f"config.sampling.max_new_tokens: 32 leaves no room for a prompt in the 32 positions of model.policy {small} (must be < 32)")
    c.sampling.max_new_tokens = 31
    preflight.check(c, tmp_path / "run")
    roberta = tmp_path / "roberta"
    roberta.mkdir()
    (roberta / "config.json").write_text(json.dumps({"model_type": "roberta"}))
    c = micro(model__policy=str(roberta))
    assert one_line_error(preflight.check, c, tmp_path / "run") == (
        f"config.model.policy: {roberta} is a 'roberta' model, not a causal LM ('gpt2', 'llama', 'mistral', 'qwen2')")
    (roberta / "config.json").write_text("{not json")
    assert "config.model.policy: " in one_line_error(preflight.check, c, tmp_path / "run")


def test_a_cached_hub_name_is_checked_from_its_config_json_alone(tmp_path, monkeypatch):
    import huggingface_hub.constants

    revision = "0" * 40
    repo = tmp_path / "hub" / "models--someone--short-gpt2"
    gpt2_config_dir(repo / "snapshots" / revision, n_positions=16)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    c = micro(model__policy="someone/short-gpt2")
    assert "in the 16 positions of model.policy someone/short-gpt2" in one_line_error(preflight.check, c, tmp_path / "run")


@pytest.mark.parametrize(
    "text, message",
    [
        ("", r"config.sft.data: .*demos.jsonl: no \(observation, action\) pairs"),
        ("\n  \n", r"config.sft.data: .*demos.jsonl: no \(observation, action\) pairs"),
        ('{"observation": "a", "action": "b"}\n{"observation": "c", "action": \n',
         r"config.sft.data: .*demos.jsonl:2: not JSON \(Expecting value\)"),
        ('{"obs": "a", "act": "b"}\n', r"config.sft.data: .*demos.jsonl:1: 'observation' is missing \(keys: 'obs', 'act'\)"),
        ('{"observation": "a", "action": null}\n', r"config.sft.data: .*demos.jsonl:1: 'action' is a NoneType, not a string"),
        ('["a", "b"]\n', r"config.sft.data: .*demos.jsonl:1: a list, not an object"),
        (b'{"observation": "\xff", "action": "b"}\n', r"config.sft.data: .*demos.jsonl: not UTF-8 text"),
    ],
)
def test_bad_sft_data_files(text, message, tmp_path):
    c = micro(sft__data=jsonl(tmp_path, text))
    assert_match(one_line_error(preflight.check, c, tmp_path / "run"), message)


def test_good_sft_data_file_and_sources_without_experts(tmp_path):
    path = jsonl(tmp_path, '{"observation": "Questions:\\n", "action": "Is it an animal?"}\n\n')
    assert sft.read_jsonl(path) == (["Questions:\n"], ["Is it an animal?"])
    preflight.check(micro(sft__data=path), tmp_path / "run")
    # No scripted experts or walkthrough for an env is found before the run too.
    c = micro(sft__data="walkthrough")
    assert one_line_error(preflight.check, c, tmp_path / "run") == (
        "config.sft.data: env 'twenty_questions_subset' has no walkthrough")
    preflight.check(micro(sft__data="walkthrough", sft__steps=0), tmp_path / "run")  # no warm start: not read


# ---- model names: a path that exists is local ----------------------------------------------


def test_relative_model_paths_are_local_and_unknown_names_say_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    gpt2_config_dir(tmp_path / "models" / "mygpt2")
    config_lib.validate(micro(model__policy="models/mygpt2"))  # exists: local, not a hub id
    message = one_line_error(config_lib.validate, micro(model__policy="models/othergpt2"))
    assert message.startswith("config.model.policy: cannot load 'models/othergpt2': it is neither an existing directory "
                              "nor in the local Hugging Face cache, and HF_HUB_OFFLINE is set")
    (tmp_path / "models" / "afile").write_text("")
    assert one_line_error(config_lib.validate, micro(model__policy="models/afile")) == (
        "config.model.policy: models/afile is a file, not a model directory")


# ---- the command line -----------------------------------------------------------------------


def exit_message(argv: list[str]) -> str:
    with pytest.raises(SystemExit) as info:
        cli.parse_flags(argv)
    return info.value.code


@pytest.mark.parametrize(
    "flag, message",
    [
        ("--config.learner.critic_lrr=1e-4", "error: --config.learner.critic_lrr: unknown config key; did you mean learner.critic_lr?"),
        ("--config.critic_lrr=1e-4", "error: --config.critic_lrr: unknown config key; did you mean learner.critic_lr?"),
        ("--config.sampling.temprature=0.5", "error: --config.sampling.temprature: unknown config key; did you mean sampling.temperature?"),
        ("--config.zzz=1", "error: --config.zzz: unknown config key; every key is listed by --help and in archer_jax/config.py"),
        ("--config.tau=0.5", "error: --config.tau: renamed to config.learner.tau (docs/algorithms.md lists every key)"),
    ],
)
def test_typod_keys_are_one_clean_line(flag, message):
    assert exit_message(["train", f"--config={CONFIG}:micro", "--workdir=/tmp/x", flag]) == message


@pytest.mark.parametrize("source, message", [
    ("def get_config(:\n    pass\n", r"error: --config: .*/bad.py, line 1: SyntaxError: invalid syntax"),
    ("def get_config(preset=''):\n    raise RuntimeError('boom')\n", r"error: --config: RuntimeError: boom \(.*/bad.py, line 2\)"),
    ("def get_config(preset=''):\n    return 5\n", r"error: --config: get_config returned int, not an ml_collections.ConfigDict"),
    ("x = 1\n", r"error: --config: the file defines no get_config\(preset\) .*"),
])
def test_a_broken_config_file_is_one_line_naming_where(source, message, tmp_path, monkeypatch):
    # ml_collections loads each config file into one module name, reused within a process.
    monkeypatch.delitem(sys.modules, "config_config", raising=False)
    (tmp_path / "bad.py").write_text(source)
    text = exit_message(["train", f"--config={tmp_path / 'bad.py'}", f"--workdir={tmp_path / 'run'}"])
    assert isinstance(text, str) and "\n" not in text, text
    assert_match(text, message)


def test_help_lists_every_key_with_its_default_and_doc():
    with pytest.raises(SystemExit) as info:
        cli.parse_flags(["train", "--help"])
    assert info.value.code == 0
    text = cli.help_text()
    lines = text.splitlines()
    for key, default in config_lib.flat_defaults().items():
        (line,) = [line for line in lines if line.split()[:1] == [key]]
        assert config_docs.KEY_DOCS[key] in line and (repr(default) in line or key in config_lib.FREE_FORM)
    for flag in ("--config", "--workdir", "--allow_config_changes", "--print_config", "--coordinator", "--num_processes",
                 "--process_id"):
        assert flag in text


def test_help_with_a_config_file_shows_its_presets_values():
    """``--help`` beside ``--config=FILE:PRESET`` lists that config's values, not the base defaults."""
    chosen = config_lib.flat_values(config_lib.file_config(ROOT / "configs" / "20q.py", "tiny"))
    text = cli.help_text(["train", f"--config={CONFIG}:tiny", "--help"])
    assert f"the values of {CONFIG}:tiny" in text
    for key in ("iterations", "model.policy", "model.critic_action", "env.max_turns"):
        (line,) = [line for line in text.splitlines() if line.split()[:1] == [key]]
        assert repr(chosen[key]) in line and chosen[key] != config_lib.flat_defaults()[key], line


def test_the_tpu_probe_message_is_dropped_only_without_a_tpu(monkeypatch):
    def record(message: str, level: int = logging.INFO) -> logging.LogRecord:
        return logging.LogRecord(xla_flags.JAX_BACKEND_LOGGER, level, __file__, 1, message, None, None)

    probe = "Unable to initialize backend 'tpu': INTERNAL: Failed to open libtpu.so: cannot open shared object file"
    keep = xla_flags.NoTpuProbeFilter()
    monkeypatch.setattr(xla_flags, "tpu_attached", lambda: False)
    assert not keep.filter(record(probe))
    assert keep.filter(record("Unable to initialize backend 'cuda': no GPU"))
    assert keep.filter(record(probe, logging.WARNING))  # a warning is never hidden
    monkeypatch.setattr(xla_flags, "tpu_attached", lambda: True)  # a TPU that fails to start is reported
    assert keep.filter(record(probe))


# A few runs of the real command line: exit codes, stderr without a traceback or TPU noise.


def test_cli_help_exits_0_with_every_key():
    run = subprocess.run([sys.executable, "-m", "archer_jax.train", "--help"], capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-2000:]
    assert all(f"  {key} " in run.stdout for key in config_lib.flat_defaults())


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--config.learner.critic_lrr=1e-4"], "error: --config.learner.critic_lrr: unknown config key; did you mean learner.critic_lr?"),
        (["--config.mesh.data=3"], "error: config.mesh: mesh data=3 x fsdp=1 x tensor=1 needs 3 devices, have 1"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_1(flags, message, tmp_path):
    run = subprocess.run(  # one CPU device, JAX choosing its platform (a TPU probe first) as in a user's run
        [sys.executable, "-m", "archer_jax.train", f"--config={CONFIG}:micro", f"--workdir={tmp_path / 'run'}", *flags],
        capture_output=True, text=True, timeout=180, env={**os.environ, "XLA_FLAGS": "", "JAX_PLATFORMS": ""},
    )
    assert run.returncode == 1, run.stderr[-2000:]
    assert run.stderr.strip().splitlines()[-1].startswith(message), run.stderr[-2000:]
    assert "Traceback" not in run.stderr and xla_flags.TPU_PROBE_MESSAGE not in run.stderr, run.stderr[-2000:]
    assert not (tmp_path / "run").exists()


# ---- flags a user gives as documented; values no run can hold ----------------------------------

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def parsed(monkeypatch):
    """``parse(argv)``: the config after the command line's flag parsing, in this process (the
    overrides' flags ml_collections defines are removed afterwards)."""
    from absl import flags

    def parse(argv: list[str]):
        monkeypatch.setattr(sys, "argv", argv)  # ml_collections reads the overrides from sys.argv
        cli.parse_flags(argv)
        return cli._CONFIG.value

    yield parse
    for name in [name for name in flags.FLAGS if name.startswith("config.")]:
        delattr(flags.FLAGS, name)
    flags.FLAGS.unparse_flags()


def test_print_config_shows_the_effective_config_and_its_verdict(parsed, capsys, tmp_path, monkeypatch):
    """The file's preset with the command line's overrides, as JSON, without a workdir or a run."""
    monkeypatch.chdir(tmp_path)
    parsed(["train", f"--config={CONFIG}:micro", "--print_config", "--config.seed=3"])
    with pytest.raises(SystemExit) as info:
        cli.main([])
    printed = json.loads(capsys.readouterr().out)
    assert info.value.code == 0 and printed["seed"] == 3 and printed["iterations"] == 2  # micro's
    assert list(tmp_path.iterdir()) == []
    parsed(["train", f"--config={CONFIG}:micro", "--print_config", "--config.learner.tau=0"])
    with pytest.raises(SystemExit) as info:
        cli.main([])
    assert json.loads(capsys.readouterr().out)["learner"]["tau"] == 0
    assert info.value.code == "error: config.learner.tau: must be in (0, 1], got 0.0"


def readme_oracle_flag() -> str:
    """The oracle flag exactly as the README writes it."""
    (flag,) = set(re.findall(r"--config\.env\.options\.oracle=t5:[^`\s]+", (ROOT / "README.md").read_text()))
    return flag


@pytest.mark.parametrize("file", ["20q.py", "city.py"])
def test_the_readmes_oracle_flag_sets_the_option(file, parsed, tmp_path):
    flag = readme_oracle_flag()
    c = parsed(["train", f"--config={ROOT / 'configs' / file}", f"--workdir={tmp_path}", flag])
    assert c.env.options.to_dict() == {"oracle": flag.split("=", 1)[1]}
    assert c.is_locked  # the parsed config takes no new keys, as before
    # With a directory that exists, the option passes validation (the oracle is loaded when the envs start).
    oracle = tmp_path / "oracle"
    oracle.mkdir()
    micro_config = micro()
    micro_config.env.options = c.env.options
    micro_config.env.options.oracle = f"t5:{oracle}"
    config_lib.validate(micro_config)


def test_the_readmes_oracle_command_starts(tmp_path):
    """The README's command, on the micro preset, gets past the flags to the check of the oracle's
    directory (which the test does not make): one line, exit 1, nothing written."""
    run = subprocess.run([sys.executable, "-m", "archer_jax.train", f"--config={CONFIG}:micro", f"--workdir={tmp_path / 'run'}",
                          readme_oracle_flag()], capture_output=True, text=True, timeout=180, cwd=tmp_path)
    directory = readme_oracle_flag().split("t5:", 1)[1]
    assert run.returncode == 1, run.stderr[-2000:]
    assert run.stderr.strip().splitlines() == [f"error: config.env.options.oracle: {directory} does not exist, nor is "
                                               "it a hub model in the local Hugging Face cache (HF_HUB_OFFLINE is set)"]
    assert not (tmp_path / "run").exists()


def test_free_form_options_as_a_dict_and_misspelt_ones(parsed, tmp_path):
    c = parsed(["train", f"--config={CONFIG}:micro", f"--workdir={tmp_path}",
                '--config.env.options={"oracle": "t5:oracles/x"}'])
    assert c.env.options.to_dict() == {"oracle": "t5:oracles/x"}
    c = parsed(["train", f"--config={CONFIG}:micro", f"--workdir={tmp_path}", "--config.env.options.orcale=t5:x"])
    assert one_line_error(config_lib.validate, c) == (
        "config.env.options.orcale: not an option of env 'twenty_questions_subset' (options: oracle)")


def test_an_extra_positional_argument_is_one_error_line_and_the_usage(capsys, parsed, tmp_path):
    with pytest.raises(SystemExit) as info:
        parsed(["train", f"--config={CONFIG}:micro", f"--workdir={tmp_path}", "extra", "more"])
    assert info.value.code == 2
    assert capsys.readouterr().err.splitlines() == [cli.USAGE, "error: unexpected argument(s): extra more"]


@pytest.mark.parametrize("key", ["iterations", "capacity", "rollout_size", "critic_steps", "sft.steps", "sampling.max_new_tokens",
                                 "env.max_turns", "ppo.epochs", "offline.generate_episodes", "seed"])
def test_counts_are_bounded(key):
    c = micro()
    group, _, name = key.rpartition(".")
    (c[group] if group else c)[name] = 10**21
    assert one_line_error(config_lib.validate, c) == f"config.{key}: must be < 2**31 (2147483648), got {10**21}"


def test_a_negative_seed_is_refused():
    assert one_line_error(config_lib.validate, micro(seed=-1)) == "config.seed: must be >= 0, got -1"


def test_iterations_from_the_command_line_are_bounded(parsed, tmp_path):
    c = parsed(["train", f"--config={CONFIG}:micro", f"--workdir={tmp_path}", f"--config.iterations={10**21}"])
    assert one_line_error(preflight.check, c, tmp_path / "run").startswith("config.iterations: must be < 2**31")


def test_use_wandb_without_wandb_is_refused_first(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "wandb", None)  # not importable, whether installed here or not
    assert one_line_error(preflight.check, micro(use_wandb=True), tmp_path / "run") == (
        "config.use_wandb: wandb is not installed (pip install wandb), or set --config.use_wandb=false")


def test_a_replay_capacity_larger_than_the_memory_is_refused(monkeypatch, tmp_path):
    monkeypatch.setattr(preflight, "total_memory_bytes", lambda: 2**30)
    message = one_line_error(preflight.check, micro(capacity=100_000_000), tmp_path / "run")
    assert_match(message, r"config.capacity: 100000000 transitions need at least [\d.]+ GB .* this machine has 1.07 GB")
    preflight.check(micro(capacity=1_000_000), tmp_path / "run")


def test_a_workdir_under_proc_or_sys_is_refused():
    assert_match(one_line_error(preflight.check_workdir, "/proc/archer_run"),
                 r"--workdir: /proc/archer_run is under /proc, .*not a directory on disk")
    assert_match(one_line_error(preflight.check_workdir, "/sys/x/run"), r"--workdir: /sys/x/run is under /sys")


def test_a_workdir_name_too_long_for_the_file_system_is_refused(tmp_path):
    assert_match(one_line_error(preflight.check_workdir, tmp_path / ("x" * 300) / "run"),
                 r"--workdir: the name x{40}\.\.\. is 300 bytes; this file system allows \d+")
    deep = tmp_path.joinpath(*["d" * 200] * 21)  # each name fits; the whole path does not
    assert_match(one_line_error(preflight.check_workdir, deep), r"--workdir: .* bytes long; the files a run writes "
                                                                r"there would pass this file system's \d+-byte limit")


def test_a_platform_jax_cannot_start_is_one_line(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "archer_jax.train", f"--config={CONFIG}:micro", f"--workdir={tmp_path / 'run'}"],
        capture_output=True, text=True, timeout=180, env={**os.environ, "JAX_PLATFORMS": "rocm"})
    assert run.returncode == 1, run.stderr[-2000:]
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("error: JAX_PLATFORMS=rocm: JAX could not start a backend (") and last.endswith(
        "unset JAX_PLATFORMS to use what this machine has, or install jax for that platform (for NVIDIA GPUs: "
        "pip install -e '.[cuda]')"), run.stderr[-2000:]
    assert "Traceback" not in run.stderr and not (tmp_path / "run").exists()


def test_a_compilation_cache_url_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    c = micro(compilation_cache="gs://bucket/xla")
    assert_match(one_line_error(preflight.check, c, tmp_path / "run"),
                 r"config.compilation_cache: gs://bucket/xla is a URL; .*local directory")
    assert not (tmp_path / "gs:").exists()


def test_sft_data_without_sft_steps_is_refused(tmp_path):
    path = jsonl(tmp_path, '{"observation": "a", "action": "b"}\n')
    assert one_line_error(preflight.check, micro(sft__data=path, sft__steps=0), tmp_path / "run") == (
        f"config.sft.data: {path} is given but config.sft.steps is 0, so no warm start reads it; "
        "set --config.sft.steps (> 0) or leave sft.data out")


@pytest.fixture
def unreachable_hub(monkeypatch, tmp_path):
    """The hub's endpoint is a local port that closes every connection (counted), the cache is
    empty, and HF_HUB_OFFLINE is unset: a machine without network, as a user's."""
    import socket
    import threading

    import huggingface_hub.constants

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    attempts = []

    def serve():
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            attempts.append(1)
            connection.close()

    threading.Thread(target=serve, daemon=True).start()
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    yield attempts
    server.close()


def test_an_unreachable_hub_is_one_line_after_one_probe(unreachable_hub, tmp_path):
    c = config_lib.file_config(CONFIG)  # the paper's setting: gpt2 and roberta-base from the hub
    message = one_line_error(preflight.check, c, tmp_path / "run")
    assert_match(message, r"config.model.policy: cannot load 'gpt2': .*the hub at http://127.0.0.1:\d+ is unreachable")
    assert "configs/20q.py:tiny" in message
    assert len(unreachable_hub) == 1  # one probe for both models, no retries


def test_a_warmup_as_long_as_the_run_says_it_trains_the_critic_only(caplog, tmp_path):
    with caplog.at_level(logging.WARNING, logger="archer_jax"):
        preflight.check(micro(iterations=2, warmup_iter=2), tmp_path / "run")
    assert [r.getMessage() for r in caplog.records] == [
        "config.warmup_iter=2 >= config.iterations=2: this run trains the critic only (the actor starts after "
        "iteration 2; a resume with more iterations gets there)"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="archer_jax"):
        preflight.check(micro(iterations=2, warmup_iter=1), tmp_path / "run")
        preflight.check(micro(agent="ppo", iterations=2, warmup_iter=2), tmp_path / "run")  # GAE: no warm-up
    assert not caplog.records


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
def test_a_process_whose_peers_never_come_says_what_it_waits_for_and_ends_in_one_line(tmp_path):
    import socket

    with socket.socket() as s:  # a port where nobody listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = subprocess.run(
        [sys.executable, "-m", "archer_jax.train", f"--config={CONFIG}:micro", f"--workdir={tmp_path / 'run'}",
         f"--coordinator=127.0.0.1:{port}", "--num_processes=2", "--process_id=1"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "ARCHER_JAX_START_TIMEOUT": "7", "JAX_PLATFORMS": "cpu"})
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 1, run.stderr[-2000:]
    assert any(f"process 1 of 2: waiting for the coordinator (process 0) at 127.0.0.1:{port}" in line for line in lines)
    assert lines[-1].startswith(f"error: process 1 of 2: the multi-process run did not start within 7 s, waiting for "
                                f"the coordinator (process 0) at 127.0.0.1:{port}"), run.stderr[-2000:]
    assert "Traceback" not in run.stderr and not (tmp_path / "run").exists()


def test_the_start_timeout_is_checked():
    from archer_jax.runtime import distributed

    with pytest.raises(distributed.DistributedError, match=r"^ARCHER_JAX_START_TIMEOUT: must be a whole number of "
                                                           r"seconds, got 'soon'$"):
        distributed.start_timeout({"ARCHER_JAX_START_TIMEOUT": "soon"})
    assert distributed.start_timeout({}) == 300
