"""The encrypted protocol's feature guarantee rests on premises (an honest-but-curious label party; with three or
more parties, honest-but-curious peers): the privacy report names them, and a party with private work refuses the
Setup unless its operator accepted every one in its policy (issue 35)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpadmm.algorithms.encrypted import party as ep
from dpadmm.algorithms.encrypted.policy import ENCRYPTED
from dpadmm.algorithms.encrypted.report import encrypted_report
from dpadmm.backends.inprocess import InProcessBackend
from dpadmm.estimators.vertical_encrypted import VerticalEncryptedClassifier
from dpadmm.exceptions import InvalidParameterError, ProtocolError
from dpadmm.experiments.audit_games_encrypted import plaintext_he
from dpadmm.algorithms.encrypted import driver
from dpadmm.privacy.events import RECORD_REPLACE, GaussianRelease
from dpadmm.privacy.policy import PartyPolicy, PolicyRefusal, load_policy
from dpadmm.runtime.local import PartyOperator

BUDGET = dict(max_epsilon=4.0, delta=1e-5, row_clip=1.0)


def _cfg(peers=None):
    D = np.random.default_rng(0).normal(size=(20, 2))
    with plaintext_he():
        cfg, _ = ep.setup_party("party2", D, None, 1.0, 2.0, 3, 1e-4, 2.0, "encrypted", 0.0, 1.0, 1.0, 1.0, 3, peers)
    return cfg


def test_a_budgeted_party_refuses_unless_its_operator_accepts_the_premise():
    cfg = _cfg()
    with pytest.raises(PolicyRefusal) as exc:
        ENCRYPTED.check(cfg, [], PartyPolicy(**BUDGET), "party2")
    msg = str(exc.value)
    assert "\n" not in msg and "against an honest-but-curious label party" in msg
    assert "--accept-premise honest-label-party" in msg and "accept_premises = ['honest-label-party']" in msg
    ENCRYPTED.check(cfg, [], PartyPolicy(accept_premises=("honest-label-party",), **BUDGET), "party2")  # accepted
    ENCRYPTED.check(cfg, [], PartyPolicy(), "party2")  # no private work (a simulation): nothing to accept


def test_with_peers_both_premises_must_be_accepted():
    cfg = _cfg({"party3": (1.0, 1.0, 2)})
    with pytest.raises(PolicyRefusal, match="honest-but-curious peers.*--accept-premise honest-peers"):
        ENCRYPTED.check(cfg, [], PartyPolicy(accept_premises=("honest-label-party",), **BUDGET), "party2")
    ENCRYPTED.check(cfg, [], PartyPolicy(accept_premises=("honest-label-party", "honest-peers"), **BUDGET), "party2")


def test_policy_file_and_unknown_premise(tmp_path):
    p = tmp_path / "policy.toml"
    p.write_text('max_epsilon = 2.0\ndelta = 1e-5\naccept_premises = ["honest-label-party"]\n')
    assert load_policy(p).accept_premises == ("honest-label-party",)
    assert "honest-label-party" in load_policy(p).to_dict()["accept_premises"]  # what the audit log records
    with pytest.raises(InvalidParameterError, match=r"unknown premise\(s\) \['honest-everyone'\].*known"):
        PartyPolicy(accept_premises=("honest-everyone",))


def test_the_runtime_refuses_the_setup_and_audits_the_refusal(tmp_path):
    rng = np.random.default_rng(1)
    D = rng.normal(size=(30, 2))
    specs = driver.specs({"party2": (D, None)}, R=1.0, noise_multiplier=8.0, rounds=2, lam=1e-3, step_size=2.0,
                         forward="encrypted", momentum=0.0, W=1.0, label_W=1.0, label_width=3)
    with plaintext_he():
        be = InProcessBackend(policies={"party2": PartyOperator(policy=PartyPolicy(**BUDGET))}, party_dir=tmp_path)
        try:
            with pytest.raises(ProtocolError, match="--accept-premise honest-label-party"):
                be.start(specs, rounds=6)
        finally:
            be.close()
    lines = [json.loads(x) for x in (tmp_path / "party2" / "audit.jsonl").read_text().splitlines()]
    assert "premise" not in lines[0]["detail"]  # the Start line: nothing accepted
    assert any("honest-but-curious label party" in json.dumps(x) for x in lines[1:])  # the refusal, audited
    ok = PartyPolicy(accept_premises=("honest-label-party",), **BUDGET)
    with plaintext_he():
        be = InProcessBackend(policies={"party2": PartyOperator(policy=ok)}, party_dir=tmp_path / "accepted")
        try:
            be.start(specs, rounds=6)  # accepted: the Setup is served
        finally:
            be.close()
    start = json.loads((tmp_path / "accepted" / "party2" / "audit.jsonl").read_text().splitlines()[0])
    assert start["policy"]["accept_premises"] == ["honest-label-party"]
    assert "premise accepted by its operator: its guarantee holds only against an honest-but-curious label party" \
        in start["detail"]


def test_party_serve_refuses_an_unknown_premise(tmp_path, capsys):
    from conftest import run_cli

    code, out, err = run_cli(["party", "serve", "--accept-premise", "honest-everyone", "--no-budget", "--name",
                              "party2", "--protocol", "vertical-encrypted", "--out", tmp_path / "p"], capsys)
    assert code == 2 and "unknown premise(s) ['honest-everyone']" in out + err and "honest-label-party" in out + err
    assert not (tmp_path / "p").exists()


def test_the_report_names_the_premises():
    ev = [GaussianRelease("party2", 0, 1.0, 3.0, RECORD_REPLACE)]
    one = encrypted_report(ev, delta=1e-5, forward="encrypted", label_sensitivity=1.0, rounds=1)["features"]
    assert one["against"] == "against an honest-but-curious label party" and one["premises"] == ["honest-label-party"]
    assert "against an honest-but-curious label party" in one["note"] and "accept-premise" in one["note"]
    two = encrypted_report(ev, delta=1e-5, forward="encrypted", label_sensitivity=1.0, rounds=1, parties=2)["features"]
    assert two["premises"] == ["honest-label-party", "honest-peers"] and "honest-but-curious peers" in two["against"]


def test_the_estimator_states_the_premise():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 4))
    y = np.where(X @ rng.normal(size=4) > 0, 1, -1)
    with plaintext_he():
        m = VerticalEncryptedClassifier(epsilon=1.0, label_epsilon=1.0, rounds=2, combine="joint",
                                        random_state=0).fit([X[:, :2], X[:, 2:]], y)
    assert m.privacy_["features"]["against"] == "against an honest-but-curious label party"
