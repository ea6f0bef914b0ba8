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
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from typing import IO, Any, cast

import orjson
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from mcpl_host.jsonrpc.values import is_array, is_object
from mcpl_host.logging import Redactor, escape_text

__all__ = [
    "HOST_KEYS",
    "ReportConsole",
    "error_object",
    "failure_sentence",
    "new_document",
    "print_json",
    "print_json_line",
    "read_connection",
    "redact_json",
    "render_event",
    "render_events",
    "render_failure",
    "render_listen_end",
    "render_listen_start",
    "render_report",
    "render_run_end",
    "render_run_event",
    "render_run_start",
    "render_run_stopping",
    "run_event",
    "safe_text",
    "silence",
]

#: Characters of one server value shown in a table cell or an event line.
MAX_CELL_CHARS = 300
MAX_EVENT_CHARS = 160


def new_document(command: list[str]) -> dict[str, Any]:
    """The probe document before anything is known (``ok`` false, lists empty)."""
    return {
        "ok": False,
        "command": command,
        "server": None,
        "protocolVersion": None,
        "era": None,
        "supportedVersions": [],
        "capabilities": {},
        "instructions": None,
        "mcpl": None,
        "grant": {
            "state": "none",
            "advertisedCapabilities": [],
            "effectiveCapabilities": [],
            "deniedCapabilities": [],
            "receipt": None,
            "defects": [],
        },
        "tools": [],
        "resources": [],
        "resourceTemplates": [],
        "prompts": [],
        "skipped": [],
        "unavailable": {},
        "listenedSeconds": 0,
        "listenInterrupted": False,
        "events": [],
        "eventsNotKept": 0,
        "error": None,
    }


def read_connection(doc: dict[str, Any], conn: Any) -> None:
    """Fill ``server`` ... ``mcpl`` and ``grant`` from a ``ServerConnection`` after its
    handshake (``server_info``, ``mcpl_state``, ``proposed_grant``, ``grant``,
    ``policy_outcome``)."""
    info = conn.server_info
    doc.update(
        server={"name": info.name, "version": info.version},
        protocolVersion=info.protocol_version,
        era=info.era,
        supportedVersions=list(info.supported_versions),
        capabilities=info.capabilities,
        instructions=info.instructions,
        mcpl=info.mcpl,
    )
    grant, proposed, outcome = conn.grant, conn.proposed_grant, conn.policy_outcome
    advertised = sorted(proposed.advertised) if proposed else []
    doc["grant"] = {
        "state": conn.mcpl_state.value,
        "advertisedCapabilities": advertised,
        "effectiveCapabilities": sorted(grant.paths) if grant else [],
        # With no grant in force (plain MCP, refused or failed policy), nothing is granted.
        "deniedCapabilities": sorted(grant.denied) if grant else advertised,
        "receipt": outcome.raw if outcome else None,
        "defects": outcome.defects if outcome else [],
    }


def error_object(exc: BaseException, stderr_tail: list[str]) -> dict[str, Any]:
    """``{type, message, code, data, stderr_tail}`` for a failure: ``code`` and ``data`` when
    the server sent them (``InitializeError``/``RemoteError``; a refused protocol version
    keeps the server's ``supported`` list there), else None; the exception's own stderr
    tail if it carries one, else ``stderr_tail``."""
    code = getattr(exc, "code", None)
    return {
        "type": type(exc).__name__,
        "message": str(exc) or type(exc).__name__,
        "code": code if isinstance(code, int) else None,
        "data": getattr(exc, "data", None),
        "stderr_tail": list(getattr(exc, "stderr_tail", None) or stderr_tail),
    }


def _dumps(value: Any, *, indent: bool = False) -> bytes:
    try:
        return orjson.dumps(value, default=repr, option=orjson.OPT_INDENT_2 if indent else None)
    except orjson.JSONEncodeError:  # an integer beyond 64 bits, or a lone surrogate
        return json.dumps(value, default=repr, indent=2 if indent else None).encode()


def print_json(doc: dict[str, Any]) -> None:
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


def safe_text(value: Any, *, max_chars: int = MAX_CELL_CHARS, newlines: bool = False) -> str:
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
    "defects", "type", "message", "code", "stderr_tail", "data", "file", "server", "url",
    "kind", "method", "params", "answer", "time", "era", "supportedVersions", "inputRequest",
    # run event data (mcpl_host.supervisor, mcpl_host.host)
    "attempt", "serverName", "serverVersion", "mcpl", "mode", "reason", "phase", "exitStatus",
    "closeCode", "stderrTail", "uptimeSeconds", "delaySeconds", "failures", "windowSeconds",
    "id", "featureSet", "eventId", "accepted", "fallback", "unavailableFeatures",
    "missingCapabilities", "effect", "domains", "impacts", "impact", "detail",
    # server objects the report reads
    "name", "version", "revision", "description", "uses", "inputSchema", "properties",
    "required", "arguments", "uri", "mimeType", "uriTemplate", "payload", "content", "text",
    "capability", "featureSets", "tools", "resources", "prompts", "experimental",
})  # fmt: skip


def redact_json(value: Any, redactor: Redactor, _depth: int = 0) -> Any:
    """A copy of a JSON value with ``redactor`` applied to every string value and to every
    object key that is not one of ``HOST_KEYS``, and anything nested deeper than
    ``MAX_REPORT_DEPTH`` levels replaced by a marker. Never changes the structure: a key
    that held a secret is kept apart from its siblings (``[redacted] #2``). Never raises."""
    if isinstance(value, str):
        return redactor.redact(value)
    if isinstance(value, (dict, list)) and _depth >= MAX_REPORT_DEPTH:
        return _TOO_DEEP
    if is_array(value):
        return [redact_json(item, redactor, _depth + 1) for item in cast("list[Any]", value)]
    if not is_object(value):
        return value
    members = cast("dict[Any, Any]", value)
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


def _text(value: Any, **kwargs: Any) -> Text:
    return _none() if value is None or value == "" else Text(safe_text(value, **kwargs))


def _names(values: Any) -> Text:
    return Text(", ".join(safe_text(v) for v in values)) if values else _none()


def _capabilities(capabilities: dict[str, Any]) -> Text:
    parts = []
    for name, value in capabilities.items():
        flags = (
            [key for key, flag in value.items() if flag is True or is_object(flag)]
            if is_object(value)
            else []
        )
        parts.append(f"{name} ({', '.join(flags)})" if flags else name)
    return _names(parts)


def _manifest(mcpl: dict[str, Any]) -> Text:
    text = Text(f"version {safe_text(mcpl.get('version'))}")
    if "revision" in mcpl:
        text.append(f", revision {safe_text(mcpl.get('revision'))}")
    feature_sets = mcpl.get("featureSets")
    for name, spec in feature_sets.items() if is_object(feature_sets) else ():
        spec = spec if is_object(spec) else {}
        text.append(f"\n{safe_text(name)}", style="bold")
        if spec.get("description"):
            text.append(f": {safe_text(spec['description'])}")
        if is_array(spec.get("uses")):
            text.append(f" (uses {', '.join(safe_text(u) for u in spec['uses'])})", style="dim")
    return text


def _receipt(grant: dict[str, Any]) -> Text:
    receipt = grant.get("receipt")
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
    for entry in receipt.get("unavailableFeatures") or ():
        entry = entry if is_object(entry) else {}
        missing = entry.get("missingCapabilities") or []
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


def _arguments(names: list[Any], required: Any) -> Text:
    required = set(required) if is_array(required) else set()
    return _names([f"{name}*" if name in required else name for name in names])


def _table(title: str, columns: list[str], rows: list[list[Text]]) -> Table | Text:
    if not rows:
        return Text(f"{title}: none", style="dim")
    table = Table(
        title=f"{title} ({len(rows)})",
        title_justify="left",
        title_style="bold",
        caption="* required argument" if "Arguments" in columns else None,
        caption_justify="left",
    )
    for column in columns:  # names stay whole; other long values fold
        table.add_column(column, overflow="fold", no_wrap=column == "Name")
    for row in rows:
        table.add_row(*row)
    return table


def _tool_row(tool: dict[str, Any]) -> list[Text]:
    schema = v if is_object(v := tool.get("inputSchema")) else {}
    props = v if is_object(v := schema.get("properties")) else {}
    return [
        Text(safe_text(tool.get("name")), style="bold"),
        _text(tool.get("description")),
        _arguments(list(props), schema.get("required")),
    ]


def _prompt_row(prompt: dict[str, Any]) -> list[Text]:
    args = [a for a in prompt.get("arguments") or () if is_object(a)]
    required = [a.get("name") for a in args if a.get("required")]
    return [
        Text(safe_text(prompt.get("name")), style="bold"),
        _text(prompt.get("description")),
        _arguments([a.get("name") for a in args], required),
    ]


def _resource_row(resource: dict[str, Any]) -> list[Text]:
    return [_text(resource.get(key)) for key in ("uri", "name", "mimeType", "description")]


def _template_row(template: dict[str, Any]) -> list[Text]:
    return [_text(template.get(key)) for key in ("uriTemplate", "name", "description")]


# (document key, title, column headers, row builder)
_TABLES = (
    ("tools", "Tools", ["Name", "Description", "Arguments"], _tool_row),
    ("resources", "Resources", ["URI", "Name", "MIME type", "Description"], _resource_row),
    ("resourceTemplates", "Resource templates", ["URI template", "Name", "Description"], _template_row),
    ("prompts", "Prompts", ["Name", "Description", "Arguments"], _prompt_row),
)


_ERAS = {"handshake": "handshake era: initialize", "stateless": "stateless: server/discover"}


def _protocol(doc: dict[str, Any]) -> Text:
    """The protocol version and, when known, the era it was reached by."""
    text = _text(doc.get("protocolVersion"))
    era = _ERAS.get(str(doc.get("era")))
    if era is not None:
        text.append(f" ({era})", style="dim")
    return text


def render_report(console: Console, doc: dict[str, Any]) -> None:
    """Print the server panel, the grant panel and the tables of a (redacted) probe doc."""
    server = doc.get("server") or {}
    title = f"{safe_text(server.get('name') or '(unnamed)')} {safe_text(server.get('version') or '')}"
    rows = [
        ("Protocol", _protocol(doc)),
        ("Capabilities", _capabilities(doc.get("capabilities") or {})),
    ]
    if doc.get("mcpl") is not None:
        rows.append(("MCPL", _manifest(doc["mcpl"])))
    if doc.get("instructions"):
        rows.append(("Instructions", _text(doc["instructions"], newlines=True)))
    console.print(Panel(_fields(rows), title=Text(title.strip(), style="bold"), title_align="left"))

    grant = doc.get("grant") or {}
    if doc.get("mcpl") is None:
        body: Any = Text("plain MCP server: no MCPL, nothing to grant", style="dim")
    else:
        body = _fields(
            [
                ("State", Text(safe_text(grant.get("state")))),
                ("Advertised", _names(grant.get("advertisedCapabilities"))),
                ("Granted", _names(grant.get("effectiveCapabilities"))),
                ("Denied", _names(grant.get("deniedCapabilities"))),
                ("Receipt", _receipt(grant)),
            ]
        )
        if grant.get("defects"):
            body = Group(
                body, Text("\n".join(f"defect: {safe_text(d)}" for d in grant["defects"]), style="yellow")
            )
    console.print(Panel(body, title=Text("Grant", style="bold"), title_align="left"))

    for key, title, columns, row in _TABLES:
        unavailable = (doc.get("unavailable") or {}).get(key)
        if key in (doc.get("skipped") or ()):
            console.print(Text(f"{title}: not offered (capability not advertised)", style="dim"))
        elif unavailable is not None:
            console.print(
                Text(
                    f"{title}: unavailable (server error {unavailable.get('code')}: "
                    f"{safe_text(unavailable.get('message'))})",
                    style="yellow",
                )
            )
        else:
            console.print(_table(title, columns, [row(item) for item in doc.get(key) or ()]))


def _event_summary(event: dict[str, Any]) -> str:
    params = event.get("params")
    if event.get("kind") == "push/event" and is_object(params):
        payload = v if is_object(v := params.get("payload")) else {}
        texts = [
            str(b.get("text"))
            for b in payload.get("content") or ()
            if is_object(b) and isinstance(b.get("text"), str)
        ]
        head = f"{safe_text(params.get('featureSet'))} {safe_text(params.get('eventId'))}"
        return f"{head}: {safe_text(' '.join(texts), max_chars=MAX_EVENT_CHARS)}" if texts else head
    return "" if params is None else safe_text(params, max_chars=MAX_EVENT_CHARS)


def render_event(console: Console, event: dict[str, Any]) -> None:
    """Print one (redacted) event as one line: time, kind, method, summary, outcome."""
    clock = str(event.get("time", ""))[11:23]  # HH:MM:SS.mmm of the ISO 8601 time
    line = Text()
    line.append(f"{clock}  ", style="dim")
    line.append(str(event.get("kind")), style="cyan")
    if event.get("kind") != "push/event":
        line.append(f" {safe_text(event.get('method'))}", style="bold")
    summary = _event_summary(event)
    if summary:
        line.append(f" {summary}")
    error = event.get("error")
    if is_object(error):
        line.append(f"  → refused {error.get('code')} {safe_text(error.get('message'))}", style="red")
        data = error.get("data")
        if is_object(data) and "capability" in data:
            line.append(f" ({safe_text(data['capability'])})", style="red")
    elif is_object(event.get("answer")) and "accepted" in event["answer"]:
        accepted = event["answer"].get("accepted") is True
        line.append(
            "  → accepted" if accepted else "  → not accepted", style="green" if accepted else "yellow"
        )
    elif "answer" in event:
        line.append("  → answered", style="green")
    console.print(line, soft_wrap=True)


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


def render_events(console: Console, events: list[dict[str, Any]]) -> None:
    """Events that arrived while listing (no ``--listen``)."""
    if events:
        console.print(Text(f"Events ({len(events)})", style="bold"))
        for event in events:
            render_event(console, event)


def failure_sentence(error: dict[str, Any]) -> str:
    """``Error: <message> (code N)`` on one line, from a (redacted) error object."""
    message = safe_text(error.get("message"), max_chars=1000)
    code = error.get("code")
    if code is not None and str(code) not in message:
        message += f" (code {code})"
    return f"Error: {message}"


def render_failure(console: Console, error: dict[str, Any]) -> None:
    """The failure sentence and the server's stderr tail (both already redacted)."""
    console.print(Text(failure_sentence(error), style="bold red"), soft_wrap=True)
    tail = error.get("stderr_tail") or []
    if tail:
        lines = "line" if len(tail) == 1 else f"{len(tail)} lines"
        console.print(Text(f"Server stderr (last {lines}):", style="dim"))
        for line in tail:
            console.print(Text(f"  {safe_text(line, max_chars=1000)}"), soft_wrap=True)


# --- mcpl-host run ----------------------------------------------------------------------------


def _iso_time(seconds: Any) -> str:
    if not isinstance(seconds, (int, float)):
        return ""
    moment = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def run_event(event: dict[str, Any], redactor: Redactor) -> dict[str, Any]:
    """A ``HostEvent.to_json()`` as ``mcpl-host run`` shows it: ``time`` as ISO 8601 UTC,
    ``server``, ``kind``, and ``data`` with the server's secrets redacted."""
    return {
        "time": _iso_time(event.get("time")),
        "server": event.get("server"),
        "kind": event.get("kind"),
        "data": redact_json(event.get("data") or {}, redactor),
    }


def print_json_line(value: Any) -> bool:
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
    console.print(
        Text(
            f"Hosting {len(servers)} server(s) from {safe_text(source)}: "
            f"{', '.join(safe_text(s) for s in servers)} (Ctrl-C stops)",
            style="bold",
        )
    )


def render_run_stopping(console: Console) -> None:
    console.print(Text("stopping: closing every server…", style="dim"))


def render_run_end(console: Console, interrupted: bool) -> None:
    console.print(
        Text(
            "stopped: every server is closed" if interrupted else "stopped: every server gave up",
            style="dim" if interrupted else "bold red",
        )
    )


def _outcome(data: dict[str, Any]) -> tuple[str, str]:
    error = data.get("error")
    if is_object(error):
        return f"  → refused {error.get('code')} {safe_text(error.get('message'))}", "red"
    answer = data.get("answer")
    if is_object(answer) and "accepted" in answer:
        accepted = answer.get("accepted") is True
        return ("  → accepted", "green") if accepted else ("  → not accepted", "yellow")
    return ("  → answered", "green") if "answer" in data else ("  → waiting for the application", "yellow")


def _run_summary(kind: str, d: dict[str, Any]) -> tuple[str, str]:
    """(text, style) for one event's data (already redacted)."""
    if kind == "connecting":
        return f"attempt {d.get('attempt')}", "dim"
    if kind in ("ready", "degraded"):
        state = {"ready": "MCPL ready", "none": "plain MCP"}.get(str(d.get("mcpl")), "MCP-only")
        text = f"{safe_text(d.get('serverName'))} {safe_text(d.get('serverVersion'))}, {state}"
        text += f" ({safe_text(d.get('mode'))})" if d.get("mode") else ""
        granted = d.get("effectiveCapabilities") or []
        text += f", granted {', '.join(safe_text(c) for c in granted)}" if granted else ""
        text += f": {safe_text(d.get('reason'))}" if d.get("reason") else ""
        return f"{text} (attempt {d.get('attempt')})", "green" if kind == "ready" else "yellow"
    if kind == "disconnected":
        text = safe_text(d.get("reason"), max_chars=MAX_EVENT_CHARS)
        tail = d.get("stderrTail") or []
        text += f"; last stderr: {safe_text(tail[-1], max_chars=MAX_EVENT_CHARS)}" if tail else ""
        return text, "red"
    if kind == "reconnecting":
        delay = d.get("delaySeconds")
        delay = f"{delay:.2f}" if isinstance(delay, (int, float)) else "?"
        return f"restart {d.get('attempt')} in {delay} s", "yellow"
    if kind == "gave_up":
        return safe_text(d.get("reason"), max_chars=MAX_EVENT_CHARS), "bold red"
    if kind == "policy_receipt":
        if d.get("accepted") is True:
            return "accepted" + (f" ({safe_text(d.get('mode'))})" if d.get("mode") else ""), ""
        reason = f": {safe_text(d.get('reason'))}" if d.get("reason") else ""
        return f"refused (fallback {safe_text(d.get('fallback'))}){reason}", "yellow"
    if kind == "manifest_change":
        impacts = [
            f"{safe_text(i.get('impact'))} {safe_text(i.get('detail'))}"
            for i in d.get("impacts") or ()
            if is_object(i)
        ]
        return (
            f"{', '.join(safe_text(x) for x in d.get('domains') or ())}: {'; '.join(impacts) or 'no impact'}",
            "",
        )
    if kind == "push_event":
        summary = _event_summary({"kind": "push/event", "params": d.get("params")})
        return summary + _outcome(d)[0], _outcome(d)[1]
    summary = safe_text(d.get("method"))
    if d.get("params") is not None:
        summary += " " + safe_text(d.get("params"), max_chars=MAX_EVENT_CHARS)
    if kind == "notification":
        return summary, ""
    return summary + _outcome(d)[0], _outcome(d)[1]  # server_request, refused


def render_run_event(console: Console, event: dict[str, Any]) -> None:
    """Print one (redacted) ``run_event`` as one line: time, server, kind, summary."""
    text, style = _run_summary(str(event.get("kind")), event.get("data") or {})
    line = Text()
    line.append(f"{str(event.get('time', ''))[11:23]}  ", style="dim")
    line.append(f"{safe_text(event.get('server'))}  ", style="bold")
    line.append(f"{event.get('kind')} ", style="cyan")
    line.append(text, style=style or None)
    console.print(line, soft_wrap=True)
