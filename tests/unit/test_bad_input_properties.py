"""Property-based bad input (hypothesis): loaders and estimators raise the library's own
exception with a one-line message — never a numpy/pandas error, never a silent fit."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from dpadmm import DPADMMError, VerticalLogisticRegression
from dpadmm.data import read_party_files

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _one_line(exc: Exception) -> None:
    msg = str(exc)
    assert msg and "\n" not in msg and len(msg) < 400


@SETTINGS
@given(n=st.integers(4, 30), d1=st.integers(1, 4), d2=st.integers(1, 4), data=st.data())
def test_nonfinite_values_anywhere_are_refused(n, d1, d2, data):
    rng = np.random.default_rng(0)
    B = [rng.normal(size=(n, d1)), rng.normal(size=(n, d2))]
    y = np.where(np.arange(n) % 2 == 0, 1, -1)
    m = data.draw(st.integers(0, 1))
    i = data.draw(st.integers(0, n - 1))
    j = data.draw(st.integers(0, B[m].shape[1] - 1))
    B[m][i, j] = data.draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    with pytest.raises(DPADMMError) as info:
        VerticalLogisticRegression(max_iter=2, tol=0).fit(B, y)
    _one_line(info.value)
    assert "NaN or infinite" in str(info.value)


@SETTINGS
@given(n1=st.integers(2, 20), n2=st.integers(2, 20), ny=st.integers(2, 20))
def test_row_count_mismatches_are_refused(n1, n2, ny):
    if n1 == n2 == ny:
        return
    rng = np.random.default_rng(1)
    B = [rng.normal(size=(n1, 2)), rng.normal(size=(n2, 3))]
    y = np.where(np.arange(ny) % 2 == 0, 1, -1)
    with pytest.raises(DPADMMError) as info:
        VerticalLogisticRegression(max_iter=2, tol=0).fit(B, y)
    _one_line(info.value)


@SETTINGS
@given(labels=arrays(np.int64, st.integers(5, 20), elements=st.integers(-3, 3)))
def test_labels_must_be_binary(labels):
    n = len(labels)
    B = [np.random.default_rng(2).normal(size=(n, 2))]
    if len(np.unique(labels)) == 2:
        VerticalLogisticRegression(max_iter=2, tol=0).fit(B, labels)  # fine
        return
    with pytest.raises(DPADMMError) as info:
        VerticalLogisticRegression(max_iter=2, tol=0).fit(B, labels)
    _one_line(info.value)
    assert "two classes" in str(info.value)


@SETTINGS
@given(eps=st.floats(allow_nan=True, allow_infinity=True), delta=st.floats(allow_nan=True, allow_infinity=True))
def test_budget_validation(eps, delta):
    B = [np.eye(4)]
    y = np.array([1, -1, 1, -1])
    good = (np.isfinite(eps) and eps > 0) and (np.isfinite(delta) and 0 < delta < 1)
    if good:
        return
    with pytest.raises(DPADMMError) as info:
        VerticalLogisticRegression(epsilon=eps, delta=delta, max_iter=1).fit(B, y)
    _one_line(info.value)


@SETTINGS
@given(drop=st.lists(st.integers(0, 7), min_size=1, max_size=4, unique=True), extra=st.booleans())
def test_party_files_with_mismatched_ids(tmp_path_factory, drop, extra):
    d = tmp_path_factory.mktemp("p")
    ids = np.arange(8)
    rng = np.random.default_rng(3)
    pd.DataFrame({"id": ids, "y": ids % 2, "a": rng.normal(size=8)}).to_csv(d / "p1.csv", index=False)
    keep = np.setdiff1d(ids, drop)
    ids2 = np.concatenate([keep, [100]]) if extra else keep
    pd.DataFrame({"id": ids2, "b": rng.normal(size=len(ids2))}).to_csv(d / "p2.csv", index=False)
    with pytest.raises(DPADMMError) as info:
        read_party_files([d / "p1.csv", d / "p2.csv"])
    _one_line(info.value)
    assert "ids do not match" in str(info.value)


@SETTINGS
@given(content=st.text(max_size=200))
def test_party_file_garbage_never_crashes_uncontrolled(tmp_path_factory, content):
    d = tmp_path_factory.mktemp("g")
    (d / "p1.csv").write_text(content)
    (d / "p2.csv").write_text("id,b\n0,1.0\n")
    try:
        read_party_files([d / "p1.csv", d / "p2.csv"])
    except DPADMMError as exc:
        _one_line(exc)
