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
  the same result. Only results are remembered: after an error or a cancellation a
  duplicate is handled anew.
- A handler result of the wrong shape is the application's bug: ``-32603`` on the wire, the
  problems in a log line. ``accepted: false`` without a reason gets ``GENERIC_REFUSAL``.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import anyio
import orjson

from mcpl_host.handlers import HostHandlers, RequestContext
from mcpl_host.jsonrpc.errors import ErrorCode, HandlerError
from mcpl_host.limits import DEFAULT_MAX_TAGS
from mcpl_host.logging import Redactor, ServerValue
from mcpl_host.mcpl.server_shapes import GENERIC_REFUSAL, push_result_problems
from mcpl_host.mcpl.tags import EventDeduplicator, read_tags

if TYPE_CHECKING:
    from mcpl_host.observe import Reporter

__all__ = ["PushService", "checked_result", "event_fingerprint"]


def event_fingerprint(params: dict[str, Any]) -> bytes:
    """A digest of a push's params (keys sorted), to tell a retry from a reused id."""
    try:
        data = orjson.dumps(params, option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError):  # beyond orjson (deep nesting): by identity
        data = repr(sorted(params)).encode()
    return hashlib.blake2b(data, digest_size=16).digest()


def checked_result(method: str, result: Any, problems: list[str], log: Any) -> dict[str, Any]:
    """``result`` as a new dict, or raise ``HandlerError(-32603)`` (and log the problems)
    when the application's handler returned the wrong shape."""
    if problems:
        log.error("handler returned a malformed result", method=method, problems=problems)
        raise HandlerError(ErrorCode.INTERNAL_ERROR, "Internal error")
    return dict(result)


class _InFlight:
    """A push still being handled: duplicates wait on ``done``."""

    __slots__ = ("done", "fingerprint", "service")

    def __init__(self, fingerprint: bytes, service: object) -> None:
        self.done = anyio.Event()
        self.fingerprint = fingerprint
        self.service = service


class _Retry:
    """Remembered after an error or a cancellation: the next duplicate is handled anew."""

    __slots__ = ()


_RETRY = _Retry()


class PushService:
    """Serves admitted ``push/event`` requests on one connection (module rules); the
    deduplicator is the server's."""

    def __init__(
        self,
        handlers: HostHandlers,
        reporter: Reporter,
        dedupe: EventDeduplicator,
        *,
        log: Any,
        redactor: Redactor,
        max_tags: int = DEFAULT_MAX_TAGS,
    ) -> None:
        self._max_tags = max_tags
        self._handlers = handlers
        self._reporter = reporter
        self._dedupe = dedupe
        self._log = log
        self._redactor = redactor

    async def serve(self, context: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
        """The result of an admitted ``push/event``; raises ``HandlerError``."""
        event_id, dedupe = params["eventId"], self._dedupe
        fingerprint = event_fingerprint(params)
        while True:
            seen = dedupe.check(event_id, anyio.current_time())
            if seen is None or seen is _RETRY:
                break
            if isinstance(seen, _InFlight):
                if seen.service is not self and seen.fingerprint != fingerprint:
                    self._reused(event_id)
                    break
                await seen.done.wait()  # then look again: its result, or handle it anew
                continue
            remembered_fingerprint, service, original = seen
            if service is not self and remembered_fingerprint != fingerprint:
                self._reused(event_id)
                break
            return dict(original)  # §9.4: a duplicate gets the original result
        marker = _InFlight(fingerprint, self)
        dedupe.remember(event_id, marker, anyio.current_time())
        handled: dict[str, Any] | None = None  # set once the handler has answered
        data = {
            "id": context.id,
            "featureSet": params.get("featureSet"),
            "eventId": event_id,
            "params": params,
        }
        try:
            result = await self._handle(context, params)
            handled = result
        except HandlerError as exc:
            self._reporter.handled("push_event", {**data, "error": exc.to_error()})
            raise
        finally:
            if dedupe.check(event_id, anyio.current_time()) is marker:
                remembered = _RETRY if handled is None else (fingerprint, self, dict(handled))
                dedupe.remember(event_id, remembered, anyio.current_time())
            marker.done.set()
        self._reporter.handled("push_event", {**data, "answer": result})
        return result

    def _reused(self, event_id: str) -> None:
        self._log.info(
            "push/event reuses an eventId with other content; handled as a new event",
            event_id=ServerValue(event_id, self._redactor),
        )

    async def _handle(self, context: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
        event = dict(params)
        if "tags" in params:
            closure = read_tags(params["tags"], max_tags=self._max_tags)  # §16.3; never authority
            event["tags"] = closure.tags
            if closure.problems:  # one line, at most Limits.max_tags + 1 problems
                self._log.debug("push/event tag problems", problems=closure.problems)
        raw = await self._handlers.push_event(context, event)
        checked = checked_result("push/event", raw, push_result_problems(raw), self._log)
        if checked["accepted"] is False and "reason" not in checked:
            self._log.info(
                "push/event handler refused without a reason; answering a generic one", reason=GENERIC_REFUSAL
            )
            checked["reason"] = GENERIC_REFUSAL
        return checked
