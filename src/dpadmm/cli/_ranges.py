"""Every numeric option of every command, checked at the boundary before any work starts.

``dpadmm`` validates the command line in :func:`check_argv` before the command runs: before data
is loaded, a fit starts or a port is opened, so ``audit --end-to-end --samples -5`` is refused at
once instead of running for minutes. The messages speak CLI (``--samples must be …, got --samples
-5``); the estimators keep their own checks for Python users, in Python terms (``samples=``).

:data:`RANGES` maps each command to its numeric options and their valid range; a test walks the
typer app and fails on any numeric option missing here, so a new option cannot skip the check.
Cross-option checks (``--node`` below ``--nodes``, ``--canaries`` + ``--known`` ≤ N) stay in the
commands.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from ..exceptions import InvalidParameterError
from .._limits import MAX_MESSAGE


class Range(NamedTuple):
    kind: str  # "int" | "float"
    lo: float | None = None
    lo_open: bool = False  # lo excluded
    hi: float | None = None
    hi_open: bool = False
    listed: bool = False  # a comma-separated list, each element in range (per-node schedules)
    zero_means_default: bool = False

    def describe(self) -> str:
        """In the library's words: "positive", "non-negative", "in (0, 1)", "an integer >= 2"."""
        if self.kind == "float" and self.lo == 0 and self.hi is None:
            txt = "positive" if self.lo_open else "non-negative"
        elif self.lo is not None and self.hi is not None:
            lb, rb = ("(" if self.lo_open else "["), (")" if self.hi_open else "]")
            txt = f"in {lb}{self.lo:g}, {self.hi:g}{rb}"
        elif self.kind == "int":
            txt = f"an integer >= {self.lo:g}"
        else:
            txt = f"a number {'>' if self.lo_open else '>='} {self.lo:g}"
        if self.zero_means_default:
            txt += " (or 0 for the default)"
        if self.listed:
            txt += " (a number or a comma-separated list, one per node)" if self.kind == "float" else " (each of the list)"
        return txt

    def ok(self, v: float) -> bool:
        if not math.isfinite(v):
            return False
        if self.kind == "int" and v != int(v):
            return False
        if self.zero_means_default and v == 0:
            return True
        if self.lo is not None and (v < self.lo or (self.lo_open and v == self.lo)):
            return False
        if self.hi is not None and (v > self.hi or (self.hi_open and v == self.hi)):
            return False
        return True


POS = Range("float", 0, True)
NONNEG = Range("float", 0)
PROB = Range("float", 0, True, 1, True)
SEED = Range("int", 0)
TIMEOUT = POS


def INT(lo: int = 1, **kw) -> Range:
    return Range("int", lo, **kw)


POS_LIST = Range("float", 0, True, listed=True)

RANGES: dict[str, dict[str, Range]] = {
    "vertical": {
        "--lam": POS, "--rho": POS, "--iterations": INT(), "--epsilon": POS, "--clip": POS, "--label-epsilon": POS,
        "--delta": PROB, "--iteration-epsilon": POS, "--noise-scale": NONNEG, "--bound": POS, "--seed": SEED,
        "--timeout": TIMEOUT, "--checkpoint-every": INT(), "--parties": Range("int", 1, listed=True),
        "--row-clip": POS, "--min-effective-rows": NONNEG,
    },
    "consensus": {
        "--nodes": INT(2), "--uneven-ratio": POS, "--C": POS, "--reg-weight": POS, "--iterations": INT(),
        "--runs": INT(), "--seed": SEED, "--timeout": TIMEOUT, "--eta": POS_LIST, "--eta-growth": POS_LIST,
        "--alpha": POS_LIST, "--alpha-growth": POS_LIST, "--theta": POS_LIST, "--theta-growth": POS_LIST,
        "--test-fraction": Range("float", 0, False, 1, True), "--epsilon": POS, "--fallback-epsilon": NONNEG,
        "--delta": PROB, "--checkpoint-every": INT(),
    },
    "demo": {"--label-epsilon": POS, "--epsilon": POS, "--delta": PROB, "--seed": SEED},
    "reproduce": {"--reps": INT(0), "--seed": SEED},
    "functional": {
        "--n": INT(2), "--test-fraction": PROB, "--workers": INT(), "--tau": PROB, "--components": INT(),
        "--lam": NONNEG, "--rho": POS, "--epsilon": POS, "--delta": PROB, "--total-epsilon": POS,
        "--iterations": INT(), "--c1": POS, "--curve-clip": POS, "--seed": SEED, "--timeout": TIMEOUT,
    },
    "audit": {"--runs": INT(40, zero_means_default=True), "--samples": INT(1000), "--confidence": PROB,
              "--seed": SEED},
    "provision": {"--days": INT()},
    "score": {"--timeout": TIMEOUT},
    "attack kkt": {
        "--nodes": INT(2), "--node": INT(0), "--samples": INT(0), "--C": POS, "--reg-weight": POS, "--theta": POS,
        "--eta": POS, "--eta-growth": POS, "--alpha": POS, "--alpha-growth": POS, "--iterations": INT(),
        "--seed": SEED,
    },
    "attack labels": {"--label-epsilon": POS, "--delta": PROB, "--canaries": INT(), "--known": INT(),
                      "--unprotected-iterations": INT(), "--seed": SEED},
    "party serve": {"--max-rounds": INT(), "--max-epsilon": POS, "--delta": PROB, "--min-noise-multiplier": POS,
                    "--threads": INT(), "--row-clip": POS, "--psi-max-query": INT(), "--psi-max-runs": INT(),
                    "--psi-period": POS, "--max-message-mb": Range("float", 0, True, MAX_MESSAGE >> 20)},
}
# one table for the three vertical commands (their numeric options are one set: cli/_vertical_options.py)
RANGES.update({f"vertical {p}": RANGES["vertical"] for p in ("admm", "experts", "encrypted")})
RANGES.update({f"consensus {p}": RANGES["consensus"] for p in ("gossip", "madmm")})  # one table, as for vertical
del RANGES["vertical"], RANGES["consensus"]


def _values(argv: list[str], opt: str) -> list[str]:
    out = []
    for i, a in enumerate(argv):
        if a == opt and i + 1 < len(argv):
            out.append(argv[i + 1])
        elif a.startswith(opt + "="):
            out.append(a[len(opt) + 1:])
    return out


def _number(text: str, kind: str) -> float | None:
    try:
        v = float(text)
    except ValueError:
        return None
    return v


def check_argv(argv: list[str]) -> None:
    """Raise :class:`InvalidParameterError` (one line, CLI terms) for the first numeric option out of
    range; options that are not numbers are left to the parser (its own one-line error)."""
    if "--help" in argv:
        return
    words = [a for a in argv[:2] if not a.startswith("-")]
    command = " ".join(words[:2]) if " ".join(words[:2]) in RANGES else (words[0] if words else "")
    table = RANGES.get(command)
    if not table:
        return
    for opt, rng in table.items():
        for text in _values(argv, opt):
            parts = [p.strip() for p in text.split(",")] if rng.listed else [text.strip()]
            for part in parts:
                v = _number(part, rng.kind)
                if v is None:
                    if rng.listed:  # the parser does not see inside a list
                        raise InvalidParameterError(
                            f"{opt} must be {rng.describe()}, got {opt} {text} ('{part}' is not a number); "
                            f"run 'dpadmm {command} --help' for usage.")
                    continue  # the parser reports a value that is not a number
                if rng.kind == "int" and math.isfinite(v) and v != int(v) and not rng.listed:
                    continue  # not a whole number: the parser says so ("give a whole number")
                if not rng.ok(v):
                    raise InvalidParameterError(
                        f"{opt} must be {rng.describe()}, got {opt} {text}; "
                        f"run 'dpadmm {command} --help' for usage.")
    _check_pairs(command, argv)
    _check_files(command, argv)


#: options naming input files that must exist (checked before any import or load; "adult" is bundled)
FILES: dict[str, tuple[str, ...]] = {
    "vertical": ("--train", "--test", "--party", "--test-party"),  # --resume: find_checkpoint says more
    "functional": ("--train", "--test"),
    "consensus": ("--data",),
    "party serve": ("--data",),
}
FILES.update({f"vertical {p}": FILES["vertical"] for p in ("admm", "experts", "encrypted")})
FILES.update({f"consensus {p}": FILES["consensus"] for p in ("gossip", "madmm")})
del FILES["vertical"], FILES["consensus"]


def _check_files(command: str, argv: list[str]) -> None:
    from pathlib import Path

    from ..exceptions import DataFileError

    for opt in FILES.get(command, ()):
        for text in _values(argv, opt):
            path = text.split("=", 1)[1] if command == "party serve" and "=" in text else text
            if command.startswith("consensus") and path == "adult":
                continue
            if path and not Path(path).exists():
                raise DataFileError(f"{opt} {text}: file not found; check the path.")


def _check_pairs(command: str, argv: list[str]) -> None:
    """Options that are two numbers ``lo,hi`` (``functional --y-range``)."""
    if command != "functional":
        return
    for text in _values(argv, "--y-range"):
        parts = text.split(",")
        try:
            lo, hi = (float(p) for p in parts)
        except ValueError:
            lo = hi = math.nan
        if len(parts) != 2 or not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise InvalidParameterError(
                f"--y-range must be two numbers lo,hi with lo < hi (e.g. --y-range=-10,10), got --y-range {text}; "
                "run 'dpadmm functional --help' for usage.")


#: Python parameter names whose CLI option is not the dashed name
_ALIASES = {"random_state": "--seed", "max_iter": "--iterations", "n_nodes": "--nodes", "n_components": "--components"}


def cli_terms(message: str, argv: list[str], cmd) -> str:
    """A library error message in the CLI's terms: ``lam=-1.0`` → ``--lam -1.0``, ``label_epsilon must`` →
    ``--label-epsilon must``, "pass y_range=(lo, hi), --y-range" → "pass --y-range". Only names that are
    options of the command being run (or :data:`_ALIASES` of them) are rewritten; ``cmd`` is the CLI's click command
    tree (:func:`dpadmm.cli.command`, passed in: this module sits below :mod:`dpadmm.cli`, which imports it)."""
    import re

    if message.startswith("--"):  # already in CLI terms (check_argv)
        return message
    for tok in argv:
        sub = getattr(cmd, "commands", {}).get(tok) if not tok.startswith("-") else None
        if sub is None:
            break
        cmd = sub
    opts = {p.name: p.opts[0] for p in getattr(cmd, "params", []) if p.opts and p.opts[0].startswith("--")}
    for py, flag, cli in (("y_range=(lo, hi)", "--y-range", "--y-range lo,hi"), ("curve_clip=C", "--curve-clip", "--curve-clip C"),
                          ("normalize=True", "--normalize", "--normalize")):
        if flag in opts.values():
            message = message.replace(py, cli)
    names = {**{k: v for k, v in _ALIASES.items() if v in opts.values()}, **opts}
    # "pass y_range=(lo, hi), --y-range" / "curve_clip=..., --curve-clip": keep the CLI form only
    message = re.sub(r"\b([a-z][a-z0-9_]*)=(?:\([^)]*\)|[^,;()]*?), (--[a-z0-9-]+)", lambda m: m.group(2) if m.group(1) in names else m.group(0),
                     message)
    for name in sorted(names, key=len, reverse=True):
        opt = names[name]
        message = re.sub(rf"(?<![\w-]){name}=", f"{opt} ", message)
        message = re.sub(rf"(?<![\w-]){name}(?= must\b| is\b| should\b)", opt, message)
    return message
