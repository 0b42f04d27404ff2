"""Drivers: typed party setups → a backend → the run → a result (the layer between the backends and the
estimators, CLI and experiments that call them).

:mod:`.runner` is the one fit runner (start → run → requests after training → close, the backend always closed);
every estimator and CLI command runs through it (``tests/unit/test_architecture.py`` checks that none starts, steps,
runs or closes a backend itself). One driver per algorithm hands it its setups: the vertical family's in their
algorithm folders (:mod:`dpadmm.algorithms.vertical.driver` for ADMM sharing, :mod:`dpadmm.algorithms.experts.driver`,
:mod:`dpadmm.algorithms.encrypted.driver`), and here :mod:`.functional`, :mod:`.consensus` (M-ADMM and its DP base-rate
fallback), :mod:`.gossip` and :mod:`.psi`; each algorithm's accounting is in its ``algorithms/<alg>/report.py``."""
