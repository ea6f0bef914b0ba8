"""``push/event`` (MCPL §9): de-duplication, tag closure, the handler, the result's shape.

Rules:

- Admission (grant, feature set, params) has run before ``PushService.serve`` is called.
- The handler gets a params copy whose ``tags`` (only if sent) are closed by the core closure
  (§16.3, ``tags.read_tags``); tags are read after admission and never authorize anything.
- **De-duplication** (§9.4; docs/protocol.md, "Push idempotency"): one ``EventDeduplicator``
  per server, kept by the ``HostedServer`` across transports. On one transport a repeated
  ``eventId`` is a duplicate (§9.4). From an earlier transport it is a duplicate only with the
  same params (a retry after a reconnect: servers keep an event's id stable across retries);
  with other params it is a restarted server counting from 1 again, so a new event (logged at
  info). A duplicate arriving while the first is still being handled waits for it and gets
  the same result (the marker of an event in flight gets an ``anyio.Event`` only then).
  Only results are remembered: after an error or a cancellation the id is forgotten and a
  duplicate is handled anew. The clock (``time.monotonic()``) is read once per event, on
  arrival: an id is remembered for ``Limits.event_id_ttl_seconds`` from then (its result
  takes the in-flight marker's place and age). A result is kept as its JSON text and the
  transport that answered as a number, so the window (up to
  ``Limits.max_remembered_event_ids`` entries) holds nothing the garbage collector walks.
- A handler result of the wrong shape is the application's bug: ``-32603`` on the wire, the
  problems in a log line. ``accepted: false`` without a reason gets ``GENERIC_REFUSAL``.
- **Answered at once** (``answer_now``, called in the read loop): while the application's
  ``push_event`` is ``HostHandlers``' own (it accepts every event and looks at nothing),
  no observer watches and no event inbox takes the pushes (with telemetry on, the
  dispatcher's job is a traced one, never answered at once), a new event's result is
  ``{"accepted": true}`` without a coroutine, a ``RequestContext``, the handler's copy of
  the params or their model-visible form (whose references nobody could see; no record is
  registered for them: docs/protocol.md, "Push idempotency"). The result goes back as
  the JSON text the window keeps (``inbound.EagerJob``: the pool splices it after the id).
  De-duplication is the same (``_claim``'s two steps): a duplicate gets the result
  remembered; a duplicate of an event still in flight, or one whose result is kept as a
  dict (beyond orjson), is left to ``serve`` (which waits for the event in flight).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio
import orjson

from mcpl_host.handlers import HostHandlers, RequestContext
from mcpl_host.inbound import LATER
from mcpl_host.jsonrpc.envelope import Request
from mcpl_host.jsonrpc.errors import ErrorCode, HandlerError
from mcpl_host.jsonrpc.values import JSONObject, is_mapping
from mcpl_host.limits import DEFAULT_MAX_TAGS
from mcpl_host.logging import Logger, Redactor, ServerValue
from mcpl_host.mcpl.references import MODEL_CONTENT, ContentView
from mcpl_host.mcpl.server_shapes import GENERIC_REFUSAL, push_result_problems
from mcpl_host.mcpl.tags import EventDeduplicator, read_tags

if TYPE_CHECKING:
    from mcpl_host.observe import Reporter
    from mcpl_host.services.coalescing import InboxLane

__all__ = ["PushService", "checked_result", "event_fingerprint"]


def event_fingerprint(params: Mapping[str, object]) -> int:
    """A digest of a push's params (keys sorted), to tell a retry from a reused id: Python's
    keyed 64-bit hash of their JSON text (it never leaves the process)."""
    try:
        data = orjson.dumps(params, option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError):  # beyond orjson (deep nesting): by identity
        data = repr(sorted(params)).encode()
    return hash(data)


def checked_result(method: str, result: Any, problems: list[str], log: Logger) -> JSONObject:
    """``result`` as a new dict, or raise ``HandlerError(-32603)`` (and log the problems)
    when the application's handler returned the wrong shape."""
    if problems:
        log.error("handler returned a malformed result", method=method, problems=problems)
        raise HandlerError(ErrorCode.INTERNAL_ERROR, "Internal error")
    return dict(result)


def _kept(result: Mapping[str, object]) -> bytes | dict[str, Any]:
    """A result as the window keeps it: its JSON text (what the wire got), else a copy."""
    try:
        return orjson.dumps(result)
    except TypeError:  # beyond orjson (integers over 64 bits): the answer falls back too
        return dict(result)


def _recalled(kept: bytes | dict[str, Any]) -> JSONObject:
    """A new dict of a result ``_kept`` earlier."""
    if isinstance(kept, bytes):
        value: JSONObject = orjson.loads(kept)
        return value
    return dict(kept)


#: Numbers the push services (one per transport), for ``_InFlight.service`` and the results.
_SERIALS = itertools.count(1)

#: The default handler's result (``HostHandlers.push_event``), and as the window keeps it.
_ACCEPTED: JSONObject = {"accepted": True}
_ACCEPTED_KEPT = orjson.dumps(_ACCEPTED)


class _InFlight:
    """A push still being handled. ``done`` is made only when a duplicate arrives meanwhile
    (it waits on it); the push that made the marker sets it when it is over."""

    __slots__ = ("done", "fingerprint", "service")

    def __init__(self, fingerprint: int, service: int) -> None:
        self.done: anyio.Event | None = None
        self.fingerprint = fingerprint
        self.service = service

    async def wait(self) -> None:
        done = self.done
        if done is None:
            self.done = done = anyio.Event()
        await done.wait()

    def finish(self) -> None:
        if self.done is not None:
            self.done.set()


class PushService:
    """Serves admitted ``push/event`` requests on one connection (module rules); the
    deduplicator is the server's."""

    def __init__(
        self,
        handlers: HostHandlers,
        reporter: Reporter,
        dedupe: EventDeduplicator,
        *,
        log: Logger,
        redactor: Redactor,
        max_tags: int = DEFAULT_MAX_TAGS,
        content_view: ContentView | None = None,
        inbox: InboxLane | None = None,
    ) -> None:
        self._content_view = content_view
        self._inbox = inbox  # RFC-006: pushes carrying ``coalesce`` go to the event inbox
        self._max_tags = max_tags
        self._handlers = handlers
        self._reporter = reporter
        self._dedupe = dedupe
        self._log = log
        self._redactor = redactor
        # Who handled a remembered push, as a number: an entry of numbers and bytes is no
        # work for the garbage collector (a flood keeps up to 1024 of them).
        self._serial = next(_SERIALS)
        # The application's handler is HostHandlers' own, read once (module rules, "Answered
        # at once"); an override on the instance counts as the application's too.
        default_handler = getattr(handlers.push_event, "__func__", None) is HostHandlers.push_event
        # ... and no event inbox (fixed for the service's life): the two tests of three that
        # cannot change, read once.
        self._may_answer_now = default_handler and inbox is None

    def answer_now(self, request: Request) -> bytes:
        """The result of an admitted ``push/event`` ``request`` as compact JSON text, answered
        in the read loop (module rules, "Answered at once"): ``{"accepted":true}``, or the
        result remembered for a duplicate (the window keeps it as its text); ``LATER`` when
        it must be served as a job (``serve``): the handler is the application's, an observer
        or an event inbox is there, a duplicate is in flight, or the result remembered is
        not kept as text. Never raises, never waits."""
        later: bytes = LATER
        if not self._may_answer_now or self._reporter.observer is not None:
            return later
        params = request.params
        event_id = params["eventId"]
        fingerprint = event_fingerprint(params)
        kept, now = (fingerprint, self._serial, _ACCEPTED_KEPT), time.monotonic()
        seen = self._dedupe.claim(event_id, kept, now)  # ``_claim``, its usual case first
        if seen is not None:
            seen = self._seen(event_id, fingerprint, kept, now, seen)
        if seen is None:
            if "tags" in params:
                self._closed_tags(params["tags"])
            return _ACCEPTED_KEPT
        if isinstance(seen, bytes):
            return seen
        return later  # in flight, or a result beyond orjson (``serve`` recalls it)

    def _claim(
        self, event_id: str, fingerprint: int, marker: object, now: float
    ) -> bytes | dict[str, Any] | _InFlight | None:
        """De-duplication (module rules): None once ``marker`` is stored for ``event_id``
        (a new event, or a restarted server's reused id, logged); the result remembered for
        a duplicate, as kept (``_kept``: ``_recalled`` makes it a new dict); or the
        ``_InFlight`` marker of the event still in flight that it duplicates (wait for it,
        then claim again)."""
        seen = self._dedupe.claim(event_id, marker, now)  # None: the marker is stored, ours
        return None if seen is None else self._seen(event_id, fingerprint, marker, now, seen)

    def _seen(
        self, event_id: str, fingerprint: int, marker: object, now: float, seen: Any
    ) -> bytes | dict[str, Any] | _InFlight | None:
        """``_claim`` once the window holds ``seen`` for ``event_id``: a duplicate's kept
        result or marker, or None once ``marker`` replaced a restarted server's entry."""
        if isinstance(seen, _InFlight):
            if seen.service == self._serial or seen.fingerprint == fingerprint:
                return seen
        else:
            remembered_fingerprint, service, original = seen
            if service == self._serial or remembered_fingerprint == fingerprint:
                kept: bytes | dict[str, Any] = original
                return kept  # §9.4: a duplicate gets the original result
        # From an earlier transport with other params: a restarted server reusing the id.
        self._reused(event_id)
        self._dedupe.remember(event_id, marker, now)
        return None

    async def serve(self, context: RequestContext, params: dict[str, Any]) -> JSONObject:
        """The result of an admitted ``push/event``; raises ``HandlerError``.

        The clock (``time.monotonic()``, seconds) is read once, on arrival: an id is
        remembered for ``Limits.event_id_ttl_seconds`` from the arrival of its event.
        With an event inbox, a push carrying ``coalesce`` is the inbox's
        (``services.coalescing.InboxLane.push``: its own receipts, RFC-006 §3.1)."""
        if self._inbox is not None and "coalesce" in params:
            event = self._event(params)
            try:
                answer = await self._inbox.push(context, params, event)
            except HandlerError as exc:
                self._reporter.handled_push(context, params, error=exc.to_error())
                raise
            self._reporter.handled_push(
                context, params, answer=answer, model_content=event.get(MODEL_CONTENT)
            )
            return answer
        event_id, dedupe = params["eventId"], self._dedupe
        fingerprint = event_fingerprint(params)
        marker = _InFlight(fingerprint, self._serial)
        seen = self._claim(event_id, fingerprint, marker, time.monotonic())
        while seen is not None:
            if not isinstance(seen, _InFlight):
                return _recalled(seen)
            await seen.wait()  # then look again: its result, or handle it anew
            seen = self._claim(event_id, fingerprint, marker, time.monotonic())
        answered: dict[str, Any] | None = None  # set once the handler has answered
        event = self._event(params)
        model_content = event.get(MODEL_CONTENT)
        try:
            if self._inbox is not None:  # the inbox holds ordinary pushes too (EC1)
                raw = self._inbox.ordinary(event)
            else:
                raw = await self._handlers.push_event(context, event)
            answered = result = self._checked(raw)
        except HandlerError as exc:
            self._reporter.handled_push(context, params, error=exc.to_error(), model_content=model_content)
            raise
        finally:
            # Only a result is remembered (in the marker's place, keeping its age): after an
            # error or a cancellation the id is forgotten, and a duplicate is handled anew.
            kept = None if answered is None else (fingerprint, self._serial, _kept(answered))
            dedupe.replace(event_id, marker, kept)
            marker.finish()
        self._reporter.handled_push(context, params, answer=result, model_content=model_content)
        return result

    def _reused(self, event_id: str) -> None:
        self._log.info(
            "push/event reuses an eventId with other content; handled as a new event",
            event_id=ServerValue(event_id, self._redactor),
        )

    def _event(self, params: Mapping[str, object]) -> dict[str, Any]:
        """The handler's copy of ``params``, its ``tags`` (only if sent) closed (§16.3), and
        ``modelContent``: the model-visible form of ``payload.content`` (§9.2, §19.5: each
        reference a stub, made here, before any wake text; always the host's, whatever the
        server sent under that key)."""
        event = dict(params)
        if self._content_view is not None:
            payload = params.get("payload")
            content = payload.get("content") if is_mapping(payload) else None
            feature_set = params.get("featureSet")
            event[MODEL_CONTENT] = self._content_view.model_content(content, f"push event of {feature_set}")
        if "tags" in params:
            event["tags"] = self._closed_tags(params["tags"])
        return event

    def _closed_tags(self, tags: object) -> list[str]:
        """The core closure of ``tags`` (never authority), its problems logged (one line,
        at most ``Limits.max_tags`` + 1 problems)."""
        closure = read_tags(tags, max_tags=self._max_tags)
        if closure.problems:
            self._log.debug("push/event tag problems", problems=closure.problems)
        return closure.tags

    def _checked(self, raw: object) -> JSONObject:
        """The handler's result as answered (module rules); raises ``HandlerError``."""
        checked = checked_result("push/event", raw, push_result_problems(raw), self._log)
        if checked["accepted"] is False and "reason" not in checked:
            self._log.info(
                "push/event handler refused without a reason; answering a generic one", reason=GENERIC_REFUSAL
            )
            checked["reason"] = GENERIC_REFUSAL
        return checked
