"""What ``party serve`` logs when a run ends or resumes says what happened (not a failure when nothing failed)."""

from __future__ import annotations

import numpy as np

from dpadmm.backends.selftest import PROTOCOL as SELFTEST, Broadcast
from dpadmm.runtime import PartyRuntime
from dpadmm.runtime.audit import end_line

SETUP = {"protocol": "selftest", "party": "p1", "index": 0, "noise_seed": 0, "setup": {"name": "p1", "size": 3, "noise": 0.0, "fault": None, "hang_seconds": 3600.0}}


def test_a_run_that_writes_no_model_is_logged_as_finished_and_a_resume_names_its_rounds(tmp_path):
    lines = []
    rt = PartyRuntime(name="p1", protocol=SELFTEST, data={}, out=tmp_path, allow_seeded_noise=True, echo=lines.append)
    try:
        rt.call("Setup", SETUP, "coord")
        rt.call("Step", {"round": 0, "inbox": Broadcast(1, np.zeros(3))}, "coord")
        rt.call("Checkpoint", {"round": 0}, "coord")
        rt.call("Finish", {"completed": False}, "coord")
        rt.call("Setup", SETUP, "coord")
        rt.call("Restore", {"round": 0}, "coord")
        rt.call("Finish", {"completed": True}, "coord")
    finally:
        rt.close()
    assert lines == ["connected: coord; run started by coord: protocol selftest (non-private)",
                     "run finished: selftest (a selftest run writes no model)",
                     "run started by coord: protocol selftest (non-private)",
                     "run resumed by coord from this party's checkpoint after round 1 (next: round 2)",
                     "run finished: selftest (a selftest run writes no model)"]


def test_the_end_of_a_model_run_says_whether_it_completed():
    assert end_line("vertical-sharing", True, True, "model.npz", True) == "run ended: wrote model.npz"
    assert end_line("vertical-sharing", False, True, None, True) == (
        "run ended before completion (stopped by the coordinator): no model written")
    assert end_line("vertical-scoring", False, False, None, True) == (
        "run finished: vertical-scoring (a vertical-scoring run writes no model)")
    assert end_line("vertical-sharing", False, True, None, False) == "run ended: no run was set up (nothing to write)"
