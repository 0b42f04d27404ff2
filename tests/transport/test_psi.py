"""PSI id alignment over mutual TLS: the parties' rows are the true intersection, in one order, and no
id outside the intersection crosses the wire; every misuse is refused by the party."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

grpc = pytest.importorskip("grpc")
pytest.importorskip("private_set_intersection")

from dpadmm.algorithms.vertical import protocol as vs  # noqa: E402
from dpadmm.algorithms.vertical.messages import Setup  # noqa: E402
from dpadmm.backends import PartySpec  # noqa: E402
from dpadmm.backends import grpc_codec as codec  # noqa: E402
from dpadmm.backends.grpc_backend import GrpcBackend  # noqa: E402
from dpadmm.backends.grpc_party import PartyService  # noqa: E402
from dpadmm.backends.grpc_tls import TLSFiles, provision  # noqa: E402
from dpadmm.algorithms.psi import protocol as psi_protocol  # noqa: E402
from dpadmm.data import alignment as data_alignment  # noqa: E402
from dpadmm.fit import psi as fit_psi  # noqa: E402
from dpadmm.exceptions import ProtocolError  # noqa: E402
from dpadmm.protocol import PartyData  # noqa: E402
from conftest import serve_parties  # noqa: E402

NAMES = ("party1", "party2")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    root = tmp_path_factory.mktemp("pki")
    provision(["coordinator", *NAMES], root)
    return root


@pytest.fixture
def files(tmp_path):
    """Label party: customers c0000..c0599 (shuffled); party 2: c0400..c0999 — 200 in common."""
    rng = np.random.default_rng(3)
    a = [f"c{i:04d}" for i in rng.permutation(600)]
    b = [f"c{i:04d}" for i in rng.permutation(np.arange(400, 1000))]
    p1, p2 = tmp_path / "bank.csv", tmp_path / "shop.csv"
    pd.DataFrame({"id": a, "y": rng.integers(0, 2, 600), "f0": rng.normal(size=600), "f1": rng.normal(size=600)}
                 ).to_csv(p1, index=False)
    pd.DataFrame({"id": b, "g0": rng.normal(size=600), "g1": rng.normal(size=600), "g2": rng.normal(size=600)}
                 ).to_csv(p2, index=False)
    return a, b, (p1, p2)


@pytest.fixture
def parties(pki, files, tmp_path):
    services = {name: PartyService(name=name, protocol=[vs.PROTOCOL, psi_protocol.PROTOCOL], data={"train": str(path)},
                                   out=tmp_path / name, allow=("coordinator",))
                for name, path in zip(NAMES, files[2])}
    peers, stop = serve_parties(services, lambda name: TLSFiles.load(tls_dir=pki / name))
    yield peers, services
    stop()


def _backend(peers, pki):
    return GrpcBackend(peers, tls=TLSFiles.load(tls_dir=pki / "coordinator"), timeout=30.0, connect_timeout=5.0)


def test_psi_aligns_the_true_intersection_and_sends_no_other_id(parties, pki, files, monkeypatch):
    a, b, paths = files
    peers, services = parties
    wire = []  # every byte string the coordinator sends or receives
    enc, dec = codec.encode, codec.decode
    monkeypatch.setattr(codec, "encode", lambda *x, **k: wire.append(enc(*x, **k)) or wire[-1])
    monkeypatch.setattr(codec, "decode", lambda data, *x, **k: wire.append(bytes(data)) or dec(data, *x, **k))
    be = _backend(peers, pki)
    try:
        al = fit_psi.align_parties(be, list(NAMES), "train", np.array(a))
    finally:
        be.close()
    common = sorted(set(a) & set(b))
    assert list(al.ids) == common and len(common) == 200
    assert al.parties["party2"] == {"set_size": 600, "overlap": 200}
    for path in paths:  # each party keeps its rows of the intersection, in the common order
        assert list(data_alignment.aligned_ids(path)) == common
    blob = b"".join(wire)
    outside = (set(a) | set(b)) - set(common)

    def sent(i):  # as UTF-8 (JSON header, PSI bytes) or as a numpy unicode array (UTF-32)
        return i.encode() in blob or i.encode("utf-32-le") in blob

    assert not [i for i in outside if sent(i)]  # no id outside the intersection in any message
    assert all(sent(c) for c in common)  # the align message: the intersection (so the check can fail)
    log = (services["party2"].audit_path).read_text()
    assert '"method": "Request"' in log and '"status": "refused"' not in log


def test_psi_then_vertical_rounds_equal_the_clear_join(parties, pki, files):
    """Training rows after PSI = the clear join on the intersection (same numbers, same order)."""
    a, b, paths = files
    peers, _ = parties
    be = _backend(peers, pki)
    try:
        al = fit_psi.align_parties(be, list(NAMES), "train", np.array(a))
        n = len(al.ids)
        specs = []
        for m, (name, cols) in enumerate(zip(NAMES, (2, 3)), start=1):
            D = PartyData("train", {"psi": True, "index": m, "n_features": cols}, (n, cols))
            specs.append(PartySpec.of(vs.PROTOCOL, name, Setup(name=name, D=D, options={"lam_sum": 1.0, "reg": None})))
        be.start(specs)
        shapes = {name: be.request(name, "rank") for name in NAMES}  # each party set up on its aligned rows
    finally:
        be.close()
    assert shapes == {"party1": (2, 2), "party2": (3, 3)}
    # the same rows read in the clear, in the canonical order
    from dpadmm.data.remote import PartyFile

    for m, (path, cols) in enumerate(zip(paths, (2, 3)), start=1):
        clear = pd.read_csv(path).set_index("id").loc[list(al.ids)]
        clear = clear.drop(columns=["y"]) if m == 1 else clear
        read = PartyFile(str(path), m, np.array(al.ids), cols, subset=True).load()
        np.testing.assert_array_equal(read, clear.to_numpy(float))


def _psi_session(be, name, n_announced):
    spec = PartySpec.of(psi_protocol.PROTOCOL, name, psi_protocol.PROTOCOL.setup_type(name=name, ids=PartyData("train", {}),
                                                                client_size=n_announced))
    be.start([spec])


@pytest.mark.parametrize("misuse, message", [
    ("align_first", "before a PSI query"),
    ("twice", "second PSI query"),
    ("too_many", "announced"),
    ("foreign_id", "not in its file"),
    ("unsorted", "canonical order"),
    ("vertical_unaligned", "no PSI alignment"),
])
def test_party_refuses_psi_misuse(parties, pki, files, misuse, message):
    import private_set_intersection.python as psi

    a, b, _ = files
    peers, services = parties
    be = _backend({"party2": peers["party2"]}, pki)
    try:
        with pytest.raises(ProtocolError, match=message):
            if misuse == "vertical_unaligned":
                D = PartyData("train", {"psi": True, "index": 2, "n_features": 3}, (1, 3))
                be.start([PartySpec.of(vs.PROTOCOL, "party2", Setup(name="party2", D=D, options={"lam_sum": 1.0}))])
            _psi_session(be, "party2", 10 if misuse == "too_many" else 600)
            req = np.frombuffer(psi.client.CreateWithNewKey(True).CreateRequest(a).SerializeToString(), np.uint8)
            if misuse == "align_first":
                be.request("party2", "align", np.array(sorted(b)[:3]))
            be.request("party2", "respond", req)
            if misuse == "twice":
                be.request("party2", "respond", req)
            if misuse == "foreign_id":
                be.request("party2", "align", np.array(sorted(["c0001", "c0500"])))
            if misuse == "unsorted":
                be.request("party2", "align", np.array(["c0501", "c0500"]))
    finally:
        be.close()
    assert '"status": "refused"' in services["party2"].audit_path.read_text()
