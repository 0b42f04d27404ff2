"""The ``dpadmm`` command line.

Every command validates its input first; a bad input prints one line ``error: …`` to stderr and
exits with code 2, writing nothing to ``--out``. Usage errors caught by the argument parser (an
unknown option or command, a value that is not a number, a missing argument) get the same
treatment: one ``error:`` line naming the problem and the fix, exit code 2, no traceback.

Start-up is kept light: the command modules import only typer, rich and numpy at module level;
scikit-learn, pandas, scipy, networkx, matplotlib, dp-accounting and statsmodels are imported
inside the commands that use them, so ``dpadmm --help`` and argument errors are fast.
"""

from __future__ import annotations

import functools
import sys
import time

import typer
import typer.main

from ..exceptions import DPADMMError

from ._app import app  # noqa: E402  (the Typer app; every command module registers on it)

from . import vertical as _vertical  # noqa: E402,F401  (registers commands: vertical admm)
from . import _vertical_experts as _experts  # noqa: E402,F401  (vertical experts)
from . import _vertical_encrypted as _encrypted  # noqa: E402,F401  (vertical encrypted)
from . import attack_labels as _attack_labels  # noqa: E402,F401  (dpadmm attack labels; registers consensus first)
from . import demo as _demo  # noqa: E402,F401
from . import reproduce as _reproduce  # noqa: E402,F401
from . import functional as _functional  # noqa: E402,F401
from . import audit as _audit  # noqa: E402,F401
from . import consensus as _consensus  # noqa: E402,F401
from . import party as _party  # noqa: E402,F401  (party serve, provision; grpc imported lazily)
from . import score as _score  # noqa: E402,F401  (distributed scoring of new records, grpc)


@functools.cache
def command():
    """The click command tree of :data:`app`, built once per process (``app(...)`` rebuilds it from the commands'
    signatures on every call, about 25 ms: once per ``main`` call from Python, twice after an error)."""
    return typer.main.get_command(app)


def main(argv=None) -> int:
    """Console-script entry point: run the app; library and usage errors become one-line exit-2 errors.

    Warnings are shown as ``warning: …`` lines, each distinct message at most once per run.
    """
    import warnings

    from ._common import show_warning_once

    from . import _common

    _common.RUN_START = time.perf_counter()
    previous = warnings.showwarning
    show_warning_once.seen.clear()
    warnings.showwarning = show_warning_once
    try:
        return _run(list(sys.argv[1:] if argv is None else argv))
    finally:
        warnings.showwarning = previous


def _is_click_exception(exc: BaseException, name: str = "ClickException") -> bool:
    """Whether ``exc`` is a (typer-vendored or click) ``name`` exception, without importing click.

    typer >= 0.20 ships its own copy of click (``typer._click``) and no longer installs click;
    older typer uses click itself. Matching on the class hierarchy's names works for both.
    """
    return any(c.__name__ == name for c in type(exc).__mro__)


def _run(argv: list[str]) -> int:
    from ._backend import restore_stderr

    try:
        return _dispatch(argv)
    finally:
        restore_stderr()  # a Ray run sent Ray's own output to a file (cli/_backend.quiet_ray)


def _dispatch(argv: list[str]) -> int:
    from ._display import ambient_heartbeat
    from ._ranges import check_argv

    try:
        argv = _new_spelling(argv)
        label = "dpadmm " + " ".join(a for a in argv[:2] if not a.startswith("-"))
        check_argv(argv)  # every numeric option in its range, before any work (and in CLI terms)
        # no long run is silent on a pipe; a party server logs its state changes instead of a heartbeat
        with ambient_heartbeat(label.strip(), enabled="--quiet" not in argv and argv[:2] != ["party", "serve"]):
            rv = command().main(args=argv, prog_name="dpadmm", standalone_mode=False)
    except DPADMMError as exc:
        from ._backend import restore_stderr
        from ._ranges import cli_terms

        log = restore_stderr(failed=True)
        print(f"error: {cli_terms(str(exc), argv, command())}" + (f" (Ray's own log: {log})" if log else ""), file=sys.stderr)
        return 2
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        print("aborted", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if _is_click_exception(exc, "NoArgsIsHelpError"):
            print(exc.ctx.get_help())  # bare `dpadmm` / `dpadmm attack`: the help, exit 0
            return 0
        if _is_click_exception(exc):
            print(usage_error_line(exc, argv), file=sys.stderr)
            return 2
        if _is_click_exception(exc, "Exit"):  # older click: ctx.exit()
            return int(getattr(exc, "exit_code", 0))
        raise
    return rv if isinstance(rv, int) else 0


def _new_spelling(argv: list[str]) -> list[str]:
    """An old spelling (``vertical [--protocol P]``) rewritten to its command, with
    one deprecation line on stderr (:mod:`dpadmm.cli._legacy`)."""
    from ._legacy import rewrite

    argv, note = rewrite(argv)
    if note:
        print(note, file=sys.stderr, flush=True)
    return argv


def _given_value(argv: list[str], opts) -> str | None:
    """The raw text the user gave for an option (``--x v`` or ``--x=v``), for the error message."""
    for i, a in enumerate(argv):
        for o in opts:
            if a == o and i + 1 < len(argv):
                return argv[i + 1]
            if a.startswith(o + "="):
                return a[len(o) + 1:]
    return None


def usage_error_line(exc, argv: list[str]) -> str:
    """One line ``error: <problem>; <fix>.`` for a parser (click/typer) usage error."""
    ctx = getattr(exc, "ctx", None)
    cmd = getattr(ctx, "command_path", None) or _command_path_from_argv(argv)
    help_hint = f"run '{cmd} --help' for usage"
    kind = type(exc).__name__
    msg = " ".join(str(exc.format_message()).split())
    param = getattr(exc, "param", None)
    if kind == "NoSuchOption":
        opt = getattr(exc, "option_name", "") or msg
        return f"error: {cmd} has no option {opt}; {option_hint(opt, ctx)}{help_hint}."
    if kind == "MissingParameter" and param is not None:
        what = param.name.upper() if getattr(param, "param_type_name", "") == "argument" else (param.opts or [param.name])[0]
        kind_word = "argument" if getattr(param, "param_type_name", "") == "argument" else "option"
        hint = f" ({str(param.help).rstrip('.')})" if getattr(param, "help", None) else ""
        return f"error: missing {kind_word} {what}{hint}; {help_hint}."
    if kind in ("BadParameter",) and param is not None:
        opts = list(getattr(param, "opts", []) or [])
        value = _given_value(argv, opts) if opts else None
        shown = opts[0] if opts else param.name
        expected = _expected(param, msg)
        got = f"got {value!r}" if value is not None else msg
        return f"error: invalid value for {shown}: {got}; give {expected} ({help_hint})."
    if msg.startswith("No such command"):
        choices = []
        if ctx is not None:
            try:
                choices = [c for c in ctx.command.list_commands(ctx)
                           if not getattr(ctx.command.get_command(ctx, c), "hidden", False)]
            except Exception:  # pragma: no cover - defensive
                choices = []
        name = msg[len("No such command"):].strip(" .")
        return (f"error: {cmd} has no command {name}; choose one of {', '.join(choices)} "
                f"({help_hint}).")
    return f"error: {msg.rstrip('.')}; {help_hint}."


def option_hint(opt: str, ctx) -> str:
    """What to suggest for an unknown option: only the command's own options (an unambiguous prefix first, then a
    close spelling), or the sibling command that has it (``--rho`` given to ``vertical experts`` belongs to
    ``vertical admm``); empty when nothing fits."""
    import difflib

    own = sorted({o for p in getattr(getattr(ctx, "command", None), "params", []) for o in getattr(p, "opts", [])
                  if o.startswith("--")})
    prefixed = [o for o in own if o.startswith(opt)]
    if prefixed:
        return f"did you mean {min(prefixed, key=len)}? "
    close = difflib.get_close_matches(opt, own, n=1, cutoff=0.75)
    if close:
        return f"did you mean {close[0]}? "
    parent = getattr(ctx, "parent", None)
    group = getattr(parent, "command", None)
    owners = [name for name, sub in sorted(getattr(group, "commands", {}).items())
              if sub is not getattr(ctx, "command", None)
              and any(opt in getattr(p, "opts", []) for p in getattr(sub, "params", []))]
    if owners and parent is not None and parent.parent is not None:  # protocols of one command, not all commands
        return f"{opt} belongs to {' and '.join(f'`{parent.command_path} {o}`' for o in owners)}; "
    return ""


def _command_path_from_argv(argv: list[str]) -> str:
    """``dpadmm vertical`` from ``["vertical", "--lam"]`` (for errors raised without a context)."""
    path, group = ["dpadmm"], command()
    for tok in argv:
        sub = getattr(group, "commands", {}).get(tok) if not tok.startswith("-") else None
        if sub is None:
            break
        path.append(tok)
        group = sub
    return " ".join(path)


def _expected(param, message: str) -> str:
    """A human description of what a parameter accepts (typer's pydantic message or click's type)."""
    t = getattr(param, "type", None)
    text = f"{message} {getattr(t, 'name', '')}".lower()
    for keys, out in ((("integer", " int"), "a whole number, e.g. 10"),
                      (("number", "float"), "a number, e.g. 0.5 or 1e-5"),
                      (("bool",), "true or false"), (("path",), "a file path")):
        if any(k in text for k in keys):
            return out
    return "a valid value"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
