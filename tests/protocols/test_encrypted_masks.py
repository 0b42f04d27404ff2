"""Masks that hide the value whatever the key holder encrypted (issue 35): a non-label party that encrypts huge
values as its scores decrypts the masked column sums computed on them. With the masks of c765ad4 (uniform below
2^128) the value's top bits are in the clear: the attacker reads the label party's clipped rows, or a peer's, exactly.
With masks uniform on the key's public Z_n (dpadmm.algorithms.encrypted.he: the one-time pad) what it decrypts is
uniform, and its reconstruction is right no more often than chance. The attack runs through the protocol's own
functions on the plaintext HE layer (a key's plaintext space is Z_n as Paillier's); one check under sf-heu."""

from __future__ import annotations

import secrets

import numpy as np
import pytest

from dpadmm.algorithms.encrypted import he, label
from dpadmm.algorithms.encrypted import party as ep
from dpadmm.experiments.audit_games_encrypted import PlainHe, plaintext_he

BASE, BAND, ROWS = 160, 40, 4  # the attacker's scores: row i_t's coefficient 2^(BASE + BAND·t), above any 2^128 mask


def _inflated(n: int, rows) -> list[int]:
    s = [0] * n
    for t, i in enumerate(rows):
        s[i] = 1 << (BASE + BAND * t)
    return s


def _read(v: int, k: int) -> list[int]:
    """The attacker's reading of the ``k`` signed base-2^BAND digits above 2^BASE of a decrypted value."""
    q, out = v >> BASE, []  # floor: a mask below 2^BASE never reaches the digits
    for _ in range(k):
        d = ((q + (1 << (BAND - 1))) % (1 << BAND)) - (1 << (BAND - 1))
        out.append(d)
        q = (q - d) >> BAND
    return out


@pytest.fixture(params=["below 2^128 (c765ad4)", "uniform on Z_n"])
def masks(request, monkeypatch):
    if request.param.startswith("below"):
        monkeypatch.setattr(PlainHe, "mask", lambda self, size: [secrets.randbits(128) for _ in range(size)])
    return request.param


def _block(n, d, seed):
    rng = np.random.default_rng(seed)
    return rng.uniform(0.05, 0.3, size=(n, d)) * rng.choice([-1.0, 1.0], size=(n, d))  # no zero: chance is ~2^-40


def test_inflated_scores_read_the_label_partys_rows_only_with_short_masks(masks):
    """Party m encrypts 2^(160+40t)·e_{i_t} as its scores (4 rows a round, 12 columns with the intercept): with
    masks below 2^128 it reads all 48 entries of the label party's clipped, quantised rows from the cross sums;
    with masks on Z_n at most 10 % (here: none — chance is 2^-40 per entry)."""
    n, y = 20, np.where(np.arange(20) % 2 == 0, 1.0, -1.0)
    A = _block(n, 11, 0)
    with plaintext_he():
        lcfg, lst = label.setup_label(A, y, R=1.0, widths={"party2": 2}, clips={"party2": 1.0}, noise_multiplier=None,
                                      rounds=1, lam=1e-4, step=2.0, forward="encrypted", W=4.0)
        key, own = he.keygen(), he.keygen(scheme=he.SCHEME_MASKED)
        right = total = 0
        for rows in ([0, 1, 2, 3], [7, 11, 13, 19]):
            scores = own.dump((own.kid, _inflated(n, rows)))  # the attacker's "scores", under its own key
            _, _, cross = label.residuals_encrypted(lcfg, lst, key, he.from_public_key(own.public_key()), scores)
            vals = own.decrypt(own.load(cross))  # what party m decrypts at its Backward
            got = np.array([_read(v, ROWS) for v in vals]).T  # rows × columns
            want = lcfg.Aq[rows].toarray()
            right, total = right + int(np.sum(got == want)), total + want.size
    assert total == 96
    if masks.startswith("below"):
        assert right == total  # the attack of issue 35 reproduced: every entry read exactly
    else:
        assert right <= 0.1 * total


def test_inflated_scores_read_a_peers_rows_only_with_short_masks(masks):
    """Two non-label parties: party 3 encrypts inflated scores; honest party 2 computes its column sums of them
    masked for party 3 (``peer_cross``), which party 3 decrypts at Open. Masks below 2^128: party 3 reads party 2's
    clipped rows exactly (4 rows × 3 columns a round); masks on Z_n: at most 10 %."""
    n = 30
    D = _block(n, 3, 1)
    rng = np.random.default_rng(0)
    with plaintext_he():
        cfg, st = ep.setup_party("party2", D, None, 1.0, None, 2, 1e-4, 2.0, "encrypted", 0.7, 4.0, 1.0, 4.0, 4,
                                 {"party3": (1.0, 4.0, 2)})
        key, attacker = he.keygen(), he.keygen(scheme=he.SCHEME_MASKED)
        lcfg, lst0 = label.setup_label(_block(n, 3, 2), np.ones(n), R=1.0, widths={"party2": 3, "party3": 2},
                                       clips={"party2": 1.0, "party3": 1.0}, noise_multiplier=None, rounds=2,
                                       lam=1e-4, step=2.0, forward="encrypted", W=4.0)
        st, hello, _ = ep.step(cfg, st, ep.Start(he.wire(key.public_key())), rng=rng)
        own = he.from_public_key(hello.public_key, he.SCHEME_MASKED)
        right = total = 0
        for t, rows in enumerate(([0, 1, 2, 3], [5, 17, 23, 29])):
            st, sc, _ = ep.step(cfg, st, ep.Forward(None if t == 0 else np.zeros(3),
                                                    keys={"party3": he.wire(attacker.public_key())} if t == 0 else None),
                                rng=rng)
            bad = attacker.dump((attacker.kid, _inflated(n, rows)))
            _, blob, cross = label.residuals_peers(lcfg, lst0, key, {"party2": own, "party3": attacker},
                                                   {"party2": sc.ciphertexts, "party3": bad})
            st, eg, _ = ep.step(cfg, st, ep.Backward(he.wire(blob), he.wire(cross["party2"]), {"party3": he.wire(bad)}),
                                rng=rng)
            vals = attacker.decrypt(attacker.load(eg.peer_cross["party3"]))  # what party 3 decrypts at its Open
            got = np.array([_read(v, ROWS) for v in vals]).T
            want = cfg.Q[rows].toarray()
            right, total = right + int(np.sum(got == want)), total + want.size
            st = st._replace(phase="forward")  # skip the Open (not part of the attack)
    assert total == 24
    if masks.startswith("below"):
        assert right == total
    else:
        assert right <= 0.1 * total


def test_masks_are_uniform_on_the_modulus_and_decode_the_honest_value():
    n = 1009  # a small odd modulus: every residue reached, centred decoding exact within (−n/2, n/2)
    draws = np.array(he.uniform_masks(n, 20000))
    assert draws.min() >= -(n // 2) and draws.max() <= n // 2
    counts = np.bincount(draws + n // 2, minlength=n)
    # chi-square against uniform on n cells: mean n − 1, sd √(2(n − 1)); 6 sd is a 1e-9 false alarm
    chi2 = float(np.sum((counts - 20000 / n) ** 2 / (20000 / n)))
    assert abs(chi2 - (n - 1)) < 6 * np.sqrt(2 * (n - 1))
    for x in (-504, -1, 0, 3, 504):
        r = he.uniform_masks(n, 1)[0]
        assert he.centred((x + r) - r, n) == x and he.centred(((x + r) % n) - r, n) == x
    with pytest.raises(ValueError, match="public plaintext modulus"):
        he.uniform_masks(None, 3)
    assert he.from_residues(he.to_residues([5, -1], n), 2, n, "x") == [5, n - 1]
    with pytest.raises(ValueError, match="x must be 3 values of 2 bytes"):
        he.from_residues(he.to_residues([5, -1], n), 3, n, "x")


@pytest.mark.slow
def test_under_sf_heu_the_decrypted_cross_sums_of_inflated_scores_are_masked():
    """The same attack against the real keys: party m's key is Paillier (public n), the label party's mask is
    uniform on Z_n; m's reading of the label party's rows is wrong, and the honest decoding still recovers
    A₀ᵀs exactly for honest scores."""
    pytest.importorskip("heu")
    n, y = 8, np.where(np.arange(8) % 2 == 0, 1.0, -1.0)
    A = _block(n, 3, 3)
    lcfg, lst = label.setup_label(A, y, R=1.0, widths={"party2": 2}, clips={"party2": 1.0}, noise_multiplier=None,
                                  rounds=1, lam=1e-4, step=2.0, forward="encrypted", W=4.0)
    key, own = he.keygen(), he.keygen(scheme=he.SCHEME_MASKED)
    pub = he.from_public_key(own.public_key(), he.SCHEME_MASKED)
    with pytest.raises(ValueError, match="not Okamoto"):
        he.from_public_key(own.public_key())  # a Paillier key is refused where the label party's OU key belongs
    with pytest.raises(ValueError, match="not Paillier"):
        he.from_public_key(key.public_key(), he.SCHEME_MASKED)
    big = own.kit.array(np.asarray(_inflated(n, [0, 1, 2, 3]), dtype=object))
    _, _, cross = label.residuals_encrypted(lcfg, lst, key, pub, own.dump(own._enc.encrypt(big)))
    got = np.array([_read(v, ROWS) for v in own.decrypt(own.load(cross))]).T
    assert np.sum(got == lcfg.Aq[[0, 1, 2, 3]].toarray()) <= 0.1 * got.size
    honest = np.arange(n, dtype=np.int64) - 3
    st, _, cross = label.residuals_encrypted(lcfg, lst, key, pub, own.encrypt(honest))
    reply = he.to_residues(own.decrypt(own.load(cross)), own.modulus)  # party m's reply without noise
    want = np.asarray(lcfg.Aq.T @ honest, dtype=np.float64).ravel() / float(2 ** (ep.RESIDUAL_BITS + ep.BLOCK_BITS))
    np.testing.assert_array_equal(label.cross_sums(lcfg, st, reply), want)


def test_a_peers_linear_map_is_a_premise_no_mask_removes():
    """Why ``honest-peers`` is a premise (dpadmm.algorithms.encrypted.protocol): peer 2 applies ``c·e_iᵀ`` (c = 2^60)
    instead of its clipped block to party 3's encrypted scores; party 3 opens the result with its noise ζ, calibrated
    to a row of norm ≤ R₂, and (its own masks removed, as the label party's combination does) peer 2 reads party 3's
    per-row scores exactly. The masks hide the value from party 3, not party 3's scores from the map's owner: only
    the operator's acceptance (tests/protocols/test_encrypted_premises.py) stands between them."""
    n, c = 30, 1 << 60
    D = _block(n, 2, 4)
    rng = np.random.default_rng(0)
    with plaintext_he():
        cfg, st = ep.setup_party("party3", D, None, 1.0, 2.0, 2, 1e-4, 2.0, "encrypted", 0.7, 1.0, 1.0, 1.0, 4,
                                 {"party2": (1.0, 1.0, 3)})
        key, attacker = he.keygen(), he.keygen(scheme=he.SCHEME_MASKED)
        lcfg, lst = label.setup_label(_block(n, 3, 5), np.ones(n), R=1.0, widths={"party2": 3, "party3": 2},
                                      clips={"party2": 1.0, "party3": 1.0}, noise_multiplier=None, rounds=2,
                                      lam=1e-4, step=2.0, forward="encrypted", W=1.0)
        st, hello, _ = ep.step(cfg, st, ep.Start(he.wire(key.public_key())), rng=rng)
        st, sc, _ = ep.step(cfg, st, ep.Forward(keys={"party2": he.wire(attacker.public_key())}), rng=rng)
        st = st._replace(w=np.array([0.6, -0.5]))  # weights it would have after a few rounds (‖w‖ ≤ W)
        st, sc, _ = ep.step(cfg, st._replace(phase="forward"), ep.Forward(), rng=rng)
        own = he.from_public_key(hello.public_key, he.SCHEME_MASKED)
        _, blob, cross = label.residuals_peers(lcfg, lst, key, {"party2": attacker, "party3": own},
                                               {"party2": attacker.encrypt(np.zeros(n)), "party3": sc.ciphertexts})
        st, _, _ = ep.step(cfg, st, ep.Backward(he.wire(blob), he.wire(cross["party3"]),
                                                {"party2": attacker.encrypt(np.zeros(n))}), rng=rng)
        kid, scores = own.load(sc.ciphertexts)
        rows, masks_ = [4, 9, 21], own.mask(3)
        crafted = own.dump((kid, [c * scores[i] + r for i, r in zip(rows, masks_)]))  # c·e_iᵀ, masked
        st, opened, ev = ep.step(cfg, st, ep.Open({"party2": crafted}), rng=rng)
    assert len(ev) == 1 and ev[0].sensitivity == pytest.approx(cfg.peer_sensitivity("party2"))  # booked as usual
    vals = he.from_residues(opened.values["party2"], 3, own.modulus, "opened")
    read = [round(he.centred(v - r, own.modulus) / c) for v, r in zip(vals, masks_)]
    truth = ep.fixed_scores(cfg, np.array([0.6, -0.5]))  # party 3's per-row scores (fixed point)
    assert read == [int(truth[i]) for i in rows] and all(read)  # read exactly, every one
