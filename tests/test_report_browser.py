"""The report in a real browser: headless Chromium (Debian's ``chromium`` package, installed by
``.ci/run``) renders the page of a small evaluation; the DOM after the page's script ran must hold
the heatmap, the metrics table, the episode list and the transcript the URL asked for, and a
screenshot is taken.  Skipped, saying why, only where no Chromium is installed."""

from __future__ import annotations

import shutil
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

import agentgym_budget  # noqa: F401  (registers the envs)
from agentgym_budget.eval import evaluate
from agentgym_budget.eval.report import write_report
from agentgym_budget.eval.transcripts import TranscriptWriter, read_transcripts

CHROMIUM = next((p for name in ("chromium", "chromium-browser", "google-chrome") if (p := shutil.which(name))), None)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium installed (Debian: apt-get install chromium; .ci/run installs it)")

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
        self._depth = 0  # > 0 inside #episode
        self.feed(text)

    def handle_starttag(self, tag, attrs) -> None:
        a = {k: v or "" for k, v in attrs}
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
