"""Error codes and exception types.

Rules of this module:

- Codes are ``IntEnum`` members named after the spec that defines them (JSON-RPC 2.0 §5.1,
  MCPL Appendix A). A code is read in the context of the method that produced it: MCP's
  ``resources/read`` uses ``-32002`` for "Resource not found", MCPL uses it for "Capability
  denied" (MCPL Appendix A; docs/protocol.md R2).
- Exceptions say whose fault it was. ``LocalProtocolError``: our caller misused the API.
  ``RemoteProtocolError``: the server broke the protocol. ``RemoteError`` is an *answer*
  (the server replied with a JSON-RPC error object), not a fault. ``ConnectionClosed``: we
  closed it. ``ConnectionLost``: the server went away (exit, EOF, broken pipe).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum
from typing import Any

from mcpl_host.jsonrpc.values import JSONObject
from mcpl_host.logging import log_value


class ErrorCode(IntEnum):
    """JSON-RPC 2.0 §5.1 codes and MCPL Appendix A codes."""

    #: JSON-RPC 2.0 §5.1: invalid JSON was received.
    PARSE_ERROR = -32700
    #: JSON-RPC 2.0 §5.1: the JSON sent is not a valid Request object.
    INVALID_REQUEST = -32600
    #: JSON-RPC 2.0 §5.1: the method does not exist or is not available.
    METHOD_NOT_FOUND = -32601
    #: JSON-RPC 2.0 §5.1: invalid method parameters.
    INVALID_PARAMS = -32602
    #: JSON-RPC 2.0 §5.1: internal JSON-RPC error.
    INTERNAL_ERROR = -32603
    #: MCPL Appendix A: a message tagged with a declared feature set that is disabled.
    FEATURE_SET_NOT_ENABLED = -32001
    #: MCPL Appendix A: the method or contribution needs a path missing from the grant.
    CAPABILITY_DENIED = -32002
    #: MCPL Appendix A: ``featureSet`` names nothing the server declared.
    UNKNOWN_FEATURE_SET = -32003


class MCPLHostError(Exception):
    """Base class of every exception this library raises on purpose."""


class ProtocolError(MCPLHostError):
    """A protocol rule was broken. Abstract: raise a subclass."""

    def __init__(self, message: str) -> None:
        if type(self) is ProtocolError:
            raise TypeError("raise LocalProtocolError or RemoteProtocolError, not ProtocolError")
        super().__init__(message)


class LocalProtocolError(ProtocolError):
    """Our caller misused the API (a request before the handshake, a second answer)."""


class MessageTooLarge(LocalProtocolError):
    """A message the host was asked to send is larger than ``Limits.max_outbox_bytes``: it
    is refused at once and not sent; the connection stays up.

    ``size``: the message's bytes (its newline included); ``limit``: the bound; ``method``:
    the request or notification, or None for an answer.
    """

    def __init__(self, size: int, limit: int, method: str | None = None) -> None:
        what = f"{method!r}" if method is not None else "an answer"
        super().__init__(
            f"{what} is {size} bytes, over Limits.max_outbox_bytes = {limit} bytes; it was not sent"
        )
        self.size = size
        self.limit = limit
        self.method = method


class RemoteProtocolError(ProtocolError):
    """The server broke the protocol (for example an unsupported protocol version)."""


class RemoteError(MCPLHostError):
    """The server answered a request with a JSON-RPC error object (JSON-RPC 2.0 §5.1).

    Attributes: ``code`` (int), ``message`` (str) and ``data`` (any JSON value or None), as
    the server sent them; ``str()`` is escaped, cut and redacted.
    """

    def __init__(self, code: int, message: str, data: Any = None, *, redactor: Any = None) -> None:
        # str() is safe to log or show (escaped, cut, redacted, docs/protocol.md L1-L2); the
        # attributes keep what the server sent.
        super().__init__(f"server error {code}: {log_value(message, redactor)}")
        self.code = code
        self.message = message
        self.data = data


class ConnectionClosed(MCPLHostError):
    """The connection was closed by this host; no further requests can be made."""


class ConnectionLost(MCPLHostError):
    """The server went away: its process exited, its stdout ended, or a write failed.

    Attributes: ``exit_status`` (int or None; negative for a signal, as in
    ``subprocess``), ``stderr_tail`` (the server's last stderr lines, redacted), ``step``
    (an HTTP transport's failure that is no going away: ``connect``, ``tls``, ``exchange``
    or ``http`` (a status), ``transports.http_failure``; None otherwise). With a ``step``
    the message already says what failed and where.
    """

    def __init__(
        self,
        message: str,
        *,
        exit_status: int | None = None,
        stderr_tail: Sequence[str] = (),
        step: str | None = None,
    ) -> None:
        super().__init__(message)
        self.exit_status = exit_status
        self.stderr_tail = list(stderr_tail)
        self.step = step


class RequestEnded(MCPLHostError):
    """The server ended a long-lived request of ours with ``notifications/cancelled`` (MCP
    2026-07-28 "Cancellation": a server ends a ``subscriptions/listen`` stream over stdio
    so). ``method``: the request's method."""

    def __init__(self, method: str) -> None:
        super().__init__(f"the server ended {method!r} (notifications/cancelled)")
        self.method = method


def describe_seconds(seconds: float) -> str:
    """``"1 second"``, ``"2.5 seconds"``: a duration for an error message."""
    return f"{seconds:g} second" + ("" if seconds == 1 else "s")


class RequestTimeout(MCPLHostError, TimeoutError):
    """A request got no answer within its timeout (seconds), or, when progress notifications
    kept extending that timeout, within ``total`` seconds in all (``total`` None otherwise).

    ``notifications/cancelled`` was sent for it (never for ``initialize``) and a late answer
    is dropped as an orphan (docs/protocol.md R5).
    """

    def __init__(self, method: str, timeout: float, *, total: float | None = None) -> None:
        if total is None:
            message = f"{method!r} got no answer within {describe_seconds(timeout)}"
        else:
            message = (
                f"{method!r} got no answer within {describe_seconds(total)} in all"
                f" (its progress kept extending its {describe_seconds(timeout)} timeout)"
            )
        super().__init__(message)
        self.method = method
        self.timeout = timeout
        self.total = total


class UnreadableAnswer(MCPLHostError):
    """The server answered a request with a line the host cannot read: longer than
    ``Limits.max_line_bytes``, JSON nested beyond ``Limits.max_json_depth`` (or deeper
    than 1024 levels in a line over ``Limits.max_deep_json_bytes``), or a line that cannot
    be parsed (not UTF-8, not JSON after the id, an integer of more digits than the
    interpreter converts). The request fails at once (its id was read from the line),
    instead of waiting its timeout.

    ``method``: the request's method; ``reason``: what was over which bound (sizes in
    bytes), never the line's content.
    """

    def __init__(self, method: str, reason: str) -> None:
        super().__init__(f"the answer to {method!r} could not be read: {reason}")
        self.method = method
        self.reason = reason


class InitializeError(MCPLHostError):
    """The handshake failed (MCP 2025-11-25, "Lifecycle"; docs/protocol.md H1-H6).

    Raised when the server answers ``initialize`` with an error (``code``, ``message`` and
    ``data`` set from it), names a protocol version we do not implement, exits or closes
    before answering (``exit_status`` and ``stderr_tail`` set), or does not answer in time.
    """

    def __init__(
        self,
        message: str,
        *,
        code: int | None = None,
        data: object = None,
        exit_status: int | None = None,
        stderr_tail: Sequence[str] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.data = data
        self.exit_status = exit_status
        self.stderr_tail = list(stderr_tail)


class MCPLRequired(InitializeError):
    """A server dialled by an ``mcpl://`` URI answered ``initialize`` without
    ``experimental.mcpl``, and the operator did not ask for the MCP-only fallback (MCPL
    §18.5: only the handshake establishes MCPL; ``ServerConfig.mcp_only_fallback``)."""


class HandlerError(MCPLHostError):
    """Raise from a handler to answer the server's request with this JSON-RPC error.

    ``code`` (int), ``message`` (str) and ``data`` (JSON value or None) go on the wire as
    given (JSON-RPC 2.0 §5.1). Any other exception from a handler is answered with
    ``-32603 Internal error`` and no exception text (docs/protocol.md R3).
    """

    def __init__(self, code: int, message: str, data: object = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = int(code)
        self.message = message
        self.data = data

    def to_error(self) -> JSONObject:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


class MethodNotFound(HandlerError):
    """Raise from a handler for a method it does not serve (``-32601``, JSON-RPC 2.0 §5.1)."""

    def __init__(self, method: str) -> None:
        super().__init__(ErrorCode.METHOD_NOT_FOUND, f"Method not found: {method}")
