"""``mcpl-host check``: the conformance smoke test a server author runs in CI.

Rules of this module:

- It targets one server, as ``probe`` does: a command after ``--`` (default: the bundled demo
  server), ``--ws URL``, ``--url URL`` (HTTP) or ``--config FILE [--server NAME]``; two targets,
  or an option that does not apply to the target, is a usage error. The target becomes a
  ``ServerConfig`` and a ``runner.Target`` whose ``hosted()`` builds a ``HostedServer`` of
  it, with the policy that grants everything advertised. The run is bounded by that
  ``ServerConfig``'s ``Limits``: a config entry's ``limits`` and ``timeouts`` hold (e.g.
  ``checkValidationTimeoutSeconds``), but for the handshake, request and close bounds, which
  are always the command line's (``--timeout``, ``--request-timeout``, ``--shutdown-timeout``).
- ``--only`` / ``--skip`` select checks by id or category glob (``registry.select``); a pattern
  that matches no check is a usage error. ``--expected-failures FILE`` names ids expected to
  fail (``registry.parse_expected_failures``; an unknown id is a usage error).
- While the checks run, a progress line on stderr names the step (``mcpl_host.progress``:
  only when stderr is a terminal and without ``--json``; erased before the summary).
- Output: the terminal summary on stdout (``report.render_summary``), or with ``--json``
  exactly one JSON document on stdout (``report.schema.json``); ``--junit FILE`` also writes
  JUnit XML. Logs go to stderr (``--log-level``, default ``error``: the check provokes the
  library's warnings on purpose).
- Exit status: 0 every failure was expected and no expected failure is stale; 1 otherwise;
  2 usage errors (nothing is started); 130 interrupted by SIGINT, SIGTERM or SIGHUP (every
  server closed first, as on Ctrl-C; ``mcpl_host.signals``).
- Secrets never reach an output: the command shown goes through ``redact_command``, URLs
  through their ``shown_*``, the document through the server's ``Redactor``.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import sys
from pathlib import Path
from typing import Any, Literal

import anyio
import click
import orjson

from mcpl_host.check import registry
from mcpl_host.check.evidence import RunEvidence, as_object
from mcpl_host.check.report import build_document, junit_xml, render_summary
from mcpl_host.check.rules import evaluate
from mcpl_host.check.runner import GRANT_ALL, CheckOptions, StepReport, Target, run_checks
from mcpl_host.cli_auth import oauth_settings
from mcpl_host.cli_target import (
    EXIT_INTERRUPTED,
    LEVELS,
    EnvPair,
    HeaderPair,
    built_config,
    check_target,
    config_servers,
    demo_server_path,
    open_recorder,
    record_option,
)
from mcpl_host.config import HTTP_TRANSPORTS
from mcpl_host.hosted import HostedServer
from mcpl_host.limits import Limits
from mcpl_host.logging import configure_logging
from mcpl_host.mcpl.endpoint_uri import is_mcpl_uri
from mcpl_host.progress import progress
from mcpl_host.replay.load import load_script
from mcpl_host.replay.script import RecordingError, Script
from mcpl_host.report import ReportConsole, print_json, safe_text
from mcpl_host.secrets import Redactor
from mcpl_host.signals import close_on_signals
from mcpl_host.transports import process_tree

__all__ = ["check"]

#: A check failed (or an expected failure passed).
EXIT_FAILED = 1
_POSITIVE = click.FloatRange(min=0, min_open=True)
_NON_NEGATIVE = click.FloatRange(min=0)


def _calls(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    calls: dict[str, dict[str, Any]] = {}
    for item in value:
        name, sep, arguments = item.partition("=")
        if not name:
            raise click.BadParameter(f"expected NAME or NAME=JSON, not {item!r}", ctx, param)
        try:
            parsed = as_object(orjson.loads(arguments)) if sep else {}
        except orjson.JSONDecodeError:
            raise click.BadParameter(f"the arguments of {name!r} are not JSON", ctx, param) from None
        if parsed is None:
            raise click.BadParameter(f"the arguments of {name!r} must be a JSON object", ctx, param)
        calls[name] = parsed
    return calls


def _list_checks() -> None:
    for spec in registry.CHECKS:
        click.echo(f"{spec.id:30} {spec.category:10} {spec.title}")


def _expected(path: str | None) -> frozenset[str]:
    if path is None:
        return frozenset()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise click.BadParameter(f"cannot read {path}: {exc}", param_hint="--expected-failures") from None
    try:
        return registry.parse_expected_failures(text, path)
    except registry.ExpectedFailuresError as exc:
        raise click.BadParameter(str(exc), param_hint="--expected-failures") from None


def _against(path: str | None, server: str | None) -> Script | None:
    """The recorded server's script for ``--against`` (None without it); a file that is no
    recording, or a server it lacks, is a usage error."""
    if path is None:
        if server is not None:
            raise click.UsageError("--against-server needs --against FILE")
        return None
    try:
        return load_script(path, server)
    except RecordingError as exc:
        raise click.UsageError(f"--against {path}: {exc}") from None


@click.command(
    "check",
    context_settings={"max_content_width": 100},
    epilog="""\b
Examples:
  mcpl-host check                                   # the bundled demo MCPL server
  mcpl-host check -- python my_server.py
  mcpl-host check --junit report.xml --expected-failures known.txt -- node server.js
  mcpl-host check --only 'mcpl.*' --json -- python my_server.py
  mcpl-host check --ws ws://127.0.0.1:8765/mcpl
  mcpl-host check --list""",
)
@click.option(
    "--ws",
    "ws_url",
    metavar="URL",
    help="Check the WebSocket server at URL (ws://, wss://, or mcpl://: MCPL §18) instead of a command.",
)
@click.option("--url", "http_url", metavar="URL", help="Check the MCP server at URL over HTTP.")
@click.option(
    "--transport",
    "http_transport",
    type=click.Choice(["auto", "streamable-http", "sse"]),
    default="auto",
    show_default=True,
    help="With --url: the HTTP transport.",
)
@click.option(
    "--header",
    "http_headers",
    multiple=True,
    type=HeaderPair(),
    metavar="'NAME: VALUE'",
    help="With --url: a header on every request (repeatable; 'Name: Value' or Name=Value; a secret).",
)
@click.option(
    "--stored-auth-only",
    is_flag=True,
    help="A server behind OAuth: stored logins (mcpl-host login) and client credentials only, never a browser.",
)
@click.option("--client-id", "oauth_client_id", metavar="ID", help="With --url: the OAuth client id.")
@click.option(
    "--client-secret",
    "oauth_client_secret",
    envvar="MCPL_HOST_CLIENT_SECRET",
    metavar="SECRET",
    help="With --client-id: its secret, for the client credentials grant (default: $MCPL_HOST_CLIENT_SECRET).",
)
@click.option(
    "--private-key-jwt",
    "oauth_private_key",
    type=click.Path(dir_okay=False, exists=True),
    metavar="FILE",
    help="With --client-id: a PEM private key for private_key_jwt (RFC 7523).",
)
@click.option("--scope", "oauth_scope", metavar="SCOPES", help="With --url: the OAuth scopes to ask for.")
@click.option(
    "--token",
    envvar="MCPL_HOST_TOKEN",
    metavar="TOKEN",
    help="With --ws or --url: the credential (default: $MCPL_HOST_TOKEN).",
)
@click.option(
    "--token-in",
    type=click.Choice(["header", "query"]),
    default="header",
    show_default=True,
    help="With --ws: where the token goes.",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Check a server of this config file (--server NAME when it has several; auto: the first editor config found).",
)
@click.option(
    "--server",
    "server_name",
    metavar="NAME",
    help="With --config: the server to check (the only one when omitted).",
)
@click.option(
    "--env",
    "env",
    multiple=True,
    type=EnvPair(),
    metavar="KEY=VALUE",
    help="A variable of the server's environment (repeatable).",
)
@click.option(
    "--secret",
    "secrets",
    multiple=True,
    type=EnvPair(),
    metavar="KEY=VALUE",
    help="A secret to redact from all output (repeatable); with a command also set in its environment.",
)
@click.option("--inherit-env", is_flag=True, help="Pass this shell's whole environment to the server.")
@click.option("--cwd", type=click.Path(exists=True, file_okay=False), help="Working directory of the server.")
@click.option(
    "--only",
    multiple=True,
    metavar="PATTERN",
    help="Run only the checks whose id or category matches this glob (repeatable).",
)
@click.option(
    "--skip",
    multiple=True,
    metavar="PATTERN",
    help="Leave out the checks whose id or category matches this glob (repeatable).",
)
@click.option(
    "--expected-failures",
    "expected_file",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Check ids known to fail, one per line ('#' comments): the run passes when only they fail, and fails when one of them passes.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print one JSON document (report.schema.json) instead of the summary.",
)
@click.option(
    "--junit",
    "junit_file",
    type=click.Path(dir_okay=False, writable=True),
    metavar="FILE",
    help="Also write JUnit XML to FILE.",
)
@click.option(
    "--call",
    "calls",
    multiple=True,
    callback=_calls,
    metavar="NAME=JSON",
    help="Call tool NAME with these arguments to check its outputSchema (repeatable; read-only tools whose arguments can be chosen are called anyway).",
)
@click.option(
    "--timeout",
    type=_POSITIVE,
    default=10.0,
    show_default=True,
    help="Seconds to wait for the initialize answer.",
)
@click.option(
    "--request-timeout",
    type=_POSITIVE,
    default=5.0,
    show_default=True,
    help="Seconds to wait for each later answer.",
)
@click.option(
    "--probe-timeout",
    type=_POSITIVE,
    default=2.0,
    show_default=True,
    help="Seconds to wait for the answer to each raw JSON-RPC probe.",
)
@click.option(
    "--listen",
    "listen_seconds",
    type=_NON_NEGATIVE,
    default=2.0,
    show_default=True,
    help="Seconds to listen for what an MCPL server sends unasked (ends at its first push/event).",
)
@click.option(
    "--reduction-listen",
    "reduction_seconds",
    type=_NON_NEGATIVE,
    default=2.5,
    show_default=True,
    help="Seconds to listen after the reduction that revokes pushEvents.",
)
@click.option(
    "--shutdown-timeout",
    type=_POSITIVE,
    default=2.0,
    show_default=True,
    help="Seconds the server has to exit after its stdin closes, and after SIGTERM.",
)
@click.option(
    "--big-message-bytes",
    type=click.IntRange(min=1024, max=32 * 1024 * 1024),
    default=1024 * 1024,
    show_default=True,
    help="Size of the big-message probe.",
)
@click.option(
    "--log-level",
    type=click.Choice(LEVELS),
    default="error",
    show_default=True,
    help="Least level of log lines on stderr.",
)
@click.option(
    "--against",
    "against_file",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Compare the server with a recording (--record FILE): its initialize and the recorded requests asked again (check recording.same).",
)
@click.option(
    "--against-server",
    "against_server",
    metavar="NAME",
    help="With --against: the recorded server to compare with (needed when the recording holds several).",
)
@click.option("--list", "list_only", is_flag=True, help="List the checks (id, category, title) and exit.")
@record_option
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- COMMAND [ARG...]]")
@click.pass_context
def check(
    ctx: click.Context,
    /,
    ws_url: str | None,
    http_url: str | None,
    http_transport: Literal["auto", "streamable-http", "sse"],
    http_headers: tuple[tuple[str, str], ...],
    token: str | None,
    token_in: Literal["header", "query"],
    config_file: str | None,
    server_name: str | None,
    env: tuple[tuple[str, str], ...],
    secrets: tuple[tuple[str, str], ...],
    inherit_env: bool,
    cwd: str | None,
    only: tuple[str, ...],
    skip: tuple[str, ...],
    expected_file: str | None,
    as_json: bool,
    junit_file: str | None,
    calls: dict[str, dict[str, Any]],
    timeout: float,
    request_timeout: float,
    probe_timeout: float,
    listen_seconds: float,
    reduction_seconds: float,
    shutdown_timeout: float,
    big_message_bytes: int,
    log_level: str,
    against_file: str | None,
    against_server: str | None,
    list_only: bool,
    record: str | None,
    command: tuple[str, ...],
    **oauth_options: Any,
) -> None:
    """Check a server against MCP and MCPL the way a real host exercises it.

    Starts COMMAND (or dials --ws / --url, or starts --server NAME of --config FILE; with none
    of these, the bundled demo MCPL server), runs the handshake and the MCPL policy exchange
    through the library, listens, lists and calls; then opens a second session that speaks
    raw JSON-RPC (ping, an unknown method, an invalid request, id null, CRLF, a big message);
    then judges each check as passed, failed, warned or skipped. Every failure and warning
    names its reason, its evidence and the spec section; an MCPL deviation also says what a
    strict MCPL 0.5 host does with it and whether the 0.4 compatibility profile hosts the
    server anyway.

    \b
    Exit status:
      0    every failure was expected (--expected-failures) and none is stale
      1    a check failed, or an expected failure passed (a stale entry)
      2    usage error (nothing was started)
      130  interrupted (Ctrl-C, SIGTERM, SIGHUP); every server is closed first
    """
    if list_only:
        _list_checks()
        return
    check_target(ctx, ctx.params, command, many=False)
    specs, unmatched = registry.select(only, skip)
    if unmatched:
        raise click.UsageError(
            f"no check id or category matches {', '.join(repr(p) for p in unmatched)} (see --list)"
        )
    if not specs:
        raise click.UsageError("--only and --skip leave no check to run")
    expected = _expected(expected_file)
    against = _against(against_file, against_server)
    limits = Limits(
        handshake_timeout_seconds=timeout,
        request_timeout_seconds=request_timeout,
        close_grace_seconds=shutdown_timeout,
    )
    explicit_secrets = tuple(value for _, value in secrets if value)
    target, redactor, limits = _target(
        ctx,
        command=command,
        ws_url=ws_url,
        http_url=http_url,
        http_transport=http_transport,
        http_headers=dict(http_headers),
        token=token,
        token_in=token_in,
        config_file=config_file,
        server_name=server_name,
        env={**dict(env), **dict(secrets)},
        explicit_secrets=explicit_secrets,
        inherit_env=inherit_env,
        cwd=cwd,
        limits=limits,
        oauth_options=oauth_options,
    )
    recorder = open_recorder(ctx, record)
    if recorder is not None:  # the library's sessions are recorded (not the raw JSON-RPC probes)
        target = dataclasses.replace(target, hosted=functools.partial(target.hosted, record=recorder))
    options = CheckOptions(
        limits=limits,
        listen_seconds=listen_seconds,
        reduction_listen_seconds=reduction_seconds,
        probe_timeout_seconds=probe_timeout,
        big_message_bytes=big_message_bytes,
        calls=calls,
        against=against,
    )
    configure_logging(log_level, json_lines=as_json)
    steps = registry.steps_needed(specs, target.transport)
    owned = process_tree.supported() and process_tree.become_child_subreaper()
    started_at = (
        datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    )
    begin = datetime.datetime.now(datetime.timezone.utc)
    try:
        # On a terminal (never with --json nor in a pipe): what the run is doing, erased before
        # the summary.
        with progress("checking: starting", enabled=not as_json) as line:

            def say(what: str) -> None:
                line.update(f"checking: {what}… (Ctrl-C stops)")

            evidence, stopped_by = anyio.run(
                _run, target, options, steps, say if line.shown else None, backend="asyncio"
            )
    except KeyboardInterrupt:  # before the signal receiver was in place
        evidence, stopped_by = None, "SIGINT"
    if owned:
        process_tree.end_descendants()
    if evidence is None:
        click.echo(f"mcpl-host check: interrupted by {stopped_by}; every server was closed", err=True)
        ctx.exit(EXIT_INTERRUPTED)
    duration = (datetime.datetime.now(datetime.timezone.utc) - begin).total_seconds()
    results = registry.judge_expected(evaluate(evidence, specs, redactor), expected)
    status = registry.exit_status(results)
    doc = build_document(
        results,
        evidence,
        target=target.shown,
        started_at=started_at,
        duration_seconds=duration,
        exit_status=status,
        redactor=redactor,
    )
    if junit_file is not None:
        try:
            Path(junit_file).write_bytes(junit_xml(doc))
        except OSError as exc:
            click.echo(f"mcpl-host check: cannot write {junit_file}: {exc.strerror or exc}", err=True)
            status = EXIT_FAILED
    if as_json:
        print_json(doc)
    else:
        render_summary(ReportConsole(highlight=False), doc)
    ctx.exit(status)


async def _run(
    target: Target, options: CheckOptions, steps: frozenset[registry.Step], on_step: StepReport = None
) -> tuple[RunEvidence | None, str | None]:
    """The run, stopped by SIGINT, SIGTERM or SIGHUP as by Ctrl-C (``close_on_signals``:
    every session closes, bounded by its graces): (evidence, None), or (None, the signal).
    ``on_step``: told as each step starts (the progress line)."""
    evidence: RunEvidence | None = None
    async with close_on_signals() as stop:
        evidence = await run_checks(target, options, steps, on_step)
    return (evidence, None) if stop.reason is None else (None, stop.reason)


def _target(
    ctx: click.Context,
    *,
    command: tuple[str, ...],
    ws_url: str | None,
    http_url: str | None,
    http_transport: Literal["auto", "streamable-http", "sse"],
    http_headers: dict[str, str],
    token: str | None,
    token_in: Literal["header", "query"],
    config_file: str | None,
    server_name: str | None,
    env: dict[str, str],
    explicit_secrets: tuple[str, ...],
    inherit_env: bool,
    cwd: str | None,
    limits: Limits,
    oauth_options: dict[str, Any],
) -> tuple[Target, Redactor, Limits]:
    """The ``Target``, the redactor of what is shown about it, and the ``Limits`` of the run:
    ``limits`` (the command line's handshake, request and close bounds), or for ``--config``
    the server entry's own, those three bounds replaced by the command line's (usage errors:
    exit 2)."""
    common: dict[str, Any] = {"grant_policy": GRANT_ALL, "limits": limits, "secrets": explicit_secrets}
    if config_file is not None:
        chosen, config_file, server_name = config_servers(ctx, config_file, server_name)
        (server,) = chosen.values()
        server = dataclasses.replace(
            server,
            grant_policy=GRANT_ALL,
            limits=dataclasses.replace(
                server.limits,
                handshake_timeout_seconds=limits.handshake_timeout_seconds,
                request_timeout_seconds=limits.request_timeout_seconds,
                close_grace_seconds=limits.close_grace_seconds,
            ),
            secrets=(*server.secrets, *explicit_secrets),
        )
        shown = f"{config_file} server {server_name}"
    elif http_url is not None:
        settings = {"url": http_url, "headers": http_headers, "token": token}
        kind = "http" if http_transport == "auto" else http_transport
        # An mcpl:// URL is an MCPL server over WebSocket (MCPL §18.2).
        server = built_config(
            "--url", transport="websocket" if is_mcpl_uri(http_url) else kind, **settings, **common
        )
        shown = server.describe
    elif ws_url is not None:
        settings = {"url": ws_url, "token": token, "token_in": token_in}
        server = built_config("--ws", transport="websocket", **settings, **common)
        shown = server.describe
    else:
        argv = list(command) or [sys.executable, str(demo_server_path())]
        server = built_config(
            "command", name="" if command else "mcpl-demo", command=argv[0], args=tuple(argv[1:]),
            env=env, cwd=cwd, inherit_env=inherit_env, **common,
        )  # fmt: skip
        shown = safe_text(server.describe, max_chars=300)
    if server.transport in HTTP_TRANSPORTS:
        server = dataclasses.replace(server, oauth=oauth_settings(server.oauth, oauth_options))
    transport = (
        "stdio" if server.transport == "stdio" else "websocket" if server.transport == "websocket" else "http"
    )
    target = Target(functools.partial(HostedServer, server), transport, shown)
    return target, server.redactor(), server.limits
