"""``dpadmm consensus gossip --target regression|multiclass`` end to end (issue 41): the target declared (a private
run never reads it off the labels: red team 2026-11-29, T1; a label column that is not yes/no without --target is
refused with the fix), the metrics that fit the target beside the mean predictor / class prior and
pooled non-private, and bad label columns refused with one line, exit code 2 and nothing written."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pandas as pd
import pytest

from conftest import run_cli

METRICS_PAGE = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "reference" / "metrics.md").read_text()


def _tables(tmp_path, kind: str, n: int = 1500):
    """Two node CSVs and a test CSV of an easy table: a linear label with small noise (regression) or three
    classes separated by two columns (multiclass)."""
    rng = np.random.default_rng(0)
    paths = []
    for name in ("node0", "node1", "test"):
        X = rng.normal(size=(n, 3))
        if kind == "regression":
            y = 10.0 + 3.0 * X[:, 0] - 2.0 * X[:, 1] + rng.normal(scale=0.5, size=n)
        else:
            y = np.argmax(np.column_stack([2 * X[:, 0], 2 * X[:, 1], -2 * X[:, 0] - 2 * X[:, 1]])
                          + 0.3 * rng.gumbel(size=(n, 3)), axis=1)
        p = tmp_path / f"{kind}_{name}.csv"
        pd.DataFrame({"x0": X[:, 0], "x1": X[:, 1], "x2": X[:, 2], "y": y}).to_csv(p, index=False)
        paths.append(p)
    return paths


def _run(tmp_path, capsys, kind, *extra):
    a, b, t = _tables(tmp_path, kind)
    out = tmp_path / f"out_{kind}"
    code, stdout, err = run_cli(["consensus", "gossip", "--node", a, "--node", b, "--test", t, "--epsilon", "1",
                                 "--seed", "0", "--quiet", "--out", out, *extra], capsys)
    assert code == 0, err
    return json.loads((out / "metrics.json").read_text()), stdout, err


def _documented(key: str) -> bool:
    return f"`{key}`" in METRICS_PAGE


def test_regression_beats_the_mean_predictor(tmp_path, capsys):
    m, stdout, err = _run(tmp_path, capsys, "regression", "--target", "regression")
    assert "inferred" not in err
    f = m["final"]
    for k in ("test_rmse", "test_mae", "test_r2", "test_mean_predictor_rmse", "test_mean_predictor_mae",
              "test_mean_predictor_r2", "test_mean_predictor_source", "pooled_test_rmse", "pooled_test_mae",
              "pooled_test_r2", "target_bounds", "n_test"):
        assert k in f and _documented(f"final.{k}"), k
    assert m["config"]["target"] == "regression" and m["privacy"]["private"] is True
    assert f["epsilon"] <= 1.0 + 1e-9
    assert f["pooled_test_rmse"] < f["test_rmse"] < f["test_mean_predictor_rmse"]
    assert f["test_r2"] > 0.0
    assert "test RMSE (n = 1,500)" in stdout


def test_multiclass_with_declared_classes_beats_the_class_prior(tmp_path, capsys):
    m, stdout, err = _run(tmp_path, capsys, "multiclass", "--target", "multiclass", "--classes", "0,1,2")
    assert "inferred" not in err
    f = m["final"]
    for k in ("test_accuracy", "test_log_loss", "test_class_prior_accuracy", "test_class_prior_log_loss",
              "test_class_prior_source", "pooled_test_accuracy", "pooled_test_log_loss"):
        assert k in f and _documented(f"final.{k}"), k
    assert m["config"]["classes"] == [0, 1, 2]
    assert f["test_accuracy"] > f["test_class_prior_accuracy"]
    assert f["pooled_test_accuracy"] >= f["test_accuracy"] - 0.02
    assert "test accuracy (n = 1,500)" in stdout


@pytest.mark.parametrize("kind, extra, reason", [
    ("regression", [], "a private binary run reads labels as 0/1 or -1/+1"),  # no inference: the target is declared
    ("regression", ["--target", "multiclass"], "--target multiclass needs --classes"),
    ("regression", ["--classes", "0,1"], "--classes is for --target multiclass"),
    ("regression", ["--target", "multiclass", "--classes", "0,0"], "at least two distinct classes"),
    ("nan", ["--target", "regression"], "missing or infinite value"),
])
def test_bad_label_columns_are_refused(tmp_path, capsys, kind, extra, reason):
    a, b, t = _tables(tmp_path, "regression", n=50)
    if kind == "nan":
        df = pd.read_csv(a)
        df.loc[3, "y"] = np.nan
        df.to_csv(a, index=False)
    out = tmp_path / "out"
    code, _, err = run_cli(["consensus", "gossip", "--node", a, "--node", b, "--test", t, "--epsilon", "1",
                            "--quiet", "--out", out, *extra], capsys)
    assert code == 2 and reason in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()
