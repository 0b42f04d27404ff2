"""The old spellings of the per-protocol commands, rewritten to the new ones with one deprecation line on stderr.

``dpadmm vertical [--protocol admm|experts|encrypted] …`` became ``dpadmm vertical admm|experts|encrypted …``
(issue 39, item 5). :func:`rewrite` maps an old command line to its new one (the protocol taken from ``--protocol``,
``admm`` without it) and says so; everything else is left as it is.

``dpadmm consensus …`` became ``dpadmm consensus gossip|madmm …``: ``--epsilon E`` without ``--perturbation`` (or
with ``--perturbation none``, dropped) ran the noisy-gradient gossip protocol, now ``consensus gossip``; every
other old consensus line ran M-ADMM [Zhang], now ``consensus madmm``.
"""

from __future__ import annotations

from ..exceptions import InvalidParameterError

VERTICAL = ("admm", "experts", "encrypted")


def _value(argv: list[str], name: str) -> tuple[str | None, list[str]]:
    """The value of ``name`` (``--x v`` or ``--x=v``; the last one given, as the parser takes it) and ``argv``
    without any of them."""
    value, rest, i = None, [], 0
    while i < len(argv):
        a = argv[i]
        if a == name and i + 1 < len(argv):
            value, i = argv[i + 1], i + 2
            continue
        if a.startswith(name + "="):
            value = a[len(name) + 1:]
        else:
            rest.append(a)
        i += 1
    return value, rest


def _given(argv: list[str], name: str) -> bool:
    return any(a == name or a.startswith(name + "=") for a in argv)


def rewrite(argv: list[str]) -> tuple[list[str], str | None]:
    """``(new argv, deprecation line or None)`` for a command line of the old shape."""
    if len(argv) < 2 or argv[1] in ("--help", "-h") or not argv[1].startswith("-"):
        return argv, None  # `dpadmm vertical`, its help, a new spelling, or an unknown subcommand (the parser's line)
    head, rest = argv[0], argv[1:]
    if head == "vertical":
        protocol, rest = _value(rest, "--protocol")
        protocol = "admm" if protocol is None else protocol
        if protocol not in VERTICAL:
            raise InvalidParameterError(f"--protocol must be one of {', '.join(VERTICAL)}, got --protocol={protocol!r}; "
                                        f"use `dpadmm vertical {VERTICAL[0]}|{VERTICAL[1]}|{VERTICAL[2]}`.")
        old = "dpadmm vertical" + ("" if protocol == "admm" and not _given(argv, "--protocol") else
                                   f" --protocol {protocol}")
        return [head, protocol, *rest], f"warning: `{old}` is deprecated; use `dpadmm vertical {protocol}`."
    if head == "consensus":
        perturbation, without = _value(rest, "--perturbation")
        if _given(rest, "--epsilon") and perturbation in (None, "none"):
            old = "dpadmm consensus --epsilon" + (" --perturbation none" if perturbation else "")
            return [head, "gossip", *without], f"warning: `{old}` is deprecated; use `dpadmm consensus gossip`."
        old = "dpadmm consensus" + (f" --perturbation {perturbation}" if perturbation else "")
        return [head, "madmm", *rest], f"warning: `{old}` is deprecated; use `dpadmm consensus madmm`."
    return argv, None


__all__ = ["rewrite"]
