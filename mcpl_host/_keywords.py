"""Keywords declared once as a ``TypedDict`` and taken as ``**kwargs: Unpack[...]``: the type
checkers hold a caller to them, and ``checked_keywords`` does at run time, so a misspelled
keyword is a ``TypeError`` as it is for a call whose keywords are written out."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["checked_keywords"]


def checked_keywords(declared: type, given: Mapping[str, object], call: str) -> None:
    """Check that ``given`` (a call's ``**kwargs``) holds only keywords ``declared`` (a
    ``TypedDict`` class) declares. A missing required one is left to the type checkers and
    to where it is read (what ``__required_keys__`` says depends on how the annotations were
    written, so it is not relied on here).

    Raises:
        TypeError: a keyword ``declared`` does not have; the message names the keywords and
            ``call``, never a value.
    """
    annotations: Mapping[str, object] = getattr(declared, "__annotations__", {})
    unknown = sorted(set(given) - set(annotations))
    if unknown:
        raise TypeError(f"{call}() got an unexpected keyword argument {', '.join(map(repr, unknown))}")
