"""Every bound the host applies, with its default, in one place.

A ``Limits`` value is passed to a connection (and its transport); each server may override
any field. Units are in the field names: ``_bytes``, ``_seconds``, counts otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Longest line (stdio) or message (WebSocket, HTTP body, SSE event data) accepted from a server, in bytes: 33 MiB, so
#: that a 32 MiB tool result (base64 images or files) fits with its JSON-RPC envelope and the
#: escaping of its text around it (1 MiB of headroom).
DEFAULT_MAX_LINE_BYTES = 33 * 1024 * 1024
#: Bytes kept from the start of a line over ``max_line_bytes``, to read its JSON-RPC ``id``
#: (``framing.peek_id``) and fail the request it answers at once.
DEFAULT_LINE_HEAD_BYTES = 4096
#: Deepest nesting of arrays and objects parsed in one message (orjson stops at 1024; deeper
#: messages are parsed iteratively up to this depth, and refused beyond it).
DEFAULT_MAX_JSON_DEPTH = 10_000
#: Longest line parsed by the iterative parser (nesting deeper than orjson's 1024 levels), in
#: bytes: it takes up to about 600 ns per byte (a dense array of small numbers; measured),
#: so 256 KiB costs at most about 0.15 s of the event loop. Longer lines nested that deep
#: are refused.
DEFAULT_MAX_DEEP_JSON_BYTES = 256 * 1024
#: Host requests in flight at once on one connection; one more raises LocalProtocolError.
DEFAULT_MAX_PENDING_REQUESTS = 4096
#: Inbound server requests handled at once; further ones wait their turn (the read loop
#: goes on reading).
DEFAULT_MAX_CONCURRENT_INBOUND = 64
#: Inbound server requests waiting for a turn; one more is answered -32603 at once.
DEFAULT_MAX_QUEUED_INBOUND = 1024
#: Bytes queued for a server that is not reading its input before the link is declared
#: lost (memory stays bounded).
DEFAULT_MAX_OUTBOX_BYTES = 64 * 1024 * 1024
#: Dropped (non-JSON / non-object) lines logged per connection before one "more go unlogged"
#: line (docs/protocol.md R6).
DEFAULT_DROPPED_LINES_LOGGED = 3
#: Unmatched JSON-RPC error responses logged per connection before going quiet (docs/protocol.md R5, L3).
DEFAULT_UNMATCHED_ERRORS_LOGGED = 10
#: Invalid requests logged per connection before going quiet (docs/protocol.md A4, L3); each
#: is still answered. The same bound applies to "not answering request" lines (T1, T2).
DEFAULT_INVALID_REQUESTS_LOGGED = 10
#: Server stderr lines kept to explain a failure (docs/protocol.md H5).
DEFAULT_STDERR_TAIL_LINES = 50
#: Characters (UTF-16 code units) of one server value in a log line (docs/protocol.md L1).
DEFAULT_LOG_VALUE_MAX_UNITS = 256
#: Characters past that cut that are redacted with the shown part, so a secret straddling
#: the cut is still found; the rest of a longer value is neither redacted nor shown (it
#: bounds the redaction work per log value).
LOG_VALUE_REDACTION_MARGIN_CHARS = 8192
#: Seconds to wait for the initialize answer.
DEFAULT_HANDSHAKE_TIMEOUT_SECONDS = 30.0
#: Seconds a host request waits for its answer unless the call says otherwise.
DEFAULT_REQUEST_TIMEOUT_SECONDS = 60.0
#: Seconds to wait for exit after closing the child's stdin, then after SIGTERM.
DEFAULT_CLOSE_GRACE_SECONDS = 2.0
DEFAULT_TERMINATE_GRACE_SECONDS = 2.0
#: Pages followed for one paginated list call (tools/list and friends) before stopping.
DEFAULT_MAX_LIST_PAGES = 100
#: Warning lines per connection about refused channel items and notification-form channel
#: messages, before one "more go unlogged" line.
DEFAULT_CHANNEL_DIAGNOSTICS_LOGGED = 50
#: Dropped-injection lines logged per context/beforeInference answer before one summary.
DEFAULT_DROPPED_INJECTIONS_LOGGED = 10
#: push/event ids remembered per server for de-duplication (MCPL §9.4), and for how long.
DEFAULT_MAX_REMEMBERED_EVENT_IDS = 1024
DEFAULT_EVENT_ID_TTL_SECONDS = 600.0
#: Seconds a push/event waits for the host application to take it from a subscription
#: (``Host`` without application handlers) before it is refused with a reason.
DEFAULT_DELIVERY_TIMEOUT_SECONDS = 10.0
#: HTTP transports (MCP Streamable HTTP and HTTP+SSE). Seconds to open the TCP (and TLS)
#: connection of one HTTP request.
DEFAULT_HTTP_CONNECT_TIMEOUT_SECONDS = 15.0
#: Seconds for the status line and headers of an HTTP request that does not wait for a
#: JSON-RPC answer: a POST of a notification or response (202 expected), the GET of an
#: event stream, the HTTP+SSE ``endpoint`` event. (A POST of a request waits as long as the
#: request's own timeout: a server may answer it only when the result is ready.)
DEFAULT_HTTP_REPLY_TIMEOUT_SECONDS = 30.0
#: Bytes of one Server-Sent Event as received (every line of it, field names included),
#: counted as they arrive; one more loses the transport. Its data (one JSON-RPC message)
#: is also bounded by ``max_line_bytes``.
DEFAULT_MAX_SSE_EVENT_BYTES = DEFAULT_MAX_LINE_BYTES + 1024 * 1024
#: Bytes of an HTTP error body read to explain a refusal (the rest is not read).
DEFAULT_MAX_HTTP_ERROR_BODY_BYTES = 4096
#: HTTP requests to one server open at once (POSTs waiting for answers, event streams);
#: one more waits for a free connection.
DEFAULT_MAX_HTTP_CONNECTIONS = 64
#: Reconnecting an event stream that ended or broke: the first delay when the server gave
#: no ``retry`` field, doubled after each failed attempt up to the maximum; a server's
#: ``retry`` is kept within [minimum, maximum]; after this many failed attempts in a row
#: the stream is given up.
DEFAULT_SSE_RECONNECT_DELAY_SECONDS = 1.0
DEFAULT_SSE_MIN_RECONNECT_DELAY_SECONDS = 0.1
DEFAULT_SSE_MAX_RECONNECT_DELAY_SECONDS = 30.0
DEFAULT_SSE_MAX_RECONNECT_ATTEMPTS = 5
#: Seconds between two looks at a stdio server's descendants (Linux), so that one that
#: leaves the process group is still known when the server is closed.
DEFAULT_PROCESS_TREE_SCAN_SECONDS = 1.0
#: MCP 2026-07-28 (``mcpl_host.stateless``). Seconds the ``server/discover`` probe waits,
#: within the handshake deadline, before a silent server is taken for a handshake-era one.
DEFAULT_DISCOVER_TIMEOUT_SECONDS = 5.0
#: Retries of one request answered ``input_required`` (multi round-trip requests) before
#: the call fails; input requests served per round.
DEFAULT_MAX_INPUT_ROUNDS = 10
DEFAULT_MAX_INPUT_REQUESTS = 16
#: Bytes of a tool's ``outputSchema`` (as JSON) that ``structuredContent`` is checked
#: against; a larger schema is refused rather than validated (a schema is CPU work).
DEFAULT_MAX_OUTPUT_SCHEMA_BYTES = 256 * 1024
#: Deepest nesting of arrays and objects in a config file (a config needs about 6; the
#: standard library's parser would hit Python's recursion limit near 1,000). Not per server.
CONFIG_MAX_DEPTH = 100


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-connection bounds. Every field has a module-level ``DEFAULT_*`` constant."""

    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    line_head_bytes: int = DEFAULT_LINE_HEAD_BYTES
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH
    max_deep_json_bytes: int = DEFAULT_MAX_DEEP_JSON_BYTES
    max_pending_requests: int = DEFAULT_MAX_PENDING_REQUESTS
    max_concurrent_inbound: int = DEFAULT_MAX_CONCURRENT_INBOUND
    max_queued_inbound: int = DEFAULT_MAX_QUEUED_INBOUND
    max_outbox_bytes: int = DEFAULT_MAX_OUTBOX_BYTES
    dropped_lines_logged: int = DEFAULT_DROPPED_LINES_LOGGED
    unmatched_errors_logged: int = DEFAULT_UNMATCHED_ERRORS_LOGGED
    invalid_requests_logged: int = DEFAULT_INVALID_REQUESTS_LOGGED
    stderr_tail_lines: int = DEFAULT_STDERR_TAIL_LINES
    handshake_timeout_seconds: float = DEFAULT_HANDSHAKE_TIMEOUT_SECONDS
    request_timeout_seconds: float = DEFAULT_REQUEST_TIMEOUT_SECONDS
    close_grace_seconds: float = DEFAULT_CLOSE_GRACE_SECONDS
    terminate_grace_seconds: float = DEFAULT_TERMINATE_GRACE_SECONDS
    max_list_pages: int = DEFAULT_MAX_LIST_PAGES
    channel_diagnostics_logged: int = DEFAULT_CHANNEL_DIAGNOSTICS_LOGGED
    dropped_injections_logged: int = DEFAULT_DROPPED_INJECTIONS_LOGGED
    max_remembered_event_ids: int = DEFAULT_MAX_REMEMBERED_EVENT_IDS
    event_id_ttl_seconds: float = DEFAULT_EVENT_ID_TTL_SECONDS
    delivery_timeout_seconds: float = DEFAULT_DELIVERY_TIMEOUT_SECONDS
    http_connect_timeout_seconds: float = DEFAULT_HTTP_CONNECT_TIMEOUT_SECONDS
    http_reply_timeout_seconds: float = DEFAULT_HTTP_REPLY_TIMEOUT_SECONDS
    max_sse_event_bytes: int = DEFAULT_MAX_SSE_EVENT_BYTES
    max_http_error_body_bytes: int = DEFAULT_MAX_HTTP_ERROR_BODY_BYTES
    max_http_connections: int = DEFAULT_MAX_HTTP_CONNECTIONS
    sse_reconnect_delay_seconds: float = DEFAULT_SSE_RECONNECT_DELAY_SECONDS
    sse_min_reconnect_delay_seconds: float = DEFAULT_SSE_MIN_RECONNECT_DELAY_SECONDS
    sse_max_reconnect_delay_seconds: float = DEFAULT_SSE_MAX_RECONNECT_DELAY_SECONDS
    sse_max_reconnect_attempts: int = DEFAULT_SSE_MAX_RECONNECT_ATTEMPTS
    process_tree_scan_seconds: float = DEFAULT_PROCESS_TREE_SCAN_SECONDS
    discover_timeout_seconds: float = DEFAULT_DISCOVER_TIMEOUT_SECONDS
    max_input_rounds: int = DEFAULT_MAX_INPUT_ROUNDS
    max_input_requests: int = DEFAULT_MAX_INPUT_REQUESTS
    max_output_schema_bytes: int = DEFAULT_MAX_OUTPUT_SCHEMA_BYTES
