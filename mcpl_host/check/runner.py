"""The I/O driver of ``mcpl-host check``: it starts the server, exercises it the way a host
does, and records what it saw as ``RunEvidence`` for the pure rules (``rules``).

Rules of this module:

- **Two sessions.** The *main* session goes through the library: a ``HostedServer`` built by
  ``Target.hosted`` (``HostedServer`` of the target's ``ServerConfig``), one
  ``ServerConnection``, the handshake and the whole MCPL policy
  exchange as a strict MCPL 0.5 host runs them (everything advertised is granted: the check
  tests the server, not a policy). The *raw* session opens a second transport from the same
  factory and speaks JSON-RPC itself, since it must send what the library never sends (an
  invalid request, ``"id": null``, an unknown method, CRLF, a big message); it offers no
  MCPL, so an MCPL server must treat it as a plain MCP host (MCPL §3.3).
- **Recording.** Every line of both sessions, in both directions, goes through a
  ``RecordingTransport`` into that session's ``Transcript`` (composition: it wraps the
  transport the factory opens; nothing in the library changes).
- **Steps** (``registry.Step``) run only when a selected check needs them, in this order in
  the main session: handshake and initial policy; ``listen`` (MCPL servers: up to
  ``listen_seconds``, ended early by the first push/event after the receipt), then a liveness
  ping after every channels/register answered itemized, then one drain of the session's
  event inbox (RFC-006: the host advertises ``eventCoalescing``, so a pending deferred
  notice is rendered with ``push/render``, each within ``Limits.push_render_timeout_seconds``); ``reduction`` (revoke
  ``pushEvents``, MCPL §6.7, then listen ``reduction_listen_seconds``); ``lists``; ``calls``;
  ``against`` (``check --against FILE``: each request of the recording asked again, in
  recorded order, ``replay.against.requests_to_ask``; docs/protocol.md RP8);
  ``close`` (stdin closed; the time to the end of stdout is measured, bounded by
  ``Limits.close_grace_seconds``). Then, where the transport may carry MCP 2026-07-28
  (stdio, Streamable HTTP), a session of its own sends ``server/discover`` as its first and
  only message, waiting ``Limits.discover_timeout_seconds`` as a host does (a server of both
  eras may keep to the stateless one on that connection and refuse ``initialize``). Then the
  raw session: ``initialize`` and its probes one at a time, each waiting
  ``probe_timeout_seconds`` for its answer; ``sigterm`` last. The main session speaks the
  handshake era only (``protocol="handshake"``).
- **Progress and timing.** ``run_checks``' ``on_step`` is told a few words as each step
  starts (``check``'s progress line); the seconds of each step go to
  ``RunEvidence.phase_seconds`` (a check's measured duration: ``registry.check_seconds``).
  A raw probe keeps the start of the line it sent and of the lines that came back while it
  waited (``RequestOutcome.sent``, ``received``), the evidence of a probe left unanswered.
- **A server that stops answering** is noticed once: after a request times out, one ping
  (``probe_timeout_seconds``) decides; if it goes unanswered too, every later request of the
  session fails at once with one sentence naming what went unanswered (``MainEvidence.dead``),
  so a dead server costs one timeout, not one per check.
- **Bounds.** Every wait has a timeout from ``CheckOptions`` or ``Limits``; transcripts are
  bounded (``Limits.max_check_messages``, ``max_check_message_bytes``); at most
  ``MAX_AUTO_CALLS`` tools are called on the check's own initiative; structured results are
  validated against the server's ``outputSchema`` in a worker process under
  ``Limits.check_validation_timeout_seconds`` (a schema may hold a pathological regular
  expression). Nothing here raises for anything a server does; an operator's mistake (a
  command that cannot start) is an ``init_error``.
"""

from __future__ import annotations

import os
import secrets as random_tokens
import signal
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.to_process

from mcpl_host.check.evidence import (
    EXCHANGE_CHARS,
    EXCHANGE_LINES,
    AgainstEvidence,
    CallEvidence,
    ListEvidence,
    MainEvidence,
    RawEvidence,
    RequestOutcome,
    RunEvidence,
    ShutdownEvidence,
    Transcript,
    WireMessage,
    as_list,
    as_object,
    id_key,
)
from mcpl_host.check.registry import Step
from mcpl_host.connection import ClientInfo
from mcpl_host.handlers import HostHandlers, InferenceStream, RequestContext
from mcpl_host.handshake import initialize_params
from mcpl_host.hosted import HostedServer
from mcpl_host.jsonrpc.errors import (
    ConnectionClosed,
    ConnectionLost,
    InitializeError,
    MCPLHostError,
    RemoteError,
    RemoteProtocolError,
    RequestTimeout,
    UnreadableAnswer,
)
from mcpl_host.jsonrpc.framing import ReadItem, dumps_message
from mcpl_host.jsonrpc.values import JSONObject
from mcpl_host.limits import Limits
from mcpl_host.logging import get_logger
from mcpl_host.mcpl.grants import GrantPolicy
from mcpl_host.replay.against import Asked, recorded_initialize, requests_to_ask
from mcpl_host.replay.script import Script
from mcpl_host.services.coalescing import EventInbox
from mcpl_host.stateless import LATEST_STATELESS_VERSION, discover_params
from mcpl_host.transports.base import Transport, may_carry_stateless

__all__ = [
    "MAX_AUTO_CALLS",
    "CheckHandlers",
    "CheckOptions",
    "RecordingTransport",
    "Target",
    "example_arguments",
    "run_checks",
]

#: Tools with an ``outputSchema`` the check calls on its own initiative (read-only ones).
MAX_AUTO_CALLS = 5
#: The policy of the main session: everything advertised (MCPL §5.4), as ``probe`` does.
GRANT_ALL = GrantPolicy(grant_all_advertised=True)
#: The reduction the ``reduction`` step makes (MCPL §6.7).
WITHOUT_PUSH = GrantPolicy(grant_all_advertised=True, deny=("pushEvents",))
CLIENT = ClientInfo(name="mcpl-host-check", version="0.1.0")
_ID = "mcpl-host-check-"
_log = get_logger("mcpl_host.check")
#: Told a few words as each step of the run starts (None: nobody).
StepReport = Callable[[str], None] | None


def _quiet(_what: str) -> None:
    pass


@dataclass(frozen=True, slots=True)
class Target:
    """What to check: ``hosted(handlers=...)`` builds a new ``HostedServer`` for it (called
    once per session, with the policy ``GRANT_ALL`` already in it); ``transport`` is
    ``stdio``, ``websocket`` or ``http``; ``shown`` describes it without secrets."""

    hosted: Callable[..., HostedServer]
    transport: str
    shown: str


@dataclass(frozen=True, slots=True)
class CheckOptions:
    """The run's settings (seconds unless named otherwise). ``calls``: tool name ->
    arguments to call it with (``--call``). ``limits`` holds the handshake, request and
    close bounds the sessions use."""

    limits: Limits = field(default_factory=Limits)
    listen_seconds: float = 2.0
    reduction_listen_seconds: float = 2.5
    probe_timeout_seconds: float = 2.0
    big_message_bytes: int = 1024 * 1024
    calls: dict[str, dict[str, Any]] = field(default_factory=dict[str, dict[str, Any]])
    #: ``--against FILE``: the recorded server's script (``replay.script``), or None.
    against: Script | None = None


class CheckHandlers(HostHandlers):
    """What the check's host answers: push events and channel messages accepted,
    ``inference/request`` with a fixed reply (streamed in one chunk when asked), and a fixed
    ``model/info``; so the host advertises everything it implements (MCPL §5.2) and the
    server may exercise all of it."""

    REPLY = "(mcpl-host check: no model; this is a fixed reply)"

    def __init__(self) -> None:
        super().__init__(
            model_info={
                "id": "mcpl-host-check",
                "vendor": "mcpl-host",
                "contextWindow": 8192,
                "capabilities": [],
            }
        )

    async def inference_request(
        self, context: RequestContext, params: Mapping[str, object], stream: InferenceStream | None
    ) -> JSONObject:
        if stream is not None:
            stream.send(self.REPLY)
        return {
            "content": self.REPLY,
            "model": "mcpl-host-check",
            "finishReason": "end_turn",
            "usage": {"inputTokens": 0, "outputTokens": 0},
        }


# --- recording --------------------------------------------------------------------------------


class _Waiter:
    """Wakes tasks waiting for a transcript to change (``Transcript.on_message``)."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def notify(self, _message: WireMessage | None = None) -> None:
        self._event.set()
        self._event = anyio.Event()

    async def wait_for(self, condition: Callable[[], bool], timeout: float) -> bool:
        """True as soon as ``condition()`` holds, False after ``timeout`` seconds."""
        with anyio.move_on_after(timeout):
            while not condition():
                await self._event.wait()
            return True
        return condition()


class RecordingTransport:
    """A ``Transport`` that records every line it carries into ``transcript`` and forwards
    everything to ``inner`` (composition). ``ended_at``: when ``receive()`` first raised (the
    end of the server's output); ``close_started``: when ``aclose()`` was first called;
    times are seconds on ``clock``."""

    def __init__(self, inner: Transport, transcript: Transcript, clock: Callable[[], float]) -> None:
        self.inner = inner
        self.transcript = transcript
        self._clock = clock
        self.ended_at: float | None = None
        self.close_started: float | None = None
        self.ended = anyio.Event()
        #: The last message received (recorded, whether the transcript kept it or not).
        self.last_received: WireMessage | None = None

    async def send(self, data: bytes) -> None:
        self.transcript.record_chunk("out", data, self._clock())
        await self.inner.send(data)

    async def receive(self) -> ReadItem:
        try:
            item = await self.inner.receive()
        except BaseException:
            if self.ended_at is None:
                self.ended_at = self._clock()
                self.ended.set()
            raise
        self.last_received = self.transcript.record("in", item, self._clock())
        return item

    async def aclose(self) -> None:
        if self.close_started is None:
            self.close_started = self._clock()
        await self.inner.aclose()

    @property
    def stderr_tail(self) -> Sequence[str]:
        return self.inner.stderr_tail

    def describe(self) -> str:
        return self.inner.describe()

    def negotiated(self, protocol_version: str) -> None:
        self.inner.negotiated(protocol_version)

    @property
    def pid(self) -> int | None:
        pid = getattr(self.inner, "pid", None)
        return pid if isinstance(pid, int) else None

    @property
    def exit_status(self) -> int | None:
        status = getattr(self.inner, "exit_status", None)
        return status if isinstance(status, int) else None


def _recording(
    factory: Callable[[], AbstractAsyncContextManager[Transport]],
    transcript: Transcript,
    clock: Callable[[], float],
    opened: list[RecordingTransport],
) -> Callable[[], AbstractAsyncContextManager[Transport]]:
    @asynccontextmanager
    async def open_recorded() -> AsyncGenerator[Transport, None]:
        async with factory() as inner:
            recorder = RecordingTransport(inner, transcript, clock)
            opened.append(recorder)
            yield recorder

    return open_recorded


def _clock() -> Callable[[], float]:
    start = anyio.current_time()
    return lambda: anyio.current_time() - start


def _new_transcript(limits: Limits, waiter: _Waiter) -> Transcript:
    return Transcript(limits=limits, on_message=waiter.notify)


# --- argument choice for tools the check calls on its own ---------------------------------------


def example_arguments(input_schema: object) -> dict[str, Any] | None:
    """Arguments for a tool call chosen without guessing: every required property gets its
    ``default``, else its ``const``, else the first of its ``enum``; optional ones are left
    out. None when a required property has none of these (the check then does not call the
    tool on its own). Pure."""
    schema = as_object(input_schema)
    if schema is None:
        return None
    required = as_list(schema.get("required", []))
    properties = as_object(schema.get("properties", {}))
    if required is None or properties is None:
        return None
    arguments: JSONObject = {}
    for name in required:
        spec = as_object(properties.get(name)) if isinstance(name, str) else None
        if spec is None or not isinstance(name, str):
            return None
        enum = as_list(spec.get("enum"))
        if "default" in spec:
            arguments[name] = spec["default"]
        elif "const" in spec:
            arguments[name] = spec["const"]
        elif enum:
            arguments[name] = enum[0]
        else:
            return None
    return arguments


def _validate_schemas(items: list[tuple[tuple[int, str], Any]]) -> dict[tuple[int, str], list[str]]:
    """In a worker process: ``schemas.schema_problems`` for each (where, schema)."""
    from mcpl_host.check.schemas import schema_problems

    return {where: schema_problems(schema) for where, schema in items}


def _validate_outputs(items: list[tuple[str, Any, Any]]) -> dict[str, list[str]]:
    """In a worker process: ``schemas.output_problems`` for each (name, schema, instance)."""
    from mcpl_host.check.schemas import output_problems

    return {name: output_problems(schema, instance) for name, schema, instance in items}


# --- the main session -----------------------------------------------------------------------------


def _deferred(params: object) -> bool:
    """A ``push/event``'s params carrying ``coalesce.deferred: true`` (RFC-006 §5.1)."""
    found = as_object(params)
    coalesce = as_object(found.get("coalesce")) if found is not None else None
    return coalesce is not None and coalesce.get("deferred") is True


class _LibrarySession:
    """The main session's driver: the server through the library, a ``HostedServer`` and
    its ``ServerConnection``, recorded into ``MainEvidence`` (module rules)."""

    def __init__(
        self, target: Target, options: CheckOptions, steps: frozenset[Step], on_step: StepReport = None
    ) -> None:
        self.target = target
        self.options = options
        self.steps = steps
        self.on_step = on_step or _quiet
        #: Seconds each step took (``RunEvidence.phase_seconds``).
        self.phase_seconds: dict[str, float] = {}
        self._mark = 0.0
        self.limits = options.limits
        self.waiter = _Waiter()
        self.transcript = _new_transcript(self.limits, self.waiter)
        self.evidence = MainEvidence(self.transcript)
        self.clock = _clock()
        self.opened: list[RecordingTransport] = []
        #: RFC-006: the check's host coalesces, so a server may show coalesced events.
        self.inbox = EventInbox()
        self.hosted = target.hosted(handlers=CheckHandlers(), event_inbox=self.inbox)
        # Judged as a strict MCPL 0.5 host sees it; each deviation's report says what the 0.4
        # profile would do with it.
        self.hosted.set_compat("strict")
        # The handshake era, whatever the server also speaks: the checks judge initialize and
        # what follows it; the raw session probes server/discover (init.discover).
        self.hosted.set_protocol("handshake")
        self.hosted.set_transport_factory(
            _recording(self.hosted.transport_factory, self.transcript, self.clock, self.opened)
        )
        self.conn = self.hosted.open_connection()
        self.stderr_tail: list[str] = []

    # requests

    async def ask(
        self, method: str, params: object = None, *, timeout: float | None = None, liveness: bool = True
    ) -> RequestOutcome:
        """One request, as a ``RequestOutcome``; after a timeout, one ping (unless not
        ``liveness``) decides whether the server stopped answering (then every later ``ask``
        fails at once)."""
        outcome = RequestOutcome(method, params)
        main = self.evidence
        if main.dead is not None:
            outcome.failure = f"not sent: {main.dead}"
            return outcome
        seconds = self.limits.request_timeout_seconds if timeout is None else timeout
        started = self.clock()
        try:
            outcome.result = await self.conn.mcp.request(method, params, timeout=seconds)
        except RemoteError as exc:
            outcome.error = {"code": exc.code, "message": exc.message}
            if exc.data is not None:
                outcome.error["data"] = exc.data
        except RequestTimeout:
            outcome.failure = f"no answer within {seconds:g} s"
            if liveness:
                await self._liveness(f"{method} went unanswered")
        except (RemoteProtocolError, UnreadableAnswer) as exc:
            outcome.failure = f"the answer could not be read: {exc}"
        except (ConnectionLost, ConnectionClosed) as exc:
            outcome.failure = f"the connection was lost: {exc}"
            main.dead = f"the server went away ({exc})"
        outcome.seconds = self.clock() - started
        return outcome

    def _last_refusal(self) -> str:
        """``after the host refused its M (code: message)`` for the last server request the
        host answered with an error, or the empty string."""
        answers = (
            m for m in reversed(self.transcript.messages) if m.direction == "out" and m.kind == "response"
        )
        for answer in answers:
            if not answer.has_error:
                continue
            request = self.transcript.request_named("in", answer.id, before=answer.seq)
            error = as_object(answer.error) or {}
            if request is not None:
                return f" after the host refused its {request.method} ({error.get('code')}: {error.get('message')})"
            break
        return ""

    async def _liveness(self, what: str) -> None:
        main = self.evidence
        if main.dead is not None:
            return
        try:
            await self.conn.mcp.request("ping", timeout=self.options.probe_timeout_seconds)
        except RequestTimeout:
            main.dead = f"the server stopped answering{self._last_refusal()}: {what}, and so did a ping"
        except (ConnectionLost, ConnectionClosed) as exc:
            main.dead = f"the server went away ({exc})"
        except MCPLHostError:
            pass  # it answered, with an error: alive

    # the session

    async def run(self) -> MainEvidence:
        main, say, lap = self.evidence, self.on_step, self._lap
        self._mark = anyio.current_time()
        try:
            say("the handshake and the policy exchange")
            async with self.conn:
                self._read_handshake()
                await self._after_policy()
                lap("main")
                if "listen" in self.steps:
                    say("listening for what the server sends unasked")
                    await self._listen()
                    lap("listen")
                if "reduction" in self.steps:
                    say("revoking pushEvents")
                    await self._reduce()
                    lap("reduction")
                if "lists" in self.steps:
                    say("listing tools, resources and prompts")
                    await self._lists()
                    lap("lists")
                if "calls" in self.steps:
                    say("calling tools")
                    await self._calls()
                    lap("calls")
                if "against" in self.steps and self.options.against is not None:
                    say("asking the recorded requests again")
                    await self._against(self.options.against)
                    lap("against")
                if "close" in self.steps:
                    say("closing the server's stdin")
                    await self._close()
                    lap("close")
        except InitializeError as exc:
            main.init_error = str(exc)
            main.init_error_code = exc.code
        except (MCPLHostError, OSError) as exc:  # the server went away between steps
            main.dead = main.dead or f"the session ended: {exc}"
        self.stderr_tail = self.conn.connection.stderr_tail
        self._time_handshake()
        return main

    def _lap(self, step: str) -> None:
        """``step`` ended now: its seconds since the last lap."""
        now = anyio.current_time()
        self.phase_seconds[step] = round(now - self._mark, 3)
        self._mark = now

    def _time_handshake(self) -> None:
        request = self.transcript.sent("initialize")
        answer = self.transcript.answer_to(request) if request is not None else None
        if request is not None and answer is not None:
            self.evidence.init_seconds = answer.time - request.time

    def _read_handshake(self) -> None:
        main, conn = self.evidence, self.conn
        info = conn.server_info
        assert info is not None
        main.protocol_version = info.protocol_version
        main.capabilities = dict(info.capabilities)
        main.manifest = conn.policy.state.manifest
        main.mcpl_state = conn.mcpl_state.value
        main.feature_sets = {name: fs.uses for name, fs in conn.policy.state.feature_sets.sets.items()}
        main.enabled_feature_sets = (
            conn.policy.state.derivation.enabled if conn.policy.state.derivation is not None else frozenset()
        )
        main.advertised = conn.policy.state.advertised
        main.granted = conn.grant.paths if conn.grant is not None else frozenset()

    def _policy_answer(self) -> tuple[WireMessage | None, WireMessage | None]:
        request = self.transcript.sent("featureSets/update")
        if request is None:
            return None, None
        return request, self.transcript.answer_to(request)

    async def _after_policy(self) -> None:
        request, answer = self._policy_answer()
        if request is not None and answer is None:  # the initial policy timed out
            await self._liveness("its initial featureSets/update request went unanswered")

    def _receipt_seq(self) -> int:
        _, answer = self._policy_answer()
        if answer is not None:
            return answer.seq
        sent = self.transcript.sent("notifications/initialized")
        return sent.seq if sent is not None else 0

    def _push_after(self, seq: int) -> bool:
        return self.transcript.last_seq("in", "push/event") > seq

    async def _listen(self) -> None:
        main = self.evidence
        if main.manifest is None or main.dead is not None:
            return
        first = self.transcript.lines
        after = self._receipt_seq()
        started = self.clock()
        await self.waiter.wait_for(lambda: self._push_after(after), self.options.listen_seconds)
        main.listen_seconds = self.clock() - started
        main.listen_window = (first, self.transcript.lines - 1)
        await self._ping_after_registrations()
        await self._render()

    def _batch_due(self) -> bool:
        return bool(self.inbox.state.due_batches("main"))

    async def _render(self) -> None:
        """One drain of the event inbox: each pending deferred batch is rendered (RFC-006
        §5.2; each ``push/render`` bounded by ``Limits.push_render_timeout_seconds``)."""
        if self.evidence.dead is not None:
            return
        if any(_deferred(m.params) for m in self.transcript.server_messages_of(frozenset({"push/event"}))):
            # A notice seen on the wire is admitted when its answer goes out: wait for that.
            await self.waiter.wait_for(self._batch_due, self.options.listen_seconds)
        if self.inbox.state.due_batches("main"):
            await self.inbox.drain("main")

    async def _ping_after_registrations(self) -> None:
        """One liveness ping after every channels/register the host answered itemized (the
        answer must be on the wire first: the ping follows it in the server's input)."""
        main = self.evidence
        registrations = self.transcript.server_requests(frozenset({"channels/register"}))
        if not registrations:
            return

        def answered() -> bool:
            return all(self.transcript.answer_to(r) is not None for r in registrations)

        await self.waiter.wait_for(answered, self.options.probe_timeout_seconds)
        itemized = [
            r for r in registrations if (a := self.transcript.answer_to(r)) is not None and not a.has_error
        ]
        if not itemized:
            return
        ping = await self.ask("ping", timeout=self.options.probe_timeout_seconds, liveness=False)
        if not ping.answered and main.dead is None:
            main.dead = "the server stopped answering after its channels/register was answered itemized"
        for request in itemized:
            main.after_register[request.seq] = ping

    async def _reduce(self) -> None:
        main = self.evidence
        if main.manifest is None:
            return
        if main.dead is not None:
            main.reduction_note = f"not tried: {main.dead}"
            return
        if main.mcpl_state != "ready":
            main.reduction_note = "MCPL never became ready (the initial policy was not accepted)"
            return
        if "pushEvents" not in main.granted:
            main.reduction_note = "the server does not advertise pushEvents"
            return
        if "listen" not in self.steps or not self._push_after(self._receipt_seq()):
            main.reduction_note = (
                f"the server sent no push/event within {self.options.listen_seconds:g} s with pushEvents "
                "granted, so a reduction cannot be judged"
            )
            return
        before = len(self.transcript.sent_requests("featureSets/update"))
        started = self.clock()
        outcome = RequestOutcome("featureSets/update")
        try:
            change = await self.conn.policy.update(WITHOUT_PUSH)
        except (ConnectionLost, ConnectionClosed) as exc:
            outcome.failure = f"the connection was lost: {exc}"
            main.dead = f"the server went away ({exc})"
            main.reduction = outcome
            return
        outcome.seconds = self.clock() - started
        requests = self.transcript.sent_requests("featureSets/update")
        request = requests[before] if len(requests) > before else None
        answer = self.transcript.answer_to(request) if request is not None else None
        if request is not None:
            outcome.params = request.params
        if answer is None:
            outcome.failure = change.error or "no answer"
            await self._liveness("the reduction went unanswered")
        elif answer.has_error:
            outcome.error = as_object(answer.error) or {"code": None, "message": repr(answer.error)}
        else:
            outcome.result = answer.result
        main.reduction = outcome
        if answer is None or answer.has_error:
            return
        started = self.clock()
        await anyio.sleep(self.options.reduction_listen_seconds)  # the listen window itself
        main.reduction_seconds = self.clock() - started
        main.reduction_window = (answer.seq, self.transcript.lines - 1)

    async def _list(self, method: str, key: str) -> ListEvidence:
        listing = ListEvidence(method, key)
        seen: set[str] = set()
        cursor: str | None = None
        for _page in range(self.limits.max_list_pages):
            outcome = await self.ask(method, {"cursor": cursor} if cursor is not None else None)
            listing.pages.append(outcome)
            if not outcome.answered or outcome.error is not None:
                listing.ended = "failed"
                return listing
            result = outcome.result
            next_cursor = (as_object(result) or {}).get("nextCursor")
            if next_cursor is None or next_cursor == "":
                listing.ended = "complete"
                return listing
            if not isinstance(next_cursor, str):
                listing.ended = "bad-cursor"
                return listing
            if next_cursor in seen:
                listing.ended = "cursor-repeated"
                return listing
            seen.add(next_cursor)
            cursor = next_cursor
        listing.ended = "too-many-pages"
        return listing

    async def _lists(self) -> None:
        main = self.evidence
        capabilities = main.capabilities
        for method, key, capability in (
            ("tools/list", "tools", "tools"),
            ("resources/list", "resources", "resources"),
            ("resources/templates/list", "resourceTemplates", "resources"),
            ("prompts/list", "prompts", "prompts"),
        ):
            if capability in capabilities:
                main.lists[method] = await self._list(method, key)
        await self._tool_schemas()

    async def _tool_schemas(self) -> None:
        """The listed tools' schemas against their metaschemas, in a worker process under
        ``Limits.check_validation_timeout_seconds`` (a server's schemas of many megabytes
        take minutes); a check that did not end is a problem of each schema."""
        listing = self.evidence.lists.get("tools/list")
        items: list[tuple[tuple[int, str], Any]] = [
            ((index, key), tool[key])
            for index, item in enumerate(listing.items if listing else [])
            if (tool := as_object(item)) is not None
            for key in ("inputSchema", "outputSchema")
            if key in tool
        ]
        if not items:
            return
        seconds = self.limits.check_validation_timeout_seconds
        try:
            with anyio.fail_after(seconds):
                self.evidence.tool_schema_problems = await anyio.to_process.run_sync(
                    _validate_schemas, items, cancellable=True
                )
        except TimeoutError:
            self.evidence.tool_schema_problems = {
                where: [f"$: its check against the metaschema did not finish within {seconds:g} s"]
                for where, _ in items
            }

    async def _calls(self) -> None:
        main = self.evidence
        calls = main.calls = CallEvidence()
        capabilities = main.capabilities
        token = random_tokens.token_hex(4)
        if "tools" in capabilities:
            calls.unknown_tool_name = f"{_ID}no-such-tool-{token}"
            calls.unknown_tool = await self.ask(
                "tools/call", {"name": calls.unknown_tool_name, "arguments": {}}
            )
            await self._tool_calls(calls)
        if "prompts" in capabilities:
            calls.unknown_prompt = await self.ask("prompts/get", {"name": f"{_ID}no-such-prompt-{token}"})
        listing = main.lists.get("resources/list")
        uris = [
            uri
            for r in (listing.items if listing else [])
            if isinstance(uri := (as_object(r) or {}).get("uri"), str)
        ]
        if "resources" in capabilities and uris:
            calls.resource_uri = uris[0]
            calls.resource_read = await self.ask("resources/read", {"uri": uris[0]})
        if any(path.startswith("contextHooks.beforeInference.") for path in main.granted):
            calls.before_inference = await self.ask(  # RFC-010: does it still inject?
                "context/beforeInference",
                {
                    "inferenceId": f"{_ID}inference-{token}",
                    "conversationId": f"{_ID}conversation-{token}",
                    "turnIndex": 0,
                    "userMessage": None,
                    "model": {
                        "id": "mcpl-host-check",
                        "vendor": "mcpl-host",
                        "contextWindow": 0,
                        "capabilities": [],
                    },
                },
                timeout=min(self.limits.hook_timeout_seconds, self.limits.request_timeout_seconds),
            )

    async def _against(self, script: Script) -> None:
        """``check --against``: each recorded request asked again, in recorded order
        (``replay.against.requests_to_ask``; docs/protocol.md RP8)."""
        against = self.evidence.against = AgainstEvidence(initialize=recorded_initialize(script))
        for recorded in requests_to_ask(script):
            outcome = await self.ask(recorded.method, recorded.params)
            if outcome.failure is not None:
                live: dict[str, Any] = {"failure": outcome.failure}
            elif outcome.error is not None:
                live = {"error": outcome.error}
            else:
                live = {"result": outcome.result}
            against.asked.append(Asked(recorded, live))

    async def _tool_calls(self, calls: CallEvidence) -> None:
        listing = self.evidence.lists.get("tools/list")
        tools = {
            name: tool
            for item in (listing.items if listing else [])
            if (tool := as_object(item)) is not None and isinstance(name := tool.get("name"), str)
        }
        names = set(tools)
        for name in self.options.calls:
            if name not in names:
                calls.tool_calls_skipped[name] = "--call names a tool that is not listed"
        automatic = 0
        for name, tool in tools.items():
            if "outputSchema" not in tool:
                if name in self.options.calls:
                    calls.tool_calls_skipped[name] = "it declares no outputSchema"
                continue
            arguments = self.options.calls.get(name)
            if arguments is None:
                annotations = as_object(tool.get("annotations")) or {}
                read_only = annotations.get("readOnlyHint") is True
                if not read_only:
                    calls.tool_calls_skipped[name] = (
                        "not marked readOnlyHint, so not called without --call NAME=JSON"
                    )
                    continue
                arguments = example_arguments(tool.get("inputSchema"))
                if arguments is None:
                    calls.tool_calls_skipped[name] = (
                        "needs arguments the check cannot choose (give --call NAME=JSON)"
                    )
                    continue
                if automatic >= MAX_AUTO_CALLS:
                    calls.tool_calls_skipped[name] = f"only {MAX_AUTO_CALLS} tools are called without --call"
                    continue
                automatic += 1
            calls.tool_calls[name] = await self.ask("tools/call", {"name": name, "arguments": arguments})
        items: list[tuple[str, Any, Any]] = []
        for name, outcome in calls.tool_calls.items():
            result = as_object(outcome.result)
            if result is not None and "structuredContent" in result:
                items.append((name, tools[name].get("outputSchema"), result["structuredContent"]))
        if not items:
            return
        seconds = self.limits.check_validation_timeout_seconds
        try:
            with anyio.fail_after(seconds):
                calls.output_problems = await anyio.to_process.run_sync(
                    _validate_outputs, items, cancellable=True
                )
        except TimeoutError:
            calls.output_problems = {
                name: [f"validation against its outputSchema did not finish within {seconds:g} s"]
                for name, _, _ in items
            }

    async def _close(self) -> None:
        main = self.evidence
        if self.target.transport != "stdio" or not self.opened:
            return
        recorder = self.opened[0]
        bound = self.limits.close_grace_seconds
        outcome = main.shutdown = ShutdownEvidence(signal=None, bound_seconds=bound)
        if recorder.ended_at is not None or recorder.exit_status is not None:
            outcome.already_gone = True
            return
        await self.conn.aclose()  # stdin first; SIGTERM only after the grace (Limits)
        started, ended = recorder.close_started, recorder.ended_at
        if started is not None and ended is not None and ended >= started:
            outcome.seconds = ended - started
        outcome.exit_status = recorder.exit_status


# --- the raw session ------------------------------------------------------------------------------


class _RawSession:
    """The raw session's driver: JSON-RPC written and read by hand on a transport of its
    own, for what the library never sends, recorded into ``RawEvidence`` (module rules)."""

    def __init__(
        self, target: Target, options: CheckOptions, steps: frozenset[Step], *, discover_only: bool = False
    ) -> None:
        self.target = target
        self.options = options
        self.steps = steps
        #: A session of its own for the ``server/discover`` probe alone (module rules).
        self.discover_only = discover_only
        self.waiter = _Waiter()
        self.transcript = _new_transcript(options.limits, self.waiter)
        self.evidence = RawEvidence(self.transcript)
        self.clock = _clock()
        self.lock = anyio.Lock()
        self.recorder: RecordingTransport | None = None
        self.dead: str | None = None
        self.alive_pings = 0
        #: Seconds the ``sigterm`` step took (0 when it did not run).
        self.sigterm_seconds = 0.0
        #: How the transport ended, once it has.
        self.ended: ConnectionLost | ConnectionClosed | None = None
        #: The ids a probe waits for (``id_key``) and the first response naming each; matched
        #: on every line read, so an answer past the transcript's bound is still seen.
        self.awaited: dict[tuple[str, Any], WireMessage | None] = {}

    async def _send(self, data: bytes) -> bool:
        assert self.recorder is not None
        async with self.lock:
            try:
                await self.recorder.send(data)
            except (ConnectionLost, ConnectionClosed) as exc:
                self.dead = self.dead or f"the server went away ({exc})"
                return False
        return True

    async def _read(self) -> None:
        """Reads until the transport ends; answers the server's requests (``ping`` with
        ``{}``, anything else ``-32601``: this host offers nothing)."""
        assert self.recorder is not None
        while True:
            try:
                await self.recorder.receive()
            except (ConnectionLost, ConnectionClosed) as exc:
                self.ended = exc
                self.waiter.notify()
                return
            message = self.recorder.last_received
            if message is not None and message.kind == "response":
                key = id_key(message.id)
                if key in self.awaited and self.awaited[key] is None:
                    self.awaited[key] = message
            if message is None or message.direction != "in" or message.kind != "request":
                continue
            if message.method == "ping":
                answer: JSONObject = {"jsonrpc": "2.0", "id": message.id, "result": {}}
            else:
                answer = {
                    "jsonrpc": "2.0",
                    "id": message.id,
                    "error": {"code": -32601, "message": f"Method not found: {message.method}"},
                }
            await self._send(dumps_message(answer))

    def _await(self, ids: Sequence[Any]) -> None:
        self.awaited = {id_key(request_id): None for request_id in ids}

    def _answer(self) -> WireMessage | None:
        found = [answer for answer in self.awaited.values() if answer is not None]
        return min(found, key=lambda m: m.seq) if found else None

    async def probe(
        self,
        name: str,
        data: bytes,
        *,
        ids: Sequence[Any] = (),
        null: bool = False,
        timeout: float | None = None,
    ) -> RequestOutcome:
        """Send ``data`` (one line) and wait for a response naming one of ``ids`` (or null
        with ``null``); without one, a ping tells whether the server is still there."""
        outcome = RequestOutcome(name)
        if self.dead is not None:
            outcome.failure = f"not sent: {self.dead}"
            return outcome
        seconds = self.options.probe_timeout_seconds if timeout is None else timeout
        self._await([*ids, *([None] if null else [])])
        started = self.clock()
        first = self.transcript.lines
        outcome.sent = data[:EXCHANGE_CHARS].decode("utf-8", errors="replace").rstrip("\r\n")
        if not await self._send(data):
            outcome.failure = f"not sent: {self.dead}"
            return outcome
        await self.waiter.wait_for(lambda: self._answer() is not None or self._gone(), seconds)
        outcome.seconds = self.clock() - started
        outcome.received = tuple(
            m.head for m in self.transcript.messages[first:] if m.direction == "in" and m.seq >= first
        )[:EXCHANGE_LINES]
        answer = self._answer()
        if answer is None:
            if self._gone():
                self.dead = "the server went away"
                outcome.failure = "the server went away before answering"
                if isinstance(self.ended, ConnectionLost) and self.ended.step is not None:
                    # An HTTP failure that is no going away (it names its step: connect, TLS,
                    # a status): said as it is.
                    self.dead = outcome.failure = str(self.ended)
            else:
                outcome.failure = f"no answer within {seconds:g} s" + await self._still_there()
            return outcome
        if answer.has_error:
            outcome.error = as_object(answer.error) or {"code": None, "message": repr(answer.error)}
        else:
            outcome.result = answer.result
        return outcome

    def _gone(self) -> bool:
        return self.recorder is not None and self.recorder.ended_at is not None

    async def _still_there(self) -> str:
        if self._gone():
            self.dead = "the server went away"
            return "; the server went away"
        self.alive_pings += 1
        ping_id = f"{_ID}alive-{self.alive_pings}"
        self._await([ping_id])
        await self._send(dumps_message({"jsonrpc": "2.0", "id": ping_id, "method": "ping"}))
        await self.waiter.wait_for(
            lambda: self._answer() is not None or self._gone(), self.options.probe_timeout_seconds
        )
        if self._answer() is not None:
            return "; it still answered a ping afterwards"
        if self._gone():
            self.dead = "the server went away"
            return "; then the server went away"
        self.dead = "the server stopped answering"
        return ", nor to a ping after it: the server stopped answering"

    async def run(self) -> RawEvidence:
        hosted = self.target.hosted(handlers=HostHandlers())
        try:
            async with hosted.transport_factory() as inner:
                self.recorder = RecordingTransport(inner, self.transcript, self.clock)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._read)
                    if self.discover_only:
                        await self._discover()
                    else:
                        await self._session()
                        if "sigterm" in self.steps:
                            started = anyio.current_time()
                            await self._sigterm()
                            self.sigterm_seconds = anyio.current_time() - started
                    tg.cancel_scope.cancel()
        except (MCPLHostError, OSError) as exc:
            self.evidence.init_error = self.evidence.init_error or str(exc)
        return self.evidence

    async def _discover(self) -> None:
        """``server/discover`` as the first message, as a host of MCP 2026-07-28 sends it where
        the transport may carry the revision (MCP 2026-07-28 "Versioning and Compatibility";
        docs/protocol.md S1), waiting ``Limits.discover_timeout_seconds``. Nothing else is
        sent: a server of both eras may keep to the stateless one on this connection."""
        if self.recorder is None or not may_carry_stateless(self.recorder.inner):
            return
        meta = discover_params(LATEST_STATELESS_VERSION, {"name": CLIENT.name, "version": CLIENT.version}, {})
        message = {"jsonrpc": "2.0", "id": f"{_ID}discover", "method": "server/discover", "params": meta}
        self.evidence.probes["discover"] = await self.probe(
            "discover",
            dumps_message(message),
            ids=[f"{_ID}discover"],
            timeout=self.options.limits.discover_timeout_seconds,
        )

    async def _session(self) -> None:
        raw = self.evidence
        limits = self.options.limits
        params = initialize_params(CLIENT.name, CLIENT.version, None)
        init = await self.probe(
            "initialize",
            dumps_message({"jsonrpc": "2.0", "id": f"{_ID}init", "method": "initialize", "params": params}),
            ids=[f"{_ID}init"],
            timeout=limits.handshake_timeout_seconds,
        )
        result = as_object(init.result)
        if result is None:
            raw.init_error = "initialize was not answered with a result" + (
                f" ({init.failure})" if init.failure else f" (error {init.error_code})"
            )
            return
        version = result.get("protocolVersion")
        assert self.recorder is not None
        if isinstance(version, str):
            self.recorder.negotiated(version)
        raw.initialized_seq = self.transcript.lines
        await self._send(dumps_message({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        probes = raw.probes

        def request(id_: str, method: str, params: object = None) -> bytes:
            message: dict[str, Any] = {"jsonrpc": "2.0", "id": id_, "method": method}
            if params is not None:
                message["params"] = params
            return dumps_message(message)

        probes["ping"] = await self.probe("ping", request(f"{_ID}ping", "ping"), ids=[f"{_ID}ping"])
        probes["unknown-method"] = await self.probe(
            "unknown-method", request(f"{_ID}unknown", f"{_ID}no-such-method", {}), ids=[f"{_ID}unknown"]
        )
        invalid: JSONObject = {"jsonrpc": "2.0", "id": f"{_ID}invalid", "method": 7, "params": {}}
        probes["invalid-request"] = await self.probe(
            "invalid-request", dumps_message(invalid), ids=[f"{_ID}invalid"], null=True
        )
        probes["id-null"] = await self.probe(
            "id-null", dumps_message({"jsonrpc": "2.0", "id": None, "method": "ping"}), null=True
        )
        if self.target.transport == "stdio":
            crlf = request(f"{_ID}crlf", "ping").removesuffix(b"\n") + b"\r\n"
            probes["crlf"] = await self.probe("crlf", crlf, ids=[f"{_ID}crlf"])
        padding = max(0, self.options.big_message_bytes - 100)
        big = request(f"{_ID}big", "ping", {"_meta": {"mcpl-host-check/padding": "x" * padding}})
        probes["big-message"] = await self.probe(
            "big-message", big, ids=[f"{_ID}big"], timeout=max(self.options.probe_timeout_seconds, 5.0)
        )

    async def _sigterm(self) -> None:
        raw = self.evidence
        recorder = self.recorder
        bound = self.options.limits.close_grace_seconds
        outcome = raw.shutdown = ShutdownEvidence(signal="SIGTERM", bound_seconds=bound)
        pid = recorder.pid if recorder is not None else None
        if recorder is None or pid is None or self.target.transport != "stdio":
            outcome.note = "applies to a server process on stdio only"
            return
        if os.name != "posix":
            outcome.note = "SIGTERM is POSIX only"
            return
        if recorder.ended_at is not None or recorder.exit_status is not None:
            outcome.already_gone = True
            return
        started = self.clock()
        try:
            os.kill(pid, signal.SIGTERM)  # the server process itself, as a host does
        except ProcessLookupError:
            outcome.already_gone = True
            return
        with anyio.move_on_after(bound):
            await recorder.ended.wait()
        if recorder.ended_at is not None:
            outcome.seconds = recorder.ended_at - started
        outcome.exit_status = recorder.exit_status


# --- the run ---------------------------------------------------------------------------------------


async def run_checks(
    target: Target, options: CheckOptions, steps: frozenset[Step], on_step: StepReport = None
) -> RunEvidence:
    """Gather the evidence the ``steps`` need (module rules) and return it. Never raises for
    anything the server does; cancellation closes every session (bounded by the graces).
    ``on_step`` is called with a few words as each step starts (a progress line)."""
    say = on_step or _quiet
    evidence = RunEvidence(
        transport=target.transport,
        steps=frozenset(steps),
        big_message_bytes=options.big_message_bytes,
        listen_seconds=options.listen_seconds,
        reduction_listen_seconds=options.reduction_listen_seconds,
    )
    if steps & {"main", "listen", "reduction", "lists", "calls", "against", "close"}:
        started = anyio.current_time()
        main = _LibrarySession(target, options, steps, on_step)
        evidence.main = await main.run()
        evidence.phase_seconds.update(main.phase_seconds)
        evidence.stderr_tail = main.stderr_tail
        evidence.step_seconds["main"] = round(anyio.current_time() - started, 3)
    if steps & {"raw", "sigterm"}:
        started = anyio.current_time()
        say("server/discover and the raw JSON-RPC probes")
        discovered = (
            await _RawSession(target, options, steps, discover_only=True).run() if "raw" in steps else None
        )
        session = _RawSession(target, options, steps)
        evidence.raw = await session.run()
        if discovered is not None and "discover" in discovered.probes:
            evidence.raw.probes["discover"] = discovered.probes["discover"]
        evidence.step_seconds["raw"] = round(anyio.current_time() - started, 3)
        evidence.phase_seconds["raw"] = round(evidence.step_seconds["raw"] - session.sigterm_seconds, 3)
        if "sigterm" in steps:
            evidence.phase_seconds["sigterm"] = round(session.sigterm_seconds, 3)
    return evidence
