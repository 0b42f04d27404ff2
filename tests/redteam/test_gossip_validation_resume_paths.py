"""Second pass on G1's fix (``validation.released_once``, b6075ea): the released comparison is kept in
``validation.json`` beside the checkpoints and reused on resume. Attacked here: the library's own resume flows.

Held: resuming from the checkpoint *directory* into a different ``checkpoint_dir`` reuses the kept values and writes
them to the new folder (the slice is drawn once; its events booked once).

Found (xfail strict, G2): the engine accepts ``resume_from`` as the checkpoint's directory *or its file*
(``engine._checkpoint_dir``: "its directory or its file"), but the store looks for ``Path(resume_from) /
"validation.json"`` only — so ``resume_from=DIR/checkpoint.pkl`` finds no store, draws the count and the comparison
again with fresh OS-entropy noise and books the slice once (the same ε as the first run).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("dpadmm.algorithms.gossip.validation", reason="the gossip validation store (b6075ea) is not in this src")

from dpadmm import ConsensusLogisticRegression  # noqa: E402
from dpadmm.algorithms.gossip import validation as val  # noqa: E402
from dpadmm.engine import CHECKPOINT_FILE  # noqa: E402


def _table(seed, n=900):
    r = np.random.default_rng(seed)
    X = r.normal(size=(n, 4))
    y = (r.random(n) < 1 / (1 + np.exp(-(1.2 * X[:, 0] - 0.4)))).astype(int)
    return X, y


def _first(tmp_path):
    X, y = _table(0)
    first = ConsensusLogisticRegression(epsilon=1.0, n_nodes=3).fit(X, y, checkpoint_dir=tmp_path / "a",
                                                                   checkpoint_every=1)
    assert (tmp_path / "a" / val.STORE).is_file()
    return X, y, first


def _same(a, b) -> bool:
    return a.comparison_ == b.comparison_ and a.dp_base_rate_ == b.dp_base_rate_


def test_resume_into_another_checkpoint_folder_reuses_the_release(tmp_path):
    """resume_from=a, checkpoint_dir=b: the kept values are reused and copied to b; a resume from b reuses them."""
    X, y, first = _first(tmp_path)
    (tmp_path / "b").mkdir()
    again = ConsensusLogisticRegression(epsilon=1.0, n_nodes=3).fit(X, y, resume_from=tmp_path / "a",
                                                                   checkpoint_dir=tmp_path / "b", checkpoint_every=1)
    assert _same(again, first) and again.privacy_.epsilon == pytest.approx(first.privacy_.epsilon)
    assert (tmp_path / "b" / val.STORE).is_file()  # the run's new folder keeps what was released


def test_resume_from_the_checkpoint_file_reuses_the_release(tmp_path):
    """Held if a resume from the checkpoint file hands over the same released values, or books a second slice."""
    X, y, first = _first(tmp_path)
    again = ConsensusLogisticRegression(epsilon=1.0, n_nodes=3).fit(X, y, resume_from=tmp_path / "a" / CHECKPOINT_FILE)
    booked = again.privacy_.epsilon > first.privacy_.epsilon + 0.1  # the second slice (0.2 of ε) in the report
    assert _same(again, first) or booked, (first.comparison_, again.comparison_, first.privacy_.epsilon,
                                           again.privacy_.epsilon)


def test_a_resume_with_another_plan_does_not_reuse_another_models_comparison(tmp_path):
    """No second release (the store holds), but the hand-over decision is about the model the first run compared:
    held if such a resume is refused (the plan differs from the checkpoint's) or the new model is compared (and booked)."""
    X, y = _table(0)
    first = ConsensusLogisticRegression(epsilon=1.0, n_nodes=3, rounds=5).fit(X, y, checkpoint_dir=tmp_path / "a",
                                                                             checkpoint_every=1)
    try:
        again = ConsensusLogisticRegression(epsilon=3.0, n_nodes=3, rounds=40).fit(X, y, resume_from=tmp_path / "a")
    except Exception:  # refused: held
        raise AssertionError("a resume that moves the model on is not refused: it compares the new model") from None
    assert again.n_iter_ > first.n_iter_  # more rounds ran: the consensus model moved on
    assert again.comparison_ != first.comparison_, (first.comparison_, again.comparison_, first.n_iter_, again.n_iter_)
    # fixed: the store names the model it compared; the new model is compared and both slices are booked
    before, after = first._gossip_ledger.pure_epsilons(), again._gossip_ledger.pure_epsilons()
    assert all(after[p] == pytest.approx(before[p] + 0.2 * 3.0) for p in before), (before, after)
