"""Vertical "independent experts": each party's own output-perturbed model, combined by the label party.

- :mod:`.model` — the protocol's math, threat model and sensitivity proof (fit, perturb, logit, combine);
- :mod:`.messages` — the round-0 request, the party's rows, configuration, state and ``Setup``;
- :mod:`.party` — the feature party over the network (its own files, one fit, logits on new records only);
- :mod:`.policy` — the party's policy hooks and the price of a run; :mod:`.report` — the accounting of a fit;
- :mod:`.regression` — the regression target's math and sensitivity proof (squared, Huber), :mod:`.stack` — the
  label party's least-squares stack or its own model, :mod:`.driver_regression` — the label party's side of it;
  :mod:`.protocol` (on top) — the declaration.
"""
