"""The accelerator campaign: every measurement the project owes on a GPU or TPU, in one command.

    bash benchmarks/carry_for_accelerator.sh        # once, on a machine with the dev venv: .carry/
    PYTHONPATH=$PWD:$PWD/.carry python benchmarks/accelerator.py --out $OUT --budget-s 2100
    python benchmarks/accelerator.py --dry-run      # the stages and their commands, nothing run
    python benchmarks/accelerator.py --allow-cpu --smoke --out /tmp/acc --budget-s 900   # a CPU check

Stages, most valuable first, each a subprocess with its own timeout (a share of ``--budget-s``;
time a stage leaves unused goes to the later ones; none starts with under a minute left):

  env               devices, library versions, which optional packages import, free memory
  iteration         benchmarks/iteration.py --workload paper --dtype bfloat16: MFU, decode roofline,
                    compile time, peak memory (with the PyTorch reference when time allows)
  llm_7b            benchmarks/llm_7b.py at the Mistral-7B shape, else fewer layers
  train_20q_base    3 iterations of the train app at the paper's setting with random base-size GPT-2
                    and RoBERTa built here (no download); per-iteration times from history.jsonl
  rollout_overlap   benchmarks/rollout_overlap.py --cases 20q_base: the paper's setting with serial
                    collection, collection one iteration ahead, and that plus continuous batching
  plan_vs_measured  archer_jax.plan's predicted program times (when that module exists) beside iteration's
  parity            the parity-marked tests (float32 matmuls at "highest", as tests/conftest.py pins them)

Writes ``<out>/accelerator_<tag>.json`` (tag from the device kind, e.g. ``gpu_h100``; ``--tag``
overrides), rewritten after every stage, with each stage's commands, exit codes, output tails and
results; full logs in ``<out>/logs/``. ``--smoke`` runs small shapes; ``--stages`` a subset.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
STAGES = ("env", "iteration", "plan_vs_measured", "llm_7b", "train_20q_base", "rollout_overlap", "parity")
SHARES = dict(env=0.02, iteration=0.28, llm_7b=0.25, train_20q_base=0.22, plan_vs_measured=0.03, rollout_overlap=0.3,
              parity=0.20)
MIN_STAGE_S, GRACE_S, TAIL = 60.0, 15.0, 4000
FLOOR = dict(env=120.0)  # a stage's least timeout (env imports every optional package)
PARITY_PATHS = ["tests/models", "tests/test_import_official.py", "tests/sampling/test_sampling.py", "tests/learners",
                "tests/runtime/test_sharding.py"]
VERSIONS = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "torch", "transformers", "numpy", "tokenizers")
OPTIONAL = ("pytest", "ml_collections", "absl", "clu", "tensorboard", "tensorflow", "tensorflow_datasets", "peft",
            "accelerate", "matplotlib", "psutil", "scipy")

PROBE = r"""
import importlib, importlib.metadata as md, json, shutil, subprocess, sys
import jax
d, out = jax.devices(), {}
out.update(platform=d[0].platform, device_kind=getattr(d[0], "device_kind", ""), device_count=len(d))
def attempt(f):
    try:
        return f()
    except Exception as e:
        return f"{type(e).__name__}: {e}"[:200]
if sys.argv[1] == "full":
    out["python"] = sys.version.split()[0]
    out["versions"] = {n: attempt(lambda: md.version(n)) for n in sys.argv[3].split(",")}
    out["optional"] = {n: attempt(lambda: bool(importlib.import_module(n))) for n in sys.argv[2].split(",")}
    out["memory_gib"] = [dict(device=str(x), limit=s["bytes_limit"] / 2**30,
                              free=(s["bytes_limit"] - s.get("bytes_in_use", 0)) / 2**30)
                         for x in jax.local_devices() if "bytes_limit" in (s := x.memory_stats() or {})]
    out["torch_cuda"] = attempt(lambda: __import__("torch").cuda.is_available())
    if shutil.which("nvidia-smi"):
        out["nvidia_smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,memory.free,driver_version",
                                            "--format=csv,noheader"], capture_output=True, text=True).stdout.splitlines()
print("PROBE_JSON " + json.dumps(out))
"""


def scrub(text: str, out: Path) -> str:
    """``text`` naming no machine's paths: the repository relative, the output as $OUT, the rest cut."""
    text = text.replace(sys.executable, "python").replace(str(out), "$OUT")
    text = text.replace(str(ROOT) + "/", "").replace(str(ROOT), ".")
    home = os.path.expanduser("~")
    text = text.replace(home, "<home>") if len(home) > 1 else text
    return re.sub(r"(?<![\w.$<>])/(?:[\w.+@-]+/)+", ".../", text)


def scrubbed(value, out: Path):
    if isinstance(value, dict):
        return {k: scrubbed(v, out) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrubbed(v, out) for v in value]
    return scrub(value, out) if isinstance(value, str) else value


def device_tag(platform: str, kind: str) -> str:
    """``gpu_h100``, ``gpu_h200``, ``tpu_v5e``, ``cpu``: from JAX's platform and device kind."""
    if platform == "cpu":
        return "cpu"
    kind = kind.lower().replace("v5 lite", "v5e").replace("v6 lite", "v6e")
    m = re.search(r"\b(v\d+[a-z]?|[a-z]\d{2,4}[a-z]?)\b", kind)
    return f"{platform}_{m.group(1) if m else re.sub(r'[^a-z0-9]+', '_', kind).strip('_')}"


def pytest_counts(text: str) -> dict:
    """Outcome counts from pytest's summary line (or, if it never printed one, its progress dots)."""
    for line in reversed(text.splitlines()):
        if re.search(r"\b(passed|failed|error)", line) and re.search(r" in [\d.]+s", line):
            return {k.rstrip("s") if k.startswith(("error", "warning")) else k: int(n)
                    for n, k in re.findall(r"(\d+) (passed|failed|errors?|skipped|deselected|xfailed|xpassed|warnings?)", line)}
    marks = "".join(m for m in re.findall(r"^(?:\S+\.py )?([.FEsxX]+)\s*(?:\[\s*\d+%\])?\s*$", text, re.M))
    return dict(passed=marks.count("."), failed=marks.count("F"), error=marks.count("E"), skipped=marks.count("s"),
                incomplete=True)


class Campaign:
    """The stages' shared state: arguments, environment, budget and the JSON record."""

    def __init__(self, args: argparse.Namespace):
        self.args, self.dry, self.smoke = args, args.dry_run, args.smoke
        self.out = Path(args.out).expanduser().resolve()
        self.start = time.monotonic()
        self.deadline = self.start + args.budget_s
        self.tmp = Path("$TMP")  # a temporary folder once the device is known (main)
        carry = [str(ROOT)] + ([str(ROOT / ".carry")] if (ROOT / ".carry").is_dir() else [])
        path = os.pathsep.join(carry + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
        self.env = dict(os.environ, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                        TOKENIZERS_PARALLELISM="false", PYTHONPATH=path)
        self.tag, self.info = args.tag or "<device>", {}
        self.record: dict = dict(campaign="accelerator", date=datetime.datetime.now().isoformat(timespec="seconds"),
                                 git_commit=git_commit(), args=vars(args), budget_s=args.budget_s, stages={})

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def run(self, name: str, cmd: list[str], timeout: float, cwd: Path = ROOT, env: dict | None = None) -> dict:
        """Runs ``cmd`` (output to logs/<name>.log); on timeout SIGTERM to its group, then SIGKILL."""
        shown = scrub(shlex.join([x if x != PROBE else "<probe>" for x in cmd]), self.out)
        if self.dry:
            print(f"    $ {'cd benchmarks && ' if cwd == BENCH else ''}{shown}")
            return dict(cmd=shown, rc=None, dry_run=True)
        log = self.out / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        timeout = max(1.0, min(timeout, self.left()) - GRACE_S)
        start, timed_out = time.monotonic(), False
        if name != "probe_device":
            print(f"[{name}] timeout {timeout:.0f} s: {shown}", flush=True)
        with open(log, "w") as f:
            proc = subprocess.Popen(cmd, cwd=cwd, env=env or self.env, stdout=f, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            try:
                proc.wait(timeout=timeout)
            except BaseException as e:  # the campaign itself stopped (SIGTERM, Ctrl-C): its stage goes too
                if not isinstance(e, subprocess.TimeoutExpired):
                    os.killpg(proc.pid, signal.SIGKILL)
                    raise
                timed_out = True
                for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, None)):
                    try:
                        os.killpg(proc.pid, sig)
                        proc.wait(timeout=wait)
                        break
                    except (ProcessLookupError, subprocess.TimeoutExpired):
                        continue
        text = log.read_text(errors="replace")
        tail = text[-TAIL:]
        tail = tail[tail.find("\n") + 1:] if len(text) > TAIL else tail
        return dict(cmd=shown, rc=proc.returncode, timed_out=timed_out, seconds=round(time.monotonic() - start, 1),
                    log=f"logs/{name}.log", tail=tail, text=text)

    def write(self) -> Path | None:
        if self.dry:
            return None
        self.out.mkdir(parents=True, exist_ok=True)
        path = self.out / f"accelerator_{self.tag}.json"
        data = json.dumps(scrubbed(self.record, self.out), indent=2, default=str) + "\n"
        path.with_suffix(".tmp").write_text(data)
        os.replace(path.with_suffix(".tmp"), path)
        return path


def git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def probe(c: Campaign, mode: str, timeout: float) -> tuple[dict, dict]:
    """(the probe's JSON, the run's record): JAX's devices, and with ``full`` the rest of ``env``."""
    env = dict(c.env, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    run = c.run(f"probe_{mode}", [sys.executable, "-c", PROBE, mode, ",".join(OPTIONAL), ",".join(VERSIONS)], timeout, env=env)
    line = next((x for x in run.get("text", "").splitlines() if x.startswith("PROBE_JSON ")), None)
    return (json.loads(line[len("PROBE_JSON "):]) if line else {}), run


def missing(module: str) -> str | None:
    """Why ``module`` cannot be imported (None when it can be found)."""
    try:
        return None if importlib.util.find_spec(module) else f"{module} is not importable here"
    except (ImportError, ValueError) as e:
        return f"{module} is not importable here ({e})"


# ---- stages: each returns its record (status, runs, result) ----------------------------------


def stage_env(c: Campaign, budget: float) -> dict:
    info, run = probe(c, "full", budget)
    c.info = info
    return dict(runs=[run], result=info)


def stage_iteration(c: Campaign, budget: float) -> dict:
    reference = not c.smoke and budget >= 900
    cmd = [sys.executable, "iteration.py", "--workload", "tiny" if c.smoke else "paper", "--dtype", "bfloat16",
           "--repeats", "1" if c.smoke else ("2" if reference else "3"), "--tag", c.tag, "--out", str(c.out / "iteration")]
    run = c.run("iteration", cmd + ([] if reference else ["--no-reference"]), budget, cwd=BENCH)
    files = [] if c.dry else sorted((c.out / "iteration").glob("*.json"), key=lambda p: p.stat().st_mtime)
    return dict(runs=[run], reference=reference, result=files and json.loads(files[-1].read_text()).get("results"))


def stage_llm_7b(c: Campaign, budget: float) -> dict:
    peft = c.info.get("optional", {}).get("peft", True if missing("peft") is None else "missing")
    shapes = ([("smoke", ["--scale", "smoke"]), ("smoke, 1 layer", ["--scale", "smoke", "--layers", "1"])] if c.smoke
              else [("mistral-7b", ["--scale", "full"]), ("8 layers", ["--layers", "8"]), ("2 layers", ["--layers", "2"])])
    end, runs = time.monotonic() + budget, []
    for i, (label, flags) in enumerate(shapes):
        left = end - time.monotonic()
        if runs and left < MIN_STAGE_S:
            break
        timeout = left * (0.65 if i < len(shapes) - 1 else 1.0)
        reference = not c.smoke and peft is True and timeout >= 420
        out = c.out / "llm_7b" / f"llm_7b_{c.tag}_{re.sub(r'[^a-z0-9]+', '_', label)}.json"
        cmd = [sys.executable, "llm_7b.py", *flags, "--tag", c.tag, "--out", str(out)]
        run = c.run(f"llm_7b_{i}", cmd + ([] if reference else ["--no-reference"]), timeout, cwd=BENCH)
        run.update(shape=label, reference=reference)
        runs.append(run)
        if run["rc"] == 0 and not c.dry:
            data = json.loads(out.read_text())
            return dict(runs=runs, shape=label, result=dict(rows=data.get("rows"), summary=data.get("summary"),
                                                             memory=data.get("memory"), note=data.get("note")))
        if run["rc"] is not None:
            run["why"] = "timeout" if run["timed_out"] else (
                "out of memory" if re.search(r"RESOURCE_EXHAUSTED|out of memory|OutOfMemory", run["text"]) else "error")
    return dict(runs=runs, shape=None, peft=peft)


def stage_train_20q_base(c: Campaign, budget: float) -> dict:
    if why := missing("ml_collections"):
        return dict(status="skipped", reason=f"{why}: run benchmarks/carry_for_accelerator.sh and carry .carry")
    end, models, workdir = time.monotonic() + budget, c.tmp / "models", c.tmp / "train_20q"
    build = [sys.executable, str(Path(__file__).resolve()), "--build-models", str(models)] + (["--smoke"] if c.smoke else [])
    runs = [c.run("train_build_models", build, min(budget, 300), env=dict(c.env, JAX_PLATFORMS="cpu"))]
    if runs[0]["rc"] not in (0, None):
        return dict(runs=runs)
    cmd = [sys.executable, "-m", "archer_jax.train", f"--config=configs/20q.py{':micro' if c.smoke else ''}",
           f"--workdir={workdir}", f"--config.model.policy={models / 'gpt2'}", f"--config.model.critic={models / 'roberta'}",
           "--config.iterations=3", "--config.sft.steps=0", f"--config.compilation_cache={c.tmp / 'xla_cache'}"]
    if not c.smoke:  # the actor learns from iteration 2; greedy evaluations only before and after
        cmd += ["--config.warmup_iter=1", "--config.eval_freq=0", "--config.save_freq=1000"]
    runs.append(c.run("train_20q_base", cmd, end - time.monotonic()))
    for name in ("history.jsonl", "summary.json"):  # kept beside the JSON (the workdir, with checkpoints, is not)
        if (workdir / name).exists():
            (c.out / "train_20q_base").mkdir(parents=True, exist_ok=True)
            shutil.copy(workdir / name, c.out / "train_20q_base" / name)
    history, summary = workdir / "history.jsonl", workdir / "summary.json"
    rows = [json.loads(x) for x in history.read_text().splitlines()] if history.exists() else []
    times = [{k: v for k, v in r.items() if k == "iteration" or k.startswith(("time/", "rollout/return"))} for r in rows]
    summary = json.loads(summary.read_text()) if summary.exists() else {}
    return dict(runs=runs, result=dict(per_iteration=times, wall_time_s=summary.get("wall_time_s"),
                                       iterations_done=len(rows)))


def stage_rollout_overlap(c: Campaign, budget: float) -> dict:
    if why := missing("ml_collections"):
        return dict(status="skipped", reason=f"{why}: run benchmarks/carry_for_accelerator.sh and carry .carry")
    out = c.out / "rollout_overlap"
    cmd = [sys.executable, str(BENCH / "rollout_overlap.py"), "--cases", "20q_base", "--skip-learning",
           "--iterations", "4", f"--out={out}", f"--workdir={c.tmp / 'rollout_overlap'}",
           f"--train-log={c.out / 'logs' / 'rollout_overlap_train.log'}"] + (["--smoke"] if c.smoke else [])
    run = c.run("rollout_overlap", cmd, budget)
    path = out / "rollout_overlap.json"
    if c.dry or not path.exists():
        return dict(runs=[run])
    rows = json.loads(path.read_text()).get("rows", [])
    return dict(runs=[run], result=dict(rows=rows), note="modes that finished before the stage's end; each row's "
                "figures are over the iterations after the first (which compiles) and before the last")


def stage_plan_vs_measured(c: Campaign, budget: float) -> dict:
    if why := missing("archer_jax.plan"):
        return dict(status="skipped", reason=f"{why}: archer_jax/plan/ is not in this tree")
    path = c.out / "plan" / f"plan_{c.tag}.json"
    cmd = [sys.executable, "-m", "archer_jax.plan", f"--config=configs/20q.py{':tiny' if c.smoke else ''}",
           "--target=local", f"--json={path}"]
    if not c.dry:
        path.parent.mkdir(parents=True, exist_ok=True)
    run = c.run("plan", cmd, budget)
    if c.dry or not path.exists():
        return dict(runs=[run])
    plan = json.loads(path.read_text())
    ours = next(iter((c.record["stages"].get("iteration", {}).get("result") or {}).values()), {}).get("ours") or {}
    programs = [{k: p.get(k) for k in ("name", "shape", "per_iteration", "roofline_s", "flops", "bytes_accessed",
                                       "compile_s", "fits", "peak_bytes")}
                for p in plan.get("programs", [])]
    per_call = {p["name"]: p["roofline_s"] for p in programs}
    rollout = [p["roofline_s"] * p["per_iteration"] for p in programs if p["name"].startswith("rollout")
               and p["roofline_s"] is not None]
    pairs = dict(critic_program_s=(ours.get("critic_program_s"), per_call.get("critic_step")),
                 actor_program_s=(ours.get("actor_program_s"), per_call.get("actor_step")),
                 rollout_s=(ours.get("rollout_s"), sum(rollout) if rollout else None),
                 iteration_s=(ours.get("iteration_s"), plan.get("iteration_s")))
    return dict(runs=[run], result=dict(
        pairs={k: dict(measured=m, predicted=p, ratio=m / p if m and p else None) for k, (m, p) in pairs.items()},
        programs=programs, bound_by=plan.get("bound_by"),
        note="measured: iteration's medians (critic/actor: one step's program; rollout: the phase); predicted: "
             "the plan's roofline seconds (a lower bound), per call for the steps, summed over an iteration for rollouts"))


def stage_parity(c: Campaign, budget: float) -> dict:
    if why := missing("pytest"):
        return dict(status="skipped", reason=f"{why}: run benchmarks/carry_for_accelerator.sh and carry .carry")
    paths = ["tests/models/test_parity_precision.py", "tests/models/test_gpt2.py"] if c.smoke else PARITY_PATHS
    cmd = [sys.executable, "-m", "pytest", "-q", "-rfE", "-m", "parity and not slow", "-p", "no:cacheprovider", *paths]
    run = c.run("parity", cmd, budget)
    counts = pytest_counts(run.get("text", "")) if not c.dry else {}
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", run.get("text", ""), re.M)[:30]
    return dict(runs=[run], result=dict(counts=counts, failed=failed),
                note="tests/conftest.py pins float32 matmuls to 'highest' for every parity test unconditionally "
                     "(and resets them after each), so one run is recorded: no run at the platform's default policy.")


RUNNERS: dict[str, Callable[[Campaign, float], dict]] = {name: globals()[f"stage_{name}"] for name in STAGES}


def build_models(directory: Path, smoke: bool) -> None:
    """Random GPT-2 and RoBERTa (base-size, or tiny with ``smoke``) with tokenizers trained here."""
    import jax
    from flax import nnx

    from archer_jax import models
    from archer_jax.models import tiny

    for kind, hub_vocab in (("gpt2", 50257), ("roberta", 50265)):
        tokenizer = tiny.train_tokenizer(kind, directory / kind)
        if not smoke:  # the hub models' vocabulary size (their LM head and embedding costs), in added tokens
            tokenizer.add_tokens([f"<|extra{i}|>" for i in range(hub_vocab - len(tokenizer))])
            tokenizer.save_pretrained(directory / kind)
        vocab = len(tokenizer)
        if smoke:
            config = tiny.tiny_config(kind, vocab)
        else:
            config = (models.GPT2Config(vocab_size=vocab, bos_token_id=0, eos_token_id=0) if kind == "gpt2"
                      else models.RobertaConfig(vocab_size=vocab))
        with jax.default_device(jax.local_devices(backend="cpu")[0]):
            model = models.ARCHITECTURES[kind].module_cls(config, rngs=nnx.Rngs(0))
        models.save_pretrained(model, directory / kind, tokenizer=tokenizer)
        print(f"built {kind}: vocab {vocab}, {sum(x.size for x in jax.tree.leaves(nnx.state(model)))} parameters")


def summary_line(name: str, rec: dict) -> str:
    res = rec.get("result") or {}
    if name == "iteration" and res:
        o = next(iter(res.values())).get("ours", {})
        keys = ("iteration_s", "critic_mfu", "actor_mfu", "decode_roofline_fraction", "compile_s", "peak_memory_gib")
        return ", ".join(f"{k} {o[k]:.3g}" for k in keys if isinstance(o.get(k), (int, float)))
    if name == "llm_7b":
        targets = ((res.get("summary") or {}).get("targets") or {})
        return f"shape {rec.get('shape')}; " + ", ".join(f"{k} {t.get('measured')}" for k, t in targets.items())
    if name == "train_20q_base" and res:
        its = [r.get("time/iteration") for r in res.get("per_iteration", [])]
        return f"{res.get('iterations_done')} iterations, s each: " + ", ".join(f"{t:.1f}" for t in its if t)
    if name == "rollout_overlap" and res:
        return "; ".join(f"{r['mode']} {r['iteration_s']:.1f} s/it, {r['samples_per_s']:.1f} samples/s"
                         for r in res.get("rows", []))
    if name == "parity" and res:
        return ", ".join(f"{k} {v}" for k, v in res.get("counts", {}).items())
    if name == "plan_vs_measured" and res:
        ratios = ", ".join(f"{k} {v['ratio']:.2f}" for k, v in res["pairs"].items() if v["ratio"])
        return f"measured / roofline: {ratios}" if ratios else "no roofline times (the device's peaks are unknown)"
    if name == "env" and res:
        return f"{res.get('device_kind')} x{res.get('device_count')}, jax {res.get('versions', {}).get('jax')}"
    return rec.get("reason", "")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(BENCH / "results"), help="folder for the JSON and logs")
    p.add_argument("--budget-s", type=float, default=2100.0, help="the whole campaign's wall-clock limit")
    p.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated subset of {','.join(STAGES)}")
    p.add_argument("--tag", default="", help="result name suffix (default from the device kind, e.g. gpu_h100)")
    p.add_argument("--smoke", action="store_true", help="small shapes everywhere (a check of the script)")
    p.add_argument("--allow-cpu", action="store_true", help="run on a CPU-only machine (with --smoke)")
    p.add_argument("--dry-run", action="store_true", help="list the stages and commands, run nothing")
    p.add_argument("--build-models", type=Path, default=None, help=argparse.SUPPRESS)  # the train stage's helper
    args = p.parse_args()
    if args.build_models:
        return build_models(args.build_models, args.smoke)
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    if unknown := [s for s in stages if s not in STAGES]:
        p.error(f"unknown stages {unknown}; known: {', '.join(STAGES)}")
    stages = [s for s in STAGES if s in stages]
    sys.path[:0] = [str(ROOT), str(ROOT / ".carry")]  # as the stages' PYTHONPATH: the module probes see what they do
    c = Campaign(args)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("accelerator.py: stopped by SIGTERM"))
    if not c.dry:
        device, run = probe(c, "device", 180)
        if not device:
            sys.exit(f"accelerator.py: JAX found no device (rc {run['rc']}): {run['tail'][-300:].strip()}")
        if device["platform"] == "cpu" and not args.allow_cpu:
            sys.exit("accelerator.py: no GPU or TPU here (JAX's backend is cpu); pass --allow-cpu (with --smoke) to run anyway")
        c.tag = args.tag or device_tag(device["platform"], device["device_kind"])
        c.tmp = Path(tempfile.mkdtemp(prefix="archer_jax_accelerator_"))
        c.record.update(tag=c.tag, machine=dict(device, cpu_count=os.cpu_count()))
        print(f"campaign {c.tag}: {device['device_kind']} x{device['device_count']}, budget {args.budget_s:.0f} s, "
              f"stages {', '.join(stages)}", flush=True)
    for i, name in enumerate(stages):
        left = c.left()
        if c.dry:
            print(f"{name}:")
            RUNNERS[name](c, args.budget_s * SHARES[name])
            continue
        if left < MIN_STAGE_S:
            c.record["stages"][name] = dict(status="skipped", reason=f"budget: {left:.0f} s left")
            c.write()
            continue
        budget = max(FLOOR.get(name, MIN_STAGE_S), left * SHARES[name] / sum(SHARES[s] for s in stages[i:]))
        start = time.monotonic()
        try:
            rec = RUNNERS[name](c, min(budget, left))
        except Exception as e:  # a stage's bug must not lose the others
            rec = dict(status="failed", reason=f"{type(e).__name__}: {e}")
        for run in rec.get("runs", []):
            run.pop("text", None)
        runs = rec.get("runs", [])
        rec.setdefault("status", "timeout" if any(r["timed_out"] for r in runs[-1:]) else
                       "ok" if runs and runs[-1]["rc"] == 0 else "failed")
        rec.update(seconds=round(time.monotonic() - start, 1), timeout_s=round(budget))
        c.record["stages"][name] = rec
        path = c.write()
        print(f"[{name}] {rec['status']} in {rec['seconds']:.0f} s; wrote {path}", flush=True)
    if c.dry:
        return
    c.record["total_s"] = round(time.monotonic() - c.start, 1)
    path = c.write()
    shutil.rmtree(c.tmp, ignore_errors=True)
    print(f"\n{'stage':<18}{'status':<9}{'s':>7}  result")
    for name, rec in c.record["stages"].items():
        print(f"{name:<18}{rec['status']:<9}{rec.get('seconds', 0):>7.0f}  {scrub(summary_line(name, rec), c.out)[:110]}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
