"""The interface an embedding framework implements for what a server sends unasked.

Subclass ``HostHandlers`` and override what you serve; every default answers, so no server
request is ever left unanswered (MCPL §6.6; docs/protocol.md R2).

- Async request methods each run in their own task (a handler that waits never blocks the
  read loop or other requests). Return the ``result`` object, raise ``HandlerError`` to
  answer with a specific error, ``MethodNotFound`` for ``-32601``; anything else raised is
  answered ``-32603`` and logged (docs/protocol.md R3).
- ``on_notification``, ``on_refused``, ``on_orphan_response`` and ``on_connection_lost`` are
  called from the read loop and must not block: hand work to your own task or memory stream.
- Admission (the capability grant, the feature set) and params validation have already run
  when a request handler is called; what a handler returns is checked for shape, and a wrong
  shape is answered ``-32603`` and logged (``mcpl.server_methods``).
- Client features (MCP 2025-11-25 "Client Features"): ``HostHandlers(roots=..., sampling=...,
  elicitation=...)`` or the class attributes of those names (``client_features``); each one
  given is advertised and served, by a server request or, in MCP 2026-07-28, by an input
  request (``mcpl_host.client_features``). Without them ``roots/list``,
  ``sampling/createMessage`` and ``elicitation/create`` go to ``request`` (default
  ``-32601``) and are not advertised.
- Configuration without subclassing: ``HostHandlers(model_info={...}, channel_patterns=(...))``.
  A subclass with its own ``__init__`` need not call ``super().__init__()``: the class
  defaults (no model information, every channel id allowed) then apply.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from typing_extensions import TypeIs

from mcpl_host.client_features import (
    ClientFeatures,
    RequestContext,
    Roots,
    RootsProvider,
    RootsSource,
)
from mcpl_host.jsonrpc.envelope import Response
from mcpl_host.jsonrpc.errors import ConnectionLost, ErrorCode, HandlerError, MCPLHostError, MethodNotFound
from mcpl_host.mcpl.policy import PolicyOutcome

if TYPE_CHECKING:
    from mcpl_host.client_requests import ElicitationHandler, SamplingHandler
    from mcpl_host.mcpl.input_streams import InputStreamUpdate, SenderBinding
    from mcpl_host.mcpl.manifest_diff import ChangeReceipt

__all__ = [
    "HostHandlers",
    "client_features",
    "InferenceStream",
    "Notifier",
    "RequestContext",
    "serves_inference",
    "serves_model_info",
]


#: Queues a notification on the transport a request came on: ``notify(method, params)``.
Notifier = Callable[[str, Any], None]


class InferenceStream:
    """Sends the ``inference/chunk`` notifications of one streamed ``inference/request``
    (MCPL §11.4) on the transport the request came on: ``requestId`` is the request's
    JSON-RPC id as sent, ``index`` counts from 0. ``send(delta)`` does not wait; the chunk is
    dropped if that transport has closed."""

    __slots__ = ("_index", "_notify", "_request_id")

    def __init__(self, request_id: object, notify: Notifier) -> None:
        self._request_id = request_id
        self._notify = notify
        self._index = 0

    def send(self, delta: str) -> None:
        params = {"requestId": self._request_id, "index": self._index, "delta": delta}
        self._index += 1
        try:
            self._notify("inference/chunk", params)
        except MCPLHostError:
            pass  # the transport has gone; the answer will not be sent either


class HostHandlers:
    """Defaults: ``push/event`` is accepted; ``inference/request`` is ``-32601``; ``model/info``
    answers the configured ``model_info`` or ``-32601``; channels are registered as the
    ``channel_patterns`` allow and incoming channel messages are accepted; other requests are
    ``-32601``; notifications, refusals and orphan responses are ignored (the connection logs
    them).

    ``model_info``: a ModelInfo ``{id, vendor, contextWindow, capabilities}`` (MCPL §12) that
    ``model/info`` answers with. ``channel_patterns``: channel-id globs (``fnmatch``, e.g.
    ``"discord:acme/*"``) a server may register and receive on (per-channel narrowing, MCPL
    §14.5); None allows every id.
    """

    #: The ModelInfo ``model/info`` answers with; None: not configured (``-32601``).
    configured_model_info: Mapping[str, Any] | None = None
    #: Channel-id globs allowed (MCPL §14.5); None: every channel id.
    channel_patterns: tuple[str, ...] | None = None
    #: Answers ``roots/list`` (``Roots`` or the application's ``RootsProvider``); None: not served.
    roots: RootsProvider | None = None
    #: Answers ``sampling/createMessage``; None: not served.
    sampling: SamplingHandler | None = None
    #: Answers ``elicitation/create`` in the modes it names; None: not served.
    elicitation: ElicitationHandler | None = None

    def __init__(
        self,
        *,
        model_info: Mapping[str, Any] | None = None,
        channel_patterns: Iterable[str] | None = None,
        roots: RootsProvider | RootsSource | None = None,
        sampling: SamplingHandler | None = None,
        elicitation: ElicitationHandler | None = None,
    ) -> None:
        """``roots``: a ``RootsProvider`` (such as ``Roots``), or a list of roots (``Root``,
        ``file://`` URIs or paths) or a callable giving one, made into ``Roots``. Raises
        ``ValueError`` for a root that is neither a ``file://`` URI nor a path."""
        if roots is not None:
            self.roots = roots if _is_provider(roots) else Roots(roots)
        if sampling is not None:
            self.sampling = sampling
        if elicitation is not None:
            self.elicitation = elicitation
        if model_info is not None:
            self.configured_model_info = dict(model_info)
        if channel_patterns is not None:
            patterns = (channel_patterns,) if isinstance(channel_patterns, str) else channel_patterns
            self.channel_patterns = tuple(patterns)

    async def push_event(self, context: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
        """A ``push/event`` that passed admission and validation (MCPL §9.2), not a duplicate
        (§9.4: duplicates get this result again without a call). ``params`` is a copy whose
        ``tags``, when sent, hold the core closure (§16.3), with ``modelContent``: the
        model-visible form of ``payload.content`` (§19.5: each reference a stub; build a
        wake from it, never from the raw blocks). Returns ``{"accepted": bool,
        "inferenceId"?: str, "reason"?: str}`` (§9.3); ``accepted: false`` should carry a
        ``reason`` (a generic one is filled in otherwise)."""
        return {"accepted": True}

    async def inference_request(
        self, context: RequestContext, params: dict[str, Any], stream: InferenceStream | None
    ) -> dict[str, Any]:
        """An ``inference/request`` that passed admission and validation (MCPL §11; ``messages``
        is a non-empty array of ``{role, content}``). ``stream`` is given when the server asked
        for streaming and the request has an id (docs/protocol.md R7: id null is answered whole); send deltas
        through it, then return the whole result ``{content: str, model: str, finishReason:
        "end_turn" | "max_tokens" | "stop_sequence", usage: {inputTokens, outputTokens}}``
        (§11.3). Default: refused, since no model is configured."""
        raise HandlerError(
            ErrorCode.METHOD_NOT_FOUND, "Method not found: no inference provider is configured"
        )

    async def model_info(self, context: RequestContext) -> dict[str, Any]:
        """A granted ``model/info`` (MCPL §12): the ModelInfo ``{id: str, vendor: str,
        contextWindow: int, capabilities: [str]}``. Default: the configured ``model_info``,
        else ``-32601`` (never silence)."""
        if self.configured_model_info is None:
            raise HandlerError(
                ErrorCode.METHOD_NOT_FOUND, "Method not found: no model information is configured"
            )
        return dict(self.configured_model_info)

    def channel_policy(self, server: str) -> tuple[str, ...] | None:
        """The channel-id globs ``server`` may register and receive on (MCPL §14.5), read at
        each ``channels/register``, ``channels/changed`` and incoming message; None allows
        every id. Default: ``channel_patterns``. Must not block."""
        return self.channel_patterns

    async def channel_message(self, context: RequestContext, message: dict[str, Any]) -> str | None:
        """One ``channels/incoming`` message that passed the checks (MCPL §14.3, §14.5): from
        a channel this connection registered, inbound or bidirectional, allowed by the grant
        and ``channel_policy``. ``message`` is a copy whose ``tags``, when sent, hold the core
        closure, with ``modelContent``: the model-visible form of its ``content`` (§19.5). Return the conversation id it went to, or None; raise ``HandlerError`` to
        refuse it (its message becomes the ``reason``). ``context.id`` is None when the server
        sent ``channels/incoming`` as a notification. Default: accepted, no conversation."""
        return None

    def input_stream_binding(
        self, server: str, channel_id: str, descriptor: Mapping[str, Any]
    ) -> SenderBinding | None:
        """Who ``server`` may speak for on its registered channel ``channel_id`` in an input
        stream (RFC-009 §4.1, experimental; docs/protocol.md IS5): a ``SenderBinding`` (the
        sender ids it is authenticated to represent, and the channel's stable identity), or
        None when it may represent nobody there (``-32017``). A claimed sender id is no
        authentication: the binding comes from the application. Read at every input call
        and reconcile; must not block. Default: None (no stream opens)."""
        return None

    def on_input_stream(self, server: str, update: InputStreamUpdate) -> None:
        """A provisional input-stream fact (RFC-009 §5, §7, §8): an accepted replacement
        snapshot (``update.status`` ``"updated"``, ``update.text`` the whole current
        hypothesis, None in ``final-only`` mode), or the stream's end (``"completed"``,
        ``"aborted"``, ``"expired"``). Volatile: never history, never a message; the
        completed final arrives as an ordinary ``channel_message``. Default: ignored."""

    async def request(self, context: RequestContext, params: Any) -> Any:
        """Any other server request, and ``roots/list``, ``sampling/createMessage`` or
        ``elicitation/create`` when its handler is not given (then not advertised either).
        Default: ``-32601 Method not found``."""
        raise MethodNotFound(context.method)

    def on_notification(self, server: str, method: str, params: Any) -> None:
        """A server notification, after the connection's own routing (progress, cancelled,
        message). Must not block."""

    def on_refused(self, server: str, method: str, params: Any, error: dict[str, Any]) -> None:
        """A server request the connection answered with ``error`` (the JSON-RPC error object
        as sent) without calling a handler: refused by admission (``-32002``, ``-32003``,
        ``-32001``; MCPL §5.4, §6.6), malformed params (``-32602`` with ``data.problems``), or
        the host busy (``-32603``). Must not block."""

    def on_channels_changed(self, server: str, channels: list[dict[str, Any]]) -> None:
        """The channels ``server`` has registered changed (``channels/register`` or
        ``channels/changed``, request or notification): ``channels`` is the whole current
        list of descriptors, as sent. Must not block."""

    def on_policy_receipt(self, server: str, outcome: PolicyOutcome) -> None:
        """The receipt of a ``featureSets/update`` arrived (MCPL §6.7): accepted (perhaps
        ``mode: "degraded"``) or refused with its ``fallback``. It never widens the grant; a
        refusal is for a person to see, never an input to policy. Must not block."""

    def on_manifest_change(self, server: str, receipt: ChangeReceipt) -> None:
        """The server's manifest changed (MCPL §17.6): one ``ChangeReceipt`` per change, with
        its impacts (``capability-revoked`` applied, ``capability-expansion-pending`` waiting on
        a decision, ...). Additions are never granted by themselves. Must not block."""

    def on_connection_lost(self, server: str, error: ConnectionLost) -> None:
        """The server went away on its own (exit, closed stdout, broken pipe); ``error`` has
        its ``exit_status`` and ``stderr_tail``. Not called when the host closes. Must not
        block."""

    def on_session_renewed(self, server: str, renewals: int) -> None:
        """The server ended its Streamable HTTP session and the connection goes on in a new
        one (``renewals``: how many so far; docs/protocol.md HS1-HS5): a ``tools/call`` in
        flight then failed (it may have run), the lists are read again. Must not block."""

    def on_orphan_response(self, server: str, response: Response) -> None:
        """A response naming no pending request: a late answer after a timeout or a
        cancellation (docs/protocol.md R5). Must not block."""


def _is_provider(value: object) -> TypeIs[RootsProvider]:
    return callable(getattr(value, "list_roots", None)) and callable(getattr(value, "watch", None))


def client_features(handlers: HostHandlers) -> ClientFeatures:
    """The client features ``handlers`` serve now (read at each handshake): what the host
    advertises and answers (``mcpl_host.client_features``)."""
    return ClientFeatures(roots=handlers.roots, sampling=handlers.sampling, elicitation=handlers.elicitation)


def serves_inference(handlers: HostHandlers) -> bool:
    """Whether ``handlers`` answer ``inference/request`` (they override ``inference_request``):
    the host advertises ``inferenceRequest`` only then (MCPL §5.2)."""
    return type(handlers).inference_request is not HostHandlers.inference_request


def serves_model_info(handlers: HostHandlers) -> bool:
    """Whether ``handlers`` answer ``model/info`` (configured ``model_info``, or an override
    of ``model_info``): the host advertises ``modelInfo`` only then (MCPL §5.2, §12)."""
    return (
        handlers.configured_model_info is not None or type(handlers).model_info is not HostHandlers.model_info
    )
