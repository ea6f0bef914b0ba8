"""Admission of inbound server requests: the one place that checks the grant (MCPL §5.4).

Rules (ENVELOPE.md R2, D3; PROTOCOL.md §2.2, §3.6):

- Every inbound method that needs a capability path is listed in ``INBOUND_GATES``.
  ``inference/request`` with ``stream: true`` needs ``inferenceRequest.streaming`` too.
- Before the initial policy receipt (``grant`` is None), and for a server that never
  negotiated MCPL, every gated method is refused with ``-32002`` and
  ``data: {"capability": <path>}`` (D3); afterwards, a path not in the grant is refused the same
  way. Ungated methods (``ping``, MCP methods, ``mcpl/manifestChanged``) are not judged here.

``admit()`` is pure and is called from exactly one place, the connection's request router.
"""

from __future__ import annotations

from typing import Any

from mcpl_host.jsonrpc.errors import ErrorCode, HandlerError
from mcpl_host.mcpl.grants import Grant

__all__ = ["INBOUND_GATES", "admit", "required_capabilities"]

#: Server -> host methods and the capability path each needs (PROTOCOL.md §3.1, §14.1).
INBOUND_GATES: dict[str, str] = {
    "push/event": "pushEvents",
    "inference/request": "inferenceRequest",
    "model/info": "modelInfo",
    "channels/register": "channels.register",
    "channels/changed": "channels.register",
    "channels/list": "channels.register",
    "channels/incoming": "channels.incoming",
}


def required_capabilities(method: str, params: Any) -> tuple[str, ...]:
    """The capability paths ``method`` needs with these ``params`` (empty: ungated)."""
    gate = INBOUND_GATES.get(method)
    if gate is None:
        return ()
    if method == "inference/request" and isinstance(params, dict) and params.get("stream") is True:
        return (gate, "inferenceRequest.streaming")
    return (gate,)


def admit(method: str, params: Any, grant: Grant | None) -> HandlerError | None:
    """None when the request may be served, else the error to answer with (MCPL §5.4)."""
    for path in required_capabilities(method, params):
        if grant is None or not grant.allows(path):
            return HandlerError(ErrorCode.CAPABILITY_DENIED, "Capability denied", {"capability": path})
    return None
