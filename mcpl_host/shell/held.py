"""Server requests that wait for a person: the shell's ``HostHandlers`` hold each
``inference/request`` (MCPL §11), ``sampling/createMessage`` and ``elicitation/create`` (MCP
2025-11-25 "Sampling", "Elicitation"; in the stateless era the input requests of a multi
round-trip request) until it is answered by hand (``answer ID TEXT``); ``--auto-answer TEXT``
answers inference and sampling at once.

Rules of this module:

- A held request gets the next id (``"1"``, ``"2"``...) and is announced (``on_held``) as it
  arrives; it stays in ``HeldRequests`` until answered, until
  ``Limits.held_request_timeout_seconds`` pass (it is then answered ``-32603``, and
  ``on_expired`` says so), or until its transport ends (the request's task is cancelled;
  nothing is sent). How many can be held at once is bounded by the connection's inbound
  bounds (``Limits.max_concurrent_inbound``, ``max_queued_inbound``).
- The answer is the MCPL ``inference/request`` result (MCPL §11.3): ``content`` the text,
  ``model`` ``ANSWER_MODEL``, ``finishReason`` ``"end_turn"``, ``usage`` zeros (no model
  counted anything). A streamed request (``stream: true``) gets the text as one
  ``inference/chunk`` first (§11.4).
- A sampling answer is the text as one text block, ``model`` ``ANSWER_MODEL``; an
  elicitation answer is ``accept``, ``decline``, ``cancel`` or a JSON object (a form accepted
  with it; ``probe_features.elicitation_reply``). A URL is shown, never opened. Both modes
  of elicitation are served; sampling without tool use.
- Handlers are per server; the held list is the shell's, across servers. The other server
  requests keep the library's defaults (push events accepted, others ``-32601``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import anyio

from mcpl_host.client_features import (
    ElicitationMode,
    ElicitationRequest,
    ElicitationResult,
    RootsProvider,
    SamplingRequest,
    SamplingResult,
)
from mcpl_host.handlers import HostHandlers, InferenceStream, RequestContext
from mcpl_host.jsonrpc.errors import ErrorCode, HandlerError
from mcpl_host.jsonrpc.values import JSONObject
from mcpl_host.limits import DEFAULT_HELD_REQUEST_TIMEOUT_SECONDS
from mcpl_host.probe_features import elicitation_reply

__all__ = [
    "ANSWER_MODEL",
    "HeldRequest",
    "HeldRequests",
    "ShellHandlers",
    "answer_hint",
    "asked",
    "elicitation_mode",
    "inference_answer",
    "question",
]

#: The ``model`` of an answer typed by a person.
ANSWER_MODEL = "mcpl-host-shell (answered by hand)"


def inference_answer(text: str) -> JSONObject:
    """The ``inference/request`` result carrying ``text`` (MCPL §11.3)."""
    return {
        "content": text,
        "model": ANSWER_MODEL,
        "finishReason": "end_turn",
        "usage": {"inputTokens": 0, "outputTokens": 0},
    }


def question(params: object) -> str:
    """The text of the last message of ``inference/request`` params (its content as a
    string, or the text blocks of a content list), for showing; ``""`` if none."""
    messages = _objects(_objects(params)[0].get("messages")) if _objects(params) else []
    content: Any = messages[-1].get("content") if messages else None
    if isinstance(content, str):
        return content
    return " ".join(text for block in _objects(content) if isinstance(text := block.get("text"), str))


def asked(method: str, params: object) -> str:
    """What a held request asks, for showing: the last message (``question``), or for an
    elicitation its message and the fields of its form (``*`` required) or its URL."""
    if method != "elicitation/create":
        return question(params)
    found = _objects(params)
    request = found[0] if found else {}
    message = request.get("message")
    text = message if isinstance(message, str) else ""
    if request.get("mode") == "url":
        return f"{text} (URL, not opened: {request.get('url')})"
    schema = _objects(request.get("requestedSchema"))
    properties = _objects(schema[0].get("properties")) if schema else []
    names = list(properties[0]) if properties else []
    required = schema[0].get("required") if schema else None
    marked = [f"{n}*" if isinstance(required, list) and n in required else n for n in names]
    return f"{text} (fields: {', '.join(marked) or 'none'})"


def elicitation_mode(request: HeldRequest) -> ElicitationMode:
    """The mode of a held ``elicitation/create``: ``"url"`` when its params say so, else
    ``"form"`` (MCP 2025-11-25 "Elicitation": form is the default)."""
    found = _objects(request.params)
    return "url" if found and found[0].get("mode") == "url" else "form"


def answer_hint(request: HeldRequest) -> str:
    """How to answer ``request`` in the shell."""
    if request.method != "elicitation/create":
        return f"answer {request.id} TEXT"
    if elicitation_mode(request) == "url":
        return f"answer {request.id} accept|decline|cancel"
    return f"answer {request.id} JSON|accept|decline|cancel"


def _objects(value: object) -> list[dict[str, Any]]:
    """The JSON objects of ``value``: the items of a list that are objects, or ``value``
    itself when it is one."""
    items = cast("list[object]", value) if isinstance(value, list) else [value]
    return [cast("dict[str, Any]", item) for item in items if isinstance(item, dict)]


@dataclass(slots=True)
class HeldRequest:
    """One request waiting for a person: ``id`` (the shell's), ``server``, ``method``,
    ``params`` (as sent), ``answer`` (set once answered)."""

    id: str
    server: str
    method: str
    params: Any
    answer: str | None = None
    answered: anyio.Event = field(default_factory=anyio.Event)


class HeldRequests:
    """The requests held now, across servers (module rules). ``on_held(request)`` and
    ``on_expired(request)`` are called as they happen; they must not block."""

    def __init__(
        self,
        on_held: Callable[[HeldRequest], None] | None = None,
        on_expired: Callable[[HeldRequest], None] | None = None,
    ) -> None:
        self.on_held = on_held
        self.on_expired = on_expired
        self._held: dict[str, HeldRequest] = {}
        self._ids = itertools.count(1)

    def __len__(self) -> int:
        return len(self._held)

    def list(self) -> list[HeldRequest]:
        """The held requests, oldest first."""
        return list(self._held.values())

    def answer(self, request_id: str, text: str) -> bool:
        """Answer the held request ``request_id`` with ``text``; False if none is held."""
        held = self._held.pop(request_id, None)
        if held is None:
            return False
        held.answer = text
        held.answered.set()
        return True

    async def hold(self, server: str, method: str, params: object, timeout: float) -> str:
        """Hold one request until it is answered (returns the text); raises ``HandlerError``
        (``-32603``) after ``timeout`` seconds. Cancellation: the request is dropped."""
        held = HeldRequest(str(next(self._ids)), server, method, params)
        self._held[held.id] = held
        try:
            if self.on_held is not None:
                self.on_held(held)
            with anyio.move_on_after(timeout):
                await held.answered.wait()
        finally:
            self._held.pop(held.id, None)
        if held.answer is None:
            if self.on_expired is not None:
                self.on_expired(held)
            raise HandlerError(
                ErrorCode.INTERNAL_ERROR, f"Internal error: not answered by hand within {timeout:g} seconds"
            )
        return held.answer


class ShellHandlers(HostHandlers):
    """One server's handlers in the shell: ``inference/request`` and
    ``sampling/createMessage`` are answered with ``auto_answer`` when given, else held in
    ``held`` for up to ``timeout`` seconds, as every ``elicitation/create`` is unless
    ``auto_elicit`` answers it; ``roots`` (a ``RootsProvider``) serves ``roots/list`` when
    given."""

    def __init__(
        self,
        server: str,
        held: HeldRequests,
        *,
        auto_answer: str | None = None,
        timeout: float = DEFAULT_HELD_REQUEST_TIMEOUT_SECONDS,
        roots: RootsProvider | None = None,
        auto_elicit: str | None = None,
    ) -> None:
        super().__init__(roots=roots, sampling=_HeldSampling(self), elicitation=_HeldElicitation(self))
        self.server = server
        self.held = held
        self.auto_answer = auto_answer
        #: Answers every elicitation at once (``probe_features.elicitation_reply``); None: held.
        self.auto_elicit = auto_elicit
        self.timeout = timeout

    async def answer(self, context: RequestContext, params: object, *, automatic: bool = True) -> str:
        """The text that answers one request: ``auto_answer`` (when ``automatic``), else what
        a person typed (``HeldRequests.hold``)."""
        if automatic and self.auto_answer is not None:
            return self.auto_answer
        return await self.held.hold(self.server, context.method, params, self.timeout)

    async def inference_request(
        self, context: RequestContext, params: Mapping[str, object], stream: InferenceStream | None
    ) -> JSONObject:
        text = await self.answer(context, params)
        if stream is not None:
            stream.send(text)
        return inference_answer(text)


class _HeldSampling:
    """``sampling/createMessage`` answered as the shell answers (a ``SamplingHandler``)."""

    supports_tools = False

    def __init__(self, handlers: ShellHandlers) -> None:
        self._handlers = handlers

    async def create_message(self, context: RequestContext, request: SamplingRequest) -> SamplingResult:
        return SamplingResult.text(await self._handlers.answer(context, request.raw), ANSWER_MODEL)


class _HeldElicitation:
    """``elicitation/create``, both modes, held for a person (an ``ElicitationHandler``)."""

    modes: tuple[ElicitationMode, ...] = ("form", "url")

    def __init__(self, handlers: ShellHandlers) -> None:
        self._handlers = handlers

    async def elicit(self, context: RequestContext, request: ElicitationRequest) -> ElicitationResult:
        automatic = self._handlers.auto_elicit
        text = (
            automatic
            if automatic is not None
            else await self._handlers.answer(context, request.raw, automatic=False)
        )
        try:
            return elicitation_reply(text, request.mode, request.requested_schema)
        except ValueError as exc:  # the shell checks an answer before it is taken
            raise HandlerError(ErrorCode.INTERNAL_ERROR, f"Internal error: {exc}") from None
