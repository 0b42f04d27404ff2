"""The label party of the encrypted vertical protocol: its pure functions (the driver, :mod:`.driver`, runs them
where the labels live). Proofs and threat model: :mod:`dpadmm.algorithms.encrypted.protocol`.

Its block: clipped at R₀, the intercept column R₀ appended (rows of norm ≤ √2 R₀), quantised toward zero on the
2^-16 grid like every party's. Per round t (``forward="clear"``): ``s = A₀w₀ + Σ_m s_m`` (its own score plus the
masked sum of the others', :func:`residuals`), ``ĝ = round(2^24 (σ(s) − y))`` encrypted under its key and sent;
each party's ``Enc(D̂_mᵀĝ + ξ_m)`` decrypted — only a ciphertext array of exactly ``d_m`` entries, the size party m
declared (:func:`open_gradients`) — and returned with its own noise, ``γ_m = D̂_mᵀĝ + ξ_m + η_m``; its own
weights move on ``A₀ᵀĝ + η₀``. The η's are one Gaussian mechanism of label sensitivity
``Δ_L = √(2R₀² + Σ_m R_m²)`` per round.

``forward="encrypted"`` (one non-label party m, the Taylor residual ``g = ½ + s/4 − y``; with more,
:func:`residuals_peers` and :func:`combine_peers`, :mod:`.protocol`): it never sees s_m; it
sends ``Enc_0(ĝ₀)``, ``ĝ₀ = round(2^24 (½ + s₀/4 − y))``, and ``Enc_m(A₀ᵀ s_m + r)`` computed on party m's
encrypted scores (party m's key is Paillier; r uniform on Z_n, drawn here: what m decrypts is uniform whatever it
encrypted, :mod:`.he`), gets back ``(A₀ᵀs_m + r + ζ) mod n`` and uses
``A₀ᵀĝ₀ + η₀ + (A₀ᵀs_m + ζ)/4`` for its own step; its weights are projected on ‖w₀‖ ≤ W₀.

Its labels (``label_epsilon``, the default label mechanism, "rr"): at Setup, once, it draws randomized response on
its training labels from its own entropy (:func:`dpadmm.algorithms.vertical.label.randomized_response`, the
labels-only protocol's mechanism: pure ε, one ``PureDPRelease`` under the label relation) and uses ONLY those
labels ỹ in everything it computes for the run (``cfg.y01``): every residual, so every ciphertext, decryption and
gradient that leaves it, is a function of ỹ, its own block and what the other parties sent — post-processing of
the one release, whatever any other party computes on what it receives (a packed linear map of the encrypted
residuals reads ỹ, not y). No de-biasing in the residuals: both are affine in the label, so the fit on ỹ estimates
the fit on y with its scores shrunk by 1 − 2q (q = 1/(1 + e^ε)), which the label party's calibration on its
held-out rows with their exact labels (:mod:`.combine`, nothing sent) undoes — as the labels-only protocol's
exact refit does. Without ``label_epsilon`` the labels are used exactly and the η's (``noise_multiplier``, the
``"gaussian"`` mechanism) are the only label noise: their guarantee needs every non-label party to compute D̂ᵀĝ
honestly (:mod:`.protocol`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import scipy.sparse as sp

from ...privacy.events import LABEL_CHANGE, GaussianRelease
from ...privacy.mechanisms import gaussian
from ...privacy.policy import PolicyRefusal
from ...data.prepare import clip_rows
from ..vertical.label import randomized_response
from . import he, masks
from .party import BLOCK_BITS, CROSS_BITS, RESIDUAL_BITS, EncryptedGradient, Opened, update

LABEL_PARTY = "party1"


@dataclass(frozen=True, eq=False)
class LabelConfig:
    A: Any  # its block clipped at R₀ with the intercept column R₀, quantised (float: Aq / 2^16)
    Aq: Any  # the same as int64 CSR (its cross sums on party m's ciphertexts)
    plan: Any  # he.plane_indices(Aq)
    y01: np.ndarray  # the labels it uses, in {0, 1}: ỹ (randomized response) with label_epsilon, else exact
    R: float
    widths: Mapping[str, int]  # d_m of each other party (public, from its Setup)
    clips: Mapping[str, float]  # R_m of each other party (public)
    noise_multiplier: float | None  # label side z_L
    rounds: int
    lam: float
    step: float
    forward: str = "clear"
    momentum: float = 0.0
    W: float | None = None  # ‖w₀‖ ≤ W₀ (forward="encrypted")
    released: tuple = ()  # the randomized response's PureDPRelease (label_epsilon), booked once per run

    @property
    def sensitivity(self) -> float:
        """Δ_L = √(2R₀² + Σ_m R_m²): one label moves one residual by 1 (logistic σ(s) − y and Taylor ½ + s/4 − y
        alike), so every block's column sums by that row (norm ≤ √2R₀ with the intercept, R_m at party m)."""
        return math.sqrt(2.0 * self.R ** 2 + sum(r * r for r in self.clips.values()))


class LabelState(NamedTuple):
    w: np.ndarray
    velocity: np.ndarray
    round: int = 0
    g: np.ndarray | None = None  # the round's fixed-point residuals (kept for its own gradient)
    r: tuple | dict | None = None  # forward="encrypted": the round's masks of the cross sums (M ≥ 2: per party)


def augment(D, R: float):
    ones = np.full((D.shape[0], 1), float(R))
    return sp.hstack([D, sp.csr_matrix(ones)], format="csr") if sp.issparse(D) else np.hstack([D, ones])


def prepare(X, R: float):
    """Its rows as it uses them: clipped at R, the intercept column R, quantised toward zero (float)."""
    Aq = he.quantize(augment(clip_rows(X, float(R)), float(R)), BLOCK_BITS).tocsr()
    return Aq, Aq.astype(np.float64) / float(2 ** BLOCK_BITS)


def setup_label(X, y, *, R: float, widths, clips, noise_multiplier, rounds: int, lam: float, step: float,
                forward: str = "clear", momentum: float = 0.0, W: float | None = None,
                label_epsilon: float | None = None, rng: np.random.Generator | None = None, released=None):
    """Its config and initial state. ``label_epsilon``: its training labels go once through randomized response
    (module docstring), drawn from ``rng`` (its own entropy when ``None``); the config's ``released`` holds the
    release's event. ``released``: the labels ỹ ∈ {0, 1} of that release, restored from its own checkpoint on a
    resume (no second draw, no second event)."""
    y = np.asarray(y, dtype=np.float64)
    Aq, A = prepare(X, R)
    plan = he.plane_indices(he.value_planes(Aq)) if forward == "encrypted" else None
    events: list = []
    if released is not None:
        y01 = np.asarray(released, dtype=np.float64)
        if y01.shape != y.shape or not np.isin(y01, (0.0, 1.0)).all():
            raise PolicyRefusal("the label party's restored labels must be one 0/1 value per training row")
    elif label_epsilon is not None:
        y_pm, events = randomized_response(np.where(y > 0, 1.0, -1.0), float(label_epsilon),
                                           rng=np.random.default_rng() if rng is None else rng, party=LABEL_PARTY)
        y01 = (y_pm > 0).astype(np.float64)
    else:
        y01 = (y > 0).astype(np.float64)
    cfg = LabelConfig(A, Aq, plan, y01, float(R), dict(widths), dict(clips),
                      None if noise_multiplier is None else float(noise_multiplier), int(rounds), float(lam),
                      float(step), str(forward), float(momentum), None if W is None else float(W), tuple(events))
    k = A.shape[1]
    return cfg, LabelState(np.zeros(k), np.zeros(k))


def residuals(cfg: LabelConfig, state: LabelState, key: he.HeBackend, masked_scores):
    """``Enc(ĝ)`` of the round (bytes) from the parties' masked scores: ``ĝ = round(2^24 (σ(s) − y))`` ∈ [−2^24, 2^24]."""
    others = masks.unmask_sum(masked_scores).astype(np.float64) / float(2 ** masks.SCORE_BITS) if masked_scores \
        else 0.0
    s = np.asarray(cfg.A @ state.w).ravel() + others
    g = 1.0 / (1.0 + np.exp(-np.clip(s, -500, 500))) - cfg.y01  # logistic: σ(s) − y ∈ (−1, 1)
    gq = np.round(g * float(2 ** RESIDUAL_BITS)).astype(np.int64)
    return state._replace(g=gq), key.encrypt(gq)


def residuals_encrypted(cfg: LabelConfig, state: LabelState, key: he.HeBackend, party_key: he.HeBackend,
                        encrypted_scores):
    """``(state, Enc_0(ĝ₀), Enc_m(A₀ᵀs_m + r))`` (forward="encrypted"): its part of the Taylor residual under its
    key, and its column sums of party m's encrypted scores masked by a fresh r uniform on Z_n (n: party m's
    Paillier modulus) per entry: what m decrypts is uniform on Z_n whatever it encrypted as scores (:mod:`.he`).
    ``state.r`` = (n, r)."""
    s0 = np.asarray(cfg.A @ state.w).ravel()
    g0 = 0.5 + s0 / 4.0 - cfg.y01  # [FATE's Taylor loss]: σ(s) ≈ ½ + s/4; party m adds its s_m/4
    gq = np.round(g0 * float(2 ** RESIDUAL_BITS)).astype(np.int64)
    ct = party_key.load(encrypted_scores)
    if party_key.size(ct) != cfg.A.shape[0]:
        raise PolicyRefusal("the label party refused the round: the encrypted scores must be one per training row")
    k = cfg.A.shape[1]
    r = (party_key.modulus, tuple(party_key.mask(k)))  # uniform on Z_n (he: the one-time pad), a CSPRNG
    cross = party_key.add_big_fresh(party_key.column_sums(cfg.plan, ct), r[1])  # + Enc_m(r), fresh: re-randomised
    return state._replace(g=gq, r=r), key.encrypt(gq), party_key.dump(cross)


def residuals_peers(cfg: LabelConfig, state: LabelState, key: he.HeBackend, party_keys: Mapping[str, he.HeBackend],
                    encrypted_scores: Mapping[str, Any]):
    """forward="encrypted" with M ≥ 2 parties: ``(state, Enc_0(ĝ₀), {m: Enc_m(A₀ᵀs_m + r_m)})`` — as
    :func:`residuals_encrypted`, the cross sums per party, each under that party's key with its own fresh mask."""
    if set(encrypted_scores) != set(cfg.widths):
        raise PolicyRefusal(f"the label party refused the round: scores from {sorted(encrypted_scores)}, declared "
                            f"parties {sorted(cfg.widths)}")
    s0 = np.asarray(cfg.A @ state.w).ravel()
    gq = np.round((0.5 + s0 / 4.0 - cfg.y01) * float(2 ** RESIDUAL_BITS)).astype(np.int64)  # [FATE's Taylor loss]
    k, masks_, cross = cfg.A.shape[1], {}, {}
    for m in sorted(encrypted_scores):
        ct = party_keys[m].load(encrypted_scores[m])
        if party_keys[m].size(ct) != cfg.A.shape[0]:
            raise PolicyRefusal(f"the label party refused the round: {m!r}'s encrypted scores must be one per "
                                "training row")
        masks_[m] = (party_keys[m].modulus, tuple(party_keys[m].mask(k)))  # uniform on Z_n_m, a CSPRNG
        cross[m] = party_keys[m].dump(party_keys[m].add_big_fresh(party_keys[m].column_sums(cfg.plan, ct),
                                                                  masks_[m][1]))
    return state._replace(g=gq, r=masks_), key.encrypt(gq), cross


def _wrap(blob, k: int, what: str, modulus: int) -> list[int]:
    try:
        return he.from_residues(blob, k, modulus, what)
    except ValueError as exc:
        raise PolicyRefusal(f"the label party refused the reply: {exc}") from None


def _centred(v: int) -> int:
    mod, half = 1 << CROSS_BITS, 1 << (CROSS_BITS - 1)
    v %= mod
    return v - mod if v >= half else v


def combine_peers(cfg: LabelConfig, key: he.HeBackend, replies: Mapping[str, EncryptedGradient],
                  opened: Mapping[str, Any], moduli: Mapping[str, int]) -> dict[str, np.ndarray]:
    """M ≥ 2: party m's gradient ``D̂_mᵀg + ξ_m + Σ_k ζ_k/4`` (float) from its decrypted ``4(D̂_mᵀĝ₀ + ξ_m) + D̂_mᵀs_m
    − Σ_k ρ_k`` and every peer k's opened ``(D̂_mᵀs_k + ρ_k + λ_k + ζ_k) mod n_k``, less m's outer mask λ_k
    (``EncryptedGradient.peer_offsets``, uniform on Z_n_k: it hid the value from k whatever k encrypted): the ρ's
    then cancel mod 2^128 (the true value is far below 2^127). Only d_m values are decrypted per party (checked
    before). ``moduli``: each party's Paillier n, from the key it gave at Setup."""
    if set(opened) != set(cfg.widths):
        raise PolicyRefusal(f"the label party refused the round: opened column sums from {sorted(opened)}, declared "
                            f"parties {sorted(cfg.widths)}")
    scale = 4.0 * float(2 ** (RESIDUAL_BITS + BLOCK_BITS))
    out = {}
    for m in sorted(replies):
        total = key.decrypt(key.load(replies[m].ciphertexts))
        for k in sorted(opened):
            if k == m:
                continue
            vals = dict(opened[k].values or {}).get(m) if isinstance(opened[k], Opened) else None
            lam = dict(replies[m].peer_offsets or {}).get(k)
            o = _wrap(vals, len(total), f"{k!r}'s opened column sums of {m!r}", moduli[k])
            for j, v in enumerate(_wrap(lam, len(total), f"{m!r}'s masks of {k!r}'s column sums", moduli[k])):
                total[j] += he.centred(o[j] - v, moduli[k])
        out[m] = np.array([_centred(v) / scale for v in total], dtype=np.float64)
    return out


def cross_sums(cfg: LabelConfig, state: LabelState, blob, r=None) -> np.ndarray:
    """Party m's reply ``(A₀ᵀs_m + r + ζ) mod n`` with the round's (n, r) (``state.r``, or ``r``) removed:
    ``A₀ᵀs_m + ζ`` (float)."""
    n, r = state.r if r is None else r
    vals = _wrap(blob, cfg.A.shape[1], "the cross sums", n)
    out = [he.centred(v - r[j], n) / float(2 ** (RESIDUAL_BITS + BLOCK_BITS)) for j, v in enumerate(vals)]
    return np.asarray(out, dtype=np.float64)


def open_gradients(cfg: LabelConfig, state: LabelState, key: he.HeBackend, replies: Mapping[str, EncryptedGradient],
                   *, rng: np.random.Generator, opened: Mapping[str, Any] | None = None):
    """Decrypt each party's declared-size reply, add the label noise, update its own weights (``opened``: with
    M ≥ 2 encrypted parties, every party's :class:`Opened` reply, combined by :func:`combine_peers`).

    Returns ``(state, {party: γ_m}, events)``. Refuses (:class:`PolicyRefusal`, nothing decrypted) a reply that is
    not one :class:`EncryptedGradient` of ``d_m`` ciphertexts per declared party."""
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
    multi = isinstance(state.r, dict)
    if multi:
        cross = sum(cross_sums(cfg, state, replies[m].cross, state.r[m]) for m in sorted(replies))
    else:
        cross = cross_sums(cfg, state, next(iter(replies.values())).cross) if cfg.forward == "encrypted" else None
    scale = float(2 ** (RESIDUAL_BITS + BLOCK_BITS))
    sigma = 0.0 if cfg.noise_multiplier is None else cfg.noise_multiplier * cfg.sensitivity
    out = {}
    plains = combine_peers(cfg, key, replies, opened or {}, {m: state.r[m][0] for m in state.r}) if multi else {
        name: np.array([v / scale for v in key.decrypt(cts[name])], dtype=np.float64) for name in sorted(cts)}
    for name in sorted(cts):
        plain = plains[name]
        out[name] = plain + (gaussian(rng, sigma, plain.shape[0]) if sigma else 0.0)
    g = state.g.astype(np.float64) / float(2 ** RESIDUAL_BITS)
    own = np.asarray(cfg.A.T @ g).ravel() + (gaussian(rng, sigma, cfg.A.shape[1]) if sigma else 0.0)
    if cross is not None:
        own = own + cross / 4.0  # Σ_m A₀ᵀ(s_m/4) + ζ_m/4: the Taylor residual's other part
    w, v = update(state.w, state.velocity, own, n=cfg.A.shape[0], step=cfg.step, lam=cfg.lam, momentum=cfg.momentum,
                  W=cfg.W)
    events = [GaussianRelease(LABEL_PARTY, state.round, cfg.sensitivity, sigma, LABEL_CHANGE)] if sigma else []
    return LabelState(w, v, state.round + 1, None, None), out, events


def own_scores(cfg_R: float, w: np.ndarray, X) -> np.ndarray:
    """Its score on NEW records (prepared as its training rows)."""
    return np.asarray(prepare(X, cfg_R)[1] @ w).ravel()
