"""Host -> server channel calls on one connection: open, close, publish (MCPL §14.3).

Rules:

- Nothing ungranted goes out (§5.4): each call checks ``admission.may_send`` first and raises
  ``NotGranted`` (a ``LocalProtocolError``: calling an ungranted method is the caller's
  mistake) without sending anything.
- ``channels/publish`` per ``publish_mode``: ``"request"`` (ACK ``{delivered, messageId}``),
  ``"notification"``, or ``"auto"`` (default): a request first; a ``-32601`` answer switches
  this server to notifications (remembered by the ``HostedServer`` across transports) and
  re-sends that message as a notification. A timed-out request is never re-sent (it may have
  been delivered).
- **Targeted publish** (RFC-011 §4-§5; docs/protocol.md, "Targeted publish"):
  ``thread_id=`` (a thread id, or None for the channel root; absent by default) is sent only
  to a channel this connection registered whose descriptor declares
  ``capabilities.publish.target``, as the registry holds it when the call is made; otherwise
  ``NoPublishTarget`` is raised and nothing is sent. It always goes out as a request,
  whatever ``publish_mode`` says, and is never re-sent as a notification. The answer is
  classified (``publish_target.targeted_outcome``) into a ``TargetedPublishResult``; an error
  answer, a timeout or a lost or closed connection after the checks is ``"unconfirmed"``
  (the exception kept in ``error``), never raised.
- ``channels/open``: the spec form ``{type, address, metadata?}`` or the libraries' form
  ``{channelId, history?}`` (docs/protocol.md, "Channels"), chosen by keywords; exactly that
  form is sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, overload

from mcpl_host.connection import DEFAULT, Timeout
from mcpl_host.jsonrpc.errors import (
    ConnectionClosed,
    ConnectionLost,
    ErrorCode,
    LocalProtocolError,
    MCPLHostError,
    RemoteError,
    RequestTimeout,
)
from mcpl_host.jsonrpc.values import is_list_or_tuple, is_object
from mcpl_host.logging import Logger
from mcpl_host.mcpl.admission import OUTBOUND_GATES, AdmissionView, may_send
from mcpl_host.mcpl.publish_target import (
    ABSENT,
    Absent,
    PublishOutcome,
    PublishTarget,
    ThreadTarget,
    publish_target,
    targeted_outcome,
    thread_target_problem,
)
from mcpl_host.mcpl.server_shapes import ChannelRegistry
from mcpl_host.services.negotiation import Requester
from mcpl_host.services.publish_settings import PUBLISH_MODES, PublishMode, PublishSettings

__all__ = [
    "ChannelCalls",
    "ChannelOpenResult",
    "NoPublishTarget",
    "NotGranted",
    "PUBLISH_MODES",
    "PublishMode",
    "PublishResult",
    "PublishSettings",
    "TargetedPublishResult",
]


class NotGranted(LocalProtocolError):
    """The method's gate is not in the grant in force (or the connection is not MCPL-ready);
    nothing was sent (MCPL §5.4). ``method``; ``capability``: the path it needs; ``why``."""

    def __init__(self, method: str, capability: str, why: str) -> None:
        super().__init__(f"{method!r} not sent: {why}")
        self.method = method
        self.capability = capability
        self.why = why


class NoPublishTarget(LocalProtocolError):
    """A ``thread_id`` for a channel whose descriptor declares no
    ``capabilities.publish.target`` (or a channel not registered on this connection); nothing
    was sent (RFC-011 §4: the host MUST NOT send ``threadId`` there). ``channel_id``."""

    def __init__(self, channel_id: str, why: str) -> None:
        super().__init__(f"'channels/publish' with a thread target not sent: {why}")
        self.channel_id = channel_id


def require_sendable(method: str, view: AdmissionView, name: str) -> None:
    """Raise ``NotGranted`` unless ``method`` may be sent to ``name`` now."""
    why = may_send(method, view)
    if why is not None:
        raise NotGranted(method, OUTBOUND_GATES.get(method, ""), f"{why} for {name!r}")


@dataclass(frozen=True, slots=True)
class PublishResult:
    """``channels/publish`` (§14.3). ``mode``: how it went out. For a request, ``delivered``
    and ``message_id`` as answered (None if absent); for a notification both None."""

    mode: Literal["request", "notification"]
    delivered: bool | None = None
    message_id: str | None = None
    raw: Any = None


@dataclass(frozen=True, slots=True)
class TargetedPublishResult:
    """A ``channels/publish`` that carried ``threadId`` (RFC-011 §5), always sent as a request.

    ``outcome``: ``"delivered"`` (posted where asked, echo equal), ``"unconfirmed"`` (something
    may have been posted, not provably there), ``"failed"`` (refused, nothing posted).
    ``why``: a sentence for the outcome (names no value). ``channel_id``, ``thread_id``: the
    target sent (None: the root). ``target``: the declaration held when it was sent.
    ``delivered``, ``message_id``, ``reason`` (the server's, escaped where shown by the caller)
    and ``echo`` (the answered ``threadId``; ``ABSENT`` when not answered) as answered;
    ``error``: the exception behind an unconfirmed outcome without a result (an error answer,
    a timeout, a lost or closed connection). ``raw``: the whole result."""

    outcome: PublishOutcome
    why: str
    channel_id: str
    thread_id: str | None
    target: PublishTarget
    delivered: bool | None = None
    message_id: str | None = None
    reason: str | None = None
    echo: ThreadTarget = ABSENT
    error: MCPLHostError | None = None
    raw: Any = None

    @property
    def mode(self) -> Literal["request"]:
        """Always a request (RFC-011 §4)."""
        return "request"


@dataclass(frozen=True, slots=True)
class ChannelOpenResult:
    """``channels/open`` (§14.3): ``channel`` is the answered descriptor (None if the result
    has no ``channel`` object); ``raw`` the whole result."""

    channel: dict[str, Any] | None
    raw: Any = None


def _blocks(content: object) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if is_list_or_tuple(content):
        return list(content)
    raise TypeError("content must be a string or a list of content blocks")


class ChannelCalls:
    """``channels/open``, ``/close`` and ``/publish`` on one connection (module rules)."""

    def __init__(
        self,
        requester: Requester,
        view: AdmissionView,
        settings: PublishSettings,
        *,
        log: Logger,
        registry: ChannelRegistry | None = None,
    ) -> None:
        self._requester = requester
        self._view = view
        self._settings = settings
        self._log = log
        self._registry = registry

    def publish_target(self, channel_id: str) -> PublishTarget | None:
        """The ``capabilities.publish.target`` the channel's descriptor declares now
        (RFC-011 §3), or None (no declaration, or not registered on this connection)."""
        registry = self._registry
        return publish_target(registry.get(channel_id) if registry is not None else None)

    def _require(self, method: str) -> None:
        require_sendable(method, self._view, self._requester.name)

    async def open(
        self,
        *,
        type: str | None = None,
        address: object = None,
        metadata: Mapping[str, Any] | None = None,
        channel_id: str | None = None,
        history: object = None,
        timeout: Timeout = DEFAULT,
    ) -> ChannelOpenResult:
        """``channels/open`` (§14.3; gate ``channels.lifecycle``) in exactly one form:
        ``type=`` and ``address=`` (``metadata=`` optional) send ``{type, address, metadata?}``;
        ``channel_id=`` (``history=`` optional) sends ``{channelId, history?}``.

        Raises:
            LocalProtocolError: both forms, neither, or a form incomplete (nothing is sent);
                ``NotGranted`` when the gate is not granted.
            RemoteError: e.g. -32024 channel open failed. Others as ``request()``.

        Cancellation: as ``request()``.
        """
        spec_form = type is not None or address is not None or metadata is not None
        lib_form = channel_id is not None or history is not None
        if spec_form == lib_form:
            raise LocalProtocolError("channels/open takes either type= and address= or channel_id=")
        if spec_form and (type is None or address is None):
            raise LocalProtocolError("channels/open with type= needs address= too")
        if lib_form and channel_id is None:
            raise LocalProtocolError("channels/open with history= needs channel_id= too")
        self._require("channels/open")
        params: dict[str, Any]
        if spec_form:
            params = {"type": type, "address": address}
            if metadata is not None:
                params["metadata"] = dict(metadata)
        else:
            params = {"channelId": channel_id}
            if history is not None:
                params["history"] = history
        result = await self._requester.request("channels/open", params, timeout=timeout)
        channel = result.get("channel") if is_object(result) else None
        return ChannelOpenResult(channel if is_object(channel) else None, result)

    async def close(self, channel_id: str, *, timeout: Timeout = DEFAULT) -> bool:
        """``channels/close {channelId}`` (§14.3; gate ``channels.lifecycle``). Returns the
        answer's ``closed is True``. Raises ``NotGranted``; ``RemoteError`` (e.g. -32023
        unknown channel); others as ``request()``. Cancellation: as ``request()``."""
        self._require("channels/close")
        result = await self._requester.request("channels/close", {"channelId": channel_id}, timeout=timeout)
        return is_object(result) and result.get("closed") is True

    @property
    def publish_mode(self) -> PublishMode:
        return self._settings.publish_mode

    @publish_mode.setter
    def publish_mode(self, mode: PublishMode) -> None:
        self._settings.set_publish_mode(mode)

    @property
    def publishes_as_notification(self) -> bool:
        """Whether the next ``channels/publish`` goes out as a notification."""
        settings = self._settings
        return settings.publish_mode == "notification" or (
            settings.publish_mode == "auto" and settings.publish_as_notification
        )

    @overload
    async def publish(
        self,
        conversation_id: str,
        channel_id: str,
        content: str | list[Any],
        *,
        stream: bool = False,
        timeout: Timeout = DEFAULT,
        thread_id: Absent = ABSENT,
    ) -> PublishResult: ...

    @overload
    async def publish(
        self,
        conversation_id: str,
        channel_id: str,
        content: str | list[Any],
        *,
        stream: bool = False,
        timeout: Timeout = DEFAULT,
        thread_id: str | None,
    ) -> TargetedPublishResult: ...

    async def publish(
        self,
        conversation_id: str,
        channel_id: str,
        content: str | list[Any],
        *,
        stream: bool = False,
        timeout: Timeout = DEFAULT,
        thread_id: ThreadTarget = ABSENT,
    ) -> PublishResult | TargetedPublishResult:
        """``channels/publish {conversationId, channelId, stream, content}`` (§14.3; gate
        ``channels.publish``), as a request or a notification per ``publish_mode``.
        ``content``: ContentBlock list, or a string (sent as one text block).
        ``thread_id``: a thread id or None (the channel root) adds ``threadId`` (RFC-011 §4):
        then see ``TargetedPublishResult`` and the module rules.

        Raises:
            NotGranted: the gate is not granted (nothing is sent). TypeError: bad content.
            NoPublishTarget: a ``thread_id`` for a channel declaring no publish target.
            LocalProtocolError: a ``thread_id`` out of RFC-011 §4's domain (e.g. ``""``).
            RemoteError: an error answer (in ``"auto"``, not -32601, which switches to
                notifications and re-sends). RequestTimeout (never re-sent), ConnectionLost,
                ConnectionClosed: as ``request()``.

        Cancellation: as ``request()``; nothing is re-sent.
        """
        self._require("channels/publish")
        params: dict[str, Any] = {
            "conversationId": conversation_id,
            "channelId": channel_id,
            "stream": stream,
            "content": _blocks(content),
        }
        if not isinstance(thread_id, Absent):
            return await self._publish_targeted(params, thread_id, timeout)
        requester = self._requester
        if self.publishes_as_notification:
            requester.notify_nowait("channels/publish", params)
            return PublishResult("notification")
        try:
            result = await requester.request("channels/publish", params, timeout=timeout)
        except RemoteError as exc:
            if exc.code != ErrorCode.METHOD_NOT_FOUND or self._settings.publish_mode != "auto":
                raise
            self._settings.learn_publish_as_notification()
            self._log.info(
                "the server does not take channels/publish as a request; sending it as a notification from now on"
            )
            self._require("channels/publish")  # it may have changed
            requester.notify_nowait("channels/publish", params)
            return PublishResult("notification")
        answer = result if is_object(result) else {}
        delivered = answer.get("delivered")
        message_id = answer.get("messageId")
        return PublishResult(
            "request",
            delivered if isinstance(delivered, bool) else None,
            message_id if isinstance(message_id, str) else None,
            result,
        )

    async def _publish_targeted(
        self, params: dict[str, Any], thread_id: str | None, timeout: Timeout
    ) -> TargetedPublishResult:
        """RFC-011 §4-§5: checked, sent as a request, the answer classified (module rules)."""
        problem = thread_target_problem(thread_id)
        if problem is not None:
            raise LocalProtocolError(problem)
        channel_id: str = params["channelId"]
        target = self.publish_target(channel_id)
        if target is None:
            registered = self._registry is not None and self._registry.get(channel_id) is not None
            why = "its descriptor declares no capabilities.publish.target" if registered else "not registered"
            raise NoPublishTarget(channel_id, f"channel {channel_id!r}: {why} (RFC-011 §4)")
        params["threadId"] = thread_id
        try:
            result = await self._requester.request("channels/publish", params, timeout=timeout)
        except RemoteError as exc:
            why = "the server answered with an error (RFC-011 §5)"
            return TargetedPublishResult("unconfirmed", why, channel_id, thread_id, target, error=exc)
        except RequestTimeout as exc:
            why = "no answer in time (RFC-011 §5)"
            return TargetedPublishResult("unconfirmed", why, channel_id, thread_id, target, error=exc)
        except (ConnectionLost, ConnectionClosed) as exc:
            why = "the connection ended before an answer (RFC-011 §5)"
            return TargetedPublishResult("unconfirmed", why, channel_id, thread_id, target, error=exc)
        outcome, why = targeted_outcome(result, thread_id)
        answer = result if is_object(result) else {}
        delivered, message_id, reason = answer.get("delivered"), answer.get("messageId"), answer.get("reason")
        echo = answer.get("threadId", ABSENT)
        if outcome != "delivered":
            self._log.info("targeted publish not confirmed", outcome=outcome, why=why)
        return TargetedPublishResult(
            outcome,
            why,
            channel_id,
            thread_id,
            target,
            delivered=delivered if isinstance(delivered, bool) else None,
            message_id=message_id if isinstance(message_id, str) else None,
            reason=reason if isinstance(reason, str) else None,
            echo=echo if echo is None or echo is ABSENT or isinstance(echo, str) else ABSENT,
            raw=result,
        )
