"""The option groups of ``dpadmm vertical admm|experts|encrypted``, defined once (:class:`dpadmm.cli._options.
OptionGroup`): each protocol's command takes the groups it honours, so no command lists, or refuses by hand, an
option of another protocol — the parser's own "no option" line (with a suggestion among the command's own options)
does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import typer

from . import _backend as bk
from ._options import OptionGroup, _option
from ..exceptions import DataFileError, InvalidParameterError

#: the help panels of every ``dpadmm vertical`` command; docs/reference/cli.md explains each option in full
DATA, MODEL, PRIVACY = "Data", "Model and protocol", "Privacy"


def lam_option():
    return typer.Option(1e-3, rich_help_panel=MODEL, help="Regularisation weight λ.")


def epsilon_option():
    return typer.Option(None, rich_help_panel=PRIVACY, help="Feature-side total ε.")


def iterations_option():
    return typer.Option(None, rich_help_panel=MODEL, help="Iterations T (default: auto).")


def target_option():
    return typer.Option(None, rich_help_panel=MODEL, metavar="binary|regression|count|multiclass",
                        help="What the label is (default: binary if private, else inferred; multiclass: declared).")


def classes_option():
    return typer.Option(None, rich_help_panel=MODEL, metavar="A,B,...",
                        help="The classes: binary NEG,POS (private default 0/1 or -1/+1); multiclass A,B,C.")


def psi_option():
    return typer.Option(False, "--psi", rich_help_panel=bk.BACKEND_PANEL, help="grpc: align rows by PSI on ids.")


def check_budget(epsilon, delta, noise_scale, iteration_epsilon):
    """One of --epsilon, --iteration-epsilon, --noise-scale, each in its range, and δ in (0, 1)."""
    from .._validation import check_open_unit, check_positive  # (light, but kept beside its one use)

    given = [n for n, v in (("--epsilon", epsilon), ("--iteration-epsilon", iteration_epsilon),
                            ("--noise-scale", noise_scale)) if v is not None]
    if len(given) > 1:
        raise InvalidParameterError(f"give only one of --epsilon, --iteration-epsilon, --noise-scale; got {', '.join(given)}.")
    if epsilon is not None:
        check_positive("epsilon", epsilon)
    if iteration_epsilon is not None:
        check_positive("iteration_epsilon", iteration_epsilon)
    if noise_scale is not None:
        check_positive("noise_scale", noise_scale, allow_zero=True)
    check_open_unit("delta", delta)


def bounds_file(path, columns: int):
    """A party's declared column bounds (``--bounds FILE``), or one line naming the problem (exit code 2)."""
    from ..privacy.ranges import read_bounds

    try:
        return read_bounds(path, columns)
    except OSError:
        raise InvalidParameterError(f"--bounds {path}: file not found or unreadable; give a CSV with a 'lo,hi' header "
                                    "and one row per feature column of that party.") from None
    except ValueError as e:
        raise InvalidParameterError(f"--bounds {path}: {e}.") from None


@dataclass(frozen=True)
class VerticalInput(OptionGroup):
    """Where the data come from: LIBSVM + party sizes, one CSV per party, or the bundled a9a (the "Data" panel)."""

    train: Optional[Path] = _option(lambda: typer.Option(None, rich_help_panel=DATA,
                                                         help="Training LIBSVM file (with --parties)."))
    test: Optional[Path] = _option(lambda: typer.Option(None, rich_help_panel=DATA, help="Test LIBSVM file."))
    parties: Optional[str] = _option(lambda: typer.Option(None, rich_help_panel=DATA,
                                                          help="Columns per party, e.g. 66,57."))
    party: List[Path] = _option(lambda: typer.Option([], "--party", metavar="CSV", rich_help_panel=DATA,
                                                     help="Party CSV (repeat, label party first)."))
    test_party: List[Path] = _option(lambda: typer.Option([], "--test-party", metavar="CSV", rich_help_panel=DATA,
                                                          help="Test party CSV (repeat, same order)."))
    id_column: str = _option(lambda: typer.Option("id", rich_help_panel=DATA,
                                                  help="Id column joining the party files."))
    label_column: str = _option(lambda: typer.Option("y", rich_help_panel=DATA,
                                                     help="Label column (first party's file)."))
    data: Optional[str] = _option(lambda: typer.Option(None, rich_help_panel=DATA,
                                                       help="a9a: the bundled a9a train/test."))

    def check(self) -> None:
        """Every named file exists and ``--data`` names the bundled set (before any work)."""
        for p in [self.train, self.test, *self.party, *self.test_party]:
            if p is not None and not Path(p).is_file():
                raise DataFileError(f"file not found: {p}; check the path.")
        if self.data is not None and self.data != "a9a":
            raise InvalidParameterError(f"--data must be 'a9a' (bundled), got --data={self.data!r}; "
                                        "use --train/--party for your own files.")
        self.check_headers()

    def check_headers(self) -> None:
        """The column names of every ``--party``/``--test-party`` file, from its header alone (before any file is
        read in full): the id column in each, the label column in the first party's."""
        import pandas as pd  # only once a command runs with party files

        from ..data.parties import separator_hint

        for role, files in (("--party", self.party), ("--test-party", self.test_party)):
            for m, p in enumerate(files):
                try:
                    cols = [str(c) for c in pd.read_csv(p, nrows=0).columns]
                except (ValueError, OSError) as exc:
                    raise DataFileError(f"cannot read {role} file {p} as CSV ({str(exc).splitlines()[0]}); give a "
                                        "CSV with a header.") from None
                shown = ", ".join(cols[:8]) + (", …" if len(cols) > 8 else "")
                if self.id_column not in cols:
                    raise DataFileError(f"{role} file {p} has no id column {self.id_column!r} (its columns: {shown}); "
                                        + separator_hint(cols, "name it with --id-column."))
                if m == 0 and role == "--party" and self.label_column not in cols:
                    raise DataFileError(f"the label party's file {p} has no label column {self.label_column!r} (its "
                                        f"columns: {shown}); " + separator_hint(cols, "name it with --label-column."))

    def load(self, encode: bool = True, private: bool = False, classes=None):
        """The data as read, in this process (:func:`dpadmm.data.vertical.load_vertical_data`); ``encode=False``
        keeps the labels as read (regression and count targets); ``private``, ``classes``: the binary domain a
        private run maps its labels against (:func:`dpadmm.data.vertical.encode_labels`)."""
        from ..data.vertical import load_vertical_data  # pandas, scikit-learn: kept out of the CLI's start-up

        if self.data is not None:
            if self.train is not None or self.party:
                raise InvalidParameterError("give either --data a9a or --train/--party files, not both.")
            return load_vertical_data(bundled=True, parties=self.parties)
        return load_vertical_data(train=self.train, test=self.test, parties=self.parties, party_files=self.party,
                                  test_party_files=self.test_party, id_column=self.id_column,
                                  label_column=self.label_column, encode=encode, private=private, classes=classes)

    def labels(self):
        """The training labels as read — the label column of the first ``--party`` file, or the first field of every
        line of the ``--train`` LIBSVM file — without the features; None for the bundled a9a (yes/no labels)."""
        import pandas as pd  # only once a command runs with party files

        if self.data is not None:
            return None
        if self.party:
            return pd.read_csv(self.party[0], usecols=[self.label_column])[self.label_column].to_numpy()
        from ..data.libsvm import load_libsvm  # scikit-learn: only once a command runs with a LIBSVM file

        return load_libsvm(self.train, dense=False)[1]  # plain or .gz, parsed as the fit will parse it


@dataclass(frozen=True)
class Preparation(OptionGroup):
    """Party-local preparation of each block (the rest of the "Data" panel)."""

    normalize_rows: bool = _option(lambda: typer.Option(False, "--normalize-rows", rich_help_panel=DATA,
                                                        help="= --prepare normalize-rows."))
    prepare: str = _option(lambda: typer.Option("auto", rich_help_panel=DATA,
                                                 help="standardize, normalize-rows, none or auto."))
    row_clip: Optional[float] = _option(lambda: typer.Option(None, rich_help_panel=DATA,
                                                             help="Row clip R (default: 3·sqrt(d_m))."))

    @property
    def how(self) -> str:
        return "normalize-rows" if self.normalize_rows else self.prepare


@dataclass(frozen=True)
class LabelPrivacy(OptionGroup):
    """The label side's budget and mechanism (the "Privacy" panel)."""

    label_epsilon: Optional[float] = _option(lambda: typer.Option(None, rich_help_panel=PRIVACY,
                                                                  help="Label-side total ε."))
    label_mechanism: str = _option(lambda: typer.Option("rr", rich_help_panel=PRIVACY,
                                                        help="Label side: rr or gaussian."))


@dataclass(frozen=True)
class FeatureMechanism(OptionGroup):
    """ADMM sharing's feature-side release: its calibration and its premises (the "Privacy" panel)."""

    mechanism: str = _option(lambda: typer.Option("gaussian", rich_help_panel=PRIVACY,
                                                  help="Feature side: gaussian or paper."))
    relation: str = _option(lambda: typer.Option("feature_column", rich_help_panel=PRIVACY,
                                                 help="feature_column or record."))
    clip: Optional[float] = _option(lambda: typer.Option(None, rich_help_panel=PRIVACY,
                                                         help="Per-sample clip c (default: auto)."))
    iteration_epsilon: Optional[float] = _option(lambda: typer.Option(None, rich_help_panel=PRIVACY,
                                                                      help="Per-iteration ε instead."))
    noise_scale: Optional[float] = _option(lambda: typer.Option(None, rich_help_panel=PRIVACY,
                                                                help="Raw noise σ instead."))
    bound: Optional[float] = _option(lambda: typer.Option(None, rich_help_panel=PRIVACY,
                                                          help="b1 of [Hu, Ass. 2.1] (default: auto)."))
    accountant: str = _option(lambda: typer.Option("pld", rich_help_panel=PRIVACY, help="pld or rdp."))


@dataclass(frozen=True)
class AdmmModel(OptionGroup):
    """ADMM sharing's model and solver options (the "Model and protocol" panel)."""

    rho: Optional[float] = _option(lambda: typer.Option(None, rich_help_panel=MODEL,
                                                        help="ADMM penalty ρ (default: auto)."))
    no_intercept: bool = _option(lambda: typer.Option(False, "--no-intercept", rich_help_panel=MODEL,
                                                      help="Fit without intercept."))
    adaptive_rho: bool = _option(lambda: typer.Option(False, rich_help_panel=MODEL, help="Residual-balancing ρ."))


@dataclass(frozen=True)
class RunState(OptionGroup):
    """Transcript, checkpoints and resuming (runs with rounds the engine drives)."""

    transcript: Optional[Path] = _option(bk.transcript_option)
    checkpoint_every: Optional[int] = _option(bk.checkpoint_every_option)
    resume: Optional[Path] = _option(bk.resume_option)


__all__ = ["AdmmModel", "DATA", "check_budget", "FeatureMechanism", "LabelPrivacy", "MODEL", "PRIVACY", "Preparation", "RunState",
           "VerticalInput", "epsilon_option", "iterations_option", "lam_option", "psi_option",
           "target_option", "bounds_file"]
