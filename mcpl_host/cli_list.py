"""``mcpl-host tools``, ``resources`` and ``prompts``: what a server offers, alone (``mcptools``'
``mcp tools CMD``, the MCP Inspector CLI's ``--method tools/list``).

Rules of this module:

- **The server** is selected as for ``probe`` and ``call`` (``mcpl_host.cli_target``'s
  options: a command after ``--``, by default the bundled demo server; ``--ws URL``; ``--url
  URL``; ``--config FILE --server NAME``), connected, used and closed by
  ``cli_call.finish``; the lists are made by ``cli.list_offers``, the probe's own listing:
  every page followed by ``nextCursor`` (MCP 2025-11-25 "Pagination"), within
  ``Limits.max_list_pages``, ``max_list_items`` and ``max_list_bytes``.
- **What is listed:** ``tools`` the tools (``tools/list``); ``resources`` the resources and
  the resource templates (``resources/list``, ``resources/templates/list``); ``prompts``
  the prompts (``prompts/list``). A list whose capability the server does not advertise is
  not asked for (MCP 2025-11-25 "Lifecycle", capability negotiation): it is empty and
  named in ``skipped``.
- **Output.** By default the probe's tables (``report.render_lists``: identifiers whole on
  one line, descriptions folded to one line); ``--schema`` (``tools``) adds each tool's
  ``inputSchema``, indented JSON. ``--json``: one JSON document on stdout, each list as the
  server sent its entries (the pages joined, no ``nextCursor``), the same values as
  ``probe --json``'s keys ``tools``, ``resources``, ``resourceTemplates``, ``prompts``;
  ``skipped`` (a list of keys) and ``unavailable`` (key -> ``{"code", "message",
  "data"}``) only when not empty. Every value is redacted with the server's ``Redactor``.
- **Exit status** (as ``call``): 0 listed; 1 a list was answered with an error (what was
  listed is still shown; the error is also one sentence on stderr) or the server failed;
  2 usage error; 130 interrupted.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import click
from rich.console import Console
from rich.text import Text

from mcpl_host import report
from mcpl_host.cli import list_offers
from mcpl_host.cli_call import Outcome, ServerCommandLast, finish
from mcpl_host.cli_target import EXIT_SERVER_FAILED, server_options
from mcpl_host.jsonrpc.values import is_object
from mcpl_host.logging import escape_text
from mcpl_host.probe_features import client_feature_options
from mcpl_host.server_connection import ServerConnection

__all__ = ["LISTS", "METHODS", "listing_outcome", "prompts", "resources", "tools"]

#: What each command lists: the probe document's keys.
LISTS: Mapping[str, tuple[str, ...]] = {
    "tools": ("tools",),
    "resources": ("resources", "resourceTemplates"),
    "prompts": ("prompts",),
}
#: The MCP method of each list (MCP 2025-11-25 "Tools", "Resources", "Prompts").
METHODS: Mapping[str, str] = {
    "tools": "tools/list",
    "resources": "resources/list",
    "resourceTemplates": "resources/templates/list",
    "prompts": "prompts/list",
}


def listing_outcome(doc: Mapping[str, Any], keys: Sequence[str], *, tool_classes: bool) -> Outcome:
    """The outcome of a listing from the probe document ``list_offers`` filled (module rules):
    the document of ``keys`` (with ``toolClasses`` when ``tool_classes``: the tables show
    them), and exit 1 with a sentence naming each list answered with an error. Pure."""
    document: dict[str, Any] = {key: doc.get(key, []) for key in keys}
    if tool_classes and "tools" in keys:
        document["toolClasses"] = doc.get("toolClasses", [])
    skipped = [key for key in doc.get("skipped", []) if key in keys]
    unavailable = {key: error for key, error in doc.get("unavailable", {}).items() if key in keys}
    if skipped:
        document["skipped"] = skipped
    if not unavailable:
        return Outcome(document)
    document["unavailable"] = unavailable
    sentences = [
        f"{METHODS[key]}: server error {error.get('code')}: {error.get('message')}"
        for key, error in unavailable.items()
    ]
    return Outcome(document, status=EXIT_SERVER_FAILED, message="; ".join(sentences))


async def _listing(conn: ServerConnection, keys: Sequence[str], *, tool_classes: bool) -> Outcome:
    info = conn.server_info
    doc = report.new_document([])
    doc["capabilities"] = info.capabilities if info is not None else {}
    await list_offers(doc, conn, keys)
    outcome = listing_outcome(doc, keys, tool_classes=tool_classes)
    if outcome.message is None:
        return outcome
    return Outcome(
        outcome.document, status=outcome.status, message=conn.hosted.redactor.redact(outcome.message)
    )


def render_schemas(console: Console, tools: Sequence[object]) -> None:
    """Each tool's name, then its ``inputSchema`` as JSON indented by two (escaped: server
    text; never cut nor wrapped by us), under a heading."""
    console.print(Text("Input schemas", style="bold"))
    for tool in tools:
        item = tool if is_object(tool) else {}
        name = item.get("name")
        shown_name = name if isinstance(name, str) else json.dumps(name, default=repr)
        console.print(Text(escape_text(shown_name, quotes=False), style="bold"), soft_wrap=True)
        shown = json.dumps(item.get("inputSchema"), indent=2, ensure_ascii=False, default=repr)
        indented = "\n".join(f"  {line}" for line in shown.split("\n"))  # lines whole: copyable JSON
        console.print(Text(escape_text(indented, quotes=False, newlines=True)), soft_wrap=True)


def _show(keys: Sequence[str], schemas: bool) -> Callable[[Any], None]:
    """Prints a (redacted) listing document as the tables of ``keys``, and the schemas."""

    def show(document: Any) -> None:
        console = report.ReportConsole(highlight=False)
        report.render_lists(console, document, keys, short=True)
        if schemas and document.get("tools"):
            render_schemas(console, document["tools"])

    return show


def _list_command(
    ctx: click.Context, options: dict[str, Any], name: str, as_json: bool, schemas: bool
) -> None:
    keys = LISTS[name]
    finish(
        ctx,
        options,
        lambda conn: _listing(conn, keys, tool_classes=not as_json),
        as_text=False,
        show=None if as_json else _show(keys, schemas),
    )


#: The listing commands' exit statuses, shown after each one's examples.
_EXIT_STATUS = """\b
Exit status:
  0    listed
  1    a list was answered with an error (what was listed is still shown), or the
       server failed (did not start, exited, timed out)
  2    usage or configuration error
  130  interrupted by Ctrl-C (or SIGTERM, SIGHUP)"""


def _command(short_help: str, examples: str) -> Callable[[Callable[..., Any]], click.Command]:
    """A listing command: ``examples`` and the exit statuses as its help's epilog."""
    return click.command(
        cls=ServerCommandLast,
        context_settings={"max_content_width": 100},
        short_help=short_help,
        epilog=f"{examples}\n\n{_EXIT_STATUS}",
    )


_JSON = click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print one JSON document (the lists as the server sent them, every page) instead of tables.",
)


@_command(
    "List the tools of a server (tools/list).",
    """\b
Examples:
  mcpl-host tools                                   # the bundled demo server
  mcpl-host tools -- python -m mcp_server_time
  mcpl-host tools --schema -- python -m mcp_server_time
  mcpl-host tools --json -- npx -y @modelcontextprotocol/server-everything stdio | jq -r '.tools[].name'
  mcpl-host tools --url https://mcp.example.com/mcp
  mcpl-host tools --config servers.json --server time""",
)
@_JSON
@click.option(
    "--schema",
    "schemas",
    is_flag=True,
    help="Also show each tool's input schema, indented JSON (--json has them already).",
)
@client_feature_options
@server_options(verb="list")
@click.pass_context
def tools(ctx: click.Context, /, as_json: bool, schemas: bool, **options: Any) -> None:
    """List the tools of a server (tools/list, every page): name, classes, description and
    arguments (* required).

    A name is never cut nor split: on a terminal too narrow for a table that keeps every
    name whole, each tool is shown as a block, its name alone on its line.

    """
    _list_command(ctx, options, "tools", as_json, schemas)


@_command(
    "List the resources and resource templates of a server.",
    """\b
Examples:
  mcpl-host resources                               # the bundled demo server
  mcpl-host resources --json -- npx -y @modelcontextprotocol/server-everything stdio
  mcpl-host resources --config servers.json --server files""",
)
@_JSON
@client_feature_options
@server_options(verb="list")
@click.pass_context
def resources(ctx: click.Context, /, as_json: bool, **options: Any) -> None:
    """List the resources (resources/list) and resource templates (resources/templates/list)
    of a server, every page: URI, name, MIME type and description.

    A URI is never cut nor split, so that it can be copied into `mcpl-host read URI`: on a
    terminal too narrow for a table that keeps every URI whole, each resource is shown as
    a block, its URI alone on its line.

    """
    _list_command(ctx, options, "resources", as_json, False)


@_command(
    "List the prompts of a server (prompts/list).",
    """\b
Examples:
  mcpl-host prompts                                 # the bundled demo server
  mcpl-host prompts --json -- npx -y @modelcontextprotocol/server-everything stdio""",
)
@_JSON
@client_feature_options
@server_options(verb="list")
@click.pass_context
def prompts(ctx: click.Context, /, as_json: bool, **options: Any) -> None:
    """List the prompts of a server (prompts/list, every page): name, description and
    arguments (* required).

    """
    _list_command(ctx, options, "prompts", as_json, False)
