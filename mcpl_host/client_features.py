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
  ``ElicitationRequest``) read from the server's params by the pure functions of
  ``mcpl_host.client_requests`` (loaded by the first such request; this module gives its
  names too), and return typed results. Malformed params, or a mode or tool use the host did not advertise,
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
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar, cast

from mcpl_host.jsonrpc.errors import ErrorCode, HandlerError, MethodNotFound
from mcpl_host.jsonrpc.values import JSONObject
from mcpl_host.logging import Logger

if TYPE_CHECKING:
    from mcpl_host.client_requests import (
        ElicitationAction,
        ElicitationHandler,
        ElicitationMode,
        ElicitationRequest,
        ElicitationResult,
        SamplingHandler,
        SamplingMessage,
        SamplingRequest,
        SamplingResult,
        read_elicitation_request,
        read_sampling_request,
    )
    from mcpl_host.client_requests import (
        elicitation_result_problems as elicitation_result_problems,
    )
    from mcpl_host.client_requests import (
        sampling_result_problems as sampling_result_problems,
    )

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
            from mcpl_host.client_requests import read_sampling_request, sampling_result_problems  # noqa: PLC0415

            request = read_sampling_request(params, tools_allowed=features.sampling.supports_tools)
            result = await features.sampling.create_message(context, request)
            problems = sampling_result_problems(result)
            return self._wrong(method, problems) if problems else result.to_json()
        if method == "elicitation/create" and features.serves(method):
            assert features.elicitation is not None
            from mcpl_host.client_requests import elicitation_result_problems, read_elicitation_request  # noqa: PLC0415

            request_e = read_elicitation_request(params, modes=features.elicitation_modes)
            answer = await features.elicitation.elicit(context, request_e)
            problems = elicitation_result_problems(answer)
            return self._wrong(method, problems) if problems else answer.to_json()
        raise MethodNotFound(method)

    def _wrong(self, method: str, problems: list[str]) -> JSONObject:
        self._log.error("handler returned a result of the wrong shape", method=method, problems=problems)
        raise HandlerError(ErrorCode.INTERNAL_ERROR, "Internal error")


#: The names of ``mcpl_host.client_requests`` this module gives too, imported on first use:
#: a connection that serves neither sampling nor elicitation never loads them.
_REQUEST_NAMES = frozenset(
    {
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
    }
)


def __getattr__(name: str) -> Any:
    """A sampling or elicitation name (``mcpl_host.client_requests``), imported on first
    use; raises ``AttributeError`` for any other name."""
    if name not in _REQUEST_NAMES:
        raise AttributeError(f"module 'mcpl_host.client_features' has no attribute {name!r}")
    import importlib  # noqa: PLC0415

    return getattr(importlib.import_module("mcpl_host.client_requests"), name)
