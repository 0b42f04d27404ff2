"""A budgeted party sends a message without a privacy event only when its protocol declares that message type
released without one (``Protocol.exempt``: a public key, a ciphertext), with the reason in its audit line; any
other message without an event — an undeclared type, or a declared type with data outside its declared fields — is
refused with its reason, nothing is sent and nothing is charged (issue 28 needs the exemption, issue 25 item 3)."""

from __future__ import annotations

import json
from typing import NamedTuple

import numpy as np
import pytest

from dpadmm.privacy.events import GaussianRelease, RECORD_REPLACE
from dpadmm.privacy.policy import PartyPolicy, PolicyRefusal, RunPrice
from dpadmm.protocol import ExemptMessage, PolicyHooks, Protocol
from dpadmm.runtime import PartyRuntime


class Key(NamedTuple):
    public_key: np.ndarray


class Sealed(NamedTuple):
    ciphertexts: np.ndarray | None = None
    clear: np.ndarray | None = None


class Plain(NamedTuple):
    values: np.ndarray


def toy_setup(name: str, send: str):
    return {"name": name, "send": send}, 0


def toy_step(cfg, state, inbox, *, rng):
    """Round 0 sends ``cfg["send"]`` without an event; later rounds a noised, accounted release."""
    if state == 0:
        msg = {"key": Key(np.arange(1, 5, dtype=np.uint8)), "sealed": Sealed(np.ones(3, np.uint8)),
               "leaky": Sealed(np.ones(3, np.uint8), np.ones(2)), "plain": Plain(np.ones(2))}[cfg["send"]]
        return state + 1, msg, []
    return state + 1, Plain(np.ones(2) + rng.normal(size=2)), [GaussianRelease(cfg["name"], state, 1.0, 4.0,
                                                                              RECORD_REPLACE)]


PROTOCOL = Protocol(
    "toy-exempt", toy_setup, toy_step, private=lambda cfg: True, types=(Key, Sealed, Plain),
    policy=PolicyHooks(price=lambda cfg, rounds: RunPrice({4.0: rounds})),
    exempt=(ExemptMessage(Key, "a public key"),
            ExemptMessage(Sealed, "ciphertexts under the sender's own key", fields=("ciphertexts",))))


def _run(tmp_path, send):
    rt = PartyRuntime(name="p", protocol=PROTOCOL, data={}, out=tmp_path, allow_seeded_noise=True,
                      policy=PartyPolicy(max_epsilon=10.0, delta=1e-5))
    rt.call("Setup", {"protocol": PROTOCOL.name, "party": "p", "index": 0, "noise_seed": 1,
                      "setup": {"name": "p", "send": send}, "rounds": 3})
    return rt


def _steps(tmp_path):
    return [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()
            if json.loads(line)["method"] == "Step"]


@pytest.mark.parametrize("send, reason", [("key", "Key: a public key"),
                                          ("sealed", "Sealed: ciphertexts under the sender's own key")])
def test_a_declared_message_is_served_without_an_event_and_its_reason_audited(tmp_path, send, reason):
    rt = _run(tmp_path, send)
    try:
        rt.call("Step", {"round": 0, "inbox": None})
        rt.call("Step", {"round": 1, "inbox": None})
        assert rt.budget.run["charged"]["releases"] == 1  # the declared message charged nothing; the release one
    finally:
        rt.close()
    steps = _steps(tmp_path)
    assert [s["status"] for s in steps] == ["ok", "ok"]
    assert steps[0]["budget"]["exempt"] == reason and "exempt" not in steps[1]["budget"]


@pytest.mark.parametrize("send", ["plain", "leaky"], ids=["undeclared type", "declared type, data outside its fields"])
def test_an_undeclared_message_without_an_event_is_still_refused(tmp_path, send):
    rt = _run(tmp_path, send)
    try:
        with pytest.raises(PolicyRefusal) as exc:
            rt.call("Step", {"round": 0, "inbox": None})
        assert rt.budget.run["charged"]["releases"] == 0
    finally:
        rt.close()
    assert ("refused round 1 and sent nothing" in str(exc.value)
            and "the step released its message without a privacy event (an unaccounted release)" in str(exc.value))
    steps = _steps(tmp_path)
    assert steps[-1]["status"] == "refused" and steps[-1]["detail"] == str(exc.value) and "reply" not in steps[-1]
