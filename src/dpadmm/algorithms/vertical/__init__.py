"""Vertical (feature-partitioned) ADMM sharing [Hu] and its companions, one module per concern:

- :mod:`.messages` — the records that cross the trust boundary, configurations, states, the typed ``Setup``;
- :mod:`.party` — a feature party's setup and x-step (with its release); :mod:`.coordinator` — the label
  holder's z- and dual updates; :mod:`.label` — the label side's mechanisms and the label party's refit;
- :mod:`.data` — a party reading its own file; :mod:`.scoring` — scoring new records with a party's model;
  :mod:`.sgd` — the vertical SGD baseline;
- :mod:`.policy` — the party's policy hooks and the price of a run; :mod:`.report` — the accounting [Hu];
  :mod:`.protocol` (on top) — the declarations.
"""
