# Red-team reproducer for REDTEAM.md F2 (run: python redteam/f2_grpc_mtls.py); not part of the test suite.
"""F2 over a real mutual-TLS gRPC connection on 127.0.0.1: the coordinator uses only GrpcBackend's public API."""
import numpy as np, tempfile
from pathlib import Path
from dpadmm.algorithms.vertical import (messages as vertical_messages, party as vertical_party,
                                        protocol as vertical_protocol)
from dpadmm.backends import PartySpec
from dpadmm.backends.grpc_backend import GrpcBackend
from dpadmm.backends.grpc_party import PartyService, make_server
from dpadmm.backends.grpc_tls import TLSFiles, provision
from dpadmm.protocol import PartyData
from dpadmm.data.parties import write_party_files
from dpadmm.exceptions import ProtocolError
from dpadmm.kernels.regularizers import L2
tmp = Path(tempfile.mkdtemp()); provision(["coordinator", "party2"], tmp / "pki")
rng = np.random.default_rng(0); N, d2 = 200, 5
B2 = rng.normal(size=(N, d2))
paths = write_party_files([rng.normal(size=(N, 2)), B2], np.where(rng.random(N) < .5, 1, -1), tmp)
svc = PartyService(name="party2", protocol=vertical_protocol.PROTOCOL, data={"train": str(paths[1])}, out=tmp / "p2", allow=("coordinator",))
srv, port = make_server(svc, "127.0.0.1:0", TLSFiles.load(tls_dir=tmp / "pki" / "party2")); srv.start()
be = GrpcBackend({"party2": f"127.0.0.1:{port}"}, tls=TLSFiles.load(tls_dir=tmp / "pki" / "coordinator"), timeout=30)
D = PartyData("train", {"ids": np.arange(N), "index": 2, "n_features": d2}, (N, d2))
spec = vertical_messages.PrivacySpec(noise_multiplier=5.0, mechanism="gaussian", relation="record", clip=3*np.sqrt(N), clip_inf=9.0)
opts = {"lam_sum": 2.0, "reg": L2(), "private": spec, "bound": None, "damping": 0.0, "eval_blocks": {"test": D},
        "labels": np.where(B2[:, 0] > 0, 1.0, -1.0)}           # 'labels' made up by the coordinator
try:
    be.start([PartySpec("party2", vertical_party.setup_party, ("party2", D, opts), vertical_party.party_step)], noise_seed=777)
except ProtocolError as exc:  # since the fix: a party refuses a coordinator-chosen noise seed unless its operator allows it
    raise SystemExit(f"F2 fixed: {exc}")
print("setup reply:", be.setup_)
inbox = vertical_messages.CoordinatorMessage(1, np.zeros(N), rng.normal(size=N), 0.3)
out = be.step({"party2": inbox}, 0)["party2"]
share, ev = out[0].share, out[1][0]
Dc = np.asarray(vertical_party.clip_rows(B2)); H = 2.0*np.eye(d2) + 0.3*Dc.T@Dc; exact = -Dc @ np.linalg.solve(H, Dc.T @ np.clip(inbox.dual, -9, 9))
g = np.random.default_rng(np.random.SeedSequence(777, spawn_key=(0, 0))).standard_normal(N)
print("A3 over TLS: ||share - sigma*g(seed) - exact|| =", np.linalg.norm(share - ev.sigma*g - exact), " sigma =", round(ev.sigma, 2))
x = -np.linalg.solve(H, Dc.T @ np.clip(inbox.dual, -9, 9)); print("A2 over TLS: ||score(test) - D_raw x|| =", np.linalg.norm(be.request("party2", "score", "test") - B2 @ x), "(the exact model x_m applied to the raw training rows)")
r = be.request("party2", "refit", np.zeros(N), "logistic", True, 0.0)
print("A1' over TLS: refit coef =", np.round(r["coef"], 4))
be.close(); srv.stop(0); svc.close()
