"""Manifest changes on a live connection (MCPL §17.3-§17.10): the I/O around
``PolicyState.apply_manifest``.

Rules:

- ``mcpl/manifestChanged`` is accepted whatever the grant or policy state and never answered
  (it is a notification). It is a hint: nothing changes before ``mcpl/manifest`` is fetched.
- Fetches are bounded per connection (``ManifestFetchLimiter``, ``Limits.max_manifest_fetches``
  per ``manifest_fetch_window_seconds``); notifications over the bound are dropped and
  logged as a server defect (``Limits.manifest_defects_logged`` lines). Notifications arriving while a fetch
  runs are merged into one more fetch afterwards (``mcpl_host.coalesce``: one in flight, one
  pending).
- A notification naming the revision of the manifest last validated is skipped (§17.1: the
  cheap path; docs/protocol.md, "Manifest changes").
- A fetch that errors, or returns something that is not an object, or a manifest over one of
  the bounds of ``manifest_limit_problem`` (warned about, naming the bound), keeps the
  manifest in force (one failure never drops MCPL); an error to the fetch is warned about
  (§17.10).
- The revision is recomputed (``manifest_digest``) and compared for equality only; a mismatch
  is logged as a defect and the manifest is still used (§17.2).
- Removals are revoked at once, then a ``featureSets/update`` request tells the server;
  additions never auto-grant (``capability-expansion-pending``). Exactly one change receipt
  per change goes to the reporter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio

from mcpl_host.coalesce import Coalesce
from mcpl_host.inbound import BackgroundJob
from mcpl_host.jsonrpc.errors import MCPLHostError, RemoteError
from mcpl_host.jsonrpc.values import is_object
from mcpl_host.limits import Limits
from mcpl_host.logging import LogBudget, Logger, Redactor, ServerValue
from mcpl_host.mcpl.manifest import (
    REVISION_PATTERN,
    DigestError,
    ManifestFetchLimiter,
    manifest_digest,
    manifest_limit_problem,
    validate_manifest,
)
from mcpl_host.mcpl.policy_state import PolicyState
from mcpl_host.services.negotiation import PolicyExchange, PolicySource, Requester

if TYPE_CHECKING:
    from mcpl_host.observe import Reporter

__all__ = ["ManifestWatcher"]


class ManifestWatcher:
    """Follows ``mcpl/manifestChanged`` on one connection (module rules)."""

    def __init__(
        self,
        requester: Requester,
        state: PolicyState,
        exchange: PolicyExchange,
        source: PolicySource,
        reporter: Reporter,
        *,
        log: Logger,
        redactor: Redactor,
        limits: Limits | None = None,
    ) -> None:
        self._limits = limits = limits or Limits()
        self._requester = requester
        self._state = state
        self._exchange = exchange
        self._source = source
        self._reporter = reporter
        self._log = log
        self._redactor = redactor
        self._fetch_limiter = ManifestFetchLimiter(
            limits.max_manifest_fetches, limits.manifest_fetch_window_seconds
        )
        self._fetches = Coalesce()  # one fetch in flight, one pending (mcpl_host.coalesce)
        self._dropped_notifications = LogBudget(limits.manifest_defects_logged)

    def on_changed(self, params: object) -> BackgroundJob | None:
        """From the read loop: a ``mcpl/manifestChanged`` notification; returns the fetch to
        run, or None."""
        if self._state.manifest is None:
            return None  # not an MCPL connection: nothing to refresh
        revision = params.get("revision") if is_object(params) else None
        if not (isinstance(revision, str) and REVISION_PATTERN.fullmatch(revision)):
            self._log.info(
                "mcpl/manifestChanged without a valid revision",
                revision=ServerValue(revision, self._redactor),
            )
        elif revision == self._state.revision and not self._fetches.running:
            self._log.debug("manifest change names the revision in force; not fetched")
            return None
        if self._fetches.running:
            self._fetches.ask()  # merged into one more fetch after this one
            return None
        if not self._fetch_limiter.allow(anyio.current_time()):
            self._log_dropped_notification()
            return None
        self._fetches.ask()
        return self._refresh

    def _log_dropped_notification(self) -> None:
        verdict = self._dropped_notifications.take()
        if verdict != "quiet":
            self._log.warning(
                "manifest change notifications over the fetch limit: dropped"
                " (a server defect, MCPL §17.8)" + ("; more go unlogged" if verdict == "last" else "")
            )

    async def _refresh(self) -> None:
        try:
            while True:
                await self._fetch_and_apply()
                if not self._fetches.done():
                    return
                if not self._fetch_limiter.allow(anyio.current_time()):
                    self._log_dropped_notification()
                    return
        finally:
            self._fetches = Coalesce()

    async def _fetch_and_apply(self) -> None:
        try:
            fetched = await self._requester.request("mcpl/manifest", {})
        except RemoteError as exc:  # §17.10: notifies changes but cannot be asked for them
            self._log.warning(
                "server announced a manifest change but refused mcpl/manifest",
                error=ServerValue(str(exc), self._redactor),
            )
            return
        except MCPLHostError as exc:
            self._log.warning(
                "manifest fetch failed; the manifest in force is kept",
                error=ServerValue(str(exc), self._redactor),
            )
            return
        if not is_object(fetched):  # §17.5: learned nothing
            self._log.warning("mcpl/manifest returned no object; the manifest in force is kept")
            return
        over = manifest_limit_problem(fetched, self._limits)
        if over is not None:
            self._log.warning(
                "fetched manifest over a bound; the manifest in force is kept", problem=over[0], limit=over[1]
            )
            return
        for problem in validate_manifest(fetched):
            self._log.info("fetched manifest problem", problem=ServerValue(problem, self._redactor))
        try:
            digest = manifest_digest(fetched)
        except DigestError as exc:
            digest = None
            self._log.info("fetched manifest has no canonical digest", code=exc.code)
        revision = fetched.get("revision")
        if digest is not None and isinstance(revision, str) and revision != digest:
            self._log.warning(
                "manifest revision does not match its digest (a server defect; the manifest is still used)",
                revision=ServerValue(revision, self._redactor),
                digest=digest,
            )
        fs_policy = self._source.feature_set_policy
        step = self._state.apply_manifest(fetched, fs_policy)
        if step.tell:
            await self._exchange.exchange_grant(step.kept)
        receipt = self._state.change_receipt(step, self._source.feature_set_policy)
        self._log.info(
            "manifest changed",
            domains=list(receipt.domains),
            impacts=[impact.to_json() for impact in receipt.impacts],
        )
        self._reporter.manifest_change(receipt)
