"""``vertical-encrypted``: vertical logistic regression learned jointly, gradients under encryption, released
with differential privacy on both sides — and a forward pass whose per-row scores are NOT protected.

Problem. Rows i = 1..n are split by columns: the label party (party1) holds ``A₀`` (its block clipped at R₀ plus an
intercept column R₀) and the labels ``y ∈ {0, 1}``; party m holds ``D_m`` (clipped at R_m, quantised toward zero
to ``D̂_m`` on a 2^-16 grid, so ‖d̂_{m,i}‖ ≤ R_m). Model: ``min (1/n) Σ_i ℓ(s_i, y_i) + (λ/2) Σ ‖w‖²`` with
``s_i = a_{0,i}·w₀ + Σ_m d̂_{m,i}·w_m`` and the logistic loss. Noisy gradient descent, T rounds (declared):

  forward   s_m = D̂_m w_m                         party m → label party, masked (``Scores``)
  residual  ĝ = round(2^24 (σ(s) − y)) ∈ [−2^24, 2^24]   label party, encrypted under its OU key (``Backward``)
  backward  Enc(D̂_mᵀ ĝ + ξ_m), ξ_m ~ N(0, (z_f·2R_m)² I)  party m, homomorphically, fresh-encrypted noise
            (``EncryptedGradient``; re-randomised by the fresh encryption)
  open      γ_m = D̂_mᵀĝ + ξ_m + η_m, η_m ~ N(0, (z_L Δ_L)² I)   label party decrypts (only d_m values) and returns
  update    w_m ← w_m − step (γ_m / n + λ w_m);   w₀ ← w₀ − step ((A₀ᵀĝ + η₀)/n + λ w₀)

Symbols → code: R_m ``PartyConfig.R``; z_f ``PartyConfig.noise_multiplier``; z_L ``LabelConfig.noise_multiplier``;
Δ_L ``LabelConfig.sensitivity``; T ``rounds``; step, λ ``step``, ``lam``; fixed point ``RESIDUAL_BITS`` = 24,
``BLOCK_BITS`` = 16, ``masks.SCORE_BITS`` = 24.

Backward releases, feature side (proof). Relation: replace one row of party m's block (record relation). In round
t the label party decrypts ``D̂_mᵀĝ + ξ_m``. Given everything it saw before (which determines w₀ and, because
party m updates from γ_m = its decryption plus the label party's own η_m, also w_m), ĝ_j for j ≠ i changes only
through s_j — which does not involve row i — and |ĝ_i| ≤ 1 in both datasets, so the change is
``d̂_iĝ_i − d̂'_iĝ'_i``, of norm ≤ 2R_m =: Δ_f. Premises and the lines enforcing them: rows clipped and quantised
toward zero (:func:`.party.setup_party`); |ĝ| ≤ 1 — computed by the LABEL party (:func:`.label.residuals`) and
encrypted, so party m cannot check it: this half of the bound holds against an honest-but-curious label party
only (a label party that encrypts ``10^6·e_i`` instead reads row i from the answer; no range proof here). Each
round is a Gaussian mechanism with noise multiplier z_f; the party emits one GaussianRelease(Δ_f, σ = z_f Δ_f) per
Backward, and its T releases compose by PLD (z_f calibrated from ε_f by
:func:`dpadmm.privacy.accountants.calibrate_noise_multiplier`).

Backward releases, label side (proof). Relation: one label changes. The label party's own update uses its noisy
gradient, so every weight is a function of past noisy releases; one label then moves one residual by at most 1
and every block's column sums by that row: ``‖Δ(A₀ᵀĝ, D̂_1ᵀĝ, …)‖ ≤ √(2R₀² + Σ_m R_m²) = Δ_L`` (premises: the
clips, R_m public at Setup; party m's honest computation of D̂_mᵀĝ — a party m that answers with another linear
map of ĝ, e.g. one residual times 10^6, gets a release the bound does not cover: the label party decrypts only d_m
values per party but cannot check which linear map produced them). One GaussianRelease(Δ_L, z_L Δ_L) per round
(all blocks jointly, so colluding parties are covered), T rounds, PLD.

Forward pass: NOT protected — stated plainly. The label party learns ``S_i(t) = Σ_m d̂_{m,i}·w_m(t)`` for every
training row i and round t, un-noised. With ONE non-label party, S_i(t) = d̂_{1,i}·w_1(t) is sent in the clear, and
w_1(t) is a function of the label party's own view (its decryptions and its own η), so it knows w_1(t): after
d_1 rounds with linearly independent weights it can solve for every row d̂_{1,i} exactly. With ≥ 2 non-label
parties the X25519 pairwise masks (:mod:`.masks`) hide each party's share, but the sum over parties, with every
w_m(t) known, is again a linear measurement of the concatenated row: after Σ_m d_m rounds it is solvable. So
against the label party the FEATURES ARE NOT DIFFERENTIALLY PRIVATE in this protocol: the feature-side ε the report
gives covers the backward releases only, and the report's feature side says ε = ∞ with this reason. A forward
pass under encryption (the score sum never decrypted, e.g. FATE's Taylor-approximated loss with the scores
encrypted under a non-label party's key) is what would close it. The labels ARE protected (label side above):
party m sees ciphertexts under the label party's key (IND-CPA) and γ_m only.

Threat model, per message field (who sees it, what it reveals):
- ``Start.public_key`` (label → m): public. Checked: OU, 2048-bit modulus.
- ``Hello.mask_key`` (m → all via coordinator): public X25519 key. A coordinator that substitutes keys
  (man in the middle) can unmask every party's share: check keys out of band.
- ``Forward.gradient`` (label → m): γ_m, label-DP (above). ``Forward.peers``: public keys. ``Forward.final``: no data.
- ``Scores.values`` (m → label): with ≥ 2 non-label parties uniform on Z/2^64 alone, their sum = Σ_m s_m (NOT
  protected, above); with one, s_1 in the clear (NOT protected).
- ``Backward.residuals`` (label → m): Enc(ĝ) under the label party's key: reveals nothing to m without the key.
- ``EncryptedGradient.ciphertexts`` (m → label): Enc(D̂_mᵀĝ + ξ_m), re-randomised: decrypts to a feature-DP value
  (honest label party), nothing about which rows were summed.
A hostile coordinator (the label party's side here) may: send a key it controls (the party can only check its
type and size); send residuals out of range (above); reorder or repeat messages (the party refuses any order but
Start, Forward/Backward alternating, final Forward; a Backward beyond the declared T is refused, and the price is
set at Setup).
"""

from __future__ import annotations

from ...protocol import Protocol
from ..vertical_data import describe_party_data, load_party_data
from . import party as ep
from .policy import ENCRYPTED

NAME = "vertical-encrypted"

PROTOCOL = Protocol(NAME, ep.setup_party, ep.step, None, handlers={"logit": ep.logit}, types=ep.MESSAGE_TYPES, load=load_party_data,
                    describe=describe_party_data, model=ep.model, private=ep.is_private, data_args=(1, 2),
                    policy=ENCRYPTED)
