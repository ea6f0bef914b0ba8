"""The reports of ``mcpl-host check``: the JSON document, the terminal summary, JUnit XML.

Rules of this module:

- ``build_document`` makes the one document everything else renders; its shape is
  ``report.schema.json`` (shipped in this package; ``FORMAT``/``FORMAT_VERSION`` name it,
  and the version changes whenever a member changes meaning or disappears). It is redacted
  with the server's ``Redactor`` (``mcpl_host.report.redact_json``): the check reasons and
  evidence already are (``rules.evaluate``), the server's name and version and the stderr
  tail are here.
- The terminal summary (``render_summary``, rich) shows the failures first (each with its
  reason, spec section, evidence and, for an MCPL deviation, what a strict 0.5 host and the
  0.4 profile do), then the warnings, then each category with its counts and its checks
  (the skipped checks of one reason on one line saying how many: ``listing_rows``).
  Server text only ever goes into ``rich.text.Text`` objects, never into markup.
- ``junit_xml`` writes JUnit XML with ``xml.etree.ElementTree``: ``<testsuites>`` with one
  ``<testsuite>`` per category and one ``<testcase>`` per check (``classname``
  ``mcpl-host.check.<category>``, ``name`` the check id). A failure is ``<failure message
  type>`` with the evidence as text; a skipped check and an expected failure are
  ``<skipped message>``; a stale expected failure is a ``<failure>``; warnings go to the
  suite's ``<system-out>``. Every text is made of XML 1.0 characters (``logging.xml_text``
  escapes the others). The attributes the common JUnit schemas require are all present
  (``testsuite``: name, tests, failures, errors, skipped, time, timestamp, hostname, id,
  package; ``testcase``: name, classname, time). A case's ``time`` is the check's measured
  ``seconds`` (those of the step whose evidence decided it: checks of one step share it); a
  suite's is the sum of the steps that decided its cases, each once (``phaseSeconds``);
  ``<testsuites>``' is the run's duration.
"""

from __future__ import annotations

import socket
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from typing import Any, cast

from rich.console import Console
from rich.table import Table
from rich.text import Text

import mcpl_host
from mcpl_host.check.evidence import RunEvidence, as_object
from mcpl_host.check.registry import CATEGORIES, CHECKS_BY_ID, STATUSES, CheckResult, check_step, summary
from mcpl_host.jsonrpc.values import JSONObject, is_array, is_object
from mcpl_host.logging import Redactor, xml_text
from mcpl_host.mcpl.feature_sets import read_feature_sets
from mcpl_host.report import redact_json, safe_text

__all__ = ["FORMAT", "FORMAT_VERSION", "build_document", "junit_xml", "listing_rows", "render_summary"]

FORMAT = "mcpl-host-check-report"
FORMAT_VERSION = 1
_SYMBOLS = {"passed": "✓", "failed": "✗", "warned": "!", "skipped": "–"}
_STYLES = {"passed": "green", "failed": "bold red", "warned": "yellow", "skipped": "dim"}


def _server(evidence: RunEvidence) -> dict[str, Any] | None:
    main = evidence.main
    if main is None or main.protocol_version is None:
        return None
    request = main.transcript.sent("initialize")
    answer = main.transcript.answer_to(request) if request is not None else None
    result = (as_object(answer.result) if answer is not None else None) or {}
    info = as_object(result.get("serverInfo")) or {}
    name, server_version = info.get("name"), info.get("version")
    manifest = main.manifest
    version = manifest.get("version") if manifest is not None else None
    return {
        "name": name if isinstance(name, str) else None,
        "version": server_version if isinstance(server_version, str) else None,
        "protocolVersion": main.protocol_version,
        "mcpl": None
        if manifest is None
        else {
            "version": version if isinstance(version, str) else None,
            "featureSetsShape": read_feature_sets(manifest).shape,
            "state": main.mcpl_state,
        },
    }


def build_document(
    results: Sequence[CheckResult],
    evidence: RunEvidence,
    *,
    target: str,
    started_at: str,
    duration_seconds: float,
    exit_status: int,
    redactor: Redactor | None = None,
) -> JSONObject:
    """The JSON report (``report.schema.json``), redacted with ``redactor``."""
    counts = summary(results)
    doc: dict[str, Any] = {
        "format": FORMAT,
        "formatVersion": FORMAT_VERSION,
        "tool": {"name": "mcpl-host", "version": mcpl_host.__version__},
        "ok": exit_status == 0,
        "exitStatus": exit_status,
        "startedAt": started_at,
        "durationSeconds": round(duration_seconds, 3),
        "target": {"shown": target, "transport": evidence.transport},
        "server": _server(evidence),
        "summary": {
            "total": len(results),
            **counts.counts,
            "expectedFailures": counts.expected,
            "staleExpectedFailures": counts.stale,
        },
        "categories": {
            category: counts.by_category[category]
            for category in CATEGORIES
            if category in counts.by_category
        },
        "checks": [result.to_json() for result in results],
        "stepSeconds": dict(evidence.step_seconds),
        "phaseSeconds": dict(evidence.phase_seconds),
        "stderrTail": list(evidence.stderr_tail),
    }
    return redact_json(doc, redactor) if redactor is not None else doc


# --- terminal -------------------------------------------------------------------------------------


def _status_text(result: dict[str, Any]) -> Text:
    status = result["status"]
    label = f"{_SYMBOLS[status]} {status}"
    if result["expectedFailure"]:
        label += " (expected)"
    if result["staleExpectedFailure"]:
        label = "✗ stale (expected to fail)"
        return Text(label, style=_STYLES["failed"])
    return Text(label, style=_STYLES["passed"] if result["expectedFailure"] else _STYLES[status])


def _detail(console: Console, result: dict[str, Any]) -> None:
    head = Text()
    head.append_text(_status_text(result))
    head.append("  ")
    head.append(result["id"], style="bold")
    head.append("  ")
    head.append(safe_text(result["title"], max_chars=200), style="dim")
    console.print(head, soft_wrap=True)
    lines: list[tuple[str, str]] = []
    reason = result["reason"]
    if result["staleExpectedFailure"]:
        reason = f"listed as an expected failure, but it {result['status']}: {reason}"
    lines.append(("", reason))
    lines.append(("spec", result["spec"]))
    for item in result["evidence"]:
        lines.append(("evidence", item))
    compat = result["compat"]
    if compat is not None:
        lines.append(("strict 0.5 host", compat["strict"]))
        hosted = {True: "hosts it anyway", False: "does not host it either", None: "undecided"}[
            compat["hostedBy04Profile"]
        ]
        lines.append((f"0.4 profile ({hosted})", compat["profile04"]))
    for label, value in lines:
        line = Text("    ")
        if label:
            line.append(f"{label}: ", style="cyan")
        line.append(safe_text(value, max_chars=600))
        console.print(line, soft_wrap=True)


def listing_rows(checks: Sequence[dict[str, Any]]) -> list[tuple[dict[str, Any], int]]:
    """The lines of a category's listing as ``(check, count)``: the skipped checks that share
    a reason are one line, where the first of them is, with how many they are; every other
    check is a line of its own (count 1). The JSON report and JUnit list each check."""
    skipped: dict[str, int] = {}
    for check in checks:
        if check["status"] == "skipped" and not check["staleExpectedFailure"]:
            skipped[check["reason"]] = skipped.get(check["reason"], 0) + 1
    rows: list[tuple[dict[str, Any], int]] = []
    placed: set[str] = set()
    for check in checks:
        reason = check["reason"]
        if check["status"] != "skipped" or check["staleExpectedFailure"]:
            rows.append((check, 1))
        elif reason not in placed:
            placed.add(reason)
            rows.append((check, skipped[reason]))
    return rows


def render_summary(console: Console, doc: dict[str, Any]) -> None:
    """The terminal summary of a (redacted) document (module rules)."""
    header = Text("mcpl-host check  ", style="bold")
    server = doc["server"]
    parts: list[str] = []
    if server is not None:
        name = " ".join(str(v) for v in (server["name"], server["version"]) if v)
        parts.append(name or "(unnamed server)")
        parts.append(f"MCP {server['protocolVersion']}")
        if server["mcpl"] is not None:
            parts.append(f"MCPL {server['mcpl']['version']} ({server['mcpl']['state']})")
    else:
        parts.append(doc["target"]["shown"])
    parts += [doc["target"]["transport"], f"{doc['durationSeconds']:.1f} s"]
    header.append(safe_text(" · ".join(parts), max_chars=300))
    console.print(header, soft_wrap=True)
    checks = doc["checks"]
    failures = [
        c
        for c in checks
        if (c["status"] == "failed" and not c["expectedFailure"]) or c["staleExpectedFailure"]
    ]
    expected = [c for c in checks if c["expectedFailure"]]
    warnings = [c for c in checks if c["status"] == "warned" and not c["staleExpectedFailure"]]
    for title, group in (("Failures", failures), ("Expected failures", expected), ("Warnings", warnings)):
        if group:
            console.print()
            console.print(Text(f"{title} ({len(group)})", style="bold"))
            for result in group:
                _detail(console, result)
    console.print()
    table = Table(box=None, pad_edge=False, show_header=True, header_style="bold")
    table.add_column("category")
    for status in STATUSES:
        table.add_column(status, justify="right")
    for category, counts in doc["categories"].items():
        table.add_row(category, *(str(counts[status]) for status in STATUSES))
    totals = doc["summary"]
    table.add_row(
        Text("total", style="bold"), *(Text(str(totals[status]), style="bold") for status in STATUSES)
    )
    console.print(table)
    for category in doc["categories"]:
        console.print()
        console.print(Text(category, style="bold underline"))
        for result, count in listing_rows([c for c in checks if c["category"] == category]):
            line = Text("  ")
            line.append_text(_status_text(result))
            line.append("  ")
            line.append(result["id"] if count == 1 else f"{count} checks")
            line.append("  ")
            line.append(safe_text(result["reason"], max_chars=160), style="dim")
            console.print(line, soft_wrap=True)
    console.print()
    verdict = Text("Result: ", style="bold")
    if doc["ok"]:
        extra = f" ({totals['expectedFailures']} expected failures)" if totals["expectedFailures"] else ""
        verdict.append(f"passed{extra}", style="bold green")
    else:
        stale = totals["staleExpectedFailures"]
        unexpected = totals["failed"] - totals["expectedFailures"]
        what = [f"{unexpected} failed"] if unexpected else []
        what += [f"{stale} stale expected failure{'s' if stale != 1 else ''}"] if stale else []
        verdict.append(f"failed ({', '.join(what)})", style="bold red")
    console.print(verdict)


# --- JUnit ----------------------------------------------------------------------------------------


def _failure_text(result: dict[str, Any]) -> str:
    lines = [result["reason"], f"spec: {result['spec']}"]
    lines += [f"evidence: {item}" for item in result["evidence"]]
    compat = result["compat"]
    if compat is not None:
        lines.append(f"a strict MCPL 0.5 host: {compat['strict']}")
        lines.append(f"the 0.4 compatibility profile: {compat['profile04']}")
    return "\n".join(lines)


def _xml_safe(value: object) -> Any:
    """A copy of the document whose every string holds only XML 1.0 characters
    (``logging.xml_text``)."""
    if isinstance(value, str):
        return xml_text(value)
    if is_array(value):
        return [_xml_safe(item) for item in value]
    if is_object(value):
        return {key: _xml_safe(item) for key, item in value.items()}
    return value


def _suite_seconds(members: Sequence[dict[str, Any]], phases: Mapping[str, float]) -> float:
    """The seconds of the steps that decided a suite's checks, each step once."""
    steps = {check_step(CHECKS_BY_ID[c["id"]], phases) for c in members if c["id"] in CHECKS_BY_ID}
    return sum(phases[step] for step in steps if step is not None)


def junit_xml(doc: Mapping[str, object]) -> bytes:
    """JUnit XML of a (redacted) document (module rules), UTF-8 with its declaration; a
    character XML 1.0 cannot hold (XML 1.0 §2.2: NUL, most controls, U+FFFE, a lone
    surrogate) is shown as its escape, so the file parses whatever the server sent."""
    doc = cast("dict[str, Any]", _xml_safe(doc))
    checks = doc["checks"]
    stamp = doc["startedAt"].removesuffix("Z")
    host = socket.gethostname() or "localhost"
    root = ET.Element("testsuites", name="mcpl-host check", time=f"{doc['durationSeconds']:.3f}")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for index, category in enumerate(doc["categories"]):
        members = [c for c in checks if c["category"] == category]
        failures = sum(
            1
            for c in members
            if (c["status"] == "failed" and not c["expectedFailure"]) or c["staleExpectedFailure"]
        )
        skipped = sum(
            1
            for c in members
            if (c["status"] == "skipped" or c["expectedFailure"]) and not c["staleExpectedFailure"]
        )
        suite = ET.SubElement(
            root,
            "testsuite",
            name=category,
            id=str(index),
            package="mcpl-host.check",
            hostname=host,
            timestamp=stamp,
            tests=str(len(members)),
            failures=str(failures),
            errors="0",
            skipped=str(skipped),
            time=f"{_suite_seconds(members, doc.get('phaseSeconds') or {}):.3f}",
        )
        properties = ET.SubElement(suite, "properties")
        ET.SubElement(properties, "property", name="target", value=doc["target"]["shown"])
        ET.SubElement(properties, "property", name="transport", value=doc["target"]["transport"])
        server = doc["server"]
        if server is not None:
            shown = " ".join(str(v) for v in (server["name"], server["version"]) if v)
            ET.SubElement(properties, "property", name="server", value=safe_text(shown, max_chars=200))
            ET.SubElement(
                properties, "property", name="protocolVersion", value=str(server["protocolVersion"])
            )
        warnings: list[str] = []
        for result in members:
            case = ET.SubElement(
                suite,
                "testcase",
                name=result["id"],
                classname=f"mcpl-host.check.{category}",
                time=f"{result['seconds']:.3f}",
            )
            if result["staleExpectedFailure"]:
                failure = ET.SubElement(
                    case,
                    "failure",
                    message=f"stale expected failure: {result['id']} {result['status']}: {result['reason']}",
                    type="StaleExpectedFailure",
                )
                failure.text = _failure_text(result)
            elif result["expectedFailure"]:
                ET.SubElement(case, "skipped", message=f"expected failure: {result['reason']}")
            elif result["status"] == "failed":
                failure = ET.SubElement(case, "failure", message=result["reason"], type=result["spec"])
                failure.text = _failure_text(result)
            elif result["status"] == "skipped":
                ET.SubElement(case, "skipped", message=result["reason"])
            elif result["status"] == "warned":
                warnings.append(f"warning: {result['id']}: {_failure_text(result)}")
        ET.SubElement(suite, "system-out").text = "\n\n".join(warnings)
        ET.SubElement(suite, "system-err").text = ""
        totals["tests"] += len(members)
        totals["failures"] += failures
        totals["skipped"] += skipped
    for key, value in totals.items():
        root.set(key, str(value))
    ET.indent(root)
    data: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return data + b"\n"
