"""Pairwise additive masks agreed by X25519 (as Flower's SecAgg+): the label party learns only Σ_m of the parties'
per-row scores, never one party's.

Each non-label party m makes an X25519 key pair at setup and publishes the public key (through the coordinator,
which cannot derive the shared secrets). For each other party m', both derive ``k = HKDF-SHA256(X25519(m, m'))``
and expand it with AES-256-CTR into a stream of 64-bit words, one per (round, row); m adds the stream, m'
subtracts it (the party with the smaller name adds). Scores are fixed point (``2**SCORE_BITS``) in the ring
Z/2^64, so the masks cancel exactly in the sum and each masked vector alone is uniform on Z/2^64 — as long as at
least one other party does not collude with the label party. With ONE non-label party there is nothing to pair
with: its scores are sent unmasked (the protocol's docstring says what that reveals).

A coordinator that substitutes public keys (man in the middle) learns the pair's masks: the parties' public keys
must then be checked out of band (the same premise as any SecAgg without a PKI); the declaration says so.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import (
    X25519PrivateKey,
    X25519PublicKey,
)
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

#: fixed-point bits of a per-row score in the masked sum (|score| ≤ R·W ≪ 2^39 leaves room in Z/2^64)
SCORE_BITS = 24
_RAW = serialization.Encoding.Raw


def new_key() -> tuple[bytes, bytes]:
    """``(private, public)`` raw X25519 bytes, from the OS's entropy (never from a simulation seed)."""
    k = X25519PrivateKey.generate()
    return (k.private_bytes(_RAW, serialization.PrivateFormat.Raw, serialization.NoEncryption()),
            k.public_key().public_bytes(_RAW, serialization.PublicFormat.Raw))


def pair_keys(name: str, private: bytes, peers: Mapping[str, bytes]) -> dict[str, bytes]:
    """The 32-byte pair key with every peer (``peers``: name → its public key; the party's own name skipped)."""
    me = X25519PrivateKey.from_private_bytes(bytes(private))
    out = {}
    for peer, pub in sorted(peers.items()):
        if peer == name:
            continue
        shared = me.exchange(X25519PublicKey.from_public_bytes(bytes(pub)))
        info = "dpadmm-encrypted-mask:" + "|".join(sorted((name, peer)))
        out[peer] = HKDF(hashes.SHA256(), 32, None, info.encode()).derive(shared)
    return out


def _stream(key: bytes, round_: int, n: int) -> np.ndarray:
    nonce = int(round_).to_bytes(16, "big")
    enc = Cipher(algorithms.AES(key), modes.CTR(nonce)).encryptor()
    return np.frombuffer(enc.update(b"\0" * (8 * n)) + enc.finalize(), dtype=np.uint64)


def mask(name: str, keys: Mapping[str, bytes], round_: int, values: np.ndarray) -> np.ndarray:
    """``values`` (int64 fixed point) plus this party's masks of ``round_``, as uint64 (wrapping)."""
    out = np.asarray(values, dtype=np.int64).view(np.uint64).copy()
    for peer, key in sorted(keys.items()):
        s = _stream(bytes(key), round_, out.shape[0])  # bytes or a uint8 array (the party's state)
        out = out + s if name < peer else out - s  # uint64 arithmetic wraps: exact in Z/2^64
    return out


def unmask_sum(parts) -> np.ndarray:
    """Σ of the parties' masked vectors (uint64, wrapping) as int64: the masks cancel."""
    acc = None
    for p in parts:
        p = np.asarray(p, dtype=np.uint64)
        acc = p.copy() if acc is None else acc + p
    return acc.view(np.int64)
