"""Privacy events: what one party released in one round, and under which relation.

An event carries everything an accountant needs (mechanism, sensitivity, noise scale) and
nothing it does not. Algorithms emit events from their step functions; only the engine's
ledger composes them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Relation:
    """A neighbouring relation: which pairs of datasets a guarantee protects."""

    key: str
    description: str


FEATURE_COLUMN = Relation(
    "feature_column",
    "D_m and D'_m differ in one feature column of one party m, with ||D_m - D'_m|| <= 1 "
    "(feature-level DP as defined in [Hu, Definition 2]; not record-level DP). D_m is the block as the party "
    "uses it, i.e. after any row normalisation: normalising rows scales small rows up, so a raw column change "
    "of norm 1 can become larger and is then not covered",
)
RECORD_REPLACE = Relation(
    "record_replace",
    "the datasets differ in one training record of one party/node (replace-one)",
)

LABEL_CHANGE = Relation(
    "label",
    "the training labels differ in one record's label (the features are the same); protects each label "
    "against every passive party",
)


@dataclass(frozen=True)
class GaussianRelease:
    """A Gaussian mechanism: a vector with l2 ``sensitivity`` released with N(0, sigma² I) noise
    (in the subspace where the message lives).

    ``mechanism`` is ``"gaussian"`` for isotropic noise (an (ε, δ) accountant applies);
    ``"range-gaussian"`` marks [Hu, eq. 16]'s noise in range(D_m), which is not differentially
    private (accounted as ε = ∞ wherever a party checks its own budget)."""

    party: str
    round: int
    sensitivity: float
    sigma: float
    relation: Relation = FEATURE_COLUMN
    mechanism: str = "gaussian"

    @property
    def noise_multiplier(self) -> float:
        """sigma / sensitivity: the unit-sensitivity noise scale accountants compose."""
        return self.sigma / self.sensitivity if self.sensitivity > 0 else float("inf")


@dataclass(frozen=True)
class PureDPRelease:
    """A release whose privacy loss is a pure-DP ``epsilon`` computed by a paper's theorem
    (e.g. the per-iteration term of [Zhang, Thm 4.1])."""

    party: str
    round: int
    epsilon: float
    relation: Relation = RECORD_REPLACE
