"""What a host offers an MCP server: roots, sampling and elicitation (MCP 2025-11-25 "Client
Features": Roots, Sampling, Elicitation; the same three as input requests of MCP 2026-07-28
"Multi Round-Trip Requests").

Rules of this module:

- An application serves a feature by giving its handler: ``HostHandlers(roots=...,
  sampling=..., elicitation=...)`` (or the same class attributes). ``ClientFeatures`` holds
  the three and says what the host advertises (``capabilities()``): each capability exactly
  when its handler is given, nothing else (advertise accurately).
- ``roots`` is a ``RootsProvider``: ``Roots`` (a static list, or a callable giving the list,
  sync or async) or the application's own object. When the list changes, ``Roots.set()`` or
  ``Roots.changed()`` tells every watching connection, which sends
  ``notifications/roots/list_changed`` (handshake era only: MCP 2026-07-28 removed it).
- Sampling and elicitation handlers get typed requests (``SamplingRequest``,
  ``ElicitationRequest``) read from the server's params by the pure functions here, and
  return typed results. Malformed params, or a mode or tool use the host did not advertise,
  are answered ``-32602`` with ``data.problems`` before any handler runs; a result of the
  wrong shape is the application's bug (``-32603``, logged).
- ``ClientFeatureService`` is the one place both paths go through: a server request
  (``roots/list``, ``sampling/createMessage``, ``elicitation/create``, routed by
  ``services.dispatch``) and an input request inside an ``InputRequiredResult`` (2026-07-28,
  answered by ``mcp_methods.MCPClient``). Each answer is reported as a ``server_request``
  observation.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias, TypeVar, cast

from mcpl_host.jsonrpc.errors import ErrorCode, HandlerError, MethodNotFound
from mcpl_host.jsonrpc.values import JSONObject, finite_number, is_array, is_object
from mcpl_host.logging import Logger

if TYPE_CHECKING:
    from mcpl_host.mcp_records import Tool

__all__ = [
    "CLIENT_FEATURE_METHODS",
    "AnswerReporter",
    "ClientFeatureService",
    "ClientFeatures",
    "ElicitationAction",
    "ElicitationHandler",
    "ElicitationMode",
    "ElicitationRequest",
    "ElicitationResult",
    "Root",
    "Roots",
    "RootsProvider",
    "RootsSource",
    "SamplingHandler",
    "SamplingMessage",
    "SamplingRequest",
    "SamplingResult",
    "RequestContext",
    "read_elicitation_request",
    "read_sampling_request",
    "reported_answer",
    "root",
]

#: The server requests these features answer (MCP 2025-11-25 "Client Features").
CLIENT_FEATURE_METHODS = frozenset({"roots/list", "sampling/createMessage", "elicitation/create"})

ElicitationMode = Literal["form", "url"]
ElicitationAction = Literal["accept", "decline", "cancel"]


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Who asked: ``server`` (its name), the request ``id`` as sent (string, number or None;
    None also for a request sent as a notification), ``method``, and ``transport``: the
    transport the request came on, as the sequence number of its ``ServerConnection`` within
    the server's ``HostedServer`` (``ServerConnection.sequence``: 1 for the first, one more
    for each connection opened after it, a restart included). A JSON-RPC ``id`` is unique
    only within one transport (JSON-RPC 2.0 §4; docs/protocol.md T1-T3): ``(transport, id)``
    names a request across restarts."""

    server: str
    id: Any
    method: str
    transport: int


class AnswerReporter(Protocol):
    """Where a served request's answer is reported (an ``observe.Reporter``)."""

    def handled_request(
        self,
        context: RequestContext,
        params: object,
        *,
        answer: object = None,
        error: dict[str, Any] | None = None,
        input_request: bool = False,
    ) -> None:
        """The request ``context`` with ``params`` was answered with ``answer`` (a result) or
        ``error`` (a JSON-RPC 2.0 §5.1 error object); ``input_request``: an input request of
        MCP 2026-07-28 rather than a server request."""
        ...


_Result = TypeVar("_Result")


async def reported_answer(
    reporter: AnswerReporter,
    context: RequestContext,
    params: Any,
    work: Awaitable[_Result],
    *,
    input_request: bool = False,
    shown: Callable[[Any], Any] | None = None,
) -> _Result:
    """Await ``work``, the serving of the request ``context`` with ``params``, and report how
    it is answered to ``reporter`` (``input_request`` passed on): with its result; with the
    error object a ``HandlerError`` carries; for any other exception with ``-32603``
    "Internal error" (JSON-RPC 2.0 §5.1). ``shown``: what of the result is reported (default:
    all of it). Returns the result; re-raises what ``work`` raised (a cancellation
    unreported)."""
    try:
        result = await work
    except HandlerError as exc:
        reporter.handled_request(context, params, error=exc.to_error(), input_request=input_request)
        raise
    except Exception:
        error = {"code": int(ErrorCode.INTERNAL_ERROR), "message": "Internal error"}
        reporter.handled_request(context, params, error=error, input_request=input_request)
        raise
    answer = result if shown is None else shown(result)
    reporter.handled_request(context, params, answer=answer, input_request=input_request)
    return result


# --- roots -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Root:
    """One root (MCP 2025-11-25 "Roots"): ``uri`` (a ``file://`` URI, as the revision
    requires), ``name`` (for display), ``meta`` (``_meta``)."""

    uri: str
    name: str | None = None
    meta: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not self.uri.startswith("file://"):
            raise ValueError(f'a root must be a file:// URI (MCP 2025-11-25 "Roots"), not {self.uri!r}')

    def to_json(self) -> JSONObject:
        out: JSONObject = {"uri": self.uri}
        if self.name is not None:
            out["name"] = self.name
        if self.meta is not None:
            out["_meta"] = dict(self.meta)
        return out


RootLike: TypeAlias = "Root | str | os.PathLike[str]"
#: A static list of roots, or a callable giving it (sync or async), read at each ``roots/list``.
RootsSource: TypeAlias = (
    "Iterable[RootLike] | Callable[[], Iterable[RootLike] | Awaitable[Iterable[RootLike]]]"
)


def root(value: Root | str | os.PathLike[str], name: str | None = None) -> Root:
    """A ``Root`` from a ``Root``, a ``file://`` URI, or a path (made absolute; its last
    component is the name unless ``name`` is given). Raises ``ValueError`` for a URI of
    another scheme."""
    if isinstance(value, Root):
        return value
    text = os.fspath(value)
    if "://" in text:
        return Root(text, name)
    path = Path(text).expanduser().resolve()
    return Root(path.as_uri(), name if name is not None else (path.name or str(path)))


class RootsProvider(Protocol):
    """What answers ``roots/list`` and says when the list changed."""

    async def list_roots(self, context: RequestContext) -> Sequence[Root]:
        """The roots now. Raise ``HandlerError`` to refuse."""
        ...

    def watch(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (it must not block) whenever the list changes; returns the
        function that stops watching."""
        ...


class Roots:
    """A ``RootsProvider`` over a static list or a callable (``RootsSource``).

    ``set(source)`` replaces the list (or callable) and tells the watchers; ``changed()``
    only tells them (for a callable whose answer changed). Each watcher is a connection that
    then sends ``notifications/roots/list_changed``. Safe to call from any task of the
    event loop; not thread-safe.
    """

    def __init__(self, source: RootsSource = ()) -> None:
        self._source: RootsSource = self._checked(source)
        self._watchers: list[Callable[[], None]] = []

    @staticmethod
    def _checked(source: RootsSource) -> RootsSource:
        if callable(source):
            return source
        return [root(item) for item in source]

    def __repr__(self) -> str:
        shown = "callable" if callable(self._source) else f"{len(cast('list[Root]', self._source))} roots"
        return f"<Roots {shown} watchers={len(self._watchers)}>"

    async def list_roots(self, context: RequestContext) -> Sequence[Root]:
        source = self._source
        if not callable(source):
            return list(cast("list[Root]", source))
        produced = source()
        items = await produced if inspect.isawaitable(produced) else produced
        return [root(item) for item in items]

    def set(self, source: RootsSource) -> None:
        """Replace the roots and tell every watcher. Raises ``ValueError`` for a root that is
        not a ``file://`` URI or a path."""
        self._source = self._checked(source)
        self.changed()

    def changed(self) -> None:
        """Tell every watcher that the list changed."""
        for callback in list(self._watchers):
            callback()

    def watch(self, callback: Callable[[], None]) -> Callable[[], None]:
        self._watchers.append(callback)

        def unwatch() -> None:
            if callback in self._watchers:
                self._watchers.remove(callback)

        return unwatch


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


# --- the features an application serves ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClientFeatures:
    """The client features an application serves (module rules); None: not served."""

    roots: RootsProvider | None = None
    sampling: SamplingHandler | None = None
    elicitation: ElicitationHandler | None = None

    @property
    def elicitation_modes(self) -> frozenset[str]:
        return frozenset(self.elicitation.modes) if self.elicitation is not None else frozenset()

    def serves(self, method: str) -> bool:
        """Whether ``method`` (``roots/list``, ``sampling/createMessage``,
        ``elicitation/create``) has a handler."""
        if method == "roots/list":
            return self.roots is not None
        if method == "sampling/createMessage":
            return self.sampling is not None
        if method == "elicitation/create":
            return self.elicitation is not None and bool(self.elicitation_modes)
        return False

    def capabilities(self, *, stateless: bool = False) -> JSONObject:
        """The client capabilities these handlers justify (MCP 2025-11-25 "Lifecycle",
        ClientCapabilities): ``roots`` with ``listChanged`` (MCP 2026-07-28 has no
        ``listChanged``: with ``stateless``, ``roots: {}``), ``sampling`` (with ``tools``
        when the handler supports tool use), ``elicitation`` with each mode served."""
        out: JSONObject = {}
        if self.roots is not None:
            out["roots"] = {} if stateless else {"listChanged": True}
        if self.sampling is not None:
            out["sampling"] = {"tools": {}} if self.sampling.supports_tools else {}
        modes = self.elicitation_modes
        if modes:
            out["elicitation"] = {mode: {} for mode in sorted(modes)}
        return out


class ClientFeatureService:
    """Serves ``roots/list``, ``sampling/createMessage`` and ``elicitation/create`` for one
    connection, from a server request or an input request (module rules)."""

    def __init__(self, features: ClientFeatures, reporter: AnswerReporter | None, *, log: Logger) -> None:
        self.features = features
        self._reporter = reporter
        self._log = log

    def serves(self, method: str) -> bool:
        return self.features.serves(method)

    async def serve(
        self, context: RequestContext, params: object, *, input_request: bool = False
    ) -> JSONObject:
        """The result for ``context.method`` with ``params``; reported as a
        ``server_request`` observation (``inputRequest: true`` for an input request of an
        ``InputRequiredResult``, whose ``id`` is its key).

        Raises:
            HandlerError: ``-32601`` (not served), ``-32602`` (malformed params), what the
                handler raised, or ``-32603`` for a result of the wrong shape (logged).
        """
        if self._reporter is None:
            return await self._answer(context, params)
        return await reported_answer(
            self._reporter, context, params, self._answer(context, params), input_request=input_request
        )

    async def _answer(self, context: RequestContext, params: object) -> JSONObject:
        features, method = self.features, context.method
        if method == "roots/list" and features.roots is not None:
            roots = await features.roots.list_roots(context)
            if not all(isinstance(r, Root) for r in roots):  # pyright: ignore[reportUnnecessaryIsInstance]
                return self._wrong(method, ["a roots provider must return Root objects"])
            return {"roots": [r.to_json() for r in roots]}
        if method == "sampling/createMessage" and features.sampling is not None:
            request = read_sampling_request(params, tools_allowed=features.sampling.supports_tools)
            result = await features.sampling.create_message(context, request)
            problems = sampling_result_problems(result)
            return self._wrong(method, problems) if problems else result.to_json()
        if method == "elicitation/create" and features.serves(method):
            assert features.elicitation is not None
            request_e = read_elicitation_request(params, modes=features.elicitation_modes)
            answer = await features.elicitation.elicit(context, request_e)
            problems = elicitation_result_problems(answer)
            return self._wrong(method, problems) if problems else answer.to_json()
        raise MethodNotFound(method)

    def _wrong(self, method: str, problems: list[str]) -> JSONObject:
        self._log.error("handler returned a result of the wrong shape", method=method, problems=problems)
        raise HandlerError(ErrorCode.INTERNAL_ERROR, "Internal error")
