"""The experts regression target across organisations (issue 41): every feature party serves ``vertical-experts``
over gRPC, fits its DP ridge on the scaled labels once (its policy prices ONE Gaussian release), keeps it and answers
predictions on NEW records only. The seeded run over gRPC equals the in-process run to 1e-12, and the party refuses
a regression loss it does not know before anything is released."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("grpc")

from conftest import serve_parties  # noqa: E402
from dpadmm import VerticalExpertsRegressor  # noqa: E402
from dpadmm.algorithms.experts import protocol as experts_protocol  # noqa: E402
from dpadmm.backends.grpc_backend import GrpcBackend  # noqa: E402
from dpadmm.backends.grpc_party import PartyService  # noqa: E402
from dpadmm.data.parties import write_party_files  # noqa: E402
from dpadmm.privacy.policy import PartyPolicy  # noqa: E402
from dpadmm.protocol import PartyData  # noqa: E402

NORMALIZING = PartyPolicy(relation="record", normalize_vertical_rows=True)  # the party's own preparation


def _blocks(n, seed=0, d=(2, 3, 2)):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, sum(d)))
    y = 10.0 + X @ rng.normal(size=sum(d)) + 0.3 * rng.normal(size=n)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return np.split(X, np.cumsum(d)[:-1], axis=1), y


def _normalised(b):
    return b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-300)


def test_estimator_over_grpc_equals_in_process(tmp_path):
    n, n_test = 240, 120
    blocks, y = _blocks(n + n_test)
    train = write_party_files([b[:n] for b in blocks], y[:n], tmp_path / "train", prefix="party")
    test = write_party_files([b[n:] for b in blocks], y[n:], tmp_path / "test", prefix="party",
                             ids=10_000 + np.arange(n_test))
    kw = dict(epsilon=1.0, label_range=(0.0, 20.0), random_state=7)
    local_blocks, local_test = [_normalised(b[:n]) for b in blocks], [_normalised(b[n:]) for b in blocks]
    # the deployment's parties prepare their rows by their policy (normalised here) and hand over the additive
    # combination (no held-out records given): the in-process fit the same way
    local = VerticalExpertsRegressor(**kw, bounds=None, calibrate=False).fit(local_blocks, y[:n])
    services = {name: PartyService(name=name, protocol=[experts_protocol.PROTOCOL], out=tmp_path / name,
                                   secure=False, allow_seeded_noise=True, max_epsilon=3.0, delta=1e-5,
                                   data={"train": str(train[m]), "test": str(test[m])}, policy=NORMALIZING,
                                   describe_options={"id_column": "id", "label_column": "y"})
                for m, name in ((1, "party2"), (2, "party3"))}
    peers, stop = serve_parties(services)
    backend = GrpcBackend(peers, insecure=True, timeout=60)
    try:
        ref = {"index": 2, "normalize": True}
        parties = {name: (PartyData("train", {**ref, "ids": np.arange(n), "n_features": int(d)}),
                          {"test": PartyData("test", {**ref, "ids": 10_000 + np.arange(n_test), "n_features": int(d)})})
                   for name, d in (("party2", 3), ("party3", 2))}
        remote = VerticalExpertsRegressor(**kw).fit_remote(local_blocks[0], y[:n], backend, parties)
        pred = remote.remote_predict(local_test[0], "test")
        backend.close()
    finally:
        stop()
    np.testing.assert_allclose(pred, local.predict(local_test), rtol=1e-12, atol=1e-12)
    assert remote.privacy_.to_dict()["per_party"] == local.privacy_.to_dict()["per_party"]
    assert remote.expert_lambdas_ == pytest.approx(local.expert_lambdas_, rel=1e-12)
