"""The two kinds of ledger store behind :class:`~dpadmm.privacy.ledger_store.LedgerStore`: the connection, one
transaction at a time across processes and hosts, and the liveness of a process (an open run of a process that is
gone no longer reserves its price)."""

from __future__ import annotations

import contextlib
import fcntl
import sqlite3
import zlib
from pathlib import Path

from ..exceptions import DataFileError, InvalidParameterError

_LOCK_CLASS = 0x6470  # PostgreSQL advisory-lock namespace of dpadmm's ledger ("dp")


class LedgerTampered(DataFileError):
    """The store does not match its key or its own chain: the party releases nothing until its operator resolves it."""


class SQLite:
    """An SQLite file (Python's own sqlite3): transactions by BEGIN IMMEDIATE, liveness by locked files."""

    kind = "sqlite"

    def __init__(self, path: str):
        self.path = Path(path)
        self.where = f"sqlite:///{self.path}"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(str(self.path), timeout=120.0, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")  # WAL: a committed row survives the process being killed
        self.ino = self.path.stat().st_ino
        self.holders = self.path.with_name(self.path.name + ".holders")

    def has_store(self) -> bool:
        return bool(self.q("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'dpadmm_store'")[0][0]
                    and self.q("SELECT count(*) FROM dpadmm_store")[0][0])

    def check_file(self) -> None:
        try:
            ino = self.path.stat().st_ino
        except FileNotFoundError:
            ino = None
        if ino != self.ino:
            raise LedgerTampered(f"the ledger store {self.path} was deleted or replaced while this server ran; it "
                                 "releases nothing more: restore the store from its backup and restart")

    @contextlib.contextmanager
    def tx(self):
        self.check_file()
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def q(self, sql: str, params=()):
        return self.conn.execute(sql, params).fetchall()

    def hold(self, holder: str):
        self.holders.mkdir(exist_ok=True)
        fh = open(self.holders / f"{holder}.lock", "a")
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fh

    def release(self, fh, holder: str) -> None:
        fh.close()
        (self.holders / f"{holder}.lock").unlink(missing_ok=True)

    def alive(self, holder) -> bool:
        if not isinstance(holder, str) or not holder or "/" in holder:
            return False
        path = self.holders / f"{holder}.lock"
        try:
            fh = open(path, "r")
        except FileNotFoundError:
            return False
        with fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(fh, fcntl.LOCK_UN)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # its process is gone
        return False

    def close(self) -> None:
        self.conn.close()


class Postgres:
    """A PostgreSQL database (psycopg 3): transactions holding an advisory lock, liveness by session locks."""

    kind = "postgresql"

    def __init__(self, url: str):
        # imported here, not at the top: only a PostgreSQL store needs the driver (an optional extra), and the CLI's
        # start-up must not pay for it
        try:
            import psycopg
        except ImportError:
            raise InvalidParameterError("a PostgreSQL ledger store needs psycopg: pip install 'dpadmm[postgres]'.") \
                from None
        self.psycopg = psycopg
        self.where = url.split("@")[-1] if "@" in url else url  # never echo a password
        try:
            self.conn = psycopg.connect(url, autocommit=True)
            self.live = psycopg.connect(url, autocommit=True)  # holds this process's liveness lock
        except psycopg.Error as exc:
            raise DataFileError(f"cannot reach the ledger store {self.where}: {str(exc).splitlines()[0]}") from None

    def has_store(self) -> bool:
        return bool(self.q("SELECT to_regclass('dpadmm_store') IS NOT NULL")[0][0]
                    and self.q("SELECT count(*) FROM dpadmm_store")[0][0])

    def check_file(self) -> None:
        pass

    @contextlib.contextmanager
    def tx(self):
        try:
            with self.conn.transaction():
                self.conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (_LOCK_CLASS,))
                yield
        except self.psycopg.errors.UndefinedTable:
            raise LedgerTampered(f"the ledger store {self.where} lost its tables while this server ran; it releases "
                                 "nothing more: restore the store from its backup and restart") from None

    def q(self, sql: str, params=()):
        cur = self.conn.execute(sql.replace("?", "%s"), params)
        return cur.fetchall() if cur.description else []

    @staticmethod
    def _obj(holder: str) -> int:
        return zlib.crc32(holder.encode()) & 0x7FFFFFFF or 1

    def hold(self, holder: str):
        self.live.execute("SELECT pg_advisory_lock(%s, %s)", (_LOCK_CLASS, self._obj(holder)))
        return holder

    def release(self, fh, holder: str) -> None:
        self.live.execute("SELECT pg_advisory_unlock(%s, %s)", (_LOCK_CLASS, self._obj(holder)))

    def alive(self, holder) -> bool:
        if not isinstance(holder, str) or not holder:
            return False
        return bool(self.conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid::bigint = %s AND objid::bigint = %s "
            "AND objsubid = 2 AND granted", (_LOCK_CLASS, self._obj(holder))).fetchone()[0])

    def close(self) -> None:
        self.conn.close()
        self.live.close()
