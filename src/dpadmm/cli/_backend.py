"""CLI plumbing shared by the training commands: backend choice, transcripts, checkpoints.

Commands declare the options with the ``*_OPTION`` factories below and call :func:`run_options`
first (validation before any work), then pass ``opts.backend`` as the estimator's ``backend`` and
``opts.begin()`` (opens the transcript) as keyword arguments to ``fit``, and finally merge
:func:`run_metrics` into metrics.json.

Checkpoints go to ``OUT/checkpoint/`` directly (not staged): a run that dies leaves its last
checkpoint there, and ``--resume OUT`` (or ``--resume OUT/checkpoint``) continues it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import typer

from ..exceptions import DataFileError, InvalidParameterError


#: the help panel of the options below (``dpadmm COMMAND --help`` groups them; docs/reference/cli.md explains each)
BACKEND_PANEL = "Where the parties run"
OUTPUT_PANEL = "Output"


def backend_option():
    return typer.Option("inprocess", "--backend", rich_help_panel=BACKEND_PANEL,
                        help="inprocess, process, ray or grpc.")


def ray_address_option():
    return typer.Option(None, "--ray-address", rich_help_panel=BACKEND_PANEL,
                        help="Ray cluster HOST:PORT or auto.")


def ray_resources_option():
    return typer.Option(None, "--ray-resources", rich_help_panel=BACKEND_PANEL,
                        help="Pin parties to Ray nodes: NAME=RES,…")


def timeout_option():
    return typer.Option(120.0, "--timeout", rich_help_panel=BACKEND_PANEL,
                        help="Seconds per round a party may take.")


def peer_option():
    return typer.Option([], "--peer", metavar="NAME=HOST:PORT", rich_help_panel=BACKEND_PANEL,
                        help="grpc: a party's address (repeat).")


def tls_option():
    return typer.Option(None, "--tls", metavar="DIR", rich_help_panel=BACKEND_PANEL,
                        help="grpc: cert/key/ca directory.")


def insecure_option():
    return typer.Option(False, "--insecure", rich_help_panel=BACKEND_PANEL,
                        help="grpc: plaintext (local tests only).")


def transcript_option():
    return typer.Option(None, "--transcript", metavar="FILE", rich_help_panel=OUTPUT_PANEL,
                        help="Record every message (.jsonl/.csv).")


def checkpoint_every_option():
    return typer.Option(None, "--checkpoint-every", metavar="K", rich_help_panel=OUTPUT_PANEL,
                        help="Checkpoint every K rounds.")


def resume_option():
    return typer.Option(None, "--resume", metavar="DIR", rich_help_panel=OUTPUT_PANEL,
                        help="Continue the run checkpointed in DIR.")


@dataclass
class RunOptions:
    """Validated backend / transcript / checkpoint options of one command."""

    backend: Any  # dpadmm.backends.Backend
    backend_name: str
    transcript_path: Path | None = None
    transcript: Any = None  # dpadmm.backends.Transcript
    fit_kwargs: dict = field(default_factory=dict)
    resumed_rounds: int | None = None  # with --resume: the rounds the checkpoint has done

    def begin(self) -> dict:
        """Open the transcript file (once validation is over); return the ``fit`` keyword arguments."""
        if self.transcript_path is not None and self.transcript is None:
            from ..backends import Transcript

            self.transcript = Transcript(self.transcript_path)
            self.fit_kwargs["transcript"] = self.transcript
        return self.fit_kwargs


def parse_resources(spec: Optional[str]) -> dict[str, str]:
    """``"party1=a,party2=b"`` → ``{"party1": "a", "party2": "b"}``."""
    if not spec:
        return {}
    out = {}
    for item in spec.split(","):
        if not item.strip():
            continue
        if "=" not in item:
            raise InvalidParameterError(f"--ray-resources must look like party1=RES1,party2=RES2, got {spec!r}.")
        k, v = (s.strip() for s in item.split("=", 1))
        if not k or not v:
            raise InvalidParameterError(f"--ray-resources must look like party1=RES1,party2=RES2, got {spec!r}.")
        out[k] = v
    return out


def find_checkpoint(resume: Path) -> Path:
    """The checkpoint directory inside ``resume`` (``DIR`` or ``DIR/checkpoint``)."""
    from ..engine import CHECKPOINT_FILE

    for d in (Path(resume), Path(resume) / "checkpoint"):
        if (d / CHECKPOINT_FILE).is_file():
            return d
    raise DataFileError(f"no checkpoint in {resume} (looked for {CHECKPOINT_FILE} there and in its checkpoint/ "
                        "folder); pass the --out directory of a run started with --checkpoint-every.")


def run_options(*, backend: str, ray_address: Optional[str], ray_resources: Optional[str], timeout: float,
                transcript: Optional[Path], checkpoint_every: Optional[int], resume: Optional[Path],
                out: Optional[Path], peers=(), tls: Optional[Path] = None, insecure: bool = False) -> RunOptions:
    """Validate the options (before any work) and build the backend (Ray: checks it is installed)."""
    from ..backends import BACKENDS, get_backend  # imported here: `dpadmm --help` must not load the engine

    if backend not in BACKENDS:
        raise InvalidParameterError(f"--backend must be one of {', '.join(BACKENDS)}, got {backend!r}.")
    if not timeout > 0:
        raise InvalidParameterError(f"--timeout must be positive, got timeout={timeout}.")
    resources = parse_resources(ray_resources)
    if backend != "ray" and (ray_address or resources):
        raise InvalidParameterError("--ray-address and --ray-resources need --backend ray.")
    fit_kwargs: dict[str, Any] = {}
    if checkpoint_every is not None:
        if checkpoint_every < 1:
            raise InvalidParameterError(f"--checkpoint-every must be a positive integer, got {checkpoint_every}.")
        if out is None:
            raise InvalidParameterError("--checkpoint-every needs --out (checkpoints go to OUT/checkpoint).")
        fit_kwargs.update(checkpoint_every=int(checkpoint_every), checkpoint_dir=Path(out) / "checkpoint")
    resumed_rounds = None
    if resume is not None:
        from ..engine import checkpoint_rounds  # imported here: `dpadmm --help` must not load the engine

        fit_kwargs["resume_from"] = find_checkpoint(resume)
        resumed_rounds = checkpoint_rounds(fit_kwargs["resume_from"])
    if transcript is not None and Path(transcript).is_dir():
        raise InvalidParameterError(f"--transcript {transcript} is a directory; give a file path.")
    options: dict[str, Any] = {}
    if backend in ("process", "ray"):
        options["timeout"] = float(timeout)
    if backend == "ray":
        options.update(address=ray_address, party_resources=resources or None)
        quiet_ray()
        if ray_address:  # joining a cluster: say how it is secured (a local instance stays on 127.0.0.1)
            import sys

            from ..backends.ray import security_note

            print(security_note(ray_address), file=sys.stderr)
    if backend != "grpc" and (peers or tls is not None or insecure):
        raise InvalidParameterError("--peer, --tls and --insecure need --backend grpc.")
    if backend == "grpc":
        from ..backends.grpc_backend import parse_peers
        from ..backends.grpc_tls import TLSFiles

        if tls is not None and insecure:
            raise InvalidParameterError("give either --tls DIR or --insecure, not both.")
        options.update(timeout=float(timeout), peers=parse_peers(peers), insecure=bool(insecure),
                       tls=TLSFiles.load(tls_dir=tls) if tls is not None else None)
    be = get_backend(backend, **options)
    return RunOptions(be, backend, Path(transcript) if transcript is not None else None, None, fit_kwargs,
                      resumed_rounds)


def resume_note(opts: RunOptions, rounds: int) -> str | None:
    """With ``--resume`` of a run whose checkpoint already has all ``rounds``: the line that says so."""
    if opts.resumed_rounds is None or opts.resumed_rounds < rounds:
        return None
    where = opts.fit_kwargs["resume_from"]
    return (f"--resume: the run checkpointed in {where} is already complete ({opts.resumed_rounds} of {rounds} "
            "rounds); nothing is trained again, the summary below is that run's.")


_RAY_LOG: dict = {}


def quiet_ray() -> None:
    """Send Ray's own output (its C++ core worker's log lines and the banners it prints when a node or an
    actor dies) to a file instead of the terminal of a CLI run: dpadmm reports a failure itself, in one
    ``error:`` line, which then names the file. Python's ``sys.stderr`` (dpadmm's messages, progress)
    keeps writing to the terminal. Undone by :func:`restore_stderr` when the command ends."""
    import logging
    import os
    import sys
    import tempfile

    if _RAY_LOG:
        return
    for name in ("ray", "ray.worker", "ray._private", "ray.util"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        real = sys.stderr.fileno() == 2
    except (AttributeError, OSError, ValueError):
        real = False
    sys.stderr.flush()
    fd, path = tempfile.mkstemp(prefix="dpadmm-ray-", suffix=".log")
    saved = os.dup(2)
    os.dup2(fd, 2)
    os.close(fd)
    _RAY_LOG.update(saved=saved, path=path, stream=sys.stderr if real else None)
    if real:  # Python-level stderr stays on the terminal
        sys.stderr = os.fdopen(os.dup(saved), "w", buffering=1, encoding=getattr(sys.stderr, "encoding", None) or "utf-8",
                               errors="backslashreplace")


def restore_stderr(failed: bool = False) -> str | None:
    """Undo :func:`quiet_ray`; return the path of Ray's log if the run failed and Ray wrote something."""
    import os
    import sys

    if not _RAY_LOG:
        return None
    info = dict(_RAY_LOG)
    _RAY_LOG.clear()
    if info["stream"] is not None:
        sys.stderr.flush()
        sys.stderr.close()
        sys.stderr = info["stream"]
    os.dup2(info["saved"], 2)
    os.close(info["saved"])
    path = info["path"]
    if failed and os.path.getsize(path) > 0:
        return path
    os.remove(path)
    return None


def run_metrics(opts: RunOptions) -> dict:
    """What metrics.json records about the run: backend, placement (Ray), transcript summary."""
    out: dict[str, Any] = {"backend": opts.backend_name}
    placement = getattr(opts.backend, "placement_", None)
    if placement:
        out["placement"] = placement
    if opts.transcript is not None:
        opts.transcript.close()
        out["transcript"] = opts.transcript.summary()
    return out
