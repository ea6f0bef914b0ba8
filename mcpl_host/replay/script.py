"""A recording's server side as a script. Pure: lines in, a ``Script`` out.

The recording is the JSON Lines file ``mcpl_host/recording.py`` writes (format
``mcpl-host-recording``, version 1; its schema is ``mcpl_host/recording.schema.json``): a
header line, then entries with ``seq``, ``t`` (seconds), ``server``, ``connection``,
``kind``. This module reads the entries of one server (``read_script``):

- every ``sent`` entry (host -> server) is a ``Cue``: a request, a notification or a
  response (the host's answer to a request of the server), with its method, params and id
  as recorded (a ``sent`` entry whose message was omitted for its size keeps its method and
  id; its params are unknown, ``params_known`` False);
- every ``received`` entry (server -> host) is an ``Output``, *gated* by the last cue before
  it in the recording (docs/protocol.md RP4): the replay writes it once that cue has been
  matched. An output that answers a request of the host names that request's cue
  (``answers``): the same connection and the same id, the first cue of that id still
  unanswered (ids are unique per connection while pending, JSON-RPC 2.0 §4). A ``received``
  entry that was not JSON keeps its ``text``; one omitted for its size keeps ``omitted``
  (its bytes), its ``method`` and ``id``.
- a recorded connection followed by a later one of the same server (a restart, the era
  probe's new transport) *ends* after its last cue (``Cue.ends``; RP7).

Errors: ``RecordingError`` (a ``ValueError``) with one sentence naming the line: not a
recording, a version this reader does not know, an entry that is not an object, no entry
for the server, several servers and none chosen (``server_names`` lists them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from mcpl_host.jsonrpc.envelope import NO_ID, Notification, Request, Response, classify
from mcpl_host.jsonrpc.values import is_object
from mcpl_host.recording import RecordingError, numbered_entries

__all__ = [
    "Cue",
    "CueKind",
    "Output",
    "RecordingError",
    "Script",
    "read_script",
    "server_names",
]

CueKind = Literal["request", "notification", "response", "other"]


@dataclass(frozen=True, slots=True)
class Output:
    """One line the recorded server wrote: ``message`` (a JSON-RPC message) or ``text`` (a
    line that was not JSON), or neither when the recording ``omitted`` it (its bytes).
    ``seq`` and ``t`` (seconds) are the entry's; ``gate`` the index of the cue it follows
    (-1: before any); ``answers`` the index of the request cue it answers (None: a server
    request or notification, or an answer to nothing recorded)."""

    seq: int
    t: float
    gate: int
    message: Any = None
    text: str | None = None
    omitted: int | None = None
    answers: int | None = None
    method: str | None = None


@dataclass(frozen=True, slots=True)
class Cue:
    """One message the recorded host sent. ``index`` its place among the cues, ``seq``/``t``
    the entry's, ``connection`` the recorded connection, ``kind``, ``method``, ``params``
    (None when absent), ``params_known`` (False when the recording omitted the message),
    ``id`` (``NO_ID`` for a notification), ``outputs`` the indexes (into
    ``Script.outputs``) of the lines gated by it, ``ends`` True when the recorded
    connection ended after it and a later one followed (RP7)."""

    index: int
    seq: int
    t: float
    connection: int
    kind: CueKind
    method: str | None
    params: Any
    id: Any
    params_known: bool = True
    outputs: tuple[int, ...] = ()
    ends: bool = False
    #: The line of the recording it was read from (1 is the header).
    line: int = 0


@dataclass(frozen=True, slots=True)
class Script:
    """One server's side of a recording: ``server`` its name, ``cues`` what the host sent,
    ``outputs`` what the server wrote (in recorded order), ``opening`` the outputs written
    before any cue."""

    server: str
    cues: tuple[Cue, ...]
    outputs: tuple[Output, ...]
    opening: tuple[int, ...] = field(default=())


def _entries(lines: Iterable[bytes]) -> list[dict[str, Any]]:
    """The recording's entries (``recording.numbered_entries``), each with its line number
    as ``_line`` (what a difference names)."""
    return [{**entry, "_line": number} for number, entry in numbered_entries(lines)]


def server_names(lines: Iterable[bytes]) -> list[str]:
    """The servers a recording holds, in the order they first appear."""
    names: dict[str, None] = {}
    for entry in _entries(lines):
        names.setdefault(entry["server"])
    return list(names)


def _number(value: object, default: float = 0.0) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def _connection(entry: dict[str, Any]) -> int:
    value = entry.get("connection")
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def _cue(index: int, entry: dict[str, Any]) -> Cue:
    seq, t, connection = int(_number(entry.get("seq"))), _number(entry.get("t")), _connection(entry)
    if "message" not in entry:
        method = entry.get("method")
        return Cue(
            index, seq, t, connection,
            "request" if "id" in entry and isinstance(method, str) else "notification" if isinstance(method, str) else "other",
            method if isinstance(method, str) else None, None, entry.get("id", NO_ID), params_known=False,
        )  # fmt: skip
    envelope = classify(entry["message"])
    if isinstance(envelope, Request):
        return Cue(index, seq, t, connection, "request", envelope.method, envelope.params, envelope.id)
    if isinstance(envelope, Notification):
        return Cue(index, seq, t, connection, "notification", envelope.method, envelope.params, NO_ID)
    if isinstance(envelope, Response):
        return Cue(index, seq, t, connection, "response", None, None, envelope.id)
    return Cue(index, seq, t, connection, "other", None, None, NO_ID)


def _output(entry: dict[str, Any], gate: int) -> Output:
    seq, t = int(_number(entry.get("seq"))), _number(entry.get("t"))
    if "message" in entry:
        message = entry["message"]
        method = message.get("method") if is_object(message) else None
        return Output(seq, t, gate, message=message, method=method if isinstance(method, str) else None)
    if isinstance(entry.get("text"), str):
        return Output(seq, t, gate, text=entry["text"])
    omitted = entry.get("omitted")
    size = omitted.get("bytes") if is_object(omitted) else None
    method = entry.get("method")
    return Output(
        seq, t, gate,
        omitted=size if isinstance(size, int) else 0,
        method=method if isinstance(method, str) else None,
    )  # fmt: skip


def _answered_id(output: Output, entry: dict[str, Any]) -> tuple[bool, Any]:
    """(True, id) when the output is a response (or an omitted one with an id and no method)."""
    if output.message is not None:
        envelope = classify(output.message)
        return (True, envelope.id) if isinstance(envelope, Response) else (False, NO_ID)
    if output.omitted is not None and output.method is None and "id" in entry:
        return True, entry["id"]
    return False, NO_ID


def _id_key(value: object) -> tuple[str, object]:
    return (
        type(value).__name__,
        value if isinstance(value, (str, int, float, bool)) or value is None else repr(value),
    )


def read_script(lines: Iterable[bytes], server: str | None = None) -> Script:
    """The script of ``server`` (None: the recording's only server) from the recording's
    ``lines`` (bytes, no newline needed). Raises ``RecordingError``."""
    lines = list(lines)
    if not lines:
        raise RecordingError("the recording is empty: not an mcpl-host recording")
    entries = _entries(lines)
    names = list(dict.fromkeys(entry["server"] for entry in entries))
    if server is None:
        if len(names) != 1:
            raise RecordingError(
                f"the recording holds {len(names)} servers ({', '.join(names) or 'none'}): name one with --server"
                if names
                else "the recording holds no entry of any server"
            )
        chosen = names[0]
    elif server not in names:
        raise RecordingError(
            f"the recording has no server {server!r} (it holds: {', '.join(names) or 'none'})"
        )
    else:
        chosen = server
    mine = [entry for entry in entries if entry["server"] == chosen]
    cues: list[Cue] = []
    outputs: list[Output] = []
    gated: dict[int, list[int]] = {}
    #: (connection, id key) -> index of the request cue still unanswered.
    pending: dict[tuple[int, tuple[str, object]], list[int]] = {}
    for entry in mine:
        kind = entry["kind"]
        if kind == "sent":
            cue = _cue(len(cues), entry)
            cues.append(cue)
            if cue.kind == "request":
                pending.setdefault((cue.connection, _id_key(cue.id)), []).append(cue.index)
            cues[-1] = dataclasses.replace(cue, line=entry["_line"])
        elif kind == "received":
            gate = len(cues) - 1
            output = _output(entry, gate)
            is_answer, answered = _answered_id(output, entry)
            if is_answer:
                waiting = pending.get((_connection(entry), _id_key(answered)))
                if waiting:
                    output = Output(
                        output.seq, output.t, gate, output.message, output.text, output.omitted,
                        answers=waiting.pop(0), method=output.method,
                    )  # fmt: skip
            gated.setdefault(gate, []).append(len(outputs))
            outputs.append(output)
    last_of: dict[int, int] = {}
    for cue in cues:
        last_of[cue.connection] = cue.index
    later = sorted(last_of)
    ending = {last_of[c] for c in later[:-1]}
    finished = tuple(
        Cue(
            cue.index,
            cue.seq,
            cue.t,
            cue.connection,
            cue.kind,
            cue.method,
            cue.params,
            cue.id,
            cue.params_known,
            tuple(gated.get(cue.index, ())),
            cue.index in ending,
            cue.line,
        )  # fmt: skip
        for cue in cues
    )
    return Script(chosen, finished, tuple(outputs), tuple(gated.get(-1, ())))
