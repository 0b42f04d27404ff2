"""``dpadmm vertical admm --target multiclass --classes A,B,C`` end to end (issue 41): the labels-only k-ary
randomized-response protocol (:class:`~dpadmm.estimators.label_classification.LabelPrivateVerticalClassifier`) under
``--label-epsilon``, accuracy and log loss beside the class prior, the label party alone and pooled non-private (every
key in docs/reference/metrics.md), and refusals (no ``--classes`` under privacy, a label outside the classes) with one
line, exit code 2 and nothing written."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from conftest import run_cli
from dpadmm.data import write_party_files

METRICS_PAGE = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "reference" / "metrics.md").read_text()


def _keys(d: dict, prefix: str = "", depth: int = 2) -> list[str]:
    out = []
    for k, v in d.items():
        out.append(prefix + k)
        if isinstance(v, dict) and depth > 1 and k != "config":
            out += _keys(v, prefix + k + ".", depth - 1)
    return out


def _files(tmp_path, n: int = 900, labels=("a", "b", "c")):
    """Train and test party CSVs of three classes: the label party's columns decide little, party 2's a lot."""
    rng = np.random.default_rng(0)
    A, B = rng.normal(size=(n, 2)), rng.normal(size=(n, 3))
    logits = np.column_stack([0.3 * A[:, 0] + 2.0 * B[:, 0], 0.3 * A[:, 1] + 2.0 * B[:, 1], 1.5 * B[:, 2]])
    y = np.asarray(labels)[np.argmax(logits + rng.gumbel(size=logits.shape), axis=1)]
    cut = 2 * n // 3
    train = write_party_files([A[:cut], B[:cut]], y[:cut], tmp_path / "train")
    test = write_party_files([A[cut:], B[cut:]], y[cut:], tmp_path / "test")
    return ["--party", train[0], "--party", train[1], "--test-party", test[0], "--test-party", test[1]]


def test_private_multiclass_beats_the_class_prior_and_the_label_party_alone(tmp_path, capsys):
    out = tmp_path / "out"
    code, stdout, err = run_cli(["vertical", "admm", *_files(tmp_path), "--target", "multiclass", "--classes", "a,b,c",
                                 "--label-epsilon", "2", "--seed", "0", "--out", out], capsys)
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    f, b = m["final"], m["baselines"]
    missing = [k for k in _keys(m) if f"`{k}`" not in METRICS_PAGE and f"`{k}." not in METRICS_PAGE]
    assert not missing, f"docs/reference/metrics.md does not name {missing}"
    assert m["config"]["classes"] == ["a", "b", "c"] and m["privacy"]["epsilon"] == 2.0
    assert f["label_release"]["n_classes"] == 3
    # k-RR at ε = 2 over 3 classes keeps the true label with probability e²/(e² + 2) ≈ 0.79: the joint model still
    # sees party 2's columns, which decide the class; the label party alone and the prior do not
    assert f["test_accuracy"] > b["label_party_alone"]["accuracy"] + 0.1, (f, b)
    assert f["test_accuracy"] > b["class_prior"]["accuracy"] + 0.2
    assert f["test_log_loss"] < b["class_prior"]["log_loss"]
    assert b["pooled_nonprivate"]["accuracy"] >= f["test_accuracy"] - 0.05
    assert "test accuracy (n = 300): model" in stdout and "class prior" in stdout and "test log loss" in stdout
    npz = np.load(out / "model.npz")
    assert npz["coef_party1"].shape == (2, 3) and npz["coef_party2"].shape == (3, 3) and npz["intercept"].shape == (3,)


def test_infinite_budget_equals_the_non_private_run(tmp_path, capsys):
    """Without --label-epsilon the same protocol runs on the exact labels, classes read off them (non-private)."""
    out = tmp_path / "np"
    code, _, err = run_cli(["vertical", "admm", *_files(tmp_path, n=600), "--target", "multiclass", "--seed", "0",
                            "--quiet", "--out", out], capsys)
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    assert m["config"]["classes"] == ["a", "b", "c"] and m["privacy"]["private"] is False
    assert "label_release" not in m["final"]


@pytest.mark.parametrize("extra, match", [
    (["--label-epsilon", "1"], "--target multiclass with --label-epsilon needs --classes"),
    (["--label-epsilon", "1", "--classes", "a,b"], "a label outside --classes a,b (e.g. c)"),
    (["--classes", "a,b"], "a label outside --classes a,b (e.g. c)"),
    (["--label-epsilon", "1", "--classes", "a,a"], "at least two distinct classes"),
    (["--label-epsilon", "1", "--classes", "a,b,c", "--no-intercept"], "--no-intercept is not available"),
])
def test_bad_multiclass_runs_are_refused_with_one_line(tmp_path, capsys, extra, match):
    out = tmp_path / "refused"
    code, _, err = run_cli(["vertical", "admm", *_files(tmp_path, n=90), "--target", "multiclass", "--quiet", "--out",
                            out, *extra], capsys)
    assert code == 2 and match in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_outside_label_refused_alike_on_neighbouring_columns(tmp_path, capsys):
    """Two columns one label apart inside the classes a,b,c, each with one label d: the same refusal."""
    seen = []
    for tag, first in (("b", "b"), ("c", "c")):
        rng = np.random.default_rng(0)
        y = np.array(["a"] * 60, dtype=object)
        y[0], y[-1] = first, "d"
        files = write_party_files([rng.normal(size=(60, 2)), rng.normal(size=(60, 2))], y, tmp_path / tag)
        code, _, err = run_cli(["vertical", "admm", "--party", files[0], "--party", files[1], "--target", "multiclass",
                                "--classes", "a,b,c", "--label-epsilon", "1", "--quiet"], capsys)
        assert code == 2, err
        seen.append(" ".join(err.split()))
    assert seen[0] == seen[1], seen
