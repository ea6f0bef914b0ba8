"""``Supervisor``: keeps one server connected, restarting it per its ``RestartPolicy``.

Rules of this module (docs/protocol.md T1-T3):

- **The supervisor owns the server's ``HostedServer``; each transport is a new
  ``ServerConnection``.** Every attempt calls ``hosted.open_connection()`` and enters it. By
  the time the old one has ended, its pending requests have failed (``ConnectionLost``, T3)
  and the answers to requests it read are bound to its closed link, so they can never be
  written on the new transport (T1, T2). Entering the new connection runs the handshake and,
  for an MCPL server, the whole policy exchange again: nothing granted on the old transport
  is in force on the new one until its own receipt arrives (MCPL §5.4). What outlives the
  transport (the policy the application set last, held state) is the ``HostedServer``'s.
- **Decide, then act.** ``RestartTracker`` (pure, ``supervisor_policy``) decides; this shell
  only emits events, sleeps the delay it was given, and opens the next connection. That
  delay is the only sleep here besides the health-check interval.
- A start failure (``InitializeError``: the server exits at once, refuses ``initialize``, or
  does not answer in time) counts as a failure like any other, so a server that exits at
  once is a crash loop that stops, never a busy loop (the policy's delay is never near 0).
- **Health.** With ``health_interval_seconds``, a ``ping`` is sent that often; no answer
  within ``health_timeout_seconds`` is a failure: the connection is closed (stdin, grace,
  SIGTERM, grace, SIGKILL) and restarted per the policy. An error answer to ``ping`` still
  shows the server is alive.
- **Events, in this order per attempt:** ``connecting`` → ``ready`` or ``degraded`` →
  ``disconnected`` → ``reconnecting`` or ``gave_up``; a start failure goes from
  ``connecting`` straight to ``disconnected`` (``phase: "start"``). Closing the supervisor
  (``aclose()``) emits nothing: a host that closes knows it did.
- **A restart asked for** (``restart()``, e.g. by an operator) is not a failure: the
  connection in progress is closed (bounded by its graces), ``disconnected`` is emitted with
  ``reason`` ``RESTART_REASON`` and the next attempt's ``connecting`` follows at once, with
  no ``reconnecting`` and nothing recorded in the restart policy's failure count or
  backoff. Asked during a backoff delay, it ends the delay.
- **Ownership.** ``run()`` owns the connection it opened; ``aclose()`` ends ``run()`` and
  waits, shielded, until the connection is closed and its process reaped (bounded by the
  connection's grace periods). While ``run()`` only waits for the connection to end (no
  health checks), ``aclose()`` closes that connection itself and ``run()`` returns on its
  own; otherwise it cancels ``run()``. (A cancel costs anyio a formatted repr of the current
  task, and on asyncio a delivery retried at every turn of the loop until every task under
  the scope has ended: for a host closing 1,000 servers, most of the close.)
- **Emitting is awaited.** ``emit`` is awaited for every event, in order; the ``Host``'s
  sink never waits for a consumer (``mcpl_host.events`` rules), so no subscription holds a
  supervisor back.

Events (``mcpl_host.events``: ``Connecting``, ``Ready``, ``Degraded``, ``Disconnected``,
``Reconnecting``, ``GaveUp``): server text as the connection reports it, already escaped and
redacted where it comes from an exception or stderr.
"""

from __future__ import annotations

import random
import re
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import anyio
import anyio.abc

from mcpl_host._tasks import LazyEvent, close_then_leave
from mcpl_host.events import (
    EVENT_KINDS,
    Connecting,
    Degraded,
    Disconnected,
    EventKind,
    GaveUp,
    HostEvent,
    LifecycleEvent,
    Ready,
    Reconnecting,
)
from mcpl_host.hosted import HostedServer
from mcpl_host.jsonrpc.errors import (
    ConnectionClosed,
    ConnectionLost,
    LocalProtocolError,
    MCPLHostError,
    RequestTimeout,
    describe_seconds,
)
from mcpl_host.limits import DEFAULT_HEALTH_TIMEOUT_SECONDS as LIMITS_HEALTH_TIMEOUT_SECONDS
from mcpl_host.logging import get_logger
from mcpl_host.mcpl.policy_state import MCPLState
from mcpl_host.server_connection import ServerConnection
from mcpl_host.supervisor_policy import GiveUp, RestartPolicy, RestartTracker

__all__ = [
    "DEFAULT_HEALTH_TIMEOUT_SECONDS",
    "EVENT_KINDS",
    "RESTART_REASON",
    "EventKind",
    "EventSink",
    "HostEvent",
    "Supervisor",
    "SupervisorState",
]

#: Seconds a health ``ping`` waits for its answer: the default of ``Limits.health_timeout_seconds``.
DEFAULT_HEALTH_TIMEOUT_SECONDS = LIMITS_HEALTH_TIMEOUT_SECONDS

#: The ``reason`` of the ``disconnected`` event of a restart asked for (``Supervisor.restart``).
RESTART_REASON = "restart asked for"

#: Where a supervisor stands (``Supervisor.state``).
SupervisorState = Literal["new", "connecting", "ready", "degraded", "reconnecting", "gave_up", "closed"]

# "the server closed the WebSocket (code 1011, ...)": the transport's message names the code.
_CLOSE_CODE = re.compile(r"\(code (\d{4})\b")


#: Receives every event of a supervisor; awaited (module rules).
EventSink = Callable[[LifecycleEvent], Awaitable[None]]


def disconnected_event(
    server: str,
    exc: BaseException,
    *,
    attempt: int,
    phase: Literal["start", "running"],
    uptime_seconds: float | None,
    stderr_tail: list[str] | None = None,
) -> Disconnected:
    """The ``disconnected`` event of a connection ended by ``exc``: its message as
    ``reason``, its ``exit_status`` and ``close_code`` (WebSocket; else read from the
    message), its ``stderr_tail`` (else ``stderr_tail``)."""
    message = str(exc) or type(exc).__name__
    close_code = getattr(exc, "close_code", None)
    if close_code is None:
        found = _CLOSE_CODE.search(message)
        close_code = int(found.group(1)) if found else None
    return Disconnected(
        server=server,
        attempt=attempt,
        phase=phase,
        uptime_seconds=uptime_seconds,
        reason=message,
        exit_status=getattr(exc, "exit_status", None),
        close_code=close_code,
        stderr_tail=list(getattr(exc, "stderr_tail", None) or ()) or list(stderr_tail or ()),
    )


def connected_event(server: str, conn: ServerConnection, attempt: int) -> Ready | Degraded:
    """The ``ready`` event (``degraded`` for a connection in ``MCPLState.MCP_ONLY``) of a
    connection that has finished its handshake."""
    info = conn.server_info
    outcome = conn.policy.state.outcome
    choice = conn.policy.state.choice
    profile: dict[str, Any] = {}
    if choice is not None:
        profile = {
            "profile": choice.profile,
            "profile_reason": choice.reason,
            "policy_form": "notification" if conn.policy.state.settled_by == "notification" else "request",
            "grants_nothing": conn.grant is not None and not conn.grant.paths,
        }
    common: dict[str, Any] = {
        "server": server,
        "attempt": attempt,
        "server_name": info.name if info else "",
        "server_version": info.version if info else "",
        "protocol_version": info.protocol_version if info else "",
        "mcpl": conn.mcpl_state.value,
        "effective_capabilities": sorted(conn.grant.paths) if conn.grant is not None else [],
        "mode": outcome.mode if outcome is not None and outcome.accepted else None,
        **profile,
    }
    if conn.mcpl_state is not MCPLState.MCP_ONLY:
        return Ready(**common)
    if outcome is not None and not outcome.accepted:
        why = f"the server refused the host's policy (fallback {outcome.fallback or 'none'})"
        reason = why + (f": {outcome.reason}" if outcome.reason else "")
    else:
        reason = conn.policy.state.off_reason or "the policy request failed"
    return Degraded(**common, reason=reason)


class Supervisor:
    """Keeps ``hosted`` connected: ``hosted.open_connection()`` builds a new, unopened
    ``ServerConnection`` for each attempt; ``restart`` decides whether and when to try again;
    ``emit`` is awaited with every ``HostEvent`` (module rules).

    ``health_interval_seconds``: seconds between health pings (None: no pings);
    ``health_timeout_seconds``: how long each waits (None: the server's
    ``Limits.health_timeout_seconds``). ``clock`` (monotonic seconds, default
    ``anyio.current_time``) and ``rng`` (jitter, a float in [0, 1)) are injectable.

    Run it with ``await tg.start(supervisor.run)`` (or ``start_soon``), or as an async
    context manager that runs it in its own task group. ``current`` is the connection that is
    ready now, or None.
    """

    def __init__(
        self,
        hosted: HostedServer,
        restart: RestartPolicy,
        emit: EventSink,
        *,
        health_interval_seconds: float | None = None,
        health_timeout_seconds: float | None = None,
        clock: Callable[[], float] = anyio.current_time,
        rng: Callable[[], float] = random.random,
    ) -> None:
        if health_interval_seconds is not None and not health_interval_seconds > 0:
            raise ValueError("health_interval_seconds must be a positive number of seconds or None")
        if health_timeout_seconds is None:
            health_timeout_seconds = hosted.limits.health_timeout_seconds
        if not health_timeout_seconds > 0:
            raise ValueError("health_timeout_seconds must be a positive number of seconds")
        self.hosted = hosted
        self.name = name = hosted.name
        self.tracker = RestartTracker(restart, rng=rng)
        self.health_interval_seconds = health_interval_seconds
        self.health_timeout_seconds = health_timeout_seconds
        self.attempts = 0  # connection attempts made
        self._emit_event = emit
        self._changed = LazyEvent()  # waited on only by wait_changed()
        self._clock = clock
        self._state: SupervisorState = "new"
        self._current: ServerConnection | None = None
        self._watching: ServerConnection | None = None  # run() only waits for its end
        self._scope = anyio.CancelScope()
        self._stopped = anyio.Event()
        self._running = False
        self._closing = False
        self._tg: anyio.abc.TaskGroup | None = None
        self._attempt_scope: anyio.CancelScope | None = None  # the attempt restart() ends
        self._restart_asked = False
        self._wake = LazyEvent()  # ends a backoff delay early (restart()); waited only then
        self._log = get_logger("mcpl_host.supervisor", server=name)

    def __repr__(self) -> str:
        return f"<Supervisor {self.name!r} {self._state} attempts={self.attempts} {self.tracker!r}>"

    @property
    def state(self) -> SupervisorState:
        """``new``, ``connecting``, ``ready``, ``degraded``, ``reconnecting``, ``gave_up`` or
        ``closed``."""
        return self._state

    @property
    def current(self) -> ServerConnection | None:
        """The connection that has finished its handshake and not yet ended, or None."""
        conn = self._current
        return conn if conn is not None and conn.is_open else None

    # --- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> Supervisor:
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        await tg.start(self.run)
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        tg, self._tg = self._tg, None
        await close_then_leave(self.aclose, tg, *exc_info)  # run() has ended

    async def aclose(self) -> None:
        """Stop supervising: cancel ``run()`` and wait until its connection is closed (for
        stdio: stdin closed, grace, SIGTERM, grace, SIGKILL, reaped). Idempotent; bounded by
        the connection's ``close_grace_seconds`` (twice: queued output, then the process)
        plus ``terminate_grace_seconds``.

        **Cancellation:** the wait is shielded; when ``aclose()`` returns, no process is left.
        """
        self._closing = True
        watching = self._watching
        if watching is not None:
            await watching.aclose()  # shielded; run() sees the end and returns (module rules)
        else:
            self._scope.cancel()
        if self._running:
            with anyio.CancelScope(shield=True):
                await self._stopped.wait()
        elif self._state != "gave_up":
            self._set_state("closed")

    @property
    def restarting(self) -> bool:
        """Whether ``restart()`` was asked and the connection it closes has not ended yet:
        that connection is no longer the server's (``ServerHandle.current`` is None)."""
        return self._restart_asked

    def restart(self) -> bool:
        """Close the current connection (or the attempt in progress) and connect again at
        once; during a backoff delay, end the delay (module rules: not a failure). Returns
        False, doing nothing, when the supervisor is not running (new, gave up, closing or
        closed). Never blocks: the close happens in ``run()``'s task."""
        if not self._running or self._closing or self._stopped.is_set() or self._state == "gave_up":
            return False
        self._restart_asked = True
        if self._attempt_scope is not None:
            self._attempt_scope.cancel()
        self._wake.set()
        return True

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Connect, watch, and reconnect per the policy until ``aclose()`` or a ``GiveUp``.

        ``task_status.started()`` is called at once: a server that hangs on start delays
        nobody. Returns after ``gave_up`` (the process is already reaped) or after
        ``aclose()``.

        Raises:
            LocalProtocolError: ``run()`` was already called.

        **Cancellation:** the connection in progress is closed, shielded and bounded, and its
        process reaped; no event is emitted for it.
        """
        if self._running or self._stopped.is_set():
            raise LocalProtocolError(f"supervisor {self.name!r} can run only once")
        self._running = True
        try:
            task_status.started()
            with self._scope:
                await self._loop()
        finally:
            self._current = None
            if self._state != "gave_up":
                self._set_state("closed")
            self._stopped.set()

    # --- the loop ----------------------------------------------------------------------------

    def _set_state(self, state: SupervisorState) -> None:
        self._state = state
        self._changed.set()
        self._changed = LazyEvent()

    async def wait_changed(self) -> SupervisorState:
        """Wait for the next change of ``state`` and return the new state."""
        await self._changed.wait()
        return self._state

    async def _loop(self) -> None:
        while not self._closing:
            self.attempts += 1
            attempt = self.attempts
            self._set_state("connecting")
            await self._emit_event(Connecting(server=self.name, attempt=attempt))
            reason = await self._attempt(attempt)
            if self._closing:  # aclose() closed the connection run() was watching
                return
            if self._restart_asked:  # asked for, not a failure: connect again at once
                self._restart_asked = False
                self._wake = LazyEvent()
                continue
            decision = self.tracker.record_failure(self._clock(), reason)
            if isinstance(decision, GiveUp):
                self._set_state("gave_up")
                self._log.warning("gave up restarting the server", reason=decision.reason)
                await self._emit_event(
                    GaveUp(
                        server=self.name,
                        reason=decision.reason,
                        failures=decision.failures,
                        window_seconds=decision.window_seconds,
                    )
                )
                return
            self._set_state("reconnecting")
            recorder = self.hosted.recorder
            if recorder is not None:  # the lifecycle of a recording (mcpl_host.recording)
                recorder.entry(
                    self.name,
                    recorder.current_connection(self.name),
                    "lifecycle",
                    event="restart",
                    attempt=decision.attempt,
                    delaySeconds=decision.delay_seconds,
                )
            await self._emit_event(
                Reconnecting(server=self.name, attempt=decision.attempt, delay_seconds=decision.delay_seconds)
            )
            with anyio.move_on_after(decision.delay_seconds):  # the policy's output, the only wait
                await self._wake.wait()  # ... unless restart() ends it
            self._restart_asked = False
            self._wake = LazyEvent()

    async def _attempt(self, attempt: int) -> str:
        """One connection from open to end; emits its events and returns the failure reason."""
        started: float | None = None
        ended: BaseException | str
        conn: ServerConnection | None = None
        ended = RESTART_REASON  # unless the attempt ends otherwise than by restart()
        with anyio.CancelScope() as scope:
            self._attempt_scope = scope
            self._restart_asked = False  # one asked for before this attempt: this is it
            try:
                conn = self.hosted.open_connection()
                async with conn:
                    started = self._clock()
                    self.tracker.record_start(started)
                    degraded = conn.mcpl_state is MCPLState.MCP_ONLY
                    self._set_state("degraded" if degraded else "ready")
                    self._current = conn
                    try:
                        await self._emit_event(connected_event(self.name, conn, attempt))
                        ended = await self._watch(conn)
                    finally:
                        self._current = None
            except (MCPLHostError, OSError) as exc:  # InitializeError, or lost while watching
                ended = exc
            except Exception as exc:  # a bug, or a connection that cannot be built: still a failure
                self._log.exception("connection attempt failed")
                ended = exc
        self._attempt_scope = None
        if self._closing:  # closed by aclose(): nothing is emitted (module rules)
            return "closed"
        tail = conn.connection.stderr_tail if conn is not None and ended is not RESTART_REASON else []
        phase: Literal["start", "running"] = "start" if started is None else "running"
        uptime = None if started is None else round(self._clock() - started, 3)
        if isinstance(ended, str):  # a failed health check: the connection was closed by us
            event = Disconnected(
                server=self.name,
                attempt=attempt,
                phase=phase,
                uptime_seconds=uptime,
                reason=ended,
                stderr_tail=list(tail),
            )
        else:
            event = disconnected_event(
                self.name, ended, attempt=attempt, phase=phase, uptime_seconds=uptime, stderr_tail=list(tail)
            )
        self._log.info("server disconnected", phase=phase, reason=event.reason)
        await self._emit_event(event)
        return event.reason

    async def _watch(self, conn: ServerConnection) -> BaseException | str:
        """Wait until the connection ends (its reason) or a health ping fails (a phrase)."""
        interval = self.health_interval_seconds
        if interval is None:
            self._watching = conn
            try:
                return await conn.wait_closed()
            finally:
                self._watching = None
        outcome: list[BaseException | str] = []
        async with anyio.create_task_group() as tg:

            async def closed() -> None:
                outcome.append(await conn.wait_closed())
                tg.cancel_scope.cancel()

            tg.start_soon(closed)
            while True:
                await anyio.sleep(interval)
                try:
                    await conn.mcp.ping(timeout=self.health_timeout_seconds)
                except RequestTimeout:
                    outcome.append(
                        f"did not answer ping within {describe_seconds(self.health_timeout_seconds)}"
                    )
                    tg.cancel_scope.cancel()
                    break
                except (ConnectionLost, ConnectionClosed):
                    await anyio.sleep_forever()  # closed() has the reason and ends the group
                except MCPLHostError:
                    continue  # an error answer, even a malformed one: it is alive
        return outcome[0]
