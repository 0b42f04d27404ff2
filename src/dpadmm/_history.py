"""``history_`` of a fitted estimator: a dict that says why a key is missing.

A private fit records no per-round monitoring by default (monitoring values leave the parties
un-noised, outside the guarantee), so its ``history_`` holds only what the coordinator knows without
it: ``round`` and ``seconds`` (and, for consensus, ``privacy_bound``). Asking it for a monitoring
key (``objective``, ``test_log_loss``, ``train_loss``, …) raises :class:`MonitoringKeyError`, a
``KeyError`` whose message names the keys that exist and how to record the others
(``monitor=True``; CLI ``--monitor``), instead of a bare ``KeyError: 'train_loss'``.
"""

from __future__ import annotations

from typing import Any

from .exceptions import MonitoringKeyError


class History(dict):
    """Per-round history (``key -> list``); ``monitored`` says whether monitoring was on."""

    def __init__(self, data: dict[str, Any] | None = None, *, monitored: bool = True, private: bool = False):
        super().__init__(data or {})
        self.monitored = bool(monitored)
        self.private = bool(private)

    def __missing__(self, key):
        have = ", ".join(sorted(map(str, self))) or "none"
        if not self.monitored:
            why = ("a private fit records no per-round monitoring by default (its values would leave the "
                   "parties un-noised, outside the guarantee)" if self.private else
                   "this fit ran with monitor=False")
            raise MonitoringKeyError(
                f"history_ has no {key!r}: {why}; it holds only {have}. Fit with monitor=True "
                "(CLI: --monitor) to record per-round values such as the objective and eval-set losses "
                "(the privacy report then says they are not covered), or evaluate the fitted model "
                "(score / evaluate / predict) instead.")
        raise KeyError(key)

    def __reduce__(self):
        return (_rebuild, (dict(self), self.monitored, self.private))


def _rebuild(data, monitored, private):
    return History(data, monitored=monitored, private=private)
