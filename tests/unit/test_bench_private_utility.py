"""The private-utility benchmark's acceptance checks flag exactly the rows that break issue 18's bars."""

import importlib.util
import pathlib

SPEC = importlib.util.spec_from_file_location(
    "bench_private_utility",
    pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "bench_private_utility.py")
bpu = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bpu)


def _row(**kw):
    base = dict(algorithm="vertical", dataset="d", n_train=100, side="labels", epsilon=1.0, seed=0,
                metric="test_log_loss", private=0.40, non_private=0.30, trivial=0.69,
                label_party_alone=0.45, central_dp=0.38, central_dp_kind="RR", in_range=None)
    base.update(kw)
    return base


def test_checks_pass_a_good_row_and_flag_each_failure_class():
    assert bpu.checks([_row()]) == []
    kinds = lambda rows: sorted(f["check"] for f in bpu.checks(rows))  # noqa: E731
    assert kinds([_row(private=0.70)]) == ["le_label_party_alone", "le_trivial", "near_central_dp"]
    assert kinds([_row(private=0.44)]) == ["near_central_dp"]          # 0.44 > 1.1 * 0.38
    assert kinds([_row(private=0.46, central_dp=0.50)]) == ["le_label_party_alone"]
    # features private too: the labels-only central reference is no bar, the label party alone still is
    assert kinds([_row(side="features+labels-experts", private=0.44)]) == []
    assert kinds([_row(side="features+labels", private=0.46)]) == ["le_label_party_alone"]
    assert kinds([_row(algorithm="functional", side="curves", label_party_alone=None,
                       central_dp=None, private=0.1, in_range=0.97)]) == ["in_range"]
    # the non-private reference row is never judged
    assert bpu.checks([_row(side="non-private", private=9.0)]) == []


def test_summary_gap_closed_uses_the_stronger_baseline():
    rows = [_row(seed=0, private=0.40), _row(seed=1, private=0.36)]
    (s,) = bpu.summarise(rows)
    assert abs(s["private"] - 0.38) < 1e-12 and s["private_worst"] == 0.40
    # baseline = min(trivial 0.69, label party alone 0.45) = 0.45; gap 0.15; closed 0.07/0.15
    assert abs(s["gap_closed"] - 0.07 / 0.15) < 1e-12
    assert "| vertical | d |" in bpu.markdown([s])
