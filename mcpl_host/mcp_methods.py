"""Plain MCP methods with typed results (MCP 2025-11-25 "Server features").

``MCPClient`` holds a requester (a connection) and its ``Limits``. List calls follow
``nextCursor`` pages within ``limits.max_list_pages``, ``max_list_items`` and
``max_list_bytes``, and raise ``LimitExceeded`` past any of them. Results are small frozen dataclasses
that keep the raw object (``raw``) for fields not modelled here. A result of the wrong shape
raises ``RemoteProtocolError`` with one clear sentence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from mcpl_host.connection import DEFAULT, ProgressCallback, Timeout
from mcpl_host.json_size import json_size
from mcpl_host.jsonrpc.errors import RemoteProtocolError
from mcpl_host.jsonrpc.values import is_array, is_object
from mcpl_host.limits import LimitExceeded, Limits

__all__ = [
    "CallToolResult",
    "GetPromptResult",
    "MCPClient",
    "Prompt",
    "ReadResourceResult",
    "Resource",
    "ResourceTemplate",
    "Tool",
    "call_tool_result",
]


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


@dataclass(frozen=True, slots=True)
class Tool:
    """An entry of ``tools/list``: ``name``, ``description``, ``input_schema`` (JSON Schema)."""

    name: str
    description: str | None = None
    input_schema: dict[str, Any] = field(default_factory=dict[str, Any])
    title: str | None = None
    raw: dict[str, Any] = field(default_factory=dict[str, Any])


@dataclass(frozen=True, slots=True)
class Resource:
    """An entry of ``resources/list``."""

    uri: str
    name: str | None = None
    description: str | None = None
    mime_type: str | None = None
    raw: dict[str, Any] = field(default_factory=dict[str, Any])


@dataclass(frozen=True, slots=True)
class ResourceTemplate:
    """An entry of ``resources/templates/list``."""

    uri_template: str
    name: str | None = None
    description: str | None = None
    mime_type: str | None = None
    raw: dict[str, Any] = field(default_factory=dict[str, Any])


@dataclass(frozen=True, slots=True)
class Prompt:
    """An entry of ``prompts/list``; ``arguments`` as sent (list of objects)."""

    name: str
    description: str | None = None
    arguments: list[Any] = field(default_factory=list[Any])
    raw: dict[str, Any] = field(default_factory=dict[str, Any])


@dataclass(frozen=True, slots=True)
class CallToolResult:
    """``tools/call``: ``content`` blocks, ``is_error``, ``structured_content`` (or None)."""

    content: list[Any]
    is_error: bool = False
    structured_content: Any = None
    raw: dict[str, Any] = field(default_factory=dict[str, Any])

    @property
    def text(self) -> str:
        """The text blocks joined by newlines (a convenience for display)."""
        return "\n".join(
            block["text"] for block in self.content if is_object(block) and isinstance(block.get("text"), str)
        )


@dataclass(frozen=True, slots=True)
class ReadResourceResult:
    """``resources/read``: ``contents`` (objects with ``uri`` and ``text`` or ``blob``)."""

    contents: list[Any]
    raw: dict[str, Any] = field(default_factory=dict[str, Any])


@dataclass(frozen=True, slots=True)
class GetPromptResult:
    """``prompts/get``: ``messages`` (``{role, content}`` objects) and ``description``."""

    messages: list[Any]
    description: str | None = None
    raw: dict[str, Any] = field(default_factory=dict[str, Any])


def _object(result: Any, method: str) -> dict[str, Any]:
    if not is_object(result):
        raise RemoteProtocolError(f"the server's {method} result is not a JSON object")
    return result


def call_tool_result(result: dict[str, Any]) -> CallToolResult:
    """Read a ``tools/call`` result object (MCP 2025-11-25 "Tools")."""
    content = result.get("content", [])
    return CallToolResult(
        content=content if is_array(content) else [],
        is_error=result.get("isError") is True,
        structured_content=result.get("structuredContent"),
        raw=result,
    )


class _Requester(Protocol):
    async def request(
        self,
        method: str,
        params: Any = None,
        *,
        timeout: Timeout = ...,
        progress: ProgressCallback | None = None,
    ) -> Any: ...


class MCPClient:
    """``list_tools()``, ``call_tool()``, ``list_resources()``, ``read_resource()``,
    ``list_resource_templates()``, ``list_prompts()``, ``get_prompt()`` over ``requester``.

    Each raises what ``request()`` raises, plus ``RemoteProtocolError`` for a result of the
    wrong shape. Cancellation: as ``request()``.
    """

    def __init__(self, requester: _Requester, limits: Limits) -> None:
        self._requester = requester
        self._limits = limits

    async def _list_all(self, method: str, key: str) -> list[dict[str, Any]]:
        """Every entry of a paginated list (MCP 2025-11-25 "Pagination"): pages are followed
        by ``nextCursor`` until one has none (or repeats the cursor just sent), within
        ``limits.max_list_pages`` pages, ``max_list_items`` entries and ``max_list_bytes``
        JSON bytes of entries in all (``json_size``, measured page by page).

        Raises:
            LimitExceeded: a bound was reached before the last page (the message names it;
                no partial list is returned). RemoteProtocolError: a page of the wrong shape.
        """
        limits = self._limits
        items: list[dict[str, Any]] = []
        size, cursor = 0, None
        for page_number in range(1, limits.max_list_pages + 1):
            params = {"cursor": cursor} if cursor is not None else None
            result = _object(await self._requester.request(method, params), method)
            page = result.get(key, [])
            if not is_array(page):
                raise RemoteProtocolError(f"the server's {method} result has no {key} array")
            entries = [item for item in page if is_object(item)]
            if len(items) + len(entries) > limits.max_list_items:
                raise LimitExceeded(
                    "max_list_items",
                    limits.max_list_items,
                    f"{method} page {page_number} has too many entries",
                )
            size += json_size(entries, limit=limits.max_list_bytes - size)
            if size > limits.max_list_bytes:
                raise LimitExceeded(
                    "max_list_bytes", limits.max_list_bytes, f"{method} page {page_number} has too many bytes"
                )
            items.extend(entries)
            next_cursor = result.get("nextCursor")
            if not isinstance(next_cursor, str) or not next_cursor or next_cursor == cursor:
                return items
            cursor = next_cursor
        raise LimitExceeded(
            "max_list_pages",
            limits.max_list_pages,
            f"{method} has a next page after page {limits.max_list_pages}",
        )

    async def list_tools(self) -> list[Tool]:
        """``tools/list``, every page."""
        return [
            Tool(
                name=item["name"],
                description=_text(item.get("description")),
                input_schema=v if is_object(v := item.get("inputSchema")) else {},
                title=_text(item.get("title")),
                raw=item,
            )
            for item in await self._list_all("tools/list", "tools")
            if isinstance(item.get("name"), str)
        ]

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        timeout: Timeout = DEFAULT,
        progress: ProgressCallback | None = None,
    ) -> CallToolResult:
        """``tools/call``. A tool failure is a result with ``is_error`` True, not an exception."""
        params: dict[str, Any] = {"name": name, "arguments": arguments or {}}
        result = await self._requester.request("tools/call", params, timeout=timeout, progress=progress)
        return call_tool_result(_object(result, "tools/call"))

    async def list_resources(self) -> list[Resource]:
        """``resources/list``, every page."""
        return [
            Resource(
                uri=item["uri"],
                name=_text(item.get("name")),
                description=_text(item.get("description")),
                mime_type=_text(item.get("mimeType")),
                raw=item,
            )
            for item in await self._list_all("resources/list", "resources")
            if isinstance(item.get("uri"), str)
        ]

    async def list_resource_templates(self) -> list[ResourceTemplate]:
        """``resources/templates/list``, every page."""
        return [
            ResourceTemplate(
                uri_template=item["uriTemplate"],
                name=_text(item.get("name")),
                description=_text(item.get("description")),
                mime_type=_text(item.get("mimeType")),
                raw=item,
            )
            for item in await self._list_all("resources/templates/list", "resourceTemplates")
            if isinstance(item.get("uriTemplate"), str)
        ]

    async def read_resource(self, uri: str, *, timeout: Timeout = DEFAULT) -> ReadResourceResult:
        """``resources/read``. Note: MCP's ``-32002`` here means "Resource not found"."""
        result = _object(
            await self._requester.request("resources/read", {"uri": uri}, timeout=timeout), "resources/read"
        )
        contents = result.get("contents", [])
        return ReadResourceResult(contents=contents if is_array(contents) else [], raw=result)

    async def list_prompts(self) -> list[Prompt]:
        """``prompts/list``, every page."""
        return [
            Prompt(
                name=item["name"],
                description=_text(item.get("description")),
                arguments=v if is_array(v := item.get("arguments")) else [],
                raw=item,
            )
            for item in await self._list_all("prompts/list", "prompts")
            if isinstance(item.get("name"), str)
        ]

    async def get_prompt(
        self, name: str, arguments: dict[str, str] | None = None, *, timeout: Timeout = DEFAULT
    ) -> GetPromptResult:
        """``prompts/get``; ``arguments`` is sent whenever given, ``{}`` included."""
        params: dict[str, Any] = {"name": name}
        if arguments is not None:
            params["arguments"] = arguments
        result = _object(await self._requester.request("prompts/get", params, timeout=timeout), "prompts/get")
        messages = result.get("messages", [])
        return GetPromptResult(
            messages=messages if is_array(messages) else [],
            description=_text(result.get("description")),
            raw=result,
        )
