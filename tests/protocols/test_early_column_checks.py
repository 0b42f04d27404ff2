"""Column names and label coding are checked early, with the fix (issue 40, item 5): a wrong label or id column is
reported from the file's header alone, before the file is read in full; labels mixing -1/0/1 name the recoding."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import run_cli

from dpadmm._validation import binary_labels
from dpadmm.exceptions import InvalidDataError


def _party_files(tmp_path, n=30):
    rng = np.random.default_rng(0)
    ids = np.arange(n)
    a = pd.DataFrame({"id": ids, "y": rng.integers(0, 2, n), "a1": rng.normal(size=n)})
    b = pd.DataFrame({"id": ids, "b1": rng.normal(size=n)})
    a.to_csv(tmp_path / "a.csv", index=False)
    b.to_csv(tmp_path / "b.csv", index=False)
    return tmp_path / "a.csv", tmp_path / "b.csv"


@pytest.fixture
def full_reads(monkeypatch):
    """Counts the reads of whole CSV files (``nrows`` not given): a header check reads none."""
    calls = []
    real = pd.read_csv

    def counting(*args, **kw):
        if kw.get("nrows") is None:
            calls.append(args[0] if args else kw.get("filepath_or_buffer"))
        return real(*args, **kw)

    monkeypatch.setattr(pd, "read_csv", counting)
    return calls


@pytest.mark.parametrize("flag, value, needle", [
    ("--label-column", "label", "has no label column 'label' (its columns: id, y, a1); name it with --label-column"),
    ("--id-column", "key", "has no id column 'key' (its columns: id, y, a1); name it with --id-column"),
])
def test_a_wrong_column_name_is_reported_from_the_header(tmp_path, capsys, full_reads, flag, value, needle):
    a, b = _party_files(tmp_path)
    code, _, err = run_cli(["vertical", "admm", "--party", a, "--party", b, flag, value, "--out", tmp_path / "o",
                            "--quiet"], capsys)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert full_reads == []  # no file was read in full
    assert not (tmp_path / "o").exists()


def test_a_node_files_wrong_label_column_is_reported_from_the_header(tmp_path, capsys, full_reads):
    a, _ = _party_files(tmp_path)
    code, _, err = run_cli(["consensus", "gossip", "--node", a, "--node", a, "--epsilon", "1", "--label-column",
                            "label", "--quiet"], capsys)
    assert code == 2 and "has no label column 'label' (its columns: id, y, a1)" in err, err
    assert full_reads == []


def test_labels_mixing_minus_one_zero_one_get_the_recoding():
    with pytest.raises(InvalidDataError, match=r"mix the codings -1/\+1 and 0/1 .* recode them to one coding"):
        binary_labels("y", np.array([-1, 0, 1, 1, 0]))
    with pytest.raises(InvalidDataError, match="give labels of two classes"):
        binary_labels("y", np.array([0, 1, 2]))


def test_node_files_mixing_label_codings_get_the_recoding(tmp_path, capsys):
    rng = np.random.default_rng(1)
    for name, labels in (("n0.csv", [-1, 1] * 10), ("n1.csv", [0, 1] * 10)):
        pd.DataFrame({"y": labels, "a": rng.normal(size=20)}).to_csv(tmp_path / name, index=False)
    code, _, err = run_cli(["consensus", "gossip", "--node", tmp_path / "n0.csv", "--node", tmp_path / "n1.csv",
                            "--epsilon", "1", "--quiet"], capsys)
    assert code == 2 and "mix the codings -1/+1 and 0/1" in err and "recode them" in err, err
