"""The coordinator's PSI names its phases through the progress hook (the CLI's heartbeat shows them on stderr)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dpadmm import _progress
from dpadmm.backends.inprocess import InProcessBackend
from dpadmm.fit import psi as P
from dpadmm.privacy.policy import PartyPolicy
from dpadmm.runtime.local import PartyOperator


def test_align_parties_sets_a_status_per_phase_and_clears_it(tmp_path, monkeypatch):
    pytest.importorskip("private_set_intersection")
    mine = np.array([f"c{i:03d}" for i in range(40)])
    theirs = np.array([f"c{i:03d}" for i in range(20, 60)])
    pd.DataFrame({"id": theirs, "x": np.zeros(40)}).to_csv(tmp_path / "p2.csv", index=False)
    seen = []
    monkeypatch.setattr(P, "status", lambda text: (seen.append(text), _progress.status(text)))
    op = PartyOperator(policy=PartyPolicy(no_budget=True), out=str(tmp_path / "out"), data={"train": str(tmp_path / "p2.csv")})
    be = InProcessBackend(policies={"party2": op})
    try:
        al = P.align_parties(be, ["party2"], "train", mine)
    finally:
        be.close()
    assert sorted(al.ids.tolist()) == [f"c{i:03d}" for i in range(20, 40)]
    assert seen == ["PSI: setting up 1 party (train file)",
                    "PSI: the parties blind their ids while the coordinator blinds its 40",
                    "PSI: party party2 answers the query (1/1)",
                    "PSI: intersecting with party party2 (1/1)",
                    "PSI: the parties align their rows of the 20 common ids",
                    ""]
    assert _progress.current() == ""
