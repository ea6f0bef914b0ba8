"""What ``import mcpl_host`` loads: the connection layer, not the WebSocket and HTTP stacks,
structlog (with its console renderer, rich and pygments) or the host layer, which load
when first used. Each check runs in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HEAVY = ["structlog", "rich", "pygments", "httpx", "wsproto", "h11", "ssl", "jsonschema"]
LATER = [
    "mcpl_host.host",
    "mcpl_host.config",
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


def test_importing_the_package_loads_no_heavy_stack() -> None:
    result = run(
        f"import json, sys, mcpl_host\nprint(json.dumps([m for m in {HEAVY + LATER!r} if m in sys.modules]))"
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


def test_a_websocket_server_loads_its_stack_when_built() -> None:
    result = run(
        "import json, sys, mcpl_host\n"
        "before = 'wsproto' in sys.modules\n"
        "mcpl_host.HostedServer(mcpl_host.ServerConfig(url='ws://127.0.0.1:9/'))\n"
        "print(json.dumps([before, 'wsproto' in sys.modules]))"
    )
    assert result["out"] == [False, True]


def test_a_stdio_connection_loads_no_module_that_only_a_later_feature_needs() -> None:
    # JSON Patch (the first state patch), process workers (the first bounded schema check),
    # difflib (a refused grant pattern's hint) and ctypes (the subreaper) load when used.
    server = Path(__file__).resolve().parent.parent / "fixtures" / "mcpl_server.py"
    later = ["jsonpatch", "anyio.to_process", "difflib", "ctypes", "secrets"]
    result = run(
        "import json, sys, anyio, mcpl_host\n"
        "async def main():\n"
        f"    config = mcpl_host.ServerConfig(command=sys.executable, args=({str(server)!r},))\n"
        "    async with mcpl_host.connect(config) as conn:\n"
        "        await conn.ping()\n"
        "anyio.run(main)\n"
        f"print(json.dumps([m for m in {later!r} if m in sys.modules]))"
    )
    assert result["out"] == []


def test_a_stdio_connection_loads_neither_the_http_stack_nor_structlog_for_lines_not_shown() -> None:
    # The handshake logs at debug level and tells stdio from HTTP transports: neither may
    # load structlog (its fallback shows warnings only) or httpx (memory per process).
    server = Path(__file__).resolve().parent.parent / "fixtures" / "mcpl_server.py"
    result = run(
        "import json, sys, anyio, mcpl_host\n"
        "async def main():\n"
        f"    config = mcpl_host.ServerConfig(command=sys.executable, args=({str(server)!r},))\n"
        "    async with mcpl_host.connect(config) as conn:\n"
        "        await conn.ping()\n"
        "anyio.run(main)\n"
        "print(json.dumps([m for m in ('httpx', 'mcpl_host.transports.http', 'structlog') if m in sys.modules]))"
    )
    assert result["out"] == []


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
