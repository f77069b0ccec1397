"""The FastAPI app serving one agentgym-budget env over OpenEnv (OpenEnv's ``create_app``).

The app is :func:`agentgym_budget.integrations.openenv_env.app_from_environ`: the budgeted env
(``BudgetEnvironment``, one per WebSocket session) under OpenEnv's ``create_app``, with the env id,
the budget and the session limits read from environment variables when this module is imported:

    AGENTGYM_ENV_ID             the registered env id (default KeyDoor-Budget-v0)
    AGENTGYM_BUDGET             the budget spec: 4, mix:2,3,4,6, curriculum:...; unset: the id's default
    AGENTGYM_MAX_SESSIONS       the most WebSocket sessions held at once (default 64)
    AGENTGYM_SESSION_TIMEOUT_S  close sessions idle this long (default: never; a dropped client's at once)
    AGENTGYM_ENV_KWARGS         a JSON object of env options, e.g. {"show_budget": true}

A setting the env refuses stops the server with a one-line message.  ``ENABLE_WEB_INTERFACE=true``
adds OpenEnv's web UI.

Usage (in this folder, as the Dockerfile runs it):
    uvicorn server.app:app --host 0.0.0.0 --port 8000
    python -m server.app --port 8000
"""

from __future__ import annotations

import argparse

try:
    from agentgym_budget.integrations.openenv_env import app_from_environ

    app = app_from_environ()
except (ImportError, ValueError) as error:  # openenv 0.10 missing, a setting refused: one line, no traceback
    raise SystemExit(f"agentgym_budget_env: {error}") from None


def main() -> None:
    """Serve the app with uvicorn (``--host``, ``--port``)."""
    import uvicorn

    parser = argparse.ArgumentParser(description="Serve an agentgym-budget env over OpenEnv")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    uvicorn.run(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
