"""Input streams (RFC-009, experimental) on one connection: the I/O shell of
``mcpl.input_streams``.

Rules (docs/protocol.md, "Input streams (RFC-009)"):

- Built only when ``ServerConfig.input_streams`` is on; otherwise ``channels/input/*`` are
  ``-32601`` like any unknown method (the dispatcher routes nothing here) and the host
  neither advertises nor grants ``channels.incoming.streaming`` (IS2).
- The lease state lives in the server's ``InputStreams`` (``HostedServer.input_streams``),
  so committed canonical keys outlive the connection (IS7); this connection is the epoch
  ``epoch-<sequence>``.
- Each call builds the host's ``Facts`` now: the clock (``InputClock``: Unix ms and monotonic
  ms), the grant in force, the channels this connection registered with their registration
  generation, and for each the application's ``SenderBinding``
  (``HostHandlers.input_stream_binding``) and the channel-id patterns
  (``HostHandlers.channel_policy``).
- ``complete`` hands the one final to the ordinary incoming path
  (``ChannelService.incoming_one``: the same admission and ``HostHandlers.channel_message``);
  its refusal is ``final_rejected`` and the stream stays open (IS9).
- Provisional snapshots and stream ends go to ``HostHandlers.on_input_stream`` and, as the
  event ``InputStream``, to the observer (never history); log lines hold metadata only (stream id, revision, status), never text (§10).
- Deadlines: each open lease gets a background job that reconciles at its deadline (IS6);
  every call and every channel change reconciles first.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import anyio

from mcpl_host.handlers import HostHandlers, RequestContext
from mcpl_host.inbound import BackgroundJob
from mcpl_host.jsonrpc.values import JSONObject
from mcpl_host.logging import Logger
from mcpl_host.mcpl.admission import AdmissionView
from mcpl_host.mcpl.input_streams import (
    INPUT_STREAM_PATHS,
    ChannelFacts,
    Facts,
    InputStreams,
    InputStreamUpdate,
    facts_channel,
    rejected,
)
from mcpl_host.mcpl.server_shapes import ChannelRegistry, channel_allowed

__all__ = ["InputClock", "InputStreamService", "SystemInputClock"]


class InputClock(Protocol):
    """The two clocks of RFC-009 §4.1 and §8: ``wall_ms`` (Unix ms: receipt time against
    ``expiresAt``) and ``monotonic_ms`` (leases end on it: a wall-clock step cannot lengthen
    one)."""

    def wall_ms(self) -> int: ...

    def monotonic_ms(self) -> float: ...


@dataclass(frozen=True, slots=True)
class SystemInputClock:
    """``time.time()`` and ``time.monotonic()``, in milliseconds."""

    def wall_ms(self) -> int:
        return int(time.time() * 1000)

    def monotonic_ms(self) -> float:
        return time.monotonic() * 1000


class InputStreamService:
    """Serves ``channels/input/*`` on one connection (module rules)."""

    def __init__(
        self,
        name: str,
        machine: InputStreams,
        handlers: HostHandlers,
        view: AdmissionView,
        registry: ChannelRegistry,
        *,
        epoch: str,
        clock: InputClock,
        incoming_one: Callable[[RequestContext, Any], Any],
        start_job: Callable[[BackgroundJob], object],
        report: Callable[[InputStreamUpdate], None],
        log: Logger,
    ) -> None:
        self.name = name
        self.machine = machine
        self.epoch = epoch
        self._handlers = handlers
        self._view = view
        self._registry = registry
        self._clock = clock
        self._incoming_one = incoming_one
        self._start_job = start_job
        self._report = report
        #: One input call at a time per connection: complete, abort and the reconcile they
        #: run are serialized (RFC-009 §7; docs/protocol.md IS9).
        self._lock = anyio.Lock()
        #: Streams with a deadline job (one each, whatever the open retries; at most
        #: ``Limits.max_input_streams``: the stream ids of the epoch).
        self._watched: set[str] = set()
        self._log = log

    def facts(self) -> Facts:
        """The host's facts now (module rules)."""
        grant = self._view.grant
        granted = frozenset(path for path in INPUT_STREAM_PATHS if grant is not None and grant.allows(path))
        patterns = self._handlers.channel_policy(self.name)
        patterns = None if patterns is None else tuple(patterns)
        channels: dict[str, ChannelFacts] = {}
        for channel_id in self._registry.ids():
            descriptor: Mapping[str, Any] = self._registry.get(channel_id) or {}
            binding = self._handlers.input_stream_binding(self.name, channel_id, dict(descriptor))
            channels[channel_id] = facts_channel(
                channel_id if binding is None or binding.identity is None else binding.identity,
                self._registry.generation(channel_id),
                direction=descriptor.get("direction"),
                permitted=binding is not None and channel_allowed(channel_id, patterns),
                senders=() if binding is None else binding.senders,
            )
        return Facts(
            wall_ms=self._clock.wall_ms(),
            monotonic_ms=self._clock.monotonic_ms(),
            epoch=self.epoch,
            principal=self.name,
            granted=granted,
            ready=grant is not None,
            channels=channels,
        )

    def reconcile(self) -> None:
        """End what the facts no longer support (a channel change, a grant change, a
        deadline) and tell the application."""
        try:
            facts = self.facts()
        except Exception:  # the application's binding hook failed: the leases stay as they are
            self._log.exception("input_stream_binding handler failed")
            return
        for fact in self.machine.reconcile(facts):
            self._told(fact)

    def snapshot(self) -> JSONObject:
        """The input streams now, once the facts are applied (``InputStreams.snapshot``):
        volatile state for the application, never history."""
        self.reconcile()
        return self.machine.snapshot()

    def prepare(self, stream_id: str) -> bool:
        """The application prepared work against the stream's current snapshot (RFC-009 §9):
        recorded against its revision and digest (``InputStreams.prepare``)."""
        return self.machine.prepare(stream_id)

    def close(self) -> None:
        """The connection ended: its open streams abort (RFC-009 §8)."""
        for fact in self.machine.end_epoch(self.epoch):
            self._told(fact)

    def _told(self, fact: InputStreamUpdate) -> None:
        self._log.debug(
            "input stream", stream=fact.stream_id, status=fact.status, revision=fact.revision
        )  # metadata only (RFC-009 §10)
        try:
            self._report(fact)  # HostHandlers.on_input_stream and the observer's InputStream
        except Exception:
            self._log.exception("on_input_stream handler failed")

    async def serve(self, context: RequestContext, params: Any) -> JSONObject:
        """The result of an admitted ``channels/input/*`` request, or raises ``HandlerError``."""
        async with self._lock:
            return await self._serve(context, params)

    async def _serve(self, context: RequestContext, params: Any) -> JSONObject:
        self.reconcile()
        facts = self.facts()
        method = context.method
        if method == "channels/input/open":
            result = self.machine.open(params, facts)
            self._watch_deadline(params["streamId"])
            return result
        if method == "channels/input/update":
            result = self.machine.update(params, facts)
            fact = self.machine.fact(params["streamId"])
            if result["status"] == "updated" and fact is not None:
                self._told(fact)
            return result
        if method == "channels/input/abort":
            result = self.machine.abort(params, facts)
            fact = self.machine.fact(params["streamId"])
            if fact is not None:
                self._told(fact)
            return result
        result, message = self.machine.complete(params, facts)
        if message is None:
            return result  # an exact retry: the first result, no second message (§6.2)
        answer = await self._incoming_one(context, message)
        if not answer.get("accepted"):
            raise rejected("final_rejected")
        committed = self.machine.commit(params, result, answer.get("conversationId"))
        fact = self.machine.fact(params["streamId"])
        if fact is not None:
            self._told(fact)
        return committed

    def _watch_deadline(self, stream_id: str) -> None:
        deadline = self.machine.deadline(stream_id)
        if deadline is None or stream_id in self._watched:
            return
        self._watched.add(stream_id)
        clock = self._clock

        async def at_deadline() -> None:
            while True:
                left = deadline - clock.monotonic_ms()
                if left <= 0:
                    break
                await anyio.sleep(left / 1000)
            self.reconcile()

        self._start_job(at_deadline)

    def reserved(self, message: Any) -> bool:
        """Whether an ordinary ``channels/incoming`` message's canonical key is held by an
        open stream or already committed (RFC-009 §4.3, IS7)."""
        channel_id, message_id = message.get("channelId"), message.get("messageId")
        if not isinstance(channel_id, str) or not isinstance(message_id, str):
            return False
        channel = self.facts().channels.get(channel_id)
        identity = channel.identity if channel is not None else channel_id
        return self.machine.key_reserved(self.name, identity, message_id)

    def committed(self, message: Any) -> None:
        """An ordinary message was accepted: its canonical key is committed (IS7)."""
        channel_id, message_id = message.get("channelId"), message.get("messageId")
        if isinstance(channel_id, str) and isinstance(message_id, str):
            channel = self.facts().channels.get(channel_id)
            identity = channel.identity if channel is not None else channel_id
            self.machine.commit_key((self.name, identity, message_id))
