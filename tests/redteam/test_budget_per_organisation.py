"""Issue 36: one budget per data set and per organisation — what a coordinator (or an operator's configuration)
can no longer do: start a budgeted server without the organisation's store, query PSI without caps, read membership
from the clear-join check, or take over another coordinator's run (``PartyService.handle``, the path of every call
over gRPC)."""

from __future__ import annotations

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
from dpadmm.exceptions import InvalidParameterError  # noqa: E402
from dpadmm.kernels.regularizers import L2  # noqa: E402
from dpadmm.privacy.policy import PartyPolicy  # noqa: E402
from dpadmm.protocol import PartyData  # noqa: E402
from conftest import ledger_of, run_cli  # noqa: E402

OWN = [f"c{i:03d}" for i in range(40)]  # the party's customers


@pytest.fixture
def path(tmp_path):
    rng = np.random.default_rng(0)
    p = tmp_path / "shop.csv"
    pd.DataFrame({"id": OWN, "g0": rng.normal(size=40), "g1": rng.normal(size=40)}).to_csv(p, index=False)
    yield p
    data_alignment._ALIGNED.pop(str(p), None)


class Party:
    """party2 serving vertical-sharing and psi-align with a budget and the default PSI caps, called by name."""

    def __init__(self, out, path, **policy):
        self.svc = PartyService(name="party2", protocol=[vertical_protocol.PROTOCOL, psi_protocol.PROTOCOL], data={"train": str(path)},
                                out=out, secure=True, allow=("coordA", "coordB"), max_epsilon=8.0, delta=1e-5,
                                policy=PartyPolicy(relation="record", **policy))
        self.allowed = codec.allow_list(vertical_protocol.PROTOCOL.types + psi_protocol.PROTOCOL.types)

    def call(self, method, body, peer="coordA"):
        return codec.decode(self.svc.handle(method, codec.encode(body, allowed=self.allowed), peer),
                            allowed=self.allowed)

    def fit_setup(self, join: dict, peer="coordA"):
        spec = vertical_messages.PrivacySpec(noise_multiplier=5.0, mechanism="gaussian", relation="record", clip=30.0, clip_inf=3.0)
        n = len(join.get("ids", OWN))
        D = PartyData("train", {**join, "index": 2, "n_features": 2}, (n, 2))
        opts = {"lam_sum": 1.0, "reg": L2(), "private": spec, "bound": None, "damping": 0.0, "eval_blocks": {}}
        return self.call("Setup", {"protocol": vertical_protocol.PROTOCOL.name, "party": "party2", "index": 1, "rounds": 3,
                                   "setup": {"name": "party2", "D": D, "options": opts}}, peer)

    def step(self, t, peer="coordA"):
        n = len(OWN)
        return self.call("Step", {"round": t, "inbox": vertical_messages.CoordinatorMessage(t, np.zeros(n), np.ones(n) * (t > 0), 0.5)},
                         peer)

    def psi(self, query: list[str], peer="coordA"):
        """One PSI run as the coordinator makes it; returns the ids of ``query`` the party holds."""
        self.call("Setup", {"protocol": psi_protocol.PROTOCOL.name, "party": "party2", "index": 0,
                            "setup": {"name": "party2", "ids": PartyData("train", {"id_column": "id"}),
                                      "client_size": len(query)}}, peer)
        client = psi_lib.client.CreateWithNewKey(True)
        req = np.frombuffer(client.CreateRequest(query).SerializeToString(), dtype=np.uint8).copy()
        setup, resp = psi_lib.ServerSetup(), psi_lib.Response()
        setup.ParseFromString(np.asarray(self.call("Request", {"handler": "setup_message", "arguments": {}}, peer)
                                         ["value"], dtype=np.uint8).tobytes())
        resp.ParseFromString(np.asarray(self.call("Request", {"handler": "respond", "arguments": {"request": req}},
                                                  peer)["value"], dtype=np.uint8).tobytes())
        self.call("Finish", {"completed": True}, peer)
        return [query[i] for i in client.GetIntersection(setup, resp)]


# ----------------------------------------------------------------------------- one store per organisation
def test_a_budgeted_server_without_its_organisations_store_refuses_to_start(tmp_path, path, capsys, monkeypatch):
    """Two $HOMEs (or two $DPADMM_LEDGER_DIRs, as before) and no store configured: refused, not one budget each."""
    monkeypatch.delenv("DPADMM_LEDGER")
    monkeypatch.delenv("DPADMM_LEDGER_KEY")
    for home in ("home1", "home2"):
        monkeypatch.setenv("HOME", str(tmp_path / home))
        monkeypatch.setenv("DPADMM_LEDGER_DIR", str(tmp_path / home / "ledgers"))
        code, out, err = run_cli(["party", "serve", "--protocol", "vertical-sharing", "--name", "party2", "--insecure",
                                  "--out", tmp_path / home / "out", "--data", f"train={path}", "--relation", "record",
                                  "--max-epsilon", "1.5", "--delta", "1e-5"], capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "needs its organisation's ledger store: give --ledger URL ($DPADMM_LEDGER) and --ledger-key" in err
        assert not (tmp_path / home / "ledgers").exists() and not (tmp_path / home / ".dpadmm").exists()
    code, _, err = run_cli(["party", "serve", "--protocol", "vertical-sharing", "--name", "party2", "--insecure",
                            "--out", tmp_path / "o", "--data", f"train={path}", "--ledger-dir", tmp_path / "l",
                            "--max-epsilon", "1.5", "--delta", "1e-5"], capsys)
    assert code == 2 and "--ledger-dir is gone" in err
    # the Python API has the same default: no budget per output folder
    with pytest.raises(InvalidParameterError, match="needs its organisation's ledger store"):
        Party(tmp_path / "api", path)


def test_the_key_is_kept_apart_from_an_sqlite_store(tmp_path, path, monkeypatch):
    monkeypatch.setenv("DPADMM_LEDGER", f"sqlite:///{tmp_path}/s/ledger.db")
    monkeypatch.setenv("DPADMM_LEDGER_KEY", str(tmp_path / "s" / "ledger.key"))
    with pytest.raises(InvalidParameterError, match="keep the key apart from the store"):
        Party(tmp_path / "o", path)


# ----------------------------------------------------------------------------- PSI caps, per data set, by default
def test_the_default_psi_caps_refuse_a_20000_id_query(tmp_path, path):
    party = Party(tmp_path / "o", path)
    try:
        with pytest.raises(_Refused, match=r"a query of 20000 ids, its operator allows at most 10000"):
            party.psi([f"x{i}" for i in range(20_000)])
        assert party.psi(["c001", "zz"]) == ["c001"]  # a query within the caps is answered
    finally:
        party.svc.close()


def test_three_servers_of_one_data_set_answer_at_most_the_cap_together(tmp_path, path):
    copy = tmp_path / "copy.csv"
    copy.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))  # the same rows, another file
    parties = [Party(tmp_path / f"o{i}", f, psi_max_runs=4) for i, f in enumerate((path, path, copy))]
    answered = refused = 0
    try:
        for i in range(9):
            try:
                parties[i % 3].psi([f"c{i:03d}"])
                answered += 1
            except _Refused as exc:
                assert "PSI queries on this data set in the last 86400 s (by every server" in str(exc)
                refused += 1
    finally:
        for p in parties:
            p.svc.close()
    assert answered == 4 and refused == 5
    assert len(ledger_of(path)["psi"]) == 4  # counted in the store, per data set


def test_the_clear_join_check_is_no_membership_oracle(tmp_path, path):
    """39 of the 40 ids known, five guesses for the 40th (the right one third): nothing learnt — after the first
    wrong guess every clear-join Setup gets the same refusal, the right guess included."""
    party = Party(tmp_path / "o", path)
    known = OWN[:-1]
    answers = []
    try:
        for guess in ("c100", "c200", OWN[-1], "c300", "c400"):
            try:
                party.fit_setup({"ids": np.array(known + [guess])})
                answers.append("accepted")
            except _Refused as exc:
                answers.append(str(exc))
    finally:
        party.svc.close()
    assert "not exactly the ids" in answers[0]
    assert len(set(answers[1:])) == 1 and "closes clear joins and PSI on it" in answers[1]  # the same answer to all
    with pytest.raises(_Refused, match="closes clear joins and PSI"):  # and PSI is closed for the period too
        again = Party(tmp_path / "o2", path)
        try:
            again.psi(["c001"])
        finally:
            again.svc.close()


# ----------------------------------------------------------------------------- a run belongs to its coordinator
def test_another_coordinator_can_neither_take_over_nor_abort_a_run_in_progress(tmp_path, path):
    party = Party(tmp_path / "o", path)
    try:
        party.fit_setup({"ids": np.array(OWN)})
        party.step(0)
        party.step(1)
        party.call("Checkpoint", {"round": 1})
        for method, body in (("Setup", None), ("Step", {"round": 2}), ("Restore", {"round": 1}),
                             ("Finish", {"completed": False}), ("Checkpoint", {"round": 1})):
            with pytest.raises(_Refused, match=r"another coordinator's run is in progress here \(run by coordA\)"):
                if body is None:
                    party.fit_setup({"ids": np.array(OWN)}, peer="coordB")
                else:
                    party.call(method, body, peer="coordB")
        party.step(2)  # the run goes on, untouched
        party.call("Finish", {"completed": True})
        # the run is over: coordB may set up its own, but not restore coordA's checkpoint into it
        party.fit_setup({"ids": np.array(OWN)}, peer="coordB")
        with pytest.raises(_Refused, match=r"refused Restore from coordB: its checkpoint is of a run by coordA"):
            party.call("Restore", {"round": 1}, peer="coordB")
    finally:
        party.svc.close()
