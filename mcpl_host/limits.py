"""Every bound the host applies to a server, with its default, in one place.

A ``Limits`` value is passed to a connection (and its transport); each server may override
any field, in code (``dataclasses.replace(Limits(), ...)``) or in the config file (its
``limits`` object, keyed by ``config_key(field)``: ``maxStateBytes`` for
``max_state_bytes``; checked by ``limit_problem``). Units are in the field names: ``_bytes``,
``_seconds``, counts otherwise. A bound hit by a call raises ``LimitExceeded``, which names
the field.

Host-wide bounds, the same for every server, are not fields: ``CONFIG_MAX_DEPTH`` and ``CONFIG_MAX_BYTES`` (the config
file), ``logging.DEFAULT_LOG_VALUE_MAX_UNITS`` and ``logging.LOG_VALUE_REDACTION_MARGIN_CHARS``
(the host's own log format, kept with it), and the explicit parameters of the CLI (``cli.MAX_KEPT_EVENTS``), the
probe report (``report.MAX_REPORT_DEPTH``...) and ``Host`` (``max_queued_events``...).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from mcpl_host.jsonrpc.errors import RemoteProtocolError
from mcpl_host.jsonrpc.values import finite_number

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
#: Inbound server requests waiting for a turn; while this many wait, the host stops reading
#: from the server (back-pressure: the pipe or socket fills and the server waits).
DEFAULT_MAX_QUEUED_INBOUND = 1024
#: Server requests that may wait beyond ``max_queued_inbound`` while the host must go on
#: reading (an inbound handler awaits an answer from the same server); one more is answered
#: -32603 "host busy" at once (the last resort).
DEFAULT_MAX_INBOUND_BACKLOG = 1024
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
#: Seconds to wait for the initialize answer.
DEFAULT_HANDSHAKE_TIMEOUT_SECONDS = 30.0
#: Seconds a host request waits for its answer unless the call says otherwise.
DEFAULT_REQUEST_TIMEOUT_SECONDS = 60.0
#: When set (seconds), each ``notifications/progress`` for a pending request starts its
#: timeout (``request_timeout_seconds`` or the call's own) again, up to this many seconds in
#: all since it was sent; None: progress does not extend a timeout (as both official SDKs'
#: defaults). MCP 2025-11-25 "Lifecycle", Timeouts: a host MAY reset the timeout on
#: progress and SHOULD always enforce a maximum.
DEFAULT_MAX_TOTAL_REQUEST_SECONDS: float | None = None
#: Seconds to wait for exit after closing the child's stdin, then after SIGTERM.
DEFAULT_CLOSE_GRACE_SECONDS = 2.0
DEFAULT_TERMINATE_GRACE_SECONDS = 2.0
#: One paginated list call (``tools/list``, ``resources/list``, ``resources/templates/list``,
#: ``prompts/list``) across all its pages: pages followed, entries, and JSON bytes of the
#: entries. Past any of them the call raises ``LimitExceeded`` (no partial list).
DEFAULT_MAX_LIST_PAGES = 100
DEFAULT_MAX_LIST_ITEMS = 50_000
DEFAULT_MAX_LIST_BYTES = 32 * 1024 * 1024
#: Warning lines per connection about refused channel items and notification-form channel
#: messages, before one "more go unlogged" line.
DEFAULT_CHANNEL_DIAGNOSTICS_LOGGED = 50
#: Dropped-injection lines logged per context/beforeInference answer before one summary.
DEFAULT_DROPPED_INJECTIONS_LOGGED = 10
#: push/event ids remembered per server for de-duplication (MCPL §9.4), and for how long.
DEFAULT_MAX_REMEMBERED_EVENT_IDS = 1024
DEFAULT_EVENT_ID_TTL_SECONDS = 600.0
#: Tags read from one push/event or channel message (MCPL §16.3); the rest are dropped, with
#: one problem line.
DEFAULT_MAX_TAGS = 256
#: Host-held state (MCPL §8; docs/protocol.md, "State"). JSON bytes of one feature set's
#: state document (a checkpoint's data): a larger ``data``, or a patch whose result would
#: be larger, is refused.
DEFAULT_MAX_STATE_BYTES = 1024 * 1024
#: JSON bytes of every checkpoint held for one server, all feature sets together (checkpoint
#: ids included); older checkpoints that are not current are dropped to make room.
DEFAULT_MAX_TOTAL_STATE_BYTES = 16 * 1024 * 1024
#: Checkpoints held per feature set (the current one and the most recent before it).
DEFAULT_MAX_STATE_CHECKPOINTS = 64
#: Operations of one RFC 6902 patch, and seconds of the event loop its application may take
#: (checked after each operation; one operation costs at most about a copy of a document of
#: ``max_state_bytes``).
DEFAULT_MAX_PATCH_OPERATIONS = 1000
DEFAULT_MAX_PATCH_SECONDS = 0.1
#: Channels one server has registered at once (MCPL §14.2; per transport), and JSON bytes of
#: one channel descriptor; an item beyond either is refused with ``limit_exceeded``.
DEFAULT_MAX_CHANNELS = 1024
DEFAULT_MAX_CHANNEL_DESCRIPTOR_BYTES = 16 * 1024
#: A server's MCPL manifest (``experimental.mcpl``, MCPL §17.1), as advertised or fetched:
#: JSON bytes, nesting of arrays and objects, feature sets declared, entries of one set
#: array (``uses``, ``coreTags``, ``implies``) and tags declared by one ``tagOntology``
#: (``tags`` and ``keyed`` members). A manifest beyond any of them is not used: at the
#: handshake the server is served as plain MCP, when fetched the manifest in force is kept.
#: Digest, diff and derivation of a 256 KiB manifest take about 0.1 s of the event loop
#: (``scripts/exhaustion.py``); real manifests are a few KB.
DEFAULT_MAX_MANIFEST_BYTES = 256 * 1024
DEFAULT_MAX_MANIFEST_DEPTH = 32
DEFAULT_MAX_FEATURE_SETS = 256
DEFAULT_MAX_MANIFEST_SET_ENTRIES = 1024
DEFAULT_MAX_ONTOLOGY_TAGS = 1024
#: ``mcpl/manifest`` fetches per connection: at most this many within any window (MCPL §17.8).
DEFAULT_MAX_MANIFEST_FETCHES = 5
DEFAULT_MANIFEST_FETCH_WINDOW_SECONDS = 60.0
#: Lines about dropped manifest-change notifications logged per connection (docs/protocol.md L3).
DEFAULT_MANIFEST_DEFECTS_LOGGED = 3
#: Seconds a ``context/beforeInference`` hook may take (MCPL §10.6), unless the call says otherwise.
DEFAULT_HOOK_TIMEOUT_SECONDS = 5.0
#: Seconds a supervised server has to answer a health ``ping``.
DEFAULT_HEALTH_TIMEOUT_SECONDS = 10.0
#: Seconds a push/event waits for the host application to take it from a subscription
#: (``Host`` without application handlers) before it is refused with a reason.
DEFAULT_DELIVERY_TIMEOUT_SECONDS = 10.0
#: Seconds a server request that waits for a person (an ``inference/request`` held by
#: ``mcpl-host shell``) is held before it is answered -32603.
DEFAULT_HELD_REQUEST_TIMEOUT_SECONDS = 600.0
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
#: Content codings of one HTTP body (``Content-Encoding``, RFC 9110 §8.4: every layer
#: listed is undone, each with its own inflater); a body in more is refused. Servers send
#: one; a list of thousands costs a zlib state each.
DEFAULT_MAX_CONTENT_CODINGS = 4
#: HTTP requests to one server open at once (POSTs waiting for answers, event streams);
#: one more waits for a free connection.
DEFAULT_MAX_HTTP_CONNECTIONS = 64
#: Bytes of received messages an HTTP transport holds for its connection to take (the
#: ``http_common.Inbox``): a message that would take the held ones past this waits, and its
#: stream is not read, until the connection has taken every one held; a message larger
#: than this is taken in alone. Memory per transport: this, or one message.
DEFAULT_MAX_HTTP_INBOX_BYTES = 64 * 1024
#: OAuth (``mcpl_host.auth``): the bytes of one OAuth document read or received (protected
#: resource metadata, authorization server metadata, a registration or token answer, the
#: request reaching the loopback redirect listener): 256 KiB.
DEFAULT_MAX_OAUTH_DOCUMENT_BYTES = 256 * 1024
#: Seconds an interactive login waits for the browser to come back to the loopback listener.
DEFAULT_OAUTH_LOGIN_TIMEOUT_SECONDS = 300.0
#: Step-ups (a 403 ``insufficient_scope`` answered by authorizing again with more scopes)
#: one server may cause before its 403 is final (MCP 2025-11-25 Authorization, Scope
#: Challenge Handling; docs/protocol.md OA7).
DEFAULT_MAX_OAUTH_STEP_UPS = 2
#: Reconnecting an event stream that ended or broke: the first delay when the server gave
#: no ``retry`` field, doubled after each failed attempt, and after each stream in a row
#: that delivered no message, up to the maximum; a server's ``retry`` (milliseconds, any
#: integer) is kept within [minimum, maximum]; after this many failed attempts in a row
#: the stream is given up (``http_common.reconnect_delay``).
DEFAULT_SSE_RECONNECT_DELAY_SECONDS = 1.0
DEFAULT_SSE_MIN_RECONNECT_DELAY_SECONDS = 0.1
DEFAULT_SSE_MAX_RECONNECT_DELAY_SECONDS = 30.0
DEFAULT_SSE_MAX_RECONNECT_ATTEMPTS = 5
#: New Streamable HTTP sessions started after the server ended one (HTTP 404 for its session
#: id) within the window (seconds); one more loses the transport (``transports.http_session``,
#: docs/protocol.md HS4). 0: never; a session that ends loses the transport.
DEFAULT_MAX_SESSION_RENEWALS = 3
DEFAULT_SESSION_RENEWAL_WINDOW_SECONDS = 60.0
#: Seconds between two looks at a stdio server's descendants (Linux), so that one that
#: leaves the process group is still known when the server is closed.
DEFAULT_PROCESS_TREE_SCAN_SECONDS = 1.0
#: ``mcpl-host check``: messages kept per checked session (later ones are only counted), the
#: longest line whose parsed body is kept for the checks (bytes; longer ones keep their kind,
#: method, id and head), and seconds given to validating the structured results of a
#: server's tools against their ``outputSchema`` (done in a worker process, since a
#: server's schema can hold a regular expression that takes for ever).
DEFAULT_MAX_CHECK_MESSAGES = 20_000
DEFAULT_MAX_CHECK_MESSAGE_BYTES = 1024 * 1024
DEFAULT_CHECK_VALIDATION_TIMEOUT_SECONDS = 10.0
#: The 0.4 compatibility profile (docs/protocol.md, "Compatibility profiles"): seconds the
#: initial ``featureSets/update`` request waits for its answer before the host sends the same
#: policy as a notification and puts it in force without a receipt.
DEFAULT_POLICY_FALLBACK_SECONDS = 3.0
#: 0.4 profile: privileged server requests held while the policy is not settled, at most this
#: many at once (one more is refused at once: the policy is not yet in force), each for at
#: most ``held_request_seconds`` (then refused the same way).
DEFAULT_MAX_HELD_REQUESTS = 16
#: ... and the params of the requests held at once, at most this many bytes of compact JSON
#: (a request that would pass it is refused the same way): 16 held lines of up to
#: ``max_line_bytes`` each would otherwise be half a gigabyte.
DEFAULT_MAX_HELD_BYTES = 16 * 1024 * 1024
DEFAULT_HELD_REQUEST_SECONDS = 30.0
#: Seconds a server may stay silent while a host request waits for its answer, after the
#: handshake, before it is reported stalled, naming what is pending: ``mcpl-host probe``
#: fails, the library tells the application (``stall_watch``: a ``stalled`` event).
DEFAULT_STALL_SECONDS = 10.0
#: Refused server requests logged per connection (with the reason) before one "more go
#: unlogged" line; each is still answered and reported to the observer.
DEFAULT_REFUSALS_LOGGED = 20
#: Compatibility notes (0.4 profile: what a server used or declared that MCPL 0.5 would
#: refuse) logged per server, each distinct note once.
DEFAULT_COMPAT_NOTES_LOGGED = 50
#: Tool class findings (RFC-008 §3: an unknown class, a slot that is not an array, an
#: undefined ``mcpl/`` key) logged per connection, each distinct (tool, finding, value)
#: once; also the most findings read from one tool's ``_meta``.
DEFAULT_TOOL_CLASS_FINDINGS_LOGGED = 50
#: RFC-007 §5.2 (tool lifecycle): the most bytes of compact JSON (UTF-8) the ``input`` of one
#: ``tools/lifecycle`` notification sent to this server may take, after field selection; the
#: RFC's recommended default, 16 KiB. Over it, strings are cut and members dropped
#: (``inputAltered``), or the input withheld (docs/protocol.md TL6).
DEFAULT_MAX_LIFECYCLE_INPUT_BYTES = 16 * 1024
#: RFC-007 §6.6: the most rules one ``tools/observe`` filter from this server may hold, and
#: the most field paths one rule may request (the RFC's floor, 64 each); over either the
#: request fails -32602 with ``data.limit`` ``"rules"`` or ``"paths"``.
DEFAULT_MAX_OBSERVE_RULES = 64
DEFAULT_MAX_OBSERVE_PATHS = 64
#: Input streams (RFC-009, experimental; off unless ``ServerConfig.input_streams``): the most
#: Unicode scalar values of one snapshot (``maxChars``, §4.2), the least time between two
#: accepted updates of a stream in seconds (``maxUpdateHz`` is its inverse, §5.3), the longest
#: lease in seconds (the host shortens a later ``expiresAt``, §4.1), and the most stream ids a
#: connection keeps, ended ones included (their replay protection, §4.3, §10).
DEFAULT_INPUT_STREAM_MAX_CHARS = 4096
DEFAULT_INPUT_STREAM_UPDATE_INTERVAL_SECONDS = 0.1
DEFAULT_INPUT_STREAM_MAX_SECONDS = 60.0
DEFAULT_MAX_INPUT_STREAMS = 64
#: Committed message keys a server's input streams remember (RFC-009 §4.3: streamed finals and,
#: with input streams on, ordinary incoming messages), across its transports; past it the
#: oldest is forgotten (docs/protocol.md IS7).
DEFAULT_MAX_INPUT_MESSAGE_KEYS = 100_000
#: What a host keeps of the events a server sent (``mcpl_host.record.EventRecord``: the
#: probe's report, its ``--json`` document): an event over ``max_recorded_event_bytes`` of
#: compact JSON is kept without its ``params``, ``answer`` and ``error`` (their size noted),
#: and once the kept events reach ``max_recorded_bytes`` later ones are only counted, with
#: their bytes. Per server; the probe also keeps at most ``cli.MAX_KEPT_EVENTS`` events.
DEFAULT_MAX_RECORDED_EVENT_BYTES = 64 * 1024
DEFAULT_MAX_RECORDED_BYTES = 8 * 1024 * 1024
#: A session recording (``mcpl_host.recording``; ``--record FILE``, ``record=``): one file is
#: at most ``max_recording_bytes`` (the entry that would pass it goes to a new file: FILE
#: becomes FILE.1, FILE.1 becomes FILE.2, ..., keeping ``recording_files_kept`` of them, the
#: oldest deleted), and a message over ``max_recorded_message_bytes`` of compact JSON is
#: recorded without its content (its size, method and id kept); a line that is not JSON is
#: cut to that many bytes. Read from the ``Recorder``'s own ``Limits``.
DEFAULT_MAX_RECORDING_BYTES = 64 * 1024 * 1024
DEFAULT_RECORDING_FILES_KEPT = 3
DEFAULT_MAX_RECORDED_MESSAGE_BYTES = 1024 * 1024
#: Bytes asked for in one read from a server's stdout, stderr or socket; also the most one
#: decoding layer of an HTTP body inflates at a time (``transports/content_coding``).
DEFAULT_READ_CHUNK_BYTES = 64 * 1024
#: Longest stderr line kept, in bytes; longer ones are dropped (only 256 characters of a
#: line reach a log line anyway, docs/protocol.md L1).
DEFAULT_STDERR_MAX_LINE_BYTES = 64 * 1024
#: Seconds to wait, after a stdio server's stdout ends, for its exit status and last stderr;
#: and after it exits, for the rest of its stdout (never more than ``close_grace_seconds``).
DEFAULT_EOF_EXIT_WAIT_SECONDS = 0.5
#: WebSocket: seconds from dialling to the end of the upgrade handshake; seconds between
#: keepalive pings (None: no pings); seconds a ping may wait for its pong.
DEFAULT_WEBSOCKET_OPEN_TIMEOUT_SECONDS = 15.0
DEFAULT_WEBSOCKET_KEEPALIVE_INTERVAL_SECONDS: float | None = 20.0
DEFAULT_WEBSOCKET_KEEPALIVE_TIMEOUT_SECONDS = 20.0
#: MCP 2026-07-28 (``mcpl_host.stateless``). Seconds the ``server/discover`` probe waits,
#: within the handshake deadline (and never more than half of it, so that ``initialize``
#: keeps the rest), before a silent server is taken for a handshake-era one
#: (docs/protocol.md S3). Short: a stateless server answers it at once, and one that was
#: slow to start is probed again when it refuses ``initialize`` with ``-32022``.
DEFAULT_DISCOVER_TIMEOUT_SECONDS = 2.0
#: Retries of one request answered ``input_required`` (multi round-trip requests) before
#: the call fails; input requests served per round.
DEFAULT_MAX_INPUT_ROUNDS = 10
DEFAULT_MAX_INPUT_REQUESTS = 16
#: ``subscriptions/listen`` (``mcpl_host.listen``): resources subscribed to at once on one
#: connection (the URIs ride in every listen's filter); listens of a lost stream made again
#: in a row without an acknowledgment between them; seconds before each.
DEFAULT_MAX_RESOURCE_SUBSCRIPTIONS = 1024
DEFAULT_MAX_LISTEN_RESTARTS = 5
DEFAULT_LISTEN_RESTART_DELAY_SECONDS = 1.0
#: Bytes of a tool's ``outputSchema`` (as JSON) that ``structuredContent`` is checked
#: against; a larger schema is refused rather than validated (a schema is CPU work).
DEFAULT_MAX_OUTPUT_SCHEMA_BYTES = 256 * 1024
#: Seconds one JSON Schema check whose cost the server controls (a ``pattern``,
#: ``uniqueItems``) may take; it runs in a worker process that is stopped then
#: (``output_schema.validate_bounded``).
DEFAULT_MAX_SCHEMA_CHECK_SECONDS = 2.0
#: The most work a schema check may cost to run in the event loop: the schema's objects with
#: every ``$ref`` expanded times the JSON values of the instance checked against it. A check
#: over it (or of a schema whose cost cannot be read from it: a ``pattern``, a cycle of
#: references) runs in the worker process (``output_schema.inline_check``). At most about
#: 20 ms in the loop at this bound (docs/protocol.md, K1).
DEFAULT_MAX_INLINE_SCHEMA_WORK = 2_000
#: MCP 2026-07-28 (``mcpl_host.param_headers``): tool parameters a tool may mark
#: ``x-mcp-header`` (a tool declaring more is left out of ``tools/list``), and bytes of the
#: ``Mcp-Param-*`` headers of one ``tools/call`` (names and values; a call over it fails
#: before it is sent).
DEFAULT_MAX_PARAM_HEADERS = 32
DEFAULT_MAX_PARAM_HEADER_BYTES = 8 * 1024
#: MCP 2026-07-28 (``mcpl_host.caching``): the longest a list is served from its cache on
#: the strength of the server's ``ttlMs``, in seconds (a longer ``ttlMs`` is cut to it).
DEFAULT_MAX_CACHE_TTL_SECONDS = 24 * 60 * 60.0
#: Bulk content references (MCPL §19, ``mcpl_host.mcpl.references``). Reference records a
#: server's registry keeps (its ids never reused; the oldest is evicted past this, and its id
#: then answers "unknown reference", §19.5); characters of one server-supplied string
#: (``name``, ``mimeType``, a provenance input) shown in a model-visible stub, after control
#: and bidi characters are removed (a longer one is cut and marked, §19.5).
DEFAULT_MAX_REFERENCE_RECORDS = 2000
DEFAULT_REFERENCE_LABEL_CHARS = 120
#: The host-mediated fetcher (``mcpl_host.services.references``): decoded payload bytes read
#: for one reference (the transfer is aborted past it, whatever ``sizeBytes`` claims,
#: §19.7), redirects followed, and seconds one fetch may take in all.
DEFAULT_MAX_REFERENCE_BYTES = 32 * 1024 * 1024
DEFAULT_MAX_REFERENCE_REDIRECTS = 3
DEFAULT_REFERENCE_FETCH_TIMEOUT_SECONDS = 60.0
#: Seconds the host waits for a server's ``push/render`` answer (RFC-006 §5.3: 5 s
#: RECOMMENDED, as ``context/beforeInference``); past it the batch's fallback is shown.
DEFAULT_PUSH_RENDER_TIMEOUT_SECONDS = 5.0
#: Failed ``push/render`` answers (an error, a malformed result, none in time) logged per
#: connection before one "more go unlogged" line.
DEFAULT_RENDER_FAILURES_LOGGED = 10
#: The poll interval of a task (the MCP tasks extension, "Task Polling"; docs/protocol.md
#: TK3), in seconds: the server's ``pollIntervalMs``, or the default when it sent none,
#: never less than the least (a server that asks for 0 costs no busy loop) nor more than
#: the most (a task that ends is seen within it).
DEFAULT_TASK_POLL_DEFAULT_SECONDS = 1.0
DEFAULT_TASK_POLL_MIN_SECONDS = 0.25
DEFAULT_TASK_POLL_MAX_SECONDS = 30.0
#: Longest wait of ``mcpl-host replay --keep-timing`` before one line, in seconds: the gap
#: a recording shows between a host message and the server's line (or between two lines)
#: is kept up to this (docs/protocol.md RP7).
DEFAULT_REPLAY_MAX_GAP_SECONDS = 5.0
#: HTTP sessions ``mcpl-host replay --http`` keeps at once; a new one past it ends the
#: oldest (its next request gets 404, as from a server that expired it).
DEFAULT_REPLAY_MAX_SESSIONS = 64
#: Deepest nesting of arrays and objects in a config file (a config needs about 6; the
#: standard library's parser would hit Python's recursion limit near 1,000). Not per server.
CONFIG_MAX_DEPTH = 100
#: Largest config file read, in bytes: 64 MiB. A config needs a few KiB, but Claude Code's
#: ``~/.claude.json`` keeps each project's history beside its servers and grows to tens of
#: MiB; beyond this a file is refused (one problem), never read whole. Not per server.
CONFIG_MAX_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-server bounds. Every field has a module-level ``DEFAULT_*`` constant, documented
    there with its unit; ``limit_problem`` says which values a field takes."""

    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    line_head_bytes: int = DEFAULT_LINE_HEAD_BYTES
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH
    max_deep_json_bytes: int = DEFAULT_MAX_DEEP_JSON_BYTES
    max_pending_requests: int = DEFAULT_MAX_PENDING_REQUESTS
    max_concurrent_inbound: int = DEFAULT_MAX_CONCURRENT_INBOUND
    max_queued_inbound: int = DEFAULT_MAX_QUEUED_INBOUND
    max_inbound_backlog: int = DEFAULT_MAX_INBOUND_BACKLOG
    max_outbox_bytes: int = DEFAULT_MAX_OUTBOX_BYTES
    dropped_lines_logged: int = DEFAULT_DROPPED_LINES_LOGGED
    unmatched_errors_logged: int = DEFAULT_UNMATCHED_ERRORS_LOGGED
    invalid_requests_logged: int = DEFAULT_INVALID_REQUESTS_LOGGED
    stderr_tail_lines: int = DEFAULT_STDERR_TAIL_LINES
    handshake_timeout_seconds: float = DEFAULT_HANDSHAKE_TIMEOUT_SECONDS
    request_timeout_seconds: float = DEFAULT_REQUEST_TIMEOUT_SECONDS
    max_total_request_seconds: float | None = DEFAULT_MAX_TOTAL_REQUEST_SECONDS
    close_grace_seconds: float = DEFAULT_CLOSE_GRACE_SECONDS
    terminate_grace_seconds: float = DEFAULT_TERMINATE_GRACE_SECONDS
    max_list_pages: int = DEFAULT_MAX_LIST_PAGES
    channel_diagnostics_logged: int = DEFAULT_CHANNEL_DIAGNOSTICS_LOGGED
    dropped_injections_logged: int = DEFAULT_DROPPED_INJECTIONS_LOGGED
    max_remembered_event_ids: int = DEFAULT_MAX_REMEMBERED_EVENT_IDS
    event_id_ttl_seconds: float = DEFAULT_EVENT_ID_TTL_SECONDS
    delivery_timeout_seconds: float = DEFAULT_DELIVERY_TIMEOUT_SECONDS
    held_request_timeout_seconds: float = DEFAULT_HELD_REQUEST_TIMEOUT_SECONDS
    http_connect_timeout_seconds: float = DEFAULT_HTTP_CONNECT_TIMEOUT_SECONDS
    http_reply_timeout_seconds: float = DEFAULT_HTTP_REPLY_TIMEOUT_SECONDS
    max_sse_event_bytes: int = DEFAULT_MAX_SSE_EVENT_BYTES
    max_http_error_body_bytes: int = DEFAULT_MAX_HTTP_ERROR_BODY_BYTES
    max_content_codings: int = DEFAULT_MAX_CONTENT_CODINGS
    max_http_connections: int = DEFAULT_MAX_HTTP_CONNECTIONS
    max_http_inbox_bytes: int = DEFAULT_MAX_HTTP_INBOX_BYTES
    max_oauth_document_bytes: int = DEFAULT_MAX_OAUTH_DOCUMENT_BYTES
    oauth_login_timeout_seconds: float = DEFAULT_OAUTH_LOGIN_TIMEOUT_SECONDS
    max_oauth_step_ups: int = DEFAULT_MAX_OAUTH_STEP_UPS
    sse_reconnect_delay_seconds: float = DEFAULT_SSE_RECONNECT_DELAY_SECONDS
    sse_min_reconnect_delay_seconds: float = DEFAULT_SSE_MIN_RECONNECT_DELAY_SECONDS
    sse_max_reconnect_delay_seconds: float = DEFAULT_SSE_MAX_RECONNECT_DELAY_SECONDS
    sse_max_reconnect_attempts: int = DEFAULT_SSE_MAX_RECONNECT_ATTEMPTS
    max_session_renewals: int = DEFAULT_MAX_SESSION_RENEWALS
    session_renewal_window_seconds: float = DEFAULT_SESSION_RENEWAL_WINDOW_SECONDS
    process_tree_scan_seconds: float = DEFAULT_PROCESS_TREE_SCAN_SECONDS
    max_check_messages: int = DEFAULT_MAX_CHECK_MESSAGES
    max_check_message_bytes: int = DEFAULT_MAX_CHECK_MESSAGE_BYTES
    check_validation_timeout_seconds: float = DEFAULT_CHECK_VALIDATION_TIMEOUT_SECONDS
    policy_fallback_seconds: float = DEFAULT_POLICY_FALLBACK_SECONDS
    max_held_requests: int = DEFAULT_MAX_HELD_REQUESTS
    max_held_bytes: int = DEFAULT_MAX_HELD_BYTES
    held_request_seconds: float = DEFAULT_HELD_REQUEST_SECONDS
    stall_seconds: float = DEFAULT_STALL_SECONDS
    refusals_logged: int = DEFAULT_REFUSALS_LOGGED
    compat_notes_logged: int = DEFAULT_COMPAT_NOTES_LOGGED
    max_list_items: int = DEFAULT_MAX_LIST_ITEMS
    max_list_bytes: int = DEFAULT_MAX_LIST_BYTES
    max_tags: int = DEFAULT_MAX_TAGS
    max_state_bytes: int = DEFAULT_MAX_STATE_BYTES
    max_total_state_bytes: int = DEFAULT_MAX_TOTAL_STATE_BYTES
    max_state_checkpoints: int = DEFAULT_MAX_STATE_CHECKPOINTS
    max_patch_operations: int = DEFAULT_MAX_PATCH_OPERATIONS
    max_patch_seconds: float = DEFAULT_MAX_PATCH_SECONDS
    max_channels: int = DEFAULT_MAX_CHANNELS
    max_channel_descriptor_bytes: int = DEFAULT_MAX_CHANNEL_DESCRIPTOR_BYTES
    max_manifest_bytes: int = DEFAULT_MAX_MANIFEST_BYTES
    max_manifest_depth: int = DEFAULT_MAX_MANIFEST_DEPTH
    max_feature_sets: int = DEFAULT_MAX_FEATURE_SETS
    max_manifest_set_entries: int = DEFAULT_MAX_MANIFEST_SET_ENTRIES
    max_ontology_tags: int = DEFAULT_MAX_ONTOLOGY_TAGS
    max_manifest_fetches: int = DEFAULT_MAX_MANIFEST_FETCHES
    manifest_fetch_window_seconds: float = DEFAULT_MANIFEST_FETCH_WINDOW_SECONDS
    manifest_defects_logged: int = DEFAULT_MANIFEST_DEFECTS_LOGGED
    hook_timeout_seconds: float = DEFAULT_HOOK_TIMEOUT_SECONDS
    health_timeout_seconds: float = DEFAULT_HEALTH_TIMEOUT_SECONDS
    read_chunk_bytes: int = DEFAULT_READ_CHUNK_BYTES
    stderr_max_line_bytes: int = DEFAULT_STDERR_MAX_LINE_BYTES
    eof_exit_wait_seconds: float = DEFAULT_EOF_EXIT_WAIT_SECONDS
    websocket_open_timeout_seconds: float = DEFAULT_WEBSOCKET_OPEN_TIMEOUT_SECONDS
    websocket_keepalive_interval_seconds: float | None = DEFAULT_WEBSOCKET_KEEPALIVE_INTERVAL_SECONDS
    websocket_keepalive_timeout_seconds: float = DEFAULT_WEBSOCKET_KEEPALIVE_TIMEOUT_SECONDS
    discover_timeout_seconds: float = DEFAULT_DISCOVER_TIMEOUT_SECONDS
    max_input_rounds: int = DEFAULT_MAX_INPUT_ROUNDS
    max_input_requests: int = DEFAULT_MAX_INPUT_REQUESTS
    max_resource_subscriptions: int = DEFAULT_MAX_RESOURCE_SUBSCRIPTIONS
    max_listen_restarts: int = DEFAULT_MAX_LISTEN_RESTARTS
    listen_restart_delay_seconds: float = DEFAULT_LISTEN_RESTART_DELAY_SECONDS
    max_output_schema_bytes: int = DEFAULT_MAX_OUTPUT_SCHEMA_BYTES
    max_schema_check_seconds: float = DEFAULT_MAX_SCHEMA_CHECK_SECONDS
    max_inline_schema_work: int = DEFAULT_MAX_INLINE_SCHEMA_WORK
    max_param_headers: int = DEFAULT_MAX_PARAM_HEADERS
    max_param_header_bytes: int = DEFAULT_MAX_PARAM_HEADER_BYTES
    max_cache_ttl_seconds: float = DEFAULT_MAX_CACHE_TTL_SECONDS
    max_recorded_event_bytes: int = DEFAULT_MAX_RECORDED_EVENT_BYTES
    max_recorded_bytes: int = DEFAULT_MAX_RECORDED_BYTES
    max_recording_bytes: int = DEFAULT_MAX_RECORDING_BYTES
    recording_files_kept: int = DEFAULT_RECORDING_FILES_KEPT
    max_recorded_message_bytes: int = DEFAULT_MAX_RECORDED_MESSAGE_BYTES
    max_reference_records: int = DEFAULT_MAX_REFERENCE_RECORDS
    reference_label_chars: int = DEFAULT_REFERENCE_LABEL_CHARS
    max_reference_bytes: int = DEFAULT_MAX_REFERENCE_BYTES
    max_reference_redirects: int = DEFAULT_MAX_REFERENCE_REDIRECTS
    reference_fetch_timeout_seconds: float = DEFAULT_REFERENCE_FETCH_TIMEOUT_SECONDS
    tool_class_findings_logged: int = DEFAULT_TOOL_CLASS_FINDINGS_LOGGED
    max_lifecycle_input_bytes: int = DEFAULT_MAX_LIFECYCLE_INPUT_BYTES
    max_observe_rules: int = DEFAULT_MAX_OBSERVE_RULES
    max_observe_paths: int = DEFAULT_MAX_OBSERVE_PATHS
    input_stream_max_chars: int = DEFAULT_INPUT_STREAM_MAX_CHARS
    input_stream_update_interval_seconds: float = DEFAULT_INPUT_STREAM_UPDATE_INTERVAL_SECONDS
    input_stream_max_seconds: float = DEFAULT_INPUT_STREAM_MAX_SECONDS
    max_input_streams: int = DEFAULT_MAX_INPUT_STREAMS
    max_input_message_keys: int = DEFAULT_MAX_INPUT_MESSAGE_KEYS
    push_render_timeout_seconds: float = DEFAULT_PUSH_RENDER_TIMEOUT_SECONDS
    render_failures_logged: int = DEFAULT_RENDER_FAILURES_LOGGED
    task_poll_default_seconds: float = DEFAULT_TASK_POLL_DEFAULT_SECONDS
    task_poll_min_seconds: float = DEFAULT_TASK_POLL_MIN_SECONDS
    task_poll_max_seconds: float = DEFAULT_TASK_POLL_MAX_SECONDS
    replay_max_gap_seconds: float = DEFAULT_REPLAY_MAX_GAP_SECONDS
    replay_max_sessions: int = DEFAULT_REPLAY_MAX_SESSIONS


#: Fields that may be 0: budgets of log lines (``*_logged``: 0 logs none) and waits that may
#: be skipped. Every other count or size is at least 1, every other duration above 0.
_ZERO_OK = frozenset(
    {
        "close_grace_seconds",
        "terminate_grace_seconds",
        "eof_exit_wait_seconds",
        "max_reference_redirects",
        "max_oauth_step_ups",
        "max_session_renewals",
    }
)
#: Fields that may be None (JSON null): the feature they time is off.
_NONE_OK = frozenset({"websocket_keepalive_interval_seconds", "max_total_request_seconds"})
_FIELDS: dict[str, dataclasses.Field[Any]] = {f.name: f for f in dataclasses.fields(Limits)}


def config_key(field_name: str) -> str:
    """The config file's key of a ``Limits`` field: its name in camelCase
    (``max_state_bytes`` -> ``maxStateBytes``)."""
    head, *rest = field_name.split("_")
    return head + "".join(part.capitalize() for part in rest)


#: Config key -> ``Limits`` field, for every field.
CONFIG_KEYS: dict[str, str] = {config_key(name): name for name in _FIELDS}


def limit_problem(field_name: str, value: object) -> str | None:
    """Why ``value`` cannot be ``Limits.<field_name>``, or None. Counts and sizes (``int``
    fields) are whole numbers, at least 1 (0 allowed for ``*_logged`` budgets); durations
    (``float`` fields, seconds) are finite numbers above 0 (0 allowed where a wait may be
    skipped: ``close_grace_seconds``, ``terminate_grace_seconds``, ``eof_exit_wait_seconds``);
    ``websocket_keepalive_interval_seconds`` may also be None (no pings). Booleans are no
    numbers. The sentence starts with "must be" and never shows the value.

    Raises:
        KeyError: ``field_name`` is no field of ``Limits``.
    """
    kind = str(_FIELDS[field_name].type)
    if value is None and field_name in _NONE_OK:
        return None
    zero_ok = field_name in _ZERO_OK or field_name.endswith("_logged")
    number = finite_number(value)
    if kind.startswith("int"):
        if number is None or number != int(number) or not (number >= 1 or (zero_ok and number == 0)):
            return f"must be a whole number, {'0' if zero_ok else '1'} or more"
        return None
    if number is None or not (number > 0 or (zero_ok and number == 0)):
        least = "0 or more" if zero_ok else "above 0"
        return f"must be a number of seconds, {least}" + (", or null" if field_name in _NONE_OK else "")
    return None


def limits_with(base: Limits, changes: dict[str, Any]) -> Limits:
    """``base`` with ``changes`` (field -> value) applied; ``int`` fields get ints.

    Raises:
        ValueError: a value ``limit_problem`` refuses (the message names the field).
        KeyError: no such field.
    """
    applied: dict[str, Any] = {}
    for name, value in changes.items():
        problem = limit_problem(name, value)
        if problem is not None:
            raise ValueError(f"Limits.{name} {problem}")
        applied[name] = int(value) if str(_FIELDS[name].type).startswith("int") else value
    return dataclasses.replace(base, **applied)


class LimitExceeded(RemoteProtocolError):
    """A server made the host exceed one of its ``Limits`` (a list that pages on and on, for
    one). ``limit``: the ``Limits`` field; ``bound``: its value; the message names both and
    what was being done, never a server value."""

    def __init__(self, limit: str, bound: float, what: str) -> None:
        shown = f"{bound:g}" if isinstance(bound, float) else str(bound)
        super().__init__(f"{what}: over Limits.{limit} = {shown} ({config_key(limit)} in a config file)")
        self.limit = limit
        self.bound = bound
