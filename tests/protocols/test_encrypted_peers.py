"""The encrypted forward pass with two or more non-label parties (dpadmm.algorithms.encrypted, ``peers``): the
joint Taylor descent in the no-noise limit, what each key decrypts (the label party never a score), the releases
each party prices, refusals. The fast tests run on the plaintext HE layer (keys told apart by id: a ciphertext
decrypts only under its own key, as with OU); the slow one checks the same fit under sf-heu."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dpadmm.algorithms.encrypted import he, label
from dpadmm.algorithms.encrypted import party as ep
from dpadmm.algorithms.encrypted.policy import ENCRYPTED
from dpadmm.data.prepare import clip_rows
from dpadmm.estimators.vertical_encrypted import VerticalEncryptedClassifier
from dpadmm.algorithms.encrypted import driver
from dpadmm.experiments.audit_games_encrypted import PlainHe, plaintext_he
from dpadmm.privacy.policy import PolicyRefusal


def _data(n=150, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 7))
    X[rng.random(X.shape) < 0.4] = 0.0
    y = np.where(X @ rng.normal(size=7) + 0.3 * rng.normal(size=n) > 0, 1, -1)
    return [X[:, :3], X[:, 3:5], X[:, 5:]], y


def test_three_parties_zero_noise_equal_the_joint_taylor_descent():
    """No noise: the weights of a 3-party fit equal the plaintext heavy-ball descent on the Taylor residual
    ½ + (s₀ + s₂ + s₃)/4 − y over the JOINT model (every cross term between the non-label parties included),
    projected on ‖w‖ ≤ W, on the training rows (fixed point: within 1e-5)."""
    blocks, y = _data()
    T, step, lam, R, mom, W = 6, 2.0, 1e-3, 1.0, 0.7, 0.6
    with plaintext_he():
        m = VerticalEncryptedClassifier(rounds=T, step=step, lam=lam, row_clip=R, momentum=mom, weight_bound=W,
                                        calibration=0.2, random_state=0).fit(blocks, y)
    n = len(y)
    tr = np.sort(np.random.default_rng(0).permutation(n)[int(round(0.2 * n)):])
    A = [label.prepare(blocks[0][tr], R)[1].toarray()] + [
        he.quantize(clip_rows(b[tr], R), ep.BLOCK_BITS).toarray() / 2.0 ** ep.BLOCK_BITS for b in blocks[1:]]
    w = [np.zeros(a.shape[1]) for a in A]
    v = [np.zeros(a.shape[1]) for a in A]
    y01 = (y[tr] > 0).astype(float)
    for _ in range(T):
        g = 0.5 + sum(a @ x for a, x in zip(A, w)) / 4.0 - y01
        for k in range(3):
            v[k] = mom * v[k] + (A[k].T @ g / len(tr) + lam * w[k])
            w[k] = ep.project(w[k] - step * v[k], W)
    for got, want in zip(m.coefs_, w):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    assert all(np.linalg.norm(x) == pytest.approx(W) for x in w)  # the cross terms moved every block to its bound


def test_no_score_is_ever_under_the_label_partys_key(monkeypatch):
    """Every decryption of the run, by key: the label party's key opens only d_m-value gradients (never a
    per-row vector), each party's key only d₀+1 cross sums and d_k column sums of its peers; every encrypted score
    vector (to the label party, and relayed to the peers) is under its sender's own key, which neither the label
    party nor a peer holds."""
    blocks, y = _data()
    seen, scores, keys = [], [], {}
    real_decrypt, real_step, real_open = PlainHe.decrypt, ep.step, label.open_gradients

    def decrypt(self, ct):
        out = real_decrypt(self, ct)  # refused (PermissionError) under another key
        seen.append((self.kid, ct[0], len(ct[1])))
        return out

    def step(cfg, state, inbox, *, rng):
        st, out, ev = real_step(cfg, state, inbox, rng=rng)
        keys[cfg.name] = he.from_secret(st.own_key).kid
        if isinstance(out, ep.Scores):
            scores.append((cfg.name, out.ciphertexts))
        if isinstance(inbox, ep.Backward):
            scores.extend((f"relayed to {cfg.name}", b) for b in inbox.peer_scores.values())
        return st, out, ev

    def open_gradients(cfg, state, key, replies, **kw):
        keys["party1"] = key.kid
        return real_open(cfg, state, key, replies, **kw)

    monkeypatch.setattr(PlainHe, "decrypt", decrypt)
    # the declaration the driver's party specs are built from: a copy with the spying step
    monkeypatch.setattr(driver, "PROTOCOL", dataclasses.replace(driver.PROTOCOL, step=step))
    monkeypatch.setattr(label, "open_gradients", open_gradients)
    T = 3
    with plaintext_he():
        m = VerticalEncryptedClassifier(epsilon=1.0, label_epsilon=1.0, rounds=T, random_state=1).fit(blocks, y)
    n_train = len(y) - round(0.1 * len(y))
    assert len(scores) == 2 * 2 * T  # two parties' scores per round, each sent once and relayed once
    for who, blob in scores:
        kid = PlainHe(False).load(blob)[0]
        assert kid in (keys["party2"], keys["party3"]) and kid != keys["party1"], who
        with pytest.raises(PermissionError, match="not decryptable"):
            PlainHe(True, keys["party1"]).decrypt(PlainHe(False).load(blob))
    by_label = [size for holder, _, size in seen if holder == keys["party1"]]
    assert sorted(by_label) == sorted([2, 2] * T)  # d₂ = d₃ = 2: one gradient per party and round, no per-row vector
    by_parties = [size for holder, _, size in seen if holder in (keys["party2"], keys["party3"])]
    assert sorted(by_parties) == sorted([4, 2] * 2 * T)  # d₀ + 1 = 4 cross sums, d_k = 2 column sums of the peer
    assert all(holder == ct for holder, ct, _ in seen) and n_train not in by_label + by_parties
    assert m.privacy_["features"]["epsilon"] <= 1.0 + 1e-6 and m.privacy_["labels"]["epsilon"] <= 1.0 + 1e-6


def test_each_party_prices_three_releases_per_round_with_two_peers():
    blocks, _ = _data()
    with plaintext_he():
        cfg, _ = ep.setup_party("party2", blocks[1], None, 1.0, 3.0, 5, 1e-4, 2.0, "encrypted", 0.7, 4.0, 1.0, 4.0, 4,
                                {"party3": (1.0, 4.0, 2), "party4": (0.5, 2.0, 3)})
    assert cfg.releases_per_round == 4 and cfg.steps_per_round == 3
    assert ENCRYPTED.price(cfg, 3 * 5 + 2).gaussian == {3.0: 20}
    assert ENCRYPTED.price(cfg, 7).gaussian == {3.0: 8}  # no more than the backend rounds allow
    assert cfg.residual_bound == pytest.approx(0.5 + (np.sqrt(2) * 4.0 + 4.0 + 4.0 + 1.0) / 4.0)
    assert cfg.peer_sensitivity("party4") == pytest.approx(2 * 0.5 * 1.0 * 4.0)


def test_peer_messages_are_refused_unless_declared():
    blocks, y = _data(40)
    rng = np.random.default_rng(0)
    with plaintext_he():
        cfg, st = ep.setup_party("party2", blocks[1], None, 1.0, 2.0, 1, 1e-4, 2.0, "encrypted", 0.7, 4.0, 1.0, 4.0, 4,
                                 {"party3": (1.0, 4.0, 2)})
        key, other = he.keygen(), he.keygen()
        st, hello, _ = ep.step(cfg, st, ep.Start(he.wire(key.public_key())), rng=rng)
        with pytest.raises(PolicyRefusal, match=r"public keys of the declared peers \['party3'\]"):
            ep.step(cfg, st, ep.Forward(keys={"party9": he.wire(other.public_key())}), rng=rng)
        st, sc, _ = ep.step(cfg, st, ep.Forward(keys={"party3": he.wire(other.public_key())}), rng=rng)
        lcfg, lst = label.setup_label(blocks[0], y, R=1.0, widths={"party2": 2, "party3": 2},
                                      clips={"party2": 1.0, "party3": 1.0}, noise_multiplier=None, rounds=1, lam=1e-4,
                                      step=2.0, forward="encrypted", W=4.0)
        own = he.from_public_key(hello.public_key)
        lst, blob, cross = label.residuals_peers(lcfg, lst, key, {"party2": own, "party3": other},
                                                 {"party2": sc.ciphertexts, "party3": other.encrypt(np.zeros(40))})
        with pytest.raises(PolicyRefusal, match="encrypted scores of the declared peers"):
            ep.step(cfg, st, ep.Backward(he.wire(blob), he.wire(cross["party2"])), rng=rng)
        with pytest.raises(PolicyRefusal, match="must be 40 ciphertexts"):
            ep.step(cfg, st, ep.Backward(he.wire(blob), he.wire(cross["party2"]),
                                         {"party3": other.encrypt(np.zeros(5))}), rng=rng)
        st, eg, ev = ep.step(cfg, st, ep.Backward(he.wire(blob), he.wire(cross["party2"]),
                                                  {"party3": other.encrypt(np.zeros(40))}), rng=rng)
        assert len(ev) == 2 and set(eg.peer_cross) == {"party3"}
        with pytest.raises(PolicyRefusal, match="a Forward in phase 'open'"):
            ep.step(cfg, st, ep.Forward(np.zeros(2)), rng=rng)
        # party 3's column sums of party 2's scores: only the declared d₃ = 2 values are decrypted
        with pytest.raises(PolicyRefusal, match="only the declared 2 column sums of peer 'party3'"):
            ep.step(cfg, st, ep.Open({"party3": sc.ciphertexts}), rng=rng)  # a per-row vector: refused
        st, op, ev = ep.step(cfg, st, ep.Open({"party3": he.wire(he.from_secret(st.own_key).encrypt(np.arange(2)))}), rng=rng)
        assert len(ev) == 1 and ev[0].sensitivity == pytest.approx(cfg.peer_sensitivity("party3"))
        assert len(op.values["party3"]) == 2 * he.residue_bytes(he.from_secret(st.own_key).modulus)  # mod its n


@pytest.mark.slow  # OU key generation for three parties and a whole fit twice
def test_three_party_fit_under_sf_heu_equals_the_plaintext_layer():
    pytest.importorskip("heu")
    blocks, y = _data(60)
    kw = dict(epsilon=1.0, label_epsilon=1.0, rounds=2, random_state=0)
    a = VerticalEncryptedClassifier(**kw).fit(blocks, y)
    with plaintext_he():
        b = VerticalEncryptedClassifier(**kw).fit(blocks, y)
    for u, v in zip(a.coefs_, b.coefs_):
        np.testing.assert_allclose(u, v, rtol=0, atol=1e-12)
