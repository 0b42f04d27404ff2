"""Protocols as data: the declaration types (:mod:`.spec`) and the registry of declared protocols (:mod:`.registry`).

See :mod:`dpadmm.protocol.spec` for what a declaration holds and how a party serves it.
"""

from ..exceptions import ProtocolError
from .registry import POSITIONAL_SPEC, PROVIDERS, find_protocol, protocol_for, protocol_names, protocol_of, register, require_served
from .spec import (ExemptMessage, PartyData, PolicyHooks, Protocol, check_request_arguments, check_setup,
                   request_arguments, setup_fields, setup_record, setup_view)

__all__ = ["Protocol", "ExemptMessage", "PolicyHooks", "PartyData", "ProtocolError", "setup_view", "register", "find_protocol",
           "protocol_names", "protocol_of", "POSITIONAL_SPEC", "protocol_for", "require_served", "PROVIDERS", "check_setup", "setup_fields", "setup_record",
           "request_arguments", "check_request_arguments"]
