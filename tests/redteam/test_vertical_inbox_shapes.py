"""The shape attack of F3–F5 tried on a vertical feature party ([Hu] ADMM sharing, Gaussian mechanism, under its
policy and budget, through the party runtime): the coordinator's ``residual`` and ``dual`` with extra axes, and a
``rho`` that is an array.

Each case is held if the round is refused, or exactly one N-vector share comes back. Measured: every hostile case is
stopped — but by numpy's shape errors inside the step (``matmul: … mismatch in its core dimension``, ``operands
could not be broadcast together``: a crash before the release, on D and D′ alike), not by a check of the message: it
holds by accident and a refactor of the step could open it (F5's suggested runtime check would make it explicit).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("test_redteam_policy", reason="the policy harness (tests/protocols) is not importable")

from test_redteam_policy import BUDGET, N, Party  # noqa: E402

from dpadmm.algorithms.vertical import messages as vm, protocol as vp  # noqa: E402
from dpadmm.backends.grpc_party import _Refused  # noqa: E402
from dpadmm.data.parties import write_party_files  # noqa: E402
from dpadmm.kernels.regularizers import L2  # noqa: E402
from dpadmm.protocol import PartyData  # noqa: E402

B = 20


def _party(tmp_path):
    rng = np.random.default_rng(0)
    paths = write_party_files([rng.normal(size=(N, 2)), rng.normal(size=(N, 3))], np.where(rng.random(N) < .5, 1, -1),
                              tmp_path / "data")
    p = Party(tmp_path, vp.PROTOCOL, "party2", data={"train": str(paths[1])}, **BUDGET)
    spec = vm.PrivacySpec(noise_multiplier=4.0, mechanism="gaussian", relation="feature_column", clip=30.0)
    D = PartyData("train", {"ids": np.arange(N), "index": 2, "n_features": 3}, (N, 3))
    p.setup(vp.PROTOCOL, ["party2", D, {"lam_sum": 1.0, "reg": L2(), "private": spec}], 3)
    return p


CASES = {
    "honest": (np.zeros(N), np.zeros(N), 1.0),
    "residual (B, N)": (np.zeros((B, N)), np.zeros(N), 1.0),
    "dual (B, N)": (np.zeros(N), np.zeros((B, N)), 1.0),
    "both (N, N)": (np.zeros((N, N)), np.zeros((N, N)), 1.0),
    "rho (B, 1)": (np.zeros(N), np.ones(N), np.ones((B, 1))),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_feature_party_releases_one_share_whatever_the_shapes(tmp_path, case):
    p = _party(tmp_path)
    try:
        try:
            out = p.step(0, vm.CoordinatorMessage(0, *CASES[case]))
        except (_Refused, ValueError, TypeError):
            assert case != "honest"
            return
        share = np.asarray(out["outbox"].share)
        assert share.shape == (N,), (case, share.shape)
    finally:
        p.close()
