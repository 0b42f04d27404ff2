"""The SGD-based vertical baseline [Hu, §5] (Hu et al. 2019): per-party linear models whose
outputs are summed, trained by minibatch SGD.

Round t: the coordinator names a minibatch B_t (indices) and returns the per-sample loss
derivative ``g_i = ℓ'(s_i, Y_i)`` for the previous batch; each party updates
``x_m ← x_m − η (X_m[B]ᵀ g / |B| + λ x_m)`` from that shared residual and sends its partial scores
``X_m[B_t] x_m`` for the new batch. Messages: batch indices and ``g`` (coordinator → parties),
partial scores on the batch (party → coordinator). One epoch = ⌈N/|B|⌉ rounds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, NamedTuple

import numpy as np
import scipy.sparse as sp

from ...kernels.losses import Loss


class SGDInbox(NamedTuple):
    batch: np.ndarray  # indices of the next minibatch
    prev_batch: np.ndarray | None
    residual: np.ndarray | None  # ℓ'(score, Y) on prev_batch
    lr: float


class SGDOutbox(NamedTuple):
    partial: np.ndarray  # X_m[batch] x_m


@dataclass(frozen=True, eq=False)
class SGDPartyConfig:
    name: str
    D: Any
    lam: float
    init_scale: float = 0.01
    eval_blocks: Mapping[str, np.ndarray] = field(default_factory=dict)


class SGDPartyState(NamedTuple):
    x: np.ndarray | None


def setup_party(name, D, options):
    D = sp.csr_matrix(D, dtype=np.float64) if sp.issparse(D) else np.ascontiguousarray(D, dtype=np.float64)
    return SGDPartyConfig(name=name, D=D, **options), SGDPartyState(x=None)


def party_step(cfg: SGDPartyConfig, state: SGDPartyState, inbox: SGDInbox, *, rng):
    x = state.x
    if x is None:  # random initialisation, as the paper does for this baseline
        x = cfg.init_scale * rng.standard_normal(cfg.D.shape[1])
    if inbox.residual is not None:
        Db = cfg.D[inbox.prev_batch]
        x = x - inbox.lr * (Db.T @ inbox.residual / len(inbox.prev_batch) + cfg.lam * x)
    return SGDPartyState(x=x), SGDOutbox(partial=cfg.D[inbox.batch] @ x), []


def party_diagnostics(cfg: SGDPartyConfig, state: SGDPartyState) -> dict:
    x = state.x if state.x is not None else np.zeros(cfg.D.shape[1])
    return {"reg": 0.5 * float(x @ x), "train_score": cfg.D @ x,
            "eval_scores": {k: B @ x for k, B in cfg.eval_blocks.items()}}


@dataclass(frozen=True, eq=False)
class SGDHubConfig:
    labels: np.ndarray
    loss: Loss
    lam: float
    lr: float
    batch_size: int
    party_names: tuple[str, ...]
    decay: float = 0.0  # lr_t = lr / (1 + decay · epoch)
    eval_labels: Mapping[str, np.ndarray] = field(default_factory=dict)


class SGDHubState(NamedTuple):
    round: int
    order: np.ndarray
    batch: np.ndarray


def _batch(cfg: SGDHubConfig, order, round_):
    n = cfg.labels.shape[0]
    per_epoch = -(-n // cfg.batch_size)
    k = round_ % per_epoch
    return order[k * cfg.batch_size:(k + 1) * cfg.batch_size]


def rounds_per_epoch(n: int, batch_size: int) -> int:
    return -(-n // batch_size)


def init_hub(cfg: SGDHubConfig):
    n = cfg.labels.shape[0]
    order = np.random.default_rng(np.random.SeedSequence(0)).permutation(n)
    batch = _batch(cfg, order, 0)
    inbox = SGDInbox(batch, None, None, cfg.lr)
    return SGDHubState(0, order, batch), {p: inbox for p in cfg.party_names}


def hub_step(cfg: SGDHubConfig, state: SGDHubState, outboxes, *, rng):
    n = cfg.labels.shape[0]
    score = sum(outboxes[p].partial for p in cfg.party_names)
    g = cfg.loss.grad(score, cfg.labels[state.batch])
    t = state.round + 1
    per_epoch = rounds_per_epoch(n, cfg.batch_size)
    order = rng.permutation(n) if t % per_epoch == 0 else state.order
    batch = _batch(cfg, order, t)
    lr = cfg.lr / (1.0 + cfg.decay * (t // per_epoch))
    inbox = SGDInbox(batch, state.batch, g, lr)
    return SGDHubState(t, order, batch), {p: inbox for p in cfg.party_names}, []


def hub_metrics(cfg: SGDHubConfig, state: SGDHubState, diagnostics) -> dict:
    score = sum(diagnostics[p]["train_score"] for p in cfg.party_names)
    loss = float(np.mean(cfg.loss.value(score, cfg.labels)))
    reg = sum(diagnostics[p]["reg"] for p in cfg.party_names)
    out = {"objective": loss + cfg.lam * reg, "train_loss": loss,
           "epoch": state.round / rounds_per_epoch(cfg.labels.shape[0], cfg.batch_size)}
    for key, labels in cfg.eval_labels.items():
        s = sum(diagnostics[p]["eval_scores"][key] for p in cfg.party_names)
        out[f"{key}_{cfg.loss.metric_name}"] = float(np.mean(cfg.loss.value(s, labels)))
    return out
