"""Compatibility profiles: hosting the MCPL servers deployed today (docs/protocol.md,
"Compatibility profiles").

Rules:

- Each server has a setting, ``compat``: ``"strict"``, ``"0.4"`` or ``"auto"`` (the default).
  ``choose_profile`` turns it into the profile of one connection once the server's
  advertisement is known: ``strict`` and ``0.4`` as set; ``auto`` is ``strict`` for an
  advertisement whose ``version`` says 0.5 (``"0.5"``, ``"0.5.x"``) and ``0.4`` for one that
  says 0.4 or nothing this host recognises.
- ``strict`` is MCPL 0.5 as written. ``0.4`` is what hosts written for MCPL 0.4 did. Its
  decisions are made where the 0.5 ones are: the policy exchange (``policy_state``,
  ``negotiation``), admission (``admission.admit``, ``feature_sets.derive``). This module
  holds what they share:

  - the bound of the grant is ``widen(advertised)``: every vocabulary path under a top-level
    capability the server advertised (0.4 servers advertise ``channels: true`` or partial
    objects), so the grant is checked at the level of the top-level capability
    (``pushEvents``, ``channels``, ``inferenceRequest``, ``contextHooks``, ...). The grant
    is still that bound intersected with the host's policy: no profile grants a path the
    policy denies;
  - what MCPL 0.5 refuses and the 0.4 profile lets through is a ``CompatNote``
    (informational), logged once per server (``NoteLedger``, bounded).

- Pure: no I/O, no clock, no logging.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from mcpl_host.jsonrpc.values import JSONObject
from mcpl_host.mcpl.grants import EXPLICIT_ONLY, VOCABULARY

__all__ = [
    "COMPAT_SETTINGS",
    "checked_compat",
    "CompatNote",
    "CompatSetting",
    "NoteKind",
    "NoteLedger",
    "Profile",
    "ProfileChoice",
    "choose_profile",
    "top_level",
    "widen",
]

#: A server's setting (config key ``compat``, ``--compat``, the library's ``compat=``).
CompatSetting = Literal["strict", "0.4", "auto"]
COMPAT_SETTINGS: tuple[CompatSetting, ...] = ("strict", "0.4", "auto")


def checked_compat(compat: CompatSetting) -> CompatSetting:
    """``compat`` itself when it is one of ``COMPAT_SETTINGS``; raises ``ValueError`` naming
    them otherwise (the one check of the setting: config key ``compat``, ``set_compat``)."""
    if compat not in COMPAT_SETTINGS:
        raise ValueError(f"compat must be one of {', '.join(COMPAT_SETTINGS)}, not {compat!r}")
    return compat


#: The profile a connection runs with.
Profile = Literal["strict", "0.4"]


@dataclass(frozen=True, slots=True)
class ProfileChoice:
    """The profile of one connection: ``profile``, the ``setting`` it came from, and
    ``reason`` (a phrase, no server text: "chosen automatically: the server advertises MCPL
    0.5"). ``version``: the advertisement's ``version`` as sent (server text, may be None)."""

    profile: Profile
    setting: CompatSetting
    reason: str
    version: Any = None


def _says_05(version: object) -> bool:
    return isinstance(version, str) and (version == "0.5" or version.startswith("0.5."))


def choose_profile(setting: CompatSetting, manifest: Mapping[str, Any] | None) -> ProfileChoice:
    """The profile for ``setting`` and the server's ``experimental.mcpl`` (module rules).

    Raises ``ValueError`` for a setting outside ``COMPAT_SETTINGS``."""
    version = manifest.get("version") if manifest is not None else None
    if setting == "strict":
        return ProfileChoice("strict", setting, "set to strict", version)
    if setting == "0.4":
        return ProfileChoice("0.4", setting, "set to 0.4", version)
    if setting != "auto":
        raise ValueError(f"compat must be one of {', '.join(COMPAT_SETTINGS)}, not {setting!r}")
    if _says_05(version):
        return ProfileChoice(
            "strict", setting, "chosen automatically: the server advertises MCPL 0.5", version
        )
    if isinstance(version, str) and (version == "0.4" or version.startswith("0.4.")):
        return ProfileChoice("0.4", setting, "chosen automatically: the server advertises MCPL 0.4", version)
    return ProfileChoice(
        "0.4",
        setting,
        "chosen automatically: the server's advertisement names no MCPL version this host "
        "recognises, read as 0.4",
        version,
    )


def top_level(path: str) -> str:
    """The top-level capability of a path: ``channels.incoming`` -> ``channels``."""
    return path.split(".", 1)[0]


def widen(advertised: Iterable[str]) -> frozenset[str]:
    """Every vocabulary path whose top-level capability is that of an advertised path (the
    0.4 profile's bound of the grant; module rules), but ``EXPLICIT_ONLY`` paths only when
    advertised themselves."""
    advertised = frozenset(advertised)
    tops = {top_level(path) for path in advertised}
    # RFC-009 §2.1, §2.2: an explicit-only path is never reached by widening (IS1)
    widened = {path for path in VOCABULARY - EXPLICIT_ONLY if top_level(path) in tops}
    return frozenset(widened | (advertised & EXPLICIT_ONLY))


#: What a note is about (each a sentence in ``CompatNote.sentence``).
NoteKind = Literal["unadvertised_leaf", "uses_lacks", "unknown_uses", "unreadable_uses"]


@dataclass(frozen=True, slots=True)
class CompatNote:
    """Something MCPL 0.5 refuses that the 0.4 profile lets through (informational).

    - ``unadvertised_leaf``: ``method`` exercised ``capability``, which the server did not
      advertise itself; its top-level capability is advertised and granted.
    - ``uses_lacks``: ``method`` in ``feature_set`` exercised ``capability``, which that
      set's ``uses`` does not list (MCPL §6.4 rule 2 refuses it).
    - ``unknown_uses``: ``feature_set``'s ``uses`` lists ``values`` outside the vocabulary
      (ignored; MCPL §6.4 rule 1 disables the set).
    - ``unreadable_uses``: ``feature_set``'s ``uses`` cannot be read (``detail``).

    ``feature_set`` and ``values`` are server text: show them through the escaper."""

    kind: NoteKind
    method: str | None = None
    feature_set: str | None = None
    capability: str | None = None
    values: tuple[str, ...] = ()
    detail: str = ""

    @property
    def key(self) -> tuple[str, str | None, str | None]:
        """What makes two notes the same (logged once per server)."""
        return (self.kind, self.feature_set, self.capability)

    @property
    def sentence(self) -> str:
        if self.kind == "unadvertised_leaf":
            assert self.capability is not None
            return (
                f"{self.method} uses {self.capability}, which the server did not advertise; "
                f"admitted under the 0.4 profile: its top-level capability "
                f"{top_level(self.capability)} is advertised and granted"
            )
        if self.kind == "uses_lacks":
            return (
                f"{self.method} in feature set {self.feature_set!r} uses {self.capability}, which "
                "the set's uses does not list; admitted under the 0.4 profile (MCPL 0.5 refuses it)"
            )
        if self.kind == "unknown_uses":
            return (
                f"feature set {self.feature_set!r} lists {list(self.values)!r} in its uses, outside "
                "the MCPL vocabulary; ignored under the 0.4 profile (MCPL 0.5 disables the set)"
            )
        return (
            f"feature set {self.feature_set!r}: {self.detail}; its uses is informational under "
            "the 0.4 profile (MCPL 0.5 disables the set)"
        )

    def to_json(self) -> JSONObject:
        data: JSONObject = {"kind": self.kind, "sentence": self.sentence}
        for key, value in (
            ("method", self.method),
            ("featureSet", self.feature_set),
            ("capability", self.capability),
        ):
            if value is not None:
                data[key] = value
        return data


@dataclass(slots=True)
class NoteLedger:
    """The notes of one server, each distinct note (``CompatNote.key``) taken once.

    ``take(note)``: ``"log"`` the first time a note is seen, while fewer than ``limit`` are
    kept (it is kept in ``notes``); ``"last"`` once, for the first note past the limit (log
    that more go unlogged); ``"quiet"`` otherwise. Memory stays bounded by ``limit``."""

    limit: int
    notes: list[CompatNote] = field(default_factory=list[CompatNote])
    _seen: set[tuple[str, str | None, str | None]] = field(
        default_factory=set[tuple[str, str | None, str | None]]
    )
    _overflowed: bool = False

    def take(self, note: CompatNote) -> Literal["log", "last", "quiet"]:
        if note.key in self._seen:
            return "quiet"
        if len(self.notes) < self.limit:
            self._seen.add(note.key)
            self.notes.append(note)
            return "log"
        if not self._overflowed:
            self._overflowed = True
            return "last"
        return "quiet"
