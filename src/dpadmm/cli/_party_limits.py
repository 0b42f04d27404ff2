"""``dpadmm party serve``'s transport limits (kept out of :mod:`.party`): the cap on one received message
(``--max-message-mb``, issue 36) and the summarised log of refused TLS handshakes on the gRPC port (F6)."""

from __future__ import annotations

from typing import Optional

import typer

from .._limits import DEFAULT_MAX_MESSAGE, MAX_MESSAGE
from ..exceptions import InvalidParameterError

MAX_MESSAGE_OPTION = typer.Option(
    None, "--max-message-mb", metavar="MB",
    help=f"The most MiB one message to this party may hold (default {DEFAULT_MAX_MESSAGE >> 20}; at most "
         f"{MAX_MESSAGE >> 20}): a longer one is refused from its length, before it is read. Size it from the run: "
         "the largest message is about rows × 8 bytes per vector (vertical), rows × 512 bytes (vertical-encrypted "
         "ciphertexts), or the Setup's id list.")


def max_message_bytes(mb: Optional[float]) -> int:
    """``--max-message-mb`` in bytes (None: the default), or one line naming the problem (exit code 2)."""
    if mb is None:
        return DEFAULT_MAX_MESSAGE
    if not (mb == mb and 0 < mb <= MAX_MESSAGE >> 20):
        raise InvalidParameterError(f"--max-message-mb must be in (0, {MAX_MESSAGE >> 20}] MiB, got {mb:g}; e.g. "
                                    f"--max-message-mb {DEFAULT_MAX_MESSAGE >> 20}.")
    return max(int(mb * (1 << 20)), 1)


def handshake_refusals(holder: list):
    """The gRPC port's refused TLS handshakes (``capture_handshake_refusals``): to the audit log and the party's log,
    summarised per reason (one line per minute with the count of the others, :mod:`..backends.refusal_log`)."""
    from ..backends.refusal_log import RefusalLimiter, held_note, kind_of  # the backends load when a party serves

    limit = RefusalLimiter()

    def refused(reason: str) -> None:
        if not holder:
            return
        held = limit.admit("", kind_of("(TLS handshake)", reason))
        if held is not None:
            reason += held_note(held, "", limit.interval)
            holder[0].audit("", "(TLS handshake)", "refused", reason)
            holder[0].echo(f"refused a TLS handshake: {reason}")
    return refused
