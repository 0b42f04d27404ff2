"""Issue 26: PSI is the only door to membership. Attacked as a coordinator sending well-formed messages to a party
(``PartyService.handle``, the path of every call over gRPC): a Setup naming ids as a subset, repeated ``align`` calls,
an oversized query and too many PSI runs learn nothing outside a PSI intersection, and each refusal is audited."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("grpc")
psi_lib = pytest.importorskip("private_set_intersection.python")

from dpadmm.algorithms.vertical import messages as vertical_messages, protocol as vertical_protocol  # noqa: E402
from dpadmm.backends import grpc_codec as codec  # noqa: E402
from dpadmm.backends.grpc_party import PartyService, _Refused  # noqa: E402
from dpadmm.algorithms.psi import protocol as psi_protocol  # noqa: E402
from dpadmm.data import alignment as data_alignment  # noqa: E402
from dpadmm.exceptions import InvalidParameterError, ProtocolError  # noqa: E402
from dpadmm.kernels.regularizers import L2  # noqa: E402
from dpadmm.privacy.policy import PartyPolicy  # noqa: E402
from dpadmm.protocol import PartyData  # noqa: E402
from conftest import run_cli  # noqa: E402

OWN = [f"c{i:03d}" for i in range(40)]  # the party's customers


@pytest.fixture
def path(tmp_path):
    rng = np.random.default_rng(0)
    p = tmp_path / "shop.csv"
    pd.DataFrame({"id": OWN, "g0": rng.normal(size=40), "g1": rng.normal(size=40)}).to_csv(p, index=False)
    yield p
    data_alignment._ALIGNED.pop(str(p), None)


class Party:
    """party2 serving vertical-sharing and psi-align with a budget, driven with the bytes a coordinator sends."""

    def __init__(self, tmp_path, path, **policy):
        self.svc = PartyService(name="party2", protocol=[vertical_protocol.PROTOCOL, psi_protocol.PROTOCOL], data={"train": str(path)},
                                out=tmp_path / "p2", secure=False, max_epsilon=8.0, delta=1e-5,
                                policy=PartyPolicy(relation="record", **policy))
        self.allowed = codec.allow_list(vertical_protocol.PROTOCOL.types + psi_protocol.PROTOCOL.types)

    def call(self, method, body):
        return codec.decode(self.svc.handle(method, codec.encode(body, allowed=self.allowed), ""),
                            allowed=self.allowed)

    def fit_setup(self, join: dict):
        spec = vertical_messages.PrivacySpec(noise_multiplier=5.0, mechanism="gaussian", relation="record", clip=30.0, clip_inf=3.0)
        n = len(join.get("ids", OWN))
        D = PartyData("train", {**join, "index": 2, "n_features": 2}, (n, 2))
        opts = {"lam_sum": 1.0, "reg": L2(), "private": spec, "bound": None, "damping": 0.0, "eval_blocks": {}}
        return self.call("Setup", {"protocol": vertical_protocol.PROTOCOL.name, "party": "party2", "index": 1, "rounds": 3,
                                   "setup": {"name": "party2", "D": D, "options": opts}})

    def psi(self, query: list[str]):
        """One PSI run as the coordinator makes it; returns the ids of ``query`` the party holds."""
        self.call("Setup", {"protocol": psi_protocol.PROTOCOL.name, "party": "party2", "index": 0,
                            "setup": {"name": "party2", "ids": PartyData("train", {"id_column": "id"}),
                                      "client_size": len(query)}})
        client = psi_lib.client.CreateWithNewKey(True)
        req = np.frombuffer(client.CreateRequest(query).SerializeToString(), dtype=np.uint8).copy()
        setup, resp = psi_lib.ServerSetup(), psi_lib.Response()
        setup.ParseFromString(np.asarray(self.call("Request", {"handler": "setup_message", "arguments": {}})["value"],
                                         dtype=np.uint8).tobytes())
        resp.ParseFromString(np.asarray(self.call("Request", {"handler": "respond", "arguments": {"request": req}})["value"],
                                        dtype=np.uint8).tobytes())
        return [query[i] for i in client.GetIntersection(setup, resp)]

    def align(self, ids):
        return self.call("Request", {"handler": "align", "arguments": {"common": np.array(ids)}})["value"]

    def audit(self):
        return [json.loads(x) for x in self.svc.audit_path.read_text().splitlines()]


def test_a_subset_setup_names_rows_only_through_a_psi_intersection(tmp_path, path):
    party = Party(tmp_path, path)
    try:
        messages = []
        for probe in (["c001", "c002"], ["c001", "x999"], ["y1", "y2"]):  # members or not: the same refusal
            with pytest.raises(_Refused) as err:
                party.fit_setup({"ids": np.array(probe), "subset": True})
            messages.append(str(err.value))
        assert len(set(messages)) == 1 and "outside the intersection of a PSI run this party took part in" in messages[0]
        assert not any(i in messages[0] for i in ("c001", "x999", "y1", str(path)))
        common = data_alignment.canonical_order(party.psi(["c003", "c007", "z1"]))
        assert common == ["c003", "c007"]
        party.align(common)
        party.fit_setup({"psi": True})  # the intersection, in the party's own alignment
        party.fit_setup({"ids": np.array(["c007"]), "subset": True})  # inside it: allowed
        with pytest.raises(_Refused, match="outside the intersection"):
            party.fit_setup({"ids": np.array(["c007", "c008"]), "subset": True})  # c008 holds, but was never queried
        party.fit_setup({"ids": np.array(OWN)})  # a join in the clear: the same samples ...
        with pytest.raises(_Refused, match="not exactly the ids of its 'train' file") as err:
            party.fit_setup({"ids": np.array(OWN[:-1])})  # ... or nothing
        assert OWN[-1] not in str(err.value)
        with pytest.raises(_Refused, match="closes clear joins and PSI on it for the period"):
            party.fit_setup({"ids": np.array(OWN)})  # a refused check closes the oracle: even the right ids now
    finally:
        party.svc.close()
    setups = [r for r in party.audit() if r["method"] == "Setup"]
    assert [r["status"] for r in setups].count("refused") == 6  # every probe is on record


def test_align_answers_once_per_psi_query(tmp_path, path):
    party = Party(tmp_path, path)
    try:
        assert party.psi(["c005"]) == ["c005"]
        with pytest.raises(_Refused, match="refused align: an id is not in its file"):
            party.align(["zzz"])
        for probe in (["c005"], ["c006"], ["c009"]):  # never queried: not answered, member or not
            with pytest.raises(_Refused, match="refused a second align in one PSI setup; run PSI again"):
                party.align(probe)
    finally:
        party.svc.close()


def test_the_operator_caps_a_querys_size_and_the_psi_runs_per_period(tmp_path, path):
    party = Party(tmp_path, path, psi_max_query=5, psi_max_runs=2, psi_period=3600.0)
    try:
        with pytest.raises(_Refused, match=r"a query of 20 ids, its operator allows at most 5 \(--psi-max-query\)"):
            party.psi([f"c{i:03d}" for i in range(20)])
        party.psi(["c001"])
        party.psi(["c002", "c003"])
        with pytest.raises(_Refused, match=r"2 PSI queries on this data set in the last 3600 s \(by every server of the "
                                           r"organisation\), its operator allows 2 \(--psi-max-runs\)"):
            party.psi(["c004"])
    finally:
        party.svc.close()
    again = Party(tmp_path, path, psi_max_runs=2, psi_period=3600.0)  # a restart does not reset the count
    try:
        with pytest.raises(_Refused, match="--psi-max-runs"):
            again.psi(["c004"])
    finally:
        again.svc.close()
    log = again.audit()
    assert log[0]["method"] == "Start" and log[0]["policy"]["psi_max_runs"] == 2
    assert any(r["status"] == "ok" and r.get("budget", {}).get("psi_runs_in_period") == 2 for r in log)
    assert sum(r["status"] == "refused" and "--psi-max" in r.get("detail", "") for r in log) == 3


def test_an_old_psi_run_leaves_the_period(tmp_path):
    gate = data_alignment.PsiGate(tmp_path / "runs.json", max_runs=1, period=60.0)
    (tmp_path / "runs.json").write_text(json.dumps({"psi_runs": [0.0]}))  # 1970: long outside the period
    assert gate.admit("p", 3)["psi_runs_in_period"] == 1
    with pytest.raises(ProtocolError, match="1 PSI runs in the last 60 s"):
        data_alignment.PsiGate(tmp_path / "runs.json", max_runs=1, period=60.0).admit("p", 3)


@pytest.mark.parametrize("flag, message", [
    (["--psi-max-query", "0"], "--psi-max-query must be an integer >= 1, got --psi-max-query 0"),
    (["--psi-max-runs", "-2"], "--psi-max-runs must be an integer >= 1, got --psi-max-runs -2"),
    (["--psi-period", "0"], "--psi-period must be"),
])
def test_psi_flags_are_checked_at_start(tmp_path, path, capsys, flag, message):
    code, _, err = run_cli(["party", "serve", "--protocol", "psi-align", "--name", "party2", "--data", f"train={path}",
                            "--insecure", "--no-budget", "--out", tmp_path / "o", *flag], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_the_policy_checks_the_psi_caps_too():  # a --policy file's values, which the CLI's range check does not see
    for field, value, message in (("psi_max_query", 0, "--psi-max-query must be a positive integer, got 0."),
                                  ("psi_max_runs", 1.5, "--psi-max-runs must be a positive integer, got 1.5."),
                                  ("psi_period", 0.0, "--psi-period must be a positive number of seconds, got 0.0.")):
        with pytest.raises(InvalidParameterError) as err:
            PartyPolicy(**{field: value})
        assert str(err.value) == message


def test_setup_rows_directly(tmp_path, path):
    with pytest.raises(ProtocolError, match="has no PSI alignment of its 'train' file"):
        data_alignment.setup_rows("p", "train", path, {"psi": True})
    assert data_alignment.setup_rows("p", "train", path, {"index": 2}) == {"index": 2}  # no rows named: the protocol's own read
    with pytest.raises(InvalidParameterError, match="--psi-max-query must be a positive integer"):
        data_alignment.PsiGate(max_query=0)
