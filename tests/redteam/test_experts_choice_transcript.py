"""The label party's choice (own model / combination) made on labels the other parties never see — the experts
deployment's ``fit_remote(heldout=...)`` (8c570fa) and the encrypted protocol's 5-fold safety net (0aceffb) — attacked
as a feature party reading everything it is sent. Run against the ``safety-net`` branch's src.

Held: what a feature party receives (its Setup, the one round's labels, every later request: the held-out file's
logits, then ``remote_decision``'s) is the same message for message whether the held-out labels make the label
party keep its own model or stack the party's expert — the choice and the held-out labels stay with the label party
(``remote_decision`` asks for the logits whatever was chosen; no contact pattern shows it). A planted variant that
skips the parties when the own model was chosen is caught by the same transcript comparison.

The encrypted protocol's safety net (0aceffb) was checked by reading only: its choice (``combine.choose``) runs in
the in-process driver after the last request, on the label party's own logits and labels; the held-out split is a
permutation from the seed (label-independent), and the parties' ``logit`` request on those rows precedes the choice
whatever it is. Nothing new leaves the label party.
"""

from __future__ import annotations

import hashlib
import inspect

import numpy as np
import pytest

from dpadmm import VerticalExpertsClassifier
from dpadmm.backends import InProcessBackend

if "heldout" not in inspect.signature(VerticalExpertsClassifier.fit_remote).parameters:
    pytest.skip("fit_remote(heldout=...) (safety-net branch, 8c570fa) is not in this src", allow_module_level=True)


def _digest(obj) -> str:
    h = hashlib.sha256()

    def feed(o):
        if isinstance(o, np.ndarray):
            h.update(np.ascontiguousarray(o).tobytes())
        elif isinstance(o, dict):
            for k in sorted(o, key=str):
                feed(str(k))
                feed(o[k])
        elif isinstance(o, (list, tuple)):
            for v in o:
                feed(v)
        elif hasattr(o, "__dataclass_fields__"):
            feed({k: getattr(o, k) for k in o.__dataclass_fields__})
        else:
            h.update(repr(o).encode())

    feed(obj)
    return h.hexdigest()[:16]


class Recorder:
    """The in-process backend, with every message to a party written down (what that party sees)."""

    def __init__(self):
        self.inner, self.log = InProcessBackend(), []

    def start(self, specs, **kw):
        self.log.append(("setup", [(s.name, _digest(getattr(s, "setup", None))) for s in specs]))
        return self.inner.start(specs, **kw)

    def step(self, inboxes, round_):
        self.log.append(("step", round_, {k: _digest(v) for k, v in inboxes.items()}))
        return self.inner.step(inboxes, round_)

    def request(self, name, handler, *args):
        self.log.append(("request", name, handler, _digest(args)))
        return self.inner.request(name, handler, *args)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _data(n, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 6))
    w = np.array([0.6, -0.5, 0.4, 1.5, -1.2, 1.0])
    y = np.where(X @ w + 0.5 * rng.normal(size=n) > 0, 1, 0)
    return X[:, :3], X[:, 3:], y


def _deploy(calibrated_to=None):
    """D: the true held-out labels; D′ (``calibrated_to`` a model fitted on D): held-out labels drawn from that
    model's own-block probabilities, independent of the party's block — its expert adds nothing there and the label
    party keeps its own model. The training rows, and so every release, are the same."""
    A, B, y = _data(800 + 300 + 200, 0)
    tr, ho, te = slice(0, 800), slice(800, 1100), slice(1100, None)
    y_ho = y[ho].copy()
    if calibrated_to is not None:
        p_own = 1 / (1 + np.exp(-calibrated_to._own_logit(A[ho])))
        y_ho = (np.random.default_rng(1).random(p_own.size) < p_own).astype(int)
    backend = Recorder()
    m = VerticalExpertsClassifier(epsilon=1.0, random_state=0, bounds=None)
    m.fit_remote(A[tr], y[tr], backend, {"party2": (B[tr], {"heldout": B[ho], "test": B[te]})},
                 heldout=("heldout", A[ho], y_ho))
    m.remote_decision(A[te], "test")
    return m, backend.log


def test_a_feature_party_sees_the_same_messages_whatever_the_label_party_chooses():
    m0, log0 = _deploy()
    m1, log1 = _deploy(m0)
    assert m0.calibration_.kind != m1.calibration_.kind, (m0.calibration_.kind, m1.calibration_.kind)  # choices differ
    assert any(e[0] == "request" for e in log0)  # the parties were asked for logits (the transcript is not empty)
    assert log0 == log1


def test_the_transcript_comparison_catches_a_choice_shown_by_contact(monkeypatch):
    """Plant: remote_decision skips the parties when the own model was chosen (the choice then shows by contact)."""
    real = VerticalExpertsClassifier.remote_decision

    def planted(self, own_block, key="test"):
        if self.calibration_ is not None and self.calibration_.kind == "own model":
            return self._own_logit(own_block)
        return real(self, own_block, key)

    monkeypatch.setattr(VerticalExpertsClassifier, "remote_decision", planted)
    m0, log0 = _deploy()
    _, log1 = _deploy(m0)
    assert log0 != log1

