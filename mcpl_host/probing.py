"""What ``mcpl-host probe`` adds to a connection while it waits: progress on a terminal, a
server that stopped answering reported in time, and an inference provider for the command
line.

Rules of this module:

- ``ProbeWatch.run`` looks at the connection every ``PROBE_TICK_SECONDS``. While a host
  request waits for more than ``PROGRESS_AFTER_SECONDS``, it shows on the terminal what is
  pending and for how long (``report.ProgressLine``; nothing when stderr is not a
  terminal). After the handshake, a server that sent nothing for ``stall_seconds`` while a
  request waits is *stalled* (``mcpl.explain.stall_verdict``): the watch keeps the
  ``Stall`` and cancels the scope it was given, so the probe fails with the one-sentence
  explanation (``mcpl.explain.silence_sentence``, naming ``--compat 0.4`` after a strict
  refusal) instead of waiting for every timeout in turn.
- ``InferenceReply``: handlers that answer every ``inference/request`` with a fixed text,
  streamed as ``inference/chunk`` notifications of at most ``CHUNK_CHARS`` characters when
  the server asks for a stream (MCPL §11.3-§11.4). Only with them does the host advertise
  ``inferenceRequest`` (``handlers.serves_inference``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import anyio

from mcpl_host import report
from mcpl_host.handlers import HostHandlers, InferenceStream, RequestContext
from mcpl_host.jsonrpc.values import JSONObject
from mcpl_host.mcpl.explain import CLI_SWITCH, Stall, silence_sentence, stall_verdict
from mcpl_host.server_connection import ServerConnection

if TYPE_CHECKING:
    from mcpl_host.client_features import ElicitationHandler, RootsProvider, SamplingHandler

__all__ = ["CHUNK_CHARS", "InferenceReply", "ProbeWatch"]

#: Seconds between two looks at the connection.
PROBE_TICK_SECONDS = 0.25
#: Seconds a request waits before the progress line shows it (no flicker for quick answers).
PROGRESS_AFTER_SECONDS = 1.0
#: Characters of the reply text per ``inference/chunk``.
CHUNK_CHARS = 16
#: The model the probe's inference, sampling and terminal replies name.
PROBE_MODEL = "mcpl-host-probe"


class ProbeWatch:
    """Watches ``conn`` for the probe (module rules). ``stall_seconds``: 0 or ``inf``
    disables stall reports; ``progress``: where progress goes (None: nowhere)."""

    def __init__(
        self,
        conn: ServerConnection,
        *,
        stall_seconds: float,
        progress: report.ProgressLine | None,
    ) -> None:
        self._conn = conn
        self._stall_seconds = stall_seconds
        self._progress = progress
        #: The stall found, if any (set before the scope is cancelled).
        self.stalled: Stall | None = None

    def explanation(self) -> str | None:
        """The sentence for the stall found (None when there was none)."""
        if self.stalled is None:
            return None
        conn = self._conn
        profile = conn.policy.state.profile if conn.policy.state.choice is not None else None
        return silence_sentence(self.stalled, conn.inbound.last_refusal, profile, switch=CLI_SWITCH)

    def clear(self) -> None:
        """Remove the progress line (before anything else is printed)."""
        if self._progress is not None:
            self._progress.clear()

    async def run(self, scope: anyio.CancelScope) -> None:
        """Watch until cancelled, or until a stall cancels ``scope``."""
        conn = self._conn
        try:
            while True:
                await anyio.sleep(PROBE_TICK_SECONDS)
                now = anyio.current_time()
                waiting = conn.connection.waiting()
                last = conn.connection.last_received
                self._show(now, waiting, last)
                enabled = 0 < self._stall_seconds < float("inf")
                if enabled and conn.server_info is not None:  # after the handshake's answer
                    verdict = stall_verdict(now, waiting, last, self._stall_seconds)
                    if verdict is not None:
                        self.stalled = verdict
                        scope.cancel()
                        return
        finally:
            self.clear()

    def _show(self, now: float, waiting: list[tuple[str, float]], last: float | None) -> None:
        progress = self._progress
        if progress is None:
            return
        shown = [(method, now - sent) for method, sent in waiting if now - sent >= PROGRESS_AFTER_SECONDS]
        if not shown:
            progress.clear()
            return
        info = self._conn.server_info
        name = info.name if info is not None and info.name else self._conn.name
        oldest = min(sent for _, sent in waiting)
        silent = now - max(last, oldest) if last is not None else now - oldest
        progress.show(report.waiting_text(name, shown, silent))


class InferenceReply(HostHandlers):
    """Answers ``inference/request`` with ``text`` (module rules)."""

    def __init__(
        self,
        text: str,
        *,
        roots: RootsProvider | None = None,
        sampling: SamplingHandler | None = None,
        elicitation: ElicitationHandler | None = None,
    ) -> None:
        """``roots``, ``sampling``, ``elicitation``: client features served too (``HostHandlers``)."""
        super().__init__(roots=roots, sampling=sampling, elicitation=elicitation)
        self.text = text

    async def inference_request(
        self, context: RequestContext, params: Mapping[str, object], stream: InferenceStream | None
    ) -> JSONObject:
        chunks = [self.text[i : i + CHUNK_CHARS] for i in range(0, len(self.text), CHUNK_CHARS)] or [""]
        if stream is not None:
            for chunk in chunks:
                stream.send(chunk)
        return {
            "content": self.text,
            "model": PROBE_MODEL,
            "finishReason": "end_turn",
            "usage": {"inputTokens": 0, "outputTokens": len(chunks)},
        }
