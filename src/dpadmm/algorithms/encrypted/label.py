"""The label party of the encrypted vertical protocol: its pure functions (the driver, :mod:`.driver`, runs them
where the labels live). Proofs and threat model: :mod:`dpadmm.algorithms.encrypted.protocol`.

Per round t: ``s = A₀w₀ + Σ_m s_m`` (its own score plus the masked sum of the others', :func:`residuals`),
``ĝ = round(2^24 (σ(s) − y))`` encrypted under its key and sent; each party's ``Enc(D̂_mᵀĝ + ξ_m)`` decrypted —
only a ciphertext array of exactly ``d_m`` entries, the size party m declared, is decrypted (:func:`open_gradients`)
— and returned with the label party's own noise, ``γ_m = D̂_mᵀĝ + ξ_m + η_m``; its own weights move on
``A₀ᵀĝ + η₀``. The η's are one Gaussian mechanism of label sensitivity ``Δ_L = √(2R₀² + Σ_m R_m²)`` per round.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple

import numpy as np
import scipy.sparse as sp

from ...privacy.events import LABEL_CHANGE, GaussianRelease
from ...privacy.mechanisms import gaussian
from ..vertical_data import clip_rows
from . import he, masks
from .party import BLOCK_BITS, RESIDUAL_BITS, EncryptedGradient

LABEL_PARTY = "party1"


@dataclass(frozen=True, eq=False)
class LabelConfig:
    A: Any  # its block clipped at R₀, with the intercept column R₀ (rows of norm ≤ √2 R₀)
    y01: np.ndarray  # labels in {0, 1}: never leave
    R: float
    widths: Mapping[str, int]  # d_m of each other party (public, from its Setup)
    clips: Mapping[str, float]  # R_m of each other party (public)
    noise_multiplier: float | None  # label side z_L
    rounds: int
    lam: float
    step: float

    @property
    def sensitivity(self) -> float:
        """Δ_L = √(2R₀² + Σ_m R_m²): one label flips one residual by at most 1, moving every block's column sums by
        that row (norm ≤ √2R₀ with the intercept, R_m at party m)."""
        return math.sqrt(2.0 * self.R ** 2 + sum(r * r for r in self.clips.values()))


class LabelState(NamedTuple):
    w: np.ndarray
    round: int = 0
    g: np.ndarray | None = None  # the round's fixed-point residuals (kept for its own gradient)


def augment(D, R: float):
    ones = np.full((D.shape[0], 1), float(R))
    return sp.hstack([D, sp.csr_matrix(ones)], format="csr") if sp.issparse(D) else np.hstack([D, ones])


def setup_label(X, y, *, R: float, widths, clips, noise_multiplier, rounds: int, lam: float, step: float):
    y = np.asarray(y, dtype=np.float64)
    A = augment(clip_rows(X, float(R)), float(R))
    cfg = LabelConfig(A, (y > 0).astype(np.float64), float(R), dict(widths), dict(clips),
                      None if noise_multiplier is None else float(noise_multiplier), int(rounds), float(lam),
                      float(step))
    return cfg, LabelState(np.zeros(A.shape[1]))


def residuals(cfg: LabelConfig, state: LabelState, key: he.HeBackend, masked_scores):
    """``Enc(ĝ)`` of the round (bytes) from the parties' masked scores: ``ĝ = round(2^24 (σ(s) − y))`` ∈ [−2^24, 2^24]."""
    others = masks.unmask_sum(masked_scores).astype(np.float64) / float(2 ** masks.SCORE_BITS) if masked_scores \
        else 0.0
    s = np.asarray(cfg.A @ state.w).ravel() + others
    g = 1.0 / (1.0 + np.exp(-np.clip(s, -500, 500))) - cfg.y01  # logistic: σ(s) − y ∈ (−1, 1)
    gq = np.round(g * float(2 ** RESIDUAL_BITS)).astype(np.int64)
    return state._replace(g=gq), key.encrypt(gq)


def open_gradients(cfg: LabelConfig, state: LabelState, key: he.HeBackend, replies: Mapping[str, EncryptedGradient],
                   *, rng: np.random.Generator):
    """Decrypt each party's declared-size reply, add the label noise, update its own weights.

    Returns ``(state, {party: γ_m}, events)``. Refuses (:class:`PolicyRefusal`, nothing decrypted) a reply that is
    not one :class:`EncryptedGradient` of ``d_m`` ciphertexts per declared party."""
    from ...privacy.policy import PolicyRefusal

    if set(replies) != set(cfg.widths):
        raise PolicyRefusal(f"the label party refused the round: replies from {sorted(replies)}, declared parties "
                            f"{sorted(cfg.widths)}; nothing decrypted")
    cts = {}
    for name, msg in replies.items():
        if not isinstance(msg, EncryptedGradient):
            raise PolicyRefusal(f"the label party refused {name!r}'s reply: {type(msg).__name__}, not an "
                                "EncryptedGradient; nothing decrypted")
        ct = key.load(msg.ciphertexts)
        if key.size(ct) != cfg.widths[name]:
            raise PolicyRefusal(f"the label party refused to decrypt {name!r}'s reply: {key.size(ct)} ciphertexts, "
                                f"its declared block has {cfg.widths[name]} columns")
        cts[name] = ct
    scale = float(2 ** (RESIDUAL_BITS + BLOCK_BITS))
    sigma = 0.0 if cfg.noise_multiplier is None else cfg.noise_multiplier * cfg.sensitivity
    out = {}
    for name in sorted(cts):
        plain = np.array([v / scale for v in key.decrypt(cts[name])], dtype=np.float64)
        out[name] = plain + (gaussian(rng, sigma, plain.shape[0]) if sigma else 0.0)
    g = state.g.astype(np.float64) / float(2 ** RESIDUAL_BITS)
    own = np.asarray(cfg.A.T @ g).ravel() + (gaussian(rng, sigma, cfg.A.shape[1]) if sigma else 0.0)
    n = cfg.A.shape[0]
    w = state.w - cfg.step * (own / n + cfg.lam * state.w)
    events = [GaussianRelease(LABEL_PARTY, state.round, cfg.sensitivity, sigma, LABEL_CHANGE)] if sigma else []
    return LabelState(w, state.round + 1, None), out, events


def decision(cfg: LabelConfig, state: LabelState, X, others) -> np.ndarray:
    """The joint logit on NEW records: its own score plus the others' (post-processing of their weights)."""
    return np.asarray(augment(clip_rows(X, cfg.R), cfg.R) @ state.w).ravel() + np.sum(others, axis=0)
