"""The transport interface a ``ServerConnection`` drives.

Rules: a transport moves complete lines. ``send()`` takes one or more whole JSON-RPC lines
(each ending in ``\\n``); ``receive()`` returns the next line read (``bytes`` without the
newline) or a ``LineTooLong`` marker, in order. A transport is opened by entering it as an
async context manager (or, one that can, by ``open_in``: ``OpensInGroup``) and is closed by
``aclose()`` (idempotent, always releases its resources, bounded in time). Every anyio or
OS error is translated here, once, into ``ConnectionLost`` (the server went away) or
``ConnectionClosed`` (we closed it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

from typing_extensions import TypedDict, TypeIs

from mcpl_host._keywords import checked_keywords
from mcpl_host.jsonrpc.framing import ReadItem
from mcpl_host.limits import Limits
from mcpl_host.logging import get_logger
from mcpl_host.secrets import Redactor

if TYPE_CHECKING:
    import anyio.abc

__all__ = [
    "CarriesStateless",
    "HasSession",
    "OpensInGroup",
    "ReceivesNow",
    "SendsNow",
    "StartsServer",
    "Transport",
    "TransportArgs",
    "TransportFactory",
    "TransportOptions",
    "has_session",
    "may_carry_stateless",
    "opens_in_group",
    "starts_server",
    "transport_options",
]


@runtime_checkable
class Transport(Protocol):
    """One live link to a server: a child's stdio pipes or a WebSocket."""

    async def send(self, data: bytes) -> None:
        """Write ``data`` (whole lines). Raises ``ConnectionLost`` or ``ConnectionClosed``."""
        ...

    async def receive(self) -> ReadItem:
        """Next line or ``LineTooLong``. Raises ``ConnectionLost`` at end of stream (with the
        exit status and stderr tail where the transport has them) or ``ConnectionClosed``."""
        ...

    async def aclose(self) -> None:
        """Close the link and release everything it holds; idempotent; bounded in time."""
        ...

    @property
    def stderr_tail(self) -> Sequence[str]:
        """The server's last stderr lines, redacted (empty for transports without stderr)."""
        ...

    def describe(self) -> str:
        """A short description for logs and reprs (no secrets)."""
        ...

    def negotiated(self, protocol_version: str) -> None:
        """The handshake agreed on ``protocol_version`` (called once, in the read loop, before
        ``notifications/initialized`` is queued). HTTP sends it as ``MCP-Protocol-Version``;
        other transports ignore it."""
        ...


@runtime_checkable
class SendsNow(Protocol):
    """A transport that can take bytes at once, with no task switch (the stdio pipe)."""

    def send_now(self, data: bytes) -> int:
        """Write what the link takes now of ``data``, without waiting; return how many bytes
        (0 to ``len(data)``). Only when no ``send()`` is in progress (the caller keeps the
        order). Never raises: an error is left for the next ``send()`` to report."""
        ...


@runtime_checkable
class ReceivesNow(Protocol):
    """A transport that may hold lines already read (the stdio pipe's reader: one read of the
    pipe gives many lines), handed over without a coroutine each."""

    def receive_now(self) -> ReadItem | None:
        """The next line already read (what ``receive()`` would return at once), or None when
        none is held or the transport is closing (``receive()`` then waits or says why).
        Never waits, never raises."""
        ...


@runtime_checkable
class StartsServer(Protocol):
    """A transport whose opening starts its server (stdio): a new transport from the same
    factory starts the server again, which is how the era probe's restart works
    (docs/protocol.md S3a). Over HTTP and WebSocket the server is not the host's to start."""

    def terminate_now(self) -> None:
        """Stop the server now, without the grace of a close: it already ended its output
        (``aclose()`` still stops and reaps it)."""
        ...


@runtime_checkable
class CarriesStateless(Protocol):
    """A transport that may carry MCP 2026-07-28, so the era probe ``server/discover`` may go
    out on it (docs/protocol.md S3a): stdio and Streamable HTTP (also the automatic HTTP
    choice, whose stateless requests take Streamable HTTP). The deprecated HTTP+SSE transport
    (2024-11-05 only) and WebSocket (no MCP revision defines it) are not."""

    @property
    def carries_stateless(self) -> bool:
        """Whether MCP 2026-07-28 may go over this transport now."""
        ...


@runtime_checkable
class HasSession(Protocol):
    """A transport whose server may name a session (Streamable HTTP's ``Mcp-Session-Id``,
    MCP 2025-11-25 "Transports", Session Management): read for telemetry
    (``mcp.session.id``)."""

    @property
    def session_id(self) -> str | None:
        """The session the server named, None when it named none (or not yet)."""
        ...


@runtime_checkable
class OpensInGroup(Protocol):
    """A transport that can run its tasks in its opener's task group rather than in one of
    its own (stdio: the stderr pump and the process watcher), so that a connection holds
    one task group, not two. Opened by ``open_in(task_group)`` instead of being entered;
    closed by ``aclose()``, after which its tasks end on their own (the group's exit waits
    for them). It can still be entered as an async context manager instead."""

    async def open_in(self, task_group: anyio.abc.TaskGroup) -> Transport:
        """Open the transport (as entering it would), its tasks started in ``task_group``,
        and return it; raises what entering raises. Once only, instead of entering."""
        ...


# The capability checks below read the one attribute that makes each capability, as
# ``isinstance`` against the runtime-checkable Protocol does, without its cost (on Python
# 3.11 each such ``isinstance`` walks the Protocol's attributes and the ABC caches: a few
# µs a check on asyncio, more under trio's scheduler, three per connection opened). A
# transport that forwards a capability (``recording._RecordedTransport``) sets the attribute
# on the instance, which ``getattr`` sees as ``isinstance`` does.


def may_carry_stateless(transport: object) -> bool:
    """Whether ``transport`` may carry MCP 2026-07-28 (``CarriesStateless``); a transport
    that does not say so may not."""
    return bool(getattr(transport, "carries_stateless", False))


def starts_server(transport: object) -> TypeIs[StartsServer]:
    """Whether ``transport``'s opening starts its server (``StartsServer``: it has
    ``terminate_now()``)."""
    return getattr(transport, "terminate_now", None) is not None


def has_session(transport: object) -> TypeIs[HasSession]:
    """Whether ``transport`` may name a session (``HasSession``: it has ``session_id``)."""
    return hasattr(transport, "session_id")


def opens_in_group(opener: object) -> TypeIs[OpensInGroup]:
    """Whether ``opener`` (what a ``TransportFactory`` returned) can open in its opener's
    task group (``OpensInGroup``: it has ``open_in()``)."""
    return getattr(opener, "open_in", None) is not None


#: Opens one transport: a callable returning an async context manager that yields it (each
#: call a new transport: a new child process, a new socket).
TransportFactory = Callable[[], AbstractAsyncContextManager[Transport]]


class _HasSecrets(Protocol):
    def secrets(self) -> Iterable[str]: ...


class TransportArgs(TypedDict, total=False):
    """The keywords every transport's constructor takes, each optional (None: the default):
    ``limits``, the bounds (default ``Limits()``); ``redactor``, applied to what the
    transport logs and reports (default: built from the parameters' ``secrets()``);
    ``logger``, a structlog logger (default: the transport's own, e.g.
    ``get_logger("mcpl_host.http")``)."""

    limits: Limits | None
    redactor: Redactor | None
    logger: Any


class TransportOptions(NamedTuple):
    """The options every transport takes, each given or defaulted (``transport_options``)."""

    limits: Limits
    redactor: Redactor
    logger: Any


def transport_options(params: _HasSecrets, args: TransportArgs, logger_name: str) -> TransportOptions:
    """The ``TransportArgs`` a transport's constructor was given, a missing or None one
    replaced by its default (``params.secrets()`` for the redactor, the structlog logger
    named ``logger_name``, e.g. ``"mcpl_host.http"``). Raises ``TypeError`` for a keyword
    ``TransportArgs`` does not declare."""
    checked_keywords(TransportArgs, args, "transport")
    redactor = args.get("redactor")
    logger = args.get("logger")
    return TransportOptions(
        args.get("limits") or Limits(),
        redactor if redactor is not None else Redactor(params.secrets()),
        logger if logger is not None else get_logger(logger_name),
    )
