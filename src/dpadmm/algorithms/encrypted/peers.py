"""A non-label party's steps that exist only with M ≥ 2 non-label parties (forward="encrypted", ``peers``): its
peers' keys, its column sums of their scores, the opening of theirs of its scores (:mod:`.protocol`, module
docstring; the round order: :mod:`.party`)."""

from __future__ import annotations

import secrets

import numpy as np

from ...privacy.events import RECORD_REPLACE, GaussianRelease
from ...privacy.mechanisms import gaussian
from ...privacy.policy import PolicyRefusal
from . import he
from .messages import BLOCK_BITS, CROSS_BITS, RESIDUAL_BITS, EncryptedGradient, Open, Opened


def refuse(cfg, what: str) -> PolicyRefusal:
    return PolicyRefusal(f"party {cfg.name!r} refused the message and released nothing: {what}")


def peer_keys(cfg, keys) -> dict[str, np.ndarray]:
    """The declared peers' OU public keys (first Forward): exactly the declared names, each OU of 2048 bits."""
    try:
        got = {str(k): he.unwire(v) for k, v in dict(keys or {}).items()}
    except TypeError:
        raise refuse(cfg, "the peers' public keys must be uint8 arrays") from None
    if set(got) != set(cfg.peers):
        raise refuse(cfg, f"the first Forward must carry the public keys of the declared peers {sorted(cfg.peers)}, "
                           f"got {sorted(got)}")
    for name, blob in got.items():
        try:
            he.from_public_key(blob, he.SCHEME_MASKED)
        except (TypeError, ValueError) as exc:
            raise refuse(cfg, f"peer {name!r}'s public key: {exc}") from None
    return {name: he.wire(blob) for name, blob in got.items()}


def _noise(rng, sigma: float, size: int, factor: int = 1) -> list[int]:
    """``round(factor · N(0, σ²) · 2^40)`` per entry (the column sums' fixed point)."""
    scale = float(2 ** (RESIDUAL_BITS + BLOCK_BITS))
    return [int(v) for v in np.round(factor * gaussian(rng, sigma, size) * scale)]


def _masked(values, noise, modulus: int) -> np.ndarray:
    return he.to_residues([int(v) + int(z) for v, z in zip(values, noise)], modulus)


def backward_peers(cfg, state, pk, ct, cross, peer_scores, rng):
    """M ≥ 2 (module docstring): ``Enc_0(4(D̂ᵀĝ₀ + ξ) + D̂ᵀs_m − Σ_k ρ_k)``, the masked cross sums for the label
    party, and ``Enc_k(D̂ᵀs_k + ρ_k + λ_k)`` per peer k (its column sums of k's scores under k's Paillier key;
    λ_k uniform on Z_n_k hides them from k whatever k encrypted, :mod:`.he`; λ_k goes to the label party, which
    removes it from k's opened values, and the ρ's cancel there mod 2^128)."""
    try:
        blobs = {str(k): he.unwire(v) for k, v in dict(peer_scores or {}).items()}
    except TypeError:
        blobs = {}
    if set(blobs) != set(cfg.peers):
        raise refuse(cfg, f"the Backward must carry the encrypted scores of the declared peers {sorted(cfg.peers)}")
    n, d = cfg.Q.shape
    peers = {}
    for k in sorted(blobs):
        key = he.from_public_key(state.peer_keys[k], he.SCHEME_MASKED)
        try:
            kct = key.load(blobs[k])
        except Exception:  # noqa: BLE001 - a malformed blob: one line
            raise refuse(cfg, f"peer {k!r}'s scores are not a serialised ciphertext array") from None
        if key.size(kct) != n:
            raise refuse(cfg, f"peer {k!r}'s scores must be {n} ciphertexts, one per training row")
        peers[k] = (key, kct)
    events = []
    if cfg.noise_multiplier is not None:
        xi = _noise(rng, cfg.noise_multiplier * cfg.sensitivity, d, factor=4)
        zeta = _noise(rng, cfg.noise_multiplier * cfg.cross_sensitivity, len(cross))
        events = [GaussianRelease(cfg.name, state.backward, cfg.sensitivity, cfg.noise_multiplier * cfg.sensitivity,
                                  RECORD_REPLACE),
                  GaussianRelease(cfg.name, state.backward, cfg.cross_sensitivity,
                                  cfg.noise_multiplier * cfg.cross_sensitivity, RECORD_REPLACE)]
    else:
        xi, zeta = [0] * d, [0] * len(cross)
    rho = {k: [secrets.randbits(CROSS_BITS) for _ in range(d)] for k in peers}  # a CSPRNG: cancel mod 2^128
    lam = {k: key.mask(d) for k, (key, _) in peers.items()}  # uniform on Z_n_k: hides the value from k (he)
    own = np.asarray(cfg.Q.T @ state.sent_scores, dtype=np.int64).ravel()  # D̂ᵀs_m at 2^40: the 4× Taylor part
    plain = [int(own[j]) + xi[j] - sum(rho[k][j] for k in rho) for j in range(d)]
    plan4 = [(4 * v, lists) for v, lists in cfg.plan]
    out = pk.add_big_fresh(pk.column_sums(plan4, ct), plain)  # Enc_0(4D̂ᵀĝ₀ + …), fresh: re-randomised
    peer_cross = {k: he.wire(key.dump(key.add_big_fresh(key.column_sums(cfg.plan, kct),
                                                         [he.centred(a + b, key.modulus)  # within the encoder's range
                                                          for a, b in zip(rho[k], lam[k])])))
                  for k, (key, kct) in peers.items()}
    offsets = {k: he.to_residues(lam[k], key.modulus) for k, (key, _) in peers.items()}
    return (state._replace(phase="open", backward=state.backward + 1, sent_scores=None),
            EncryptedGradient(he.wire(pk.dump(out)), _masked(cross, zeta, he.from_secret(state.own_key).modulus),
                              peer_cross, offsets), events)


def open_peers(cfg, state, inbox: Open, rng):
    """Decrypt every declared peer m's ``Enc_k(D̂_mᵀs_k + ρ + λ)`` (only d_m values each; uniform on Z_n to this
    party), add ζ ~ N(0, (z Δ_Z)²), return mod n: one GaussianRelease per peer."""
    if state.phase != "open" or not cfg.peers:
        raise refuse(cfg, f"an Open in phase {state.phase!r} (Forward, Backward, Open per round with peers)")
    try:
        blobs = {str(k): he.unwire(v) for k, v in dict(inbox.peer_cross or {}).items()}
    except TypeError:
        blobs = {}
    if set(blobs) != set(cfg.peers):
        raise refuse(cfg, f"the Open must carry the column sums of the declared peers {sorted(cfg.peers)}")
    cts, own = {}, he.from_secret(state.own_key)
    for m in sorted(blobs):
        try:
            ct = own.load(blobs[m])
        except Exception:  # noqa: BLE001 - a malformed blob: one line
            raise refuse(cfg, f"peer {m!r}'s column sums are not a serialised ciphertext array") from None
        if own.size(ct) != cfg.peers[m][2]:
            raise refuse(cfg, f"it decrypts only the declared {cfg.peers[m][2]} column sums of peer {m!r}, got "
                               f"{own.size(ct)} ciphertexts")
        cts[m] = ct
    out, events = {}, []
    for m in sorted(cts):
        vals = own.decrypt(cts[m])
        if cfg.noise_multiplier is None:
            zeta = [0] * len(vals)
        else:
            sigma = cfg.noise_multiplier * cfg.peer_sensitivity(m)
            zeta = _noise(rng, sigma, len(vals))
            events.append(GaussianRelease(cfg.name, state.backward - 1, cfg.peer_sensitivity(m), sigma, RECORD_REPLACE))
        out[m] = _masked(vals, zeta, own.modulus)
    return state._replace(phase="forward"), Opened(out), events
