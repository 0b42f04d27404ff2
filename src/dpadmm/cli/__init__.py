"""The ``dpadmm`` command line.

Every command validates its input first; a bad input prints one line ``error: …`` to stderr and
exits with code 2, writing nothing to ``--out``.
"""

from __future__ import annotations

import sys

import typer

from ..exceptions import DPADMMError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Differentially private distributed learning with ADMM.")

from . import vertical as _vertical  # noqa: E402,F401  (registers commands)
from . import reproduce as _reproduce  # noqa: E402,F401
from . import functional as _functional  # noqa: E402,F401
from . import audit as _audit  # noqa: E402,F401
from . import consensus as _consensus  # noqa: E402,F401
from . import party as _party  # noqa: E402,F401  (party serve, provision; grpc imported lazily)


def _show_warning(message, category, filename, lineno, file=None, line=None):
    print(f"warning: {message}", file=sys.stderr)


def main(argv=None) -> int:
    """Console-script entry point: run the app, turning library errors into one-line exit-2 errors."""
    import warnings

    previous = warnings.showwarning
    warnings.showwarning = _show_warning
    try:
        return _run(argv)
    finally:
        warnings.showwarning = previous


def _run(argv) -> int:
    try:
        app(args=argv, standalone_mode=False)
    except DPADMMError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (typer.Exit,) as exc:
        return exc.exit_code
    except typer.Abort:
        print("aborted", file=sys.stderr)
        return 130
    except Exception as exc:  # click usage errors
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            return 2
        raise
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
