"""Checkpoints of the encrypted vertical protocol: a run killed mid-way and resumed from its checkpoints gives the
seeded numbers of a run never stopped; what each checkpoint holds (no ciphertext; a secret key only in its
owner's own file). Fast on the plaintext HE layer; the slow test repeats it under sf-heu."""

from __future__ import annotations

import contextlib
import pickle

import numpy as np
import pytest

from dpadmm.algorithms.encrypted.protocol import PROTOCOL
from dpadmm.backends.inprocess import InProcessBackend
from dpadmm.exceptions import DataFileError
from dpadmm.experiments.audit_games_encrypted import plaintext_he
from dpadmm.algorithms.encrypted import driver
from dpadmm.runtime import codec
from dpadmm.runtime.checkpoints import held, party_checkpoints
from dpadmm.runtime.local import PartyOperator

T = 4


def _data(parties: int, n=80):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(n, 2 + 2 * parties))
    y = np.where(X @ rng.normal(size=X.shape[1]) > 0, 1, -1)
    return [X[:, :2]] + [X[:, 2 + 2 * k:4 + 2 * k] for k in range(parties)], y


class _Killed(RuntimeError):
    pass


def _run(blocks, y, directory, *, kill_at=None, resume=False, hosted=None, rr=False):
    names = [f"party{m + 2}" for m in range(len(blocks) - 1)]
    specs = driver.specs({n: (b, None) for n, b in zip(names, blocks[1:])}, R=1.0, noise_multiplier=3.0, rounds=T,
                         lam=1e-3, step_size=2.0, forward="encrypted", momentum=0.5, W=2.0, label_W=2.0,
                         label_width=blocks[0].shape[1] + 1)
    # hosted: every party under its operator's runtime, its checkpoint in its own directory (the codec, as over gRPC)
    backend = InProcessBackend(policies={n: PartyOperator(allow_seeded_noise=True) for n in names},
                               party_dir=hosted) if hosted is not None else InProcessBackend()
    backend.start(specs, noise_seed=5, rounds=driver.backend_rounds(T, "encrypted", len(names)))
    if kill_at is not None:  # the process dies when the driver reaches this backend round
        real = backend.step

        def step(inboxes, round_):
            if round_ == kill_at:
                raise _Killed(f"killed at round {round_}")
            return real(inboxes, round_)
        backend.step = step
    res = driver.run(backend, blocks[0], y, names, {n: b.shape[1] for n, b in zip(names, blocks[1:])},
                     {n: 1.0 for n in names}, R=1.0, label_noise_multiplier=None if rr else 2.0, rounds=T, lam=1e-3,
                     step_size=2.0, noise_seed=5, forward="encrypted", momentum=0.5, W=2.0, checkpoint_dir=directory,
                     resume=resume, label_epsilon=1.0 if rr else None)
    # a hosted party keeps its weights (written at Finish); the label party's weights depend on them (cross sums)
    models = [] if hosted is not None else [backend.local_model(n) for n in names]
    return res, models


@pytest.mark.parametrize("parties, hosted, rr", [(1, False, False), (2, False, False), (2, True, False), (1, False, True)],
                         ids=["two parties", "three parties", "three hosted parties", "randomized response"])
def test_resume_after_a_kill_gives_the_seeded_numbers(tmp_path, parties, hosted, rr):
    blocks, y = _data(parties)
    where = (lambda name: tmp_path / name) if hosted else (lambda name: None)  # noqa: E731
    with plaintext_he():
        ref, ref_models = _run(blocks, y, None, hosted=where("reference"), rr=rr)
        steps = 3 if parties > 1 else 2
        with pytest.raises(_Killed):  # dies inside round 3 (after round 2's checkpoints)
            _run(blocks, y, tmp_path, kill_at=1 + 2 * steps + 1, hosted=where("parties"), rr=rr)
        got, got_models = _run(blocks, y, tmp_path, resume=True, hosted=where("parties"), rr=rr)
    np.testing.assert_allclose(got.label_state.w, ref.label_state.w, rtol=0, atol=1e-12)
    for a, b in zip(got_models, ref_models):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
    key = lambda e: (e.party, e.round, getattr(e, "sigma", None), getattr(e, "epsilon", None))  # noqa: E731
    assert sorted(map(key, got.events), key=str) == sorted(map(key, ref.events), key=str)  # each counted once
    np.testing.assert_array_equal(got.label_cfg.y01, ref.label_cfg.y01)  # the released labels kept, not redrawn
    assert sum(not hasattr(e, "sigma") for e in got.events) == (1 if rr else 0)  # randomized response booked once


def test_what_the_checkpoints_hold(tmp_path):
    """The label party's own file: its weights, the round, the gradients it owes, the events, its OWN key pair, the
    labels it uses (randomized response's output, kept so a resume does not draw them again), the label mechanism
    they come from (a resume under another is refused) and the parties' PUBLIC keys; each party's own file: its state with its own key pair — no ciphertext anywhere,
    and no party's secret key in another's file."""
    blocks, y = _data(2)
    with plaintext_he():
        _run(blocks, y, tmp_path)
    label_ck = pickle.loads((tmp_path / driver.LABEL_CHECKPOINT).read_bytes())
    assert set(label_ck) == {"t", "r", "w", "velocity", "peers", "pubs", "gradients", "events", "key", "labels",
                             "label_mechanism"}
    assert label_ck["t"] == T and all(g.shape == (2,) for g in label_ck["gradients"].values())
    own = {}
    for n in ("party2", "party3"):
        ck = codec.decode(held(party_checkpoints(tmp_path, n))[0], PROTOCOL.types)  # the runtime's format
        st = ck["state"]
        assert st.sent_scores is None and st.phase == "forward" and st.backward == T
        own[n] = bytes(st.own_key)
    secrets_ = [bytes(label_ck["key"])] + list(own.values())
    assert len(set(secrets_)) == 3  # three key pairs, each in its owner's file only
    for n, pub in label_ck["pubs"].items():
        assert bytes(pub) not in secrets_


def test_resume_without_checkpoints_names_the_fix(tmp_path):
    blocks, y = _data(1)
    with plaintext_he(), pytest.raises(DataFileError, match="pass the checkpoint_dir the run wrote"):
        _run(blocks, y, tmp_path, resume=True)


@pytest.mark.slow  # OU key generation and a few rounds, three times
def test_resume_under_sf_heu_gives_the_seeded_numbers(tmp_path):
    pytest.importorskip("heu")
    blocks, y = _data(1, n=40)
    with contextlib.nullcontext():
        ref, ref_models = _run(blocks, y, None)
        with pytest.raises(_Killed):
            _run(blocks, y, tmp_path, kill_at=6)
        got, got_models = _run(blocks, y, tmp_path, resume=True)
    np.testing.assert_allclose(got.label_state.w, ref.label_state.w, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got_models[0], ref_models[0], rtol=0, atol=1e-12)
