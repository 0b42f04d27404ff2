"""``dpadmm consensus gossip --epsilon --target multiclass --classes 0,1,2,3`` (e66f21e) with label-DP neighbours.
The fix says the classes are declared and "labels outside them count as no class" — but the CLI's
``resolve_target`` still reads the exact label column under ``--target multiclass``: it refuses a column with a
non-integer or missing label ("not all integers", "missing or infinite value(s)"), with fewer than two distinct
values ("needs labels of at least two classes"), and ``np.unique`` raises TypeError on a column that one non-numeric
label turned into mixed text.

Each side's outcome: the exit code (and the error's last line), or ``config.target``, ``config.classes`` and the
number of coefficients saved.

Held: a foreign integer label (7) changes nothing the run shows (plant: the estimator refusing foreign labels under
epsilon — caught).
Found, then fixed (the classes and their kind from --classes alone; labels in that kind, anything else no class; T4): one record 3 → 2.5, 3 → "x" (a crash, not even exit 2), or the only 1 among zeros → 0 (in
the declared classes!) is refused on one side only: ε = ∞ for that label.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import run_cli

pd = pytest.importorskip("pandas")


def _run(tmp_path, capsys, first, tag, rest="random"):
    rng = np.random.default_rng(0)
    paths = []
    for name in ("node0", "node1"):
        X = rng.normal(size=(200, 3))
        y = (rng.integers(0, 4, size=200) if rest == "random" else np.zeros(200, dtype=int)).astype(object)
        if name == "node0":
            y[0] = first
        p = tmp_path / f"{tag}_{name}.csv"
        pd.DataFrame({"x0": X[:, 0], "x1": X[:, 1], "x2": X[:, 2], "y": y}).to_csv(p, index=False)
        paths.append(p)
    out = tmp_path / f"out_{tag}"
    try:
        code, _, err = run_cli(["consensus", "gossip", "--node", paths[0], "--node", paths[1], "--epsilon", "1",
                                "--seed", "0", "--quiet", "--iterations", "5", "--out", out, "--target", "multiclass",
                                "--classes", "0,1,2,3"], capsys)
    except Exception as exc:  # a crash is an outcome too
        return "crash", type(exc).__name__
    if code != 0:
        return code, err.strip().splitlines()[-1:]
    m = json.loads((out / "metrics.json").read_text())
    saved = {k: v.shape for k, v in np.load(out / "model.npz").items()} if (out / "model.npz").is_file() else None
    return code, m.get("config", {}).get("target"), m.get("config", {}).get("classes"), repr(saved)


def test_a_foreign_integer_label_changes_nothing_the_run_shows(tmp_path, capsys):
    a, b = _run(tmp_path, capsys, 3, "d"), _run(tmp_path, capsys, 7, "d7")
    assert a[0] == 0 and a == b, (a, b)


@pytest.mark.parametrize("d_label, dp_label, rest", [(3, 2.5, "random"), (3, "x", "random"), (1, 0, "zeros")])
def test_one_label_does_not_decide_whether_the_run_runs(tmp_path, capsys, d_label, dp_label, rest):
    a = _run(tmp_path, capsys, d_label, "d", rest)
    b = _run(tmp_path, capsys, dp_label, "dp", rest)
    assert a[0] == b[0] == 0, (a, b)
