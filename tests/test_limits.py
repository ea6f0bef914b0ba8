"""``Limits``: every field has a config key and a checked default, and every field can be set
per server in the config file (``limits``), checked like every other key, alongside the
older ``timeouts`` and ``maxLineBytes``; a config-file limit reaches the wire."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpl_host import connect, load_config
from mcpl_host.config import ConfigError, parse_config
from mcpl_host.limits import CONFIG_KEYS, LimitExceeded, Limits, config_key, limit_problem, limits_with

from .wire import SCRIPTED, initialize_steps

BASE = Path("/cfg")


def server_limits(entry_limits: Any, **more: Any) -> Limits:
    data = {"mcpServers": {"s": {"command": "x", "limits": entry_limits, **more}}}
    return parse_config(data, base_dir=BASE, source="t.json").servers["s"].limits


def problems(entry_limits: Any, **more: Any) -> list[str]:
    data = {"mcpServers": {"s": {"command": "x", "limits": entry_limits, **more}}}
    with pytest.raises(ConfigError) as info:
        parse_config(data, base_dir=BASE, source="t.json")
    return [str(problem) for problem in info.value.problems]


def test_every_field_has_a_config_key_and_a_valid_default() -> None:
    fields = dataclasses.fields(Limits)
    assert len(CONFIG_KEYS) == len(fields) and len(fields) >= 55
    for field in fields:
        assert CONFIG_KEYS[config_key(field.name)] == field.name
        assert limit_problem(field.name, getattr(Limits(), field.name)) is None, field.name
    assert config_key("max_state_bytes") == "maxStateBytes"
    assert config_key("websocket_keepalive_interval_seconds") == "websocketKeepaliveIntervalSeconds"


def test_the_values_a_field_takes() -> None:
    assert limit_problem("max_channels", 0) == "must be a whole number, 1 or more"
    assert limit_problem("max_channels", 2.5) == "must be a whole number, 1 or more"
    assert limit_problem("max_channels", True) == "must be a whole number, 1 or more"
    assert limit_problem("max_channels", 3.0) is None
    assert limit_problem("dropped_lines_logged", 0) is None  # a budget of log lines may be 0
    assert limit_problem("max_patch_seconds", 0) == "must be a number of seconds, above 0"
    assert limit_problem("max_patch_seconds", float("inf")) == "must be a number of seconds, above 0"
    assert limit_problem("close_grace_seconds", 0) is None
    assert limit_problem("websocket_keepalive_interval_seconds", None) is None
    assert limit_problem("hook_timeout_seconds", None) == "must be a number of seconds, above 0"
    assert limits_with(Limits(), {"max_channels": 3.0}).max_channels == 3
    with pytest.raises(ValueError, match="Limits.max_channels must be a whole number"):
        limits_with(Limits(), {"max_channels": -1})


def test_a_limits_object_sets_any_field_per_server() -> None:
    limits = server_limits(
        {
            "maxStateBytes": 4096,
            "maxPatchSeconds": 0.5,
            "maxChannels": 10,
            "hookTimeoutSeconds": 2,
            "websocketKeepaliveIntervalSeconds": None,
            "maxListItems": 100.0,
        },
        timeouts={"request": 5},
        maxLineBytes=1000,
    )
    assert (limits.max_state_bytes, limits.max_patch_seconds, limits.max_channels) == (4096, 0.5, 10)
    assert limits.hook_timeout_seconds == 2 and limits.websocket_keepalive_interval_seconds is None
    assert limits.max_list_items == 100 and isinstance(limits.max_list_items, int)
    assert (limits.request_timeout_seconds, limits.max_line_bytes) == (5, 1000)  # older keys still work
    assert limits.max_tags == Limits().max_tags  # the rest are the defaults


def test_every_problem_of_a_limits_object_is_reported_with_its_location() -> None:
    found = problems(
        {
            "maxStateByte": 1,
            "maxChannels": "10",
            "maxPatchOperations": 0,
            "maxPatchSeconds": -1,
            "hookTimeoutSeconds": None,
            "maxLineBytes": 10,
            "requestTimeoutSeconds": 3,
        },
        timeouts={"request": 5},
        maxLineBytes=1000,
    )
    assert found == [
        'mcpServers.s.limits.maxStateByte: unknown key; did you mean "maxStateBytes"?',
        'mcpServers.s.limits.maxChannels: must be a whole number, 1 or more, not the string "10"',
        "mcpServers.s.limits.maxPatchOperations: must be a whole number, 1 or more, not the number 0",
        "mcpServers.s.limits.maxPatchSeconds: must be a number of seconds, above 0, not the number -1",
        "mcpServers.s.limits.hookTimeoutSeconds: must be a number of seconds, above 0, not null",
        "mcpServers.s.limits.maxLineBytes: is also given as mcpServers.s.maxLineBytes; give it once",
        "mcpServers.s.limits.requestTimeoutSeconds: is also given as mcpServers.s.timeouts.request; give it once",
    ]
    assert problems([1]) == ["mcpServers.s.limits: must be an object of Limits fields, not an array"]


@pytest.mark.anyio
async def test_a_limit_from_the_config_file_reaches_the_wire(tmp_path: Path) -> None:
    steps = [
        *initialize_steps({"tools": {}}, {"name": "pager", "version": "0"}),
        {"expect": {"method": "notifications/initialized"}},
        *[
            step
            for n in range(5)
            for step in (
                {"expect": {"method": "tools/list"}},
                {"reply": {"tools": [{"name": f"t{n}"}], "nextCursor": f"c{n + 1}"}},
            )
        ],
        {"hang": True},
    ]
    script = tmp_path / "script.json"
    script.write_text(json.dumps(steps))
    config = tmp_path / "servers.json"
    entry = {
        "command": sys.executable,
        "args": [str(SCRIPTED), str(script), str(tmp_path / "record.jsonl")],
        "timeouts": {"closeGrace": 1, "terminateGrace": 1},
        "limits": {"maxListPages": 3},
    }
    config.write_text(json.dumps({"mcpServers": {"pager": entry}}))
    server = load_config(config).servers["pager"]
    with anyio.fail_after(30):
        async with connect(server) as conn:
            with pytest.raises(LimitExceeded) as caught:
                await conn.mcp.list_tools()
    assert caught.value.limit == "max_list_pages" and caught.value.bound == 3
    record = [json.loads(row) for row in (tmp_path / "record.jsonl").read_text().splitlines()]
    asked = [row for row in record if "line" in row and '"tools/list"' in row["line"]]
    assert len(asked) == 3
