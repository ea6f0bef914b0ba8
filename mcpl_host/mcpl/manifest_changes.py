"""Manifest changes on a live connection (MCPL §17.3-§17.10; PROTOCOL.md §6.2-§6.4).

Rules (checklist K 108-118):

- ``mcpl/manifestChanged`` is accepted whatever the grant or policy state and never answered
  (it is a notification). It is a hint: nothing changes before ``mcpl/manifest`` is fetched.
- Fetches are bounded per connection (``ManifestFetchLimiter``); notifications over the bound
  are dropped and logged as a server defect (budgeted). Notifications arriving while a fetch
  runs are merged into one more fetch afterwards.
- **Interp. (cheap path, §17.1):** a notification naming the revision of the manifest last
  validated is skipped; that saves work and is not evidence of anything.
- A fetch that errors, or returns something that is not an object, keeps the manifest in
  force (one failure never drops MCPL); an error to the fetch is warned about (§17.10).
- The revision is recomputed (``manifest_digest``) and compared for equality only; a mismatch
  is logged as a defect and the manifest is still used (§17.2).
- The diff decides: removals are revoked at once (the grant becomes what both the grant in
  force and the new advertisement allow, then a ``featureSets/update`` request tells the
  server); additions never auto-grant (they are ``capability-expansion-pending``). Exactly
  one change receipt per change goes to ``HostHandlers.on_manifest_change``.
"""

from __future__ import annotations

from typing import Any

import anyio

from mcpl_host.jsonrpc.errors import MCPLHostError, RemoteError
from mcpl_host.logging import LogBudget, ServerValue
from mcpl_host.mcpl.feature_sets import derive, read_feature_sets
from mcpl_host.mcpl.grants import Grant, expand_advertisement
from mcpl_host.mcpl.manifest import (
    REVISION_PATTERN,
    DigestError,
    ManifestFetchLimiter,
    manifest_digest,
    validate_manifest,
)
from mcpl_host.mcpl.manifest_diff import change_receipt, diff_manifests

__all__ = ["ManifestChanges"]

#: Defect lines about dropped notifications logged per connection (L3).
DROPPED_NOTIFICATIONS_LOGGED = 3


class ManifestChanges:
    """Mixed into ``ServerConnection``: follows ``mcpl/manifestChanged`` (MCPL §17)."""

    name: str
    redactor: Any
    handlers: Any
    server_info: Any
    grant: Grant | None
    advertised: frozenset[str]
    feature_sets: Any
    feature_set_policy: Any
    _tg: Any
    _log: Any

    request: Any  # ServerConnection.request
    _exchange: Any  # MCPLNegotiation._exchange

    def _init_manifest_changes(self) -> None:
        self.manifest: dict[str, Any] | None = None  # the manifest in force (§17.1)
        self.manifest_revision: str | None = None  # of the manifest last validated
        self._fetch_limiter = ManifestFetchLimiter()
        self._fetching = False
        self._fetch_again = False
        self._dropped_notifications = LogBudget(DROPPED_NOTIFICATIONS_LOGGED)

    def _manifest_in_force(self, manifest: dict[str, Any]) -> None:
        self.manifest = manifest
        revision = manifest.get("revision")
        self.manifest_revision = revision if isinstance(revision, str) else None

    def _on_manifest_changed(self, params: Any) -> None:
        """From the read loop: a ``mcpl/manifestChanged`` notification (K 108-110)."""
        if self.manifest is None:
            return  # not an MCPL connection: nothing to refresh
        revision = params.get("revision") if isinstance(params, dict) else None
        if not (isinstance(revision, str) and REVISION_PATTERN.fullmatch(revision)):
            self._log.info(
                "mcpl/manifestChanged without a valid revision", revision=ServerValue(revision, self.redactor)
            )
        elif revision == self.manifest_revision and not self._fetching:
            self._log.debug("manifest change names the revision in force; not fetched")
            return
        if self._fetching:
            self._fetch_again = True  # merged into one more fetch after this one
            return
        if not self._fetch_limiter.allow(anyio.current_time()):
            self._log_dropped_notification()
            return
        self._fetching = True
        self._tg.start_soon(self._refresh_manifest)

    def _log_dropped_notification(self) -> None:
        verdict = self._dropped_notifications.take()
        if verdict != "quiet":
            self._log.warning(
                "manifest change notifications over the fetch limit: dropped"
                " (a server defect, MCPL §17.8)" + ("; more go unlogged" if verdict == "last" else "")
            )

    async def _refresh_manifest(self) -> None:
        try:
            while True:
                self._fetch_again = False
                await self._fetch_and_apply()
                if not self._fetch_again:
                    return
                if not self._fetch_limiter.allow(anyio.current_time()):
                    self._log_dropped_notification()
                    return
        finally:
            self._fetching = False

    async def _fetch_and_apply(self) -> None:
        try:
            fetched = await self.request("mcpl/manifest", {})
        except RemoteError as exc:  # §17.10: notifies changes but cannot be asked for them
            self._log.warning(
                "server announced a manifest change but refused mcpl/manifest",
                error=ServerValue(str(exc), self.redactor),
            )
            return
        except MCPLHostError as exc:
            self._log.warning(
                "manifest fetch failed; the manifest in force is kept",
                error=ServerValue(str(exc), self.redactor),
            )
            return
        if not isinstance(fetched, dict):  # §17.5: learned nothing
            self._log.warning("mcpl/manifest returned no object; the manifest in force is kept")
            return
        for problem in validate_manifest(fetched):
            self._log.info("fetched manifest problem", problem=ServerValue(problem, self.redactor))
        try:
            digest = manifest_digest(fetched)
        except DigestError as exc:
            digest = None
            self._log.info("fetched manifest has no canonical digest", code=exc.code)
        revision = fetched.get("revision")
        if digest is not None and isinstance(revision, str) and revision != digest:
            self._log.warning(
                "manifest revision does not match its digest (a server defect; the manifest is still used)",
                revision=ServerValue(revision, self.redactor),
                digest=digest,
            )
        await self._apply_manifest(fetched)

    async def _apply_manifest(self, new: dict[str, Any]) -> None:
        old = self.manifest or {}
        tools = "tools" in (self.server_info.capabilities if self.server_info else {})
        diff = diff_manifests(old, new, tools=tools)
        old_grant = self.grant or Grant(advertised=self.advertised)
        old_sets = read_feature_sets(old)
        enabled_before = derive(old_sets, old_grant, self.feature_set_policy).enabled
        self._manifest_in_force(new)
        self.advertised = expand_advertisement(new, tools=tools)
        self.feature_sets = read_feature_sets(new)
        # Removals are revoked; additions wait for a decision (never auto-granted).
        kept = Grant(paths=old_grant.paths & self.advertised, advertised=self.advertised)
        new_grant = kept
        if self.grant is not None and (
            kept.paths != old_grant.paths
            or diff.feature_sets_removed
            or diff.feature_sets_changed
            or diff.feature_sets_added
        ):
            change = await self._exchange(kept, initial=False)
            new_grant = change.in_force or kept
        enabled_after = derive(self.feature_sets, new_grant, self.feature_set_policy).enabled
        receipt = change_receipt(
            diff,
            old_grant=old_grant,
            new_grant=new_grant,
            feature_sets_before=enabled_before,
            feature_sets_after=enabled_after,
        )
        self._log.info(
            "manifest changed",
            domains=list(receipt.domains),
            impacts=[impact.to_json() for impact in receipt.impacts],
        )
        self.handlers.on_manifest_change(self.name, receipt)
