"""``vertical-encrypted``: vertical logistic regression learned jointly, gradients under encryption, released
with differential privacy on both sides. Two forward passes: ``forward="encrypted"`` (any number of non-label
parties; the label party never sees a per-row score, of one party or of their sum; features DP against an
honest-but-curious label party) and
``forward="clear"`` (any number of parties, the exact logistic loss; per-row score SUMS reach the label party, so
the features are NOT protected — refused by a party in private work).

Problem. Rows i = 1..n are split by columns: the label party (party1) holds ``A₀`` (its block clipped at R₀ plus an
intercept column R₀, rows of norm ≤ √2R₀) and the labels ``y ∈ {0, 1}``; party m holds ``D_m`` clipped at R_m.
Every block is quantised toward zero on a 2^-16 grid (``D̂``; norms only shrink). Model: ``s_i = a₀ᵢ·w₀ +
Σ_m d̂_{m,i}·w_m``, ``min (1/n) Σ_i ℓ(s_i, y_i) + (λ/2) Σ ‖w‖²`` by T rounds (declared) of heavy-ball gradient
descent, ``v ← μv + (γ/n + λw)``, ``w ← Π_W(w − step·v)``, each party on its own block from its released gradient γ.

forward="clear" (ℓ = logistic, residual g = σ(s) − y ∈ (−1, 1)):
  forward   s_m = D̂_m w_m                            party m → label party, pairwise-masked (``Scores.values``)
  residual  ĝ = round(2^24 g)                         label party, encrypted under ITS OU key (``Backward``)
  backward  Enc(D̂_mᵀĝ + ξ_m), ξ_m ~ N(0, (z_f·2R_m)²)   party m, homomorphically; the noise added as a fresh
            encryption, which re-randomises (``EncryptedGradient``)
  open      γ_m = D̂_mᵀĝ + ξ_m + η_m, η ~ N(0, (z_L Δ_L)²)   label party decrypts ONLY d_m values, returns γ_m
  own       γ₀ = A₀ᵀĝ + η₀

forward="encrypted" (one non-label party m; FATE's Taylor residual g = ½ + s/4 − y, i.e. ℓ replaced by its
second-order expansion at s = 0; weights projected on ‖w_m‖ ≤ W, ‖w₀‖ ≤ W₀):
  forward   Enc_m(round(2^24 s_m)) under party m's OWN key  party m → label party (``Scores.ciphertexts``)
  residual  Enc_0(ĝ₀), ĝ₀ = round(2^24 (½ + s₀/4 − y))     label party → m (``Backward.residuals``)
  cross     Enc_m(Â₀ᵀ s_m + r), r uniform on Z_n fresh      label party → m (``Backward.cross``), computed on the
            encrypted scores (m's key is Paillier, n public); m decrypts ONLY d₀ + 1 values, adds
            ζ ~ N(0, (z_f Δ_Y)²), returns mod n (``EncryptedGradient.cross``); the label party removes r mod n
  backward  Enc_0(D̂_mᵀ(ĝ₀ + s_m/4) + ξ_m)                 party m: the Taylor residual's own part in the clear
  open      γ_m = D̂_mᵀg + ξ_m + η_m as above;  γ₀ = A₀ᵀĝ₀ + η₀ + (A₀ᵀs_m + ζ)/4
  calibrate after the fit, on held-out rows (not training rows), party m's logits on them requested as NEW records
            (``logit``): the label party's final model (:mod:`.combine`) — its OWN model (its columns, exact
            labels; it never leaves it) plus those logits with one non-negative weight fitted there, or stacked
            with it if better by cross-validation there — and either only if it beats its own model alone in that
            cross-validation, at every size; or (``combine="joint"``) a two-parameter logistic fit a·s + b of the
            joint score.
            Post-processing at the label party: nothing is sent, no ε on either side (a warm start from its own
            model would not be: :mod:`.combine`)

forward="encrypted" with M ≥ 2 non-label parties (``peers``; one more message per round, ``Open``). The Taylor
residual is ``g = ĝ₀ + Σ_k s_k/4``; party m's gradient needs ``D̂_mᵀs_k`` for every peer k, which neither m (s_k is
k's) nor the label party may read. Per round, for every party m:
  forward   Enc_m(s_m) under m's OWN key, m → label party (``Scores.ciphertexts``), relayed by the label party to
            every peer k (``Backward.peer_scores``: k cannot decrypt it either)
  cross     Enc_m(A₀ᵀs_m + r_m) as with one party (``Backward.cross``), opened by m with ζ_m (release Y)
  peer      m computes, for every peer k, Enc_k(D̂_mᵀs_k + ρ_mk + λ_mk), ρ_mk uniform < 2^128 and λ_mk uniform on
            Z_n_k from m's CSPRNG (``EncryptedGradient.peer_cross``), relayed to k (``Open.peer_cross``); λ_mk goes
            to the label party (``EncryptedGradient.peer_offsets``); k decrypts ONLY d_m values, adds
            ζ_km ~ N(0, (z_k Δ_Z)²), Δ_Z = 2R_m·R_kW_k (release Z of k's data), returns (D̂_mᵀs_k + ρ_mk + λ_mk +
            ζ_km) mod n_k to the label party (``Opened.values[m]``), which removes λ_mk mod n_k
  backward  Enc_0(4(D̂_mᵀĝ₀ + ξ_m) + D̂_mᵀs_m − Σ_k ρ_mk) (``EncryptedGradient.ciphertexts``, the residual at 4×
            scale; the ρ's hide it until combined)
  open      the label party adds every peer's opened values to its decryption and reduces mod 2^128 (the ρ's cancel;
            the true value is far below 2^127): 4D̂_mᵀg + 4ξ_m + Σ_k ζ_km; γ_m = that/4 + η_m
  own       γ₀ = A₀ᵀĝ₀ + η₀ + Σ_m (A₀ᵀs_m + ζ_m)/4
G (every party's residual bound) is ``½ + (√2R₀W₀ + Σ_all R_kW_k)/4``; each party prices 2 + (M − 1) releases per
round (X, Y and one Z per peer), from its peers' public (R_k, W_k, d_k) declared at Setup.

Symbols → code: R_m ``PartyConfig.R``; R₀ ``label_R`` / ``LabelConfig.R``; W, W₀ ``W``, ``label_W``; z_f
``PartyConfig.noise_multiplier``; z_L ``LabelConfig.noise_multiplier``; Δ_L ``LabelConfig.sensitivity``;
Δ_X ``PartyConfig.sensitivity``; Δ_Y ``PartyConfig.cross_sensitivity``; G ``PartyConfig.residual_bound``;
T ``rounds``; μ ``momentum``; fixed point ``RESIDUAL_BITS`` = 24, ``BLOCK_BITS`` = 16, ``masks.SCORE_BITS`` = 24.

Feature side (proof; relation: replace one row i of party m's block). Given everything the label party saw before
round t, the weights are fixed: w₀ moves on γ₀ (its own view), w_m on γ_m = its decryption plus its own η_m. So
only row i's own terms change: (X) ``D̂ᵀg`` moves by ``d̂ᵢgᵢ − d̂'ᵢg'ᵢ``, norm ≤ 2R_m·G with |g| ≤ G — G = 1 for the
logistic residual; for the Taylor residual ``G = ½ + (√2R₀W₀ + R_mW)/4`` because |s₀| ≤ √2R₀W₀ and |s_m| ≤ R_mW
by the projections; (Y) ``A₀ᵀs_m`` moves by ``a₀ᵢ(s_{m,i} − s'_{m,i})``, norm ≤ √2R₀·2R_mW = Δ_Y. Each is a
Gaussian mechanism with multiplier z_f: one GaussianRelease per round (clear), two (encrypted); T or 2T releases
compose by PLD, z_f calibrated from ε_f by :func:`dpadmm.privacy.accountants.calibrate_noise_multiplier` over
exactly that count (the party prices the same count at Setup). Premises and where they hold: row clips and
quantisation toward zero (:func:`.party.setup_party`, :func:`.label.prepare`); the projections (``party.update``);
|ĝ₀| within G and Â₀ the label party's clipped block — computed by the LABEL party under encryption, which party m
cannot check: the feature guarantee holds against an honest-but-curious label party (one that encrypts ``10^6·e_i``
as a residual, or asks for the cross sums of another linear map, reads row i from the answer; no range proofs
here; docs/research/encrypted-premises.md costs the published ways to remove the premise). So the guarantee is
stated "against an honest-but-curious label party" in every privacy line and in metrics.json
(``privacy.features.against``), and a party with private work serves the run only if its operator accepted the
premise (policy ``accept_premises``, ``party serve --accept-premise honest-label-party``; :mod:`.policy`).
Circuit privacy: every ciphertext a party returns carries a fresh encryption (randomness uniform), so it says
nothing about which rows were summed. Masks (issue 35): the masked cross sums are EXACTLY uniform on Z_n for party
m whatever it encrypted as scores — its key is Paillier with a public n and r is uniform on Z_n (the one-time pad,
proved in :mod:`.he`). Masks below 2^128 on an OU key (the protocol before) hid nothing above 2^128: a party that
encrypted 2^160·e_i as a score read row i of Â₀ from the top bits (tests/protocols/test_encrypted_masks.py).

With M ≥ 2 (replace row i of party k): X_k and Y_k as above (G now bounds the whole Taylor residual); party m's
combined gradient moves through ``D̂_mᵀs_k`` by ``d̂_m,i(s_k,i − s'_k,i)``, norm ≤ R_m·2R_kW_k = Δ_Z, which k's own
ζ_km covers (release Z; m's ξ_m adds noise the accountant does not count). What the label party decrypts of m's
reply alone is masked by the ρ's; it learns only the combination. If party m colludes with the label party they
learn ``D̂_mᵀs_k + ζ_km``: still release Z. k decrypts ``D̂_mᵀs_k + ρ_mk + λ_mk``: uniform on Z_n_k to it,
whatever k encrypted as its scores (λ_mk uniform on Z_n_k). Premise (``honest-peers``, accepted by k's operator
like the label party's): Δ_Z assumes m applies its clipped block D̂_m; a peer m that applies another linear map
(``c·e_iᵀ`` with c ≫ R_m) gets k's score s_k,i back through its own gradient with ζ_km negligible against it —
no mask prevents that, only a proof that m's map is its clipped block (docs/research/encrypted-premises.md).

Label side (proof; relation: one label changes). ``label_mechanism="rr"`` (the default): before the first round
the label party draws randomized response on its training labels once, from its own entropy
(:func:`dpadmm.algorithms.vertical.label.randomized_response`: pure ε, proof there), and computes every residual
from those labels ỹ only (:func:`.label.setup_label`). Every message it sends — Enc_0(ĝ), the cross sums, the
γ_m it decrypts — is a function of ỹ, its own block, its own coins and what the other parties sent, so anything any
party (or all of them, colluding) derives from the run is post-processing of the one release, whatever it computes:
no premise on the other parties (a party that answers with a packed linear map of ĝ reads ỹ, right about y with
probability e^ε/(1 + e^ε); ``tests/protocols/test_encrypted_labels.py``). One ``PureDPRelease``, δ = 0; a resumed
run restores ỹ from the label party's checkpoint (no second draw). The label party's calibration and final model
use the exact labels of its held-out rows and stay with it (:mod:`.combine`).
``label_mechanism="gaussian"`` (exact labels): one label moves one residual by exactly 1 (both residuals are
affine in y with slope −1) and every block's column sums by that row: ``Δ_L = √(2R₀² + Σ_m R_m²)``; the cross sums
do not involve y. The η's are one Gaussian mechanism per round on all blocks jointly (colluding parties covered),
T rounds, PLD. Premise, named in its privacy line: party m computes D̂_mᵀĝ on its clipped block (a party
answering with another linear map of ĝ, e.g. two residuals packed per value at 2^60 and 2^30, reads every residual
it packed through the bound; the label party decrypts only d_m values per party but cannot check which map
produced them). Party m sees Enc_0(ĝ₀) (IND-CPA), γ_m, and the masked cross sums.

forward="clear" leaks the features, stated plainly. The label party learns ``S_i(t) = Σ_m d̂_{m,i}·w_m(t)`` for
every training row and round, un-noised, with weights it knows (they move on its own view): after Σ_m d_m rounds
of linearly independent weights it can solve for every row. The pairwise masks only hide which party contributed
what. The reports give features ε = ∞ there (the backward releases' ε beside it).

Threat model, per message field (who sees it, what it reveals):
- ``Start.public_key`` (label → m): public; checked OU with a 2048-bit modulus.
- ``Hello.mask_key`` (m → all via coordinator): public X25519 key (clear mode, ≥ 2 parties); a coordinator that
  substitutes keys can unmask each share: check keys out of band. ``Hello.public_key``: m's Paillier public key (encrypted; checked: Paillier, n of ≥ 2048 bits).
- ``Forward.gradient`` (label → m): γ_m, label-DP (randomized response: post-processing of ỹ, whatever m sent). ``Forward.peers``: public keys. ``Forward.final``: no data.
- ``Scores.values`` (clear): one party's share uniform on Z/2^64, their sum Σ_m s_m NOT protected (above).
  ``Scores.ciphertexts`` (encrypted): Enc_m(s_m), unreadable by the label party.
- ``Backward.residuals``: Enc_0(ĝ) / Enc_0(ĝ₀): nothing to m. ``Backward.cross``: Enc_m(A₀ᵀs_m + r): after
  decryption uniform on Z_n to m, whatever m encrypted as s_m (r uniform on m's public Z_n). ``Backward.peer_scores`` (M ≥ 2): Enc_k(s_k) under peer k's key: nothing
  to m (IND-CPA) nor to the label party that relays it.
- ``Forward.keys`` (M ≥ 2, first Forward): the peers' OU public keys, relayed by the label party (checked: OU, 2048
  bits). A label party that substitutes a key it holds for peer k's and relays ciphertexts of its own choosing as
  k's scores (e.g. of 10^6·e_i) reads party m's rows from the combined gradient: the premise of release X (an
  honest-but-curious label party, as for the residuals' range); check the keys out of band, as the mask keys.
- ``EncryptedGradient.peer_cross`` / ``Open.peer_cross`` (M ≥ 2): Enc_k(D̂_mᵀs_k + ρ_mk + λ_mk): to k after
  decryption uniform on Z_n_k whatever k encrypted (λ_mk). ``EncryptedGradient.peer_offsets``: λ_mk, to the label
  party (independent of every datum). ``Opened.values``: (D̂_mᵀs_k + ρ_mk + λ_mk + ζ_km) mod n_k: less λ_mk,
  masked by ρ_mk to the label party alone; with the ρ's cancelled inside m's combined gradient, release Z of k's
  data.
- ``EncryptedGradient.ciphertexts``: decrypts to the feature-DP release (X) (M ≥ 2: masked by the ρ's until combined
  with the peers' ``Opened`` values: X_m plus every peer's Z). ``EncryptedGradient.cross``: the
  feature-DP release (Y), masked until the label party removes its r.
- ``logit`` (request, after the fit): party m's scores on held-out rows, NEW records (not training rows): outside
  the training guarantee, like any prediction.
Checkpoints (``algorithms.encrypted.driver.run(checkpoint_dir=...)``, at a round's end, when no ciphertext is outstanding):
each party's own checkpoint holds its state — weights, velocity, rounds served, its OWN Paillier key pair and X25519
key (serialised), the public keys it was given — written by its host in its own directory; the label party's
holds its weights, the gradients it owes, the events so far, its own key pair and the parties' public keys. A
secret key is written only to its owner's own checkpoint and never sent; the keys are the run's (made at its
start, restored by their owners on resume), so a resumed seeded run gives the same numbers.

A hostile coordinator (here the label party's side) may: send a key it controls (the party checks type and size);
send residuals or cross sums out of the declared range (the premises above); reorder or repeat messages (the party
refuses any order but Start, Forward/Backward alternating, final Forward, refuses a Backward beyond the declared T,
and decrypts only the declared number of values); the price is fixed at Setup.
"""

from __future__ import annotations

from ...protocol import ExemptMessage, Protocol
from ...protocol.registry import register
from ..vertical.data import describe_party_data, load_party_data
from . import party as ep
from .messages import Setup
from .policy import ENCRYPTED

NAME = "vertical-encrypted"

#: the messages party m sends with no privacy event (a budgeted party serves them; anything else without one is refused)
EXEMPT = (
    ExemptMessage(ep.Hello, "public keys (X25519 mask key, the party's own Paillier public key); no value of its data"),
    ExemptMessage(ep.Scores, "Enc_m(s_m): ciphertexts under the party's OWN key, unreadable by the label party "
                  "(the clear form's masked score sums are not covered and stay refused)", fields=("ciphertexts",)),
)

PROTOCOL = register(Protocol(NAME, ep.setup_party, ep.step, None, handlers={"logit": ep.logit}, types=ep.MESSAGE_TYPES + (ep.PartyState,), load=load_party_data,
                    describe=describe_party_data, model=ep.model, private=ep.is_private, data_fields=("train", "score"),
                    policy=ENCRYPTED, exempt=EXEMPT, setup_type=Setup))
