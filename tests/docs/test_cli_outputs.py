"""Small CLI output contracts from issue 21: Ray's own output kept off the terminal, the paper
mechanism's verdict hint, reproduction summaries as tables."""

from __future__ import annotations

import os
import sys


def test_quiet_ray_sends_fd2_to_a_file_and_keeps_python_stderr(capfd):
    from dpadmm.cli._backend import quiet_ray, restore_stderr

    quiet_ray()
    try:
        os.write(2, b"[ray] a 20-line banner from C++\n")
        print("error: dpadmm's one line", file=sys.stderr)
    finally:
        log = restore_stderr(failed=True)
    err = capfd.readouterr().err
    assert "banner" not in err and log is not None
    with open(log) as fh:
        assert "banner" in fh.read()
    os.remove(log)
    os.write(2, b"after\n")  # fd 2 is the terminal again
    assert "after" in capfd.readouterr().err


def test_quiet_ray_success_leaves_no_file(capfd):
    from dpadmm.cli._backend import quiet_ray, restore_stderr

    quiet_ray()
    path = __import__("dpadmm.cli._backend", fromlist=["_RAY_LOG"])._RAY_LOG["path"]
    assert restore_stderr() is None and not os.path.exists(path)


def test_paper_mechanism_verdict_blames_the_noise():
    from dpadmm.cli._vertical_report import _advice

    metrics = {"final": {}, "privacy": {"private": False}, "config": {"mechanism": "paper", "iteration_epsilon": 10.0}}
    v = _advice(metrics)
    assert "the noise is the problem" in v and "--iteration-epsilon" in v
    assert "--noise-scale" in _advice(dict(metrics, config={"noise_scale": 50.0}))
    assert "the noise" not in _advice(dict(metrics, config={"epsilon": 10.0}))


def test_reproduce_summary_prints_tables_not_dicts(capsys):
    from dpadmm.cli.reproduce import _print_summary

    _print_summary({"label_party_alone": 0.3619, "mean_test_log_loss": {"labels only": {"ε = 1": 0.3412, "ε = 10": 0.3383}},
                    "quoted": {"ε = 1": 0.35}})
    out = capsys.readouterr().out
    assert "{" not in out and "labels only" in out and "0.3412" in out and "ε = 1 = 0.35" in out
