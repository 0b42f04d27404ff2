"""dpadmm — differentially private distributed learning with ADMM.

Public surface (everything else is importable from its subpackage):

- ``VerticalLogisticRegression``, ``VerticalLinearRegression``, ``VerticalPoissonRegression``,
  ``VerticalSGDClassifier``:
  features split across parties, ADMM sharing with Gaussian DP [Hu].
- ``VerticalExpertsClassifier``: features split across parties, each party's own output-perturbed
  model combined by the label party (no per-row release from training data); ``VerticalExpertsRegressor``: the
  same for amounts (each party's DP ridge, stacked by the label party or its own model kept);
  ``VerticalExpertsMulticlassClassifier``: K declared classes (one multi-output DP ridge per party).
- ``LabelPrivateVerticalRegression``, ``LabelPrivateVerticalClassifier``: features split across parties, the
  labels released once by randomized response (on bins for amounts; k-ary for several classes), ADMM sharing on
  them, the label party's refit on its exact labels.
- ``ConsensusLogisticRegression``: records split across the nodes of a graph, M-ADMM with
  penalty perturbation [Zhang].
- ``FunctionalQuantileRegressor``: curves split across workers, (DP) ADMM quantile regression [Zhou].
- ``dpadmm.data``: loaders (LIBSVM, bundled a9a and Adult, party CSVs, functional CSVs), partitioning.
- ``dpadmm.privacy``: noise mechanisms, events, accountants (dp-accounting PLD/RDP), ledger.
- ``dpadmm.engine``: the round loop; ``dpadmm.backends``: where parties run.

``import dpadmm`` is light: the estimators (and with them scikit-learn, scipy and dp-accounting)
are imported on first use through the module-level ``__getattr__`` below.
"""

from __future__ import annotations

from importlib import import_module

from .exceptions import (
    DataFileError, DPADMMError, InvalidDataError, InvalidParameterError, MissingDependencyError,
    MonitoringKeyError, PartyFailureError, PrivacyPreconditionError,
)

__version__ = "0.1.0"

#: public name -> module that defines it (imported lazily on first attribute access)
_LAZY = {
    "VerticalLogisticRegression": ".estimators.vertical",
    "VerticalLinearRegression": ".estimators.vertical",
    "VerticalPoissonRegression": ".estimators.vertical",
    "VerticalSGDClassifier": ".estimators.vertical_sgd",
    "VerticalExpertsClassifier": ".estimators.vertical_experts",
    "VerticalExpertsRegressor": ".estimators.vertical_experts_regression",
    "VerticalExpertsMulticlassClassifier": ".estimators.vertical_experts_multiclass",
    "FunctionalQuantileRegressor": ".estimators.functional",
    "ConsensusLogisticRegression": ".estimators.consensus",
    "ConsensusLinearRegression": ".estimators.consensus_targets",
    "ConsensusMultinomialClassifier": ".estimators.consensus_targets",
    "LabelPrivateVerticalRegression": ".estimators.label_regression",
    "LabelPrivateVerticalClassifier": ".estimators.label_classification",
}

__all__ = [
    "ConsensusLogisticRegression", "ConsensusLinearRegression", "ConsensusMultinomialClassifier",
    "VerticalLogisticRegression", "VerticalLinearRegression", "VerticalSGDClassifier", "FunctionalQuantileRegressor",
    "VerticalExpertsClassifier", "VerticalExpertsRegressor", "VerticalExpertsMulticlassClassifier", "VerticalPoissonRegression", "LabelPrivateVerticalRegression", "LabelPrivateVerticalClassifier",
    "DPADMMError", "InvalidDataError", "InvalidParameterError", "DataFileError",
    "PrivacyPreconditionError", "MissingDependencyError", "PartyFailureError", "MonitoringKeyError", "__version__",
]


def __getattr__(name: str):
    """Import an estimator on first access (PEP 562); subpackages load as usual."""
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'dpadmm' has no attribute {name!r}")
    value = getattr(import_module(target, __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
