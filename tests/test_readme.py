"""The README is a front door that stays true: short, its commands the CI's, its links resolving
(its example runs in tests/test_docs_blocks.py, with every other docs block); and the trainer's flag table in docs/ is the one ``TrainConfig`` generates."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_readme_is_a_front_door() -> None:
    assert len(README.splitlines()) <= 150
    for heading in ("## Quickstart", "## The data path", "## In Python", "## Environments",
                    "## Where to add a backend or a policy"):
        assert heading in README


def test_the_quickstart_commands_are_the_ones_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    commands = [line for line in README.splitlines() if line.startswith("python3 -m venv .venv")]
    assert len(commands) == 2
    for command in commands:
        ci_command = command.split(" && .venv/bin/python -m pytest")[0]  # CI adds its exit-code handling
        assert ci_command in ci, command


def test_every_relative_link_resolves() -> None:
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if "://" not in target:
                assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


@pytest.mark.parametrize("env_id, budget", [("ALFWorld-v0", 60), ("KeyDoor-v0", 20)])
def test_the_readme_budget_line_ends_at_any_budget(env_id: str, budget: int) -> None:
    """The README's ``TurnBudget(gym.make(...), budget=...)`` line, with a budget above the env's own step limit."""
    import gymnasium as gym

    import agentgym_budget  # noqa: F401  (registers the envs)
    from agentgym_budget.wrappers import TurnBudget

    [line] = re.findall(r'^env = TurnBudget\(gym\.make\("ALFWorld-v0"\), budget=(?:"[^"]*"|\d+),.*$', README, re.M)
    line = re.sub(r'budget=(?:"[^"]*"|\d+)', f"budget={budget}", line.replace('"ALFWorld-v0"', repr(env_id)))
    scope = {"gym": gym, "TurnBudget": TurnBudget}
    exec(line, scope)  # noqa: S102  (the README's own line)
    env = scope["env"]
    assert gym.spec(env_id).max_episode_steps < budget
    env.reset(seed=0)
    for turn in range(1, budget + 1):
        obs, _, terminated, truncated, info = env.step("look")
        assert (terminated, truncated, info["turns_left"]) == (False, turn == budget, budget - turn)
        assert obs.endswith(f"[Turns left: {budget - turn} of {budget}]")


def test_the_trainer_flag_table_is_generated_from_train_config() -> None:
    from agentgym_budget.train.config import flag_table

    table = flag_table()
    assert table in (ROOT / "docs" / "trainer.md").read_text(encoding="utf-8"), (
        "docs/trainer.md's flag table is out of step with TrainConfig; paste "
        "agentgym_budget.train.config.flag_table() in its place")
    assert "| `--budget` |" in table and table.count("\n| `--") >= 50
