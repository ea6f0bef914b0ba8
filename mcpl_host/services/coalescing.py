"""The event inbox (MCPL RFC-006 rev 8): coalesced pushes and channel messages wait per
conversation until the application drains them for a model request. The decisions are
``mcpl/coalescing.py``'s; this module is their I/O: the ``push/render`` requests, the clock,
re-checking authority on the current transport.

Rules (docs/protocol.md EC1-EC15):

- Off unless the application passes an ``EventInbox`` (``connect(..., event_inbox=)``,
  ``Host(..., event_inbox=)``): then the host advertises ``eventCoalescing``
  (``EventInbox.advertisement``) and every admitted ``push/event`` and ``channels/incoming``
  message goes to the inbox (those without ``coalesce`` appended as ordinary occurrences),
  not to ``HostHandlers.push_event`` / ``channel_message`` (EC1). Without an inbox nothing
  changes.
- A malformed ``coalesce`` (RFC-006 §13): ``-32602`` with ``data: {field, reason}`` on
  ``push/event``; ``{accepted: false, reason: "coalesce_invalid"}`` for that message on
  ``channels/incoming``. A channel-scoped push is admitted against the channel authority of
  the transport it came on (§3.2): ``-32017`` / ``-32023`` otherwise.
- Retries (§3.1): an admitted coalesced occurrence's answer is kept for
  ``retry_window_seconds`` (≥ 3600) from its first admission, by ``(binding, eventId)``, in
  the inbox (so across transports); a retry with the same params gets it back, unchanged.
- ``Conversation.drain()`` (the application, once per model request): each pending batch
  whose authority still holds is frozen and rendered (``push/render``, all at once, each
  within ``Limits.push_render_timeout_seconds`` of its server); a timeout, an error, a bad
  result or a closed transport materializes the fallback; authority is checked again when
  the answer arrives (a lapse drops the batch); then what the conversation has not read is
  returned and consumed: history in every conversation, or with
  ``EventInbox(consumption="per-conversation")`` in that one only (EC4). ``Drained.model_needed`` is False when its only causes were batches
  that materialized nothing (§5.2).
- While the host waits for a server's ``push/render``, an ``inference/request`` from that
  server is refused ``-32600`` (§5.3, SPEC §10.7; ``EventInbox.rendering``).
- Wake (§4.2, EC13, EC15): with ``EventInbox(wake=WakePolicy(...))`` each conversation has a
  ``WakeSchedule`` (``mcpl/wake.py``) fed from every admission's outcome and every drain;
  ``wait()`` returns when a wake is due, ``due()`` says which causes are due now. Without
  one, ``wait()`` returns as soon as something is unread.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import anyio
import orjson

from mcpl_host.connection import Connection
from mcpl_host.handlers import RequestContext
from mcpl_host.jsonrpc.errors import ErrorCode, HandlerError
from mcpl_host.jsonrpc.values import JSONObject, is_list_or_tuple, is_mapping
from mcpl_host.logging import LogBudget, Logger, get_logger
from mcpl_host.mcpl.admission import AdmissionView, Refused, admit
from mcpl_host.mcpl.coalescing import (
    DEFAULT_RETRY_WINDOW_SECONDS,
    AuditEntry,
    Batch,
    CoalescingState,
    Consumption,
    Drained,
    Lane,
    Occurrence,
    Outcome,
    SubjectKey,
    coalesce_problem,
)
from mcpl_host.mcpl.references import MODEL_CONTENT, ContentView
from mcpl_host.mcpl.server_shapes import ChannelRegistry, channel_allowed
from mcpl_host.mcpl.wake import WakeCause, WakePolicy, WakeSchedule

__all__ = [
    "CHANNEL_NOT_PERMITTED",
    "UNKNOWN_CHANNEL",
    "Conversation",
    "EventInbox",
    "InboxLane",
    "RenderRoute",
    "TransportRoute",
]

#: The inbox's logger name (taken at each line: the application may configure logging later).
LOGGER = "mcpl_host.coalescing"
#: Failed writes of the store logged before one "more go unlogged" line (per inbox).
STORE_FAILURES_LOGGED = 10
#: The answer to an event the inbox has no room for (``EventInbox.max_unread``).
INBOX_FULL: JSONObject = {"accepted": False, "reason": "inbox_full"}

#: MCPL §14.6: a channel-scoped push refused by the channel's authority (RFC-006 §3.2).
CHANNEL_NOT_PERMITTED = -32017
UNKNOWN_CHANNEL = -32023


class RenderRoute(Protocol):
    """One server's current transport, as the inbox reaches it (a ``ServerConnection``
    makes one per transport; the newest of a binding is used)."""

    @property
    def connected(self) -> bool:
        """True while the transport is open and its grant in force."""
        ...

    @property
    def render_timeout(self) -> float:
        """``Limits.push_render_timeout_seconds`` of the server, in seconds."""
        ...

    async def request(self, method: str, params: JSONObject, timeout: float) -> Any:
        """A request to the server; raises on an error answer, a timeout or a lost transport."""
        ...

    def push_refusal(self, params: Mapping[str, Any]) -> HandlerError | None:
        """The admission of a ``push/event`` with ``params`` now, on this transport (the
        feature set enabled, ``pushEvents`` granted; for ``coalesce.channelId`` the channel
        checks), as the error it would answer, or None."""
        ...

    def model_content(self, content: object, provenance: str) -> list[dict[str, Any]]:
        """The model-visible form of ``content`` (MCPL §19.5), as for a pushed payload."""
        ...

    def render_failed(self, why: str) -> None:
        """One bounded log line: a ``push/render`` was not usable (``why``: the host's words)."""
        ...


def _fingerprint(params: Mapping[str, Any]) -> str:
    """A digest of an occurrence's params (keys sorted) that is the same in every process (a
    receipt outlives the host: SHA-256, not Python's salted ``hash``)."""
    try:
        data = orjson.dumps(params, option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        data = repr(sorted(params)).encode()
    import hashlib  # OpenSSL's: the first coalesced occurrence only

    return hashlib.sha256(data).hexdigest()


def _wire(params: Mapping[str, Any]) -> dict[str, Any]:
    """A params copy without the host's own key (what the fingerprint and receipts read)."""
    return {key: value for key, value in params.items() if key != MODEL_CONTENT}


class EventInbox:
    """The inbox of pending events, per conversation (module rules).

    Args:
        conversations: the contexts each occurrence is delivered to (more with
            ``conversation(name)``, which receive what is admitted from then on).
        deferred / channel_scoped_push / channels_incoming: the leaves advertised
            (``eventCoalescing``, RFC-006 §10); ``push/event`` coalescing is always on.
        retry_window_seconds: how long a receipt is kept (≥ 3600 s, advertised in ms).
        max_subjects / retain_notices / max_receipts: ``CoalescingState``'s bounds.
        max_audit: audit entries kept (``audit()``, the newest; RFC-006 §11).
        max_unread: occurrences held unread (by any conversation) beyond which a new event is
            refused ``accepted: false``, reason ``inbox_full`` (a storage limit, RFC-006 §11:
            ordinary events are refused alike; an inbox nobody drains stays bounded).
        consumption: ``"shared"`` (an occurrence one conversation read is history in every
            conversation, RFC-006 §3.3's conservative rule) or ``"per-conversation"`` (history
            only where it was read: unread elsewhere it stays replaceable and withdrawable);
            docs/protocol.md EC4. ``ValueError`` for another value.
        clock: seconds since the epoch (``time.time``: a receipt's expiry outlives the
            process); tests pass their own.
        store: a file the state is written to after each change (write to a temporary
            file, then rename) and recovered from when the inbox is made (conservatively,
            ``CoalescingState.recover``; EC7); None keeps it in memory only. Each write
            costs the size of what is pending and remembered.
        wake: the wake policy (RFC-006 §4.2; ``mcpl.wake.WakePolicy``: quiet period,
            no-starvation bound, which occurrences qualify): ``wait()`` then returns when a
            wake is due and ``due()`` reports the causes (EC15). None: ``wait()`` returns as
            soon as something is unread, and the wake policy is the application's alone.
        monotonic: the wake clock, seconds on a monotonic scale (``time.monotonic``);
            tests pass their own.

    Raises:
        ValueError: a bound out of range.
    """

    def __init__(
        self,
        conversations: Sequence[str] = ("main",),
        *,
        deferred: bool = True,
        channel_scoped_push: bool = True,
        channels_incoming: bool = True,
        retry_window_seconds: float = DEFAULT_RETRY_WINDOW_SECONDS,
        max_subjects: int = 100_000,
        retain_notices: int = 64,
        max_receipts: int = 100_000,
        max_unread: int = 10_000,
        max_audit: int = 1000,
        consumption: Consumption = "shared",
        clock: Callable[[], float] = time.time,
        store: Path | None = None,
        wake: WakePolicy | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if not (math.isfinite(retry_window_seconds) and retry_window_seconds >= DEFAULT_RETRY_WINDOW_SECONDS):
            raise ValueError("retry_window_seconds must be at least 3600 (RFC-006 §3.1)")
        if retain_notices < 64 or min(max_subjects, max_receipts, max_unread, max_audit) < 1:
            raise ValueError("retain_notices must be at least 64, the other bounds at least 1")
        self.max_unread = max_unread
        self.state = CoalescingState(
            list(conversations),
            max_subjects=max_subjects,
            retain_notices=retain_notices,
            max_receipts=max_receipts,
            max_audit=max_audit,
            consumption=consumption,
        )
        self.deferred = deferred
        self.channel_scoped_push = channel_scoped_push
        self.channels_incoming = channels_incoming
        self.retry_window_seconds = retry_window_seconds
        self._clock = clock
        self._routes: dict[str, RenderRoute] = {}
        self._rendering: dict[str, int] = {}
        self._conversations: dict[str, Conversation] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self._prepared: dict[str, int] = {}  # batches prepare() settled since the last drain
        self._store = store
        self._store_failures = LogBudget(STORE_FAILURES_LOGGED)
        self._arrived: anyio.Event | None = None  # made by the first wait(), set at a change
        self.wake = wake
        self._monotonic = monotonic
        self._schedules: dict[str, WakeSchedule] = {}
        if store is not None and store.exists():
            self._recover(store)
        if wake is not None:  # recovered work wakes as if it arrived now (EC15)
            now = monotonic()
            for name in self.state.conversations:
                if self.state.unread(name) or self.state.due_batches(name):
                    self._schedule(name).ordinary(now, qualifies=True)

    def _recover(self, store: Path) -> None:
        try:
            snapshot = orjson.loads(store.read_bytes())
            recovered = CoalescingState(
                list(self.state.conversations),
                max_subjects=self.state.max_subjects,
                retain_notices=self.state.retain_notices,
                max_receipts=self.state.max_receipts,
                max_audit=self.state.max_audit,
                consumption=self.state.consumption,
            )
            recovered.recover(snapshot)
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError, IndexError) as exc:
            get_logger(LOGGER).warning(
                "event inbox store unreadable; starting empty", error=type(exc).__name__
            )
            return
        self.state = recovered
        self.save()

    def save(self) -> None:
        """After each change: wake ``wait()``, and write the state to the store, if any
        (module rules)."""
        arrived, self._arrived = self._arrived, None
        if arrived is not None:
            arrived.set()
        store = self._store
        if store is None:
            return
        temporary = store.with_name(store.name + ".tmp")
        try:
            temporary.write_bytes(orjson.dumps(self.state.snapshot()))
            os.replace(temporary, store)
        except OSError as exc:  # the state in memory stands; the store is behind (EC7)
            self._store_failures.warn(
                get_logger(LOGGER), "event inbox store not written", error=type(exc).__name__
            )

    def close(self) -> None:
        """Stop writing to the store (the inbox is being replaced)."""
        self._store = None

    def forget_history(self) -> None:
        """Operator intervention: every subject's history becomes ``"unknown"`` (RFC-006 §3.3)."""
        self.state.forget_history()
        self.save()

    def __repr__(self) -> str:
        return f"<EventInbox conversations={len(self.state.conversations)} subjects={len(self.state)}>"

    def advertisement(self) -> JSONObject:
        """``experimental.mcpl.eventCoalescing`` (RFC-006 §10)."""
        return {
            "pushEvents": True,
            "channelsIncoming": self.channels_incoming,
            "deferred": self.deferred,
            "channelScopedPush": self.channel_scoped_push,
            "retryWindowMs": int(self.retry_window_seconds * 1000),
        }

    # --- the application's side -----------------------------------------------------------

    def conversation(self, name: str = "main") -> Conversation:
        """The conversation ``name`` (made on first use: it receives what is admitted from
        then on)."""
        found = self._conversations.get(name)
        if found is None:
            self.state.add_conversation(name)
            found = self._conversations[name] = Conversation(self, name)
        return found

    def audit(self) -> list[AuditEntry]:
        """What the inbox did out of the model's sight, newest ``max_audit`` entries, oldest
        first (``mcpl.coalescing.AuditEntry``: displaced and removed occurrences, folded
        notices, cancelled batches, discarded render answers). In memory only."""
        return self.state.audit()

    def pending(self, conversation: str = "main") -> list[Occurrence]:
        """What ``conversation`` would read now, without consuming (pending batches not
        included: they are rendered at the drain)."""
        return self.state.unread(conversation)

    async def wait(self, conversation: str = "main") -> None:
        """With a wake policy: return once a wake of ``conversation`` is due (``due()`` is
        not empty; RFC-006 §4.2), sleeping until the next deadline and looking again at
        each change of the inbox. Without one: once ``conversation`` has something to read
        (an unread occurrence or a pending batch; the wake is then the application's)."""
        state = self.state
        if self.wake is None:
            while not (state.unread(conversation) or state.due_batches(conversation)):
                if self._arrived is None:
                    self._arrived = anyio.Event()
                await self._arrived.wait()
            return
        while not self.due(conversation):
            if self._arrived is None:
                self._arrived = anyio.Event()
            deadline = self.next_wake(conversation)
            if deadline is None:
                await self._arrived.wait()
            else:
                with anyio.move_on_after(max(0.0, deadline - self._monotonic())):
                    await self._arrived.wait()

    def due(self, conversation: str = "main") -> list[WakeCause]:
        """The causes whose wake is due now for ``conversation``, earliest first (an
        application with its own loop drains when this is not empty; RFC-006 §4.2, EC15).
        Raises ``RuntimeError`` when the inbox has no wake policy."""
        return self._schedule(conversation).due(self._monotonic())

    def causes(self, conversation: str = "main") -> list[WakeCause]:
        """Every pending wake cause of ``conversation``, earliest deadline first (due or
        not; EC15). Raises ``RuntimeError`` without a wake policy."""
        return self._schedule(conversation).causes()

    def next_wake(self, conversation: str = "main") -> float | None:
        """When ``conversation``'s next wake is due, in seconds on the ``monotonic`` clock's
        scale (None: no cause pending). Raises ``RuntimeError`` without a wake policy."""
        return self._schedule(conversation).next_deadline()

    def _schedule(self, conversation: str) -> WakeSchedule:
        if self.wake is None:
            raise RuntimeError("this EventInbox has no wake policy (EventInbox(wake=WakePolicy(...)))")
        found = self._schedules.get(conversation)
        if found is None:
            found = self._schedules[conversation] = WakeSchedule(self.wake, max_delivered=self.max_unread)
        return found

    def _wake_ordinary(self, event: Mapping[str, Any], audience: Sequence[str] | set[str]) -> None:
        """An ordinary occurrence arrived for ``audience``: its cause in each schedule."""
        wake = self.wake
        if wake is None:
            return
        now, qualifies = self._monotonic(), wake.qualifies(event)
        for name in audience:
            self._schedule(name).ordinary(now, qualifies=qualifies)

    def _wake_subject(self, key: SubjectKey, outcome: Outcome, event: Mapping[str, Any]) -> None:
        """The wake rules' part of one coalesced admission (``mcpl/wake.py``)."""
        wake = self.wake
        if wake is None:
            return
        state = self.state
        if event["coalesce"].get("retract") is True:
            for name in state.conversations:
                self._schedule(name).withdraw(key)
            if outcome == "noted":  # the deletion notice: an ordinary occurrence (§6)
                self._wake_ordinary(event, state.conversations)
            return
        audience = state.audience(key)
        if not audience:  # past capacity: appended as ordinary work (EC8)
            self._wake_ordinary(event, state.conversations)
            return
        now, qualifies = self._monotonic(), wake.qualifies(event)
        for name in state.conversations:
            if name in audience:
                self._schedule(name).subject(key, now, qualifies=qualifies)

    async def drain(self, conversation: str = "main") -> Drained:
        """What ``conversation``'s model request includes now (module rules); consumed."""
        async with self._locks.setdefault(conversation, anyio.Lock()):
            rendered = self._prepared.pop(conversation, 0) + await self._render_due(conversation)
            drained = self.state.consume(conversation, rendered)
            if self.wake is not None:
                pending = {batch.subject for batch in self.state.due_batches(conversation)}
                self._schedule(conversation).consume(self._monotonic(), keep=pending)
            self.save()
            return drained

    async def prepare(self, conversation: str = "main") -> int:
        """Render what is pending for ``conversation`` now, without consuming: the rendered
        (or fallback) occurrences wait unread, replaceable and withdrawable like any other,
        until the next ``drain()`` (an application that assembles in steps). Returns the
        batches settled."""
        async with self._locks.setdefault(conversation, anyio.Lock()):
            settled = await self._render_due(conversation)
            self._prepared[conversation] = self._prepared.get(conversation, 0) + settled
            return settled

    async def _render_due(self, conversation: str) -> int:
        """Freeze, re-check and render each batch due for ``conversation`` (module rules);
        the number settled."""
        state = self.state
        due: list[tuple[Batch, RenderRoute | None]] = []
        for batch in state.due_batches(conversation):
            route = self._routes.get(batch.subject[0])
            if route is not None and route.connected and route.push_refusal(batch.fallback) is not None:
                state.drop_pending(batch)  # rule 4: lapsed before assembly, no render
                continue
            state.freeze(batch)
            due.append((batch, route))
        self.save()
        if due:
            async with anyio.create_task_group() as group:
                for batch, route in due:
                    group.start_soon(self._render, batch, route)
        return len(due)

    # --- the lanes' side ----------------------------------------------------------------------

    def lane(self, binding: str, route: RenderRoute) -> InboxLane:
        """The lane of one transport of ``binding`` (it becomes the binding's render route)."""
        self._routes[binding] = route
        return InboxLane(self, binding, route)

    def full(self) -> bool:
        """True when ``max_unread`` occurrences wait unread: new events are refused."""
        return self.state.unread_count() >= self.max_unread

    def rendering(self, binding: str) -> bool:
        """True while a ``push/render`` to ``binding`` waits for its answer."""
        return self._rendering.get(binding, 0) > 0

    async def _render(self, batch: Batch, route: RenderRoute | None) -> None:
        state = self.state
        if route is None or not route.connected:
            state.settle(batch, None, fallback=True)  # §5.3: a disconnected server
            self.save()
            return
        binding = batch.subject[0]
        self._rendering[binding] = self._rendering.get(binding, 0) + 1
        result: Any = None
        failed = True
        try:
            with anyio.move_on_after(route.render_timeout):
                result = await route.request("push/render", batch.render_params(), route.render_timeout)
                failed = False
        except Exception as exc:  # an error answer, a lost transport: the fallback (§5.3)
            failed = True
            route.render_failed(f"{type(exc).__name__}: the fallback is shown")
        else:
            if failed:
                route.render_failed(f"no answer within {route.render_timeout:g} s: the fallback is shown")
        finally:
            self._rendering[binding] -= 1
        content = result.get("content") if is_mapping(result) else None
        if not failed and not is_list_or_tuple(content):
            route.render_failed(
                "the result's content is not an array of content blocks: the fallback is shown"
            )
        if failed or not is_list_or_tuple(content):
            state.settle(batch, None, fallback=True)
        elif route.push_refusal(batch.fallback) is not None:  # rule 4, at the answer
            state.settle(batch, None, drop=True)
        else:
            shown = (
                route.model_content(list(content), f"render of {batch.fallback.get('featureSet')}")
                if content
                else []
            )
            as_of = result.get("timestamp")  # §5.2: the rendered state's time, if it says
            state.settle(batch, shown, timestamp=as_of if isinstance(as_of, str) else None)
        self.save()

    def receipt(self, binding: str, params: Mapping[str, Any]) -> JSONObject | None:
        """The original answer to a retried occurrence (same params), else None."""
        event_id = params.get("eventId")
        if not isinstance(event_id, str):
            return None
        found = self.state.receipt(binding, event_id, self._clock())
        if found is None or found.fingerprint != _fingerprint(_wire(params)):
            return None
        answer: JSONObject = orjson.loads(found.result)
        return answer

    def admit(
        self, binding: str, lane: Lane, event: dict[str, Any], scope: tuple[str, str]
    ) -> tuple[Outcome, str | None]:
        """Apply one admitted, well-formed coalesced occurrence; its outcome."""
        coalesce = event["coalesce"]
        key: SubjectKey = (binding, scope[0], scope[1], coalesce["key"])
        event_id = event["eventId"]
        state = self.state
        if coalesce.get("retract") is True:
            content = event.get(MODEL_CONTENT)
            if content is None:
                payload = event.get("payload") if lane == "push" else event
                content = payload.get("content") if is_mapping(payload) else None
            result = state.retract(key, lane, event_id, event, empty=not content)
        elif coalesce.get("deferred") is True:
            result = state.notice(key, event_id, event, initial=coalesce.get("initial") is True)
        else:
            result = state.plain(key, lane, event_id, event, initial=coalesce.get("initial") is True)
        self._wake_subject(key, result[0], event)
        return result

    def ordinary(self, lane: Lane, event_id: str, event: dict[str, Any]) -> Occurrence:
        """Append an occurrence without ``coalesce`` for every conversation (and its wake
        cause, with a wake policy); the caller saves."""
        occurrence = self.state.ordinary(lane, event_id, event)
        self._wake_ordinary(event, occurrence.unread)
        return occurrence

    def remember(self, binding: str, params: Mapping[str, Any], answer: JSONObject) -> None:
        """Keep the answer for the retry window (the one advertised now), then save."""
        self.state.remember(
            binding,
            params["eventId"],
            _fingerprint(_wire(params)),
            orjson.dumps(answer),
            self._clock() + self.retry_window_seconds,
        )
        self.save()


class Conversation:
    """One context of an ``EventInbox``: ``drain()`` once per model request."""

    def __init__(self, inbox: EventInbox, name: str) -> None:
        self.inbox = inbox
        self.name = name

    def __repr__(self) -> str:
        return f"<Conversation {self.name!r}>"

    async def drain(self) -> Drained:
        """``EventInbox.drain`` of this conversation."""
        return await self.inbox.drain(self.name)

    async def wait(self) -> None:
        """``EventInbox.wait`` of this conversation."""
        await self.inbox.wait(self.name)

    def due(self) -> list[WakeCause]:
        """``EventInbox.due`` of this conversation."""
        return self.inbox.due(self.name)

    def next_wake(self) -> float | None:
        """``EventInbox.next_wake`` of this conversation."""
        return self.inbox.next_wake(self.name)

    def causes(self) -> list[WakeCause]:
        """``EventInbox.causes`` of this conversation."""
        return self.inbox.causes(self.name)

    async def prepare(self) -> int:
        """``EventInbox.prepare`` of this conversation."""
        return await self.inbox.prepare(self.name)

    def pending(self) -> list[Occurrence]:
        return self.inbox.pending(self.name)


def _result(outcome: Outcome, prior: str | None) -> JSONObject:
    coalesce: JSONObject = {"outcome": outcome}
    if prior is not None:
        coalesce["priorEventId"] = prior
    return coalesce


class InboxLane:
    """What one transport's ``push/event`` and ``channels/incoming`` services call when a
    message carries ``coalesce`` (module rules)."""

    def __init__(self, inbox: EventInbox, binding: str, route: RenderRoute) -> None:
        self.inbox = inbox
        self.binding = binding
        self._route = route

    async def push(
        self, context: RequestContext, params: Mapping[str, Any], event: dict[str, Any]
    ) -> JSONObject:
        """The result of an admitted ``push/event`` carrying ``coalesce``; raises
        ``HandlerError`` (-32602 malformed, -32017 / -32023 channel authority)."""
        inbox = self.inbox
        problem = coalesce_problem(
            params, lane="push", deferred_ok=inbox.deferred, channel_scoped_ok=inbox.channel_scoped_push
        )
        if problem is not None:
            field, reason = problem
            raise HandlerError(ErrorCode.INVALID_PARAMS, "Invalid params", {"field": field, "reason": reason})
        refusal = self._route.push_refusal(params)
        if refusal is not None:
            raise refusal
        receipt = inbox.receipt(self.binding, params)
        if receipt is not None:
            return receipt
        if inbox.full():
            return dict(INBOX_FULL)
        coalesce = params["coalesce"]
        channel_id = coalesce.get("channelId")
        scope = (
            ("channel", channel_id) if isinstance(channel_id, str) else ("featureSet", params["featureSet"])
        )
        if isinstance(channel_id, str):  # the message it edits stays the reply target (§3.1)
            target = inbox.state.reply_target((self.binding, "channel", channel_id, coalesce["key"]))
            if target is not None:
                event["replyTarget"] = target
        outcome, prior = inbox.admit(self.binding, "push", event, scope)
        answer: JSONObject = {"accepted": True, "coalesce": _result(outcome, prior)}
        inbox.remember(self.binding, params, answer)
        return answer

    def ordinary(self, event: dict[str, Any]) -> JSONObject:
        """An admitted ``push/event`` without ``coalesce`` (after the push service's own
        de-duplication, MCPL §9.4): appended for every conversation; ``{accepted: true}``."""
        if self.inbox.full():
            return dict(INBOX_FULL)
        self.inbox.ordinary("push", str(event.get("eventId")), event)
        self.inbox.save()
        return {"accepted": True}

    def ordinary_message(self, delivered: dict[str, Any]) -> JSONObject:
        """An admitted ``channels/incoming`` message without ``coalesce``: appended for
        every conversation."""
        if self.inbox.full():
            return {"messageId": delivered.get("messageId"), **INBOX_FULL}
        event_id = delivered.get("eventId", delivered.get("messageId"))
        self.inbox.ordinary("channel", str(event_id), delivered)
        self.inbox.save()
        return {"messageId": delivered.get("messageId"), "accepted": True}

    def message(self, message: Mapping[str, Any], delivered: dict[str, Any]) -> JSONObject:
        """The per-message result of an admitted ``channels/incoming`` message carrying
        ``coalesce`` (RFC-006 §13: ``coalesce_invalid`` when malformed)."""
        inbox = self.inbox
        message_id = message.get("messageId")
        if not inbox.channels_incoming:  # not advertised: coalesce ignored, as an older host does
            return self.ordinary_message(delivered)
        problem = coalesce_problem(message, lane="channel", deferred_ok=False, channel_scoped_ok=False)
        if problem is not None:
            refused: JSONObject = {"messageId": message_id, "accepted": False, "reason": "coalesce_invalid"}
            return refused
        receipt = inbox.receipt(self.binding, message)
        if receipt is not None:
            return receipt
        if inbox.full():
            return {"messageId": message_id, **INBOX_FULL}
        outcome, prior = inbox.admit(self.binding, "channel", delivered, ("channel", message["channelId"]))
        inbox.state.reply_target(
            (self.binding, "channel", message["channelId"], message["coalesce"]["key"]), message
        )
        answer: JSONObject = {"messageId": message_id, "accepted": True, "coalesce": _result(outcome, prior)}
        inbox.remember(self.binding, message, answer)
        return answer


class TransportRoute:
    """The ``RenderRoute`` of one ``ServerConnection``: its transport (``shell``), its
    admission view (``view``, the ``PolicyState``), its channel registry and the
    application's channel patterns, its content view."""

    def __init__(
        self,
        shell: Connection,
        view: AdmissionView,
        registry: ChannelRegistry,
        patterns: Callable[[], tuple[str, ...] | None],
        content_view: ContentView,
        render_timeout: float,
        *,
        log: Logger,
        failures_logged: int,
    ) -> None:
        self._log = log
        self._failures = LogBudget(failures_logged)
        self._shell = shell
        self._view = view
        self._registry = registry
        self._patterns = patterns
        self._content_view = content_view
        self._render_timeout = render_timeout

    @property
    def connected(self) -> bool:
        return self._shell.is_open and self._view.grant is not None

    @property
    def render_timeout(self) -> float:
        return self._render_timeout

    async def request(self, method: str, params: JSONObject, timeout: float) -> Any:
        return await self._shell.request(method, params, timeout=timeout)

    def push_refusal(self, params: Mapping[str, Any]) -> HandlerError | None:
        """Ordinary push admission (``admission.admit``) and, for ``coalesce.channelId``, the
        channel checks a ``channels/incoming`` message for it would pass (RFC-006 §3.2)."""
        decision = admit("push/event", params, self._view, may_hold=False)
        if isinstance(decision, Refused):
            return decision.error
        coalesce = params.get("coalesce")
        channel_id = coalesce.get("channelId") if is_mapping(coalesce) else None
        if not isinstance(channel_id, str):
            return None
        grant = self._view.grant
        if grant is None or not (grant.allows("channels.incoming") and grant.allows("channels.register")):
            return HandlerError(CHANNEL_NOT_PERMITTED, "Channel not permitted")
        descriptor = self._registry.get(channel_id)
        if descriptor is None:
            return HandlerError(UNKNOWN_CHANNEL, "Unknown channel")
        if descriptor.get("direction") not in ("inbound", "bidirectional"):
            return HandlerError(CHANNEL_NOT_PERMITTED, "Channel not permitted")
        if not channel_allowed(channel_id, self._patterns()):
            return HandlerError(CHANNEL_NOT_PERMITTED, "Channel not permitted")
        return None

    def model_content(self, content: object, provenance: str) -> list[dict[str, Any]]:
        return self._content_view.model_content(content, provenance)

    def render_failed(self, why: str) -> None:
        """Under ``Limits.render_failures_logged`` per connection (the logger names the server)."""
        self._failures.warn(self._log, "push/render not usable", why=why)
