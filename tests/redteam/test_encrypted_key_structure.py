"""A non-label party's Paillier public key is checked for its scheme and the size of n only (``he.from_public_key``):
the rest of the key is the key holder's choice, and sf-heu's ZPaillier encrypts with it — ``Enc(m) = (1 + mn)·h_s^r
mod n²`` with ``h_s`` read from the key. A party that publishes its real n with ``h_s = 1`` makes every "fresh"
encryption of the masker deterministic (``1 + mn``): the masker's re-randomisation (``add_big_fresh``) adds no
randomness, so the ciphertext it returns is ``Π_i c_i^{a_ij} · (1 + (Σ a_ij s_i + r_j) n)``. The key holder knows
the randomness of its own ciphertexts c_i (it has the secret key), decrypts the returned value ``P_j`` and checks
any hypothesis about the masker's block: it recomputes the ciphertext the hypothesis predicts (the mask is then
``r_j = P_j − Σ a_ij s_i``) and compares bytes. On neighbouring label-party blocks (one row replaced) the test is
right on both sides: ε = ∞ for the label party's features against a non-label party, whose protection the protocol
states as the one-time pad over Z_n, "uniform whatever it encrypted" (:mod:`dpadmm.algorithms.encrypted.he`).
The same holds for a peer's column sums under peer k's key (``peers.backward_peers``: ``key.add_big_fresh``).

Fixed (what is verifiable, plus a design that does not use h_s): a masker never uses the key holder's ``h_s``
(``he._masker_key`` replaces it by its own ``(−x²)^n mod n²``, x uniform on Z_n*, so every re-randomisation is by an
n-th residue of the masker's choosing), and refuses a modulus that is short, even, has a prime factor below 2^16 or is
a perfect power (``he.check_paillier_modulus``). Residual premise, named in the privacy lines: that n is a product of
two large primes (gcd(n, φ(n)) = 1: n = p²q passes every check above); removing it needs the key holder's proof
(Goldberg, Reyzin, Sagga, Baldimtsi 2019; Hazay et al. 2012).
"""

from __future__ import annotations

import numpy as np
import pytest

heu = pytest.importorskip("heu")
msgpack = pytest.importorskip("msgpack")

from dpadmm.algorithms.encrypted import he, label  # noqa: E402


def _with_trivial_hs(public_key: bytes) -> bytes:
    """The same Paillier key (same n) with ``h_s = 1``: serialised as sf-heu's [n, h_s] little-endian integers."""
    u = msgpack.Unpacker(raw=True)
    u.feed(public_key)
    _, hs = next(u)
    assert public_key.count(hs) == 1
    return public_key.replace(hs, (1).to_bytes(len(hs), "little"))


@pytest.fixture(scope="module")
def keys():
    own = he.keygen(scheme=he.SCHEME_MASKED)  # the attacker's real key pair
    return own, he.from_public_key(_with_trivial_hs(own.public_key()), he.SCHEME_MASKED), he.keygen()


def test_fresh_encryption_under_another_partys_key_rerandomises(keys):
    own, crafted, _ = keys
    assert crafted.modulus == own.modulus and crafted.modulus.bit_length() >= he.MIN_MODULUS_BITS
    ct = own.load(own.encrypt(np.array([3, 4])))
    a, b = crafted.dump(crafted.rerandomize(ct, 2)), crafted.dump(crafted.rerandomize(ct, 2))
    assert a != b  # h_s = 1: the "fresh" encryption of 0 is the ciphertext 1, the same twice


def test_a_key_holder_with_a_crafted_key_cannot_test_the_label_partys_block(keys):
    own, crafted, key = keys
    n = 12
    rng = np.random.default_rng(0)
    A = rng.uniform(0.05, 0.3, size=(n, 3))
    A_prime = A.copy()
    A_prime[5] = rng.uniform(0.05, 0.3, size=3)  # a neighbouring block: row 5 replaced
    y = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)

    def setup(block):
        return label.setup_label(block, y, R=1.0, widths={"party2": 2}, clips={"party2": 1.0}, noise_multiplier=None,
                                 rounds=1, lam=1e-4, step=2.0, forward="encrypted", W=4.0)

    scores = rng.integers(-2 ** 20, 2 ** 20, size=n)
    blob = own.encrypt(scores)  # honest-looking scores under its REAL key: random randomness it can recover
    hypothesis, _ = setup(A)  # the attacker's guess: the block is A
    predicted_plain = np.asarray(hypothesis.Aq.T @ scores).ravel()
    says_A = {}
    for side, block in (("D", A), ("D'", A_prime)):
        lcfg, lst = setup(block)
        _, _, cross = label.residuals_encrypted(lcfg, lst, key, crafted, blob)  # the label party's honest step
        P = own.decrypt(own.load(cross))  # what the attacker decrypts (uniform on Z_n, as claimed)
        r = [he.centred(p - int(v), crafted.modulus) for p, v in zip(P, predicted_plain)]
        predicted = crafted.add_big_fresh(crafted.column_sums(hypothesis.plan, crafted.load(blob)), r)
        says_A[side] = crafted.dump(predicted) == cross
    assert says_A["D"] == says_A["D'"], says_A  # a guarantee: the test may not tell the two apart (it does: True/False)


def test_a_paillier_key_whose_modulus_is_a_prime_power_is_refused(keys):
    own, _, _ = keys
    blob = own.public_key()
    u = msgpack.Unpacker(raw=True)
    u.feed(blob)
    n_bytes, _ = next(u)
    N = 3 ** 1292  # 2048 bits, odd
    crafted = blob.replace(n_bytes, N.to_bytes(len(n_bytes) - 1, "little") + n_bytes[-1:])
    with pytest.raises(ValueError):
        he.from_public_key(crafted, he.SCHEME_MASKED)
