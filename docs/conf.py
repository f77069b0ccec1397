"""Sphinx configuration of the docs site: the Markdown pages of docs/ (MyST) and an API reference
generated from the package's docstrings (autodoc + napoleon), built offline with furo, the theme
Gymnasium's site uses.  Build: ``python -m sphinx -W --keep-going -b html docs docs/_build/html``."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's package, not an installed copy

project = "agentgym-budget"
author = "agentgym-budget developers"
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.viewcode",
              "sphinx.ext.autosummary"]
# autosummary writes a page per module but never removes one: a module moved or deleted since the last build
# would leave a page that fails to import, so each build starts from no generated pages.
shutil.rmtree(Path(__file__).parent / "api" / "generated", ignore_errors=True)
autosummary_generate = True  # one page per module, from the package itself: a new module needs no edit here. A package page shows
# its docstring and its modules; each member is documented once, on its own module's page
autosummary_imported_members = False
templates_path = ["_templates"]  # module pages with every member documented, not just listed
# verl is not part of the [all] extra (it pins an older transformers): its adapter is documented from a mock
autodoc_mock_imports = ["verl"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "data"]
html_theme = "furo"
html_title = "agentgym-budget"
myst_heading_anchors = 4  # the pages link to each other's sections by their GitHub-style anchors
myst_enable_extensions = ["colon_fence"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
# Methods without a docstring of their own (TextEnv.step) would show Gymnasium's numpy-style text.
autodoc_inherit_docstrings = False
# A short name that several modules define (``text``, ``seed``) resolves to one of them; say so
# nowhere else: the build's other warnings stay errors.
suppress_warnings = ["ref.python"]
