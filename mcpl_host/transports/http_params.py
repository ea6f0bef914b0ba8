"""HTTP connection parameters, URL handling and the reading of HTTP answers (MCP 2025-11-25
"Transports" §Streamable HTTP; MCP 2024-11-05 "Transports" §HTTP with SSE). Pure.

Rules:

- Credentials: the token (sent as ``Authorization: Bearer``), every header value and every
  query value of the URL are secrets (``HTTPParameters.secrets()``); the URL shown in logs
  and errors has no user-info, no fragment, and ``[redacted]`` for each query value
  (``shown_http_url``). A credential over cleartext ``http://`` to a host that is not
  loopback is worth a warning (``sends_cleartext_credential``).
- Settings are checked when the parameters are built; no error message repeats a secret.
- What an HTTP status means for a transport is decided here (``refusal_message``), once:
  redirects are never followed (a credential must not travel to another origin), a 401 or
  403 that OAuth could not heal says which step failed (``auth_failure``, from
  ``HTTPAuthorizer.refusal_for``), a 401 with ``WWW-Authenticate`` and OAuth off says so,
  404 for a request that carried a session id means the session is over.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal, Protocol
from urllib.parse import SplitResult, unquote_plus, urljoin, urlsplit, urlunsplit

from mcpl_host.logging import REDACTED, Redactor, log_value
from mcpl_host.secrets import server_secrets
from mcpl_host.transports.http_failure import BODY_SAID, body_text
from mcpl_host.transports.url_checks import check_headers, check_token, split_url
from mcpl_host.transports.ws_params import is_loopback_host

if TYPE_CHECKING:
    import ssl

    import httpx

__all__ = [
    "ACCEPT_POST",
    "ACCEPT_SSE",
    "FALLBACK_STATUSES",
    "HTTPAuthorizer",
    "HTTPParameters",
    "HTTPTransportKind",
    "join_endpoint",
    "media_type",
    "refusal_message",
    "sends_cleartext_credential",
    "shown_http_url",
]

#: Which HTTP transport to speak: Streamable HTTP, the older HTTP+SSE, or Streamable HTTP
#: falling back to HTTP+SSE (MCP 2025-11-25 §Backwards Compatibility).
HTTPTransportKind = Literal["streamable-http", "sse", "auto"]
#: The ``Accept`` header of a POST (MCP 2025-11-25 §Sending Messages to the Server).
ACCEPT_POST = "application/json, text/event-stream"
#: The ``Accept`` header of a GET that opens an event stream.
ACCEPT_SSE = "text/event-stream"
#: Statuses of the ``initialize`` POST after which "auto" tries the older HTTP+SSE
#: transport (the spec's examples are 404 and 405; servers that know no POST at the URL
#: also answer 400).
FALLBACK_STATUSES = frozenset({400, 404, 405})

# Set by the transport itself, or fixed by HTTP framing: a configured value would clash.
_RESERVED_HEADERS = frozenset({
    "host", "connection", "content-length", "transfer-encoding", "content-type", "accept",
    "mcp-session-id", "mcp-protocol-version", "last-event-id", "upgrade", "te", "trailer",
})  # fmt: skip
#: Characters of an HTTP error body a refusal sentence shows (markup stripped first).
_BODY_CHARS = 200
_STATUS_WORDS = {
    400: "bad request",
    401: "unauthorized",
    403: "forbidden",
    404: "not found",
    405: "method not allowed",
    406: "not acceptable",
    415: "unsupported media type",
    429: "too many requests",
    500: "internal server error",
    502: "bad gateway",
    503: "service unavailable",
    504: "gateway timeout",
}


class HTTPAuthorizer(Protocol):
    """What authorizes an HTTP transport's requests (``mcpl_host.auth.OAuth``): the
    ``httpx.Auth`` its client is given, and the sentence for a 401 or 403 it could not heal."""

    def httpx_auth(self) -> httpx.Auth:
        """The ``httpx.Auth`` of the transport's client."""
        ...

    def refusal_for(self, response: httpx.Response) -> str | None:
        """Why ``response`` (a 401 or 403) could not be healed: one sentence, or None."""
        ...


@dataclass(frozen=True, slots=True)
class HTTPParameters:
    """How to reach a server over HTTP.

    ``url``: the MCP endpoint, ``http://`` or ``https://`` (no user-info, no fragment); for
    the older HTTP+SSE transport, the URL of its event stream (often ``.../sse``).
    ``token``: sent as ``Authorization: Bearer <token>`` on every request. ``headers``:
    extra request headers sent on every request (their values are secrets). ``ssl_context``:
    verifies an ``https://`` server (default: the system's CAs, through httpx). ``auth``:
    OAuth (``mcpl_host.auth.OAuth``), which supplies ``Authorization`` and heals a 401 or
    403 (not with ``token`` nor an ``Authorization`` header).

    Raises:
        ValueError: an unusable URL, token or header; the message never holds a secret.
    """

    url: str
    token: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict[str, str])
    ssl_context: ssl.SSLContext | None = None
    auth: HTTPAuthorizer | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "headers", MappingProxyType(dict(self.headers)))
        _split_url(self.url)
        if self.token is not None:
            check_token(self.token)
            if any(n.lower() == "authorization" for n in self.headers):
                raise ValueError("a token and an Authorization header are both given")
        if self.auth is not None and self.has_credential_header:
            raise ValueError("OAuth and a token or an Authorization header are both given")
        check_headers(self.headers.items(), reserved=_RESERVED_HEADERS, set_by="the HTTP transport")

    @property
    def has_credential_header(self) -> bool:
        """A token or an ``Authorization`` header is configured."""
        return self.token is not None or any(n.lower() == "authorization" for n in self.headers)

    def secrets(self) -> list[str]:
        """Every value to redact: ``server_secrets`` of the URL, the headers (each value with
        and without its scheme word) and the token, and each query value of the URL (as
        written and decoded)."""
        found = list(server_secrets(url=self.url, token=self.token, headers=self.headers))
        return [*found, *_query_values(_split_url(self.url))]

    def request_headers(self) -> dict[str, str]:
        """The configured headers plus ``Authorization`` for the token."""
        headers: dict[str, str] = dict(self.headers)
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers


def _split_url(url: str) -> SplitResult:
    fragment_error = "the HTTP URL must not have a fragment"
    return split_url(url, kind="HTTP", schemes=("http", "https"), fragment_error=fragment_error)


def _query_values(parts: SplitResult) -> list[str]:
    raw = [part.partition("=")[2] for part in parts.query.split("&") if part]
    return [value for item in raw for value in (item, unquote_plus(item)) if value]


def shown_http_url(url: str, redactor: Redactor | None = None) -> str:
    """``url`` as it may appear in logs and errors: user-info and fragment removed, each query
    value replaced by ``[redacted]`` (the names kept), then ``redactor`` applied. Never
    raises."""
    try:
        parts = urlsplit(url)
        query = "&".join(
            f"{name}={REDACTED}" if sep and value else part
            for part in parts.query.split("&")
            if part
            for name, sep, value in [part.partition("=")]
        )
        text = urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, query, ""))
    except (ValueError, TypeError):
        return "<unparsable HTTP URL>"
    return redactor.redact(text) if redactor is not None else text


def sends_cleartext_credential(params: HTTPParameters) -> bool:
    """True when a credential (token, header, query value) would travel over cleartext
    ``http://`` to a host that is not loopback."""
    parts = _split_url(params.url)
    has_credential = params.token is not None or bool(params.headers) or bool(_query_values(parts))
    return has_credential and parts.scheme.lower() == "http" and not is_loopback_host(parts.hostname or "")


def _origin(parts: SplitResult) -> tuple[str, str, int | None]:
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or (443 if scheme == "https" else 80)


def join_endpoint(base_url: str, endpoint: str) -> str:
    """The POST URL an HTTP+SSE server named in its ``endpoint`` event (MCP 2024-11-05
    §HTTP with SSE), resolved against the event stream's URL.

    Raises:
        ValueError: the endpoint cannot be parsed, has user-info or a fragment, or is on
            another origin (scheme, host, port): our credentials would go there.
    """
    try:
        joined = urljoin(base_url, endpoint.strip())
        parts = urlsplit(joined)
        parts.port  # noqa: B018
    except (ValueError, TypeError):
        raise ValueError("the server's endpoint event holds an unusable URL") from None
    if "@" in parts.netloc or parts.fragment:
        raise ValueError("the server's endpoint URL has user-info or a fragment")
    if _origin(parts) != _origin(urlsplit(base_url)):
        raise ValueError("the server's endpoint URL is on another origin; it is not used")
    return joined


def media_type(content_type: str | None) -> str:
    """The media type of a ``Content-Type`` value, lower-cased, parameters dropped."""
    return (content_type or "").partition(";")[0].strip().lower()


def refusal_message(
    status: int,
    *,
    what: str,
    shown_url: str,
    www_authenticate: str | None = None,
    location: str | None = None,
    excerpt: str = "",
    content_type: str | None = None,
    had_session: bool = False,
    redactor: Redactor | None = None,
    auth_failure: str | None = None,
) -> str:
    """The error sentence for an HTTP answer ``status`` (not 2xx) to ``what`` (e.g. ``"the
    POST of initialize"``) sent to ``shown_url``. ``www_authenticate``, ``location`` and
    ``excerpt`` (the start of the body) are server text: redacted, cut and escaped for a
    terminal here (quotes kept as sent: JSON is shown once, as it came), the body's markup
    stripped (``http_failure.body_text``; ``content_type`` its media type).
    ``had_session``: the request carried an ``Mcp-Session-Id``. ``auth_failure``: why
    OAuth could not heal this 401 or 403 (one sentence, no credential in it).
    """
    word = _STATUS_WORDS.get(status)
    head = f"the server at {shown_url} answered {what} with HTTP {status}" + (f" ({word})" if word else "")
    text = body_text(excerpt, content_type, max_chars=_BODY_CHARS)
    body = f"{BODY_SAID}{log_value(text, redactor, max_units=_BODY_CHARS, quotes=False)}" if text else ""
    if 300 <= status < 400:
        target = (
            f" to {log_value(shown_http_url(location, redactor), redactor, max_units=200, quotes=False)}"
            if location
            else ""
        )
        return f"{head}, a redirect{target}; redirects are not followed: configure the final URL"
    if status in (401, 403) and auth_failure:
        return f"{head}: {log_value(auth_failure, redactor, max_units=400, quotes=False)}"
    if status == 401 and www_authenticate:
        challenge = log_value(www_authenticate, redactor, max_units=200, quotes=False)
        return (
            f"{head}: the server wants OAuth authorization (WWW-Authenticate: {challenge}), "
            "and OAuth is off for it (a token or an Authorization header is configured, or "
            '"oauth": {"enabled": false}); give a token it accepts, or leave OAuth on'
        )
    if status in (401, 403):
        return f"{head}: the credentials were refused or are missing{body}"
    if status == 404 and had_session:
        return f"{head}: the server ended the MCP session (a new connection starts a new one){body}"
    if status == 404:
        return f"{head}: is the URL the server's MCP endpoint?{body}"
    return head + body
