"""Loaders: LIBSVM width, bundled a9a, partitioning, normalisation, party files."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dpadmm.data import (
    load_libsvm, normalize_rows, partition_columns, read_party_files, row_norms, write_party_files,
)
from dpadmm.exceptions import DataFileError, InvalidDataError, InvalidParameterError


def test_bundled_a9a_shapes_and_labels(a9a_full):
    X, y, Xt, yt = a9a_full
    assert X.shape == (32561, 123) and Xt.shape == (16281, 123)
    assert set(np.unique(y)) == {-1.0, 1.0}
    assert (y == 1).sum() == 7841 and (yt == 1).sum() == 3846  # PROVENANCE.md counts
    assert X.sum() == 451592 and Xt.sum() == 225731
    assert Xt[:, 122].sum() == 0  # a9a.t never uses feature 123


def test_libsvm_honours_n_features(tmp_path):
    p = tmp_path / "t.svm"
    p.write_text("+1 1:1 3:1\n-1 2:1\n")
    X, y = load_libsvm(p)
    assert X.shape == (2, 3)
    X, _ = load_libsvm(p, n_features=5)
    assert X.shape == (2, 5)
    with pytest.raises(DataFileError, match="not found"):
        load_libsvm(tmp_path / "missing.svm")
    bad = tmp_path / "bad.svm"
    bad.write_text("this is not libsvm\n")
    with pytest.raises(DataFileError, match="not a valid LIBSVM"):
        load_libsvm(bad)


def test_partition_and_normalize(rng):
    X = rng.normal(size=(10, 7))
    blocks = partition_columns(X, [3, 4])
    np.testing.assert_array_equal(np.hstack(blocks), X)
    with pytest.raises(InvalidParameterError, match="sum to 6 but the data has 7"):
        partition_columns(X, [3, 3])
    Z = normalize_rows(np.vstack([X[:, :3], np.zeros((1, 3))]))
    np.testing.assert_allclose(row_norms(Z)[:-1], 1.0)
    assert row_norms(Z)[-1] == 0.0


def test_party_files_roundtrip_and_join(tmp_path, rng):
    blocks = [rng.normal(size=(6, 2)), rng.normal(size=(6, 3))]
    y = np.array([1, -1, 1, 1, -1, -1])
    paths = write_party_files(blocks, y, tmp_path, ids=[f"u{i}" for i in range(6)])
    # shuffle party 2's rows: the join must realign them on the id
    df = pd.read_csv(paths[1]).sample(frac=1.0, random_state=0)
    df.to_csv(paths[1], index=False)
    got, labels, ids, names = read_party_files(paths, id_column="id", label_column="y")
    np.testing.assert_allclose(got[0], blocks[0])
    np.testing.assert_allclose(got[1], blocks[1])
    np.testing.assert_array_equal(labels, y)
    assert list(ids) == [f"u{i}" for i in range(6)]


@pytest.fixture
def party_paths(tmp_path, rng):
    blocks = [rng.normal(size=(5, 2)), rng.normal(size=(5, 2))]
    return write_party_files(blocks, [1, -1, 1, -1, 1], tmp_path)


def test_party_file_errors(tmp_path, party_paths):
    p1, p2 = party_paths
    df2 = pd.read_csv(p2)
    df2.loc[0, "id"] = 999
    df2.to_csv(tmp_path / "mismatch.csv", index=False)
    with pytest.raises(InvalidDataError, match="ids do not match"):
        read_party_files([p1, tmp_path / "mismatch.csv"])
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(DataFileError, match="is empty"):
        read_party_files([p1, tmp_path / "empty.csv"])
    pd.read_csv(p2).iloc[:0].to_csv(tmp_path / "header_only.csv", index=False)
    with pytest.raises(DataFileError, match="no rows"):
        read_party_files([p1, tmp_path / "header_only.csv"])
    pd.read_csv(p1).drop(columns=["y"]).to_csv(tmp_path / "nolabel.csv", index=False)
    with pytest.raises(DataFileError, match="no label column"):
        read_party_files([tmp_path / "nolabel.csv", p2])
    df1 = pd.read_csv(p1)
    df1.loc[2, "f0"] = np.nan
    df1.to_csv(tmp_path / "nan.csv", index=False)
    with pytest.raises(InvalidDataError, match="missing or non-finite"):
        read_party_files([tmp_path / "nan.csv", p2])
    with pytest.raises(DataFileError, match="not found"):
        read_party_files([p1, tmp_path / "nope.csv"])
    with pytest.raises(DataFileError, match="no id column"):
        read_party_files([p1, p2], id_column="key")
