"""The party ledger shared by several processes (PartyBudget on one ledger directory, driven by real processes):
runs priced at once never pass the cap together, charges are never lost, a killed process's open run stops
reserving its price while its charges stay, and a run that released nothing fixes no relation."""

from __future__ import annotations

import json
import multiprocessing as mp
import os

import pytest

from dpadmm.privacy.accountants.gaussian import gaussian_epsilon
from dpadmm.privacy.events import RECORD_REPLACE, GaussianRelease
from dpadmm.privacy.ledger_files import JOURNAL_NAME, LEDGER_NAME, data_signature
from dpadmm.privacy.ledger_listing import read_ledger
from dpadmm.privacy.party_ledger import PartyBudget
from dpadmm.privacy.policy import PolicyRefusal, RunPrice

NM, DELTA = 4.0, 1e-5
CAP = gaussian_epsilon([NM] * 4, DELTA) * 1.01  # room for two runs of two releases, not three
RUN = RunPrice({NM: 2}, 0.0, "record_replace")


def _fit(ledger_dir, data, name, barrier, results):
    """One process: price a run of two releases (all at once with the others), charge it, end it."""
    b = PartyBudget(ledger_dir / "out" / name, "p", CAP, DELTA, ledger_dir=ledger_dir, data=data)
    barrier.wait()
    try:
        b.open_run(name, "x", RUN, 3)
    except PolicyRefusal as exc:
        results.put((name, "refused", str(exc)))
        b.close()
        return
    barrier_free = [b.charge([GaussianRelease("p", t, 1.0, NM, RECORD_REPLACE)], private_step=True, round_=t)
                    for t in range(2)]
    b.close()
    results.put((name, "ran", len(barrier_free)))


def _open_and_die(ledger_dir, data, done):
    """A process killed mid-run: it priced a run of two releases, charged one, and dies without closing."""
    b = PartyBudget(ledger_dir / "out" / "dying", "p", CAP, DELTA, ledger_dir=ledger_dir, data=data)
    b.open_run("dying", "x", RUN, 3)
    b.charge([GaussianRelease("p", 0, 1.0, NM, RECORD_REPLACE)], private_step=True, round_=0)
    done.set()
    os._exit(0)  # like kill -9: no close, no compaction, the holder's lock dies with the process


@pytest.fixture
def data(tmp_path):
    f = tmp_path / "train.csv"
    f.write_text("id,a\n1,0.5\n2,0.25\n")
    return {"train": str(f)}


def test_four_processes_pricing_at_once_never_pass_the_cap_together(tmp_path, data):
    ctx = mp.get_context("fork")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_fit, args=(tmp_path / "ledgers", data, f"run{i}", barrier, results)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    got = [results.get(timeout=5) for _ in procs]
    ran = [g for g in got if g[1] == "ran"]
    refused = [g for g in got if g[1] == "refused"]
    assert len(ran) == 2 and len(refused) == 2, got  # exactly the two that fit: never three, and no lost room
    assert all("above its operator's cap" in g[2] and "/" not in g[2].split("ledger of")[-1] for g in refused)
    led = read_ledger(tmp_path / "ledgers" / data_signature("p", data)[0], DELTA)
    assert led["releases"] == 4 and led["epsilon_spent"] == pytest.approx(gaussian_epsilon([NM] * 4, DELTA), rel=1e-3)
    assert led["epsilon_spent"] <= CAP
    assert sorted(r["run"] for r in led["runs"]) == sorted(g[0] for g in ran)


def test_a_killed_process_keeps_its_charges_and_frees_its_reservation(tmp_path, data):
    ctx = mp.get_context("fork")
    done = ctx.Event()
    p = ctx.Process(target=_open_and_die, args=(tmp_path / "ledgers", data, done))
    p.start()
    p.join(120)
    assert done.is_set()
    where = tmp_path / "ledgers" / data_signature("p", data)[0]
    assert (where / JOURNAL_NAME).is_file()  # the charge is only in the journal: the JSON file says 0 ...
    assert json.loads((where / LEDGER_NAME).read_text())["releases"] == 0
    led = read_ledger(where, DELTA)  # ... until any reader folds it in (and writes the JSON file back)
    assert led["releases"] == 1 and json.loads((where / LEDGER_NAME).read_text())["releases"] == 1
    assert not (where / JOURNAL_NAME).exists()
    b = PartyBudget(tmp_path / "other-out", "p", CAP, DELTA, ledger_dir=tmp_path / "ledgers", data=data)
    b.open_run("r1", "x", RUN, 3)  # 1 + 2 releases: the dead run's unspent release is not reserved any more
    assert b.spent == pytest.approx(gaussian_epsilon([NM], DELTA), rel=1e-3)
    b.close()
    assert [r["open"] for r in read_ledger(where, DELTA)["runs"]] == [False, False]


def test_an_open_run_of_a_live_process_reserves_its_price(tmp_path, data):
    a = PartyBudget(tmp_path / "a", "p", CAP, DELTA, ledger_dir=tmp_path / "ledgers", data=data)
    b = PartyBudget(tmp_path / "b", "p", CAP, DELTA, ledger_dir=tmp_path / "ledgers", data=data)
    a.open_run("ra", "x", RunPrice({NM: 3}, 0.0, "record_replace"), 4)
    with pytest.raises(PolicyRefusal, match="with what runs in progress on this data set may still spend"):
        b.open_run("rb", "x", RUN, 3)  # 3 reserved + 2 > 4: refused though nothing is charged yet
    a.charge([GaussianRelease("p", 0, 1.0, NM, RECORD_REPLACE)], private_step=True, round_=0)
    a.close_run()  # a stops after one release: what it did not release is free again
    b.open_run("rb", "x", RUN, 3)
    for t in range(2):
        b.charge([GaussianRelease("p", t, 1.0, NM, RECORD_REPLACE)], private_step=True, round_=t)
    assert a.spent == b.spent == pytest.approx(gaussian_epsilon([NM] * 3, DELTA), rel=1e-3)
    a.close(), b.close()


def test_the_same_bytes_share_one_ledger_and_other_bytes_do_not(tmp_path, data):
    copy = tmp_path / "copy.csv"
    copy.write_bytes(open(data["train"], "rb").read())
    other = tmp_path / "other.csv"
    other.write_text("id,a\n1,0.5\n")
    led = tmp_path / "ledgers"
    a = PartyBudget(tmp_path / "o1", "p", CAP, DELTA, ledger_dir=led, data=data)
    b = PartyBudget(tmp_path / "o2", "p", CAP, DELTA, ledger_dir=led, data={"train": str(copy), "model": str(other)})
    c = PartyBudget(tmp_path / "o3", "p", CAP, DELTA, ledger_dir=led, data={"train": str(other)})
    assert a.files.dir == b.files.dir != c.files.dir
    a.open_run("r", "x", RUN, 3)
    a.charge([GaussianRelease("p", 0, 1.0, NM, RECORD_REPLACE)], private_step=True, round_=0)
    assert b.spent == a.spent > 0 and c.spent == 0
    a.close(), b.close(), c.close()


def test_a_run_that_released_nothing_fixes_no_relation(tmp_path, data):
    b = PartyBudget(tmp_path / "o", "p", 10.0, DELTA, ledger_dir=tmp_path / "ledgers", data=data)
    b.open_run("empty", "x", RunPrice({NM: 2}, 0.0, "feature_column"), 3)
    b.close_run()  # no release: the ledger holds no guarantee under 'feature_column'
    b.open_run("rec", "x", RUN, 3)
    b.charge([GaussianRelease("p", 0, 1.0, NM, RECORD_REPLACE)], private_step=True, round_=0)
    b.close_run()
    with pytest.raises(PolicyRefusal, match=r"holds releases under the relation 'record_replace', this run is under "
                                            r"'feature_column' .*another --ledger-dir") as err:
        b.open_run("feat", "x", RunPrice({NM: 1}, 0.0, "feature_column"), 2)
    assert str(tmp_path) not in str(err.value)  # no local path in what the coordinator is told
    assert b.run is None  # the refused run was never opened
    b.close()


def test_a_ledger_an_out_kept_before_is_adopted_once_and_left_as_a_marker(tmp_path, data):
    old = PartyBudget(tmp_path / "o", "p", 10.0, DELTA)  # the previous layout: the ledger in --out
    old.open_run("legacy", "x", RUN, 3)
    old.charge([GaussianRelease("p", 0, 1.0, NM, RECORD_REPLACE)], private_step=True, round_=0)
    old.close()
    new = PartyBudget(tmp_path / "o", "p", 10.0, DELTA, ledger_dir=tmp_path / "ledgers", data=data)
    assert new.find_run("legacy")["charged"]["releases"] == 1 and new.ledger["releases"] == 1
    new.close()
    again = PartyBudget(tmp_path / "o", "p", 10.0, DELTA, ledger_dir=tmp_path / "ledgers", data=data)
    assert again.ledger["releases"] == 1  # once
    again.close()
    with pytest.raises(Exception, match="moved to the ledger of its data set"):  # the old layout refuses to start
        PartyBudget(tmp_path / "o", "p", 10.0, DELTA)


def test_party_ledger_lists_per_data_set_what_each_run_spent(tmp_path, data, capsys):
    from dpadmm.cli import main

    b = PartyBudget(tmp_path / "o", "p", CAP, DELTA, ledger_dir=tmp_path / "ledgers", data=data)
    b.open_run("run-one", "vertical-sharing", RUN, 3)
    for t in range(2):
        b.charge([GaussianRelease("p", t, 1.0, NM, RECORD_REPLACE)], private_step=True, round_=t)
    # the process is still running (no compaction): the listing folds the journal in
    assert main(["party", "ledger", "--ledger-dir", str(tmp_path / "ledgers")]) == 0
    out = capsys.readouterr().out
    want = f"{gaussian_epsilon([NM] * 2, DELTA):.4g}"
    assert f"(train=train.csv): ε = {want} at δ = 1e-05 over 2 releases, 1 runs" in out
    assert f"run-one  vertical-sharing  party p  2 releases  ε = {want} alone  in progress" in out
    assert main(["party", "ledger", "--ledger-dir", str(tmp_path / "ledgers"), "--data", data["train"], "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["run"] for r in listed[0]["runs"]] == ["run-one"] and listed[0]["releases"] == 2
    b.close()
    assert main(["party", "ledger", "--ledger-dir", str(tmp_path / "none")]) == 0
    assert "no ledger in" in capsys.readouterr().out
