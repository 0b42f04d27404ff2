"""A resumed encrypted run keeps the label mechanism its checkpoint was written under.

The label party's checkpoint keeps the labels it uses (``labels``: ỹ of randomized response — or, under the Gaussian
label mechanism, the EXACT labels) and the events so far; a resume restores the labels as "released" (no second draw,
no second event). Before the fix nothing tied the two runs' label mechanisms: a run checkpointed under
``label_mechanism="gaussian"`` (exact labels, the η's as label noise) and resumed with randomized response
(``label_epsilon``, no η's) used the exact labels, un-noised, in every resumed round, booked no randomized response
and no η — while the report priced the labels from the events of the first rounds only: finite label ε for
releases computed from exact labels without noise (ε = ∞). Now the checkpoint records the mechanism and a resume
under another is refused, nothing stepped."""

from __future__ import annotations

import pytest

from test_encrypted_checkpoint import _data, _Killed, _run

from dpadmm.exceptions import DataFileError
from dpadmm.experiments.audit_games_encrypted import plaintext_he


@pytest.mark.parametrize("first, then", [(False, True), (True, False)], ids=["gaussian then rr", "rr then gaussian"])
def test_a_resume_under_another_label_mechanism_is_refused(tmp_path, first, then):
    blocks, y = _data(1)
    with plaintext_he():
        with pytest.raises(_Killed):  # dies inside round 3, after round 2's checkpoints
            _run(blocks, y, tmp_path, kill_at=1 + 2 * 2 + 1, rr=first)
        with pytest.raises(DataFileError, match="label mechanism.*resume with the same"):
            _run(blocks, y, tmp_path, resume=True, rr=then)
