"""OpenEnv (``openenv`` 0.10): serve any budgeted text env over OpenEnv's HTTP/WebSocket server.

* :class:`BudgetEnvironment` — an ``openenv.core.env_server.Environment`` over a
  :class:`~agentgym_budget.integrations.session.BudgetSession` (any registered id, any budget
  spec).  ``reset(seed=, budget=)`` (``budget`` forces the episode's budget), ``step(TextAction)``,
  ``state`` (episode id, steps, budget, turns left).
* :class:`TextAction` / :class:`TextObservation` / :class:`BudgetState` — the wire types.  The
  observation carries ``text`` (the env's own), ``message`` (the user message an LLM reads, as
  the evaluator and the trainer render it), ``admissible_commands``, ``budget``, ``turn``, ``turns_left``,
  ``won``, and — since OpenEnv's ``done`` is a single flag — ``terminated`` and ``truncated``
  (``done == terminated or truncated``); ``reward`` is the env's step reward.
* :func:`make_openenv_app` — the FastAPI app (``openenv.core.env_server.create_app``; with
  ``ENABLE_WEB_INTERFACE=true`` OpenEnv adds its web UI): one env per WebSocket session, closed
  when the session ends — by the client's ``close``, or when it disconnects (OpenEnv's server
  destroys the session on ``WebSocketDisconnect``); at most ``max_concurrent_envs`` at once.
* :func:`app_from_environ` — the same app with its settings read from ``AGENTGYM_*`` environment
  variables (:data:`SETTINGS`): what the OpenEnv environment package in
  ``examples/agentgym_budget_env/`` serves.
* :class:`BudgetEnvClient` — OpenEnv's ``EnvClient`` for these types (``.sync()`` for sync code).
* :func:`serve` — run the app with uvicorn on ``127.0.0.1`` in a background thread (a context manager).

OpenEnv's stateless HTTP ``/reset`` and ``/step`` build a fresh env per request, so episodes
need the WebSocket session (what ``EnvClient`` uses).

Errors, over HTTP and the WebSocket alike, are one-line messages: a reset argument the env
refuses (a budget that is no positive integer, an unknown task) is :class:`InvalidRequest`
(HTTP 400); a step before ``reset`` or after the episode ended is
:class:`~agentgym_budget.integrations.session.EpisodeOver` (HTTP 409; over HTTP every ``/step``
meets a fresh env, so the message points to the WebSocket session).  A malformed WebSocket
message (not JSON, not a JSON object, a binary frame, an unknown type, an action without
``command``) gets a one-line error answer and the session plays on (:class:`JsonObjectMessages`).  ``GET /state`` serves :class:`BudgetState` (OpenEnv's ``state_cls``),
budget fields included.  **Fault policy:** an env that raises in ``reset`` or ``step`` costs at most its episode,
never the session: the session's fault policy (:mod:`~agentgym_budget.integrations.session`)
replays the episode once in a fresh env (a one-off fault costs nothing; the observation's
``env_failures`` counts it); if that fails too, the episode is lost and reported as
:class:`EnvFault` (HTTP 500 with the message, an error answer over the WebSocket); the raising
env is closed and the client's next ``reset`` plays on in a fresh one.

Example:
    >>> from agentgym_budget.integrations.openenv_env import BudgetEnvClient, TextAction, serve
    >>> with serve("KeyDoor-Budget-v0", budget="mix:2,3") as url:
    ...     with BudgetEnvClient(base_url=url).sync() as client:
    ...         result = client.reset(seed=0, budget=2)
    ...         result = client.step(TextAction(command="look"))
    ...         result = client.step(TextAction(command="look"))
    >>> result.done, result.observation.truncated, result.observation.terminated, result.observation.budget
    (True, True, False, 2)
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from agentgym_budget._optional import MissingBackendError, require
from agentgym_budget.integrations.session import ARGUMENT_ERRORS, BudgetSession, EpisodeOver, Wrapper, format_turn
from agentgym_budget.text import error_line
from agentgym_budget.wrappers.budget_spec import BudgetSpec

if TYPE_CHECKING:
    from fastapi import FastAPI

_WHAT = "the OpenEnv adapter"
#: the OpenEnv releases this adapter is written against (``create_app(state_cls=...)`` is 0.10's)
OPENENV_REQUIREMENT = "openenv>=0.10,<0.11"


def _require_openenv() -> str:
    """The installed ``openenv`` version, or :class:`MissingBackendError` naming the extra (``openenv-core`` 0.3,
    the package's old name, has the module but not the API)."""
    require("openenv.core", "openenv", _WHAT)
    from packaging.requirements import Requirement  # an openenv dependency

    version, old = _installed("openenv"), _installed("openenv-core")
    if not version or version not in Requirement(OPENENV_REQUIREMENT).specifier:
        found = f"openenv {version}" if version else f"openenv-core {old}" if old else "of no known distribution"
        # both ship the module openenv/: the old one goes first
        fix = ("pip uninstall openenv-core && " if old else "") + "pip install 'agentgym-budget[openenv]'"
        # as for a backend not installed at all (the cause names the module): the release it needs is missing
        raise MissingBackendError(f"{_WHAT} needs {OPENENV_REQUIREMENT}; the module 'openenv' here is {found}. "
                                  f"Install it with: {fix}") from ModuleNotFoundError(
            f"no {OPENENV_REQUIREMENT} installed", name="openenv")
    return version


def _installed(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return ""


OPENENV_VERSION = _require_openenv()

from openenv.core import EnvClient  # noqa: E402
from openenv.core.client_types import StepResult  # noqa: E402
from openenv.core.env_server import Action, Environment, Observation, State, create_app  # noqa: E402
from openenv.core.env_server.types import ConcurrencyConfig, EnvironmentMetadata, WSErrorCode, WSErrorResponse  # noqa: E402
from pydantic import Field  # noqa: E402

__all__ = [
    "OPENENV_REQUIREMENT", "OPENENV_VERSION", "SETTINGS", "BudgetEnvClient", "BudgetEnvironment", "BudgetState",
    "EnvFault", "InvalidRequest", "TextAction", "TextObservation", "app_from_environ", "make_openenv_app",
    "serve", "settings_from_environ",
]


class InvalidRequest(ValueError):
    """A reset argument the env refuses (HTTP 400): the request, not the server, is at fault."""


class EnvFault(RuntimeError):
    """The env raised while playing; the episode is lost, the session's env replaced by a fresh one (HTTP 500)."""


class TextAction(Action):
    """One text command (``"go to fridge 1"``)."""

    command: str = Field(..., description="the command to play this turn")


class TextObservation(Observation):
    """What the agent sees after ``reset``/``step``; ``done`` is ``terminated or truncated``."""

    text: str = Field(default="", description="the env's text observation (with the budget when shown)")
    message: str = Field(default="", description="the user message for an LLM, as the project's one renderer writes "
                                                 "it for the evaluator and the trainer (policies.prompting.turn_message)")
    task: str = Field(default="", description="the goal")
    admissible_commands: list[str] = Field(default_factory=list)
    budget: int = Field(default=0, description="this episode's turn budget")
    turn: int = Field(default=0, description="turns taken")
    turns_left: int = Field(default=0)
    won: bool = False
    terminated: bool = Field(default=False, description="the env ended the episode (won or lost)")
    truncated: bool = Field(default=False, description="the turn budget ended the episode")
    info: dict[str, Any] = Field(default_factory=dict, description="the JSON-safe public info")
    env_failures: int = Field(default=0, description="times the env raised this episode (replayed in a fresh env)")


class BudgetState(State):
    """``episode_id``, ``step_count`` plus the budget's view."""

    env_id: str = ""
    budget: int = 0
    turns_left: int = 0


class BudgetEnvironment(Environment[TextAction, TextObservation, BudgetState]):
    """An OpenEnv ``Environment`` over one budgeted text env (one instance per session).

    Args:
        env_id, budget, wrappers, env_kwargs: as :class:`~agentgym_budget.integrations.session.BudgetSession`.
    """

    #: every instance owns its own env and RNGs, so sessions are isolated.
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, env_id: str, budget: BudgetSpec | None = None, *, wrappers: Iterable[Wrapper] = (),
                 **env_kwargs: Any) -> None:
        super().__init__()
        self.session = BudgetSession(env_id, budget, wrappers=wrappers, **env_kwargs)
        self._episode_id: str | None = None

    def reset(self, seed: int | None = None, episode_id: str | None = None, budget: int | None = None,
              progress: float | None = None, **kwargs: Any) -> TextObservation:
        """New episode; ``budget=T`` forces its budget, ``progress`` sets the curriculum's, other
        kwargs go to the env as ``options``."""
        budget, progress = _checked_budget(budget), _checked_progress(progress)
        try:
            self.session.reset(seed=seed, budget=budget, options=kwargs or None, progress=progress)
        except ARGUMENT_ERRORS as error:  # the env refuses an option (an unknown task, ...)
            raise InvalidRequest(f"reset refused: {error_line(error, 300)}") from None
        self._episode_id = episode_id or uuid.uuid4().hex
        return self._checked_observation()

    def step(self, action: TextAction, timeout_s: float | None = None, **kwargs: Any) -> TextObservation:
        self.session.step(action.command)
        return self._checked_observation()

    def _checked_observation(self) -> TextObservation:
        """The observation, or :class:`EnvFault` if the env failed the episode (OpenEnv's error answer)."""
        if self.session.failed:
            raise EnvFault(f"the env failed: {self.session.error}, and again in a fresh env; this episode is lost, "
                           f"the session has a fresh env: reset to play on")
        return self._observation()

    @property
    def state(self) -> BudgetState:
        return BudgetState(episode_id=self._episode_id, step_count=self.session.turn, env_id=self.session.env_id,
                           budget=self.session.budget, turns_left=self.session.turns_left)

    def close(self) -> None:
        self.session.close()

    def get_metadata(self) -> EnvironmentMetadata:
        """What OpenEnv's ``GET /metadata`` serves: the env id and how episodes end."""
        return EnvironmentMetadata(
            name=self.session.env_id, version="0.1.0", author="agentgym-budget",
            description=f"{self.session.env_id} under a turn budget: text commands in, text out; the observation "
                        f"carries budget, turns_left, terminated (the env ended it) and truncated (the budget did)")

    def _observation(self) -> TextObservation:
        s = self.session
        return TextObservation(
            text=s.observation, message=format_turn(s), task=str(s.info.get("task", "")), admissible_commands=s.admissible_commands,
            budget=s.budget, turn=s.turn, turns_left=s.turns_left, won=s.won, terminated=s.terminated,
            truncated=s.truncated, done=s.done, reward=s.reward, info=s.public_info(), env_failures=s.env_failures,
        )


def make_openenv_app(env_id: str, budget: BudgetSpec | None = None, *, max_concurrent_envs: int = 8,
                     session_timeout: float | None = None, wrappers: Iterable[Wrapper] = (),
                     **env_kwargs: Any) -> FastAPI:
    """OpenEnv's FastAPI app (``create_app``) serving ``env_id`` under ``budget`` (one env per WebSocket session).

    ``max_concurrent_envs`` caps the sessions held at once (one more is refused with OpenEnv's
    ``CAPACITY_REACHED`` error); ``session_timeout`` (seconds): OpenEnv's reaper closes sessions idle
    that long (``None``: never; a disconnected client's session is closed at once either way).  One env
    is made and closed here, so a setting the env refuses (an unknown id, a bad budget spec) is a
    one-line ``ValueError`` now, not an error in every session.
    """
    factory = functools.partial(BudgetEnvironment, env_id, budget, wrappers=tuple(wrappers), **env_kwargs)
    _check_factory(env_id, factory)
    config = ConcurrencyConfig(max_concurrent_envs=max_concurrent_envs, session_timeout=session_timeout)
    app = create_app(factory, TextAction, TextObservation, env_name=env_id, concurrency_config=config,
                     state_cls=BudgetState)
    for error, status in ((InvalidRequest, 400), (EpisodeOver, 409), (EnvFault, 500)):
        app.add_exception_handler(error, _json_error(status))
    app.add_middleware(JsonObjectMessages)
    return app


class JsonObjectMessages:
    """ASGI middleware: a WebSocket message that is not a JSON object (an array, a number, a binary frame)
    gets OpenEnv's one-line error answer (``INVALID_JSON``) here and the session plays on.

    Why: OpenEnv 0.10's ``/ws`` loop reads ``message.get("type")`` and ``receive_text()`` outside its
    per-message error handling, so such a message ends the session (``'list' object has no attribute
    'get'``).  Malformed JSON and bad actions OpenEnv answers itself, keeping the session.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            return await self.app(scope, receive, send)

        async def checked_receive() -> dict[str, Any]:
            while True:
                message = await receive()
                problem = _not_a_json_object(message)
                if problem is None:
                    return message
                answer = WSErrorResponse(data={"message": problem, "code": WSErrorCode.INVALID_JSON})
                await send({"type": "websocket.send", "text": answer.model_dump_json()})

        return await self.app(scope, checked_receive, send)


def _not_a_json_object(message: dict[str, Any]) -> str | None:
    """Why a received WebSocket ``message`` is no JSON object, or ``None`` (not JSON at all is OpenEnv's to answer)."""
    if message["type"] != "websocket.receive":
        return None
    if message.get("text") is None:
        return "a message must be text: a JSON object with a 'type' (reset, step, state, close)"
    try:
        value = json.loads(message["text"])
    except json.JSONDecodeError:
        return None
    if isinstance(value, dict):
        return None
    return f"a message must be a JSON object with a 'type' (reset, step, state, close), got a JSON {type(value).__name__}"


def _check_factory(env_id: str, factory: Any) -> None:
    try:
        factory().close()
    except Exception as error:  # whatever the env's constructor refuses, said in one line
        raise ValueError(f"cannot serve {env_id!r}: {error_line(error, 300)}") from None


#: The settings :func:`app_from_environ` reads: environment variable -> (what it sets, default).
SETTINGS: dict[str, tuple[str, str | None]] = {
    "AGENTGYM_ENV_ID": ("the registered env id to serve", "KeyDoor-Budget-v0"),
    "AGENTGYM_BUDGET": ("the budget spec (4, mix:2,3,4,6, curriculum:...); unset: the id's default", None),
    "AGENTGYM_MAX_SESSIONS": ("the most WebSocket sessions held at once", "64"),
    "AGENTGYM_SESSION_TIMEOUT_S": ("close sessions idle this many seconds; unset: never", None),
    "AGENTGYM_ENV_KWARGS": ('a JSON object of env options, e.g. {"show_budget": true}', "{}"),
}


def settings_from_environ(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """:func:`make_openenv_app`'s arguments from :data:`SETTINGS` (``environ``: ``os.environ``).

    Example:
        >>> settings_from_environ({"AGENTGYM_BUDGET": "mix:2,3", "AGENTGYM_ENV_KWARGS": '{"show_budget": true}'})
        {'env_id': 'KeyDoor-Budget-v0', 'budget': 'mix:2,3', 'max_concurrent_envs': 64, 'session_timeout': None, 'show_budget': True}
        >>> settings_from_environ({"AGENTGYM_MAX_SESSIONS": "lots"})
        Traceback (most recent call last):
        ...
        ValueError: AGENTGYM_MAX_SESSIONS must be a positive integer, got 'lots'
    """
    environ = os.environ if environ is None else environ
    value = {name: environ.get(name, default) for name, (_, default) in SETTINGS.items()}
    budget = value["AGENTGYM_BUDGET"] or None  # set but empty: unset
    timeout = value["AGENTGYM_SESSION_TIMEOUT_S"] or None
    return {
        "env_id": value["AGENTGYM_ENV_ID"],
        "budget": int(budget) if budget is not None and budget.isdigit() else budget,
        "max_concurrent_envs": _positive(value["AGENTGYM_MAX_SESSIONS"] or "", "AGENTGYM_MAX_SESSIONS", int),
        "session_timeout": None if timeout is None else _positive(timeout, "AGENTGYM_SESSION_TIMEOUT_S", float),
        **_json_object(value["AGENTGYM_ENV_KWARGS"] or "{}", "AGENTGYM_ENV_KWARGS"),
    }


def app_from_environ(environ: Mapping[str, str] | None = None) -> FastAPI:
    """:func:`make_openenv_app` with :func:`settings_from_environ`'s settings (one-line ``ValueError`` if refused)."""
    return make_openenv_app(**settings_from_environ(environ))


def _positive(text: str, name: str, kind: type[int] | type[float]) -> Any:
    try:
        number = kind(text)
    except ValueError:
        number = 0
    if not number > 0:
        raise ValueError(f"{name} must be a positive {'integer' if kind is int else 'number'}, got {text!r}")
    return number


def _json_object(text: str, name: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{name} must be a JSON object: {error}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a JSON object, got {text!r}")
    taken = sorted(set(value) & {"env_id", "budget", "max_concurrent_envs", "session_timeout", "wrappers"})
    if taken:
        raise ValueError(f"{name} sets {', '.join(taken)}: use its own AGENTGYM_* setting")
    return value


def _json_error(status: int) -> Any:
    """An exception handler answering ``status`` with ``{"detail": <the one-line message>}``."""
    from fastapi.responses import JSONResponse

    async def handler(request: Any, error: Exception) -> JSONResponse:
        detail = str(error)
        if isinstance(error, EpisodeOver):
            detail += " (each HTTP /step meets a fresh env: play episodes over the WebSocket session, e.g. EnvClient)"
        return JSONResponse(status_code=status, content={"detail": detail})

    return handler


def _checked_budget(budget: Any) -> int | None:
    if budget is None:
        return None
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise InvalidRequest(f"budget must be a positive integer, got {budget!r}")
    return budget


def _checked_progress(progress: Any) -> float | None:
    if progress is None:
        return None
    if isinstance(progress, bool) or not isinstance(progress, (int, float)) or not progress >= 0:
        raise InvalidRequest(f"progress must be a number >= 0, got {progress!r}")
    return float(progress)


class BudgetEnvClient(EnvClient[TextAction, TextObservation, BudgetState]):
    """OpenEnv's WebSocket client for :func:`make_openenv_app` servers (async; ``.sync()`` for sync use)."""

    def _step_payload(self, action: TextAction) -> dict[str, Any]:
        return {"command": action.command}

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[TextObservation]:
        observation = TextObservation(**payload.get("observation", {}), reward=payload.get("reward"),
                                      done=payload.get("done", False))
        return StepResult(observation=observation, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: dict[str, Any]) -> BudgetState:
        return BudgetState(**payload)


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve(env_id: str, budget: BudgetSpec | None = None, *, port: int | None = None, startup_timeout: float = 30.0,
          **app_kwargs: Any) -> Iterator[str]:
    """Serve :func:`make_openenv_app` on ``127.0.0.1`` in a thread; yields its ``http://`` URL, stops on exit."""
    uvicorn = require("uvicorn", "openenv", _WHAT)
    app = make_openenv_app(env_id, budget, **app_kwargs)
    config = uvicorn.Config(app, host="127.0.0.1", port=port or free_port(), log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"openenv-{env_id}", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the OpenEnv server for {env_id!r} did not start on 127.0.0.1:{config.port}")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)

