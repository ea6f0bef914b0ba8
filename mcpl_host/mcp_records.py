"""Typed records of what an MCP server lists and answers (MCP 2025-11-25 "Schema"; also the
2026-07-28 revision, whose records add no field a client reads beyond these).

Rules of this module:

- Pure reading: a JSON object in, a frozen dataclass out. Every field the schema revision
  defines is a typed attribute; the object as sent stays in ``raw`` (unknown fields
  included), so nothing is lost.
- A field of the wrong type reads as its default (None, empty), never as an error: a list
  entry is dropped only when its identifying field (``name``, ``uri``, ``uriTemplate``) is
  missing (the caller decides). Content blocks stay JSON objects (``dict``): their shapes are
  a union the application reads by ``type``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from mcpl_host.jsonrpc.values import finite_number, is_array, is_object
from mcpl_host.tool_classes import ClassSource, ToolClassTables, declared_classes, effective_classes

__all__ = [
    "Annotations",
    "CallToolResult",
    "CompleteResult",
    "GetPromptResult",
    "Icon",
    "Prompt",
    "PromptArgument",
    "PromptMessage",
    "ReadResourceResult",
    "Resource",
    "ResourceContents",
    "ResourceTemplate",
    "Tool",
    "ToolAnnotations",
    "call_tool_result",
    "classified",
    "complete_result",
    "get_prompt_result",
    "read_prompt",
    "read_resource",
    "read_resource_result",
    "read_resource_template",
    "read_tool",
]


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _flag(value: object) -> bool | None:
    return value if isinstance(value, bool) else None


def _priority(value: object) -> float | None:
    """An annotation's ``priority``: a number from 0 to 1 (MCP 2025-11-25 "Annotations"),
    else None (past a double, or outside the range)."""
    number = finite_number(value)
    return number if number is not None and 0 <= number <= 1 else None


def _integer(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _object_or_none(value: object) -> dict[str, Any] | None:
    return value if is_object(value) else None


def _strings(value: object) -> tuple[str, ...]:
    return tuple(item for item in value if isinstance(item, str)) if is_array(value) else ()


def _objects(value: object) -> list[dict[str, Any]]:
    return [item for item in value if is_object(item)] if is_array(value) else []


@dataclass(frozen=True, slots=True)
class Icon:
    """One entry of ``icons`` (2025-11-25 "Icons"): ``src`` (an https: or data: URI, not
    fetched by this library), ``mime_type``, ``sizes`` (e.g. ``("48x48",)``), ``theme``
    (``"light"`` / ``"dark"``)."""

    src: str
    mime_type: str | None = None
    sizes: tuple[str, ...] = ()
    theme: str | None = None


def _icons(value: object) -> tuple[Icon, ...]:
    return tuple(
        Icon(
            src=src,
            mime_type=_text(item.get("mimeType")),
            sizes=_strings(item.get("sizes")),
            theme=_text(item.get("theme")),
        )
        for item in _objects(value)
        if isinstance(src := item.get("src"), str)
    )


@dataclass(frozen=True, slots=True)
class Annotations:
    """``annotations`` of a resource, template or content block (2025-11-25 "Annotations"):
    ``audience`` (roles), ``priority`` (0 to 1), ``last_modified`` (ISO 8601 text)."""

    audience: tuple[str, ...] = ()
    priority: float | None = None
    last_modified: str | None = None


def _annotations(value: object) -> Annotations | None:
    if not is_object(value):
        return None
    return Annotations(
        audience=_strings(value.get("audience")),
        priority=_priority(value.get("priority")),
        last_modified=_text(value.get("lastModified")),
    )


@dataclass(frozen=True, slots=True)
class ToolAnnotations:
    """A tool's ``annotations`` (2025-11-25 "Tools", ToolAnnotations): hints, never to be
    trusted for security decisions from an untrusted server."""

    title: str | None = None
    read_only_hint: bool | None = None
    destructive_hint: bool | None = None
    idempotent_hint: bool | None = None
    open_world_hint: bool | None = None


@dataclass(frozen=True, slots=True)
class Tool:
    """An entry of ``tools/list`` (2025-11-25 "Tools"): ``name``, ``title``, ``description``,
    ``input_schema`` and ``output_schema`` (JSON Schema objects; ``output_schema`` None when
    the tool declares none), ``annotations``, ``icons``, ``task_support`` (``execution.
    taskSupport``: ``"forbidden"``, ``"optional"`` or ``"required"``; None when not said),
    ``meta`` (``_meta``), ``raw`` (the object as sent); and the host's reading of it:
    ``classes``, its effective tool classes (RFC-008 §5; ``()``: unclassed, the most
    restrictive), and ``class_source`` (``"override"``, ``"host"``, ``"server"`` or
    ``"none"``; ``mcpl_host.tool_classes``). As read, the server's declaration; an
    ``MCPClient`` listing applies the server's tables (``classified``)."""

    name: str
    description: str | None = None
    input_schema: dict[str, Any] = field(default_factory=dict[str, Any])
    title: str | None = None
    output_schema: dict[str, Any] | None = None
    annotations: ToolAnnotations | None = None
    icons: tuple[Icon, ...] = ()
    task_support: str | None = None
    meta: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict[str, Any])
    classes: tuple[str, ...] = ()
    class_source: ClassSource = "none"


def classified(tool: Tool, tables: ToolClassTables | None) -> Tool:
    """``tool`` with its effective classes under ``tables`` (RFC-008 §5.1: override, then
    host, then the server's declaration); description, schema and ``raw`` untouched (§7)."""
    classes, source = effective_classes(tool.name, declared_classes(tool.meta), tables)
    if (classes, source) == (tool.classes, tool.class_source):
        return tool
    return replace(tool, classes=classes, class_source=source)


def read_tool(item: dict[str, Any]) -> Tool | None:
    """A ``Tool`` from one ``tools/list`` entry; None without a string ``name``."""
    name = item.get("name")
    if not isinstance(name, str):
        return None
    hints = item.get("annotations")
    execution = item.get("execution")
    return Tool(
        name=name,
        description=_text(item.get("description")),
        input_schema=v if is_object(v := item.get("inputSchema")) else {},
        title=_text(item.get("title")),
        output_schema=_object_or_none(item.get("outputSchema")),
        annotations=ToolAnnotations(
            title=_text(hints.get("title")),
            read_only_hint=_flag(hints.get("readOnlyHint")),
            destructive_hint=_flag(hints.get("destructiveHint")),
            idempotent_hint=_flag(hints.get("idempotentHint")),
            open_world_hint=_flag(hints.get("openWorldHint")),
        )
        if is_object(hints)
        else None,
        icons=_icons(item.get("icons")),
        task_support=_text(execution.get("taskSupport")) if is_object(execution) else None,
        meta=_object_or_none(item.get("_meta")),
        raw=item,
        classes=(declared := declared_classes(item.get("_meta"))),
        class_source="server" if declared else "none",
    )


@dataclass(frozen=True, slots=True)
class Resource:
    """An entry of ``resources/list`` (2025-11-25 "Resources"): ``uri``, ``name``, ``title``,
    ``description``, ``mime_type``, ``size`` (bytes), ``annotations``, ``icons``, ``meta``."""

    uri: str
    name: str | None = None
    description: str | None = None
    mime_type: str | None = None
    title: str | None = None
    size: int | None = None
    annotations: Annotations | None = None
    icons: tuple[Icon, ...] = ()
    meta: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict[str, Any])


def read_resource(item: dict[str, Any]) -> Resource | None:
    """A ``Resource`` from one ``resources/list`` entry; None without a string ``uri``."""
    uri = item.get("uri")
    if not isinstance(uri, str):
        return None
    return Resource(
        uri=uri,
        name=_text(item.get("name")),
        description=_text(item.get("description")),
        mime_type=_text(item.get("mimeType")),
        title=_text(item.get("title")),
        size=_integer(item.get("size")),
        annotations=_annotations(item.get("annotations")),
        icons=_icons(item.get("icons")),
        meta=_object_or_none(item.get("_meta")),
        raw=item,
    )


@dataclass(frozen=True, slots=True)
class ResourceTemplate:
    """An entry of ``resources/templates/list`` (2025-11-25 "Resources", templates):
    ``uri_template`` (RFC 6570), ``name``, ``title``, ``description``, ``mime_type``,
    ``annotations``, ``icons``, ``meta``."""

    uri_template: str
    name: str | None = None
    description: str | None = None
    mime_type: str | None = None
    title: str | None = None
    annotations: Annotations | None = None
    icons: tuple[Icon, ...] = ()
    meta: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict[str, Any])


def read_resource_template(item: dict[str, Any]) -> ResourceTemplate | None:
    """A ``ResourceTemplate`` from one entry; None without a string ``uriTemplate``."""
    template = item.get("uriTemplate")
    if not isinstance(template, str):
        return None
    return ResourceTemplate(
        uri_template=template,
        name=_text(item.get("name")),
        description=_text(item.get("description")),
        mime_type=_text(item.get("mimeType")),
        title=_text(item.get("title")),
        annotations=_annotations(item.get("annotations")),
        icons=_icons(item.get("icons")),
        meta=_object_or_none(item.get("_meta")),
        raw=item,
    )


@dataclass(frozen=True, slots=True)
class PromptArgument:
    """One argument of a prompt: ``name``, ``title``, ``description``, ``required``."""

    name: str
    title: str | None = None
    description: str | None = None
    required: bool = False


@dataclass(frozen=True, slots=True)
class Prompt:
    """An entry of ``prompts/list`` (2025-11-25 "Prompts"): ``name``, ``title``,
    ``description``, ``arguments`` (``PromptArgument``), ``icons``, ``meta``."""

    name: str
    description: str | None = None
    arguments: list[PromptArgument] = field(default_factory=list[PromptArgument])
    title: str | None = None
    icons: tuple[Icon, ...] = ()
    meta: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict[str, Any])


def read_prompt(item: dict[str, Any]) -> Prompt | None:
    """A ``Prompt`` from one ``prompts/list`` entry; None without a string ``name``."""
    name = item.get("name")
    if not isinstance(name, str):
        return None
    return Prompt(
        name=name,
        description=_text(item.get("description")),
        arguments=[
            PromptArgument(
                name=arg_name,
                title=_text(arg.get("title")),
                description=_text(arg.get("description")),
                required=arg.get("required") is True,
            )
            for arg in _objects(item.get("arguments"))
            if isinstance(arg_name := arg.get("name"), str)
        ],
        title=_text(item.get("title")),
        icons=_icons(item.get("icons")),
        meta=_object_or_none(item.get("_meta")),
        raw=item,
    )


@dataclass(frozen=True, slots=True)
class CallToolResult:
    """``tools/call`` (2025-11-25 "Tools"): ``content`` blocks (JSON objects), ``is_error``,
    ``structured_content`` (any JSON value, or None), ``meta``; ``model_content``: the
    model-visible form of ``content`` (MCPL §19.5: each reference a host-made stub; what a
    framework should show the model), set by a connection's ``MCPClient.call_tool``, else
    None."""

    content: list[Any]
    is_error: bool = False
    structured_content: Any = None
    meta: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict[str, Any])
    model_content: list[dict[str, Any]] | None = None

    @property
    def text(self) -> str:
        """The text blocks joined by newlines (a convenience for display)."""
        return "\n".join(
            block["text"] for block in self.content if is_object(block) and isinstance(block.get("text"), str)
        )


def call_tool_result(result: dict[str, Any]) -> CallToolResult:
    """Read a ``tools/call`` result object (MCP 2025-11-25 "Tools")."""
    content = result.get("content", [])
    return CallToolResult(
        content=content if is_array(content) else [],
        is_error=result.get("isError") is True,
        structured_content=result.get("structuredContent"),
        meta=_object_or_none(result.get("_meta")),
        raw=result,
    )


@dataclass(frozen=True, slots=True)
class ResourceContents:
    """One entry of ``resources/read`` ``contents``: ``uri``, ``mime_type``, and ``text`` or
    ``blob`` (base64 text, not decoded here), ``meta``."""

    uri: str
    mime_type: str | None = None
    text: str | None = None
    blob: str | None = None
    meta: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict[str, Any])


@dataclass(frozen=True, slots=True)
class ReadResourceResult:
    """``resources/read`` (2025-11-25 "Resources"): ``contents`` (``ResourceContents``; an
    entry without a string ``uri`` is left out), ``meta``."""

    contents: list[ResourceContents]
    meta: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict[str, Any])


def read_resource_result(result: dict[str, Any]) -> ReadResourceResult:
    """Read a ``resources/read`` result object."""
    return ReadResourceResult(
        contents=[
            ResourceContents(
                uri=uri,
                mime_type=_text(item.get("mimeType")),
                text=_text(item.get("text")),
                blob=_text(item.get("blob")),
                meta=_object_or_none(item.get("_meta")),
                raw=item,
            )
            for item in _objects(result.get("contents"))
            if isinstance(uri := item.get("uri"), str)
        ],
        meta=_object_or_none(result.get("_meta")),
        raw=result,
    )


@dataclass(frozen=True, slots=True)
class PromptMessage:
    """One message of ``prompts/get``: ``role`` (``"user"`` / ``"assistant"``) and one
    ``content`` block (a JSON object)."""

    role: str
    content: dict[str, Any]


@dataclass(frozen=True, slots=True)
class GetPromptResult:
    """``prompts/get`` (2025-11-25 "Prompts"): ``messages`` (``PromptMessage``; an entry
    without a string role or an object content is left out), ``description``, ``meta``."""

    messages: list[PromptMessage]
    description: str | None = None
    meta: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict[str, Any])


def get_prompt_result(result: dict[str, Any]) -> GetPromptResult:
    """Read a ``prompts/get`` result object."""
    return GetPromptResult(
        messages=[
            PromptMessage(role=role, content=content)
            for item in _objects(result.get("messages"))
            if isinstance(role := item.get("role"), str) and is_object(content := item.get("content"))
        ],
        description=_text(result.get("description")),
        meta=_object_or_none(result.get("_meta")),
        raw=result,
    )


@dataclass(frozen=True, slots=True)
class CompleteResult:
    """``completion/complete`` (2025-11-25 "Utilities: Completion"): ``values`` (at most
    100 per the revision), ``total`` (or None), ``has_more``."""

    values: list[str]
    total: int | None = None
    has_more: bool = False
    raw: dict[str, Any] = field(default_factory=dict[str, Any])


def complete_result(result: dict[str, Any]) -> CompleteResult:
    """Read a ``completion/complete`` result object (``completion`` missing: no values)."""
    completion = result.get("completion")
    completion = completion if is_object(completion) else {}
    return CompleteResult(
        values=list(_strings(completion.get("values"))),
        total=_integer(completion.get("total")),
        has_more=completion.get("hasMore") is True,
        raw=result,
    )
