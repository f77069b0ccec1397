"""Every docstring example in the package and in ``tools/`` runs and prints what it says (``doctest``).

A module whose optional third-party backend is not installed is skipped, naming the missing module;
any other import error (of our own code, a renamed symbol) fails.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import pkgutil
from pathlib import Path

import pytest

import tools

import agentgym_budget
from agentgym_budget._optional import MissingBackendError


def _modules_with_examples() -> list[str]:
    names = []
    packages = [(agentgym_budget.__path__, "agentgym_budget."), (tools.__path__, "tools.")]
    for info in (info for path, prefix in packages for info in pkgutil.walk_packages(path, prefix=prefix)):
        spec = importlib.util.find_spec(info.name)
        if spec is not None and spec.origin and ">>> " in Path(spec.origin).read_text(encoding="utf-8"):
            names.append(info.name)
    return sorted(names)


MODULES = _modules_with_examples()
OURS = ("agentgym_budget", "tools")


def _missing_third_party_module(error: BaseException | None) -> str | None:
    """The missing third-party module behind an import ``error`` (through its causes), else ``None``.

    Only a ``ModuleNotFoundError`` naming a module outside this repository counts (``require``'s
    ``MissingBackendError`` carries it as its cause): an ``ImportError`` of a name inside a module
    (a renamed symbol) or a missing module of our own is a bug to report, never a skip.
    """
    while error is not None:
        if isinstance(error, ModuleNotFoundError) and error.name:
            return None if error.name.partition(".")[0] in OURS else error.name
        error = error.__cause__ or error.__context__
    return None


def test_the_package_has_docstring_examples():
    assert "agentgym_budget.wrappers.budget" in MODULES and len(MODULES) >= 20


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    try:
        module = importlib.import_module(name)
    except ImportError as error:  # MissingBackendError included
        missing = _missing_third_party_module(error)
        if missing is None:  # a renamed symbol or a broken import of our own code: a failure, not a skip
            raise
        pytest.skip(f"{name} needs the optional package {missing!r}, not installed: {error}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} docstring examples failed in {name}"


def test_only_a_missing_third_party_module_is_a_skip():
    def raised(error: ImportError, cause: BaseException | None = None) -> ImportError:
        error.__cause__ = cause
        return error

    assert _missing_third_party_module(ModuleNotFoundError("no torch", name="torch")) == "torch"
    wrapped = raised(MissingBackendError("pip install 'agentgym-budget[llm]'"), ModuleNotFoundError(name="torch.nn"))
    assert _missing_third_party_module(wrapped) == "torch.nn"
    # our own code: a missing module, a renamed symbol, a wrapped one of either
    assert _missing_third_party_module(ModuleNotFoundError(name="agentgym_budget.gone")) is None
    assert _missing_third_party_module(ImportError("cannot import name 'x'", name="agentgym_budget.eval")) is None
    assert _missing_third_party_module(raised(MissingBackendError("x"), ImportError(name="tools.y"))) is None
