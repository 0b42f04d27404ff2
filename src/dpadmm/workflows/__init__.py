"""The jobs behind the CLI commands: one configuration fitted through the estimators, with its baselines, figures
and the metrics.json layout (``dpadmm vertical admm`` → :mod:`.vertical`, ``dpadmm consensus madmm`` →
:mod:`.consensus`, ``dpadmm consensus gossip`` → :mod:`.gossip`, ``dpadmm attack kkt`` → :mod:`.kkt_attack`).

Above the estimators and below :mod:`dpadmm.cli` and :mod:`dpadmm.experiments` (the paper reproductions, which
repeat these jobs); it imports neither.
"""
