"""Vertical experts across organisations with the operator's declared column bounds (``party serve --bounds FILE``,
``PartyPolicy.column_bounds``; issue 27): the party maps every block it reads by its own bounds, the coordinator's
bounds are dropped, and the result equals the in-process fit with the same declared bounds."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("grpc")

from dpadmm.backends.grpc_backend import GrpcBackend  # noqa: E402
from dpadmm.estimators.vertical_experts import VerticalExpertsClassifier  # noqa: E402
from dpadmm.privacy.policy import PartyPolicy  # noqa: E402
from dpadmm.protocol import PartyData  # noqa: E402
from conftest import run_cli, serve_parties  # noqa: E402

from test_grpc_experts import _blocks, _files, _services  # noqa: E402  (the same party files and services)


def test_declared_bounds_over_grpc_equal_the_in_process_fit(tmp_path):
    train, test = _files(tmp_path)
    blocks, y = _blocks(360)
    bounds = {"party2": ((-2.0, -1.0, -1.5), (1.0, 2.0, 1.0)), "party3": ((-1.0, -3.0), (1.0, 1.0))}
    kw = dict(epsilon=1.0, random_state=7)
    local = VerticalExpertsClassifier(**kw, bounds=[tuple(map(np.array, bounds[n])) for n in ("party2", "party3")],
                                      calibrate=False).fit([b[:240] for b in blocks], y[:240])
    services = {}
    for name in ("party2", "party3"):
        services.update(_services(tmp_path, train, test, names=(name,),
                                  policy=PartyPolicy(relation="record", column_bounds=bounds[name])))
    peers, stop = serve_parties(services)
    backend = GrpcBackend(peers, insecure=True, timeout=60)
    try:
        # a coordinator's own "bounds" in the reference are dropped by the party
        parties = {n: (PartyData("train", {"index": 2, "ids": np.arange(240), "n_features": int(d),
                                           "bounds": [[0.0] * d, [1e-9] * d]}),
                       {"test": PartyData("test", {"index": 2, "ids": 10_000 + np.arange(120), "n_features": int(d)})})
                   for n, d in (("party2", 3), ("party3", 2))}
        remote = VerticalExpertsClassifier(**kw).fit_remote(blocks[0][:240], y[:240], backend, parties)
        logit = remote.remote_decision(blocks[0][240:], "test")
        backend.close()
    finally:
        stop()
    np.testing.assert_allclose(logit, local.decision_function([b[240:] for b in blocks]), rtol=1e-9, atol=1e-9)
    assert remote.privacy_.to_dict()["per_party"] == local.privacy_.to_dict()["per_party"]


def test_party_serve_bounds_file_errors_in_one_line(tmp_path, capsys):
    bad = tmp_path / "b.csv"
    bad.write_text("lo,hi\n3,1\n")
    code, _, err = run_cli(["party", "serve", "--protocol", "vertical-experts", "--name", "party2", "--insecure",
                            "--no-budget", "--bounds", str(bad), "--data", f"train={bad}", "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "--bounds" in err and "lo < hi" in err
