"""Additively homomorphic encryption behind a small interface, for the encrypted vertical protocol.

The protocol needs six operations and nothing else: make a key pair, encrypt an integer vector, the column sums
``Dᵀ·Enc(g)`` of a plaintext (sparse) integer matrix times an encrypted vector, add a plaintext vector (encrypted
fresh, so the sum is also re-randomised), re-randomise, decrypt. Values are integers (fixed point: the protocol
scales residuals by ``2**RESIDUAL_BITS`` and the party's block by ``2**BLOCK_BITS``); sums are exact.

Implementation, chosen by measurement (issue 28, this machine, one FATE-style backward round at a9a's n = 32,561:
encrypt n residuals, a 57-column sparse block's Dᵀ·Enc(g), decrypt 57): SecretFlow's ``sf-heu`` (Apache-2.0),
Okamoto–Uchiyama, 1.5 CPU-s; TenSEAL CKKS 2.0 s (needs noise flooding and 13 MB back unless packed);
python-paillier ~300 s. Okamoto–Uchiyama (OU): public modulus ``N = p²q`` of :data:`KEY_BITS` = 2048 bits
(p, q of ~683 bits; plaintexts below p, about 2^683), SecretFlow's default key size for OU; its security rests
on factoring N (p²q moduli of 2048 bits are believed to be about as hard as RSA-2048, ~112-bit security).
A ciphertext is ~256 bytes. Encryption is randomised (IND-CPA under the p-subgroup assumption).

``Dᵀ·Enc(g)`` with OU's two homomorphic operations (adding ciphertexts, multiplying one by a plaintext integer):
the integer block is split into ``D = Σ_v v · B_v`` with 0/1 matrices ``B_v`` — one per distinct non-zero value
when there are few (one-hot data such as a9a, rows normalised: a handful of values), otherwise one per signed
bit plane (``v = ±2^b``) — and ``Dᵀ·Enc(g) = Σ_v v · (B_vᵀ·Enc(g))``, each ``B_vᵀ·Enc(g)`` one call of heu's
``batch_select_sum`` (ciphertext additions over each column's selected rows). Cost: about
``nnz(D) · (#planes used per entry)`` ciphertext additions and ``d · #values`` scalar products.

Circuit privacy. A sum of the label party's own ciphertexts carries the product of the randomness it chose
when it encrypted them; left so, the key holder could test which rows were summed. So every ciphertext a
party returns has a fresh encryption (of its noise, or of 0: :meth:`HeBackend.rerandomize`) added: its
randomness is then uniform and independent of the rows (OU: ``H^r`` with fresh uniform r) — IF the key holder's H
is honest. Under the label party's OU key that is a premise (``honest-label-party``): sf-heu's OU randomiser lives
in a subgroup only the key holder knows (its decryption kills H^r, not a masker's own x^N), so a masker cannot
substitute its own as it does for Paillier below, and ``H = 1`` makes every "fresh" encryption deterministic: the key
holder then tests any hypothesis about the block (tests/redteam/test_encrypted_ou_key_structure.py, xfail).

Two schemes, two roles (issue 35). The LABEL party's key is OU (above). Every NON-label party's own key — the
one its scores are encrypted under, on which the label party and the peers compute column sums and mask them
before the key holder decrypts — is Paillier (``SCHEME_MASKED``, sf-heu's ``ZPaillier``, modulus n of 2048 bits),
because a mask can hide a value whatever the key holder encrypted only over a plaintext space the masker knows:
Paillier's is Z_n with n public; OU's is Z_p with p the SECRET factor, so an OU mask r < 2^128 hides nothing above
2^128 of a value the key holder inflated (it encrypts 2^200·e_i as a score and reads row i of the masker's block
from the top bits). Masks (:meth:`HeBackend.mask`) are uniform on a complete residue system of Z_n.

Theorem (one-time pad over Z_n). Let x ∈ Z_n be ANY value, chosen by the key holder as a function of anything it
knows (its encrypted inputs included), and r uniform on Z_n, drawn by the masker independently of x. Then
``x + r mod n`` is uniform on Z_n and independent of x: for every v, P(x + r ≡ v) = P(r ≡ v − x) = 1/n. So what the
key holder decrypts from a masked column sum is a uniform element of Z_n whatever it encrypted — the masker's
data enters its view only through what is returned later (a DP release). The honest value is recovered by the
masker as ``centred(v − r mod n)`` (:func:`centred`), exact whenever the honest value lies in (−n/2, n/2), which
every honest fixed-point value here does (below 2^127). Cost (this machine): ZPaillier encryption ~1.3 ms per
value against OU's ~43 µs, column sums ~6× OU's (ciphertexts mod n², 4,096 bits): docs/research/encrypted-premises.md.

``sf-heu`` is an optional extra (``pip install "dpadmm[he]"``): it is imported only when a key is made or
loaded (:func:`require_he`), so the rest of dpadmm, and a party that does not serve this protocol, need it not.
"""

from __future__ import annotations

import functools
import math
import secrets
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from ...exceptions import MissingDependencyError

#: bits of the OU public modulus N = p²q (SecretFlow's default for OU)
KEY_BITS = 2048
#: the plaintext bound of a 2048-bit OU key is about 2^683; a public key whose bound is below this is refused
MIN_PLAINTEXT_BITS = 680
INSTALL_HINT = 'the encrypted protocol needs the HE extra: pip install "dpadmm[he]" (sf-heu, SecretFlow\'s HE library)'
#: the schemes: the label party's key (OU) and every non-label party's own key, the masked one (Paillier)
SCHEME_LABEL, SCHEME_MASKED = "ou", "paillier"
#: a Paillier public key whose modulus is below this many bits is refused
MIN_MODULUS_BITS = 2048
#: at most this many distinct non-zero values are summed value by value; beyond, signed bit planes
MAX_VALUE_GROUPS = 32


def wire(blob: bytes) -> np.ndarray:
    """Bytes as a uint8 array: what the messages carry (the gRPC codec sends named arrays, never raw bytes)."""
    return np.frombuffer(bytes(blob), dtype=np.uint8).copy()


def unwire(x) -> bytes:
    """The bytes of a message field (a uint8 array, or bytes in-process); anything else is a ``TypeError``."""
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x)
    if isinstance(x, np.ndarray) and x.dtype == np.uint8 and x.ndim == 1:
        return x.tobytes()
    raise TypeError(f"expected bytes or a 1-D uint8 array, got {type(x).__name__}")


def require_he():
    """``(heu.phe, heu.numpy)``, or :class:`MissingDependencyError` with the install command."""
    try:
        # optional third-party library (the [he] extra): imported here so dpadmm imports without it
        from heu import numpy as hnp
        from heu import phe
    except ImportError:
        raise MissingDependencyError(INSTALL_HINT) from None
    return phe, hnp


def he_available() -> bool:
    try:
        require_he()
    except MissingDependencyError:
        return False
    return True


def value_planes(Q) -> list[tuple[int, sp.csc_matrix]]:
    """``Q = Σ_v v·B_v`` (integer matrix → list of (v, 0/1 CSC matrix)): by distinct value when there are at most
    :data:`MAX_VALUE_GROUPS`, else by signed bit plane. Exact for any int64 matrix."""
    Q = sp.csc_matrix(Q, dtype=np.int64)
    Q.eliminate_zeros()
    vals = np.unique(Q.data)
    out = []
    if vals.size <= MAX_VALUE_GROUPS:
        for v in vals:
            B = Q.copy()
            B.data = (Q.data == v).astype(np.int8)
            B.eliminate_zeros()
            out.append((int(v), B))
        return out
    for sign in (1, -1):
        mag = np.where(np.sign(Q.data) == sign, np.abs(Q.data), 0)
        for b in range(int(mag.max()).bit_length() if mag.size and mag.max() > 0 else 0):
            B = Q.copy()
            B.data = ((mag >> b) & 1).astype(np.int8)
            B.eliminate_zeros()
            if B.nnz:
                out.append((sign * (1 << b), B))
    return out


def plane_indices(planes) -> list[tuple[int, list[list[int]]]]:
    """Each plane's per-column row lists (what ``batch_select_sum`` takes), computed once at a party's setup."""
    return [(v, [B.indices[B.indptr[j]:B.indptr[j + 1]].tolist() for j in range(B.shape[1])]) for v, B in planes]


class HeBackend:
    """One party's view of a key (OU or Paillier): with the secret key (its owner's :func:`keygen`) it can decrypt;
    with only the public key (:func:`from_public_key`, every other party) it can encrypt and compute."""

    def __init__(self, kit, secret: bool):
        self._phe, self._hnp = require_he()
        self.kit, self.secret = kit, secret
        self._enc, self._ev = kit.encryptor(), kit.evaluator()
        self._dec = kit.decryptor() if secret else None

    def public_key(self) -> bytes:
        return bytes(self.kit.public_key().serialize())

    def secret_blob(self) -> np.ndarray:
        """The key pair serialised (uint8: 4-byte length, public key, secret key), for its OWNER's state and
        checkpoint only — never a message (:func:`from_secret` reads it back)."""
        if not self.secret:
            raise PermissionError("only the key holder has the secret key")
        pk, sk = bytes(self.kit.public_key().serialize()), bytes(self.kit.secret_key().serialize())
        return wire(len(pk).to_bytes(4, "big") + pk + sk)

    @property
    def modulus(self) -> int | None:
        """n of a Paillier key (plaintexts are Z_n, public); ``None`` for OU (Z_p, p secret: no uniform mask)."""
        if self.kit.get_schema() != self._phe.SchemaType.ZPaillier:
            return None
        return 2 * int(str(self.kit.public_key().plaintext_bound())) + 1  # sf-heu encodes Z_n as [−(n−1)/2, (n−1)/2]

    def mask(self, size: int) -> list[int]:
        """``size`` masks uniform on Z_n (from the OS's CSPRNG, never a simulation seed): :func:`uniform_masks`."""
        return uniform_masks(self.modulus, size)

    def _plain(self, v) -> object:
        return self.kit.array(np.asarray(v, dtype=np.int64))

    def encrypt(self, v) -> bytes:
        """``Enc(v)`` of an int64 vector, serialised (~256 bytes per entry)."""
        return bytes(self._enc.encrypt(self._plain(v)).serialize())

    def load(self, blob: bytes):
        return self._hnp.CiphertextArray.load_from(unwire(blob))

    def dump(self, ct) -> bytes:
        return bytes(ct.serialize())

    def column_sums(self, plan, ct):
        """``Dᵀ·Enc(g)`` for the integer block whose :func:`plane_indices` is ``plan`` (a ciphertext array of d)."""
        acc = None
        for v, lists in plan:
            part = self._ev.batch_select_sum(ct, lists)
            if v != 1:
                part = self._ev.mul(part, self._plain(np.full(len(lists), v, dtype=np.int64)))
            acc = part if acc is None else self._ev.add(acc, part)
        if acc is None:
            raise ValueError("an empty block has no column sums")
        return acc

    def add_plain_fresh(self, ct, v):
        """``ct + Enc(v)`` with ``Enc(v)`` freshly encrypted: adds ``v`` AND re-randomises."""
        return self._ev.add(ct, self._enc.encrypt(self._plain(v)))

    def add_big_fresh(self, ct, values):
        """``ct + Enc(v)`` for integers beyond int64 (e.g. masks below 2^128), freshly encrypted (re-randomises)."""
        return self._ev.add(ct, self._enc.encrypt(self.kit.array(np.asarray([int(v) for v in values], dtype=object))))

    def rerandomize(self, ct, size: int):
        return self.add_plain_fresh(ct, np.zeros(size, dtype=np.int64))

    def decrypt(self, ct) -> list[int]:
        """Exact integers (Python ints: sums may exceed int64)."""
        if self._dec is None:
            raise PermissionError("only the key holder decrypts")
        return [int(x) for x in self._dec.decrypt(ct).to_numpy().ravel()]

    def size(self, ct) -> int:
        return int(ct.size)


def keygen(bits: int = KEY_BITS, scheme: str = SCHEME_LABEL) -> HeBackend:
    """A fresh key pair: OU for the label party (``scheme="ou"``), Paillier for a non-label party's own key
    (``scheme="paillier"``, module docstring). The secret key never leaves this object."""
    phe, hnp = require_he()
    kind = {SCHEME_LABEL: phe.SchemaType.OU, SCHEME_MASKED: phe.SchemaType.ZPaillier}[scheme]
    return HeBackend(hnp.setup(kind, int(bits)), secret=True)


def from_secret(blob) -> HeBackend:
    """The key pair of :meth:`HeBackend.secret_blob` (its owner's own state or checkpoint)."""
    phe, hnp = require_he()
    raw = unwire(blob)
    n = int.from_bytes(raw[:4], "big")
    kit = phe.setup(phe.PublicKey.load_from(raw[4:4 + n]), phe.SecretKey.load_from(raw[4 + n:]))
    return HeBackend(hnp.HeKit(kit), secret=True)


def from_public_key(blob: bytes, scheme: str = SCHEME_LABEL) -> HeBackend:
    """The public side of another party's key; refuses a scheme other than the role's (``"ou"``: the label
    party's key; ``"paillier"``: a non-label party's own key) or a key below 2048 bits."""
    phe, hnp = require_he()
    try:
        pk = phe.PublicKey.load_from(unwire(blob))
    except Exception:  # noqa: BLE001 - whatever the parser raises, one line
        raise ValueError("the public key is not a serialised sf-heu key") from None
    kit = hnp.setup(pk)
    if scheme == SCHEME_MASKED:
        if kit.get_schema() != phe.SchemaType.ZPaillier:
            raise ValueError(f"the public key's scheme is {kit.get_schema()}, not Paillier (a non-label party's key)")
        return _masker_key(unwire(blob))
    if kit.get_schema() != phe.SchemaType.OU:
        raise ValueError(f"the public key's scheme is {kit.get_schema()}, not Okamoto–Uchiyama")
    bound = int(str(pk.plaintext_bound()))
    if bound.bit_length() < MIN_PLAINTEXT_BITS:
        raise ValueError(f"the public key is too short (plaintext bound 2^{bound.bit_length()}, a {KEY_BITS}-bit OU key "
                         f"has ~2^683)")
    return HeBackend(kit, secret=False)


#: primes below this are tried as factors of a Paillier modulus (a well-formed n = pq has none)
SMALL_PRIME_BOUND = 1 << 16
_SMALL_PRIMES = None


def _small_primes_product() -> int:
    global _SMALL_PRIMES
    if _SMALL_PRIMES is None:
        sieve = np.ones(SMALL_PRIME_BOUND, dtype=bool)
        sieve[:2] = False
        for i in range(2, int(SMALL_PRIME_BOUND ** 0.5) + 1):
            if sieve[i]:
                sieve[i * i::i] = False
        _SMALL_PRIMES = math.prod(int(p) for p in np.flatnonzero(sieve))
    return _SMALL_PRIMES


def _is_perfect_power(n: int) -> bool:
    """Whether n = a^k for integers a ≥ 2, k ≥ 2 (k prime suffices; integer k-th roots by Newton's method)."""
    for k in range(2, n.bit_length() + 1):
        if any(k % q == 0 for q in range(2, int(k ** 0.5) + 1)):
            continue  # only prime exponents
        lo, hi = 1, 1 << (n.bit_length() // k + 1)
        while lo < hi:  # the largest a with a^k ≤ n (bisection: ~n.bit_length()/k steps)
            mid = (lo + hi + 1) // 2
            if mid ** k <= n:
                lo = mid
            else:
                hi = mid - 1
        if lo > 1 and lo ** k == n:
            return True
    return False


def check_paillier_modulus(n: int) -> None:
    """What a party can verify of another party's Paillier modulus without its factors (``ValueError`` naming the
    failed check): at least :data:`MIN_MODULUS_BITS` bits, odd, not a perfect power (e.g. 3^1292), no prime factor
    below :data:`SMALL_PRIME_BOUND`. What it cannot verify — that n = pq with gcd(n, φ(n)) = 1 (e.g. n = p²q passes
    these checks) — needs the key holder's proof (Goldberg, Reyzin, Sagga, Baldimtsi 2019; Hazay et al. 2012) and is
    a premise of the guarantee (``PREMISES``: honest-peers; the label party's privacy lines)."""
    if n.bit_length() < MIN_MODULUS_BITS:
        raise ValueError(f"the Paillier key is too short ({n.bit_length()} bits, at least {MIN_MODULUS_BITS})")
    if n % 2 == 0:
        raise ValueError("the Paillier modulus is even (a modulus pq of two large primes is odd)")
    g = math.gcd(n, _small_primes_product())
    if g != 1:
        raise ValueError(f"the Paillier modulus has a small prime factor (gcd {g} with the primes below "
                         f"{SMALL_PRIME_BOUND}); a modulus pq of two large primes has none")
    if _is_perfect_power(n):
        raise ValueError("the Paillier modulus is a perfect power (gcd(n, φ(n)) ≠ 1: masks under it are not uniform)")


@functools.lru_cache(maxsize=64)
def _masker_key(blob: bytes) -> HeBackend:
    """Another party's Paillier key as a MASKER uses it: its modulus n checked (:func:`check_paillier_modulus`) and
    its ``h_s`` replaced by the masker's own ``(−x²)^n mod n²`` (x uniform on Z_n*, from the OS's CSPRNG). sf-heu's
    fresh encryption is ``(1 + mn)·h_s^r``, so every re-randomisation (:meth:`HeBackend.rerandomize`,
    ``add_*_fresh``) is then by an n-th residue of the masker's choosing, whatever ``h_s`` the key holder published
    (``h_s = 1`` made it deterministic: tests/redteam/test_encrypted_key_structure.py). Decryption needs only n and
    the secret key, so the key holder decrypts as before. Cached per key (one 4,096-bit power per key)."""
    phe, hnp = require_he()
    import msgpack  # noqa: PLC0415 - sf-heu's own serialisation (a dependency of the [he] extra)

    try:
        unpacker = msgpack.Unpacker(raw=True)
        unpacker.feed(blob)
        n_bytes, hs_bytes = next(unpacker)
        rest = blob[unpacker.tell():]  # what sf-heu writes after [n, h_s], kept as it is
        n = int.from_bytes(n_bytes, "little")
    except Exception:  # noqa: BLE001 - whatever the parser raises, one line
        raise ValueError("the Paillier public key is not sf-heu's [n, h_s]") from None
    check_paillier_modulus(n)
    n2 = n * n
    while True:
        x = secrets.randbelow(n - 2) + 2
        if math.gcd(x, n) == 1:
            break
    h = pow(n2 - (x * x) % n2, n, n2)
    width = max(len(hs_bytes), (h.bit_length() + 8) // 8)  # a published h_s may be shorter than ours (a 1/256 case)
    own = msgpack.packb([n_bytes, h.to_bytes(width, "little")], use_bin_type=False) + rest
    try:
        key = HeBackend(hnp.setup(phe.PublicKey.load_from(own)), secret=False)
    except Exception:  # noqa: BLE001
        raise ValueError("the Paillier public key is not sf-heu's [n, h_s]") from None
    if key.modulus != n:
        raise ValueError("the Paillier public key's modulus does not match its plaintext bound")
    return key


def uniform_masks(modulus: int | None, size: int) -> list[int]:
    """``size`` values uniform on Z_n, as the complete residue system [−(n−1)/2, (n−1)/2] (n odd) that the
    encryptor accepts (module docstring: the one-time pad). Refuses a key without a public modulus (OU)."""
    if modulus is None:
        raise ValueError("a uniform mask needs a public plaintext modulus (a Paillier key); OU's is secret")
    half = (int(modulus) - 1) // 2
    return [secrets.randbelow(int(modulus)) - half for _ in range(int(size))]


def centred(v: int, modulus: int) -> int:
    """The representative of ``v mod n`` in (−n/2, n/2]: the honest value when it lies there."""
    n = int(modulus)
    v %= n
    return v - n if v > n // 2 else v


def residue_bytes(modulus: int) -> int:
    return (int(modulus).bit_length() + 7) // 8


def to_residues(values, modulus: int) -> np.ndarray:
    """``values mod n`` as fixed-width big-endian bytes (a uint8 array: what a message carries)."""
    nb = residue_bytes(modulus)
    return wire(b"".join((int(v) % int(modulus)).to_bytes(nb, "big") for v in values))


def from_residues(blob, size: int, modulus: int, what: str) -> list[int]:
    """The ``size`` residues of :func:`to_residues` (``ValueError`` naming ``what`` if the length is not that)."""
    nb = residue_bytes(modulus)
    try:
        raw = unwire(blob)
    except TypeError:
        raw = b""
    if len(raw) != size * nb:
        raise ValueError(f"{what} must be {size} values of {nb} bytes")
    return [int.from_bytes(raw[j * nb:(j + 1) * nb], "big") for j in range(size)]


def quantize(D, bits: int):
    """``trunc(D · 2^bits)`` as int64, rounded toward zero so that every entry's magnitude, hence every row's norm,
    is at most the float block's (the clip bound survives quantisation)."""
    scale = float(2 ** bits)
    if sp.issparse(D):
        Q = sp.csr_matrix(D, dtype=np.float64, copy=True)
        Q.data = np.trunc(Q.data * scale)
        Q = Q.astype(np.int64)
        Q.eliminate_zeros()
        return Q
    return sp.csr_matrix(np.trunc(np.asarray(D, dtype=np.float64) * scale).astype(np.int64))


def sizes(blobs: Sequence[bytes]) -> int:
    return int(sum(len(b) for b in blobs))
