"""RFC-007 end to end through ``Host``, asyncio and trio: two fixture servers
(fixtures/current_spec/server.py) over real pipes, each granted ``toolLifecycle.observe`` by
name, each providing a tool; each observes the other's calls and never its own (RFC-007
§7.1). The watcher's filter asks for one field; it is per connection (RFC-007 §6.5): after a
restart the watcher gets metadata only until it sends its filter again."""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import pytest

from mcpl_host import Host, ServerConfig
from mcpl_host.mcpl.grants import GrantPolicy
from mcpl_host.mcpl.tool_lifecycle import Narrowing, ToolLifecyclePolicy

from .conftest import FIXTURES
from .wire import FAST

pytestmark = pytest.mark.anyio
SERVER = str(FIXTURES / "current_spec" / "server.py")
TIMEOUT = 30


def _config(name: str, policy: ToolLifecyclePolicy) -> ServerConfig:
    return ServerConfig(
        name=name,
        command=sys.executable,
        args=(SERVER,),
        limits=FAST,
        grant_policy=GrantPolicy(grant=("toolLifecycle.*",)),
        tool_lifecycle=policy,
    )


async def _stage(host: Host, server: str, tool: str, classes: list[str]) -> None:
    conn = await host.server(server).connected()
    await conn.mcp.call_tool("lifecycle_tools", {"tools": [{"name": tool, "classes": classes}]})
    await conn.mcp.list_tools(refresh=True)


async def _observe(host: Host, server: str, params: Any) -> dict[str, Any]:
    conn = await host.server(server).connected()
    answer: dict[str, Any] = json.loads(
        (await conn.mcp.call_tool("lifecycle_observe", {"params": params})).text
    )
    return answer


async def _seen(host: Host, server: str) -> list[dict[str, Any]]:
    conn = await host.server(server).connected()
    seen: dict[str, list[dict[str, Any]]] = json.loads((await conn.mcp.call_tool("seen", {})).text)
    return seen.get("tools/lifecycle", [])


async def test_each_server_observes_the_others_calls_never_its_own() -> None:
    shell_inputs = ToolLifecyclePolicy(inputs=Narrowing(classes=("shell",)))
    configs = {
        "watcher": _config("watcher", shell_inputs),
        "worker": _config("worker", ToolLifecyclePolicy()),
    }
    with anyio.fail_after(TIMEOUT):
        async with Host(configs, subscribe_all=False) as host:
            await host.wait_ready(timeout=TIMEOUT)
            await _stage(host, "worker", "run", ["shell"])
            await _stage(host, "watcher", "look", ["web"])
            # A malformed filter is refused and changes nothing; a good one is kept.
            refused = await _observe(host, "watcher", {"rules": [{"match": {"module": "x"}}]})
            assert refused["error"]["code"] == -32602
            assert await _observe(host, "watcher", {"rules": [{"match": {}, "input": ["cmd"]}]}) == {
                "result": {}
            }

            async with host.tool_call(
                "worker", "run", {"cmd": "ls", "env": "SECRET=1"}, conversation_id="c1", inference_id="i1"
            ) as call:
                result = await call.execute()
            assert not result.is_error
            async with host.tool_call(
                "watcher", "look", {"url": "x"}, conversation_id="c1", inference_id="i2"
            ) as own:
                await own.execute()

            watched = await _seen(host, "watcher")
            assert [(e["tool"], e["phase"]) for e in watched] == [
                ("worker--run", "started"),
                ("worker--run", "completed"),
            ]
            assert watched[0]["input"] == {"cmd": "ls"}  # the requested field only
            assert watched[0]["toolCallId"] == watched[1]["toolCallId"] == call.call_id
            assert (watched[0]["serverId"], watched[0]["serverTool"], watched[0]["class"]) == (
                "worker",
                "run",
                ["shell"],
            )
            assert watched[1]["isError"] is False and watched[1]["durationMs"] >= 0
            worked = await _seen(host, "worker")  # no filter: metadata only; never its own tool
            assert [(e["tool"], e["phase"]) for e in worked] == [
                ("watcher--look", "started"),
                ("watcher--look", "completed"),
            ]
            assert "input" not in worked[0] and "inputWithheld" not in worked[0]
            assert call.recipients == ("watcher",) and own.recipients == ("worker",)

            # A new connection has no filter: metadata only until the server sends one again.
            host.server("watcher").restart()
            await host.wait_ready("watcher", timeout=TIMEOUT)
            await _stage(host, "worker", "run", ["shell"])
            async with host.tool_call(
                "worker", "run", {"cmd": "pwd"}, conversation_id="c1", inference_id="i3"
            ) as again:
                await again.execute()
            fresh = await _seen(host, "watcher")
            assert [e["phase"] for e in fresh] == ["started", "completed"]
            assert "input" not in fresh[0] and fresh[0]["toolCallId"] != call.call_id


async def test_the_applications_own_tool_and_an_approval_gate() -> None:
    """A tool the application implements (no ``serverId``), reported with its classes; a call
    held at a gate: ``pending``, then ``aborted`` when refused, never ``started``."""
    configs = {"watcher": _config("watcher", ToolLifecyclePolicy())}
    with anyio.fail_after(TIMEOUT):
        async with Host(configs, subscribe_all=False) as host:
            await host.wait_ready(timeout=TIMEOUT)
            async with host.tool_call(
                None, "speak", {"text": "hi"}, conversation_id="c", inference_id="i", classes=["body"]
            ) as mine:
                mine.completed()
            async with host.tool_call(
                None, "rm", {}, conversation_id="c", inference_id="i", pending=True
            ) as gated:
                pass  # refused at the gate: leaving without start() aborts it
            seen = await _seen(host, "watcher")
            assert [(e["tool"], e["phase"]) for e in seen] == [
                ("speak", "started"),
                ("speak", "completed"),
                ("rm", "pending"),
                ("rm", "aborted"),
            ]
            assert seen[0]["class"] == ["body"] and "serverId" not in seen[0]
            assert seen[2]["class"] == [] and gated.phases == ("pending", "aborted")


async def test_grant_all_advertised_grants_neither_path() -> None:
    """docs/protocol.md TL1 (RFC-007 §4.1): a server granted everything it advertises still
    gets no ``tools/lifecycle``, and its ``tools/observe`` is refused ``-32002``."""
    greedy = ServerConfig(
        name="greedy",
        command=sys.executable,
        args=(SERVER,),
        limits=FAST,
        grant_policy=GrantPolicy(grant_all_advertised=True),
        tool_lifecycle=ToolLifecyclePolicy(inputs=Narrowing(classes=("body",))),
    )
    with anyio.fail_after(TIMEOUT):
        async with Host({"greedy": greedy}, subscribe_all=False) as host:
            await host.wait_ready(timeout=TIMEOUT)
            conn = await host.server("greedy").connected()
            assert conn.grant is not None and "pushEvents" in conn.grant.paths
            assert not {"toolLifecycle.observe", "toolLifecycle.inputs"} & conn.grant.paths
            refused = await _observe(host, "greedy", {"rules": [{"match": {}, "input": True}]})
            assert refused["error"]["code"] == -32002
            async with host.tool_call(
                None, "speak", {}, conversation_id="c", inference_id="i", classes=["body"]
            ) as call:
                call.completed()
            assert call.recipients == () and await _seen(host, "greedy") == []
