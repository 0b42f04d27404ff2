"""One forward="encrypted" round's HE cost at a9a's size (n = 32,561 rows; the label party's block 67 columns, party
m's 57, about 7 non-zeros a row; M = 1), piece by piece, in process seconds: the label-key part (the label party
encrypts its residuals, party m's column sums of them, the decryption) and the part under party m's OWN key — its
scores encrypted, the label party's masked column sums of them, m's decryption — with that key Okamoto–Uchiyama
(the protocol before issue 35: masks below 2^128) or Paillier (since: masks uniform on Z_n). Also one full-size
exponentiation under each scheme: the unit of a range proof's cost (docs/research/encrypted-premises.md).

    python benchmarks/bench_encrypted_round.py [--rows N]
"""

from __future__ import annotations

import argparse
import secrets
import time

import numpy as np
import scipy.sparse as sp

from dpadmm.algorithms.encrypted import he


def _block(rng, n: int, d: int, k: int):
    rows, cols = np.repeat(np.arange(n), k), rng.integers(0, d, size=n * k)
    M = sp.csr_matrix((np.full(n * k, 1.0 / np.sqrt(k)), (rows, cols)), shape=(n, d))
    M.sum_duplicates()
    M.data = np.minimum(M.data, 1.0)
    return he.quantize(M, 16)


def _timed(f):
    c = time.process_time()
    out = f()
    return out, time.process_time() - c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=32561)
    n = ap.parse_args().rows
    d0, dm = 67, 57
    rng = np.random.default_rng(0)
    A0, Dm = _block(rng, n, d0, 7), _block(rng, n, dm, 7)
    plan_a, plan_d = he.plane_indices(he.value_planes(A0)), he.plane_indices(he.value_planes(Dm))
    label = he.keygen()
    lp = he.from_public_key(label.public_key())
    g = rng.integers(-2 ** 24, 2 ** 24, size=n)
    gct, c_enc = _timed(lambda: label.encrypt(g))
    out, c_sum = _timed(lambda: lp.add_plain_fresh(lp.column_sums(plan_d, lp.load(gct)), np.zeros(dm, dtype=np.int64)))
    _, c_dec = _timed(lambda: label.decrypt(out))
    common = c_enc + c_sum + c_dec
    print(f"label-key part: {common:.2f} CPU-s (residuals encrypted {c_enc:.2f}, column sums {c_sum:.2f}, "
          f"decryption {c_dec:.3f})")
    for scheme in (he.SCHEME_LABEL, he.SCHEME_MASKED):
        own = he.keygen(scheme=scheme)
        pub = he.from_public_key(own.public_key(), scheme)
        s = rng.integers(-2 ** 30, 2 ** 30, size=n)
        blob, c1 = _timed(lambda: own.encrypt(s))
        r = pub.mask(d0) if scheme == he.SCHEME_MASKED else [secrets.randbits(128) for _ in range(d0)]
        cross, c2 = _timed(lambda: pub.dump(pub.add_big_fresh(pub.column_sums(plan_a, pub.load(blob)), r)))
        _, c3 = _timed(lambda: own.decrypt(own.load(cross)))
        big = own.kit.array(np.asarray([secrets.randbelow(1 << 600) for _ in range(50)], dtype=object))
        one = own._enc.encrypt(own.kit.array(np.ones(50, dtype=np.int64)))
        _, c_exp = _timed(lambda: own._ev.mul(one, big))
        print(f"party m's key {scheme}: scores encrypted {c1:.2f}, masked column sums {c2:.2f}, decryption {c3:.2f} "
              f"CPU-s; scores {len(blob) / 1e6:.1f} MB; a round {common + c1 + c2 + c3:.2f} CPU-s; one 600-bit "
              f"exponentiation {c_exp / 50 * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
