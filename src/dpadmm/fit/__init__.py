"""Drivers: typed party setups → a backend → the run → a result (the layer between the backends and the
estimators, CLI and experiments that call them)."""
