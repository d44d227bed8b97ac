"""The library's layout holds: layers import only downwards, envs load no model, archer_jax modules
are imported at the top, no import cycle, short classes.

The layers, lowest first (README, "Layout"): a module may import its own layer and the ones below.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "archer_jax"

# The top floor: the run (its loop, warm starts, command line and checks) and the commands.
TOP_FLOOR = ("run", "train", "trained", "evaluate", "play", "plan")
LAYERS = [
    ("archer_jax", "errors", "runtime"),
    ("models",),
    ("envs", "learners", "sampling", "replay", "input_pipeline", "data", "records"),
    ("acting", "parts", "parts_config", "rollout", "pretraining", "model_oracle"),
    ("agents",),
    ("config", "config_docs", "import_official"),
    TOP_FLOOR,
]
MAX_CLASS_LINES = 150
MAX_TOP_LEVEL_MODULES = 15  # flat modules beside the packages, __init__ not counted
# Function-local imports of archer_jax modules that stay, as (file under archer_jax/, module): each
# keeps an optional dependency off the import path or breaks an import cycle, and says so in a
# comment on its line or above its block of imports.
LOCAL_IMPORTS = {
    ("data/offline_replay.py", "archer_jax.data.sources"),  # TFDS
    ("data/offline_replay.py", "archer_jax.data.dialogue_builder"),  # TFDS
}
# Function-local imports in files being reshaped elsewhere, not yet commented or moved.
LOCAL_IMPORTS_TO_RESHAPE: set[tuple[str, str]] = set()


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()


def _imported_modules(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The archer_jax modules an import statement names ("from archer_jax.x import y": y is a module or a name in x)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.startswith("archer_jax")]
    if not (node.module and node.module.startswith("archer_jax")):
        return []
    return [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module for a in node.names]


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _main_guard(node: ast.AST) -> bool:
    """``if __name__ == "__main__":`` runs only when the file is the program, never on import."""
    return isinstance(node, ast.If) and ast.unparse(node.test).replace("'", '"') == '__name__ == "__main__"'


def _imports(path: Path) -> set[str]:
    """The archer_jax modules ``path`` imports (anywhere but under ``if TYPE_CHECKING:`` or the main guard)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if _type_checking(node) or _main_guard(node):
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.update(_imported_modules(node))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


GRAPH = {name: _imports(path) for name, path in MODULES.items()}


def layer(module: str) -> int:
    top = module.split(".")[1] if "." in module else module
    for number, names in enumerate(LAYERS):
        if top in names:
            return number
    raise AssertionError(f"{module} is in no layer: add it to LAYERS (and to the README's layout)")


def _on_top_floor(module: str) -> bool:
    return "." in module and module.split(".")[1] in TOP_FLOOR


def top_floor_imports(graph: dict[str, set[str]]) -> list[str]:
    """The imports of a top-floor module (the run's loop, its command lines) by a module below it."""
    return [f"{m} imports {d}" for m, deps in graph.items() if not _on_top_floor(m) for d in sorted(deps)
            if _on_top_floor(d)]


def test_every_module_has_a_layer_and_imports_only_its_own_or_lower_ones():
    upward = [f"{m} (layer {layer(m)}) imports {d} (layer {layer(d)})"
              for m, deps in GRAPH.items() for d in deps if layer(d) > layer(m)]
    assert not upward, "\n".join(upward)


def test_nothing_imports_the_top_floor():
    """The loop, the warm starts and the commands sit on everything else: no module below imports
    them (a record, a part or a config that needs one of them belongs below)."""
    assert not top_floor_imports(GRAPH), "\n".join(top_floor_imports(GRAPH))


def test_the_top_floor_check_can_fail():
    graph = {"archer_jax.parts": {"archer_jax.run.loop", "archer_jax.records.report"},
             "archer_jax.run.cli": {"archer_jax.run.loop"}, "archer_jax.config": {"archer_jax.train"}}
    assert top_floor_imports(graph) == ["archer_jax.parts imports archer_jax.run.loop",
                                        "archer_jax.config imports archer_jax.train"]


def test_the_train_command_runs_its_module_once():
    """``python -m archer_jax.train`` executes train.py as ``__main__``: a module of the package that
    imported ``archer_jax.train`` would execute it a second time, under its own name."""
    importers = sorted(m for m, deps in GRAPH.items() if "archer_jax.train" in deps)
    assert not importers, importers


def test_learning_does_not_act():
    """learners/ never imports the sampler, the acting rules or anything that acts."""
    acting = ("archer_jax.sampling", "archer_jax.acting", "archer_jax.rollout", "archer_jax.envs")
    bad = [f"{m} imports {d}" for m, deps in GRAPH.items() if m.startswith("archer_jax.learners")
           for d in deps if d.startswith(acting)]
    assert not bad, "\n".join(bad)


def test_envs_load_no_model():
    """envs/ imports neither the models, the sampler nor the model oracle: a model oracle is built
    above them (archer_jax.model_oracle) and handed in."""
    models = ("archer_jax.models", "archer_jax.sampling", "archer_jax.model_oracle")
    bad = [f"{m} imports {d}" for m, deps in GRAPH.items() if m.startswith("archer_jax.envs")
           for d in deps if d.startswith(models)]
    assert not bad, "\n".join(bad)


def _local_imports(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of each archer_jax module imported inside a function of ``path``."""
    found = []
    for func in ast.walk(ast.parse(path.read_text())):
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found += [(node.lineno, module) for node in ast.walk(func) if isinstance(node, (ast.Import, ast.ImportFrom))
                      for module in _imported_modules(node)]
    return sorted(set(found))


def _commented(lines: list[str], number: int) -> bool:
    """Whether the import on line ``number`` (1-based) has a comment on its line or above its block of imports."""
    if "#" in lines[number - 1]:
        return True
    above = number - 2
    while above >= 0 and lines[above].strip().startswith(("from ", "import ")):
        above -= 1
    return above >= 0 and lines[above].strip().startswith("#")


def test_archer_jax_modules_are_imported_at_the_top():
    """A function imports an archer_jax module only where LOCAL_IMPORTS says why (with a comment
    at the import) or the file is being reshaped (LOCAL_IMPORTS_TO_RESHAPE)."""
    allowed = LOCAL_IMPORTS | LOCAL_IMPORTS_TO_RESHAPE
    found, bad = set(), []
    for path in sorted(MODULES.values()):
        name, lines = str(path.relative_to(PACKAGE)), path.read_text().splitlines()
        for number, module in _local_imports(path):
            found.add((name, module))
            if (name, module) not in allowed:
                bad.append(f"{name}:{number}: imports {module} inside a function: import it at the top, or say why not")
            elif (name, module) in LOCAL_IMPORTS and not _commented(lines, number):
                bad.append(f"{name}:{number}: the local import of {module} needs a comment saying why it stays")
    bad += [f"{name}: no longer imports {module} inside a function: remove it from the list" for name, module in allowed - found]
    assert not bad, "\n".join(bad)


def test_no_import_cycle():
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for dep in sorted(GRAPH.get(module, ())):
            if dep == module or dep not in GRAPH:
                continue
            # A package's __init__ re-exporting its own modules is not a cycle with them.
            if module.startswith(dep + ".") and MODULES[dep].name == "__init__.py":
                continue
            if state.get(dep) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(dep):] + [dep]))
            if dep not in state:
                visit(dep, path + [dep])
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module, [module])


@pytest.mark.parametrize("path", sorted(MODULES.values()), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_classes_are_short(path):
    long = [f"{node.name}: {node.end_lineno - node.lineno + 1} lines" for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES]
    assert not long, long


def top_level_modules(package: Path) -> list[str]:
    """The flat modules of ``package`` (not its packages, not ``__init__``)."""
    return sorted(p.stem for p in package.glob("*.py") if p.stem != "__init__")


def test_few_modules_sit_at_the_top_level():
    """Modules that belong together sit in a package named for what they share; the top level keeps
    the few a reader starts from (the commands, the config, the parts, the play loop)."""
    flat = top_level_modules(PACKAGE)
    assert len(flat) <= MAX_TOP_LEVEL_MODULES, f"{len(flat)} top-level modules: {flat}"


def test_the_top_level_count_can_fail(tmp_path):
    for name in ["__init__", *(f"m{i}" for i in range(MAX_TOP_LEVEL_MODULES + 1))]:
        (tmp_path / f"{name}.py").write_text("")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "inner.py").write_text("")
    assert len(top_level_modules(tmp_path)) == MAX_TOP_LEVEL_MODULES + 1


def test_the_layering_check_catches_an_upward_import(tmp_path):
    """The check itself can fail: a learner module importing the sampler is flagged."""
    bad = tmp_path / "bad.py"
    bad.write_text("from archer_jax.sampling import Sampler\nfrom archer_jax import acting\n")
    deps = _imports(bad)
    assert "archer_jax.acting" in deps and layer("archer_jax.acting") > layer("archer_jax.learners.archer")
    assert any(d.startswith("archer_jax.sampling") for d in deps)


def test_the_local_import_check_finds_one_and_reads_its_comment(tmp_path):
    """The check itself can fail: a function's import is found, and only a commented one passes."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\n\ndef f():\n    from archer_jax import acting\n\n\n"
                   "def g():\n    # an optional dependency\n    import os\n    from archer_jax.data import sources\n")
    assert _local_imports(bad) == [(5, "archer_jax.acting"), (11, "archer_jax.data.sources")]
    lines = bad.read_text().splitlines()
    assert not _commented(lines, 5) and _commented(lines, 11)


def test_no_module_below_the_agents_imports_them():
    """The agents sit on the shared parts, never the reverse: a new algorithm touches its own module."""
    below = [name for name in MODULES if layer(name) < layer("archer_jax.agents")]
    offenders = {name: sorted(i for i in GRAPH[name] if i.startswith("archer_jax.agents")) for name in below}
    assert not {k: v for k, v in offenders.items() if v}


_AGENT_SWITCH = re.compile(r"""\.agent\s*(==|!=|in|not in)\s*[("'\[]""")


def agent_switches(package: Path) -> list[str]:
    """``path:line`` of each comparison of a config's agent with a name outside ``agents/`` (an
    algorithm's special case belongs in its own module, reached through the registry)."""
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.relative_to(package).parts[0] == "agents":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if _AGENT_SWITCH.search(line):
                found.append(f"{path.relative_to(package)}:{number}")
    return found


def test_no_switch_on_the_agent_name_outside_the_agents():
    assert agent_switches(PACKAGE) == []


def test_the_agent_switch_check_can_fail(tmp_path):
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "ppo.py").write_text('if c.agent == "ppo":\n    pass\n')  # the agents' own: allowed
    (tmp_path / "config.py").write_text('x = 1\nif c.agent == "ppo" and c.ppo.value_head:\n    pass\n'
                                        'waits = config.agent in ("archer", "offline_archer")\n')
    assert agent_switches(tmp_path) == ["config.py:2", "config.py:4"]


def test_every_config_default_is_its_dataclass_default():
    """The config's groups and the agents' top-level keys take their defaults from the dataclasses
    that check them: one source for each default."""
    import dataclasses

    from archer_jax import agents, config

    c = config.base_config()
    compared = 0
    for group, classes, skip in config.GROUPS + config.AGENT_GROUPS:
        for cls in classes:
            for field in dataclasses.fields(cls):
                if field.name in skip or field.metadata.get("group"):
                    continue
                assert config.group_at(c, group)[field.name] == getattr(cls(), field.name), f"{group}.{field.name}"
                compared += 1
    skipped = {group: skip for group, _, skip in config.GROUPS + config.AGENT_GROUPS}
    for agent in agents.AGENTS.values():
        for field in dataclasses.fields(agent.Config):
            if field.metadata.get("group"):
                kind = type(field.default_factory())
                group = {"iql": "learner"}.get(field.name, field.name)
                for inner in dataclasses.fields(kind):
                    if inner.name in skipped[group]:
                        continue
                    assert c[group][inner.name] == getattr(kind(), inner.name), f"{group}.{inner.name}"
                    compared += 1
            else:
                assert c[field.name] == field.default, f"{agent.name}: {field.name}"
                compared += 1
    assert compared > 60




MAX_CONFIG_MODULES = 8  # the config's path from the command line to the compiled steps


def config_path(call, is_config, stop: type[Exception] | None = None) -> tuple[list[str], list[str]]:
    """(the archer_jax modules a value that ``is_config`` is passed into while ``call()`` runs, in
    the order first entered; those entered again after the config had left them). The config's
    own methods and the helpers they hand themselves to are not steps on its path. ``stop``: an
    exception that ends the call."""
    import sys

    modules, reentered = [], []

    def on_stack(frame, module) -> bool:
        frame = frame.f_back
        while frame is not None:
            if frame.f_globals.get("__name__") == module and frame.f_code.co_name in held.get(module, ()):
                return True
            frame = frame.f_back
        return False

    held: dict[str, set[str]] = {}  # module -> its functions that received the config

    def hook(frame, event, arg):
        module = frame.f_globals.get("__name__", "")
        if event != "call" or not module.startswith("archer_jax"):
            return
        caller = frame.f_back.f_locals.get("self") if frame.f_back is not None else None
        if not any(k != "self" and v is not caller and is_config(v) for k, v in frame.f_locals.items()):
            return
        if module not in modules:
            modules.append(module)
        elif not on_stack(frame, module) and module not in reentered:
            reentered.append(module)
        held.setdefault(module, set()).add(frame.f_code.co_name)

    sys.setprofile(hook)
    try:
        call()
    except Exception as e:
        if stop is None or not isinstance(e, stop):
            raise
    finally:
        sys.setprofile(None)
    return modules, reentered


class _Built(Exception):
    pass


def test_the_config_enters_few_modules_once_on_its_way_to_the_steps(tmp_path, monkeypatch):
    """The command line's ConfigDict goes to train_and_evaluate, which validates it into the typed
    RunConfig and hands that to build_agent: followed until the agent's steps are built. Each
    component gets its own group (``config.env``, the agent's ``Config``), not the whole config."""
    from archer_jax.config import RunConfig
    from archer_jax.run import loop
    from tests.run.test_train_app import micro

    real, built = loop.build_agent, []

    def build_and_stop(config, workdir):
        built.append(real(config, workdir))
        raise _Built

    monkeypatch.setattr(loop, "build_agent", build_and_stop)
    c = micro(sft__steps=0)

    def whole(value) -> bool:  # the command line's ConfigDict, or the RunConfig validated from it
        return value is c or isinstance(value, RunConfig)

    modules, reentered = config_path(lambda: loop.train_and_evaluate(c, tmp_path / "run"), whole, stop=_Built)
    try:
        assert built and built[0].programs(1)  # the agent, its steps built
    finally:
        if built:
            built[0].parts.close()
    modules = ["archer_jax.run.cli", *modules]  # the command line parses the flags and calls the loop
    assert len(modules) <= MAX_CONFIG_MODULES, " -> ".join(modules)
    assert not reentered, (reentered, " -> ".join(modules))


def test_the_config_path_sees_each_module_the_config_enters_and_reenters():
    from archer_jax import config as config_lib
    from tests.run.test_train_app import micro

    c = micro()
    modules, reentered = config_path(lambda: config_lib.validate(c), lambda v: v is c)
    assert modules[0] == "archer_jax.config" and not reentered
    modules, reentered = config_path(lambda: (config_lib.validate(c), config_lib.validate(c)), lambda v: v is c)
    assert reentered[0] == "archer_jax.config"  # left, then entered again
    sentinel = object()
    assert config_path(lambda: config_lib.validate(c), lambda v: v is sentinel) == ([], [])
