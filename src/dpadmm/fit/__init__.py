"""Drivers: typed party setups → a backend → the run → a result (the layer between the backends and the
estimators, CLI and experiments that call them).

:mod:`.runner` is the one fit runner (start → run → requests after training → close, the backend always closed);
every estimator and CLI command runs through it (``tests/unit/test_architecture.py`` checks that none starts, steps,
runs or closes a backend itself). The drivers here hand it their setups: :mod:`.vertical` (ADMM sharing),
:mod:`.encrypted`, :mod:`.experts` and :mod:`.psi`. The consensus, gossip and functional drivers live in their
algorithm folders (``algorithms/<alg>/driver.py``: typed parameters → ``fit`` → a typed result); each
algorithm's accounting is in its ``algorithms/<alg>/report.py``."""
