"""Second pass on T1's fix (85705c5, e66f21e): a private run is binary unless ``--target`` says otherwise, and labels
that are not yes/no are refused — "on both sides of a neighbouring pair alike".

Held: ``dpadmm vertical admm --label-epsilon`` on a three-valued label column is refused with exit code 2 before any
party is started (an in-process backend whose ``start`` records contact: no contact; the plant that resolves the
target after the start is what the recorder sees); with ``--target count`` it starts.

Found (T3, low; fixed: the three tests below were strict xfails until the fix): the binary domain is checked as "exactly two distinct values", not "every label is
one of the two declared classes". A yes/no column with exactly one positive and its neighbour with that label
changed to no (all no — inside the binary domain) are told apart: the first runs, the second is refused ("1
distinct values" / "got 1 class") — ε = ∞ for that label, in ``dpadmm vertical admm --label-epsilon`` and in a
private ``ConsensusLogisticRegression`` (``binary_labels`` refuses a one-class column). Also which label is +1 is
the larger of the two values seen. The same under ``--target count``: one count 1 among zeros runs, all zeros is
refused ("at least two distinct values"). Suggested fix: a private binary run declares its two classes (default {0, 1}, or
``--positive-class``/``classes=``), maps every label against them (outside: refused, or no class) and never counts
distinct values. Fixed so (``dpadmm._validation.binary_labels``, ``private=True``): both neighbours run, and a label
outside the domain is refused by the same line on both.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import run_cli

from dpadmm import ConsensusLogisticRegression
from dpadmm.backends.inprocess import InProcessBackend
from dpadmm.data import write_party_files
from dpadmm.exceptions import InvalidDataError


def _files(tmp_path, y, tag):
    rng = np.random.default_rng(0)
    B = [rng.normal(size=(y.size, 2)), rng.normal(size=(y.size, 2))]
    return write_party_files(B, y, tmp_path / f"parties_{tag}")


def _vertical(tmp_path, capsys, monkeypatch, y, tag, extra=()):
    contact = []
    orig = InProcessBackend.start

    def start(self, specs, **kw):  # the first message any party receives goes through here
        contact.append([s.name for s in specs])
        return orig(self, specs, **kw)

    monkeypatch.setattr(InProcessBackend, "start", start)
    files = _files(tmp_path, y, tag)
    code, _, err = run_cli(["vertical", "admm", "--party", files[0], "--party", files[1], "--label-epsilon", "1",
                            "--seed", "0", "--quiet", "--iterations", "3", "--out", tmp_path / f"out_{tag}", *extra],
                           capsys)
    return code, bool(contact), err


def test_a_non_binary_column_is_refused_before_any_party_is_contacted(tmp_path, capsys, monkeypatch):
    pytest.importorskip("dpadmm.workflows.vertical_targets", reason="vertical --target is not in this src")
    y = np.random.default_rng(1).integers(0, 3, size=200)
    code, contacted, err = _vertical(tmp_path, capsys, monkeypatch, y, "three")
    assert code == 2 and not contacted and "--target" in err, (code, contacted, err)
    code, contacted, _ = _vertical(tmp_path, capsys, monkeypatch, y, "count", ("--target", "count"))
    assert code == 0 and contacted  # the recorder sees a run that does start


def test_vertical_one_positive_vs_none_alike(tmp_path, capsys, monkeypatch):
    pytest.importorskip("dpadmm.workflows.vertical_targets", reason="vertical --target is not in this src")
    y = np.zeros(200, dtype=int)
    y[0] = 1
    a = _vertical(tmp_path, capsys, monkeypatch, y, "one")[:2]
    b = _vertical(tmp_path, capsys, monkeypatch, np.zeros(200, dtype=int), "none")[:2]
    assert a == b == (0, True), (a, b)


def _outcome(y):
    r = np.random.default_rng(0)
    X = r.normal(size=(y.size, 3))
    try:
        ConsensusLogisticRegression(epsilon=1.0, n_nodes=2, rounds=3, random_state=0).fit(X, y)
        return "ran"
    except InvalidDataError:
        return "refused"


def test_gossip_one_positive_vs_none_alike():
    y = np.zeros(300, dtype=int)
    y[0] = 1
    assert _outcome(y) == _outcome(np.zeros(300, dtype=int)) == "ran"


def test_vertical_count_one_nonzero_vs_none_alike(tmp_path, capsys, monkeypatch):
    pytest.importorskip("dpadmm.workflows.vertical_targets", reason="vertical --target is not in this src")
    y = np.zeros(200, dtype=int)
    y[0] = 1
    extra = ("--target", "count")
    a = _vertical(tmp_path, capsys, monkeypatch, y, "one", extra)[:2]
    b = _vertical(tmp_path, capsys, monkeypatch, np.zeros(200, dtype=int), "none", extra)[:2]
    assert a == b == (0, True), (a, b)


def _neighbours(n=200):
    """Two yes/no columns one label apart, inside the binary domain: one positive, and none."""
    one = np.zeros(n, dtype=int)
    one[0] = 1
    return one, np.zeros(n, dtype=int)


def test_vertical_out_of_domain_label_refused_alike_on_both_neighbours(tmp_path, capsys, monkeypatch):
    pytest.importorskip("dpadmm.workflows.vertical_targets", reason="vertical --target is not in this src")
    seen = []
    for tag, y in zip(("one", "none"), _neighbours()):
        y = y.copy()
        y[-1] = 7  # outside 0/1 and -1/+1
        code, contacted, err = _vertical(tmp_path, capsys, monkeypatch, y, tag)
        assert code == 2 and not contacted and "--target" in err and not (tmp_path / f"out_{tag}").exists(), err
        seen.append(" ".join(err.split()))
    assert seen[0] == seen[1], seen


def test_vertical_declared_classes_outside_refused_alike(tmp_path, capsys, monkeypatch):
    pytest.importorskip("dpadmm.workflows.vertical_targets", reason="vertical --target is not in this src")
    seen = []
    for tag, y in zip(("one", "none"), _neighbours()):
        y = y.copy()
        y[-1] = -1  # outside the declared 0,1
        code, contacted, err = _vertical(tmp_path, capsys, monkeypatch, y, tag, ("--classes", "0,1"))
        assert code == 2 and not contacted and "--classes" in err, err
        seen.append(" ".join(err.split()))
    assert seen[0] == seen[1], seen
    code, contacted, _ = _vertical(tmp_path, capsys, monkeypatch, _neighbours()[1], "ok", ("--classes", "0,1"))
    assert code == 0 and contacted


def _refusal(y, **kw):
    X = np.random.default_rng(0).normal(size=(y.size, 3))
    try:
        ConsensusLogisticRegression(epsilon=1.0, n_nodes=2, rounds=3, random_state=0, **kw).fit(X, y)
    except InvalidDataError as exc:
        return str(exc)
    return None


def test_gossip_out_of_domain_label_refused_alike_on_both_neighbours():
    out = []
    for y in _neighbours(300):
        y = y.copy()
        y[-1] = 2
        out.append(_refusal(y))
    assert out[0] is not None and out[0] == out[1], out
    mixed = [np.where(y == 0, -1, y) for y in _neighbours(300)]  # the LIBSVM coding: inside the domain
    assert [_refusal(y) for y in mixed] == [None, None]


def test_non_private_one_class_still_refused():
    """The at-least-two-classes check stays for runs without privacy (scikit-learn's estimator checks)."""
    X = np.random.default_rng(0).normal(size=(50, 3))
    with pytest.raises(InvalidDataError, match="exactly two classes"):
        ConsensusLogisticRegression(n_nodes=2, max_iter=3, random_state=0).fit(X, np.zeros(50, dtype=int))


def test_declared_text_classes_map_in_the_order_given(tmp_path, capsys, monkeypatch):
    """--classes NEG,POS declares the coding (the second is +1), whatever the labels' sort order: a private run on
    yes/no text runs with it, and without it is refused naming --classes."""
    pytest.importorskip("dpadmm.workflows.vertical_targets", reason="vertical --target is not in this src")
    y = np.where(np.random.default_rng(2).random(200) < 0.5, "yes", "no").astype(object)
    code, contacted, err = _vertical(tmp_path, capsys, monkeypatch, y, "text")
    assert code == 2 and not contacted and "--classes NEG,POS" in err, err
    code, contacted, err = _vertical(tmp_path, capsys, monkeypatch, y, "declared", ("--classes", "yes,no"))
    assert code == 0 and contacted, err
    from dpadmm._validation import binary_labels

    y_pm, classes = binary_labels("y", np.array(["yes", "no", "no"]), private=True, classes=["yes", "no"])
    assert y_pm.tolist() == [-1.0, 1.0, 1.0] and classes.tolist() == ["yes", "no"]
