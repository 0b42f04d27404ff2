"""The input handling of the vertical estimators (a mixin of :class:`dpadmm.estimators.vertical._VerticalADMM`): party
blocks from a list of blocks or one matrix split by ``party_sizes``, eval sets, and the checked parameters.

Which protocol a fit runs, its defaults and the checks of its parameters are
:class:`dpadmm.algorithms.vertical.params.VerticalParams`'.
"""

from __future__ import annotations

import numpy as np

from .._validation import as_float_matrix
from ..algorithms.vertical.driver import is_source as _is_source
from ..algorithms.vertical.params import VerticalParams
from ..data.parties import partition_columns
from sklearn.exceptions import NotFittedError

from ..exceptions import InvalidDataError
from ._party_columns import column_sizes
from ._sklearn import is_block_list, one_matrix

class _VerticalConfig:
    """Input handling of a vertical estimator (see the module docstring)."""

    def _params(self) -> VerticalParams:
        """The estimator's public parameters as the driver's checked record (raises on a bad value)."""
        return VerticalParams.of(self.get_params(deep=False), loss=self._loss_name)

    # ------------------------------------------------------------------ input handling
    def _summed_scores(self, X) -> np.ndarray:
        """Σ_m X_m C_m + intercept over the fitted ``coefs_`` (a vector or a (d_m, K) matrix per party), on the
        fitted party widths; :class:`~sklearn.exceptions.NotFittedError` before ``fit``."""
        if not hasattr(self, "coefs_"):
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit first.")
        blocks = self._blocks(X)
        return sum(np.asarray(B @ c, dtype=np.float64) for B, c in zip(blocks, self.coefs_)) + self.intercept_

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
            blocks = partition_columns(A, column_sizes(self.party_sizes, A.shape[1], name, min_parties=1))
        if hasattr(self, "party_dims_"):
            dims = tuple(B.shape[1] for B in blocks)
            if dims != self.party_dims_:
                raise InvalidDataError(f"{name} has party widths {dims} but the model was fitted with "
                                       f"{self.party_dims_}; give the same party blocks.")
        return blocks

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
