"""The encrypted vertical protocol over gRPC (``party serve --protocol vertical-encrypted``): a budgeted party reads its
own file, prices the run at Setup, and gives the same numbers as the in-process run with the same seed."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("heu")

from conftest import serve_parties  # noqa: E402
from dpadmm.algorithms.encrypted import driver  # noqa: E402
from dpadmm.algorithms.encrypted.protocol import PROTOCOL  # noqa: E402
from dpadmm.backends.grpc_backend import GrpcBackend  # noqa: E402
from dpadmm.backends.grpc_party import PartyService  # noqa: E402
from conftest import ledger_of  # noqa: E402
from dpadmm.backends.inprocess import InProcessBackend  # noqa: E402
from dpadmm.data.parties import write_party_files  # noqa: E402
from dpadmm.privacy.accountants import calibrate_noise_multiplier  # noqa: E402
from dpadmm.privacy.party_ledger import compose  # noqa: E402
from dpadmm.privacy.policy import PartyPolicy  # noqa: E402
from dpadmm.protocol import PartyData  # noqa: E402


@pytest.mark.slow
def test_grpc_equals_in_process_and_the_ledger_holds_two_releases_per_round(tmp_path):
    """A budgeted party serves the Hello (public keys) and the encrypted Scores without a privacy event because the
    protocol declares them (``Protocol.exempt``, the reason in its audit line); its ledger holds exactly the 2T
    Gaussian releases, composed to the ε the multiplier was calibrated for."""
    ref, got, ledger = _both(tmp_path, dict(max_epsilon=3.0, delta=1e-5))
    np.testing.assert_allclose(got.label_state.w, ref.label_state.w, rtol=0, atol=1e-9)
    T = 2
    assert ledger["releases"] == 2 * T  # D̂ᵀĝ and A₀ᵀs each round, priced at Setup
    zf = calibrate_noise_multiplier(1.0, 1e-5, 2 * T)
    assert ledger["epsilon_spent"] == pytest.approx(compose({zf: 2 * T}, 0.0, 1e-5), rel=1e-6)
    assert ledger["epsilon_spent"] == pytest.approx(1.0, rel=1e-3)  # the ε the multiplier was calibrated for
    steps = [json.loads(line) for line in (tmp_path / "party2" / "audit.jsonl").read_text().splitlines()]
    exempt = [s["budget"]["exempt"] for s in steps if s.get("method") == "Step" and "exempt" in s.get("budget", {})]
    assert exempt[0].startswith("Hello: public keys") and all("Scores: Enc_m(s_m)" in e for e in exempt[1:])
    assert len(exempt) == 1 + T  # the Hello, then one encrypted Scores per round


@pytest.mark.slow
def test_grpc_without_a_budget_equals_in_process(tmp_path):
    """The declaration, the codec (uint8 keys and ciphertexts) and the party's own file over gRPC: same numbers."""
    ref, got, _ = _both(tmp_path, {})  # a party without a budget (the simulation operator's choice)
    np.testing.assert_allclose(got.label_state.w, ref.label_state.w, rtol=0, atol=1e-9)
    assert [e.noise_multiplier for e in got.events] == pytest.approx([e.noise_multiplier for e in ref.events])


def _both(tmp_path, budget):
    rng = np.random.default_rng(0)
    n, T = 200, 2
    X = rng.normal(size=(n, 5))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(X @ rng.normal(size=5) + rng.logistic(size=n) > 0, 1, -1)
    blocks = [X[:, :3], X[:, 3:]]
    files = write_party_files(blocks, (y > 0).astype(int), tmp_path / "train", prefix="party")
    zf, zl = calibrate_noise_multiplier(1.0, 1e-5, 2 * T), calibrate_noise_multiplier(1.0, 1e-5, T)
    common = dict(R=1.0, noise_multiplier=zf, rounds=T, lam=1e-3, step_size=2.0, forward="encrypted", momentum=0.5,
                  W=2.0, label_W=2.0, label_width=4)
    run = dict(R=1.0, label_noise_multiplier=zl, rounds=T, lam=1e-3, step_size=2.0, noise_seed=5, forward="encrypted",
               momentum=0.5, W=2.0)

    local = InProcessBackend()
    local.start(driver.specs({"party2": (blocks[1], None)}, **common), noise_seed=5, rounds=2 * T + 2)
    ref = driver.run(local, blocks[0], y, ["party2"], {"party2": 2}, {"party2": 1.0}, **run)

    svc = PartyService(name="party2", protocol=[PROTOCOL], out=tmp_path / "party2", secure=False,
                       allow_seeded_noise=True, data={"train": str(files[1])},
                       describe_options={"id_column": "id", "label_column": "y"},
                       policy=PartyPolicy(accept_premises=("honest-label-party",)), **budget)
    peers, stop = serve_parties({"party2": svc})
    try:
        backend = GrpcBackend(peers, insecure=True, timeout=120)
        train = PartyData("train", {"index": 2, "ids": np.arange(n), "n_features": 2})
        backend.start(driver.specs({"party2": (train, None)}, **common), noise_seed=5, rounds=2 * T + 2)
        got = driver.run(backend, blocks[0], y, ["party2"], {"party2": 2}, {"party2": 1.0}, **run)
        backend.close()
        ledger = None
        if svc.budget is not None:
            svc.budget.close_run()
            ledger = ledger_of(svc)
    finally:
        stop()
    return ref, got, ledger
