"""Vertical ADMM sharing's party-side policy hooks (``PROTOCOL.policy``): which Setup fields are the party's,
how it checks them, and the price of a run (see :class:`dpadmm.protocol.PolicyHooks` for the order a party calls them).
"""

from __future__ import annotations

from ...kernels.regularizers import L2
from ...privacy.policy import PartyPolicy, RunPrice, check_noise_multiplier, finite_positive, not_private, refuse
from ...protocol.spec import PartyData, PolicyHooks


# ----------------------------------------------------------------------------- vertical sharing [Hu]
def _vertical_check(cfg, args, policy: PartyPolicy, party: str) -> None:
    p = cfg.privacy
    if p is None:
        return not_private(party, policy, "private=None")
    if not policy.private_work:
        return
    if p.mechanism not in policy.mechanisms:
        raise refuse(party, "the mechanism", p.mechanism, f"one of {list(policy.mechanisms)}",
                     "[Hu, eq. 16] as published is not differentially private")
    if p.mechanism == "gaussian":
        if p.relation != policy.relation:
            raise refuse(party, "the neighbouring relation", p.relation, repr(policy.relation))
        if p.relation == "feature_column" and float(p.column_change) != policy.column_change:
            raise refuse(party, "the relation's constant column_change", p.column_change,
                         f"column_change = {policy.column_change:g}", "the change of one column the party protects")
        for what, v in (("the clip bound V of what the party receives", p.clip), ("the clip bound V_inf", p.clip_inf)):
            if v is not None and finite_positive(party, what, v) < policy.min_clip:
                raise refuse(party, what, v, f"≥ {policy.min_clip:g} (min_clip)")
    if p.noise_multiplier is None:
        raise refuse(party, "the noise", f"noise_scale={p.noise_scale}", "a noise multiplier σ/Δ",
                     "the party calibrates σ to the sensitivity it computes itself")
    check_noise_multiplier(party, p.noise_multiplier, policy)
    if type(cfg.reg) is not L2:
        raise refuse(party, "the regulariser", type(cfg.reg).__name__ if cfg.reg is not None else None,
                     "L2 (½‖x‖², the ridge x-step the sensitivity is proved for)")
    lam = finite_positive(party, "the regulariser weight lam_sum", cfg.lam_sum)
    if lam < policy.min_lam_sum:
        raise refuse(party, "the regulariser weight lam_sum", lam, f"lam_sum ≥ {policy.min_lam_sum:g}")
    if cfg.damping:
        raise refuse(party, "the damping", cfg.damping, "0 (the bound is about the undamped x-step)")


def _vertical_prepare(args, policy: PartyPolicy):
    """Row normalisation is the party's (``normalize_vertical_rows``, default off: rows clipped to ‖d_k‖ ≤ 1 in
    ``setup_party``), imposed on every block it reads (training and eval) whatever the coordinator sent: it is not
    1-Lipschitz, so under the feature-column relation a raw column change of norm 1 can become a block change of
    spectral norm ≫ 1 (REDTEAM_POLICY R3)."""
    if not policy.private_work:
        return args

    def own(obj):
        if isinstance(obj, PartyData):
            return PartyData(obj.key, dict(obj.params, normalize=bool(policy.normalize_vertical_rows)), obj.shape)
        if isinstance(obj, list):
            return [own(v) for v in obj]
        if isinstance(obj, dict):
            return {k: own(v) for k, v in obj.items()}
        return obj

    return own(list(args))


def _vertical_price(cfg, rounds: int) -> RunPrice:
    p = cfg.privacy
    rel = {"feature_column": "feature_column", "record": "record_replace"}.get(p.relation, p.relation)
    # round 1 answers the protocol's all-zero first inbox: sensitivity 0, no cost (a coordinator that sends
    # anything else there departs from the declaration and is refused at the last round it would overspend)
    return RunPrice({float(p.noise_multiplier): max(int(rounds) - 1, 0)}, 0.0, rel)


VERTICAL = PolicyHooks(
    party={
        "private (PrivacySpec)": "required in private work; None is refused",
        "private.mechanism": "one of the policy's mechanisms (default gaussian; 'paper' is not DP)",
        "private.relation, private.column_change": "equal to the policy's (default feature_column, 1.0)",
        "private.noise_multiplier": "≥ the policy's floor (default 0.5); a raw noise_scale is refused",
        "reg, lam_sum": "exactly L2 (½‖x‖²) with lam_sum > 0 and ≥ min_lam_sum",
        "damping": "0",
        "rows of the block": "clipped to ‖d_k‖ ≤ 1 at the party (setup_party)",
        "normalize (row normalisation)": "the party's (normalize_vertical_rows, default off; only with the record "
                                         "relation), imposed on every block it reads whatever the coordinator sends",
        "rounds": "declared at Setup, priced against the budget; more are refused",
    },
    coordinator={
        "private.clip, private.clip_inf (V, V_inf) (≥ min_clip)": "the party clips what it receives to them and scales σ with "
                                                     "the sensitivity they give (σ/Δ is fixed)",
        "rho (every round)": "enters the x-step and the sensitivity alike",
        "residual, dual (every round)": "clipped by the party to V (and V_inf)",
        "solver, eval_blocks, ids": "computation and joining; no effect on σ/Δ",
    },
    prepare=_vertical_prepare, check=_vertical_check, price=_vertical_price)
