"""``mcpl-host config list``: each well-known MCP config path of this platform
(``editor_configs.well_known_paths``), whether it is there, and the servers in it (name,
transport, command or URL with every secret redacted: ``ServerConfig.describe``), or its
problems; which one ``--config auto`` takes. ``--json``: one document on stdout.

Every value read from a file (paths, names, problems) goes through ``report.safe_text`` (cut
and escaped) in the text form; the JSON form holds the redacted values as they are. A line
is never wrapped (``click.echo``), whatever the output is.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from mcpl_host import editor_configs, report
from mcpl_host.editor_configs import Found, Place

__all__ = ["config", "found_json"]


def found_json(found: Found, auto: bool) -> dict[str, Any]:
    """``{"client", "path", "found", "shape", "auto", "servers": [{"name", "transport",
    "target", "disabled"}], "shadowed", "problems"}`` of one path looked at (``auto``: the
    one ``--config auto`` takes)."""
    servers = found.config.servers if found.config is not None else {}
    converted = found.converted
    return {
        "client": found.client,
        "path": str(found.path),
        "found": found.exists,
        "shape": converted.shape if converted is not None else None,
        "auto": auto,
        "servers": [editor_configs.server_row(name, server) for name, server in servers.items()],
        "shadowed": list(converted.shadowed) if converted is not None else [],
        "problems": [str(problem) for problem in found.error.problems] if found.error is not None else [],
    }


def _text(doc: dict[str, Any]) -> list[str]:
    """The lines of one path's ``found_json``."""
    status = "not found"
    if doc["found"] and doc["problems"]:
        count = len(doc["problems"])
        status = f"found, {count} problem{'s' if count != 1 else ''}"
    elif doc["found"]:
        count = len(doc["servers"])
        status = f"found, {count} server{'s' if count != 1 else ''}" if count else "found, no MCP servers"
    status += " (--config auto takes this one)" if doc["auto"] else ""
    lines = [f"{doc['client']}: {report.safe_text(doc['path'], max_chars=1000)}: {status}"]
    names = [report.safe_text(row["name"], max_chars=60) for row in doc["servers"]]
    width = max((len(name) for name in names), default=0)
    for name, row in zip(names, doc["servers"], strict=True):
        disabled = " (disabled)" if row["disabled"] else ""
        target = report.safe_text(row["target"], max_chars=300)
        lines.append(f"  {name.ljust(width)}  {row['transport']:<15}  {target}{disabled}")
    for name in doc["shadowed"]:
        lines.append(
            f"  ({report.safe_text(name, max_chars=60)}: the top-level entry, replaced by the project's)"
        )
    lines += [f"  {report.safe_text(problem, max_chars=1000)}" for problem in doc["problems"]]
    return lines


@click.group(context_settings={"max_content_width": 100})
def config() -> None:
    """The MCP configs already on this machine (Claude Desktop, Claude Code, Cursor, VS Code,
    Windsurf), which --config FILE and --config auto read."""


@config.command(
    "list",
    epilog="""\b
Examples:
  mcpl-host config list
  mcpl-host config list --json""",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout instead.")
def list_configs(as_json: bool) -> None:
    """Print each well-known config path looked at (from HOME, XDG_CONFIG_HOME and the current
    directory), whether it was found, and the servers in it (name, transport, command or URL
    with secrets redacted) or its problems; mark the one --config auto takes (the first found
    with a server or a problem)."""
    looked = editor_configs.look_around(Place.here(), sys.platform)
    first = next((i for i, found in enumerate(looked) if found.usable), None)
    docs = [found_json(found, i == first) for i, found in enumerate(looked)]
    if as_json:
        report.print_json({"paths": docs})
        return
    for doc in docs:
        for line in _text(doc):
            click.echo(line)
    if first is None:
        click.echo("No MCP config found: --config auto has nothing to take.")
