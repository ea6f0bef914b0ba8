"""What a Streamable HTTP transport does when the server ends its session: the decisions,
pure (no I/O, no clock), for ``StreamableHTTPTransport`` (docs/protocol.md HS1-HS5).

MCP 2025-11-25 "Transports", §Streamable HTTP, session management: "The server MAY
terminate the session at any time, after which it MUST respond to requests containing that
session ID with HTTP 404 Not Found", and "When a client receives HTTP 404 in response to a
request containing an ``Mcp-Session-Id``, it MUST start a new session by sending a new
``InitializeRequest`` without a session ID attached" (the same in 2025-06-18 and 2025-03-26).

- The new session is opened by the transport with the ``initialize`` line the connection
  sent first, under an id of the host's own (``renewal_initialize``), and the
  ``notifications/initialized`` it sent; its answer is read by the transport and never
  passed on. It must name the same protocol version and the same MCPL manifest
  (``experimental.mcpl``) as the first answer (``renewal_problem``): a server that comes
  back as something else loses the transport, and the application reconnects.
- What was in flight on the ended session (``after_session_ended``): a request whose
  answer cannot change anything on the server (``RESENT_AFTER_RENEWAL``: ``ping``, the lists,
  ``resources/read``, ``prompts/get``, ``completion/complete``) is sent again on the new
  session; any other request, a ``tools/call`` above all, fails with an error answer made
  here (``session_ended_answer``), because it may have taken effect in the ended session
  and sending it again could do it twice. A notification is sent again, but for
  ``notifications/cancelled`` and ``notifications/initialized`` (what they speak of ended
  with the session); a response to a request of the ended session is not sent (nobody
  waits for it).
- At most ``Limits.max_session_renewals`` new sessions within
  ``Limits.session_renewal_window_seconds`` (``renewal_refused``); one more loses the
  transport. A count of sessions "in a row without an answer" would not do: what a new
  session is told again (its lists read again, the grant) is answered, and a server that
  forgets every session after a few requests would be renewed for ever.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson

from mcpl_host.jsonrpc.errors import describe_seconds
from mcpl_host.jsonrpc.values import is_object
from mcpl_host.limits import Limits

__all__ = [
    "RENEWAL_ID_PREFIX",
    "RESENT_AFTER_RENEWAL",
    "after_session_ended",
    "manifest_of",
    "renewal_initialize",
    "renewal_refused",
    "says_session_ended",
    "renewal_problem",
    "session_ended_answer",
]

#: Requests sent again on a new session: reading them twice changes nothing on the server
#: (MCP 2025-11-25: listing, reading a resource, getting a prompt, completion, ping).
RESENT_AFTER_RENEWAL = frozenset(
    {
        "ping",
        "tools/list",
        "resources/list",
        "resources/templates/list",
        "prompts/list",
        "resources/read",
        "prompts/get",
        "completion/complete",
    }
)

#: The id of a renewal's ``initialize`` is this prefix and the renewal's number: a string
#: the connection never uses (its ids are integers), so its answer cannot be taken for one
#: of the connection's.
RENEWAL_ID_PREFIX = "mcpl-host-session-renewal-"

Action = Literal["resend", "fail", "drop"]


def after_session_ended(kind: str | None, method: str | None) -> Action:
    """What becomes of one message the ended session refused (module rules): ``"resend"``
    on the new session, ``"fail"`` (a request: its error answer is made here) or ``"drop"``.
    ``kind`` is ``"request"``, ``"notification"`` or ``"response"`` (JSON-RPC 2.0 §4)."""
    if kind == "request":
        return "resend" if method in RESENT_AFTER_RENEWAL else "fail"
    if kind == "notification":
        if method in ("notifications/cancelled", "notifications/initialized"):
            return "drop"
        return "resend"
    return "drop"


def says_session_ended(status: int, body: str) -> bool:
    """Whether an HTTP answer (``status``, the start of its ``body``) to a message that
    carried a session id says the session ended: 404 (module rules), or 400 whose body is a
    JSON-RPC error answer naming no request and whose message speaks of the session (the
    TypeScript SDK's example servers, ``@modelcontextprotocol/server-everything`` among them,
    answer an unknown session id ``400 {"error": {"code": -32000, "message": "Bad Request:
    No valid session ID provided"}, "id": null}``; docs/protocol.md HS5)."""
    if status == 404:
        return True
    if status != 400:
        return False
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    if not is_object(message) or message.get("id") is not None or "result" in message:
        return False
    error = message.get("error")
    text = error.get("message") if is_object(error) else None
    return isinstance(text, str) and "session" in text.lower()


def renewal_refused(renewed_at: list[float], now: float, limits: Limits) -> str | None:
    """Why one more new session may not be started (the end of the sentence "the server
    ... ended the HTTP session"), None when it may. ``renewed_at``: the times (seconds, one
    clock with ``now``) of the sessions started before, oldest first; those older than
    ``limits.session_renewal_window_seconds`` are removed from it in place."""
    window = limits.session_renewal_window_seconds
    while renewed_at and renewed_at[0] <= now - window:
        del renewed_at[0]
    bound = limits.max_session_renewals
    if len(renewed_at) < bound:
        return None
    return (
        f"{len(renewed_at) + 1} times within {describe_seconds(window)} (Limits.max_session_renewals = "
        f"{bound}, Limits.session_renewal_window_seconds = {window:g})"
    )


def renewal_initialize(line: bytes, number: int) -> tuple[bytes, str]:
    """The ``initialize`` line of renewal ``number`` (1, 2, ...): ``line`` (the first
    ``initialize`` the connection sent) with the id ``RENEWAL_ID_PREFIX + number``.
    Returns the line and the id. Raises ``ValueError`` when ``line`` is not a JSON object."""
    message = orjson.loads(line)
    if not is_object(message):
        raise ValueError("the initialize line is not a JSON object")
    request_id = f"{RENEWAL_ID_PREFIX}{number}"
    message["id"] = request_id
    return orjson.dumps(message), request_id


def manifest_of(result: object) -> bytes | None:
    """The MCPL manifest of an ``initialize`` result (``capabilities.experimental.mcpl``,
    MCPL §5.2) as canonical JSON bytes (keys sorted), None without one: what two answers are
    compared by."""
    capabilities: Any = result.get("capabilities") if is_object(result) else None
    experimental: Any = capabilities.get("experimental") if is_object(capabilities) else None
    mcpl = experimental.get("mcpl") if is_object(experimental) else None
    if mcpl is None:
        return None
    return orjson.dumps(mcpl, option=orjson.OPT_SORT_KEYS)


def renewal_problem(message: object, *, protocol_version: str | None, manifest: bytes | None) -> str | None:
    """Why the answer to a renewal's ``initialize`` cannot stand for the first one (a phrase
    for "a new session could not be started: ..."), None when it can: an error answer, a
    result that is not an object, another ``protocolVersion`` than ``protocol_version`` (the
    one in force; None: any), another manifest than ``manifest`` (``manifest_of`` the first
    result). No server text is quoted."""
    if not is_object(message):
        return "its answer to initialize is not a JSON object"
    error = message.get("error")
    if error is not None:
        code = error.get("code") if is_object(error) else None
        shown = code if isinstance(code, int) and not isinstance(code, bool) else "no code"
        return f"it refused initialize (error {shown})"
    result = message.get("result")
    if not is_object(result):
        return "its initialize result is not an object"
    version = result.get("protocolVersion")
    if protocol_version is not None and version != protocol_version:
        return f"it answered initialize with another protocol version than {protocol_version}"
    if manifest_of(result) != manifest:
        return "its initialize result holds another MCPL manifest than the first"
    return None


def session_ended_answer(request_id: object, method: str, shown_url: str) -> dict[str, Any]:
    """The error answer made here for a request of ``method`` that was in flight when the
    server at ``shown_url`` ended its session and that is not sent again (module rules).
    Code ``-32603``; ``data.fromHost`` says it was made here, ``data.sessionEnded`` why."""
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {
            "code": -32603,
            "message": (
                f"the server at {shown_url} ended the HTTP session (404) while {method} was in "
                f"flight; a new session was started, and {method} was not sent again: it may "
                "have taken effect in the ended session"
            ),
            "data": {"fromHost": True, "sessionEnded": True},
        },
    }
