"""Host -> server MCPL calls on one connection, and the state kept per feature set.

Rules (MCPL §8, §10.1-§10.6, §14.3; PROTOCOL.md §3.1, §3.5, §5.1-§5.2; checklist D 49-51,
F 65-74, I 103, J 105-107). Reading injections and multi-server calls: ``fanout``.

- **Nothing ungranted goes out** (D49): each method checks that the connection is MCPL-ready
  and its grant in force covers the gate, else sends nothing and raises ``NotGranted`` (a
  ``LocalProtocolError``: calling an ungranted method is the caller's mistake).
  ``before_inference`` returns None instead, so a fan-out simply skips the connection.
- **context/beforeInference**: ``userMessage`` is null without ``observe``; no ``featureSet``
  (F65). Fail-open (F73-74): a timeout or failure is a result with ``outcome`` ``timeout`` /
  ``failure``, no injections, and a log line. Injections are judged by
  ``fanout.read_injections`` against the grant in force **when the answer arrives**: in the
  read loop (``request(_on_answer=...)``), before any later line (a revocation) is read.
  Each dropped injection gets a log line (at most ``MAX_DROP_LINES`` per answer, then one).
- **channels/publish** per ``publish_mode``: ``"request"`` (ACK ``{delivered, messageId}``),
  ``"notification"``, or ``"auto"`` (default): a request first; a ``-32601`` answer switches
  this connection to notifications for the rest of its life and re-sends that message as a
  notification. A timed-out request is never re-sent (it may have been delivered).
- **channels/open**: spec ``{type, address, metadata?}`` or [lib] ``{channelId, history?}``,
  chosen by keywords; exactly that form is sent.
- **state/rollback** only for a declared, enabled feature set with ``rollback: true``
  (PROTOCOL.md §3.1 Interp.); ``{success: false, reason}`` and ``-32005`` are results.
- **State** (``FeatureSetStateStore``, §8.2-§8.4): per feature set, the current checkpoint and
  a bounded history. ``data`` replaces; ``patch`` is RFC 6902 (``jsonpatch``) applied to the
  *parent* checkpoint's data; neither, or a patch that cannot be applied (parent unknown or
  without data, bad patch: logged), keeps only the opaque reference. ``tools/call`` then
  carries ``state`` (held data) or ``checkpoint`` (reference). ``feature_set`` is the host's
  key and never sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from mcpl_host.jsonrpc.errors import (
    ErrorCode,
    LocalProtocolError,
    MCPLHostError,
    RemoteError,
    RemoteProtocolError,
    RequestTimeout,
)
from mcpl_host.logging import ServerValue
from mcpl_host.mcp_methods import CallToolResult
from mcpl_host.mcpl.fanout import (
    DEFAULT_HOOK_TIMEOUT_SECONDS,
    INJECT,
    OBSERVE,
    BeforeInferenceResult,
    HookReading,
    read_injections,
)
from mcpl_host.mcpl.grants import NO_GRANT, Grant
from mcpl_host.mcpl.state import FeatureSetStateStore, StateEntry

__all__ = [
    "CHECKPOINT_NOT_FOUND",
    "DEFAULT_HOOK_TIMEOUT_SECONDS",
    "ChannelOpenResult",
    "FeatureSetStateStore",
    "MCPLHostCalls",
    "NotGranted",
    "PublishMode",
    "PublishResult",
    "RollbackResult",
    "StateEntry",
]

#: MCPL Appendix A: ``state/rollback`` aimed at a pruned or unknown checkpoint.
CHECKPOINT_NOT_FOUND = -32005
#: Dropped-injection lines logged per hook response before one summary line.
MAX_DROP_LINES = 10

PublishMode = Literal["request", "notification", "auto"]
_PUBLISH_MODES = ("request", "notification", "auto")
_DEFAULT: Any = object()  # "use request()'s default timeout"


class NotGranted(LocalProtocolError):
    """The method's gate is not in the grant in force (or the connection is not MCPL-ready);
    nothing was sent (MCPL §5.4, checklist D 49). ``capability``: the path, ``method``."""

    def __init__(self, method: str, capability: str, why: str) -> None:
        super().__init__(f"{method!r} not sent: {why}")
        self.method = method
        self.capability = capability


@dataclass(frozen=True, slots=True)
class RollbackResult:
    """``state/rollback`` (§8.5-§8.7). ``outcome``: ``"rolled_back"`` (success true),
    ``"refused"`` (``success: false``, ``reason`` as sent) or ``"not_found"`` (error -32005;
    ``checkpoint`` from its ``data`` when given, ``reason`` its message)."""

    feature_set: str
    checkpoint: str
    outcome: Literal["rolled_back", "refused", "not_found"]
    reason: str | None = None

    @property
    def success(self) -> bool:
        return self.outcome == "rolled_back"


@dataclass(frozen=True, slots=True)
class PublishResult:
    """``channels/publish`` (§14.3). ``mode``: how it went out. For a request, ``delivered``
    and ``message_id`` as answered (None if absent); for a notification both None."""

    mode: Literal["request", "notification"]
    delivered: bool | None = None
    message_id: str | None = None
    raw: Any = None


@dataclass(frozen=True, slots=True)
class ChannelOpenResult:
    """``channels/open`` (§14.3): ``channel`` is the answered descriptor (None if the result
    has no ``channel`` object); ``raw`` the whole result."""

    channel: dict[str, Any] | None
    raw: Any = None


def _blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, (list, tuple)):
        return list(content)
    raise TypeError("content must be a string or a list of content blocks")


class MCPLHostCalls:
    """Mixed into ``ServerConnection``: the host -> server MCPL methods (module docstring)."""

    name: str
    redactor: Any
    grant: Grant | None
    feature_sets: Any
    derivation: Any
    is_mcpl_ready: bool
    _link: Any
    _log: Any

    async def request(self, method: str, params: Any = None, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def notify(self, method: str, params: Any = None) -> None:
        raise NotImplementedError

    def _init_host_calls(self) -> None:
        self._publish_mode: PublishMode = "auto"
        self._publish_as_notification = False  # learned in "auto" from a -32601
        self._hooks_in_flight = 0
        #: State and checkpoints from stateful tool results, per feature set (§8).
        self.state_store = FeatureSetStateStore()

    # --- gates -------------------------------------------------------------------------------

    def _grant_now(self) -> Grant | None:
        """The grant in force if the connection is MCPL-ready, else None."""
        return self.grant if self.is_mcpl_ready else None

    def _require_granted(self, method: str, path: str) -> None:
        grant = self._grant_now()
        if grant is None:
            raise NotGranted(method, path, f"{self.name!r} is not MCPL-ready")
        if not grant.allows(path):
            raise NotGranted(method, path, f"{path!r} is not granted to {self.name!r}")

    def _transport_epoch(self) -> int | None:
        link = self._link
        return None if link is None or link.closed else link.epoch

    @property
    def hooks_in_flight(self) -> int:
        """``context/beforeInference`` requests awaiting an answer (loop prevention, §10.7)."""
        return self._hooks_in_flight

    @property
    def before_inference_eligible(self) -> bool:
        """MCPL-ready and granted ``observe`` or any ``inject.*`` leaf (§10.1; F67)."""
        grant = self._grant_now()
        return grant is not None and any(grant.allows(p) for p in (OBSERVE, *INJECT.values()))

    # --- context/beforeInference -------------------------------------------------------------

    async def before_inference(
        self,
        *,
        inference_id: str,
        conversation_id: str,
        turn_index: int,
        user_message: str | None,
        model: Mapping[str, Any],
        channels: Mapping[str, Any] | None = None,
        timeout: float | None = DEFAULT_HOOK_TIMEOUT_SECONDS,
    ) -> BeforeInferenceResult | None:
        """Send ``context/beforeInference`` (MCPL §10.1-§10.8, §14.4) and read its injections.

        Args:
            inference_id, conversation_id: correlation strings; turn_index: 0-based int.
            user_message: the user's text; sent only if ``observe`` is granted, else null.
            model: ModelInfo ``{id, vendor, contextWindow, capabilities}``, always sent.
            channels: optional §14.4 channel context, sent as given.
            timeout: seconds (default 5, §10.6); None waits for ever.

        Returns:
            None (nothing sent) when not eligible (``before_inference_eligible``); else a
            ``BeforeInferenceResult``: ``outcome`` ``"ok"`` with the authorized injections
            and the dropped ones, or ``"timeout"`` / ``"failure"`` with none (fail-open).
            Never raises for a server's failure.

        Cancellation: the request is abandoned (``notifications/cancelled`` is sent, a late
        answer is an orphan) and the cancellation propagates.
        """
        grant = self._grant_now()
        if grant is None or not self.before_inference_eligible:
            return None
        params: dict[str, Any] = {
            "inferenceId": inference_id,
            "conversationId": conversation_id,
            "turnIndex": turn_index,
            "userMessage": user_message if grant.allows(OBSERVE) else None,
            "model": dict(model),
        }
        if channels is not None:
            params["channels"] = dict(channels)
        readings: list[HookReading] = []

        def on_answer(response: Any) -> None:
            # In the read loop, at receipt: the grant read here is the one in force now (D50).
            if response.has_error:
                return
            try:
                readings.append(read_injections(response.result, self._grant_now() or NO_GRANT, self.name))
            except Exception:  # a bug must not leave the waiter hanging until its timeout
                self._log.exception("could not read a context/beforeInference answer")
                readings.append(HookReading(problem="the answer could not be read"))

        self._hooks_in_flight += 1
        try:
            await self.request("context/beforeInference", params, timeout=timeout, _on_answer=on_answer)
        except RequestTimeout as exc:
            return self._hook_failed(inference_id, "timeout", str(exc))
        except MCPLHostError as exc:  # error answer, malformed answer, transport gone
            return self._hook_failed(inference_id, "failure", str(exc))
        finally:
            self._hooks_in_flight -= 1
        reading = readings[0] if readings else HookReading(problem="no answer was read")
        if reading.problem is not None:
            return self._hook_failed(inference_id, "failure", reading.problem)
        self._log_drops(inference_id, reading)
        self._log.info(
            "context/beforeInference answered",
            inference_id=inference_id,
            feature_set=ServerValue(reading.feature_set, self.redactor),
            injections=len(reading.injections),
            dropped=len(reading.dropped),
        )
        return BeforeInferenceResult(
            self.name, "ok", reading.injections, reading.dropped, reading.feature_set
        )

    def _hook_failed(
        self, inference_id: str, outcome: Literal["timeout", "failure"], error: str
    ) -> BeforeInferenceResult:
        self._log.warning(
            "context/beforeInference failed open; the turn goes on without it",
            inference_id=inference_id,
            outcome=outcome,
            error=ServerValue(error, self.redactor),
        )
        return BeforeInferenceResult(self.name, outcome, error=error)

    def _log_drops(self, inference_id: str, reading: HookReading) -> None:
        for dropped in reading.dropped[:MAX_DROP_LINES]:
            self._log.warning(
                "context injection dropped",
                inference_id=inference_id,
                index=dropped.index,
                reason=dropped.reason,
                position=ServerValue(dropped.position, self.redactor),
                detail=ServerValue(dropped.detail, self.redactor),
            )
        if len(reading.dropped) > MAX_DROP_LINES:
            self._log.warning(
                "more context injections dropped",
                inference_id=inference_id,
                count=len(reading.dropped) - MAX_DROP_LINES,
            )

    # --- state ---------------------------------------------------------------------------------

    async def call_tool_with_state(
        self, name: str, arguments: dict[str, Any] | None = None, *, feature_set: str, **kwargs: Any
    ) -> CallToolResult:
        """``tools/call`` carrying the state held for ``feature_set`` (§8.4: ``state`` if data
        is held, else ``checkpoint``), then applying the result's ``state`` to the store
        (``state_store``; a problem is logged, never raised). ``feature_set`` is the host's
        key and is not sent. ``kwargs`` go to ``request()``. Raises as ``call_tool()``.

        Cancellation: as ``request()``; the held state is unchanged.
        """
        params: dict[str, Any] = {"name": name, "arguments": arguments or {}}
        params.update(self.state_store.request_params(feature_set))
        result = await self.request("tools/call", params, **kwargs)
        if not isinstance(result, dict):
            raise RemoteProtocolError("the server's tools/call result is not a JSON object")
        problem = self.state_store.apply(feature_set, result["state"]) if "state" in result else None
        if problem is not None:
            self._log.warning("tool result state not fully applied", feature_set=feature_set, problem=problem)
        content = result.get("content", [])
        return CallToolResult(
            content=content if isinstance(content, list) else [],
            is_error=result.get("isError") is True,
            structured_content=result.get("structuredContent"),
            raw=result,
        )

    async def state_rollback(
        self, feature_set: str, checkpoint: str, *, timeout: Any = _DEFAULT
    ) -> RollbackResult:
        """``state/rollback {featureSet, checkpoint}`` (MCPL §8.5-§8.7; J107).

        Returns a ``RollbackResult`` for a success, a ``{success: false, reason}`` refusal,
        and error -32005; on success the store's current checkpoint becomes ``checkpoint``.

        Raises:
            LocalProtocolError: not MCPL-ready, or ``feature_set`` is not declared with
                ``rollback: true``, or not enabled (nothing is sent).
            RemoteError: any other error answer. RemoteProtocolError: no boolean ``success``.
            RequestTimeout, ConnectionLost, ConnectionClosed: as ``request()``.

        Cancellation: as ``request()``; the store is unchanged.
        """
        if self._grant_now() is None:
            raise LocalProtocolError(f"'state/rollback' not sent: {self.name!r} is not MCPL-ready")
        declared = self.feature_sets.sets.get(feature_set)
        if declared is None or not declared.rollback:
            raise LocalProtocolError(
                f"'state/rollback' not sent: feature set {feature_set!r} does not declare rollback: true"
            )
        if self.derivation is None or feature_set not in self.derivation.enabled:
            raise LocalProtocolError(f"'state/rollback' not sent: feature set {feature_set!r} is not enabled")
        params = {"featureSet": feature_set, "checkpoint": checkpoint}
        try:
            result = await self.request("state/rollback", params, **_timeout(timeout))
        except RemoteError as exc:
            if exc.code != CHECKPOINT_NOT_FOUND:
                raise
            data = exc.data if isinstance(exc.data, dict) else {}
            named = data.get("checkpoint")
            self._log.info(
                "state/rollback: checkpoint not found",
                feature_set=feature_set,
                checkpoint=ServerValue(named if named is not None else checkpoint, self.redactor),
            )
            return RollbackResult(
                feature_set, named if isinstance(named, str) else checkpoint, "not_found", exc.message
            )
        if not isinstance(result, dict) or not isinstance(result.get("success"), bool):
            raise RemoteProtocolError("the server's state/rollback result has no boolean success")
        reason = result.get("reason") if isinstance(result.get("reason"), str) else None
        if not result["success"]:
            self._log.info(
                "state/rollback refused", feature_set=feature_set, reason=ServerValue(reason, self.redactor)
            )
            return RollbackResult(feature_set, checkpoint, "refused", reason)
        self.state_store.rolled_back(feature_set, checkpoint)
        return RollbackResult(feature_set, checkpoint, "rolled_back", reason)

    # --- channels ------------------------------------------------------------------------------

    async def channels_open(
        self,
        *,
        type: str | None = None,
        address: Any = None,
        metadata: Mapping[str, Any] | None = None,
        channel_id: str | None = None,
        history: Any = None,
        timeout: Any = _DEFAULT,
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
        self._require_granted("channels/open", "channels.lifecycle")
        params: dict[str, Any]
        if spec_form:
            params = {"type": type, "address": address}
            if metadata is not None:
                params["metadata"] = dict(metadata)
        else:
            params = {"channelId": channel_id}
            if history is not None:
                params["history"] = history
        result = await self.request("channels/open", params, **_timeout(timeout))
        channel = result.get("channel") if isinstance(result, dict) else None
        return ChannelOpenResult(channel if isinstance(channel, dict) else None, result)

    async def channels_close(self, channel_id: str, *, timeout: Any = _DEFAULT) -> bool:
        """``channels/close {channelId}`` (§14.3; gate ``channels.lifecycle``). Returns the
        answer's ``closed is True``. Raises ``NotGranted``; ``RemoteError`` (e.g. -32023
        unknown channel); others as ``request()``. Cancellation: as ``request()``."""
        self._require_granted("channels/close", "channels.lifecycle")
        result = await self.request("channels/close", {"channelId": channel_id}, **_timeout(timeout))
        return isinstance(result, dict) and result.get("closed") is True

    @property
    def publish_mode(self) -> PublishMode:
        """How ``channels/publish`` goes out: ``"request"``, ``"notification"`` or ``"auto"``
        (default; see the module docstring). Settable per connection."""
        return self._publish_mode

    @publish_mode.setter
    def publish_mode(self, mode: PublishMode) -> None:
        if mode not in _PUBLISH_MODES:
            raise ValueError(f"publish_mode must be one of {_PUBLISH_MODES}, not {mode!r}")
        self._publish_mode = mode
        self._publish_as_notification = False

    @property
    def publishes_as_notification(self) -> bool:
        """Whether the next ``channels/publish`` goes out as a notification."""
        return self._publish_mode == "notification" or (
            self._publish_mode == "auto" and self._publish_as_notification
        )

    async def channels_publish(
        self,
        conversation_id: str,
        channel_id: str,
        content: str | list[Any],
        *,
        stream: bool = False,
        timeout: Any = _DEFAULT,
    ) -> PublishResult:
        """``channels/publish {conversationId, channelId, stream, content}`` (§14.3; gate
        ``channels.publish``), as a request or a notification per ``publish_mode``.
        ``content``: ContentBlock list, or a string (sent as one text block). The caller
        picks the connection that owns the channel.

        Raises:
            NotGranted: the gate is not granted (nothing is sent). TypeError: bad content.
            RemoteError: an error answer (in ``"auto"``, not -32601, which switches to
                notifications and re-sends). RequestTimeout (never re-sent), ConnectionLost,
                ConnectionClosed: as ``request()``.

        Cancellation: as ``request()``; nothing is re-sent.
        """
        self._require_granted("channels/publish", "channels.publish")
        params = {
            "conversationId": conversation_id,
            "channelId": channel_id,
            "stream": stream,
            "content": _blocks(content),
        }
        if self.publishes_as_notification:
            await self.notify("channels/publish", params)
            return PublishResult("notification")
        try:
            result = await self.request("channels/publish", params, **_timeout(timeout))
        except RemoteError as exc:
            if exc.code != ErrorCode.METHOD_NOT_FOUND or self._publish_mode != "auto":
                raise
            self._publish_as_notification = True
            self._log.info(
                "the server does not take channels/publish as a request; sending"
                " it as a notification from now on"
            )
            self._require_granted("channels/publish", "channels.publish")  # it may have changed
            await self.notify("channels/publish", params)
            return PublishResult("notification")
        answer = result if isinstance(result, dict) else {}
        delivered = answer.get("delivered")
        message_id = answer.get("messageId")
        return PublishResult(
            "request",
            delivered if isinstance(delivered, bool) else None,
            message_id if isinstance(message_id, str) else None,
            result,
        )


def _timeout(timeout: Any) -> dict[str, Any]:
    return {} if timeout is _DEFAULT else {"timeout": timeout}
