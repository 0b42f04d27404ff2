"""The party runtime without a transport, the backends' declared capabilities, the old import paths."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpadmm.backends import InProcessBackend, ProcessBackend, get_backend
from dpadmm.backends.base import Backend
from dpadmm.backends.selftest import PROTOCOL as SELFTEST, Broadcast
from dpadmm.exceptions import InvalidParameterError
from dpadmm.privacy.policy import PartyPolicy, PolicyRefusal
from dpadmm.runtime import PartyRuntime


@pytest.fixture
def party(tmp_path):
    rt = PartyRuntime(name="p1", protocol=SELFTEST, data={}, out=tmp_path, allow_seeded_noise=True)
    yield rt
    rt.close()


def _audit(rt):
    return [json.loads(x) for x in rt.audit_path.read_text().splitlines()]


def test_the_runtime_serves_declared_calls_in_order_and_audits_each(party):
    party.call("Setup", {"protocol": "selftest", "party": "p1", "index": 0, "noise_seed": 0,
                         "setup": {"name": "p1", "size": 3, "noise": 0.0, "fault": None, "hang_seconds": 3600.0}, "rounds": 2})
    reply = party.call("Step", {"round": 0, "inbox": Broadcast(1, np.zeros(3))})
    assert set(reply) == {"outbox", "events"}
    with pytest.raises(PolicyRefusal, match=r"^party 'p1' refused round index 0 and sent nothing: the next round is 1"):
        party.call("Step", {"round": 0, "inbox": Broadcast(1, np.zeros(3))})
    with pytest.raises(PolicyRefusal, match=r"^party 'p1' serves no method Reset \(only Hello, Setup"):
        party.call("Reset", {})
    with pytest.raises(PolicyRefusal, match=r"^party 'p1' refused request 'model': protocol 'selftest' declares only"):
        party.call("Request", {"handler": "model", "arguments": {}})
    log = _audit(party)
    assert [(r["method"], r["status"]) for r in log[1:]] == [
        ("Setup", "ok"), ("Step", "ok"), ("Step", "refused"), ("Reset", "refused"), ("Request", "refused")]


def test_a_private_only_runtime_refuses_a_non_private_run_before_setup_returns(tmp_path):
    rt = PartyRuntime(name="p1", protocol=SELFTEST, data={}, out=tmp_path, policy=PartyPolicy(private_only=True))
    try:
        with pytest.raises(PolicyRefusal, match="^party 'p1' refused a non-private run: its operator started it "
                                                "with --private-only"):
            rt.call("Setup", {"protocol": "selftest", "party": "p1", "setup": {"name": "p1", "size": 3, "noise": 0.0, "fault": None, "hang_seconds": 3600.0}})
        assert rt.cfg is None  # nothing set up: no round can be served
    finally:
        rt.close()


def test_backends_declare_their_capabilities():
    for kind in (InProcessBackend, ProcessBackend):
        be = kind()
        assert be.peer_to_peer is False and be.models_stay_at_parties is False and be.routed() is None
        assert be.require_protocol("anything", ["p1"]) is None
    assert Backend.peer_to_peer is False
    from dpadmm.backends.grpc_backend import GrpcBackend

    be = GrpcBackend({"p1": "127.0.0.1:1"}, insecure=True)
    assert be.models_stay_at_parties is True and be.peer_to_peer is False and isinstance(be.routed(), GrpcBackend)
    with pytest.raises(InvalidParameterError, match="a gRPC party's policy is its operator's"):
        get_backend("grpc", peers={"p1": "127.0.0.1:1"}, insecure=True, policies={"p1": PartyPolicy()})


def test_the_old_import_paths_still_work():
    from dpadmm.backends import grpc_codec
    from dpadmm.backends.grpc_party import CHANNEL_OPTIONS, MAX_MESSAGE, METHODS, SERVICE, PartyService
    from dpadmm.backends.grpc_wire import METHODS as WIRE_METHODS
    from dpadmm.backends.tls_rounds import MAX_FRAME, RoundClient, client_context, exchange  # noqa: F401
    from dpadmm.backends.transcript import describe, flatten  # noqa: F401
    from dpadmm.runtime import codec

    assert grpc_codec is codec and METHODS is WIRE_METHODS and MAX_FRAME == MAX_MESSAGE
    assert issubclass(PartyService, PartyRuntime) and SERVICE == "dpadmm.Party" and CHANNEL_OPTIONS
    assert codec.decode(codec.encode({"a": np.arange(3)}))["a"].tolist() == [0, 1, 2]
