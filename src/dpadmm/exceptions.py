"""Exception hierarchy: the class name tells the user what to fix.

Every message has one shape: what is wrong, the value seen, and how to fix it, e.g.
``"epsilon must be positive, got epsilon=-1.0."``. The CLI prints the message on one line
and exits with code 2.
"""

from __future__ import annotations


class DPADMMError(Exception):
    """Base class of every error dpadmm raises on purpose."""


class InvalidParameterError(DPADMMError, ValueError):
    """A hyperparameter is out of its valid range or of the wrong type."""


class InvalidDataError(DPADMMError, ValueError):
    """Input arrays are malformed: NaN/inf, wrong shapes, bad labels, mismatched parties."""


class DataFileError(DPADMMError, OSError):
    """A data file is missing, unreadable, or not in the expected format."""


class PrivacyPreconditionError(DPADMMError, ValueError):
    """A privacy guarantee was requested but an assumption of its theorem does not hold."""


class MissingDependencyError(DPADMMError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


class PartyFailureError(DPADMMError, RuntimeError):
    """A party or node failed during a run; the message names the party and the round."""


class ProtocolError(DPADMMError, RuntimeError):
    """A request that the party's protocol does not declare (its model, an arbitrary function, a
    pickle, monitoring in a private run) was refused; the message names the party and the request."""


class MonitoringKeyError(DPADMMError, KeyError):
    """A ``history_`` key recorded only with monitoring (``monitor=True``, CLI ``--monitor``), asked of a
    fit that ran without it; the message says which keys exist and how to record the others."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0]) if self.args else ""
