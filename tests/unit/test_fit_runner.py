"""The one fit runner (``dpadmm.fit.runner``): start → run → requests after training → close, the backend closed
whatever fails; an estimator's fit closes the backend it was given exactly once."""

from __future__ import annotations

import numpy as np
import pytest

from dpadmm.backends import InProcessBackend
from dpadmm.estimators import ConsensusLogisticRegression, VerticalLogisticRegression
from dpadmm.fit import runner


class Counting(InProcessBackend):
    """An in-process backend that counts its starts and closes."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def start(self, specs, *, noise_seed=None, rounds=None):
        self.calls.append(("start", rounds))
        super().start(specs, noise_seed=noise_seed, rounds=rounds)

    def close(self):
        self.calls.append(("close", None))
        super().close()


def test_session_returns_what_the_rounds_and_the_requests_returned():
    b = Counting()
    fitted = runner.session(b, [], lambda backend: "rounds", rounds=3, after=lambda backend, res: res + " + after")
    assert (fitted.result, fitted.after) == ("rounds", "rounds + after")
    assert b.calls == [("start", 3), ("close", None)]
    assert fitted.setup_seconds >= 0.0


@pytest.mark.parametrize("where", ["rounds", "after"])
def test_the_backend_is_closed_when_the_run_or_a_request_fails(where):
    b = Counting()

    def fail(*_):
        raise RuntimeError(f"party failed in {where}")

    with pytest.raises(RuntimeError, match=f"party failed in {where}"):
        runner.session(b, [], fail if where == "rounds" else (lambda backend: None),
                       after=fail if where == "after" else None)
    assert b.calls[-1] == ("close", None)


def test_close_false_leaves_the_backend_to_its_owner_and_owned_closes_it():
    b = Counting()
    with runner.owned(b):
        runner.session(b, [], lambda backend: None, close=False)
        assert ("close", None) not in b.calls  # PSI, then the scoring: one backend, two sessions
    assert b.calls[-1] == ("close", None)


def test_a_vertical_fit_starts_and_closes_its_backend_once_with_the_declared_rounds():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 4))
    y = np.where(X[:, 0] + 0.5 * X[:, 2] > 0, 1, 0)
    b = Counting()
    seen = []
    VerticalLogisticRegression(max_iter=5, backend=b, party_sizes=(2, 2), random_state=0).fit(
        X, y, callbacks=[lambda t, rec: seen.append(t)])
    assert b.calls == [("start", 5), ("close", None)]
    assert seen[:1] == [1] and len(seen) <= 5  # the rounds ran between the start and the close


def test_a_consensus_fit_with_its_fallback_closes_both_runs():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(120, 3))
    X /= np.maximum(np.linalg.norm(X, axis=1), 1.0)[:, None] * 1.2
    y = np.where(X @ np.array([1.0, -1.0, 0.5]) > 0, 1, 0)
    b = Counting()
    ConsensusLogisticRegression(n_nodes=3, max_iter=5, perturbation="pp", alpha=3.0, backend=b,
                                random_state=0).fit(X, y)
    # the M-ADMM run on the given backend; the DP base-rate fallback on an in-process one (a simulation's routed())
    assert b.calls == [("start", 5), ("close", None)]
