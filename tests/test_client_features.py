"""Roots, sampling and elicitation (MCP 2025-11-25 "Client Features"): what the host
advertises, how server requests reach the typed handlers, and the typed MCP helpers
(``completion/complete``, ``logging/setLevel``, ``resources/subscribe``, list caches,
``outputSchema`` checks), over real pipes to ``fixtures/scripted_server.py``."""

from __future__ import annotations

import io
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog

from mcpl_host import HandlerError, HostHandlers, RequestContext
from mcpl_host.client_features import (
    ClientFeatures,
    ElicitationMode,
    ElicitationRequest,
    ElicitationResult,
    Root,
    Roots,
    SamplingRequest,
    SamplingResult,
    read_elicitation_request,
    read_sampling_request,
    root,
)
from mcpl_host.handshake import initialize_params
from mcpl_host.logging import configure_logging
from mcpl_host.mcp_methods import OutputSchemaError, PromptReference
from mcpl_host.mcp_records import read_prompt, read_resource, read_tool

from .wire import MCP_HANDSHAKE, Script, TestHandlers, mark, server_notification

pytestmark = pytest.mark.anyio


class Sampler:
    def __init__(self, *, tools: bool = False) -> None:
        self.supports_tools = tools
        self.seen: list[SamplingRequest] = []

    async def create_message(self, context: RequestContext, request: SamplingRequest) -> SamplingResult:
        self.seen.append(request)
        return SamplingResult.text(f"sampled for {context.server}", "test-model")


class Elicitor:
    def __init__(self, modes: Collection[ElicitationMode] = ("form",)) -> None:
        self.modes = modes

    async def elicit(self, context: RequestContext, request: ElicitationRequest) -> ElicitationResult:
        if request.mode == "url":
            raise HandlerError(-1, "not opening URLs")
        return ElicitationResult("accept", {"name": "Ada"})


class Features(TestHandlers):
    """``TestHandlers`` (they notice the end of a script) that also serve client features."""

    def __init__(self, **features: Any) -> None:
        super().__init__()
        HostHandlers.__init__(self, **features)


def answers(script: Script) -> dict[str, Any]:
    """The host's answers to the script's requests, by id."""
    return {str(m["id"]): m for m in script.messages() if "method" not in m and "id" in m}


def request(request_id: str, method: str, params: Any = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return {"send": message}


SAMPLING = {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 10}


# -- pure rules -------------------------------------------------------------------------------


def test_capabilities_are_advertised_exactly_when_a_handler_is_given() -> None:
    assert ClientFeatures().capabilities() == {}
    everything = ClientFeatures(Roots(), Sampler(tools=True), Elicitor(("form", "url")))
    assert everything.capabilities() == {
        "roots": {"listChanged": True},
        "sampling": {"tools": {}},
        "elicitation": {"form": {}, "url": {}},
    }
    assert ClientFeatures(sampling=Sampler()).capabilities() == {"sampling": {}}
    assert ClientFeatures(elicitation=Elicitor(())).capabilities() == {}  # no mode: nothing served
    # MCP 2026-07-28 removed notifications/roots/list_changed.
    assert everything.capabilities(stateless=True)["roots"] == {}
    params = initialize_params("h", "1", None, everything.capabilities())
    assert params["capabilities"]["elicitation"] == {"form": {}, "url": {}}
    assert "experimental" not in params["capabilities"]


def test_handlers_take_roots_as_a_list_a_callable_or_a_provider(tmp_path: Path) -> None:
    assert HostHandlers().roots is None
    listed = HostHandlers(roots=[tmp_path, "file:///srv/data"]).roots
    assert isinstance(listed, Roots)
    provider = Roots(lambda: [tmp_path])
    assert HostHandlers(roots=provider).roots is provider
    assert root(tmp_path) == Root(tmp_path.as_uri(), tmp_path.name)
    with pytest.raises(ValueError, match="file:// URI"):
        root("https://example.com/repo")


def test_sampling_params_are_read_typed_and_refused_with_every_problem() -> None:
    request_ = read_sampling_request(
        {**SAMPLING, "systemPrompt": "be brief", "temperature": 0.5, "stopSequences": ["x", 3]},
        tools_allowed=False,
    )
    assert request_.max_tokens == 10 and request_.system_prompt == "be brief" and request_.temperature == 0.5
    assert request_.messages[0].text == "hi" and request_.stop_sequences == ("x",)
    with pytest.raises(HandlerError) as refused:
        read_sampling_request({"messages": [], "maxTokens": 0, "tools": []}, tools_allowed=False)
    assert refused.value.code == -32602
    assert refused.value.data["problems"] == [
        "messages must be a non-empty array",
        "maxTokens must be a positive number",
        "tools and toolChoice need the sampling.tools capability, which this host did not declare",
    ]
    tool = {"name": "lookup", "inputSchema": {"type": "object"}}
    with_tools = read_sampling_request(
        {**SAMPLING, "tools": [tool], "toolChoice": {"mode": "auto"}}, tools_allowed=True
    )
    assert [t.name for t in with_tools.tools] == ["lookup"] and with_tools.tool_choice == {"mode": "auto"}


def test_elicitation_params_default_to_form_and_refuse_an_undeclared_mode() -> None:
    form = read_elicitation_request(
        {"message": "who?", "requestedSchema": {"type": "object"}}, modes={"form"}
    )
    assert form.mode == "form" and form.requested_schema == {"type": "object"}
    with pytest.raises(HandlerError) as refused:
        read_elicitation_request({"mode": "url", "message": "go", "url": "https://x"}, modes={"form"})
    assert refused.value.data["problems"] == ["elicitation mode 'url' is not one this host declared"]
    url = read_elicitation_request(
        {"mode": "url", "message": "go", "url": "https://x", "elicitationId": "e1"}, modes={"form", "url"}
    )
    assert url.url == "https://x" and url.elicitation_id == "e1" and url.requested_schema is None


def test_typed_records_keep_every_field_and_the_raw_object() -> None:
    tool = read_tool(
        {
            "name": "t",
            "title": "T",
            "description": "d",
            "inputSchema": {"type": "object"},
            "outputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": True, "title": "Tee"},
            "icons": [
                {"src": "https://x/i.png", "mimeType": "image/png", "sizes": ["48x48"], "theme": "dark"}
            ],
            "execution": {"taskSupport": "optional"},
            "_meta": {"k": 1},
            "vendorField": 7,
        }
    )
    assert tool is not None and tool.title == "T" and tool.output_schema == {"type": "object"}
    assert tool.annotations is not None and tool.annotations.read_only_hint is True
    assert tool.icons[0].sizes == ("48x48",) and tool.icons[0].theme == "dark"
    assert tool.task_support == "optional" and tool.meta == {"k": 1} and tool.raw["vendorField"] == 7
    resource = read_resource(
        {"uri": "u", "name": "n", "size": 12, "annotations": {"audience": ["user"], "priority": 0.5}}
    )
    assert resource is not None and resource.size == 12
    assert resource.annotations is not None and resource.annotations.audience == ("user",)
    prompt = read_prompt({"name": "p", "arguments": [{"name": "a", "required": True}, {"no": "name"}]})
    assert prompt is not None and [(a.name, a.required) for a in prompt.arguments] == [("a", True)]


# -- over the wire ------------------------------------------------------------------------------


async def test_initialize_advertises_what_the_handlers_serve_and_nothing_without_them(tmp_path: Path) -> None:
    served = Script(tmp_path, MCP_HANDSHAKE, name="served")
    plain = Script(tmp_path, MCP_HANDSHAKE, name="plain")
    with anyio.fail_after(20):
        async with served.connect(
            handlers=Features(roots=[tmp_path], sampling=Sampler(), elicitation=Elicitor(("form", "url")))
        ):
            pass
        async with plain.connect():
            pass
    capabilities = served.messages()[0]["params"]["capabilities"]
    assert {key: capabilities[key] for key in ("roots", "sampling", "elicitation")} == {
        "roots": {"listChanged": True},
        "sampling": {},
        "elicitation": {"form": {}, "url": {}},
    }
    assert not {"roots", "sampling", "elicitation"} & set(plain.messages()[0]["params"]["capabilities"])


async def test_server_requests_reach_the_typed_handlers(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            request("r", "roots/list"),
            request("s", "sampling/createMessage", SAMPLING),
            request("e", "elicitation/create", {"message": "who?", "requestedSchema": {"type": "object"}}),
            request(
                "u",
                "elicitation/create",
                {"mode": "url", "message": "go", "url": "https://x", "elicitationId": "1"},
            ),
            request("bad", "sampling/createMessage", {"messages": "no"}),
            {"wait_responses": ["r", "s", "e", "u", "bad"]},
        ],
    )
    sampler = Sampler()
    handlers = Features(roots=Roots([tmp_path]), sampling=sampler, elicitation=Elicitor(("form", "url")))
    with anyio.fail_after(20):
        async with script.connect(handlers=handlers) as conn:
            await script.finished(conn)
    got = answers(script)
    assert got["r"]["result"] == {"roots": [{"uri": tmp_path.as_uri(), "name": tmp_path.name}]}
    assert got["s"]["result"] == {
        "role": "assistant",
        "content": {"type": "text", "text": "sampled for scripted_server"},
        "model": "test-model",
        "stopReason": "endTurn",
    }
    assert sampler.seen[0].messages[0].text == "hi"
    assert got["e"]["result"] == {"action": "accept", "content": {"name": "Ada"}}
    assert got["u"]["error"] == {"code": -1, "message": "not opening URLs"}  # the handler's refusal
    assert got["bad"]["error"]["code"] == -32602
    assert got["bad"]["error"]["data"]["problems"][0] == "messages must be a non-empty array"


async def test_a_feature_not_served_is_method_not_found(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            request("r", "roots/list"),
            request("s", "sampling/createMessage", SAMPLING),
            {"wait_responses": ["r", "s"]},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect(handlers=Features(sampling=Sampler())) as conn:
            await script.finished(conn)
    got = answers(script)
    assert got["r"]["error"]["code"] == -32601 and "result" in got["s"]


async def test_changed_roots_send_list_changed_and_are_listed_anew(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            request("r1", "roots/list"),
            {"wait_response": "r1"},
            mark("listed"),
            {"expect": {"method": "notifications/roots/list_changed"}},
            request("r2", "roots/list"),
            {"wait_response": "r2"},
        ],
    )
    roots = Roots([first])
    with anyio.fail_after(20):
        async with script.connect(handlers=Features(roots=roots)) as conn:
            await conn.hosted.handlers.mark("listed").wait()  # type: ignore[attr-defined]
            roots.set([second])
            await script.finished(conn)
    got = answers(script)
    assert [r["uri"] for r in got["r1"]["result"]["roots"]] == [first.as_uri()]
    assert [r["uri"] for r in got["r2"]["result"]["roots"]] == [second.as_uri()]
    assert repr(roots) == "<Roots 1 roots watchers=0>"  # the connection stopped watching


TOOLS = {
    "tools": [
        {
            "name": "count",
            "inputSchema": {"type": "object"},
            "outputSchema": {
                "type": "object",
                "properties": {"result": {"type": "integer"}},
                "required": ["result"],
            },
        }
    ]
}


def tool_result(structured: Any, *, is_error: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = {"content": [{"type": "text", "text": "x"}], "isError": is_error}
    if structured is not None:
        result["structuredContent"] = structured
    return {"reply": result}


async def test_structured_content_is_checked_against_the_output_schema(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"expect": {"method": "tools/call"}},
            tool_result({"result": "many"}),  # before tools/list: nothing known to check against
            {"expect": {"method": "tools/list"}},
            {"reply": TOOLS},
            {"expect": {"method": "tools/call"}},
            tool_result({"result": 3}),
            {"expect": {"method": "tools/call"}},
            tool_result({"result": "many"}),
            {"expect": {"method": "tools/call"}},
            tool_result(None),
            {"expect": {"method": "tools/call"}},
            tool_result({"oops": True}, is_error=True),  # a tool error is not checked
        ],
    )
    with anyio.fail_after(20):
        async with script.connect() as conn:
            assert (await conn.mcp.call_tool("count")).structured_content == {"result": "many"}
            await conn.mcp.list_tools()
            assert (await conn.mcp.call_tool("count")).structured_content == {"result": 3}
            with pytest.raises(OutputSchemaError) as wrong:
                await conn.mcp.call_tool("count")
            assert wrong.value.path == "$.result"
            assert str(wrong.value) == (
                "the structuredContent of tool 'count' does not match its outputSchema at $.result:"
                " 'many' is not of type 'integer'"
            )
            with pytest.raises(OutputSchemaError, match="returned no structuredContent"):
                await conn.mcp.call_tool("count")
            assert (await conn.mcp.call_tool("count")).is_error


async def test_a_list_changed_notification_refreshes_the_cached_list(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"expect": {"method": "tools/list"}},
            {"reply": {"tools": [{"name": "old", "inputSchema": {}}]}},
            {
                "send": {"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"}
            },  # never listed: ignored
            {"send": {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}},
            {"expect": {"method": "tools/list"}},
            {"reply": {"tools": [{"name": "new", "inputSchema": {}}]}},
        ],
    )
    refreshed = anyio.Event()
    with anyio.fail_after(20):
        async with script.connect() as conn:
            conn.mcp.on_list_refreshed = lambda name: refreshed.set()  # background refreshes only
            assert [t.name for t in await conn.mcp.list_tools()] == ["old"]
            await refreshed.wait()
            assert conn.mcp.cached_tools is not None and [t.name for t in conn.mcp.cached_tools] == ["new"]
            assert conn.mcp.cached_prompts is None
    assert [m.get("method") for m in script.messages()].count("prompts/list") == 0


async def test_completion_log_level_and_subscriptions_are_typed_calls(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"expect": {"method": "completion/complete"}},
            {"reply": {"completion": {"values": ["python", "pytorch"], "total": 10, "hasMore": True}}},
            {"expect": {"method": "logging/setLevel", "params": {"level": "debug"}}},
            {"reply": {}},
            {"expect": {"method": "resources/subscribe", "params": {"uri": "file:///a"}}},
            {"reply": {}},
            {"expect": {"method": "resources/unsubscribe", "params": {"uri": "file:///a"}}},
            {"reply": {}},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect() as conn:
            done = await conn.mcp.complete(
                PromptReference("code"), "language", "py", context={"style": "short"}
            )
            assert done.values == ["python", "pytorch"] and done.total == 10 and done.has_more
            await conn.mcp.set_log_level("debug")
            with pytest.raises(ValueError, match="unknown log level"):
                await conn.mcp.set_log_level("verbose")
            await conn.mcp.subscribe_resource("file:///a")
            await conn.mcp.unsubscribe_resource("file:///a")
    (sent,) = [m for m in script.messages() if m.get("method") == "completion/complete"]
    assert sent["params"] == {
        "ref": {"type": "ref/prompt", "name": "code"},
        "argument": {"name": "language", "value": "py"},
        "context": {"arguments": {"style": "short"}},
    }


async def test_a_server_log_message_without_a_logger_shows_no_null(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            server_notification("notifications/message", {"level": "warning", "data": "no logger"}),
            server_notification(
                "notifications/message", {"level": "warning", "logger": None, "data": "null logger"}
            ),
            server_notification(
                "notifications/message", {"level": "warning", "logger": "db", "data": "named"}
            ),
        ],
    )
    stream = io.StringIO()
    configure_logging("warning", stream=stream)
    try:
        with anyio.fail_after(20):
            async with script.connect() as conn:
                await script.finished(conn)
    finally:
        structlog.reset_defaults()
    lines = [line for line in stream.getvalue().splitlines() if "server log message" in line]
    assert len(lines) == 3
    plain = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in lines]
    # The console renderer shows a "logger" field as "[name]" after the event: a message with
    # no logger, or a null one, must not become "[null]" or "[None]".
    for line, data in zip(plain[:2], ("no logger", "null logger")):
        assert f'server log message             data="{data}" server=scripted_server' in line
        assert "[null]" not in line and "[None]" not in line
    assert "server log message             [db] data=named" in plain[2]


def test_probe_options_for_client_features_are_checked_before_anything_starts() -> None:
    from click.testing import CliRunner

    from mcpl_host.cli import main

    runner = CliRunner()
    bad = runner.invoke(main, ["probe", "--elicit-reply", "s3cr3t-not-json", "--", "true"])
    assert (
        bad.exit_code == 2 and "--elicit-reply must be a JSON object, accept, decline or cancel" in bad.output
    )
    assert "s3cr3t-not-json" not in bad.output.split("Error:", 1)[1]  # the reply is never repeated
    ask = runner.invoke(main, ["probe", "--ask", "--", "true"], input="")
    assert ask.exit_code == 2 and "--ask needs a terminal on stdin" in ask.output
    root = runner.invoke(main, ["probe", "--root", "https://example.com/x", "--", "true"])
    assert root.exit_code == 2 and "file:// URI" in root.output
