"""The live web inspector (``mcpl-host inspect``, ``Host(inspector=Inspector())``): a page on
loopback showing the servers, the grant, the live traffic and the held requests, and acting
on them. Needs the extra ``mcpl-host[inspect]`` (starlette, hypercorn), imported only when
an inspector starts."""

from __future__ import annotations

from mcpl_host.inspector.server import Inspector

__all__ = ["Inspector"]
