"""``{dpadmm-help} WORDS`` — the text ``dpadmm WORDS --help`` prints, run at build time, as a literal block.

The CLI reference therefore cannot drift from the CLI: every option, default and help line is the program's own.
"""

from __future__ import annotations

import os
import subprocess
import sys

from docutils import nodes
from sphinx.util.docutils import SphinxDirective


class DpadmmHelp(SphinxDirective):
    required_arguments = 0
    optional_arguments = 4
    has_content = False

    def run(self):
        argv = [sys.executable, "-m", "dpadmm", *self.arguments, "--help"]
        env = dict(os.environ, COLUMNS="100", NO_COLOR="1", TERM="dumb", PYTHONIOENCODING="utf-8")
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
        if done.returncode != 0:
            raise self.error(f"`dpadmm {' '.join(self.arguments)} --help` exited {done.returncode}: {done.stderr[-500:]}")
        text = "\n".join(line.rstrip() for line in done.stdout.splitlines()).strip("\n")
        block = nodes.literal_block(text, text)
        block["language"] = "text"
        return [block]


def setup(app):
    app.add_directive("dpadmm-help", DpadmmHelp)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
