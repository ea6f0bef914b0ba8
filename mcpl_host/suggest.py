"""The one "did you mean" matcher: the closest of some names to a word that matched none
(a config key, an argument of a tool or prompt, a shell command). Pure.

difflib's ratio (Ratcliff/Obershelp), as ``difflib.get_close_matches``: a candidate counts
when its ratio to the word is at least ``cutoff`` (0.6 by default: ``mesage`` finds
``message``, ``bb`` finds ``b``; a name that shares little with the word is no hint).
difflib is imported with the first hint, not with the package.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["DEFAULT_CUTOFF", "closest"]

#: The least similarity (0 to 1) of a hint to the word.
DEFAULT_CUTOFF = 0.6


def closest(word: str, candidates: Iterable[str], *, cutoff: float = DEFAULT_CUTOFF) -> str | None:
    """The candidate closest to ``word`` with a similarity of at least ``cutoff``, or None.
    Ties go to the candidate met first."""
    import difflib

    found = difflib.get_close_matches(word, list(candidates), n=1, cutoff=cutoff)
    return found[0] if found else None
