"""A non-label party of the encrypted vertical protocol: its pure setup and step (threat model and proofs in
:mod:`dpadmm.algorithms.encrypted.protocol`).

Round order (the party refuses any other; ``T`` = ``rounds``, declared at Setup and priced):
``Start`` → ``Forward`` → ``Backward`` → ``Forward`` → … → ``Backward`` (the T-th) → ``Forward(final=True)``.

- ``Start(public_key)``: the label party's OU public key (checked: OU, 2048 bits). Reply ``Hello(mask_key)``:
  the party's X25519 public key (for the pairwise masks).
- ``Forward(gradient, peers, final)``: first applies the gradient the label party returned for its last
  ``Backward`` (``None`` before the first) — ``w ← w − step · (gradient / n + λ w)`` — then, unless ``final``,
  replies ``Scores(values)``: its per-row scores ``D̂ w`` in fixed point, masked with every peer (``peers``: the
  other parties' X25519 keys, required in the first Forward when there are peers; none: a single non-label party
  sends them unmasked).
- ``Backward(residuals)``: ``Enc(ĝ)`` under the label party's key. Reply ``EncryptedGradient(ciphertexts)``:
  ``Enc(D̂ᵀĝ + ξ)``, ``ξ ~ N(0, σ² I)`` with ``σ = z · 2R`` drawn here and added as a fresh encryption (which also
  re-randomises); one :class:`~dpadmm.privacy.events.GaussianRelease` (record relation) per Backward.

With ``forward="encrypted"`` (one non-label party — more: below; the Taylor-approximated loss, :mod:`.protocol`): ``Hello`` also
carries the party's own Paillier public key (:mod:`.he`: masks uniform on its public Z_n); ``Forward`` is answered
with ``Scores(ciphertexts=Enc_m(s_m))`` under the
party's OWN key (the label party cannot read them); ``Backward`` carries ``Enc_0(ĝ₀)`` (the label party's part of
the Taylor residual) and ``cross = Enc_m(A₀ᵀs_m + r)`` (the label party's column sums of the party's scores, masked
by r uniform on Z_n); the party answers ``Enc_0(D̂ᵀ(ĝ₀ + s_m/4) + ξ)`` and ``cross`` decrypted (only the
declared d₀ values) plus its noise ζ, mod n — two GaussianRelease per Backward. Its weights are projected
to ‖w‖ ≤ W (the sensitivities' premise).

With ``forward="encrypted"`` and ``peers`` (M ≥ 2 non-label parties; the peers' public R_k, W_k, d_k): the first
``Forward`` also carries the peers' Paillier public keys (``keys``); ``Backward`` also carries every peer's encrypted
scores ``Enc_k(s_k)`` (``peer_scores``); the reply's gradient is ``Enc_0(4(D̂ᵀĝ₀ + ξ) + D̂ᵀs_m − Σ_k ρ_k)`` (the
Taylor residual at 4× scale, masked by fresh uniform ρ_k < 2^128) and ``peer_cross[k] = Enc_k(D̂ᵀs_k + ρ_k + λ_k)``
(its column sums of peer k's scores, under k's Paillier key, masked; λ_k uniform on Z_n_k, handed to the label party
in ``peer_offsets``); then ``Open(peer_cross)``: the peers' column sums of ITS scores, which it decrypts (only the
declared d_k values per peer; uniform on its Z_n whatever it encrypted), adds its noise ζ_k and returns mod its n
(``Opened``) — one more GaussianRelease per peer. Round order: Start, then Forward, Backward, Open per round,
final Forward.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import scipy.sparse as sp

from ...privacy.events import RECORD_REPLACE, GaussianRelease
from ...privacy.mechanisms import gaussian
from ...data.prepare import clip_rows
from ...exceptions import InvalidParameterError, ProtocolError
from . import he, masks
from .messages import (  # noqa: F401 - re-exported: the protocol's messages and fixed point, as before
    BLOCK_BITS,
    CROSS_BITS,
    FORWARD_MODES,
    MESSAGE_TYPES,
    RESIDUAL_BITS,
    Backward,
    EncryptedGradient,
    Forward,
    Hello,
    Open,
    Opened,
    Scores,
    Start,
)
from .peers import backward_peers, open_peers, peer_keys, refuse

@dataclass(frozen=True, eq=False)
class PartyConfig:
    name: str
    Q: Any  # the party's clipped block, quantised: int64 CSR, D̂ = Q / 2^BLOCK_BITS (never sent)
    plan: Any  # he.plane_indices(Q): per value plane, each column's rows
    R: float
    noise_multiplier: float | None
    rounds: int
    lam: float
    step: float
    score: Mapping[str, Any] = None  # key -> its rows of a NEW-records file (scored with ``logit``)
    forward: str = "clear"
    momentum: float = 0.0
    W: float | None = None  # forward="encrypted": ‖w‖ ≤ W (projected)
    label_R: float | None = None  # the label party's row clip R₀ (public; its block has the intercept column R₀)
    label_W: float | None = None  # ‖w₀‖ ≤ W₀, the label party's projection (public)
    label_width: int | None = None  # d₀ + 1: the label party's columns with the intercept (cross sums decrypted)
    peers: Mapping[str, tuple] | None = None  # M ≥ 2 encrypted: every other non-label party k -> (R_k, W_k, d_k), public
    training_rows: Mapping[str, int] | None = None  # score key -> its rows that ARE training rows (refused by logit)

    @property
    def residual_bound(self) -> float:
        """G ≥ |residual|: 1 for the logistic residual σ(s) − y; for the Taylor residual ½ + s/4 − y with
        |s₀| ≤ √2 R₀ W₀, |s_m| ≤ R W and |s_k| ≤ R_k W_k (every peer's projection): ½ + (√2 R₀ W₀ + R W + Σ_k R_k W_k)/4."""
        if self.forward == "clear":
            return 1.0
        others = sum(float(r) * float(w) for r, w, _ in (self.peers or {}).values())
        return 0.5 + (math.sqrt(2.0) * self.label_R * self.label_W + self.R * self.W + others) / 4.0

    def peer_sensitivity(self, peer: str) -> float:
        """Δ_Z = 2·R_k·R·W: one of this party's rows replaced moves s_i by ≤ 2RW, and peer k's column sums of the
        scores ``D̂_kᵀs`` by that times ‖d̂_k,i‖ ≤ R_k (its clip)."""
        return 2.0 * float(self.peers[peer][0]) * self.R * self.W

    @property
    def sensitivity(self) -> float:
        """Δ = 2R·G: one record of the block replaced, |residual| ≤ G in both datasets, the other residuals
        unchanged given the past releases (module docstring of ``protocol``)."""
        return 2.0 * self.R * self.residual_bound

    @property
    def cross_sensitivity(self) -> float:
        """Δ_Y = 2·√2R₀·RW: one row replaced moves s_{m,i} by ≤ 2RW, and A₀ᵀs_m by that times ‖a₀,ᵢ‖ ≤ √2 R₀."""
        return 2.0 * math.sqrt(2.0) * self.label_R * self.R * self.W

    @property
    def releases_per_round(self) -> int:
        return 1 if self.forward == "clear" else 2 + len(self.peers or {})

    @property
    def steps_per_round(self) -> int:
        """Messages per round: Forward, Backward (and Open with peers)."""
        return 3 if self.peers else 2


class PartyState(NamedTuple):
    phase: str = "setup"  # setup → started → forward / backward alternate → done
    w: np.ndarray | None = None
    velocity: np.ndarray | None = None
    own_key: Any = None  # forward="encrypted": its own Paillier key pair (he.SCHEME_MASKED), serialised (he.secret_blob; never leaves the party)
    sent_scores: np.ndarray | None = None  # forward="encrypted": the fixed-point scores it encrypted this round
    backward: int = 0
    public_key: np.ndarray | None = None  # uint8: the label party's OU public key
    mask_private: np.ndarray | None = None  # uint8, as every key and blob here: the state is checkpointable (codec)
    mask_public: np.ndarray | None = None
    pair_keys: Mapping[str, np.ndarray] | None = None
    peer_keys: Mapping[str, np.ndarray] | None = None  # M ≥ 2 encrypted: the peers' Paillier public keys (checked)


def setup_party(name: str, train, score=None, R: float = 1.0, noise_multiplier: float | None = None, rounds: int = 60,
                lam: float = 1e-4, step: float = 8.0, forward: str = "clear", momentum: float = 0.0,
                W: float | None = None, label_R: float | None = None, label_W: float | None = None,
                label_width: int | None = None, peers: Mapping[str, tuple] | None = None):
    """Clip the block's rows at R, quantise toward zero (the bound survives), plan its column sums. ``score``: its
    blocks of NEW records (key → block), scored on request (``logit``) after the fit."""
    he.require_he()  # refuse to start without the extra, before anything else
    if int(rounds) < 1:
        raise InvalidParameterError(f"rounds must be a positive integer, got {rounds}.")
    if forward not in FORWARD_MODES:
        raise InvalidParameterError(f"forward must be one of {FORWARD_MODES}, got {forward!r}.")
    if forward == "encrypted":
        for k, v in (("W", W), ("label_R", label_R), ("label_W", label_W), ("label_width", label_width)):
            if v is None or not (math.isfinite(float(v)) and float(v) > 0):
                raise InvalidParameterError(f"forward='encrypted' needs {k} finite and > 0, got {k}={v!r}.")
    peers = {str(k): (float(v[0]), float(v[1]), int(v[2])) for k, v in dict(peers or {}).items()}
    if peers and forward != "encrypted":
        raise InvalidParameterError("peers (the other parties' R, W, d) belong to forward='encrypted'; pass none.")
    for k, (r, w, d) in peers.items():
        if not (math.isfinite(r) and r > 0 and math.isfinite(w) and w > 0 and d >= 1):
            raise InvalidParameterError(f"peer {k!r} needs R, W finite and > 0 and d ≥ 1, got {(r, w, d)!r}.")
    D = clip_rows(train, float(R))
    Q = he.quantize(D, BLOCK_BITS).tocsr()
    priv, pub = masks.new_key()
    cfg = PartyConfig(str(name), Q, he.plane_indices(he.value_planes(Q)), float(R),
                      None if noise_multiplier is None else float(noise_multiplier), int(rounds), float(lam), float(step),
                      {str(k): v for k, v in dict(score or {}).items()}, str(forward), float(momentum),
                      None if W is None else float(W), None if label_R is None else float(label_R),
                      None if label_W is None else float(label_W), None if label_width is None else int(label_width),
                      peers or None, {str(k): _training_rows(train, v) for k, v in dict(score or {}).items()})
    own = he.keygen(scheme=he.SCHEME_MASKED).secret_blob() if forward == "encrypted" else None  # serialised: the state pickles/checkpoints
    return cfg, PartyState(w=np.zeros(Q.shape[1]), velocity=np.zeros(Q.shape[1]), mask_private=he.wire(priv),
                           mask_public=he.wire(pub),
                           own_key=own)


def _training_rows(train, block) -> int:
    """The rows of a new-records block that are the training block's own rows (the same memory: the block itself or a
    view of it); a private party refuses to score them (``logit``). Blocks read from the party's files are checked by
    id before they are read (:func:`.policy.prepare`); a copy a simulation's coordinator makes of rows it holds is the
    coordinator's own data anyway."""
    a, b = (getattr(x, "data", x) if sp.issparse(x) else x for x in (train, block))
    try:
        shared = isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and np.may_share_memory(a, b)
    except (TypeError, ValueError):
        shared = False
    return int(getattr(block, "shape", (0,))[0]) if shared else 0


def fixed_scores(cfg: PartyConfig, w: np.ndarray) -> np.ndarray:
    """``round(2^24 · D̂w)`` (int64): the scores as they are masked or encrypted."""
    s = np.asarray(cfg.Q @ w).ravel() / float(2 ** BLOCK_BITS)
    return np.round(s * float(2 ** masks.SCORE_BITS)).astype(np.int64)


def project(w: np.ndarray, W: float | None) -> np.ndarray:
    """The Euclidean projection on ‖w‖ ≤ W (``None``: none)."""
    if W is None:
        return w
    nw = float(np.linalg.norm(w))
    return w if nw <= W else w * (W / nw)


def update(w, velocity, grad_sum, *, n: int, step: float, lam: float, momentum: float, W):
    """Heavy-ball gradient step on the mean loss + (λ/2)‖w‖², then the projection on ‖w‖ ≤ W."""
    v = momentum * velocity + (grad_sum / n + lam * w)
    return project(w - step * v, W), v


def step(cfg: PartyConfig, state: PartyState, inbox, *, rng: np.random.Generator):
    """One message of the round order in the module docstring; anything else is refused."""
    if isinstance(inbox, Start):
        if state.phase != "setup":
            raise refuse(cfg, "a second Start")
        try:
            he.from_public_key(inbox.public_key)
        except (TypeError, ValueError) as exc:
            raise refuse(cfg, str(exc)) from None
        own_pub = he.wire(he.from_secret(state.own_key).public_key()) if state.own_key is not None else None
        return (state._replace(phase="forward", public_key=he.wire(he.unwire(inbox.public_key))),
                Hello(he.wire(state.mask_public), own_pub), [])
    if isinstance(inbox, Forward):
        if state.phase != "forward":
            raise refuse(cfg, f"a Forward in phase {state.phase!r} (Start, then Forward and Backward alternate)")
        w, vel, keys = state.w, state.velocity, state.pair_keys
        if inbox.gradient is not None or state.backward:
            g = np.asarray(inbox.gradient if inbox.gradient is not None else [], dtype=np.float64)
            if g.shape != w.shape or not np.all(np.isfinite(g)):
                raise refuse(cfg, f"the returned gradient must be {w.shape[0]} finite values, got shape {g.shape}")
            w, vel = update(w, vel, g, n=cfg.Q.shape[0], step=cfg.step, lam=cfg.lam, momentum=cfg.momentum, W=cfg.W)
        if keys is None:
            try:
                peers = {str(k): he.unwire(v) for k, v in dict(inbox.peers or {}).items()}
            except TypeError:
                peers = {"?": b""}
            if any(len(v) != 32 for v in peers.values()):
                raise refuse(cfg, "every peer key must be 32 bytes (X25519)")
            keys = {k: he.wire(v) for k, v in masks.pair_keys(cfg.name, he.unwire(state.mask_private), peers).items()}
        if cfg.peers and state.peer_keys is None:
            state = state._replace(peer_keys=peer_keys(cfg, inbox.keys))
        state = state._replace(w=w, velocity=vel, pair_keys=keys)
        if inbox.final:
            if state.backward != cfg.rounds:
                raise refuse(cfg, f"the final update after {state.backward} of the {cfg.rounds} declared rounds")
            return state._replace(phase="done"), None, []
        if state.backward >= cfg.rounds:
            raise refuse(cfg, f"a round beyond the {cfg.rounds} declared at Setup")
        fixed = fixed_scores(cfg, w)
        if cfg.forward == "encrypted":  # under its OWN key: the label party cannot read a per-row score
            return (state._replace(phase="backward", sent_scores=fixed),
                    Scores(None, he.wire(he.from_secret(state.own_key).encrypt(fixed))), [])
        return state._replace(phase="backward"), Scores(masks.mask(cfg.name, keys or {}, state.backward, fixed)), []
    if isinstance(inbox, Backward):
        if state.phase != "backward":
            raise refuse(cfg, f"a Backward in phase {state.phase!r}")
        pk = he.from_public_key(state.public_key)
        try:
            ct = pk.load(inbox.residuals)
        except Exception:  # noqa: BLE001 - a malformed blob: one line
            raise refuse(cfg, "the residuals are not a serialised ciphertext array") from None
        if pk.size(ct) != cfg.Q.shape[0]:
            raise refuse(cfg, f"the residuals must be {cfg.Q.shape[0]} ciphertexts, one per training row")
        cross = None
        if cfg.forward == "encrypted":
            cross = _open_cross(cfg, state, inbox.cross, rng)  # before anything is computed on the residuals
        if cfg.peers:
            return backward_peers(cfg, state, pk, ct, cross, inbox.peer_scores, rng)
        out = pk.column_sums(cfg.plan, ct)  # Enc(Q_ᵀ ĝ): [issue 28, backward pass]
        d, events = cfg.Q.shape[1], []
        scale = float(2 ** (RESIDUAL_BITS + BLOCK_BITS))
        plain = np.zeros(d, dtype=np.int64)
        if cfg.forward == "encrypted":  # + Q_ᵀ(s_m/4) in the clear at the residual's scale: the Taylor residual
            quarter = np.round(state.sent_scores.astype(np.float64) / 4.0).astype(np.int64)
            plain = np.asarray(cfg.Q.T @ quarter, dtype=np.int64).ravel()
        if cfg.noise_multiplier is not None:
            sigma = cfg.noise_multiplier * cfg.sensitivity
            plain = plain + np.round(gaussian(rng, sigma, d) * scale).astype(np.int64)
            events = [GaussianRelease(cfg.name, state.backward, cfg.sensitivity, sigma, RECORD_REPLACE)]
            if cross is not None:
                s_y = cfg.noise_multiplier * cfg.cross_sensitivity
                events.append(GaussianRelease(cfg.name, state.backward, cfg.cross_sensitivity, s_y, RECORD_REPLACE))
        out = pk.add_plain_fresh(out, plain)  # + Enc(ξ), fresh: noise and re-randomisation in one
        if cross is not None:
            noise = (np.round(gaussian(rng, cfg.noise_multiplier * cfg.cross_sensitivity, len(cross)) * scale)
                     if cfg.noise_multiplier is not None else np.zeros(len(cross)))
            n_own = he.from_secret(state.own_key).modulus
            cross = he.to_residues([v + int(z) for v, z in zip(cross, noise)], n_own)  # mod its n: r cancels there
        return (state._replace(phase="forward", backward=state.backward + 1, sent_scores=None),
                EncryptedGradient(he.wire(pk.dump(out)), cross), events)
    if isinstance(inbox, Open):
        return open_peers(cfg, state, inbox, rng)
    raise refuse(cfg, f"unexpected message {type(inbox).__name__} (declared: Start, Forward, Backward, Open)")


def _open_cross(cfg: PartyConfig, state: PartyState, blob, rng) -> list[int]:
    """Decrypt the label party's masked column sums ``A₀ᵀs_m + r`` — only a ciphertext array of the declared d₀ + 1
    entries; anything else is refused before decryption."""
    key = he.from_secret(state.own_key)
    if blob is None:
        raise refuse(cfg, "the Backward carries no cross sums (forward='encrypted')")
    try:
        ct = key.load(blob)
    except Exception:  # noqa: BLE001 - a malformed blob: one line
        raise refuse(cfg, "the cross sums are not a serialised ciphertext array") from None
    if key.size(ct) != cfg.label_width:
        raise refuse(cfg, f"it decrypts only the declared {cfg.label_width} cross sums, got {key.size(ct)} ciphertexts")
    return key.decrypt(ct)


def model(cfg: PartyConfig, state: PartyState) -> np.ndarray:
    """The party's weights on ITS block (it keeps them; written to its own directory at Finish)."""
    return np.asarray(state.w if state is not None and state.w is not None else np.zeros(0))


def is_private(cfg: PartyConfig) -> bool:
    return cfg.noise_multiplier is not None


def logit(cfg: PartyConfig, state: PartyState, key: str = "test") -> np.ndarray:
    """Its score on its rows of the NEW-records block ``key`` (clipped and quantised as its training rows), after
    the fit: post-processing of its weights (never its training rows, whose scores no ε covers)."""
    if state is None or state.phase != "done":
        raise ProtocolError(f"party {cfg.name!r} scores new records only after the fit's final update")
    if not isinstance(key, str) or key not in (cfg.score or {}):
        raise ProtocolError(f"party {cfg.name!r} scores only the new-records blocks it was set up with "
                            f"{sorted(cfg.score or {})}, not {key!r}")
    hits = (cfg.training_rows or {}).get(key, 0) if cfg.noise_multiplier is not None else 0
    if hits:
        raise ProtocolError(f"party {cfg.name!r} refused to score {key!r} in a private run: the block holds {hits} of "
                            "its training rows, whose scores no ε covers (a training row's score is a function of that "
                            "row); score rows that are not in the fit, e.g. a held-out split")
    Q = he.quantize(clip_rows(cfg.score[key], cfg.R), BLOCK_BITS)
    return np.asarray(Q @ state.w).ravel() / float(2 ** BLOCK_BITS)

