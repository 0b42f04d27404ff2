"""The deployed experts path chooses like the in-process one (issue 38): ``fit_remote(..., heldout=(key, rows,
labels))`` — the label party's labelled records outside the fit, a new-records file at every party — runs the same
choice (:func:`dpadmm.algorithms.experts.driver.choice`) as the in-process fit on its held-out rows. Parties here are
the protocol's step on the in-process backend with arrays for their files (the gRPC path sends the same messages:
tests/transport/test_grpc_experts.py)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import log_loss

from dpadmm import InvalidDataError, VerticalExpertsClassifier
from dpadmm.algorithms.experts import calibrate as xc
from dpadmm.backends import InProcessBackend


def _data(n, informative, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 6))
    w = np.array([0.6, -0.5, 0.4, 1.5, -1.2, 1.0]) * (1.0 if informative else np.r_[np.ones(3), np.zeros(3)])
    y = np.where(X @ w + 0.5 * rng.normal(size=n) > 0, 1, 0)
    return X[:, :3], X[:, 3:], y


def _remote(informative, seed, n=800, n_held=300, heldout=True):
    A, B, y = _data(n + n_held + 4000, informative, seed)
    tr, ho, te = slice(0, n), slice(n, n + n_held), slice(n + n_held, None)
    backend = InProcessBackend()
    m = VerticalExpertsClassifier(epsilon=1.0, random_state=seed, bounds=None)
    m.fit_remote(A[tr], y[tr], backend, {"party2": (B[tr], {"heldout": B[ho], "test": B[te]})},
                 heldout=("heldout", A[ho], y[ho]) if heldout else None)
    p = 1 / (1 + np.exp(-m.remote_decision(A[te], "test")))
    own = 1 / (1 + np.exp(-m._own_logit(A[te])))
    return m, log_loss(y[te], p), log_loss(y[te], own)


@pytest.mark.parametrize("seed", [0, 1])
def test_a_deployment_keeps_its_own_model_when_the_other_party_carries_noise(seed):
    m, loss, own = _remote(False, seed)
    assert m.calibration_ is not None and m.calibration_.kind == "own model" and m.calibration_.heldout_rows == 300
    assert loss == pytest.approx(own, abs=1e-12)  # exactly the label party alone


@pytest.mark.parametrize("seed", [0, 1])
def test_a_deployment_stacks_an_informative_party(seed):
    m, loss, own = _remote(True, seed)
    assert m.calibration_.kind == "stacked" and loss < own - 0.05


def test_the_remote_choice_is_the_in_process_choice_on_the_same_numbers(monkeypatch):
    """Both paths call calibrate.choose with the own model's logit, the experts' logits minus the prior, ±1 labels."""
    seen = []
    real = xc.choose
    monkeypatch.setattr(xc, "choose", lambda *a, **k: seen.append((a, k)) or real(*a, **k))
    m, _, _ = _remote(True, 0)
    (own, experts, y_pm, _), kw = seen[-1]
    assert kw == {"shrink": True} and set(np.unique(y_pm)) == {-1.0, 1.0} and experts.shape == (300, 1)


def test_without_heldout_records_the_deployment_hands_over_the_product():
    m, _, _ = _remote(True, 0, heldout=False)
    assert m.calibration_ is None


def test_misaligned_heldout_records_are_refused_with_the_fix():
    A, B, y = _data(1000, True, 0)
    with pytest.raises(InvalidDataError, match="align the held-out records"):
        VerticalExpertsClassifier(epsilon=1.0, random_state=0, bounds=None).fit_remote(
            A[:800], y[:800], InProcessBackend(), {"party2": (B[:800], {"heldout": B[800:900]})},
            heldout=("heldout", A[800:1000], y[800:1000]))
