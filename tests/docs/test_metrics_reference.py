"""docs/reference/metrics.md names every key a vertical run writes to metrics.json (to two levels, beside
``config``, which holds the settings): a key added to the output without a line in the reference fails here."""

from __future__ import annotations

import json

import numpy as np

from conftest import run_cli
from doc_pages import ROOT

PAGE = (ROOT / "docs" / "reference" / "metrics.md").read_text()


def _keys(d: dict, prefix: str = "", depth: int = 2) -> list[str]:
    out = []
    for k, v in d.items():
        out.append(prefix + k)
        if isinstance(v, dict) and depth > 1 and k != "config":
            out += _keys(v, prefix + k + ".", depth - 1)
    return out


def _documented(key: str) -> bool:
    """The key appears in backticks, alone (`final.test_auc`) or as the start of a documented path
    (`baselines.base_rate.test_log_loss` names `baselines.base_rate`)."""
    return f"`{key}`" in PAGE or f"`{key}." in PAGE


def test_every_vertical_metrics_key_is_documented(tmp_path, capsys):
    from dpadmm.data import write_party_files

    rng = np.random.default_rng(0)
    blocks = [rng.normal(size=(400, 3)), rng.normal(size=(400, 2))]
    y = np.where(blocks[0][:, 0] + blocks[1][:, 0] + rng.normal(size=400) > 0, 1, -1)
    train = write_party_files([b[:300] for b in blocks], y[:300], tmp_path / "train")
    test = write_party_files([b[300:] for b in blocks], y[300:], tmp_path / "test")
    for extra in (["--label-epsilon", "1"], ["--epsilon", "5", "--label-epsilon", "1"]):
        out = tmp_path / f"run{len(extra)}"
        code, _, err = run_cli(["vertical", "admm", "--party", train[0], "--party", train[1], "--test-party", test[0],
                                "--test-party", test[1], "--seed", "0", "--quiet", "--out", out, *extra], capsys)
        assert code == 0, err
        metrics = json.loads((out / "metrics.json").read_text())
        missing = [k for k in _keys(metrics) if not _documented(k)]
        assert not missing, f"docs/reference/metrics.md does not name {missing}"


def test_every_experts_regression_metrics_key_is_documented(tmp_path, capsys):
    from dpadmm.data import write_party_files

    rng = np.random.default_rng(0)
    blocks = [rng.normal(size=(400, 3)), rng.normal(size=(400, 2))]
    y = 10 + blocks[0][:, 0] + 2 * blocks[1][:, 0] + rng.normal(size=400)
    train = write_party_files([b[:300] for b in blocks], y[:300], tmp_path / "train")
    test = write_party_files([b[300:] for b in blocks], y[300:], tmp_path / "test")
    out = tmp_path / "run"
    code, _, err = run_cli(["vertical", "experts", "--party", train[0], "--party", train[1], "--test-party", test[0],
                            "--test-party", test[1], "--target", "regression", "--epsilon", "1", "--label-epsilon",
                            "1", "--label-range", "0,20", "--seed", "0", "--quiet", "--out", out], capsys)
    assert code == 0, err
    metrics = json.loads((out / "metrics.json").read_text())
    missing = [k for k in _keys(metrics) if not _documented(k)]
    assert not missing, f"docs/reference/metrics.md does not name {missing}"


def test_every_experts_multiclass_metrics_key_is_documented(tmp_path, capsys):
    from dpadmm.data import write_party_files

    rng = np.random.default_rng(0)
    blocks = [rng.normal(size=(400, 3)), rng.normal(size=(400, 2))]
    s = np.column_stack([blocks[0][:, 0], 2 * blocks[1][:, 0], np.zeros(400)])
    y = np.array(["a", "b", "c"])[np.argmax(s + rng.gumbel(size=s.shape), axis=1)]
    train = write_party_files([b[:300] for b in blocks], y[:300], tmp_path / "train")
    test = write_party_files([b[300:] for b in blocks], y[300:], tmp_path / "test")
    out = tmp_path / "run"
    code, _, err = run_cli(["vertical", "experts", "--party", train[0], "--party", train[1], "--test-party", test[0],
                            "--test-party", test[1], "--target", "multiclass", "--classes", "a,b,c", "--epsilon", "1",
                            "--label-epsilon", "1", "--seed", "0", "--quiet", "--out", out], capsys)
    assert code == 0, err
    metrics = json.loads((out / "metrics.json").read_text())
    missing = [k for k in _keys(metrics) if not _documented(k)]
    assert not missing, f"docs/reference/metrics.md does not name {missing}"
