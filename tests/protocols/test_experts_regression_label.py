"""Label privacy for the experts regression target (issue 41): with ``label_epsilon`` the label party releases the
labels it sends once by randomized response on bins of the declared range (:func:`rr_on_bins`, the labels-only
protocol's mechanism), and every other party receives exactly that release — no exact label, not even a held-out one;
at a huge label ε the release is each label's bin output and the fit is the exact-label fit up to the bins' width; the
label ε recomputes from the draws and the report books the release's events; refusals name their reason."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpadmm import InvalidParameterError, VerticalExpertsRegressor
from dpadmm.algorithms.experts import calibrate as xc, driver_regression as rd, regression as xr
from dpadmm.backends import InProcessBackend
from dpadmm.backends.base import party_rng
from dpadmm.privacy.events import LABEL_CHANGE
from dpadmm.privacy.label_mechanisms import rr_on_bins

Z = 5.0  # two-sided normal false failure 5.7e-7
RANGE = (0.0, 20.0)


class Recording(InProcessBackend):
    """The in-process backend, keeping every message the label party sends (what each party receives)."""

    def __init__(self):
        super().__init__()
        self.inboxes = []

    def step(self, inboxes, round_):
        self.inboxes.append(dict(inboxes))
        return super().step(inboxes, round_)


def _data(n=2000, seed=0):
    rng = np.random.default_rng(seed)
    blocks = [rng.standard_normal((n, 3)) / 3, rng.standard_normal((n, 4)) / 4]
    y = 10.0 + blocks[0] @ [4.0, 3.0, 2.0] + blocks[1] @ [5.0, 4.0, -3.0, 2.0] + 0.5 * rng.standard_normal(n)
    return blocks, y


def _fit(blocks, y, **kw):
    """``(fit result, the labels each party received)`` of an in-process fit on a recording backend."""
    b = Recording()
    f = rd.fit(rd.RegressionParams.of(label_range=RANGE, **kw), blocks, y, backend=b)
    received = {name: np.asarray(req.labels) for name, req in b.inboxes[0].items()}
    return f, received


def _replica(y, seed: int, n_blocks: int, label_epsilon: float, calibrate=True):
    """The release recomputed outside the driver from the label party's streams: its held-out split
    ``(n_blocks + 2, 0)`` and its release ``(n_blocks + 1, 0)`` on the other rows."""
    fit_rows = xc.split(y.size, party_rng(seed, n_blocks + 2, 0))[0] if calibrate else np.arange(y.size)
    rel = rr_on_bins(y[fit_rows], label_epsilon, rng=party_rng(seed, n_blocks + 1, 0), label_range=RANGE)
    return fit_rows, rel


def test_every_party_receives_exactly_the_release_and_no_exact_label():
    blocks, y = _data()
    f, received = _fit(blocks, y, epsilon=1.0, label_epsilon=1.0, random_state=3)
    fit_rows, rel = _replica(y, 3, 2, 1.0)
    sent = xr.scale_labels(rel.labels, *RANGE)
    assert list(received) == ["party2"]
    np.testing.assert_array_equal(received["party2"], sent)  # the release, and only the fit rows' (none held out)
    outputs = xr.scale_labels(rel.outputs, *RANGE)
    assert np.all(np.isin(received["party2"], outputs)) and outputs.size <= 32
    exact = xr.scale_labels(y[fit_rows], *RANGE)
    assert np.mean(np.isclose(received["party2"], exact, atol=1e-9)) < 0.01  # no exact label among them
    assert f.calibration is not None and f.calibration.heldout_rows == y.size - fit_rows.size


def test_a_huge_label_epsilon_keeps_every_label_in_its_bin_and_the_fit_is_the_exact_one_up_to_the_bins():
    """At label ε = 1e4 the change probability is e^−9000 = 0: every label is released as its bin's output, within a
    half bin plus one grid step of it (scaled: 1/32 + 2/127); the non-private ridge moves by at most
    max|Δy'|/(2√λ) (the operator norm of module regression's proof). At label ε = 1 the labels move much more."""
    blocks, y = _data(n=1500)
    kw = dict(lam=1e-2, bounds=None, calibrate=False, random_state=0)
    exact, got = _fit(blocks, y, **kw)
    huge, got_huge = _fit(blocks, y, label_epsilon=1e4, **kw)
    _, rel = _replica(y, 0, 2, 1e4, calibrate=False)
    bins = np.clip(np.searchsorted(rel.edges, np.clip(y, *RANGE), side="right") - 1, 0, rel.edges.size - 2)
    np.testing.assert_array_equal(rel.labels, rel.outputs[rel.assign[bins]])  # the RR kept every label's output
    gap = np.max(np.abs(got_huge["party2"] - got["party2"]))
    assert gap <= 1 / 32 + 2 / 127 + 1e-12, gap
    assert np.linalg.norm(huge.coefs[0] - exact.coefs[0]) <= gap / (2 * math.sqrt(1e-2)) + 1e-6
    np.testing.assert_array_equal(huge.own_coef, exact.own_coef)  # the label party's model: its exact labels
    _, got_one = _fit(blocks, y, label_epsilon=1.0, **kw)
    assert np.max(np.abs(got_one["party2"] - got["party2"])) > 0.5


def test_the_label_epsilon_recomputes_from_the_draws_and_the_report_books_the_release():
    """ε_rr recomputed from the keep rate p̂ of k-ary randomized response, ln(p̂(k − 1)/(1 − p̂)) (standard error
    1/√(n p̂(1 − p̂))), on what the party received; the report's label ε is the events' sum, the total label ε."""
    blocks, y = _data(n=20_000, seed=1)
    f, received = _fit(blocks, y, label_epsilon=2.0, bounds=None, calibrate=False, random_state=5)
    _, rel = _replica(y, 5, 2, 2.0, calibrate=False)
    np.testing.assert_array_equal(received["party2"], xr.scale_labels(rel.labels, *RANGE))
    bins = np.clip(np.searchsorted(rel.edges, np.clip(y, *RANGE), side="right") - 1, 0, rel.edges.size - 2)
    truth = xr.scale_labels(rel.outputs[rel.assign[bins]], *RANGE)
    kept = received["party2"] == truth
    k = rel.outputs.size
    assert k >= 2
    p = float(np.mean(kept))
    eps_hat, se = math.log(p * (k - 1) / (1 - p)), 1 / math.sqrt(kept.size * p * (1 - p))
    assert abs(eps_hat - rel.epsilons["rr"]) < Z * se, (eps_hat, rel.epsilons["rr"], se)
    label = f.privacy.label
    assert label["protected"] is True and label["epsilon"] == pytest.approx(2.0) and label["delta"] == 0.0
    assert label["relation"] == LABEL_CHANGE.key and label["rounds"] == 2 and "bins" in label["mechanism"]
    assert f.privacy.per_party == {}  # features not protected (no epsilon): the report says so
    assert math.isinf(f.privacy.epsilon)


def test_the_estimator_and_a_deployment_report_the_label_epsilon():
    blocks, y = _data(n=3000)
    m = VerticalExpertsRegressor(epsilon=1.0, label_epsilon=1.0, label_range=RANGE, random_state=0).fit(blocks, y)
    sides = m.privacy_.sides()
    assert sides["labels"]["protected"] is True and sides["labels"]["epsilon"] == pytest.approx(1.0)
    assert "labels: ε = 1 at δ = 0" in m.privacy_.summary()
    b = Recording()
    r = VerticalExpertsRegressor(epsilon=1.0, label_epsilon=1.0, label_range=RANGE, random_state=0)
    r.fit_remote(blocks[0], y, b, {"party2": (blocks[1], {})})
    _, rel = _replica(y, 0, 2, 1.0, calibrate=False)
    np.testing.assert_array_equal(b.inboxes[0]["party2"].labels, xr.scale_labels(rel.labels, *RANGE))
    assert r.privacy_.sides()["labels"]["epsilon"] == pytest.approx(1.0)
    assert r.privacy_.epsilon == pytest.approx(1.0, rel=1e-3)


@pytest.mark.parametrize("kw, match", [
    ({"label_epsilon": 1.0}, "label_range"),
    ({"label_epsilon": 1.0, "epsilon": 1.0}, "label_range"),
    ({"label_epsilon": 0.0, "label_range": RANGE}, "label_epsilon must be positive"),
    ({"label_epsilon": -1.0, "label_range": RANGE}, "label_epsilon must be positive"),
    ({"label_epsilon": float("nan"), "label_range": RANGE}, "label_epsilon must be finite"),
    ({"label_epsilon": "1", "label_range": RANGE}, "label_epsilon must be a number"),
])
def test_refusals_name_their_reason(kw, match):
    blocks, y = _data(n=200)
    with pytest.raises(InvalidParameterError, match=match):
        VerticalExpertsRegressor(**kw).fit(blocks, y)
