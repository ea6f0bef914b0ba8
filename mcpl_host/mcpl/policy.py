"""Reading the receipt of a ``featureSets/update`` request (MCPL §6.7; docs/protocol.md,
"Policy receipts").

The receipt reports consequences; it is never an entitlement: nothing here widens a grant.
A refusal (``accepted: false``) turns MCPL off for the connection; its ``fallback`` says
whether the server asks to stay MCP-only or to be closed. A missing ``fallback``, or an
``unavailableFeatures`` entry without ``effect``, is a server conformance defect (MCPL §6.7),
reported in ``defects``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mcpl_host.jsonrpc.values import is_array, is_object

__all__ = ["PolicyOutcome", "read_receipt"]


@dataclass(frozen=True, slots=True)
class PolicyOutcome:
    """``accepted``; ``mode`` (e.g. ``"degraded"``) or None; ``unavailable_features`` as sent;
    ``fallback`` (``"mcp-only"``/``"close"``/None); ``reason``; ``defects`` (sentences)."""

    accepted: bool
    mode: str | None = None
    unavailable_features: list[Any] = field(default_factory=list[Any])
    fallback: str | None = None
    reason: str | None = None
    defects: list[str] = field(default_factory=list[str])
    raw: Any = None


def read_receipt(receipt: object) -> PolicyOutcome:
    """Read a receipt (any JSON value); never raises. A result that is not an object, or
    whose ``accepted`` is not ``true``, is a refusal."""
    defects: list[str] = []
    if not is_object(receipt):
        return PolicyOutcome(accepted=False, defects=["the receipt is not a JSON object"], raw=receipt)
    accepted = receipt.get("accepted") is True
    if "accepted" in receipt and not isinstance(receipt.get("accepted"), bool):
        defects.append("the receipt's accepted member is not a boolean")
    elif "accepted" not in receipt:
        defects.append("the receipt has no accepted member")
    fallback = receipt.get("fallback")
    fallback = fallback if isinstance(fallback, str) else None
    if not accepted and fallback is None:
        defects.append("a refusal without the required fallback (MCPL §6.7)")
    unavailable = receipt.get("unavailableFeatures")
    unavailable = unavailable if is_array(unavailable) else []
    for entry in unavailable:
        if not (is_object(entry) and "effect" in entry):
            defects.append("an unavailableFeatures entry without effect (MCPL §6.7)")
            break
    mode = receipt.get("mode")
    reason = receipt.get("reason")
    return PolicyOutcome(
        accepted=accepted,
        mode=mode if isinstance(mode, str) else None,
        unavailable_features=unavailable,
        fallback=fallback,
        reason=reason if isinstance(reason, str) else None,
        defects=defects,
        raw=receipt,
    )
