"""Noisy-gradient gossip logistic regression (record-level DP, Gaussian accounting, raw-unit columns).

``mechanism`` (the two releases and their proofs), ``node`` (messages, the node's step, the router),
``report`` (calibration and the per-node accounting), ``policy`` (a budgeted node's check and price),
``params`` (the checked parameters and the run's plan: ε → schedule and noise, once), ``driver`` (one fit on
a backend), ``protocol`` (the declaration a party serves).
"""
