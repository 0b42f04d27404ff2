"""``dpadmm vertical admm --target regression|count`` end to end (issue 41): the target inferred from the label column
with one line saying so when the run is not private (a private run declares its target: red team 2026-11-29, T1),
the labels-only protocol under ``--label-epsilon``, the metrics that fit the target beside
the mean predictor, the label party alone and pooled non-private (every key in docs/reference/metrics.md), and bad
options or label columns refused with one line, exit code 2 and nothing written."""

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


def _documented(key: str) -> bool:
    return f"`{key}`" in METRICS_PAGE or f"`{key}." in METRICS_PAGE


def _files(tmp_path, kind: str, n: int = 2500):
    """Two party CSVs (train, test) of a table whose label party holds 2 weak columns and party 2 three strong ones:
    counts (Poisson, log link) or amounts (linear, sd-5 noise)."""
    rng = np.random.default_rng(0)
    B = [rng.normal(size=(n, 2)), rng.normal(size=(n, 3))]
    if kind == "count":
        y = rng.poisson(np.exp(0.8 + 0.2 * B[0][:, 0] + 0.6 * B[1][:, 0] - 0.4 * B[1][:, 1]))
    else:
        y = 100.0 + 5.0 * B[0][:, 0] + 20.0 * B[1][:, 0] - 10.0 * B[1][:, 1] + 5.0 * rng.normal(size=n)
    cut = int(0.8 * n)
    train = write_party_files([b[:cut] for b in B], y[:cut], tmp_path / f"{kind}_train")
    test = write_party_files([b[cut:] for b in B], y[cut:], tmp_path / f"{kind}_test")
    return ["--party", train[0], "--party", train[1], "--test-party", test[0], "--test-party", test[1]]


def _run(tmp_path, capsys, kind, *extra):
    out = tmp_path / f"out_{kind}"
    code, stdout, err = run_cli(["vertical", "admm", *_files(tmp_path, kind), "--seed", "0", "--quiet", "--out", out,
                                 *extra], capsys)
    assert code == 0, err
    return json.loads((out / "metrics.json").read_text()), stdout, err, out


def test_declared_counts_labels_only_beat_the_label_party_alone(tmp_path, capsys):
    m, stdout, err, out = _run(tmp_path, capsys, "count", "--label-epsilon", "1", "--target", "count")
    assert "inferred" not in err
    f, b = m["final"], m["baselines"]
    assert m["config"]["target"] == "count" and m["privacy"]["epsilon"] == pytest.approx(1.0)
    assert m["privacy"]["sides"]["labels"]["protected"] and m["privacy"]["sides"]["labels"]["delta"] == 0.0
    missing = [k for k in _keys(m) if not _documented(k)]
    assert not missing, f"docs/reference/metrics.md does not name {missing}"
    # labels-only closes most of the gap between the label party alone and pooled non-private (measured 98%)
    alone, pooled = b["label_party_alone"]["poisson_deviance"], b["pooled_nonprivate"]["poisson_deviance"]
    assert alone - f["test_poisson_deviance"] > 0.5 * (alone - pooled), (f, b)
    assert f["test_poisson_deviance"] < b["mean_predictor"]["poisson_deviance"]
    assert "test Poisson deviance (n = 500): model" in stdout and "label party alone" in stdout
    assert (out / "model.npz").is_file()


def test_regression_is_inferred_and_the_non_private_fit_is_the_pooled_one(tmp_path, capsys):
    """Without a budget, ADMM sharing converges to the pooled ridge (the same λ): equal test RMSE to 1e-3."""
    m, stdout, err, _ = _run(tmp_path, capsys, "regression")
    assert "target: regression (inferred from the label column" in err
    f, b = m["final"], m["baselines"]
    assert m["privacy"]["private"] is False
    assert f["test_rmse"] == pytest.approx(b["pooled_nonprivate"]["rmse"], rel=1e-3)
    assert f["test_rmse"] < 0.5 * b["label_party_alone"]["rmse"] and "test R²" in stdout
    assert [k for k in _keys(m) if not _documented(k)] == []


@pytest.mark.parametrize("kind, extra, match", [
    ("regression", ["--epsilon", "1", "--target", "regression"], "feature-side privacy"),
    ("regression", ["--label-epsilon", "1", "--label-mechanism", "gaussian", "--target", "regression"],
     "randomized response on bins"),
    ("count", ["--label-epsilon", "1"], "a private run declares its target"),
    ("regression", ["--epsilon", "1"], "a private run declares its target"),
    ("count", ["--monitor"], "--monitor: for the binary target"),
    ("regression", ["--target", "count"], "non-negative integer labels"),
    ("count", ["--target", "ordinal"], "--target takes binary, regression, count or multiclass"),
    ("count", ["--target", "count", "--backend", "process"], "--backend process is for the binary target"),
])
def test_bad_options_and_labels_are_refused_with_one_line(tmp_path, capsys, kind, extra, match):
    out = tmp_path / "refused"
    code, _, err = run_cli(["vertical", "admm", *_files(tmp_path, kind, n=300), "--quiet", "--out", out, *extra],
                           capsys)
    assert code == 2 and match in err, err
    assert not out.exists()


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_a_libsvm_train_file_plain_or_gzipped_gives_the_binary_target(tmp_path, capsys, suffix):
    """The target of a non-private --train run is read off its labels as the fit reads them: a gzipped LIBSVM file
    (the bundled a9a.gz as given to --train) is decompressed, not decoded as text (CI 2026-11-29 failed on it)."""
    import gzip

    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 4))
    y = np.where(X[:, 0] + 0.5 * rng.normal(size=300) > 0, 1, -1)
    text = "".join(f"{lab:+d} " + " ".join(f"{j + 1}:{v:.4f}" for j, v in enumerate(row)) + "\n"
                   for lab, row in zip(y, X))
    path = tmp_path / f"train.svm{suffix}"
    path.write_bytes(gzip.compress(text.encode()) if suffix else text.encode())
    out = tmp_path / "out"
    code, stdout, err = run_cli(["vertical", "admm", "--train", path, "--parties", "2,2", "--iterations", "3", "--seed", "0", "--quiet",
                                 "--out", out], capsys)
    assert code == 0, err
    assert "regression" not in err and "count" not in err
    assert (out / "metrics.json").is_file()
