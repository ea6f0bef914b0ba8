"""Provisional channel input streams (RFC-009, experimental): the lease state machine.

Pure: no I/O, no clock, no logging. Every decision takes the host's facts at that moment
(``Facts``: the clock values, the grant, the registered channels and the sender bindings, the
connection's epoch) and returns a result dict or raises ``HandlerError``; the service
(``services/input_streams.py``) applies them. docs/protocol.md, "Input streams (RFC-009)",
IS1-IS12.

Rules:

- **Advertisement** (RFC-009 §2.1, IS1): ``channels.inputStreaming: true`` under
  ``experimental.mcpl``, and nothing else, advertises the path ``channels.incoming.streaming``
  (``advertises_input_streaming``); ``mcpl.grants.expand_advertisement`` applies it.
- **Methods** (RFC-009 §3): ``channels/input/open``, ``/update``, ``/complete``, ``/abort``,
  each needing ``channels.incoming`` and ``channels.incoming.streaming`` in the grant in force
  (§2.2); ``-32002`` ``{capability}`` names the first one missing.
- **Validation order** (§11, IS4): ready (``not_ready``), grant, params shape (``-32602``),
  the call's channel (``-32023`` not registered; ``-32017`` outbound, refused by the host's
  channel patterns, or a sender the connection may not represent), then for an existing
  stream: epoch, stream (``unknown_stream``), envelope and binding (``lease_mismatch``),
  expiry (``expired``), size (``size_limit``), terminal and revision, cadence
  (``rate_limited``). Errors are ``-32025`` ``{reason}`` and change no state.
- **Binding** (§4.1, IS5): a lease is bound to the epoch (the connection), the channel's
  registration generation and stable identity, the sender, ``messageId``, ``threadId`` and
  the sender's display name. ``reconcile`` aborts every open lease whose binding no longer
  holds (grant lost, channel removed or re-registered, sender no longer bound) or whose
  deadline has passed (status ``expired``); the service calls it at every change of those
  facts and at each deadline.
- **Expiry** (§4.1, §8, IS6): the effective deadline is ``min(expiresAt, receipt + max
  duration)`` on the wall clock of receipt; the lease ends when the monotonic clock reaches
  ``monotonic at receipt + (deadline - receipt)`` (equality is expired). After it, every call
  on the stream is ``expired`` (completed streams too: the replay window ends).
- **Reservations** (§4.3, IS7): a stream id stays reserved in its epoch after any end; the
  canonical key ``(principal, channel identity, messageId)`` is reserved while a stream holds
  it and once committed (``commit_key``: kept across epochs, shared with ordinary
  ``channels/incoming``, the latest ``Settings.max_committed_keys`` of them). ``max_streams`` counts every stream id kept in the epoch
  (terminal ones too): over it, ``resource_limit``.
- **Updates** (§5.2, §5.3, IS8): full replacement; a higher revision replaces (``updated``,
  at most one per ``1000 / maxUpdateHz`` ms after the last accepted one, else
  ``rate_limited``), the same revision and text is ``duplicate``, a lower one ``stale``, the
  same revision with other text ``conflict``. Complete and abort bypass the cadence.
- **Completion** (§6, IS9): exactly one ordinary incoming message (``complete``), given
  to the caller to ingest, then recorded (``commit``); its refusal is ``final_rejected`` and leaves the stream open. An
  exact retry returns the first result; a changed one ``conflict``.
- **Modes and preparation** (§9, IS10): ``final-only`` keeps no provisional text; a
  preparation artifact (``prepare``) is bound to stream, revision and digest and used at
  completion only when they match the final exactly; any accepted change discards it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from mcpl_host.jsonrpc.errors import ErrorCode, HandlerError
from mcpl_host.jsonrpc.values import JSONObject, is_mapping
from mcpl_host.mcpl.input_methods import (
    INPUT_METHODS,
    INPUT_STREAM_PATHS,
    INPUT_STREAM_REJECTED,
    advertises_input_streaming,
    metadata_only,
    rejected,
)

__all__ = [
    "ABORT_REASONS",
    "INPUT_METHODS",
    "INPUT_STREAM_PATHS",
    "INPUT_STREAM_REJECTED",
    "InputStreamUpdate",
    "SenderBinding",
    "MODES",
    "ChannelFacts",
    "Facts",
    "InputStreams",
    "Mode",
    "Settings",
    "advertises_input_streaming",
    "content_digest",
    "facts_channel",
    "input_stream_settings",
    "metadata_only",
    "rejected",
]

#: The lease treatments (RFC-009 §9).
Mode = Literal["final-only", "volatile", "prepare", "incremental"]
MODES: tuple[Mode, ...] = ("final-only", "volatile", "prepare", "incremental")
ABORT_REASONS = frozenset({"cancelled", "no_speech", "source_error", "superseded"})
CHANNEL_NOT_PERMITTED = -32017  # MCPL Appendix A
UNKNOWN_CHANNEL = -32023  # MCPL Appendix A

_MAX_ID = 256
_MAX_TIME = 253402300799999
_MAX_SAFE = 9007199254740991
_ENVELOPE = (
    "streamId",
    "transportEpoch",
    "leaseId",
    "channelId",
    "senderId",
    "contentType",
    "startedAt",
    "expiresAt",
    "revision",
)
_OPEN_KEYS = frozenset(
    {"streamId", "channelId", "messageId", "threadId", "sender", "contentType", "startedAt", "expiresAt"}
)


def content_digest(text: str) -> str:
    """``sha256:`` and the lowercase hex SHA-256 of the UTF-8 bytes of ``text`` (RFC-009 §3)."""
    import hashlib  # OpenSSL's: the first input stream only

    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _invalid(problem: str) -> HandlerError:
    return HandlerError(ErrorCode.INVALID_PARAMS, "Invalid params", {"problems": [problem]})


def _scalars(value: object) -> bool:
    """A string of Unicode scalar values (no lone surrogate, RFC-009 §3)."""
    return isinstance(value, str) and not any(0xD800 <= ord(c) <= 0xDFFF for c in value)


def _identifier(value: object) -> bool:
    return _scalars(value) and 0 < len(value) <= _MAX_ID  # type: ignore[arg-type]


def _time(value: object) -> bool:
    return type(value) is int and 0 <= value <= _MAX_TIME


def _revision(value: object) -> bool:
    return type(value) is int and 0 < value <= _MAX_SAFE


@dataclass(frozen=True, slots=True)
class SenderBinding:
    """What the application says a server may speak for on one channel (RFC-009 §4.1):
    ``senders``, the sender ids it is authenticated to represent; ``identity``, the channel's
    stable identity (the deduplication namespace, §4.3; None: the channel id)."""

    senders: frozenset[str]
    identity: str | None = None


@dataclass(frozen=True, slots=True)
class InputStreamUpdate:
    """A provisional input-stream fact for the application (RFC-009 §5.2, §7, §8): never
    history. ``status``: ``updated`` (``text`` the whole current snapshot; None in
    ``final-only`` mode), ``completed``, ``aborted`` or ``expired`` (``text`` None).
    ``channel_id``, ``sender_id``, ``message_id``: the lease's binding; ``revision``."""

    stream_id: str
    status: str
    revision: int
    channel_id: str
    sender_id: str
    message_id: str
    text: str | None = None


@dataclass(frozen=True, slots=True)
class ChannelFacts:
    """What the host knows of one registered channel (MCPL §14; RFC-009 §4.1): its stable
    ``identity`` (the deduplication namespace, IS7), registration ``generation``, whether it
    is ``inbound`` (inbound or bidirectional), ``permitted`` by the host's scope, and the
    sender ids this connection may represent on it (``senders``)."""

    identity: str
    generation: int
    inbound: bool = True
    permitted: bool = True
    senders: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Facts:
    """The host's facts at one moment: ``wall_ms`` (Unix ms, for the receipt-time checks of
    §4.1), ``monotonic_ms`` (the clock leases expire on, §8), ``ready`` (the policy receipt is
    in), ``granted`` (the paths of ``INPUT_STREAM_PATHS`` the grant in force allows),
    ``epoch`` (the connection's ``transportEpoch``), ``principal`` (the server), ``channels``
    (registered id -> ``ChannelFacts``)."""

    wall_ms: int
    monotonic_ms: float
    epoch: str
    principal: str
    granted: frozenset[str] = frozenset(INPUT_STREAM_PATHS)
    ready: bool = True
    channels: Mapping[str, ChannelFacts] = field(default_factory=dict[str, ChannelFacts])


@dataclass(frozen=True, slots=True)
class Settings:
    """The host's offer on every lease (RFC-009 §4.2, §9; ``Limits.input_stream_*``)."""

    max_chars: int = 4096
    max_update_hz: float = 10.0
    max_duration_ms: int = 60_000
    max_streams: int = 16
    mode: Mode = "volatile"
    max_committed_keys: int = 100_000


def input_stream_settings(limits: Any, mode: str) -> Settings:
    """The ``Settings`` of a server's ``Limits`` (``input_stream_*``, ``max_input_streams``)
    and ``ServerConfig.input_stream_mode``."""
    chosen: Mode = MODES[1]
    for known in MODES:
        if known == mode:
            chosen = known
    return Settings(
        max_chars=limits.input_stream_max_chars,
        max_update_hz=1 / limits.input_stream_update_interval_seconds,
        max_duration_ms=max(1, int(limits.input_stream_max_seconds * 1000)),
        max_streams=limits.max_input_streams,
        mode=chosen,
        max_committed_keys=limits.max_input_message_keys,
    )


@dataclass(slots=True)
class _Stream:
    stream_id: str
    epoch: str
    lease_id: str
    open_params: dict[str, Any]
    open_result: JSONObject
    key: tuple[str, str, str]
    channel_id: str
    identity: str
    generation: int
    sender: dict[str, Any]
    message_id: str
    thread_id: str | None
    started_at: int
    expires_at: int
    deadline_monotonic: float
    status: Literal["open", "completed", "aborted", "expired"] = "open"
    revision: int = 0
    text: str | None = None
    digest: str | None = None  # of the current revision's text, kept in every mode
    last_update_ms: float | None = None
    terminal_params: dict[str, Any] | None = None
    terminal_result: JSONObject | None = None
    prepared: tuple[int, str] | None = None


def _iso(ms: int) -> str:
    moment = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=ms)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


class InputStreams:
    """The input streams of one server, across its connections (module rules).

    The canonical keys ``(principal, channel identity, messageId)`` committed are kept across
    epochs, the latest ``settings.max_committed_keys`` of them (IS7). Per epoch: the streams
    (every id opened in it, IS7). No message is kept here: ``complete`` returns the one
    message for the caller to ingest, then ``commit`` records the outcome. Lease ids
    (``lease-<n>``) count across epochs."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        #: Insertion-ordered; the oldest leaves past ``settings.max_committed_keys`` (IS7).
        self._committed: dict[tuple[str, str, str], None] = {}
        self._streams: dict[str, _Stream] = {}  # stream id -> stream, current epoch
        self._epoch: str | None = None
        self._leases = 0
        self.used_preparation: list[str] = []

    # --- observation -----------------------------------------------------------------------

    def snapshot(self) -> JSONObject:
        """``{streams: {id: {status, revision, provisional}}, prepared: {id: {revision,
        contentDigest}}, usedPreparation: [ids]}`` of the current epoch (metadata and the
        volatile text only; nothing here is history)."""
        streams: JSONObject = {
            s.stream_id: {"status": s.status, "revision": s.revision, "provisional": s.text}
            for s in self._streams.values()
        }
        prepared: JSONObject = {
            s.stream_id: {"revision": s.prepared[0], "contentDigest": s.prepared[1]}
            for s in self._streams.values()
            if s.prepared is not None
        }
        return {"streams": streams, "prepared": prepared, "usedPreparation": list(self.used_preparation)}

    # --- host-side stimuli ------------------------------------------------------------------

    def reconcile(self, facts: Facts) -> list[InputStreamUpdate]:
        """Ends what the facts no longer support (module rules, IS5, IS6): a new epoch drops
        the old one's streams (committed keys stay); an open stream whose deadline passed is
        ``expired``; an open stream whose grant, channel, registration or sender is gone is
        ``aborted``. Returns the fact of each stream it ended."""
        ended: list[InputStreamUpdate] = []
        if self._epoch != facts.epoch:
            for stream in self._streams.values():
                if stream.status == "open":
                    self._end(stream, "aborted")
                    ended.append(self._fact(stream))
            self._streams.clear()
            self._epoch = facts.epoch
            return ended
        for stream in self._streams.values():
            if stream.status != "open":
                continue
            if facts.monotonic_ms >= stream.deadline_monotonic:
                self._end(stream, "expired")
                ended.append(self._fact(stream))
            elif not self._binding_holds(stream, facts):
                self._end(stream, "aborted")
                ended.append(self._fact(stream))
        return ended

    def end_epoch(self, epoch: str) -> list[InputStreamUpdate]:
        """The connection ``epoch`` ended (RFC-009 §8): its open streams abort (their ids stay
        reserved until the next epoch begins). Returns the fact of each one ended."""
        if self._epoch != epoch:
            return []
        ended: list[InputStreamUpdate] = []
        for stream in self._streams.values():
            if stream.status == "open":
                self._end(stream, "aborted")
                ended.append(self._fact(stream))
        return ended

    def deadline(self, stream_id: str) -> float | None:
        """The monotonic deadline (ms) of an open stream, or None."""
        stream = self._streams.get(stream_id)
        return stream.deadline_monotonic if stream is not None and stream.status == "open" else None

    def fact(self, stream_id: str) -> InputStreamUpdate | None:
        """The stream's state as the application sees it (``InputStreamUpdate``), or None."""
        stream = self._streams.get(stream_id)
        return None if stream is None else self._fact(stream)

    @staticmethod
    def _fact(stream: _Stream) -> InputStreamUpdate:
        status = "updated" if stream.status == "open" else stream.status
        return InputStreamUpdate(
            stream.stream_id,
            status,
            stream.revision,
            stream.channel_id,
            stream.sender["id"],
            stream.message_id,
            stream.text,
        )

    def prepare(self, stream_id: str) -> bool:
        """Record a preparation artifact for the stream's current snapshot (RFC-009 §9), if it
        is open with text; True when recorded."""
        stream = self._streams.get(stream_id)
        if stream is None or stream.status != "open" or stream.digest is None:
            return False
        stream.prepared = (stream.revision, stream.digest)
        return True

    def _binding_holds(self, stream: _Stream, facts: Facts) -> bool:
        if not all(path in facts.granted for path in INPUT_STREAM_PATHS):
            return False
        channel = facts.channels.get(stream.channel_id)
        return (
            channel is not None
            and channel.identity == stream.identity
            and channel.generation == stream.generation
            and channel.inbound
            and channel.permitted
            and stream.sender["id"] in channel.senders
        )

    @staticmethod
    def _end(stream: _Stream, status: Literal["completed", "aborted", "expired"]) -> None:
        stream.status = status
        stream.text = None
        stream.prepared = None

    # --- the four methods ---------------------------------------------------------------------

    def _authority(self, facts: Facts) -> None:
        if not facts.ready:
            raise rejected("not_ready")
        for path in INPUT_STREAM_PATHS:
            if path not in facts.granted:
                raise HandlerError(ErrorCode.CAPABILITY_DENIED, "Capability denied", {"capability": path})

    @staticmethod
    def _channel(facts: Facts, channel_id: str, sender_id: str) -> ChannelFacts:
        channel = facts.channels.get(channel_id)
        if channel is None:
            raise HandlerError(UNKNOWN_CHANNEL, "Unknown channel")
        if not (channel.inbound and channel.permitted and sender_id in channel.senders):
            raise HandlerError(CHANNEL_NOT_PERMITTED, "Channel not permitted")
        return channel

    def open(self, params: object, facts: Facts) -> JSONObject:
        """``channels/input/open`` (RFC-009 §4): the result, or raises ``HandlerError``."""
        self.reconcile(facts)
        self._authority(facts)
        problem = _open_problem(params)
        if problem is not None:
            raise _invalid(problem)
        assert is_mapping(params)
        p: dict[str, Any] = dict(params)
        channel = self._channel(facts, p["channelId"], p["sender"]["id"])
        key = (facts.principal, channel.identity, p["messageId"])
        existing = self._streams.get(p["streamId"])
        if existing is not None:
            if facts.monotonic_ms >= existing.deadline_monotonic:
                raise rejected("expired")
            if existing.open_params != p:
                raise rejected("conflict")
            if existing.status != "open":
                raise rejected("terminal")
            return dict(existing.open_result)
        if key in self._committed or any(s.key == key for s in self._streams.values()):
            raise rejected("conflict")
        if p["expiresAt"] <= facts.wall_ms or p["expiresAt"] < p["startedAt"]:
            raise _invalid("expiresAt must be later than the host's receipt time and not before startedAt")
        if len(self._streams) >= self.settings.max_streams:
            raise rejected("resource_limit")
        effective = min(p["expiresAt"], facts.wall_ms + self.settings.max_duration_ms)
        self._leases += 1
        lease_id = f"lease-{self._leases}"
        result: JSONObject = {
            "accepted": True,
            "streamId": p["streamId"],
            "transportEpoch": facts.epoch,
            "leaseId": lease_id,
            "expiresAt": effective,
            "maxUpdateHz": self.settings.max_update_hz,
            "maxChars": self.settings.max_chars,
            "mode": self.settings.mode,
        }
        if float(self.settings.max_update_hz).is_integer():
            result["maxUpdateHz"] = int(self.settings.max_update_hz)
        self._streams[p["streamId"]] = _Stream(
            stream_id=p["streamId"],
            epoch=facts.epoch,
            lease_id=lease_id,
            open_params=p,
            open_result=result,
            key=key,
            channel_id=p["channelId"],
            identity=channel.identity,
            generation=channel.generation,
            sender=dict(p["sender"]),
            message_id=p["messageId"],
            thread_id=p.get("threadId"),
            started_at=p["startedAt"],
            expires_at=effective,
            deadline_monotonic=facts.monotonic_ms + (effective - facts.wall_ms),
        )
        return dict(result)

    def _leased(self, method: str, params: object, facts: Facts) -> tuple[_Stream, dict[str, Any]]:
        """The common steps of update, complete and abort (IS4), up to the revision rules."""
        self.reconcile(facts)
        self._authority(facts)
        problem = _envelope_problem(method, params)
        if problem is not None:
            raise _invalid(problem)
        assert is_mapping(params)
        p: dict[str, Any] = dict(params)
        channel = self._channel(facts, p["channelId"], p["senderId"])
        if p["transportEpoch"] != facts.epoch:
            raise rejected("lease_mismatch")
        stream = self._streams.get(p["streamId"])
        if stream is None:
            raise rejected("unknown_stream")
        bound = (
            stream.lease_id,
            stream.channel_id,
            stream.sender["id"],
            "text/plain",
            stream.started_at,
            stream.expires_at,
            stream.identity,
            stream.generation,
        )
        claimed = (
            p["leaseId"],
            p["channelId"],
            p["senderId"],
            p["contentType"],
            p["startedAt"],
            p["expiresAt"],
            channel.identity,
            channel.generation,
        )
        if bound != claimed:
            raise rejected("lease_mismatch")
        if facts.monotonic_ms >= stream.deadline_monotonic:
            raise rejected("expired")
        if "text" in p and len(p["text"]) > self.settings.max_chars:
            raise rejected("size_limit")
        return stream, p

    def update(self, params: object, facts: Facts) -> JSONObject:
        """``channels/input/update`` (RFC-009 §5.2, §5.3): ``{accepted, status, revision}``."""
        stream, p = self._leased("channels/input/update", params, facts)
        if stream.status != "open":
            raise rejected("terminal")
        revision, digest = p["revision"], content_digest(p["text"])
        if revision < stream.revision:
            return {"accepted": True, "status": "stale", "revision": stream.revision}
        if revision == stream.revision:
            if digest == stream.digest:
                return {"accepted": True, "status": "duplicate", "revision": revision}
            raise rejected("conflict")
        interval = 1000.0 / self.settings.max_update_hz
        if stream.last_update_ms is not None and facts.monotonic_ms - stream.last_update_ms < interval:
            raise rejected("rate_limited")
        stream.revision, stream.digest = revision, digest
        stream.text = None if self.settings.mode == "final-only" else p["text"]
        stream.last_update_ms = facts.monotonic_ms
        stream.prepared = None
        return {"accepted": True, "status": "updated", "revision": revision}

    def complete(self, params: object, facts: Facts) -> tuple[JSONObject, JSONObject | None]:
        """``channels/input/complete`` (RFC-009 §6), first half: ``(result, message)``, the
        message None for an exact retry (its result returned again). A new final is not yet
        committed: the caller ingests ``message`` the ordinary way, then calls ``commit`` (or
        ``final_refused``, which raises ``final_rejected`` and leaves the stream open)."""
        stream, p = self._leased("channels/input/complete", params, facts)
        terminal = {k: p[k] for k in (*_ENVELOPE, "text")}
        if stream.status == "completed":
            if terminal == stream.terminal_params and stream.terminal_result is not None:
                return dict(stream.terminal_result), None
            raise rejected("conflict")
        if stream.status != "open":
            raise rejected("terminal")
        revision, text = p["revision"], p["text"]
        digest = content_digest(text)
        if revision < stream.revision:
            raise rejected("stale_revision")
        if revision == stream.revision and digest != stream.digest:
            raise rejected("conflict")
        message: JSONObject = {"channelId": stream.channel_id, "messageId": stream.message_id}
        if stream.thread_id is not None:
            message["threadId"] = stream.thread_id
        message["author"] = dict(stream.sender)
        message["timestamp"] = _iso(stream.started_at)
        message["content"] = [{"type": "text", "text": text}]
        result: JSONObject = {
            "accepted": True,
            "status": "completed",
            "messageId": stream.message_id,
            "revision": revision,
            "contentDigest": digest,
        }
        return result, message

    def commit(
        self, params: Mapping[str, Any], result: JSONObject, conversation_id: str | None
    ) -> JSONObject:
        """``complete``'s second half, once the ordinary ingestion accepted the message: the
        stream ``completed``, its canonical key committed, preparation used or discarded
        (IS9, IS10). Returns the result (with ``conversationId`` when given)."""
        stream = self._streams[params["streamId"]]
        if conversation_id is not None:
            result = {**result, "conversationId": conversation_id}
        revision, digest = params["revision"], content_digest(params["text"])
        if stream.prepared == (revision, digest):
            self.used_preparation.append(stream.stream_id)
        stream.revision, stream.digest = revision, digest
        stream.terminal_params = {k: params[k] for k in (*_ENVELOPE, "text")}
        stream.terminal_result = result
        self.commit_key(stream.key)
        self._end(stream, "completed")
        return dict(result)

    def abort(self, params: object, facts: Facts) -> JSONObject:
        """``channels/input/abort`` (RFC-009 §7): ``{accepted, status: "aborted"}``."""
        stream, p = self._leased("channels/input/abort", params, facts)
        terminal = {k: p[k] for k in (*_ENVELOPE, "reason")}
        if stream.status == "aborted" and stream.terminal_params is not None:
            if terminal == stream.terminal_params and stream.terminal_result is not None:
                return dict(stream.terminal_result)
            raise rejected("conflict")
        if stream.status != "open":
            raise rejected("terminal")
        if p["revision"] < stream.revision:
            raise rejected("stale_revision")
        result: JSONObject = {"accepted": True, "status": "aborted"}
        stream.revision = p["revision"]
        stream.terminal_params, stream.terminal_result = terminal, result
        self._end(stream, "aborted")
        return dict(result)

    def commit_key(self, key: tuple[str, str, str]) -> None:
        """Record a committed canonical key (a streamed final, or an accepted ordinary message),
        within ``settings.max_committed_keys``: past it the oldest key leaves (IS7)."""
        self._committed.pop(key, None)
        self._committed[key] = None
        while len(self._committed) > self.settings.max_committed_keys:
            del self._committed[next(iter(self._committed))]

    def key_reserved(self, principal: str, identity: str, message_id: str) -> bool:
        """Whether an ordinary ``channels/incoming`` message with this canonical key must be
        refused as a duplicate (RFC-009 §4.3, IS7): committed, or held by a stream of the epoch
        (open, or ended: the reservation lasts through the epoch)."""
        key = (principal, identity, message_id)
        return key in self._committed or any(s.key == key for s in self._streams.values())


def _open_problem(params: object) -> str | None:
    """The first problem of ``channels/input/open`` params (RFC-009 §3, §4.1), or None."""
    if not is_mapping(params):
        return "params must be an object"
    unknown = [k for k in params if k not in _OPEN_KEYS]
    if unknown:
        return "an unknown member is present"
    for key in ("streamId", "channelId", "messageId"):
        if not _identifier(params.get(key)):
            return f"{key} must be an identifier (1 to {_MAX_ID} Unicode scalar values)"
    if "threadId" in params and not _identifier(params["threadId"]):
        return "threadId must be an identifier"
    sender = params.get("sender")
    if not is_mapping(sender) or any(k not in ("id", "name") for k in sender):
        return "sender must be an object with id and optional name only"
    if not _identifier(sender.get("id")):
        return "sender.id must be an identifier"
    if "name" in sender and not _identifier(sender["name"]):
        return f"sender.name must be 1 to {_MAX_ID} Unicode scalar values"
    return _content_and_times_problem(params)


def _content_and_times_problem(params: Mapping[str, Any]) -> str | None:
    """The ``contentType``, ``startedAt`` and ``expiresAt`` every input request carries
    (RFC-009 §4.1, §5.1), or None."""
    if params.get("contentType") != "text/plain":
        return "contentType must be text/plain"
    for key in ("startedAt", "expiresAt"):
        if not _time(params.get(key)):
            return f"{key} must be an integer of milliseconds from 0 to {_MAX_TIME}"
    return None


def _envelope_problem(method: str, params: object) -> str | None:
    """The first problem of an update/complete/abort's params (RFC-009 §5.1), or None."""
    if not is_mapping(params):
        return "params must be an object"
    extra = "reason" if method == "channels/input/abort" else "text"
    unknown = [k for k in params if k not in _ENVELOPE and k != extra]
    if unknown:
        return "an unknown member is present"
    for key in ("streamId", "transportEpoch", "leaseId", "channelId", "senderId"):
        if not _identifier(params.get(key)):
            return f"{key} must be an identifier"
    problem = _content_and_times_problem(params)
    if problem is not None:
        return problem
    if not _revision(params.get("revision")):
        return "revision must be a positive safe integer"
    if extra == "text" and not _scalars(params.get("text")):
        return "text must be a string of Unicode scalar values"
    if extra == "reason" and params.get("reason") not in ABORT_REASONS:
        return "reason must be one of " + ", ".join(sorted(ABORT_REASONS))
    return None


def facts_channel(
    identity: str, generation: int, *, direction: object, permitted: bool, senders: Collection[str]
) -> ChannelFacts:
    """A ``ChannelFacts`` from a descriptor's ``direction`` (inbound or bidirectional)."""
    return ChannelFacts(
        identity, generation, direction in ("inbound", "bidirectional"), permitted, frozenset(senders)
    )
