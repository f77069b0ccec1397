"""The report in a real browser: headless Chromium (Debian's ``chromium`` package, installed by
``.ci/run``) renders the page of a small evaluation; the DOM after the page's script ran must hold
the heatmap, the metrics table, the episode list and the transcript the URL asked for, and a
screenshot is taken.  Skipped, saying why, only where no Chromium is installed and not under CI
(``CI=true``), where a missing Chromium fails instead."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

import agentgym_budget  # noqa: F401  (registers the envs)
from agentgym_budget.eval import evaluate
from agentgym_budget.eval.episode_log import EPISODES_FILE
from agentgym_budget.eval.report import build_report, write_report
from agentgym_budget.eval.transcripts import TranscriptWriter, read_transcripts

CHROMIUM = next((p for name in ("chromium", "chromium-browser", "google-chrome") if (p := shutil.which(name))), None)
# CI (CI=true, as .ci/run and the usual CI services set it) must run these tests, so there a missing
# Chromium is a failure; elsewhere it is a skip saying why.
UNDER_CI = os.environ.get("CI", "").strip().lower() in ("true", "1")
NO_CHROMIUM = "no Chromium installed (Debian: apt-get install chromium; .ci/run installs it)"


@pytest.fixture(scope="module", autouse=True)
def _chromium_installed() -> None:
    """Module-scoped and autouse, so it runs before the (slower) module fixtures it guards."""
    if CHROMIUM is None:
        if UNDER_CI:
            pytest.fail(f"CI=true and {NO_CHROMIUM}", pytrace=False)
        pytest.skip(NO_CHROMIUM)

ARGS = dict(ks=(1, 2), ts=(5, 10, 20), tasks=5, attempts=2, seed=0, bootstrap=20)
OPENED = (2, 1, 20)  # the episode the URL opens: task, attempt, budget
REPLY = "Thought: the <egg> is probably in the fridge & I should look there.\nAction: go to fridge 1"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
         "--virtual-time-budget=5000"]


def chromium(page: Path, tmp_path: Path, fragment: str, *args: str) -> str:
    """Run headless Chromium on ``page#fragment`` with a fresh profile; its stdout."""
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    done = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args, f"{page.as_uri()}#{fragment}"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


class DOM(HTMLParser):
    """Start tags by id and class, and the text under the element with id ``episode``."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.by_id: dict[str, dict[str, str]] = {}
        self.body: dict[str, str] = {}
        self.classes: list[set[str]] = []
        self.rows: list[str] = []
        self.episode_text: list[str] = []
        self.tags: list[str] = []
        self._depth = 0  # > 0 inside #episode
        self.feed(text)

    def handle_starttag(self, tag, attrs) -> None:
        a = {k: v or "" for k, v in attrs}
        self.tags.append(tag)
        if tag == "body":
            self.body = a
        if "id" in a:
            self.by_id[a["id"]] = {"tag": tag, **a}
        self.classes.append(set(a.get("class", "").split()))
        if tag == "tr" and "data-id" in a:
            self.rows.append(a["data-id"])
        if self._depth or a.get("id") == "episode":
            self._depth += tag not in ("br", "img", "input")

    def handle_endtag(self, tag) -> None:
        if self._depth:
            self._depth -= 1

    def handle_data(self, data) -> None:
        if self._depth:
            self.episode_text.append(data)

    def count(self, css_class: str) -> int:
        return sum(css_class in c for c in self.classes)


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("run")
    evaluate("ALFWorld-Budget-v0", "noisy-expert", out=folder, transcripts=True, **ARGS).save(folder)
    # What an LLM policy's transcript adds: its raw reply and token counts (a later copy of the episode wins).
    line = read_transcripts(folder)[OPENED]
    line["turns"][0].update(reply=REPLY, prompt_tokens=812, completion_tokens=23)
    writer = TranscriptWriter(folder, resume=True)
    writer.write(line)
    writer.close()
    return folder


def test_chromium_renders_the_heatmap_metrics_and_an_opened_transcript(run_folder, tmp_path) -> None:
    page = write_report(run_folder)
    task, attempt, budget = OPENED
    dom = DOM(chromium(page, tmp_path, f"episode=0-{task}-{attempt}-{budget}", "--dump-dom"))
    assert float(dom.body["data-rendered-ms"]) >= 0, "the page's script did not finish (a JS error?)"
    assert dom.by_id["heatmap"]["tag"] == "svg" and dom.count("cell") == 2 * 3
    assert dom.by_id["metrics"]["tag"] == "table"
    assert len(dom.rows) == 5 * 2  # the script drew every episode of the list
    # The episode named in the URL is open, turn by turn, with what the agent saw and did.
    assert dom.by_id["episode"]["data-episode"] == f"0-{task}-{attempt}-{budget}"
    line = read_transcripts(run_folder)[(task, attempt, budget)]
    assert dom.count("turn") == len(line["turns"]) + 1  # + the final observation
    text = "".join(dom.episode_text)
    for turn in line["turns"]:
        assert turn["observation"].strip().splitlines()[-1] in text and turn["action"] in text
    assert dom.count("tag") > 0  # errors / off-expert / recoveries highlighted
    assert REPLY in text and "812 + 23 tokens" in text and dom.count("reply") == 1

    shot = tmp_path / "report.png"
    chromium(page, tmp_path, f"episode=0-{task}-{attempt}-{budget}", f"--screenshot={shot}", "--window-size=1280,900")
    header = shot.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", header[16:24]) == (1280, 900)


def test_chromium_renders_a_comparison_and_an_unknown_episode(run_folder, tmp_path) -> None:
    other = tmp_path / "other"
    evaluate("ALFWorld-Budget-v0", "expert", out=other, **ARGS).save(other)  # no transcripts
    page = write_report(run_folder, tmp_path / "compare.html", other)
    dom = DOM(chromium(page, tmp_path, "episode=1-0-0-20", "--dump-dom"))
    assert {"heatmap", "heatmap-b", "diff-heatmap", "per-task", "f-run"} <= set(dom.by_id)
    assert len(dom.rows) == 2 * 5 * 2
    assert dom.by_id["episode"]["data-episode"] == "1-0-0-20"
    assert "No transcript stored" in "".join(dom.episode_text)  # actions and flags from episodes.jsonl only
    dom = DOM(chromium(page, tmp_path, "episode=7-7-7-7", "--dump-dom"))
    assert "episode" not in dom.by_id


#: Measures, once the page has drawn, whether each results panel's content fits its box (as JSON on the body).
MEASURE = """<script>addEventListener("load", () => {
  document.body.dataset.layout = JSON.stringify([...document.querySelectorAll("section.results")].map(box => ({
    box: [box.scrollWidth, box.clientWidth, box.getBoundingClientRect().right],
    figures: [...box.querySelectorAll("figure")].map(f => [f.className, f.scrollWidth, f.clientWidth,
                                                           f.getBoundingClientRect().right])})));
});</script></body>"""


@pytest.mark.parametrize("width", [1280, 1400])
def test_the_results_panel_fits_its_box_at_a_laptop_width(run_folder, tmp_path, width) -> None:
    """Heatmap, curves and behaviour table side by side or wrapped, never sticking out of their box
    (the behaviour table overflowed it at 1400 px when it had a grid column of its own)."""
    page = tmp_path / "measured.html"
    page.write_text(build_report(run_folder).replace("</body>", MEASURE), encoding="utf-8")
    dom = DOM(chromium(page, tmp_path, "", "--dump-dom", f"--window-size={width},900"))
    panels = json.loads(dom.body["data-layout"])
    assert len(panels) == 1 and len(panels[0]["figures"]) == 3
    for panel in panels:
        scroll_width, client_width, right = panel["box"]
        assert scroll_width <= client_width, panel
        for name, figure_scroll, figure_client, figure_right in panel["figures"]:
            assert figure_scroll <= figure_client and figure_right <= right, (name, panel)


#: Markup that runs script if it ever becomes HTML: it would set the title and mark the body.
PAYLOAD = ("<img src=x onerror=\"document.title='pwned';document.body.dataset.pwned=1\">"
           "<svg onload=\"document.body.dataset.pwned=2\"></svg>")


def json_script(element_id: str, data) -> str:
    text = json.dumps(data).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return f'<script type="application/json" id="{element_id}">{text}</script>'


def assert_no_script_ran(dump: str) -> DOM:
    dom = DOM(dump)
    assert float(dom.body["data-rendered-ms"]) >= 0, "the page's script did not finish (a JS error?)"
    assert "data-pwned" not in dom.body and re.search(r"<title>([^<]*)</title>", dump).group(1) != "pwned"
    assert "img" not in dom.tags and dom.tags.count("svg") == 4  # the heatmap, the curves, the two frontier panels only
    return dom


def test_text_fields_holding_markup_render_as_text_and_run_nothing(run_folder, tmp_path) -> None:
    folder = tmp_path / "sent"
    shutil.copytree(run_folder, folder)
    task, attempt, budget = OPENED
    line = read_transcripts(folder)[OPENED]
    for turn in line["turns"]:
        turn.update(observation=PAYLOAD, reply=PAYLOAD, action=PAYLOAD, expert_action=PAYLOAD, action_effect=PAYLOAD)
    line["final_observation"] = PAYLOAD
    writer = TranscriptWriter(folder, resume=True)
    writer.write(line)
    writer.close()
    path = folder / EPISODES_FILE
    records = [json.loads(text) for text in path.read_text().splitlines()]
    for record in records:
        record.update(actions=[PAYLOAD] * record["turns"], game=PAYLOAD)
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    page = write_report(folder)
    dom = assert_no_script_ran(chromium(page, tmp_path, f"episode=0-{task}-{attempt}-{budget}", "--dump-dom"))
    assert dom.by_id["episode"]["data-episode"] == f"0-{task}-{attempt}-{budget}"
    # Shown as text: each turn's observation, reply and action, and the final observation.
    assert "".join(dom.episode_text).count(PAYLOAD) >= 3 * len(line["turns"]) + 1


def test_the_script_escapes_every_value_even_data_the_loaders_would_refuse(run_folder, tmp_path) -> None:
    """Defence in depth: the page's own data made hostile after loading (every number a payload)."""
    text = build_report(run_folder)
    data = json.loads(re.search(r'<script type="application/json" id="report-data">(.*?)</script>', text).group(1))
    data["runs"][0]["label"] = PAYLOAD
    task, attempt, budget = OPENED
    for e in data["runs"][0]["episodes"]:
        e.update(task=PAYLOAD, attempt=PAYLOAD, budget=PAYLOAD, won=PAYLOAD, off=PAYLOAD,
                 actions=[PAYLOAD] * e["turns"], tags=[[PAYLOAD]] * e["turns"])
        if e["id"] == f"0-{task}-{attempt}-{budget}":
            e["errors"] = PAYLOAD  # (the list's error filter would hide it: a non-number is no count)
    text = re.sub(r'<script type="application/json" id="report-data">.*?</script>',
                  lambda _: json_script("report-data", data), text)
    opened = f"tr-0-{task}-{attempt}-{budget}"
    transcript = json.loads(re.search(rf'id="{opened}">(.*?)</script>', text).group(1))
    for turn in transcript["turns"]:
        turn.update(prompt_tokens=PAYLOAD, completion_tokens=PAYLOAD)
    text = re.sub(rf'<script type="application/json" id="{opened}">.*?</script>',
                  lambda _: json_script(opened, transcript), text)
    page = tmp_path / "hostile.html"
    page.write_text(text, encoding="utf-8")
    dom = assert_no_script_ran(chromium(page, tmp_path, f"episode=0-{task}-{attempt}-{budget}", "--dump-dom"))
    assert len(dom.rows) == 5 * 2 - 1 and PAYLOAD in "".join(dom.episode_text)
