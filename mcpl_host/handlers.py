"""The interface an embedding framework implements for what a server sends unasked.

Subclass ``HostHandlers`` and override what you serve; every default answers, so no server
request is ever left unanswered (MCPL §6.6, ENVELOPE.md R2).

- Async request methods each run in their own task (a handler that waits never blocks the
  read loop or other requests). Return the ``result`` object, raise ``HandlerError`` to
  answer with a specific error, ``MethodNotFound`` for ``-32601``; anything else raised is
  answered ``-32603`` and logged (R3).
- ``on_notification``, ``on_refused`` and ``on_orphan_response`` are called from the read
  loop and must not block: hand work to your own task or memory stream.
- Admission (the capability grant) has already run when a request handler is called.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mcpl_host.jsonrpc.envelope import Response
from mcpl_host.jsonrpc.errors import MethodNotFound

__all__ = ["HostHandlers", "RequestContext"]


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Who asked: ``server`` (the connection's name), the request ``id`` as sent (string,
    number or None), ``method``, and the transport ``epoch`` it was read on."""

    server: str
    id: Any
    method: str
    epoch: int


class HostHandlers:
    """Defaults: ``push/event`` is accepted; other requests are ``-32601``; notifications,
    refusals and orphan responses are ignored (the connection logs them)."""

    async def push_event(self, context: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
        """A ``push/event`` request that passed admission (MCPL §9). Returns
        ``{"accepted": bool, "inferenceId"?: str, "reason"?: str}`` (§9.3)."""
        return {"accepted": True}

    async def request(self, context: RequestContext, params: Any) -> Any:
        """Any other server request (``roots/list``, ``sampling/createMessage``, ...).
        Default: ``-32601 Method not found`` (we advertise neither roots nor sampling)."""
        raise MethodNotFound(context.method)

    def on_notification(self, server: str, method: str, params: Any) -> None:
        """A server notification, after the connection's own routing (progress, cancelled,
        message). Must not block."""

    def on_refused(self, server: str, method: str, params: Any, error: dict[str, Any]) -> None:
        """A server request the connection answered with ``error`` (the JSON-RPC error object
        as sent) without calling a handler: refused by admission (``-32002``, MCPL §5.4),
        malformed ``push/event`` params (``-32602``), or the host busy (``-32603``). Must not
        block."""

    def on_orphan_response(self, server: str, response: Response) -> None:
        """A response naming no pending request: a late answer after a timeout or a
        cancellation (ENVELOPE.md R5). Must not block."""
