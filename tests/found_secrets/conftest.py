"""The echo server's bridges, one per module that asks for it: ``fixtures/echo_secret_server.py``
(what it repeats: ``test_found_secrets.py``) behind ``http_bridge.py`` (Streamable HTTP, HTTP+SSE)
and ``ws_bridge.py`` (WebSocket), which hand it the headers of the request that started it.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import pytest

from ..conftest import FIXTURES
from ..wire import bridge_url

PY = sys.executable
ECHO = str(FIXTURES / "echo_secret_server.py")


@contextlib.contextmanager
def echo_bridge(program: str, *options: str, shape: str = "plain", scheme: str = "http") -> Iterator[str]:
    """A bridge fixture serving the echo server (a new one per session); its URL. It exits at
    the end of its stdin, its children stopped."""
    command = [PY, str(FIXTURES / program), *options, "--", PY, ECHO, "--shape", shape]
    with bridge_url(command, scheme) as url:
        yield url


@pytest.fixture(scope="module")
def http_echo() -> Iterator[str]:
    with echo_bridge("http_bridge.py") as url:
        yield f"{url}mcp"


@pytest.fixture(scope="module")
def http_echo_escaped() -> Iterator[str]:
    with echo_bridge("http_bridge.py", shape="escaped") as url:
        yield f"{url}mcp"


@pytest.fixture(scope="module")
def http_echo_split() -> Iterator[str]:
    with echo_bridge("http_bridge.py", shape="split") as url:
        yield f"{url}mcp"


@pytest.fixture(scope="module")
def sse_echo() -> Iterator[str]:
    with echo_bridge("http_bridge.py", "--legacy") as url:
        yield f"{url}sse"


@pytest.fixture(scope="module")
def http_refusing() -> Iterator[str]:
    with echo_bridge("http_bridge.py", "--refuse-echo") as url:
        yield f"{url}mcp"


@pytest.fixture(scope="module")
def ws_echo() -> Iterator[str]:
    with echo_bridge("ws_bridge.py", scheme="ws") as url:
        yield url


@pytest.fixture(scope="module")
def ws_refusing() -> Iterator[str]:
    with echo_bridge("ws_bridge.py", "--refuse-echo", scheme="ws") as url:
        yield url
