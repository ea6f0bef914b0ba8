"""What the replay answers to each message the live host sends. Pure: no I/O, no clock.

``Matcher(script)`` holds one replay transport's progress through a ``Script``
(``mcpl_host.replay.script``); every transport of a replay starts the script from its
beginning (docs/protocol.md RP1). ``opening()`` is what the server wrote before the host
sent anything; ``receive(message)`` takes one parsed message from the host and returns a
``Reply`` (the lines to write, in order, and whether the transport then ends) or a
``Mismatch`` (the request that differs from the recording: its sentence, and the JSON-RPC
error the replay answers it with before it stops). The rules (docs/protocol.md RP1-RP7):

- RP2 A request matches a recorded request of the same method whose params are equal once
  the top-level ``_meta`` is left out of both (progress tokens, trace context) and absent
  params are read as ``{}`` (JSON-RPC 2.0 §4.2 lets them be omitted); the id is never
  compared. ``initialize``, ``server/discover`` and ``ping`` match by method alone
  (their params describe the host, not what it asks). A recorded request whose message
  was omitted for its size matches by method alone.
- RP3 Among the recorded requests that match, the first not yet matched (recorded order)
  is taken: identical requests are answered in the order they were recorded. A request
  that matches only recorded requests already taken is answered as the last of them was
  (the answer alone, nothing it was followed by). A ``ping`` the recording does not hold
  is answered ``{}`` (MCP 2025-11-25, Utilities, Ping: a host pings when it likes).
- RP4 What the server wrote after a host message and before the next one (its requests,
  notifications, lines that were not JSON, answers) is written once that host message is
  matched; an answer is written with the id of the live request it answers (ids remapped),
  and not before that request is matched. A host notification matches the first recorded
  notification of its method not yet matched, whatever its params; the host's answer to a
  server request matches the recorded answer with that id (the replay sends the server's
  requests with their recorded ids). Neither ever differs: a notification or answer with
  no recorded counterpart is read and nothing is written.
- RP5 An answer the recording omitted (over ``Limits.max_recorded_message_bytes``) is
  replaced by a JSON-RPC error naming its size; a server request or notification omitted
  is not written (``Reply.skipped`` says so).
- RP6 A request that matches no recorded request is a ``Mismatch``: its method, its live
  id, the first difference of its params (``diff.first_difference``) from the recorded
  request of that method it was expected to be (the first not yet matched, else the last),
  and that request's place in the recording (entry ``seq`` and line).
- RP7 When the recording shows the connection ended after a host message and a new one
  started (a restart, the era probe's new transport), the transport ends after writing
  what that message was followed by (``Reply.end``).
- Timing (``keep_timing``): each line waits the recorded gap since the host message or the
  line before it, at most ``max_gap_seconds`` (``Limits.replay_max_gap_seconds``);
  otherwise every ``delay`` is 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from mcpl_host.jsonrpc.envelope import NO_ID, Notification, Request, Response, classify
from mcpl_host.jsonrpc.errors import ErrorCode
from mcpl_host.jsonrpc.values import is_object
from mcpl_host.replay.diff import first_difference, shown
from mcpl_host.replay.script import Cue, Output, Script

__all__ = ["METHOD_ONLY", "Matcher", "Mismatch", "Reply", "Write", "match_params"]

#: Requests matched by method alone (RP2).
METHOD_ONLY = frozenset({"initialize", "server/discover", "ping"})


@dataclass(frozen=True, slots=True)
class Write:
    """One line to write: ``message`` (a JSON-RPC message) or ``text`` (a recorded line
    that was not JSON), after ``delay`` seconds; ``seq`` the recorded entry."""

    seq: int
    delay: float = 0.0
    message: Any = None
    text: str | None = None


@dataclass(frozen=True, slots=True)
class Reply:
    """What to write for one host message, in order; ``end``: then end the transport
    (RP7); ``skipped``: sentences about recorded lines that cannot be written (RP5)."""

    writes: tuple[Write, ...] = ()
    end: bool = False
    skipped: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Mismatch:
    """A request that differs from the recording (RP6): ``sentence`` names it; ``answer``
    is the JSON-RPC error response (with the live id) written before the replay stops."""

    sentence: str
    answer: dict[str, Any] = field(default_factory=dict[str, Any])


def match_params(method: str, params: object) -> object:
    """What of a request's params is compared (RP2): None for ``METHOD_ONLY`` methods, the
    params without a top-level ``_meta`` otherwise (absent params: ``{}``)."""
    if method in METHOD_ONLY:
        return None
    if params is None:
        return {}
    if is_object(params) and "_meta" in params:
        return {key: value for key, value in params.items() if key != "_meta"}
    return params


def _key(method: str, params: object) -> tuple[str, bytes]:
    try:
        canonical = orjson.dumps(match_params(method, params), option=orjson.OPT_SORT_KEYS)
    except TypeError:
        canonical = repr(params).encode()
    return method, canonical


def _id_key(value: object) -> tuple[str, object]:
    return (
        type(value).__name__,
        value if isinstance(value, (str, int, float, bool)) or value is None else repr(value),
    )


class Matcher:
    """One replay transport's progress through ``script`` (see the module's rules)."""

    def __init__(self, script: Script, *, keep_timing: bool = False, max_gap_seconds: float = 5.0) -> None:
        self.script = script
        self.keep_timing = keep_timing
        self.max_gap_seconds = max_gap_seconds
        self._by_key: dict[tuple[str, bytes], list[int]] = {}
        self._unknown: dict[str, list[int]] = {}
        self._by_method: dict[str, list[int]] = {}
        self._notifications: dict[str, list[int]] = {}
        self._responses: dict[tuple[str, object], list[int]] = {}
        self._answer_of: dict[int, int] = {}
        for cue in script.cues:
            if cue.kind == "request" and cue.method is not None:
                self._by_method.setdefault(cue.method, []).append(cue.index)
                if cue.params_known:
                    self._by_key.setdefault(_key(cue.method, cue.params), []).append(cue.index)
                else:
                    self._unknown.setdefault(cue.method, []).append(cue.index)
            elif cue.kind == "notification" and cue.method is not None:
                self._notifications.setdefault(cue.method, []).append(cue.index)
            elif cue.kind == "response":
                self._responses.setdefault(_id_key(cue.id), []).append(cue.index)
        for index, output in enumerate(script.outputs):
            if output.answers is not None:
                self._answer_of.setdefault(output.answers, index)
        #: cue index -> the live id of the request it was matched to.
        self._live_ids: dict[int, Any] = {}
        self._matched: set[int] = set()
        self._written: set[int] = set()
        #: (method, key) -> the last cue matched by it (RP3's repeat).
        self._last: dict[tuple[str, bytes], int] = {}

    @property
    def matched(self) -> int:
        """How many recorded host messages have been matched."""
        return len(self._matched)

    def opening(self) -> Reply:
        """What the server wrote before the host sent anything."""
        return self._reply(list(self.script.opening), None)

    def receive(self, message: object) -> Reply | Mismatch:
        """What to write for one parsed message from the host (RP2-RP7)."""
        envelope = classify(message)
        if isinstance(envelope, Request):
            return self._request(envelope.method, envelope.params, envelope.id)
        if isinstance(envelope, Notification):
            return self._take(self._notifications.get(envelope.method, []), None)
        if isinstance(envelope, Response):
            return self._take(self._responses.get(_id_key(envelope.id), []), None)
        return Reply()

    # --- the rules ---------------------------------------------------------------------------

    def _first_free(self, candidates: list[int]) -> int | None:
        return next((index for index in candidates if index not in self._matched), None)

    def _take(self, candidates: list[int], live_id: Any) -> Reply:
        index = self._first_free(candidates)
        if index is None:
            return Reply()
        return self._match(index, live_id)

    def _match(self, index: int, live_id: Any) -> Reply:
        cue = self.script.cues[index]
        self._matched.add(index)
        if live_id is not NO_ID:
            self._live_ids[index] = live_id
        due = list(cue.outputs)
        answer = self._answer_of.get(index)
        if answer is not None and answer not in due and self.script.outputs[answer].gate in self._matched:
            due.append(answer)  # an answer gated by a host message matched before its request
        ready = [i for i in sorted(due) if i not in self._written and self._ready(i)]
        reply = self._reply(ready, cue)
        return Reply(reply.writes, cue.ends, reply.skipped)

    def _ready(self, output_index: int) -> bool:
        output = self.script.outputs[output_index]
        return (output.gate < 0 or output.gate in self._matched) and (
            output.answers is None or output.answers in self._matched
        )

    def _request(self, method: str, params: object, live_id: Any) -> Reply | Mismatch:
        key = _key(method, params)
        exact = self._first_free(self._by_key.get(key, []))
        unknown = self._first_free(self._unknown.get(method, []))
        found = [index for index in (exact, unknown) if index is not None]
        if found:
            index = min(found)
            self._last[key] = index
            return self._match(index, live_id)
        last = self._last.get(key)
        if last is None and method == "ping":
            # A host pings when it likes (a stall watch, a keepalive): never a difference.
            return Reply((Write(0, message={"jsonrpc": "2.0", "id": live_id, "result": {}}),))
        if last is not None:
            answer = self._answer_of.get(last)
            if answer is None:
                return Reply()
            return self._reply([answer], self.script.cues[last], live_id=live_id, repeat=True)
        return self._mismatch(method, params, live_id)

    def _mismatch(self, method: str, params: object, live_id: Any) -> Mismatch:
        recorded = self._by_method.get(method, [])
        expected = self._first_free(recorded)
        if expected is None and recorded:
            expected = recorded[-1]
        if expected is None:
            sentence = (
                f"request {method} (live id {shown(live_id)}) differs from the recording: the recording "
                f"of server {self.script.server} has no {method} request"
            )
        else:
            cue = self.script.cues[expected]
            difference = first_difference(
                {"params": match_params(method, cue.params)}, {"params": match_params(method, params)}
            )
            what = difference.sentence() if difference is not None else "the same params"
            sentence = (
                f"request {method} (live id {shown(live_id)}) differs from the recording {what}; "
                f"expected the recorded {method} of entry seq {cue.seq} (line {cue.line})"
            )
        answer = {
            "jsonrpc": "2.0",
            "id": live_id,
            "error": {"code": int(ErrorCode.INTERNAL_ERROR), "message": f"mcpl-host replay: {sentence}"},
        }
        return Mismatch(sentence, answer)

    def _reply(
        self, indexes: list[int], cue: Cue | None, *, live_id: Any = NO_ID, repeat: bool = False
    ) -> Reply:
        writes: list[Write] = []
        skipped: list[str] = []
        first = self.script.outputs[indexes[0]].t if indexes else 0.0
        previous = cue.t if cue is not None else first
        for index in indexes:
            output = self.script.outputs[index]
            if not repeat:
                self._written.add(index)
            delay = min(self.max_gap_seconds, max(0.0, output.t - previous)) if self.keep_timing else 0.0
            previous = output.t
            write = self._write(output, delay, live_id)
            if write is None:
                skipped.append(
                    f"entry seq {output.seq}: the recording omitted this {output.method or 'message'} "
                    f"({output.omitted} bytes); not written"
                )
            else:
                writes.append(write)
        return Reply(tuple(writes), False, tuple(skipped))

    def _write(self, output: Output, delay: float, live_id: Any) -> Write | None:
        if output.text is not None:
            return Write(output.seq, delay, text=output.text)
        if output.answers is not None:
            the_id = live_id if live_id is not NO_ID else self._live_ids.get(output.answers, NO_ID)
            if output.message is None:
                return Write(output.seq, delay, message={
                    "jsonrpc": "2.0",
                    "id": the_id,
                    "error": {
                        "code": int(ErrorCode.INTERNAL_ERROR),
                        "message": f"mcpl-host replay: the recording omitted this answer ({output.omitted} bytes)",
                    },
                })  # fmt: skip
            message = dict(output.message)
            message["id"] = the_id
            return Write(output.seq, delay, message=message)
        if output.message is None:
            return None
        return Write(output.seq, delay, message=output.message)
