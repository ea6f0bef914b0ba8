"""The rules of ``mcpl-host check``: one pure function per check id, over ``RunEvidence``.

Rules of this module (pure: no I/O, no clock, no logging):

- ``RULES`` maps every id of ``registry.CHECKS`` to a function ``(RunEvidence) -> Verdict``.
  A rule returns ``passed`` / ``failed`` / ``warned`` / ``skipped`` with one sentence and the
  evidence (the messages that show it, as sent: ``evaluate`` redacts, escapes and cuts them).
- A rule judges only what it saw: ``skipped`` when the server does not advertise what it
  needs, when the step it needs did not run or failed earlier (the handshake), or when the
  server sent nothing of the kind; ``failed`` when it saw the deviation itself (a request
  it needed went unanswered included: a host sees that failure too).
- Shapes are judged with the package's own rules where they exist (``mcpl.server_shapes``,
  ``mcpl.tags.validate_push_event``, ``mcpl.policy.read_receipt``, ``mcpl.feature_sets``,
  ``mcpl.manifest``), and with ``mcp.schema.json`` (``schemas``) for MCP results.
- ``evaluate`` applies the transport filter (``CheckSpec.transports``) and turns verdicts
  into ``CheckResult``s; evidence values are redacted with the server's redactor, cut at
  ``EVIDENCE_UNITS`` and escaped (``_evidence_text``).
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import orjson

from mcpl_host.check import schemas
from mcpl_host.check.evidence import (
    PRIVILEGED_METHODS,
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
from mcpl_host.check.registry import CHECKS, CheckResult, CheckSpec, Status, check_seconds
from mcpl_host.handshake import SUPPORTED_PROTOCOL_VERSIONS
from mcpl_host.jsonrpc.envelope import is_number
from mcpl_host.jsonrpc.errors import HandlerError
from mcpl_host.jsonrpc.values import is_object
from mcpl_host.logging import Redactor, escape_text
from mcpl_host.mcpl.admission import INBOUND_GATES
from mcpl_host.mcpl.coalescing import Lane, coalesce_problem
from mcpl_host.mcpl.feature_sets import read_feature_sets
from mcpl_host.mcpl.grants import INJECT_PREFIX, VOCABULARY
from mcpl_host.mcpl.input_streams import advertises_input_streaming
from mcpl_host.mcpl.manifest import DigestError, manifest_digest, validate_manifest
from mcpl_host.mcpl.policy import read_receipt
from mcpl_host.mcpl.publish_target import publish_target_problem, targeted_outcome
from mcpl_host.mcpl.references import Reference, Withheld, read_block
from mcpl_host.mcpl.server_shapes import (
    channel_params_problems,
    descriptor_problem,
    incoming_message_problem,
    inference_params_problems,
    state_params_problems,
)
from mcpl_host.mcpl.tags import validate_push_event
from mcpl_host.mcpl.tool_lifecycle import parse_observe
from mcpl_host.replay.against import first_answer_difference
from mcpl_host.report import MAX_REPORT_DEPTH, redact_json
from mcpl_host.stateless import (
    HEADER_MISMATCH,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    SERVER_INFO_KEY,
    UNSUPPORTED_PROTOCOL_VERSION,
)
from mcpl_host.tool_classes import declared_classes, slot_findings

__all__ = ["EVIDENCE_UNITS", "RULES", "Verdict", "evaluate"]

#: UTF-16 units of one evidence value in a report.
EVIDENCE_UNITS = 400
#: Evidence values kept per check.
MAX_EVIDENCE = 3
_METHOD_NOT_FOUND, _INVALID_REQUEST, _INVALID_PARAMS = -32601, -32600, -32602
_TOP_LEVEL_CAPABILITIES = frozenset(path.split(".")[0] for path in VOCABULARY)


_Found = TypeVar("_Found")
_Next = TypeVar("_Next")


@dataclass(frozen=True, slots=True)
class Verdict:
    """A rule's answer: ``status``, one-sentence ``reason``, ``evidence`` values as sent."""

    status: Status
    reason: str
    evidence: tuple[Any, ...] = ()


#: A rule: the evidence of one run in, its verdict out.
_Rule = Callable[[RunEvidence], Verdict]
#: A rule's judgement of what its precondition found.
_Judge = Callable[[_Found], Verdict]


def _passed(reason: str) -> Verdict:
    return Verdict("passed", reason)


def _skipped(reason: str) -> Verdict:
    return Verdict("skipped", reason)


def _failed(reason: str, evidence: Iterable[Any] = ()) -> Verdict:
    return Verdict("failed", reason, tuple(evidence)[:MAX_EVIDENCE])


def _warned(reason: str, evidence: Iterable[Any] = ()) -> Verdict:
    return Verdict("warned", reason, tuple(evidence)[:MAX_EVIDENCE])


def _shown(message: WireMessage) -> Any:
    return message.message if message.message is not None else message.head


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _seconds(value: float) -> str:
    return f"{value:.2f} s" if value < 10 else f"{value:.0f} s"


# --- preconditions ----------------------------------------------------------------------------


def _main(ev: RunEvidence) -> MainEvidence | Verdict:
    main = ev.main
    if main is None:
        return _skipped("the library session did not run")
    if main.init_error is not None:
        return _skipped("the handshake failed (see init.answers)")
    return main


def _then(
    first: Callable[[RunEvidence], _Found | Verdict], step: Callable[[_Found], _Next | Verdict]
) -> Callable[[RunEvidence], _Next | Verdict]:
    """Two preconditions in a row: ``first``'s verdict (a skip) when it gives one, else
    ``step`` of what it found."""

    def found(ev: RunEvidence) -> _Next | Verdict:
        value = first(ev)
        return value if isinstance(value, Verdict) else step(value)

    return found


def _given(precondition: Callable[[RunEvidence], _Found | Verdict]) -> Callable[[_Judge[_Found]], _Rule]:
    """A rule made of a precondition and a judgement: the rule returns the precondition's
    verdict (a skip) when it gives one, else the judgement of what it found. Used as a
    decorator on the judgement: ``@_given(_mcpl)`` over ``def rule(main: MainEvidence)``."""

    def rule_of(judge: _Judge[_Found]) -> _Rule:
        @functools.wraps(judge)
        def rule(ev: RunEvidence) -> Verdict:
            found = precondition(ev)
            return found if isinstance(found, Verdict) else judge(found)

        return rule

    return rule_of


def _advertises_mcpl(main: MainEvidence) -> MainEvidence | Verdict:
    if main.manifest is None:
        return _skipped("not an MCPL server (no capabilities.experimental.mcpl)")
    return main


#: The precondition "the handshake ran and the server advertises MCPL".
_mcpl = _then(_main, _advertises_mcpl)


def _raw(ev: RunEvidence) -> RawEvidence | Verdict:
    raw = ev.raw
    if raw is None:
        return _skipped("the raw JSON-RPC session did not run")
    if raw.init_error is not None:
        return _skipped(f"the raw session's handshake failed: {raw.init_error}")
    return raw


def _probe(name: str) -> Callable[[RunEvidence], RequestOutcome | Verdict]:
    """The precondition "the raw session ran the probe ``name``": its outcome, or a skip."""

    def outcome_of(raw: RawEvidence) -> RequestOutcome | Verdict:
        outcome = raw.probes.get(name)
        return outcome if outcome is not None else _skipped("this probe did not run")

    return _then(_raw, outcome_of)


def _transcripts(ev: RunEvidence) -> list[Transcript]:
    found: list[Transcript] = []
    if ev.main is not None:
        found.append(ev.main.transcript)
    if ev.raw is not None:
        found.append(ev.raw.transcript)
    return found


def _initialize_answer(main: MainEvidence) -> WireMessage | None:
    request = main.transcript.sent("initialize")
    return main.transcript.answer_to(request) if request is not None else None


def _initialize_result(ev: RunEvidence) -> dict[str, Any] | Verdict:
    main = ev.main
    if main is None:
        return _skipped("the library session did not run")
    answer = _initialize_answer(main)
    result = as_object(answer.result) if answer is not None and not answer.has_error else None
    if result is None:
        return _skipped("initialize was not answered with a result (see init.answers)")
    return result


def _no_answer(outcome: RequestOutcome) -> str:
    return outcome.failure or "no answer"


def _exchange(outcome: RequestOutcome) -> list[str]:
    """The evidence of a raw probe that got no answer: the line it sent, and what came back
    while it waited (or that nothing did); ``evaluate`` redacts, cuts and escapes them."""
    if outcome.sent is None:
        return []
    came = [f"received: {line}" for line in outcome.received] or ["received: nothing"]
    return [f"sent: {outcome.sent}", *came]


# --- lifecycle -------------------------------------------------------------------------------


def init_answers(ev: RunEvidence) -> Verdict:
    main = ev.main
    if main is None:
        return _skipped("the library session did not run")
    answer = _initialize_answer(main)
    if answer is not None and answer.has_error:
        return _failed(f"initialize was refused: {main.init_error or 'an error answer'}", [_shown(answer)])
    if answer is None or not isinstance(answer.result, dict):
        return _failed(main.init_error or "initialize was not answered with a result object")
    seconds = f" in {_seconds(main.init_seconds)}" if main.init_seconds is not None else ""
    return _passed(f"answered{seconds}")


#: Error codes of the stateless revision (MCP 2026-07-28 "Overview", error codes): a server
#: that answers the probe with one of them speaks that revision.
_STATELESS_CODES = {HEADER_MISMATCH, MISSING_REQUIRED_CLIENT_CAPABILITY, UNSUPPORTED_PROTOCOL_VERSION}


def discover_result_problems(result: object) -> tuple[list[str], list[str]]:
    """What is wrong with a ``server/discover`` result (MCP 2026-07-28 "server/discover":
    ``supportedVersions``, ``capabilities``, ``_meta`` ``io.modelcontextprotocol/serverInfo``,
    and ``resultType`` on every result, "Overview"): (failures, warnings), each a phrase.
    Pure."""
    failures: list[str] = []
    warnings: list[str] = []
    found = as_object(result)
    if found is None:
        return ["the result is not an object"], warnings
    versions = as_list(found.get("supportedVersions"))
    if not versions or not all(isinstance(v, str) for v in versions):
        failures.append("supportedVersions is not a non-empty array of strings")
    if as_object(found.get("capabilities")) is None:
        failures.append("capabilities is not an object")
    meta = as_object(found.get("_meta"))
    info = as_object(meta.get(SERVER_INFO_KEY)) if meta is not None else None
    if info is None or not isinstance(info.get("name"), str) or not isinstance(info.get("version"), str):
        warnings.append(f"_meta.{SERVER_INFO_KEY} does not give a name and a version")
    if found.get("resultType", "complete") != "complete":
        failures.append('resultType is not "complete"')
    elif "resultType" not in found:
        warnings.append("resultType is missing (every 2026-07-28 result carries it)")
    return failures, warnings


def init_discover(ev: RunEvidence) -> Verdict:
    raw = ev.raw
    outcome = raw.probes.get("discover") if raw is not None else None
    if outcome is None:
        return _skipped("the probe is sent where MCP 2026-07-28 may be spoken (stdio, Streamable HTTP)")
    if not outcome.answered:
        return _warned(
            f"server/discover was not answered ({_no_answer(outcome)}): a 2026-07-28 host waits "
            "its probe window (Limits.discover_timeout_seconds) before it falls back to initialize"
        )
    if outcome.error is not None:
        code = outcome.error_code
        if code in _STATELESS_CODES:
            return _passed(f"refused with {code}: a server of the stateless revision")
        return _passed(
            f"answered error {code}: a handshake-era server (a 2026-07-28 host then sends initialize)"
        )
    failures, warnings = discover_result_problems(outcome.result)
    if failures:
        return _failed("the DiscoverResult is malformed: " + "; ".join(failures + warnings), [outcome.result])
    if warnings:
        return _warned("the DiscoverResult is incomplete: " + "; ".join(warnings), [outcome.result])
    versions = ", ".join(outcome.result["supportedVersions"])
    return _passed(f"a DiscoverResult: the server speaks the stateless revision ({versions})")


@_given(_initialize_result)
def init_protocol_version(result: Mapping[str, object]) -> Verdict:
    version = result.get("protocolVersion")
    if not isinstance(version, str):
        return _failed(
            "the initialize result names no protocolVersion string", [result.get("protocolVersion")]
        )
    if version not in SUPPORTED_PROTOCOL_VERSIONS:
        return _failed(
            f"the server chose {version!r}, which this host does not implement "
            f"({', '.join(SUPPORTED_PROTOCOL_VERSIONS)}); a host disconnects",
            [version],
        )
    asked = SUPPORTED_PROTOCOL_VERSIONS[0]
    return _passed(version if version == asked else f"{version} (the host asked for {asked})")


@_given(_initialize_result)
def init_server_info(result: Mapping[str, object]) -> Verdict:
    info = result.get("serverInfo")
    found = schemas.problems("Implementation", info)
    shown = as_object(info)
    if found or shown is None:
        return _failed("serverInfo is missing or malformed: " + "; ".join(found), [info])
    return _passed(f"{shown['name']} {shown['version']}")


@_given(_initialize_result)
def init_capabilities(result: Mapping[str, object]) -> Verdict:
    capabilities = result.get("capabilities")
    found = schemas.problems("ServerCapabilities", capabilities)
    if found:
        return _failed("capabilities are malformed: " + "; ".join(found), [capabilities])
    names = sorted(as_object(capabilities) or {}) or ["none"]
    return _passed(", ".join(names))


@_given(_main)
def init_initialized(main: MainEvidence) -> Verdict:
    sent = main.transcript.sent("notifications/initialized")
    if sent is None:
        return _skipped("notifications/initialized was not sent")
    answers = [
        m
        for m in main.transcript.incoming()
        if m.seq > sent.seq and m.kind == "response" and not _usable_id(m.id)
    ]
    if answers:
        return _failed(
            "the server answered something no request of ours asked (a notification is never answered)",
            [_shown(m) for m in answers],
        )
    later = next((m for m in main.transcript.incoming() if m.seq > sent.seq and m.kind == "response"), None)
    return _passed("taken silently" + ("; later requests were answered" if later is not None else ""))


_BEFORE_INITIALIZED_OK = frozenset({"ping", "notifications/message"})


def init_before_initialized(ev: RunEvidence) -> Verdict:
    main = _main(ev)
    if isinstance(main, Verdict):
        return main
    offending: list[WireMessage] = []
    for transcript in _transcripts(ev):
        sent = transcript.sent("notifications/initialized")
        limit = sent.seq if sent is not None else transcript.lines
        offending += [
            m
            for m in transcript.incoming()
            if m.seq < limit
            and m.kind in ("request", "notification")
            and m.method not in _BEFORE_INITIALIZED_OK
        ]
    if offending:
        methods = sorted({m.method or "?" for m in offending})
        return _failed(
            f"the server sent {', '.join(methods)} before it was sent notifications/initialized",
            [_shown(m) for m in offending],
        )
    return _passed("nothing but ping and logging")


# --- JSON-RPC hygiene ------------------------------------------------------------------------


@_given(_probe("ping"))
def jsonrpc_ping(outcome: RequestOutcome) -> Verdict:
    if not outcome.answered:
        return _failed(f"ping was not answered: {_no_answer(outcome)}", _exchange(outcome))
    if outcome.error is not None:
        return _failed("ping was answered with an error", [outcome.error])
    if outcome.result != {}:
        return _warned("ping was answered, but not with the empty result MCP asks for", [outcome.result])
    return _passed(f"answered in {_seconds(outcome.seconds)}")


def _error_probe(outcome: RequestOutcome, what: str, code: int, code_name: str) -> Verdict:
    """A probe that must be answered with the error ``code``: unanswered or answered with a
    result fails, another error code warns (JSON-RPC 2.0 §5.1)."""
    if not outcome.answered:
        return _failed(f"{what} was not answered: {_no_answer(outcome)}", _exchange(outcome))
    if outcome.error is None:
        return _failed(f"{what} was answered with a result", [outcome.result])
    if outcome.error_code != code:
        return _warned(f"answered with code {outcome.error_code}, not {code} ({code_name})", [outcome.error])
    return _passed(f"answered {code}")


@_given(_probe("unknown-method"))
def jsonrpc_unknown_method(outcome: RequestOutcome) -> Verdict:
    return _error_probe(outcome, "a request for an unknown method", _METHOD_NOT_FOUND, "Method not found")


@_given(_probe("invalid-request"))
def jsonrpc_invalid_request(outcome: RequestOutcome) -> Verdict:
    return _error_probe(outcome, 'an invalid request ("method": 7)', _INVALID_REQUEST, "Invalid Request")


@_given(_probe("id-null"))
def jsonrpc_id_null(outcome: RequestOutcome) -> Verdict:
    if not outcome.answered:
        return _failed(
            f'a request with "id": null was not answered: {_no_answer(outcome)}', _exchange(outcome)
        )
    if outcome.error is not None:
        return _passed(f"answered with an error ({outcome.error_code}); MCP forbids null ids")
    return _passed("answered with a result")


@_given(_probe("crlf"))
def jsonrpc_crlf(outcome: RequestOutcome) -> Verdict:
    if not outcome.answered or outcome.error is not None:
        shown = [outcome.error] if outcome.error is not None else _exchange(outcome)
        detail = _no_answer(outcome) if not outcome.answered else f"error {outcome.error_code}"
        return _warned(
            f"a ping ending in CRLF was not answered as a ping ({detail}); real hosts send LF only, "
            "but \\r is JSON whitespace (RFC 8259 §2)",
            shown,
        )
    return _passed("answered")


def jsonrpc_big_message(ev: RunEvidence) -> Verdict:
    outcome = _probe("big-message")(ev)
    if isinstance(outcome, Verdict):
        return outcome
    size = f"{ev.big_message_bytes / (1024 * 1024):g} MiB" if ev.big_message_bytes else "big"
    if not outcome.answered:
        return _failed(f"a {size} ping was not answered: {_no_answer(outcome)}", _exchange(outcome))
    if outcome.error is not None:
        return _passed(
            f"a {size} ping was refused with an error ({outcome.error_code}), and the server went on"
        )
    return _passed(f"a {size} ping was answered in {_seconds(outcome.seconds)}")


def _usable_id(value: object) -> bool:
    return isinstance(value, str) or is_number(value)


def _valid_request_id(value: object) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def jsonrpc_server_ids(ev: RunEvidence) -> Verdict:
    main = _main(ev)
    if isinstance(main, Verdict):
        return main
    bad: list[tuple[str, WireMessage]] = []
    requests = 0
    for transcript in _transcripts(ev):
        ours = {id_key(m.id) for m in transcript if m.direction == "out" and m.kind in ("request", "invalid")}
        pending: set[tuple[str, Any]] = set()
        for m in transcript:
            if m.direction == "in" and m.kind == "invalid":
                bad.append(("an invalid request (its method or id is malformed)", m))
            elif m.direction == "in" and m.kind == "request":
                requests += 1
                if not _valid_request_id(m.id):
                    bad.append((f"a request id that is not a string or an integer ({m.id!r})", m))
                elif id_key(m.id) in pending:
                    bad.append((f"the request id {m.id!r} reused while its first request was pending", m))
                else:
                    pending.add(id_key(m.id))
            elif m.direction == "out" and m.kind == "response":
                pending.discard(id_key(m.id))
            elif m.direction == "in" and m.kind == "response" and _usable_id(m.id):
                if id_key(m.id) not in ours:
                    bad.append((f"an answer naming the id {m.id!r}, which no request of ours had", m))
    if bad:
        return _failed(bad[0][0], [_shown(m) for _, m in bad])
    return _passed(f"{_plural(requests, 'server request')}; every answer named one of our requests")


def stdout_only_json(ev: RunEvidence) -> Verdict:
    main = _main(ev)
    if isinstance(main, Verdict):
        return main
    bad = [
        m
        for transcript in _transcripts(ev)
        for m in transcript.incoming()
        if m.kind in ("not-json", "unrelated", "invalid")
        or (m.kind in ("request", "notification", "response") and not m.jsonrpc_ok)
    ]
    if bad:
        kinds = {
            "not-json": "text that is not JSON",
            "unrelated": "JSON that is no JSON-RPC message",
            "invalid": "an invalid request",
        }
        first = bad[0]
        what = kinds.get(first.kind, 'a message without "jsonrpc": "2.0"')
        return _failed(
            f"{_plural(len(bad), 'line')} on stdout that the host drops; the first is {what}",
            [m.head for m in bad],
        )
    lines = sum(len(t.incoming()) for t in _transcripts(ev))
    dropped = sum(t.not_kept for t in _transcripts(ev))
    beyond = (
        f" ({dropped} more lines were past the bound of kept lines, Limits.max_check_messages)"
        if dropped
        else ""
    )
    return _passed(f"{_plural(lines, 'line')}, every one a JSON-RPC message{beyond}")


# --- tools, resources, prompts ---------------------------------------------------------------

_LIST_DEFS = {
    "tools/list": "ListToolsResult",
    "resources/list": "ListResourcesResult",
    "resources/templates/list": "ListResourceTemplatesResult",
    "prompts/list": "ListPromptsResult",
}


def _capability(name: str) -> Callable[[RunEvidence], MainEvidence | Verdict]:
    """The precondition "the handshake ran and the server advertises ``name``"."""

    def advertised(main: MainEvidence) -> MainEvidence | Verdict:
        if name not in main.capabilities:
            return _skipped(f"the server does not advertise {name}")
        return main

    return _then(_main, advertised)


def _listing(main: MainEvidence, method: str) -> ListEvidence | Verdict:
    listing = main.lists.get(method)
    if listing is None:
        return _skipped(f"{method} was not called")
    return listing


def _page_failure(listing: ListEvidence) -> tuple[int, RequestOutcome] | None:
    for index, page in enumerate(listing.pages):
        if not page.answered or page.error is not None:
            return index, page
    return None


def _schema_of_listings(
    listings: Sequence[ListEvidence], *, optional: frozenset[str] = frozenset()
) -> Verdict:
    problems: list[str] = []
    evidence: list[Any] = []
    warnings: list[str] = []
    counts: list[str] = []
    for listing in listings:
        failure = _page_failure(listing)
        if failure is not None:
            index, page = failure
            what = f"{listing.method} page {index + 1}" if index else listing.method
            if page.error is not None and page.error_code == _METHOD_NOT_FOUND and listing.method in optional:
                warnings.append(f"{listing.method} is not implemented (-32601)")
                continue
            if page.error is not None:
                problems.append(f"{what} was answered with an error ({page.error_code})")
                evidence.append(page.error)
            else:
                problems.append(f"{what} was not answered: {_no_answer(page)}")
            if index == 0:
                continue
        for page in listing.pages:
            if page.result is None:
                continue
            found = schemas.problems(_LIST_DEFS[listing.method], page.result)
            if found:
                problems.append(f"{listing.method}: " + "; ".join(found))
                evidence.append(page.result)
        counts.append(f"{_plural(len(listing.items), listing.key.removesuffix('s'))}")
    if problems:
        return _failed("; ".join(problems), evidence)
    if warnings:
        return _warned("; ".join(warnings))
    return _passed(", ".join(counts))


def _pagination_of(listings: Sequence[ListEvidence]) -> Verdict:
    problems: list[str] = []
    notes: list[str] = []
    for listing in listings:
        failure = _page_failure(listing)
        if failure is not None and failure[0] == 0:
            notes.append(f"{listing.method} failed (see the schema check)")
            continue
        pages = len(listing.pages)
        if listing.ended == "cursor-repeated":
            problems.append(
                f"{listing.method} sent back a cursor it had already given, after {_plural(pages, 'page')}"
            )
        elif listing.ended == "too-many-pages":
            problems.append(f"{listing.method} did not end within {_plural(pages, 'page')}")
        elif listing.ended == "bad-cursor":
            problems.append(f"{listing.method} sent a nextCursor that is not a string")
        elif failure is not None:
            index, page = failure
            problems.append(
                f"{listing.method} page {index + 1} (its own cursor) was not answered with a result: "
                + (f"error {page.error_code}" if page.error is not None else _no_answer(page))
            )
        else:
            notes.append(f"{listing.method}: {_plural(pages, 'page')}")
    if problems:
        return _failed("; ".join(problems))
    if not any(":" in note for note in notes):
        return _skipped("; ".join(notes) or "nothing was listed")
    return _passed("; ".join(notes))


@_given(_capability("tools"))
def tools_list_schema(main: MainEvidence) -> Verdict:
    listing = _listing(main, "tools/list")
    if isinstance(listing, Verdict):
        return listing
    verdict = _schema_of_listings([listing])
    if verdict.status == "failed":
        return verdict
    problems: list[str] = []
    evidence: list[Any] = []
    names: dict[str, int] = {}
    checked = main.tool_schema_problems or {}
    for index, item in enumerate(listing.items):
        tool = as_object(item)
        if tool is None:
            continue
        name = tool.get("name")
        if isinstance(name, str):
            names[name] = names.get(name, 0) + 1
        for key in ("inputSchema", "outputSchema"):
            if key not in tool:
                continue
            found = checked.get((index, key), [])
            if found:
                problems.append(f"{key} of {name!r} is not a valid JSON Schema: {found[0]}")
                evidence.append(tool[key])
    if problems:
        return _failed("; ".join(problems), evidence)
    repeated = sorted(name for name, count in names.items() if count > 1)
    if repeated:
        return _warned(f"tool names repeated: {', '.join(repeated)} (names SHOULD be unique)")
    return verdict


@_given(_capability("tools"))
def tools_class(main: MainEvidence) -> Verdict:
    """RFC-008 §3, §4: each listed tool's ``_meta["mcpl/class"]`` is an array of known classes
    and no ``mcpl/`` key MCPL does not define is used (``tool_classes.slot_findings``: what a
    host ignores). A SHOULD-level hint, so a finding warns."""
    listing = _listing(main, "tools/list")
    if isinstance(listing, Verdict):
        return listing
    problems: list[str] = []
    evidence: list[Any] = []
    unclassed = 0
    shown: list[str] = []  # each tool's class and its source, as a host reads it (RFC-008 §6)
    for item in listing.items:
        tool = as_object(item)
        if tool is None:
            continue
        meta = tool.get("_meta")
        declared = declared_classes(meta)
        unclassed += not declared
        shown.append(
            f"{tool.get('name')!r} " + (f"{', '.join(declared)} (server)" if declared else "unclassed")
        )
        found = slot_findings(meta, limit=MAX_EVIDENCE)
        for finding in found:
            problems.append(
                f"{tool.get('name')!r}: {finding.sentence}: {finding.value!r} ({finding.section})"
            )
        if found:
            evidence.append({"name": tool.get("name"), "_meta": meta})
    if problems:
        return _warned("; ".join(problems[:MAX_EVIDENCE]), evidence)
    classed = len(shown) - unclassed
    more = f"; {len(shown) - 10} more" if len(shown) > 10 else ""
    return _passed(
        f"{_plural(classed, 'tool')} classed, {unclassed} unclassed (handled as the most restrictive,"
        f" RFC-008 §5.2): {'; '.join(shown[:10])}{more}"
    )


@_given(_mcpl)
def mcpl_context_injection(main: MainEvidence) -> Verdict:
    """RFC-010 §4.1: a server SHOULD NOT return injections (a non-empty ``contextInjections``)
    nor advertise the deprecated ``inject.*`` paths."""
    advertised = sorted(path for path in main.advertised if path.startswith(INJECT_PREFIX))
    outcome = main.calls.before_inference if main.calls is not None else None
    result = as_object(outcome.result) if outcome is not None and outcome.answered else None
    injections = as_list(result.get("contextInjections")) if result is not None else None
    if injections:
        return _warned(
            f"context/beforeInference returned {_plural(len(injections), 'context injection')}: injection is"
            " deprecated (RFC-010 §4.1) and removed in MCPL 0.6; use push events, channels or tools",
            [result],
        )
    if advertised:
        return _warned(f"advertises the deprecated injection paths {', '.join(advertised)} (RFC-010 §4.1)")
    if outcome is None:
        return _skipped("context/beforeInference was not sent (neither observe nor an inject path granted)")
    return _passed("context/beforeInference returned no injection")


@_given(_mcpl)
def mcpl_input_streaming(main: MainEvidence) -> Verdict:
    """RFC-009 §2.1, §2.2 (experimental): only ``channels.inputStreaming: true`` advertises
    input streaming, and it needs ``channels.incoming`` beside it; the shapes that look like
    it but are not (``incoming: {streaming: true}``, a literal ``incoming.streaming`` member, a
    non-boolean ``inputStreaming``) advertise nothing, so they warn."""
    manifest = main.manifest or {}
    channels = as_object(manifest.get("channels"))
    if channels is None:
        return _skipped("the server advertises no channels object")
    lookalikes: list[str] = []
    incoming = as_object(channels.get("incoming"))
    if incoming is not None and "streaming" in incoming:
        lookalikes.append("channels.incoming.streaming nested under an object")
    if "incoming.streaming" in channels:
        lookalikes.append('a literal "incoming.streaming" member')
    if "inputStreaming" in channels and channels["inputStreaming"] is not True:
        lookalikes.append("channels.inputStreaming that is not the boolean true")
    if lookalikes:
        return _warned(
            f"{'; '.join(lookalikes)}: not the input-streaming advertisement (RFC-009 §2.1: only"
            " channels.inputStreaming: true)",
            [channels],
        )
    if not advertises_input_streaming(manifest):
        return _passed("does not advertise input streaming (RFC-009, experimental)")
    if "channels.incoming" not in main.advertised:
        return _warned(
            "advertises channels.inputStreaming without channels.incoming: no input stream can be granted"
            " (RFC-009 §2.2: both paths are needed)",
            [channels],
        )
    return _passed("advertises input streaming with channels.incoming (RFC-009 §2.1, experimental)")


@_given(_capability("tools"))
def tools_list_pagination(main: MainEvidence) -> Verdict:
    listing = _listing(main, "tools/list")
    return listing if isinstance(listing, Verdict) else _pagination_of([listing])


def _calls(main: MainEvidence) -> CallEvidence | Verdict:
    if main.calls is None:
        return _skipped("no calls were made")
    return main.calls


def _calls_of(capability: str) -> Callable[[RunEvidence], CallEvidence | Verdict]:
    """The precondition "the server advertises ``capability`` and its calls were made"."""
    return _then(_capability(capability), _calls)


@_given(_calls_of("tools"))
def tools_call_unknown_tool(calls: CallEvidence) -> Verdict:
    outcome = calls.unknown_tool
    if outcome is None:
        return _skipped("the unknown tool was not called")
    if not outcome.answered:
        return _failed(f"tools/call of an unknown tool was not answered: {_no_answer(outcome)}")
    if outcome.error is not None:
        return _passed(f"refused with a protocol error ({outcome.error_code})")
    result = outcome.result
    if (as_object(result) or {}).get("isError") is True:
        return _warned(
            "answered with a tool execution error (isError: true); MCP lists unknown tools among protocol errors (JSON-RPC errors, -32602)",
            [result],
        )
    return _failed("a tool that does not exist was called successfully", [result])


@_given(_calls_of("tools"))
def tools_call_output_schema(calls: CallEvidence) -> Verdict:
    problems: list[str] = []
    evidence: list[Any] = []
    judged: list[str] = []
    notes: list[str] = []
    for name, outcome in calls.tool_calls.items():
        if not outcome.answered:
            notes.append(f"{name}: {_no_answer(outcome)}")
            continue
        if outcome.error is not None:
            notes.append(f"{name}: answered with error {outcome.error_code}")
            continue
        result = as_object(outcome.result)
        if result is None:
            problems.append(f"{name}: the result is not an object")
            evidence.append(outcome.result)
            continue
        shape = schemas.problems("CallToolResult", result)
        if shape:
            problems.append(f"{name}: {shape[0]}")
            evidence.append(result)
            continue
        if result.get("isError") is True:
            notes.append(f"{name}: a tool execution error (not judged)")
            continue
        if "structuredContent" not in result:
            problems.append(f"{name} declares an outputSchema but returned no structuredContent")
            evidence.append(result)
            continue
        found = calls.output_problems.get(name, [])
        if found:
            problems.append(f"{name}: structuredContent does not match its outputSchema: {found[0]}")
            evidence.append(result.get("structuredContent"))
            continue
        judged.append(name)
    if problems:
        return _failed("; ".join(problems), evidence)
    if judged:
        return _passed(f"{', '.join(judged)} matched" + (f" ({'; '.join(notes)})" if notes else ""))
    skipped = [f"{name}: {why}" for name, why in calls.tool_calls_skipped.items()]
    reason = "; ".join(notes + skipped) or "no tool declares an outputSchema"
    return _skipped(reason)


@_given(_capability("resources"))
def resources_list_schema(main: MainEvidence) -> Verdict:
    listings = [main.lists[m] for m in ("resources/list", "resources/templates/list") if m in main.lists]
    if not listings:
        return _skipped("resources/list was not called")
    return _schema_of_listings(listings, optional=frozenset({"resources/templates/list"}))


@_given(_capability("resources"))
def resources_list_pagination(main: MainEvidence) -> Verdict:
    listings = [main.lists[m] for m in ("resources/list", "resources/templates/list") if m in main.lists]
    if not listings:
        return _skipped("resources/list was not called")
    return _pagination_of(listings)


@_given(_calls_of("resources"))
def resources_read_listed(calls: CallEvidence) -> Verdict:
    outcome, uri = calls.resource_read, calls.resource_uri
    if outcome is None or uri is None:
        return _skipped("no resource was listed")
    if not outcome.answered:
        return _failed(f"reading the listed resource {uri!r} was not answered: {_no_answer(outcome)}")
    if outcome.error is not None:
        return _failed(f"reading the listed resource {uri!r} failed ({outcome.error_code})", [outcome.error])
    found = schemas.problems("ReadResourceResult", outcome.result)
    if found:
        return _failed(f"the resources/read result is malformed: {'; '.join(found)}", [outcome.result])
    contents = as_list((as_object(outcome.result) or {}).get("contents")) or []
    if not contents:
        return _failed(f"reading {uri!r} returned no contents", [outcome.result])
    if not any((as_object(c) or {}).get("uri") == uri for c in contents):
        return _warned(f"none of the contents read names the URI {uri!r}", [outcome.result])
    return _passed(f"{uri}: {_plural(len(contents), 'content')}")


@_given(_capability("prompts"))
def prompts_list_schema(main: MainEvidence) -> Verdict:
    listing = _listing(main, "prompts/list")
    return listing if isinstance(listing, Verdict) else _schema_of_listings([listing])


@_given(_capability("prompts"))
def prompts_list_pagination(main: MainEvidence) -> Verdict:
    listing = _listing(main, "prompts/list")
    return listing if isinstance(listing, Verdict) else _pagination_of([listing])


@_given(_calls_of("prompts"))
def prompts_get_unknown_prompt(calls: CallEvidence) -> Verdict:
    outcome = calls.unknown_prompt
    if outcome is None:
        return _skipped("the unknown prompt was not asked for")
    if not outcome.answered:
        return _failed(f"prompts/get of an unknown prompt was not answered: {_no_answer(outcome)}")
    if outcome.error is None:
        return _failed("a prompt that does not exist was returned", [outcome.result])
    if outcome.error_code != _INVALID_PARAMS:
        return _warned(
            f"refused with code {outcome.error_code}, not -32602 (Invalid params)", [outcome.error]
        )
    return _passed("refused -32602")


# --- MCPL --------------------------------------------------------------------------------------


@_given(_mcpl)
def mcpl_advertisement_shape(main: MainEvidence) -> Verdict:
    manifest = main.manifest
    assert manifest is not None
    problems = list(validate_manifest(manifest))
    for key, value in manifest.items():
        if key in _TOP_LEVEL_CAPABILITIES and not isinstance(value, (bool, dict)):
            problems.append(f"{key} is neither a boolean nor an object")
    declarations = read_feature_sets(manifest)
    shape_notes = {
        "object": "featureSets is an object keyed by name",
        "array": "featureSets is an array of {name, ...} entries (a real-world shape; the spec's is an object keyed by name, RFC-001)",
        "absent": "no featureSets",
        "invalid": "featureSets is neither an object nor an array",
    }
    shape = f"{shape_notes[declarations.shape]} ({_plural(len(declarations.sets), 'feature set')})"
    if declarations.shape == "invalid":
        problems.append(shape_notes["invalid"])
    problems += [
        p
        for p in declarations.problems
        if not p.startswith("featureSets is an array") and "nothing is declared" not in p
    ]
    if problems:
        return _failed("; ".join(problems), [manifest])
    if declarations.shape == "array":
        return _warned(shape, [manifest.get("featureSets")])
    return _passed(shape)


@_given(_mcpl)
def mcpl_version(main: MainEvidence) -> Verdict:
    assert main.manifest is not None
    version = main.manifest.get("version")
    if version == "0.5":
        return _passed("0.5")
    if version == "0.4":
        return _warned('"0.4": an earlier MCPL version, served as 0.5 by a strict host', [version])
    return _failed(f"version is {version!r}, not an MCPL version this host knows (0.4, 0.5)", [version])


@_given(_mcpl)
def mcpl_revision_digest(main: MainEvidence) -> Verdict:
    manifest = main.manifest
    assert manifest is not None
    if "revision" not in manifest:
        return _skipped("the advertisement has no revision (it is optional)")
    revision = manifest["revision"]
    try:
        digest = manifest_digest(manifest)
    except DigestError as exc:
        return _failed(f"the manifest has no canonical digest ({exc.code}, MCPL §17.2)", [exc.where])
    if revision != digest:
        return _failed(f"revision {revision!r} is not the canonical digest {digest}", [revision])
    return _passed(digest)


def _declared(main: MainEvidence) -> dict[str, tuple[str, ...]]:
    return main.feature_sets


@_given(_mcpl)
def mcpl_uses_vocabulary(main: MainEvidence) -> Verdict:
    declarations = read_feature_sets(main.manifest)
    if not declarations.sets:
        return _skipped("no feature sets are declared")
    problems: list[str] = []
    for name, feature_set in declarations.sets.items():
        if feature_set.uses_problem is not None:
            problems.append(f"{name}: {feature_set.uses_problem}")
        elif not feature_set.uses:
            problems.append(f"{name}: uses is empty")
        else:
            outside = [path for path in feature_set.uses if path not in VOCABULARY]
            if outside:
                problems.append(
                    f"{name}: {', '.join(outside)} {'is' if len(outside) == 1 else 'are'} outside the vocabulary"
                )
    if problems:
        return _failed("; ".join(problems), [fs.raw for fs in declarations.sets.values()])
    return _passed(f"{_plural(len(declarations.sets), 'feature set')}, every uses from the vocabulary")


_FEATURE_SET_METHODS = frozenset({"push/event", "inference/request"})


def _exercised(message: WireMessage) -> list[str]:
    """The capability paths a server message exercises (MCPL §5.4, §14.1)."""
    gate = INBOUND_GATES.get(message.method or "")
    if gate is None:
        return []
    paths = [gate]
    params = as_object(message.params) or {}
    if message.method == "inference/request" and params.get("stream") is True:
        paths.append("inferenceRequest.streaming")
    return paths


@_given(_mcpl)
def mcpl_uses_complete(main: MainEvidence) -> Verdict:
    declared = _declared(main)
    messages = main.transcript.server_messages_of(_FEATURE_SET_METHODS)
    judged = 0
    problems: list[str] = []
    evidence: list[Any] = []
    for message in messages:
        name = (as_object(message.params) or {}).get("featureSet")
        if not isinstance(name, str) or name not in declared:
            continue  # undeclared: push.featureset-declared's
        judged += 1
        missing = [path for path in _exercised(message) if path not in declared[name]]
        if missing:
            problems.append(
                f"{message.method} on {name!r} exercises {', '.join(missing)}, which its uses omits"
            )
            evidence.append(_shown(message))
    if problems:
        return _failed("; ".join(dict.fromkeys(problems)), evidence)
    if not judged:
        return _skipped("no push/event or inference/request naming a declared feature set was seen")
    return _passed(f"{_plural(judged, 'request')} within their feature sets' uses")


@_given(_mcpl)
def mcpl_capabilities_advertised(main: MainEvidence) -> Verdict:
    messages = main.transcript.server_messages_of(frozenset(INBOUND_GATES))
    if not messages:
        return _skipped("the server exercised no MCPL capability")
    problems: list[str] = []
    evidence: list[Any] = []
    for message in messages:
        missing = [path for path in _exercised(message) if path not in main.advertised]
        if missing:
            problems.append(
                f"{message.method} needs {', '.join(missing)}, which the advertisement does not advertise"
            )
            evidence.append(_shown(message))
    if problems:
        return _failed("; ".join(dict.fromkeys(problems)), evidence)
    exercised = sorted({path for m in messages for path in _exercised(m)})
    return _passed(f"exercised {', '.join(exercised)}, all advertised")


def _initial_policy(main: MainEvidence) -> tuple[WireMessage, WireMessage | None] | None:
    request = main.transcript.sent("featureSets/update")
    if request is None or request.kind != "request":
        return None
    return request, main.transcript.answer_to(request)


@_given(_mcpl)
def mcpl_policy_request_form(main: MainEvidence) -> Verdict:
    policy = _initial_policy(main)
    if policy is None:
        return _skipped("the initial featureSets/update was not sent")
    request, answer = policy
    if answer is None:
        return _failed(
            f"the initial featureSets/update request was not answered: {main.dead or 'no answer in time'}",
            [_shown(request)],
        )
    if answer.has_error:
        code = (as_object(answer.error) or {}).get("code")
        hint = " (it knows only the notification form, or nothing)" if code == _METHOD_NOT_FOUND else ""
        return _failed(
            f"the initial featureSets/update request was answered with error {code}{hint}", [_shown(answer)]
        )
    return _passed(f"answered with a receipt in {_seconds(answer.time - request.time)}")


@_given(_mcpl)
def mcpl_policy_receipt_shape(main: MainEvidence) -> Verdict:
    receipts = [
        answer
        for request in main.transcript.sent_requests("featureSets/update")
        if (answer := main.transcript.answer_to(request)) is not None and not answer.has_error
    ]
    if not receipts:
        return _skipped("no featureSets/update was answered with a receipt")
    problems: list[str] = []
    evidence: list[Any] = []
    for answer in receipts:
        found = list(read_receipt(answer.result).defects)
        receipt = as_object(answer.result)
        if receipt is not None:
            unavailable = receipt.get("unavailableFeatures")
            entries = as_list(unavailable)
            degraded = bool(entries)
            if "mode" in receipt and not degraded:
                found.append("mode is present although nothing degraded (MCPL §6.7: omit it)")
            fallback = receipt.get("fallback")
            if (
                receipt.get("accepted") is False
                and isinstance(fallback, str)
                and fallback not in ("mcp-only", "close")
            ):
                found.append(f'fallback {fallback!r} is neither "mcp-only" nor "close"')
            if unavailable is not None and entries is None:
                found.append("unavailableFeatures is not an array")
            for item in entries or []:
                entry = as_object(item)
                if entry is not None and not isinstance(entry.get("featureSet"), str):
                    found.append("an unavailableFeatures entry names no featureSet")
                    break
        if found:
            problems += found
            evidence.append(_shown(answer))
    if problems:
        return _failed("; ".join(dict.fromkeys(problems)), evidence)
    return _passed(f"{_plural(len(receipts), 'receipt')}, well-formed")


@_given(_mcpl)
def mcpl_pre_policy_quiet(main: MainEvidence) -> Verdict:
    policy = _initial_policy(main)
    if policy is None:
        return _skipped("the initial featureSets/update was not sent")
    _, answer = policy
    limit = answer.seq if answer is not None and not answer.has_error else main.transcript.lines
    early = [m for m in main.transcript.server_messages_of(PRIVILEGED_METHODS) if m.seq < limit]
    if early:
        methods = sorted({m.method or "?" for m in early})
        when = (
            "before its receipt"
            if answer is not None and not answer.has_error
            else "and the policy never came into force"
        )
        return _failed(
            f"the server sent {', '.join(methods)} {when} (MCPL §5.3: every capability is unavailable until then)",
            [_shown(m) for m in early],
        )
    return _passed("nothing privileged before the receipt")


@_given(_mcpl)
def mcpl_reduction_respected(main: MainEvidence) -> Verdict:
    if main.reduction_note is not None:
        return _skipped(main.reduction_note)
    outcome = main.reduction
    if outcome is None:
        return _skipped("no reduction was made")
    if not outcome.answered:
        return _failed(
            f"the reduction (featureSets/update revoking pushEvents) was not answered: {_no_answer(outcome)}"
        )
    if outcome.error is not None:
        return _failed(f"the reduction was answered with error {outcome.error_code}", [outcome.error])
    window = main.reduction_window
    assert window is not None
    receipt_seq, _ = window
    pushes = [m for m in main.transcript.server_messages_of(frozenset({"push/event"})) if m.seq > receipt_seq]
    if pushes:
        return _failed(
            f"{_plural(len(pushes), 'push/event')} after the receipt of the reduction that revoked pushEvents",
            [_shown(pushes[0])],
        )
    if main.transcript.last_seq("in", "push/event") > receipt_seq:  # past the bound of kept lines
        return _failed(
            "push/events came after the receipt of the reduction that revoked pushEvents (not kept)"
        )
    return _passed(f"no push/event in {_seconds(main.reduction_seconds)} after the reduction")


def _feature_set_problem(main: MainEvidence, params: object, *, ready: bool) -> str | None:
    name = (as_object(params) or {}).get("featureSet")
    if not isinstance(name, str) or not name:
        return "featureSet is missing or not a non-empty string"
    if name not in main.feature_sets:
        return f"featureSet {name!r} is not declared"
    if ready and name not in main.enabled_feature_sets:
        return f"featureSet {name!r} is declared but disabled"
    return None


def _reduction_seq(main: MainEvidence) -> int | None:
    """The seq of the reduction request (the second featureSets/update), if one was sent."""
    sent = main.transcript.sent_requests("featureSets/update")
    return sent[1].seq if main.reduction_window is not None and len(sent) > 1 else None


def _judge_messages(
    main: MainEvidence, methods: frozenset[str], judge: Callable[[WireMessage], list[str]], nothing: str
) -> Verdict:
    messages = main.transcript.server_messages_of(methods)
    if not messages:
        return _skipped(nothing)
    problems: list[str] = []
    evidence: list[Any] = []
    for message in messages:
        found = judge(message)
        if found:
            problems += found
            evidence.append(_shown(message))
    if problems:
        return _failed("; ".join(dict.fromkeys(problems)), evidence)
    return _passed(f"{_plural(len(messages), 'message')}, valid")


def _judge_params(main: MainEvidence, method: str, judge: Callable[[dict[str, Any]], list[str]]) -> Verdict:
    """``_judge_messages`` for the server's ``method`` messages whose ``params`` must be an
    object: one without (a readable message) is that problem, else ``judge(params)``."""

    def judged(message: WireMessage) -> list[str]:
        params = as_object(message.params)
        if params is None:
            return ["params is missing or not an object"] if message.message is not None else []
        return judge(params)

    return _judge_messages(main, frozenset({method}), judged, f"no {method} was seen")


@_given(_mcpl)
def push_params(main: MainEvidence) -> Verdict:
    return _judge_messages(
        main,
        frozenset({"push/event"}),
        lambda m: validate_push_event(m.params) if m.message is not None else [],
        "no push/event was seen",
    )


@_given(_mcpl)
def push_featureset_declared(main: MainEvidence) -> Verdict:
    ready = main.mcpl_state == "ready"

    reduction = _reduction_seq(main)

    def judge(message: WireMessage) -> list[str]:
        if message.message is None:
            return []
        before_reduction = reduction is None or message.seq < reduction
        problem = _feature_set_problem(main, message.params, ready=ready and before_reduction)
        return [problem] if problem is not None else []

    return _judge_messages(main, frozenset({"push/event"}), judge, "no push/event was seen")


def _coalesced_items(message: WireMessage) -> list[Mapping[str, Any]]:
    """The params of a ``push/event``, or the messages of a ``channels/incoming``, that carry
    ``coalesce`` (RFC-006 §13)."""
    params = as_object(message.params) if message.message is not None else None
    if params is None:
        return []
    if message.method == "push/event":
        items: list[Mapping[str, Any]] = [params]
    else:
        messages: object = params.get("messages")
        listed = cast(list[object], messages) if isinstance(messages, list) else []
        items = [cast(Mapping[str, Any], m) for m in listed if is_object(m)]
    return [item for item in items if "coalesce" in item]


def _coalesce_problems(message: WireMessage) -> list[str]:
    """RFC-006 §13 problems of the ``coalesce`` members of one ``push/event`` or
    ``channels/incoming`` (``mcpl.coalescing.coalesce_problem``, the host's own rule)."""
    lane: Lane = "push" if message.method == "push/event" else "channel"
    problems: list[str] = []
    for item in _coalesced_items(message):
        problem = coalesce_problem(item, lane=lane, deferred_ok=True, channel_scoped_ok=True)
        if problem is not None:
            problems.append(f"{message.method}: {problem[0]} {problem[1]}")
    return problems


@_given(_mcpl)
def push_coalesce(main: MainEvidence) -> Verdict:
    methods = frozenset({"push/event", "channels/incoming"})
    if not any(_coalesced_items(m) for m in main.transcript.server_messages_of(methods)):
        return _skipped("no push/event or channels/incoming carrying coalesce was seen")
    return _judge_messages(main, methods, _coalesce_problems, "no push/event was seen")


def _render_problems(answer: WireMessage | None) -> str | None:
    """What is wrong with one ``push/render`` answer (RFC-006 §5.2), or None."""
    if answer is None:
        return "no answer within the host's bound (RFC-006 §5.3: the fallback is shown)"
    if answer.has_error:
        error = as_object(answer.error) or {}
        return f"an error answer ({error.get('code')}): the fallback is shown"
    result = as_object(answer.result)
    content: object = result.get("content") if result is not None else None
    if not isinstance(content, list):
        return "result.content is not an array of content blocks"
    for index, block in enumerate(cast(list[object], content)):
        if not (is_object(block) and isinstance(block.get("type"), str)):
            return f"result.content[{index}] is not a content block"
    timestamp = result.get("timestamp") if result is not None else None
    if timestamp is not None and not isinstance(timestamp, str):
        return "result.timestamp is not a string"
    return None


@_given(_mcpl)
def push_render_answer(main: MainEvidence) -> Verdict:
    sent = main.transcript.sent_requests("push/render")
    if not sent:
        return _skipped(
            "the host sent no push/render (no deferred notice was pending after the listen window)"
        )
    problems: list[str] = []
    evidence: list[Any] = []
    for request in sent:
        answer = main.transcript.answer_to(request)
        problem = _render_problems(answer)
        if problem is not None:
            problems.append(problem)
            evidence.append(_shown(answer if answer is not None else request))
    if problems:
        return _failed("; ".join(dict.fromkeys(problems)), evidence)
    return _passed(f"{_plural(len(sent), 'push/render')} answered with content blocks")


def _declared_then(main: MainEvidence, params: Mapping[str, object], problems: list[str]) -> list[str]:
    """The feature-set problem of ``params`` (if any), then ``problems``."""
    problem = _feature_set_problem(main, params, ready=False)
    return [*([problem] if problem else []), *problems]


def _item_problems(
    params: Mapping[str, object], key: str, problem_of: Callable[[Any], str | None]
) -> list[str]:
    """``problem_of`` each item of the array ``params[key]``, as ``key[index]: problem``."""
    items = as_list(params.get(key)) or []
    return [
        f"{key}[{index}]: {problem}"
        for index, item in enumerate(items)
        if (problem := problem_of(item)) is not None
    ]


@_given(_mcpl)
def inference_params(main: MainEvidence) -> Verdict:
    return _judge_params(
        main,
        "inference/request",
        lambda params: _declared_then(main, params, inference_params_problems(params)),
    )


def _channel_params(method: str, key: str, problem_of: Callable[[Any], str | None]) -> _Rule:
    """The rule for the server's ``method`` requests (MCPL §14): the params' problems
    (``channel_params_problems``), then each item of the array ``params[key]``'s."""

    @_given(_mcpl)
    def rule(main: MainEvidence) -> Verdict:
        return _judge_params(
            main,
            method,
            lambda params: [
                *channel_params_problems(method, params),
                *_item_problems(params, key, problem_of),
            ],
        )

    return rule


channels_register_shape = _channel_params("channels/register", "channels", descriptor_problem)


@_given(_mcpl)
def channels_register_itemized(main: MainEvidence) -> Verdict:
    registrations = main.transcript.server_requests(frozenset({"channels/register"}))
    if not registrations:
        return _skipped("no channels/register was seen")
    itemized: list[WireMessage] = []
    for request in registrations:
        answer = main.transcript.answer_to(request)
        if answer is not None and not answer.has_error and as_object(answer.result) is not None:
            itemized.append(request)
    if not itemized:
        return _skipped("no channels/register was answered with itemized results (each was refused)")
    for request in itemized:
        ping = main.after_register.get(request.seq)
        if ping is not None and not ping.answered:
            return _failed(
                f"the server stopped answering after its channels/register was answered itemized: {_no_answer(ping)}",
                [_shown(request)],
            )
    judged = [r for r in itemized if r.seq in main.after_register]
    if not judged:
        return _skipped("no liveness ping was made after the itemized answer")
    return _passed("it went on answering after the itemized answer")


channels_incoming_params = _channel_params("channels/incoming", "messages", incoming_message_problem)


# --- targeted publish (RFC-011) ---------------------------------------------------------------


def _publish_declarations(params: Mapping[str, object]) -> list[Any]:
    """The descriptors of a register/changed message that carry ``capabilities.publish``."""
    items = [*(as_list(params.get("channels")) or []), *(as_list(params.get("added")) or [])]
    items += as_list(params.get("updated")) or []
    return [
        d
        for d in items
        if (descriptor := as_object(d)) is not None
        and (capabilities := as_object(descriptor.get("capabilities"))) is not None
        and "publish" in capabilities
    ]


@_given(_mcpl)
def channels_publish_target_value(main: MainEvidence) -> Verdict:
    messages = main.transcript.server_messages_of(frozenset({"channels/register", "channels/changed"}))
    declared = [(m, d) for m in messages for d in _publish_declarations(as_object(m.params) or {})]
    if not declared:
        return _skipped("no channel descriptor declared capabilities.publish")
    problems: list[str] = []
    evidence: list[Any] = []
    for message, descriptor in declared:
        problem = publish_target_problem(descriptor)
        if problem is not None:
            problems.append(problem)
            evidence.append(_shown(message))
    if problems:
        return _failed("; ".join(dict.fromkeys(problems)), evidence)
    return _passed(f"{_plural(len(declared), 'declaration')}, each exact or root")


@_given(_mcpl)
def channels_publish_target_echo(main: MainEvidence) -> Verdict:
    sent = [
        m
        for m in main.transcript.messages
        if m.direction == "out"
        and m.kind == "request"
        and m.method == "channels/publish"
        and "threadId" in (as_object(m.params) or {})
    ]
    if not sent:
        return _skipped("no channels/publish carrying threadId was sent (the check posts nothing on its own)")
    problems: list[str] = []
    evidence: list[Any] = []
    for request in sent:
        answer = main.transcript.answer_to(request)
        if answer is None or answer.has_error:
            continue  # unconfirmed for the host, no echo to judge
        thread = (as_object(request.params) or {}).get("threadId")
        result = as_object(answer.result)
        if result is not None and result.get("delivered") is True and isinstance(thread, str | None):
            outcome, why = targeted_outcome(result, thread)
            if outcome != "delivered":
                problems.append(why)
                evidence.append(_shown(answer))
    if problems:
        return _failed("; ".join(dict.fromkeys(problems)), evidence)
    return _passed(f"{_plural(len(sent), 'targeted publish')}: each delivered one echoed its threadId")


# --- bulk content references (MCPL §19) ----------------------------------------------------


def reference_problems(where: str, content: object) -> list[str]:
    """The §19 problems of one ``ContentBlock[]`` lane (pure): each block that fails closed
    (§19.8: inline data claiming a disposition, data and uri together, an invalid uri) and
    each optional reference field the one invalid-field rule drops, with its section."""
    blocks = as_list(content)
    if blocks is None:
        return []
    problems: list[str] = []
    for index, block in enumerate(blocks):
        reading = read_block(block)
        if isinstance(reading, Withheld) and reading.reason != "a content entry that is not an object":
            problems.append(f"{where}[{index}]: {reading.reason}; a host withholds it (MCPL §19.8)")
        elif isinstance(reading, Reference) and reading.fields.dropped:
            dropped = ", ".join(reading.fields.dropped)
            problems.append(
                f"{where}[{index}]: invalid {dropped}; a host treats it as absent (MCPL §19.8, App. B.1)"
            )
    return problems


def _reference_lanes(main: MainEvidence) -> list[tuple[str, object, WireMessage]]:
    """``(where, content, message)`` of every server->host content lane seen (§19.4): push
    events, channel messages, tool results."""
    lanes: list[tuple[str, object, WireMessage]] = []
    for message in main.transcript.server_messages_of(frozenset({"push/event", "channels/incoming"})):
        params = as_object(message.params) or {}
        if message.method == "push/event":
            lanes.append(
                (
                    "push/event payload.content",
                    (as_object(params.get("payload")) or {}).get("content"),
                    message,
                )
            )
            continue
        for number, item in enumerate(as_list(params.get("messages")) or []):
            lanes.append(
                (
                    f"channels/incoming message {number} content",
                    (as_object(item) or {}).get("content"),
                    message,
                )
            )
    for request in main.transcript.sent_requests("tools/call"):
        answer = main.transcript.answer_to(request)
        result = as_object(answer.result) if answer is not None and not answer.has_error else None
        if answer is not None and result is not None:
            name = (as_object(request.params) or {}).get("name")
            lanes.append((f"tools/call {name} result content", result.get("content"), answer))
    return lanes


@_given(_main)
def references_fields(main: MainEvidence) -> Verdict:
    lanes = _reference_lanes(main)
    if not lanes:
        return _skipped("no tool result, push/event or channels/incoming content was seen")
    problems: list[str] = []
    evidence: list[Any] = []
    for where, content, message in lanes:
        found = reference_problems(where, content)
        if found:
            problems += found
            evidence.append(_shown(message))
    if problems:
        return _warned("; ".join(dict.fromkeys(problems)), evidence)
    return _passed(f"{_plural(len(lanes), 'content lane')} seen, no reference field problem")


@_given(_mcpl)
def state_update_params(main: MainEvidence) -> Verdict:
    return _judge_params(
        main,
        "state/update",
        lambda params: _declared_then(main, params, state_params_problems("state/update", params)),
    )


def _observe_problems(params: dict[str, Any]) -> list[str]:
    """RFC-007 §13's schema only (no host limit: 64 rules and paths are a floor, §6.6)."""
    parsed = parse_observe(params, max_rules=sys.maxsize, max_paths=sys.maxsize)
    if not isinstance(parsed, HandlerError):
        return []
    data = as_object(parsed.data) or {}
    problems = as_list(data.get("problems"))
    return [str(p) for p in problems] if problems is not None else [parsed.message]


@_given(_mcpl)
def tools_observe_params(main: MainEvidence) -> Verdict:
    return _judge_params(main, "tools/observe", _observe_problems)


# --- shutdown ----------------------------------------------------------------------------------


def _shutdown(outcome: ShutdownEvidence | None, what: str) -> Verdict:
    if outcome is None:
        return _skipped(f"{what} was not tried")
    if outcome.note is not None:
        return _skipped(outcome.note)
    if outcome.already_gone:
        return _skipped(f"the server had already exited before {what}")
    bound = _seconds(outcome.bound_seconds)
    if outcome.seconds is None or outcome.seconds > outcome.bound_seconds:
        return _failed(f"the server did not exit within {bound} after {what}")
    status = outcome.exit_status
    if status is not None and status < 0 and outcome.signal is None:
        return _failed(f"the server was killed by signal {-status} after {what}, not ending by itself")
    shown = f", exit status {status}" if status is not None else ""
    return _passed(f"exited {_seconds(outcome.seconds)} after {what}{shown}")


@_given(_main)
def recording_same(main: MainEvidence) -> Verdict:
    """docs/protocol.md RP8: the live answers against a recording (``replay.against``)."""
    against = main.against
    if against is None:
        return _skipped("no recording to compare with (--against FILE)")
    answer = _initialize_answer(main)
    live_init = answer.result if answer is not None and not answer.has_error else None
    found = first_answer_difference(against.initialize, live_init, against.asked)
    if found is not None:
        return _failed(found)
    return _passed(f"initialize and {_plural(len(against.asked), 'recorded request')} answered as recorded")


@_given(_main)
def shutdown_stdin_close(main: MainEvidence) -> Verdict:
    return _shutdown(main.shutdown, "its stdin was closed")


@_given(_raw)
def shutdown_sigterm(raw: RawEvidence) -> Verdict:
    return _shutdown(raw.shutdown, "SIGTERM")


RULES: dict[str, _Rule] = {
    "init.answers": init_answers,
    "init.protocol-version": init_protocol_version,
    "init.server-info": init_server_info,
    "init.capabilities": init_capabilities,
    "init.initialized": init_initialized,
    "init.discover": init_discover,
    "init.before-initialized": init_before_initialized,
    "jsonrpc.ping": jsonrpc_ping,
    "jsonrpc.unknown-method": jsonrpc_unknown_method,
    "jsonrpc.invalid-request": jsonrpc_invalid_request,
    "jsonrpc.id-null": jsonrpc_id_null,
    "jsonrpc.crlf": jsonrpc_crlf,
    "jsonrpc.big-message": jsonrpc_big_message,
    "jsonrpc.server-ids": jsonrpc_server_ids,
    "stdout.only-json": stdout_only_json,
    "tools.list.schema": tools_list_schema,
    "tools.list.pagination": tools_list_pagination,
    "tools.call.unknown-tool": tools_call_unknown_tool,
    "tools.call.output-schema": tools_call_output_schema,
    "tools.class": tools_class,
    "resources.list.schema": resources_list_schema,
    "resources.list.pagination": resources_list_pagination,
    "resources.read.listed": resources_read_listed,
    "prompts.list.schema": prompts_list_schema,
    "prompts.list.pagination": prompts_list_pagination,
    "prompts.get.unknown-prompt": prompts_get_unknown_prompt,
    "mcpl.advertisement.shape": mcpl_advertisement_shape,
    "mcpl.version": mcpl_version,
    "mcpl.revision.digest": mcpl_revision_digest,
    "mcpl.uses.vocabulary": mcpl_uses_vocabulary,
    "mcpl.uses.complete": mcpl_uses_complete,
    "mcpl.capabilities.advertised": mcpl_capabilities_advertised,
    "mcpl.policy.request-form": mcpl_policy_request_form,
    "mcpl.policy.receipt.shape": mcpl_policy_receipt_shape,
    "mcpl.pre-policy.quiet": mcpl_pre_policy_quiet,
    "mcpl.reduction.respected": mcpl_reduction_respected,
    "push.params": push_params,
    "push.featureset-declared": push_featureset_declared,
    "push.coalesce": push_coalesce,
    "push.render.answer": push_render_answer,
    "inference.params": inference_params,
    "channels.register.shape": channels_register_shape,
    "channels.register.itemized": channels_register_itemized,
    "channels.incoming.params": channels_incoming_params,
    "channels.publish-target.value": channels_publish_target_value,
    "channels.publish-target.echo": channels_publish_target_echo,
    "tools.observe.params": tools_observe_params,
    "state.update.params": state_update_params,
    "references.fields": references_fields,
    "mcpl.context-injection": mcpl_context_injection,
    "mcpl.input-streaming": mcpl_input_streaming,
    "recording.same": recording_same,
    "shutdown.stdin-close": shutdown_stdin_close,
    "shutdown.sigterm": shutdown_sigterm,
}


#: Characters of a reason (it may quote server values).
MAX_REASON_CHARS = 1000


def _json_start(value: object, budget: int, depth: int = 0) -> tuple[object, int, bool]:
    """The start of a JSON value, for showing its first characters: ``(copy, characters,
    cut)``. Members and items are kept while the compact JSON counted so far is under
    ``budget`` characters, and ``cut`` says whether any was left out. Strings are kept
    whole: a secret cut in two would no longer be found by the redactor. Containers nested
    ``MAX_REPORT_DEPTH`` levels deep are kept whole: ``redact_json`` replaces them by its
    marker without looking in. A server's listing of many megabytes is so redacted and
    shown in time proportional to ``budget``, not to its size."""
    if isinstance(value, str):
        return value, len(value) + 2, False
    if depth >= MAX_REPORT_DEPTH or not isinstance(value, (list, dict)):
        return value, 1, False
    count, cut = 2, False
    if isinstance(value, list):
        items: list[object] = []
        for item in cast("list[object]", value):
            if count >= budget:
                return items, count, True
            kept, used, inner = _json_start(item, budget - count, depth + 1)
            items.append(kept)
            count, cut = count + used + 1, cut or inner
        return items, count, cut
    members: dict[object, object] = {}
    for key, item in cast("dict[object, object]", value).items():
        if count >= budget:
            return members, count, True
        kept, used, inner = _json_start(item, budget - count, depth + 1)
        members[key] = kept
        count, cut = count + used + (len(key) if isinstance(key, str) else 1) + 4, cut or inner
    return members, count, cut


def _evidence_text(value: object, redactor: Redactor | None) -> str:
    """One evidence value as shown: compact JSON (or the text as sent), redacted before the
    cut, cut at ``EVIDENCE_UNITS`` characters, control and invisible characters escaped
    (quotes kept). Nesting beyond the report's depth is replaced by a marker first. Only
    the start of a JSON value is redacted and rendered (``_json_start``: its first
    ``EVIDENCE_UNITS * 4`` characters or so)."""
    cut = False
    if not isinstance(value, str):
        start, _, cut = _json_start(value, EVIDENCE_UNITS * 4)
        shown = redact_json(start, redactor or Redactor())
        try:
            value = orjson.dumps(shown).decode()
        except TypeError:  # an integer beyond 64 bits
            value = json.dumps(shown, ensure_ascii=False, separators=(",", ":"), default=repr)
    elif redactor is not None:
        value = redactor.redact(value[: EVIDENCE_UNITS * 4])
    if len(value) > EVIDENCE_UNITS:
        value = value[:EVIDENCE_UNITS] + "…"
    elif cut:  # what was left out was left out after what is shown
        value += "…"
    return escape_text(value, quotes=False)


def _reason(text: str, redactor: Redactor | None) -> str:
    """A reason as shown: redacted, cut, control and invisible characters escaped."""
    if redactor is not None:
        text = redactor.redact(text)
    if len(text) > MAX_REASON_CHARS:
        text = text[:MAX_REASON_CHARS] + "…"
    return escape_text(text, quotes=False)


def evaluate(
    ev: RunEvidence, specs: Sequence[CheckSpec] = CHECKS, redactor: Redactor | None = None
) -> list[CheckResult]:
    """Run the rule of each spec over ``ev`` (a check that does not apply to the transport
    is skipped saying so). Evidence values are rendered by ``_evidence_text`` (redacted by
    ``redactor``, cut at ``EVIDENCE_UNITS``, escaped); reasons are redacted, cut at
    ``MAX_REASON_CHARS`` and escaped. Never raises for any evidence: a rule
    that fails is a bug, reported as a failed check naming it."""
    results: list[CheckResult] = []
    for spec in specs:
        if spec.transports is not None and ev.transport not in spec.transports:
            verdict = _skipped(f"applies to {', '.join(sorted(spec.transports))} only, not {ev.transport}")
        else:
            try:
                verdict = RULES[spec.id](ev)
            except Exception as exc:  # a bug in a rule: say so, keep the other checks
                verdict = _failed(f"the check itself failed ({type(exc).__name__}: {exc}); please report it")
        evidence = tuple(_evidence_text(value, redactor) for value in verdict.evidence)
        seconds = check_seconds(spec, ev.phase_seconds)
        results.append(
            CheckResult(spec, verdict.status, _reason(verdict.reason, redactor), evidence, seconds=seconds)
        )
    return results
