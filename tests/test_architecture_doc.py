"""``docs/architecture.md`` names every module of the package, and no module that is gone.

Its "Layout" block lists, per part of the package, the part's modules (``evaluate.py``) and
sub-packages (``alfworld/``); its layer table names every layer ``tests/test_layering.py``
knows.  A module added, moved or removed without the doc fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

from test_layering import LAYERS, PACKAGE

DOC = PACKAGE.parent / "docs" / "architecture.md"
_NAME = re.compile(r"[A-Za-z_]\w*(?:\.py|/)")


def layout_block(text: str) -> list[str]:
    """The lines of the ``agentgym_budget/`` tree in the doc's "Layout" code block."""
    block = text.split("## Layout", 1)[1].split("```", 2)[1].splitlines()
    start = block.index("agentgym_budget/")
    lines = []
    for line in block[start + 1:]:
        if line and not line.startswith(" "):
            break  # the next top-level folder (tools/, tests/, ...)
        lines.append(line)
    return lines


def documented_names(lines: list[str]) -> dict[str, set[str]]:
    """``{part: names}``: per part (``""`` for the package's top level) the modules and folders named."""
    names: dict[str, set[str]] = {}
    part = ""
    for line in lines:
        found = _NAME.findall(re.sub(r"\([^)]*\)", "", line))  # "(DDP/FSDP)" describes, it names nothing
        if line.startswith("  ") and not line.startswith("   ") and found:
            first = found[0]
            part = first[:-1] if first.endswith("/") else ""
            found = found[1:] if first.endswith("/") else found
        names.setdefault(part, set()).update(found)
    return names


def real_names() -> dict[str, set[str]]:
    """``{part: names}`` of the package on disk: each part's modules and sub-packages."""
    def names_in(folder: Path) -> set[str]:
        modules = {p.name for p in folder.glob("*.py") if p.name != "__init__.py"}
        packages = {p.name + "/" for p in folder.iterdir() if (p / "__init__.py").is_file()}
        return modules | packages

    parts = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    real = {part: names_in(PACKAGE / part) for part in parts}
    real[""] = {name for name in names_in(PACKAGE) if not name.endswith("/")}
    return real


def test_the_parser_reads_parts_and_their_continuation_lines() -> None:
    lines = ["  a.py, b.py      top-level notes", "  eval/          x.py (the X/Y), y.py,", "                 z.py",
             "  envs/          base.py, alfworld/"]
    assert documented_names(lines) == {"": {"a.py", "b.py"}, "eval": {"x.py", "y.py", "z.py"},
                                       "envs": {"base.py", "alfworld/"}}


def test_the_layout_names_every_module_and_no_stale_one() -> None:
    documented, real = documented_names(layout_block(DOC.read_text(encoding="utf-8"))), real_names()
    missing = {part: sorted(real[part] - documented.get(part, set())) for part in real}
    stale = {part: sorted(documented[part] - real.get(part, set())) for part in documented}
    assert not any(missing.values()), f"docs/architecture.md's Layout does not name: {missing}"
    assert not any(stale.values()), f"docs/architecture.md's Layout names modules that do not exist: {stale}"


def test_the_layer_table_names_every_layer() -> None:
    text = DOC.read_text(encoding="utf-8")
    table = [line for line in text.split("## Two episode types")[0].splitlines() if line.startswith("| `")]
    named = {name for line in table for name in re.findall(r"`(\w+)`", line.split("|")[1])}
    assert named == {layer for layer in LAYERS if layer}
