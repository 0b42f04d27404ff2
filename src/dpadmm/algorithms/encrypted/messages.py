"""The encrypted vertical protocol's messages (named arrays and scalars: what crosses a boundary) and its fixed
point. Who sends each and what it reveals: :mod:`.protocol`; the round order: :mod:`.party`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

#: fixed point of the residuals the label party encrypts (|g| ≤ 1) and of the party's block (rows of norm ≤ R)
RESIDUAL_BITS = 24
BLOCK_BITS = 16
#: the peers' inner masks ρ (hiding D̂_mᵀs_m from the label party) are uniform below 2^128 and cancel mod 2^128;
#: every mask a KEY HOLDER removes by decrypting is uniform on its Paillier Z_n instead (:mod:`.he`)
CROSS_BITS = 128
FORWARD_MODES = ("clear", "encrypted")


class Start(NamedTuple):
    public_key: np.ndarray  # uint8 (he.wire): the serialised key


class Hello(NamedTuple):
    mask_key: np.ndarray  # uint8: 32 bytes of X25519 public key
    public_key: np.ndarray | None = None  # uint8; forward="encrypted": the party's own Paillier public key


class Forward(NamedTuple):
    gradient: np.ndarray | None = None
    peers: Mapping[str, np.ndarray] | None = None  # name -> uint8 X25519 public key
    final: bool = False
    keys: Mapping[str, np.ndarray] | None = None  # first Forward, M ≥ 2 encrypted: name -> uint8 Paillier public key


class Scores(NamedTuple):
    values: np.ndarray | None = None  # uint64: fixed-point scores plus pairwise masks (Z/2^64)
    ciphertexts: np.ndarray | None = None  # uint8; forward="encrypted": Enc_m(round(2^24 s_m)) under the party's own key


class Backward(NamedTuple):
    residuals: np.ndarray  # uint8: serialised ciphertexts
    cross: np.ndarray | None = None  # uint8; forward="encrypted": Enc_m(A₀ᵀ s_m + r), d₀ ciphertexts under the party's key
    peer_scores: Mapping[str, np.ndarray] | None = None  # M ≥ 2: peer k -> uint8 Enc_k(s_k) (k's key: unreadable here)


class EncryptedGradient(NamedTuple):
    ciphertexts: np.ndarray  # uint8: serialised ciphertexts
    cross: np.ndarray | None = None  # uint8; forward="encrypted": (A₀ᵀ s_m + r + ζ) mod n_m (he.to_residues)
    peer_cross: Mapping[str, np.ndarray] | None = None  # M ≥ 2: peer k -> uint8 Enc_k(D̂_mᵀ s_k + ρ_k + λ_k), d_m ciphertexts
    peer_offsets: Mapping[str, np.ndarray] | None = None  # M ≥ 2, to the label party: peer k -> λ_k mod n_k (he.to_residues)


class Open(NamedTuple):
    """M ≥ 2: every peer m's column sums of this party's scores, ``Enc_k(D̂_mᵀ s_k + ρ)`` under its own key."""
    peer_cross: Mapping[str, np.ndarray]  # peer m -> uint8 ciphertexts (d_m of them)


class Opened(NamedTuple):
    """``(D̂_mᵀ s_k + ρ + λ + ζ_m) mod n_k`` per peer m (:func:`.he.to_residues`): masked for the label party by
    m's ρ once it removes m's λ."""
    values: Mapping[str, np.ndarray]  # peer m -> uint8


MESSAGE_TYPES = (Start, Hello, Forward, Scores, Backward, EncryptedGradient, Open, Opened)


class Setup(NamedTuple):
    """``party.setup_party``'s arguments by name (the Setup message carries them by name): the party's own blocks
    (``train``, ``score``: PartyData references, or arrays in a simulation) and the run's public constants."""

    name: str
    train: Any  # PartyData references to the party's own blocks, or arrays in a simulation
    score: Any = None
    R: float = 1.0
    noise_multiplier: float | None = None
    rounds: int = 60
    lam: float = 1e-4
    step: float = 8.0
    forward: str = "clear"
    momentum: float = 0.0
    W: float | None = None
    label_R: float | None = None
    label_W: float | None = None
    label_width: int | None = None
    peers: Mapping[str, tuple] | None = None
