"""What ``import mcpl_host`` loads (none of its modules: every public name loads on first
use), and what a connection's names load: the connection layer, not the WebSocket and HTTP
stacks, structlog (with its console renderer, rich and pygments) or the host layer, which
load when first used. Each check runs in a fresh interpreter.

How the package's modules import each other, read from the source (``ast``): no import
circle, and no module imports one of a higher layer (``LAYERS``)."""

from __future__ import annotations

import ast
import fnmatch
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "mcpl_host"

#: The layers, lowest first (docs/architecture.md, "Layers"): a module may import its own
#: layer and those below, never one above. Names are relative to ``mcpl_host`` ("" is the
#: package itself); a pattern ending in ``.*`` takes a package's modules.
LAYERS: list[tuple[str, list[str]]] = [
    # JSON-RPC 2.0 and what every module uses: bounds, log safety, secrets, JSON measures.
    (
        "jsonrpc",
        [
            "jsonrpc",
            "jsonrpc.*",
            "_keywords",
            "limits",
            "logging",
            "secrets",
            "json_size",
            "_tasks",
            "suggest",
            "telemetry",
            "recording",
        ],
    ),
    # The MCP revisions' pure rules the transports follow too.
    (
        "mcp rules",
        [
            "handshake",
            "stateless",
            "param_headers",
            "mcp_tasks",
            "listen",
            "caching",
            "tool_classes",
            "mcp_records",
        ],
    ),
    ("transports", ["transports", "transports.*"]),
    # OAuth for the HTTP transports (they hold it through HTTPParameters.auth, a Protocol).
    ("auth", ["auth", "auth.*"]),
    # One transport without MCPL: the connection shell and the MCP client calls.
    (
        "core",
        [
            "link",
            "_asyncio_waiter",
            "_trio_waiter",
            "timer",
            "inbound",
            "connection",
            "opening",
            "client_features",
            "client_requests",
            "mcp_methods",
            "task_polling",
            "output_schema",
            "schema_check",
            "coalesce",
        ],
    ),
    ("mcpl (pure)", ["mcpl", "mcpl.*"]),
    # The application's side of a connection: what it implements, what it watches.
    ("handlers", ["handlers", "observe", "events"]),
    ("services", ["services", "services.*", "stall_watch"]),
    ("server connection", ["server_connection"]),
    (
        "hosted",
        ["supervisor_policy", "config", "config_file", "editor_configs", "transport_factory", "hosted"],
    ),
    ("host", ["supervisor", "record", "host"]),
    (
        "applications",
        [
            "",
            "cli",
            "cli_call",
            "cli_list",
            "tables",
            "cli_text",
            "cli_target",
            "cli_config",
            "cli_task",
            "task_store",
            "cli_auth",
            "report",
            "probing",
            "progress",
            "probe_features",
            "conformance_client",
            "coerce",
            "signals",
            "check",
            "check.*",
            "shell",
            "shell.*",
            "replay",
            "replay.*",
            "inspector",
            "inspector.*",
        ],
    ),
]

HEAVY = [
    "structlog",
    "rich",
    "pygments",
    "httpx",
    "wsproto",
    "h11",
    "ssl",
    "jsonschema",
    # the inspector's extra (mcpl-host[inspect]): only when an inspector starts
    "starlette",
    "hypercorn",
    "authlib",
    "keyring",
]
LATER = [
    "mcpl_host.config_file",
    "mcpl_host.host",
    "mcpl_host.signals",
    "mcpl_host.supervisor",
    "mcpl_host.transports.websocket",
    "mcpl_host.transports.http",
    "mcpl_host.transports.http_sse",
]


def run(code: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    return {"out": json.loads(lines[-1]), "stderr": done.stderr}


def test_what_a_connection_needs_loads_no_heavy_stack() -> None:
    result = run(
        "import json, sys\n"
        "from mcpl_host import GrantPolicy, ServerConfig, ServerConnection, connect\n"
        f"print(json.dumps([m for m in {HEAVY + LATER!r} if m in sys.modules]))"
    )
    assert result["out"] == []


def test_importing_the_package_loads_none_of_its_modules() -> None:
    # Every public name is imported on first use: a submodule (mcpl_host.limits, the CLI)
    # costs only what it imports itself.
    result = run(
        "import json, sys, mcpl_host\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('mcpl_host.'))))"
    )
    assert result["out"] == []


def test_every_public_name_resolves_and_loads_its_layer_on_first_use() -> None:
    result = run(
        "import json, sys, mcpl_host\n"
        "missing = [n for n in mcpl_host.__all__ if getattr(mcpl_host, n, None) is None]\n"
        "from mcpl_host import Host, load_config\n"
        "print(json.dumps({'missing': missing, 'host': 'mcpl_host.host' in sys.modules,\n"
        "  'dir': sorted(set(mcpl_host.__all__) - set(dir(mcpl_host)))}))"
    )
    assert result["out"] == {"missing": [], "host": True, "dir": []}


def test_every_public_name_is_its_modules_even_after_its_modules_are_imported() -> None:
    # Importing a submodule sets it as the package's attribute of its name: a submodule
    # named as a public name (a connect.py beside connect()) would replace that name.
    result = run(
        "import importlib, json, mcpl_host\n"
        "for module in sorted(set(mcpl_host._LAZY.values())):\n"
        "    importlib.import_module(module)\n"
        "print(json.dumps([n for n, m in mcpl_host._LAZY.items()\n"
        "    if getattr(mcpl_host, n) is not getattr(importlib.import_module(m), n)]))"
    )
    assert result["out"] == []


def test_a_websocket_server_loads_its_stack_when_built() -> None:
    result = run(
        "import json, sys, mcpl_host\n"
        "before = 'wsproto' in sys.modules\n"
        "mcpl_host.HostedServer(mcpl_host.ServerConfig(url='ws://127.0.0.1:9/'))\n"
        "print(json.dumps([before, 'wsproto' in sys.modules]))"
    )
    assert result["out"] == [False, True]


def test_a_url_server_loads_its_parameters_when_its_config_is_made() -> None:
    # A stdio server's config loads no URL parameters; a URL server's config checks its
    # parameters as it is made (an unusable URL raises there), and describes it with the URL
    # as shown, its secrets hidden.
    result = run(
        "import json, sys, mcpl_host\n"
        "mcpl_host.ServerConfig(command=sys.executable).parameters()\n"
        "before = [m in sys.modules for m in ('mcpl_host.transports.ws_params', 'mcpl_host.transports.http_params')]\n"
        "ws = mcpl_host.ServerConfig(url='ws://127.0.0.1:9/?token=s3cret')\n"
        "http = mcpl_host.ServerConfig(url='http://127.0.0.1:9/mcp', token='t0ken')\n"
        "try:\n"
        "    mcpl_host.ServerConfig(url='ws://127.0.0.1:99999/')\n"
        "    refused = False\n"
        "except ValueError:\n"
        "    refused = True\n"
        "print(json.dumps({'before': before, 'kinds': [type(ws.parameters()).__name__,\n"
        "    type(http.parameters()).__name__], 'shown': [ws.describe, http.describe], 'refused': refused}))"
    )
    out = result["out"]
    assert isinstance(out, dict)
    assert out["before"] == [False, False]
    assert out["kinds"] == ["WebSocketParameters", "HTTPParameters"] and out["refused"] is True
    assert "s3cret" not in json.dumps(out["shown"]) and out["shown"][1].startswith("http://127.0.0.1:9/mcp")


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_stdio_connection_loads_no_module_that_only_a_later_feature_needs(backend: str) -> None:
    # JSON Patch (the first state patch), process workers (the first bounded schema check),
    # difflib (a refused grant pattern's hint), ctypes (the subreaper), importlib.metadata
    # (a recording's header), ada_url (an mcpl:// URI), hashlib (a manifest digest, an
    # input stream), html (an HTTP error body shown in a refusal), the event inbox (RFC-006,
    # a server given one), the events (for an observer or a recorder) and the recording
    # (a server given a Recorder), the HTTP and WebSocket parameters (a server with a URL)
    # the outbound MCPL calls (conn.hooks, conn.channels, conn.state) and the input-stream
    # lease machine (RFC-009, a server with input_streams), random (a restart's jitter) and
    # the MCP records (the first list, read, get or call), the manifest diff (the first
    # manifest change), the list caching, output-schema and parameter-header rules (the
    # stateless era's lists, a tool with an outputSchema or x-mcp-header) and jsonpointer (a
    # state patch's growth) load when used. What the backend itself loads to run a
    # process (trio: ctypes, hashlib) is not counted.
    server = Path(__file__).resolve().parent.parent / "fixtures" / "mcpl_server.py"
    later = [
        "jsonpatch",
        "anyio.to_process",
        "difflib",
        "ctypes",
        "secrets",
        "importlib.metadata",
        "ada_url",
        "hashlib",
        "html",
        "mcpl_host.services.coalescing",
        "mcpl_host.mcpl.coalescing",
        "mcpl_host.events",
        "mcpl_host.recording",
        "mcpl_host.transports.http_params",
        "mcpl_host.transports.ws_params",
        "mcpl_host.transports.url_checks",
        "mcpl_host.transports.http_failure",
        "mcpl_host.services.hooks",
        "mcpl_host.mcpl.injections",
        "mcpl_host.services.channel_calls",
        "mcpl_host.services.state_calls",
        "mcpl_host.mcpl.input_streams",
        "mcpl_host.services.input_streams",
        "random",
        "mcpl_host.mcp_records",
        "mcpl_host.mcpl.manifest_diff",
        "mcpl_host.caching",
        "mcpl_host.output_schema",
        "mcpl_host.param_headers",
        "jsonpointer",
        "mcpl_host.config_file",
        "mcpl_host.client_requests",
    ]
    result = run(
        "import json, sys, anyio, mcpl_host\n"
        "async def bare():\n"
        "    await (await anyio.open_process([sys.executable, '-c', ''])).aclose()\n"
        f"anyio.run(bare, backend={backend!r})\n"
        "backend_loads = set(sys.modules)\n"
        "async def main():\n"
        f"    config = mcpl_host.ServerConfig(command=sys.executable, args=({str(server)!r},))\n"
        "    async with mcpl_host.connect(config) as conn:\n"
        "        await conn.mcp.ping()\n"
        f"anyio.run(main, backend={backend!r})\n"
        f"print(json.dumps([m for m in {later!r} if m in sys.modules and m not in backend_loads]))"
    )
    assert result["out"] == []


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_stdio_connection_given_what_was_deferred_still_uses_it(backend: str) -> None:
    # The deferred features work when a connection is given them in a fresh interpreter:
    # a Recorder (recording.recording_factory, imported by the connection that has one)
    # records the connection's lines; conn.hooks, conn.channels and conn.state are made on
    # first use, once, on the connection's policy state; a server with input_streams gets
    # its lease machine, advertises input streaming and runs on the system's clocks; a
    # listing and a call give the MCP records, the ones mcp_methods re-exports.
    server = Path(__file__).resolve().parent.parent / "fixtures" / "mcpl_server.py"
    result = run(
        "import json, sys, anyio, mcpl_host\n"
        "from mcpl_host.recording import Recorder\n"
        "async def main():\n"
        f"    config = mcpl_host.ServerConfig(command=sys.executable, args=({str(server)!r},))\n"
        "    with Recorder(None) as recorder:\n"
        "        async with mcpl_host.connect(config, record=recorder) as conn:\n"
        "            await conn.mcp.ping()\n"
        "            made = [part is not None for part in (conn._hooks, conn._channels, conn._state)]\n"
        "            once = conn.hooks is conn.hooks and conn.channels is conn.channels and conn.state is conn.state\n"
        "            calls = [conn.hooks.eligible, conn.channels.publish_target('none'),\n"
        "                conn.state.store is conn.hosted.state_store]\n"
        "    streaming = mcpl_host.ServerConfig(command=sys.executable, args=config.args, input_streams=True)\n"
        "    async with mcpl_host.connect(streaming) as conn:\n"
        "        await conn.mcp.ping()\n"
        "        tools = await conn.mcp.list_tools()\n"
        "        called = await conn.mcp.call_tool('seen', {})\n"
        "        from mcpl_host import mcp_methods, mcp_records, output_schema\n"
        "        records = [type(tools[0]) is mcp_methods.Tool is mcp_records.Tool,\n"
        "            type(called) is mcp_methods.CallToolResult, called.is_error,\n"
        "            mcp_methods.OutputSchemaError is output_schema.OutputSchemaError]\n"
        "        hosted = conn.hosted\n"
        "        streams = [type(conn.input_streams).__name__, type(hosted.input_clock).__name__,\n"
        "            hosted.input_clock is hosted.input_clock,\n"
        "            hosted.advertisement()['channels'].get('inputStreaming')]\n"
        "    return {'recorded': recorder.entries > 0, 'made': made, 'once': once, 'calls': calls,\n"
        "        'streams': streams, 'records': records}\n"
        f"print(json.dumps(anyio.run(main, backend={backend!r})))"
    )
    assert result["out"] == {
        "recorded": True,
        "made": [False, False, False],
        "once": True,
        "calls": [False, None, True],
        "streams": ["InputStreamService", "SystemInputClock", True, True],
        "records": [True, True, False, True],
    }


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_manifest_change_loads_the_diff_and_gives_its_receipt(backend: str) -> None:
    # The manifest diff (MCPL §17.5, §17.6) is imported by the first manifest change of a
    # connection that loaded none, and the handlers get its receipt.
    server = Path(__file__).resolve().parent.parent / "fixtures" / "mcpl_server.py"
    result = run(
        "import json, sys, anyio, mcpl_host\n"
        "class Handlers(mcpl_host.HostHandlers):\n"
        "    def __init__(self):\n"
        "        self.changed, self.receipts = anyio.Event(), []\n"
        "    def on_manifest_change(self, server, receipt):\n"
        "        self.receipts.append(type(receipt).__name__)\n"
        "        self.changed.set()\n"
        "async def main():\n"
        "    handlers = Handlers()\n"
        f"    config = mcpl_host.ServerConfig(command=sys.executable, args=({str(server)!r},),\n"
        "        grant_policy=mcpl_host.GrantPolicy(grant=('pushEvents',)))\n"
        "    with anyio.fail_after(30):\n"
        "        async with mcpl_host.connect(config, handlers=handlers) as conn:\n"
        "            before = 'mcpl_host.mcpl.manifest_diff' in sys.modules\n"
        "            await conn.mcp.call_tool('change_manifest', {})\n"
        "            await handlers.changed.wait()\n"
        "    return [before, handlers.receipts]\n"
        f"print(json.dumps(anyio.run(main, backend={backend!r})))"
    )
    assert result["out"] == [False, ["ChangeReceipt"]]


def test_a_state_patch_loads_jsonpointer_and_bounds_its_growth() -> None:
    # A state patch's growth reads the members it replaces (RFC 6901, mcpl.state): the
    # first patch imports jsonpointer, and a replacement past the bound is still refused.
    result = run(
        "import json, sys\n"
        "from mcpl_host.limits import Limits\n"
        "from mcpl_host.mcpl.state import FeatureSetStateStore\n"
        "store = FeatureSetStateStore(Limits(max_state_bytes=64))\n"
        "store.apply('fs', {'checkpoint': 'a', 'data': {'x': 1}})\n"
        "before = 'jsonpointer' in sys.modules\n"
        "small = store.apply('fs', {'checkpoint': 'b', 'parent': 'a',\n"
        "    'patch': [{'op': 'replace', 'path': '/x', 'value': 2}]})\n"
        "big = store.apply('fs', {'checkpoint': 'c', 'parent': 'b',\n"
        "    'patch': [{'op': 'replace', 'path': '/x', 'value': 'y' * 100}]}, keep_reference_on_problem=False)\n"
        "print(json.dumps([before, 'jsonpointer' in sys.modules, small is None,\n"
        "    big is not None and big.reason, store.current('fs').data]))"
    )
    assert result["out"] == [False, True, True, "limit_exceeded", {"x": 2}]


def test_a_restart_tracker_jitters_with_random_imported_when_it_is_made() -> None:
    # A config's RestartPolicy alone loads no random; the first tracker (a Host's
    # supervisor) imports it and its delays are jittered within the policy's bounds.
    result = run(
        "import json, sys\n"
        "from mcpl_host.supervisor_policy import RestartPolicy, RestartTracker\n"
        "policy = RestartPolicy()\n"
        "before = 'random' in sys.modules\n"
        "tracker = RestartTracker(policy)\n"
        "tracker.record_start(0.0)\n"
        "decision = tracker.record_failure(0.1, 'exited')\n"
        "low, high = policy.delay(1, 0.0), policy.delay(1, 0.999999)\n"
        "print(json.dumps([before, 'random' in sys.modules, low <= decision.delay_seconds <= high]))"
    )
    assert result["out"] == [False, True, True]


def test_a_stdio_connection_loads_neither_the_http_stack_nor_structlog_for_lines_not_shown() -> None:
    # The handshake logs at debug level and tells stdio from HTTP transports: neither may
    # load structlog (its fallback shows warnings only) or httpx (memory per process).
    server = Path(__file__).resolve().parent.parent / "fixtures" / "mcpl_server.py"
    result = run(
        "import json, sys, anyio, mcpl_host\n"
        "async def main():\n"
        f"    config = mcpl_host.ServerConfig(command=sys.executable, args=({str(server)!r},))\n"
        "    async with mcpl_host.connect(config) as conn:\n"
        "        await conn.mcp.ping()\n"
        "anyio.run(main)\n"
        "print(json.dumps([m for m in ('httpx', 'mcpl_host.transports.http', 'structlog') if m in sys.modules]))"
    )
    assert result["out"] == []


def test_listing_the_commands_loads_what_they_use_only_when_they_run() -> None:
    # `mcpl-host --help` imports every command's module for its line of help: the shell's
    # prompt (prompt_toolkit), the checks (jsonschema) and replay's HTTP and WebSocket
    # servers (h11, wsproto) load when those commands run.
    result = run(
        "import json, sys\n"
        "from mcpl_host.cli import main\n"
        "try:\n"
        "    main(['--help'], prog_name='mcpl-host')\n"
        "except SystemExit:\n"
        "    pass\n"
        "listed = all(name in sys.modules for name in ('mcpl_host.shell.cli', 'mcpl_host.check.cli', 'mcpl_host.replay.cli', 'mcpl_host.cli_call'))\n"
        "print(json.dumps([listed, [m for m in ('prompt_toolkit', 'jsonschema', 'referencing', 'h11', 'wsproto') if m in sys.modules]]))"
    )
    assert result["out"] == [True, []]


def test_a_debug_or_info_line_before_structlog_is_loaded_is_dropped_without_loading_it() -> None:
    result = run(
        "import json, sys\n"
        "from mcpl_host.logging import get_logger\n"
        "log = get_logger('mcpl_host.test')\n"
        "log.debug('not shown', n=1)\n"
        "log.info('not shown either')\n"
        "print(json.dumps('structlog' in sys.modules))"
    )
    assert result["out"] is False
    assert "not shown" not in str(result["stderr"])


def test_a_logger_made_before_structlog_is_loaded_still_writes_its_warnings() -> None:
    result = run(
        "import json, sys\n"
        "from mcpl_host.logging import ServerValue, get_logger\n"
        "log = get_logger('mcpl_host.test', server='s')\n"
        "before = 'structlog' in sys.modules\n"
        "log.debug('not shown')\n"
        "log.warning('shown', value=ServerValue('a\\u202eb'))\n"
        "print(json.dumps([before, 'structlog' in sys.modules]))"
    )
    assert result["out"] == [False, True]
    stderr = str(result["stderr"])
    assert "not shown" not in stderr
    (line,) = [line for line in stderr.splitlines() if "shown" in line]
    assert "[warning  ]" in line and "server=s" in line and "value=a\\u202eb" in line


def module_names() -> dict[str, Path]:
    """Every module of the package by dotted name (``mcpl_host.mcpl.grants``)."""
    out: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(name: str, path: Path, modules: dict[str, Path], *, typing: bool) -> dict[str, int]:
    """The package's modules ``name`` imports, each with the line of its first import: every
    ``import`` and ``from`` at module level and inside functions and classes; those under
    ``if TYPE_CHECKING:`` only with ``typing``. The packages a module lies in, which Python
    imports first, are not counted: ``mcpl_host`` counts only where it is named."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, int] = {}

    def add(target: str, line: int) -> None:
        if target.split(".")[0] == "mcpl_host" and target != name:
            found.setdefault(target, line)

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test) and not typing:
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    add(alias.name, child.lineno)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - child.level + 1] + ([base] if base else []))
                for alias in child.names:
                    submodule = f"{base}.{alias.name}"
                    add(submodule if submodule in modules else base, child.lineno)
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return found


def import_graph(*, typing: bool) -> dict[str, dict[str, int]]:
    modules = module_names()
    return {name: imports_of(name, path, modules, typing=typing) for name, path in modules.items()}


def find_cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """One import circle as its modules in order (the first repeated at the end), or None.
    A depth-first walk without recursion; a module whose imports were all walked is done."""
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path = [start]
        stack = [iter(sorted(graph[start]))]
        while stack:
            target = next(stack[-1], None)
            if target is None:
                stack.pop()
                done.add(path.pop())
            elif target in path:
                return path[path.index(target) :] + [target]
            elif target in graph and target not in done:
                path.append(target)
                stack.append(iter(sorted(graph[target])))
    return None


def _describe(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    return (
        " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:], strict=False))
        + f" -> {cycle[-1]}"
    )


def test_no_import_circles() -> None:
    graph = import_graph(typing=False)
    assert "mcpl_host.hosted" in graph and graph["mcpl_host.connection"], "the graph was not read"
    cycle = find_cycle(graph)
    assert cycle is None, f"import circle: {_describe(cycle, graph)}"


def test_the_cycle_finder_names_a_circle() -> None:
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3, "d": 4}, "d": {}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b": 1}, "b": {}, "c": {"b": 2}}) is None


def layer_of(name: str) -> int:
    """The index in ``LAYERS`` of a module (``mcpl_host.x``); raises ``LookupError``."""
    relative = name.removeprefix("mcpl_host").removeprefix(".")
    found = [
        index
        for index, (_, patterns) in enumerate(LAYERS)
        if any(fnmatch.fnmatchcase(relative, p) for p in patterns)
    ]
    if len(found) != 1:
        raise LookupError(f"{name} is in {len(found)} layers; place it in exactly one of LAYERS")
    return found[0]


def test_every_module_is_in_one_layer() -> None:
    for name in module_names():
        layer_of(name)


def test_no_module_imports_a_higher_layer() -> None:
    # Imports for type annotations only count too: they are a dependency all the same.
    upward = [
        f"{name} ({LAYERS[layer_of(name)][0]}) imports {target} ({LAYERS[layer_of(target)][0]}) at line {line}"
        for name, targets in import_graph(typing=True).items()
        for target, line in targets.items()
        if layer_of(target) > layer_of(name)
    ]
    assert upward == []


def test_the_names_moved_to_input_methods_are_still_the_lease_modules() -> None:
    # mcpl.input_methods was split off mcpl.input_streams: what the latter defined is still
    # importable from it, the same objects.
    from mcpl_host.mcpl import input_methods, input_streams  # noqa: PLC0415

    for name in ("INPUT_METHODS", "INPUT_STREAM_PATHS", "INPUT_STREAM_REJECTED", "metadata_only", "rejected"):
        assert getattr(input_streams, name) is getattr(input_methods, name)


def test_client_features_still_gives_every_public_name_it_defined_before_the_split() -> None:
    """Sampling's and elicitation's result checks were public names of ``client_features``
    before they moved to ``client_requests``: still importable from there."""
    result = run(
        "from mcpl_host.client_features import elicitation_result_problems, sampling_result_problems\n"
        "from mcpl_host.client_requests import elicitation_result_problems as e, sampling_result_problems as s\n"
        "assert (elicitation_result_problems, sampling_result_problems) == (e, s)\n"
        "print('true')\n"
    )
    assert result["out"] is True
