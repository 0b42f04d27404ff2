"""Sphinx configuration of the dpadmm documentation (MyST Markdown pages, furo theme).

Build: ``python -m sphinx -W -b html docs docs/_build/html`` (warnings are errors). The API reference is generated
from the docstrings (autodoc); the CLI reference runs ``dpadmm <command> --help`` at build time (``_ext/clihelp.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent / "src"))  # document this checkout even when it is not installed

project = "dpadmm"
author = "the dpadmm authors"
copyright = "2026, the dpadmm authors"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "clihelp",
]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "Thumbs.db", ".DS_Store"]
myst_enable_extensions = ["dollarmath", "deflist"]
myst_heading_anchors = 3
html_theme = "furo"
html_title = "dpadmm"

autodoc_member_order = "bysource"
autodoc_typehints = "none"  # the docstrings say what the parameters are; signatures stay readable
napoleon_numpy_docstring = True
napoleon_google_docstring = False


def _skip_sklearn_plumbing(app, what, name, obj, skip, options):
    """scikit-learn's metadata-routing methods (``set_fit_request`` …) are inherited plumbing, documented by
    scikit-learn; leaving them out keeps the reference to dpadmm's own surface."""
    if name == "get_metadata_routing" or (name.startswith("set_") and name.endswith("_request")):
        return True
    return skip


def setup(app):
    app.connect("autodoc-skip-member", _skip_sklearn_plumbing)
