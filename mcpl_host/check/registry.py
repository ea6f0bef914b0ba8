"""The checks of ``mcpl-host check``: stable ids, categories, spec sections, and the result model.

Rules of this module (pure: no I/O, no clock):

- Every check has a stable dotted ``id`` (``init.answers``), a ``category`` (one of
  ``CATEGORIES``), a one-line ``title``, the ``spec`` section it enforces, and the evidence
  ``steps`` the runner must take for it (``Step``). ``CHECKS`` lists them in report order;
  ``mcpl_host.check.rules.RULES`` holds one pure rule per id (a test keeps the two equal).
- A check that judges an MCPL deviation carries a ``Compat``: what a strict MCPL 0.5 host
  (this library today) does with the deviation, and whether the ``0.4`` compatibility
  profile (the one described in docs/protocol.md, "Compatibility profiles", once it lands)
  hosts the server anyway. It is reported with every failure and warning of that check.
- A check ends ``passed``, ``failed``, ``warned`` (a deviation a host copes with: a SHOULD,
  or a MUST of a document no real host enforces) or ``skipped`` (the server does not
  advertise what the check needs, the transport has no such thing, or an earlier step
  failed so the check could not run). Failures and warnings carry a reason, the evidence
  (redacted and cut) and the spec section.
- Selection: ``--only`` / ``--skip`` patterns are shell globs (``fnmatch``) matched against
  each id and each category (``select``). Expected failures (``--expected-failures``) are ids;
  ``judge_expected`` marks each failed check that was expected and each expected id that
  did not fail although it ran (a *stale* entry: the run fails, as in the MCP conformance
  suite, so the list shrinks as the server gets fixed).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from typing import Literal

__all__ = [
    "CATEGORIES",
    "CHECKS",
    "CHECKS_BY_ID",
    "STATUSES",
    "CheckResult",
    "CheckSpec",
    "Compat",
    "ExpectedFailuresError",
    "Status",
    "Step",
    "STEP_ORDER",
    "Summary",
    "check_seconds",
    "check_step",
    "exit_status",
    "judge_expected",
    "parse_expected_failures",
    "select",
    "steps_needed",
    "summary",
]

Status = Literal["passed", "failed", "warned", "skipped"]
STATUSES: tuple[Status, ...] = ("passed", "failed", "warned", "skipped")
#: What the runner does to gather evidence (see ``mcpl_host.check.runner``):
#: ``main`` the handshake and initial policy through the library; ``listen`` the listen
#: window for what the server sends unasked; ``reduction`` a policy reduction revoking
#: ``pushEvents`` and a second window; ``lists`` tools/resources/prompts listings;
#: ``calls`` tool calls, an unknown tool and prompt, a resource read; ``against`` the
#: requests of a recording asked again (``check --against FILE``); ``close`` closing the
#: server's stdin; ``raw`` a second session speaking raw JSON-RPC; ``sigterm`` SIGTERM at
#: the end of the raw session.
Step = Literal["main", "listen", "reduction", "lists", "calls", "against", "close", "raw", "sigterm"]
CATEGORIES: tuple[str, ...] = (
    "lifecycle",
    "jsonrpc",
    "tools",
    "resources",
    "prompts",
    "mcpl",
    "recording",
    "shutdown",
)

MCP = "MCP 2025-11-25"
JSONRPC = "JSON-RPC 2.0"


@dataclass(frozen=True, slots=True)
class Compat:
    """What hosts do with an MCPL deviation: ``strict`` (a strict MCPL 0.5 host, this
    library today), ``profile04`` (the ``0.4`` compatibility profile), and ``hosted04``:
    True when the 0.4 profile hosts the server anyway, False when it refuses the same,
    None when the profile's description does not decide it."""

    strict: str
    profile04: str
    hosted04: bool | None

    def to_json(self) -> dict[str, object]:
        return {"strict": self.strict, "profile04": self.profile04, "hostedBy04Profile": self.hosted04}


@dataclass(frozen=True, slots=True)
class CheckSpec:
    """One check: ``id``, ``category``, ``title``, the ``spec`` section, the ``steps`` it
    needs, ``compat`` (MCPL deviations only) and ``transports`` it applies to (None: all)."""

    id: str
    category: str
    title: str
    spec: str
    steps: frozenset[Step]
    compat: Compat | None = None
    transports: frozenset[str] | None = None


def _spec(
    id: str,
    category: str,
    title: str,
    spec: str,
    steps: Iterable[Step],
    compat: Compat | None = None,
    transports: Iterable[str] | None = None,
) -> CheckSpec:
    return CheckSpec(
        id, category, title, spec, frozenset(steps), compat, frozenset(transports) if transports else None
    )


_UNCHANGED = "the same: the profile changes how the policy is sent and when requests are judged, not this"
_REFUSED_04 = "refused the same way: the grant never exceeds the host's policy in any profile"
_PARAMS_04 = "refused the same way: the profile relaxes policy timing and admission, not params validation"

CHECKS: tuple[CheckSpec, ...] = (
    # --- lifecycle -------------------------------------------------------------------------
    _spec("init.answers", "lifecycle", "initialize is answered in time with a result", f"{MCP} Lifecycle, Initialization", ["main"]),
    _spec("init.protocol-version", "lifecycle", "the protocol version agreed is one the host implements", f"{MCP} Lifecycle, Version Negotiation", ["main"]),
    _spec("init.server-info", "lifecycle", "serverInfo names the server and its version", f"{MCP} Lifecycle, Initialization (InitializeResult.serverInfo)", ["main"]),
    _spec("init.capabilities", "lifecycle", "capabilities are well-formed", f"{MCP} Lifecycle, Capability Negotiation (ServerCapabilities)", ["main"]),
    _spec("init.initialized", "lifecycle", "notifications/initialized is taken silently and the server goes on answering", f"{MCP} Lifecycle, Initialization; {JSONRPC} §4.1", ["main"]),
    _spec("init.discover", "lifecycle", "server/discover is answered: a DiscoverResult, or an error from a handshake-era server", "MCP 2026-07-28 Versioning and Compatibility, server/discover; JSON-RPC 2.0 §4.1", ["raw"], transports=["stdio", "http"]),
    _spec("init.before-initialized", "lifecycle", "nothing but ping and logging before notifications/initialized", f"{MCP} Lifecycle, Initialization", ["main", "raw"]),
    # --- JSON-RPC hygiene ----------------------------------------------------------------------
    _spec("jsonrpc.ping", "jsonrpc", "ping is answered with an empty result", f"{MCP} Utilities, Ping", ["raw"]),
    _spec("jsonrpc.unknown-method", "jsonrpc", "an unknown method is answered -32601, not with silence", f"{JSONRPC} §5.1", ["raw"]),
    # Over HTTP a server refuses a malformed POST with an HTTP status, which a JSON-RPC
    # session cannot see: judged on the stream transports only.
    _spec("jsonrpc.invalid-request", "jsonrpc", "an invalid request is answered -32600", f"{JSONRPC} §5, §5.1", ["raw"], transports=["stdio", "websocket"]),
    _spec("jsonrpc.id-null", "jsonrpc", "a request with id null is answered", f"{JSONRPC} §4, §5; {MCP} Basic, Requests", ["raw"]),
    _spec("jsonrpc.crlf", "jsonrpc", "a line ended by CRLF is read as one message", f"{MCP} Transports, stdio; RFC 8259 §2", ["raw"], transports=["stdio"]),
    _spec("jsonrpc.big-message", "jsonrpc", "a big message (1 MiB by default) is read and answered", f"{MCP} Transports", ["raw"]),
    _spec("jsonrpc.server-ids", "jsonrpc", "the server's request ids are valid, never reused while pending, and its answers name our ids", f"{MCP} Basic, Requests and Responses", ["main", "raw"]),
    _spec("stdout.only-json", "jsonrpc", "nothing but JSON-RPC messages on stdout", f"{MCP} Transports, stdio", ["main", "raw"], transports=["stdio"]),
    # --- tools, resources, prompts ---------------------------------------------------------------
    _spec("tools.list.schema", "tools", "tools/list pages match the schema; input and output schemas are JSON Schema objects", f"{MCP} Server, Tools (Tool, ListToolsResult)", ["main", "lists"]),
    _spec("tools.list.pagination", "tools", "tools/list pagination terminates", f"{MCP} Utilities, Pagination", ["main", "lists"]),
    _spec("tools.call.unknown-tool", "tools", "calling an unknown tool is a protocol error", f"{MCP} Server, Tools, Error Handling", ["main", "lists", "calls"]),
    _spec("tools.call.output-schema", "tools", "structured results match the tool's outputSchema", f"{MCP} Server, Tools, Output Schema", ["main", "lists", "calls"]),
    _spec("tools.class", "tools", "tool classes: _meta mcpl/class an array of known classes, no undefined mcpl/ key", "MCPL RFC-008 §3, §4", ["main", "lists"]),
    _spec("resources.list.schema", "resources", "resources/list and resources/templates/list pages match the schema", f"{MCP} Server, Resources", ["main", "lists"]),
    _spec("resources.list.pagination", "resources", "resources/list and resources/templates/list pagination terminates", f"{MCP} Utilities, Pagination", ["main", "lists"]),
    _spec("resources.read.listed", "resources", "reading a listed resource returns its contents", f"{MCP} Server, Resources, Reading Resources", ["main", "lists", "calls"]),
    _spec("prompts.list.schema", "prompts", "prompts/list pages match the schema", f"{MCP} Server, Prompts", ["main", "lists"]),
    _spec("prompts.list.pagination", "prompts", "prompts/list pagination terminates", f"{MCP} Utilities, Pagination", ["main", "lists"]),
    _spec("prompts.get.unknown-prompt", "prompts", "getting an unknown prompt is refused -32602", f"{MCP} Server, Prompts, Error Handling", ["main", "lists", "calls"]),
    # --- MCPL ---------------------------------------------------------------------------------
    _spec(
        "mcpl.advertisement.shape", "mcpl", "the MCPL advertisement is well-formed (and which featureSets shape)", "MCPL §5.1, §6.1; RFC-001", ["main"],
        Compat(
            "reads featureSets in either shape (an array by each entry's name; an entry without one is skipped); a declaration it cannot read is disabled (invalid_uses)",
            "hosted: the profile reads both shapes the same way", True,
        ),
    ),
    _spec(
        "mcpl.version", "mcpl", 'the advertisement says version "0.5"', "MCPL §5.2", ["main"],
        Compat(
            "serves an MCPL version it does not know best-effort, with a warning; 0.4 is served as 0.5 (strictly)",
            "hosted: the default profile choice (auto) picks 0.4 for a server that says 0.4 or nothing recognisable", True,
        ),
    ),
    _spec(
        "mcpl.revision.digest", "mcpl", "revision equals the canonical digest of the manifest", "MCPL §17.2", ["main"],
        Compat("logs a conformance defect and uses the manifest anyway (the digest never gates acceptance)", "the same", True),
    ),
    _spec(
        "mcpl.uses.vocabulary", "mcpl", "every feature set's uses is drawn from the capability vocabulary", "MCPL §6.2, §6.4", ["main"],
        Compat(
            "disables the feature set (invalid_uses): its push/event and inference/request are refused -32001",
            "hosted: uses and unknown vocabulary values are informational (each mismatch logged once); admission checks the grant of the top-level capability",
            True,
        ),
    ),
    _spec(
        "mcpl.uses.complete", "mcpl", "a feature set exercises only capabilities its uses lists", "MCPL §6.4 rule 2", ["main", "listen"],
        Compat(
            "refuses the request -32002 with data {capability, featureSet} (a declaration mismatch)",
            "hosted: uses is informational; the request is admitted when its top-level capability is granted", True,
        ),
    ),
    _spec(
        "mcpl.capabilities.advertised", "mcpl", "every capability the server exercises is advertised", "MCPL §5.1, §5.4", ["main", "listen"],
        Compat(
            "refuses the request -32002: a capability never advertised is never granted",
            "hosted when the top-level capability (e.g. channels) is advertised and granted (0.4 servers advertise channels: true or partial objects); refused otherwise",
            None,
        ),
    ),
    _spec(
        "mcpl.policy.request-form", "mcpl", "the initial featureSets/update request is answered with a receipt", "MCPL §5.3, §6.7", ["main"],
        Compat(
            "never becomes MCPL-ready: the connection stays MCP-only (tools, resources and prompts work; every push/event and channel request is refused -32002)",
            "hosted: when the request is answered with an error or not within a short bound, the host sends the same policy as a notification and puts it in force without a receipt",
            True,
        ),
    ),
    _spec(
        "mcpl.policy.receipt.shape", "mcpl", "receipts are well-formed (fallback when refused, effect on each unavailable feature, no mode when nothing degraded)", "MCPL §6.7", ["main", "reduction"],
        Compat("records a conformance defect and follows the receipt (accepted: ready; refused: MCP-only, or closed for fallback \"close\")", _UNCHANGED, None),
    ),
    _spec(
        "mcpl.pre-policy.quiet", "mcpl", "nothing privileged is sent before the policy is in force", "MCPL §5.3", ["main", "listen"],
        Compat(
            "refuses each such request -32002 (not yet in force); a server that treats that refusal as fatal then stops answering",
            "hosted: requests that arrive before the policy is settled are held (bounded in count and time) and judged against the grant once it is in force",
            True,
        ),
    ),
    _spec(
        "mcpl.reduction.respected", "mcpl", "no push/event after a reduction that revokes pushEvents (short listen)", "MCPL §6.7", ["main", "listen", "reduction"],
        Compat("refuses every push/event after the reduction -32002", _REFUSED_04, False),
    ),
    _spec(
        "push.params", "mcpl", "push/event params are valid", "MCPL §9.2", ["main", "listen"],
        Compat("refuses the push -32602 with data.problems", _PARAMS_04, False),
    ),
    _spec(
        "push.featureset-declared", "mcpl", "push/event names a declared, enabled feature set", "MCPL §6.5, §6.6", ["main", "listen"],
        Compat(
            "refuses the push: -32003 for an undeclared feature set, -32001 for a disabled one",
            "not decided by the profile's description (it admits by the top-level capability; feature-set names are not mentioned)",
            None,
        ),
    ),
    _spec(
        "push.coalesce", "mcpl", "coalesce members of push/event params and channels/incoming messages are well-formed", "RFC-006 §13, §3.1", ["main", "listen"],
        Compat(
            "with an event inbox: refuses the push -32602 (data: field, reason) and a channel message coalesce_invalid; without one, coalesce is ignored and the event appended",
            "not decided by the profile's description (RFC-006 postdates it)",
            None,
        ),
    ),
    _spec(
        "push.render.answer", "mcpl", "push/render answers carry content blocks, within the host's bound", "RFC-006 §5.2, §5.3", ["main", "listen"],
        Compat(
            "shows the batch's fallback instead (an error, a malformed result or no answer within Limits.push_render_timeout_seconds)",
            "the same",
            True,
        ),
    ),
    _spec(
        "inference.params", "mcpl", "inference/request params are valid and name a declared feature set", "MCPL §11.2, §6.5", ["main", "listen"],
        Compat("refuses the request (-32602, -32003 or -32001)", _PARAMS_04, False),
    ),
    _spec(
        "channels.register.shape", "mcpl", "channels/register params hold valid channel descriptors", "MCPL §14.2, §14.5", ["main", "listen"],
        Compat("refuses each invalid descriptor (invalid_descriptor) in an itemized answer", _PARAMS_04, False),
    ),
    _spec(
        "channels.register.itemized", "mcpl", "the server goes on answering after channels/register is answered itemized", "MCPL §14.5", ["main", "listen"],
        Compat("answers channels/register only with itemized results {results: [{id, accepted, reason?}]}; a server that cannot read them loses its channels", "the same: every profile answers itemized", False),
    ),
    _spec(
        "channels.incoming.params", "mcpl", "channels/incoming messages are valid", "MCPL §14.3", ["main", "listen"],
        Compat("refuses each invalid message in its itemized answer", _PARAMS_04, False),
    ),
    _spec(
        "channels.publish-target.value", "mcpl", "a channel descriptor's capabilities.publish.target is exact or root", "RFC-011 §3 (MCPL §14.2)", ["main", "listen"],
        Compat("registers the channel as one with no declaration: no threadId is ever sent to it, its publication carries no placement guarantee", "the same", True),
    ),
    _spec(
        "channels.publish-target.echo", "mcpl", "a delivered targeted channels/publish echoes the threadId it was sent", "RFC-011 §5", ["main"],
        Compat("the publish counts as unconfirmed: something was posted, not provably where asked", "the same", True),
    ),
    _spec(
        "tools.observe.params", "mcpl", "tools/observe filters are what RFC-007 §13's schema allows", "MCPL RFC-007 §6.1, §6.6, §13", ["main", "listen"],
        Compat("refuses the request -32602 and keeps the filter in force (no filter: metadata only)", _PARAMS_04, False),
    ),
    _spec(
        "state.update.params", "mcpl", "state/update params are valid and name a declared feature set", "MCPL §8.3 (docs/protocol.md, State)", ["main", "listen"],
        Compat("refuses the request -32602 (or -32003 / -32001 for its feature set)", _PARAMS_04, False),
    ),
    _spec(
        "references.fields", "mcpl", "reference blocks in tool results, pushes and channel messages carry valid fields", "MCPL §19.3, §19.8, App. B.1", ["main", "listen", "calls"],
        Compat(
            "drops each invalid optional field (keeping the block and its disposition) and withholds inline data that claims a disposition from the model-visible form",
            "the same: the profile does not touch content blocks",
            True,
        ),
    ),
    _spec(
        "mcpl.context-injection", "mcpl", "the server does not inject context (contextInjections, deprecated)", "MCPL RFC-010 §4.1", ["main", "calls"],
        Compat("applies the injections it granted (only a grant naming the inject paths grants them) and warns once per connection; ignores them under ignore_injections (the 0.6 rule)", "the same: the profile does not change injections", True),
    ),
    _spec(
        "mcpl.input-streaming", "mcpl", "input streaming (experimental) is advertised only by channels.inputStreaming: true, beside channels.incoming", "MCPL RFC-009 §2.1, §2.2", ["main"],
        Compat("reads only the explicit member; grants channels.incoming.streaming only with ServerConfig.input_streams and a policy naming it", "the same: the profile does not widen to the experimental path", True),
    ),
    # --- recording (check --against FILE) --------------------------------------------------------
    _spec("recording.same", "recording", "the server answers as the recording shows (--against FILE)", "docs/protocol.md RP8", ["main", "against"]),
    # --- shutdown ---------------------------------------------------------------------------
    _spec("shutdown.stdin-close", "shutdown", "the server exits within the bound after its stdin closes", f"{MCP} Lifecycle, Shutdown (stdio)", ["main", "close"], transports=["stdio"]),
    _spec("shutdown.sigterm", "shutdown", "the server exits within the bound after SIGTERM", f"{MCP} Lifecycle, Shutdown (stdio)", ["raw", "sigterm"], transports=["stdio"]),
)  # fmt: skip

CHECKS_BY_ID: dict[str, CheckSpec] = {spec.id: spec for spec in CHECKS}


@dataclass(frozen=True, slots=True)
class CheckResult:
    """The outcome of one check. ``evidence``: redacted, escaped, cut strings (the messages
    that failed). ``expected``: listed in ``--expected-failures`` and failed as expected;
    ``stale``: listed there but did not fail (the run fails)."""

    spec: CheckSpec
    status: Status
    reason: str
    evidence: tuple[str, ...] = ()
    expected: bool = False
    stale: bool = False
    #: Seconds measured for the step that decided it (``check_seconds``).
    seconds: float = 0.0

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def counts_as_failure(self) -> bool:
        """A failure that is not expected, or a stale expected failure."""
        return (self.status == "failed" and not self.expected) or self.stale

    def to_json(self) -> dict[str, object]:
        """The check's entry in the JSON report (``report.schema.json``, ``checks[]``)."""
        spec = self.spec
        shows_compat = spec.compat is not None and self.status in ("failed", "warned")
        return {
            "id": spec.id,
            "category": spec.category,
            "title": spec.title,
            "status": self.status,
            "reason": self.reason,
            "spec": spec.spec,
            "evidence": list(self.evidence),
            "seconds": round(self.seconds, 3),
            "expectedFailure": self.expected,
            "staleExpectedFailure": self.stale,
            "compat": spec.compat.to_json() if shows_compat and spec.compat is not None else None,
        }


def _matches(pattern: str, spec: CheckSpec) -> bool:
    return fnmatchcase(spec.id, pattern) or fnmatchcase(spec.category, pattern)


def select(only: Sequence[str] = (), skip: Sequence[str] = ()) -> tuple[list[CheckSpec], list[str]]:
    """The checks selected by ``only`` (none: all) minus ``skip``, in report order, and the
    patterns (of both) that match no check at all (the caller reports them as usage errors)."""
    unmatched = [p for p in (*only, *skip) if not any(_matches(p, spec) for spec in CHECKS)]
    chosen = [
        spec
        for spec in CHECKS
        if (not only or any(_matches(p, spec) for p in only)) and not any(_matches(p, spec) for p in skip)
    ]
    return chosen, unmatched


#: The steps in the order the runner takes them.
STEP_ORDER: tuple[Step, ...] = (
    "main",
    "listen",
    "reduction",
    "lists",
    "calls",
    "against",
    "close",
    "raw",
    "sigterm",
)


def check_step(spec: CheckSpec, ran: Mapping[str, float]) -> Step | None:
    """The step whose evidence decides ``spec``: the last one it needs (in ``STEP_ORDER``)
    that ran (``ran``: step -> its measured seconds); None when none ran."""
    found: list[Step] = [step for step in STEP_ORDER if step in spec.steps and step in ran]
    return found[-1] if found else None


def check_seconds(spec: CheckSpec, ran: Mapping[str, float]) -> float:
    """A check's measured duration in seconds: that of the step that decides it
    (``check_step``), 0 when none ran (JUnit ``time``, the report's ``seconds``)."""
    step = check_step(spec, ran)
    return ran[step] if step is not None else 0.0


def steps_needed(specs: Iterable[CheckSpec], transport: str) -> frozenset[Step]:
    """Every step the selected checks need on ``transport`` (a check that does not apply to
    the transport needs nothing)."""
    steps: set[Step] = set()
    for spec in specs:
        if spec.transports is None or transport in spec.transports:
            steps |= spec.steps
    return frozenset(steps)


class ExpectedFailuresError(ValueError):
    """An ``--expected-failures`` file that cannot be used (a usage error, exit 2): names the
    line and the problem."""


def parse_expected_failures(text: str, source: str = "expected failures") -> frozenset[str]:
    """Check ids, one per line; blank lines and ``#`` comments (whole-line or trailing) are
    ignored. Raises ``ExpectedFailuresError`` for an id that names no check (a typo would
    otherwise hide a real failure) or a line with more than one word."""
    ids: set[str] = set()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if len(line.split()) != 1:
            raise ExpectedFailuresError(f"{source}, line {number}: one check id per line, not {line!r}")
        if line not in CHECKS_BY_ID:
            raise ExpectedFailuresError(f"{source}, line {number}: {line!r} is not a check id")
        ids.add(line)
    return frozenset(ids)


def judge_expected(results: Sequence[CheckResult], expected: frozenset[str]) -> list[CheckResult]:
    """``results`` with ``expected`` applied: a failed check listed there is an expected
    failure; a listed check that ran and passed or warned is stale. A listed check that was
    skipped or not selected is neither (it did not run, so it did not start passing)."""
    judged: list[CheckResult] = []
    for result in results:
        if result.id in expected and result.status == "failed":
            result = replace(result, expected=True)
        elif result.id in expected and result.status in ("passed", "warned"):
            result = replace(result, stale=True)
        judged.append(result)
    return judged


@dataclass(frozen=True, slots=True)
class Summary:
    """Counts of a run: per status, expected failures, stale entries, and per category."""

    counts: dict[str, int]
    expected: int
    stale: int
    by_category: dict[str, dict[str, int]] = field(default_factory=dict[str, dict[str, int]])

    @property
    def ok(self) -> bool:
        return self.counts["failed"] == self.expected and self.stale == 0


def summary(results: Sequence[CheckResult]) -> Summary:
    """Count ``results`` (after ``judge_expected``)."""
    counts: dict[str, int] = dict.fromkeys(STATUSES, 0)
    by_category: dict[str, dict[str, int]] = {}
    for result in results:
        counts[result.status] += 1
        per = by_category.setdefault(result.spec.category, {status: 0 for status in STATUSES})
        per[result.status] += 1
    return Summary(
        counts=counts,
        expected=sum(1 for r in results if r.expected),
        stale=sum(1 for r in results if r.stale),
        by_category=by_category,
    )


def exit_status(results: Sequence[CheckResult]) -> int:
    """0 when every failure was expected and no expected failure is stale, else 1."""
    return 1 if any(result.counts_as_failure for result in results) else 0
