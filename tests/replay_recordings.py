"""Hand-written recordings in the ``mcpl-host-recording`` format (version 1), as test data
for the replay (tests/test_replay_rules.py, tests/test_replay_cli.py)."""

from __future__ import annotations

from typing import Any

import orjson

HEADER: dict[str, Any] = {
    "format": "mcpl-host-recording",
    "version": 1,
    "started": "2026-12-03T13:00:00Z",
    "host": {"name": "mcpl-host", "version": "0.1.0"},
}


class Book:
    """Builds a recording entry by entry: ``sent``/``received`` messages of one server."""

    def __init__(self, server: str = "demo") -> None:
        self.server = server
        self.entries: list[dict[str, Any]] = []
        self.connection = 1

    def _add(self, kind: str, **fields: Any) -> Book:
        seq = len(self.entries) + 1
        entry = {"seq": seq, "t": seq * 0.01, "server": fields.pop("server", self.server),
                 "connection": fields.pop("connection", self.connection), "kind": kind, **fields}  # fmt: skip
        self.entries.append(entry)
        return self

    def sent(self, message: dict[str, Any], **fields: Any) -> Book:
        return self._add("sent", transport="stdio", message=message, **fields)

    def received(self, message: dict[str, Any], **fields: Any) -> Book:
        return self._add("received", transport="stdio", message=message, **fields)

    def lifecycle(self, event: str, **fields: Any) -> Book:
        return self._add("lifecycle", event=event, **fields)

    def request(self, id: Any, method: str, params: Any = None, result: Any = None, **fields: Any) -> Book:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            message["params"] = params
        self.sent(message, **fields)
        if result is not None:
            self.received({"jsonrpc": "2.0", "id": id, "result": result}, **fields)
        return self

    def notify(self, method: str, params: Any = None, *, received: bool = False) -> Book:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        return self.received(message) if received else self.sent(message)

    def lines(self) -> list[bytes]:
        return [orjson.dumps(HEADER), *(orjson.dumps(entry) for entry in self.entries)]

    def text(self) -> bytes:
        return b"\n".join(self.lines()) + b"\n"


INIT_RESULT: dict[str, Any] = {
    "protocolVersion": "2025-11-25",
    "capabilities": {"tools": {}},
    "serverInfo": {"name": "recorded-echo", "version": "1.0"},
}
ECHO_TOOL: dict[str, Any] = {
    "name": "echo",
    "description": "echo the text",
    "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
}


def echo_session(book: Book | None = None) -> Book:
    """A plain MCP server with one tool, ``echo``, called twice with "hi" and once with "yo"
    (the second "hi" answered differently, as a counter would), and a log notification
    after the first call."""
    book = book or Book()
    book.request(0, "server/discover", {"_meta": {}})
    book.received({"jsonrpc": "2.0", "id": 0, "error": {"code": -32601, "message": "Method not found"}})
    book.request(1, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                   "clientInfo": {"name": "mcpl-host", "version": "0.1.0"}}, INIT_RESULT)  # fmt: skip
    book.notify("notifications/initialized")
    book.request(2, "tools/list", {}, {"tools": [ECHO_TOOL]})
    call = {"name": "echo", "arguments": {"text": "hi"}}
    book.request(
        3,
        "tools/call",
        {**call, "_meta": {"progressToken": 3}},
        {"content": [{"type": "text", "text": "hi 1"}]},
    )
    book.notify("notifications/message", {"level": "info", "data": "called"}, received=True)
    book.request(4, "tools/call", call, {"content": [{"type": "text", "text": "hi 2"}]})
    book.request(5, "tools/call", {"name": "echo", "arguments": {"text": "yo"}},
                 {"content": [{"type": "text", "text": "yo 1"}]})  # fmt: skip
    # A server request during a call: the answer waits for the host's answer to it.
    book.request(6, "tools/call", {"name": "ask", "arguments": {}})
    book.received({"jsonrpc": "2.0", "id": "s1", "method": "roots/list"})
    book.sent({"jsonrpc": "2.0", "id": "s1", "result": {"roots": []}})
    book.received({"jsonrpc": "2.0", "id": 6, "result": {"content": [{"type": "text", "text": "asked"}]}})
    return book
