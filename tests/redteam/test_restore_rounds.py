"""A coordinator that chooses the round a party restores: a party checkpoints and restores only its own round.

Before this, Checkpoint wrote whatever round the coordinator named and Restore served the round after it, so a
checkpoint "at round -1" (or at an earlier round) let a resumed run serve round 0 (or earlier rounds) again — a
consensus-baseline run released its ``count`` twice. Now: a checkpoint holds the party's own last served round; a
Restore names exactly that round, right after Setup, and the next round served is strictly that round + 1.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dpadmm.backends.selftest import PROTOCOL as SELFTEST, Broadcast
from dpadmm.privacy.policy import PolicyRefusal
from dpadmm.runtime import PartyRuntime, checkpoints

SETUP = {"protocol": "selftest", "party": "p1", "index": 0, "noise_seed": 0, "setup": {"name": "p1", "size": 3, "noise": 0.0, "fault": None, "hang_seconds": 3600.0}}


def _step(call, t):
    return call("Step", {"round": t, "inbox": Broadcast(1, np.zeros(3))})


def _refusal(call, method, body, pattern):
    with pytest.raises(PolicyRefusal, match=pattern):
        call(method, body)


def _attack(call):
    """The whole sequence against one party (``call(method, body)``); asserts each refusal's reason."""
    call("Setup", SETUP)
    _refusal(call, "Checkpoint", {"round": -1}, r"^party 'p1' refused Checkpoint at round -1 and wrote nothing: it has "
                                                r"served no round of this run yet")
    _step(call, 0)
    _step(call, 1)
    for bad in (-1, 0, 5):
        _refusal(call, "Checkpoint", {"round": bad}, rf"^party 'p1' refused Checkpoint at round {bad} and wrote "
                                                     r"nothing: its last served round is 1")
    call("Checkpoint", {"round": 1})
    # in the same run: a restore replays rounds already served
    _refusal(call, "Restore", {"round": 1}, r"^party 'p1' refused Restore at round 1: another coordinator's run is in progress here \(run by \(insecure\), next round 2\)")
    call("Setup", SETUP)  # the resumed run
    _refusal(call, "Restore", {"round": -1}, r"^party 'p1' refused Restore at round -1: a round number is a "
                                             r"non-negative integer")
    _refusal(call, "Restore", {"round": 0}, r"^party 'p1' refused Restore at round 0: its own checkpoint is from "
                                            r"round 1 \(it restores only its own checkpoints\)")
    call("Restore", {"round": 1})
    _refusal(call, "Restore", {"round": 1}, r"^party 'p1' refused Restore at round 1: another coordinator's run is in progress here \(run by \(insecure\), next round 2\)")
    for replay in (0, 1, 3):
        _refusal(call, "Step", {"round": replay, "inbox": Broadcast(1, np.zeros(3))},
                 rf"^party 'p1' refused round index {replay} and sent nothing: the next round is 2")
    _step(call, 2)


def test_a_resume_may_take_the_partys_previous_checkpoint_and_no_other(tmp_path):
    """A coordinator whose checkpoint of round t failed at another party resumes from its last complete checkpoint,
    t' < t: the party holds its previous checkpoint too and restores it; any round it holds no checkpoint of is
    refused."""
    rt = PartyRuntime(name="p1", protocol=SELFTEST, data={}, out=tmp_path, allow_seeded_noise=True)
    try:
        rt.call("Setup", SETUP)
        for t in range(3):
            _step(rt.call, t)
            if t >= 1:
                rt.call("Checkpoint", {"round": t})  # the party's checkpoints of rounds 1 and 2
        rt.call("Setup", SETUP)
        _refusal(rt.call, "Restore", {"round": 0}, r"^party 'p1' refused Restore at round 0: its own checkpoint is "
                                                   r"from round 2")
        assert rt.call("Restore", {"round": 1})["round"] == 1  # the previous checkpoint
        _refusal(rt.call, "Step", {"round": 1, "inbox": Broadcast(1, np.zeros(3))},
                 r"^party 'p1' refused round index 1 and sent nothing: the next round is 2")
        _step(rt.call, 2)
    finally:
        rt.close()


def test_a_party_killed_between_its_checkpoint_renames_still_resumes(tmp_path, monkeypatch):
    """Killed while writing its checkpoint of round t (the walkthrough's ``kill -9``): the last one has been moved
    to the previous slot and the new one not yet installed. The coordinator's last complete checkpoint is the one
    before (this party never confirmed round t), and the party restores it."""
    rt = PartyRuntime(name="p1", protocol=SELFTEST, data={}, out=tmp_path, allow_seeded_noise=True)
    try:
        rt.call("Setup", SETUP)
        for t in range(3):
            _step(rt.call, t)
        rt.call("Checkpoint", {"round": 2})
        _step(rt.call, 3)
        real = checkpoints.os.replace

        def dies_at_install(src, dst):
            if Path(dst).name == checkpoints.CHECKPOINT_NAME:
                raise KeyboardInterrupt("killed")  # the process dies here: the new checkpoint is not installed
            return real(src, dst)

        monkeypatch.setattr(checkpoints.os, "replace", dies_at_install)
        with pytest.raises(KeyboardInterrupt):
            rt.call("Checkpoint", {"round": 3})
        monkeypatch.setattr(checkpoints.os, "replace", real)
        assert not (tmp_path / "checkpoint" / checkpoints.CHECKPOINT_NAME).exists()
        rt.call("Setup", SETUP)
        assert rt.call("Restore", {"round": 2})["round"] == 2
        _step(rt.call, 3)
    finally:
        rt.close()


def test_the_runtime_restores_only_its_own_checkpoint_round(tmp_path):
    rt = PartyRuntime(name="p1", protocol=SELFTEST, data={}, out=tmp_path, allow_seeded_noise=True)
    try:
        _attack(rt.call)
        log = [json.loads(x) for x in rt.audit_path.read_text().splitlines()]
        steps = [r for r in log if r["method"] == "Step" and r["status"] == "ok"]
        assert len(steps) == 3  # rounds 0, 1 and (after the restore) 2: nothing served twice
        assert any(r["method"] == "Restore" and r["status"] == "refused" for r in log)
    finally:
        rt.close()


def test_the_grpc_party_restores_only_its_own_checkpoint_round(tmp_path):
    pytest.importorskip("grpc")
    from dpadmm.backends import grpc_codec as codec
    from dpadmm.backends.grpc_party import PartyService

    svc = PartyService(name="p1", protocol=SELFTEST, data={}, out=tmp_path, secure=False, allow_seeded_noise=True)
    allowed = codec.allow_list(SELFTEST.types)

    def call(method, body):  # the bytes a gRPC call carries, through the service's handler
        return codec.decode(svc.handle(method, codec.encode(body, allowed=allowed), ""), allowed=allowed)

    try:
        _attack(call)
    finally:
        svc.close()


def test_a_second_coordinator_resuming_a_run_in_progress_is_refused_by_name(tmp_path):
    """Two coordinators (two verified names) resume one run at once: the party serves the first; the second's
    Setup, Restore and Step are refused, and the refusal says another coordinator's run is in progress (and whose)."""
    pytest.importorskip("grpc")
    from dpadmm.backends import grpc_codec as codec
    from dpadmm.backends.grpc_party import PartyService

    svc = PartyService(name="p1", protocol=SELFTEST, data={}, out=tmp_path, allow=("coordA", "coordB"),
                       allow_seeded_noise=True)
    allowed = codec.allow_list(SELFTEST.types)

    def call(peer, method, body):
        return codec.decode(svc.handle(method, codec.encode(body, allowed=allowed), peer), allowed=allowed)

    inbox = Broadcast(1, np.zeros(3))
    try:
        call("coordA", "Setup", SETUP)
        call("coordA", "Step", {"round": 0, "inbox": inbox})
        call("coordA", "Checkpoint", {"round": 0})
        call("coordA", "Setup", SETUP)  # both resume at once
        with pytest.raises(PolicyRefusal, match=r"^party 'p1' refused Setup from coordB and sent nothing; another "
                                                r"coordinator's run is in progress here \(run by coordA\)"):
            call("coordB", "Setup", SETUP)  # a run belongs to the coordinator that set it up (issue 36)
        call("coordA", "Restore", {"round": 0})
        with pytest.raises(PolicyRefusal, match=r"^party 'p1' refused Restore from coordB and sent nothing; another "
                                                r"coordinator's run is in progress here \(run by coordA\)"):
            call("coordB", "Restore", {"round": 0})
        with pytest.raises(PolicyRefusal, match=r"^party 'p1' refused Step from coordB and sent nothing; another "
                                                r"coordinator's run is in progress here \(run by coordA\)"):
            call("coordB", "Step", {"round": 1, "inbox": inbox})
        call("coordA", "Step", {"round": 1, "inbox": inbox})  # the run in progress goes on
        assert svc.rounds == 2
    finally:
        svc.close()
