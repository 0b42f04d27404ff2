"""Distributed functional quantile regression [Zhou], one module per concern:

- :mod:`.messages` — public settings, the hub's and the workers' messages, configurations, states, ``Setup``;
- :mod:`.rules` — method presets, penalties, step-size rules, the smoothing schedule;
- :mod:`.local` — a worker's local math and the sensitivity of its release; :mod:`.party` — its setup from
  its own curves and its step (the noise is drawn there); :mod:`.hub` — the central machine;
- :mod:`.statistics` / :mod:`.statistics_hub` — the pooled statistics stages (workers / hub);
  :mod:`.data` — a worker's own curve file;
- :mod:`.policy` — the workers' policy hooks and the price of a run; :mod:`.report` — the accounting
  [Zhou, Thm 1–2]; :mod:`.params` — the checked parameters and the protocol's public constants;
- :mod:`.protocol` (on top) — the declarations; :mod:`.driver` and :mod:`.driver_stages` (above it) — one fit on a
  backend, the noise calibration (ε → z) included.
"""
