"""Drivers: typed party setups → a backend → the run → a result (the layer between the backends and the
estimators, CLI and experiments that call them).

:mod:`.runner` is the one fit runner (start → run → requests after training → close, the backend always closed);
every estimator and CLI command runs through it (``tests/unit/test_architecture.py`` checks that none starts, steps,
runs or closes a backend itself). Every algorithm's driver lives in its folder (``algorithms/<alg>/driver.py``:
typed parameters → ``fit`` → a typed result — :mod:`dpadmm.algorithms.vertical.driver` for ADMM sharing,
:mod:`dpadmm.algorithms.experts.driver`, :mod:`dpadmm.algorithms.encrypted.driver`, the consensus, gossip and
functional drivers) and hands the runner its setups; :mod:`.psi` stays here. Each algorithm's accounting is in its
``algorithms/<alg>/report.py``."""
