"""The end-to-end audit: its statistics are valid bounds, it catches planted bugs in the real fit
paths (a test of the test), and ``dpadmm audit --end-to-end`` runs end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import run_cli, run_cli_once
from dpadmm.privacy.accountants import gaussian_epsilon
from dpadmm.privacy.audit import best_epsilon_lower_bound, epsilon_lower_bound
from dpadmm.privacy.audit_e2e import Subspace, audit_views

# ----------------------------------------------------------------------------- statistics


def test_best_of_statistics_equals_single_statistic_when_only_one():
    rng = np.random.default_rng(0)
    s0, s1 = rng.normal(size=4000), rng.normal(1.0, 1.0, size=4000)
    single = epsilon_lower_bound(s0, s1, 1e-5, n_thresholds=200)
    best = best_epsilon_lower_bound({"a": s0}, {"a": s1}, 1e-5)
    assert best["statistic"] == "a"
    assert best["epsilon_lower_bound"] == pytest.approx(single["epsilon_lower_bound"])


def test_best_of_statistics_ignores_useless_ones_and_stays_valid():
    """Noise statistics offered beside the informative one: the pilot picks the informative one, and
    the bound stays below the exact ε of the Gaussian pair."""
    rng = np.random.default_rng(1)
    n, nm = 20_000, 1.0
    s0, s1 = rng.normal(0, nm, n), rng.normal(1, nm, n)
    noise = {f"junk{i}": (rng.normal(size=n), rng.normal(size=n)) for i in range(5)}
    res = best_epsilon_lower_bound({"signal": s0, **{k: v[0] for k, v in noise.items()}},
                                   {"signal": s1, **{k: v[1] for k, v in noise.items()}}, 1e-5)
    assert res["statistic"] == "signal"
    assert 0.3 < res["epsilon_lower_bound"] <= gaussian_epsilon([nm], 1e-5, "pld")


@pytest.mark.parametrize("dim", [1, 12, 40])
def test_audit_views_is_a_valid_bound_for_a_gaussian_mean_shift(dim):
    """Views: isotropic Gaussians whose means differ by a unit vector (unknown to the audit). Every
    statistic is estimated from the runs; the bound must stay below the exact ε and find some signal."""
    rng = np.random.default_rng(dim)
    n, nm = 6000, 0.7
    shift = rng.normal(size=dim)
    shift /= np.linalg.norm(shift)
    V0 = rng.normal(0, nm, (n, dim))
    V1 = rng.normal(0, nm, (n, dim)) + shift
    res = audit_views(V0, V1, delta=1e-5)
    assert res["epsilon_lower_bound"] <= gaussian_epsilon([nm], 1e-5, "pld")
    assert res["epsilon_lower_bound"] > 0.5


def test_identical_views_give_no_evidence():
    rng = np.random.default_rng(3)
    V = rng.normal(size=(4000, 10))
    W = rng.normal(size=(4000, 10))
    assert audit_views(V, W, delta=1e-5)["epsilon_lower_bound"] < 0.2


def test_subspace_statistic_separates_disjoint_supports():
    """Noise confined to a data-dependent subspace ([Hu, eq. 16]'s flaw): the subspace distance wins
    and the bound reaches what the number of runs allows, whatever the noise scale."""
    rng = np.random.default_rng(4)
    N, r, n = 12, 3, 600
    A, B = np.linalg.qr(rng.normal(size=(N, r)))[0], np.linalg.qr(rng.normal(size=(N, r)))[0]
    V0 = 50.0 * rng.normal(size=(n, r)) @ A.T
    V1 = 50.0 * rng.normal(size=(n, r)) @ B.T
    sub = (Subspace("A", np.arange(N)[None, :], A),)
    res = audit_views(V0, V1, delta=1e-5, subspaces=sub)
    assert res["statistic"] == "subspace:A"
    assert res["false_positives"] == 0 and res["false_negatives"] == 0
    assert res["epsilon_lower_bound"] > 4.0


def test_full_covariance_statistic_sees_correlated_noise():
    """Two coordinates carrying the same noise (noise reused): their difference is exact, so the full
    covariance test separates the sides while the diagonal ones cannot."""
    rng = np.random.default_rng(5)
    n = 4000
    g0, g1 = rng.normal(size=n), rng.normal(size=n)
    V0 = np.column_stack([g0, g0])
    V1 = np.column_stack([g1 + 0.05, g1 - 0.05])
    res = audit_views(V0, V1, delta=1e-5)
    assert res["pilot"]["gaussian-lr-full"] > 3.0 > res["pilot"]["mean-difference"]


# ----------------------------------------------------------------------------- the real fits
def test_capture_records_what_parties_send_and_restores_engine():
    from dpadmm import engine
    from dpadmm.experiments import audit_e2e as A

    run = engine.run
    view, report = A._consensus_fit(A._consensus_data(), 3)
    assert engine.run is run
    assert view.shape == (A.CONS_ROUNDS * 2 * A.CONS_D,)
    again, _ = A._consensus_fit(A._consensus_data(), 3)
    other, _ = A._consensus_fit(A._consensus_data(), 4)
    np.testing.assert_array_equal(view, again)  # seeded simulation
    assert not np.allclose(view, other)
    assert report.epsilon > 0


@pytest.mark.slow  # a whole run end to end: CI runs it; the default suite stays under 3 CPU-minutes
def test_planted_bug_patches_are_removed_after_the_row():
    from dpadmm.algorithms.consensus import node as gc
    from dpadmm.experiments import audit_e2e as A
    from dpadmm.kernels import fpca as F

    from dpadmm.algorithms.vertical import party as vs

    before = (gc._noise, gc.block_step, F.clip_rows, vs.clip_share_input)
    A.audit_row(A.consensus_reuse_bug_row(), runs=40)
    A.audit_row(A.functional_bug_row(), runs=40)
    if A._has_gaussian_vertical():
        A.audit_row(A.vertical_clip_bug_row(), runs=40)
    assert (gc._noise, gc.block_step, F.clip_rows, vs.clip_share_input) == before


@pytest.mark.slow  # a whole run end to end: CI runs it; the default suite stays under 3 CPU-minutes
def test_audit_catches_noise_reused_across_rounds_in_the_real_consensus_fit():
    """A tiny default-suite instance of the test of the test: the whole consensus fit with its
    penalty noise drawn once and reused must be caught (lower bound above the reported ε)."""
    from dpadmm.experiments import audit_e2e as A

    r = A.audit_row(A.consensus_reuse_bug_row(), runs=160)
    assert r.broken and r.caught, r.details
    assert r.epsilon_lower_bound > r.epsilon_claimed


@pytest.mark.slow  # a whole run end to end: CI runs it; the default suite stays under 3 CPU-minutes
def test_audit_catches_hu_eq16_as_published():
    from dpadmm.experiments import audit_e2e as A

    r = A.audit_row(A.hu_eq16_paper_row(), runs=160)
    assert r.caught, r.details
    assert r.details["pairs"][0]["statistic"].startswith("subspace:")


def _gaussian_vertical():
    from dpadmm.experiments.audit_e2e import _has_gaussian_vertical

    if not _has_gaussian_vertical():
        pytest.skip("the sound vertical mechanism (mechanism='gaussian', label_epsilon) is not in this build")


@pytest.mark.slow  # 300 fits; the default suite keeps the consensus and [Hu, eq. 16] catches
def test_audit_catches_vertical_input_clipping_skipped():
    """The gaussian share mechanism with the clip of what party 2 receives removed: the model-based
    likelihood ratio (replaying party 2's real step for D and D') must catch it."""
    _gaussian_vertical()
    from dpadmm.experiments import audit_e2e as A

    r = A.audit_row(A.vertical_clip_bug_row(), runs=300)
    assert r.caught, r.details
    assert r.details["pairs"][0]["statistic"] == "model-lr"


@pytest.mark.slow  # 300 fits; the default suite keeps the consensus and [Hu, eq. 16] catches
def test_audit_catches_label_sensitivity_bug():
    _gaussian_vertical()
    from dpadmm.experiments import audit_e2e as A

    r = A.audit_row(A.vertical_label_row(bug=True), runs=300)
    assert r.caught, r.details


@pytest.mark.slow
@pytest.mark.xdist_group("heavy-a")  # CI runs the slow suite on two workers: the longest tests first, split in two
def test_audit_resolves_a_2x_sensitivity_slip_on_the_tight_label_instance():
    """The audit's resolution: on the tight label instance the real row stays below its claim and a
    label sensitivity halved in the calibration is caught (2,000 × 5 runs per dataset)."""
    _gaussian_vertical()
    from dpadmm.experiments import audit_e2e as A

    real = A.audit_row(A.vertical_label_tight_row(), runs=2000)
    bug = A.audit_row(A.vertical_label_tight_row(halved=True), runs=2000)
    assert real.epsilon_lower_bound <= real.epsilon_claimed, real.details
    assert bug.caught, bug.details


def test_quick_leaves_out_the_full_only_rows():
    from dpadmm.experiments import audit_e2e as A

    full, quick = {r.name for r in A.rows()}, {r.name for r in A.rows(quick=True)}
    assert quick <= full
    assert all(not r.full_only for r in A.rows(quick=True))
    assert sum(r.broken for r in A.rows(quick=True)) >= 4


@pytest.mark.slow
def test_real_vertical_rows_pass():
    _gaussian_vertical()
    from dpadmm.experiments import audit_e2e as A

    for row in (A.vertical_feature_row("feature_column"), A.vertical_feature_row("record"), A.vertical_label_row()):
        res = A.audit_row(row, runs=600)
        assert res.epsilon_lower_bound <= res.epsilon_claimed, (res.name, res.details)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["zhang-consensus-pp (planted: noise rate", "zhou-fdp-admm (planted: clipping"])
def test_audit_catches_each_planted_bug(name):
    from dpadmm.experiments import audit_e2e as A

    (res,) = A.run_end_to_end(runs=300, only=[name])
    assert res.broken and res.caught, res.details


@pytest.mark.slow
def test_real_consensus_and_private_basis_functional_fits_pass():
    from dpadmm.experiments import audit_e2e as A

    for res in A.run_end_to_end(runs=600, only=["zhang-consensus-pp", "zhou-fdp-admm-private-basis"]):
        if not res.broken:
            assert res.epsilon_lower_bound <= res.epsilon_claimed, (res.name, res.details)


# ----------------------------------------------------------------------------- CLI
@pytest.mark.slow
@pytest.mark.xdist_group("heavy-b")  # CI runs the slow suite on two workers: the longest tests first, split in two
def test_audit_end_to_end_cli_quick(tmp_path, capsys):
    # the README's command: test_readme_commands runs it too, once for both (conftest.run_cli_once)
    code, stdout, err, written = run_cli_once(["audit", "--end-to-end", "--quick", "--out", tmp_path / "e2e", "--quiet"],
                                              capsys)
    assert code == 0, err
    data = json.loads((written["--out"] / "audit.json").read_text())
    assert data["end_to_end"] is True
    mechs = {m["name"]: m for m in data["mechanisms"]}
    assert {"name", "epsilon_claimed", "epsilon_lower_bound", "broken"} <= set(next(iter(mechs.values())))
    broken = [m for m in mechs.values() if m["broken"]]
    assert len(broken) >= 4 and "hu-eq16-paper" in mechs
    for m in broken:
        assert m["epsilon_lower_bound"] > m["epsilon_claimed"], m["name"]
    algorithms = {m["details"]["algorithm"].split()[0] for m in mechs.values() if not m["broken"]}
    assert len(algorithms) >= 2


def test_audit_end_to_end_cli_one_row(tmp_path, capsys):
    out = tmp_path / "one"
    code, stdout, err = run_cli(["audit", "--end-to-end", "--runs", "120", "--only", "hu-eq16", "--out", out,
                                 "--quiet"], capsys)
    assert code == 0, err
    (row,) = json.loads((out / "audit.json").read_text())["mechanisms"]
    assert row["name"] == "hu-eq16-paper" and row["broken"] and row["verdict"].startswith("CAUGHT")
    assert "hu-eq16-paper" in stdout


@pytest.mark.parametrize("args, message", [
    (["--runs", "5"], "runs must be"),
    (["--only", "no-such-row"], "--only 'no-such-row' matches no audit row"),
])
def test_audit_end_to_end_cli_bad_input(tmp_path, capsys, args, message):
    code, _, err = run_cli(["audit", "--end-to-end", "--out", tmp_path / "x", *args], capsys)
    assert code == 2 and message in err and not (tmp_path / "x").exists()


# ----------------------------------------------------------------------------- exit status; the audit of the audit
ENC_ROW = "worst-case vertical-encrypted[record]"


@pytest.mark.parametrize("plant, code", [("", 0), ("noise=0.3", 1)], ids=["honest", "noise x0.3"])
def test_audit_exits_1_when_an_honest_row_exceeds_its_claim(tmp_path, capsys, plant, code):
    """The hidden ``--plant noise=0.3`` multiplies every noise draw of the game by 0.3 (the ledger unchanged): the
    honest row is then a VIOLATION and the exit status 1, audit.json written all the same; unplanted, exit 0."""
    out = tmp_path / "a"
    args = ["audit", "--end-to-end", "--runs", "40", "--only", ENC_ROW, "--out", out, "--quiet"]
    rc, stdout, err = run_cli(args + (["--plant", plant] if plant else []), capsys)
    (row,) = json.loads((out / "audit.json").read_text())["mechanisms"]
    assert rc == code and (row["verdict"] == "VIOLATION") == bool(code), (rc, row["verdict"], err)
    assert ("honest row(s) above the claimed epsilon: " + ENC_ROW in err) == bool(code)


@pytest.mark.parametrize("args, message", [
    (["--plant", "noise=-1"], "--plant 'noise=-1' is not understood"),
    (["--plant", "twice"], "--plant 'twice' is not understood"),
])
def test_audit_plant_bad_input(tmp_path, capsys, args, message):
    code, _, err = run_cli(["audit", "--end-to-end", "--out", tmp_path / "x", *args], capsys)
    assert code == 2 and message in err and not (tmp_path / "x").exists()


@pytest.mark.slow  # the whole --quick audit (CI's slow suite)
def test_audit_end_to_end_quick_exits_1_under_a_noise_plant(tmp_path, capsys):
    code, _, err = run_cli(["audit", "--end-to-end", "--quick", "--plant", "noise=0.3", "--out", tmp_path / "q",
                            "--quiet"], capsys)
    rows = json.loads((tmp_path / "q" / "audit.json").read_text())["mechanisms"]
    violations = [r["name"] for r in rows if not r["broken"] and r["verdict"] == "VIOLATION"]
    assert code == 1 and violations and "honest row(s) above the claimed epsilon" in err, (code, err)
