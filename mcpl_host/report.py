"""The report of ``mcpl-host probe`` (the probe document and its terminal rendering), and
the event lines of ``mcpl-host run``.

Rules of this module:

- The probe document (``new_document``) is what ``--json`` prints and what the terminal
  report renders; ``read_connection`` and ``error_object`` fill it from a connection and an
  exception. This module never talks to a server. Rendering functions take values that are
  already redacted (``redact_json``): string values and server keys with the server's
  ``Redactor``; the documents' own keys (``HOST_KEYS``) never change, so redaction never
  changes a document's structure.
- Every string a server sent is shown through ``safe_text()``, that is the one escaper
  ``mcpl_host.logging.escape_text`` (the same escapes as log lines): control characters (ESC
  included, so no terminal escape sequence gets through), bidirectional and other invisible
  format characters and line separators are shown as escapes; quotes and backslashes are
  kept; long values are cut. Server text always goes into ``rich.text.Text`` objects, never
  into markup, so ``[bold]`` in a description is literal.
- Tables (``mcpl_host.tables``): an identifier (a tool or prompt name, a URI, a URI
  template, a channel id) is escaped but never cut nor split; a description is folded to
  one line (``prose_text``: no literal ``\\n``) and wraps between words.
- What MCPL did is in the document, for both ``featureSets`` shapes: ``mcplState`` (the
  state in one line: ready with the profile used, MCP-only and why), ``compat`` (setting,
  profile, why, the notes of the 0.4 profile, requests held), ``grant.featureSets`` (each set
  enabled or disabled with its reason), ``channels`` (registered now). In MCP-only state no
  capability is listed as denied that plain MCP still serves (``tools``).
- On failure, ``error.chain`` lists what went wrong before the last error (refusals, held
  requests refused, why MCPL is off, lists unavailable, the causes of the exception), and
  the terminal shows it under the error sentence (``render_failure``).
- ``ProgressLine``: on a terminal, what the probe waits for and for how long, on one line of
  stderr that is cleared before anything else is printed.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any, TextIO, cast

import orjson
from rich.console import Console, Group
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from mcpl_host.jsonrpc.values import JSONObject, is_array, is_object
from mcpl_host.logging import Redactor, escape_text, json_safe
from mcpl_host.mcp_records import Tool
from mcpl_host.mcpl.policy_state import MCPLState
from mcpl_host.mcpl.publish_target import publish_target, publish_target_problem
from mcpl_host.tables import IDENTIFIER, PROSE, WORDS, Column, print_table

if TYPE_CHECKING:
    from mcpl_host.server_connection import ServerConnection

__all__ = [
    "HOST_KEYS",
    "ProgressLine",
    "ReportConsole",
    "error_chain",
    "error_object",
    "failure_sentence",
    "new_document",
    "print_json",
    "print_json_line",
    "read_connection",
    "redact_json",
    "omitted_sentence",
    "render_event",
    "render_omitted",
    "render_events",
    "render_failure",
    "render_lists",
    "render_listen_end",
    "render_listen_start",
    "render_notes",
    "render_report",
    "render_run_end",
    "render_run_event",
    "run_event_text",
    "print_event_line",
    "log_message_summary",
    "render_run_start",
    "render_stopping",
    "no_grant_warning",
    "refusal_text",
    "run_event",
    "prose_text",
    "safe_text",
    "silence",
    "state_line",
    "waiting_text",
]

#: Characters of one server value shown in a table cell or an event line.
MAX_CELL_CHARS = 300
MAX_EVENT_CHARS = 160
#: Characters of a description in the tables of ``tools``, ``resources`` and ``prompts``
#: (``prose_text(short=True)``; ``--json`` has it whole).
MAX_SHORT_DESCRIPTION_CHARS = 160
#: A blank line: where a description's first paragraph ends.
_PARAGRAPH_BREAK = re.compile(r"\n[^\S\n]*\n")
#: Characters of a sentence the host wrote about a server (a ``stalled`` explanation) shown
#: whole in one ``run`` line; it holds no server text but method names.
MAX_SENTENCE_CHARS = 1000


def new_document(command: list[str]) -> dict[str, Any]:
    """The probe document before anything is known (``ok`` false, lists empty)."""
    return {
        "ok": False,
        "command": command,
        "server": None,
        "protocolVersion": None,
        "era": None,
        "eraProbe": None,
        "supportedVersions": [],
        "capabilities": {},
        "instructions": None,
        "mcpl": None,
        "mcplState": {"state": "none", "line": "plain MCP server: no MCPL"},
        "compat": None,
        "grant": {
            "state": "none",
            "advertisedCapabilities": [],
            "effectiveCapabilities": [],
            "deniedCapabilities": [],
            "receipt": None,
            "defects": [],
            "featureSets": [],
        },
        "channels": [],
        "tools": [],
        "toolClasses": [],
        "resources": [],
        "resourceTemplates": [],
        "prompts": [],
        "skipped": [],
        "unavailable": {},
        "listenedSeconds": 0,
        "listenInterrupted": False,
        "events": [],
        "eventsNotKept": 0,
        "eventsOmitted": {"notKept": 0, "notKeptBytes": 0, "cut": 0, "cutBytes": 0},
        "error": None,
    }


def _obj(value: object) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one."""
    return value if is_object(value) else {}


def _list(value: object) -> list[Any]:
    """``value`` if it is a JSON array, else an empty one."""
    return value if is_array(value) else []


def _feature_sets(conn: ServerConnection) -> list[dict[str, Any]]:
    """Each declared set (both shapes), enabled or disabled with its reason."""
    derivation = conn.policy.state.derivation
    rows: list[dict[str, Any]] = []
    for name, declared in conn.policy.state.feature_sets.sets.items():
        row: JSONObject = {"name": name, "description": declared.description, "uses": list(declared.uses)}
        if derivation is None:  # no grant in force: nothing is enabled
            row.update(
                enabled=False, reason="not_in_force" if conn.mcpl_state is MCPLState.PENDING else "mcpl_off"
            )
        elif name in derivation.enabled:
            row["enabled"] = True
        else:
            why = derivation.disabled[name]
            row.update(enabled=False, reason=why.reason)
            if why.missing_capabilities:
                row["missingCapabilities"] = list(why.missing_capabilities)
            if why.detail:
                row["detail"] = why.detail
        rows.append(row)
    return rows


def _mcpl_state(conn: ServerConnection) -> JSONObject:
    state = conn.mcpl_state
    choice = conn.policy.state.choice
    policy = conn.policy.state
    data: JSONObject = {"state": state.value}
    if choice is not None:
        data.update(profile=choice.profile, profileReason=choice.reason)
    if state is MCPLState.READY:
        data["policyForm"] = "notification" if policy.settled_by == "notification" else "request"
        if policy.settled_by == "notification":
            data["reason"] = policy.notification_reason
        grant = conn.grant
        data["grantsNothing"] = grant is not None and not grant.paths
    elif state is MCPLState.MCP_ONLY:
        data["reason"] = policy.off_reason or "the policy exchange failed"
    data["line"] = state_line(data)
    return data


def state_line(state: Mapping[str, object]) -> str:
    """The MCPL state of a (redacted) ``mcplState`` in one line."""
    kind = state.get("state")
    profile = f"profile {state.get('profile')}, {state.get('profileReason')}" if state.get("profile") else ""
    if kind == "ready":
        line = f"MCPL ready ({profile})"
        if state.get("policyForm") == "notification":
            line += f"; the policy is in force without a receipt: {state.get('reason')}"
        if state.get("grantsNothing"):
            line += "; MCPL is granted nothing"
        return line
    if kind == "mcp-only":
        return (
            f"MCP-only: {state.get('reason')} ({profile}); tools, resources and prompts work as "
            "plain MCP, nothing of MCPL"
        )
    if kind == "pending":
        return f"MCPL pending: the policy is not yet in force ({profile})"
    return "plain MCP server: no MCPL"


def read_connection(doc: dict[str, Any], conn: ServerConnection) -> None:
    """Fill ``server`` ... ``mcpl``, ``mcplState``, ``compat``, ``grant`` and ``channels``
    from a ``ServerConnection`` after its handshake. Called again before the connection
    closes, so notes and channels that came later are in the document."""
    info = conn.server_info
    assert info is not None
    doc.update(
        server={"name": info.name, "version": info.version},
        protocolVersion=info.protocol_version,
        era=info.era,
        eraProbe=conn.era_probe.as_json() if conn.era_probe is not None else None,
        supportedVersions=list(info.supported_versions),
        capabilities=info.capabilities,
        instructions=info.instructions,
        mcpl=info.mcpl,
    )
    grant, outcome, state = conn.grant, conn.policy.state.outcome, conn.mcpl_state
    advertised = sorted(conn.policy.state.advertised)
    if grant is not None:
        denied = sorted(grant.denied & conn.policy.state.advertised) if state is MCPLState.READY else []
    else:
        # No grant in force: every MCPL capability advertised is off; plain MCP (tools) is not.
        denied = [path for path in advertised if path != "tools"]
    doc["grant"] = {
        "state": state.value,
        "advertisedCapabilities": advertised,
        "effectiveCapabilities": sorted(grant.paths) if grant else [],
        "deniedCapabilities": denied,
        "receipt": outcome.raw if outcome else None,
        "defects": outcome.defects if outcome else [],
        "featureSets": _feature_sets(conn),
    }
    choice = conn.policy.state.choice
    doc["mcplState"] = _mcpl_state(conn)
    doc["compat"] = (
        None
        if choice is None
        else {
            "setting": choice.setting,
            "profile": choice.profile,
            "reason": choice.reason,
            "notes": [note.to_json() for note in conn.hosted.compat_notes.notes],
            "held": conn.inbound.held_total,
        }
    )
    doc["channels"] = conn.inbound.channel_registry.descriptors()
    if conn.hosted.endpoint is not None:  # an mcpl:// server (MCPL §18.5)
        doc["mcpOnlyFallback"] = conn.mcp_only_fallback_taken


def error_object(exc: BaseException, stderr_tail: list[str]) -> dict[str, Any]:
    """``{type, message, code, data, stderrTail}`` for a failure: ``code`` and ``data`` when
    the server sent them (``InitializeError``/``RemoteError``; a refused protocol version
    keeps the server's ``supported`` list there), else None; the exception's own stderr
    tail if it carries one, else ``stderr_tail``."""
    code = getattr(exc, "code", None)
    return {
        "type": type(exc).__name__,
        "message": str(exc) or type(exc).__name__,
        "code": code if isinstance(code, int) else None,
        "data": getattr(exc, "data", None),
        "stderrTail": list(getattr(exc, "stderr_tail", None) or stderr_tail),
    }


def _dumps(value: object, *, indent: bool = False) -> bytes:
    """``value`` as strict JSON (RFC 8259) in UTF-8, whatever a server put in it: a lone
    surrogate is shown as its escape and an infinity is null (``logging.json_safe``), an
    integer beyond 64 bits is written by the standard library."""
    option = orjson.OPT_INDENT_2 if indent else None
    try:
        return orjson.dumps(value, default=repr, option=option)
    except orjson.JSONEncodeError:  # an integer beyond 64 bits, or a lone surrogate
        pass
    safe = json_safe(value)
    try:
        return orjson.dumps(safe, default=repr, option=option)
    except orjson.JSONEncodeError:
        return json.dumps(safe, default=repr, indent=2 if indent else None, allow_nan=False).encode()


def print_json(doc: Mapping[str, object]) -> None:
    """Write ``doc`` to stdout as one JSON document (indent 2), then a newline."""
    data = _dumps(doc, indent=True)
    try:
        sys.stdout.buffer.write(data + b"\n")
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away: nothing more to tell it
        silence(sys.stdout)


def silence(stream: IO[str]) -> None:
    """Point ``stream``'s file descriptor at /dev/null: its reader went away (``| head``), and
    the interpreter's final flush must not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, stream.fileno())
    os.close(devnull)


class ReportConsole(Console):
    """A rich ``Console`` that goes quiet when its reader goes away, instead of exiting the
    process from inside the probe (rich's default raises ``SystemExit``)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        silence(self.file)


def safe_text(value: object, *, max_chars: int = MAX_CELL_CHARS, newlines: bool = False) -> str:
    """``value`` (a string, or any JSON value, shown compact) as text that is safe to print
    on a terminal: cut at ``max_chars`` characters with ``…``, then escaped by
    ``escape_text`` (quotes kept; newlines escaped too unless ``newlines``)."""
    if not isinstance(value, str):
        value = _dumps(value).decode()
    if len(value) > max_chars:
        value = value[:max_chars] + "…"
    return escape_text(value, quotes=False, newlines=newlines)


#: Nesting kept in the report; deeper server values are replaced by a marker string (a
#: hostile server may nest a thousand levels, past what JSON encoders recurse through).
MAX_REPORT_DEPTH = 64
_TOO_DEEP = f"[nested deeper than {MAX_REPORT_DEPTH} levels]"


#: Keys of the documents this module builds (the probe document, its events and error, ``run``
#: events) and of the server objects it reads: never redacted, so the structure holds whatever
#: the secrets are.
HOST_KEYS = frozenset(new_document([])) | frozenset({
    # grant, error, config target, unavailable lists, events
    "state", "advertisedCapabilities", "effectiveCapabilities", "deniedCapabilities", "receipt",
    "defects", "type", "message", "code", "data", "file", "server", "url",
    "kind", "method", "params", "answer", "time", "era", "supportedVersions", "inputRequest",
    "sent", "outcome",  # eraProbe (with "fallback" below)
    # run event data (mcpl_host.supervisor, mcpl_host.host)
    "attempt", "serverName", "serverVersion", "mcpl", "mode", "reason", "phase", "exitStatus",
    "closeCode", "stderrTail", "uptimeSeconds", "delaySeconds", "failures", "windowSeconds",
    "id", "featureSet", "eventId", "accepted", "fallback", "unavailableFeatures",
    "missingCapabilities", "effect", "domains", "impacts", "impact", "detail",
    # server objects the report reads
    "name", "version", "revision", "description", "uses", "inputSchema", "properties",
    "required", "arguments", "uri", "mimeType", "uriTemplate", "payload", "content", "text",
    "capability", "featureSets", "tools", "resources", "prompts", "experimental",
    # MCPL state, compatibility, feature sets, channels, failures (this module, mcpl.compat)
    "line", "profile", "profileReason", "policyForm", "grantsNothing", "setting", "notes", "held",
    "sentence", "enabled", "heldSeconds", "chain", "channels", "results", "direction", "label",
    "listenStoppedBy",
    # tool classes (RFC-008)
    "classes", "source",
})  # fmt: skip


def redact_json(value: object, redactor: Redactor, _depth: int = 0) -> Any:
    """A copy of a JSON value with ``redactor`` applied to every string value and to every
    object key that is not one of ``HOST_KEYS``, and anything nested deeper than
    ``MAX_REPORT_DEPTH`` levels replaced by a marker. Never changes the structure: a key
    that held a secret is kept apart from its siblings (``[redacted] #2``). Never raises."""
    if isinstance(value, str):
        return redactor.redact(value)
    if (is_object(value) or is_array(value)) and _depth >= MAX_REPORT_DEPTH:
        return _TOO_DEEP
    if is_array(value):
        return [redact_json(item, redactor, _depth + 1) for item in value]
    if not is_object(value):
        return value
    members = cast("dict[Any, Any]", value)  # a caller's dict may have keys that are not strings
    shown: dict[Any, Any] = {}
    for key, item in members.items():
        if isinstance(key, str) and key not in HOST_KEYS:
            hidden = redactor.redact(key)
            if hidden != key:
                base, number = hidden, 2
                while hidden in shown or hidden in members:
                    hidden, number = f"{base} #{number}", number + 1
                key = hidden
        shown[key] = redact_json(item, redactor, _depth + 1)
    return shown


def _none() -> Text:
    return Text("—", style="dim")


def _text(value: object, *, newlines: bool = False) -> Text:
    return _none() if value is None or value == "" else Text(safe_text(value, newlines=newlines))


def prose_text(value: object, *, short: bool = False) -> str:
    """A description as one line: its runs of white space (newlines, tabs, line separators)
    folded to one space, then ``safe_text`` (cut, escaped): a table or a listing never shows
    a literal ``\\n``. ``short``: its first paragraph only, at most
    ``MAX_SHORT_DESCRIPTION_CHARS`` cut after a word, with ``…`` when anything was left out."""
    if not isinstance(value, str):
        return safe_text(value)
    paragraphs = _PARAGRAPH_BREAK.split(value.strip(), maxsplit=1) if short else [value]
    folded = " ".join(paragraphs[0].split())
    if short and len(folded) > MAX_SHORT_DESCRIPTION_CHARS:
        kept = folded[: MAX_SHORT_DESCRIPTION_CHARS + 1]
        kept = kept.rsplit(" ", 1)[0] if " " in kept else kept[:-1]
        folded = kept.rstrip() + "…"
    elif len(paragraphs) > 1:
        folded += " …"
    return safe_text(folded, max_chars=max(MAX_CELL_CHARS, len(folded)) if short else MAX_CELL_CHARS)


def _prose(value: object, short: bool = False) -> Text:
    return _none() if value is None or value == "" else Text(prose_text(value, short=short))


def _identifier(value: object) -> Text:
    """A name or URI a person copies into another command: escaped, never cut (the list it
    comes from is bounded by ``Limits.max_list_bytes``), bold; none is a dim dash."""
    if value is None or value == "":
        return _none()
    if not isinstance(value, str):
        value = _dumps(value).decode()
    return Text(escape_text(value, quotes=False), style="bold")


def _names(values: Any) -> Text:
    return Text(", ".join(safe_text(v) for v in values)) if values else _none()


def _capabilities(capabilities: Mapping[str, object]) -> Text:
    parts: list[str] = []
    for name, value in capabilities.items():
        flags = (
            [key for key, flag in value.items() if flag is True or is_object(flag)]
            if is_object(value)
            else []
        )
        parts.append(f"{name} ({', '.join(flags)})" if flags else name)
    return _names(parts)


def _manifest(mcpl: Mapping[str, object]) -> Text:
    text = Text(f"version {safe_text(mcpl.get('version'))}")
    if "revision" in mcpl:
        text.append(f", revision {safe_text(mcpl.get('revision'))}")
    shape = mcpl.get("featureSets")
    if is_array(shape):
        text.append(" (featureSets as an array, read by each entry's name)", style="dim")
    return text


_REASONS = {
    "invalid_uses": "its uses cannot be read",
    "capability_denied": "a capability it uses is not granted",
    "not_selected": "not selected by the feature-set policy",
    "disabled_by_policy": "disabled by the feature-set policy",
    "not_in_force": "the policy is not yet in force",
    "mcpl_off": "MCPL is off",
}


def _feature_set_lines(rows: Sequence[object]) -> Text:
    """One line per feature set: name, enabled or disabled and why, what it uses."""
    text = Text()
    for index, row in enumerate(_obj(r) for r in rows):
        if index:
            text.append("\n")
        text.append(safe_text(row.get("name")), style="bold")
        if row.get("enabled") is True:
            text.append("  enabled", style="green")
        else:
            reason = str(row.get("reason"))
            text.append(f"  disabled: {reason}", style="yellow")
            missing = _list(row.get("missingCapabilities"))
            explained = _REASONS.get(reason, "")
            if missing:
                explained = f"not granted: {', '.join(safe_text(m) for m in missing)}"
            elif row.get("detail"):
                explained = safe_text(row.get("detail"))
            if explained:
                text.append(f" ({explained})", style="yellow")
        if row.get("description"):
            text.append(f"  {safe_text(row.get('description'))}")
        uses = _list(row.get("uses"))
        if uses:
            text.append(f" (uses {', '.join(safe_text(u) for u in uses)})", style="dim")
    return text


def _receipt(grant: Mapping[str, object], state: Mapping[str, object]) -> Text:
    receipt = grant.get("receipt")
    if receipt is None and state.get("policyForm") == "notification":
        return Text("none: the policy was sent as a notification", style="yellow")
    if not is_object(receipt):
        return _none() if receipt is None else Text(safe_text(receipt))
    if receipt.get("accepted") is not True:
        text = Text()
        text.append("refused", style="red")
        if receipt.get("fallback"):
            text.append(f" (fallback {safe_text(receipt['fallback'])})")
        if receipt.get("reason"):
            text.append(f": {safe_text(receipt['reason'])}")
        return text
    text = Text()
    text.append("accepted", style="green")
    if receipt.get("mode"):
        text.append(f" ({safe_text(receipt['mode'])})")
    for entry in (_obj(e) for e in _list(receipt.get("unavailableFeatures"))):
        missing = _list(entry.get("missingCapabilities"))
        text.append(f"\n{safe_text(entry.get('featureSet'))} {safe_text(entry.get('effect', '?'))}")
        if missing:
            text.append(f" (missing {', '.join(safe_text(m) for m in missing)})", style="dim")
    return text


def _fields(rows: list[tuple[str, Text]]) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    for label, value in rows:
        table.add_row(label, value)
    return table


def _arguments(names: Sequence[object], required: object) -> Text:
    needed: set[Any] = set(_list(required))
    return _names([f"{name}*" if name in needed else name for name in names])


def tool_class_json(tool: Tool) -> dict[str, Any]:
    """A tool's effective classes and their source (RFC-008 §5, §6), as the probe's JSON
    document and the shell show them: ``{"name", "classes", "source"}``."""
    return {"name": tool.name, "classes": list(tool.classes), "source": tool.class_source}


def class_text(classes: Sequence[object], source: object) -> str:
    """``shell, files (server)``, or ``unclassed`` (RFC-008 §5.2: the most restrictive)."""
    if not classes:
        return "unclassed"
    return f"{', '.join(safe_text(c) for c in classes)} ({safe_text(source)})"


def _tool_row(tool: Mapping[str, object], classing: Mapping[str, object], short: bool) -> list[Text]:
    schema = v if is_object(v := tool.get("inputSchema")) else {}
    props = v if is_object(v := schema.get("properties")) else {}
    name = _identifier(tool.get("name"))
    name.append("\n" + class_text(_list(classing.get("classes")), classing.get("source")), style="dim")
    return [name, _prose(tool.get("description"), short), _arguments(list(props), schema.get("required"))]


def _prompt_row(prompt: Mapping[str, object], short: bool) -> list[Text]:
    args = [a for a in _list(prompt.get("arguments")) if is_object(a)]
    required = [a.get("name") for a in args if a.get("required")]
    return [
        _identifier(prompt.get("name")),
        _prose(prompt.get("description"), short),
        _arguments([a.get("name") for a in args], required),
    ]


def _resource_row(resource: Mapping[str, object], short: bool) -> list[Text]:
    return [
        _identifier(resource.get("uri")),
        _text(resource.get("name")),
        _text(resource.get("mimeType")),
        _prose(resource.get("description"), short),
    ]


def _template_row(template: Mapping[str, object], short: bool) -> list[Text]:
    return [
        _identifier(template.get("uriTemplate")),
        _text(template.get("name")),
        _prose(template.get("description"), short),
    ]


_DESCRIPTION, _ARGUMENTS = Column("Description", PROSE), Column("Arguments", WORDS)
# (document key, title, columns, row builder)
_TABLES = (
    ("tools", "Tools", [Column("Name (class)", IDENTIFIER), _DESCRIPTION, _ARGUMENTS], None),
    (
        "resources",
        "Resources",
        [Column("URI", IDENTIFIER), Column("Name", WORDS), Column("MIME type", WORDS), _DESCRIPTION],
        _resource_row,
    ),
    (
        "resourceTemplates",
        "Resource templates",
        [Column("URI template", IDENTIFIER), Column("Name", WORDS), _DESCRIPTION],
        _template_row,
    ),
    ("prompts", "Prompts", [Column("Name", IDENTIFIER), _DESCRIPTION, _ARGUMENTS], _prompt_row),
)
#: The keys of the probe document's lists, in the order shown.
LIST_KEYS = tuple(key for key, _, _, _ in _TABLES)
_CHANNEL_COLUMNS = [Column("ID", IDENTIFIER), Column("Direction", WORDS), Column("Publish target", WORDS)]


_ERAS = {"handshake": "handshake era: initialize", "stateless": "stateless: server/discover"}


def _protocol(doc: Mapping[str, object]) -> Text:
    """The protocol version and, when known, the era it was reached by and what the era
    probe did (docs/protocol.md S8: ``server/discover: the server exited with status 0
    before answering; then initialize on a restarted server``)."""
    text = _text(doc.get("protocolVersion"))
    era = _ERAS.get(str(doc.get("era")))
    if era is not None and doc.get("era") == "handshake":  # the stateless era says it all
        probe = _obj(doc.get("eraProbe"))
        sent, outcome, fallback = probe.get("sent"), probe.get("outcome"), probe.get("fallback")
        if isinstance(outcome, str):
            said = f"{sent}: {outcome}" if isinstance(sent, str) else outcome
            then = f"; then {fallback}" if isinstance(fallback, str) else ""
            era = f"{era}; {said}{then}"
    if era is not None:
        text.append(f" ({safe_text(era)})", style="dim")
    return text


#: Cells a panel takes from the width (a border and a cell of padding on each side), and
#: between the label and the value of a field (``_fields``).
_PANEL_FRAME, _FIELD_GAP = 4, 2
#: The probe document's ``endpoint`` keys (MCPL §18.4) and their labels.
_ENDPOINT_ROWS = (
    ("configuredUri", "Configured URI"),
    ("canonicalUri", "Canonical URI"),
    ("resolvedTransport", "Dialled"),
)


def render_report(console: Console, doc: Mapping[str, object]) -> None:
    """Print the server panel, the grant panel (with the MCPL state line, the profile and the
    feature sets) and the tables of a (redacted) probe doc."""
    server = _obj(doc.get("server"))
    title = f"{safe_text(server.get('name') or '(unnamed)')} {safe_text(server.get('version') or '')}"
    rows = [
        ("Protocol", _protocol(doc)),
        ("Capabilities", _capabilities(_obj(doc.get("capabilities")))),
    ]
    endpoint = _obj(doc.get("endpoint"))
    uris: list[tuple[str, Text]] = []
    for key, label in _ENDPOINT_ROWS:  # MCPL §18.4: three values, each on its own
        if key in endpoint:
            uris.append((label, Text(escape_text(str(endpoint[key]), quotes=False))))
    rows.extend(uris)
    mcpl = doc.get("mcpl")
    if is_object(mcpl):
        rows.append(("MCPL", _manifest(mcpl)))
    if doc.get("instructions"):
        rows.append(("Instructions", _text(doc["instructions"], newlines=True)))
    # A URI is never cut (mcpl_host.tables): one wider than the panel leaves goes under it.
    room = console.width - _PANEL_FRAME - max(len(label) for label, _ in rows) - _FIELD_GAP
    below = [(label, value) for label, value in uris if value.cell_len > room]
    shown = [row for row in rows if row not in below]
    console.print(Panel(_fields(shown), title=Text(title.strip(), style="bold"), title_align="left"))
    for label, value in below:
        console.print(Text.assemble((f"{label}: ", "bold"), value), soft_wrap=True)

    grant = _obj(doc.get("grant"))
    state = _obj(doc.get("mcplState"))
    compat = _obj(doc.get("compat"))
    if not is_object(mcpl) and doc.get("mcpOnlyFallback"):
        body: Any = Text(
            "plain MCP server: the mcpl:// endpoint did not advertise MCPL; hosted as MCP only, "
            "as the MCP-only fallback asked (MCPL §18.5)",
            style="yellow",
        )
    elif not is_object(mcpl):
        body = Text("plain MCP server: no MCPL, nothing to grant", style="dim")
    else:
        ready = state.get("state") == "ready"
        fields = [
            ("State", Text(safe_text(state.get("line")), style="green" if ready else "yellow")),
            ("Advertised", _names(grant.get("advertisedCapabilities"))),
            ("Granted", _names(grant.get("effectiveCapabilities"))),
        ]
        if ready:
            fields.append(("Denied", _names(grant.get("deniedCapabilities"))))
        else:
            off = grant.get("deniedCapabilities")
            fields.append(("Not in force", _names(off) if off else _none()))
        fields.append(("Receipt", _receipt(grant, state)))
        feature_sets = _list(grant.get("featureSets"))
        if feature_sets:
            fields.append(("Feature sets", _feature_set_lines(feature_sets)))
        if compat.get("held"):
            fields.append(("Held", Text(f"{compat['held']} request(s) held until the policy was settled")))
        parts: list[Any] = [_fields(fields)]
        if grant.get("defects"):
            parts.append(
                Text("\n".join(f"defect: {safe_text(d)}" for d in _list(grant["defects"])), style="yellow")
            )
        notes = _list(compat.get("notes"))
        if notes:
            parts.append(_notes(notes))
        body = Group(*parts) if len(parts) > 1 else parts[0]
    console.print(Panel(body, title=Text("Grant", style="bold"), title_align="left"))

    render_lists(console, doc)
    channels = [_channel_row(_obj(item)) for item in _list(doc.get("channels"))]
    if channels:  # registered ones only; none for most servers, so no "none" line
        print_table(console, "Channels", _CHANNEL_COLUMNS, channels)


def render_lists(
    console: Console, doc: Mapping[str, object], keys: Sequence[str] = LIST_KEYS, *, short: bool = False
) -> None:
    """Print the lists ``keys`` (of ``LIST_KEYS``) of a (redacted) probe document, each a
    table (``tables.print_table``: identifiers whole, descriptions folded to one line; with
    ``short``, their first paragraph, cut: ``prose_text``), or the line saying it was not
    offered (``skipped``) or unavailable (``unavailable``)."""
    for key, title, columns, row in _TABLES:
        if key not in keys:
            continue
        unavailable = _obj(doc.get("unavailable")).get(key)
        if key in _list(doc.get("skipped")):
            console.print(Text(f"{title}: not offered (capability not advertised)", style="dim"))
        elif is_object(unavailable):
            console.print(
                Text(
                    f"{title}: unavailable (server error {unavailable.get('code')}: "
                    f"{safe_text(unavailable.get('message'))})",
                    style="yellow",
                )
            )
        else:
            items = [_obj(item) for item in _list(doc.get(key))]
            if row is None:  # tools: each with its classes (RFC-008 §6), listed in the same order
                classings = {c.get("name"): c for c in map(_obj, _list(doc.get("toolClasses")))}
                table_rows = [_tool_row(item, _obj(classings.get(item.get("name"))), short) for item in items]
            else:
                table_rows = [row(item, short) for item in items]
            caption = "* required argument" if _ARGUMENTS in columns else None
            print_table(console, title, columns, table_rows, caption=caption)


def _channel_row(channel: Mapping[str, object]) -> list[Text]:
    """A registered channel: its id, direction and RFC-011 §3 publish target ("none" when
    it declares none, "invalid" for a value other than exact or root)."""
    target = publish_target(channel)
    shown = target or ("invalid" if publish_target_problem(channel) else "none")
    return [_identifier(channel.get("id")), _text(channel.get("direction")), Text(shown)]


def content_text(content: object) -> str:
    """The text blocks of a model-visible content list, joined by spaces (others left out)."""
    blocks = cast(list[object], content) if isinstance(content, list) else []
    return " ".join(
        str(b.get("text", "")) for b in (_obj(block) for block in blocks) if b.get("type") == "text"
    )


def render_inbox(console: Console, items: Sequence[object]) -> None:
    """What the event inbox gave a model at the end (``probe --coalesce``; RFC-006): one line
    per occurrence, its eventId and text."""
    console.print(Text(f"Event inbox, drained once ({len(items)} item(s) a model would read)", style="bold"))
    for item in (_obj(i) for i in items):
        line = (
            f"{safe_text(item.get('eventId'), max_chars=200)}: {safe_text(item.get('text'), max_chars=1000)}"
        )
        console.print(Padding(Text(line), (0, 0, 0, 2)))


def render_notes(console: Console, notes: Sequence[object]) -> None:
    """Compatibility notes that came after the report (while listening)."""
    if notes:
        console.print(_notes(notes))


def _notes(notes: Sequence[object]) -> Group:
    """The heading, then each note indented by two columns, its wrapped lines too."""
    lines: list[Any] = [Text("Compatibility notes (0.4 profile; MCPL 0.5 refuses these):", style="bold")]
    for note in (_obj(n) for n in notes):
        lines.append(
            Padding(Text(safe_text(note.get("sentence"), max_chars=1000), style="dim"), (0, 0, 0, 2))
        )
    return Group(*lines)


def log_message_summary(params: object) -> str | None:
    """``notifications/message`` params (MCP 2025-11-25 "Logging") as ``level [logger]: data``,
    the logger left out when the server named none (absent or null); None for other shapes."""
    if not isinstance(params, dict) or "data" not in params:
        return None
    entry = cast("dict[str, Any]", params)
    head = safe_text(entry.get("level", "info"), max_chars=20)
    if entry.get("logger") is not None:
        head += f" [{safe_text(entry['logger'], max_chars=80)}]"
    return f"{head}: {safe_text(entry['data'], max_chars=MAX_EVENT_CHARS)}"


def _event_summary(event: Mapping[str, object]) -> str:
    params = event.get("params")
    if event.get("method") == "notifications/message":
        summary = log_message_summary(params)
        if summary is not None:
            return summary
    if "push/event" in (event.get("kind"), event.get("method")) and is_object(params):
        payload = _obj(params.get("payload"))
        # The model-visible form when the host made one (MCPL §19.5: references as stubs).
        model_content = event.get("modelContent")
        blocks = model_content if is_array(model_content) else payload.get("content")
        texts = [str(b.get("text")) for b in _list(blocks) if is_object(b) and isinstance(b.get("text"), str)]
        head = f"{safe_text(params.get('featureSet'))} {safe_text(params.get('eventId'))}"
        return f"{head}: {safe_text(' '.join(texts), max_chars=MAX_EVENT_CHARS)}" if texts else head
    return "" if params is None else safe_text(params, max_chars=MAX_EVENT_CHARS)


def print_event_line(console: Console, head: Text, rest: Text) -> None:
    """One event line, ``head`` (the time) then ``rest``. On a terminal it is wrapped at word
    boundaries to the console's width, the continuation lines indented under ``rest``;
    elsewhere (a pipe, a file) it stays one line, whatever its length."""
    if not console.is_terminal:
        console.print(Text.assemble(head, rest), soft_wrap=True)
        return
    grid = Table.grid()
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row(head, rest)
    console.print(grid)


def _answered(answer: object) -> tuple[str, str]:
    """How an answer reads: accepted or not, items accepted, or answered."""
    if is_object(answer) and isinstance(answer.get("accepted"), bool):
        coalesce = answer.get("coalesce")  # RFC-006 §7: what the host did with a coalesced event
        outcome = coalesce.get("outcome") if is_object(coalesce) else None
        shown = f" ({safe_text(outcome, max_chars=20)})" if isinstance(outcome, str) else ""
        return (f"  → accepted{shown}", "green") if answer["accepted"] else ("  → not accepted", "yellow")
    results = _obj(answer).get("results")
    if is_array(results):
        accepted = sum(1 for item in results if is_object(item) and item.get("accepted") is True)
        return f"  → answered: {accepted} of {len(results)} accepted", (
            "green" if accepted == len(results) else "yellow"
        )
    return "  → answered", "green"


def refusal_text(error: Mapping[str, object]) -> str:
    """``refused -32002 Capability denied: ... (pushEvents)`` from a (redacted) error object."""
    text = f"refused {error.get('code')} {safe_text(error.get('message'))}"
    data = error.get("data")
    if is_object(data) and "capability" in data:
        text += f" ({safe_text(data['capability'])})"
    return text


def render_event(console: Console, event: Mapping[str, object]) -> None:
    """Print one (redacted) event as one line: time, kind, method, summary, outcome."""
    clock = str(event.get("time", ""))[11:23]  # HH:MM:SS.mmm of the ISO 8601 time
    head = Text(f"{clock}  ", style="dim")
    line = Text()
    kind = event.get("kind")
    line.append(str(kind), style="cyan")
    if kind != "push/event":
        line.append(f" {safe_text(event.get('method'))}", style="bold")
    summary = _event_summary(event)
    if summary:
        line.append(f" {summary}")
    error = event.get("error")
    if kind == "held":
        line.append("  → held until the policy is settled (0.4 profile)", style="yellow")
    elif is_object(error):
        unanswered = " (a notification: not answered)" if kind == "notification" else ""
        line.append(f"  → {refusal_text(error)}{unanswered}", style="red")
    elif "answer" in event:
        text, style = _answered(event.get("answer"))
        line.append(text, style=style)
    held = event.get("heldSeconds")
    if isinstance(held, (int, float)):
        line.append(f" (held {held:.2f} s)", style="dim")
    omitted = _obj(event.get("omitted"))
    if omitted:
        fields = ", ".join(str(name) for name in omitted.get("fields") or ())
        line.append(
            f" ({fields} left out: {omitted.get('bytes')} bytes, over maxRecordedEventBytes)", style="dim"
        )
    print_event_line(console, head, line)


def render_omitted(console: Console, omitted: dict[str, int]) -> None:
    """One line saying what the record of events left out (``EventRecord.omitted()``), if
    anything."""
    left_out = omitted_sentence({"eventsOmitted": omitted})
    if left_out is not None:
        console.print(Text(f"left out of the record: {left_out}", style="yellow"))


def omitted_sentence(doc: Mapping[str, object]) -> str | None:
    """What the record of events left out (``eventsOmitted`` of a probe doc), or None."""
    omitted = _obj(doc.get("eventsOmitted"))
    parts: list[str] = []
    if omitted.get("notKept"):
        parts.append(f"{omitted['notKept']} event(s) not kept ({omitted.get('notKeptBytes')} bytes)")
    if omitted.get("cut"):
        parts.append(
            f"{omitted['cut']} kept without their params or answer ({omitted.get('cutBytes')} bytes)"
        )
    if not parts:
        return None
    return "; ".join(parts) + " (maxRecordedBytes, maxRecordedEventBytes)"


def render_listen_start(console: Console, seconds: float, earlier: list[dict[str, Any]]) -> None:
    """Announce listening (``seconds``; inf: until Ctrl-C) and print events seen so far."""
    span = "until Ctrl-C" if seconds == float("inf") else f"for {seconds:g} s (Ctrl-C stops)"
    console.print(Text(f"Listening {span}…", style="bold"))
    for event in earlier:
        render_event(console, event)


def render_listen_end(console: Console, doc: dict[str, Any]) -> None:
    """One line: how long we listened and how many events arrived in all."""
    count = len(doc.get("events") or ()) + int(doc.get("eventsNotKept") or 0)
    by = "Ctrl-C" if doc.get("listenStoppedBy") in (None, "SIGINT") else doc.get("listenStoppedBy")
    how = f"stopped by {by} after" if doc.get("listenInterrupted") else "listened for"
    console.print(Text(f"{how} {doc.get('listenedSeconds', 0):g} s; {count} event(s) in all", style="dim"))
    render_omitted(console, _obj(doc.get("eventsOmitted")))


def render_events(console: Console, events: list[dict[str, Any]]) -> None:
    """Events that arrived while listing (no ``--listen``)."""
    if events:
        console.print(Text(f"Events ({len(events)})", style="bold"))
        for event in events:
            render_event(console, event)


def failure_sentence(error: Mapping[str, object]) -> str:
    """``Error: <message> (code N)`` on one line, from a (redacted) error object."""
    message = safe_text(error.get("message"), max_chars=1000)
    code = error.get("code")
    if code is not None and str(code) not in message:
        message += f" (code {code})"
    return f"Error: {message}"


#: Entries of ``error.chain`` kept (the first ones: what went wrong first explains the rest).
MAX_CHAIN = 12


def error_chain(doc: Mapping[str, object], exc: BaseException | None = None) -> list[str]:
    """What went wrong before the last error, oldest first (module rules): from the
    (unredacted) probe ``doc`` and the exception's causes. Sentences; server text escaped
    by the caller (``redact_json``, then ``safe_text`` when shown)."""
    chain: list[str] = []
    for event in (_obj(e) for e in _list(doc.get("events"))):
        error = event.get("error")
        if is_object(error):
            method, time = event.get("method"), str(event.get("time", ""))[11:23]
            held = event.get("heldSeconds")
            after = f" after holding it {held:.1f} s" if isinstance(held, (int, float)) else ""
            chain.append(
                f"{time} the host refused {method}{after}: {error.get('message')} ({error.get('code')})"
            )
    state = _obj(doc.get("mcplState"))
    if state.get("state") == "mcp-only":
        chain.append(f"MCPL is off: {state.get('reason')}")
    for key, unavailable in _obj(doc.get("unavailable")).items():
        entry = _obj(unavailable)
        chain.append(f"{key} unavailable: server error {entry.get('code')}: {entry.get('message')}")
    cause: BaseException | None = None
    if exc is not None:
        cause = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    while cause is not None and len(chain) < MAX_CHAIN:
        chain.append(f"{type(cause).__name__}: {cause}")
        cause = cause.__cause__ or (None if cause.__suppress_context__ else cause.__context__)
    return chain[:MAX_CHAIN]


def render_failure(console: Console, error: Mapping[str, object]) -> None:
    """The failure sentence, the chain of what went wrong before it, and the server's stderr
    tail (all already redacted)."""
    console.print(Text(failure_sentence(error), style="bold red"), soft_wrap=True)
    chain = _list(error.get("chain"))
    if chain:
        console.print(Text("What happened before:", style="dim"))
        for number, step in enumerate(chain, 1):
            console.print(Text(f"  {number}. {safe_text(step, max_chars=1000)}"), soft_wrap=True)
    tail = _list(error.get("stderrTail"))
    if tail:
        lines = "line" if len(tail) == 1 else f"{len(tail)} lines"
        console.print(Text(f"Server stderr (last {lines}):", style="dim"))
        for line in tail:
            console.print(Text(f"  {safe_text(line, max_chars=1000)}"), soft_wrap=True)


class ProgressLine:
    """What the probe waits for, on one line of ``stream`` when it is a terminal (module
    rules); does nothing otherwise. ``show(text)`` replaces the line, ``clear()`` removes it
    (call it before printing anything else). ``text`` must already be safe (``safe_text``)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        try:
            self.enabled = stream.isatty()
        except (AttributeError, ValueError, OSError):
            self.enabled = False
        self._shown = False

    def show(self, text: str) -> None:
        if self.enabled:
            self._write(f"\r\x1b[2K{text}")
            self._shown = True

    def clear(self) -> None:
        if self.enabled and self._shown:
            self._write("\r\x1b[2K")
            self._shown = False

    def _write(self, text: str) -> None:
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):
            self.enabled = False


def waiting_text(server: str, waiting: list[tuple[str, float]], silent: float | None) -> str:
    """``waiting for mcpl-demo: tools/list (3 s)``, with how long the server has been silent
    when that is longer than a second."""
    shown = ", ".join(f"{safe_text(method)} ({seconds:.0f} s)" for method, seconds in waiting)
    text = f"waiting for {safe_text(server)}: {shown}"
    if silent is not None and silent >= 1:
        text += f"; nothing received for {silent:.0f} s"
    return text + " (Ctrl-C stops)"


# --- mcpl-host run ----------------------------------------------------------------------------


def _iso_time(seconds: object) -> str:
    if not isinstance(seconds, (int, float)):
        return ""
    moment = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def run_event(event: Mapping[str, object], redactor: Redactor) -> dict[str, Any]:
    """An ``events.event_json(event)`` as ``mcpl-host run`` shows it: ``time`` as ISO 8601 UTC,
    ``server``, ``kind``, and ``data`` with the server's secrets redacted."""
    return {
        "time": _iso_time(event.get("time")),
        "server": event.get("server"),
        "kind": event.get("kind"),
        "data": redact_json(_obj(event.get("data")), redactor),
    }


def print_json_line(value: object) -> bool:
    """Write ``value`` as one compact JSON line on stdout and flush (``run --json``).
    Returns False when the reader of stdout has gone away (stdout is then silenced)."""
    try:
        sys.stdout.buffer.write(_dumps(value) + b"\n")
        sys.stdout.flush()
    except BrokenPipeError:
        silence(sys.stdout)
        return False
    return True


def render_run_start(console: Console, source: str, servers: list[str]) -> None:
    """The first line of ``run``: what is hosted."""
    console.print(
        Text(
            f"Hosting {len(servers)} server(s) from {safe_text(source)}: "
            f"{', '.join(safe_text(s) for s in servers)} (Ctrl-C stops)",
            style="bold",
        ),
        soft_wrap=not console.is_terminal,
    )


def no_grant_warning(name: str) -> str:
    """The warning for a config entry that gives no grant."""
    return (
        f"warning: {safe_text(name)}: its config entry gives no grant, so MCPL is granted nothing "
        '(add "grant": [...] or "grantAllAdvertised": true)'
    )


def render_stopping(console: Console, count: int) -> None:
    """``stopping: closing N server(s)…``: said as soon as a stop (Ctrl-C, a signal) arrives,
    while the servers close (each bounded by its grace periods)."""
    console.print(Text(f"stopping: closing {count} server{'' if count == 1 else 's'}…", style="dim"))


def render_run_end(console: Console, interrupted: bool) -> None:
    console.print(
        Text(
            "stopped: every server is closed" if interrupted else "stopped: every server gave up",
            style="dim" if interrupted else "bold red",
        )
    )


def _outcome(data: Mapping[str, object]) -> tuple[str, str]:
    error = data.get("error")
    if is_object(error):
        return f"  → {refusal_text(error)}", "red"
    if "answer" in data:
        return _answered(data.get("answer"))
    return "  → waiting for the application", "yellow"


def _run_summary(kind: str, d: Mapping[str, object]) -> tuple[str, str]:
    """(text, style) for one event's data (already redacted)."""
    if kind == "connecting":
        return f"attempt {d.get('attempt')}", "dim"
    if kind in ("ready", "degraded"):
        state = {"ready": "MCPL ready", "none": "plain MCP"}.get(str(d.get("mcpl")), "MCP-only")
        text = f"{safe_text(d.get('serverName'))} {safe_text(d.get('serverVersion'))}, {state}"
        text += f" ({safe_text(d.get('mode'))})" if d.get("mode") else ""
        text += f", profile {safe_text(d.get('profile'))}" if d.get("profile") else ""
        text += ", policy sent as a notification" if d.get("policyForm") == "notification" else ""
        granted = _list(d.get("effectiveCapabilities"))
        text += f", granted {', '.join(safe_text(c) for c in granted)}" if granted else ""
        style = "green" if kind == "ready" else "yellow"
        if d.get("grantsNothing"):
            text += ", granted nothing (warning: no grant in the config)"
            style = "yellow"
        text += f": {safe_text(d.get('reason'))}" if d.get("reason") else ""
        return f"{text} (attempt {d.get('attempt')})", style
    if kind == "disconnected":
        text = safe_text(d.get("reason"), max_chars=MAX_EVENT_CHARS)
        tail = _list(d.get("stderrTail"))
        text += f"; last stderr: {safe_text(tail[-1], max_chars=MAX_EVENT_CHARS)}" if tail else ""
        return text, "red"
    if kind == "reconnecting":
        delay = d.get("delaySeconds")
        delay = f"{delay:.2f}" if isinstance(delay, (int, float)) else "?"
        return f"restart {d.get('attempt')} in {delay} s", "yellow"
    if kind == "gave_up":
        return safe_text(d.get("reason"), max_chars=MAX_EVENT_CHARS), "bold red"
    if kind == "stalled":
        return safe_text(d.get("explanation"), max_chars=MAX_SENTENCE_CHARS), "yellow"
    if kind == "session_renewed":
        return f"the server ended the HTTP session; new session {d.get('renewals')} started", "yellow"
    if kind == "policy_receipt":
        if d.get("accepted") is True:
            return "accepted" + (f" ({safe_text(d.get('mode'))})" if d.get("mode") else ""), ""
        reason = f": {safe_text(d.get('reason'))}" if d.get("reason") else ""
        return f"refused (fallback {safe_text(d.get('fallback'))}){reason}", "yellow"
    if kind == "manifest_change":
        impacts = [
            f"{safe_text(i.get('impact'))} {safe_text(i.get('detail'))}"
            for i in _list(d.get("impacts"))
            if is_object(i)
        ]
        return (
            f"{', '.join(safe_text(x) for x in _list(d.get('domains')))}: {'; '.join(impacts) or 'no impact'}",
            "",
        )
    if kind == "push_event" or (kind == "refused" and d.get("method") == "push/event"):
        summary = _event_summary(
            {"kind": "push/event", "params": d.get("params"), "modelContent": d.get("modelContent")}
        )
        return summary + _outcome(d)[0], _outcome(d)[1]
    if kind == "notification" and d.get("method") == "notifications/message":
        message = log_message_summary(d.get("params"))
        if message is not None:
            return f"notifications/message {message}", ""
    summary = safe_text(d.get("method"))
    if d.get("params") is not None:
        summary += " " + safe_text(d.get("params"), max_chars=MAX_EVENT_CHARS)
    if kind == "held":
        return summary + "  → held until the policy is settled (0.4 profile)", "yellow"
    if kind == "notification":
        error = d.get("error")
        if is_object(error):
            return summary + f"  → {refusal_text(error)} (a notification: not answered)", "red"
        return summary, ""
    return summary + _outcome(d)[0], _outcome(d)[1]  # server_request, refused


def run_event_text(event: Mapping[str, object], *, server: bool = True) -> tuple[Text, Text]:
    """One (redacted) ``run_event`` as (time, the rest: server unless not ``server``, kind,
    summary), for ``print_event_line``."""
    text, style = _run_summary(str(event.get("kind")), _obj(event.get("data")))
    head = Text(f"{str(event.get('time', ''))[11:23]}  ", style="dim")
    line = Text()
    if server:
        line.append(f"{safe_text(event.get('server'))}  ", style="bold")
    line.append(f"{event.get('kind')} ", style="cyan")
    line.append(text, style=style or None)
    return head, line


def render_run_event(console: Console, event: Mapping[str, object]) -> None:
    """Print one (redacted) ``run_event`` as one line: time, server, kind, summary."""
    print_event_line(console, *run_event_text(event))
