"""A loopback HTTP origin serving bulk-reference payloads (MCPL §19.7) for the tests: what
it serves per case id (``/case/<id>/...``), what it saw (requests and their headers, how much
of a stream went out before the client went away). Stdlib only, one thread per request."""

from __future__ import annotations

import base64
import gzip
import ssl
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Origin:
    """One loopback HTTP origin: what it serves per case, what it saw."""

    def __init__(
        self,
        cases: dict[str, dict[str, Any]],
        redirect_to: Origin | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.cases = cases
        self.redirect_to = redirect_to
        self.requests: dict[str, list[dict[str, str]]] = {}
        self.stream_sent: dict[str, int] = {}
        self.stream_done: dict[str, threading.Event] = {}
        self.lock = threading.Lock()
        origin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                origin.serve(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        scheme = "https" if tls is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def reset(self, case_id: str) -> None:
        """Forget what this case did (the origins serve both backends' runs)."""
        with self.lock:
            self.requests.pop(case_id, None)
            self.stream_sent.pop(case_id, None)
            self.stream_done.pop(case_id, None)

    def count(self, case_id: str) -> int:
        with self.lock:
            return len(self.requests.get(case_id, []))

    def serve(self, handler: BaseHTTPRequestHandler) -> None:
        parts = handler.path.split("/")
        case_id = urllib.parse.unquote(parts[2]) if len(parts) > 3 and parts[1] == "case" else ""
        with self.lock:
            self.requests.setdefault(case_id, []).append(dict(handler.headers.items()))
        case = self.cases.get(case_id)
        if case is None:
            handler.send_error(404)
            return
        response = case.get("response", {})
        if response.get("redirect") and self.redirect_to is not None:
            handler.send_response(302)
            handler.send_header("Location", self.redirect_to.url + handler.path)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        if "stream" in response:
            self._stream(handler, case_id, response["stream"])
            return
        body = base64.b64decode(response.get("bodyBase64", "UklGRjAwMDBXQVZFcGF5bG9hZA=="))
        handler.send_response(200)
        if response.get("contentType"):
            handler.send_header("Content-Type", response["contentType"])
        if response.get("gzip"):
            body = gzip.compress(body)
            handler.send_header("Content-Encoding", "gzip")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def _stream(self, handler: BaseHTTPRequestHandler, case_id: str, stream: dict[str, int]) -> None:
        done = self.stream_done.setdefault(case_id, threading.Event())
        sent = 0
        try:
            handler.send_response(200)
            handler.end_headers()
            for _ in range(stream["chunks"]):
                handler.wfile.write(b"x" * stream["chunkBytes"])
                handler.wfile.flush()
                sent += 1
                time.sleep(stream["intervalMs"] / 1000)  # the fixture's pace, not a synchronisation
        except OSError:
            pass  # the client went away: the transfer was aborted
        finally:
            self.stream_sent[case_id] = sent
            done.set()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def expand(value: Any, origin: str, case_id: str) -> Any:
    """``$ORIGIN``, ``$CASE`` and ``{"$repeat", "count"}`` expanded (the vector file's rule)."""
    if isinstance(value, str):
        return value.replace("$ORIGIN", origin).replace("$CASE", urllib.parse.quote(case_id, safe=""))
    if isinstance(value, list):
        return [expand(item, origin, case_id) for item in value]
    if isinstance(value, dict):
        if set(value) == {"$repeat", "count"}:
            return value["$repeat"] * value["count"]
        return {key: expand(item, origin, case_id) for key, item in value.items()}
    return value
