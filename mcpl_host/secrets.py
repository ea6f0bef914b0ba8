"""Which values are secrets, and how one is hidden: the one place that decides.

A secret must never reach an output: a log line, an error, the probe report or its ``--json``
document, a ``run`` line, ``describe()`` or a repr.

**What is a secret** (``server_secrets()``, per server, from its configuration):

1. *Explicit secrets*: the config's ``secrets``, each ``--secret KEY=VALUE`` of the command
   line, a WebSocket ``token`` and every header value, in each form a server could repeat
   it (``header_secrets``: without its scheme word, a Basic credential decoded, its
   password alone, each cookie value; docs/protocol.md L2a).
2. *Environment values whose name says so* (``is_secret_name``). The name is cut into
   segments (at ``_``, ``-``, ``.``, digits and camelCase humps, any case). It is a secret
   name when a segment is one of ``SECRET_NAME_WORDS`` (``GITHUB_TOKEN``, ``apiKey``,
   ``DB_PASSWORD``, ``SESSION_ID``...), or a name written as one word ends with one of
   ``SECRET_NAME_SUFFIXES`` (``PGPASSWORD``, ``githubtoken``), unless its last segment is
   one of ``PLAIN_NAME_QUALIFIERS``: ``KEY_FILE``, ``SESSION_TIMEOUT``, ``TOKEN_TYPE``,
   ``AUTH_URL`` name a setting *about* a secret. ``PWD`` is the working directory. Every other
   variable is a plain setting (``LOG_LEVEL=error``, ``MODE=tools``) and is never hidden.
3. *Credentials in arguments and URLs* (``argument_secrets``, ``url_secrets``): the value of
   ``NAME=VALUE`` and ``--name=VALUE`` with a secret name (``SLACK_TOKEN=...``,
   ``--api-key=...``); the argument after a flag with a secret name (``--token VALUE``,
   ``-password VALUE``; not after ``--no-auth``-style switches, nor when it starts with
   ``-``); the value of a header argument ``Name: VALUE`` with a secret name (``X-Api-Key:``,
   ``Authorization: Bearer ...``); and in any URL in an argument, an environment value or a
   WebSocket URL, the password of its user-info (``postgres://u:PASSWORD@db/x``; a user-info
   without a password unless it is a plain user name: ``https://TOKEN@host``) and every
   query parameter with a secret name (``token``, ``access_token``, ``api_key``, ``apikey``,
   ``key``, ``secret``, ``password``, ``sig``, ``signature``, ``auth``...).

A secret of ``MIN_SECRET_CHARS`` or more characters is then replaced wherever it appears
(``Redactor``), also written in pieces (JSON escapes, one line break between characters);
shorter ones would match ordinary text, and are hidden only where their position says what
they are (``redact_command``, ``redact_url``).

**Shapes hidden without configuration** (``mask_credentials``, applied by every
``Redactor.redact`` after the exact values, so log lines, stderr tails, errors and reports all
get it): GitHub tokens (``ghp_``, ``gho_``, ``ghu_``, ``ghs_``, ``ghr_``, ``github_pat_``),
Slack tokens (``xoxa-``, ``xoxb-``, ``xoxp-``, ``xoxr-``, ``xoxs-``, ``xoxe-``, ``xoxo-``,
``xapp-``), AWS access key ids (``AKIA``, ``ASIA``...), ``Bearer <token>``, JWTs (three base64url
segments starting ``eyJ``), the password of ``scheme://user:password@``, PEM private key blocks
(``-----BEGIN ... PRIVATE KEY-----``; over several stderr lines with ``KeyBlockMasker``),
OpenAI and Anthropic keys (``sk-...``, ``sk-proj-...``, ``sk-ant-...``), Stripe, Google API,
GitLab, npm and Hugging Face tokens, and ``name=value`` / ``"name": "value"`` /
``Header-Name: value`` and ``--name value`` where the name is a secret name (``password=...``,
``?access_token=...``, ``{"api_key": "..."}``, ``X-Api-Key: ...``, ``--token ...``).

**Speed.** Compiled regular expressions, each run only on text holding one of its trigger
strings. A secret in pieces costs a text with an escape or a line break one substitution
that joins them and one search; the pattern of pieces (compiled once per set of secrets)
runs only on a text where the joined search found a secret. Measured with ``scripts/bench_redaction.py`` on ten typical MCP server stderr lines (60-120
characters, three with a secret), on a shared 2-core machine: about 6 µs per line for
``Redactor.redact`` (five configured secrets plus every shape), 8-12 µs for the whole
``log_value``; 2-14 ms for a hostile 64 KB line built to make an expression backtrack (each
pattern is linear: 60 KB of ``sk-`` took 3.5 s before the starts were anchored). The
``detect-secrets`` library (1.5) takes about 470 µs per line through its ad hoc
``scan_line`` and 80 µs calling its 27 plugins directly without its filters; it only finds
(masking would come on top), flags every one of the ten lines (high-entropy heuristics) and
misses the ``Bearer`` token. So the log path uses the expressions here.

References: URL user-info and query (RFC 3986 §3.2.1, §3.4), Bearer tokens (RFC 6750 §2.1),
JWTs (RFC 7519 §3), PEM blocks (RFC 7468 §2).

Nothing here raises on any text (a ``str``, lone surrogates included).
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import quote, unquote, unquote_plus, urlsplit, urlunsplit

__all__ = [
    "MIN_SECRET_CHARS",
    "PLAIN_NAME_QUALIFIERS",
    "REDACTED",
    "SECRET_NAME_SUFFIXES",
    "SECRET_NAME_WORDS",
    "KeyBlockMasker",
    "Redactor",
    "argument_secrets",
    "env_secrets",
    "header_secrets",
    "is_credential_header",
    "is_secret_name",
    "mask_credentials",
    "redact_command",
    "redact_url",
    "server_secrets",
    "shown_env",
    "url_secrets",
]

#: What a secret becomes.
REDACTED = "[redacted]"
#: Secrets shorter than this are not replaced wherever they appear (too likely to match
#: ordinary text); ``redact_command`` and ``redact_url`` still hide them by position.
MIN_SECRET_CHARS = 4

#: Name segments (lower case) that make a name a secret name.
SECRET_NAME_WORDS = frozenset({
    "token", "tokens", "key", "keys", "apikey", "apikeys", "secret", "secrets",
    "password", "passwords", "passwd", "pass", "pwd", "passphrase", "pat",
    "auth", "authorization", "credential", "credentials", "creds", "private",
    "session", "cookie", "cookies", "bearer", "jwt", "sig", "signature", "salt", "dsn",
})  # fmt: skip
#: Endings that make a one-word segment a secret name (``PGPASSWORD``, ``githubtoken``).
SECRET_NAME_SUFFIXES = (
    "token", "secret", "password", "passwd", "passphrase", "apikey", "secretkey",
    "accesskey", "privatekey", "credential", "credentials",
)  # fmt: skip
#: A last segment that makes a name a setting about a secret, not the secret.
PLAIN_NAME_QUALIFIERS = frozenset({
    "file", "files", "filename", "path", "dir", "directory", "sock", "socket", "url", "uri",
    "endpoint", "host", "hostname", "port", "timeout", "ttl", "expiry", "expires", "lifetime",
    "length", "len", "size", "count", "limit", "enabled", "disabled", "required", "type",
    "mode", "level", "name", "format", "version", "prefix", "algorithm", "alg", "provider",
    "method", "scheme", "issuer", "audience", "scope", "scopes",
})  # fmt: skip
#: Environment variables that are never secrets whatever their name says.
PLAIN_ENV_NAMES = frozenset({"PWD"})
# First segments of switches that take no value (``--no-auth``, ``--use-session``).
_SWITCH_PREFIXES = frozenset({
    "no", "disable", "enable", "skip", "without", "with", "use", "require", "allow",
    "insecure", "ignore", "show", "print", "list", "generate",
})  # fmt: skip
# HTTP header names that hold a credential although they have no hyphen.
_HEADER_WORDS = frozenset({"authorization", "cookie"})

_SEGMENT = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+")
_ASSIGNMENT = re.compile(r"(-{0,2})([A-Za-z_][A-Za-z0-9_.-]*)=(.+)", re.S)
_FLAG = re.compile(r"-{1,2}([A-Za-z][A-Za-z0-9_.-]+)")
_AUTH_SCHEME = r"(?i:(?:bearer|basic|digest|token|negotiate|ntlm)[ \t]+)"
_HEADER_ARGUMENT = re.compile(rf"([A-Za-z][A-Za-z0-9-]*):[ \t]*({_AUTH_SCHEME}?)(.+)", re.S)
_URL = re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>]+")
# A user-info without a password that is a user name (``git@``, ``postgres@``), not a token.
_USER_NAME = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")

# Well-known shapes (see the module docstring): each pattern runs only on text that holds one
# of its trigger strings (lower case), so a line without any costs a few substring searches.
# Groups named "keep" hold the context kept before the REDACTED. Every pattern starts only
# where a run of its characters starts (a lookbehind, not \b) and bounds what it scans from
# a start, so the time is linear in the text, whatever a server sends (scripts/bench_redaction.py).
_SHAPE_RULES: tuple[tuple[tuple[str, ...], re.Pattern[str]], ...] = tuple(
    (triggers, re.compile(pattern))
    for triggers, pattern in (
        (
            ("-----begin",),
            r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?s:.*?)"
            r"(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
        ),
        (
            ("://",),
            r"(?P<keep>(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{0,31}://[^\s:/?#@\"'<>]{0,256}:)"
            r"[^\s/?#\"'<>]{0,1023}[^\s/?#\"'<>@](?=@)",
        ),
        (
            ("bearer",),
            r"(?P<keep>(?<![A-Za-z0-9_])(?i:bearer)[ \t]{1,16})"
            # A token68 (RFC 6750 §2.1, RFC 7235 §2.1) ends the credentials; an auth-param
            # (``resource_metadata="..."`` in a challenge) is not a token.
            r"(?![a-z]{1,4096}(?![A-Za-z0-9._~+/=-]))[A-Za-z0-9._~+/=-]{8,}(?![A-Za-z0-9._~+/=\"-])",
        ),
        (
            ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
            r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",
        ),
        (("xox", "xapp-"), r"(?<![A-Za-z0-9-])(?:xox[abposre]|xapp-[0-9])-[A-Za-z0-9-]{10,}"),
        (
            ("akia", "asia", "abia", "acca"),
            r"(?<![A-Za-z0-9])(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Za-z0-9])",
        ),
        (
            ("sk-",),
            r"(?<![A-Za-z0-9_-])sk-(?:ant-|proj-|svcacct-|admin-)?"
            r"(?=[A-Za-z_-]{0,64}[0-9])[A-Za-z0-9_-]{20,}",
        ),
        (("sk_", "rk_"), r"(?<![A-Za-z0-9_])[rs]k_(?:live|test)_[A-Za-z0-9]{16,}"),
        (("aiza",), r"(?<![A-Za-z0-9_-])AIza[0-9A-Za-z_-]{35}"),
        (("glpat-",), r"(?<![A-Za-z0-9_-])glpat-[A-Za-z0-9_-]{20,}"),
        (("npm_",), r"(?<![A-Za-z0-9_])npm_[A-Za-z0-9]{36}"),
        (("hf_",), r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{30,}"),
        (("eyj",), r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"),
    )
)
# Every shape's triggers in one tuple: text holding none of them (most text) skips the
# rules in one pass, without a search per rule (``mask_credentials``).
_SHAPE_TRIGGERS = tuple(trigger for triggers, _ in _SHAPE_RULES for trigger in triggers)
# Substrings (lower case) without which no name is a secret name: gates the name=value pass.
_NAME_TRIGGERS = (
    "token", "key", "secret", "pass", "pwd", "auth", "cred", "private", "session", "cookie",
    "bearer", "jwt", "sig", "salt", "dsn", "pat",
)  # fmt: skip
# name=value, "name": "value", 'name': 'value', Header-Name: value (the callback checks the name).
_NAMED = re.compile(
    r"(?<![A-Za-z0-9_.-])(?P<q>[\"']?)-{0,2}(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)(?P=q)"
    r"(?P<sep>[ \t]*[=:][ \t]*)"
    rf"(?P<scheme>{_AUTH_SCHEME}?)"
    r"(?P<value>\"(?:[^\"\\]|\\.){0,4096}\"|'[^'\n]{0,4096}'|[^\s&\"'<>,;)}\]]+)"
)
# --name VALUE / -name VALUE in text (a command line echoed on stderr); the callback checks
# the name and that it is not a switch.
_FLAG_VALUE = re.compile(
    r"(?<![^\s\"'])(?P<flag>--?(?P<name>[A-Za-z][A-Za-z0-9_.-]+)[ \t]+)"
    r"(?P<value>\"[^\"\n]{0,4096}\"|'[^'\n]{0,4096}'|[^\s\"'-][^\s\"']*)"
)
_PEM_BEGIN = re.compile(r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
# A line of a PEM body: base64, an armor header (Proc-Type:, DEK-Info:, Comment:...), or blank.
_PEM_BODY = re.compile(r"[ \t]*(?:[A-Za-z0-9+/=]{1,100}|[A-Za-z-]+:.*|=[A-Za-z0-9+/=]{1,8})?[ \t]*")


def is_secret_name(name: str) -> bool:
    """Whether a variable, parameter, flag or header name says that its value is a secret
    (the rule is in the module docstring). Case does not matter."""
    return _is_secret_name(name) if len(name) <= _CACHED_NAME_CHARS else _decide_name(name)


# Names up to this long are remembered (a server's text repeats the same few names).
_CACHED_NAME_CHARS = 64


def _decide_name(name: str) -> bool:
    segments = [segment.lower() for segment in _SEGMENT.findall(name)]
    if not segments or (len(segments) > 1 and segments[-1] in PLAIN_NAME_QUALIFIERS):
        return False
    return any(s in SECRET_NAME_WORDS or s.endswith(SECRET_NAME_SUFFIXES) for s in segments)


_is_secret_name = functools.lru_cache(maxsize=1024)(_decide_name)


def _is_switch(name: str) -> bool:
    first = _SEGMENT.findall(name)[:1]
    return bool(first) and first[0].lower() in _SWITCH_PREFIXES


def _userinfo_secret(userinfo: str) -> str:
    """The secret part of a URL's user-info: the password, or the whole user-info when it
    is not a plain user name (a token used as the user: ``https://TOKEN@host``)."""
    user, colon, password = userinfo.partition(":")
    if colon:
        return password
    return "" if _USER_NAME.fullmatch(user) else user


def url_secrets(text: str) -> list[str]:
    """The credentials of every URL in ``text``: user-info passwords (or a user-info that is
    not a plain user name) and the values of query parameters and fragment ``name=value``
    parts with a secret name, as written and decoded."""
    found: list[str] = []
    for match in _URL.finditer(text):
        try:
            parts = urlsplit(match.group())
        except ValueError:
            continue
        userinfo, at, _ = parts.netloc.rpartition("@")
        secret = _userinfo_secret(userinfo) if at else ""
        found += [secret, unquote(secret)]
        for piece in (*parts.query.split("&"), *parts.fragment.split("&")):
            name, eq, value = piece.partition("=")
            if eq and value and is_secret_name(unquote_plus(name)):
                found += [value, unquote_plus(value)]
    return [value for value in dict.fromkeys(found) if value]


def env_secrets(env: Mapping[str, str]) -> list[str]:
    """The secrets in an environment: values of secret names (``is_secret_name``), and the
    credentials of URLs in any value (``url_secrets``)."""
    found = [value for name, value in env.items() if name not in PLAIN_ENV_NAMES and is_secret_name(name)]
    found += [secret for value in env.values() for secret in url_secrets(value)]
    return [value for value in dict.fromkeys(found) if value]


def _argument_positions(args: Sequence[str]) -> dict[int, tuple[str, str]]:
    """Index -> (the part kept, the secret) of each argument that holds a secret by its
    position; the part kept is what ``redact_command`` shows before ``REDACTED``."""
    found: dict[int, tuple[str, str]] = {}
    for index, arg in enumerate(args):
        if index in found:
            continue
        assignment = _ASSIGNMENT.fullmatch(arg)
        if assignment is not None:
            if is_secret_name(assignment[2]):
                found[index] = (f"{assignment[1]}{assignment[2]}=", assignment[3])
            continue
        header = _HEADER_ARGUMENT.fullmatch(arg)
        if header is not None and not header[3].startswith("//"):
            if is_secret_name(header[1]):
                found[index] = (arg[: header.start(3)], header[3])
            continue
        flag = _FLAG.fullmatch(arg)
        following = args[index + 1] if index + 1 < len(args) else None
        if (
            flag is not None
            and following
            and not following.startswith("-")
            and is_secret_name(flag[1])
            and not _is_switch(flag[1])
        ):
            found[index + 1] = ("", following)
    return found


def argument_secrets(args: Sequence[str]) -> list[str]:
    """The secrets in a command's arguments (the forms are in the module docstring)."""
    found = [secret for _, secret in _argument_positions(args).values()]
    found += [secret for arg in args for secret in url_secrets(arg)]
    return [value for value in dict.fromkeys(found) if value]


# An auth-scheme (RFC 9110 §11.1: a token) and the credentials after it (§11.4).
_SCHEMED = re.compile(r"([!#$%&'*+.^_`|~0-9A-Za-z-]+)[ \t]+(\S.*?)[ \t]*", re.S)
# Header names that carry a credential although no segment says so.
_CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie"})


def is_credential_header(name: str) -> bool:
    """Whether a header name says that its value is a credential (``Authorization``,
    ``Proxy-Authorization``, ``Cookie``, and every secret name: ``X-Api-Key``,
    ``X-Auth-Token``)."""
    return name.lower() in _CREDENTIAL_HEADERS or is_secret_name(name)


def _basic_credentials(token68: str) -> list[str]:
    """``user-id:password`` and the password of a Basic token68 (RFC 7617 §2), when it is
    base64 of UTF-8 (or ISO-8859-1) text; nothing otherwise. A user-id alone is not a
    secret."""
    try:
        raw = base64.b64decode(token68 + "=" * (-len(token68) % 4), validate=True)
    except (binascii.Error, ValueError):
        return []
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError:
        decoded = raw.decode("latin-1")
    if not decoded.isprintable() or ":" not in decoded:
        return []
    return [decoded, decoded.partition(":")[2]]


def header_secrets(name: str, value: object) -> list[str]:
    """The secrets of one configured header (every header value is a secret, whatever its
    name), in every form a server could repeat it: the value; for a credential header
    (``is_credential_header``) or a value that starts with a known auth-scheme (``Bearer``,
    ``Basic``, ``Token``...), the credentials without the scheme word (RFC 9110 §11.4:
    ``Bearer T`` -> ``T``); for ``Basic``, the decoded ``user-id:password`` and the password
    alone (RFC 7617 §2); for ``Cookie``, each cookie's value (RFC 6265 §4.2.1); and each of
    these percent-encoded. Which of them are hidden wherever they appear is the
    ``MIN_SECRET_CHARS`` rule of ``Redactor``."""
    if not isinstance(value, str):
        return []
    found = [value]
    schemed = _SCHEMED.fullmatch(value)
    if schemed is not None and (is_credential_header(name) or re.fullmatch(_AUTH_SCHEME, schemed[1] + " ")):
        found.append(schemed[2])
        if schemed[1].lower() == "basic":
            found += _basic_credentials(schemed[2])
    if name.lower() in ("cookie", "set-cookie"):
        found += [part.partition("=")[2].strip().strip('"') for part in value.split(";")]
    found += [quote(form, safe="") for form in found]
    return [form for form in dict.fromkeys(found) if form]


def server_secrets(
    *,
    env: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
    url: str | None = None,
    token: str | None = None,
    headers: Mapping[str, str] | None = None,
    explicit: Iterable[str] = (),
) -> tuple[str, ...]:
    """Every secret of one server's configuration, once each, in this order: environment
    (``env_secrets``), arguments (``argument_secrets``), URL (``url_secrets``), headers
    (``header_secrets``: each value with and without its scheme word, a Basic credential
    decoded), the token (as given and percent-encoded), then ``explicit``. Empty values and
    values that are not strings are left out."""
    found: list[object] = [*env_secrets(env or {}), *argument_secrets(args)]
    found += url_secrets(url) if url else []
    found += [form for name, value in (headers or {}).items() for form in header_secrets(name, value)]
    if isinstance(token, str) and token:
        found += [token, quote(token, safe="")]
    found += list(explicit)
    return tuple(dict.fromkeys(value for value in found if isinstance(value, str) and value))


# --- hiding ---------------------------------------------------------------------------------


def _shape(match: re.Match[str]) -> str:
    keep = match.groupdict().get("keep")
    return keep + REDACTED if keep else REDACTED


def _named(match: re.Match[str]) -> str:
    name, quote_mark, value = match["name"], match["q"], match["value"]
    start = match.start("value") + (value[0] in "\"'")
    if match.string.startswith(REDACTED, start):
        return match.group()  # already hidden (a shape, or a configured secret)
    if ":" in match["sep"] and not quote_mark and "-" not in name and name.lower() not in _HEADER_WORDS:
        return match.group()  # "word: text" is prose; only header names take this form
    if not is_secret_name(name):
        return match.group()
    shown = value[0] + REDACTED + value[0] if value[0] in "\"'" else REDACTED
    return match.group()[: match.start("value") - match.start()] + shown


def _flag_value(match: re.Match[str]) -> str:
    name, value = match["name"], match["value"]
    if value.lstrip("\"'").startswith(REDACTED) or not is_secret_name(name) or _is_switch(name):
        return match.group()
    return match["flag"] + (value[0] + REDACTED + value[0] if value[0] in "\"'" else REDACTED)


def mask_credentials(text: str) -> str:
    """``text`` with every well-known credential shape (module docstring) replaced by
    ``REDACTED``, keeping what says what it was (``Bearer ``, ``scheme://user:``,
    ``password=``). Never raises."""
    lower = text.lower()
    if any(trigger in lower for trigger in _SHAPE_TRIGGERS):
        for triggers, pattern in _SHAPE_RULES:
            if any(trigger in lower for trigger in triggers):
                text = pattern.sub(_shape, text)
    if any(trigger in lower for trigger in _NAME_TRIGGERS):
        text = _FLAG_VALUE.sub(_flag_value, _NAMED.sub(_named, text))
    return text


class Redactor:
    """Hides a server's secrets: ``redact(text)`` replaces each configured secret of
    ``MIN_SECRET_CHARS`` or more characters (and its JSON-escaped forms, so a secret inside
    a rendered JSON value is caught), longest first, then every well-known shape
    (``mask_credentials``). A ``Redactor()`` with no secrets still masks the shapes.

    Built once per connection, normally from ``server_secrets()``.
    """

    __slots__ = ("_exact", "_kept", "_loose")

    def __init__(self, secrets: Iterable[object] = ()) -> None:
        self._kept: set[str] = set()
        self._compile(secrets)

    def add(self, *secrets: object) -> None:
        """Hide ``secrets`` too from now on: a credential obtained while the connection runs
        (an OAuth access or refresh token, a client secret, a PKCE code verifier;
        ``mcpl_host.auth``), registered the moment it is obtained. Never raises."""
        fresh = [
            s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET_CHARS and s not in self._kept
        ]
        if fresh:
            self._compile(fresh)

    def _compile(self, secrets: Iterable[object]) -> None:
        kept = set(self._kept)
        for secret in secrets:
            if isinstance(secret, str) and len(secret) >= MIN_SECRET_CHARS:
                kept.add(secret)
        forms: set[str] = set()
        for secret in kept:
            forms.add(secret)
            forms.add(json.dumps(secret)[1:-1])
            forms.add(json.dumps(secret, ensure_ascii=False)[1:-1])
        ordered = sorted(forms, key=len, reverse=True)  # longest first: no partial leaks
        self._exact = re.compile("|".join(map(re.escape, ordered))) if ordered else None
        self._kept = kept
        # Compiled on first use: most texts hold no escape nor line break.
        self._loose: re.Pattern[str] | tuple[str, ...] | None = (
            tuple(sorted(kept, key=len, reverse=True)) if kept else None
        )

    def __repr__(self) -> str:
        return f"<Redactor secrets={'yes' if self._exact is not None else 'none'}>"

    def redact(self, text: str) -> str:
        """``text`` with every secret and every well-known credential shape replaced by
        ``REDACTED``. Never raises."""
        if self._exact is not None:
            text = self._exact.sub(REDACTED, text)
            if (
                self._loose is not None
                and any(mark in text for mark in _LOOSE_TRIGGERS)
                and self._exact.search(_PIECES.sub(_joined, text)) is not None
            ):
                # A secret is there in pieces (rare): find where, and hide each.
                if isinstance(self._loose, tuple):
                    self._loose = _loose_regex(self._loose)
                text = self._loose.sub(REDACTED, text)
        return mask_credentials(text)


# What joins the pieces of a secret: a \\u escape (a surrogate pair first), a short JSON
# escape, a line break (raw or escaped). ``_joined`` gives what each stands for; a secret
# found in the joined text is then looked for in pieces (``_loose_regex``), so text without
# one costs a C-speed substitution and one search.
_PIECES = re.compile(
    r"\\u([dD][89abAB][0-9a-fA-F]{2})\\u([dD][c-fC-F][0-9a-fA-F]{2})|\\u([0-9a-fA-F]{4})"
    r"|\\r\\n|\\[rn]|\r\n|[\r\n]|\\([\\/\"bft])"
)
_SHORT_ESCAPES = {"\\": "\\", "/": "/", '"': '"', "b": "\b", "f": "\f", "t": "\t"}


def _joined(match: re.Match[str]) -> str:
    high, low, unit, short = match.groups()
    if high is not None:
        return chr(0x10000 + ((int(high, 16) - 0xD800) << 10) + int(low, 16) - 0xDC00)
    if unit is not None:
        return chr(int(unit, 16))
    return _SHORT_ESCAPES[short] if short is not None else ""


# Text that may hold a secret written in pieces: an escape, or a line break.
_LOOSE_TRIGGERS = ("\\", "\n", "\r")
# What may cut a secret in two: a line break, raw or escaped as in JSON.
_LINE_BREAK = r"(?:\r\n|[\r\n]|\\r\\n|\\[rn])?"


# A hex digit of a \\u escape, in either case.
_HEX_DIGIT = {
    digit: f"[{digit}{digit.upper()}]" if digit.isalpha() else digit for digit in "0123456789abcdef"
}


def _escapes(char: str) -> list[str]:
    """Every way JSON (RFC 8259 §7) can write ``char``: as it is, its short escape, its
    ``\\uXXXX`` escape (a surrogate pair past U+FFFF; hex digits in either case)."""
    ways = [re.escape(char), re.escape(json.dumps(char)[1:-1])]
    if char == "/":
        ways.append(re.escape("\\/"))
    units = char.encode("utf-16-be")
    hexes = [units[i : i + 2].hex() for i in range(0, len(units), 2)]
    ways.append("".join(r"\\u" + "".join(_HEX_DIGIT[digit] for digit in unit) for unit in hexes))
    return list(dict.fromkeys(ways))


@functools.lru_cache(maxsize=64)
def _loose_regex(secrets: tuple[str, ...]) -> re.Pattern[str]:
    """One pattern for every secret (longest first) written in pieces; remembered, since
    the connections of one server share their secrets and compiling costs about 3 ms a
    secret."""
    return re.compile("|".join(map(_loose_pattern, secrets)))


def _loose_pattern(secret: str) -> str:
    """A pattern for ``secret`` written in pieces: each character as JSON may write it
    (``_escapes``), with at most one line break between two characters. Linear: each
    character is a fixed alternation, each break optional and fixed."""
    return _LINE_BREAK.join(f"(?:{'|'.join(_escapes(char))})" for char in secret)


class KeyBlockMasker:
    """Hides the body of a PEM private key block that a server prints over several lines
    (its stderr, one line at a time): after a line that opens a block (and does not close
    it), each following line of key material (base64, armor headers, blank) becomes
    ``REDACTED``, up to and including the ``-----END ...-----`` line. A line that is not key
    material ends the block, so a block that never ends hides nothing else. The opening line
    itself is left to ``Redactor.redact`` (which hides it)."""

    __slots__ = ("_inside",)

    def __init__(self) -> None:
        self._inside = False

    def line(self, text: str) -> str:
        """The line to show instead of ``text``."""
        if self._inside:
            if _PEM_END.search(text):
                self._inside = False
                return REDACTED
            if _PEM_BODY.fullmatch(text):
                return REDACTED
            self._inside = False
            return text
        begin = _PEM_BEGIN.search(text)
        if begin is not None and not _PEM_END.search(text, begin.end()):
            self._inside = True
        return text


def _redact_pairs(text: str) -> str:
    pieces: list[str] = []
    for piece in text.split("&"):
        name, eq, value = piece.partition("=")
        pieces.append(f"{name}={REDACTED}" if eq and value and is_secret_name(unquote_plus(name)) else piece)
    return "&".join(pieces)


def redact_url(url: str) -> str:
    """``url`` as it may be shown: the password of its user-info (or a user-info that is not
    a plain user name) and the value of every
    query parameter (and fragment ``name=value`` part) with a secret name become
    ``REDACTED``, names percent-encoded or not; the rest is kept as written, then
    ``mask_credentials`` applies. Never raises (text that is not a URL is only masked)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return mask_credentials(url)
    netloc = parts.netloc
    userinfo, at, hostport = netloc.rpartition("@")
    if at and _userinfo_secret(userinfo):
        user, colon, _ = userinfo.partition(":")
        netloc = f"{user}:{REDACTED}@{hostport}" if colon else f"{REDACTED}@{hostport}"
    shown = urlunsplit(
        (parts.scheme, netloc, parts.path, _redact_pairs(parts.query), _redact_pairs(parts.fragment))
    )
    if url.endswith("?") and not parts.query:
        shown += "?"
    if parts.scheme:  # urlunsplit lowered it: keep it as written (``MCPL://``, MCPL §18.4)
        shown = url[: len(parts.scheme)] + shown[len(parts.scheme) :]
    return mask_credentials(shown)


def redact_command(argv: Sequence[str], redactor: Redactor | None = None) -> list[str]:
    """A command line as it may be shown: each argument that holds a secret by its position
    (``argument_secrets``) shows only its name, whatever the secret's length
    (``SLACK_TOKEN=[redacted]``, ``--token [redacted]``), URLs go through ``redact_url``,
    and every argument through ``redactor`` (default: the well-known shapes only)."""
    redactor = redactor or _SHAPES_ONLY
    positions = _argument_positions(argv)
    shown: list[str] = []
    for index, arg in enumerate(argv):
        if index in positions:
            arg = positions[index][0] + REDACTED
        else:
            arg = _URL.sub(lambda match: redact_url(match.group()), arg)
        shown.append(redactor.redact(arg))
    return shown


def shown_env(env: Mapping[str, str]) -> dict[str, str]:
    """An environment as it may be shown: the values of secret names are ``REDACTED``, the
    others are kept (with the credentials of any URL in them hidden)."""
    return {
        name: REDACTED
        if name not in PLAIN_ENV_NAMES and is_secret_name(name)
        else _URL.sub(lambda match: redact_url(match.group()), value)
        for name, value in env.items()
    }


_SHAPES_ONLY = Redactor()
