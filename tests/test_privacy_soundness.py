"""Issue 9 (privacy soundness of the engine): party-local noise, seeded simulations, nothing un-noised
leaves a party in a private run, declared handlers only, party-local checkpoints, report fields."""

from __future__ import annotations

import numpy as np
import pytest

from dpadmm import engine
from dpadmm.backends import Transcript, get_backend
from dpadmm.backends.selftest import toy_specs
from dpadmm.data import load_a9a, normalize_rows, partition_columns
from dpadmm.estimators import VerticalLogisticRegression
from dpadmm.exceptions import ProtocolError


@pytest.fixture(scope="module")
def small():
    X, y = load_a9a("train")
    return [normalize_rows(b) for b in partition_columns(X[:300], [66, 57])], y[:300]


def _vfit(data, **kw):
    blocks, y = data
    params = dict(max_iter=4, rho=0.3, epsilon=50.0, monitor=True)
    params.update(kw)
    return VerticalLogisticRegression(**params).fit(blocks, y)


def test_unseeded_runs_differ_seeded_runs_repeat(small):
    a, b = _vfit(small), _vfit(small)
    assert a.privacy_.noise_source == "party-local" and a.noise_source_ == "party-local"
    assert a.history_["objective"] != b.history_["objective"]  # fresh OS entropy each run
    c, d = _vfit(small, random_state=3), _vfit(small, random_state=3)
    assert c.privacy_.noise_source == "seeded"
    assert c.history_["objective"] == d.history_["objective"]
    assert any("whoever knows the seed" in n for n in c.privacy_.notes)


def test_no_seed_or_generator_crosses_to_a_process_party(small, monkeypatch):
    """Everything the driver sends a party's process is captured: no seed, no generator, and the
    party's stream is made in its own process (two unseeded runs differ)."""
    from dpadmm.backends.multiprocess import ProcessBackend

    sent = []
    real = ProcessBackend._send

    def spy(self, name, msg):
        sent.append(msg)
        return real(self, name, msg)

    monkeypatch.setattr(ProcessBackend, "_send", spy)
    hub, specs = toy_specs(2, 3, noise=1.0)
    finals = []
    for _ in range(2):
        res = engine.run(hub=hub, parties=specs, backend=get_backend("process", timeout=60), rounds=3)
        finals.append(res.history["objective"][-1])
    assert finals[0] != finals[1]

    def leaves(obj):
        if isinstance(obj, (tuple, list)):
            for o in obj:
                yield from leaves(o)
        else:
            yield obj
    for msg in sent:
        if msg[0] == "setup":
            assert msg[3] is None  # noise_seed: none was sent
        for leaf in leaves(msg[1:]):
            assert not isinstance(leaf, (np.random.Generator, np.random.SeedSequence, np.random.BitGenerator))


@pytest.mark.parametrize("backend", ["inprocess", "process"])
def test_party_refuses_undeclared_requests(backend):
    hub, specs = toy_specs(2, 3)
    be = get_backend(backend, **({"timeout": 60} if backend == "process" else {}))
    try:
        engine.run(hub=hub, parties=specs, backend=be, rounds=1, started=False, noise_seed=0)
        assert be.request("p1", "sq") == {"sq": pytest.approx(3 * 0.5 ** 2)}  # declared handler
        for bad in ("coef", "state", "__init__"):
            with pytest.raises(ProtocolError, match=f"party 'p1' refused request '{bad}'"):
                be.request("p1", bad)
        with pytest.raises(ProtocolError):
            be.request("p1", len)  # a function, not a declared name
    finally:
        be.close()


def test_private_process_run_sends_nothing_unnoised(small, tmp_path):
    """Private vertical fit on the process backend with a transcript: protocol messages only."""
    tr = Transcript(tmp_path / "t.jsonl")
    blocks, y = small
    m = VerticalLogisticRegression(max_iter=3, rho=0.3, epsilon=50.0, backend=get_backend("process", timeout=60))
    m.fit(blocks, y, eval_set=[(blocks, y)], transcript=tr)
    tr.close()
    from dpadmm.backends.transcript import read_transcript

    kinds = {r["kind"] for r in read_transcript(tmp_path / "t.jsonl")}
    assert kinds == {"protocol"}
    assert m.coefs_ is None and "objective" not in m.history_
    with pytest.raises(Exception, match="stayed at the parties"):
        m.predict(blocks)
    # opting in is possible, and the report says what left
    m2 = VerticalLogisticRegression(max_iter=3, rho=0.3, epsilon=50.0, monitor=True,
                                    backend=get_backend("process", timeout=60)).fit(blocks, y)
    assert m2.coefs_ is not None and any("NOT covered" in n for n in m2.privacy_.notes)


def test_reports_carry_threat_model_relation_noise_source(small):
    from dpadmm.estimators.consensus import ConsensusLogisticRegression
    from dpadmm.estimators.functional import FunctionalQuantileRegressor
    from dpadmm.data.functional import simulate_zhou

    blocks, y = small
    reps = [_vfit(small).privacy_,
            ConsensusLogisticRegression(n_nodes=3, perturbation="pp", alpha=5.0, normalize=True, max_iter=3)
            .fit(np.hstack(blocks), y).privacy_]
    d = simulate_zhou(300, grid_size=20, random_state=0)
    reps.append(FunctionalQuantileRegressor(basis="fourier", workers=2, epsilon=1.0, max_iter=3)
                .fit(d.curves, d.y, grid=d.grid).privacy_)
    for rep in reps:
        out = rep.to_dict()
        assert out["threat_model"].startswith("adversary:")
        assert out["relation"] and out["noise_source"] == "party-local"
