"""Worst-case audit games of the encrypted vertical protocol (``vertical-encrypted``, forward="encrypted"):
the feature side against the label party and the label side against a non-label party.

Code path. Each audited run is a fresh fit of T rounds through the protocol's real functions — the party's
``setup_party``/``step`` (:mod:`dpadmm.algorithms.encrypted.party`) and the label party's ``setup_label``,
``residuals_encrypted``, ``open_gradients``, ``cross_sums`` (:mod:`~dpadmm.algorithms.encrypted.label`) — with
the HE layer replaced by its plaintext equivalent (:class:`PlainHe`: the same integers, no encryption;
:func:`plaintext_he` swaps ``he.keygen``/``he.from_public_key`` for the run). The releases are exact integer
sums in either layer, so a run decrypts the same vectors as under Okamoto–Uchiyama given the same noise draws:
``tests/protocols/test_encrypted_audit.py`` checks that against sf-heu, so the games audit the code as run while
one run costs milliseconds instead of key generation and ciphertext sums.

Feature side (the label party is the adversary — honest-but-curious, the premise of the feature proof: it
computes its residual part on its clipped block within the declared range, but chooses its block, labels and
weights, and every gradient it returns). Party 2's canary row is ``R·e₁`` on D and ``−4·e₁`` (outside the clip:
``−R·e₁`` after it) on D'; its other rows are 0. The label party's canary row is ``R₀·e₁`` (plus the intercept
R₀: norm √2R₀) with label 0 and its weights ``w₀ = W₀(1, 1)/√2`` (so ``s₀ = √2R₀W₀``, the residual's largest
own part), and every gradient it returns pushes party 2's weights to ``W·e₁`` (the projection's edge) from the
first Forward on. Per round party 2 releases (X) ``D̂ᵀ(ĝ₀ + s/4) + ξ`` — the canary moves it by ``2R(½ +
√2R₀W₀/4)``, of the proved ``Δ_X = 2R·G`` (``G = ½ + (√2R₀W₀ + RW)/4``: 0.97 with R = R₀ = 1, W₀ = 4, W = 1/4)
— and (Y) ``A₀ᵀs + ζ``, moved by ``√2R₀·2RW = Δ_Y`` (the whole sensitivity). Party 2's weights are those the
adversary dictates, so the noiseless releases on D and D' are the same in every run (replayed once).

Label side: the Gaussian label mechanism (``label_mechanism="gaussian"``, whose premise is an honest party 2; the
default, randomized response at the label party, is the labels-only protocol's function, audited by
:mod:`.audit_games_rr`) (party 2 is the adversary: it sees the γ₂ the label party returns, sets its own noise off and its
weights near 0 — W = 10⁻³ — and colludes with no one else). The canary row's label is 1 on D and 0 on D';
party 2's canary row is ``R·e₁``, its other rows 0. One label moves the residual by exactly 1, so γ₂ moves by
R of the proved ``Δ_L = √(2R₀² + R²)``: 0.9975 with the label party's R₀ = 0.05 (its own clip; its weights
bounded by W₀ = 0.05, so its score moves the canary's residual by < 0.004 of that). The adversary's model is the
noiseless run on D and on D' (the label party's own weights move on its noisy γ₀, which it never sees: the
replay differs from the run by far less than the noise; any statistic gives a valid bound).

Plants: party 2's standard-normal draws halved (feature side: both its releases; its ledger keeps σ); the label
party's halved (label side).
"""

from __future__ import annotations

import contextlib
import secrets
from unittest import mock

import numpy as np

from ..algorithms.encrypted import he, label
from ..algorithms.encrypted import party as ep
from .audit_games import DELTA, EPSILON, Game, ScaledRNG, ZeroRNG, calibrated_nm, generator_plant

SCALE = float(2 ** (ep.RESIDUAL_BITS + ep.BLOCK_BITS))  # a decrypted column sum's fixed point


class PlainHe:
    """:class:`dpadmm.algorithms.encrypted.he.HeBackend`'s operations on plaintext integers (Python ints, so sums
    are exact as OU's are below its ~2^683 plaintext bound). A "ciphertext" is ``(key id, list of ints)``; on the
    wire, the key id and the decimal digits. Only the holder of the "secret" (``secret=True``) of the SAME key id
    decrypts, as with a real key (where another key's ciphertext would decrypt to noise): a test can tell whose
    key a message is under."""

    PREFIX = b"plaintext-he: no encryption (audit only) "
    #: the plaintext space Z_n of every key here (a public odd modulus, as a Paillier key's): decryption reduces to
    #: (−n/2, n/2], masks are uniform on it (:meth:`dpadmm.algorithms.encrypted.he.HeBackend.mask`)
    modulus = (1 << 2048) - 159

    def __init__(self, secret: bool, kid: str | None = None):
        self.secret, self.kid = bool(secret), kid or secrets.token_hex(6)

    def public_key(self) -> bytes:
        return self.PREFIX + self.kid.encode()

    def secret_blob(self) -> np.ndarray:
        if not self.secret:
            raise PermissionError("only the key holder has the secret key")
        return he.wire(b"secret:" + self.kid.encode())

    def encrypt(self, v) -> bytes:
        return self.dump((self.kid, [int(x) for x in np.asarray(v, dtype=np.int64).ravel()]))

    def load(self, blob):
        kid, _, raw = he.unwire(blob).decode().partition(":")
        return kid, ([int(x) for x in raw.split(",")] if raw else [])

    def dump(self, ct) -> bytes:
        return (ct[0] + ":" + ",".join(str(int(x)) for x in ct[1])).encode()

    def column_sums(self, plan, ct):
        acc = None
        for v, lists in plan:
            part = [v * sum(ct[1][i] for i in rows) for rows in lists]
            acc = part if acc is None else [a + b for a, b in zip(acc, part)]
        if acc is None:
            raise ValueError("an empty block has no column sums")
        return ct[0], acc

    def add_plain_fresh(self, ct, v):
        return ct[0], [a + int(b) for a, b in zip(ct[1], np.asarray(v, dtype=np.int64).ravel())]

    def add_big_fresh(self, ct, values):
        return ct[0], [a + int(b) for a, b in zip(ct[1], values)]

    def rerandomize(self, ct, size: int):
        return ct

    def decrypt(self, ct) -> list[int]:
        if not self.secret:
            raise PermissionError("only the key holder decrypts")
        if ct[0] != self.kid:
            raise PermissionError(f"a ciphertext under key {ct[0]} is not decryptable with key {self.kid}")
        return [he.centred(int(x), self.modulus) for x in ct[1]]

    def size(self, ct) -> int:
        return len(ct[1])

    def mask(self, size: int) -> list[int]:
        return he.uniform_masks(self.modulus, size)


def _public(blob, scheme: str = he.SCHEME_LABEL) -> PlainHe:
    raw = he.unwire(blob)
    if not raw.startswith(PlainHe.PREFIX):
        raise ValueError("the public key is not a plaintext-layer key")
    return PlainHe(False, raw[len(PlainHe.PREFIX):].decode())


@contextlib.contextmanager
def plaintext_he():
    """While active, every key the protocol makes or loads is a :class:`PlainHe` (no sf-heu needed)."""
    with mock.patch.object(he, "keygen", lambda bits=he.KEY_BITS, scheme=he.SCHEME_LABEL: PlainHe(True)), \
            mock.patch.object(he, "from_public_key", _public), \
            mock.patch.object(he, "from_secret", lambda blob: PlainHe(True, he.unwire(blob)[7:].decode())), \
            mock.patch.object(he, "require_he", lambda: None):
        yield


# ----------------------------------------------------------------------------- one fit, the releases in order
F_N, F_T, F_R, F_R0, F_W, F_W0, F_LAM, F_STEP, F_MOM = 4, 3, 1.0, 1.0, 0.25, 4.0, 1e-4, 2.0, 0.7
L_N, L_T, L_R, L_R0, L_W, L_W0 = 4, 3, 1.0, 0.05, 1e-3, 0.05
PUSH = 1e6  # the adversary's returned gradient, −PUSH·e₁: the party's weights land on W·e₁ (projected)


def _feature_blocks(side: int):
    A0 = np.zeros((F_N, 1))
    A0[0, 0] = F_R0
    D = np.zeros((F_N, 2))
    D[0, 0] = F_R if side == 0 else -4.0
    y = np.ones(F_N)
    y[0] = -1.0  # label 0 on the canary row: the residual's largest value
    return A0, D, y


def feature_fit(side: int, rng, *, nm: float | None, layer=plaintext_he) -> tuple[np.ndarray, list]:
    """One fit of F_T rounds on side 0 (D) or 1 (D') against the adversarial label party: party 2's releases in
    event order (X₀, Y₀, X₁, Y₁, …; each padded to 2 entries) as decrypted, and its events. ``layer``: the HE
    layer's context (:func:`plaintext_he`; ``contextlib.nullcontext``: sf-heu, as a fit runs)."""
    A0, D, y = _feature_blocks(side)
    with layer():
        cfg, st = ep.setup_party("party2", D, None, F_R, nm, F_T, F_LAM, F_STEP, "encrypted", F_MOM, F_W, F_R0,
                                 F_W0, A0.shape[1] + 1)
        lcfg, lst = label.setup_label(A0, y, R=F_R0, widths={"party2": 2}, clips={"party2": F_R},
                                      noise_multiplier=None, rounds=F_T, lam=F_LAM, step=F_STEP,
                                      forward="encrypted", momentum=F_MOM, W=F_W0)
        w0 = np.full(2, F_W0 / np.sqrt(2.0))  # the adversary's weights: s₀ = √2 R₀ W₀ on the canary row
        key = he.keygen()
        st, hello, _ = ep.step(cfg, st, ep.Start(he.wire(key.public_key())), rng=rng)
        party_key = he.from_public_key(hello.public_key, he.SCHEME_MASKED)
        push = np.array([-PUSH, 0.0])
        out, events = [], []
        for _ in range(F_T):
            st, scores, _ = ep.step(cfg, st, ep.Forward(push), rng=rng)
            rst, blob, cross = label.residuals_encrypted(lcfg, lst._replace(w=w0), key, party_key, scores.ciphertexts)
            st, reply, ev = ep.step(cfg, st, ep.Backward(he.wire(blob), he.wire(cross)), rng=rng)
            out.append(np.array(key.decrypt(key.load(reply.ciphertexts)), dtype=np.float64) / SCALE)
            out.append(label.cross_sums(lcfg, rst, reply.cross))
            events += ev
    return np.stack(out)[:, None, :], events


def _label_blocks(side: int):
    A0 = np.zeros((L_N, 1))
    D = np.zeros((L_N, 2))
    D[0, 0] = L_R
    y = np.where(np.arange(L_N) % 2 == 0, 1.0, -1.0)
    if side:
        y[0] = -1.0
    return A0, D, y


def label_fit(side: int, rng, *, nm: float | None, layer=plaintext_he) -> tuple[np.ndarray, list]:
    """One fit of L_T rounds on side 0 (D) or 1 (D': the canary's label flipped), party 2 honest without noise:
    the γ₂ the label party returns each round, and the label party's events (``layer`` as in :func:`feature_fit`)."""
    A0, D, y = _label_blocks(side)
    with layer():
        cfg, st = ep.setup_party("party2", D, None, L_R, None, L_T, 1e-4, 2.0, "encrypted", 0.7, L_W, L_R0, L_W0,
                                 A0.shape[1] + 1)
        lcfg, lst = label.setup_label(A0, y, R=L_R0, widths={"party2": 2}, clips={"party2": L_R},
                                      noise_multiplier=nm, rounds=L_T, lam=1e-4, step=2.0, forward="encrypted",
                                      momentum=0.7, W=L_W0)
        key = he.keygen()
        quiet = np.random.default_rng(0)  # party 2 draws nothing (no noise); its generator is not the label party's
        st, hello, _ = ep.step(cfg, st, ep.Start(he.wire(key.public_key())), rng=quiet)
        party_key = he.from_public_key(hello.public_key, he.SCHEME_MASKED)
        gamma, out, events = None, [], []
        for _ in range(L_T):
            st, scores, _ = ep.step(cfg, st, ep.Forward(gamma), rng=quiet)
            lst, blob, cross = label.residuals_encrypted(lcfg, lst, key, party_key, scores.ciphertexts)
            st, reply, _ = ep.step(cfg, st, ep.Backward(he.wire(blob), he.wire(cross)), rng=quiet)
            lst, grads, ev = label.open_gradients(lcfg, lst, key, {"party2": reply}, rng=rng)
            gamma = grads["party2"]
            out.append(gamma)
            events += ev
    return np.stack(out)[:, None, :], events


# ----------------------------------------------------------------------------- the games
def _player(fit, nm: float, factor: float):
    """A :data:`Game.player`: ``runs`` fresh fits on one side, each with its own seeded generator (times
    ``factor``: a plant), the noiseless fits on D and D' as every run's replay."""
    means = [fit(s, ZeroRNG(), nm=nm)[0] for s in (0, 1)]

    def player(game: Game, side: int, runs: int, seed: int | None) -> dict:
        seeds = np.random.SeedSequence(seed).generate_state(runs)
        trials = []
        for s in seeds:
            rng = np.random.default_rng(int(s))
            rng = rng if factor == 1.0 else ScaledRNG(rng, factor)
            wrap = generator_plant()  # ``dpadmm audit --plant``: the fit's generator (one per fit, every party's)
            view, events = fit(side, rng if wrap is None else wrap(rng, game.mechanism_party), nm=nm)
            trials.append({"view": view, "means": means, "events": events, "total": game.rounds})
        return {"trials": trials, "events": [e for t in trials for e in t["events"]], "total": runs * game.rounds}
    return player


def _view(rec):
    return rec["view"]


def _replay(side, rec):
    return rec["means"][0], rec["means"][1]


def encrypted_feature_game(*, half: bool = False) -> Game:
    nm = calibrated_nm(2 * F_T)  # two releases per round, as the estimator calibrates
    return Game(
        name="worst-case vertical-encrypted[record]" + (" (planted: noise x1/2)" if half else ""),
        algorithm="vertical-encrypted (forward='encrypted'), feature side", relation="record",
        adversary="the label party (honest-but-curious): chooses its block, labels and weights and every gradient "
                  "it returns; decrypts both of party 2's releases",
        description=f"party 2's record canary (R·e1 vs -4·e1, clipped), its weights pushed to W·e1, the label "
                    f"party's canary row at its clip with s0 = sqrt2 R0 W0, {F_T} rounds (two releases each), "
                    f"epsilon = {EPSILON:g} at delta = {DELTA:g}; HE replaced by its plaintext equivalent",
        rounds=2 * F_T, setup=None, view=_view, replay=_replay, mechanism_party="party2", delta=DELTA,
        broken=half, bug="party 2's standard-normal draws halved (both releases); its ledger keeps sigma" if half else "",
        player=_player(feature_fit, nm, 0.5 if half else 1.0),
        note="ratio limit about 0.98: Y attains its sensitivity, X 2R(1/2 + sqrt2 R0 W0/4) of 2R·G = 0.97")


def encrypted_label_game(*, half: bool = False) -> Game:
    nm = calibrated_nm(L_T)
    return Game(
        name="worst-case vertical-encrypted[label]" + (" (planted: noise x1/2)" if half else ""),
        algorithm="vertical-encrypted (forward='encrypted'), label side", relation="label",
        adversary="party 2: its own noise off, its weights near 0; sees every gradient the label party returns",
        description=f"one flipped training label, party 2's canary row R·e1, the label party's R0 = {L_R0:g}, "
                    f"{L_T} releases, epsilon = {EPSILON:g} at delta = {DELTA:g}; HE replaced by its plaintext "
                    "equivalent",
        rounds=L_T, setup=None, view=_view, replay=_replay, mechanism_party="party1", delta=DELTA,
        broken=half, bug="the label party's standard-normal draws halved; its ledger keeps sigma" if half else "",
        player=_player(label_fit, nm, 0.5 if half else 1.0),
        note="ratio limit R/sqrt(2 R0^2 + R^2) = 0.9975 per release")


def encrypted_games() -> list[Game]:
    return [encrypted_feature_game(), encrypted_label_game()]


def encrypted_plants() -> list[Game]:
    return [encrypted_feature_game(half=True), encrypted_label_game(half=True)]
