"""The bundled Adult data and the [Zhang, §5] preprocessing (docs/algorithms.md §2)."""

from __future__ import annotations

import gzip
import hashlib
from importlib import resources

import numpy as np
import pytest

from dpadmm.data import load_adult
from dpadmm.data.adult import CATEGORICAL, NUMERIC

SHA256 = {  # of the uncompressed UCI originals (PROVENANCE)
    "adult.data.gz": "5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d",
    "adult.test.gz": "a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05",
    "adult.names.gz": "c248284c0b5de30c9e1958d6cdd168a34a654758b620e68f46aefa83fc0a576a",
}


@pytest.mark.parametrize("name", sorted(SHA256))
def test_bundled_files_are_the_uci_originals(name):
    with resources.as_file(resources.files("dpadmm.data") / "_bundled" / name) as p:
        raw = gzip.decompress(p.read_bytes())
    assert hashlib.sha256(raw).hexdigest() == SHA256[name]


@pytest.fixture(scope="module")
def adult():
    return load_adult(return_names=True)


def test_shape_labels_and_norms(adult):
    X, y, names = adult
    # 30,162 complete train rows + 15,060 complete test rows; 6 numeric + 98 one-hot columns
    assert X.shape == (45222, 104) and len(names) == 104
    assert set(np.unique(y)) == {-1.0, 1.0}
    assert int((y > 0).sum()) == 7508 + 3700  # >50K among complete rows (train + test)
    norms = np.linalg.norm(X, axis=1)
    assert norms.max() <= 1.0 + 1e-12 and norms.min() > 0.99  # every row ends with norm 1 (step 4)
    assert X.min() >= 0.0


def test_one_hot_groups_have_one_active_level(adult):
    X, _, names = adult
    for col in CATEGORICAL:
        cols = [i for i, n in enumerate(names) if n.startswith(col + "=")]
        assert len(cols) >= 2
        assert np.all((X[:, cols] > 0).sum(axis=1) == 1), col
    assert names[:len(NUMERIC)] == list(NUMERIC)


def test_column_scaling_before_row_scaling(adult):
    X, _, _ = adult
    # after step 3 every column has max 1; step 4 divides row r by its norm n_r, so max_r X_rj n_r = 1
    Xb, _ = load_adult(bias=True)
    assert Xb.shape == (45222, 105)
    n = 1.0 / Xb[:, -1]  # the bias column is 1 before row scaling, so 1/X_r,bias = n_r
    np.testing.assert_allclose((Xb * n[:, None]).max(axis=0), 1.0, rtol=1e-12)


def test_returns_copies(adult):
    X1, _ = load_adult()
    X1[0, 0] = 123.0
    X2, _ = load_adult()
    assert X2[0, 0] != 123.0
