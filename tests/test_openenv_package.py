"""The OpenEnv environment package (examples/agentgym_budget_env/, OpenEnv 0.10's template layout):
``openenv validate`` passes on it, its server runs as its Dockerfile runs it (``uvicorn server.app:app``
in the package folder, settings in ``AGENTGYM_*`` variables), and a client written as OpenEnv's docs
show plays budgeted KeyDoor episodes against it on 127.0.0.1.  (The Docker image is not built here.)
"""

from __future__ import annotations

import os
import runpy
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("agentgym_budget.integrations.openenv_env", reason="needs openenv 0.10 (the openenv extra)",
                    exc_type=ImportError)

from agentgym_budget.integrations.openenv_env import free_port  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PACKAGE = EXAMPLES / "agentgym_budget_env"
REPO = EXAMPLES.parent


def openenv_cli(*args: str) -> tuple[int, str]:
    """``openenv <args>`` run by OpenEnv's own CLI app, in this process (its import is seconds: gradio)."""
    from openenv.cli.__main__ import app
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def server_environ(**settings: str) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AGENTGYM_")}
    # the checkout's agentgym_budget, as an installed one would be found
    environ["PYTHONPATH"] = os.pathsep.join([str(REPO), environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**environ, **settings}


def test_openenv_validate_static_passes_on_the_package() -> None:
    # the installed command, as a user runs it
    openenv = shutil.which("openenv", path=str(Path(sys.executable).parent)) or pytest.fail("no openenv command")
    report = subprocess.run([openenv, "validate", str(PACKAGE), "--level", "static", "--skip-build"],
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stdout + report.stderr
    assert "PASS  static.manifest" in report.stdout and "Verdict: PASS" in report.stdout


def test_openenv_validate_fails_a_manifest_out_of_policy(tmp_path) -> None:
    # the check has teeth: a floor margin below OpenEnv's policy minimum fails it
    broken = shutil.copytree(PACKAGE, tmp_path / "agentgym_budget_env")
    manifest = broken / "openenv.yaml"
    manifest.write_text(manifest.read_text().replace("floor_margin: 0.1", "floor_margin: 0.0"))
    code, output = openenv_cli("validate", str(broken), "--level", "static", "--skip-build")
    assert code == 1 and "floor_margin 0.0 is below the policy minimum" in output


@pytest.fixture(scope="module")
def server_url():
    """The package's server, started as its Dockerfile starts it (a fresh process, settings in the environment)."""
    port = free_port()
    settings = {"AGENTGYM_ENV_ID": "KeyDoor-Budget-v0", "AGENTGYM_BUDGET": "mix:2,3,4",
                "AGENTGYM_MAX_SESSIONS": "4", "AGENTGYM_ENV_KWARGS": '{"show_budget": true}'}
    server = subprocess.Popen([sys.executable, "-m", "uvicorn", "server.app:app", "--host", "127.0.0.1", "--port",
                               str(port), "--log-level", "warning"], cwd=PACKAGE, env=server_environ(**settings),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                pytest.fail(f"the package's server did not start: {server.communicate()[0][-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_openenv_validate_url_passes_on_the_running_server(server_url) -> None:
    code, output = openenv_cli("validate", "--url", server_url)
    assert code == 0, output
    for check in ("health_endpoint", "metadata_endpoint", "schema_endpoint", "mode_endpoint_consistency"):
        assert f"PASS  {check}" in output
    assert "Verdict: PASS" in output


def test_a_client_as_openenv_docs_show_plays_budgeted_keydoor_episodes(server_url, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    from agentgym_budget_env import BudgetEnv, TextAction

    with BudgetEnv(base_url=server_url).sync() as client:
        # the budget runs out: truncated, not terminated; turns left count down in the observation
        result = client.reset(seed=0, budget=2)
        obs = result.observation
        assert (result.done, obs.budget, obs.turns_left, obs.turn) == (False, 2, 2, 0)
        assert obs.text.endswith("[Turns left: 2 of 2]")  # AGENTGYM_ENV_KWARGS reached the env
        turns_left = []
        while not result.done:
            result = client.step(TextAction(command="look"))
            turns_left.append(result.observation.turns_left)
        obs = result.observation
        assert turns_left == [1, 0]
        assert (obs.terminated, obs.truncated, obs.won, result.reward) == (False, True, False, 0.0)
        state = client.state()
        assert (state.env_id, state.budget, state.turns_left, state.step_count) == ("KeyDoor-Budget-v0", 2, 0, 2)

        # the env ends it: a win inside the budget is terminated, not truncated
        result = client.reset(seed=0, budget=3, task="red-blue")
        for command in ("take key", "open red door"):
            result = client.step(TextAction(command=command))
        obs = result.observation
        assert (result.done, obs.terminated, obs.truncated, obs.won, result.reward) == (True, True, False, True, 1.0)
        assert (obs.budget, obs.turns_left) == (3, 1)

        # unforced, the budget is drawn from the server's AGENTGYM_BUDGET mix
        assert {client.reset(seed=s).observation.budget for s in range(12)} == {2, 3, 4}


def test_a_refused_setting_stops_the_server_with_one_line(monkeypatch) -> None:
    monkeypatch.setenv("AGENTGYM_BUDGET", "mix:0,2")
    with pytest.raises(SystemExit) as stopped:  # what `uvicorn server.app:app` meets importing the app
        runpy.run_path(str(PACKAGE / "server" / "app.py"))
    message = stopped.value.code  # printed to stderr as is, exit status 1
    assert isinstance(message, str) and "\n" not in message
    assert message.startswith("agentgym_budget_env: cannot serve 'KeyDoor-Budget-v0': ")


@pytest.mark.parametrize("env_id", ["ALFWorld-Budget-v0", "TextWorld-Budget-v0", "WebShop-Budget-v0",
                                    "ScienceWorld-Budget-v0", "KeyDoorRooms-Budget-v0"])
def test_the_package_serves_each_env_family_under_its_budget(env_id) -> None:
    from fastapi.testclient import TestClient

    from agentgym_budget.integrations.openenv_env import app_from_environ

    try:
        app = app_from_environ({"AGENTGYM_ENV_ID": env_id, "AGENTGYM_MAX_SESSIONS": "1"})
    except ValueError as error:  # the env's backend (an extra) is not installed here
        if "Install it with: pip install 'agentgym-budget[" not in str(error):
            raise
        pytest.skip(str(error))
    with TestClient(app).websocket_connect("/ws") as ws:
        ws.send_json({"type": "reset", "data": {"seed": 0, "budget": 2}})
        obs = ws.receive_json()["data"]["observation"]
        assert (obs["budget"], obs["turns_left"], obs["terminated"], obs["truncated"]) == (2, 2, False, False)
        for turns_left in (1, 0):
            ws.send_json({"type": "step", "data": {"command": obs["admissible_commands"][0]}})
            answer = ws.receive_json()["data"]
            obs = answer["observation"]
            if answer["done"]:
                break
            assert obs["turns_left"] == turns_left
        assert answer["done"] and (obs["terminated"] or obs["truncated"]) and obs["terminated"] != obs["truncated"]
        state = (ws.send_json({"type": "state"}), ws.receive_json())[1]["data"]
        assert (state["env_id"], state["budget"]) == (env_id, 2)
