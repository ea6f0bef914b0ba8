"""A hostile Streamable HTTP server (MCP 2025-11-25 "Transports") on loopback, written here
with the standard library so that every byte is the test's: what the host says when the
answer to a request POST cannot come (mcpl_host/transports/http.py ``_read_answer``).
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from mcpl_host import RequestTimeout, ServerConfig, connect

pytestmark = pytest.mark.anyio

INIT = {
    "protocolVersion": "2025-06-18",
    "capabilities": {"tools": {}},
    "serverInfo": {"name": "h", "version": "1"},
}


class _EmptyAnswers(http.server.BaseHTTPRequestHandler):
    """Answers ``initialize`` properly and every other request with 200, application/json
    and an empty body (Content-Length: 0): a POST whose answer can never arrive."""

    protocol_version = "HTTP/1.1"

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        message: Any = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        if "id" not in message:
            self._send(202)
        elif message.get("method") == "initialize":
            answer = {"jsonrpc": "2.0", "id": message["id"], "result": INIT}
            self._send(200, json.dumps(answer).encode(), {"Mcp-Session-Id": "s1"})
        elif message.get("method") == "server/discover":
            answer = {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "no"}}
            self._send(200, json.dumps(answer).encode())
        else:
            self._send(200)

    def do_GET(self) -> None:
        self._send(405)

    def do_DELETE(self) -> None:
        self._send(200)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def empty_answers_url() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _EmptyAnswers)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/mcp"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


async def test_an_empty_json_answer_to_a_request_is_said_not_timed_out(empty_answers_url: str) -> None:
    with anyio.fail_after(30):
        async with connect(ServerConfig(url=empty_answers_url)) as conn:
            with pytest.raises(Exception) as caught:
                await conn.mcp.call_tool("t", {}, timeout=5)
    # The POST's body is complete and holds no answer (the transport section requires one
    # JSON object): the host knows at once; a timeout blames the wrong thing.
    assert not isinstance(caught.value, RequestTimeout), str(caught.value)
    assert "empty" in str(caught.value) or "no answer" in str(caught.value)
