"""The encrypted vertical protocol (issue 28): gradients under Okamoto–Uchiyama encryption, DP on both sides;
the declaration, threat model and proofs are in :mod:`.protocol`. Needs the ``he`` extra (``sf-heu``)."""
