"""Server requests that wait for a person: the shell's ``HostHandlers`` hold each
``inference/request`` until it is answered by hand (``answer ID TEXT``), or answer it at once
with ``--auto-answer TEXT``.

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
- Handlers are per server; the held list is the shell's, across servers. The other server
  requests keep the library's defaults (push events accepted, others ``-32601``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import anyio

from mcpl_host.handlers import HostHandlers, InferenceStream, RequestContext
from mcpl_host.jsonrpc.errors import ErrorCode, HandlerError
from mcpl_host.limits import DEFAULT_HELD_REQUEST_TIMEOUT_SECONDS

__all__ = ["ANSWER_MODEL", "HeldRequest", "HeldRequests", "ShellHandlers", "inference_answer", "question"]

#: The ``model`` of an answer typed by a person.
ANSWER_MODEL = "mcpl-host-shell (answered by hand)"


def inference_answer(text: str) -> dict[str, Any]:
    """The ``inference/request`` result carrying ``text`` (MCPL §11.3)."""
    return {
        "content": text,
        "model": ANSWER_MODEL,
        "finishReason": "end_turn",
        "usage": {"inputTokens": 0, "outputTokens": 0},
    }


def question(params: Any) -> str:
    """The text of the last message of ``inference/request`` params (its content as a
    string, or the text blocks of a content list), for showing; ``""`` if none."""
    messages = _objects(_objects(params)[0].get("messages")) if _objects(params) else []
    content: Any = messages[-1].get("content") if messages else None
    if isinstance(content, str):
        return content
    return " ".join(text for block in _objects(content) if isinstance(text := block.get("text"), str))


def _objects(value: Any) -> list[dict[str, Any]]:
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

    async def hold(self, server: str, method: str, params: Any, timeout: float) -> str:
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
    """One server's handlers in the shell: ``inference/request`` is answered with
    ``auto_answer`` when given, else held in ``held`` for up to ``timeout`` seconds."""

    def __init__(
        self,
        server: str,
        held: HeldRequests,
        *,
        auto_answer: str | None = None,
        timeout: float = DEFAULT_HELD_REQUEST_TIMEOUT_SECONDS,
    ) -> None:
        super().__init__()
        self.server = server
        self.held = held
        self.auto_answer = auto_answer
        self.timeout = timeout

    async def inference_request(
        self, context: RequestContext, params: dict[str, Any], stream: InferenceStream | None
    ) -> dict[str, Any]:
        if self.auto_answer is not None:
            text = self.auto_answer
        else:
            text = await self.held.hold(self.server, context.method, params, self.timeout)
        if stream is not None:
            stream.send(text)
        return inference_answer(text)
