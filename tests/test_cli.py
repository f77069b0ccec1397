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
    words = " ".join(out.split())  # the console wraps its lines
    assert "frontier, sequential" in words and "tokens: not recorded (the policy reports none)" in words
    for name in ("passkt.json", "passkt.csv", "task_counts.csv", "frontier.csv", "episodes.jsonl",
                 "passkt_heatmap.png", "passkt_curves.png", "frontier.png"):
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


BASE = ["eval", "--env", "KeyDoor-Budget-v0", "--k", "1", "--t", "2", "--tasks", "2", "--bootstrap", "10",
        "--no-progress", "--no-plots"]


def _run_cli(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's usage errors
        code = e.code
    err = capsys.readouterr().err
    return code, err


@pytest.mark.parametrize(
    ("extra", "names"),
    [
        (["--env", "Nope-v0"], ["'Nope-v0'", "KeyDoor-Budget-v0"]),
        (["--env", "CartPole-v1"], ["CartPole-v1", "not a text env"]),
        (["--policy-arg", "q=1"], ["'q'", "its options: p"]),
        (["--policy", "nope"], ["'nope'", "noisy-expert"]),
        (["--env-arg", "bogus=1"], ["bogus", "cannot be built"]),
        (["--env-arg", "=1"], ["'=1'", "KEY=VALUE"]),
        (["--k", "0"], ["got 0", ">= 1"]),
        (["--k", "١"], ["'١'", "integers >= 1"]),
        (["--t", "2,x"], ["'2,x'", "integers >= 1"]),
        (["--bootstrap", "-1"], ["-1", "0..1,000,000"]),
        (["--bootstrap", "100000000"], ["100000000", "0..1,000,000"]),
        (["--tasks", "100000000"], ["100000000", "1..1,000,000"]),
        (["--tasks", "900000", "--attempts", "8"], ["7,200,000 episodes", "1,000,000"]),
        (["--t", "100000000"], ["T=100000000", "1000000"]),
        (["--workers", "100000"], ["100000", "1..256"]),
        (["--seed", "-1"], ["-1", "0.."]),
        (["--tasks", "9" * 5000], ["5000 characters", "1..1,000,000"]),
        (["--resume", "--overwrite"], ["--resume and --overwrite"]),
    ],
)
def test_every_eval_mistake_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, extra, names):
    out = tmp_path / "out"
    code, err = _run_cli([*BASE, "--out", str(out), *extra], capsys)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for name in names:
        assert name in err, (name, err)
    assert not out.exists()  # nothing written, not even the folder


def test_bad_out_folders_are_one_line_errors(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    code, err = _run_cli([*BASE, "--out", str(afile)], capsys)
    assert code == 2 and "is a file" in err and afile.read_text() == "x"
    (tmp_path / "pj" / "passkt.json").mkdir(parents=True)
    code, err = _run_cli([*BASE, "--out", str(tmp_path / "pj")], capsys)
    assert code == 2 and "passkt.json is a folder" in err
    assert sorted(p.name for p in (tmp_path / "pj").iterdir()) == ["passkt.json"]


def test_rerun_without_resume_refuses_then_overwrite_replaces(tmp_path, capsys):
    assert main([*BASE, "--out", str(tmp_path)]) == 0
    before = (tmp_path / "episodes.jsonl").read_text()
    code, err = _run_cli([*BASE, "--out", str(tmp_path), "--seed", "1"], capsys)
    assert code == 2 and "--resume continues it" in err and "--overwrite replaces it" in err
    assert (tmp_path / "episodes.jsonl").read_text() == before
    assert main([*BASE, "--out", str(tmp_path), "--seed", "1", "--overwrite"]) == 0
    assert json.loads((tmp_path / "passkt.json").read_text())["seed"] == 1


def test_compare_mistakes_are_one_line_errors(tmp_path, capsys):
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "partial.json").write_text('{"env_id": "x"}')
    for bad in ("list.json", "partial.json", "missing.json"):
        code, err = _run_cli(["compare", str(tmp_path / bad), str(tmp_path / bad)], capsys)
        assert code == 2 and bad in err and len(err.strip().splitlines()) == 1, err
    assert main([*BASE, "--out", str(tmp_path / "a")]) == 0
    assert main([*BASE, "--out", str(tmp_path / "b"), "--t", "2,4", "--policy", "expert"]) == 0
    code, err = _run_cli(["compare", str(tmp_path / "a"), str(tmp_path / "b")], capsys)
    assert code == 2 and "budgets T [2] vs [2, 4]" in err and len(err.strip().splitlines()) == 1, err
    folder = tmp_path / "plots"
    folder.mkdir()
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "a"), "--out", str(folder)]) == 0
    printed = "".join(capsys.readouterr().out.split())  # the console wraps long lines
    assert (folder / "passkt_diff.png").stat().st_size > 0 and str(folder / "passkt_diff.png") in printed
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "a"), "--out", str(tmp_path / "diff")]) == 0
    assert (tmp_path / "diff.png").is_file() and str(tmp_path / "diff.png") in "".join(capsys.readouterr().out.split())


def _options(command: str) -> dict[str, tuple[str | None, object]]:
    """Each option of a subcommand: its help and its default."""
    from agentgym_budget.cli import _parser

    sub = next(a for a in _parser()._actions if a.dest == "command").choices[command]
    return {name: (a.help, a.default) for a in sub._actions for name in a.option_strings}


def test_probe_shares_evals_flags_for_the_settings_they_share(tmp_path, capsys):
    probe, evaluation = _options("probe"), _options("eval")
    for name in ("--env", "--policy", "--policy-arg", "--env-arg", "--seed"):
        assert probe[name] == evaluation[name], name
    # ... so a value eval refuses, probe refuses the same way (one line, exit 2)
    for extra, names in ((["--seed", "-1"], ["-1", "0.."]), (["--env-arg", "=1"], ["'=1'", "KEY=VALUE"])):
        code, err = _run_cli(["probe", "--env", "KeyDoor-Budget-v0", "--out", str(tmp_path), *extra], capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1 and all(n in err for n in names), err
    code, err = _run_cli(["probe", "--env", "KeyDoor-Budget-v0", "--policy-arg", "q=1",
                          "--probes", "2", "--out", str(tmp_path)], capsys)
    assert code == 2 and "'q'" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("command", ["eval", "train", "sft"])
def test_every_command_takes_both_spellings_of_the_env_flag(command):
    from agentgym_budget.cli import _parser

    parser = _parser()
    for spelling in ("--env", "--env-id"):
        args = parser.parse_args([command, spelling, "KeyDoor-Budget-v0"])
        assert args.env_id == "KeyDoor-Budget-v0", (command, spelling)
