"""The encrypted vertical protocol (issue 28): one joint logistic model, gradients under Okamoto–Uchiyama
encryption (sf-heu, 2048-bit keys; each non-label party's own key Paillier, so masks are uniform on a public Z_n:
issue 35), DP noise on both sides. ``forward="encrypted"`` (any number of non-label
parties, the Taylor-approximated loss) keeps every per-row score from the label party; ``forward="clear"`` (any number of
parties) does not, and its features are NOT protected. Declaration, threat model and proofs: :mod:`.protocol`;
the HE interface: :mod:`.he`; the parties: :mod:`.party`, :mod:`.label`; the round loop: :mod:`.driver`. Needs the
``he`` extra: ``pip install "dpadmm[he]"``."""
