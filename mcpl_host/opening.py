"""``Opening``: the opening of one connection, which settles the protocol era and then runs
the era's handshake, over the connection's ``request`` and ``notify``.

What is sent and how answers are read is decided elsewhere, by pure rules:
``mcpl_host.handshake`` (``initialize`` params, result validation, versions) and
``mcpl_host.stateless`` (the ``server/discover`` probe, what its answer means, when it is
skipped, the ``EraProbe`` record). This module does the exchange (docs/protocol.md H1-H7,
S1-S3a; MCP 2025-11-25, "Lifecycle"; MCP 2026-07-28, "Versioning and Compatibility"):

- ``protocol="handshake"``: ``initialize``, then ``notifications/initialized`` strictly
  next, sent in the read loop when the answer is read (H6).
- ``"auto"``: where the transport may carry MCP 2026-07-28, first a ``server/discover``
  probe (waiting at most ``limits.discover_timeout_seconds`` and half the deadline, never
  cancelled), falling back to ``initialize`` for a handshake-era server; an ``initialize``
  refused with ``-32022`` naming a stateless version is probed again at it, once. When the
  probe costs a stdio server its transport (S3a), the connection opens a new one
  (``Connection.reopen``), once, and ``initialize`` goes there; the loss is held meanwhile
  and never reported.
- ``"stateless"``: only ``server/discover``.
- One deadline, ``limits.handshake_timeout_seconds`` from entering the connection, covers
  everything, ``notifications/initialized`` included (H7).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mcpl_host.connection import ClientInfo, Connection
from mcpl_host.handshake import ServerInfo, initialize_params, read_initialize_result
from mcpl_host.jsonrpc.envelope import Response
from mcpl_host.jsonrpc.errors import (
    ConnectionLost,
    InitializeError,
    MCPLHostError,
    RemoteError,
    RemoteProtocolError,
    RequestTimeout,
    UnreadableAnswer,
    describe_seconds,
)
from mcpl_host.jsonrpc.values import is_object
from mcpl_host.logging import ServerValue, get_logger, log_value
from mcpl_host.stateless import (
    LATEST_STATELESS_VERSION,
    EraProbe,
    FallBack,
    ProtocolChoice,
    Retry,
    after_discover_error,
    after_discover_result,
    after_initialize_refusal,
    discover_params,
    stateless_capabilities,
)
from mcpl_host.transports.base import may_carry_stateless, starts_server

__all__ = ["Opening"]


def lost_phrase(lost: ConnectionLost) -> str:
    """How a transport ended, for the era line (no server text)."""
    if lost.exit_status is not None:
        return f"the server exited with status {lost.exit_status}"
    return "the server closed its output"


def lost_sentence(method: str, lost: ConnectionLost) -> str:
    """Why ``method`` got no answer: the transport's own sentence when it names the step that
    failed (an HTTP connect, TLS or status failure, ``ConnectionLost.step``: the server never
    went away, it was never reached or it refused), else that the server went away."""
    if lost.step is not None:
        return str(lost)
    return f"the server went away before answering {method} ({lost})"


def discover_refusal(exc: RemoteError) -> str:
    """What a refusal of ``server/discover`` was, for the era line (no server text)."""
    data = exc.data
    if is_object(data) and data.get("fromHost") is True:
        status = data.get("httpStatus")
        if isinstance(status, int) and not isinstance(status, bool):
            return f"HTTP {status} without a JSON-RPC answer"
        return "its HTTP answer ended without a JSON-RPC answer"
    return f"refused with error {exc.code}"


class Opening:
    """One connection's opening (module rules). Make it once the connection is entered,
    then ``await run()``; ``era_probe`` says afterwards what settled the era.

    ``mcpl_advertisement``: the host's ``experimental.mcpl`` (MCPL §5.2), or None to offer
    no MCPL; ``features``: the client feature capabilities served
    (``ClientFeatures.capabilities()``). ``on_opened`` is called with the server's info as
    soon as it is known and before the server may send anything else: in the handshake era
    in the read loop, before ``notifications/initialized`` goes out, so what the server
    sends after it meets the caller's state already set (the MCPL policy pending: MCPL
    §6.7). If it raises, the opening fails at once (``InitializeError``) and
    ``notifications/initialized`` is not sent. ``skip_probe``: why ``"auto"`` sends no
    probe this time (``stateless.probe_skipped``): ``initialize`` first, and a ``-32022``
    refusal of it naming a stateless version is probed at that version.
    """

    __slots__ = (
        "_advertisement",
        "_client",
        "_connection",
        "_features",
        "_log",
        "_on_opened",
        "_probe_timed_out",
        "_probing",
        "_protocol",
        "_restartable",
        "_restarted",
        "_skip_probe",
        "era_probe",
    )

    def __init__(
        self,
        connection: Connection,
        client: ClientInfo,
        mcpl_advertisement: dict[str, Any] | None,
        features: dict[str, Any] | None = None,
        *,
        protocol: ProtocolChoice = "handshake",
        on_opened: Callable[[ServerInfo], None] | None = None,
        skip_probe: str | None = None,
    ) -> None:
        self._connection = connection
        self._client = client
        self._advertisement = mcpl_advertisement
        self._features = features or {}
        self._protocol = protocol
        self._on_opened = on_opened
        self._skip_probe = skip_probe
        self._log = get_logger("mcpl_host.opening", server=connection.name)
        #: What settled the era (``stateless.EraProbe``), once ``run`` has decided it.
        self.era_probe: EraProbe | None = None
        self._probing = False  # a server/discover probe is sent
        self._restartable = False  # a transport the probe costs is opened again (S3a)
        self._probe_timed_out = False
        self._restarted = False

    async def run(self) -> ServerInfo:
        """Settle the era, then run its handshake; the server's info.

        Raises:
            InitializeError: refused (with ``code``, ``data``: a ``-32022`` keeps the
                server's ``supported`` list), no protocol version in common, the server went
                away (``exit_status``, ``stderr_tail``), or no answer before the deadline
                (saying what arrived instead: lines that were not JSON-RPC, with a sample; an
                answer whose id only looks like ours).
            ConnectionLost / ConnectionClosed / LocalProtocolError: the connection is not
                open (as ``Connection.request``).
        """
        connection, protocol = self._connection, self._protocol
        transport = connection.live_transport()
        carries = may_carry_stateless(transport)
        # S3a: stdio only; the HTTP transports read an answer to the probe that is no
        # JSON-RPC answer as a refusal themselves, and what still loses them there would
        # hold for initialize too.
        self._restartable = protocol == "auto" and starts_server(transport)
        self._probing = protocol != "handshake" and carries
        if protocol == "stateless" and not self._probing:
            raise self._failure("this transport does not carry the stateless MCP revision (2026-07-28)")
        if protocol == "handshake":
            self.era_probe = EraProbe(None, "not sent: the protocol is set to handshake")
        elif not carries:
            self.era_probe = EraProbe(None, "not sent: this transport does not carry MCP 2026-07-28")
        elif self._skip_probe is not None and protocol == "auto":
            self.era_probe = EraProbe(None, self._skip_probe)
            self._probing = False
        # Until initialize is answered, a loss that a restart answers is not reported.
        with connection.loss_held(self._probing and self._restartable):
            info = await self._settle()
        if info is not None:
            return info
        await self._initialized_taken()
        info = connection.server_info
        assert info is not None  # set by _initialize_answered before the waiter woke
        return info

    async def _settle(self) -> ServerInfo | None:
        """The probe (when sent), then ``initialize`` unless the probe settled the stateless
        era: that era's info, or None when ``initialize`` was answered."""
        if self._probing:
            verdict = await self._probe(LATEST_STATELESS_VERSION, retried=False)
            lost = self._connection.lost
            if self._restartable and lost is not None:
                # S3a: lost at the probe (before its answer, or right after it): never a
                # reason to lose the server; start it again and speak initialize.
                record = self.era_probe
                if record is not None and record.fallback is not None:  # answered, then lost
                    outcome = f"{record.outcome}, then {lost_phrase(lost)}"
                else:
                    outcome = record.outcome if record is not None else lost_phrase(lost)
                self.era_probe = EraProbe("server/discover", outcome, "initialize on a restarted server")
                await self._restart(lost)
            if isinstance(verdict, ServerInfo):
                return self._adopt(verdict)
            self._log.debug("speaking the handshake era", reason=verdict.reason)
        while True:
            try:
                settled = await self._initialize()
            except ConnectionLost as exc:  # H5: at once, with exit status and stderr tail
                if self._restartable and self._probing and not self._restarted:
                    # S3a: the probe cost the server its transport after all: it read the
                    # probe after its window, or answered it and then went away.
                    before = self.era_probe.outcome if self.era_probe is not None else "no answer"
                    self.era_probe = EraProbe(
                        "server/discover",
                        f"{before}, then {lost_phrase(exc)}",
                        "initialize on a restarted server",
                    )
                    await self._restart(exc)
                    continue
                raise self._failure(
                    lost_sentence("initialize", exc),
                    exit_status=exc.exit_status,
                    stderr_tail=exc.stderr_tail or self._connection.stderr_tail,
                ) from None
            return self._adopt(settled) if settled is not None else None

    # --- server/discover -------------------------------------------------------------------

    async def _probe(self, version: str, *, retried: bool) -> ServerInfo | FallBack:
        """One ``server/discover`` at ``version``: the stateless era's info, or why the
        handshake era follows (``era_probe`` says it)."""
        connection, protocol = self._connection, self._protocol
        timeout = connection.limits.handshake_timeout_seconds
        # S3: a silent server costs at most the probe window, and initialize keeps at least
        # half of the deadline.
        remaining = connection.handshake_remaining()
        window = (
            remaining
            if protocol == "stateless"
            else min(connection.limits.discover_timeout_seconds, timeout / 2, remaining)
        )
        client = {"name": self._client.name, "version": self._client.version}
        params = discover_params(version, client, stateless_capabilities(self._features))
        try:
            result = await connection.request_within("server/discover", params, window=window)
        except RemoteError as exc:
            return await self._probe_refused(exc, retried=retried)
        except (RemoteProtocolError, UnreadableAnswer) as exc:
            if protocol == "stateless":
                raise self._failure(f"the server's answer to server/discover is malformed: {exc}") from None
            self.era_probe = EraProbe("server/discover", "its answer could not be read", "initialize")
            return FallBack(str(exc))
        except ConnectionLost as exc:
            if protocol == "stateless" or not self._restartable:
                raise self._failure(
                    lost_sentence("server/discover", exc),
                    exit_status=exc.exit_status,
                    stderr_tail=exc.stderr_tail or connection.stderr_tail,
                ) from None
            # S3a: the probe cost the server its transport; the caller starts it again.
            self.era_probe = EraProbe("server/discover", f"{lost_phrase(exc)} before answering")
            return FallBack(lost_sentence("server/discover", exc))
        if result is None:
            self._probe_timed_out = True
            if protocol == "stateless":
                raise self._failure(
                    f"the server did not answer server/discover within {describe_seconds(timeout)}"
                )
            self.era_probe = EraProbe(
                "server/discover", f"no answer within {describe_seconds(window)}", "initialize"
            )
            return FallBack("no answer to server/discover within its window")
        verdict = after_discover_result(
            result, offers_mcpl=self._advertisement is not None, redactor=connection.redactor
        )
        if isinstance(verdict, FallBack):
            if protocol == "stateless":
                raise self._failure(f"the server cannot be spoken to statelessly: {verdict.reason}")
            self.era_probe = EraProbe("server/discover", verdict.reason, "initialize")
        else:
            self.era_probe = EraProbe("server/discover", f"answered: stateless {verdict.protocol_version}")
        return verdict

    async def _probe_refused(self, exc: RemoteError, *, retried: bool) -> ServerInfo | FallBack:
        """The server answered ``server/discover`` with an error (``stateless`` decides)."""
        redactor = self._connection.redactor
        refusal = after_discover_error(exc.code, exc.message, exc.data, retried=retried, redactor=redactor)
        if isinstance(refusal, InitializeError):
            raise self._failure(refusal.message, code=refusal.code, data=refusal.data) from None
        if isinstance(refusal, Retry):
            return await self._probe(refusal.version, retried=True)
        if self._protocol == "stateless":
            raise self._failure(
                f"the server refused server/discover: {log_value(exc.message, redactor, quotes=False)}",
                code=exc.code,
                data=exc.data,
            ) from None
        self.era_probe = EraProbe("server/discover", discover_refusal(exc), "initialize")
        return refusal

    async def _restart(self, lost: ConnectionLost) -> None:
        """S3a: once, within the deadline, a new transport for ``initialize``."""
        self._restarted = True
        self._log.info(
            "the era probe cost the server its transport; starting it again for initialize",
            reason=ServerValue(str(lost), self._connection.redactor),
        )
        await self._connection.reopen()

    def _adopt(self, info: ServerInfo) -> ServerInfo:
        """The stateless era is settled with ``info``."""
        self._connection.opened(info)
        if self._on_opened is not None:
            self._on_opened(info)
        return info

    # --- initialize --------------------------------------------------------------------------

    async def _initialize(self) -> ServerInfo | None:
        """``initialize``: None once answered (``notifications/initialized`` has gone out),
        or the stateless era's info (for the caller to adopt) when a ``-32022`` refusal named
        a version a new probe settles. Raises ``InitializeError``, or ``ConnectionLost`` for
        the caller."""
        connection, redactor = self._connection, self._connection.redactor
        timeout = connection.limits.handshake_timeout_seconds
        client = self._client
        try:
            await connection.request(
                "initialize",
                initialize_params(client.name, client.version, self._advertisement, self._features),
                timeout=connection.handshake_remaining(),
                on_answer=self._initialize_answered,
            )
        except RemoteError as exc:  # H2 included: an id-less error answers initialize
            retry = after_initialize_refusal(
                exc.code, exc.data, probed=self._probing and not self._probe_timed_out
            )
            if retry is not None and self._protocol != "handshake":
                verdict = await self._probe(retry.version, retried=True)
                if isinstance(verdict, ServerInfo):
                    return verdict
            supported = exc.data.get("supported") if is_object(exc.data) else None
            named = f" (it supports: {log_value(supported, redactor)})" if supported is not None else ""
            raise self._failure(
                f"the server refused initialize: {log_value(exc.message, redactor)}{named}",
                code=exc.code,
                data=exc.data,
            ) from None
        except (RemoteProtocolError, UnreadableAnswer) as exc:
            raise self._failure(f"the server's answer to initialize is malformed: {exc}") from None
        except RequestTimeout:
            nor = " (nor server/discover before it)" if self._probe_timed_out else ""
            raise self._failure(
                f"the server did not answer initialize within {describe_seconds(timeout)}{nor}"
                + connection.noise.described(redactor)
            ) from None
        return None

    def _initialize_answered(self, response: Response) -> None:
        """Runs in the read loop, before the next line is read: H6's ordering lives here.
        Raises ``InitializeError`` for a result we cannot use (D4), or when ``on_opened``
        fails."""
        if response.has_error:
            return
        connection = self._connection
        try:
            info = read_initialize_result(response.result, connection.redactor)
            connection.opened(info)
            if self._on_opened is not None:
                self._on_opened(info)
            # Strictly the first message after the answer: real servers expect it (H6).
            connection.notify_nowait("notifications/initialized")
        except MCPLHostError:
            raise
        except Exception as exc:  # a bug in on_opened: the handshake fails now, saying so
            raise self._failure(
                f"the host could not take up the server's initialize result ({exc!r})"
            ) from exc

    async def _initialized_taken(self) -> None:
        """H7: ``notifications/initialized`` is a step of the handshake too. Over HTTP its
        POST is written when the server accepts it; what follows is queued behind it."""
        connection = self._connection
        if not await connection.written(within=connection.handshake_remaining()):
            raise self._failure(
                "the server did not take notifications/initialized within"
                f" {describe_seconds(connection.limits.handshake_timeout_seconds)} (the handshake deadline)"
            )

    def _failure(self, message: str, **extra: Any) -> InitializeError:
        extra.setdefault("stderr_tail", self._connection.stderr_tail)
        return InitializeError(message, **extra)
