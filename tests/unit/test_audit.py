"""The black-box audit: valid lower bounds, and a test of the test (a planted bug is caught)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import run_cli
from dpadmm.privacy.accountants import gaussian_epsilon
from dpadmm.privacy.audit import clopper_pearson_upper, epsilon_lower_bound


def test_clopper_pearson_upper():
    assert clopper_pearson_upper(0, 100, 0.05) == pytest.approx(1 - 0.05 ** (1 / 100))
    assert clopper_pearson_upper(100, 100, 0.05) == 1.0
    assert 0.5 < clopper_pearson_upper(50, 100, 0.05) < 0.6


@pytest.mark.parametrize("nm", [0.5, 1.0, 3.0])
def test_lower_bound_is_below_the_true_epsilon_of_a_gaussian(nm):
    """Two unit-sensitivity Gaussians: the bound must not exceed the exact ε (PLD), and should be
    reasonably tight when ε is within reach of 2·10⁵ samples."""
    rng = np.random.default_rng(5)
    n = 200_000
    s0 = rng.normal(0.0, nm, n)
    s1 = rng.normal(1.0, nm, n)
    true_eps = gaussian_epsilon([nm], 1e-5, "pld")
    lb = epsilon_lower_bound(s0, s1, 1e-5)["epsilon_lower_bound"]
    assert lb <= true_eps
    assert lb >= 0.3 * min(true_eps, 6.0)


def test_identical_distributions_give_no_evidence():
    rng = np.random.default_rng(6)
    lb = epsilon_lower_bound(rng.normal(size=100_000), rng.normal(size=100_000), 1e-5)["epsilon_lower_bound"]
    assert lb < 0.1


def test_audit_accepts_real_and_catches_broken_hu_mechanism():
    from dpadmm.experiments.audit import _hu_vertical

    real = _hu_vertical(200_000, 0, 0.95, False)
    broken = _hu_vertical(200_000, 0, 0.95, True)
    assert real.epsilon_lower_bound <= real.epsilon_claimed and not real.caught
    assert broken.caught and broken.epsilon_lower_bound > 3 * broken.epsilon_claimed


@pytest.mark.slow
def test_audit_cli(tmp_path, capsys):
    out = tmp_path / "audit"
    code, stdout, err = run_cli(["audit", "--out", out, "--samples", "200000"], capsys)
    assert code == 0, err
    data = json.loads((out / "audit.json").read_text())
    mechs = data["mechanisms"]
    assert {"name", "epsilon_claimed", "epsilon_lower_bound", "broken"} <= set(mechs[0])
    assert sum(m["broken"] for m in mechs) == 1
    for m in mechs:
        if m["broken"]:
            assert m["epsilon_lower_bound"] > m["epsilon_claimed"]
        else:
            assert m["epsilon_lower_bound"] <= m["epsilon_claimed"]


def test_audit_cli_bad_input(tmp_path, capsys):
    code, _, err = run_cli(["audit", "--out", tmp_path / "a", "--confidence", "1.5"], capsys)
    assert code == 2 and "confidence must be in (0, 1)" in err and not (tmp_path / "a").exists()


@pytest.mark.slow
def test_audit_zhang_pp_consistent_with_theorem():
    from dpadmm.experiments.audit import _zhang_pp

    r = _zhang_pp(100_000, 1, 0.95)
    assert 0 <= r.epsilon_lower_bound <= r.epsilon_claimed


@pytest.mark.slow  # ~3.5 CPU-seconds (10⁵ samples a side): the default suite stays under 3 CPU-minutes
def test_audit_zhou_accepts_real_and_catches_broken():
    from dpadmm.experiments.audit import _zhou_fdp

    real = _zhou_fdp(100_000, 2, 0.95)
    broken = _zhou_fdp(100_000, 2, 0.95, True)
    assert real.epsilon_lower_bound <= real.epsilon_claimed
    assert broken.epsilon_lower_bound > broken.epsilon_claimed
