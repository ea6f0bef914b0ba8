"""What MCP's authorization specification decides, as pure functions: which URLs to ask for
metadata and in which order, whether a metadata document may be used, which scopes to ask
for, how to register, whether an authorization response may be used, when a token is
stale. No I/O, no clock (``now`` is passed in), no logging; ``flow`` and ``provider`` apply
these decisions.

Specifications: MCP 2025-11-25 "Authorization" (basic/authorization) and its 2026-07-28
revision, and for a server without protected resource metadata MCP 2025-03-26
"Authorization" (§2.3.2 Authorization Base URL, §2.3.3 Fallbacks for Servers without
Metadata Discovery); RFC 9728 (protected resource metadata), RFC 8414 (authorization server
metadata), OpenID Connect Discovery 1.0, RFC 7636 (PKCE), RFC 8707 (resource indicators),
RFC 9207 (the ``iss`` authorization response parameter), RFC 7591 (dynamic client
registration), the OAuth Client ID Metadata Document draft. The project's readings are
docs/protocol.md OA1-OA14.

Every refusal is ``AuthorizationFailed``: ``step`` names the step that failed (``STEPS``),
``str()`` is one sentence that holds no credential.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, cast
from urllib.parse import parse_qsl, urlsplit, urlunsplit

__all__ = [
    "STALE_MARGIN_SECONDS",
    "STEPS",
    "AuthorizationFailed",
    "Challenge",
    "Registration",
    "ResourceMetadata",
    "ServerMetadata",
    "Step",
    "authorization_base_url",
    "authorization_server_urls",
    "bearer_challenge",
    "callback_code",
    "canonical_resource",
    "choose_registration",
    "choose_scopes",
    "default_endpoint_missing",
    "default_endpoints",
    "expires_at",
    "is_stale",
    "jwk_key_type",
    "login_refused",
    "parse_challenges",
    "protected_resource_urls",
    "read_registration",
    "read_resource_metadata",
    "read_server_metadata",
    "registration_request",
    "require_no_resource_metadata",
    "require_pkce",
    "step_up_scopes",
    "token_auth_method",
]

#: The steps a refusal names (``AuthorizationFailed.step``).
Step = Literal["metadata", "issuer", "pkce", "registration", "scope", "login", "callback", "token"]
STEPS: tuple[Step, ...] = (
    "metadata",
    "issuer",
    "pkce",
    "registration",
    "scope",
    "login",
    "callback",
    "token",
)
#: How a client is registered (MCP 2025-11-25 Authorization, Client Registration).
Registration = Literal["pre-registered", "metadata-document", "dynamic"]
_PRM_WELL_KNOWN = "/.well-known/oauth-protected-resource"
_AS_WELL_KNOWN = "/.well-known/oauth-authorization-server"
_OIDC_WELL_KNOWN = "/.well-known/openid-configuration"
#: ``token68`` or an auth-param (RFC 9110 §11.2): name = token / quoted-string.
_PARAM = re.compile(r'\s*([!#$%&\'*+.^_`|~0-9A-Za-z-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s,]*)\s*')
_SCHEME = re.compile(r"\s*([!#$%&'*+.^_`|~0-9A-Za-z-]+)(?=\s|,|$)")
#: A scope token (RFC 6749 §3.3): visible ASCII but ``"`` and ``\``.
_SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+\Z")


class AuthorizationFailed(Exception):
    """A step of authorization failed; ``str()`` is one sentence (no credential in it) and
    ``step`` is one of ``STEPS``: ``metadata`` (no usable protected resource or
    authorization server metadata), ``issuer`` (an issuer mismatch), ``pkce`` (S256 not
    advertised), ``registration`` (no way to register, or registration refused), ``scope``
    (a scope refused or step-ups used up), ``login`` (a login would be needed and may not
    happen here), ``callback`` (the authorization response is unusable), ``token`` (the
    token endpoint refused)."""

    def __init__(self, step: Step, message: str) -> None:
        super().__init__(message)
        self.step: Step = step


@dataclass(frozen=True, slots=True)
class Challenge:
    """One ``WWW-Authenticate`` challenge (RFC 9110 §11.6.1): its ``scheme`` lower-cased and
    its auth-params (names lower-cased, quoted values unquoted)."""

    scheme: str
    params: Mapping[str, str] = field(default_factory=dict[str, str])

    @property
    def resource_metadata(self) -> str | None:
        """RFC 9728 §5.1: the URL of the protected resource metadata."""
        return self.params.get("resource_metadata") or None

    @property
    def scope(self) -> str | None:
        """RFC 6750 §3: the scopes the resource wants (MCP 2025-11-25, Scope Selection)."""
        return self.params.get("scope") or None

    @property
    def error(self) -> str | None:
        """RFC 6750 §3.1: ``invalid_token``, ``insufficient_scope``..."""
        return self.params.get("error") or None


def parse_challenges(value: str) -> list[Challenge]:
    """The challenges of a ``WWW-Authenticate`` value (several may be joined by commas).
    Unparsable text ends the reading: what was read is returned. Never raises."""
    found: list[Challenge] = []
    position, end = 0, len(value)
    while position < end:
        scheme = _SCHEME.match(value, position)
        if scheme is None:
            position += 1
            continue
        params: dict[str, str] = {}
        position = scheme.end()
        while position < end:
            param = _PARAM.match(value, position)
            if param is None:
                break
            raw = param.group(2)
            if raw.startswith('"'):
                raw = re.sub(r"\\(.)", r"\1", raw[1:-1])
            params.setdefault(param.group(1).lower(), raw)
            position = param.end()
            if position < end and value[position] == ",":
                position += 1
                # The next item is another param, or the scheme of another challenge.
                if _PARAM.match(value, position) is None:
                    break
        found.append(Challenge(scheme.group(1).lower(), params))
        while position < end and value[position] in ", ":
            position += 1
    return found


def bearer_challenge(value: str | None) -> Challenge | None:
    """The ``Bearer`` challenge of a ``WWW-Authenticate`` value, or None."""
    if not value:
        return None
    return next((c for c in parse_challenges(value) if c.scheme == "bearer"), None)


def canonical_resource(url: str) -> str:
    """The canonical URI of an MCP server (MCP 2025-11-25 Authorization, Canonical Server
    URI; RFC 8707 §2): scheme and host lower-cased, the default port dropped, no query nor
    fragment, the path kept (a lone ``/`` dropped). Raises ``ValueError`` for a URL that is
    not ``http(s)://host...``."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("an OAuth resource must be an http:// or https:// URL with a host")
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    port = parts.port
    netloc = host if port is None or port == (443 if scheme == "https" else 80) else f"{host}:{port}"
    path = "" if parts.path == "/" else parts.path
    return urlunsplit((scheme, netloc, path, "", ""))


def _origin_and_path(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "", "", "")), parts.path.rstrip("/")


def protected_resource_urls(server_url: str, challenge: Challenge | None) -> list[str]:
    """Where to look for the protected resource metadata, in order (MCP 2025-11-25
    Authorization, Protected Resource Metadata Discovery Requirements; RFC 9728 §3.1, §5.1):
    the ``resource_metadata`` of the 401's challenge when there is one, else the well-known
    URL with the server's path inserted, then at the root."""
    if challenge is not None and challenge.resource_metadata:
        return [challenge.resource_metadata]
    origin, path = _origin_and_path(server_url)
    urls = [f"{origin}{_PRM_WELL_KNOWN}{path}"] if path else []
    return [*urls, f"{origin}{_PRM_WELL_KNOWN}"]


def authorization_server_urls(issuer: str) -> list[str]:
    """Where to look for an authorization server's metadata, in the order of MCP 2025-11-25
    Authorization, Authorization Server Metadata Discovery: for an issuer with a path, RFC
    8414 with the path inserted, OpenID Connect Discovery with the path inserted, then
    appended; without a path, RFC 8414 then OpenID Connect Discovery."""
    origin, path = _origin_and_path(issuer)
    if path:
        return [
            f"{origin}{_AS_WELL_KNOWN}{path}",
            f"{origin}{_OIDC_WELL_KNOWN}{path}",
            f"{origin}{path}{_OIDC_WELL_KNOWN}",
        ]
    return [f"{origin}{_AS_WELL_KNOWN}", f"{origin}{_OIDC_WELL_KNOWN}"]


def authorization_base_url(server_url: str) -> str:
    """The authorization base URL of MCP 2025-03-26 Authorization §2.3.2: the server's
    canonical URL (``canonical_resource``) without its path, as ``https://host[:port]``;
    docs/protocol.md OA14 takes it as the issuer of a server without protected resource
    metadata. Raises ``ValueError`` as ``canonical_resource``."""
    parts = urlsplit(canonical_resource(server_url))
    return urlunsplit((parts.scheme, parts.netloc, "", "", ""))


def _strings(value: object) -> tuple[str, ...]:
    if isinstance(value, list):
        items = cast("list[object]", value)
        return tuple(v for v in items if isinstance(v, str))
    return ()


def _optional_strings(value: object) -> tuple[str, ...] | None:
    return None if not isinstance(value, list) else _strings(cast("object", value))


def _same_issuer(a: str, b: str) -> bool:
    """docs/protocol.md OA3: identical, a lone trailing ``/`` of an empty path aside."""
    if a == b:
        return True
    return a.rstrip("/") == b.rstrip("/") and urlsplit(a.rstrip("/")).path == ""


@dataclass(frozen=True, slots=True)
class ResourceMetadata:
    """What the host reads of RFC 9728 protected resource metadata: ``resource`` (the
    identifier sent as RFC 8707 ``resource``), ``authorization_servers`` (issuer URLs) and
    ``scopes_supported`` (None when absent)."""

    resource: str
    authorization_servers: tuple[str, ...]
    scopes_supported: tuple[str, ...] | None = None


def read_resource_metadata(document: object, server_url: str) -> ResourceMetadata:
    """Protected resource metadata ``document`` (parsed JSON) of the MCP server at
    ``server_url``, checked (RFC 9728 §3.2, §3.3; docs/protocol.md OA2): an object with a
    ``resource`` that is the server's canonical URI or a prefix of it at a path segment on
    the same origin, and at least one ``authorization_servers`` entry.

    Raises:
        AuthorizationFailed: ``metadata``; ``issuer`` when ``resource`` names another
            resource.
    """
    if not isinstance(document, Mapping):
        raise AuthorizationFailed("metadata", "the protected resource metadata is not a JSON object")
    doc: Mapping[str, object] = document  # pyright: ignore[reportUnknownVariableType]
    resource = doc.get("resource")
    servers = _strings(doc.get("authorization_servers"))
    wanted = canonical_resource(server_url)
    if not isinstance(resource, str) or not resource:
        raise AuthorizationFailed("metadata", "the protected resource metadata has no resource")
    try:
        named = canonical_resource(resource)
    except ValueError:
        raise AuthorizationFailed(
            "metadata", "the protected resource metadata's resource is no URL"
        ) from None
    if not (wanted == named or wanted.startswith(named.rstrip("/") + "/")):
        raise AuthorizationFailed(
            "issuer", "the protected resource metadata is for another resource than the server's URL"
        )
    if not servers:
        raise AuthorizationFailed("metadata", "the protected resource metadata names no authorization server")
    return ResourceMetadata(resource, servers, _optional_strings(doc.get("scopes_supported")))


@dataclass(frozen=True, slots=True)
class ServerMetadata:
    """What the host reads of RFC 8414 / OpenID Connect Discovery metadata. ``published``:
    False for MCP 2025-03-26's default endpoints of a server that publishes none
    (``default_endpoints``)."""

    issuer: str
    authorization_endpoint: str | None
    token_endpoint: str
    registration_endpoint: str | None = None
    scopes_supported: tuple[str, ...] | None = None
    code_challenge_methods_supported: tuple[str, ...] = ()
    client_id_metadata_document_supported: bool = False
    authorization_response_iss_parameter_supported: bool = False
    token_endpoint_auth_methods_supported: tuple[str, ...] = ()
    published: bool = True


def read_server_metadata(document: object, issuer: str) -> ServerMetadata:
    """Authorization server metadata ``document`` (parsed JSON) fetched for ``issuer``.

    Raises:
        AuthorizationFailed: ``issuer`` when its ``issuer`` is not ``issuer`` (RFC 8414
            §3.3; docs/protocol.md OA3); ``metadata`` when it is no object or has no
            ``token_endpoint``.
    """
    if not isinstance(document, Mapping):
        raise AuthorizationFailed("metadata", "the authorization server metadata is not a JSON object")
    doc: Mapping[str, object] = document  # pyright: ignore[reportUnknownVariableType]
    named = doc.get("issuer")
    if not isinstance(named, str) or not _same_issuer(named, issuer):
        raise AuthorizationFailed(
            "issuer", "the authorization server metadata names another issuer than the URL it was fetched for"
        )
    token = doc.get("token_endpoint")
    if not isinstance(token, str) or not token:
        raise AuthorizationFailed("metadata", "the authorization server metadata has no token_endpoint")

    def text(key: str) -> str | None:
        value = doc.get(key)
        return value if isinstance(value, str) and value else None

    return ServerMetadata(
        issuer=named,
        authorization_endpoint=text("authorization_endpoint"),
        token_endpoint=token,
        registration_endpoint=text("registration_endpoint"),
        scopes_supported=_optional_strings(doc.get("scopes_supported")),
        code_challenge_methods_supported=_strings(doc.get("code_challenge_methods_supported")),
        client_id_metadata_document_supported=doc.get("client_id_metadata_document_supported") is True,
        authorization_response_iss_parameter_supported=(
            doc.get("authorization_response_iss_parameter_supported") is True
        ),
        token_endpoint_auth_methods_supported=_strings(doc.get("token_endpoint_auth_methods_supported")),
    )


def require_pkce(metadata: ServerMetadata) -> None:
    """MCP 2025-11-25 Authorization, Authorization Code Protection: PKCE with ``S256`` is
    required; a server whose metadata does not list ``S256`` in
    ``code_challenge_methods_supported`` (or has no such list) is refused (docs/protocol.md
    OA5). The default endpoints of a server that publishes no metadata (``published``
    False) are not: MCP 2025-03-26 made clients use PKCE (§2.1: OAuth 2.1, whose
    authorization code grant requires it), so S256 is sent though nothing advertises it
    (OA14).

    Raises:
        AuthorizationFailed: ``pkce``; ``metadata`` when it has no authorization endpoint.
    """
    if metadata.authorization_endpoint is None:
        raise AuthorizationFailed(
            "metadata", "the authorization server metadata has no authorization_endpoint"
        )
    if metadata.published and "S256" not in metadata.code_challenge_methods_supported:
        raise AuthorizationFailed(
            "pkce",
            "the authorization server does not advertise PKCE with S256 (code_challenge_methods_supported)",
        )


#: No OAuth metadata anywhere: the end of a sentence that says what a person can do then.
_NO_OAUTH_HINT = "if it takes a token instead, give it (--token, or an Authorization header)"


def _answers(statuses: Sequence[int | None]) -> str:
    """What the metadata URLs answered, for a sentence: ``HTTP 404, unreachable``..."""
    words = [
        "unreachable" if s is None else "HTTP 200 with no JSON" if s == 200 else f"HTTP {s}" for s in statuses
    ]
    return ", ".join(words) or "nothing asked"


def _all_absent(statuses: Sequence[int | None]) -> bool:
    """Every URL asked answered 404 (docs/protocol.md OA14: "not published")."""
    return bool(statuses) and all(s == 404 for s in statuses)


def require_no_resource_metadata(challenge: Challenge | None, statuses: Sequence[int | None]) -> None:
    """The condition of MCP 2025-03-26's discovery (docs/protocol.md OA14) when no protected
    resource metadata was found: the 401's challenge named no ``resource_metadata`` and every
    URL of ``protected_resource_urls`` answered 404. ``statuses``: what each URL asked
    answered, in order (the HTTP status; None when unreachable; a 200 counts as no document
    only when its body was no JSON).

    Raises:
        AuthorizationFailed: ``metadata``, naming what the URLs answered, when the condition
            does not hold (the metadata may exist but could not be read: no fallback).
    """
    if challenge is not None and challenge.resource_metadata:
        raise AuthorizationFailed(
            "metadata",
            "the protected resource metadata (RFC 9728) that the server's challenge names could not be read "
            f"({_answers(statuses)})",
        )
    if not _all_absent(statuses):
        raise AuthorizationFailed(
            "metadata",
            f"the server's protected resource metadata (RFC 9728) could not be read ({_answers(statuses)}), "
            f"so its authorization server is unknown; {_NO_OAUTH_HINT}",
        )


def default_endpoints(server_url: str, statuses: Sequence[int | None]) -> ServerMetadata:
    """The authorization server of a server that publishes no metadata at all (MCP
    2025-03-26 Authorization §2.3.3; docs/protocol.md OA14): ``/authorize``, ``/token`` and
    ``/register`` at the authorization base URL (``authorization_base_url``), which is its
    ``issuer``; ``published`` False (PKCE S256 is used though nothing advertises it,
    ``require_pkce``). ``statuses``: what the URLs of ``authorization_server_urls`` of the
    base URL answered (as ``require_no_resource_metadata``).

    Raises:
        AuthorizationFailed: ``metadata`` unless every one answered 404 (a document that
            exists but could not be read is no reason to guess endpoints).
    """
    if not _all_absent(statuses):
        raise AuthorizationFailed(
            "metadata",
            "the server publishes no protected resource metadata (RFC 9728), and the authorization server "
            f"metadata at its origin could not be read ({_answers(statuses)})",
        )
    base = authorization_base_url(server_url)
    return ServerMetadata(
        issuer=base,
        authorization_endpoint=f"{base}/authorize",
        token_endpoint=f"{base}/token",
        registration_endpoint=f"{base}/register",
        published=False,
    )


def default_endpoint_missing(
    metadata: ServerMetadata, endpoint: str, status: int
) -> AuthorizationFailed | None:
    """The refusal when a default endpoint (``default_endpoints``: ``metadata.published``
    False) answered 404: the server has no OAuth the host can find (docs/protocol.md OA14),
    said as ``metadata``, naming the endpoint's path only; None otherwise (the caller's own
    sentence then)."""
    if metadata.published or status != 404:
        return None
    return AuthorizationFailed(
        "metadata",
        "the server publishes no OAuth metadata (no protected resource metadata, RFC 9728, nor authorization "
        f"server metadata at its origin, RFC 8414) and its origin has no {urlsplit(endpoint).path} either "
        f"(the MCP 2025-03-26 default endpoint: HTTP 404); {_NO_OAUTH_HINT}",
    )


def login_refused(server_url: str, metadata: ServerMetadata) -> AuthorizationFailed:
    """The refusal when a login is needed and no person may be asked (docs/protocol.md
    OA12), as ``login``; for a server that publishes no metadata (OA14) it says so, since it
    may take no OAuth at all."""
    sentence = (
        f"no stored token for {server_url} and no login may be asked for here; "
        f"run `mcpl-host login {server_url}` first"
    )
    if not metadata.published:
        sentence += (
            " (the server publishes no OAuth metadata: the login would use the MCP 2025-03-26 default "
            f"endpoints at its origin; {_NO_OAUTH_HINT})"
        )
    return AuthorizationFailed("login", sentence)


def choose_scopes(challenge: Challenge | None, resource: ResourceMetadata | None) -> str | None:
    """The ``scope`` to ask for (MCP 2025-11-25 Authorization, Scope Selection Strategy):
    the challenge's ``scope``, else the protected resource's ``scopes_supported`` joined,
    else None (the parameter is left out)."""
    if challenge is not None and challenge.scope:
        return challenge.scope
    if resource is not None and resource.scopes_supported:
        return " ".join(resource.scopes_supported)
    return None


def step_up_scopes(granted: str | None, challenge: Challenge, *, step_ups: int, max_step_ups: int) -> str:
    """The scopes to ask for after a 403 ``insufficient_scope`` (MCP 2025-11-25
    Authorization, Scope Challenge Handling; docs/protocol.md OA7): the union of those
    granted and those the challenge names, in that order.

    Raises:
        AuthorizationFailed: ``scope`` when ``step_ups`` reached ``max_step_ups``
            (``Limits.max_oauth_step_ups``), the challenge names no scope, or it names
            nothing that was not granted already.
    """
    if step_ups >= max_step_ups:
        raise AuthorizationFailed(
            "scope",
            f"the server still wants more scopes after {step_ups} step-up(s) (Limits.max_oauth_step_ups)",
        )
    have = (granted or "").split()
    wanted = [s for s in (challenge.scope or "").split() if _SCOPE_TOKEN.match(s)]
    if not wanted:
        raise AuthorizationFailed("scope", "the server refused the token's scopes and named none it wants")
    added = [s for s in wanted if s not in have]
    if not added:
        raise AuthorizationFailed("scope", "the server refused scopes the token already has")
    return " ".join([*have, *added])


def choose_registration(
    metadata: ServerMetadata, *, client_id: str | None, metadata_document_url: str | None
) -> Registration:
    """How to register (MCP 2025-11-25 Authorization, Client Registration, in its order):
    a pre-registered ``client_id``; a client ID metadata document URL (``https://`` with a
    path) when the server advertises ``client_id_metadata_document_supported``; dynamic
    registration (RFC 7591) when it has a ``registration_endpoint``.

    Raises:
        AuthorizationFailed: ``registration`` when none applies.
    """
    if client_id:
        return "pre-registered"
    if metadata_document_url and metadata.client_id_metadata_document_supported:
        parts = urlsplit(metadata_document_url)
        if parts.scheme == "https" and parts.path not in ("", "/"):
            return "metadata-document"
    if metadata.registration_endpoint:
        return "dynamic"
    raise AuthorizationFailed(
        "registration",
        "the authorization server offers no registration this client can use (no registration_endpoint, "
        "no client ID metadata document support); give a pre-registered client id (--client-id)",
    )


def registration_request(redirect_uri: str, scope: str | None) -> dict[str, object]:
    """The RFC 7591 §2 metadata a dynamic registration sends: a public native client
    (``application_type: native``, for its loopback redirect; OpenID Connect Dynamic Client
    Registration §2 and MCP 2026-07-28) using the authorization code and refresh grants."""
    body: dict[str, object] = {
        "client_name": "mcpl-host",
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        "application_type": "native",
    }
    if scope:
        body["scope"] = scope
    return body


def read_registration(document: object) -> tuple[str, str | None]:
    """The ``client_id`` and ``client_secret`` (or None) of an RFC 7591 §3.2.1 answer.

    Raises:
        AuthorizationFailed: ``registration`` when it has no ``client_id``.
    """
    if isinstance(document, Mapping):
        doc: Mapping[str, object] = document  # pyright: ignore[reportUnknownVariableType]
        client_id, secret = doc.get("client_id"), doc.get("client_secret")
        if isinstance(client_id, str) and client_id:
            return client_id, secret if isinstance(secret, str) and secret else None
    raise AuthorizationFailed("registration", "the dynamic registration answer has no client_id")


def callback_code(query: str, *, state: str, metadata: ServerMetadata) -> str:
    """The authorization code of the redirect's ``query`` (RFC 6749 §4.1.2), checked: the
    ``state`` is the one sent; the ``iss`` parameter (RFC 9207 §2.4) is the metadata's
    ``issuer`` when present (for MCP 2025-03-26's default endpoints, the authorization base
    URL: docs/protocol.md OA14), compared as strings without any normalization (MCP 2026-07-28
    Authorization; docs/protocol.md OA3: not even a trailing slash), and must be present
    when the server advertises ``authorization_response_iss_parameter_supported``.

    Raises:
        AuthorizationFailed: ``issuer`` for an ``iss`` mismatch or absence; ``callback`` for
            an error answer, another ``state`` or no ``code``.
    """
    params = dict(parse_qsl(query, keep_blank_values=True))
    iss = params.get("iss")
    if iss is not None and iss != metadata.issuer:
        raise AuthorizationFailed(
            "issuer", "the authorization response came from another issuer (iss, RFC 9207)"
        )
    if iss is None and metadata.authorization_response_iss_parameter_supported:
        raise AuthorizationFailed(
            "issuer", "the authorization response has no iss though the server advertises it (RFC 9207)"
        )
    if params.get("state") != state:
        raise AuthorizationFailed("callback", "the authorization response's state is not the one sent")
    if "error" in params:
        error = params["error"] if re.fullmatch(r"[a-z_]{1,64}", params["error"]) else "an error"
        if error == "invalid_scope":
            raise AuthorizationFailed(
                "scope", "the authorization server refused the scopes asked for (invalid_scope)"
            )
        raise AuthorizationFailed("callback", f"the authorization server answered the login with {error}")
    code = params.get("code")
    if not code:
        raise AuthorizationFailed("callback", "the authorization response has no code")
    return code


def expires_at(expires_in: object, now: float) -> float | None:
    """The absolute expiry (seconds since the epoch) of a token answer's ``expires_in``
    (RFC 6749 §5.1) received at ``now``; None when absent or not a positive number."""
    if isinstance(expires_in, bool) or not isinstance(expires_in, (int, float)) or not expires_in > 0:
        return None
    return now + float(expires_in)


#: A token this close to its expiry (seconds) is refreshed before it is sent.
STALE_MARGIN_SECONDS = 30.0


def is_stale(expiry: float | None, now: float) -> bool:
    """Whether a token expiring at ``expiry`` (None: unknown) is to be refreshed before it
    is sent at ``now`` (``STALE_MARGIN_SECONDS`` before its expiry)."""
    return expiry is not None and now >= expiry - STALE_MARGIN_SECONDS


def token_auth_method(metadata: ServerMetadata, *, has_secret: bool, has_key: bool) -> str:
    """The token endpoint's client authentication (RFC 8414 §2
    ``token_endpoint_auth_methods_supported``, RFC 7523 §2.2): ``private_key_jwt`` with a
    key; with a secret ``client_secret_basic`` unless the server lists only
    ``client_secret_post``; ``none`` for a public client."""
    if has_key:
        return "private_key_jwt"
    if has_secret:
        methods: Sequence[str] = metadata.token_endpoint_auth_methods_supported
        if methods and "client_secret_basic" not in methods and "client_secret_post" in methods:
            return "client_secret_post"
        return "client_secret_basic"
    return "none"


#: The JWK key type (RFC 7517 §4.1 ``kty``) of each asymmetric JWS algorithm a
#: ``private_key_jwt`` assertion may be signed with (RFC 7518 §3.1, RFC 8037 §3.1).
_KEY_TYPES: dict[str, Literal["RSA", "EC", "OKP"]] = {
    **{f"{family}{bits}": "RSA" for family in ("RS", "PS") for bits in (256, 384, 512)},
    **{f"ES{bits}": "EC" for bits in (256, 384, 512)},
    "ES256K": "EC",
    "EdDSA": "OKP",
    "Ed25519": "OKP",
}


def jwk_key_type(alg: str) -> Literal["RSA", "EC", "OKP"]:
    """The key type of the private key that signs a ``private_key_jwt`` client assertion
    (RFC 7523 §2.2) with JWS algorithm ``alg`` (RFC 7518 §3.1: ``RS*``/``PS*`` RSA, ``ES*``
    EC; RFC 8037 §3.1: ``EdDSA`` OKP).

    Raises:
        AuthorizationFailed: ``token`` for an algorithm that is no asymmetric signature.
    """
    kind = _KEY_TYPES.get(alg)
    if kind is None:
        raise AuthorizationFailed(
            "token", "the private_key_jwt algorithm is no asymmetric JWS algorithm (RS256, ES256, EdDSA...)"
        )
    return kind
