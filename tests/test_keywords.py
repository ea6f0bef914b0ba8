"""Keywords declared once as a TypedDict and taken as ``**kwargs``: a misspelled one is a
``TypeError`` at run time, as for a call whose keywords are written out."""

from __future__ import annotations

from typing import Any

import pytest
from typing_extensions import NotRequired, TypedDict

from mcpl_host import HostedServer, ServerConfig, connect
from mcpl_host._keywords import checked_keywords
from mcpl_host.services.turns import before_inference_fanout
from mcpl_host.transports.stdio import StdioParameters, StdioTransport


class _Args(TypedDict):
    a: int
    b: NotRequired[str]


def test_declared_keywords_pass_and_others_are_named() -> None:
    checked_keywords(_Args, {"a": 1}, "f")
    checked_keywords(_Args, {"a": 1, "b": "x"}, "f")
    with pytest.raises(TypeError, match=r"^f\(\) got an unexpected keyword argument 'c'$"):
        checked_keywords(_Args, {"a": 1, "c": "secret-value"}, "f")


def test_a_misspelled_runtime_keyword_is_refused_by_connect_and_hosted_server() -> None:
    config = ServerConfig(command="unused-server")
    keywords: dict[str, Any] = {"handler": object()}  # handlers, misspelled
    with pytest.raises(TypeError, match="unexpected keyword argument 'handler'"):
        connect(config, **keywords)
    with pytest.raises(TypeError, match="unexpected keyword argument 'handler'"):
        HostedServer(config, **keywords)


@pytest.mark.anyio
async def test_a_misspelled_hook_keyword_is_refused_before_anything_is_sent() -> None:
    keywords: dict[str, Any] = {
        "inference_id": "i",
        "conversation_id": "c",
        "turn_index": 0,
        "user_message": None,
        "model": {},
        "timout": 5,  # timeout, misspelled
    }
    with pytest.raises(TypeError, match="unexpected keyword argument 'timout'"):
        await before_inference_fanout([], **keywords)


@pytest.mark.anyio
async def test_a_misspelled_transport_keyword_is_refused() -> None:
    keywords: dict[str, Any] = {"limit": None}
    with pytest.raises(TypeError, match="unexpected keyword argument 'limit'"):
        StdioTransport(StdioParameters(command="unused-server"), **keywords)
