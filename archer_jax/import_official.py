"""Import the official ArCHer files (the command line):

* a flan-t5 oracle (``20q_t5_oracle.pt``, ``city_t5_oracle.pt``) -> an HF directory for
  ``--config.env.options.oracle=t5:DIR``;
* an SFT policy checkpoint (``checkpoint_path`` of ``archer_20q.yaml``:
  ``{"model_state_dict": GPT2LMHeadModel.state_dict(), "optimizer_state_dict": ...}``) -> ``DIR/policy``,
  an HF directory for ``--config.model.policy``;
* a trainer checkpoint (``trainer.pt`` of ``ArcherTrainer.save``: the policy, the critic, the
  target critic and both optimizers) -> ``DIR/policy``, ``DIR/critic`` (the critic's RoBERTa, for
  ``--config.model.critic``) and ``DIR/critic_init.safetensors`` (its heads and its target too, for
  ``--config.model.critic_init``). The optimizers' moments are not imported: runs start them fresh.

    python -m archer_jax.import_official 20q_t5_oracle.pt --out oracles/20q_t5
    python -m archer_jax.import_official trainer.pt --out imported/20q
    python -m archer_jax.train --config=configs/20q.py --config.sft.steps=0 \\
        --config.model.policy=imported/20q/policy --config.model.critic=imported/20q/critic \\
        --config.model.critic_init=imported/20q/critic_init.safetensors --workdir=runs/from_official

The kind is read from the file's keys. Tokenizers and the settings that shapes do not tell come
from the base models: ``--base`` (default ``gpt2`` for a policy, ``google/flan-t5-small`` for an
oracle) and ``--critic-base`` (default ``roberta-base``), hub names (cached or reachable) or
local HF directories.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np

from archer_jax.learners import official_critic
from archer_jax.models import hub, load_pretrained
from archer_jax.models.official import DEFAULT_BASE as DEFAULT_T5_BASE
from archer_jax.models.official import OfficialFileError, convert_t5_oracle, read_torch, state_dict
from archer_jax.models.pretrained import CAUSAL_LM_TYPES
from archer_jax.models.roberta.model import RobertaConfig
from archer_jax.models.tokenizer import load_tokenizer
from archer_jax.models.weight_rules import MappingError

log = logging.getLogger(__name__)

TRAINER_KEYS = ("model_state_dict", "critic_state_dict", "target_critic_state_dict")
DEFAULT_POLICY_BASE = "gpt2"
DEFAULT_CRITIC_BASE = "roberta-base"

__all__ = ["OfficialFileError", "convert", "convert_policy", "convert_t5_oracle", "convert_trainer", "kind_of", "main"]


def kind_of(obj: Any, path: Path) -> str:
    """``trainer``, ``policy`` or ``oracle``, from the file's keys."""
    if isinstance(obj, dict) and "critic_state_dict" in obj:
        missing = [k for k in TRAINER_KEYS if k not in obj]
        if missing:
            raise OfficialFileError(f"{path}: a trainer checkpoint without {', '.join(missing)}")
        return "trainer"
    tensors = obj.get("model_state_dict", obj) if isinstance(obj, dict) else obj
    names = list(tensors) if isinstance(tensors, dict) else []
    if "shared.weight" in names and any(n.startswith("encoder.block.") for n in names):
        return "oracle"
    if any(n.startswith(("transformer.", "wte.", "model.embed_tokens.")) for n in names):
        return "policy"
    shown = ", ".join(map(str, (names or list(obj) if isinstance(obj, dict) else [type(obj).__name__])[:6]))
    raise OfficialFileError(f"{path}: not an official oracle, policy or trainer file (keys: {shown})")


def _base(base: str, path: Path, role: str) -> Path:
    try:
        return hub.resolve(base)
    except hub.ModelLoadError as e:
        raise OfficialFileError(f"{path}: the {role}'s config and tokenizer come from its base model: {e}") from None


def _write_hf(tensors: dict[str, np.ndarray], out: Path, base_dir: Path, model_type: tuple[str, ...], path: Path) -> Path:
    """``tensors`` with ``base_dir``'s config and tokenizer as an HF directory, checked by loading it."""
    try:  # both before anything is written
        config, tokenizer = hub.read_config(base_dir), load_tokenizer(base_dir)
    except hub.ModelLoadError as e:
        raise OfficialFileError(f"{path}: the config and tokenizer come from the base model: {e}") from None
    hub.write_model_dir(out, config, tensors)
    tokenizer.save_pretrained(out)
    try:
        load_pretrained(out, model_type=model_type)
    except hub.ModelLoadError as e:
        raise OfficialFileError(f"{path}: does not fit the base model {base_dir.name}: {e}") from None
    return out


def convert_policy(tensors: dict[str, np.ndarray], out: Path, base_dir: Path, path: Path) -> Path:
    """An official policy state dict as an HF directory (the base's config and tokenizer)."""
    return _write_hf(tensors, out, base_dir, CAUSAL_LM_TYPES, path)


def convert_trainer(obj: dict, out: Path, base_dir: Path, critic_base_dir: Path, path: Path) -> dict[str, Path]:
    """A ``trainer.save`` file as ``out/policy``, ``out/critic`` and ``out/critic_init.safetensors``."""
    from safetensors.numpy import save_file

    policy = convert_policy(state_dict(obj, path, "model_state_dict"), out / "policy", base_dir, path)
    critic = state_dict(obj, path, "critic_state_dict")
    target = state_dict(obj, path, "target_critic_state_dict")
    encoder = {k[len("base_lm."):]: v for k, v in critic.items() if k.startswith("base_lm.")}
    critic_dir = _write_hf(encoder, out / "critic", critic_base_dir, ("roberta",), path)
    config = RobertaConfig.from_hf_dict(hub.read_config(critic_dir))
    merged = {f"critic.{k}": v for k, v in critic.items()} | {f"target_critic.{k}": v for k, v in target.items()}
    for prefix in ("critic.", "target_critic."):
        try:
            official_critic.converted(merged, config, prefix)
        except MappingError as e:
            raise OfficialFileError(f"{path}: {prefix[:-1]}_state_dict: {e}") from None
    save_file({k: np.ascontiguousarray(v) for k, v in merged.items()}, out / "critic_init.safetensors")
    return dict(policy=policy, critic=critic_dir, critic_init=out / "critic_init.safetensors")


def convert(path: str | Path, out: str | Path, *, base: str | None = None, critic_base: str = DEFAULT_CRITIC_BASE) -> dict[str, Path]:
    """Converts the official file at ``path`` into ``out``; returns what was written, by role.

    ``out`` is checked first; the files are written to a directory beside it and moved into it
    once every one is written and loads, so an import that fails leaves ``out`` as it was."""
    path, out = Path(path).expanduser(), Path(out).expanduser()
    _check_out(out)
    staging = out.with_name(f"{out.name}.importing-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        written = _convert(path, staging, base=base, critic_base=critic_base)
        out.mkdir(parents=True, exist_ok=True)
        for child in sorted(staging.iterdir()):
            target = out / child.name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            os.replace(child, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {role: out / Path(p).relative_to(staging) for role, p in written.items()}


def _check_out(out: Path) -> None:
    """``--out`` is, or can be made, a writable directory (one line otherwise, before any work)."""
    existing = out
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        raise OfficialFileError(f"--out: {existing} is a file, not a directory")
    for directory in {existing, out.parent if existing == out else existing}:
        if not os.access(directory, os.W_OK | os.X_OK):
            raise OfficialFileError(f"--out: {directory} is not writable")


def _convert(path: Path, out: Path, *, base: str | None, critic_base: str) -> dict[str, Path]:
    obj = read_torch(path)
    kind = kind_of(obj, path)
    if kind == "oracle":
        return dict(oracle=convert_t5_oracle(path, out, base=base or DEFAULT_T5_BASE))
    base_dir = _base(base or DEFAULT_POLICY_BASE, path, "policy")
    if kind == "policy":
        return dict(policy=convert_policy(state_dict(obj, path), out / "policy", base_dir, path))
    return convert_trainer(obj, out, base_dir, _base(critic_base, path, "critic"), path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="an official .pt file: a T5 oracle, an SFT policy checkpoint or a trainer.pt")
    parser.add_argument("--out", required=True, help="the directory to write")
    parser.add_argument("--base", default=None,
                        help=f"the policy's or oracle's base model (default {DEFAULT_POLICY_BASE} / {DEFAULT_T5_BASE})")
    parser.add_argument("--critic-base", default=DEFAULT_CRITIC_BASE, help="the critic's base model (default %(default)s)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        written = convert(args.path, args.out, base=args.base, critic_base=args.critic_base)
    except OfficialFileError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    flags = dict(oracle="--config.env.options.oracle=t5:{}", policy="--config.model.policy={}",
                 critic="--config.model.critic={}", critic_init="--config.model.critic_init={}")
    log.info("wrote %s", ", ".join(str(p) for p in written.values()))
    log.info("start from it with: %s", " ".join(flags[k].format(p) for k, p in written.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
