"""``check --against FILE``: which recorded requests a live server is asked again, and the
first place its answers differ from the recording. Pure (docs/protocol.md RP8).

- ``requests_to_ask(script)``: every recorded request of the host, in recorded order, that
  the recording shows answered (result or error, not omitted), except those the check's
  own session makes or that depend on it: ``initialize`` and ``server/discover`` (the
  handshake; its answer is compared from the check's own ``initialize``),
  ``featureSets/update`` (the check's policy is its own) and ``subscriptions/listen``
  (long-lived). Each is asked with its recorded params without ``_meta`` (RP2).
- ``first_answer_difference(recorded_initialize, live_initialize, asked)``: the first
  difference, as one sentence, or None. The initialize answers are compared on
  ``serverInfo``, ``capabilities`` and ``instructions`` (the protocol version depends on the
  host's offer); each asked request on its whole answer (``result``, or ``error``), the
  id left out. The place is a JSON Pointer (``diff.first_difference``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mcpl_host.jsonrpc.values import is_object
from mcpl_host.replay.diff import MISSING, first_difference
from mcpl_host.replay.matcher import match_params
from mcpl_host.replay.script import Script

__all__ = [
    "NOT_ASKED",
    "Asked",
    "RecordedRequest",
    "first_answer_difference",
    "recorded_initialize",
    "requests_to_ask",
]

#: Recorded requests ``check --against`` does not ask again.
NOT_ASKED = frozenset({"initialize", "server/discover", "featureSets/update", "subscriptions/listen"})
#: The members of an initialize result compared.
INITIALIZE_MEMBERS = ("serverInfo", "capabilities", "instructions")


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """A recorded request to ask again: ``method``, ``params`` (as asked: no ``_meta``),
    ``answer`` (``{"result": ...}`` or ``{"error": ...}`` as recorded), its entry's ``seq``
    and ``line``."""

    method: str
    params: Any
    answer: dict[str, Any]
    seq: int
    line: int


@dataclass(frozen=True, slots=True)
class Asked:
    """A recorded request and the live answer: ``live`` is ``{"result": ...}``,
    ``{"error": ...}``, or ``{"failure": sentence}`` when none came."""

    recorded: RecordedRequest
    live: dict[str, Any]


def _answer(message: object) -> dict[str, Any] | None:
    if not is_object(message):
        return None
    if "result" in message:
        return {"result": message["result"]}
    if "error" in message:
        return {"error": message["error"]}
    return None


def _answers(script: Script) -> dict[int, dict[str, Any]]:
    found: dict[int, dict[str, Any]] = {}
    for output in script.outputs:
        if output.answers is not None and output.answers not in found:
            answer = _answer(output.message)
            if answer is not None:
                found[output.answers] = answer
    return found


def requests_to_ask(script: Script) -> list[RecordedRequest]:
    """The recorded requests to ask the live server again, in recorded order (see module)."""
    answers = _answers(script)
    return [
        RecordedRequest(
            cue.method, match_params(cue.method, cue.params), answers[cue.index], cue.seq, cue.line
        )
        for cue in script.cues
        if cue.kind == "request"
        and cue.method is not None
        and cue.method not in NOT_ASKED
        and cue.params_known
        and cue.index in answers
    ]


def recorded_initialize(script: Script) -> RecordedRequest | None:
    """The first recorded ``initialize`` that was answered with a result."""
    answers = _answers(script)
    for cue in script.cues:
        answer = answers.get(cue.index)
        if cue.method == "initialize" and answer is not None and "result" in answer:
            return RecordedRequest("initialize", None, answer, cue.seq, cue.line)
    return None


def _initialize_part(result: object) -> dict[str, Any]:
    members = result if is_object(result) else {}
    return {name: members.get(name, MISSING) for name in INITIALIZE_MEMBERS if name in members}


def first_answer_difference(
    recorded_init: RecordedRequest | None, live_init: object, asked: Sequence[Asked]
) -> str | None:
    """The first difference between the recording and the live answers, as one sentence
    naming the request, its place in the recording and the JSON Pointer (None: the same)."""
    if recorded_init is not None:
        found = first_difference(
            {"result": _initialize_part(recorded_init.answer["result"])},
            {"result": _initialize_part(live_init)},
        )
        if found is not None:
            return (
                f"initialize (recorded entry seq {recorded_init.seq}, line {recorded_init.line}) "
                f"is answered differently {found.sentence()}"
            )
    for item in asked:
        found = first_difference(item.recorded.answer, item.live)
        if found is not None:
            request = item.recorded
            return (
                f"{request.method} (recorded entry seq {request.seq}, line {request.line}) "
                f"is answered differently {found.sentence()}"
            )
    return None
