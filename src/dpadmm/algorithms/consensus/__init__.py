"""Decentralised graph consensus [Zhang] and its baseline, one module per concern:

- :mod:`.messages` — the records between a block of nodes and the router, configurations, states, ``Setup``;
- :mod:`.schedules` — η, θ, α schedules and the conditions of [Zhang, Thm 3.1, eq. 64, Thm 4.1];
- :mod:`.solver` — a node's exact local minimiser; :mod:`.node` — a block's setup and step (the noise is drawn
  there), its own file, peer to peer; :mod:`.router` — the router's delivery and metrics;
- :mod:`.baseline` — the non-iterative baseline (a noisy count and one comparison);
- :mod:`.policy` — the node's policy hooks and the price of a run; :mod:`.report` — P(t) and the report
  [Zhang, Thm 4.1]; :mod:`.params` — the checked parameters and ε → α (:func:`.params.solve_alpha`);
- :mod:`.protocol` (on top) — the declarations; :mod:`.driver` (above it) — one fit on a backend.
"""
