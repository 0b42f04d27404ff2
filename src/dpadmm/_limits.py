"""Message size limits shared by the transports and the CLI (a light module: ``dpadmm party serve``'s options read it
without importing the backends)."""

from __future__ import annotations

MAX_MESSAGE = 1 << 30  # the coordinator's side (what a party may answer) and the most a party may be set to accept
#: a party's cap on one message it receives, by default (``party serve --max-message-mb``): gRPC refuses a longer one
#: from its length prefix, before reading it (RESOURCE_EXHAUSTED to the caller), the round channel from its frame header
DEFAULT_MAX_MESSAGE = 64 << 20
