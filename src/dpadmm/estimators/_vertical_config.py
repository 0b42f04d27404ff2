"""Which protocol a vertical fit runs, with which defaults, and the checks of its parameters.

The hyperparameter logic of :class:`dpadmm.estimators.vertical.VerticalLogisticRegression` (a mixin;
the fit's bookkeeping lives in :mod:`dpadmm.estimators.vertical`): party blocks, the projection radii
of [Hu, Assumption 2.1], which side is private and by which mechanism, ρ, T, λ of the joint run, the
clip of the gaussian feature mechanism, and validation.
"""

from __future__ import annotations

import math

import numpy as np

from .._validation import as_float_matrix, check_choice, check_int, check_open_unit, check_positive
from ..algorithms.vertical import label as vl
from ..algorithms.vertical import messages as vs
from ..exceptions import InvalidDataError, InvalidParameterError, PrivacyPreconditionError
from ..kernels.linalg import SOLVERS
from ..privacy.accountants import ACCOUNTANTS
from ..data.parties import partition_columns
from ..fit.vertical import is_source as _is_source
from ._sklearn import is_block_list, one_matrix




class _VerticalConfig:
    """Protocol choice, defaults and validation of a vertical estimator (see the module docstring)."""

    # ------------------------------------------------------------------ input handling
    def _blocks(self, X, name: str = "X") -> list[np.ndarray]:
        if is_block_list(X):
            if len(X) == 0:
                raise InvalidDataError(f"{name} is an empty list of party blocks; give one block per party.")
            # arrays, or sources the parties read themselves (dpadmm.data.remote.PartyFile)
            blocks = [B if _is_source(B) else as_float_matrix(f"{name} block {m + 1}", B, accept_sparse=True)
                      for m, B in enumerate(X)]
            n = blocks[0].shape[0]
            for m, B in enumerate(blocks[1:], start=2):
                if B.shape[0] != n:
                    raise InvalidDataError(f"party blocks must have the same rows: block 1 has {n}, block {m} has "
                                           f"{B.shape[0]}; align the parties on the same samples.")
        else:
            A = one_matrix(self, X, name)  # sparse stays CSR; once fitted, the fitted column count
            sizes = self.party_sizes if self.party_sizes is not None else [A.shape[1]]
            blocks = partition_columns(A, sizes)
        if hasattr(self, "party_dims_"):
            dims = tuple(B.shape[1] for B in blocks)
            if dims != self.party_dims_:
                raise InvalidDataError(f"{name} has party widths {dims} but the model was fitted with "
                                       f"{self.party_dims_}; give the same party blocks.")
        return blocks

    def _bounds(self, n: int, n_parties: int, loss) -> "vs.Bounds":
        """Radii of [Hu, Assumption 2.1] (enforced by projection whenever DP is on).

        A number b gives the paper's single b_1 = b for x, y and z. ``"auto"``:
        ``b_x = sqrt(2 ℓ(0)/λ)`` (the regularised optimum satisfies λ/2‖x*‖² ≤ mean ℓ(0); for the
        logistic loss ℓ(0) = ln 2; used for the logistic loss only, else 3√N), and
        ``b_y = b_z = 3√N`` (scores and summed-loss duals of magnitude ≤ 3 on average).
        """
        if self.bound not in ("auto", None):
            b = float(self.bound)
            return vs.Bounds(b, b, b)
        big = 3.0 * math.sqrt(n)
        bx = math.sqrt(2.0 * math.log(2.0) / float(self.lam)) if loss.name == "logistic" else big
        return vs.Bounds(bx, big, big)

    def _privacy_mode(self) -> str | None:
        given = [k for k in ("epsilon", "iteration_epsilon", "noise_scale") if getattr(self, k) is not None]
        if len(given) > 1:
            raise InvalidParameterError(f"give at most one of epsilon, iteration_epsilon, noise_scale; got {given}.")
        return given[0] if given else None

    def _label_mode(self) -> bool:
        if self.label_epsilon is not None and self.label_noise_scale is not None:
            raise InvalidParameterError("give at most one of label_epsilon, label_noise_scale; got both.")
        return self.label_epsilon is not None or self.label_noise_scale is not None

    def _rr(self) -> bool:
        """Labels protected by one randomized-response release (then ADMM on the released labels)."""
        return self.label_epsilon is not None and self.label_noise_scale is None and self.label_mechanism == "rr"

    def _mm_protocol(self) -> bool:
        """Private fits whose rounds cost budget (Gaussian label mechanism, or the gaussian feature
        mechanism) run the linearised coordinator (few rounds); ADMM otherwise — non-private fits,
        randomized-response labels (rounds are post-processing) and ``mechanism="paper"``."""
        feature = any(getattr(self, k) is not None for k in ("epsilon", "iteration_epsilon", "noise_scale"))
        return (self._label_mode() and not self._rr()) or (feature and self.mechanism == "gaussian")

    def _refits(self) -> bool:
        """The label party refits its block on its exact labels after the run (and chooses against its
        own model): every label-private fit and every fit of the linearised protocol."""
        return self._label_mode() or self._mm_protocol()

    def _run_lam(self, n: int) -> float:
        """λ of the joint run. On randomized-response labels (flip probability q) the joint fit is only a
        direction for the label party to calibrate (its refit fits the weight α on exact labels), and
        label noise of variance ∝ 1/(n(1 − 2q)²) calls for more shrinkage: ``max(λ, 8/(n (1 − 2q)²))``
        (the constant chosen on breast_cancer, credit-g and a9a in benchmarks/private_utility/vertical.py).
        The label party's refit and its own model use λ itself."""
        if not self._rr():
            return float(self.lam)
        q = vl.flip_probability(float(self.label_epsilon))
        return max(float(self.lam), 8.0 / (n * (1.0 - 2.0 * q) ** 2))

    def _rho(self, n_blocks: int, loss) -> float:
        """``"auto"``: 0.05 for ADMM; M · sup ℓ'' for the label-private protocol (the Jacobi
        majoriser of M blocks: ‖Σ_m D_m δ_m‖² ≤ M Σ_m ‖D_m δ_m‖²)."""
        if self.rho != "auto":
            return float(self.rho)
        return n_blocks * loss.hess_bound if self._mm_protocol() else 0.05

    def _max_iter(self) -> int:
        """``"auto"``: 100 ADMM iterations; for the private protocol, 3 rounds when only the labels are
        protected (two label releases: round 1's party step sees the zero inbox and round T's hub step
        releases nothing) and 2 when the features are (one costly share per party: round 1's share of
        the zero inbox is 0 and costs nothing; later shares would feed the party's own noise back).
        Each release costs budget; the label party's exact refit does the rest."""
        if self.max_iter != "auto":
            return int(self.max_iter)
        if not self._mm_protocol():
            return 100
        feature = any(getattr(self, k) is not None for k in ("epsilon", "iteration_epsilon", "noise_scale"))
        return 2 if feature else 3

    def _clip(self, n: int, rho: float, sigma_label: float) -> tuple[float, float]:
        """(V, V_∞) of the gaussian mechanism. ``"auto"``: per-sample scale ``c = sqrt(1 + σ_L²) + 3ρ``
        (|y_i| ≤ 1 for the logistic dual, shares of magnitude ≲ 3 per sample, plus the label noise the
        party receives), ``V = c·sqrt(N)``, ``V_∞ = 3c``. A number c gives the same with that c.
        V depends on nothing private (N is public)."""
        c = float(self.clip) if self.clip != "auto" else math.sqrt(1.0 + sigma_label ** 2) + 3.0 * rho
        return c * math.sqrt(n), 3.0 * c

    def _validate(self):
        check_positive("lam", self.lam, allow_zero=self.penalty == "l2" and False)
        if self.rho != "auto":
            check_positive("rho", self.rho)
        if self.max_iter != "auto":
            check_int("max_iter", self.max_iter)
        check_choice("mechanism", self.mechanism, vs.MECHANISMS)
        check_choice("relation", self.relation, tuple(vs.RELATIONS))
        if self.clip != "auto":
            check_positive("clip", self.clip)
        check_choice("label_mechanism", self.label_mechanism, ("rr", "gaussian"))
        check_positive("label_block_scale", self.label_block_scale)
        if self._rr():
            check_positive("label_epsilon", self.label_epsilon)
            if self._loss_name != "logistic":
                raise InvalidParameterError(f"label_mechanism='rr' (randomized response) needs two-class labels; "
                                            f"loss={self._loss_name!r} has real-valued ones (use "
                                            "label_mechanism='gaussian').")
        if self._mm_protocol() or self._rr():
            if self.label_epsilon is not None:
                check_positive("label_epsilon", self.label_epsilon)
            elif self.label_noise_scale is not None:
                check_positive("label_noise_scale", self.label_noise_scale, allow_zero=True)
            if self.adaptive_rho and self._mm_protocol():
                raise InvalidParameterError("adaptive_rho applies to ADMM; the label-private protocol uses a fixed "
                                            "rho (set adaptive_rho=False).")
            if self.penalty != "l2":
                raise PrivacyPreconditionError(f"penalty={self.penalty!r}: the label-private protocol needs "
                                               "penalty='l2'.")
        if self.tol is not None:
            check_positive("tol", self.tol, allow_zero=True)
        check_choice("accountant", self.accountant, ACCOUNTANTS)
        check_choice("penalty", self.penalty, ("l2", "l1", "elasticnet"))
        check_choice("solver", self.solver, SOLVERS)
        mode = self._privacy_mode()
        if mode == "epsilon":
            check_positive("epsilon", self.epsilon)
        elif mode == "iteration_epsilon":
            check_positive("iteration_epsilon", self.iteration_epsilon)
        elif mode == "noise_scale":
            check_positive("noise_scale", self.noise_scale, allow_zero=True)
        check_open_unit("delta", self.delta)
        if not (self.bound == "auto" or self.bound is None):
            check_positive("bound", self.bound)
        if self.damping != "auto":
            check_positive("damping", self.damping, allow_zero=True)
            if (mode is not None or self._mm_protocol()) and self.damping > 0:
                raise PrivacyPreconditionError(
                    f"damping={self.damping} changes the x-step the sensitivity bound covers; use damping=0 "
                    "(or 'auto') for a private fit.")
        return mode

    def _eval_sets(self, eval_set) -> dict:
        if eval_set is None:
            return {}
        if isinstance(eval_set, dict):
            items = list(eval_set.items())
        else:
            items = [("test" if i == 0 else f"eval{i}", pair) for i, pair in enumerate(eval_set)]
        out = {}
        for name, (Xe, ye) in items:
            blocks = self._blocks(Xe, f"eval_set[{name!r}]")
            out[name] = (blocks, self._encode_y(ye, blocks[0].shape[0], fitted=True))
        return out
