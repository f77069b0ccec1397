"""``torch.compile`` with a fallback to eager, for every part of the package that compiles.

The trainer's kernels (:mod:`agentgym_budget.train.kernels`) and the chat backend's decode step
(:class:`~agentgym_budget.policies.hf.HFChatBackend` with ``compile=True``) go through
:func:`compiled`; torch is imported when it is called.

Example:
    >>> import torch
    >>> double = compiled(lambda x: 2 * x, enabled=False)  # disabled: the function itself
    >>> double(torch.ones(2)).tolist()
    [2.0, 2.0]
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

from agentgym_budget._optional import require

__all__ = ["compiled"]


def compiled(fn: Callable[..., Any], *, enabled: bool = True, **compile_kwargs: Any) -> Callable[..., Any]:
    """``torch.compile(fn)``, falling back to ``fn`` (with one warning) if compiling fails.

    ``torch.compile`` compiles lazily, so failures (no C++ compiler for inductor on CPU, no
    Triton on GPU, an unsupported Python) surface at the first call: the wrapper catches
    them there, warns once and runs eagerly from then on.
    """
    if not enabled:
        return fn
    torch = require("torch", "llm", "torch.compile")
    try:
        compiled_fn = torch.compile(fn, **compile_kwargs)
    except Exception as e:  # noqa: BLE001 — any failure to set up compilation means "run eagerly"
        warnings.warn(f"torch.compile unavailable for {_name(fn)} ({e!r}); running eagerly", stacklevel=2)
        return fn
    use_eager = False

    @functools.wraps(fn, updated=())
    def run(*args: Any, **kwargs: Any) -> Any:
        nonlocal use_eager
        if use_eager:
            return fn(*args, **kwargs)
        try:
            return compiled_fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 — compiler failures have many types; eager re-raises user errors
            use_eager = True
            warnings.warn(
                f"torch.compile failed for {_name(fn)} ({type(e).__name__}: {str(e)[:300]}); running eagerly",
                stacklevel=2,
            )
            return fn(*args, **kwargs)

    return run


def _name(fn: Callable[..., Any]) -> str:
    """A readable name of what is compiled (a function, or a module such as a model)."""
    return getattr(fn, "__name__", type(fn).__name__)
