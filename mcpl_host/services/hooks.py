"""``context/beforeInference`` on one connection (MCPL §10.1-§10.8).

Rules:

- Nothing ungranted goes out (§5.4): without ``observe`` or an ``inject.*`` leaf in force
  nothing is sent and ``before_inference`` returns None, so a fan-out simply skips the server.
- ``userMessage`` is null without ``observe``; no ``featureSet`` is sent.
- Fail-open (§10.6): a timeout or failure is a result with ``outcome`` ``timeout`` /
  ``failure``, no injections, and a log line.
- Injections are judged by ``injections.read_injections`` against the grant in force **when
  the answer arrives**: in the read loop (``on_answer``), before any later line (a
  revocation) is read. Each dropped injection gets a log line (at most
  ``Limits.dropped_injections_logged`` per answer, then one).
- Injection is deprecated (RFC-010 §4.1): the first answer of a connection whose
  ``contextInjections`` is not empty gets one warning naming the server, and only that one
  (``deprecation_told``); authorized injections are applied all the same. With the MCPL 0.6
  rule (``ignore_injections()``, ``GrantPolicy.ignore_injections``: RFC-010 §4.2) none is
  applied: the result says ``ignored``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Literal

from typing_extensions import NotRequired, TypedDict, Unpack

from mcpl_host._keywords import checked_keywords
from mcpl_host.connection import DEFAULT, Timeout
from mcpl_host.jsonrpc.envelope import Response
from mcpl_host.jsonrpc.errors import MCPLHostError, RequestTimeout
from mcpl_host.logging import Logger, Redactor, ServerValue
from mcpl_host.mcpl.admission import AdmissionView, before_inference_eligible
from mcpl_host.mcpl.grants import NO_GRANT
from mcpl_host.mcpl.injections import (
    DEFAULT_HOOK_TIMEOUT_SECONDS,
    OBSERVE,
    BeforeInferenceResult,
    HookReading,
    read_injections,
)
from mcpl_host.mcpl.references import ContentView
from mcpl_host.services.negotiation import Requester

__all__ = ["BeforeInferenceArgs", "HookCalls"]


class BeforeInferenceArgs(TypedDict):
    """The arguments of one ``context/beforeInference`` (MCPL §10.1), given as keywords to
    ``HookCalls.before_inference``, ``turns.before_inference_fanout`` and
    ``Host.before_inference``:

    - ``inference_id``, ``conversation_id``: correlation strings; ``turn_index``: 0-based int.
    - ``user_message``: the user's text; sent only if ``observe`` is granted, else null.
    - ``model``: ModelInfo ``{id, vendor, contextWindow, capabilities}``, always sent.
    - ``channels`` (optional, default None: not sent): §14.4 channel context, sent as given.
    - ``timeout`` (optional): seconds (default ``Limits.hook_timeout_seconds``, 5 as §10.6
      recommends); None waits for ever.
    """

    inference_id: str
    conversation_id: str
    turn_index: int
    user_message: str | None
    model: Mapping[str, Any]
    channels: NotRequired[Mapping[str, Any] | None]
    timeout: NotRequired[Timeout]


class HookCalls:
    """``context/beforeInference`` for one connection (module rules)."""

    def __init__(
        self,
        requester: Requester,
        view: AdmissionView,
        *,
        log: Logger,
        redactor: Redactor,
        drops_logged: int,
        default_timeout: float | None = DEFAULT_HOOK_TIMEOUT_SECONDS,
        content_view: ContentView | None = None,
        ignore_injections: Callable[[], bool] = lambda: False,
    ) -> None:
        self._content_view = content_view
        self._ignore_injections = ignore_injections
        #: Whether this connection's injection was told (RFC-010 §4.1: once per connection).
        self.deprecation_told = False
        self._default_timeout = default_timeout
        self._requester = requester
        self._view = view
        self._log = log
        self._redactor = redactor
        self._drops_logged = drops_logged
        self.in_flight = 0

    @property
    def eligible(self) -> bool:
        """Granted ``observe`` or any ``inject.*`` leaf (§10.1)."""
        return before_inference_eligible(self._view)

    async def before_inference(self, **args: Unpack[BeforeInferenceArgs]) -> BeforeInferenceResult | None:
        """Send ``context/beforeInference`` and read its injections (module rules).

        Args: keywords, as ``BeforeInferenceArgs`` says.

        Returns:
            None (nothing sent) when not eligible; else a ``BeforeInferenceResult``:
            ``outcome`` ``"ok"`` with the authorized injections and the dropped ones, or
            ``"timeout"`` / ``"failure"`` with none. Never raises for a server's failure.

        Cancellation: the request is abandoned (``notifications/cancelled`` is sent, a late
        answer is an orphan) and the cancellation propagates.
        """
        checked_keywords(BeforeInferenceArgs, args, "before_inference")
        grant = self._view.grant
        if grant is None or not self.eligible:
            return None
        name = self._requester.name
        inference_id = args["inference_id"]
        params: dict[str, Any] = {
            "inferenceId": inference_id,
            "conversationId": args["conversation_id"],
            "turnIndex": args["turn_index"],
            "userMessage": args["user_message"] if grant.allows(OBSERVE) else None,
            "model": dict(args["model"]),
        }
        channels = args.get("channels")
        if channels is not None:
            params["channels"] = dict(channels)
        readings: list[HookReading] = []
        ignore = self._ignore_injections()

        def on_answer(response: Response) -> None:
            # In the read loop, at receipt: the grant read here is the one in force now.
            if response.has_error:
                return
            try:
                readings.append(
                    read_injections(response.result, self._view.grant or NO_GRANT, name, ignore=ignore)
                )
            except Exception:  # a bug must not leave the waiter hanging until its timeout
                self._log.exception("could not read a context/beforeInference answer")
                readings.append(HookReading(problem="the answer could not be read"))

        timeout = args.get("timeout", DEFAULT)
        self.in_flight += 1
        try:
            await self._requester.request(
                "context/beforeInference",
                params,
                timeout=self._default_timeout if timeout is DEFAULT else timeout,
                on_answer=on_answer,
            )
        except RequestTimeout as exc:
            return self._failed(inference_id, "timeout", str(exc))
        except MCPLHostError as exc:  # error answer, malformed answer, transport gone
            return self._failed(inference_id, "failure", str(exc))
        finally:
            self.in_flight -= 1
        reading = readings[0] if readings else HookReading(problem="no answer was read")
        if reading.problem is not None:
            return self._failed(inference_id, "failure", reading.problem)
        self._log_drops(inference_id, reading)
        if reading.returned and not self.deprecation_told:
            self.deprecation_told = True
            self._log.warning(
                "the server injects context (contextInjections), deprecated by MCPL RFC-010 §4.1"
                + (": ignored (the MCPL 0.6 rule is on)" if ignore else "; removed in MCPL 0.6"),
                inference_id=inference_id,
                injections=reading.returned,
                section="RFC-010 §4.1",
            )
        self._log.info(
            "context/beforeInference answered",
            inference_id=inference_id,
            feature_set=ServerValue(reading.feature_set, self._redactor),
            injections=len(reading.injections),
            dropped=len(reading.dropped),
        )
        injections = reading.injections
        view = self._content_view
        if view is not None:  # MCPL §19.4: injections are a reference lane
            injections = tuple(
                replace(
                    item,
                    model_content=tuple(
                        view.model_content(list(item.content), f"injection {item.namespace}")
                    ),
                )
                for item in injections
            )
        return BeforeInferenceResult(
            name,
            "ok",
            injections,
            reading.dropped,
            reading.feature_set,
            returned=reading.returned,
            ignored=ignore and reading.returned > 0,
        )

    def _failed(
        self, inference_id: str, outcome: Literal["timeout", "failure"], error: str
    ) -> BeforeInferenceResult:
        self._log.warning(
            "context/beforeInference failed open; the turn goes on without it",
            inference_id=inference_id,
            outcome=outcome,
            error=ServerValue(error, self._redactor),
        )
        return BeforeInferenceResult(self._requester.name, outcome, error=error)

    def _log_drops(self, inference_id: str, reading: HookReading) -> None:
        for dropped in reading.dropped[: self._drops_logged]:
            self._log.warning(
                "context injection dropped",
                inference_id=inference_id,
                index=dropped.index,
                reason=dropped.reason,
                position=ServerValue(dropped.position, self._redactor),
                detail=ServerValue(dropped.detail, self._redactor),
            )
        if len(reading.dropped) > self._drops_logged:
            self._log.warning(
                "more context injections dropped",
                inference_id=inference_id,
                count=len(reading.dropped) - self._drops_logged,
            )
