"""Option blocks the commands share, defined once: reusable ``typer.Option`` definitions and typed option groups.

An option group is a frozen dataclass whose fields carry their ``typer.Option`` (``field(metadata=…)``); a command
takes the whole block as one parameter annotated with the group and decorated with :func:`grouped`, which spells
the group's options out in the command's signature (where typer reads them: same names, defaults, help panels and
order as if written there) and hands the command one typed value. ``dpadmm vertical``, ``consensus`` and
``functional`` share :class:`Parties` (where the parties run) this way, and the seed, monitor and output options
below.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, List, Optional

import typer

from . import _backend as bk


def _option(factory: Callable[[], Any]):
    """A dataclass field whose typer option ``factory()`` builds (a fresh ``OptionInfo`` per command)."""
    return field(metadata={"option": factory})


def grouped(fn: Callable) -> Callable:
    """Spell out every option-group parameter of ``fn`` (annotated with an :class:`OptionGroup` subclass) as its
    options, in place, for typer; the wrapper collects them back into the group's typed value."""
    hints = typing.get_type_hints(fn)
    groups = {name: hint for name, hint in hints.items()
              if isinstance(hint, type) and issubclass(hint, OptionGroup)}
    params = []
    for p in inspect.signature(fn).parameters.values():
        if p.name in groups:
            params += [q.replace(kind=p.kind) for q in groups[p.name].parameters()]
        else:
            params.append(p.replace(annotation=hints.get(p.name, p.annotation)))

    @functools.wraps(fn)
    def command(**kwargs):
        for name, group in groups.items():
            kwargs[name] = group(**{f: kwargs.pop(f) for f in group.names()})
        return fn(**kwargs)

    command.__signature__ = inspect.Signature(params)
    command.__annotations__ = {p.name: p.annotation for p in params}
    return command


class OptionGroup:
    """Base of the typed option groups (frozen dataclasses; see the module docstring)."""

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def parameters(cls) -> list[inspect.Parameter]:
        hints = typing.get_type_hints(cls)
        return [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.metadata["option"](),
                                  annotation=hints[f.name]) for f in dataclasses.fields(cls)]


@dataclass(frozen=True)
class Parties(OptionGroup):
    """Where the parties run: the backend and its Ray and gRPC options (the "Where the parties run" panel)."""

    backend: str = _option(bk.backend_option)
    ray_address: Optional[str] = _option(bk.ray_address_option)
    ray_resources: Optional[str] = _option(bk.ray_resources_option)
    timeout: float = _option(bk.timeout_option)
    peer: List[str] = _option(bk.peer_option)
    tls: Optional[Path] = _option(bk.tls_option)
    insecure: bool = _option(bk.insecure_option)

    def run_options(self, *, out: Optional[Path], transcript: Optional[Path] = None,
                    checkpoint_every: Optional[int] = None, resume: Optional[Path] = None) -> bk.RunOptions:
        """Validate the block (before any work) and build the backend: :func:`dpadmm.cli._backend.run_options`."""
        return bk.run_options(backend=self.backend, ray_address=self.ray_address, ray_resources=self.ray_resources,
                              timeout=self.timeout, transcript=transcript, checkpoint_every=checkpoint_every,
                              resume=resume, out=out, peers=self.peer, tls=self.tls, insecure=self.insecure)


def seed_option(panel: str):
    return typer.Option(None, rich_help_panel=panel, help="Seed (default: OS entropy).")


def monitor_option(panel: str, help: str):
    return typer.Option(None, "--monitor/--no-monitor", rich_help_panel=panel, help=help)


def out_option(help: str = "Directory for metrics.json and plots."):
    return typer.Option(None, rich_help_panel=bk.OUTPUT_PANEL, help=help)


def quiet_option():
    return typer.Option(False, rich_help_panel=bk.OUTPUT_PANEL, help="No progress bar.")


def delta_option(panel: str, help: str):
    return typer.Option(1e-5, rich_help_panel=panel, help=help)


__all__ = ["OptionGroup", "Parties", "delta_option", "grouped", "monitor_option", "out_option", "quiet_option",
           "seed_option"]
