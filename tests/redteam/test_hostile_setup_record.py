"""A coordinator's Setup that departs from the protocol's declared Setup record, in the exact bytes it sends (issue 25,
item 3): a field the record does not declare (e.g. a smuggled ``sensitivity``), a missing required field, a value of
the wrong type, a positional argument list, a setup that is not a mapping. Each is refused before the party reads its
data, with one line naming the field; nothing is priced or charged, and the audit line records the reason."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("grpc")

from dpadmm.backends.grpc_party import _Refused  # noqa: E402
from dpadmm.protocol import PartyData, setup_fields  # noqa: E402
from test_grpc_experts import PROTO, Party, _audit  # noqa: E402


def _honest(party):
    return setup_fields(PROTO, party.args())


@pytest.mark.parametrize("hostile, reason", [
    (lambda p: dict(_honest(p), sensitivity=0.0),
     r"setup field 'sensitivity' is not a field of dpadmm\.algorithms\.experts\.messages\.Setup \(name, train, score, "
     r"R, lam, noise_multiplier, noise_norm, model, flip_probability, bounds, range_noise_multiplier, loss, huber_kappa\); "
     r"send the declared fields only$"),
    (lambda p: {k: v for k, v in _honest(p).items() if k != "train"},
     r"setup field 'train' of dpadmm\.algorithms\.experts\.messages\.Setup is missing \(required: name, train\)$"),
    (lambda p: dict(_honest(p), noise_multiplier="1e-12"),
     r"setup field 'noise_multiplier' of dpadmm\.algorithms\.experts\.messages\.Setup must be float \| None, got str$"),
    (lambda p: dict(_honest(p), R=np.ones(3)),
     r"setup field 'R' of dpadmm\.algorithms\.experts\.messages\.Setup must be float, got ndarray$"),
    (lambda p: list(_honest(p).values()),
     r"the setup must be a mapping of dpadmm\.algorithms\.experts\.messages\.Setup's fields by name"),
], ids=["unknown field", "missing field", "wrong type", "array for a scalar", "positional list"])
def test_a_setup_record_off_its_declaration_is_refused_naming_the_field(tmp_path, hostile, reason):
    party = Party(tmp_path)
    body = {"protocol": PROTO.name, "party": "party2", "index": 0, "rounds": 1, "setup": hostile(party)}
    with pytest.raises(_Refused, match=r"^party 'party2' refused Setup: " + reason) as exc:
        party.call("Setup", body)
    assert party.svc.budget.status()["runs"] == 0 and party.svc.budget.status()["releases"] == 0
    last = _audit(party.svc)[-1]
    assert (last["method"], last["status"], last["detail"]) == ("Setup", "refused", str(exc.value))


def test_positional_args_are_refused_on_the_wire(tmp_path):
    party = Party(tmp_path)
    args = ["party2", PartyData("train", {"ids": party.train_ids, "index": 2, "n_features": 3}), None, 1.0]
    with pytest.raises(_Refused, match=r"^party 'party2' refused Setup: it carries no 'setup' record \(positional "
                                       r"'args' are not accepted\); send the fields of Setup by name \(name, train, "):
        party.call("Setup", {"protocol": PROTO.name, "party": "party2", "index": 0, "rounds": 1, "args": args})
    assert party.svc.budget.status()["runs"] == 0
    party.setup()  # the same party accepts the honest record by name
    assert party.svc.budget.status()["runs"] == 1


@pytest.mark.parametrize("body, reason", [
    ({"args": ["test"]}, r"positional 'args' are not accepted; send its 'arguments' by name$"),
    ({"arguments": {"key": "test", "rows": [0]}}, r"request 'logit' has no argument 'rows' \(its arguments: key\)$"),
    ({"arguments": ["test"]}, r"request 'logit''s arguments must be a mapping by name \(key\), got list$"),
], ids=["positional", "unknown argument", "not a mapping"])
def test_a_request_off_its_handler_is_refused_naming_the_argument(tmp_path, body, reason):
    party = Party(tmp_path)
    party.setup()
    with pytest.raises(_Refused, match=r"^party 'party2' refused request 'logit': " + reason) as exc:
        party.call("Request", dict(body, handler="logit"))
    last = _audit(party.svc)[-1]
    assert (last["method"], last["status"], last["detail"]) == ("Request", "refused", str(exc.value))
