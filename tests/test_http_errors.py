"""HTTP failures say which step failed (issue 23): connect (refused, DNS, timeout), TLS, an
HTTP status with its body shown once, bounded and stripped of markup, and JSON in an error
shown once, unescaped. The classifier and the body's text are pure (plain calls); the
sentences are checked through real loopback HTTP servers (``fixtures/http_bridge.py``) and
the real CLI.
"""

from __future__ import annotations

import json
import socket
import ssl
from pathlib import Path

import httpx
import pytest

from mcpl_host import Limits, ServerConfig, connect
from mcpl_host.jsonrpc.errors import InitializeError
from mcpl_host.transports.http_failure import (
    BODY_SAID,
    body_text,
    classify_unreachable,
    fallback_sentence,
)

from . import forkserver
from .test_cli import CLI
from .test_http_transport import bridge

FAST = Limits(close_grace_seconds=1.0, terminate_grace_seconds=1.0, handshake_timeout_seconds=15.0)


def _raised(exc: BaseException, cause: BaseException) -> BaseException:
    """``exc`` raised from ``cause`` (its ``__cause__`` set, as httpx raises them)."""
    try:
        raise exc from cause
    except BaseException as caught:
        return caught


# -- pure ------------------------------------------------------------------------------------


def test_each_failure_below_http_names_its_step() -> None:
    refused = _raised(
        httpx.ConnectError("All connection attempts failed"),
        ConnectionRefusedError(111, "Connection refused"),
    )
    assert (classify_unreachable(refused).step, classify_unreachable(refused).kind) == ("connect", "refused")
    dns = _raised(
        httpx.ConnectError("[Errno -2] Name or service not known"),
        socket.gaierror(-2, "Name or service not known"),
    )
    assert classify_unreachable(dns).kind == "dns"
    assert classify_unreachable(httpx.ConnectTimeout("timed out")).kind == "timeout"
    tls = _raised(
        httpx.ConnectError("certificate verify failed"),
        ssl.SSLCertVerificationError("certificate verify failed"),
    )
    assert classify_unreachable(tls).step == "tls"
    reset = _raised(httpx.ReadError("reset"), ConnectionResetError(104, "Connection reset by peer"))
    assert classify_unreachable(reset).step == "exchange"


def test_an_html_body_is_shown_as_its_text_and_bounded() -> None:
    page = (
        "<!DOCTYPE html><html><head><title>404 Not Found</title><style>h1{color:red}</style>"
        "<script>var x = '<b>';</script></head><body><!-- c --><h1>Not Found</h1>"
        "<p>Gone &amp; away.</p></body></html>"
    )
    assert body_text(page, "text/html", max_chars=200) == "404 Not Found Not Found Gone & away."
    assert body_text('  {"a": "b"}\n', "application/json", max_chars=200) == '{"a": "b"}'
    assert body_text("x" * 500, None, max_chars=100) == "x" * 100 + "…"
    assert body_text("<p></p>", "text/html", max_chars=100) == ""
    # Unclosed, the element or comment runs to the end; a tag name that only starts so is a tag.
    assert body_text("a<script>x</scrip", "text/html", max_chars=100) == "a"
    assert body_text("a<!-- x", "text/html", max_chars=100) == "a"
    assert body_text("<scripts>b</scripts>", "text/html", max_chars=100) == "b"


def test_a_fallback_shows_the_same_body_once() -> None:
    first = f"the server answered A with HTTP 404{BODY_SAID}Not Found"
    second = f"the server answered B with HTTP 404{BODY_SAID}Not Found"
    both = fallback_sentence(first, second)
    assert both.count("Not Found") == 1 and "answered B with HTTP 404" in both
    other = fallback_sentence(first, f"the server answered B with HTTP 500{BODY_SAID}boom")
    assert "Not Found" in other and "boom" in other


# -- through real servers --------------------------------------------------------------------


async def _cli_error(*args: str) -> str:
    done = await forkserver.run_async([*CLI, "probe", "--json", *args])
    assert done.returncode == 1, done.stderr.decode()
    error = json.loads(done.stdout)["error"]
    message = error["message"]
    assert isinstance(message, str)
    return message


@pytest.mark.anyio
async def test_a_closed_port_says_the_connection_was_refused_not_that_the_server_went_away() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    message = await _cli_error("--url", f"http://127.0.0.1:{port}/mcp")
    assert message.startswith(
        f"could not connect to http://127.0.0.1:{port}/mcp for the POST of server/discover"
    )
    assert "connection refused" in message
    assert "went away" not in message


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["streamable-http", "http"])
async def test_a_404_with_an_html_page_shows_its_text_once_and_bounded(
    tmp_path: Path, transport: str
) -> None:
    async with bridge(tmp_path, "--status", "404", "--status-body", "html") as server:
        conn = connect(ServerConfig(url=server.url("/nope"), transport=transport, limits=FAST))
        with pytest.raises(InitializeError) as info:
            async with conn:
                pass
    message = str(info.value)
    assert "answered the POST of initialize with HTTP 404 (not found)" in message
    assert "went away" not in message
    assert "<" not in message and "dataLayer" not in message and "font-family" not in message
    assert message.count("The requested URL was not found on this server & nowhere else.") == 1
    assert len(message) < 600


@pytest.mark.anyio
async def test_json_in_a_stateless_error_is_shown_once_unescaped(tmp_path: Path) -> None:
    async with bridge(tmp_path, "--status", "400", "--status-body", "json") as server:
        message = await _cli_error("--url", server.url(), "--protocol", "stateless")
    assert "HTTP 400 (bad request)" in message
    assert '"message": "Bad \\"thing\\" here"' in message  # the body as sent, escaped nowhere
    assert "\\\\" not in message


def test_check_of_a_closed_port_says_the_connection_was_refused_in_every_check() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    done = forkserver.run(
        [*CLI, "check", "--url", f"http://127.0.0.1:{port}/mcp", "--only", "init.*"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert (
        f"could not connect to http://127.0.0.1:{port}/mcp for the POST of initialize: connection refused"
        in done.stdout
    )
    assert "went away" not in done.stdout
