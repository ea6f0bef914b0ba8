"""The pure core of ``mcpl-host check``: the registry (ids, selection, expected failures, exit
status), the transcript's classification of lines, and rules judged over hand-built
evidence (plain calls, no I/O)."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest

from mcpl_host.check import registry, rules
from mcpl_host.check.evidence import (
    MainEvidence,
    RawEvidence,
    RequestOutcome,
    RunEvidence,
    Transcript,
    classify_line,
)
from mcpl_host.check.registry import CATEGORIES, CHECKS, CHECKS_BY_ID, CheckResult
from mcpl_host.check.runner import example_arguments
from mcpl_host.jsonrpc.envelope import NO_ID
from mcpl_host.jsonrpc.framing import LineTooLong
from mcpl_host.logging import Redactor
from mcpl_host.mcpl.manifest import manifest_digest

# --- the registry ----------------------------------------------------------------------------


def test_every_check_has_one_rule_and_a_known_category() -> None:
    assert list(rules.RULES) == [spec.id for spec in CHECKS]
    assert len(CHECKS_BY_ID) == len(CHECKS)
    assert {spec.category for spec in CHECKS} <= set(CATEGORIES)
    assert all(spec.spec and spec.title and spec.steps for spec in CHECKS)


def test_every_mcpl_check_says_what_strict_and_04_hosts_do() -> None:
    for spec in CHECKS:
        assert (spec.compat is not None) == (spec.category == "mcpl"), spec.id


def test_the_ids_the_issue_names_exist() -> None:
    named = """init.answers init.protocol-version jsonrpc.ping jsonrpc.unknown-method
    jsonrpc.invalid-request jsonrpc.id-null stdout.only-json tools.list.schema
    tools.list.pagination tools.call.unknown-tool tools.call.output-schema
    mcpl.advertisement.shape mcpl.version mcpl.revision.digest mcpl.policy.request-form
    mcpl.policy.receipt.shape mcpl.pre-policy.quiet mcpl.reduction.respected
    mcpl.uses.vocabulary mcpl.uses.complete push.params push.featureset-declared
    channels.register.shape shutdown.stdin-close""".split()
    assert set(named) <= set(CHECKS_BY_ID)


def test_select_by_id_and_category_globs() -> None:
    chosen, unmatched = registry.select(["tools", "init.*"], ["init.answers"])
    ids = {spec.id for spec in chosen}
    assert "tools.list.schema" in ids and "init.protocol-version" in ids
    assert "init.answers" not in ids and "jsonrpc.ping" not in ids
    assert unmatched == []
    assert registry.select(["tols"], ["nothing.*"])[1] == ["tols", "nothing.*"]
    everything, _ = registry.select()
    assert everything == list(CHECKS)


def test_steps_needed_leave_out_checks_the_transport_has_not() -> None:
    specs = [CHECKS_BY_ID["stdout.only-json"], CHECKS_BY_ID["shutdown.sigterm"]]
    assert registry.steps_needed(specs, "stdio") == {"main", "raw", "sigterm"}
    assert registry.steps_needed(specs, "websocket") == frozenset()


def test_parse_expected_failures() -> None:
    text = "# header\n\ntools.list.schema\n  jsonrpc.id-null   # the SDK drops it\n"
    assert registry.parse_expected_failures(text) == {"tools.list.schema", "jsonrpc.id-null"}
    with pytest.raises(registry.ExpectedFailuresError, match=r"known\.txt, line 2: 'tools\.list' is not"):
        registry.parse_expected_failures("jsonrpc.ping\ntools.list\n", "known.txt")
    with pytest.raises(registry.ExpectedFailuresError, match="one check id per line"):
        registry.parse_expected_failures("jsonrpc.ping jsonrpc.id-null\n")


def _result(check_id: str, status: registry.Status) -> CheckResult:
    return CheckResult(CHECKS_BY_ID[check_id], status, "because")


@pytest.mark.parametrize(
    ("status", "listed", "expected", "stale", "exit_status"),
    [
        ("failed", False, False, False, 1),
        ("failed", True, True, False, 0),
        ("passed", True, False, True, 1),
        ("warned", True, False, True, 1),
        ("skipped", True, False, False, 0),
        ("passed", False, False, False, 0),
        ("warned", False, False, False, 0),
    ],
)
def test_expected_failures_and_the_exit_status(
    status: registry.Status, listed: bool, expected: bool, stale: bool, exit_status: int
) -> None:
    results = [_result("jsonrpc.ping", status), _result("jsonrpc.crlf", "passed")]
    judged = registry.judge_expected(results, frozenset({"jsonrpc.ping"} if listed else ()))
    assert (judged[0].expected, judged[0].stale) == (expected, stale)
    assert registry.exit_status(judged) == exit_status
    assert registry.summary(judged).ok is (exit_status == 0)


def test_example_arguments_never_guess() -> None:
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "enum": ["Paris", "Oslo"]},
            "units": {"type": "string", "default": "metric"},
            "kind": {"const": "now"},
            "note": {"type": "string"},
        },
        "required": ["city", "units", "kind"],
    }
    assert example_arguments(schema) == {"city": "Paris", "units": "metric", "kind": "now"}
    assert example_arguments({"type": "object"}) == {}
    assert example_arguments({**schema, "required": ["note"]}) is None
    assert example_arguments({"type": "object", "required": ["x"]}) is None
    assert example_arguments("not a schema") is None


# --- the transcript -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "kind", "method", "id_"),
    [
        (b'{"jsonrpc":"2.0","id":1,"method":"ping"}', "request", "ping", 1),
        (b'{"jsonrpc":"2.0","id":null,"method":"ping"}', "request", "ping", None),
        (b'{"jsonrpc":"2.0","method":"notifications/message","params":{}}', "notification", "notifications/message", NO_ID),
        (b'{"jsonrpc":"2.0","id":"a","result":{}}', "response", None, "a"),
        (b'{"jsonrpc":"2.0","error":{"code":-32700,"message":"x"}}', "response", None, NO_ID),
        (b'{"jsonrpc":"2.0","id":"q","method":7}', "invalid", None, "q"),
        (b"[1,2]", "unrelated", None, NO_ID),
        (b"server starting", "not-json", None, NO_ID),
    ],
)  # fmt: skip
def test_lines_are_classified_by_the_envelope_rule(
    line: bytes, kind: str, method: str | None, id_: Any
) -> None:
    fields = classify_line(line, max_message_bytes=1024)
    assert fields["kind"] == kind
    assert fields.get("method") == method
    assert fields.get("id", NO_ID) == id_ or (fields.get("id", NO_ID) is NO_ID and id_ is NO_ID)


def test_too_long_lines_keep_their_id_and_big_bodies_are_not_kept() -> None:
    too_long = classify_line(
        LineTooLong(10, 50, b'{"jsonrpc":"2.0","id":7,"result":{"x":"'), max_message_bytes=1024
    )
    assert too_long["kind"] == "too-long" and too_long["id"] == 7
    big = b'{"jsonrpc":"2.0","id":3,"result":{"x":"' + b"y" * 2000 + b'"}}'
    fields = classify_line(big, max_message_bytes=1024)
    assert fields["kind"] == "response" and fields["id"] == 3 and fields["message"] is None


def test_the_transcript_is_bounded() -> None:
    from mcpl_host.limits import Limits

    transcript = Transcript(limits=Limits(max_check_messages=3))
    for n in range(5):
        transcript.record("in", b'{"jsonrpc":"2.0","method":"x"}', float(n))
    assert len(transcript.messages) == 3 and transcript.not_kept == 2 and transcript.lines == 5


# --- rules over hand-built evidence -------------------------------------------------------------


def _line(value: Any) -> bytes:
    return value if isinstance(value, bytes) else orjson.dumps(value)


def _transcript(*lines: tuple[str, Any]) -> Transcript:
    transcript = Transcript()
    for n, (direction, value) in enumerate(lines):
        transcript.record("in" if direction == "in" else "out", _line(value), float(n))
    return transcript


def _rpc(**members: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", **members}


MANIFEST = {
    "version": "0.5",
    "pushEvents": True,
    "featureSets": {"a.events": {"description": "events", "uses": ["pushEvents"]}},
}
INIT = [
    ("out", _rpc(id=1, method="initialize", params={})),
    ("in", _rpc(id=1, result={"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {"name": "s", "version": "1"}})),
    ("out", _rpc(method="notifications/initialized")),
]  # fmt: skip
PUSH = _rpc(
    id=9,
    method="push/event",
    params={
        "featureSet": "a.events",
        "eventId": "e",
        "timestamp": "2025-01-01T00:00:00Z",
        "payload": {"content": [{"type": "text", "text": "x"}]},
    },
)


def _mcpl_run(*lines: tuple[str, Any], manifest: dict[str, Any] | None = None) -> RunEvidence:
    main = MainEvidence(
        _transcript(*INIT, *lines),
        manifest=MANIFEST if manifest is None else manifest,
        mcpl_state="ready",
        feature_sets={"a.events": ("pushEvents",)},
        enabled_feature_sets=frozenset({"a.events"}),
        advertised=frozenset({"pushEvents"}),
        granted=frozenset({"pushEvents"}),
    )
    return RunEvidence(transport="stdio", main=main)


def test_pre_policy_quiet_follows_the_server_s_own_order() -> None:
    policy = (
        "out",
        _rpc(id=2, method="featureSets/update", params={"effectiveCapabilities": ["pushEvents"]}),
    )
    receipt = ("in", _rpc(id=2, result={"accepted": True}))
    quiet = rules.mcpl_pre_policy_quiet(_mcpl_run(policy, receipt, ("in", PUSH)))
    assert quiet.status == "passed"
    early = rules.mcpl_pre_policy_quiet(_mcpl_run(policy, ("in", PUSH), receipt))
    assert early.status == "failed" and "before its receipt" in early.reason
    refused = rules.mcpl_pre_policy_quiet(
        _mcpl_run(policy, ("in", _rpc(id=2, error={"code": -32601, "message": "no"})), ("in", PUSH))
    )
    assert refused.status == "failed" and "never came into force" in refused.reason


@pytest.mark.parametrize(
    ("receipt", "problem"),
    [
        ({"accepted": True}, None),
        ({"accepted": True, "mode": "degraded"}, "mode is present although nothing degraded"),
        ({"accepted": False, "reason": "no"}, "without the required fallback"),
        ({"accepted": False, "fallback": "maybe"}, "neither"),
        ({"accepted": True, "mode": "degraded", "unavailableFeatures": [{"featureSet": "a"}]}, "without effect"),
        ({"accepted": True, "mode": "degraded", "unavailableFeatures": [{"featureSet": "a", "effect": "disabled"}]}, None),
    ],
)  # fmt: skip
def test_receipt_shape(receipt: dict[str, Any], problem: str | None) -> None:
    run = _mcpl_run(
        ("out", _rpc(id=2, method="featureSets/update", params={})), ("in", _rpc(id=2, result=receipt))
    )
    verdict = rules.mcpl_policy_receipt_shape(run)
    if problem is None:
        assert verdict.status == "passed", verdict
    else:
        assert verdict.status == "failed" and problem in verdict.reason, verdict


def test_server_ids_reused_while_pending_or_naming_no_request_of_ours() -> None:
    ping = _rpc(id="p", method="ping")
    answer = ("out", _rpc(id="p", result={}))
    assert rules.jsonrpc_server_ids(_mcpl_run(("in", ping), answer, ("in", ping), answer)).status == "passed"
    reused = rules.jsonrpc_server_ids(_mcpl_run(("in", ping), ("in", ping), answer, answer))
    assert reused.status == "failed" and "reused while" in reused.reason
    stray = rules.jsonrpc_server_ids(_mcpl_run(("in", _rpc(id=77, result={}))))
    assert stray.status == "failed" and "77" in stray.reason
    bad_id = rules.jsonrpc_server_ids(_mcpl_run(("in", _rpc(id=1.5, method="ping"))))
    assert bad_id.status == "failed" and "not a string or an integer" in bad_id.reason


def test_revision_digest() -> None:
    good = {**MANIFEST, "revision": manifest_digest(MANIFEST)}
    assert rules.mcpl_revision_digest(_mcpl_run(manifest=good)).status == "passed"
    wrong = {**MANIFEST, "revision": "sha256:" + "A" * 43}
    assert rules.mcpl_revision_digest(_mcpl_run(manifest=wrong)).status == "failed"
    assert rules.mcpl_revision_digest(_mcpl_run()).status == "skipped"
    unusable = {**good, "featureSets": {"a b": {"description": "x", "uses": ["pushEvents"]}}}
    verdict = rules.mcpl_revision_digest(_mcpl_run(manifest=unusable))
    assert verdict.status == "failed" and "identifier_charset" in verdict.reason


def test_uses_vocabulary_and_completeness() -> None:
    manifest = {
        **MANIFEST,
        "featureSets": {"a.events": {"description": "e", "uses": ["pushEvents", "branches"]}},
    }
    verdict = rules.mcpl_uses_vocabulary(_mcpl_run(manifest=manifest))
    assert verdict.status == "failed" and "branches" in verdict.reason
    run = _mcpl_run(("in", PUSH))
    assert rules.mcpl_uses_complete(run).status == "passed"
    assert run.main is not None
    run.main.feature_sets = {"a.events": ("tools",)}
    incomplete = rules.mcpl_uses_complete(run)
    assert incomplete.status == "failed" and "pushEvents" in incomplete.reason


def test_stdout_only_json_counts_text_and_messages_without_the_version() -> None:
    run = _mcpl_run(("in", b"hello there"), ("in", {"id": 5, "method": "ping"}))
    verdict = rules.stdout_only_json(run)
    assert verdict.status == "failed" and verdict.reason.startswith("2 lines")


def test_probes_with_their_answers() -> None:
    raw = RawEvidence(Transcript())
    raw.probes["unknown-method"] = RequestOutcome("unknown-method", error={"code": -32601, "message": "x"})
    raw.probes["invalid-request"] = RequestOutcome("invalid-request", error={"code": -32700, "message": "x"})
    raw.probes["id-null"] = RequestOutcome("id-null", failure="no answer within 2 s")
    raw.probes["ping"] = RequestOutcome("ping", result={"pong": True})
    run = RunEvidence(transport="stdio", raw=raw)
    assert rules.jsonrpc_unknown_method(run).status == "passed"
    assert rules.jsonrpc_invalid_request(run).status == "warned"
    assert rules.jsonrpc_id_null(run).status == "failed"
    assert rules.jsonrpc_ping(run).status == "warned"


def test_evaluate_redacts_escapes_and_cuts_what_it_shows() -> None:
    secret = "hunter2-very-secret"
    run = _mcpl_run(("in", f"token {secret} \x1b[31m".encode() + b"x" * 2000))
    results = rules.evaluate(run, [CHECKS_BY_ID["stdout.only-json"]], Redactor([secret]))
    (evidence,) = results[0].evidence
    assert secret not in evidence and "[redacted]" in evidence
    assert "\x1b" not in evidence and "\\u001b" in evidence
    # cut at EVIDENCE_UNITS characters of what was sent (escapes are added after the cut)
    assert evidence.endswith("…") and evidence.count("x") < rules.EVIDENCE_UNITS


class CountingRedactor(Redactor):
    """A ``Redactor`` that counts the texts it is given."""

    def __init__(self, secrets: list[str]) -> None:
        super().__init__(secrets)
        self.texts = 0

    def redact(self, text: str) -> str:
        self.texts += 1
        return super().redact(text)


def _whole_then_cut(value: object, redactor: Redactor) -> str:
    """An evidence value redacted whole, then cut: what is shown of it must not change."""
    text = orjson.dumps(rules.redact_json(value, redactor)).decode()
    return rules.escape_text(text[: rules.EVIDENCE_UNITS] + "…", quotes=False)


def test_a_huge_evidence_value_is_shown_by_redacting_only_its_start() -> None:
    secret = "hunter2-very-secret"
    schema = {"type": "object", "description": f"key {secret}", "properties": {"a": {"type": "string"}}}
    listing = {"tools": [{"name": f"t{i}", "inputSchema": schema} for i in range(100_000)]}
    redactor = CountingRedactor([secret])
    shown = rules._evidence_text(listing, redactor)  # pyright: ignore[reportPrivateUsage]
    assert shown == _whole_then_cut(listing, Redactor([secret]))
    assert secret not in shown and "[redacted]" in shown
    assert redactor.texts < 500  # not the 800,000 strings and keys of the listing
    long_text = ["x" * 10_000, {"k": "y" * 10_000}]
    assert rules._evidence_text(long_text, None) == _whole_then_cut(long_text, Redactor())  # pyright: ignore[reportPrivateUsage]


def test_an_evidence_value_cut_short_by_its_redaction_still_says_it_was_cut() -> None:
    secret = "s" * 3000
    shown = rules._evidence_text([secret, "after"], Redactor([secret]))  # pyright: ignore[reportPrivateUsage]
    assert shown == '["[redacted]"]…'


def test_evaluate_skips_what_the_transport_has_not_and_survives_a_broken_rule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = RunEvidence(transport="websocket")
    (result,) = rules.evaluate(run, [CHECKS_BY_ID["shutdown.sigterm"]])
    assert result.status == "skipped" and "stdio only" in result.reason

    def broken(ev: RunEvidence) -> rules.Verdict:
        raise KeyError("boom")

    monkeypatch.setitem(rules.RULES, "jsonrpc.ping", broken)
    (result,) = rules.evaluate(run, [CHECKS_BY_ID["jsonrpc.ping"]])
    assert result.status == "failed" and "the check itself failed" in result.reason


def _discover(outcome: RequestOutcome | None) -> RunEvidence:
    raw = RawEvidence(Transcript())
    if outcome is not None:
        raw.probes["discover"] = outcome
    return RunEvidence(transport="stdio", raw=raw)


def test_init_discover_judges_the_answer_to_the_era_probe() -> None:
    good = {
        "resultType": "complete",
        "supportedVersions": ["2026-07-28"],
        "capabilities": {"tools": {}},
        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "s", "version": "1"}},
    }
    verdict = rules.init_discover(_discover(RequestOutcome("discover", result=good)))
    assert verdict.status == "passed" and verdict.reason.endswith("(2026-07-28)")
    legacy = rules.init_discover(
        _discover(RequestOutcome("discover", error={"code": -32601, "message": "x"}))
    )
    assert legacy.status == "passed" and "handshake-era" in legacy.reason
    modern = rules.init_discover(
        _discover(RequestOutcome("discover", error={"code": -32022, "message": "x"}))
    )
    assert modern.status == "passed" and "stateless revision" in modern.reason
    silent = rules.init_discover(_discover(RequestOutcome("discover", failure="no answer within 5 s")))
    assert silent.status == "warned" and "falls back to initialize" in silent.reason
    bare = {key: value for key, value in good.items() if key not in ("_meta", "resultType")}
    incomplete = rules.init_discover(_discover(RequestOutcome("discover", result=bare)))
    assert (
        incomplete.status == "warned"
        and "serverInfo" in incomplete.reason
        and "resultType" in incomplete.reason
    )
    broken = rules.init_discover(
        _discover(RequestOutcome("discover", result={"supportedVersions": "2026-07-28"}))
    )
    assert broken.status == "failed"
    assert "supportedVersions is not a non-empty array" in broken.reason and "capabilities" in broken.reason
    wrong_type = rules.init_discover(
        _discover(RequestOutcome("discover", result={**good, "resultType": "x"}))
    )
    assert wrong_type.status == "failed" and "resultType" in wrong_type.reason
    assert rules.init_discover(_discover(None)).status == "skipped"  # WebSocket, HTTP+SSE


def test_tools_observe_params_judged_by_rfc_007_schema() -> None:
    """``tools.observe.params`` (RFC-007 §6.1, §13): each ``tools/observe`` the server sent is
    judged by the one parser, schema only (64 rules and paths are the host's floor, not the
    schema's); none sent: skipped."""
    assert rules.tools_observe_params(_mcpl_run()).status == "skipped"
    good = _rpc(id=7, method="tools/observe", params={"rules": [{"match": {"class": "shell"}}] * 100})
    assert rules.tools_observe_params(_mcpl_run(("in", good))).status == "passed"
    bad = _rpc(id=8, method="tools/observe", params={"ruless": [], "rules": [{"match": {"module": "x"}}]})
    verdict = rules.tools_observe_params(_mcpl_run(("in", good), ("in", bad)))
    assert verdict.status == "failed"
    assert "ruless" in verdict.reason and "rules[0].match" in verdict.reason
    assert CHECKS_BY_ID["tools.observe.params"].spec == "MCPL RFC-007 §6.1, §6.6, §13"


@pytest.mark.parametrize(
    ("channels", "status", "words"),
    [
        ({"incoming": True, "inputStreaming": True}, "passed", "advertises input streaming"),
        ({"incoming": True}, "passed", "does not advertise"),
        ({"incoming": {"streaming": True}}, "warned", "nested"),
        ({"incoming": True, "incoming.streaming": True}, "warned", "literal"),
        ({"incoming": True, "inputStreaming": "yes"}, "warned", "not the boolean"),
        ({"inputStreaming": True}, "warned", "without channels.incoming"),
    ],
)  # fmt: skip
def test_input_streaming_is_advertised_only_by_the_explicit_member(
    channels: dict[str, Any], status: str, words: str
) -> None:
    """RFC-009 §2.1, §2.2 (experimental): ``mcpl.input-streaming``."""
    from mcpl_host.mcpl.grants import expand_advertisement

    manifest = {**MANIFEST, "channels": channels}
    run = _mcpl_run(manifest=manifest)
    assert run.main is not None
    run = RunEvidence(
        transport="stdio", main=dataclasses.replace(run.main, advertised=expand_advertisement(manifest))
    )
    verdict = rules.mcpl_input_streaming(run)
    assert verdict.status == status and words in verdict.reason, verdict
