"""The sampling and elicitation requests a server sends and what an application answers
(MCP 2025-11-25 "Client Features": Sampling, Elicitation; the same two as input requests of
MCP 2026-07-28 "Multi Round-Trip Requests"): the typed requests (``SamplingRequest``,
``ElicitationRequest``) read from the server's params by the pure functions here, the
handlers' protocols and their typed results, and the checks of a result's shape.

Malformed params, or a mode or tool use the host did not advertise, raise ``HandlerError``
``-32602`` with ``data.problems`` (answered before any handler runs); a result's problems
are listed, never raised (``mcpl_host.client_features`` answers them ``-32603``). Loaded by
the first sampling or elicitation request, or by an application that names these types: a
connection that serves neither never loads them. ``mcpl_host.client_features`` gives the
same names.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

from mcpl_host.jsonrpc.errors import ErrorCode, HandlerError
from mcpl_host.jsonrpc.values import JSONObject, finite_number, is_array, is_object

if TYPE_CHECKING:
    from mcpl_host.client_features import RequestContext
    from mcpl_host.mcp_records import Tool

__all__ = [
    "ElicitationAction",
    "ElicitationHandler",
    "ElicitationMode",
    "ElicitationRequest",
    "ElicitationResult",
    "SamplingHandler",
    "SamplingMessage",
    "SamplingRequest",
    "SamplingResult",
    "elicitation_result_problems",
    "read_elicitation_request",
    "read_sampling_request",
    "sampling_result_problems",
]

#: An elicitation's mode (MCP 2025-11-25 "Elicitation": form or URL mode).
ElicitationMode = Literal["form", "url"]
#: How the user answered an elicitation.
ElicitationAction = Literal["accept", "decline", "cancel"]


# --- sampling ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SamplingMessage:
    """One message of a sampling request: ``role`` (``"user"`` / ``"assistant"``) and its
    ``content`` blocks (JSON objects; a single block is given as a one-item list): ``text``,
    ``image``, ``audio``, and with tool use ``tool_use`` / ``tool_result``."""

    role: str
    content: list[dict[str, Any]]

    @property
    def text(self) -> str:
        """The text blocks joined by newlines."""
        return "\n".join(
            b["text"] for b in self.content if b.get("type") == "text" and isinstance(b.get("text"), str)
        )


@dataclass(frozen=True, slots=True)
class SamplingRequest:
    """``sampling/createMessage`` params (MCP 2025-11-25 "Sampling"): ``messages``,
    ``max_tokens``, ``system_prompt``, ``temperature``, ``stop_sequences``,
    ``model_preferences`` (hints and priorities, as sent), ``include_context`` (soft-deprecated
    values included), ``metadata``, and with tool use ``tools`` (``Tool``) and
    ``tool_choice`` (``{"mode": "auto" | "required" | "none"}``). ``raw``: the params."""

    messages: tuple[SamplingMessage, ...]
    max_tokens: int
    system_prompt: str | None = None
    temperature: float | None = None
    stop_sequences: tuple[str, ...] = ()
    model_preferences: dict[str, Any] | None = None
    include_context: str | None = None
    metadata: dict[str, Any] | None = None
    tools: tuple[Tool, ...] = ()
    tool_choice: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict[str, Any])


@dataclass(frozen=True, slots=True)
class SamplingResult:
    """What the model produced (``CreateMessageResult``): ``content`` (one block, or a list
    of blocks: with tool use, ``tool_use`` blocks), ``model`` (its name), ``stop_reason``
    (``"endTurn"``, ``"stopSequence"``, ``"maxTokens"``, ``"toolUse"`` or another string),
    ``role`` (``"assistant"``)."""

    content: dict[str, Any] | list[dict[str, Any]]
    model: str
    stop_reason: str | None = "endTurn"
    role: str = "assistant"
    meta: dict[str, Any] | None = None

    @classmethod
    def text(cls, text: str, model: str, stop_reason: str = "endTurn") -> SamplingResult:
        """A one-text-block answer."""
        return cls({"type": "text", "text": text}, model, stop_reason)

    def to_json(self) -> JSONObject:
        out: JSONObject = {"role": self.role, "content": self.content, "model": self.model}
        if self.stop_reason is not None:
            out["stopReason"] = self.stop_reason
        if self.meta is not None:
            out["_meta"] = dict(self.meta)
        return out


class SamplingHandler(Protocol):
    """Answers ``sampling/createMessage`` (a model call on the server's behalf; the host
    should let a person review it, MCP 2025-11-25 "Sampling", security).
    ``supports_tools``: the handler runs tool use (``tools``, ``toolChoice``): the host then
    advertises ``sampling.tools``."""

    @property
    def supports_tools(self) -> bool: ...

    async def create_message(self, context: RequestContext, request: SamplingRequest) -> SamplingResult:
        """The model's answer. Raise ``HandlerError`` to refuse (e.g. ``-1``, "User
        rejected sampling request")."""
        ...


def _problem(problems: list[str]) -> HandlerError:
    return HandlerError(
        ErrorCode.INVALID_PARAMS, f"Invalid params: {'; '.join(problems)}", {"problems": problems}
    )


def _blocks(value: object) -> list[dict[str, Any]] | None:
    if is_object(value):
        return [value]
    if is_array(value) and all(is_object(item) for item in value):
        return cast("list[dict[str, Any]]", value)
    return None


def read_sampling_request(params: object, *, tools_allowed: bool) -> SamplingRequest:
    """A ``SamplingRequest`` from ``sampling/createMessage`` params (MCP 2025-11-25
    "Sampling"). ``tools_allowed``: the host advertised ``sampling.tools``.

    Raises:
        HandlerError: ``-32602`` naming every problem (``data.problems``): no non-empty
            ``messages`` array of ``{role, content}``, ``maxTokens`` not a positive integer,
            ``tools`` / ``toolChoice`` sent without ``sampling.tools`` advertised, or of
            the wrong shape.
    """
    if not is_object(params):
        raise _problem(["params must be an object"])
    problems: list[str] = []
    messages: list[SamplingMessage] = []
    raw_messages = params.get("messages")
    if not is_array(raw_messages) or not raw_messages:
        problems.append("messages must be a non-empty array")
    else:
        for index, message in enumerate(raw_messages):
            role = message.get("role") if is_object(message) else None
            blocks = _blocks(message.get("content")) if is_object(message) else None
            if role not in ("user", "assistant") or blocks is None:
                problems.append(f"messages[{index}] must have role user or assistant and object content")
            else:
                messages.append(SamplingMessage(cast("str", role), blocks))
    max_tokens = params.get("maxTokens")
    tokens = finite_number(max_tokens)  # past a double (1e400 is an infinity): refused
    if tokens is None or tokens < 1:
        problems.append("maxTokens must be a positive number")
    tools: list[Tool] = []
    tool_choice = params.get("toolChoice")
    if ("tools" in params or "toolChoice" in params) and not tools_allowed:
        problems.append(
            "tools and toolChoice need the sampling.tools capability, which this host did not declare"
        )
    elif "tools" in params:
        from mcpl_host.mcp_records import read_tool  # noqa: PLC0415 (a sampling request with tools)

        raw_tools = params.get("tools")
        read = [read_tool(t) for t in raw_tools if is_object(t)] if is_array(raw_tools) else None
        if read is None or any(t is None for t in read) or len(read) != len(cast("list[Any]", raw_tools)):
            problems.append("tools must be an array of tools, each with a name")
        else:
            tools = [t for t in read if t is not None]
    if tool_choice is not None and not (
        is_object(tool_choice) and tool_choice.get("mode", "auto") in ("auto", "required", "none")
    ):
        problems.append('toolChoice must be {"mode": "auto" | "required" | "none"}')
    if problems:
        raise _problem(problems)
    temperature = params.get("temperature")
    stops = params.get("stopSequences")
    include = params.get("includeContext")
    system = params.get("systemPrompt")
    preferences = params.get("modelPreferences")
    metadata = params.get("metadata")
    return SamplingRequest(
        messages=tuple(messages),
        max_tokens=max_tokens if isinstance(max_tokens, int) else int(cast("float", tokens)),
        system_prompt=system if isinstance(system, str) else None,
        temperature=finite_number(temperature),
        stop_sequences=tuple(s for s in stops if isinstance(s, str)) if is_array(stops) else (),
        model_preferences=preferences if is_object(preferences) else None,
        include_context=include if isinstance(include, str) else None,
        metadata=metadata if is_object(metadata) else None,
        tools=tuple(tools),
        tool_choice=tool_choice if is_object(tool_choice) else None,
        raw=params,
    )


def sampling_result_problems(result: object) -> list[str]:
    """What is wrong with a handler's ``SamplingResult`` (empty: nothing)."""
    if not isinstance(result, SamplingResult):
        return [f"a sampling handler must return a SamplingResult, not {type(result).__name__}"]
    problems: list[str] = []
    if result.role not in ("user", "assistant"):
        problems.append("role must be user or assistant")
    blocks = _blocks(result.content)
    if blocks is None or not all(isinstance(b.get("type"), str) for b in blocks):
        problems.append("content must be a block or a list of blocks, each with a type")
    if not isinstance(result.model, str):  # pyright: ignore[reportUnnecessaryIsInstance]
        problems.append("model must be a string")
    return problems


# --- elicitation -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ElicitationRequest:
    """``elicitation/create`` params (MCP 2025-11-25 "Elicitation"): ``mode`` (``"form"``,
    also when the server names none, as in 2025-06-18; or ``"url"``), ``message``;
    form mode: ``requested_schema`` (a flat object schema of primitive properties);
    URL mode: ``url`` (to show, never opened by the library) and ``elicitation_id``
    (2025-11-25; absent in 2026-07-28). ``raw``: the params."""

    mode: ElicitationMode
    message: str
    requested_schema: dict[str, Any] | None = None
    url: str | None = None
    elicitation_id: str | None = None
    raw: dict[str, Any] = field(default_factory=dict[str, Any])


@dataclass(frozen=True, slots=True)
class ElicitationResult:
    """The person's answer: ``action`` (``"accept"``, ``"decline"``, ``"cancel"``) and, for
    an accepted form, ``content`` (property name to a string, number, boolean, or list of
    strings)."""

    action: ElicitationAction
    content: dict[str, Any] | None = None

    def to_json(self) -> JSONObject:
        out: JSONObject = {"action": self.action}
        if self.action == "accept" and self.content is not None:
            out["content"] = dict(self.content)
        return out


class ElicitationHandler(Protocol):
    """Answers ``elicitation/create`` (asks a person). ``modes``: the modes it serves
    (``"form"``, ``"url"``): the host advertises exactly these."""

    @property
    def modes(self) -> Collection[ElicitationMode]: ...

    async def elicit(self, context: RequestContext, request: ElicitationRequest) -> ElicitationResult:
        """The person's answer. Raise ``HandlerError`` to refuse."""
        ...


def read_elicitation_request(params: object, *, modes: Collection[str]) -> ElicitationRequest:
    """An ``ElicitationRequest`` from ``elicitation/create`` params. ``modes``: what the
    host advertised.

    Raises:
        HandlerError: ``-32602`` naming every problem: no string ``message``, a mode not
            advertised, a form without an object ``requestedSchema``, a URL mode without a
            string ``url``.
    """
    if not is_object(params):
        raise _problem(["params must be an object"])
    mode = params.get("mode", "form")
    problems: list[str] = []
    if not isinstance(params.get("message"), str):
        problems.append("message must be a string")
    if mode not in ("form", "url"):
        problems.append('mode must be "form" or "url"')
    elif mode not in modes:
        problems.append(f"elicitation mode {mode!r} is not one this host declared")
    schema = params.get("requestedSchema")
    if mode == "form" and not is_object(schema):
        problems.append("requestedSchema must be an object in form mode")
    if mode == "url" and not isinstance(params.get("url"), str):
        problems.append("url must be a string in url mode")
    if problems:
        raise _problem(problems)
    elicitation_id = params.get("elicitationId")
    return ElicitationRequest(
        mode=cast("ElicitationMode", mode),
        message=cast("str", params["message"]),
        requested_schema=cast("dict[str, Any]", schema) if mode == "form" else None,
        url=cast("str", params.get("url")) if mode == "url" else None,
        elicitation_id=elicitation_id if isinstance(elicitation_id, str) else None,
        raw=params,
    )


def _form_value_ok(value: object) -> bool:
    if isinstance(value, (str, int, float, bool)):
        return True
    return is_array(value) and all(isinstance(item, str) for item in value)


def elicitation_result_problems(result: object) -> list[str]:
    """What is wrong with a handler's ``ElicitationResult`` (empty: nothing)."""
    if not isinstance(result, ElicitationResult):
        return [f"an elicitation handler must return an ElicitationResult, not {type(result).__name__}"]
    problems: list[str] = []
    if result.action not in ("accept", "decline", "cancel"):
        problems.append("action must be accept, decline or cancel")
    if result.content is not None and not (
        is_object(result.content) and all(_form_value_ok(v) for v in result.content.values())
    ):
        problems.append("content values must be strings, numbers, booleans or lists of strings")
    return problems
