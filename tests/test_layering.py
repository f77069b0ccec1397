"""The package's imports only look down its layers, and no module takes another's private names.

The layers, bottom to top (documented in ``agentgym_budget/__init__.py``)::

    _optional, _once, text, flags, compiling, seeds, provenance  <  wrappers  <  envs  <  episodes  <  policies  <  eval  <  train, integrations  <  distributed  <  experiments  <  cli

A module may import its own layer and any layer below it, and no modules import each other in a
circle.  Every import statement counts — at module level, inside functions, under
``TYPE_CHECKING`` — since each is a dependency.  (A built-in policy's entry point in the policy
registry, ``"module:factory"``, is a name looked up when the policy is built, not an import.)
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "agentgym_budget"

#: Each top-level part of the package and its layer (higher may import lower, never the reverse).
LAYERS: dict[str, int] = {
    "_optional": 0,
    "_once": 0,
    "text": 0,
    "flags": 0,
    "compiling": 0,
    "seeds": 0,
    "provenance": 0,
    "wrappers": 1,
    "envs": 2,
    "": 2,  # the package root: importing it registers the envs
    "episodes": 3,  # the policy protocol and the one episode runner: plays any policy
    "policies": 4,  # the policies; demonstrations, few-shot examples, the tiny model's text: played episodes
    "eval": 5,
    "train": 6,
    "integrations": 6,
    "distributed": 7,
    "experiments": 8,  # the sweep runner: trains and evaluates through train/ and eval/
    "cli": 9,
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int:
    parts = module.split(".")
    assert parts[0] == "agentgym_budget", module
    top = parts[1] if len(parts) > 1 else ""
    if top not in LAYERS:
        raise AssertionError(f"{module}: part {top!r} of the package has no layer; add it to LAYERS and the docs")
    return LAYERS[top]


def imports_of(path: Path) -> list[tuple[int, str, list[str]]]:
    """``(line, imported module, imported names)`` for every import of our package in ``path``."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    return imports_in(path.read_text(encoding="utf-8"), package)


def imports_in(source: str, package: str) -> list[tuple[int, str, list[str]]]:
    """:func:`imports_of` for the source of a module in ``package`` (relative imports resolved)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, []) for alias in node.names if alias.name.split(".")[0] == "agentgym_budget"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target.split(".")[0] == "agentgym_budget":
                found.append((node.lineno, target, [alias.name for alias in node.names]))
    return found


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_the_walk_sees_every_module_and_knows_every_layer() -> None:
    assert len(MODULES) > 50
    for path in MODULES:
        layer_of(module_name(path))


def test_the_walk_reads_relative_and_function_level_imports() -> None:
    # The checker has teeth: imports inside functions, under TYPE_CHECKING, relative ones and plain ``import``.
    source = (
        "import os\n"
        "import agentgym_budget.cli\n"
        "def f():\n    from agentgym_budget.envs.base import TextEnv\n"
        "from ..eval import evaluate\n"
        "from . import _secret\n"
        "if TYPE_CHECKING:\n    from agentgym_budget.train.rollout import Episode\n"
    )
    assert imports_in(source, "agentgym_budget.wrappers") == [
        (2, "agentgym_budget.cli", []),
        (5, "agentgym_budget.eval", ["evaluate"]),
        (6, "agentgym_budget.wrappers", ["_secret"]),
        (4, "agentgym_budget.envs.base", ["TextEnv"]),
        (8, "agentgym_budget.train.rollout", ["Episode"]),
    ]
    assert layer_of("agentgym_budget.wrappers.budget") < layer_of("agentgym_budget.envs.base")


def test_imports_only_look_down_the_layers() -> None:
    upward = []
    for path in MODULES:
        importer = module_name(path)
        for line, target, _ in imports_of(path):
            if layer_of(target) > layer_of(importer):
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {importer} imports {target}")
    assert not upward, "imports that look up a layer:\n" + "\n".join(upward)


def arrows(imports: list[tuple[int, str, list[str]]], modules: set[str]) -> set[str]:
    """The modules that ``imports`` (:func:`imports_in`'s) load: ``from package import module`` names the module."""
    targets = set()
    for _, target, names in imports:
        submodules = {f"{target}.{name}" for name in names} & modules
        targets |= submodules or {target}
    return targets


def module_graph() -> dict[str, set[str]]:
    """Each module of the package and the modules it imports."""
    modules = {module_name(path) for path in MODULES}
    return {module_name(path): arrows(imports_of(path), modules) - {module_name(path)} for path in MODULES}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of ``graph`` with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_circle_finder_has_teeth() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []
    # the runner importing the demonstrations inside a function would close a circle through them
    graph = module_graph()
    source = "def f():\n    from agentgym_budget.policies import demonstrations\n"
    graph["agentgym_budget.episodes.runner"] |= arrows(imports_in(source, "agentgym_budget.episodes"), set(graph))
    assert ["agentgym_budget.episodes.runner", "agentgym_budget.policies.demonstrations"] in circles(graph)


def test_no_modules_import_each_other_in_a_circle() -> None:
    # Within a layer too: a circle closed by an import inside a function or under TYPE_CHECKING is one.
    found = circles(module_graph())
    assert not found, "modules that import each other in a circle:\n" + "\n".join(" <-> ".join(c) for c in found)


#: What the trainer, the adapters and the Ray layer may take from ``eval``: the evaluation itself
#: (the trainer's periodic held-out evaluation and its plots), never the episode machinery.
EVAL_API_ABOVE = {"agentgym_budget.eval", "agentgym_budget.eval.evaluate", "agentgym_budget.eval.plots"}


def test_rollouts_run_through_the_episodes_layer_not_eval() -> None:
    # One runner, one end-of-episode rule, one record for every consumer: train, integrations and
    # distributed import them from episodes/, and take nothing but the evaluation itself from eval/.
    wrong = []
    for path in MODULES:
        importer = module_name(path)
        if importer.split(".")[1:2] not in (["train"], ["integrations"], ["distributed"]):
            continue
        for line, target, _ in imports_of(path):
            if target.startswith("agentgym_budget.eval") and target not in EVAL_API_ABOVE:
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {importer} imports {target}")
    assert not wrong, "episode machinery taken from eval instead of episodes:\n" + "\n".join(wrong)
    assert (PACKAGE / "episodes" / "runner.py").is_file() and not (PACKAGE / "eval" / "runner.py").exists()


def test_no_module_imports_another_modules_private_names() -> None:
    private = []
    for path in MODULES:
        importer = module_name(path)
        for line, target, names in imports_of(path):
            if target == importer:
                continue
            for name in names:
                if name.startswith("_") and not name.startswith("__"):
                    private.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {name} from {target}")
    assert not private, "private names imported across modules:\n" + "\n".join(private)


@pytest.mark.parametrize("folder", ["benchmarks", "tools"])
def test_scripts_use_only_public_names(folder: str) -> None:
    scripts = sorted((PACKAGE.parent / folder).rglob("*.py"))
    private = []
    for path in scripts:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("agentgym_budget"):
                private += [f"{path.name}:{node.lineno}: {a.name}" for a in node.names
                            if a.name.startswith("_") and not a.name.startswith("__")]
    assert not private, "\n".join(private)
