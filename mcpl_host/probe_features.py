"""Client features for testing a server by hand (``mcpl-host probe --root/--sampling-reply/
--elicit-reply/--ask``, and ``call``, ``read``, ``prompt``, ``send``): canned answers, or a
prompt on the terminal.

Rules of this module:

- The four options are declared once, here (``client_feature_options``), and every command
  that takes them takes them from here; ``feature_handlers`` turns their values into the
  handlers (usage errors as ``click.UsageError``, exit 2, never repeating a reply).
- ``CannedSampling`` answers every ``sampling/createMessage`` with one text; ``CannedElicitation``
  answers every ``elicitation/create`` with one action (and, for an accepted form, one
  content object), in both modes (MCP 2025-11-25 "Elicitation"). An accepted form carries,
  for each field the reply leaves out, the ``default`` its ``requestedSchema`` declares
  (``form_defaults``): what a person accepting the form as pre-filled would send (SEP-1034,
  defaults for every primitive type). The terminal's questions offer the same defaults.
- ``TerminalSampling`` and ``TerminalElicitation`` ask the person at the terminal (stderr
  and stdin, through click), one question at a time (a lock), from a worker thread so the
  event loop goes on. Every text the server sent is shown escaped (``report.safe_text``);
  the URL of a URL-mode elicitation is shown, never opened.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, TypeVar, cast

import anyio
import anyio.from_thread
import anyio.lowlevel
import click

from mcpl_host.cli_target import root_option
from mcpl_host.client_features import (
    ElicitationAction,
    ElicitationMode,
    ElicitationRequest,
    ElicitationResult,
    Roots,
    SamplingRequest,
    SamplingResult,
)
from mcpl_host.handlers import HostHandlers
from mcpl_host.jsonrpc.values import JSONObject, is_array, is_object
from mcpl_host.probing import PROBE_MODEL, InferenceReply
from mcpl_host.report import safe_text

if TYPE_CHECKING:
    from mcpl_host.handlers import RequestContext

__all__ = [
    "CannedElicitation",
    "CannedSampling",
    "TerminalElicitation",
    "TerminalSampling",
    "elicit_reply_option",
    "elicitation_reply",
    "client_feature_options",
    "exit_now_if_abandoned",
    "form_defaults",
    "feature_handlers",
    "probe_handlers",
]

_BOTH_MODES: tuple[ElicitationMode, ...] = ("form", "url")
T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])
_ACTIONS: dict[str, ElicitationAction] = {"accept": "accept", "decline": "decline", "cancel": "cancel"}


class CannedSampling:
    """Answers every sampling request with ``text`` (no tool use)."""

    supports_tools = False

    def __init__(self, text: str, model: str = PROBE_MODEL) -> None:
        self.text = text
        self.model = model

    async def create_message(self, context: RequestContext, request: SamplingRequest) -> SamplingResult:
        return SamplingResult.text(self.text, self.model)


def form_defaults(schema: object) -> JSONObject:
    """The ``default`` of each property of a form's ``requestedSchema`` that declares one
    (MCP 2025-11-25 "Elicitation": a flat object of primitives), by property name; ``{}``
    for anything else."""
    properties = schema.get("properties") if is_object(schema) else None
    if not is_object(properties):
        return {}
    return {
        name: spec["default"] for name, spec in properties.items() if is_object(spec) and "default" in spec
    }


class CannedElicitation:
    """Answers every elicitation with ``action``; an accepted form gets ``content``."""

    modes: Collection[ElicitationMode] = _BOTH_MODES

    def __init__(self, action: ElicitationAction, content: dict[str, Any] | None = None) -> None:
        self.action: ElicitationAction = action
        self.content = content

    async def elicit(self, context: RequestContext, request: ElicitationRequest) -> ElicitationResult:
        if self.action != "accept" or request.mode == "url":
            return ElicitationResult(self.action)
        return ElicitationResult(
            "accept", {**form_defaults(request.requested_schema), **(self.content or {})}
        )


class _Terminal:
    """One question at a time, asked from a daemon thread: a cancelled wait (Ctrl-C) leaves
    the thread blocked on the terminal, and the process can still exit (a worker thread of
    ``anyio.to_thread`` would be joined at exit, waiting for an answer nobody types)."""

    def __init__(self) -> None:
        self._lock: anyio.Lock | None = None  # made in the event loop, at the first question
        #: A question was left unanswered (its wait cancelled): its thread still reads stdin.
        self.abandoned = False

    async def ask(self, question: Callable[[], T]) -> T:
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            done = anyio.Event()
            token = anyio.lowlevel.current_token()
            box: list[Any] = []

            def run() -> None:
                try:
                    box.append((True, question()))
                except BaseException as exc:  # handed to the waiting task
                    box.append((False, exc))
                with contextlib.suppress(RuntimeError):  # the event loop is gone: nobody waits
                    anyio.from_thread.run_sync(done.set, token=token)

            threading.Thread(target=run, name="mcpl-host terminal question", daemon=True).start()
            try:
                await done.wait()
            except BaseException:
                self.abandoned = not done.is_set()
                raise
            ok, value = box[0]
            if not ok:
                raise value
            return cast("T", value)


#: Shared by the terminal handlers of one process (one terminal).
_TERMINAL = _Terminal()


def exit_now_if_abandoned(status: int) -> None:
    """End the process with ``status`` at once (streams flushed) when a terminal question
    was left unanswered: its thread holds stdin's lock, and the interpreter's shutdown
    would wait on it or abort. Otherwise return."""
    if _TERMINAL.abandoned:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(status)


class TerminalSampling:
    """Shows each sampling request on stderr and reads the answer's text from the terminal."""

    supports_tools = False

    async def create_message(self, context: RequestContext, request: SamplingRequest) -> SamplingResult:
        def question() -> str:
            click.echo(f"\n{safe_text(context.server)} asks for a model answer (sampling):", err=True)
            if request.system_prompt:
                click.echo(f"  system: {safe_text(request.system_prompt, max_chars=2000)}", err=True)
            for message in request.messages:
                click.echo(f"  {message.role}: {safe_text(message.text, max_chars=2000)}", err=True)
            return str(click.prompt("answer", err=True))

        return SamplingResult.text(await _TERMINAL.ask(question), PROBE_MODEL)


def _convert(kind: object, text: str) -> Any:
    if kind == "integer":
        return int(text)
    if kind == "number":
        return float(text)
    if kind == "boolean":
        return text.strip().lower() in ("y", "yes", "true", "1")
    return text


class TerminalElicitation:
    """Asks the person at the terminal: each property of a form (typed as its schema says),
    or consent for a URL (shown, not opened)."""

    modes: Collection[ElicitationMode] = _BOTH_MODES

    async def elicit(self, context: RequestContext, request: ElicitationRequest) -> ElicitationResult:
        def question() -> ElicitationResult:
            click.echo(
                f"\n{safe_text(context.server)} asks: {safe_text(request.message, max_chars=2000)}", err=True
            )
            if request.mode == "url":
                click.echo(f"  URL (not opened): {safe_text(request.url, max_chars=2000)}", err=True)
                answer = click.prompt(
                    "accept, decline or cancel",
                    type=click.Choice(["accept", "decline", "cancel"]),
                    default="decline",
                    err=True,
                )
                return ElicitationResult(cast("ElicitationAction", answer))
            if not click.confirm("answer this form?", default=True, err=True):
                return ElicitationResult("decline")
            schema = request.requested_schema or {}
            properties = schema.get("properties")
            content: JSONObject = {}
            for name, spec in properties.items() if is_object(properties) else ():
                spec = spec if is_object(spec) else {}
                label = safe_text(spec.get("title") or name)
                choices = spec.get("enum")
                shown = f" ({', '.join(safe_text(c) for c in choices)})" if is_array(choices) else ""
                default = spec.get("default")
                offered = (
                    ""
                    if default is None
                    else str(default).lower()
                    if isinstance(default, bool)
                    else str(default)
                )
                text = click.prompt(
                    f"  {label}{shown}", default=offered, show_default=default is not None, err=True
                )
                if text == offered and default is not None:
                    content[name] = default
                elif text != "":
                    try:
                        content[name] = _convert(spec.get("type"), text)
                    except ValueError:
                        content[name] = text
            return ElicitationResult("accept", content)

        return await _TERMINAL.ask(question)


def elicitation_reply(
    text: str, mode: ElicitationMode = "form", requested_schema: object = None
) -> ElicitationResult:
    """The answer to an elicitation that ``text`` gives (MCP 2025-11-25 "Elicitation"):
    ``accept``, ``decline`` or ``cancel``, or a JSON object, which accepts a form with that
    content. A URL-mode elicitation carries no content: a JSON object accepts it. An accepted
    form carries the defaults of ``requested_schema`` for the fields left out
    (``form_defaults``).

    Raises:
        ValueError: ``text`` is none of these (the message never repeats it).
    """
    word = text.strip()
    action = _ACTIONS.get(word)
    defaults = form_defaults(requested_schema) if mode == "form" else {}
    if action == "accept" and defaults:
        return ElicitationResult("accept", defaults)
    if action is not None:
        return ElicitationResult(action)
    try:
        content = json.loads(word)
    except ValueError:
        content = None
    if not is_object(content):
        raise ValueError(
            "an elicitation answer is a JSON object (accept a form with it), accept, decline or cancel"
        )
    return (
        ElicitationResult("accept") if mode == "url" else ElicitationResult("accept", {**defaults, **content})
    )


def probe_handlers(
    roots: Collection[str],
    sampling_reply: str | None,
    elicit_reply: str | None,
    ask: bool,
    *,
    inference_reply: str | None = None,
) -> HostHandlers | None:
    """The probe's handlers for ``--root``, ``--sampling-reply``, ``--elicit-reply``,
    ``--ask`` and ``--inference-reply`` (None when none is given: the defaults, which serve
    no client feature and do not advertise ``inferenceRequest``; with ``inference_reply``,
    ``probing.InferenceReply``).
    ``elicit_reply``: a JSON object (accept a form with it; accept a URL), or ``accept``,
    ``decline``, ``cancel``. ``ask``: the terminal answers what no canned reply does.

    Raises:
        ValueError: a root that is neither a path nor a ``file://`` URI, or an
            ``elicit_reply`` that is none of the above (the message never repeats it).
    """
    if not roots and sampling_reply is None and elicit_reply is None and not ask:
        return None if inference_reply is None else InferenceReply(inference_reply)
    elicitation: CannedElicitation | TerminalElicitation | None = TerminalElicitation() if ask else None
    if elicit_reply is not None:
        try:
            reply = elicitation_reply(elicit_reply)
        except ValueError:
            raise ValueError("--elicit-reply must be a JSON object, accept, decline or cancel") from None
        elicitation = CannedElicitation(reply.action, reply.content)
    sampling: CannedSampling | TerminalSampling | None = TerminalSampling() if ask else None
    if sampling_reply is not None:
        sampling = CannedSampling(sampling_reply)
    served = Roots(list(roots)) if roots else None
    if inference_reply is not None:
        return InferenceReply(inference_reply, roots=served, sampling=sampling, elicitation=elicitation)
    return HostHandlers(roots=served, sampling=sampling, elicitation=elicitation)


#: ``--elicit-reply JSON|ACTION``: of the commands below and of ``shell`` (which holds each
#: elicitation for an answer by hand without it).
elicit_reply_option = click.option(
    "--elicit-reply",
    metavar="JSON|ACTION",
    help="Answer every elicitation/create (form and URL modes) at once: a JSON object accepts a "
    "form with it (and accepts a URL), the form's defaults filling the fields it leaves out; "
    "accept, decline or cancel answers so (the shell, without it: holds each one).",
)

_FEATURE_OPTIONS = (
    root_option,
    click.option(
        "--sampling-reply",
        metavar="TEXT",
        help="Serve sampling/createMessage with this canned answer: the host then advertises sampling.",
    ),
    elicit_reply_option,
    click.option(
        "--ask",
        is_flag=True,
        help="Serve sampling and elicitation by asking on this terminal (what no canned reply "
        "answers); needs a terminal on stdin.",
    ),
)


def client_feature_options(function: F) -> F:
    """``--root PATH`` (repeatable), ``--sampling-reply TEXT``, ``--elicit-reply JSON|ACTION``
    and ``--ask``: the command gets ``roots``, ``sampling_reply``, ``elicit_reply``, ``ask``."""
    for option in reversed(_FEATURE_OPTIONS):
        function = option(function)
    return function


def feature_handlers(
    roots: Collection[str],
    sampling_reply: str | None,
    elicit_reply: str | None,
    ask: bool,
    *,
    inference_reply: str | None = None,
) -> HostHandlers | None:
    """``probe_handlers`` for the values of ``client_feature_options``, checked as usage:

    Raises:
        click.UsageError: ``ask`` without a terminal on stdin, a root that is neither a path
            nor a ``file://`` URI, an ``elicit_reply`` that is no answer (never repeated).
    """
    if ask and not sys.stdin.isatty():
        raise click.UsageError("--ask needs a terminal on stdin")
    try:
        return probe_handlers(roots, sampling_reply, elicit_reply, ask, inference_reply=inference_reply)
    except ValueError as exc:  # never repeats the reply
        raise click.UsageError(str(exc)) from None
