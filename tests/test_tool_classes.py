"""Tool classes (RFC-008 rev 2): the pure rules (``mcpl_host.tool_classes``), the config, the
log lines of a real listing, and what ``probe`` shows. The frozen vectors run in
``test_vectors_tool_classes.py``."""

from __future__ import annotations

import functools
import sys
from typing import Any

import anyio
import pytest

from mcpl_host import HostedServer, ServerConfig, connect
from mcpl_host.check.registry import CHECKS_BY_ID
from mcpl_host.check.rules import evaluate
from mcpl_host.check.runner import GRANT_ALL, CheckOptions, Target, run_checks
from mcpl_host.config import ConfigError, parse_config
from mcpl_host.limits import Limits
from mcpl_host.mcp_records import read_tool
from mcpl_host.tool_classes import (
    InputsNarrowing,
    ToolClassTables,
    declared_classes,
    effective_classes,
    inputs_admitted,
    slot_findings,
    tool_pattern_matches,
)

from .conftest import FIXTURES
from .test_cli import probe_json
from .wire import FAST

SERVER = str(FIXTURES / "current_spec" / "server.py")
ALL = InputsNarrowing(tools=("*",))


def test_declared_classes_read_only_known_strings_of_an_array() -> None:
    assert declared_classes({"mcpl/class": ["shell", "quantum", "files", "shell", 3]}) == ("files", "shell")
    assert declared_classes({"mcpl/class": "shell"}) == ()
    assert declared_classes({"mcpl/class": ["quantum"]}) == ()
    assert declared_classes({"mcpl/priority": "high"}) == ()
    assert declared_classes(None) == declared_classes([]) == ()


def test_findings_name_what_was_ignored_each_once_and_bounded() -> None:
    meta = {"mcpl/class": ["quantum", "quantum", "shell", None], "mcpl/priority": 1, "other/x": 1}
    found = [(f.kind, f.value) for f in slot_findings(meta, limit=10)]
    assert found == [
        ("unknown_class", "quantum"),
        ("unknown_class", "null"),
        ("undefined_key", "mcpl/priority"),
    ]
    assert [(f.kind, f.value) for f in slot_findings({"mcpl/class": "shell"}, limit=10)] == [
        ("malformed_slot", "string")
    ]
    hostile = {"mcpl/class": [f"c{i}" for i in range(10_000)], **{f"mcpl/k{i}": 0 for i in range(10_000)}}
    assert len(slot_findings(hostile, limit=5)) == 5
    assert slot_findings({"mcpl/class": ["shell"]}, limit=5) == ()
    assert all(f.section.startswith("RFC-008 §3") for f in slot_findings(meta, limit=10))


def test_the_first_source_wins_whole() -> None:
    tables = ToolClassTables(overrides={"speak": ("comms",)}, host={"speak": ("body",), "say": ("comms",)})
    assert effective_classes("speak", ("body", "media"), tables) == (("comms",), "override")
    assert effective_classes("say", ("shell",), tables) == (("comms",), "host")
    assert effective_classes("run", ("shell",), tables) == (("shell",), "server")
    assert effective_classes("run", (), tables) == ((), "none")
    # An entry naming no known class is no entry: the next source decides.
    assert effective_classes("run", ("shell",), ToolClassTables(overrides={"run": ()})) == (
        ("shell",),
        "server",
    )


def test_read_tool_keeps_the_definition_and_adds_the_classes() -> None:
    item = {
        "name": "run",
        "description": "d",
        "inputSchema": {"type": "object"},
        "_meta": {"mcpl/class": ["shell"]},
    }
    tool = read_tool(item)
    assert tool is not None and (tool.classes, tool.class_source) == (("shell",), "server")
    assert tool.raw is item and tool.raw == {
        "name": "run",
        "description": "d",
        "inputSchema": {"type": "object"},
        "_meta": {"mcpl/class": ["shell"]},
    }


def test_arguments_never_for_unclassed_or_comms_and_only_inside_the_narrowing() -> None:
    assert inputs_admitted("s--run", ("shell",), ALL)
    assert not inputs_admitted("s--run", (), ALL)  # unclassed: the most restrictive
    assert not inputs_admitted("s--send", ("files", "comms"), ALL)  # union of restrictions
    assert not inputs_admitted("s--run", ("shell",), None)  # no narrowing: no tools
    assert not inputs_admitted("s--run", ("shell",), InputsNarrowing())
    files = InputsNarrowing(classes=("files",))
    assert inputs_admitted("s--f", ("files",), files) and not inputs_admitted("s--r", ("shell",), files)
    both = InputsNarrowing(tools=("y--*",), classes=("shell",))
    assert inputs_admitted("y--run", ("shell",), both) and not inputs_admitted("x--run", ("shell",), both)


@pytest.mark.parametrize(
    ("pattern", "name", "expected"),
    [
        ("*", "", True),
        ("y--*", "y--run", True),
        ("y--*", "x--run", False),
        ("*--run", "y--run", True),
        ("a*b*c", "abc", True),
        ("a*b*c", "aXbYc", True),
        ("a*b*c", "acb", False),
        ("ab*ba", "aba", False),
        ("Run", "run", False),
    ],
)
def test_tool_patterns(pattern: str, name: str, expected: bool) -> None:
    assert tool_pattern_matches(pattern, name) is expected


def test_config_key_tool_classes() -> None:
    config = parse_config(
        {"mcpServers": {"s": {"command": "x", "toolClasses": {"speak": ["comms"]}}}}
    ).servers["s"]
    assert dict(config.tool_classes) == {"speak": ("comms",)}
    with pytest.raises(ConfigError, match=r'toolClasses.speak\[0\].*did you mean "comms"'):
        parse_config({"mcpServers": {"s": {"command": "x", "toolClasses": {"speak": ["comm"]}}}})
    with pytest.raises(ConfigError, match="toolClasses"):
        parse_config({"mcpServers": {"s": {"command": "x", "toolClasses": ["comms"]}}})
    with pytest.raises(ValueError, match="not a tool class"):
        ServerConfig(command="x", tool_classes={"speak": ("quantum",)})
    with pytest.raises(TypeError):
        ServerConfig(command="x", host_tool_classes={"say": "comms"})  # type: ignore[dict-item]


@pytest.mark.anyio
async def test_a_listing_logs_each_ignored_value_once(anyio_backend: str, logs: list[dict[str, Any]]) -> None:
    config = ServerConfig(
        command=sys.executable, args=(SERVER,), limits=FAST, tool_classes={"quantum": ("web",)}
    )
    with anyio.fail_after(20):
        async with connect(config) as conn:
            first = {tool.name: tool for tool in await conn.mcp.list_tools()}
            await conn.mcp.list_tools(refresh=True)
    assert (first["send_file"].classes, first["send_file"].class_source) == (("comms", "files"), "server")
    assert (first["quantum"].classes, first["quantum"].class_source) == (("web",), "override")
    assert (first["malformed"].classes, first["malformed"].class_source) == ((), "none")
    assert first["seen"].class_source == "none"
    lines = [(e["tool"], e["value"]) for e in logs if str(e.get("event")).startswith("tool class:")]
    assert sorted(lines) == [("malformed", "mcpl/priority"), ("malformed", "string"), ("quantum", "quantum")]


@pytest.mark.anyio
async def test_findings_logged_within_the_budget(anyio_backend: str, logs: list[dict[str, Any]]) -> None:
    config = ServerConfig(command=sys.executable, args=(SERVER,), limits=Limits(tool_class_findings_logged=1))
    with anyio.fail_after(20):
        async with connect(config) as conn:
            await conn.mcp.list_tools()
    lines = [e["event"] for e in logs if str(e.get("event")).startswith("tool class:")]
    assert len(lines) == 2 and lines[-1].endswith("more of these go unlogged on this connection")


def test_probe_shows_the_class_and_its_source() -> None:
    doc, _ = probe_json()
    assert doc["toolClasses"] == [
        {"name": "echo", "classes": ["body"], "source": "server"},
        {"name": "add", "classes": ["shell"], "source": "server"},
        {"name": "now", "classes": [], "source": "none"},
    ]
    assert "_meta" in doc["tools"][0]  # the tool as the server sent it


@pytest.mark.anyio
async def test_check_warns_of_ignored_class_slots_and_of_injection(anyio_backend: str) -> None:
    """``mcpl-host check``: ``tools.class`` (RFC-008 §3) and ``mcpl.context-injection``
    (RFC-010 §4.1), against the current-spec fixture, which has both."""
    limits = Limits(close_grace_seconds=1)
    config = ServerConfig(command=sys.executable, args=(SERVER,), grant_policy=GRANT_ALL, limits=limits)
    with anyio.fail_after(30):
        evidence = await run_checks(
            Target(functools.partial(HostedServer, config), "stdio", "current"),
            CheckOptions(limits=limits, listen_seconds=0),
            frozenset({"main", "lists", "calls"}),
        )
    classes, injection = evaluate(
        evidence, [CHECKS_BY_ID["tools.class"], CHECKS_BY_ID["mcpl.context-injection"]]
    )
    assert classes.status == "warned"
    assert (
        "'quantum'" in classes.reason and "'string'" in classes.reason and "'mcpl/priority'" in classes.reason
    )
    assert "RFC-008 §3" in classes.reason
    assert injection.status == "warned" and "2 context injections" in injection.reason
