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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple

import numpy as np

from ...privacy.events import RECORD_REPLACE, GaussianRelease
from ...privacy.mechanisms import gaussian
from ...privacy.policy import PolicyRefusal
from ..vertical_data import clip_rows
from . import he, masks

#: fixed point of the residuals the label party encrypts (|g| ≤ 1) and of the party's block (rows of norm ≤ R)
RESIDUAL_BITS = 24
BLOCK_BITS = 16


class Start(NamedTuple):
    public_key: bytes


class Hello(NamedTuple):
    mask_key: bytes


class Forward(NamedTuple):
    gradient: np.ndarray | None = None
    peers: Mapping[str, bytes] | None = None
    final: bool = False


class Scores(NamedTuple):
    values: np.ndarray  # uint64: fixed-point scores plus pairwise masks (Z/2^64)


class Backward(NamedTuple):
    residuals: bytes


class EncryptedGradient(NamedTuple):
    ciphertexts: bytes


MESSAGE_TYPES = (Start, Hello, Forward, Scores, Backward, EncryptedGradient)


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

    @property
    def sensitivity(self) -> float:
        """Δ = 2R: one record of the block replaced, residuals in [−1, 1] (module docstring of ``protocol``)."""
        return 2.0 * self.R


class PartyState(NamedTuple):
    phase: str = "setup"  # setup → started → forward / backward alternate → done
    w: np.ndarray | None = None
    backward: int = 0
    public_key: bytes | None = None
    mask_private: bytes | None = None
    mask_public: bytes | None = None
    pair_keys: Mapping[str, bytes] | None = None


def setup_party(name: str, train, score=None, R: float = 1.0, noise_multiplier: float | None = None, rounds: int = 60,
                lam: float = 1e-4, step: float = 8.0):
    """Clip the block's rows at R, quantise toward zero (the bound survives), plan its column sums. ``score``: its
    blocks of NEW records (key → block), scored on request (``logit``) after the fit."""
    from ...exceptions import InvalidParameterError

    he.require_he()  # refuse to start without the extra, before anything else
    if int(rounds) < 1:
        raise InvalidParameterError(f"rounds must be a positive integer, got {rounds}.")
    D = clip_rows(train, float(R))
    Q = he.quantize(D, BLOCK_BITS).tocsr()
    priv, pub = masks.new_key()
    cfg = PartyConfig(str(name), Q, he.plane_indices(he.value_planes(Q)), float(R),
                      None if noise_multiplier is None else float(noise_multiplier), int(rounds), float(lam), float(step),
                      {str(k): v for k, v in dict(score or {}).items()})
    return cfg, PartyState(w=np.zeros(Q.shape[1]), mask_private=priv, mask_public=pub)


def _refuse(cfg, what: str) -> PolicyRefusal:
    return PolicyRefusal(f"party {cfg.name!r} refused the message and released nothing: {what}")


def _scores(cfg: PartyConfig, state: PartyState, round_: int) -> np.ndarray:
    s = np.asarray(cfg.Q @ state.w).ravel() / float(2 ** BLOCK_BITS)
    fixed = np.round(s * float(2 ** masks.SCORE_BITS)).astype(np.int64)
    return masks.mask(cfg.name, state.pair_keys or {}, round_, fixed)


def step(cfg: PartyConfig, state: PartyState, inbox, *, rng: np.random.Generator):
    """One message of the round order in the module docstring; anything else is refused."""
    if isinstance(inbox, Start):
        if state.phase != "setup":
            raise _refuse(cfg, "a second Start")
        try:
            he.from_public_key(inbox.public_key)
        except ValueError as exc:
            raise _refuse(cfg, str(exc)) from None
        return state._replace(phase="forward", public_key=bytes(inbox.public_key)), Hello(state.mask_public), []
    if isinstance(inbox, Forward):
        if state.phase != "forward":
            raise _refuse(cfg, f"a Forward in phase {state.phase!r} (Start, then Forward and Backward alternate)")
        w, keys = state.w, state.pair_keys
        if inbox.gradient is not None or state.backward:
            g = np.asarray(inbox.gradient if inbox.gradient is not None else [], dtype=np.float64)
            if g.shape != w.shape or not np.all(np.isfinite(g)):
                raise _refuse(cfg, f"the returned gradient must be {w.shape[0]} finite values, got shape {g.shape}")
            n = cfg.Q.shape[0]
            w = w - cfg.step * (g / n + cfg.lam * w)
        if keys is None:
            peers = dict(inbox.peers or {})
            if any(not isinstance(v, (bytes, bytearray)) or len(v) != 32 for v in peers.values()):
                raise _refuse(cfg, "every peer key must be 32 bytes (X25519)")
            keys = masks.pair_keys(cfg.name, state.mask_private, peers)
        state = state._replace(w=w, pair_keys=keys)
        if inbox.final:
            if state.backward != cfg.rounds:
                raise _refuse(cfg, f"the final update after {state.backward} of the {cfg.rounds} declared rounds")
            return state._replace(phase="done"), None, []
        if state.backward >= cfg.rounds:
            raise _refuse(cfg, f"a round beyond the {cfg.rounds} declared at Setup")
        return state._replace(phase="backward"), Scores(_scores(cfg, state, state.backward)), []
    if isinstance(inbox, Backward):
        if state.phase != "backward":
            raise _refuse(cfg, f"a Backward in phase {state.phase!r}")
        pk = he.from_public_key(state.public_key)
        try:
            ct = pk.load(inbox.residuals)
        except Exception:  # noqa: BLE001 - a malformed blob: one line
            raise _refuse(cfg, "the residuals are not a serialised ciphertext array") from None
        if pk.size(ct) != cfg.Q.shape[0]:
            raise _refuse(cfg, f"the residuals must be {cfg.Q.shape[0]} ciphertexts, one per training row")
        out = pk.column_sums(cfg.plan, ct)  # Enc(Q_ᵀ ĝ): [issue 28, backward pass]
        d, events = cfg.Q.shape[1], []
        if cfg.noise_multiplier is None:
            noise = np.zeros(d, dtype=np.int64)
        else:
            sigma = cfg.noise_multiplier * cfg.sensitivity
            scale = float(2 ** (RESIDUAL_BITS + BLOCK_BITS))
            noise = np.round(gaussian(rng, sigma, d) * scale).astype(np.int64)
            events = [GaussianRelease(cfg.name, state.backward, cfg.sensitivity, sigma, RECORD_REPLACE)]
        out = pk.add_plain_fresh(out, noise)  # + Enc(ξ), fresh: noise and re-randomisation in one
        return (state._replace(phase="forward", backward=state.backward + 1), EncryptedGradient(pk.dump(out)),
                events)
    raise _refuse(cfg, f"unexpected message {type(inbox).__name__} (declared: Start, Forward, Backward)")


def model(cfg: PartyConfig, state: PartyState) -> np.ndarray:
    """The party's weights on ITS block (it keeps them; written to its own directory at Finish)."""
    return np.asarray(state.w if state is not None and state.w is not None else np.zeros(0))


def is_private(cfg: PartyConfig) -> bool:
    return cfg.noise_multiplier is not None


def logit(cfg: PartyConfig, state: PartyState, key: str = "test") -> np.ndarray:
    """Its score on its rows of the NEW-records block ``key`` (clipped and quantised as its training rows), after
    the fit: post-processing of its weights (never its training rows, whose scores no ε covers)."""
    from ...exceptions import ProtocolError

    if state is None or state.phase != "done":
        raise ProtocolError(f"party {cfg.name!r} scores new records only after the fit's final update")
    if not isinstance(key, str) or key not in (cfg.score or {}):
        raise ProtocolError(f"party {cfg.name!r} scores only the new-records blocks it was set up with "
                            f"{sorted(cfg.score or {})}, not {key!r}")
    Q = he.quantize(clip_rows(cfg.score[key], cfg.R), BLOCK_BITS)
    return np.asarray(Q @ state.w).ravel() / float(2 ** BLOCK_BITS)

