"""Test helper: an ``on_record`` callback that stops an evaluation like Ctrl-C after ``n`` episodes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def stop_after(n: int) -> Callable[[Any], None]:
    """``on_record`` for ``evaluate``: raises ``KeyboardInterrupt`` when the ``n``-th episode is recorded."""
    seen = []

    def on_record(record: Any) -> None:
        seen.append(record)
        if len(seen) == n:
            raise KeyboardInterrupt

    return on_record
