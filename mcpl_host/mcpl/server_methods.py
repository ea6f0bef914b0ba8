"""Server -> host MCPL methods: push/event, inference/request, model/info, channels/*, state/*.

Rules (MCPL §8, §9, §11, §12, §14, §16; PROTOCOL.md §3.1, §3.4, §3.6, §4.5, §4.6, §5.1, §5.4;
ENVELOPE.md R2, R7; checklist G 82-88, H 89-92, I 93-98). Shapes and reasons: ``server_shapes``.

- Admission (grant, then feature set) runs in ``InboundRouting._dispatch`` before anything
  here; ``_precheck_server_request()`` is its last step, in the read loop (§3.6 step 5: params,
  ``-32602`` with ``data.problems``, reported to ``on_refused``), plus the feature-set step of
  ``state/*``. Every request here is answered, with a result or an error (R2).
- **push/event** (§9): the handler gets a params copy whose ``tags`` (only if sent) are closed
  by the core closure (§16.3, ``tags.read_tags``); ``origin`` and the rest are as given. Tags
  are read after admission and never authorize anything. **Interp.** (§9.4, PROTOCOL.md §5.4):
  one ``EventDeduplicator`` per connection and transport epoch, keyed by ``eventId`` (a server
  restarted behind a new transport may count its ids from 1 again); a duplicate gets the
  original result back. A duplicate arriving while the first is still being handled **waits for it**
  and gets the same result. Only results are remembered: after an error or a cancellation a
  duplicate is handled anew (a retry deserves a fresh attempt). ``accepted: false`` without a
  reason gets ``GENERIC_REFUSAL`` and a log line.
- A handler result of the wrong shape (push/event, inference/request, model/info) is the
  embedding framework's bug: ``-32603`` on the wire, the problems in a log line (R3).
- **inference/request** (§11): with ``stream: true`` and an id the handler gets an
  ``InferenceStream``; with id null it is answered whole (R7).
- **model/info** (§12): ``HostHandlers.model_info``; the default answers from the configured
  ``model_info`` or ``-32601``. Not granted: ``-32002`` at admission.
- **Channels** (§14): a ``ChannelRegistry`` per connection and transport epoch (a new transport
  starts empty: registrations do not outlive the session that made them). ``channels/register``
  and ``channels/changed`` answer ``{results: [{id, accepted, reason?}]}``; the channel-id
  patterns are read from ``HostHandlers.channel_policy`` at each receipt. The notification form
  of ``channels/changed`` is filtered item by item with a warning line per refused item.
  ``channels/list`` answers ``{channels: [descriptors]}``.
- ``channels/incoming``: **Interp.** always per-message results ``{messageId, accepted,
  conversationId?, reason?}`` (``reason``, on refusals, is an extra member). Each message is
  checked when its turn comes against the grant in force (``channels.incoming`` and
  ``channels.register``: a registration keeps no authority once its grant is gone:
  ``capability_denied``), this connection's registry (``unknown_channel``), the channel's
  direction (inbound or bidirectional, else ``not_permitted``) and the patterns
  (``capability_denied``); malformed: ``invalid_message``. The message's own ``channelId``
  confers nothing. Accepted messages (tags closed) go to ``HostHandlers.channel_message``: a
  ``HandlerError`` refuses that message with its message as reason, another exception as
  ``internal_error`` (logged). **Interp.:** the notification form (seen in the wild) is
  admitted the same way and processed in a task, with a warning line (no reply is possible);
  refused messages get a warning line each.
- **state/update, state/get** (no spec basis; AUDIT §4.3, [lib] mcpl-core-ts; PROTOCOL.md §5.1).
  **Interp.:** admitted by feature set only (there is no state capability path): ``featureSet``
  missing ``-32602``, undeclared ``-32003``, declared but not enabled ``-32001`` (so also before
  the receipt and on an MCP-only connection). ``state/update {featureSet, checkpoint, parent?,
  data | state | patch}`` -> ``{accepted: true}`` (the [lib] shape), or ``{accepted: false,
  reason: "not_applied"}`` and a log line when the store could not apply it (a patch whose
  parent's data is not held, for one). ``state`` is an alias of ``data``. ``state/get
  {featureSet}`` -> ``{checkpoint, data}`` (nulls when nothing is held; plus ``state`` when the
  server named it so). The store (``feature_set_state``) outlives transports: host-held state
  is the host's; pass the host -> server store to ``_init_server_methods`` to share one.
- Diagnostics about channels are bounded per connection (``CHANNEL_DIAGNOSTICS_LOGGED``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio

from mcpl_host.handlers import InferenceStream, RequestContext
from mcpl_host.jsonrpc.errors import ErrorCode, HandlerError
from mcpl_host.logging import LogBudget, ServerValue
from mcpl_host.mcpl.admission import admit
from mcpl_host.mcpl.server_shapes import (
    GENERIC_REFUSAL,
    OBJECT_PARAMS_METHODS,
    SERVER_METHODS,
    STATE_METHODS,
    ChannelRegistry,
    ItemResult,
    channel_allowed,
    channel_params_problems,
    incoming_message_problem,
    inference_params_problems,
    inference_result_problems,
    is_name,
    model_info_problems,
    push_result_problems,
    state_params_problems,
)
from mcpl_host.mcpl.state import FeatureSetStateStore
from mcpl_host.mcpl.tags import EventDeduplicator, read_tags, validate_push_event

__all__ = ["CHANNEL_DIAGNOSTICS_LOGGED", "SERVER_METHODS", "ChannelRegistry", "MCPLServerMethods"]

#: Warning lines per connection about refused channel items, notification-form requests and
#: refused notifications, before one "more go unlogged" line.
CHANNEL_DIAGNOSTICS_LOGGED = 50


def _invalid(problems: list[str]) -> HandlerError:
    return HandlerError(ErrorCode.INVALID_PARAMS, "Invalid params", {"problems": problems})


class _InFlight:
    """A push/event still being handled: duplicates wait on ``done``. It is set by a task that
    already holds an inbound slot (``_inbound_limiter``), so waiting on it never starves it."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = anyio.Event()


_RETRY = object()  # remembered after an error or a cancellation: handle the next one anew


class MCPLServerMethods:
    """Mixed into ``InboundRouting``: serves the server -> host MCPL methods (module rules).

    Instance state comes from ``_init_server_methods()`` (or lazily on first use).
    """

    name: str
    handlers: Any
    grant: Any
    derivation: Any
    feature_sets: Any
    redactor: Any
    _link: Any
    _tg: Any
    _log: Any
    _session: Any
    limits: Any
    _inbound_running: int
    _inbound_limiter: Any
    _server_methods_ready = False

    def _init_server_methods(self, state_store: Any = None) -> None:
        """Create the per-connection state. ``state_store``: the connection's one store of
        held state per feature set (a ``FeatureSetStateStore``), shared with the host -> server
        side; by default a new one."""
        self._event_dedupe = EventDeduplicator()
        self._dedupe_epoch = 0
        self._state_store = state_store if state_store is not None else FeatureSetStateStore()
        self._state_alias: set[str] = set()  # feature sets whose server says "state", not "data"
        self._channel_registry = ChannelRegistry()
        self._channel_diagnostics = LogBudget(CHANNEL_DIAGNOSTICS_LOGGED)
        self._server_methods_ready = True

    def _ensure_server_methods(self) -> None:
        if not self._server_methods_ready:
            self._init_server_methods()

    @property
    def feature_set_state(self) -> Any:
        """The held state per feature set that ``state/update`` writes and ``state/get`` reads
        (``current(name)`` -> ``StateEntry`` or None); kept across transports."""
        self._ensure_server_methods()
        return self._state_store

    @property
    def channel_registry(self) -> ChannelRegistry:
        """The channels the server registered on the current transport."""
        link = self._link
        return self._channels_for(link.epoch if link is not None else 0)

    def _channels_for(self, epoch: int) -> ChannelRegistry:
        self._ensure_server_methods()
        if self._channel_registry.epoch != epoch:  # a new transport: registrations lapse
            self._channel_registry = ChannelRegistry(epoch)
        return self._channel_registry

    # --- admission's last step, in the read loop -----------------------------------------------

    def _precheck_server_request(self, method: str, params: Any) -> HandlerError | None:
        """Params validation (§3.6 step 5) and ``state/*`` feature-set admission; None to serve."""
        if method not in OBJECT_PARAMS_METHODS:
            return None
        if not isinstance(params, Mapping):
            return HandlerError(ErrorCode.INVALID_PARAMS, "Invalid params: expected an object")
        if method in STATE_METHODS:
            denial = self._admit_state(params)
            return (
                denial
                if denial is not None
                else (_invalid(problems) if (problems := state_params_problems(method, params)) else None)
            )
        if method == "push/event":
            problems = validate_push_event(params)
        elif method == "inference/request":
            problems = inference_params_problems(params)
        else:
            problems = channel_params_problems(method, params)
        return _invalid(problems) if problems else None

    def _admit_state(self, params: Mapping[str, Any]) -> HandlerError | None:
        name = params.get("featureSet")
        if not is_name(name):
            return HandlerError(
                ErrorCode.INVALID_PARAMS, "Invalid params: featureSet must be a non-empty string"
            )
        if name not in self.feature_sets.sets:
            return HandlerError(ErrorCode.UNKNOWN_FEATURE_SET, "Unknown feature set", {"featureSet": name})
        if self.derivation is None or name not in self.derivation.enabled:
            return HandlerError(
                ErrorCode.FEATURE_SET_NOT_ENABLED, "Feature set not enabled", {"featureSet": name}
            )
        return None

    # --- serving, in the request's task ----------------------------------------------------------

    async def _serve_server_method(self, context: RequestContext, params: Any, link: Any) -> Any:
        """The result for an admitted request of ``SERVER_METHODS``; raises ``HandlerError``."""
        self._ensure_server_methods()
        method = context.method
        if method == "push/event":
            return await self._serve_push_event(context, params)
        if method == "inference/request":
            stream = None
            # R7: a request with id null cannot be named by chunks: it is answered whole.
            if params.get("stream") is True and context.id is not None:
                stream = InferenceStream(context.id, link, self._session)
            result = await self.handlers.inference_request(context, params, stream)
            return self._checked(method, result, inference_result_problems(result))
        if method == "model/info":
            result = await self.handlers.model_info(context)
            return self._checked(method, result, model_info_problems(result))
        if method in STATE_METHODS:
            return self._serve_state(method, params)
        registry = self._channels_for(link.epoch)
        if method == "channels/list":
            return {"channels": registry.descriptors()}
        if method == "channels/incoming":
            return {"results": await self._incoming(context, registry, params["messages"])}
        results = self._change_channels(registry, params, method)
        return {"results": [item.to_wire() for item in results]}

    def _checked(self, method: str, result: Any, problems: list[str]) -> Any:
        if problems:  # the embedding framework's bug, never the server's: -32603 and a log line
            self._log.error("handler returned a malformed result", method=method, problems=problems)
            raise HandlerError(ErrorCode.INTERNAL_ERROR, "Internal error")
        return dict(result)

    async def _serve_push_event(self, context: RequestContext, params: dict[str, Any]) -> Any:
        event_id, dedupe = params["eventId"], self._event_dedupe
        if self._dedupe_epoch != context.epoch:  # a new transport: a new window (module rules)
            dedupe = self._event_dedupe = EventDeduplicator()
            self._dedupe_epoch = context.epoch
        while True:
            seen = dedupe.check(event_id, anyio.current_time())
            if seen is None or seen is _RETRY:
                break
            if isinstance(seen, _InFlight):
                await seen.done.wait()  # then look again: its result, or handle it anew
                continue
            return dict(seen)  # §9.4: a duplicate gets the original result (idempotent replay)
        marker = _InFlight()
        dedupe.remember(event_id, marker, anyio.current_time())
        result: Any = None
        try:
            event = dict(params)
            if "tags" in params:
                closure = read_tags(params["tags"])  # §16.3; never authority (admission is done)
                event["tags"] = closure.tags
                for problem in closure.problems:
                    self._log.debug("push/event tag problem", problem=problem)
            raw = await self.handlers.push_event(context, event)
            checked = self._checked("push/event", raw, push_result_problems(raw))
            if checked["accepted"] is False and "reason" not in checked:
                self._log.info(
                    "push/event handler refused without a reason; answering a generic one",
                    reason=GENERIC_REFUSAL,
                )
                checked["reason"] = GENERIC_REFUSAL
            result = checked
        finally:
            if dedupe.check(event_id, anyio.current_time()) is marker:
                dedupe.remember(event_id, _RETRY if result is None else dict(result), anyio.current_time())
            marker.done.set()
        return result

    def _serve_state(self, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        store, name = self.feature_set_state, params["featureSet"]
        if method == "state/get":
            held = store.current(name)
            data = held.data if held is not None and held.has_data else None
            result = {"checkpoint": held.checkpoint if held is not None else None, "data": data}
            return {**result, "state": data} if name in self._state_alias else result
        update = dict(params)
        if "data" not in params and "state" in params:  # Interp.: an alias seen in servers
            update["data"] = update.pop("state")
            self._state_alias.add(name)
        elif "data" in params:
            self._state_alias.discard(name)
        problem = store.apply(name, update, keep_reference_on_problem=False)
        if problem is not None:
            self._log.info(
                "state/update not applied", feature_set=ServerValue(name, self.redactor), problem=problem
            )
            return {"accepted": False, "reason": "not_applied"}
        return {"accepted": True}

    def _change_channels(
        self, registry: ChannelRegistry, params: Mapping[str, Any], method: str
    ) -> list[ItemResult]:
        if method == "channels/register":
            lists = {"added": params["channels"]}
        else:
            lists = {key: params.get(key) or [] for key in ("added", "removed", "updated")}
        results = registry.change(**lists, patterns=self._channel_patterns())
        if any(item.accepted for item in results):
            self.handlers.on_channels_changed(self.name, registry.descriptors())
        return results

    def _channel_patterns(self) -> tuple[str, ...] | None:
        patterns = self.handlers.channel_policy(self.name)
        return None if patterns is None else tuple(patterns)

    async def _incoming(
        self, context: RequestContext, registry: ChannelRegistry, messages: list[Any]
    ) -> list[dict[str, Any]]:
        return [await self._incoming_one(context, registry, message) for message in messages]

    async def _incoming_one(
        self, context: RequestContext, registry: ChannelRegistry, message: Any
    ) -> dict[str, Any]:
        raw_id = message.get("messageId") if isinstance(message, Mapping) else None
        message_id = raw_id if isinstance(raw_id, str) else None

        def refused(reason: str) -> dict[str, Any]:
            return {"messageId": message_id, "accepted": False, "reason": reason}

        if incoming_message_problem(message) is not None:
            return refused("invalid_message")
        grant, channel_id = self.grant, message["channelId"]
        # §14.5: the grant in force now; a registration keeps no authority once it is gone.
        if grant is None or not (grant.allows("channels.incoming") and grant.allows("channels.register")):
            return refused("capability_denied")
        descriptor = registry.get(channel_id)  # this connection's own registrations only
        if descriptor is None:
            return refused("unknown_channel")
        if descriptor.get("direction") not in ("inbound", "bidirectional"):
            return refused("not_permitted")
        if not channel_allowed(channel_id, self._channel_patterns()):
            return refused("capability_denied")
        delivered = dict(message)
        if "tags" in message:
            delivered["tags"] = read_tags(message["tags"]).tags  # §16.3, after admission
        try:
            conversation = await self.handlers.channel_message(context, delivered)
        except HandlerError as exc:
            return refused(exc.message)
        except Exception:
            self._log.exception("channel_message handler failed")
            return refused("internal_error")
        if conversation is not None and not isinstance(conversation, str):
            self._log.error("channel_message handler returned neither a string nor None")
            return refused("internal_error")
        result: dict[str, Any] = {"messageId": message_id, "accepted": True}
        if conversation is not None:
            result["conversationId"] = conversation
        return result

    # --- notification forms, in the read loop ---------------------------------------------------

    def _on_server_notification(self, method: str, params: Any) -> None:
        """``channels/changed`` and ``channels/incoming`` sent as notifications (§14.3, §14.5)."""
        if method not in ("channels/changed", "channels/incoming"):
            return
        link = self._link
        if link is None or link.closed:
            return
        denial = admit(method, params, self.grant) or self._precheck_server_request(method, params)
        if denial is not None:  # no reply is possible: a diagnostic, never silence
            self._channel_diagnostic(
                f"{method} notification refused",
                code=denial.code,
                problem=ServerValue(denial.data, self.redactor),
            )
            return
        registry = self._channels_for(link.epoch)
        if method == "channels/changed":
            for item in self._change_channels(registry, params, method):
                if not item.accepted:  # §14.5: filtered item by item, with a diagnostic each
                    self._channel_diagnostic(
                        "channels/changed notification: item refused",
                        id=ServerValue(item.id, self.redactor),
                        reason=item.reason,
                        problem=item.detail,
                    )
            return
        self._channel_diagnostic("channels/incoming sent as a notification; processed, no reply possible")
        if self._inbound_running >= self.limits.max_concurrent_inbound + self.limits.max_queued_inbound:
            self._channel_diagnostic("channels/incoming notification dropped: host busy")
            return
        self._inbound_running += 1
        context = RequestContext(self.name, None, method, link.epoch)
        self._tg.start_soon(self._incoming_notification, context, registry, params["messages"])

    async def _incoming_notification(
        self, context: RequestContext, registry: ChannelRegistry, messages: list[Any]
    ) -> None:
        try:
            async with self._inbound_limiter:
                results = await self._incoming(context, registry, messages)
        finally:
            self._inbound_running -= 1
        for item in results:
            if not item["accepted"]:
                self._channel_diagnostic(
                    "channels/incoming notification: message refused",
                    message_id=ServerValue(item["messageId"], self.redactor),
                    reason=ServerValue(item["reason"], self.redactor),
                )

    def _channel_diagnostic(self, message: str, **fields: Any) -> None:
        self._ensure_server_methods()
        verdict = self._channel_diagnostics.take()
        if verdict == "log":
            self._log.warning(message, **fields)
        elif verdict == "last":
            self._log.warning("channel diagnostics: more of these go unlogged on this connection")
