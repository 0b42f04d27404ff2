"""Issue 36: the ledger store is tamper-evident. Each way of editing it between runs — on SQLite and, when
``$DPADMM_TEST_POSTGRES`` names a server, on PostgreSQL — is detected at the next start: no budget reset, one line
naming what was found, and ``party serve`` exits with code 2. A store deleted while a party serves stops its releases."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import run_cli
from dpadmm.privacy.events import RECORD_REPLACE, GaussianRelease
from dpadmm.privacy.ledger_store import LedgerStore, LedgerTampered
from dpadmm.privacy.party_ledger import PartyBudget
from dpadmm.privacy.policy import PolicyRefusal, RunPrice

NM, DELTA, CAP = 4.0, 1e-5, 5.0
RUN = RunPrice({NM: 2}, 0.0, "record_replace")


class Store:
    """A store of one kind with two data sets' budgets spent on, and raw SQL on it (the attacker's access)."""

    def __init__(self, kind, tmp_path, request):
        (tmp_path / "keys").mkdir()
        self.kind, self.key = kind, str(tmp_path / "keys" / "ledger.key")
        if kind == "sqlite":
            self.path = tmp_path / "store" / "ledger.db"
            self.url = f"sqlite:///{self.path}"
        else:
            self.url = request.getfixturevalue("postgres_url")
        self.files = {}
        for name, rows in (("train", "id,a\n1,0.5\n2,0.25\n"), ("other", "id,a\n1,0.75\n")):
            f = tmp_path / f"{name}.csv"
            f.write_text(rows)
            self.files[name] = {"train": str(f)}
        for name in ("train", "other"):
            b = self.budget(name)
            b.open_run(f"run-{name}", "x", RUN, 3)
            for t in range(2):
                b.charge([GaussianRelease("p", t, 1.0, NM, RECORD_REPLACE)], private_step=True, round_=t)
            b.close()
        self.spent = self.budget("train")
        self.ds = {n: self.spent.data_set if n == "train" else None for n in self.files}
        self.spent_eps = self.spent.spent
        self.spent.close()

    def budget(self, name="train"):
        return PartyBudget(Path(self.key).parent.parent / "out", "p", CAP, DELTA, ledger=self.url, key=self.key,
                           data=self.files[name])

    def sql(self, *statements):
        if self.kind == "sqlite":
            import sqlite3

            db = sqlite3.connect(self.path)
            with db:
                out = [db.execute(s, p).fetchall() for s, p in statements]
            db.close()
            return out
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as db:
            out = []
            for s, p in statements:
                cur = db.execute(s.replace("?", "%s"), p)
                out.append(cur.fetchall() if cur.description else [])
            return out

    def rows(self, where="1 = 1", params=()):
        return self.sql((f"SELECT seq, data_set, kind, body, mac FROM dpadmm_entries WHERE {where} ORDER BY seq",
                         params))[0]


def _zero_totals(s):  # every charge's count set to 0
    for seq, _, _, body, _ in s.rows("kind = 'charge'"):
        b = json.loads(body)
        s.sql(("UPDATE dpadmm_entries SET body = ? WHERE seq = ?", (json.dumps(dict(b, g={})), seq)))


def _lower_a_count(s):
    seq, _, _, body, _ = [r for r in s.rows("kind = 'charge'") if json.loads(r[3])["g"]][-1]
    b = json.loads(body)
    s.sql(("UPDATE dpadmm_entries SET body = ? WHERE seq = ?",
           (json.dumps(dict(b, g={k: int(v) - 1 for k, v in b["g"].items()}), sort_keys=True, separators=(",", ":")),
            seq)))


def _copy_another_data_sets_rows_in(s):  # the train budget's rows replaced by the other data set's
    other = [r for r in s.rows() if r[1] != s.ds["train"]]
    s.sql(*[("UPDATE dpadmm_entries SET body = ?, kind = ? WHERE seq = ?", (o[3], o[2], r[0]))
            for r, o in zip(s.rows("data_set = ?", (s.ds["train"],)), other)])


def _raise_seq(s):
    s.sql(("UPDATE dpadmm_head SET seq = seq + 5", ()))


def _remove_the_charges(s):  # "the journal removed"
    s.sql(("DELETE FROM dpadmm_entries WHERE kind = 'charge'", ()))


def _truncate_and_move_the_head(s):  # the last rows deleted, the head moved back to the new last row
    rows = s.rows()
    s.sql(("DELETE FROM dpadmm_entries WHERE seq > ?", (rows[-3][0],)),
          ("UPDATE dpadmm_head SET seq = ?, mac = ?", (rows[-3][0], rows[-3][4])))


def _reorder(s):
    a, b = s.rows("kind = 'charge'")[:2]
    s.sql(("UPDATE dpadmm_entries SET seq = -1 WHERE seq = ?", (a[0],)),
          ("UPDATE dpadmm_entries SET seq = ? WHERE seq = ?", (a[0], b[0])),
          ("UPDATE dpadmm_entries SET seq = ? WHERE seq = -1", (b[0],)))


def _delete_the_head(s):
    s.sql(("DELETE FROM dpadmm_head", ()))


def _delete_the_data_sets_rows(s):
    s.sql(("DELETE FROM dpadmm_entries WHERE data_set = ?", (s.ds["train"],)))


def _forge_a_row(s):  # a row inserted with a made-up MAC, the head moved to it
    seq, ds, kind, body, mac = s.rows()[-1]
    s.sql(("INSERT INTO dpadmm_entries (seq, data_set, ds_seq, kind, body, prev, ds_prev, mac) VALUES "
           "(?, ?, 99, 'close', '{}', ?, '', ?)", (seq + 1, ds, mac, "0" * 64)),
          ("UPDATE dpadmm_head SET seq = ?, mac = ?", (seq + 1, "0" * 64)))


def _empty_the_store(s):  # every table dropped ("the file deleted", for a database server)
    s.sql(*[(f"DROP TABLE {t}", ()) for t in ("dpadmm_entries", "dpadmm_head", "dpadmm_store")])


def _delete_the_file(s):
    for p in s.path.parent.glob(s.path.name + "*"):
        if p.is_file():
            p.unlink()


def _delete_the_folder(s):
    shutil.rmtree(s.path.parent)


def _replace_the_store_by_a_fresh_one(s):  # another store, made with another key, put in its place
    _delete_the_folder(s)
    fresh = LedgerStore(s.url, Path(s.key).parent.parent / "another.key")
    fresh.close()


def _delete_the_key(s):
    Path(s.key).unlink()


TAMPERING = {  # the edit → what the one line names
    "totals zeroed": (_zero_totals, "does not match its MAC"),
    "a count lowered": (_lower_a_count, "does not match its MAC"),
    "another data set's rows copied in": (_copy_another_data_sets_rows_in, "does not match its MAC"),
    "seq raised": (_raise_seq, "does not carry the key's seal"),
    "the charges (journal) removed": (_remove_the_charges, r"the head seals \d+ rows, the store holds \d+"),
    "truncated, head moved back": (_truncate_and_move_the_head, "does not carry the key's seal"),
    "rows reordered": (_reorder, "does not match its MAC"),
    "head deleted": (_delete_the_head, "its head row is gone"),
    "the data set's rows deleted": (_delete_the_data_sets_rows, r"the head seals \d+ rows, the store holds \d+"),
    "a row forged": (_forge_a_row, "does not carry the key's seal"),
    "the store emptied": (_empty_the_store, "is missing or empty, but the key .* belongs to store"),
    "the key deleted": (_delete_the_key, "exists but its key .* is missing"),
}
FILE_TAMPERING = {
    "the file deleted": (_delete_the_file, "is missing or empty, but the key .* belongs to store"),
    "the folder deleted": (_delete_the_folder, "is missing or empty, but the key .* belongs to store"),
    "the store replaced by another": (_replace_the_store_by_a_fresh_one, "is not the store of the key"),
}


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path):
    return Store(request.param, tmp_path, request)


@pytest.mark.parametrize("case", list(TAMPERING))
def test_each_edit_of_the_store_is_detected_at_start(store, case):
    edit, why = TAMPERING[case]
    edit(store)
    with pytest.raises(LedgerTampered, match=why) as err:
        store.budget()  # no budget object: nothing is priced, nothing reset
    assert "\n" not in str(err.value) and "restore" in str(err.value)


@pytest.mark.parametrize("case", list(FILE_TAMPERING))
def test_a_deleted_or_replaced_store_file_is_detected_at_start(tmp_path, request, case):
    store = Store("sqlite", tmp_path, request)
    edit, why = FILE_TAMPERING[case]
    edit(store)
    with pytest.raises(LedgerTampered, match=why):
        store.budget()


@pytest.mark.parametrize("case", ["totals zeroed", "seq raised", "the charges (journal) removed", "the file deleted"])
def test_party_serve_refuses_to_start_on_a_tampered_store_with_one_line(tmp_path, request, capsys, case):
    store = Store("sqlite", tmp_path, request)
    edit, why = {**TAMPERING, **FILE_TAMPERING}[case]
    edit(store)
    code, out, err = run_cli(["party", "serve", "--protocol", "vertical-sharing", "--name", "party2", "--insecure",
                              "--relation", "record", "--out", tmp_path / "serve", "--data",
                              f"train={store.files['train']['train']}", "--ledger", store.url, "--ledger-key",
                              store.key, "--max-epsilon", "5", "--delta", "1e-5"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "tampered with" in err or "missing or empty" in err


def test_an_edit_while_serving_stops_every_release(store):
    b = store.budget()
    try:
        b.open_run("r", "x", RUN, 3)
        b.charge([GaussianRelease("p", 0, 1.0, NM, RECORD_REPLACE)], private_step=True, round_=0)
        _lower_a_count(store)
        with pytest.raises(PolicyRefusal, match="was tampered with"):
            b.open_run("r2", "x", RUN, 3)  # every row of the data set is verified again at each Setup
        with pytest.raises(PolicyRefusal, match="was tampered with"):
            b.charge([GaussianRelease("p", 1, 1.0, NM, RECORD_REPLACE)], private_step=True, round_=1)  # and stays so
    finally:
        b.close()


def test_a_store_deleted_while_serving_stops_every_release(store):
    b = store.budget()
    try:
        b.open_run("r", "x", RUN, 3)
        (_delete_the_file if store.kind == "sqlite" else _empty_the_store)(store)
        with pytest.raises(PolicyRefusal, match="(was deleted or replaced|lost its tables) while this server ran"):
            b.charge([GaussianRelease("p", 0, 1.0, NM, RECORD_REPLACE)], private_step=True, round_=0)
    finally:
        b.close()
    with pytest.raises(LedgerTampered, match="missing or empty"):  # and a restart does not start from zero
        store.budget()


def test_an_older_copy_of_the_store_put_back_is_refused(tmp_path, request):
    """A rollback: the store copied aside, more spent, the copy put back. Consistent with the key, but not with the
    last row this host saw committed (kept beside the key, outside the store)."""
    store = Store("sqlite", tmp_path, request)
    saved = {p.name: p.read_bytes() for p in store.path.parent.glob(store.path.name + "*") if p.is_file()}
    b = store.budget()
    b.open_run("more", "x", RUN, 3)
    b.charge([GaussianRelease("p", 0, 1.0, NM, RECORD_REPLACE)], private_step=True, round_=0)
    b.close()
    for p in store.path.parent.glob(store.path.name + "*"):
        if p.is_file():
            p.unlink()
    for name, data in saved.items():
        (store.path.parent / name).write_bytes(data)
    with pytest.raises(LedgerTampered, match="an older copy of the store was put back"):
        store.budget()


def test_an_untouched_store_reads_back_what_was_spent(store):
    b = store.budget()
    assert b.spent == pytest.approx(store.spent_eps) and b.ledger["releases"] == 2
    b.close()
