"""The driver of the encrypted protocol: the label party's side of a run over any backend (in-process, processes,
gRPC) — the round loop of :mod:`dpadmm.algorithms.encrypted.protocol`'s docstring; the label party's key, labels and
block stay here — and :func:`fit`, an in-process fit from the checked parameters
(:class:`~dpadmm.algorithms.encrypted.params.EncryptedParams`) to a :class:`FitResult`. The budgets become noise
multipliers here and nowhere else (:func:`noise_multipliers`). Nothing in this folder imports this module."""

from __future__ import annotations

import pickle
import time
from pathlib import Path
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from sklearn.linear_model import LogisticRegression

from ..._progress import status
from ..._validation import binary_labels, noise_seed
from ...backends.base import PartySpec, atomic_pickle, party_rng
from ...backends.inprocess import InProcessBackend
from ...exceptions import DataFileError
from ...fit import runner
from ...privacy.accountants import calibrate_noise_multiplier
from . import combine as ec, he, label
from .params import EncryptedParams
from .party import (
    Backward,
    EncryptedGradient,
    Forward,
    Hello,
    Open,
    Scores,
    Start,
    logit,
)
from .protocol import PROTOCOL
from .report import encrypted_report


#: the label party's own checkpoint, under the run's checkpoint directory (each party writes its own beside it)
LABEL_CHECKPOINT = "label/checkpoint.pkl"


class RunResult(NamedTuple):
    label_cfg: label.LabelConfig
    label_state: label.LabelState
    events: list  # every GaussianRelease (parties' feature side, the label party's label side)
    names: list
    cost: dict  # per-round CPU seconds (label party; parties in-process) and bytes each way


def specs(parties: Mapping[str, tuple], *, R: float, noise_multiplier, rounds: int, lam: float, step_size: float,
          forward: str = "clear", momentum: float = 0.0, W: float | None = None, label_W: float | None = None,
          label_width: int | None = None, handlers=None):
    """One :class:`PartySpec` per non-label party: ``parties`` maps its name to ``(train, score)``. With
    forward="encrypted" and two or more parties each is told its peers' public (R, W, d). ``handlers``: the requests
    the parties answer (default: the protocol's declared ones)."""
    multi = forward == "encrypted" and len(parties) > 1
    dims = {name: int(train.shape[1]) for name, (train, _) in parties.items()} if multi else {}
    setup = PROTOCOL.setup_type  # setup_party's arguments by name
    return [PartySpec.of(PROTOCOL, name, setup(
                name=name, train=train, score=dict(score or {}), R=float(R), noise_multiplier=noise_multiplier,
                rounds=int(rounds), lam=float(lam), step=float(step_size), forward=forward, momentum=float(momentum),
                W=W, label_R=float(R) if forward == "encrypted" else None, label_W=label_W, label_width=label_width,
                peers={k: (float(R), float(W), dims[k]) for k in parties if k != name} if multi else None),
                handlers=handlers)
            for name, (train, score) in parties.items()]


def backend_rounds(rounds: int, forward: str, parties: int) -> int:
    """Backend rounds of a run: Start, T rounds of Forward/Backward (and Open with ≥ 2 encrypted parties), final."""
    return (3 if forward == "encrypted" and parties > 1 else 2) * int(rounds) + 2


def run(backend, own_block, y, names, widths, clips, *, R: float, label_noise_multiplier, rounds: int, lam: float,
        step_size: float, noise_seed: int | None = None, key_bits: int = he.KEY_BITS, forward: str = "clear",
        momentum: float = 0.0, W: float | None = None, checkpoint_dir=None, resume: bool = False,
        label_epsilon: float | None = None, callbacks: Sequence[Callable] = ()) -> RunResult:
    """The T rounds, after ``backend.start`` (the parties set up). Returns the label party's final state.

    ``checkpoint_dir``: after every round each party writes its own checkpoint (``backend.checkpoint``: its weights,
    round count and its OWN key pair, serialised, in its own directory) and the label party its own
    (:data:`LABEL_CHECKPOINT`: its weights, the round, the gradients it owes the parties, the events so far, its own
    key pair and the parties' PUBLIC keys). No ciphertext is stored: at a round's end none is outstanding. A
    secret key is written only to its owner's own checkpoint. ``resume``: continue from those checkpoints (the
    backend started afresh, as in the first run): the keys of the run are restored by their owners, every backend
    round keeps its number, so a seeded run gives the same numbers as one never stopped.

    ``label_epsilon``: the label party's randomized response on its labels, once, before the first round
    (:func:`.label.setup_label`; its stream in a seeded simulation: ``(len(names) + 2, 0)``); its checkpoint keeps
    the released labels, so a resumed run neither draws nor books them again.

    ``callbacks``: ``cb(round, record)`` after each of the T rounds (``record``: ``{"round": k, "seconds": wall
    seconds since the run began}``), as the engine calls them — a progress display's (``dpadmm.cli._display.progress``).
    Their return value is not a stop: the run's T rounds are what every party declared and priced at setup. The
    phase (:func:`dpadmm._progress.status`) is "key exchange" until round 1 starts, then "training"."""
    t_wall = time.perf_counter()
    status("key exchange")
    ck = _load_label(checkpoint_dir) if resume else None
    mechanism = (label_epsilon, label_noise_multiplier)  # what the checkpoint's "labels" are (ỹ, or exact labels)
    if ck is not None and ck.get("label_mechanism") != mechanism:
        raise DataFileError(f"the label party's checkpoint in {checkpoint_dir} was written under another label mechanism "
                            f"(label_epsilon, label noise multiplier) = {ck.get('label_mechanism')}, this run asks "
                            f"{mechanism}: its labels are not this run's release; resume with the same options")
    key = he.from_secret(ck["key"]) if ck else he.keygen(key_bits)
    cfg, state = label.setup_label(own_block, y, R=R, widths=widths, clips=clips,
                                   noise_multiplier=label_noise_multiplier, rounds=rounds, lam=lam, step=step_size,
                                   forward=forward, momentum=momentum, W=W, label_epsilon=label_epsilon,
                                   rng=None if noise_seed is None else party_rng(noise_seed, len(names) + 2, 0),
                                   released=ck.get("labels") if ck else None)
    names = list(names)
    multi = forward == "encrypted" and len(names) > 1
    sent = {"public_key": 0, "residuals": 0, "gradients_back": 0, "scores": 0, "encrypted_gradients": 0}
    cpu = {"label_party": 0.0, "parties": 0.0}  # parties: process time of backend.step (theirs when in-process)
    if ck is not None:
        backend.restore(checkpoint_dir, ck["r"] - 1)  # each party its own state (and key pair) of that round
        r, t0, peers, pubs, gradients, events = ck["r"], ck["t"], ck["peers"], ck["pubs"], ck["gradients"], ck["events"]
        state = label.LabelState(ck["w"], ck["velocity"], ck["t"])
    else:
        r, t0 = 0, 0
        hello = backend.step({n: Start(he.wire(key.public_key())) for n in names}, r)
        r += 1
        sent["public_key"] += len(key.public_key()) * len(names)
        peers = {n: hello[n][0].mask_key for n in names if isinstance(hello[n][0], Hello)} if len(names) > 1 else {}
        pubs = {n: getattr(hello[n][0], "public_key", None) for n in names} if forward == "encrypted" else {}
        sent["public_key"] += sum(len(p) for p in pubs.values()) * (len(names) if multi else 1)
        events, gradients = list(cfg.released), {n: None for n in names}  # the labels' one release, if any
    party_key = None
    if forward == "encrypted":
        party_keys = {n: he.from_public_key(p, he.SCHEME_MASKED) for n, p in pubs.items()}  # Paillier, ≥ 2048 bits
        party_key = party_keys[names[0]]

    def done(t, r, state, gradients, events):  # a round's end: every party's checkpoint and the label party's own
        if checkpoint_dir is not None:
            backend.checkpoint(checkpoint_dir, r - 1)
            _save_label(checkpoint_dir, {"t": t + 1, "r": r, "w": state.w, "velocity": state.velocity, "peers": peers,
                                         "pubs": pubs, "gradients": gradients, "events": events,
                                         "key": key.secret_blob(), "labels": cfg.y01, "label_mechanism": mechanism})
        record = {"round": t + 1, "seconds": time.perf_counter() - t_wall}
        for cb in callbacks:
            cb(t + 1, record)

    status("training")

    for t in range(t0, int(rounds)):
        c0 = time.process_time()
        rep = backend.step({n: Forward(gradients[n], peers if t == 0 else None, False,
                                       {k: pubs[k] for k in names if k != n} if multi and t == 0 else None)
                            for n in names}, r)
        cpu["parties"] += time.process_time() - c0
        r += 1
        rng = np.random.default_rng() if noise_seed is None else party_rng(noise_seed, len(names), t)
        c0 = time.process_time()
        cross = None
        if multi:
            enc = {n: rep[n][0].ciphertexts for n in names}
            sent["scores"] += sum(len(v) for v in enc.values())
            state, blob, crosses = label.residuals_peers(cfg, state, key, party_keys, enc)
            sent["cross"] = sent.get("cross", 0) + sum(len(c) for c in crosses.values())
            sent["peer_scores"] = sent.get("peer_scores", 0) + sum(len(v) for v in enc.values()) * (len(names) - 1)
            cpu["label_party"] += time.process_time() - c0
            sent["residuals"] += len(blob) * len(names)
            c0 = time.process_time()
            rep = backend.step({n: Backward(he.wire(blob), he.wire(crosses[n]), {k: enc[k] for k in names if k != n})
                                for n in names}, r)
            r += 1
            replies = {n: rep[n][0] for n in names}
            events += [e for n in names for e in rep[n][1]]
            opens = {k: Open({m: replies[m].peer_cross[k] for m in names if m != k}) for k in names}
            sent["peer_cross"] = sent.get("peer_cross", 0) + sum(len(v) for o in opens.values()
                                                                 for v in o.peer_cross.values())
            rep = backend.step(opens, r)
            cpu["parties"] += time.process_time() - c0
            r += 1
            opened = {k: rep[k][0] for k in names}
            sent["opened"] = sent.get("opened", 0) + sum(len(v) for o in opened.values() for v in o.values.values())
            sent["encrypted_gradients"] += sum(len(m.ciphertexts) + len(m.cross) for m in replies.values())
            events += [e for n in names for e in rep[n][1]]
            c0 = time.process_time()
            state, gradients, ev = label.open_gradients(cfg, state, key, replies, rng=rng, opened=opened)
            cpu["label_party"] += time.process_time() - c0
            sent["gradients_back"] += sum(int(g.nbytes) for g in gradients.values())
            events += ev
            done(t, r, state, gradients, events)
            continue
        if forward == "encrypted":
            enc_scores = rep[names[0]][0].ciphertexts
            sent["scores"] += len(enc_scores)
            state, blob, cross = label.residuals_encrypted(cfg, state, key, party_key, enc_scores)
            sent["cross"] = sent.get("cross", 0) + len(cross)
        else:
            scores = [rep[n][0].values for n in names if isinstance(rep[n][0], Scores)]
            sent["scores"] += sum(int(np.asarray(s).nbytes) for s in scores)
            state, blob = label.residuals(cfg, state, key, scores)
        cpu["label_party"] += time.process_time() - c0
        sent["residuals"] += len(blob) * len(names)
        c0 = time.process_time()
        rep = backend.step({n: Backward(he.wire(blob), None if cross is None else he.wire(cross)) for n in names}, r)
        cpu["parties"] += time.process_time() - c0
        r += 1
        replies = {n: rep[n][0] for n in names}
        sent["encrypted_gradients"] += sum(len(m.ciphertexts) + (0 if m.cross is None else len(m.cross))
                                           for m in replies.values()
                                           if isinstance(m, EncryptedGradient))
        events += [e for n in names for e in rep[n][1]]
        c0 = time.process_time()
        state, gradients, ev = label.open_gradients(cfg, state, key, replies, rng=rng)
        cpu["label_party"] += time.process_time() - c0
        sent["gradients_back"] += sum(int(g.nbytes) for g in gradients.values())
        events += ev
        done(t, r, state, gradients, events)
    backend.step({n: Forward(gradients[n], None, final=True) for n in names}, r)
    per_round = {k: v / max(int(rounds), 1) for k, v in sent.items()}
    T = max(int(rounds), 1)
    return RunResult(cfg, state, events, names, {"label_cpu_seconds_per_round": cpu["label_party"] / T,
                                                 "party_cpu_seconds_per_round": cpu["parties"] / T / max(len(names), 1),
                                                 "bytes_per_round": per_round})


def noise_multipliers(p: EncryptedParams, n_parties: int) -> tuple[float | None, float | None]:
    """``(z_features, z_labels)`` of a run with ``n_parties`` parties (the label party's included): each feature party's
    over its releases (forward="encrypted": per round D̂ᵀĝ, A₀ᵀs and, with two or more other parties, one column-sum
    release per peer: ``n_parties`` per round; clear: one), the label party's Gaussian over T rounds (None with
    randomized response, which is priced as its one release)."""
    T = int(p.resolved("rounds"))
    releases = T * (n_parties if p.encrypted else 1)
    zf = calibrate_noise_multiplier(float(p.epsilon), float(p.delta), releases) if p.epsilon else None
    zl = calibrate_noise_multiplier(float(p.label_epsilon), float(p.delta), T) if p.label_epsilon and p.rr is None else None
    return zf, zl


class FitResult(NamedTuple):
    """An in-process fit (the estimator's attributes of the same names, with a trailing underscore)."""

    classes: np.ndarray
    coefs: list  # the label party's weights, then each party's
    label_cfg: label.LabelConfig
    cost: dict
    calibration: tuple
    combination: object
    own_model: object
    noise_multipliers: dict
    privacy: dict


def fit(p: EncryptedParams, blocks, y, *, callbacks: Sequence[Callable] = ()) -> FitResult:
    """An in-process fit: block 0 is the label party's; every other party is a simulation party on the in-process
    backend. The driver collects each party's weights (its model, a simulation-only request) to score new records and,
    with the encrypted forward pass, the parties' logits on the label party's held-out rows for its final model.
    ``callbacks``: called after every round (:func:`run`); after the rounds the phase is "calibration"."""
    private = p.epsilon is not None or p.label_epsilon is not None  # the declared domain, no class counted (T3)
    y_pm, classes = binary_labels("y", y, blocks[0].shape[0], private=private)
    T, enc = int(p.resolved("rounds")), p.encrypted
    step, mom, W = float(p.resolved("step")), float(p.resolved("momentum")), float(p.weight_bound)
    zf, zl = noise_multipliers(p, len(blocks))
    seed = noise_seed(p.random_state)
    n = blocks[0].shape[0]
    train, hold = np.arange(n), np.zeros(0, dtype=int)
    if enc:  # the label party's public split: held-out rows are scored as new records for the calibration
        perm = np.random.default_rng(0 if seed is None else seed).permutation(n)
        k = round(float(p.calibration) * n)
        hold, train = np.sort(perm[:k]), np.sort(perm[k:])
    names = [f"party{m + 1}" for m in range(1, len(blocks))]
    party_specs = specs({nm: (b[train], {"calibration": b[hold]} if enc else None) for nm, b in zip(names, blocks[1:])},
                        R=p.row_clip, noise_multiplier=zf, rounds=T, lam=p.lam, step_size=step, forward=p.forward,
                        momentum=mom, W=W if enc else None, label_W=W if enc else None,
                        label_width=blocks[0].shape[1] + 1 if enc else None,
                        handlers=dict(PROTOCOL.handlers, model=PROTOCOL.model))

    def drive(backend):
        return run(backend, blocks[0][train], y_pm[train], names, {nm: b.shape[1] for nm, b in zip(names, blocks[1:])},
                   {nm: float(p.row_clip) for nm in names}, R=float(p.row_clip), label_noise_multiplier=zl, rounds=T,
                   lam=float(p.lam), step_size=step, noise_seed=seed, forward=p.forward, momentum=mom,
                   W=W if enc else None, label_epsilon=p.rr, callbacks=callbacks)

    def after(backend, res):
        status("calibration" if enc else "collecting the parties' models")
        # in-process simulation: each party's weights to score new records, and (encrypted forward) its logits on the
        # held-out rows (new records) for the calibration
        models = [backend.request(nm, "model") for nm in names]
        return models, [backend.request(nm, "logit", "calibration") for nm in names] if enc else None

    fitted = runner.session(InProcessBackend(), party_specs, drive, noise_seed=seed,
                            rounds=backend_rounds(T, p.forward, len(names)), after=after, blas_threads=None)
    res, (models, others) = fitted.result, fitted.after
    coefs = [np.asarray(res.label_state.w)] + models
    calibration, combination, own_model = (1.0, 0.0), None, None
    # Platt scaling on the held-out rows: the parties' logits on them (new records), the label party's labels; held-out
    # rows of one class (a small table) cannot fit it: the joint score as trained, calibration (1, 0)
    if enc and np.unique(y_pm[hold]).size == 2:
        others = np.sum([np.asarray(o, dtype=np.float64) for o in others], axis=0)
        s = label.own_scores(float(p.row_clip), coefs[0], blocks[0][hold]) + others
        lr = LogisticRegression(C=1e6, tol=1e-10, max_iter=1000).fit(s[:, None], y_pm[hold] > 0)
        calibration = (float(lr.coef_[0, 0]), float(lr.intercept_[0]))
        # the label party's final model (post-processing there; algorithms.encrypted.combine): its own model fitted on
        # its training rows, stacked with the parties' logits on the held-out rows, or kept alone
        own = ec.own_model(blocks[0][train], y_pm[train])
        rng = np.random.default_rng() if seed is None else party_rng(seed, len(names) + 1, 0)
        combination = ec.choose(p.combine, own.logit(blocks[0][hold]), others, y_pm[hold], rng)
        if combination is not None:  # then its own model on all its rows (their labels are never sent)
            own_model = ec.own_model(blocks[0], y_pm)
    privacy = encrypted_report(res.events, delta=float(p.delta), forward=p.forward,
                               label_sensitivity=res.label_cfg.sensitivity, rounds=T,
                               combination=None if combination is None else combination.kind,
                               parties=len(res.label_cfg.widths))
    return FitResult(classes, coefs, res.label_cfg, res.cost, calibration, combination, own_model,
                     {"features": zf, "labels": zl}, privacy)


def _save_label(directory, ck: dict) -> None:
    path = Path(directory) / LABEL_CHECKPOINT
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_pickle(ck, path)


def _load_label(directory) -> dict:
    path = Path(directory) / LABEL_CHECKPOINT if directory is not None else None
    if path is None or not path.is_file():
        raise DataFileError(f"the label party has no checkpoint at {path}; resume needs the checkpoints of the same run "
                            "(pass the checkpoint_dir the run wrote)")
    with open(path, "rb") as fh:
        return pickle.load(fh)  # the label party's own file, written by _save_label


__all__ = ["FitResult", "LABEL_CHECKPOINT", "RunResult", "backend_rounds", "fit", "logit", "noise_multipliers", "run",
           "specs"]
