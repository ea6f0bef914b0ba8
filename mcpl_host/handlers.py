"""The interface an embedding framework implements for what a server sends unasked.

Subclass ``HostHandlers`` and override what you serve; every default answers, so no server
request is ever left unanswered (MCPL §6.6, ENVELOPE.md R2).

- Async request methods each run in their own task (a handler that waits never blocks the
  read loop or other requests). Return the ``result`` object, raise ``HandlerError`` to
  answer with a specific error, ``MethodNotFound`` for ``-32601``; anything else raised is
  answered ``-32603`` and logged (R3).
- ``on_notification``, ``on_refused``, ``on_orphan_response`` and ``on_connection_lost`` are
  called from the read loop and must not block: hand work to your own task or memory stream.
- Admission (the capability grant) has already run when a request handler is called.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mcpl_host.jsonrpc.envelope import Response
from mcpl_host.jsonrpc.errors import ConnectionLost, ErrorCode, HandlerError, MethodNotFound
from mcpl_host.mcpl.policy import PolicyOutcome

__all__ = ["HostHandlers", "InferenceStream", "RequestContext"]


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Who asked: ``server`` (the connection's name), the request ``id`` as sent (string,
    number or None), ``method``, and the transport ``epoch`` it was read on."""

    server: str
    id: Any
    method: str
    epoch: int


class InferenceStream:
    """Sends the ``inference/chunk`` notifications of one streamed ``inference/request``
    (MCPL §11.4): ``requestId`` is the request's JSON-RPC id as sent, ``index`` counts from 0.
    ``send(delta)`` does not wait; it drops the chunk if the transport has closed."""

    __slots__ = ("_index", "_link", "_request_id", "_session")

    def __init__(self, request_id: Any, link: Any, session: Any) -> None:
        self._request_id = request_id
        self._link = link
        self._session = session
        self._index = 0

    def send(self, delta: str) -> None:
        params = {"requestId": self._request_id, "index": self._index, "delta": delta}
        self._index += 1
        self._link.send(self._session.notification("inference/chunk", params))


class HostHandlers:
    """Defaults: ``push/event`` is accepted; other requests are ``-32601``; notifications,
    refusals and orphan responses are ignored (the connection logs them)."""

    async def push_event(self, context: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
        """A ``push/event`` request that passed admission (MCPL §9). Returns
        ``{"accepted": bool, "inferenceId"?: str, "reason"?: str}`` (§9.3)."""
        return {"accepted": True}

    async def inference_request(
        self, context: RequestContext, params: dict[str, Any], stream: InferenceStream | None
    ) -> dict[str, Any]:
        """An ``inference/request`` that passed admission (MCPL §11). ``stream`` is given when
        the server asked for streaming and the request has an id (R7: id null is answered
        whole); send deltas through it, then return the whole result
        ``{content, model, finishReason, usage: {inputTokens, outputTokens}}`` (§11.3).
        Default: refused, since no model is configured."""
        raise HandlerError(ErrorCode.METHOD_NOT_FOUND, "Method not found: no inference provider is configured")

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

    def on_policy_receipt(self, server: str, outcome: PolicyOutcome) -> None:
        """The receipt of a ``featureSets/update`` arrived (MCPL §6.7): accepted (perhaps
        ``mode: "degraded"``) or refused with its ``fallback``. It never widens the grant; a
        refusal is for a person to see, never an input to policy. Must not block."""

    def on_connection_lost(self, server: str, error: ConnectionLost) -> None:
        """The server went away on its own (exit, closed stdout, broken pipe); ``error`` has
        its ``exit_status`` and ``stderr_tail``. Not called when the host closes. Must not
        block."""

    def on_orphan_response(self, server: str, response: Response) -> None:
        """A response naming no pending request: a late answer after a timeout or a
        cancellation (ENVELOPE.md R5). Must not block."""
