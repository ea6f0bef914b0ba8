"""One inference turn across servers: beforeInference fan-out, lifecycle, outgoing streams.

Rules (MCPL §10.1-§10.8, §13.3, §14.3; PROTOCOL.md §3.5, §4.5, §5.2-§5.3; checklist F 67-81,
I 99-101):

- **Reading injections** (``read_injections``, pure): each element of ``contextInjections`` is
  judged on its own. Not an object, ``position`` missing or outside
  ``system|beforeUser|afterUser``, ``namespace`` not a non-empty string, or ``content`` neither
  a string nor an array of content blocks (objects with a string ``type``; a ``text`` block
  needs a string ``text``) -> dropped, reason ``invalid`` (F71). A position whose
  ``contextHooks.beforeInference.inject.<position>`` is not in the grant given -> dropped,
  reason ``not_granted`` (F70). A string ``content`` becomes one text block (F72). The
  response's ``featureSet`` is kept as testimony only. ``contextInjections`` absent or null
  means none; a result that is not an object, or an array that is not an array, is a failure.
- **Fan-out** (``before_inference_fanout``): every eligible connection (``MCPLHostCalls.
  before_inference_eligible``) is called concurrently, each under its own timeout, failing
  open. **Order within a position** (§10.8, the host's choice): the order of ``connections``
  as given, then the order inside each response.
- **Lifecycle** (``inference_lifecycle``, §10.5): ``started`` goes to every MCPL-ready
  connection granted ``inferenceLifecycle``; each of them gets exactly one terminal on exit:
  ``completed`` (with ``usage`` if set), ``aborted`` (cancellation, ``KeyboardInterrupt``, or
  ``abort()`` called), ``failed`` (any other exception). Never a second terminal, never one
  without a ``started``. ``model`` only where ``modelInfo`` is granted; no content field
  exists in the params. **Decision:** the gate is checked again for the terminal; a
  connection whose grant lost ``inferenceLifecycle`` in the meantime, or that has closed or
  reconnected (another transport epoch), gets no terminal (D49 wins; best-effort, §10.5).
- **Outgoing streams** (``OutgoingStream``, §14.3): a chunk goes only to the connection that
  registered the channel (the first in the given order that lists it) when it is MCPL-ready
  and granted ``channels.streaming``; otherwise it is withheld. ``index`` is one counter per
  inference across all channels, counting chunks actually sent (0, 1, ...). ``complete`` goes
  once per (inference, channel) to each connection that received chunks of that channel, on
  every exit path, carrying the whole text given for the channel (every delta, sent or
  withheld) as one text block. Moderation and routing are the caller's: pass only text the
  delivery path would publish (I102).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import anyio

from mcpl_host.jsonrpc.errors import LocalProtocolError, MCPLHostError
from mcpl_host.logging import ServerValue, get_logger
from mcpl_host.mcpl.grants import Grant

if TYPE_CHECKING:
    from mcpl_host.mcpl.host_calls import MCPLHostCalls

__all__ = [
    "DEFAULT_HOOK_TIMEOUT_SECONDS",
    "INJECT",
    "OBSERVE",
    "POSITIONS",
    "BeforeInferenceResult",
    "DroppedInjection",
    "FanoutResult",
    "HookReading",
    "InferenceLifecycle",
    "Injection",
    "OutgoingStream",
    "before_inference_fanout",
    "inference_lifecycle",
    "read_injections",
]

#: MCPL §10.6: the recommended beforeInference timeout, in seconds.
DEFAULT_HOOK_TIMEOUT_SECONDS = 5.0
Position = Literal["system", "beforeUser", "afterUser"]
#: MCPL §10.4: where an injection goes.
POSITIONS: tuple[Position, ...] = ("system", "beforeUser", "afterUser")
OBSERVE = "contextHooks.beforeInference.observe"
#: The grant leaf each position needs (§5.4, §10.8).
INJECT: dict[str, str] = {p: f"contextHooks.beforeInference.inject.{p}" for p in POSITIONS}
LIFECYCLE = "inferenceLifecycle"
MODEL_INFO = "modelInfo"
STREAMING = "channels.streaming"


@dataclass(frozen=True, slots=True)
class Injection:
    """An authorized injection: ``server`` (connection name), ``namespace``, ``position``,
    ``content`` (content blocks), ``metadata`` (object or None), ``index`` in its response."""

    server: str
    namespace: str
    position: Position
    content: tuple[Any, ...]
    metadata: dict[str, Any] | None = None
    index: int = 0


@dataclass(frozen=True, slots=True)
class DroppedInjection:
    """An injection not kept: ``reason`` ``invalid`` or ``not_granted``, ``detail`` a sentence,
    ``position`` as sent (any JSON value)."""

    index: int
    reason: Literal["invalid", "not_granted"]
    detail: str
    position: Any = None


@dataclass(frozen=True, slots=True)
class HookReading:
    """What ``read_injections`` found; ``problem`` set when the whole answer is unusable."""

    injections: tuple[Injection, ...] = ()
    dropped: tuple[DroppedInjection, ...] = ()
    feature_set: Any = None
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class BeforeInferenceResult:
    """One server's part of a beforeInference (§10.2). ``outcome``: ``ok``, or ``timeout`` /
    ``failure`` (fail-open: no injections, ``error`` says why). ``feature_set``: the claimed
    ``featureSet`` as sent, testimony only (§6.5)."""

    server: str
    outcome: Literal["ok", "timeout", "failure"]
    injections: tuple[Injection, ...] = ()
    dropped: tuple[DroppedInjection, ...] = ()
    feature_set: Any = None
    error: str | None = None


def _content_problem(content: Any) -> str | None:
    if isinstance(content, str):
        return None
    if not isinstance(content, list):
        return "content is neither a string nor an array"
    for block in content:
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            return "a content block is not an object with a string type"
        if block["type"] == "text" and not isinstance(block.get("text"), str):
            return "a text block has no string text"
    return None


def read_injections(result: Any, grant: Grant, server: str = "") -> HookReading:
    """Judge a ``context/beforeInference`` result against ``grant`` (the grant in force at
    receipt), element by element (module docstring). Pure; never raises on any JSON value."""
    if not isinstance(result, dict):
        return HookReading(problem="the result is not an object")
    items = result.get("contextInjections")
    if items is None:
        items = []
    if not isinstance(items, list):
        return HookReading(feature_set=result.get("featureSet"), problem="contextInjections is not an array")
    kept: list[Injection] = []
    dropped: list[DroppedInjection] = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            dropped.append(DroppedInjection(index, "invalid", "not an object"))
            continue
        position = item.get("position")
        if position not in POSITIONS:
            dropped.append(DroppedInjection(index, "invalid", "position missing or unknown", position))
            continue
        if not grant.allows(INJECT[position]):
            dropped.append(
                DroppedInjection(index, "not_granted", f"{INJECT[position]} is not granted", position)
            )
            continue
        namespace, content = item.get("namespace"), item.get("content")
        problem = (
            "namespace missing or not a string"
            if not isinstance(namespace, str) or not namespace
            else _content_problem(content)
        )
        if problem is not None:
            dropped.append(DroppedInjection(index, "invalid", problem, position))
            continue
        blocks = ({"type": "text", "text": content},) if isinstance(content, str) else tuple(content)
        metadata = item.get("metadata")
        kept.append(
            Injection(
                server, namespace, position, blocks, metadata if isinstance(metadata, dict) else None, index
            )
        )
    return HookReading(tuple(kept), tuple(dropped), result.get("featureSet"))


# --- fan-out ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FanoutResult:
    """``results``: one per connection called, in the order given. ``by_position``: every
    position (all three keys), its injections by connection order then response order."""

    results: tuple[BeforeInferenceResult, ...]
    by_position: Mapping[str, tuple[Injection, ...]] = field(default_factory=dict)

    def injections(self, position: Position) -> tuple[Injection, ...]:
        return tuple(self.by_position.get(position, ()))


async def before_inference_fanout(
    connections: Iterable[MCPLHostCalls],
    *,
    inference_id: str,
    conversation_id: str,
    turn_index: int,
    user_message: str | None,
    model: Mapping[str, Any],
    channels: Mapping[str, Any] | None = None,
    timeout: float | None = DEFAULT_HOOK_TIMEOUT_SECONDS,
) -> FanoutResult:
    """``context/beforeInference`` to every eligible connection at once (MCPL §10.1, §10.6,
    §10.8; F67, F73-75), each with its own ``timeout`` (seconds). Arguments as
    ``MCPLHostCalls.before_inference``; a connection listed twice is called once. Never raises
    for a server's failure: each fails open.

    Cancellation: every pending hook request is abandoned (each server gets
    ``notifications/cancelled``) and the cancellation propagates.
    """
    eligible = [conn for conn in dict.fromkeys(connections) if conn.before_inference_eligible]
    answers: list[BeforeInferenceResult | None] = [None] * len(eligible)

    async def call(slot: int, conn: MCPLHostCalls) -> None:
        try:
            answers[slot] = await conn.before_inference(
                inference_id=inference_id,
                conversation_id=conversation_id,
                turn_index=turn_index,
                user_message=user_message,
                model=model,
                channels=channels,
                timeout=timeout,
            )
        except Exception as exc:  # fail-open even for a bug: one server never blocks the turn
            get_logger("mcpl_host.fanout").exception("context/beforeInference call failed", server=conn.name)
            answers[slot] = BeforeInferenceResult(conn.name, "failure", error=type(exc).__name__)

    async with anyio.create_task_group() as tg:
        for slot, conn in enumerate(eligible):
            tg.start_soon(call, slot, conn)
    results = tuple(answer for answer in answers if answer is not None)
    grouped = {p: tuple(i for r in results for i in r.injections if i.position == p) for p in POSITIONS}
    return FanoutResult(results, grouped)


# --- inference/lifecycle ---------------------------------------------------------------------


def _granted(conn: MCPLHostCalls, path: str) -> bool:
    grant = conn._grant_now()
    return grant is not None and grant.allows(path)


async def _notify(conn: MCPLHostCalls, method: str, params: dict[str, Any]) -> bool:
    """Best-effort notification: False (and a debug line) when it cannot be written."""
    try:
        await conn.notify(method, params)
    except MCPLHostError as exc:
        conn._log.debug("notification not sent", method=method, error=ServerValue(str(exc)))
        return False
    return True


def _is_cancellation(exc: BaseException | None) -> bool:
    if isinstance(exc, (anyio.get_cancelled_exc_class(), KeyboardInterrupt)):
        return True
    inner = getattr(exc, "exceptions", None)  # an exception group of cancellations only
    return isinstance(inner, tuple) and bool(inner) and all(_is_cancellation(e) for e in inner)


class InferenceLifecycle:
    """The ``inference/lifecycle`` pairing of one inference (MCPL §10.5; F77-80). Use
    ``async with inference_lifecycle(...) as turn``; ``turn.set_usage()`` before leaving adds
    ``usage`` to ``completed``; ``turn.abort()`` makes a normal exit ``aborted``.
    ``recipients``: names of the connections that got ``started``. Single use.

    Cancellation: the terminal is sent shielded (notifications do not wait for the server);
    the body's exception, cancellation included, always propagates.
    """

    def __init__(
        self,
        connections: Iterable[MCPLHostCalls],
        *,
        inference_id: str,
        conversation_id: str,
        turn_index: int,
        model: Mapping[str, Any] | None = None,
    ) -> None:
        self._connections = list(dict.fromkeys(connections))
        self._base = {"inferenceId": inference_id, "conversationId": conversation_id, "turnIndex": turn_index}
        self._model = dict(model) if model is not None else None
        self._started: list[tuple[MCPLHostCalls, int | None]] = []
        self._state: Literal["new", "started", "ended"] = "new"
        self._aborted = False
        self.usage: dict[str, int] | None = None

    @property
    def recipients(self) -> tuple[str, ...]:
        return tuple(conn.name for conn, _epoch in self._started)

    def set_usage(self, input_tokens: int, output_tokens: int) -> None:
        """Token counts for the ``completed`` terminal (§10.5 ``usage``)."""
        self.usage = {"inputTokens": int(input_tokens), "outputTokens": int(output_tokens)}

    def abort(self) -> None:
        """The user aborted: a normal exit sends ``aborted``, not ``completed``."""
        self._aborted = True

    def _params(self, conn: MCPLHostCalls, phase: str) -> dict[str, Any]:
        params: dict[str, Any] = {**self._base, "phase": phase}
        if self._model is not None and _granted(conn, MODEL_INFO):
            params["model"] = self._model
        if phase == "completed" and self.usage is not None:
            params["usage"] = self.usage
        return params

    async def __aenter__(self) -> InferenceLifecycle:
        if self._state != "new":
            raise LocalProtocolError("an InferenceLifecycle is entered only once")
        self._state = "started"
        try:
            for conn in self._connections:
                if _granted(conn, LIFECYCLE) and await _notify(
                    conn, "inference/lifecycle", self._params(conn, "started")
                ):
                    self._started.append((conn, conn._transport_epoch()))
        except BaseException as exc:  # interrupted midway: close what was started
            await self.__aexit__(type(exc), exc, None)
            raise
        return self

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if self._state != "started":
            return
        self._state = "ended"
        if exc is None:
            phase = "aborted" if self._aborted else "completed"
        else:
            phase = "aborted" if _is_cancellation(exc) else "failed"
        with anyio.CancelScope(shield=True):
            for conn, epoch in self._started:
                if not _granted(conn, LIFECYCLE) or conn._transport_epoch() != epoch:
                    conn._log.info(
                        "inference/lifecycle terminal not sent: the grant or the transport changed",
                        inference_id=self._base["inferenceId"],
                        phase=phase,
                    )
                    continue
                await _notify(conn, "inference/lifecycle", self._params(conn, phase))


def inference_lifecycle(
    connections: Iterable[MCPLHostCalls],
    *,
    inference_id: str,
    conversation_id: str,
    turn_index: int,
    model: Mapping[str, Any] | None = None,
) -> InferenceLifecycle:
    """``async with inference_lifecycle(conns, inference_id=..., conversation_id=...,
    turn_index=..., model=...) as turn:`` sends ``started`` on entry and exactly one terminal
    on exit (``InferenceLifecycle``; MCPL §10.5)."""
    return InferenceLifecycle(
        connections,
        inference_id=inference_id,
        conversation_id=conversation_id,
        turn_index=turn_index,
        model=model,
    )


# --- channels/outgoing/* ---------------------------------------------------------------------

#: The channel ids a connection registered: a collection, or a callable returning one
#: (called at each chunk, so a live registry is read as it stands then).
Registered = Collection[str] | Callable[[], Collection[str]]


class OutgoingStream:
    """``channels/outgoing/chunk`` and ``/complete`` for one inference (MCPL §14.3; I99-101).

    Args:
        routes: ``{connection: registered}`` or ``(connection, registered)`` pairs, where
            ``registered`` is the channel ids that connection registered (``Registered``).
        inference_id, conversation_id: sent on every notification.

    Use ``async with OutgoingStream(...) as out``: ``await out.chunk(channel_id, delta)``;
    leaving (normally, by exception or cancellation) completes every channel that received
    chunks and is not completed yet. ``await out.complete(channel_id)`` completes one early.

    Cancellation: ``complete`` notifications on exit are sent shielded; they never wait for
    the server.
    """

    def __init__(
        self,
        routes: Mapping[Any, Registered] | Iterable[tuple[Any, Registered]],
        *,
        inference_id: str,
        conversation_id: str,
    ) -> None:
        pairs = routes.items() if isinstance(routes, Mapping) else routes
        self._routes: list[tuple[MCPLHostCalls, Registered]] = list(pairs)
        self._base = {"inferenceId": inference_id, "conversationId": conversation_id}
        self._next_index = 0
        self._text: dict[str, list[str]] = {}
        self._recipients: dict[str, list[tuple[MCPLHostCalls, int | None]]] = {}
        self._completed: set[str] = set()
        self._closed = False

    def _owner(self, channel_id: str) -> MCPLHostCalls | None:
        for conn, registered in self._routes:
            ids = registered() if callable(registered) else registered
            if channel_id in ids:
                return conn
        return None

    async def chunk(self, channel_id: str, delta: str) -> bool:
        """Stream ``delta`` to the channel's owner. Returns True if a chunk was sent, False
        if withheld (no owner, owner not MCPL-ready or not granted ``channels.streaming``,
        or its transport gone). Raises ``LocalProtocolError`` after ``complete(channel_id)``
        or after the stream closed, ``TypeError`` if ``delta`` is not a string."""
        if self._closed or channel_id in self._completed:
            raise LocalProtocolError(f"the outgoing stream of {channel_id!r} is complete")
        if not isinstance(delta, str):
            raise TypeError("delta must be a string")
        self._text.setdefault(channel_id, []).append(delta)
        owner = self._owner(channel_id)
        if owner is None or not _granted(owner, STREAMING):
            return False
        params = {**self._base, "channelId": channel_id, "index": self._next_index, "delta": delta}
        if not await _notify(owner, "channels/outgoing/chunk", params):
            return False
        self._next_index += 1
        recipients = self._recipients.setdefault(channel_id, [])
        if all(conn is not owner for conn, _epoch in recipients):
            recipients.append((owner, owner._transport_epoch()))
        return True

    async def complete(self, channel_id: str, content: str | list[Any] | None = None) -> None:
        """Send ``complete`` for ``channel_id`` to each connection that received its chunks
        (once; later calls do nothing). ``content``: the final moderated text or blocks;
        default: the channel's deltas joined, as one text block."""
        if channel_id in self._completed:
            return
        self._completed.add(channel_id)
        if content is None:
            content = "".join(self._text.get(channel_id, []))
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
        with anyio.CancelScope(shield=True):
            for conn, epoch in self._recipients.get(channel_id, []):
                if not _granted(conn, STREAMING) or conn._transport_epoch() != epoch:
                    conn._log.info(
                        "channels/outgoing/complete not sent: the grant or the transport changed",
                        inference_id=self._base["inferenceId"],
                    )
                    continue
                await _notify(
                    conn,
                    "channels/outgoing/complete",
                    {**self._base, "channelId": channel_id, "content": blocks},
                )

    async def aclose(self) -> None:
        """Complete every channel that received chunks; later chunks raise. Idempotent."""
        self._closed = True
        for channel_id in list(self._recipients):
            await self.complete(channel_id)

    async def __aenter__(self) -> OutgoingStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        with anyio.CancelScope(shield=True):
            await self.aclose()
