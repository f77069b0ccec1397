"""The HTML report of an evaluation (agentgym-budget report): self-contained, its data complete
and escaped, with and without transcripts, and the comparison of two runs.  The page in a real
browser: tests/test_report_browser.py."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest

import agentgym_budget  # noqa: F401  (registers the envs)
from agentgym_budget.cli import main
from agentgym_budget.eval import evaluate
from agentgym_budget.eval.episode_log import read_episodes
from agentgym_budget.eval.metrics import error_kinds, error_turns, on_plan_turns
from agentgym_budget.eval.stopping import parse_rules, rule_frontier, rule_points
from agentgym_budget.eval.report import ERROR_TAGS, build_report, turn_tags, write_report
from agentgym_budget.eval.results import PassKTResult
from agentgym_budget.eval.transcripts import TRANSCRIPTS_FILE, TranscriptWriter, read_transcripts

ENV_ID = "KeyDoor-Budget-v0"
ARGS = dict(ks=(1, 2), ts=(2, 4, 8), tasks=6, attempts=3, seed=1, bootstrap=20)


class Elements(HTMLParser):
    """Every start tag's attributes and the text of each <script> by id."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.scripts: dict[str, str] = {}
        self._script: str | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs) -> None:
        attributes = {k: v or "" for k, v in attrs}
        self.tags.append((tag, attributes))
        self._script = attributes.get("id", "") if tag == "script" else None

    def handle_data(self, data) -> None:
        if self._script is not None:
            self.scripts[self._script] = self.scripts.get(self._script, "") + data

    def handle_endtag(self, tag) -> None:
        self._script = None

    def ids(self) -> set[str]:
        return {a["id"] for _, a in self.tags if "id" in a}

    def count(self, css_class: str) -> int:
        return sum(css_class in a.get("class", "").split() for _, a in self.tags)


def run(folder, policy="noisy-expert", transcripts=True, env_id=ENV_ID, **kwargs):
    result = evaluate(env_id, policy, out=folder, transcripts=transcripts, **{**ARGS, **kwargs})
    result.save(folder)
    return result


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("run")
    run(path, env_id="ALFWorld-Budget-v0", policy_kwargs={"p": 0.4})  # ALFWorld: errors and recoveries
    return path


def test_the_page_holds_the_run_grid_metrics_and_every_episode(folder) -> None:
    text = build_report(folder)
    page = Elements(text)
    assert {"heatmap", "curves", "metrics", "episodes", "transcript", "report-data"} <= page.ids()
    assert page.count("cell") == 2 * 3  # K x T cells
    for label in ("errors per episode", "turns to get back on plan", "noisy-expert(p=0.4)", "ALFWorld-Budget-v0",
                  "gymnasium", "K 1, 2 × T 2, 4, 8"):
        assert label in text, label
    # the run line counts in integers (the file's schema reads them back as floats)
    turns = sum(r.turns for r in read_episodes(folder))
    assert re.search(rf"<dd>{6 * 3} episodes, {turns} turns in \d", text), re.findall(r"<dd>[^<]*turns in[^<]*", text)
    # Self-contained: nothing is fetched (no src/href to anything, no external stylesheet or script).
    assert not [a for tag, a in page.tags if a.get("src") or (tag == "link" and a.get("href"))]
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in text

    data = json.loads(page.scripts["report-data"])
    records = {(r.task, r.attempt, r.budget): r for r in read_episodes(folder)}
    episodes = data["runs"][0]["episodes"]
    assert len(episodes) == len(records) == 6 * 3
    for e in episodes:
        record = records[(e["task"], e["attempt"], e["budget"])]
        assert e["actions"] == record.actions and e["won"] == record.won_turn
        assert e["errors"] == len(error_turns(record)) and e["tr"] is True
        transcript = json.loads(page.scripts[f"tr-{e['id']}"])  # one lazily parsed script per episode
        assert [t["action"] for t in transcript["turns"]] == record.actions
    # the script's error filter reads the metrics' error kinds from the data, not a list of its own
    assert data["error_tags"] == list(ERROR_TAGS)
    script = text.rsplit("<script>", 1)[1]
    assert "new Set(data.error_tags)" in script and not any(f'"{tag}"' in script for tag in ERROR_TAGS)


def test_turn_tags_mark_the_metrics_errors_and_the_recoveries(folder) -> None:
    records = read_episodes(folder)
    assert any(error_turns(r) for r in records) and any("recovery" in sum(turn_tags(r), []) for r in records)
    for record in records:
        tags = turn_tags(record)
        errors = [t for t, row in enumerate(tags, start=1) if set(ERROR_TAGS) & set(row)]
        assert errors == error_turns(record)
        assert [row[0] for row in tags if set(ERROR_TAGS) & set(row)] == [
            kind.replace("_", "-") for _, kind in error_kinds(record)]
        assert [t for t, row in enumerate(tags, start=1) if "off-expert" in row] == [
            t for t, m in enumerate(record.expert_match, start=1) if m == 0]
        for t, row in enumerate(tags, start=1):
            if "recovery" in row:  # an on-plan turn, after an error, with no recovery since that error
                last_error = max(e for e in errors if e < t)
                assert t in on_plan_turns(record)
                assert not any("recovery" in tags[u - 1] for u in range(last_error + 1, t))


def test_text_from_the_env_cannot_break_out_of_the_page(tmp_path) -> None:
    run(tmp_path)
    lines = read_transcripts(tmp_path)
    key, line = next(iter(lines.items()))
    evil = "</script><script>alert('x')</script><!-- & <b>"
    line["turns"][0]["observation"] = evil
    writer = TranscriptWriter(tmp_path, resume=True)  # appended: the later copy wins
    writer.write(line)
    writer.close()
    text = build_report(tmp_path)
    assert "alert('x')</script>" not in text
    page = Elements(text)
    transcript = json.loads(page.scripts[f"tr-0-{key[0]}-{key[1]}-{key[2]}"])
    assert transcript["turns"][0]["observation"] == evil


def test_without_transcripts_the_page_still_lists_the_episodes(tmp_path) -> None:
    run(tmp_path, transcripts=False)
    assert not (tmp_path / TRANSCRIPTS_FILE).exists()
    text = build_report(tmp_path)
    page = Elements(text)
    data = json.loads(page.scripts["report-data"])
    assert len(data["runs"][0]["episodes"]) == 18 and not any(e["tr"] for e in data["runs"][0]["episodes"])
    assert not [i for i in page.scripts if i.startswith("tr-")]
    assert "none stored" in text


def test_two_runs_are_compared_cell_by_cell_and_task_by_task(tmp_path) -> None:
    a, b = run(tmp_path / "a", "random"), run(tmp_path / "b", "expert", transcripts=False)
    text = build_report(tmp_path / "a", tmp_path / "b")
    page = Elements(text)
    assert {"heatmap", "heatmap-b", "diff-heatmap", "per-task", "metrics", "metrics-b", "f-run"} <= page.ids()
    t = max(ARGS["ts"])
    wins = int((b.successes[-1] > a.successes[-1]).sum())
    losses = int((b.successes[-1] < a.successes[-1]).sum())
    assert wins > 0
    assert re.search(rf"At T={t}, expert wins more attempts than random on <b[^>]*>{wins}</b> tasks, fewer on "
                     rf"<b[^>]*>{losses}</b>", text)
    assert page.count("win") == wins and page.count("loss") == losses  # per-task rows
    data = json.loads(page.scripts["report-data"])
    assert [len(r["episodes"]) for r in data["runs"]] == [18, 18] and data["compare"] is True
    diff_svg = text[text.index('id="diff-heatmap"'):].split("</svg>", 1)[0]
    for k in ARGS["ks"]:
        for t in ARGS["ts"]:
            assert f"{b.value(k, t) - a.value(k, t):+.2f}</text>" in diff_svg


def test_the_report_command_writes_the_page(folder, tmp_path, capsys) -> None:
    assert main(["report", str(folder), "--out", str(tmp_path / "r.html")]) == 0
    assert "wrote" in capsys.readouterr().out and 'id="heatmap"' in (tmp_path / "r.html").read_text()
    assert write_report(folder).name == "report.html"
    assert main(["report", str(tmp_path / "nowhere")]) == 2
    assert "has no passkt.json" in capsys.readouterr().err


def test_eval_names_the_report_and_keeps_transcripts_when_asked(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # rich would wrap the line
    fast = ["--env", ENV_ID, "--k", "1", "--t", "2,4", "--tasks", "3", "--bootstrap", "10", "--no-progress",
            "--no-plots"]
    assert main(["eval", *fast, "--out", str(tmp_path / "plain")]) == 0
    out = capsys.readouterr().out
    assert f"agentgym-budget report {tmp_path / 'plain'}" in out
    assert not (tmp_path / "plain" / TRANSCRIPTS_FILE).exists()
    assert main(["eval", *fast, "--out", str(tmp_path / "kept"), "--transcripts"]) == 0
    assert len(read_transcripts(tmp_path / "kept")) == 3


def test_the_script_turns_data_into_markup_in_one_place_only(folder) -> None:
    """Every innerHTML of the page's script is setHtml's, which takes html`...` fragments only (their
    values escaped); the browser test feeds it hostile data (test_report_browser.py)."""
    script = build_report(folder).rsplit("<script>", 1)[1]
    assert len(re.findall(r"\.innerHTML\s*\+?=", script)) == 1  # any assignment, whatever its right side
    assert re.findall(r"\w+\.innerHTML\s*=\s*[\w.]+", script) == ["el.innerHTML = fragment.text"]
    assert "insertAdjacentHTML" not in script and "outerHTML" not in script and "document.write" not in script


def test_the_page_shows_success_against_cost_and_the_frontier(folder) -> None:
    page = Elements(build_report(folder))
    assert {"frontier", "frontier-parallel", "frontier-sequential", "frontier-table"} <= page.ids()
    frontier = PassKTResult.load(folder).frontier()
    assert page.count("point") == 2 * 2 * 3  # every (K,T) cell of both strategies is a point
    assert page.count("frontier") == 1 + 2  # the section and one step line per strategy
    rows = re.findall(r"<tr><td>([\d.]+)</td><td>(\d+×\d+)</td>", build_report(folder))
    assert [(float(cost), label) for cost, label in rows] == [
        (round(c.cost, 1), c.label) for c in frontier.frontier("sequential", "turns")]
    assert "tokens: not recorded (the policy reports none)" in build_report(folder)


def test_the_page_places_stopping_rules_against_the_fixed_cells(folder) -> None:
    rules = parse_rules("no-effect:1,never")
    text = build_report(folder, rules=rules)
    page = Elements(text)
    assert "stopping-table" in page.ids() and "stopping-table" not in Elements(build_report(folder)).ids()
    points = rule_points(read_episodes(folder), rules, (1, 2), (2, 4, 8))
    assert page.count("rule-point") == len(points) == 2 * 2 * 3  # on the sequential plot only
    rows = re.findall(r"<tr><td>(no-effect:1|never)</td><td>[^<]*</td><td>([\d.]+)</td><td>([\d.]+)</td>", text)
    assert [(name, float(turns), float(success)) for name, turns, success in rows] == [
        (p.rule, round(p.turns, 1), round(p.success, 3)) for p in rule_frontier(points)]
