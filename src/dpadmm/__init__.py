"""dpadmm — differentially private distributed learning with ADMM.

Public surface (everything else is importable from its subpackage):

- ``VerticalLogisticRegression``, ``VerticalLinearRegression``, ``VerticalSGDClassifier``:
  features split across parties, ADMM sharing with Gaussian DP [Hu].
- ``dpadmm.data``: loaders (LIBSVM, bundled a9a, party CSVs), partitioning, row normalisation.
- ``dpadmm.privacy``: noise mechanisms, events, accountants (dp-accounting PLD/RDP), ledger.
- ``dpadmm.engine``: the round loop; ``dpadmm.backends``: where parties run.
"""

from .estimators import FunctionalQuantileRegressor
from .estimators import ConsensusLogisticRegression
from .estimators import VerticalLinearRegression, VerticalLogisticRegression, VerticalSGDClassifier
from .exceptions import (
    DataFileError, DPADMMError, InvalidDataError, InvalidParameterError, MissingDependencyError,
    PartyFailureError, PrivacyPreconditionError,
)

__version__ = "0.1.0"

__all__ = [
    "ConsensusLogisticRegression",
    "VerticalLogisticRegression", "VerticalLinearRegression", "VerticalSGDClassifier", "FunctionalQuantileRegressor",
    "DPADMMError", "InvalidDataError", "InvalidParameterError", "DataFileError",
    "PrivacyPreconditionError", "MissingDependencyError", "PartyFailureError", "__version__",
]
