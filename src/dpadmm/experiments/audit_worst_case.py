"""The worst-case instances of ``dpadmm audit --end-to-end``: one :class:`~.audit_games.Game` per private
mechanism, its honest row, and its planted bugs.

Vertical feature side [Hu] (the coordinator is the adversary): party 2's canary is one entry of its
block — 0 on D, a unit (record relation: norm 4, clipped to 1 at setup) on D' — and every round the
coordinator sends ``v = y + ρ(s̃ − z − share)`` pointing at the canary's row with norm 4·V (outside
the clip V = V_∞ = 1), with ρ alternating 1 and 8 and λ_s = 0.08. The party's ridge share then
moves by ``V/(λ_s + ρ)``, against the proved sensitivity ``V/ρ``: the audit can reach 0.93–0.99 of
the claim per round. The x-step is exact and memoryless given v, so the noiseless shares are the
same in every run (replayed once per round position).

Vertical label side (a passive party is the adversary, the coordinator the mechanism): the parties
send shares 0, so ``g = ℓ'(0, y)`` and one flipped label moves coordinate k by exactly the label gap 1
= the sensitivity (no intercept; with one, the sum's noise is not seen by the party and the row could
reach only 1/√2 of the claim).

Vertical label side, randomized response (the default label mechanism; :mod:`.audit_games_rr`): the
adversary sees the released labels themselves (every later message is post-processing of them) and knows
every other label; the canary's label flips between the neighbours. Not an engine run: each run calls the
estimator's release function, and the bound is Clopper–Pearson on the canary's released label (pure DP,
δ = 0) and on that label decoded with another row's visible flip (a shared flip draw).

Functional FDP-ADMM [Zhou] (the central machine is the adversary): the worker's canary curve has
scores 10u (clipped to u, ‖u‖ = c_1 = 1) on D and −10u on D', response y = 2.5. The hub sends
round number 0 every time (the dual is never updated, η is fixed), ρ alternating 1 and 8, and the
consensus ``−5u`` in the first round of four and ``w = 0`` in the others (each audited run is a fresh fit):
where the step follows a ``w = 0`` round (or starts the fit) both neighbours' canaries sit below the fit (ψ = τ = 0.9: the linearised step moves by ``2τc_1/m`` per unit of ``1/(ρ + 1/η)``, 0.9 of the
sensitivity); after the ``−5u`` round one of them flips (ψ sum 2τ − 1), which makes consecutive rounds' shifts
non-proportional to their σ, so a reused draw leaves a noiseless combination that still separates the
neighbours.

Functional pooled statistics (the central machine is the adversary; it chooses every request): the mean
release with a canary curve ±10u and response ±10 (clipped to c_X = 1 and the range (−1, 1): √8 of √10); the
moment release with canary curves of norm 10 at −15° and 105° (clipped to c₂ = 1: the pair that attains the
proved (3/√2)c₂²); and the private-FPCA pipeline — mean, full-grid moments and the DP quantile's bisection
counts at threshold 0, composed in one run at the estimator's budget split (the antipodal canary: ratio
limit about 0.93). The whole-fit private-FPCA row stays low (ordinary canary and coordinator, generic
statistics) where this game of the same releases reaches 0.77 at the default runs: the game, not the claim,
was weak.

Consensus penalty perturbation [Zhang] (a neighbour is the adversary; :mod:`.audit_games_consensus`): the
release is an argmin, not value + noise, but the first-order condition inverts it, so the adversary computes
the exact likelihood ratio of each release; its neighbour messages pull the model to where two misclassified
canaries have the largest gradient gap. Pure DP: Clopper–Pearson only.

Noisy-gradient gossip (the default private consensus; a neighbour, or the router, is the adversary;
:mod:`.audit_games_gossip`): one node of degree 1 with declared column bounds (no range rounds: the range counts
are a separate release, the next game), R = 4; the canary row is all ones on D and all −1 on D' (label +1, norm
8 clipped to R), and the neighbour sums put the node's mixed point at ``(0, …, 0, b)`` every round (round 0 by the
starting intercept, capped at 10), b = −10 and −3 alternating: every margin is b, so the canary moves the gradient
sum by ``2Rσ(−b)``, 0.970 and 0.925 of ``Δ = 2√(R² + 1)``. The adversary reads each release off the node's
broadcast by inverting the heavy-ball step exactly; the alternating b makes consecutive rounds' shifts differ, so a
reused draw leaves a noiseless separating combination.

Gossip DP column range (the noisy threshold counts of a node without declared bounds; the hub is the adversary;
:mod:`.audit_games_ranges`): one node, K = 4 range rounds, d = 8; the canary row is −10³ in every column with label
−1 on D and +10³ with label +1 on D', and the hub sends thresholds 0 every round, so every count (and, in round 1,
the positive count) moves by exactly 1: each round's Δ, √(2d + 1) then √(2d) — ratio limit 1.

Gossip beyond yes/no (:mod:`.audit_games_gossip_targets`): the squared-loss regression sum and the softmax sum over
three classes, the same node and canary rows (same label on both sides), the neighbour's targets from round 1 put the
canary's residual (prediction clipped at +1 against a label at −1) or its ``p − e_y`` near their bounds: 0.970 and
0.946 (squared), 0.970 and 0.960 (softmax) of Δ, round 0 (the public start w = 0) 0.485 and 0.560.

Encrypted vertical protocol (:mod:`.audit_games_encrypted`): the feature side against the label party (party
2's record canary at the clip, its weights pushed to the projection's edge, both releases of each round) and the
label side against party 2 (one flipped label); the protocol's real functions with the HE layer replaced by its
plaintext equivalent, which a test checks equals sf-heu's decryptions given the same noise.

Plants (all wrap the real step of the canary's party or patch a library function during the run):
noise × 1/2; the standard-normal draw of one round reused in the next (rescaled by that round's σ);
the same draw used by two parties in a round; the clipping of what the party receives (vertical), of its
scores (functional) or of its rows (gossip) skipped; the gossip node's single-precision logistic weights
multiplied by 3 (|weight| ≤ 1 is a premise of Δ); the range counts' sensitivity under-stated as √d for √(2d)
(a factor √2: that row plays 6,000 runs per side at ``--quick``) and a count that is no indicator (a value counting
up to 2); the sensitivity computed from a value the coordinator supplies
at Setup (vertical: the relation constant ``column_change`` = 10⁻³; functional: ``c1`` = 10⁻³ with the
clip at 1).
"""

from __future__ import annotations

from .audit_games import Game
from .audit_games_consensus import consensus_game, consensus_plants
from .audit_games_encrypted import encrypted_games, encrypted_plants
from .audit_games_rr import rr_game, rr_plants
from .audit_games_label_rr import label_rr_games, label_rr_plants
from .audit_games_functional import functional_game, functional_plants, pipeline_game, stats_game, stats_plants
from .audit_games_gossip import gossip_game, gossip_plants
from .audit_games_gossip_targets import target_game, target_plants
from .audit_games_ranges import range_game, range_plants
from .audit_games_vertical import label_game, label_plants, vertical_game, vertical_plants

__all__ = ["games", "vertical_game", "label_game", "functional_game", "stats_game", "gossip_game", "range_game"]


def games(*, quick: bool = False) -> list[Game]:
    """Every worst-case row: honest first (one per algorithm also on the process backend), then plants."""
    honest = ([vertical_game("feature_column"), vertical_game("record"), label_game(), rr_game(), functional_game(),
               stats_game("mean"), stats_game("moments"), pipeline_game(), consensus_game(), gossip_game(),
               gossip_game(router="extreme"), range_game(), target_game("squared"), target_game("multinomial")]
              + encrypted_games() + label_rr_games())
    for g in (vertical_game("record", backend="process", tag=" (process backend)"),
              functional_game(backend="process", tag=" (process backend)")):
        honest.append(g)  # the same run count: with fresh OS entropy the bound varies from run to run
    planted = (vertical_plants("record") + [vertical_plants("feature_column")[0]] + label_plants() + rr_plants()
               + functional_plants() + stats_plants() + consensus_plants() + gossip_plants() + target_plants() + range_plants()
               + encrypted_plants() + label_rr_plants())
    for g in planted:
        g.max_runs = 3000 * max(1, g.runs_factor // 5)  # --quick (1,500 × runs_factor/5) catches every plant
    return [g for g in honest + planted if g is not None and not (quick and g.full_only)]
