"""Optional backends: import them lazily and say exactly which extra to install when missing."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["MissingBackendError", "is_installed", "require"]


class MissingBackendError(ImportError):
    """An optional backend is not installed; the message names the ``pip install`` to run."""

    reads_alone = True  # text.error_line quotes the message without the class name


def is_installed(module: str) -> bool:
    """Whether ``module`` imports (without keeping a failed import around)."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def require(module: str, extra: str, what: str | None = None) -> ModuleType:
    """Import ``module`` or raise :class:`MissingBackendError` naming ``agentgym-budget[extra]``."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        user = what or "this feature"
        raise MissingBackendError(
            f"{user} needs the optional package {module!r} ({e}). "
            f"Install it with: pip install 'agentgym-budget[{extra}]'"
        ) from e
