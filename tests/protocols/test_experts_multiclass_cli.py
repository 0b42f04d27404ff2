"""``dpadmm vertical experts --target multiclass``: a private run prints its figures beside the baselines and writes
metrics whose ε recomputes from the release; refusals name their reason (exit code 2, nothing written)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import run_cli
from dpadmm.privacy.accountants import gaussian_epsilon


def _files(tmp_path, n=1500):
    from dpadmm.data import write_party_files

    rng = np.random.default_rng(0)
    blocks = [rng.normal(size=(n, 3)), rng.normal(size=(n, 3))]
    s = np.column_stack([blocks[0][:, 0], 2 * blocks[1][:, 0], 2 * blocks[1][:, 1], np.zeros(n)])
    y = np.array(list("abcd"))[np.argmax(s + rng.gumbel(size=s.shape), axis=1)]
    k = int(0.8 * n)
    train = write_party_files([b[:k] for b in blocks], y[:k], tmp_path / "train")
    test = write_party_files([b[k:] for b in blocks], y[k:], tmp_path / "test")
    return ["vertical", "experts", "--party", train[0], "--party", train[1], "--test-party", test[0],
            "--test-party", test[1], "--seed", "0"]


def test_a_private_multiclass_run_prints_its_figures_beside_the_baselines(tmp_path, capsys):
    out = tmp_path / "run"
    code, text, err = run_cli(_files(tmp_path) + ["--target", "multiclass", "--classes", "a,b,c,d", "--epsilon", "1",
                                                  "--label-epsilon", "1", "--out", out], capsys)
    assert code == 0, err
    assert "test log loss" in text and "label party alone" in text and "class prior" in text
    m = json.loads((out / "metrics.json").read_text())
    assert m["config"]["classes"] == ["a", "b", "c", "d"] and m["final"]["label_release"]["n_classes"] == 4
    zs = [r["noise_multiplier"] for r in m["privacy"]["releases"]]
    assert m["privacy"]["epsilon"] == pytest.approx(gaussian_epsilon(zs, 1e-5, "pld"), rel=1e-6)
    assert m["final"]["test_log_loss"] < m["baselines"]["label_party_alone"]["log_loss"]


@pytest.mark.parametrize("extra, match", [
    (["--target", "multiclass", "--epsilon", "1"], "--classes"),
    (["--target", "multiclass", "--label-epsilon", "1"], "--classes"),
    (["--classes", "a,b", "--epsilon", "1"], "--target multiclass"),
    (["--target", "multiclass", "--classes", "a,b,c"], "outside --classes"),
])
def test_refusals_name_their_reason(tmp_path, capsys, extra, match):
    out = tmp_path / "run"
    code, _, err = run_cli(_files(tmp_path, n=300) + extra + ["--out", out], capsys)
    assert code == 2 and match in err, err
    assert not out.exists()
