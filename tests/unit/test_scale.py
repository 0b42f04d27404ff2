"""Scale: sparse blocks stay sparse end to end; large blocks need no d × d matrix (issue 13).

No timing thresholds here (benchmarks/bench_scale.py measures time); the memory test bounds
allocations traced by tracemalloc, which is deterministic.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

from dpadmm import InvalidDataError, VerticalLogisticRegression, VerticalLinearRegression
from dpadmm._validation import as_float_matrix
from dpadmm.algorithms.vertical import party as vs
from dpadmm.data import normalize_rows, partition_columns, row_norms
from dpadmm.kernels import L2
from dpadmm.kernels.linalg import EIGH_MAX_DIM


def sparse_vertical(n, d, k=4, parties=2, seed=0):
    """Binary sparse party blocks (k non-zeros per row per party) and logistic labels."""
    rng = np.random.default_rng(seed)
    blocks = []
    for _ in range(parties):
        width = d // k
        cols = (np.arange(k) * width)[None, :] + rng.integers(0, width, size=(n, k))
        indptr = np.arange(0, n * k + 1, k)
        blocks.append(sp.csr_matrix((np.ones(n * k), cols.ravel(), indptr), shape=(n, d)))
    s = sum(B @ rng.normal(size=d) for B in blocks)
    y = np.where(rng.random(n) < 1.0 / (1.0 + np.exp(-s)), 1, 0)
    return blocks, y


@pytest.fixture
def no_densify(monkeypatch):
    """Densifying a non-square float sparse matrix (a data block; the eigh solver's small d × d Gram
    matrix is square and allowed) raises."""
    for cls in (sp.csr_matrix, sp.csc_matrix, sp.coo_matrix, sp.csr_array, sp.csc_array, sp.coo_array):
        for meth in ("toarray", "todense"):
            orig = getattr(cls, meth)

            def refuse(self, *args, _orig=orig, **kwargs):
                if self.shape[0] != self.shape[1] and self.dtype.kind == "f":
                    raise AssertionError(f"a sparse {self.shape} matrix was densified")
                return _orig(self, *args, **kwargs)

            monkeypatch.setattr(cls, meth, refuse)


# ----------------------------------------------------------------------------- validation
def test_as_float_matrix_keeps_sparse_and_checks_values():
    X = sp.random(50, 30, density=0.1, format="coo", random_state=np.random.RandomState(0)).astype(np.float32)
    A = as_float_matrix("X", X, accept_sparse=True)
    assert sp.isspmatrix_csr(A) and A.dtype == np.float64
    np.testing.assert_allclose(A.toarray(), X.toarray())
    C = sp.csr_matrix(np.ones((3, 4)))
    assert as_float_matrix("X", C, accept_sparse=True) is C  # already float64 CSR: no copy
    assert isinstance(as_float_matrix("X", C), np.ndarray)  # without accept_sparse: dense, as before
    bad = sp.csr_matrix(np.eye(4))
    bad.data[2] = np.nan
    with pytest.raises(InvalidDataError, match=r"row 2, column 2"):
        as_float_matrix("X", bad, accept_sparse=True)
    with pytest.raises(InvalidDataError, match="empty"):
        as_float_matrix("X", sp.csr_matrix((0, 3)), accept_sparse=True)


def test_partition_and_row_helpers_stay_sparse(no_densify):
    rng = np.random.default_rng(0)
    dense = rng.normal(size=(20, 7)) * (rng.random((20, 7)) < 0.3)
    dense[3] = 0.0
    X = sp.csr_matrix(dense)
    blocks = partition_columns(X, (4, 3))
    assert all(sp.issparse(b) for b in blocks)
    for b, ref in zip(blocks, partition_columns(dense, (4, 3))):
        assert (b != sp.csr_matrix(ref)).nnz == 0
        np.testing.assert_allclose(row_norms(b), row_norms(ref))
    nb = normalize_rows(blocks[0])
    assert sp.issparse(nb)
    np.testing.assert_allclose(row_norms(nb), (row_norms(blocks[0]) > 0).astype(float), atol=1e-12)


# ----------------------------------------------------------------------------- party setup
def test_sparse_party_never_densified_and_uses_cg_for_wide_blocks(no_densify):
    blocks, y = sparse_vertical(3000, 2 * EIGH_MAX_DIM, k=4)
    cfg, state = vs.make_party("p", blocks[0], lam_sum=3.0, reg=L2())
    assert sp.issparse(cfg.D) and cfg.solver.kind == "cg"
    assert cfg.D is blocks[0]  # no copy of the block either
    # nothing of size d × d is held
    big = [k for k, v in vars(cfg.solver).items() if hasattr(v, "size") and v.size >= cfg.D.shape[1] ** 2]
    assert big == []


def test_large_dense_block_sets_up_without_a_d_cubed_decomposition(monkeypatch, rng):
    """d_m = 10,000 dense: the automatic choice is cg, which never calls eigh and solves exactly."""
    def no_eigh(*a, **k):
        raise AssertionError("eigh called on a large block")

    monkeypatch.setattr(np.linalg, "eigh", no_eigh)
    n, d = 400, 10_000
    D = rng.normal(size=(n, d)) / np.sqrt(d)
    cfg, state = vs.make_party("p", D, lam_sum=0.5, reg=L2(), cg_reduction=0.0)
    assert cfg.solver.kind == "cg"
    b = rng.normal(size=d)
    x = cfg.solver.solve(b, 0.5, 2.0)
    # check against the n × n dual form (Woodbury): (λI + ρDᵀD)⁻¹ = (I − ρDᵀ(λI + ρDDᵀ)⁻¹D) / λ
    ref = (b - 2.0 * D.T @ np.linalg.solve(0.5 * np.eye(n) + 2.0 * D @ D.T, D @ b)) / 0.5
    np.testing.assert_allclose(x, ref, rtol=1e-7, atol=1e-9)


# ----------------------------------------------------------------------------- estimators
def test_sparse_fit_equals_dense_fit(a9a_small, no_densify):
    B, y, Bt, yt = a9a_small
    Bs, Bts = [sp.csr_matrix(b) for b in B], [sp.csr_matrix(b) for b in Bt]
    kw = dict(lam=1e-3, max_iter=100, tol=0)
    dense = VerticalLogisticRegression(**kw).fit(B, y)
    sparse = VerticalLogisticRegression(**kw).fit(Bs, y, eval_set={"test": (Bts, yt)})
    np.testing.assert_allclose(sparse.coef_, dense.coef_, atol=1e-8)
    np.testing.assert_allclose(sparse.decision_function(Bts), dense.decision_function(Bt), atol=1e-8)
    # one pooled CSR matrix with party_sizes gives the same model
    pooled = VerticalLogisticRegression(party_sizes=(66, 57), **kw).fit(sp.hstack(Bs).tocsr(), y)
    np.testing.assert_allclose(pooled.coef_, dense.coef_, atol=1e-8)
    assert sparse.history_["test_log_loss"][-1] == pytest.approx(sparse.evaluate(Bt, yt)["log_loss"], rel=1e-6)


@pytest.mark.parametrize("penalty", ["l2", "l1"])
def test_cg_solver_reaches_the_eigh_solution(penalty):
    """Inexact cg x-steps (non-private) converge to the same optimum as exact eigh ones."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1000, 40))
    y = (X @ rng.normal(size=40) + rng.logistic(size=1000) > 0).astype(int)
    B = [X[:, :25], X[:, 25:]]
    kw = dict(lam=1e-2, max_iter=500, tol=1e-8, penalty=penalty)
    ref = VerticalLogisticRegression(solver="eigh", **kw).fit(B, y)
    cg = VerticalLogisticRegression(solver="cg", **kw).fit(B, y)
    assert cg.converged_ and ref.converged_
    np.testing.assert_allclose(cg.history_["objective"][-1], ref.history_["objective"][-1], rtol=1e-9)
    np.testing.assert_allclose(cg.coef_, ref.coef_, atol=1e-6)


def test_sparse_regression_and_memory_stays_a_small_multiple_of_the_data(no_densify):
    """20,000 × 2 × 5,000 sparse (dense would be 1.6 GB): traced peak within 20× the CSR bytes."""
    blocks, y01 = sparse_vertical(20_000, 5_000, k=8)
    data_bytes = sum(b.data.nbytes + b.indices.nbytes + b.indptr.nbytes for b in blocks)
    yr = y01 + np.random.default_rng(1).normal(size=y01.shape[0])
    tracemalloc.start()
    try:
        m = VerticalLinearRegression(lam=1e-4, max_iter=30, tol=0).fit(blocks, yr)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= 20 * data_bytes, (peak, data_bytes)
    obj = np.asarray(m.history_["objective"])
    assert obj[-1] < obj[0]
    assert np.all(np.isfinite(m.predict(blocks)))


def test_bad_solver_is_refused(a9a_small):
    from dpadmm import InvalidParameterError

    B, y, _, _ = a9a_small
    with pytest.raises(InvalidParameterError, match="solver must be one of"):
        VerticalLogisticRegression(solver="lu").fit(B, y)


# ----------------------------------------------------------------------------- consensus local solver
def _node_problems(K=7, B=60, d=6, seed=2):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(K, B, d)) / np.sqrt(d)
    X[-1, B // 2:] = 0.0  # a padded node (fewer rows)
    y = np.where(rng.random((K, B)) < 0.5, -1.0, 1.0)
    w = np.where(np.abs(X).sum(axis=2) > 0, 3.0 / B, 0.0)
    r = np.geomspace(0.05, 50.0, K)  # from hard (small ridge) to easy
    b = rng.normal(size=(K, d)) * 2
    return X, y, w, r, b


def _phi(X, y, w, r, b, f):
    m = -y * np.einsum("kbd,kd->kb", X, f)
    return (w * np.logaddexp(0.0, m)).sum(axis=1) + 0.5 * r * (f * f).sum(axis=1) + (b * f).sum(axis=1)


def test_consensus_local_solver_matches_newton_and_exits_per_node():
    from dpadmm.algorithms.consensus import solver as gc

    X, y, w, r, b = _node_problems()
    bound = gc.curvature_factor(X, w)
    Z = gc.rotated_data(X, y, bound)
    f, its = gc.local_solve(Z, w, r, b, np.zeros_like(b), bound, tol=1e-12)
    ref, _, _ = gc.local_newton(X, y, w, r, b, np.zeros_like(b), tol=1e-13, max_iter=100)
    np.testing.assert_allclose(f, ref, atol=1e-10)
    # each node stops on its own: the easy (large-ridge) nodes need fewer iterations
    assert its[-2] < its[0] and len(set(its.tolist())) > 1
    # a node started at its optimum takes no iteration, whatever the others need
    f0 = np.zeros_like(b)
    f0[3] = ref[3]
    _, its2 = gc.local_solve(Z, w, r, b, f0, bound, tol=1e-9)
    assert its2[3] == 0 and its2[0] > 0


def test_consensus_curvature_bound_majorises_and_every_step_descends():
    from scipy.special import expit

    from dpadmm.algorithms.consensus import solver as gc

    X, y, w, r, b = _node_problems()
    bound = gc.curvature_factor(X, w)
    M = np.einsum("kij,kj,klj->kil", bound.vecs, bound.vals, bound.vecs)
    rng = np.random.default_rng(3)
    for _ in range(3):  # M ⪰ the loss Hessian at any f
        f = rng.normal(size=b.shape) * 3
        p = expit(-y * np.einsum("kbd,kd->kb", X, f))
        H = np.einsum("kb,kbi,kbj->kij", w * p * (1 - p), X, X)
        assert np.linalg.eigvalsh(M - H).min() >= -1e-12
    Z = gc.rotated_data(X, y, bound)
    prev = _phi(X, y, w, r, b, np.zeros_like(b))
    f = np.zeros_like(b)
    for _ in range(6):  # one step at a time: φ never increases (no line search needed)
        f, _ = gc.local_solve(Z, w, r, b, f, bound, tol=0.0, max_iter=1)
        cur = _phi(X, y, w, r, b, f)
        assert np.all(cur <= prev + 1e-12)
        prev = cur


def test_consensus_metrics_record_training_seconds():
    from dpadmm.workflows.consensus import run_consensus

    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 5))
    y = np.where(X @ rng.normal(size=5) + rng.logistic(size=400) > 0, 1, 0)
    out = run_consensus(X=X, y=y, nodes=4, topology="ring", iterations=6, runs=2, seed=0)
    sec = out["history"]["seconds"]
    assert len(sec) == 6 and all(s > 0 for s in sec) and np.all(np.diff(sec) >= 0)


def test_private_fit_with_cg_equals_eigh_for_the_same_noise(a9a_small_normalized):
    """Private parties solve their x-step exactly (to 1e-10) with cg: same seed, same model as eigh."""
    B, y, _, _ = a9a_small_normalized
    Bs = [sp.csr_matrix(b) for b in B]
    kw = dict(lam=1e-3, epsilon=10.0, max_iter=8, random_state=0)
    ref = VerticalLogisticRegression(solver="eigh", **kw).fit(Bs, y)
    cg = VerticalLogisticRegression(solver="cg", **kw).fit(Bs, y)
    assert cg.privacy_.epsilon == pytest.approx(ref.privacy_.epsilon)
    np.testing.assert_allclose(cg.coef_, ref.coef_, rtol=1e-6, atol=1e-8)
