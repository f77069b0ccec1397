"""A results folder someone sent you: every record read back is checked (episodes/schema.py), and a
tampered file is refused with one line naming the file and the line (or the field), never loaded —
a script in a number field, NaN, negative counts, wrong types, unknown or missing keys."""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

import agentgym_budget  # noqa: F401  (registers the envs)
from agentgym_budget.cli import main
from agentgym_budget.eval import evaluate
from agentgym_budget.eval.episode_log import EPISODES_FILE, read_episodes
from agentgym_budget.eval.report import load_run
from agentgym_budget.eval.results import PassKTResult
from agentgym_budget.episodes.schema import RecordError
from agentgym_budget.eval.transcripts import TRANSCRIPTS_FILE, read_transcripts

PAYLOAD = "<img src=x onerror=\"document.title='pwned'\">"
ARGS = dict(ks=(1, 2), ts=(2, 4), tasks=3, attempts=2, seed=3, bootstrap=10)


@pytest.fixture(scope="module")
def original(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("sent")
    evaluate("KeyDoor-Budget-v0", "noisy-expert", out=folder, transcripts=True, **ARGS).save(folder)
    return folder


@pytest.fixture
def folder(original, tmp_path) -> Path:
    copy = tmp_path / "results"
    shutil.copytree(original, copy)
    return copy


def edit_episode(folder: Path, number: int, change: Callable[[dict], None]) -> None:
    """Apply ``change`` to the record on line ``number`` (1-based) of episodes.jsonl."""
    path = folder / EPISODES_FILE
    lines = path.read_text().splitlines()
    record = json.loads(lines[number - 1])
    change(record)
    lines[number - 1] = json.dumps(record)
    path.write_text("\n".join(lines) + "\n")


def edit_transcript(folder: Path, number: int, change: Callable[[dict], None]) -> None:
    """Apply ``change`` to transcript ``number`` (1-based), rewriting the file member by member."""
    path = folder / TRANSCRIPTS_FILE
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    line = json.loads(lines[number - 1])
    change(line)
    lines[number - 1] = json.dumps(line)
    path.write_bytes(b"".join(gzip.compress((text + "\n").encode(), mtime=0) for text in lines))


def edit_result(folder: Path, change: Callable[[dict], None]) -> None:
    path = folder / "passkt.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=1))


def setter(key: str, value) -> Callable[[dict], None]:
    return lambda data: data.__setitem__(key, value)


EPISODE_TAMPERING = {
    "won_turn script": (setter("won_turn", PAYLOAD), r"won_turn: expected an integer in 1\.\.1000000 or null, got the str"),
    "budget script": (setter("budget", PAYLOAD), "budget: expected an integer in 1..1000000, got the str"),
    "negative turns": (setter("turns", -1), "turns: expected an integer >= 0, got the int -1"),
    "float task": (setter("task", 1.5), "task: expected an integer >= 0, got the float 1.5"),
    "bool attempt": (setter("attempt", True), "attempt: expected an integer >= 0, got the bool True"),
    "flag out of range": (lambda r: r["no_effect"].__setitem__(0, 7), r"no_effect\[0\]: expected an integer in 0\.\.1"),
    "script action list": (setter("actions", PAYLOAD), "actions: expected a list of"),
    "token script": (setter("prompt_tokens", PAYLOAD), "prompt_tokens: expected an integer >= 0 or null"),
    "unknown key": (setter("onload", PAYLOAD), "unknown key 'onload'"),
    "missing key": (lambda r: r.pop("turns"), "missing key 'turns'"),
    "won after the end": (lambda r: r.__setitem__("won_turn", r["turns"] + 1), "won_turn: turn .* of an episode of"),
    "short list": (lambda r: r["plan_left"].append(1), "plan_left: .* entries for .* turns"),
}


@pytest.mark.parametrize("name", EPISODE_TAMPERING)
def test_a_tampered_episode_is_refused_naming_the_file_and_line(folder, name) -> None:
    change, message = EPISODE_TAMPERING[name]
    edit_episode(folder, 2, change)
    with pytest.raises(ValueError, match=rf"{EPISODES_FILE}, line 2 is not an episode record \(.*{message}"):
        read_episodes(folder)


def test_nan_and_infinity_are_refused_wherever_they_stand(folder) -> None:
    path = folder / EPISODES_FILE
    lines = path.read_text().splitlines()
    lines[0] = lines[0].replace('"seconds":', '"seconds":NaN,"x":', 1)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=f"{EPISODES_FILE}, line 1 .*NaN is not a number"):
        read_episodes(folder)
    edit_result(folder, lambda d: d["stderr"][0].__setitem__(0, float("inf")))  # json.dumps writes Infinity
    with pytest.raises(RecordError, match="passkt.json: Infinity is not a number"):
        PassKTResult.load(folder)


def test_tampered_nested_metrics_are_refused_in_one_line(folder, capsys) -> None:
    from agentgym_budget.cli import main

    edit_result(folder, lambda d: d.__setitem__("metrics", {k: "x" for k in d["metrics"]}))
    with pytest.raises(RecordError, match="passkt.json: metrics: not as the evaluator writes them"):
        PassKTResult.load(folder)
    assert main(["report", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert "metrics: not as the evaluator writes them" in err and len(err.splitlines()) == 1


def test_a_number_too_large_for_a_float_is_refused_not_a_traceback(folder) -> None:
    path = folder / EPISODES_FILE
    lines = path.read_text().splitlines()
    head, _, tail = lines[0].partition('"seconds":')
    lines[0] = head + '"seconds":' + "1" * 400 + "," + tail.split(",", 1)[1]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=f"{EPISODES_FILE}, line 1 .*seconds"):
        read_episodes(folder)


TRANSCRIPT_TAMPERING = {
    "token script": (lambda t: t["turns"][0].__setitem__("prompt_tokens", PAYLOAD),
                     r"turns\[0\]: prompt_tokens: expected an integer >= 0 or null"),
    "negative tokens": (lambda t: t["turns"][0].__setitem__("completion_tokens", -5), "completion_tokens: expected"),
    "won_turn script": (setter("won_turn", PAYLOAD), "won_turn: expected"),
    "reward NaN": (lambda t: t["turns"][0].__setitem__("reward", float("nan")), "NaN is not a number"),
    "unknown turn key": (lambda t: t["turns"][0].__setitem__("html", PAYLOAD), "unknown key 'html'"),
}


@pytest.mark.parametrize("name", TRANSCRIPT_TAMPERING)
def test_a_tampered_transcript_is_refused_naming_the_file_line_and_member(folder, name) -> None:
    change, message = TRANSCRIPT_TAMPERING[name]
    edit_transcript(folder, 3, change)
    with pytest.raises(RecordError, match=rf"{TRANSCRIPTS_FILE}, line 3 \(gzip member 3 at byte \d+\) is not a "
                                          rf"transcript \(.*{message}"):
        read_transcripts(folder)


RESULT_TAMPERING = {
    "plan_lengths script": (lambda d: d["plan_lengths"].__setitem__(1, PAYLOAD), r"plan_lengths\[1\]: expected an "
                                                                                 "integer >= -1, got the str"),
    "ks script": (lambda d: d["ks"].__setitem__(0, PAYLOAD), r"ks\[0\]: expected an integer >= 1"),
    "pass above 1": (lambda d: d["pass"][0].__setitem__(0, 1.5), r"pass\[0\]\[0\]: expected a finite number in 0\.\.1"),
    "negative successes": (lambda d: d["successes"][0].__setitem__(0, -1), r"successes\[0\]\[0\]: expected an integer"),
    "too many successes": (lambda d: d["successes"][0].__setitem__(0, 99), "successes: more than the 2 attempts"),
    "timing script": (lambda d: d["timing"].__setitem__("episodes", PAYLOAD), "timing.episodes: expected a finite"),
    "versions script": (lambda d: d["config"].__setitem__("versions", PAYLOAD), "config: versions: expected an object"),
    "env_settings script": (lambda d: d["config"].__setitem__("env_settings", PAYLOAD),
                            "config: env_settings: expected an object"),
    "short plan_lengths": (lambda d: d["plan_lengths"].pop(), "plan_lengths: 2 entries for 3 tasks"),
    "cost script": (lambda d: d["attempt_costs"]["turns"][0][0].__setitem__(0, PAYLOAD),
                    r"attempt_costs: turns\[0\]\[0\]\[0\]: expected an integer >= 0"),
    "negative seconds": (lambda d: d["attempt_costs"]["seconds"][1][0].__setitem__(0, -1.0),
                         r"attempt_costs: seconds\[1\]\[0\]\[0\]: expected a finite number >= 0"),
    "cost shape": (lambda d: d["attempt_costs"]["turns"][0].pop(), r"attempt_costs\.turns: expected 2 x 3 x 2 values"),
    "wins against successes": (lambda d: d["attempt_costs"]["won"][1][0].__setitem__(0, 1 - d["attempt_costs"]["won"][1][0][0]),
                               r"attempt_costs\.won: task 0 at T=4 has \d wins, successes says"),
    "turns beyond T": (lambda d: d["attempt_costs"]["turns"][0][0].__setitem__(0, 3),
                       r"attempt_costs\.turns: task 0 at T=2"),
    "grid shape": (lambda d: d["pass"].pop(), r"pass: expected 2 rows of 2 values"),
    "unknown key": (setter("script", PAYLOAD), "unknown key 'script'"),
    "missing key": (lambda d: d.pop("attempts"), "missing key 'attempts'"),
}


@pytest.mark.parametrize("name", RESULT_TAMPERING)
def test_a_tampered_passkt_json_is_refused_naming_the_file_and_field(folder, name) -> None:
    change, message = RESULT_TAMPERING[name]
    edit_result(folder, change)
    with pytest.raises(RecordError, match=rf"passkt\.json: {message}"):
        PassKTResult.load(folder)


@pytest.mark.parametrize("file", ["episodes", "transcripts", "passkt"])
def test_report_on_a_tampered_folder_is_one_line_exit_2(folder, file, capsys) -> None:
    if file == "episodes":
        edit_episode(folder, 2, setter("won_turn", PAYLOAD))
    elif file == "transcripts":
        edit_transcript(folder, 2, lambda t: t["turns"][0].__setitem__("prompt_tokens", PAYLOAD))
    else:
        edit_result(folder, lambda d: d["plan_lengths"].__setitem__(0, PAYLOAD))
    assert main(["report", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("agentgym-budget report: error: ") and "Traceback" not in err
    assert str(folder) in err and not (folder / "report.html").exists()


def test_old_files_without_the_later_keys_still_load(folder) -> None:
    """Records from before effect, lost_turn, game and token counts; results from before usage and task_games."""
    later = ("effect", "lost_turn", "game", "prompt_tokens", "completion_tokens")
    path = folder / EPISODES_FILE
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({k: v for k, v in r.items() if k not in later}) + "\n" for r in lines))
    edit_result(folder, lambda d: [d.pop("usage"), d.pop("task_games"), d["config"].pop("versions"),
                                   d["config"].pop("env_settings"), d.pop("attempt_costs")])
    (folder / "frontier.csv").unlink()
    run = load_run(folder)
    assert len(run.records) == 3 * 2 * 1 and all(r.effect == [] and r.game == "" for r in run.records)
    assert run.result.task_games == [] and run.result.usage == {} and "env_settings" not in run.result.config
    # a result from before attempt costs: no frontier, saved again without frontier.csv, reported with a note
    assert run.result.costs is None and run.result.frontier() is None
    assert "frontier.csv" not in [p.name for p in run.result.save(folder)]
    assert main(["report", str(folder)]) == 0
    assert "predates attempt costs" in (folder / "report.html").read_text()


def test_the_result_records_every_env_setting_with_its_defaults(original) -> None:
    """KeyDoor was run without env kwargs: its split is recorded all the same (the constructor's default)."""
    config = PassKTResult.load(original).config
    assert config["env_kwargs"] == {}
    assert config["env_settings"] == {"split": "all", "render_mode": None}
