"""A party's privacy ledger on disk: one per data set, shared by every process, under an inter-process lock.

Where: ``LEDGER_DIR/<sha256>/`` (``dpadmm party serve --ledger-dir``, default ``$DPADMM_LEDGER_DIR`` or
``~/.dpadmm/ledgers``), where ``<sha256>`` is the SHA-256 of the bytes of the data set the party serves — its
``train`` file (a server without one: its other files but the model, together). Every server, whatever its
``--out``, that serves the same bytes shares that one ledger; an organisation with several operators points
them all at one directory. A party built without a ledger directory (the Python API's default) keeps its
ledger in its ``out`` directory, with the same locking.

Files (in the ledger's directory): ``privacy_ledger.json`` (the totals and one record per run, rewritten
atomically at each Setup and at the end of each run), ``privacy_ledger.journal`` (one line per charged
round, appended before the reply leaves the party, with a sequence number that continues the JSON file's
``seq``), ``privacy_ledger.lock`` (every read-modify-write holds ``fcntl.flock`` on it and re-reads both
files first) and ``privacy_ledger.holders/`` (one file per live process, locked for its lifetime: an open
run whose process is gone no longer reserves its price). The account is the JSON file with the journal
folded in: :func:`read_ledger` (and ``dpadmm party ledger``) fold and compact it, so after a ``kill -9`` the
JSON file is true again as soon as anyone reads it, and nothing charged is ever lost.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Mapping

from ..exceptions import DataFileError

LEDGER_NAME = "privacy_ledger.json"
JOURNAL_NAME = "privacy_ledger.journal"
LOCK_NAME = "privacy_ledger.lock"
HOLDERS_NAME = "privacy_ledger.holders"
LEDGER_FORMAT = "dpadmm-party-ledger/2"
MOVED_FORMAT = "dpadmm-party-ledger-moved/1"
LEDGER_DIR_ENV = "DPADMM_LEDGER_DIR"
_NOT_THE_DATA = ("model",)  # a server's model file is derived from its data set, not a data set of its own


def default_ledger_dir() -> Path:
    """``$DPADMM_LEDGER_DIR``, else ``~/.dpadmm/ledgers`` (one subdirectory per data set)."""
    env = os.environ.get(LEDGER_DIR_ENV)
    return Path(env).expanduser() if env else Path.home() / ".dpadmm" / "ledgers"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def data_signature(party: str, data: Mapping[str, object]) -> tuple[str, list[str]] | None:
    """The data set's identity — the SHA-256 of its ``train`` file's bytes (without one: of every file but the
    model, by key) — and the names it is served under (``["train=retail.csv"]``); None for a party without files."""
    files = {k: Path(v) for k, v in data.items() if k not in _NOT_THE_DATA}
    if "train" in files:
        files = {"train": files["train"]}
    if not files:
        return None
    for key, path in files.items():
        if not path.is_file():
            raise DataFileError(f"party {party!r}: data file {key}={path} not found; check --data.")
    if len(files) == 1:
        sig = _sha256(next(iter(files.values())))
    else:
        sig = hashlib.sha256("\n".join(f"{k}={_sha256(p)}" for k, p in sorted(files.items())).encode()).hexdigest()
    return sig, [f"{k}={p.name}" for k, p in sorted(files.items())]


def damaged(party: str, what: str) -> DataFileError:
    return DataFileError(f"party {party!r}: its privacy {what} is unreadable; it is the only record of the budget "
                         "spent on this data set — restore it (deleting it resets the budget).")


class LedgerFiles:
    """The files of one ledger directory: the lock, the JSON file, the journal and the live processes."""

    def __init__(self, directory, party: str = ""):
        self.dir = Path(directory)
        self.party = party
        self.path = self.dir / LEDGER_NAME
        self.journal_path = self.dir / JOURNAL_NAME
        self.holders = self.dir / HOLDERS_NAME
        self.dir.mkdir(parents=True, exist_ok=True)
        self._json_seq: tuple | None = None  # (st_ino, st_mtime_ns, seq) of the JSON file last read for its seq
        self._lock_fh = None  # the lock file, open while this object lives (flock on it per read-modify-write)
        self._threads = threading.Lock()  # flock excludes other open files, not threads sharing this one
        self._journal = None  # (file, st_ino, size after our last line, that line's seq): the journal as we left it

    @contextlib.contextmanager
    def locked(self):
        """Hold the ledger's inter-process lock (blocking); every read-modify-write is inside one."""
        with self._threads:
            if self._lock_fh is None:
                self._lock_fh = open(self.dir / LOCK_NAME, "a")
            fcntl.flock(self._lock_fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._lock_fh, fcntl.LOCK_UN)

    def close(self) -> None:
        for fh in (self._lock_fh, self._journal[0] if self._journal else None):
            if fh is not None:
                fh.close()
        self._lock_fh = self._journal = None

    # ------------------------------------------------------------------ reading (under the lock)
    def load(self, empty: dict) -> dict:
        """The JSON file with every journal line after its ``seq`` folded in (``empty`` if there is none yet)."""
        led = empty
        if self.path.is_file():
            try:
                led = json.loads(self.path.read_text())
                moved = isinstance(led, dict) and led.get("format") == MOVED_FORMAT
                ok = (isinstance(led, dict) and led.get("format") == LEDGER_FORMAT
                      and all(float(k) > 0 and int(v) >= 0 for k, v in led["gaussian"].items())
                      and float(led["pure_epsilon"]) >= 0 and isinstance(led["runs"], list))
            except (ValueError, TypeError, KeyError, OSError):
                ok = moved = False
            if moved:
                raise DataFileError(
                    f"party {self.party!r}: this directory's privacy ledger moved to the ledger of its data set "
                    f"(sha256 {str(led.get('data_set'))[:12]}…); serve it with a --ledger-dir, as party serve does")
            if not ok:
                raise damaged(self.party, f"ledger {LEDGER_NAME}")
        if self.journal_path.is_file():  # the rounds charged since the last compaction
            runs = {r["run"]: r for r in led["runs"]}
            try:
                for line in self.journal_path.read_text().splitlines():
                    if not line.strip():
                        continue
                    j = json.loads(line)
                    if int(j["seq"]) <= int(led["seq"]):
                        continue
                    apply_line(led, runs[j["run"]], j)
            except (ValueError, TypeError, KeyError) as exc:
                raise damaged(self.party, f"journal {JOURNAL_NAME} ({type(exc).__name__})") from None
        return led

    def moved(self) -> bool:
        """This directory's ledger was adopted by the ledger of its data set (only a marker is left)."""
        try:
            return json.loads(self.path.read_text()).get("format") == MOVED_FORMAT
        except (ValueError, AttributeError, OSError):
            return False

    def last_seq(self) -> int:
        """The sequence number of the last charge on disk (the journal's last line, else the JSON file's)."""
        try:
            size = self.journal_path.stat().st_size
        except FileNotFoundError:
            size = 0
        if size:
            with open(self.journal_path, "rb") as fh:
                fh.seek(max(0, size - 8192))
                tail = fh.read().decode("utf-8", "replace").strip().splitlines()
            try:
                return int(json.loads(tail[-1])["seq"])
            except (ValueError, KeyError, IndexError, TypeError):
                raise damaged(self.party, f"journal {JOURNAL_NAME}") from None
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return 0
        if self._json_seq is None or self._json_seq[:2] != (st.st_ino, st.st_mtime_ns):
            try:
                seq = int(json.loads(self.path.read_text())["seq"])
            except (ValueError, KeyError, TypeError):
                raise damaged(self.party, f"ledger {LEDGER_NAME}") from None
            self._json_seq = (st.st_ino, st.st_mtime_ns, seq)
        return self._json_seq[2]

    # ------------------------------------------------------------------ writing (under the lock)
    def append_next(self, line: dict) -> dict:
        """One charged round with the next sequence number on disk, appended (and flushed) before the reply leaves
        the party. The journal is reopened and its last line read only if another process wrote or compacted it
        since our last line (its inode or size changed); otherwise the next number is ours + 1 (O(1))."""
        try:
            st = os.stat(self.journal_path)
        except FileNotFoundError:
            st = None
        j = self._journal
        if j is not None and st is not None and (st.st_ino, st.st_size) == (j[1], j[2]):
            fh, seq = j[0], j[3]
        else:
            if j is not None:
                j[0].close()
            seq = self.last_seq()
            fh = open(self.journal_path, "a")
        line = dict(line, seq=seq + 1)
        fh.write(json.dumps(line) + "\n")
        fh.flush()
        self._journal = (fh, os.fstat(fh.fileno()).st_ino, fh.tell(), seq + 1)
        return line

    def write(self, led: dict) -> None:
        """Replace the JSON file atomically with ``led`` (every journal line folded in), then drop the journal."""
        write_json(self.path, led)
        if self.journal_path.exists():
            self.journal_path.unlink()  # every line is in the JSON file now (its seq is recorded there)
        if self._journal is not None:
            self._journal[0].close()
            self._journal = None

    # ------------------------------------------------------------------ live processes
    def hold(self, holder: str):
        """Mark this process live for as long as the returned file stays open (``flock`` dies with it)."""
        self.holders.mkdir(exist_ok=True)
        fh = open(self.holders / f"{holder}.lock", "a")
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fh

    def alive(self, holder) -> bool:
        """Whether the process that opened a run still holds its file (a killed one does not)."""
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


def write_json(path: Path, obj: dict) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "w") as fh:
        json.dump(obj, fh, indent=1)
        fh.write("\n")
    os.replace(tmp, path)


def add_counts(dst: dict, src: dict, sign: int = 1) -> dict:
    for k, v in src.items():
        dst[k] = int(dst.get(k, 0)) + sign * int(v)
    return dst


def apply_line(led: dict, run: dict, j: dict) -> None:
    """Fold one journal line (one charged round) into the totals and its run's record."""
    g = j.get("g", {})
    add_counts(led["gaussian"], g)
    add_counts(run["charged"]["gaussian"], g)
    n = int(sum(g.values())) + int(j.get("n_pure", 0))
    led["releases"] += n
    run["charged"]["releases"] += n
    led["pure_epsilon"] = float(led["pure_epsilon"]) + float(j.get("pure", 0.0))
    run["charged"]["pure_epsilon"] = float(run["charged"]["pure_epsilon"]) + float(j.get("pure", 0.0))
    run["last_round"] = max(int(run.get("last_round", 0)), int(j["round"]) + 1)
    led["seq"] = max(int(led["seq"]), int(j["seq"]))
