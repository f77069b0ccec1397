"""The agentgym-budget command line (called in-process through ``main``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentgym_budget.cli import main

FAST = ["--env", "KeyDoor-Budget-v0", "--k", "1,2", "--t", "1,2,4", "--tasks", "6", "--bootstrap", "100", "--no-progress"]


def test_eval_writes_every_output_and_prints_the_table(tmp_path, capsys) -> None:
    assert main(["eval", *FAST, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Pass@(K,T)" in out and "noisy-expert" in out and "mode=shortcut" in out
    for name in ("passkt.json", "passkt.csv", "task_counts.csv", "episodes.jsonl", "passkt_heatmap.png",
                 "passkt_curves.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    data = json.loads((tmp_path / "passkt.json").read_text())
    assert data["attempts"] == 2 and data["ks"] == [1, 2] and data["tasks"] == 6  # attempts default: max K


def test_eval_workers_do_not_change_the_result(tmp_path) -> None:
    assert main(["eval", *FAST, "--out", str(tmp_path / "w1"), "--no-plots"]) == 0
    assert main(["eval", *FAST, "--out", str(tmp_path / "w2"), "--no-plots", "--workers", "2"]) == 0
    one, two = (json.loads((tmp_path / w / "passkt.json").read_text()) for w in ("w1", "w2"))
    assert one["successes"] == two["successes"] and one["pass"] == two["pass"]


def test_eval_options_reach_the_env_and_policy(tmp_path) -> None:
    args = ["eval", *FAST, "--out", str(tmp_path), "--no-plots", "--policy-arg", "p=0.25",
            "--env-arg", "show_budget=true"]
    assert main(args) == 0
    data = json.loads((tmp_path / "passkt.json").read_text())
    assert data["policy"] == "noisy-expert(p=0.25)" and data["mode"] == "per_t" and data["show_budget"] is True


def test_compare_draws_the_difference(tmp_path, capsys) -> None:
    assert main(["eval", *FAST, "--out", str(tmp_path / "a"), "--no-plots", "--policy", "random"]) == 0
    assert main(["eval", *FAST, "--out", str(tmp_path / "b"), "--no-plots", "--policy", "expert"]) == 0
    capsys.readouterr()
    png = tmp_path / "diff.png"
    assert main(["compare", str(tmp_path / "a" / "passkt.json"), str(tmp_path / "b"), "--out", str(png)]) == 0
    assert "expert minus random" in capsys.readouterr().out
    assert png.stat().st_size > 0


def test_list_names_envs_and_installation(capsys) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "ALFWorld-Budget-v0" in out and "KeyDoor-v0" in out and "installed" in out
    assert "SharedHousehold-v0" in out  # the multi-agent env, made by id through our registry


def test_list_prints_the_pip_extra_of_a_missing_backend(capsys, monkeypatch) -> None:
    from agentgym_budget.envs.registration import EnvFamily

    monkeypatch.setattr(EnvFamily, "installed", property(lambda self: self.extra is None))
    assert main(["list"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the console may wrap long lines
    assert "not installed: pip install 'agentgym-budget[webshop]'" in out  # not eaten as rich markup


def test_errors_are_reported_not_raised(tmp_path, capsys) -> None:
    assert main(["eval", *FAST, "--attempts", "1", "--out", str(tmp_path)]) == 2
    assert "K=2 needs at least 2 attempts" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "missing.json"), str(tmp_path / "missing.json")]) == 2
    with pytest.raises(SystemExit):
        main(["eval", "--k", "one"])


def test_importing_the_package_cli_and_eval_stays_light() -> None:
    code = ("import sys, agentgym_budget, agentgym_budget.cli, agentgym_budget.eval, agentgym_budget.policies; "
            "print(sorted(m for m in ('torch', 'transformers', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_eval_with_the_hf_policy_on_the_tiny_model_batched(tmp_path, capsys) -> None:
    pytest.importorskip("transformers")
    args = ["eval", "--env", "KeyDoor-Budget-v0", "--k", "1,2", "--t", "2", "--tasks", "3", "--no-progress",
            "--no-plots", "--policy", "hf", "--policy-arg", "model=tiny", "--policy-arg", "tiny_env=KeyDoor-v0",
            "--policy-arg", "max_new_tokens=4", "--batch-size", "4", "--out", str(tmp_path)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "hf(tiny)" in out and "concurrency=4" in out and "completion" in out
    result = json.loads((tmp_path / "passkt.json").read_text())
    assert result["config"]["concurrency"] == 4 and 0 < result["usage"]["completion_tokens"] <= 6 * 2 * 4
