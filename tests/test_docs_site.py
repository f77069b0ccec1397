"""The docs site: Sphinx builds ``docs/`` (the Markdown pages through MyST, the API reference from the
package's docstrings through autosummary) with every warning an error, every link between its pages
resolves (file and anchor), and headless Chromium renders the home page and ``TurnBudget``'s API page
with its example.  The build takes about a CPU-minute, once for the module.

Sphinx comes with the ``test`` extra; the browser part skips, saying why, only where no Chromium is
installed and not under CI (``CI=true``), where a missing Chromium fails instead."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = next((p for name in ("chromium", "chromium-browser", "google-chrome") if (p := shutil.which(name))), None)
UNDER_CI = os.environ.get("CI", "").strip().lower() in ("true", "1")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--dump-dom",
         "--virtual-time-budget=3000"]
TURN_BUDGET_PAGE = "api/generated/agentgym_budget.wrappers.budget.html"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built site's folder (``-W``: a warning fails the build, and so this fixture)."""
    pytest.importorskip("sphinx", reason="the docs site needs the test extra: pip install -e '.[test]'")
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                           str(ROOT / "docs"), str(out)], capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, f"the docs site did not build cleanly:\n{done.stdout[-3000:]}{done.stderr[-6000:]}"
    return out


class Links(HTMLParser):
    """Every ``href`` and every element ``id`` of one page."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.ids.add(str(found["id"]))
        if tag == "a" and found.get("href"):
            self.hrefs.append(str(found["href"]))


def parsed(page: Path) -> Links:
    links = Links()
    links.feed(page.read_text(encoding="utf-8"))
    return links


def test_every_docs_page_and_public_module_has_a_page(site: Path) -> None:
    for page in (ROOT / "docs").glob("*.md"):
        assert (site / f"{page.stem}.html").is_file(), f"{page.name} is not on the site (add it to docs/index.md)"
    modules = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
               for p in (ROOT / "agentgym_budget").rglob("*.py") if not any(s.startswith("_") and s != "__init__.py"
                                                                             for s in p.relative_to(ROOT).parts)}
    missing = sorted(m for m in modules if not (site / "api" / "generated" / f"{m}.html").is_file())
    assert not missing, f"modules without an API page: {missing}"


def test_every_link_between_the_sites_pages_resolves(site: Path) -> None:
    broken = []
    cache: dict[Path, Links] = {}
    for page in site.rglob("*.html"):
        if "_modules" in page.parts:  # viewcode's highlighted sources link only to each other
            continue
        for href in parsed(page).hrefs:
            parts = urlsplit(href)
            if parts.scheme or href.startswith("//"):
                continue  # outside the site (the offline build is not checked against the web)
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if not target.exists():
                broken.append(f"{page.relative_to(site)} -> {href}")
            elif parts.fragment and target.suffix == ".html":
                ids = cache.setdefault(target, parsed(target)).ids
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{page.relative_to(site)} -> {href} (no such anchor)")
    assert not broken, f"{len(broken)} broken links, e.g. {broken[:10]}"


def text_of(dom: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", dom)).replace("&gt;", ">").replace("&quot;", '"')


def rendered(page: Path, tmp_path: Path) -> str:
    if CHROMIUM is None:
        if UNDER_CI:
            pytest.fail("CI=true and no Chromium installed (Debian: apt-get install chromium)", pytrace=False)
        pytest.skip("no Chromium installed (Debian: apt-get install chromium; .ci/run installs it)")
    profile = tmp_path / f"profile-{page.stem}"
    done = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_chromium_renders_the_home_page_with_its_navigation(site: Path, tmp_path: Path) -> None:
    text = text_of(rendered(site / "index.html", tmp_path))
    for title in ("The turn budget", "Evaluation", "API reference"):
        assert title.lower() in text.lower(), f"{title!r} not on the home page"


def test_chromium_renders_turn_budgets_api_page_with_its_example(site: Path, tmp_path: Path) -> None:
    text = text_of(rendered(site / TURN_BUDGET_PAGE, tmp_path))
    assert "class agentgym_budget.wrappers.budget.TurnBudget" in text
    # the docstring's example, as the user reads it (doctest prompts and all)
    assert '>>> env = TurnBudget(gym.make("ALFWorld-v0"), budget=2, show_budget=True)' in text
    assert ">>> obs, info = env.reset(seed=0)" in text
