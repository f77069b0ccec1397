"""Every code block of README.md, docs/*.md and experiments/*/README.md that a user would run is run here as written, in a fresh process.

The blocks are read from the markdown, so a changed doc changes what is tested.  A fenced block
tagged ``python`` runs as a script, one tagged ``bash`` (``sh``, ``shell``, ``console``) under
``bash -e -o pipefail``, each in a new temporary folder (so ``results/`` and ``runs/`` land there)
that links the checkout's ``benchmarks/``, ``examples/``, ``experiments/`` and ``tools/`` (the doc's commands are
typed in a checkout), with the Python running the tests first on ``PATH`` and the checkout first
on ``PYTHONPATH``.  Blocks without a tag, or tagged ``text``, are output samples, diagrams and
pseudo-code, never run; a test fails when one of them looks like a command, so a runnable block
cannot escape by losing its tag.

What a block needs in order to run here is said in the markdown, in HTML comments (invisible
on the rendered page) on the lines right above its fence, one ``<!-- docs-test: KIND: VALUE -->``
each:

* ``skip: REASON`` — not run; the reason is required (GPU only, a multi-GB download, a cluster).
* ``sub: OLD => NEW`` — a size-down for CI (``--tasks 50 => --tasks 2``); ``OLD`` must occur.
* ``drop: LINE START => REASON`` — the block's lines starting so are not run (``pip install ...``:
  CI installs every extra from the checkout already).
* ``server: openai HOST:PORT MODEL`` — the test starts an OpenAI-compatible server listing
  ``MODEL`` (``tools/standin_server.py``) and points the block's ``HOST:PORT`` at it.
* ``background: LINE START`` — that line is what the doc runs "in another terminal": the test
  starts it first, waits for the ``http://127.0.0.1:N/v1`` address it prints, puts the address
  in place of ``http://127.0.0.1:PORT/v1`` in the rest, and stops it at the end.
* ``expect: REGEX`` — the block's output must match.
* ``timeout: SECONDS`` (default 300); ``slow`` marks the test ``slow`` (still run by default).
"""

from __future__ import annotations

import os
import re
import select
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "experiments").glob("*/README.md"))]
RUNNABLE = {"python": "python", "bash": "bash", "sh": "bash", "shell": "bash", "console": "bash"}
NOT_RUN = {"", "text"}
KINDS = {"skip", "sub", "drop", "server", "background", "expect", "timeout", "slow"}
_FENCE = re.compile(r"^```(?P<lang>[\w-]*)\s*$")
_DIRECTIVE = re.compile(r"^<!-- docs-test: (?P<kind>[\w-]+)(?:: (?P<value>.*?))? -->\s*$")
_LOOKS_RUNNABLE = re.compile(r"^\s*(?:\$ )?(?:python3? |agentgym-budget |pip |pytest |import \w|from [\w.]+ import )")
_SERVED_URL = re.compile(r"http://127\.0\.0\.1:\d+/v1")


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    directives: list[tuple[str, str]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    def values(self, kind: str) -> list[str]:
        return [value for k, value in self.directives if k == kind]


def parse_blocks(page: Path, text: str | None = None) -> list[Block]:
    """The fenced blocks of ``page`` (or of ``text``), each with the docs-test comments right above its fence."""
    lines = (page.read_text(encoding="utf-8") if text is None else text).splitlines()
    blocks, i = [], 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise ValueError(f"{page}:{i + 1}: a code fence that is never closed")
        directives, k = [], i - 1
        while k >= 0 and (match := _DIRECTIVE.match(lines[k])):
            directives.insert(0, (match.group("kind"), (match.group("value") or "").strip()))
            k -= 1
        blocks.append(Block(page, i + 1, fence.group("lang"), "\n".join(lines[i + 1:end]) + "\n", directives))
        i = end + 1
    return blocks


def all_blocks() -> list[Block]:
    return [block for page in PAGES for block in parse_blocks(page)]


def runnable_blocks() -> list[Block]:
    return [b for b in all_blocks() if b.lang in RUNNABLE and not b.values("skip")]


def prepared_code(block: Block) -> str:
    """The block's code after its ``sub`` and ``drop`` directives (each must apply)."""
    code = block.code
    for value in block.values("sub"):
        old, sep, new = value.partition(" => ")
        assert sep and old in code, f"{block.name}: sub {old!r} does not occur in the block (a doc changed?)"
        code = code.replace(old, new)
    for value in block.values("drop"):
        start, sep, reason = value.partition(" => ")
        assert sep and reason.strip(), f"{block.name}: drop needs 'LINE START => REASON'"
        kept = [line for line in code.splitlines() if not line.startswith(start)]
        assert len(kept) < len(code.splitlines()), f"{block.name}: no line starts with {start!r}"
        code = "\n".join(kept) + "\n"
    return code


def _params() -> list[object]:
    params = []
    for block in runnable_blocks():
        marks = [pytest.mark.slow] if block.values("slow") else []
        params.append(pytest.param(block, id=block.name, marks=marks))
    return params


# -- the blocks are what the docs say -----------------------------------------------------------
def test_every_block_is_classified_and_every_skip_has_a_reason() -> None:
    problems = []
    for block in all_blocks():
        for kind, value in block.directives:
            if kind not in KINDS:
                problems.append(f"{block.name}: unknown docs-test directive {kind!r}")
            if kind in {"skip", "sub", "drop", "server", "background", "expect", "timeout"} and not value:
                problems.append(f"{block.name}: docs-test {kind} needs a value")
        if block.lang in NOT_RUN:
            if block.directives:
                problems.append(f"{block.name}: docs-test directives on a block that is never run")
            looks = [line for line in block.code.splitlines() if _LOOKS_RUNNABLE.match(line)]
            if looks:
                problems.append(f"{block.name}: an untagged block with commands ({looks[0]!r}): tag it")
        elif block.lang not in RUNNABLE:
            problems.append(f"{block.name}: unknown block language {block.lang!r}")
    assert not problems, "\n".join(problems)


def test_the_parser_reads_directives_and_a_stale_sub_fails() -> None:
    text = ("intro\n<!-- docs-test: sub: --tasks 50 => --tasks 2 -->\n<!-- docs-test: slow -->\n```bash\n"
            "agentgym-budget eval --tasks 50\n```\n\n```\noutput\n```\n")
    first, second = parse_blocks(ROOT / "demo.md", text)
    assert (first.line, first.lang, first.directives) == (4, "bash", [("sub", "--tasks 50 => --tasks 2"), ("slow", "")])
    assert prepared_code(first) == "agentgym-budget eval --tasks 2\n"
    assert (second.lang, second.directives) == ("", [])
    first.code = "agentgym-budget eval --tasks 40\n"  # the doc changed, the size-down no longer applies
    with pytest.raises(AssertionError, match="does not occur"):
        prepared_code(first)


# -- running a block ----------------------------------------------------------------------------
def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(MPLBACKEND="Agg", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
    return env


def _stop(process: subprocess.Popen, first: signal.Signals = signal.SIGTERM) -> None:
    """Stop the process's group: ``first`` (Ctrl-C's SIGINT lets a server close what it started), then SIGKILL."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, first)
            process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        except ProcessLookupError:
            pass


def _start_background(line: str, cwd: Path, env: dict[str, str], timeout: float = 180.0) -> tuple[subprocess.Popen, str]:
    """Start ``line`` (a server the doc runs in another terminal); its process and the address it prints."""
    process = subprocess.Popen(["bash", "-c", f"exec {line}"], cwd=cwd, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    seen, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        ready, _, _ = select.select([process.stdout], [], [], 1.0)
        if ready:
            out = process.stdout.readline()
            seen.append(out)
            if match := _SERVED_URL.search(out):
                return process, match.group(0)
    _stop(process, signal.SIGINT)
    raise AssertionError(f"{line!r} printed no server address within {timeout:g}s:\n{''.join(seen)[-3000:]}")


def run_block(block: Block, tmp_path: Path) -> str:
    """Run the block (after its directives) in ``tmp_path``; its output, or an assertion naming what failed."""
    code = prepared_code(block)
    env = _environment()
    for name in ("benchmarks", "examples", "experiments", "tools"):
        (tmp_path / name).symlink_to(ROOT / name, target_is_directory=True)
    started: list[subprocess.Popen] = []
    servers = []
    try:
        for value in block.values("server"):
            kind, address, model = value.split(maxsplit=2)
            assert kind == "openai", f"{block.name}: unknown server kind {kind!r}"
            from tools.standin_server import StandinServer

            server = StandinServer([model]).__enter__()
            servers.append(server)
            assert address in code, f"{block.name}: the server address {address} is not in the block"
            code = code.replace(address, server.address)
        for start in block.values("background"):
            [line] = [line for line in code.splitlines() if line.startswith(start)]
            process, url = _start_background(line, tmp_path, env)
            started.append(process)
            code = "\n".join(x for x in code.splitlines() if x != line).replace("http://127.0.0.1:PORT/v1", url) + "\n"
        if RUNNABLE[block.lang] == "python":
            script = tmp_path / "block.py"
            command = [sys.executable, str(script)]
        else:
            script = tmp_path / "block.sh"
            command = ["bash", "-e", "-o", "pipefail", str(script)]
        script.write_text(code, encoding="utf-8")
        timeout = float((block.values("timeout") or ["300"])[0])
        process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, start_new_session=True)
        started.append(process)
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(process)
            output, _ = process.communicate()
            raise AssertionError(f"{block.name} did not finish in {timeout:g}s; its output:\n{output[-4000:]}") from None
        assert process.returncode == 0, (
            f"{block.name} exited with {process.returncode} as written ({shlex.join(command)}):\n{output[-4000:]}")
        return output
    finally:
        for process in reversed(started):
            _stop(process, signal.SIGINT)  # what the user's Ctrl-C does
        for server in servers:
            server.__exit__(None, None, None)


@pytest.mark.parametrize("block", _params())
def test_the_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    output = run_block(block, tmp_path)
    for pattern in block.values("expect"):
        assert re.search(pattern, output, re.M), f"{block.name}: output does not match {pattern!r}:\n{output[-3000:]}"
