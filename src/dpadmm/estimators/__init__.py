"""scikit-learn style estimators on top of the engine and the algorithms."""

from .vertical import VerticalLinearRegression, VerticalLogisticRegression, VerticalPoissonRegression
from .vertical_sgd import VerticalSGDClassifier
from .vertical_experts import VerticalExpertsClassifier
from .vertical_experts_multiclass import VerticalExpertsMulticlassClassifier
from .vertical_experts_regression import VerticalExpertsRegressor
from .functional import FunctionalQuantileRegressor
from .consensus import ConsensusLogisticRegression
from .label_regression import LabelPrivateVerticalRegression
from .label_classification import LabelPrivateVerticalClassifier

__all__ = ["VerticalLogisticRegression", "VerticalLinearRegression", "VerticalSGDClassifier", "FunctionalQuantileRegressor",
           "ConsensusLogisticRegression", "VerticalExpertsClassifier", "VerticalExpertsRegressor", "VerticalExpertsMulticlassClassifier", "LabelPrivateVerticalRegression",
           "LabelPrivateVerticalClassifier", "VerticalPoissonRegression"]
