"""Vertical (feature-partitioned) ADMM sharing with Gaussian DP — [Hu, eq. 6–8, 16, Alg. 1].

Problem [Hu, eq. 1]: ``min_x Σ_i ℓ(Σ_m D_m^i x_m, Y_i) + λ_s Σ_m R_m(x_m)`` with ``z = Σ_m D_m x_m``.
The library's user-facing objective is the *mean* loss plus ``λ R`` (scikit-learn's scaling);
internally we use the paper's summed scaling, ``λ_s = N λ``, so that ρ has the paper's meaning
and the sensitivity of [Hu, Lemma 1] is computed in the paper's own units.

Iteration t (``s̃ = Σ_k D_k x̃_k``, the sum of the *shared* — possibly noisy — partial scores):

- party m  [Hu, eq. 6]: ``x_m ← argmin λ_s R_m(x) + ⟨y, D_m x⟩ + ρ/2 ‖c_m + D_m x‖²`` with
  ``c_m = s̃ − z − D_m x̃_m`` (the party subtracts its cached share, [Hu, Alg. 1, line 4]).
  For R = ½‖·‖²: ``(λ_s I + ρ D_mᵀD_m) x = −D_mᵀ(y + ρ c_m)``, solved through one
  eigendecomposition of D_mᵀD_m computed at setup (narrow blocks) or by warm-started
  preconditioned conjugate gradients with D_m and D_mᵀ only (wide or sparse blocks; see
  :mod:`dpadmm.kernels.linalg`). Non-smooth R: FISTA on the same quadratic.
- DP, feature side, two mechanisms (``PrivacySpec.mechanism``):

  * ``"gaussian"`` (the default for private fits): the party clips what it receives
    (``v = y + ρ c_m``, ``‖v‖ ≤ V``, and ``|v_i| ≤ V_∞`` for the record relation), solves the ridge
    x-step exactly (no projection, no damping) and releases ``D_m x_m + N(0, σ² I_N)``: isotropic
    noise on the whole N-vector. Sensitivity per relation (one feature column of party m, or one
    record of party m), proved in :mod:`dpadmm.privacy.mechanisms` and enforced by the clipping.
  * ``"paper"``: [Hu, eq. 16] as published, ``D_m x_m + σ U_m g`` (``U_m`` an orthonormal basis of
    range(D_m)). Kept to reproduce the paper only: every release lies in range(D_m), a subspace that
    depends on the private data, so it is not DP for any δ < 1 (docs/algorithms.md §1 erratum); reports give ε = ∞.

- DP, label side: beyond the paper, in :mod:`dpadmm.algorithms.vertical.label` (the label party's
  mechanisms, its exact refit and its choice against its own model). Party-side data (reading a
  party's own file, bounding its rows): :mod:`dpadmm.algorithms.vertical.data`.

Auditing (for ``dpadmm audit --end-to-end``): :func:`dpadmm.estimators.vertical_audit.audit_fit` runs a
whole private fit on a small instance (these step functions, through the engine) and returns exactly
what the adversary of the chosen side sees, with the ε the fit reports::

    from dpadmm.estimators.vertical_audit import audit_fit
    view, eps = audit_fit([B1, B2], y, side="feature", relation="record", epsilon=1.0, max_iter=3, seed=k)
    view, eps = audit_fit([B1, B2], y_flipped, side="label", epsilon=1.0, seed=k)

| symbol | code |
|--------|------|
| D_m | ``PartyConfig.D`` |
| x_m | ``PartyState.x`` |
| D_m x̃_m | ``PartyState.share`` / ``PartyMessage.share`` |
| z, y | ``CoordinatorState.z``, ``CoordinatorState.dual`` |
| ρ | ``CoordinatorState.rho`` |
| λ_s = Nλ | ``PartyConfig.lam_sum`` |
| b_1 | ``Bounds(x, y, z)`` (projection radii enforcing [Hu, Assumption 2.1]) |
"""

from __future__ import annotations

import dataclasses
import numpy as np
import scipy.sparse as sp

from ...exceptions import PrivacyPreconditionError
from ...kernels.linalg import CGSolver, make_solver
from ...kernels.norms import safe_norm
from ...kernels.regularizers import soft_threshold
from ...privacy.events import FEATURE_COLUMN, GaussianRelease
from ...protocol.spec import check_setup
from ...privacy.mechanisms import (
    clip_share_input, hu_sensitivity, isotropic_gaussian, range_gaussian, ridge_share_sensitivity,
)
from .data import _local, clip_rows
from .messages import (  # noqa: F401  (the records, re-exported for the party's readers)
    MECHANISMS, RELATIONS, Bounds, CoordinatorMessage, PartyConfig, PartyMessage, PartyState, PrivacySpec,
    VerticalOptions,
)

# ----------------------------------------------------------------------------- party
def make_party(name, D, *, lam_sum, reg, private: PrivacySpec | None = None, bound=None,
               eval_blocks=None, damping: float = 0.0, solver: str = "auto",
               cg_reduction: float = 0.3) -> tuple[PartyConfig, PartyState]:
    """Set up party m: its x-step solver (once), the range basis if the mechanism needs it.

    Blocks with at most 25% non-zeros (a9a's one-hot blocks hold ~11%) are stored as CSR, so
    the matrix-vector products per iteration cost O(nnz) instead of O(N d_m); a sparse block is
    never densified unless it is denser than that.

    ``solver``: ``"eigh"`` factors D_mᵀD_m once (exact; O(d_m³) setup, O(d_m²) per solve),
    ``"cg"`` runs warm-started Jacobi-preconditioned conjugate gradients with D_m and D_mᵀ only
    (no d_m × d_m matrix), ``"auto"`` = eigh iff d_m ≤ :data:`dpadmm.kernels.linalg.EIGH_MAX_DIM`
    (2,048; 512 for a sparse block).
    ``cg_reduction`` > 0 makes the cg x-steps inexact (each solve stops once it reduced the
    warm-start residual by that factor, or at relative accuracy 1e-10); private parties always
    solve to 1e-10, since their sensitivity bound is about the exact x-step.
    """
    D = as_operator(D)
    DT = D.T  # a view (CSR -> CSC): D_mᵀu at the same O(nnz) cost, no second copy of the block
    reduction = 0.0 if private is not None else float(cg_reduction)
    x_solver = make_solver(D, solver, DT=DT, tol=1e-10, reduction=reduction)
    basis = x_solver.range_basis(D) if private is not None and private.mechanism == "paper" else None
    cfg = PartyConfig(name=name, D=D, DT=DT, solver=x_solver, lam_sum=float(lam_sum), reg=reg, basis=basis,
                      privacy=private, bound=bound, eval_blocks=dict(eval_blocks or {}),
                      damping=float(damping))
    return cfg, PartyState(x=np.zeros(D.shape[1]), share=np.zeros(D.shape[0]))


def as_operator(D, max_density: float = 0.25):
    """Dense float64 array with unit column stride (C-contiguous, or a column view of a C-ordered table), or CSR
    when the block is sparse enough to pay off.

    Sparse input stays sparse (no copy when it already is float64 CSR) unless it is denser than
    ``max_density`` *and* small enough that the dense copy costs at most 64 MB.
    """
    if sp.issparse(D):
        D = sp.csr_matrix(D) if not isinstance(D, sp.csr_matrix) else D
        if D.dtype != np.float64:
            D = D.astype(np.float64)
        dense_bytes = 8 * D.shape[0] * D.shape[1]
        if D.nnz > max_density * D.shape[0] * D.shape[1] and dense_bytes <= 64 * 2**20:
            return np.ascontiguousarray(D.toarray())
        return D
    D = np.asarray(D, dtype=np.float64)
    if not (D.strides[1] == 8 and D.strides[0] >= 8 * D.shape[1]):  # a column view of a C-ordered table stays
        D = np.ascontiguousarray(D)  # a view (BLAS reads it as is at the same speed): no copy of every party's block
    if np.count_nonzero(D) <= max_density * D.size:
        return sp.csr_matrix(D)
    return D


def _solve_x(cfg: PartyConfig, q: np.ndarray, rho: float, x0: np.ndarray,
             Dx0: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(x, D_m x)`` with x = argmin λ_s R(x) + qᵀx + ρ/2 xᵀGx, q = D_mᵀ(y + ρ c_m) [Hu, eq. 6].

    Smooth R: one linear solve with the party's solver; ``cg`` warm-starts at x0 (``Dx0`` = D_m x0
    saves it a product when the caller knows it) and returns D_m x at no extra product.
    Non-smooth R (l1 / elastic net): FISTA, each inner step one ``G w`` product (O(d²) with
    ``eigh``'s stored Gram matrix, O(nnz) with ``cg``).
    """
    reg = cfg.reg
    solver = cfg.solver
    l2 = 0.0 if reg is None else cfg.lam_sum * reg.l2_weight  # reg None: unpenalised block
    if reg is None or reg.smooth:
        if isinstance(solver, CGSolver):
            return solver.solve_image(-q, l2, rho, x0, Dx0)
        x = solver.solve(-q, l2, rho, x0)
        return x, cfg.D @ x
    L = rho * solver.lipschitz + l2
    thr = cfg.lam_sum * reg.l1_weight / L
    x = x0.copy()
    w = x.copy()
    tk = 1.0
    for _ in range(cfg.inner_max_iter):
        grad = q + rho * solver.gram_matvec(w) + l2 * w
        v = w - grad / L
        x_new = soft_threshold(v, thr)
        t_new = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * tk * tk))
        w = x_new + ((tk - 1.0) / t_new) * (x_new - x)
        done = np.linalg.norm(x_new - x) <= cfg.inner_tol * (1.0 + np.linalg.norm(x_new))
        x, tk = x_new, t_new
        if done:
            break
    return x, cfg.D @ x


def sensitivity(cfg: PartyConfig, rho: float, v: np.ndarray | None = None) -> float:
    """Sensitivity of this party's share at the current ρ: the proved bound of the gaussian
    mechanism for its relation, or [Hu, Lemma 1] as published for ``mechanism="paper"``.

    ``v`` (gaussian): the clipped vector the party received this round. The bounds are proved for
    any ``‖v‖ ≤ V``, ``‖v‖_∞ ≤ V_∞``; v is a function of the transcript alone, so its own norms are
    valid (and public) values of V and V_∞ — the noise then scales with what the party actually
    received (zero for the all-zero first inbox, whose share 0 does not depend on the data).
    Without ``v``: the clip bounds. Enforced here: V = 0 only for a v that is exactly 0, else
    ``V = min(clip, max(‖v‖, 1e-12·clip))`` with an underflow-free ‖v‖ (any V ≥ ‖v‖ is valid; the floor
    keeps σ a normal float: a v of entries 1e-200 got V = 0 and an un-noised, uncharged release,
    REDTEAM_POLICY R1); the party refuses to send a non-zero share charged at sensitivity 0
    (``PartyService._step``).
    """
    p = cfg.privacy
    if p.mechanism == "gaussian":
        V, V_inf = p.clip, p.clip_inf
        if v is not None:
            zero = not np.any(v)
            V = 0.0 if zero else min(V, max(float(safe_norm(v)), 1e-12 * V))
            if V_inf is not None:
                V_inf = 0.0 if zero else min(V_inf, max(float(np.max(np.abs(v))), 1e-12 * V_inf))
        return ridge_share_sensitivity(relation=p.relation, V=V, lam_sum=cfg.lam_sum, rho=rho,
                                       V_inf=V_inf, column_change=p.column_change)
    b = p.bounds
    return hu_sensitivity(d_m=cfg.D.shape[1], rho=rho, lam=cfg.lam_sum, c1=p.c1, n_parties=p.n_parties,
                          b_x=b.x, b_y=b.y, b_z=b.z)


def party_step(cfg: PartyConfig, state: PartyState, inbox: CoordinatorMessage, *, rng: np.random.Generator):
    """One x-update of party m [Hu, eq. 6] and its (noisy) share [Hu, eq. 16]."""
    rho = inbox.rho
    c = inbox.residual - state.share  # Σ_{k≠m} D_k x̃_k − z   [Hu, Alg. 1, line 4]
    v = inbox.dual + rho * c  # a function of the transcript only (state.share is the released share)
    p = cfg.privacy
    gaussian = p is not None and p.mechanism == "gaussian"
    if gaussian:  # enforce ‖v‖ ≤ V (and |v_i| ≤ V_∞ for the record relation): premise of the sensitivity
        v = clip_share_input(v, p.clip, p.clip_inf if p.relation == "record" else None)
    rho_x = rho
    exact_share = cfg.privacy is None  # then state.share is D_m x_m itself (no noise)
    if cfg.damping:
        # proximal Jacobi (beyond the paper): + (τ/2)‖D_m(x − x_m^t)‖², τ = damping·ρ. Stabilises the
        # parallel x-updates when party ranges overlap (a9a: every one-hot block spans the ones vector).
        tau = cfg.damping * rho
        v = v - tau * (state.share if exact_share else cfg.D @ state.x)  # q gains −τ D_mᵀD_m x_m^t
        rho_x = rho + tau
    q = cfg.DT @ v
    x, Dx = _solve_x(cfg, q, rho_x, state.x, state.share if exact_share else None)
    r = cfg.bound
    if not gaussian and r is not None and np.linalg.norm(x) > r:  # the paper's Assumption 2.1 projection (_project),
        scale = r / float(np.linalg.norm(x))                         # with D_m x scaled alike; gaussian needs none
        x, Dx = x * scale, Dx * scale
    share, events = release(cfg, Dx, rho, inbox.round, rng=rng, v=v if gaussian else None)
    return PartyState(x=x, share=share), PartyMessage(share=share), events


def release(cfg: PartyConfig, share: np.ndarray, rho: float, round_: int, *, rng: np.random.Generator, size=None,
            v: np.ndarray | None = None):
    """Release the share: ``D_m x_m + N(0, σ² I_N)`` (``"gaussian"``) or [Hu, eq. 16]'s
    ``D_m x_m + σ U_m g`` (``"paper"``), with σ = noise multiplier × C(ρ) (or the raw noise scale).

    Returns the released share(s) and the privacy events. ``size`` draws that many independent
    releases of the same share at once (shape ``(size, N)``) — used by the privacy audit, which
    must exercise exactly this function. The paper's events carry ``PAPER_NOT_DP`` in the report
    (ε = ∞): their noise lives in range(D_m). ``v``: the clipped input of this round (see
    :func:`sensitivity`).
    """
    if cfg.privacy is None:
        return share, []
    C = sensitivity(cfg, rho, v)
    if not C > 0 and np.any(share):  # only an exactly-zero share is data-independent (REDTEAM_POLICY R1)
        raise PrivacyPreconditionError(f"party {cfg.name!r}: a non-zero share at sensitivity {C}; nothing released")
    p = cfg.privacy
    sigma = p.noise_scale if p.noise_scale is not None else p.noise_multiplier * C
    if p.mechanism == "gaussian":
        noise = isotropic_gaussian(rng, sigma, share.shape[-1], size=size)
        relation, kind = RELATIONS[p.relation], "gaussian"
    else:
        noise = range_gaussian(rng, sigma, cfg.basis, size=size)  # [Hu, eq. 16]
        relation, kind = FEATURE_COLUMN, "range-gaussian"  # not DP: a party's own budget counts it as ε = ∞
    return share + noise, [GaussianRelease(cfg.name, round_, C, sigma, relation, kind)]


def party_diagnostics(cfg: PartyConfig, state: PartyState) -> dict:
    """Monitoring values (not protocol messages): R(x_m), the true D_m x_m and eval-set scores."""
    return {
        "reg": 0.0 if cfg.reg is None else cfg.reg.value(state.x),
        # without privacy the share is D_m x_m itself (the x-step's own product): no second pass over the block
        "train_score": state.share if cfg.privacy is None else cfg.D @ state.x,
        "eval_scores": {k: B @ state.x for k, B in cfg.eval_blocks.items()},
    }


def partial_score(cfg: PartyConfig, state: PartyState, X_block: np.ndarray) -> np.ndarray:
    """Distributed prediction: party m's contribution ``X_m x_m`` to the score."""
    return X_block @ state.x


def party_rank(cfg: PartyConfig, state: PartyState) -> tuple[int, int]:
    """(numerical rank, column count) of the party's block."""
    return cfg.solver.rank, cfg.D.shape[1]


def party_coef(cfg: PartyConfig, state: PartyState) -> np.ndarray:
    """The party's local model x_m (stays at the party; exposed for the simulation API)."""
    return state.x.copy()


# ----------------------------------------------------------------------------- party setup and protocol
def setup_party(name: str, D, options: VerticalOptions):
    """Worker-side setup (``PartySpec.setup``): build the party from its own block.

    ``options``: the run's typed constants (:class:`.messages.VerticalOptions`; a field mapping is built into the record
    by name). ``D`` (and every eval block) may be a source with ``.load()``, read here — inside the party's
    worker — so the driver never holds the features. ``options.require_unit_rows`` (set for
    private fits on such sources) checks [Hu, Assumption 2.3] at the party.
    """
    o = options if isinstance(options, VerticalOptions) else check_setup(VerticalOptions, options)
    D = _local(D)
    private = o.private
    if private is not None and private.mechanism == "gaussian":
        D = clip_rows(D)  # ‖d_k‖ ≤ 1: premise of the record-relation sensitivity, enforced here
    eval_blocks = {k: _local(B) for k, B in o.eval_blocks.items()} if o.eval_blocks else {}
    if o.require_unit_rows:
        norms = np.sqrt(np.asarray(D.multiply(D).sum(axis=1)).ravel()) if sp.issparse(D) else np.linalg.norm(D, axis=1)
        if np.any(np.abs(norms[norms > 0] - 1.0) > 1e-6):
                raise PrivacyPreconditionError(
                f"rows of {name} are not unit-norm (max ||row||_2 = {norms.max():.4g}), which [Hu, Assumption 2.3] "
                "needs; normalise them (--normalize-rows) before a private fit.")
    cfg, state = make_party(name, D, lam_sum=o.lam_sum, reg=o.reg, private=private, bound=o.bound,
                            eval_blocks=eval_blocks, damping=o.damping, solver=o.solver, cg_reduction=o.cg_reduction)
    if o.labels is not None:
        cfg = dataclasses.replace(cfg, labels=np.asarray(o.labels, dtype=np.float64))
    return cfg, state


def eval_score(cfg: PartyConfig, state: PartyState, key: str) -> np.ndarray:
    """Party m's partial score ``X_m x_m`` on its own copy of eval set ``key`` (distributed prediction)."""
    return cfg.eval_blocks[key] @ state.x


def is_private(cfg: PartyConfig) -> bool:
    return cfg.privacy is not None
