"""The column → party map of the vertical estimators, in one place: party blocks from a list of blocks or from one
(N, d) matrix split by ``party_sizes``.

One matrix is what scikit-learn's tools hand an estimator (``Pipeline``, ``cross_val_score``, ``GridSearchCV``):
``party_sizes=[d₁, d₂, …]`` says that the first d₁ columns are the label party's, the next d₂ the second party's,
and so on (consecutive columns, summing to d). A list of 2-D blocks (one per party, the label party's first) is
taken as given and ``party_sizes`` is not used. The split is the caller's description of who holds which column:
it releases nothing and costs no privacy (an in-process fit is a simulation that holds every block anyway).
"""

from __future__ import annotations

from typing import Any

from .._validation import as_float_matrix
from ..data.parties import partition_columns
from ..exceptions import InvalidDataError, InvalidParameterError
from ._sklearn import is_block_list, one_matrix


def column_sizes(party_sizes, d: int, name: str = "X", *, min_parties: int = 2) -> list[int]:
    """The checked column counts of the parties for a matrix of ``d`` columns. ``party_sizes=None``: one party
    holding every column (``min_parties=1``), else two, the label party holding the first ⌈d/2⌉ columns."""
    if party_sizes is None:
        if min_parties <= 1:
            return [d]
        if d < min_parties:
            raise InvalidDataError(f"{name} has {d} feature(s) (n_features = {d}): this protocol needs the label party "
                                   f"and at least one other party, so at least {min_parties} columns.")
        return [(d + 1) // 2, d // 2]
    sizes = [int(s) for s in party_sizes]
    if len(sizes) < min_parties or min(sizes) < 1 or sum(sizes) != d:
        count = "one or more" if min_parties <= 1 else "two or more"
        raise InvalidParameterError(f"party_sizes={list(party_sizes)} must be {count} positive column counts summing "
                                    f"to {name}'s {d} columns.")
    return sizes


def party_blocks(est, X: Any, name: str = "X", *, min_parties: int = 2) -> list:
    """Party blocks of ``est`` (which has a ``party_sizes`` parameter): ``X`` as a list of at least ``min_parties``
    2-D blocks with the same rows, or one matrix (scikit-learn's validation, and once fitted its column count)
    split by :func:`column_sizes`. Sparse input stays CSR."""
    if is_block_list(X):
        if len(X) < min_parties:
            need = "at least two party blocks (block 0: the label party's)" if min_parties > 1 else "one block per party"
            raise InvalidDataError(f"blocks must be a list of {need}; pass [X_label_party, X_party2, ...] or one "
                                   "matrix with party_sizes")
        blocks = [as_float_matrix(f"blocks[{m}]", b, accept_sparse=True) for m, b in enumerate(X)]
        if any(b.shape[0] != blocks[0].shape[0] for b in blocks):
            raise InvalidDataError(f"every block needs the same rows; got row counts {[b.shape[0] for b in blocks]}")
        return blocks
    A = one_matrix(est, X, name)
    return partition_columns(A, column_sizes(est.party_sizes, A.shape[1], name, min_parties=min_parties))


__all__ = ["column_sizes", "party_blocks"]
