"""Every docstring example in the package and in ``tools/`` runs and prints what it says (``doctest``).

A module whose optional backend is not installed is skipped, naming the missing module.
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


def test_the_package_has_docstring_examples():
    assert "agentgym_budget.wrappers.budget" in MODULES and len(MODULES) >= 20


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    try:
        module = importlib.import_module(name)
    except (ImportError, MissingBackendError) as error:
        pytest.skip(f"{name} needs an optional backend: {error}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} docstring examples failed in {name}"
