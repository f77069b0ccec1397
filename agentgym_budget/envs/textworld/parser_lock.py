"""The one lock on TextWorld's parsers, shared by every engine of the package that runs TextWorld code.

TextWorld's parsers (``textworld.logic._PARSER`` and the PDDL ones) are module-level TatSu
parser objects with state (a rule stack), shared by every TextWorld engine in the process: two
threads parsing at once corrupt it (IndexError inside TatSu, seen with 4 concurrent verifiers
rollouts on ALFWorld's real engine).  So the code that parses takes :data:`TEXTWORLD_LOCK`:

* ALFWorld's real engine (:mod:`agentgym_budget.envs.alfworld.textworld_engine`): every load,
  reset and step (``PddlEnv`` parses on every step);
* the ``TextWorld-*`` envs (:mod:`agentgym_budget.envs.textworld.env`): loading a game
  (``textworld.start`` parses the game's logic) and generating one; their steps parse nothing
  (Jericho plays the compiled game), so they run without it.

Engines in one process therefore take turns on the parsers; that code is pure Python under the
GIL, so this costs no parallelism.  It is re-entrant, so a locked function may call another.

Example:
    >>> with TEXTWORLD_LOCK:
    ...     with TEXTWORLD_LOCK:  # re-entrant
    ...         pass
"""

from __future__ import annotations

import threading

__all__ = ["TEXTWORLD_LOCK"]

TEXTWORLD_LOCK = threading.RLock()
