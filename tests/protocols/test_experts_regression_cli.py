"""``dpadmm vertical experts --target regression`` (issue 41): a private run prints RMSE, MAE and R² beside the mean
predictor, the label party alone and pooled non-private; its metrics.json's ε recomputes from the noise multipliers
it lists; every option the target does not take, and a private run that does not declare its target or label range,
is one clear line with exit code 2 and nothing written."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import run_cli
from dpadmm.privacy.accountants import gaussian_epsilon


def _files(tmp_path, n=1500):
    from dpadmm.data import write_party_files

    rng = np.random.default_rng(0)
    blocks = [rng.normal(size=(n, 3)), rng.normal(size=(n, 2)) * 5 + 100]  # party 2 in raw units
    y = 50 + 3 * blocks[0][:, 0] + 2 * (blocks[1][:, 0] - 100) + rng.normal(size=n)
    k = int(0.8 * n)
    train = write_party_files([b[:k] for b in blocks], y[:k], tmp_path / "train")
    test = write_party_files([b[k:] for b in blocks], y[k:], tmp_path / "test")
    return ["vertical", "experts", "--party", train[0], "--party", train[1], "--test-party", test[0],
            "--test-party", test[1]]


def test_a_private_regression_run_prints_its_figures_beside_the_baselines(tmp_path, capsys):
    out = tmp_path / "o"
    code, text, err = run_cli(_files(tmp_path) + ["--target", "regression", "--epsilon", "1", "--label-range",
                                                  "0,100", "--seed", "0", "--out", out], capsys)
    assert code == 0, err
    for what in ("RMSE", "MAE", "R²"):
        assert f"test {what} (n = 300): model" in text
    assert "mean predictor" in text and "label party alone" in text and "pooled non-private" in text
    m = json.loads((out / "metrics.json").read_text())
    f, b = m["final"], m["baselines"]
    assert f["calibration"]["choice"] == "stacked"  # party 2 carries most of the signal
    assert f["test_rmse"] < b["label_party_alone"]["rmse"] and b["pooled_nonprivate"]["rmse"] < f["test_rmse"]
    assert m["config"]["target"] == "regression" and m["config"]["label_range"] == [0.0, 100.0]
    zs = [r["noise_multiplier"] for r in m["privacy"]["releases"]]
    assert m["privacy"]["epsilon"] == pytest.approx(gaussian_epsilon(zs, 1e-5, "pld"), rel=1e-6)
    assert m["privacy"]["epsilon"] == pytest.approx(1.0, rel=1e-3)
    assert m["privacy"]["sides"]["labels"]["protected"] is False


def test_a_non_private_run_infers_the_target_with_one_line(tmp_path, capsys):
    code, text, err = run_cli(_files(tmp_path, 600) + ["--seed", "0"], capsys)
    assert code == 0, err
    assert "target: regression (inferred" in err and "experts, regression" in text


@pytest.mark.parametrize("extra, match", [
    (["--epsilon", "1"], "declares its target"),
    (["--target", "regression", "--epsilon", "1"], "--label-range"),
    (["--target", "regression", "--label-epsilon", "1"], "labels-only"),
    (["--target", "regression", "--label-range", "5"], "--label-range 5"),
    (["--target", "regression", "--label-range", "9,1"], "LO < HI"),
    (["--target", "count"], "--target count"),
    (["--target", "regression", "--loss", "poisson"], "loss"),
    (["--target", "binary", "--label-range", "0,1"], "--target regression"),
    (["--target", "regression", "--min-effective-rows", "0"], "min-effective-rows"),
    (["--target", "regression", "--backend", "grpc", "--peer", "party2=localhost:1"], "binary target"),
])
def test_refusals_name_their_reason(tmp_path, capsys, extra, match):
    out = tmp_path / "bad"
    code, _, err = run_cli(_files(tmp_path, 300) + extra + ["--out", out], capsys)
    assert code == 2 and match in err, err
    assert not out.exists()
