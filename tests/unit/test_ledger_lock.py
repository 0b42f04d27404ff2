"""The party ledger shared by several processes (PartyBudget on one ledger store — SQLite, and PostgreSQL when
``$DPADMM_TEST_POSTGRES`` names a server — driven by real processes): runs priced at once never pass the cap together,
charges are never lost, a killed process's open run stops reserving its price while its charges stay, and a run that
released nothing fixes no relation."""

from __future__ import annotations

import json
import multiprocessing as mp
import os

import pytest

from dpadmm.privacy.accountants.gaussian import gaussian_epsilon
from dpadmm.privacy.events import RECORD_REPLACE, GaussianRelease
from dpadmm.privacy.dataset_identity import data_set_id
from dpadmm.privacy.ledger_listing import account
from dpadmm.privacy.ledger_store import LedgerStore
from dpadmm.privacy.party_ledger import PartyBudget
from dpadmm.privacy.policy import PolicyRefusal, RunPrice

NM, DELTA = 4.0, 1e-5
CAP = gaussian_epsilon([NM] * 4, DELTA) * 1.01  # room for two runs of two releases, not three
RUN = RunPrice({NM: 2}, 0.0, "record_replace")


def _fit(store, out, data, name, barrier, results):
    """One process: price a run of two releases (all at once with the others), charge it, end it."""
    b = PartyBudget(out / name, "p", CAP, DELTA, ledger=store[0], key=store[1], data=data)
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


def _open_and_die(store, out, data, done):
    """A process killed mid-run: it priced a run of two releases, charged one, and dies without closing."""
    b = PartyBudget(out / "dying", "p", CAP, DELTA, ledger=store[0], key=store[1], data=data)
    b.open_run("dying", "x", RUN, 3)
    b.charge([GaussianRelease("p", 0, 1.0, NM, RECORD_REPLACE)], private_step=True, round_=0)
    done.set()
    os._exit(0)  # like kill -9: no close, the holder's lock dies with the process


@pytest.fixture
def data(tmp_path):
    f = tmp_path / "train.csv"
    f.write_text("id,a\n1,0.5\n2,0.25\n")
    return {"train": str(f)}


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path):
    """(URL, key file) of a fresh store of each kind."""
    (tmp_path / "keys").mkdir()
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/store/ledger.db", str(tmp_path / "keys" / "ledger.key")
    return request.getfixturevalue("postgres_url"), str(tmp_path / "keys" / "ledger.key")


def _account(store, data):
    s = LedgerStore(*store, create=False)
    try:
        return account(s, data_set_id("p", data).key, DELTA)
    finally:
        s.close()


def test_four_processes_pricing_at_once_never_pass_the_cap_together(tmp_path, data, store):
    PartyBudget(tmp_path / "o", "p", CAP, DELTA, ledger=store[0], key=store[1], data=data).close()  # the store made
    ctx = mp.get_context("fork")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_fit, args=(store, tmp_path / "out", data, f"run{i}", barrier, results))
             for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    got = [results.get(timeout=5) for _ in procs]
    ran = [g for g in got if g[1] == "ran"]
    refused = [g for g in got if g[1] == "refused"]
    assert len(ran) == 2 and len(refused) == 2, got  # exactly the two that fit: never three, and no lost room
    assert all("above its operator's cap" in g[2] and "/" not in g[2].split("ledger of")[-1] for g in refused)
    led = _account(store, data)
    assert led["releases"] == 4 and led["epsilon_spent"] == pytest.approx(gaussian_epsilon([NM] * 4, DELTA), rel=1e-3)
    assert led["epsilon_spent"] <= CAP
    assert sorted(r["run"] for r in led["runs"]) == sorted(g[0] for g in ran)


def test_a_killed_process_keeps_its_charges_and_frees_its_reservation(tmp_path, data, store):
    ctx = mp.get_context("fork")
    done = ctx.Event()
    p = ctx.Process(target=_open_and_die, args=(store, tmp_path / "out", data, done))
    p.start()
    p.join(120)
    assert done.is_set()
    led = _account(store, data)  # the charge was committed before the "reply" left
    assert led["releases"] == 1 and [r["open"] for r in led["runs"]] == [False]  # its process is gone
    b = PartyBudget(tmp_path / "other-out", "p", CAP, DELTA, ledger=store[0], key=store[1], data=data)
    b.open_run("r1", "x", RUN, 3)  # 1 + 2 releases: the dead run's unspent release is not reserved any more
    assert b.spent == pytest.approx(gaussian_epsilon([NM], DELTA), rel=1e-3)
    assert [r["open"] for r in _account(store, data)["runs"]] == [False, True]
    b.close()
    assert [r["open"] for r in _account(store, data)["runs"]] == [False, False]


def test_an_open_run_of_a_live_process_reserves_its_price(tmp_path, data, store):
    a = PartyBudget(tmp_path / "a", "p", CAP, DELTA, ledger=store[0], key=store[1], data=data)
    b = PartyBudget(tmp_path / "b", "p", CAP, DELTA, ledger=store[0], key=store[1], data=data)
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


def test_the_same_rows_share_one_budget_and_other_rows_do_not(tmp_path, data):
    copy = tmp_path / "copy.csv"  # the same rows: reordered, CRLF, columns swapped, numbers spelt otherwise
    copy.write_bytes(b"a,id\r\n0.250,2\r\n.5,1\r\n\r\n")
    other = tmp_path / "other.csv"
    other.write_text("id,a\n1,0.5\n")
    a = PartyBudget(tmp_path / "o1", "p", CAP, DELTA, data=data)
    b = PartyBudget(tmp_path / "o2", "p", CAP, DELTA, data={"train": str(copy), "model": str(other)})
    c = PartyBudget(tmp_path / "o3", "p", CAP, DELTA, data={"train": str(other)})
    d = PartyBudget(tmp_path / "o4", "p", CAP, DELTA, data={"train": str(other)}, data_set="shop")  # declared
    assert a.data_set == b.data_set != c.data_set and d.data_set == "name:shop"
    a.open_run("r", "x", RUN, 3)
    a.charge([GaussianRelease("p", 0, 1.0, NM, RECORD_REPLACE)], private_step=True, round_=0)
    assert b.spent == a.spent > 0 and c.spent == 0 and d.spent == 0
    a.close(), b.close(), c.close(), d.close()


def test_a_run_that_released_nothing_fixes_no_relation(tmp_path, data):
    b = PartyBudget(tmp_path / "o", "p", 10.0, DELTA, data=data)
    b.open_run("empty", "x", RunPrice({NM: 2}, 0.0, "feature_column"), 3)
    b.close_run()  # no release: the ledger holds no guarantee under 'feature_column'
    b.open_run("rec", "x", RUN, 3)
    b.charge([GaussianRelease("p", 0, 1.0, NM, RECORD_REPLACE)], private_step=True, round_=0)
    b.close_run()
    with pytest.raises(PolicyRefusal, match=r"holds releases under the relation 'record_replace', this run is under "
                                            r"'feature_column' .*--data-set NAME") as err:
        b.open_run("feat", "x", RunPrice({NM: 1}, 0.0, "feature_column"), 2)
    assert str(tmp_path) not in str(err.value)  # no local path in what the coordinator is told
    assert b.run is None  # the refused run was never opened
    b.close()


def test_party_ledger_lists_per_data_set_what_each_run_spent(tmp_path, data, capsys):
    from dpadmm.cli import main

    b = PartyBudget(tmp_path / "o", "p", CAP, DELTA, data=data)
    b.open_run("run-one", "vertical-sharing", RUN, 3)
    for t in range(2):
        b.charge([GaussianRelease("p", t, 1.0, NM, RECORD_REPLACE)], private_step=True, round_=t)
    # the process is still running: the listing reads (and verifies) the store as it is
    assert main(["party", "ledger"]) == 0
    out = capsys.readouterr().out
    want = f"{gaussian_epsilon([NM] * 2, DELTA):.4g}"
    assert f"(train=train.csv): ε = {want} at δ = 1e-05 over 2 releases, 1 runs" in out
    assert f"run-one  vertical-sharing  party p  2 releases  ε = {want} alone  in progress" in out
    assert main(["party", "ledger", "--data", data["train"], "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["run"] for r in listed[0]["runs"]] == ["run-one"] and listed[0]["releases"] == 2
    b.close()
    other = tmp_path / "other.csv"
    other.write_text("id,a\n9,1\n")
    assert main(["party", "ledger", "--data", str(other)]) == 0
    assert "no budget in the store for other.csv" in capsys.readouterr().out


def test_a_ledger_of_the_former_files_layout_is_imported_once(tmp_path, data, capsys):
    """An upgrade does not reset a budget: the former LEDGER_DIR/<sha256>/ JSON file and journal are imported (once)
    into the store, under the data set the file is now."""
    import hashlib

    from dpadmm.cli import main

    sha = hashlib.sha256(open(data["train"], "rb").read()).hexdigest()
    old = tmp_path / "ledgers" / sha
    old.mkdir(parents=True)
    run = {"run": "legacy", "protocol": "vertical-sharing", "relation": "record_replace", "declared_rounds": 3,
           "priced": {"gaussian": {"4.0": 2}, "pure_epsilon": 0.0},
           "charged": {"gaussian": {"4.0": 1}, "pure_epsilon": 0.0, "releases": 1}, "last_round": 1}
    (old / "privacy_ledger.json").write_text(json.dumps({
        "format": "dpadmm-party-ledger/2", "party": "p", "relation": "record_replace", "releases": 1,
        "gaussian": {"4.0": 1}, "pure_epsilon": 0.0, "seq": 1, "runs": [run]}))
    (old / "privacy_ledger.journal").write_text(json.dumps({"seq": 2, "run": "legacy", "round": 1, "g": {"4.0": 1}})
                                                + "\n")  # one charge after the last compaction
    assert main(["party", "ledger", "--data", data["train"], "--import-dir", str(tmp_path / "ledgers")]) == 0
    assert "over 2 releases, 1 runs" in capsys.readouterr().out
    b = PartyBudget(tmp_path / "o", "p", CAP, DELTA, data=data)
    assert b.spent == pytest.approx(gaussian_epsilon([NM] * 2, DELTA), rel=1e-3)
    with pytest.raises(PolicyRefusal, match="above its operator's cap"):
        b.open_run("r", "x", RunPrice({NM: 3}, 0.0, "record_replace"), 4)  # 2 + 3 > 4
    b.close()
    assert main(["party", "ledger", "--data", data["train"], "--import-dir", str(tmp_path / "ledgers")]) == 2
    assert "was imported already" in capsys.readouterr().err
