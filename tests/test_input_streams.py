"""The RFC-009 lease state machine (``mcpl_host.mcpl.input_streams``), by plain calls.

Each trace of ``tests/vectors/mcpl-spec/input-stream-vectors.json`` is replayed against a
fresh ``InputStreams`` with the trace's host facts (``defaults`` shallowly overridden by
``config``, then each step's ``control``): the decision alone, no I/O. The same traces run
through the real host in ``tests/test_vectors_input_streams.py``, which records the vectors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mcpl_host.jsonrpc.errors import HandlerError
from mcpl_host.mcpl.grants import GrantPolicy, expand_advertisement
from mcpl_host.mcpl.input_streams import (
    INPUT_STREAM_PATHS,
    Facts,
    InputStreams,
    Settings,
    advertises_input_streaming,
    content_digest,
    facts_channel,
    metadata_only,
    rejected,
)

FILE = json.loads(
    (Path(__file__).parent / "vectors" / "mcpl-spec" / "input-stream-vectors.json").read_text(
        encoding="utf-8"
    )
)
TRACES: list[dict[str, Any]] = FILE["traces"]
#: The one advertisement vector read differently (docs/protocol.md IS1).
READ_DIFFERENTLY = "object-does-not-reinterpret-legacy-leaf"


def subset(expected: object, actual: object) -> bool:
    """The file's comparison: non-empty objects select fields recursively; empty objects and
    arrays, and everything else, compare exactly."""
    if isinstance(expected, dict) and expected:
        return isinstance(actual, dict) and all(
            k in actual and subset(v, actual[k]) for k, v in expected.items()
        )
    if isinstance(expected, list) and expected:
        return (
            isinstance(actual, list)
            and len(actual) == len(expected)
            and all(subset(e, a) for e, a in zip(expected, actual, strict=True))
        )
    return expected == actual


class Env:
    """The trace's host environment, as ``Facts``."""

    def __init__(self, trace: dict[str, Any]) -> None:
        self.env: dict[str, Any] = {**FILE["defaults"], **trace.get("config", {})}

    def control(self, control: dict[str, Any]) -> None:
        self.env.update(control)

    def settings(self) -> Settings:
        e = self.env
        return Settings(e["maxChars"], e["maxUpdateHz"], e["maxDurationMs"], e["maxStreams"], e["mode"])

    def facts(self) -> Facts:
        e = self.env
        advertised = expand_advertisement({"version": "0.5", **e["advertisement"]})
        grant = GrantPolicy(grant=tuple(e["grants"])).compute(advertised)  # the one matcher
        granted = frozenset(path for path in INPUT_STREAM_PATHS if grant.allows(path))
        channels = {
            cid: facts_channel(
                c["identity"],
                c["generation"],
                direction=c["direction"],
                permitted=c["permitted"],
                senders=c["senders"],
            )
            for cid, c in e["channels"].items()
        }
        return Facts(
            e["now"], e["now"], e["transportEpoch"], e["serverPrincipal"], granted, e["ready"], channels
        )


def same_answer(answer: dict[str, Any], expect: dict[str, Any]) -> bool:
    """The result exactly; an error by code and ``data`` (reason or capability): error
    messages are no interoperability requirement (conformance/README.md §7)."""
    if "result" in expect:
        return answer.get("result") == expect["result"]
    error, want = answer.get("error") or {}, expect["error"]
    data = error.get("data") if isinstance(error.get("data"), dict) else {}
    return error.get("code") == want["code"] and all(
        data.get(k) == v for k, v in (want.get("data") or {}).items()
    )


def run_pure(trace: dict[str, Any]) -> list[str]:
    env = Env(trace)
    machine = InputStreams(env.settings())
    messages: list[dict[str, Any]] = []
    problems: list[str] = []
    for number, step in enumerate(trace["steps"]):
        if "control" in step:
            env.control(step["control"])
            machine.reconcile(env.facts())
        if "prepare" in step:
            machine.prepare(step["prepare"])
        if "method" in step:
            method, params = step["method"], step["params"]
            facts = env.facts()
            answer: dict[str, Any]
            try:
                if method == "channels/input/open":
                    answer = {"result": machine.open(params, facts)}
                elif method == "channels/input/update":
                    answer = {"result": machine.update(params, facts)}
                elif method == "channels/input/abort":
                    answer = {"result": machine.abort(params, facts)}
                else:
                    result, message = machine.complete(params, facts)
                    if message is not None:
                        if not env.env["finalAccepted"]:
                            raise rejected("final_rejected")
                        result = machine.commit(params, result, None)
                        messages.append(message)
                    answer = {"result": result}
            except HandlerError as error:
                answer = {"error": {"code": int(error.code), "data": error.data}}
            if not same_answer(answer, step["expect"]):
                problems.append(f"step {number}: {answer} != {step['expect']}")
        if "expectState" in step:
            state = {**machine.snapshot(), "messages": messages}
            if not subset(step["expectState"], state):
                problems.append(f"step {number}: state {state} !~ {step['expectState']}")
    return problems


@pytest.mark.parametrize("trace", TRACES, ids=[t["name"] for t in TRACES])
def test_trace_by_plain_calls(trace: dict[str, Any]) -> None:
    assert run_pure(trace) == []


@pytest.mark.parametrize("vector", FILE["advertisements"], ids=[v["name"] for v in FILE["advertisements"]])
def test_advertisement_by_plain_calls(vector: dict[str, Any]) -> None:
    advertised = expand_advertisement({"version": "0.5", **vector["input"]})
    incoming = vector["expect"]["incoming"]
    if vector["name"] == READ_DIFFERENTLY:
        incoming = True  # an object at a vocabulary node advertises the node (docs/protocol.md IS1)
    assert ("channels.incoming" in advertised) == incoming
    assert advertises_input_streaming(vector["input"]) == vector["expect"]["streaming"]
    assert ("channels.incoming.streaming" in advertised) == vector["expect"]["streaming"]


def test_digest_is_over_utf8_bytes() -> None:
    assert content_digest("") == "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def test_committed_keys_are_bounded_and_the_oldest_leaves_first() -> None:
    """IS7: ``max_committed_keys`` bounds the memory; a newer key stays reserved."""
    machine = InputStreams(Settings(max_committed_keys=2))
    for n in range(3):
        machine.commit_key(("s", "c", f"m{n}"))
    assert not machine.key_reserved("s", "c", "m0")
    assert machine.key_reserved("s", "c", "m1") and machine.key_reserved("s", "c", "m2")


def test_events_and_logs_see_metadata_only() -> None:
    """RFC-009 §10 (IS11): no text, no digest, no display name."""
    params = {"streamId": "s", "revision": 2, "text": "🙂a", "sender": {"id": "alice", "name": "Alice"}}
    assert metadata_only(params) == {
        "streamId": "s",
        "revision": 2,
        "textChars": 2,
        "sender": {"id": "alice"},
    }
    assert metadata_only({"status": "completed", "contentDigest": "sha256:00"}) == {"status": "completed"}


def test_the_end_of_a_transport_aborts_its_open_streams_only() -> None:
    """RFC-009 §8 (IS5): ``end_epoch`` of the current epoch; another epoch's end changes nothing."""
    env = Env(TRACES[0])
    machine = InputStreams(env.settings())
    machine.open(TRACES[0]["steps"][0]["params"], env.facts())
    assert machine.end_epoch("epoch-0") == []
    (ended,) = machine.end_epoch("epoch-1")
    assert (ended.stream_id, ended.status, ended.text) == ("s1", "aborted", None)
    assert machine.snapshot()["streams"] == {"s1": {"status": "aborted", "revision": 0, "provisional": None}}


def test_an_aborted_stream_keeps_its_key_from_ordinary_messages_for_the_epoch() -> None:
    """RFC-009 §4.3 (IS7): the reservation outlives the abort; the next epoch frees it."""
    trace = next(t for t in TRACES if t["name"] == "abort-is-not-speech")
    env = Env(trace)
    machine = InputStreams(env.settings())
    opened = trace["steps"][0]["params"]
    lease = machine.open(opened, env.facts())
    envelope = {k: opened[k] for k in ("streamId", "channelId", "contentType", "startedAt")}
    envelope.update(
        transportEpoch=lease["transportEpoch"], leaseId=lease["leaseId"], expiresAt=lease["expiresAt"]
    )
    machine.abort({**envelope, "senderId": "alice", "revision": 1, "reason": "cancelled"}, env.facts())
    assert machine.key_reserved("server-1", "channel-lobby", opened["messageId"])
    env.control({"transportEpoch": "epoch-2"})
    machine.reconcile(env.facts())
    assert not machine.key_reserved("server-1", "channel-lobby", opened["messageId"])
