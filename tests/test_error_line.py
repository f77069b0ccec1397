"""One format for an error quoted in a message (``text.error_line``): one printable line, whoever quotes it.

The CLI, the served backend, the OpenEnv server and the adapters' session all quote an error
through it; an error whose text spans lines or carries terminal escapes stays one clean line.
"""

from __future__ import annotations

import gymnasium as gym
import pytest

import agentgym_budget  # noqa: F401 - registers the envs
from agentgym_budget.integrations.session import BudgetSession
from agentgym_budget.text import error_line

UGLY = "backend\nlost\x1b[2J at\tturn 2\r\n"


@pytest.mark.parametrize("error, line", [
    (ConnectionError(UGLY), "ConnectionError: backend lost at turn 2"),
    (KeyError("task"), "KeyError: 'task'"),
    (RuntimeError(), "RuntimeError"),
    (ValueError(UGLY), "backend lost at turn 2"),  # the package's refusal of bad input: its sentence alone
    (ValueError(), "ValueError"),
])
def test_an_error_is_one_printable_line(error, line):
    assert error_line(error) == line


def test_errors_written_to_be_shown_are_their_message_and_a_limit_cuts_the_line():
    from agentgym_budget._optional import MissingBackendError
    from agentgym_budget.integrations.session import EnvTimeout
    from agentgym_budget.policies.served import ServedModelError

    assert error_line(MissingBackendError("install the extra")) == "install the extra"
    assert error_line(ServedModelError("cannot reach the server")) == "cannot reach the server"
    assert error_line(EnvTimeout("no answer in 2 s")) == "EnvTimeout: no answer in 2 s"  # a fault: its type said
    assert error_line(OSError("x" * 500), limit=40) == "OSError: " + "x" * 30 + "…"


class _RaisesOnStep(gym.Wrapper):
    def step(self, action):
        raise ConnectionError(UGLY)


def test_the_session_records_and_warns_a_fault_in_one_line():
    session = BudgetSession("KeyDoor-Budget-v0", budget=3, wrappers=[_RaisesOnStep])
    session.reset(seed=0)
    with pytest.warns(RuntimeWarning) as warned:
        session.step("take key")
    assert session.failed and session.error == "ConnectionError: backend lost at turn 2 (at step 1)"
    assert all("\n" not in str(w.message) and "\x1b" not in str(w.message) for w in warned)


def test_the_cli_quotes_an_env_that_cannot_be_built_in_one_line(tmp_path, capsys):
    from agentgym_budget.cli import main

    # KeyDoor refuses an unknown split; the CLI quotes the env's error in one line, with nothing written
    code = main(["eval", "--env", "KeyDoor-Budget-v0", "--policy", "random", "--t", "2", "--k", "1", "--tasks", "1",
                 "--no-progress", "--no-plots", "--env-arg", "split=nope", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err and "the env cannot be" in err, err
    assert not (tmp_path / "out").exists()


def test_a_served_model_error_quotes_the_transport_error_in_one_line():
    from agentgym_budget.policies.served import OpenAIChatBackend

    backend = OpenAIChatBackend("m", base_url="http://127.0.0.1:9/v1", api_key="x", timeout=1.0, max_retries=0)
    error = backend._error(ConnectionError(UGLY), 0)  # what a request that failed this way raises
    assert "\n" not in str(error) and "ConnectionError: backend lost at turn 2" in str(error)
