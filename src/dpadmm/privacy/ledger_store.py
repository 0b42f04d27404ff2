"""An organisation's ledger store: one database of record for every budget it keeps, tamper-evident.

Where: a URL (``party serve --ledger URL``, ``$DPADMM_LEDGER`` or the policy's ``ledger``): ``sqlite:////ABSOLUTE/PATH`` (the
embedded default, Python's own ``sqlite3``: nothing to install; one file on one host) or ``postgresql://…`` (an
organisation whose servers run on several hosts; needs the ``postgres`` extra, psycopg 3). One store per
organisation: every server of the organisation, whatever its ``--out`` or host, names the same store and holds the
same key; each data set (:mod:`dpadmm.privacy.dataset_identity`) has its own budget in it.

The key (``--ledger-key FILE``, ``$DPADMM_LEDGER_KEY`` or the policy's ``ledger_key``) is a secret the operator
keeps apart from the store (another directory, another disk or host; never in the database). It is made with the
store, on its first use, and it names the store it belongs to: a key whose store is missing or empty is refused
(the store was deleted), as is a store without its key or with another store's key.

Tamper evidence: the store is an append-only journal, one row per event (a data set seen, a run priced at Setup,
a round charged, a run closed, a PSI query), each row keyed-hashed (HMAC-SHA256 with the operator's key) over its
content, its data set, its place in the store's chain and in its data set's chain, and the previous rows' MACs;
the last row's number and MAC are sealed in a head row (with the key too). Nothing else is stored: every total is
folded from the rows. So an edited, reordered, copied-in, inserted or deleted row, a truncated chain, a raised or
lowered sequence number or head and a store replaced by another are each detected (:class:`LedgerTampered`, one
line naming what was found), at start (the whole store is verified) and while serving (each data set's rows at
each Setup, the head at each charge). A whole older copy of the store put back (a rollback) is consistent with the
key, so each host also keeps the last row it saw committed beside the key (``KEY.head``, outside the store): a store
that no longer holds that row is refused. What no host saw (a rollback to just before another host's rows) only the
operator's backups and the parties' audit logs record.

Concurrency: every read-modify-write is one transaction (SQLite ``BEGIN IMMEDIATE``; PostgreSQL a transaction
holding ``pg_advisory_xact_lock``), so two servers that price runs at once never pass the cap together. A process
marks itself live for its lifetime (SQLite: a locked file beside the database; PostgreSQL: a session advisory lock):
an open run of a process that is gone no longer reserves its price (its charges stay).
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import hmac
import json
import os
import secrets
import threading
from pathlib import Path

from ..exceptions import DataFileError, InvalidParameterError
from .ledger_backends import LedgerTampered, Postgres, SQLite

LEDGER_ENV = "DPADMM_LEDGER"
KEY_ENV = "DPADMM_LEDGER_KEY"
KEY_FORMAT = "dpadmm-ledger-key/1"

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS dpadmm_store (id INTEGER PRIMARY KEY, store_id TEXT NOT NULL, created TEXT NOT NULL, "
    "seal TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS dpadmm_entries (seq BIGINT PRIMARY KEY, data_set TEXT NOT NULL, ds_seq BIGINT NOT NULL, "
    "kind TEXT NOT NULL, body TEXT NOT NULL, prev TEXT NOT NULL, ds_prev TEXT NOT NULL, mac TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS dpadmm_entries_ds ON dpadmm_entries (data_set, ds_seq)",
    "CREATE TABLE IF NOT EXISTS dpadmm_head (id INTEGER PRIMARY KEY, seq BIGINT NOT NULL, mac TEXT NOT NULL, "
    "seal TEXT NOT NULL)",
)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def canonical(body: dict) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def configured(ledger=None, key=None) -> tuple[str, str]:
    """The organisation's store URL and key file: the given values, else ``$DPADMM_LEDGER`` / ``$DPADMM_LEDGER_KEY``;
    a budget without both is refused (no silent per-user or per-folder default: that would fork the budget)."""
    url = ledger or os.environ.get(LEDGER_ENV)
    keyf = key or os.environ.get(KEY_ENV)
    if not url or not keyf:
        missing = " and ".join(n for n, v in (("--ledger URL ($DPADMM_LEDGER)", url),
                                              ("--ledger-key FILE ($DPADMM_LEDGER_KEY)", keyf)) if not v)
        raise InvalidParameterError(
            f"a party with a privacy budget needs its organisation's ledger store: give {missing} (e.g. --ledger "
            "sqlite:////srv/dpadmm/ledger.db --ledger-key /etc/dpadmm/ledger.key; the same for every server of the "
            "organisation; see docs/howto/budgets.md).")
    return str(url), str(keyf)


def parse_url(url: str) -> tuple[str, str]:
    """``("sqlite", path)`` or ``("postgresql", url)``; one clear line for anything else."""
    if url.startswith("sqlite:///") and len(url) > len("sqlite:///"):  # sqlite:///relative, sqlite:////absolute
        return "sqlite", url[len("sqlite:///"):]
    if url.startswith("sqlite:"):
        raise InvalidParameterError(f"--ledger {url}: an SQLite store is sqlite:////ABSOLUTE/PATH (or "
                                    "sqlite:///RELATIVE/PATH).")
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql", url
    raise InvalidParameterError(f"--ledger {url!r}: give sqlite:///PATH (the embedded store) or postgresql://… "
                                "(a PostgreSQL store).")


class LedgerStore:
    """One organisation's store (``url``) with its operator's key (``key_path``), verified when opened."""

    def __init__(self, url: str, key_path, *, party: str = "", create: bool = True):
        self.party = party
        kind, where = parse_url(url)
        self.key_path = Path(key_path).expanduser()
        if kind == "sqlite" and self.key_path.resolve().parent == Path(where).resolve().parent:
            raise InvalidParameterError(f"--ledger-key {self.key_path} is in the store's own directory: keep the key "
                                        "apart from the store (another directory or disk), so that deleting one "
                                        "cannot hide what the other proves.")
        key = self._read_key()
        self.db = SQLite(where) if kind == "sqlite" else Postgres(where)
        self.where = self.db.where
        self._lock = threading.RLock()  # one connection, several gRPC threads
        self.created_now = False
        self._appended = None
        with self._lock:
            if not self.db.has_store():
                self._init_store(key, create)
            if not self.created_now:
                self._check_store(self._read_key())
            self.verify_all()

    # ------------------------------------------------------------------ the key and the store's identity
    def _read_key(self) -> dict | None:
        try:
            k = json.loads(self.key_path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise LedgerTampered(f"the ledger key {self.key_path} is unreadable ({type(exc).__name__}); restore it "
                                 "from its backup") from None
        if not (isinstance(k, dict) and k.get("format") == KEY_FORMAT and isinstance(k.get("key"), str)
                and len(k["key"]) == 64):
            raise LedgerTampered(f"the ledger key {self.key_path} is not a dpadmm ledger key; restore it from its backup")
        return k

    def _init_store(self, key: dict | None, create: bool) -> None:
        with self.db.tx():  # under the store's lock: another server may be making it right now
            for stmt in SCHEMA:
                self.db.q(stmt)
            if self.db.q("SELECT count(*) FROM dpadmm_store")[0][0]:
                return  # another server made it meanwhile (we waited for its transaction): its key is written
            key = self._read_key()
            if key is not None and key.get("store"):
                raise LedgerTampered(
                    f"the ledger store {self.where} is missing or empty, but the key {self.key_path} belongs to store "
                    f"{key['store'][:12]}… (made {key.get('created', '?')}): the store was deleted or --ledger names "
                    "another one; restore the store from its backup (nothing is released until then)")
            if not create:
                raise DataFileError(f"no ledger store at {self.where}")
            if key is None:
                key = {"format": KEY_FORMAT, "key": secrets.token_hex(32)}
            store_id, created = secrets.token_hex(16), _now()
            self.key = bytes.fromhex(key["key"])
            self.store_id = store_id
            self.db.q("INSERT INTO dpadmm_store (id, store_id, created, seal) VALUES (1, ?, ?, ?)",
                      (store_id, created, self.mac("store", created)))
            self.db.q("INSERT INTO dpadmm_head (id, seq, mac, seal) VALUES (1, 0, '', ?)",
                      (self.mac("head", "0", ""),))
            # the key names its store before the store exists for anyone else (written inside the transaction)
            key = dict(key, store=store_id, created=created, url=self.where)
            self.key_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.key_path.with_name(self.key_path.name + f".tmp{os.getpid()}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                json.dump(key, fh)
            os.replace(tmp, self.key_path)
        self.created_now = True

    def _check_store(self, key: dict | None) -> None:
        (store_id, created, seal), = self.db.q("SELECT store_id, created, seal FROM dpadmm_store WHERE id = 1")
        if key is None:
            raise LedgerTampered(f"the ledger store {self.where} exists but its key {self.key_path} is missing: restore "
                                 "the key from its backup (without it no entry of the store can be verified)")
        self.key = bytes.fromhex(key["key"])
        self.store_id = store_id
        if key.get("store") != store_id or not hmac.compare_digest(seal, self.mac("store", created)):
            raise LedgerTampered(f"the ledger store {self.where} is not the store of the key {self.key_path} (store "
                                 f"{str(store_id)[:12]}…, the key's {str(key.get('store'))[:12]}…): the store was "
                                 "replaced, or --ledger/--ledger-key name another organisation's")

    def mac(self, *parts: str) -> str:
        msg = "\x1e".join((self.store_id, *parts)).encode()
        return hmac.new(self.key, msg, hashlib.sha256).hexdigest()

    def entry_mac(self, seq, data_set, ds_seq, kind, body, prev, ds_prev) -> str:
        return self.mac("entry", str(int(seq)), data_set, str(int(ds_seq)), kind, body, prev, ds_prev)

    # ------------------------------------------------------------------ verification
    def _fail(self, what: str) -> LedgerTampered:
        who = f"party {self.party!r}: " if self.party else ""
        return LedgerTampered(f"{who}its ledger store {self.where} was tampered with: {what}; it releases nothing "
                              "until its operator restores the store from a backup (docs/howto/budgets.md, "
                              "'Tampering')")

    def head(self, *, count: bool = False) -> tuple[int, str]:
        """The sealed head (the last row's number and MAC), checked against the last row (O(log n): each charge) and,
        with ``count``, against the number of rows (O(n): at start and at each Setup); raises on any mismatch."""
        rows = self.db.q("SELECT seq, mac, seal FROM dpadmm_head WHERE id = 1")
        if not rows:
            raise self._fail("its head row is gone")
        seq, mac, seal = int(rows[0][0]), str(rows[0][1]), str(rows[0][2])
        if not hmac.compare_digest(seal, self.mac("head", str(seq), mac)):
            raise self._fail(f"its head (row {seq}) does not carry the key's seal (edited)")
        (n, top), = self.db.q("SELECT " + ("count(*)" if count else "-1") + ", max(seq) FROM dpadmm_entries")
        if (count and int(n) != seq) or int(top or 0) != seq:
            held = f"{n} rows" if count else f"rows up to {top}"
            raise self._fail(f"the head seals {seq} rows, the store holds {held} (rows deleted, inserted or "
                             "renumbered)")
        if seq:
            last = self.db.q("SELECT mac FROM dpadmm_entries WHERE seq = ?", (seq,))
            if not last or not hmac.compare_digest(str(last[0][0]), mac):
                raise self._fail(f"its last row ({seq}) is not the row the head seals (replaced)")
        return seq, mac

    def _check_rows(self, rows, *, whole: bool, ds_from=(0, "")) -> None:
        prev_seq, prev = 0, ""
        ds_last: dict = {}
        for seq, data_set, ds_seq, kind, body, p, dp, mac in rows:
            seq, ds_seq = int(seq), int(ds_seq)
            if not hmac.compare_digest(str(mac), self.entry_mac(seq, data_set, ds_seq, kind, body, p, dp)):
                raise self._fail(f"row {seq} ({kind} of data set {str(data_set)[:18]}) does not match its MAC (edited, "
                                 "or copied from elsewhere)")
            if whole:
                if seq != prev_seq + 1 or p != prev:
                    raise self._fail(f"row {seq} does not follow row {prev_seq} (rows deleted or reordered)")
                prev_seq, prev = seq, str(mac)
            n, m = ds_last.get(data_set, ds_from)
            if ds_seq != n + 1 or dp != m:
                raise self._fail(f"entry {ds_seq} of data set {str(data_set)[:18]} does not follow entry {n} (entries "
                                 "deleted or reordered)")
            ds_last[data_set] = (ds_seq, str(mac))

    def verify_all(self) -> int:
        """Every row of the store against the key and the chain (at start); the number of rows."""
        with self._lock, self.db.tx():
            seq, _ = self.head(count=True)
            self._check_rows(self.db.q("SELECT seq, data_set, ds_seq, kind, body, prev, ds_prev, mac FROM dpadmm_entries "
                                       "ORDER BY seq"), whole=True)
            self.check_anchor(seq)
        return seq

    # ------------------------------------------------------------------ the anchor beside the key (rollbacks)
    @property
    def anchor_path(self) -> Path:
        return self.key_path.with_name(self.key_path.name + ".head")

    def _read_anchor(self) -> tuple[int, str]:
        try:
            a = json.loads(self.anchor_path.read_text())
            return (int(a["seq"]), str(a["mac"])) if a.get("store") == self.store_id else (0, "")
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return 0, ""

    def check_anchor(self, seq: int) -> None:
        """The last row this host saw committed (kept beside the key, outside the store) is still in the store: an
        older copy of the store put back (a rollback) is refused. Call inside :meth:`tx`."""
        n, mac = self._read_anchor()
        if not n:
            return
        row = self.db.q("SELECT mac FROM dpadmm_entries WHERE seq = ?", (n,)) if n <= seq else []
        if not row or not hmac.compare_digest(str(row[0][0]), mac):
            raise self._fail(f"it holds {seq} rows, but this host saw row {n} committed (recorded beside the key, in "
                             f"{self.anchor_path.name}): an older copy of the store was put back")

    def _write_anchor(self, seq: int, mac: str) -> None:
        if seq <= self._read_anchor()[0]:
            return
        tmp = self.anchor_path.with_name(self.anchor_path.name + f".tmp{os.getpid()}")
        with contextlib.suppress(OSError):  # a read-only key directory: no anchor, the chain still holds
            tmp.write_text(json.dumps({"store": self.store_id, "seq": seq, "mac": mac}))
            os.replace(tmp, self.anchor_path)

    def entries(self, data_set: str, after: tuple[int, str] = (0, "")) -> list[tuple[int, str, dict, str]]:
        """The data set's rows after its entry ``after`` = (number, MAC), verified (call inside :meth:`tx`):
        ``(ds_seq, kind, body, mac)`` each."""
        self.head(count=not after[0])  # a whole read (start, Setup) counts the rows too
        rows = self.db.q("SELECT seq, data_set, ds_seq, kind, body, prev, ds_prev, mac FROM dpadmm_entries WHERE "
                         "data_set = ? AND ds_seq > ? ORDER BY ds_seq", (data_set, int(after[0])))
        if after[0]:
            have = self.db.q("SELECT mac FROM dpadmm_entries WHERE data_set = ? AND ds_seq = ?", (data_set, after[0]))
            if not have or not hmac.compare_digest(str(have[0][0]), after[1]):
                raise self._fail(f"entry {after[0]} of data set {data_set[:18]}, read before, is gone or changed")
        self._check_rows(rows, whole=False, ds_from=after)
        return [(int(r[2]), str(r[3]), json.loads(r[4]), str(r[7])) for r in rows]

    def append(self, data_set: str, kind: str, body: dict, after: tuple[int, str]) -> tuple[int, str]:
        """Append one row to the data set's chain right after its entry ``after`` (call inside :meth:`tx`, after
        :meth:`entries` brought ``after`` up to date); returns the row's (ds_seq, MAC)."""
        seq, prev = self.head()
        text = canonical(body)
        mac = self.entry_mac(seq + 1, data_set, after[0] + 1, kind, text, prev, after[1])
        self.db.q("INSERT INTO dpadmm_entries (seq, data_set, ds_seq, kind, body, prev, ds_prev, mac) VALUES "
                  "(?, ?, ?, ?, ?, ?, ?, ?)", (seq + 1, data_set, after[0] + 1, kind, text, prev, after[1], mac))
        self.db.q("UPDATE dpadmm_head SET seq = ?, mac = ?, seal = ? WHERE id = 1",
                  (seq + 1, mac, self.mac("head", str(seq + 1), mac)))
        self._appended = (seq + 1, mac)
        return after[0] + 1, mac

    @contextlib.contextmanager
    def tx(self):
        with self._lock:
            self._appended = None
            with self.db.tx():
                yield
            if self._appended is not None:  # committed: this host has seen it
                self._write_anchor(*self._appended)

    def data_sets(self) -> list[str]:
        with self.tx():
            return [str(r[0]) for r in self.db.q("SELECT DISTINCT data_set FROM dpadmm_entries ORDER BY data_set")]

    def hold(self, holder: str):
        with self._lock:
            return self.db.hold(holder)

    def release(self, handle, holder: str) -> None:
        with self._lock:
            self.db.release(handle, holder)

    def alive(self, holder) -> bool:
        with self._lock:
            return self.db.alive(holder)

    def close(self) -> None:
        with self._lock:
            self.db.close()
