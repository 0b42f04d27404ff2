"""One whole private vertical fit seen by one side's adversary (for ``dpadmm audit --end-to-end``)."""

from __future__ import annotations

import warnings

import numpy as np

from ..exceptions import InvalidParameterError
from .vertical import VerticalLogisticRegression


class _Seen:
    """Transcript callable keeping exactly what the adversary of one side sees."""

    def __init__(self, side: str, party: str):
        self.side, self.party, self.parts = side, party, []

    def __call__(self, round_, sender, receiver, message, kind):
        if kind != "protocol":
            return
        if self.side == "feature" and sender == self.party:  # every share party m sends
            self.parts.append(np.asarray(message.share, dtype=np.float64))
        elif self.side == "label" and receiver == self.party:  # every N-vector the coordinator sends it
            self.parts.extend(np.asarray(v, dtype=np.float64) for v in (message.residual, message.dual))


def audit_fit(blocks, y, *, side: str = "feature", relation: str = "feature_column", epsilon: float = 1.0,
              delta: float = 1e-5, party: str = "party2", seed: int | None = None, **kwargs) -> tuple[np.ndarray, float]:
    """One whole private fit on a small instance, for the end-to-end audit (``dpadmm audit --end-to-end``).

    ``side="feature"``: a feature-private fit (gaussian mechanism, ``relation``, total ``epsilon``);
    returns everything ``party`` sends, concatenated (what the coordinator and the other parties see).
    ``side="label"``: a label-private fit (``label_epsilon=epsilon``); returns everything the coordinator
    sends ``party`` (what a passive party sees). Second value: the ε the fit reports for that side
    (the claim the audit's lower bound must not exceed). ``kwargs`` go to the estimator (e.g.
    ``max_iter``, ``lam``, ``mechanism="paper"`` for the published [Hu, eq. 16]). Neighbours: change one
    column (or row) of ``party``'s block, or flip one label, and call again. Example::

        view, eps = audit_fit([B1, B2], y, side="label", epsilon=1.0, max_iter=3, seed=k)
    """
    seen = _Seen(side, party)
    if side == "feature":
        model = VerticalLogisticRegression(epsilon=epsilon, delta=delta, relation=relation, random_state=seed,
                                           monitor=False, **kwargs)
    elif side == "label":
        kwargs.setdefault("label_mechanism", "gaussian")  # the per-round mechanism; "rr" releases the labels once
        model = VerticalLogisticRegression(label_epsilon=epsilon, delta=delta, random_state=seed, monitor=False,
                                           **kwargs)
    else:
        raise InvalidParameterError(f"side must be 'feature' or 'label', got side={side!r}.")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(blocks, y, transcript=seen)
    p = model.privacy_
    claim = p.epsilon if side == "feature" else p.label["epsilon"]
    return np.concatenate(seen.parts), float(claim)
