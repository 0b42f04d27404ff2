"""The threat model of each algorithm's side, in words (a table of text, read by the ledger's report and by
:mod:`.threats`; it imports nothing, so both can import it).
"""

from __future__ import annotations

#: algorithm/side → (short threat model, what is protected, what is public)
THREAT_MODELS: dict[str, str] = {
    "vertical-feature": (
        "adversary: the coordinator (label holder) and every other party, colluding; sees every message "
        "party m sends (its N-vector shares, every round) and the public hyperparameters; protects party m's "
        "features under the stated relation; public: sample alignment (ids), N, d_m, rho, lambda, T, the bounds"),
    "vertical-label": (
        "adversary: any passive party (or all of them, colluding); sees every message the coordinator sends "
        "(N-vectors every round); protects the training labels (one label changes); public: the sample "
        "alignment, the hyperparameters and the passive parties' own features. Not covered: the label party's "
        "own final model (its refit on its exact labels, and its choice between that and its own model) stays "
        "with the label party; predictions it publishes from it are its own release"),
    "consensus": (
        "adversary: any node or an eavesdropper on any link; sees every broadcast model f_i(t) of every node "
        "and the graph; protects each node's records (replace one record of one node); public: the graph, "
        "node sample counts, C, rho, theta and T. The penalty schedules eta_i(t) are set by whoever launches the "
        "run and are known to it (and to the router in this implementation); keeping eta private defeats the KKT "
        "attack [Zhang, App. E] only against other nodes and eavesdroppers, and the epsilon does not rely on it"),
    "functional": (
        "adversary: the central machine or an eavesdropper; sees every noisy local model w~_i of every worker "
        "every round and every pooled statistic (mean curve, basis moments, response scaling); protects each "
        "worker's (curve, response) pairs (replace one pair); public: the grid, K, tau, lambda, rho, L, the "
        "clipping bound c1 and any user-given range"),
}
