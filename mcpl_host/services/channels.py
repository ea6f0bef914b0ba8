"""Channels a server registers and the messages it delivers (MCPL §14), after admission.

Rules:

- One ``ChannelRegistry`` per connection: registrations do not outlive the transport that
  made them (a new transport starts with an empty grant and an empty registry, MCPL §5.3);
  the ``HostedServer`` keeps the current list for the application, which is told each change
  (``on_channels_changed``), the lapse at a transport's end included.
- ``channels/register`` and ``channels/changed`` answer ``{results: [{id, accepted,
  reason?, limit?}]}``, item by item, within ``Limits.max_channels`` and
  ``max_channel_descriptor_bytes`` (``ChannelRegistry``); the channel-id patterns are read from
  ``HostHandlers.channel_policy`` at each one (§14.5). ``channels/list`` answers
  ``{channels: [descriptors]}``.
- ``channels/incoming`` answers per-message results ``{messageId, accepted, conversationId?,
  reason?}``; each message is judged by ``admission.admit_channel_message`` when its turn
  comes. Accepted messages (tags closed) go to ``HostHandlers.channel_message``: a
  ``HandlerError`` refuses that message with its message as reason, another exception as
  ``internal_error`` (logged).
- A registered descriptor whose ``capabilities.publish`` declares nothing valid (RFC-011 §3:
  ``target`` is ``exact`` or ``root``) is kept with its other members, as a channel with no
  declaration, with a diagnostic; so is a ``channels/incoming`` message carrying ``threadId``
  on a ``root`` channel (RFC-011 §3; docs/protocol.md, "Targeted publish", P1, P6).
- The notification forms (seen in real servers; docs/protocol.md, "Channels"), admitted by
  the dispatcher like the requests: a ``channels/changed`` notification is filtered item by
  item with a warning line per refused item; a ``channels/incoming`` notification is
  processed in a task with a warning line (no reply is possible); a refused one gets a
  warning line (``refused_notification``). Diagnostics are bounded per connection
  (``Limits.channel_diagnostics_logged``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from typing_extensions import TypeIs

from mcpl_host.handlers import HostHandlers, RequestContext
from mcpl_host.inbound import BackgroundJob
from mcpl_host.jsonrpc.errors import HandlerError
from mcpl_host.jsonrpc.values import JSONObject, is_mapping
from mcpl_host.limits import DEFAULT_MAX_CHANNEL_DESCRIPTOR_BYTES, DEFAULT_MAX_CHANNELS, DEFAULT_MAX_TAGS
from mcpl_host.logging import LogBudget, Logger, Redactor, ServerValue
from mcpl_host.mcpl.admission import AdmissionView, admit_channel_message
from mcpl_host.mcpl.publish_target import incoming_thread_problem, publish_target, publish_target_problem
from mcpl_host.mcpl.references import MODEL_CONTENT, ContentView
from mcpl_host.mcpl.server_shapes import ChannelRegistry, ItemResult
from mcpl_host.mcpl.tags import read_tags

if TYPE_CHECKING:
    from mcpl_host.services.coalescing import InboxLane

__all__ = ["ChannelService", "InputStreamKeys"]


class InputStreamKeys(Protocol):
    """The canonical message keys of RFC-009 §4.3 (``InputStreamService``)."""

    def reserved(self, message: Any) -> bool: ...

    def committed(self, message: Any) -> None: ...

    def reconcile(self) -> None: ...


def _is_conversation(answer: object) -> TypeIs[str | None]:
    """What a ``channel_message`` handler may return; the application's handler may return
    anything, whatever its annotation says."""
    return answer is None or isinstance(answer, str)


class ChannelService:
    """Serves the server -> host channel methods of one connection (module rules).
    ``transport`` goes in each ``RequestContext`` (``ServerConnection.sequence``)."""

    def __init__(
        self,
        name: str,
        handlers: HostHandlers,
        view: AdmissionView,
        *,
        on_changed: Callable[[list[dict[str, Any]]], None],
        log: Logger,
        redactor: Redactor,
        diagnostics_logged: int,
        max_notification_deliveries: int,
        max_channels: int = DEFAULT_MAX_CHANNELS,
        max_descriptor_bytes: int = DEFAULT_MAX_CHANNEL_DESCRIPTOR_BYTES,
        max_tags: int = DEFAULT_MAX_TAGS,
        transport: int,
        content_view: ContentView | None = None,
    ) -> None:
        self._content_view = content_view
        #: RFC-006: messages carrying ``coalesce`` go to the event inbox (set by the connection).
        self.inbox: InboxLane | None = None
        self.name = name
        self._transport = transport
        self.registry = ChannelRegistry(max_channels=max_channels, max_descriptor_bytes=max_descriptor_bytes)
        self._max_tags = max_tags
        self._handlers = handlers
        self._view = view
        self._on_changed = on_changed
        self._log = log
        self._redactor = redactor
        self._diagnostics = LogBudget(diagnostics_logged)
        self._max_deliveries = max_notification_deliveries
        self._deliveries = 0  # channels/incoming notifications being processed
        #: RFC-009 (experimental): the connection's input streams, sharing the canonical
        #: message keys with ordinary incoming messages (docs/protocol.md IS7); None when off.
        self.input_streams: InputStreamKeys | None = None

    def patterns(self) -> tuple[str, ...] | None:
        """The application's channel-id patterns for this server now (§14.5), or None."""
        return self._patterns()

    def _patterns(self) -> tuple[str, ...] | None:
        patterns = self._handlers.channel_policy(self.name)
        return None if patterns is None else tuple(patterns)

    async def serve(self, context: RequestContext, params: Any) -> JSONObject:
        """The result of an admitted ``channels/*`` request."""
        method = context.method
        if method == "channels/list":
            return {"channels": self.registry.descriptors()}
        if method == "channels/incoming":
            return {"results": await self._incoming(context, params["messages"])}
        return {"results": [item.to_wire() for item in self._change(params, method)]}

    def _change(self, params: Mapping[str, object], method: str) -> list[ItemResult]:
        lists: dict[str, Any]
        if method == "channels/register":
            lists = {"added": params["channels"]}
        else:
            lists = {key: params.get(key) or [] for key in ("added", "removed", "updated")}
        results = self.registry.change(**lists, patterns=self._patterns())
        if any(item.accepted for item in results):
            self._on_changed(self.registry.descriptors())
            if self.input_streams is not None:  # RFC-009 §4.1: a lease bound to what changed ends
                self.input_streams.reconcile()
        for item in results:
            descriptor = self.registry.get(item.id) if item.accepted else None
            problem = publish_target_problem(descriptor) if descriptor is not None else None
            if problem is not None:  # RFC-011 §3: no declaration, the descriptor kept
                self.diagnostic(
                    f"{method}: publish target not declared",
                    id=ServerValue(item.id, self._redactor),
                    problem=problem,
                )
        over = [item for item in results if item.reason == "limit_exceeded"]
        if over:
            self.diagnostic(
                f"{method}: items refused over a bound",
                refused=len(over),
                limits=sorted({item.limit for item in over if item.limit is not None}),
                registered=len(self.registry),
            )
        return results

    async def _incoming(self, context: RequestContext, messages: Sequence[object]) -> list[dict[str, Any]]:
        return [await self._incoming_one(context, message) for message in messages]

    async def incoming_one(self, context: RequestContext, message: Any) -> JSONObject:
        """A streamed final (RFC-009 §6.1): one message through the ordinary path."""
        return await self._incoming_one(context, message, streamed=True)

    async def _incoming_one(
        self, context: RequestContext, message: Any, *, streamed: bool = False
    ) -> JSONObject:
        raw_id = message.get("messageId") if is_mapping(message) else None
        message_id = raw_id if isinstance(raw_id, str) else None
        reason = admit_channel_message(message, self._view, self.registry, self._patterns())
        streams = self.input_streams
        if reason is None and streams is not None and not streamed and streams.reserved(message):
            reason = "duplicate"  # RFC-009 §4.3: one reservation for both paths (IS7)
        if reason is None:
            target = publish_target(self.registry.get(message.get("channelId")))
            thread_problem = incoming_thread_problem(message, target)
            if thread_problem is not None:  # RFC-011 §3; delivered all the same
                self.diagnostic("channels/incoming: thread id", problem=thread_problem)
            delivered = dict(message)
            if "tags" in message:
                delivered["tags"] = read_tags(message["tags"], max_tags=self._max_tags).tags  # §16.3
            if self._content_view is not None:  # §19.4, §19.5: references as stubs, the host's key
                channel = message.get("channelId")
                delivered[MODEL_CONTENT] = self._content_view.model_content(
                    message.get("content"), f"message on channel {channel}"
                )
            if self.inbox is not None:  # the inbox holds ordinary messages too (EC1)
                if "coalesce" in message:
                    return self.inbox.message(message, delivered)
                return self.inbox.ordinary_message(delivered)
            try:
                conversation = await self._handlers.channel_message(context, delivered)
            except HandlerError as exc:
                reason = exc.message
            except Exception:
                self._log.exception("channel_message handler failed")
                reason = "internal_error"
            else:
                if _is_conversation(conversation):
                    if streams is not None and not streamed:
                        streams.committed(message)
                    result: JSONObject = {"messageId": message_id, "accepted": True}
                    if conversation is not None:
                        result["conversationId"] = conversation
                    return result
                self._log.error("channel_message handler returned neither a string nor None")
                reason = "internal_error"
        return {"messageId": message_id, "accepted": False, "reason": reason}

    # --- notification forms, in the read loop ---------------------------------------------------

    def refused_notification(self, method: str, error: HandlerError) -> None:
        """A ``channels/*`` notification admission refused: no reply is possible, so a
        diagnostic, never silence."""
        self.diagnostic(
            f"{method} notification refused",
            code=error.code,
            why=ServerValue(error.message),
            problem=ServerValue(error.data, self._redactor),
        )

    def on_notification(self, method: str, params: Any) -> BackgroundJob | None:
        """``channels/changed`` and ``channels/incoming`` sent as notifications (§14.3, §14.5),
        already admitted; returns the work for a ``channels/incoming``."""
        if method == "channels/changed":
            for item in self._change(params, method):
                if not item.accepted:  # §14.5: filtered item by item, with a diagnostic each
                    self.diagnostic(
                        "channels/changed notification: item refused",
                        id=ServerValue(item.id, self._redactor),
                        reason=item.reason,
                        problem=item.detail,
                    )
            return None
        if self._deliveries >= self._max_deliveries:
            self.diagnostic("channels/incoming notification dropped: host busy")
            return None
        self.diagnostic("channels/incoming sent as a notification; processed, no reply possible")
        context = RequestContext(self.name, None, method, self._transport)
        messages = params["messages"]
        self._deliveries += 1

        async def deliver() -> None:
            try:
                results = await self._incoming(context, messages)
            finally:
                self._deliveries -= 1
            for item in results:
                if not item["accepted"]:
                    self.diagnostic(
                        "channels/incoming notification: message refused",
                        message_id=ServerValue(item["messageId"], self._redactor),
                        reason=ServerValue(item["reason"], self._redactor),
                    )

        return deliver

    def diagnostic(self, message: str, **fields: Any) -> None:
        verdict = self._diagnostics.take()
        if verdict == "log":
            self._log.warning(message, **fields)
        elif verdict == "last":
            self._log.warning("channel diagnostics: more of these go unlogged on this connection")
