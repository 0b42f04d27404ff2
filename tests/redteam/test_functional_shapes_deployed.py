"""F3 and F4 (hub arrays with extra leading axes in the functional statistics stages) through the deployed party
runtime — the ``PartyService`` the gRPC backend serves, with the wire codec, the worker's policy and its budget —
rather than the step function: is anything on the way (codec, policy, ledger) stopping the broadcast copies?

Found (xfail strict): no. The ``moments`` stage answers a (B, 1, 1, T) centre with B noised matrices, and the
``compare`` stage answers a model whose ``y_loc`` is zeros((B, 1)) with the sum over B copies of each curve — both
under one booked release. Measured: S of shape (30, 1, 21, 21) for a (30, 1, 1, 21) centre; a comparison of
−441.8 where one copy of the 50 curves can give at most m·Δ/2 = 25 (σ = 3).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("test_redteam_policy", reason="the policy harness (tests/protocols) is not importable")

from test_redteam_policy import BUDGET, Party, _curves  # noqa: E402

from dpadmm.algorithms.functional import protocol as fp  # noqa: E402
from dpadmm.algorithms.functional import statistics as fs  # noqa: E402
from dpadmm.backends.grpc_party import _Refused  # noqa: E402
from dpadmm.kernels import fpca  # noqa: E402

B = 30


@pytest.fixture
def worker(tmp_path):
    grid, X, y = _curves()
    w = Party(tmp_path, [fp.PROTOCOL, fp.STATISTICS_PROTOCOL], "worker1", accept_coordinator_data=True, **BUDGET)
    w.data = (grid, X, y)
    yield w
    w.close()


def test_a_deployed_worker_releases_one_moment_matrix(worker):
    grid, X, y = worker.data
    worker.setup(fp.STATISTICS_PROTOCOL, ["worker1", X, y, fpca.trapezoid_weights(grid), 2.0], 2)
    T = X.shape[1]
    try:
        out = worker.step(0, fs.StatsRequest("moments", curve_clip=5.0, center=np.zeros((B, 1, 1, T))))
    except _Refused:
        return
    S = np.asarray(out["outbox"].values["S"])
    assert S.shape == (T + 1, T + 1), S.shape


def test_a_deployed_worker_compares_each_curve_once(worker):
    """One comparison (the worker prices it once) with y_loc = zeros((B, 1)): held if refused, or if the release is
    within what one copy of the m curves can give, m·Δ/2, plus 6 noise sds (σ = z_c·Δ, z_c = 3)."""
    grid, X, y = worker.data
    worker.setup(fp.STATISTICS_PROTOCOL, ["worker1", X, y, fpca.trapezoid_weights(grid), 2.0, 3.0, 3.0], 2)
    basis = fpca.fourier_basis(grid, 3)
    K = basis.n_components
    model = {"basis": basis, "score_scale": np.ones(K), "clip": 10.0, "w": np.r_[np.ones(K), 0.0], "y_loc":
             np.zeros((B, 1)), "y_scale": 1.0, "band": (-1.0, 1.0), "unit": 1.0, "tau": 0.5, "constant": 0.0}
    try:
        out = worker.step(0, fs.StatsRequest("compare", model=model))
    except _Refused:
        return
    delta = fs.compare_sensitivity(model)
    release = float(np.ravel(out["outbox"].values["difference"])[0])
    assert abs(release) <= X.shape[0] * delta / 2 + 6 * 3.0 * delta, (release, X.shape[0] * delta / 2)
