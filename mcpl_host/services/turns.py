"""One inference turn across servers: beforeInference fan-out, lifecycle, outgoing streams
(MCPL §10.1-§10.8, §13.3, §14.3).

Rules:

- **Fan-out** (``before_inference_fanout``): every eligible server (``HookCalls.eligible`` of
  each peer's ``hooks``) is called concurrently, each under its own timeout, failing
  open. **Order within a position** (§10.8, the host's choice): the order of ``peers`` as
  given, then the order inside each response.
- **Lifecycle** (``inference_lifecycle``, §10.5): ``started`` goes to every MCPL-ready peer
  granted ``inferenceLifecycle``; each of them gets exactly one terminal on exit:
  ``completed`` (with ``usage`` if set), ``aborted`` (cancellation, ``KeyboardInterrupt``, or
  ``abort()`` called), ``failed`` (any other exception). Never a second terminal, never one
  without a ``started``. ``model`` only where ``modelInfo`` is granted; no content field
  exists in the params. The gate is checked again for the terminal; a peer whose grant lost
  ``inferenceLifecycle`` in the meantime, or whose transport has ended (a restarted server is
  a new connection), gets no terminal (nothing ungranted goes out; best-effort, §10.5).
- **Outgoing streams** (``OutgoingStream``, §14.3): a chunk goes only to the peer that
  registered the channel (the first in the given order that lists it) when it is MCPL-ready
  and granted ``channels.streaming``; otherwise it is withheld. ``index`` is one counter per
  inference across all channels, counting chunks actually sent (0, 1, ...). ``complete`` goes
  once per (inference, channel) to each peer that received chunks of that channel, on every
  exit path, carrying the whole text given for the channel (every delta, sent or withheld)
  as one text block. Moderation and routing are the caller's: pass only text the delivery
  path would publish. **Thread target** (RFC-011 §6): a channel's stream has one place, fixed
  by its first chunk's ``thread_id`` (``ABSENT`` by default: no ``threadId``); every chunk and
  the ``complete`` carry it, and a later chunk naming another place raises. A stream with a
  thread target is withheld from an owner whose descriptor declares no
  ``capabilities.publish.target`` (the final publish could not carry it either, RFC-011 §4).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import anyio
from typing_extensions import Unpack

from mcpl_host._keywords import checked_keywords
from mcpl_host.jsonrpc.errors import LocalProtocolError, MCPLHostError
from mcpl_host.jsonrpc.values import JSONObject, is_mapping
from mcpl_host.logging import ServerValue, get_logger
from mcpl_host.mcpl.admission import may_send
from mcpl_host.mcpl.injections import (
    POSITIONS,
    BeforeInferenceResult,
    Injection,
    Position,
)
from mcpl_host.mcpl.publish_target import ABSENT, Absent, ThreadTarget, thread_target_problem
from mcpl_host.services.hooks import BeforeInferenceArgs

if TYPE_CHECKING:
    from mcpl_host.mcp_methods import MCPClient
    from mcpl_host.services.channel_calls import ChannelCalls
    from mcpl_host.services.hooks import HookCalls
    from mcpl_host.services.negotiation import PolicyExchange

__all__ = [
    "FanoutResult",
    "InferenceLifecycle",
    "MCPLPeer",
    "OutgoingStream",
    "Registered",
    "before_inference_fanout",
    "inference_lifecycle",
]


class MCPLPeer(Protocol):
    """What a turn needs of one server's connection (``ServerConnection`` is one): its
    ``hooks`` (``context/beforeInference``), its ``policy`` (what may be sent now, MCPL §5.4)
    and its ``mcp`` (the notifications)."""

    @property
    def name(self) -> str: ...

    @property
    def is_open(self) -> bool: ...

    @property
    def hooks(self) -> HookCalls: ...

    @property
    def policy(self) -> PolicyExchange: ...

    @property
    def mcp(self) -> MCPClient: ...

    @property
    def channels(self) -> ChannelCalls: ...


def _may_send(conn: MCPLPeer, method: str) -> bool:
    """Whether the host may send the MCPL method ``method`` to ``conn`` now (MCPL §5.4)."""
    return may_send(method, conn.policy.state) is None


def _may_send_model(conn: MCPLPeer) -> bool:
    """Whether ``modelInfo`` is granted (a ``model`` may go in lifecycle params, §10.5)."""
    grant = conn.policy.state.grant
    return grant is not None and grant.allows("modelInfo")


_log = get_logger("mcpl_host.turns")


# --- fan-out ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FanoutResult:
    """``results``: one per connection called, in the order given. ``by_position``: every
    position (all three keys), its injections by connection order then response order."""

    results: tuple[BeforeInferenceResult, ...]
    by_position: Mapping[str, tuple[Injection, ...]] = field(default_factory=dict[str, tuple[Injection, ...]])

    def injections(self, position: Position) -> tuple[Injection, ...]:
        return tuple(self.by_position.get(position, ()))


async def before_inference_fanout(
    peers: Iterable[MCPLPeer], **args: Unpack[BeforeInferenceArgs]
) -> FanoutResult:
    """``context/beforeInference`` to every eligible peer at once (MCPL §10.1, §10.6, §10.8),
    each with its own ``timeout`` (seconds; by default each server's
    ``Limits.hook_timeout_seconds``). Arguments as ``BeforeInferenceArgs``;
    a peer listed twice is called once. Never raises for a server's failure: each fails open.

    Cancellation: every pending hook request is abandoned (each server gets
    ``notifications/cancelled``) and the cancellation propagates.
    """
    checked_keywords(BeforeInferenceArgs, args, "before_inference")
    eligible = [peer for peer in dict.fromkeys(peers) if peer.hooks.eligible]
    answers: list[BeforeInferenceResult | None] = [None] * len(eligible)

    async def call(slot: int, conn: MCPLPeer) -> None:
        try:
            answers[slot] = await conn.hooks.before_inference(**args)
        except Exception as exc:  # fail-open even for a bug: one server never blocks the turn
            _log.exception("context/beforeInference call failed", server=conn.name)
            answers[slot] = BeforeInferenceResult(conn.name, "failure", error=type(exc).__name__)

    async with anyio.create_task_group() as tg:
        for slot, conn in enumerate(eligible):
            tg.start_soon(call, slot, conn)
    results = tuple(answer for answer in answers if answer is not None)
    grouped: dict[str, tuple[Injection, ...]] = {
        p: tuple(i for r in results for i in r.injections if i.position == p) for p in POSITIONS
    }
    return FanoutResult(results, grouped)


# --- inference/lifecycle ---------------------------------------------------------------------


def _notify(conn: MCPLPeer, method: str, params: Mapping[str, object]) -> bool:
    """Best-effort notification: False (and a debug line) when it cannot be written."""
    try:
        conn.mcp.notify_nowait(method, params)
    except MCPLHostError as exc:
        _log.debug("notification not sent", server=conn.name, method=method, error=ServerValue(str(exc)))
        return False
    return True


def _is_cancellation(exc: BaseException | None) -> bool:
    if isinstance(exc, (anyio.get_cancelled_exc_class(), KeyboardInterrupt)):
        return True
    # An exception group of cancellations only:
    inner: tuple[BaseException, ...] | None = getattr(exc, "exceptions", None)
    return isinstance(inner, tuple) and bool(inner) and all(_is_cancellation(e) for e in inner)


class InferenceLifecycle:
    """The ``inference/lifecycle`` pairing of one inference (MCPL §10.5; docs/protocol.md,
    "Inference lifecycle"). Use ``async with inference_lifecycle(...) as turn``;
    ``turn.set_usage()`` before leaving adds ``usage`` to ``completed``; ``turn.abort()`` makes
    a normal exit ``aborted``. ``recipients``: names of the connections that got ``started``.
    Single use.

    Cancellation: the terminal is queued without waiting, so it goes out under cancellation too;
    the body's exception, cancellation included, always propagates.
    """

    def __init__(
        self,
        connections: Iterable[MCPLPeer],
        *,
        inference_id: str,
        conversation_id: str,
        turn_index: int,
        model: Mapping[str, Any] | None = None,
    ) -> None:
        self._connections = list(dict.fromkeys(connections))
        self._base = {"inferenceId": inference_id, "conversationId": conversation_id, "turnIndex": turn_index}
        self._model = dict(model) if model is not None else None
        self._started: list[MCPLPeer] = []
        self._state: Literal["new", "started", "ended"] = "new"
        self._aborted = False
        self.usage: dict[str, int] | None = None

    @property
    def recipients(self) -> tuple[str, ...]:
        return tuple(conn.name for conn in self._started)

    def set_usage(self, input_tokens: int, output_tokens: int) -> None:
        """Token counts for the ``completed`` terminal (§10.5 ``usage``)."""
        self.usage = {"inputTokens": int(input_tokens), "outputTokens": int(output_tokens)}

    def abort(self) -> None:
        """The user aborted: a normal exit sends ``aborted``, not ``completed``."""
        self._aborted = True

    def _params(self, conn: MCPLPeer, phase: str) -> JSONObject:
        params: dict[str, Any] = {**self._base, "phase": phase}
        if self._model is not None and _may_send_model(conn):
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
                if _may_send(conn, "inference/lifecycle") and _notify(
                    conn, "inference/lifecycle", self._params(conn, "started")
                ):
                    self._started.append(conn)
        except BaseException as exc:  # interrupted midway: close what was started
            await self.__aexit__(type(exc), exc, None)
            raise
        return self

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if self._state != "started":
            return
        self._state = "ended"
        if exc is None:
            phase = "aborted" if self._aborted else "completed"
        else:
            phase = "aborted" if _is_cancellation(exc) else "failed"
        for conn in self._started:
            if not conn.is_open or not _may_send(conn, "inference/lifecycle"):
                _log.info(
                    "inference/lifecycle terminal not sent: the grant or the transport changed",
                    server=conn.name,
                    inference_id=self._base["inferenceId"],
                    phase=phase,
                )
                continue
            _notify(conn, "inference/lifecycle", self._params(conn, phase))


def inference_lifecycle(
    connections: Iterable[MCPLPeer],
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
    """``channels/outgoing/chunk`` and ``/complete`` for one inference (MCPL §14.3).

    Args:
        routes: ``{connection: registered}`` or ``(connection, registered)`` pairs, where
            ``registered`` is the channel ids that connection registered (``Registered``).
        inference_id, conversation_id: sent on every notification.

    Use ``async with OutgoingStream(...) as out``: ``await out.chunk(channel_id, delta)``;
    leaving (normally, by exception or cancellation) completes every channel that received
    chunks and is not completed yet. ``await out.complete(channel_id)`` completes one early.

    Cancellation: ``complete`` notifications on exit are queued without waiting; they never wait for
    the server.
    """

    def __init__(
        self,
        routes: Mapping[Any, Registered] | Iterable[tuple[Any, Registered]],
        *,
        inference_id: str,
        conversation_id: str,
    ) -> None:
        pairs = routes.items() if is_mapping(routes) else routes
        self._routes: list[tuple[MCPLPeer, Registered]] = list(pairs)
        self._base = {"inferenceId": inference_id, "conversationId": conversation_id}
        self._next_index = 0
        self._text: dict[str, list[str]] = {}
        self._recipients: dict[str, list[MCPLPeer]] = {}
        self._completed: set[str] = set()
        self._threads: dict[str, ThreadTarget] = {}
        self._closed = False

    def _owner(self, channel_id: str) -> MCPLPeer | None:
        for conn, registered in self._routes:
            ids = registered() if callable(registered) else registered
            if channel_id in ids:
                return conn
        return None

    async def chunk(self, channel_id: str, delta: object, *, thread_id: ThreadTarget = ABSENT) -> bool:
        """Stream ``delta`` to the channel's owner. ``thread_id``: the place the final publish
        will name (RFC-011 §6; module rules). Returns True if a chunk was sent, False if
        withheld (no owner, owner not MCPL-ready or not granted ``channels.streaming``, its
        transport gone, or a thread target on a channel declaring none). Raises
        ``LocalProtocolError`` after ``complete(channel_id)`` or after the stream closed, or
        for a ``thread_id`` out of RFC-011 §4's domain or other than the stream's;
        ``TypeError`` if ``delta`` is not a string."""
        if self._closed or channel_id in self._completed:
            raise LocalProtocolError(f"the outgoing stream of {channel_id!r} is complete")
        if not isinstance(delta, str):
            raise TypeError("delta must be a string")
        problem = thread_target_problem(thread_id)
        if problem is not None:
            raise LocalProtocolError(problem)
        place = self._threads.setdefault(channel_id, thread_id)
        if place != thread_id:
            raise LocalProtocolError(f"the outgoing stream of {channel_id!r} has another thread target")
        self._text.setdefault(channel_id, []).append(delta)
        owner = self._owner(channel_id)
        if owner is None or not _may_send(owner, "channels/outgoing/chunk"):
            return False
        if not isinstance(thread_id, Absent) and owner.channels.publish_target(channel_id) is None:
            return False
        params: dict[str, object] = {
            **self._base,
            "channelId": channel_id,
            "index": self._next_index,
            "delta": delta,
        }
        if not isinstance(thread_id, Absent):
            params["threadId"] = thread_id
        if not _notify(owner, "channels/outgoing/chunk", params):
            return False
        self._next_index += 1
        recipients = self._recipients.setdefault(channel_id, [])
        if all(conn is not owner for conn in recipients):
            recipients.append(owner)
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
        for conn in self._recipients.get(channel_id, []):
            if not conn.is_open or not _may_send(conn, "channels/outgoing/complete"):
                _log.info(
                    "channels/outgoing/complete not sent: the grant or the transport changed",
                    server=conn.name,
                    inference_id=self._base["inferenceId"],
                )
                continue
            params: dict[str, Any] = {**self._base, "channelId": channel_id, "content": blocks}
            place = self._threads.get(channel_id, ABSENT)
            if not isinstance(place, Absent):
                params["threadId"] = place
            _notify(conn, "channels/outgoing/complete", params)

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
