"""``mcpl-host tools``, ``resources`` and ``prompts`` end to end (the CLI as a child process
against the bundled demo server, ``mcp-server-time`` and the scripted fixture server), and
the tables every command prints: identifiers (tool and prompt names, URIs, URI templates)
stay whole on one line at 80 columns, descriptions show no literal ``\\n``. The layout rule
itself (``mcpl_host.tables.fit_widths``) is tested by plain calls.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import pexpect
import pytest
from rich.console import Console
from rich.text import Text

from mcpl_host import report
from mcpl_host.cli_list import listing_outcome
from mcpl_host.tables import IDENTIFIER, PROSE, WORDS, Column, fit_widths, print_table

from . import forkserver
from .conftest import FIXTURES
from .forkpty import spawn_pty
from .test_cli import CLI, TIMEOUT, probe_json, run_cli, scripted
from .test_cli_run import demo_entry, write_config
from .test_terminal_output import pty_env, terminal_lines
from .wire import bridge_url, initialize_steps


def _fixture_module(name: str) -> Any:
    """A fixture server's module, for its lists (to compare with what is shown)."""
    spec = importlib.util.spec_from_file_location(name, FIXTURES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


listing_server = _fixture_module("listing_server")
TIME = ["--", sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]
# Resources as server-everything lists them: URIs longer than an 80-column table leaves.
LONG_URIS = [
    "demo://resource/static/document/architecture.md",
    "demo://resource/static/document/how-to-build-a-host-that-never-cuts.md",
    "file:///home/someone/projects/a-project-with-a-long-name/docs/a-very-long-document-name.md",
]
SHORT_URIS = ["demo://resource/static/a.md", "demo://resource/static/b.md"]


def run_at(columns: int, *args: str) -> Any:
    """The CLI with its stdout a pipe and COLUMNS set (the width rich uses off a terminal)."""
    return forkserver.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "COLUMNS": str(columns)},
    )


def one_document(stdout: str) -> Any:
    return json.loads(stdout)


def resource_steps(uris: list[str], *, templates: Any = None) -> list[Any]:
    """A server with resources at ``uris`` (one description holds blank lines) and one
    resource template; ``templates``: the answer to resources/templates/list instead."""
    resources = [
        {
            "uri": uri,
            "name": uri.rsplit("/", 1)[-1],
            "mimeType": "text/markdown",
            "description": "Static document.\n\nExposed for demonstration purposes.",
        }
        for uri in uris
    ]
    template = {"uriTemplate": "demo://resource/dynamic/text/{resourceId}", "name": "dynamic-text"}
    return [
        *initialize_steps({"resources": {}}, {"name": "resourceful", "version": "1"}),
        {"expect": {"method": "notifications/initialized"}},
        {"expect": {"method": "resources/list"}},
        {"reply": {"resources": resources}},
        {"expect": {"method": "resources/templates/list"}},
        {"reply": {"resourceTemplates": [template]}} if templates is None else templates,
    ]


# --- the commands against real servers ---------------------------------------------------------


def test_tools_lists_the_demo_tools_as_a_table() -> None:
    done = run_at(80, "tools")
    assert done.returncode == 0, done.stderr
    assert "Tools (3)" in done.stdout
    for name, description in (("echo", "Echo the given text back."), ("add", "Add two numbers.")):
        assert any(name in line for line in done.stdout.splitlines())
        assert description in done.stdout
    assert "Grant" not in done.stdout and "Resources" not in done.stdout  # the listing alone
    assert done.stderr == ""


@pytest.fixture(scope="module")
def probed() -> dict[str, Any]:
    """``probe --json`` of the demo server, once for the module."""
    return probe_json()[0]


@pytest.mark.parametrize(
    ("command", "keys"),
    [("tools", ["tools"]), ("resources", ["resources", "resourceTemplates"]), ("prompts", ["prompts"])],
)
def test_json_lists_equal_what_probe_json_lists(
    command: str, keys: list[str], probed: dict[str, Any]
) -> None:
    done = run_cli(command, "--json")
    assert done.returncode == 0, done.stderr
    assert one_document(done.stdout) == {key: probed[key] for key in keys}


def test_tools_against_mcp_server_time_table_json_and_schema() -> None:
    listed = one_document(run_cli("tools", "--json", *TIME).stdout)
    assert sorted(tool["name"] for tool in listed["tools"]) == ["convert_time", "get_current_time"]
    schemas = run_at(80, "tools", "--schema", *TIME)
    assert schemas.returncode == 0, schemas.stderr
    assert "Tools (2)" in schemas.stdout
    assert "│ get_current_time │" in schemas.stdout and "│ convert_time     │" in schemas.stdout
    # each input schema, pretty: one member a line, indented
    assert '    "required": [\n      "timezone"\n    ]' in schemas.stdout
    assert schemas.stdout.count('"type": "object"') == 2


def test_a_list_the_server_does_not_offer_is_not_asked_for_and_exits_0(tmp_path: Path) -> None:
    steps = [
        *initialize_steps({"tools": {}}, {"name": "toolsonly", "version": "1"}),
        {"expect": {"method": "notifications/initialized"}},
        {"expect": {"method": "ping"}},  # prompts/list instead fails the script (exit 98)
        {"reply": {}},
    ]
    done = run_at(80, "prompts", *scripted(tmp_path, steps))
    assert done.returncode == 0, done.stderr
    assert "Prompts: not offered (capability not advertised)" in done.stdout
    as_json = run_cli("prompts", "--json", *scripted(tmp_path, steps))
    assert as_json.returncode == 0, as_json.stderr
    assert one_document(as_json.stdout) == {"prompts": [], "skipped": ["prompts"]}
    entries = [json.loads(line) for line in (tmp_path / "record.jsonl").read_text().splitlines()]
    methods = {json.loads(entry["line"]).get("method") for entry in entries if "line" in entry}
    assert "prompts/list" not in methods


def test_pages_are_followed_by_next_cursor(tmp_path: Path) -> None:
    steps = [
        *initialize_steps({"tools": {}}, {"name": "paged", "version": "1"}),
        {"expect": {"method": "notifications/initialized"}},
        {"expect": {"method": "tools/list"}},
        {"reply": {"tools": [{"name": "first", "inputSchema": {"type": "object"}}], "nextCursor": "page-2"}},
        {"expect": {"method": "tools/list", "params": {"cursor": "page-2"}}},
        {"reply": {"tools": [{"name": "second", "inputSchema": {"type": "object"}}]}},
    ]
    done = run_cli("tools", "--json", *scripted(tmp_path, steps))
    assert done.returncode == 0, done.stderr
    assert [tool["name"] for tool in one_document(done.stdout)["tools"]] == ["first", "second"]
    table = run_at(80, "tools", *scripted(tmp_path, steps))
    assert table.returncode == 0, table.stderr
    assert "Tools (2)" in table.stdout


def test_a_list_answered_with_an_error_exits_1_showing_what_was_listed(tmp_path: Path) -> None:
    error = {"reply_error": {"code": -32601, "message": "Method not found"}}
    steps = resource_steps(SHORT_URIS, templates=error)
    done = run_at(80, "resources", *scripted(tmp_path, steps))
    assert done.returncode == 1
    assert SHORT_URIS[0] in done.stdout
    assert "Resource templates: unavailable (server error -32601: Method not found)" in done.stdout
    as_json = run_cli("resources", "--json", *scripted(tmp_path, steps))
    assert as_json.returncode == 1
    document = one_document(as_json.stdout)
    assert [r["uri"] for r in document["resources"]] == SHORT_URIS
    assert document["unavailable"] == {
        "resourceTemplates": {"code": -32601, "message": "Method not found", "data": None}
    }
    assert "resources/templates/list" in as_json.stderr and "-32601" in as_json.stderr


def test_a_usage_error_exits_2() -> None:
    done = run_cli("tools", "--json", "extra")
    assert done.returncode == 2
    assert done.stdout == ""


# --- tables that keep identifiers whole ----------------------------------------------------


@pytest.mark.parametrize("uris", [SHORT_URIS, LONG_URIS], ids=["table", "too-wide-for-a-table"])
@pytest.mark.parametrize("command", ["resources", "probe"])
def test_each_uri_stays_whole_on_one_line_at_80_columns(
    tmp_path: Path, command: str, uris: list[str]
) -> None:
    done = run_at(80, command, *scripted(tmp_path, resource_steps(uris)))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for uri in [*uris, "demo://resource/dynamic/text/{resourceId}"]:
        assert any(uri in line for line in lines), (uri, done.stdout)
    wide = [line for line in lines if len(line) > 80 and not any(uri in line for uri in uris)]
    assert wide == [], done.stdout  # only an identifier longer than the width goes past it


def test_a_description_with_blank_lines_shows_no_literal_newline(tmp_path: Path) -> None:
    description = "First line,\nsecond\tline.\n\nSecond paragraph."
    tool = {"name": "t", "description": description, "inputSchema": {}}
    steps = [
        *initialize_steps({"tools": {}}, {"name": "s", "version": "1"}),
        {"expect": {"method": "notifications/initialized"}},
        {"expect": {"method": "tools/list"}},
        {"reply": {"tools": [tool]}},
    ]
    for command, shown in (
        ("tools", "First line, second line. …"),  # the short form: the first paragraph
        ("probe", "First line, second line. Second paragraph."),
    ):
        done = run_at(200, command, *scripted(tmp_path, steps))
        assert done.returncode == 0, done.stderr
        assert shown in done.stdout
        assert "\\n" not in done.stdout and "\\t" not in done.stdout


# --- the layout rule and the short description, by plain calls ------------------------------


@pytest.mark.parametrize(
    ("description", "shown"),
    [
        ("One line.", "One line."),
        ("Get the time.\n\nArgs:\n    timezone: IANA name", "Get the time. …"),
        ("Spaced \u2028 out\r\n  text", "Spaced out text"),
        ("word " * 50, ("word " * 32).strip() + "…"),  # 160 characters, cut after a word
        ("x" * 200, "x" * 160 + "…"),
        ("\u001b[2J\n\nrest", "\\u001b[2J …"),  # still escaped
    ],
)
def test_the_short_description_is_the_first_paragraph_on_one_line_cut_after_a_word(
    description: str, shown: str
) -> None:
    assert report.prose_text(description, short=True) == shown


def test_fit_widths_gives_each_column_what_it_needs_and_the_rest_to_who_wants_it() -> None:
    # 3 columns: 4 borders and 6 of padding leave 70 of 80.
    assert fit_widths([10, 20, 5], [10, 200, 5], 80) == [10, 55, 5]
    # the room goes to the column furthest from its natural width: the long description
    assert fit_widths([30, 20, 13], [30, 300, 26], 80) == [30, 27, 13]
    assert fit_widths([10, 20, 5], [10, 30, 5], 80) == [10, 30, 5]  # narrower than the screen
    assert fit_widths([50, 20, 5], [50, 200, 5], 80) is None  # the identifier cannot stay whole
    assert fit_widths([50, 15, 5], [50, 200, 5], 80) == [50, 15, 5]  # exactly


def test_print_table_keeps_identifiers_whole_and_wraps_prose() -> None:
    columns = [Column("URI", IDENTIFIER), Column("Arguments", WORDS), Column("Description", PROSE)]
    uri = "demo://resource/static/document/architecture.md"
    rows = [[Text(uri), Text("resourceId*, kind"), Text("word " * 30)]]
    for terminal in (True, False):
        console = Console(width=80, record=True, force_terminal=terminal, file=io.StringIO())
        print_table(console, "Resources", columns, rows)
        lines = console.export_text().splitlines()
        assert any(uri in line for line in lines)
        assert any("resourceId*," in line for line in lines)
        assert max(len(line) for line in lines) <= 80


def test_a_refresh_cut_short_by_the_close_is_not_a_warning(tmp_path: Path) -> None:
    # server-everything says its tools changed while the host lists them: the host refreshes
    # the list after the answer, and closes before the refresh is answered.
    tool = {"name": "t", "inputSchema": {"type": "object"}}
    steps = [
        *initialize_steps({"tools": {"listChanged": True}}, {"name": "changing", "version": "1"}),
        {"expect": {"method": "notifications/initialized"}},
        {"expect": {"method": "tools/list"}},
        {"send": {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}},
        {"reply": {"tools": [tool]}},
        {"expect": {"method": "tools/list"}},  # the refresh: never answered
        {"hang": True},
    ]
    done = run_cli("tools", "--json", *scripted(tmp_path, steps))
    assert done.returncode == 0, done.stderr
    assert one_document(done.stdout) == {"tools": [tool]}
    assert done.stderr == ""


LISTING = ["--", sys.executable, str(FIXTURES / "listing_server.py")]


def test_the_shell_shows_each_description_on_one_line() -> None:
    done = forkserver.run(
        [*CLI, "shell", *LISTING],
        input="tools\nresources\nprompts\n",
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "get-resource-reference(resourceId*)  Returns a resource reference. …  [unclassed]" in lines
    assert "simple-prompt()  A prompt without arguments." in lines
    assert "\\n" not in done.stdout and "\\t" not in done.stdout


def test_a_terminal_of_80_columns_keeps_each_uri_whole() -> None:
    child = spawn_pty(
        CLI[0],
        [*CLI[1:], "resources", *LISTING],
        encoding="utf-8",
        timeout=TIMEOUT,
        dimensions=(50, 80),
        env=pty_env(),
    )
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    lines = terminal_lines(child.before or "")
    uris = [*listing_server.URIS, "demo://resource/dynamic/text/{resourceId}"]
    for uri in uris:  # written whole: a terminal shows a longer one on two rows, copied as one line
        assert any(uri in line for line in lines), (uri, lines)
    assert [line for line in lines if len(line) > 80 and not any(uri in line for uri in uris)] == []


def test_the_targets_of_probe_and_call_a_config_entry_and_an_http_url(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"demo": demo_entry(tmp_path)})
    from_config = run_cli("tools", "--json", "--config", str(config), "--server", "demo")
    assert from_config.returncode == 0, from_config.stderr
    assert [tool["name"] for tool in one_document(from_config.stdout)["tools"]] == ["echo", "add", "now"]
    bridge = [
        sys.executable,
        str(FIXTURES / "http_bridge.py"),
        "--",
        sys.executable,
        str(FIXTURES / "listing_server.py"),
    ]
    with bridge_url(bridge, "http") as url:
        over_http = run_cli("resources", "--json", "--url", url + "mcp")
    assert over_http.returncode == 0, over_http.stderr
    document = one_document(over_http.stdout)
    assert document == {"resources": listing_server.RESOURCES, "resourceTemplates": listing_server.TEMPLATES}


def test_server_everything_listings_are_short_and_keep_each_uri_whole() -> None:
    executable = os.environ.get("MCPL_TEST_SERVER_EVERYTHING")
    if not executable:
        pytest.skip("set MCPL_TEST_SERVER_EVERYTHING to the mcp-server-everything executable (.ci/run does)")
    everything = ["--", executable, "stdio"]
    listed = run_cli("resources", "--json", *everything)
    assert listed.returncode == 0, listed.stderr
    document = one_document(listed.stdout)
    uris = [r["uri"] for r in document["resources"]] + [
        t["uriTemplate"] for t in document["resourceTemplates"]
    ]
    assert uris
    shown = run_at(80, "resources", *everything)
    assert shown.returncode == 0, shown.stderr
    assert shown.stderr == ""
    lines = shown.stdout.splitlines()
    for uri in uris:
        assert any(uri in line for line in lines), (uri, shown.stdout)
    tools = run_at(80, "tools", *everything)
    assert tools.returncode == 0 and tools.stderr == "", tools.stderr
    assert "Grant" not in tools.stdout and max(len(line) for line in tools.stdout.splitlines()) <= 80


def test_a_list_that_pages_past_the_limit_fails_naming_the_bound(tmp_path: Path) -> None:
    page = {"tools": [{"name": "t", "inputSchema": {"type": "object"}}], "nextCursor": "again"}
    steps = [
        *initialize_steps({"tools": {}}, {"name": "endless", "version": "1"}),
        {"expect": {"method": "notifications/initialized"}},
        *[
            step
            for cursor in ("p1", "p2")
            for step in ({"expect": {"method": "tools/list"}}, {"reply": {**page, "nextCursor": cursor}})
        ],
    ]
    script = tmp_path / "script.json"
    script.write_text(json.dumps(steps), encoding="utf-8")
    entry = {
        "command": sys.executable,
        "args": [str(FIXTURES / "scripted_server.py"), str(script), str(tmp_path / "record.jsonl")],
        "limits": {"maxListPages": 2},
    }
    config = write_config(tmp_path, {"endless": entry})
    done = run_cli("tools", "--json", "--config", str(config), "--server", "endless")
    assert done.returncode == 1
    assert done.stdout == ""
    assert "max_list_pages" in done.stderr and "Traceback" not in done.stderr


def test_an_endpoint_uri_wider_than_the_probe_panel_is_shown_whole_under_it() -> None:
    long_uri = "mcpl://mcpl.example.com/v1/" + "a-long-path-segment/" * 4
    doc = {
        "server": {"name": "s"},
        "capabilities": {},
        "endpoint": {"configuredUri": long_uri, "canonicalUri": "mcpl://mcpl.example.com/v1/"},
    }
    console = Console(width=80, record=True, file=io.StringIO())
    report.render_report(console, doc)
    lines = console.export_text().splitlines()
    assert f"Configured URI: {long_uri}" in lines  # whole, on its own line
    assert any("Canonical URI  mcpl://mcpl.example.com/v1/" in line for line in lines)  # fits: in the panel
    assert max(len(line) for line in lines if long_uri not in line) <= 80


def test_listing_outcome_keeps_the_lists_asked_and_fails_on_an_error_answer() -> None:
    doc = report.new_document([])
    doc.update(
        capabilities={"resources": {}},
        resources=[{"uri": "demo://a"}],
        skipped=["tools", "prompts"],
        unavailable={"resourceTemplates": {"code": -32601, "message": "Method not found", "data": None}},
    )
    listed = listing_outcome(doc, ["resources", "resourceTemplates"], tool_classes=False)
    assert listed.document == {
        "resources": [{"uri": "demo://a"}],
        "resourceTemplates": [],
        "unavailable": {"resourceTemplates": {"code": -32601, "message": "Method not found", "data": None}},
    }
    assert listed.status == 1
    assert listed.message == "resources/templates/list: server error -32601: Method not found"
    skipped = listing_outcome(doc, ["tools"], tool_classes=True)
    assert (skipped.document, skipped.status, skipped.message) == (
        {"tools": [], "toolClasses": [], "skipped": ["tools"]},
        0,
        None,
    )
