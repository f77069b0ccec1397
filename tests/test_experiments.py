"""The sweep runner (agentgym_budget.experiments, ``agentgym-budget sweep``): a study file's runs listed,
run end to end, reused when their settings match and retrained when they do not; bad files refused."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from agentgym_budget.cli import main
from agentgym_budget.experiments import load_study, planned_runs
from agentgym_budget.train.config import TrainConfig, keydoor_smoke_config

ROOT = Path(__file__).resolve().parents[1]
BUDGETMIX = ROOT / "experiments" / "budgetmix" / "study.toml"

TINY = """
[study]
name = "tiny"
seeds = [0, 1]
[train]
env_id = "KeyDoor-v0"
env_kwargs = { split = "train" }
total_updates = 2
tasks_per_update = 2
group_size = 2
format_warmup_steps = 5
max_new_tokens = 12
torch_threads = 1
eval_every = 0
save_every = 0
progress_bar = false
tensorboard = false
[eval]
ts = [2, 4]
tasks = 2
attempts = 1
[arms."fixed:2"]
budget = "fixed:2"
[arms.mix]
budget = "mix:2,4"
[[compare]]
a = "mix"
b = "fixed:2"
"""


def test_the_budgetmix_study_file_is_the_documented_smoke_run_one_flag_apart():
    study = load_study(BUDGETMIX)
    assert list(study.arms)[:3] == ["fixed:2", "fixed:6", "mix"] and study.seeds == (0, 1, 2)
    for run in planned_runs(study, arms=["fixed:2", "fixed:6", "mix"]):
        from_file = dataclasses.asdict(TrainConfig(seed=run.seed, **run.overrides))
        smoke = dataclasses.asdict(keydoor_smoke_config(run.seed, total_updates=60, budget=study.arms[run.arm]["budget"]))
        assert from_file == smoke


def test_dry_run_lists_every_arm_and_seed_and_trains_nothing(tmp_path, capsys):
    assert main(["sweep", str(BUDGETMIX), "--dry-run", "--out", str(tmp_path / "out")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("  ")[0].strip() for line in lines] == [
        f"{arm} seed {s}" for arm in ("fixed:2", "fixed:6", "mix", "curriculum") for s in (0, 1, 2)]
    assert all(" train " in line for line in lines) and not (tmp_path / "out").exists()
    assert main(["sweep", str(BUDGETMIX), "--dry-run", "--arms", "mix", "--seeds", "1"]) == 0
    assert capsys.readouterr().out.startswith("mix seed 1 ")


@pytest.mark.parametrize(("text", "message"), [
    ("[study]\nname = 'x'\n[arms.a]\nbudget = 'fixed:2'\nbugdet = 1\n", "'bugdet' is not a TrainConfig field"),
    ("[study]\nname = 'x'\n[arms.a]\nbudget = 'sometimes'\n", "[arms.a]: "),
    ("[study]\nname = 'x'\nseed = [0]\n[arms.a]\n", "unknown [study] key 'seed'"),
    ("[study]\nname = 'x'\n", "at least one [arms.NAME]"),
    ("[study]\nname = 'x'\n[arms.a]\n[[compare]]\na = 'a'\nb = 'z'\n", "[[compare]] needs a and b"),
    ("[study\n", "not valid TOML"),
    ("[study]\nname = 'x'\n[arms.a]\n[eval]\nlevel = 3\n", "unknown [eval] key 'level'"),
    ("[study]\nname = 'x'\n[arms.a]\n[eval]\nks = [1, 4]\nattempts = 2\n", "attempts (2) must be at least the largest K (4)"),
    ("[study]\nname = 'x'\nbaselines = ['zero']\n[arms.a]\n", "baselines must be a list of ['base', 'sft']"),
    ("[study]\nname = 'x'\nbaselines = ['sft']\n[arms.a]\n", "no [sft] table"),
    ("[study]\nname = 'x'\n[sft]\nshared = false\n[arms.a]\n", "shared = false"),
    ("[study]\nname = 'x'\n[sft]\nstesp = 3\n[arms.a]\n", "'stesp' is not an SFTConfig field"),
    ("[study]\nname = 'x'\n[sft]\n[train]\nmodel = 'tiny'\n[arms.a]\n", "[train] model is the SFT start"),
])
def test_a_bad_study_file_is_refused_in_one_line(tmp_path, capsys, text, message):
    path = tmp_path / "study.toml"
    path.write_text(text)
    assert main(["sweep", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("agentgym-budget sweep: error: ")


def test_an_unknown_arm_and_an_overlapping_evaluation_are_refused(tmp_path, capsys):
    path = tmp_path / "study.toml"
    path.write_text(TINY)
    assert main(["sweep", str(path), "--dry-run", "--arms", "nope"]) == 2
    assert "unknown arm 'nope'" in capsys.readouterr().err
    path.write_text(TINY.replace('env_kwargs = { split = "train" }', "env_kwargs = {}"))
    assert main(["sweep", str(path), "--dry-run"]) == 2
    assert "overlap the training ones" in capsys.readouterr().err
    path.write_text(TINY.replace("[eval]\n", "[eval]\nenv_kwargs = { split = 'train' }\n"))
    assert main(["sweep", str(path), "--dry-run"]) == 2
    assert "split 'train' is not the held-out split 'test'" in capsys.readouterr().err


WITH_START = TINY.replace('name = "tiny"\nseeds = [0, 1]', 'name = "start"\nseeds = [0]\nbaselines = ["base", "sft"]').replace(
    "[train]\n", """[sft]
model = "tiny"
env_id = "KeyDoor-v0"
source = "expert"
episodes = 4
steps = 2
batch_size = 4
torch_threads = 1
[train]
""").replace("format_warmup_steps = 5\n", "").replace("[eval]\n", "[eval]\nks = [1, 2]\nprobes = 2\n").replace(
    "attempts = 1", "attempts = 2")


def test_a_study_with_an_sft_start_and_rows_before_rl_runs_them_once_and_pairs_behaviour(tmp_path, capsys):
    path, out = tmp_path / "study.toml", tmp_path / "runs"
    path.write_text(WITH_START)
    assert main(["sweep", str(path), "--out", str(out), "--dry-run"]) == 0
    plan = capsys.readouterr().out.splitlines()
    assert [line.split("  ")[0].strip() for line in plan] == [
        "sft start", "base (before RL)", "sft (before RL)", "fixed:2 seed 0", "mix seed 0"]
    assert main(["sweep", str(path), "--out", str(out)]) == 0
    capsys.readouterr()
    figures = json.loads((out / "study.json").read_text())
    assert (out / "sft" / "sft.json").is_file() and figures["sft"]["episodes"] == 4
    trained = json.loads((out / "mix" / "seed_0" / "config.json").read_text()) if (
        out / "mix" / "seed_0" / "config.json").exists() else None
    if trained is not None:
        assert trained["model"] == str(out / "sft")
    assert set(figures["baselines"]) == {"base", "sft"} and figures["baselines"]["base"]["model"] == "tiny"
    cell = figures["baselines"]["sft"]["pass_kt"]["K=2,T=4"]
    assert cell["ci_low"] <= cell["value"] <= cell["ci_high"]
    assert set(figures["pass_kt"]["mix"]) == {f"K={k},T={t}" for k in (1, 2) for t in (2, 4)}
    assert figures["paired_kt"]["mix − fixed:2"]["K=2,T=4"]["seeds"] == 1
    assert {"decision_quality.overall", "probes.agreement"} <= set(figures["behaviour"]["mix"])
    assert figures["behaviour"]["mix"]["probes.agreement"]["values"] == [
        figures["per_seed"]["mix"]["0"]["behaviour"]["probes.agreement"]]
    assert figures["behaviour_vs_sft"]["mix"]["decision_quality.overall"]["seeds"] == 1
    from agentgym_budget.eval import PassKTResult

    row = PassKTResult.load(out / "baselines" / "sft" / "held_out_eval")
    assert row.config["env_kwargs"]["split"] == "test" and row.ks == (1, 2) and row.attempts == 2
    assert (out / "baselines" / "sft" / "held_out_eval" / "probes.json").is_file()
    assert main(["sweep", str(path), "--out", str(out)]) == 0  # everything recorded: nothing runs again
    assert capsys.readouterr().out.count("(finished earlier: reused)") == 5


def test_an_interrupted_run_resumes_and_files_without_a_record_are_replaced(tmp_path, capsys):
    path, out = tmp_path / "study.toml", tmp_path / "runs"
    path.write_text(TINY)
    study = load_study(path)
    from agentgym_budget.experiments import run_settings

    started, stray = planned_runs(study)[0], planned_runs(study)[1]
    started.folder(out).mkdir(parents=True)
    (started.folder(out) / "run.json").write_text(json.dumps({"settings": run_settings(study, started)}))
    stray.folder(out).mkdir(parents=True)
    (stray.folder(out) / "leftover.txt").write_text("from a run nobody recorded")
    assert main(["sweep", str(path), "--out", str(out), "--dry-run"]) == 0
    plan = {line.split("  ")[0].strip(): line for line in capsys.readouterr().out.splitlines()}
    assert "resume (interrupted)" in plan["fixed:2 seed 0"] and "retrain (settings changed)" in plan["fixed:2 seed 1"]
    assert main(["sweep", str(path), "--out", str(out), "--arms", "fixed:2"]) == 0
    printed = capsys.readouterr().out
    assert "(resumed)" in printed and not (stray.folder(out) / "leftover.txt").exists()
    assert f"fixed:2 seed 1: removing {stray.folder(out)}" in printed


def test_a_tiny_study_runs_end_to_end_then_is_reused_and_a_changed_setting_retrained(tmp_path, capsys):
    path, out, results = tmp_path / "study.toml", tmp_path / "runs", tmp_path / "results.json"
    path.write_text(TINY)
    assert main(["sweep", str(path), "--out", str(out), "--workers", "2", "--results", str(results)]) == 0
    first = capsys.readouterr().out
    assert first.count("held-out Pass@(1,T)") == 4 and "reused" not in first
    figures = json.loads(results.read_text())
    assert figures["provenance"]["command"].startswith("python -m agentgym_budget.cli sweep ")
    assert {"commit", "dirty", "load_average", "load_average_end"} <= set(figures["provenance"])
    assert list(figures["per_seed"]) == ["fixed:2", "mix"] and list(figures["per_seed"]["mix"]) == ["0", "1"]
    assert list(figures["paired"]) == ["mix − fixed:2"] and list(figures["paired"]["mix − fixed:2"]) == ["2", "4"]
    assert figures["paired"]["mix − fixed:2"]["2"]["seeds"] == 2
    assert figures["arms"]["mix"]["budget"] == "mix:2,4" and figures["updates"] == 2

    from agentgym_budget.eval import PassKTResult

    held_out = PassKTResult.load(out / "mix" / "seed_1" / "held_out_eval")
    assert held_out.config["env_kwargs"]["split"] == "test" and held_out.n_tasks == 2 and held_out.ts == (2, 4)

    assert main(["sweep", str(path), "--out", str(out)]) == 0  # the same study again: nothing retrained
    assert capsys.readouterr().out.count("(finished earlier: reused)") == 4
    assert json.loads((out / "study.json").read_text())["per_seed"] == figures["per_seed"]

    path.write_text(TINY.replace('budget = "mix:2,4"', 'budget = "mix:2,3,4"'))  # one arm changed
    assert main(["sweep", str(path), "--out", str(out), "--dry-run"]) == 0
    plan = capsys.readouterr().out
    assert plan.count("retrain (settings changed)") == 2 and plan.count("reuse (finished)") == 2
    assert main(["sweep", str(path), "--out", str(out), "--arms", "mix", "--seeds", "0"]) == 0
    assert "(settings changed: retrained)" in capsys.readouterr().out
    record = json.loads((out / "mix" / "seed_0" / "run.json").read_text())
    assert record["settings"]["train"]["budget"] == "mix:2,3,4"


def test_set_changes_every_arm_and_its_runs_are_not_the_file_s(tmp_path, capsys):
    path, out = tmp_path / "study.toml", tmp_path / "runs"
    path.write_text(TINY)
    folder = out / "mix" / "seed_0"
    folder.mkdir(parents=True)
    study = load_study(path)
    from agentgym_budget.experiments import run_settings

    (folder / "run.json").write_text(json.dumps({"settings": run_settings(study, planned_runs(study)[2]), "run": {}}))
    (folder / "held_out_eval").mkdir()
    (folder / "held_out_eval" / "passkt.json").write_text("{}")
    assert main(["sweep", str(path), "--out", str(out), "--dry-run", "--arms", "mix", "--seeds", "0"]) == 0
    assert "reuse (finished)" in capsys.readouterr().out
    assert main(["sweep", str(path), "--out", str(out), "--dry-run", "--arms", "mix", "--seeds", "0",
                 "--set", "total_updates=3"]) == 0
    line = capsys.readouterr().out
    assert "retrain (settings changed)" in line and '"total_updates": 3' in line
    assert main(["sweep", str(path), "--dry-run", "--set", "bugdet=1"]) == 2
    assert "'bugdet' is not a TrainConfig field" in capsys.readouterr().err
