"""One shell session over a ``Host``: runs parsed commands against the servers, prints what
the servers send unasked as it arrives, and keeps the completion ``Catalog`` up to date.

Rules of this module:

- Every server goes through the ``Host`` (one server or every server of a config), by its
  ``ServerHandle`` (``Host.server``): calls on its connection (``ServerHandle.connected``),
  grant changes (``HostedServer.update_policy``, kept across restarts), restarts
  (``ServerHandle.restart``). A command for a server that is not ready waits for it up to
  its request timeout.
- Output goes through a ``Printer`` (the terminal one prints above the prompt); every
  server value is redacted with that server's ``Redactor`` and shown through
  ``report.safe_text`` (terminal escapes and invisible characters escaped, long values cut).
- Events: each ``HostEvent`` is one line as ``mcpl-host run`` shows it (the server's name
  left out when there is only one). A held request is announced when it arrives.
- ``execute()`` never raises for a failed command: it prints one line saying why and
  returns False (counted in ``failures``). Only cancellation goes through.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

import anyio
import anyio.abc
from rich.text import Text

from mcpl_host import report
from mcpl_host.coalesce import Coalesce
from mcpl_host.coerce import (
    ArgumentError,
    UnusableSchema,
    checked_schema_problems,
    parse_arguments,
    prompt_arguments,
    unknown_arguments,
)
from mcpl_host.events import ChannelsChanged, Degraded, Ready, ServerNotification, event_json
from mcpl_host.host import Host, ServerNotConnected, UnknownServer
from mcpl_host.jsonrpc.errors import LocalProtocolError, MCPLHostError, RemoteError, RequestTimeout
from mcpl_host.mcp_methods import Tool
from mcpl_host.probe_features import elicitation_reply
from mcpl_host.server_connection import ServerConnection
from mcpl_host.shell.commands import Command, CommandError, changed_policy, help_text, still_denied
from mcpl_host.shell.completion import Catalog, tool_info
from mcpl_host.shell.held import HeldRequest, HeldRequests, answer_hint, asked, elicitation_mode

__all__ = ["Printer", "Session"]

#: Notifications after which a server's lists are fetched again (MCP 2025-11-25).
_LIST_CHANGED = frozenset(
    {
        "notifications/tools/list_changed",
        "notifications/resources/list_changed",
        "notifications/prompts/list_changed",
    }
)


class Printer(Protocol):
    """Where a session writes: ``line`` one line of text, ``event`` one event line (``head``
    the time, ``rest`` the event), wrapped as ``report.print_event_line`` does."""

    def line(self, text: Text) -> None: ...

    def event(self, head: Text, rest: Text) -> None: ...


class _Failed(Exception):
    """A command that cannot run as asked; ``str()`` is the line to print."""


def _objects(value: object) -> list[dict[str, Any]]:
    items = cast("list[object]", value) if isinstance(value, list) else [value]
    return [cast("dict[str, Any]", item) for item in items if isinstance(item, dict)]


class Session:
    """Runs commands against ``host``'s servers (module rules). ``current``: the server
    commands go to by default."""

    def __init__(self, host: Host, held: HeldRequests, printer: Printer, *, current: str) -> None:
        self.host = host
        self.held = held
        self.out = printer
        self.catalog = Catalog(servers=host.servers, current=current)
        self.failures = 0
        #: ``call`` sends argument names the tool does not declare (``--allow-unknown``).
        self.allow_unknown = False
        self._tg: anyio.abc.TaskGroup | None = None
        #: Per server: the following of its lists after ``list_changed`` (one in flight, one pending).
        self._followed: dict[str, Coalesce] = {}
        held.on_held = self._announce_held
        held.on_expired = self._announce_expired

    async def _conn(self, server: str) -> ServerConnection:
        """``server``'s connection once ready (``ServerHandle.connected``)."""
        return await self.host.server(server).connected()

    # --- printing ----------------------------------------------------------------------------

    def _shown(self, server: str, value: object, *, max_chars: int = report.MAX_CELL_CHARS) -> str:
        redacted = report.redact_json(value, self.host.server(server).hosted.redactor)
        return report.safe_text(redacted, max_chars=max_chars)

    def _description(self, server: str, value: object) -> str:
        """A description, redacted, as the listing commands show it: its first paragraph on
        one line (``report.prose_text``; never a literal ``\\n``)."""
        return report.prose_text(
            report.redact_json(value, self.host.server(server).hosted.redactor), short=True
        )

    def say(self, text: str, style: str | None = None) -> None:
        self.out.line(Text(text, style=style or ""))

    def _announce_held(self, held: HeldRequest) -> None:
        self.catalog.held = [h.id for h in self.held.list()]
        shown = self._shown(held.server, asked(held.method, held.params), max_chars=report.MAX_EVENT_CHARS)
        where = f" from {held.server}" if len(self.catalog.servers) > 1 else ""
        self.say(f"held {held.method} #{held.id}{where}: {shown}  ({answer_hint(held)})", "bold yellow")

    def _announce_expired(self, held: HeldRequest) -> None:
        self.catalog.held = [h.id for h in self.held.list()]
        self.say(f"held {held.method} #{held.id} expired unanswered (answered -32603)", "yellow")

    def prompt(self) -> str:
        """The prompt: the current server, and how many requests are held."""
        held = f" [{len(self.held)} held]" if len(self.held) else ""
        return f"{self.catalog.current}{held}> "

    # --- events ------------------------------------------------------------------------------

    async def watch_events(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Print every event of every server until the host closes; fetch a server's lists
        for completion when it is ready and when they change."""
        subscription = self.host.events()
        async with anyio.create_task_group() as tg:
            self._tg = tg
            task_status.started()
            async for event in subscription:
                shown = report.run_event(event_json(event), self.host.server(event.server).hosted.redactor)
                head, rest = report.run_event_text(shown, server=len(self.catalog.servers) > 1)
                self.out.event(head, rest)
                if isinstance(event, (Ready, Degraded)):
                    tg.start_soon(self.refresh, event.server)
                elif isinstance(event, ServerNotification) and event.method in _LIST_CHANGED:
                    state = self._followed.setdefault(event.server, Coalesce())
                    if state.ask():  # one in flight, one pending (mcpl_host.coalesce)
                        tg.start_soon(self._follow_lists, event.server, state)
                elif isinstance(event, ChannelsChanged):
                    self.catalog.channels[event.server] = [
                        str(d.get("id")) for d in _objects(event.channels) if "id" in d
                    ]
                del event, shown, head, rest  # nothing of it is held while the next one is awaited
            tg.cancel_scope.cancel()

    async def _follow_lists(self, server: str, state: Coalesce) -> None:
        """After ``list_changed``: the catalog from the connection's caches once their
        refreshes (the library's, coalesced) have settled; no request of its own."""
        while True:
            try:
                conn = await self.host.server(server).connected(timeout=0)
                await conn.mcp.lists_settled()
            except MCPLHostError:
                pass
            else:
                mcp = conn.mcp
                if mcp.cached_tools is not None:
                    self.catalog.tools[server] = {t.name: tool_info(t.input_schema) for t in mcp.cached_tools}
                if mcp.cached_resources is not None:
                    self.catalog.resources[server] = [r.uri for r in mcp.cached_resources]
                if mcp.cached_prompts is not None:
                    self.catalog.prompts[server] = {
                        p.name: tuple(a.name for a in p.arguments) for p in mcp.cached_prompts
                    }
            if not state.done():
                return

    async def refresh(self, server: str) -> None:
        """Fetch ``server``'s tools, resources and prompts into the catalog; a list the server
        refuses or cannot give stays as it was."""
        try:
            conn = await self.host.server(server).connected(timeout=0)
        except MCPLHostError:
            return
        info = conn.server_info
        capabilities = info.capabilities if info is not None else {}
        mcpl = info.mcpl if info is not None and isinstance(info.mcpl, dict) else {}
        feature_sets = mcpl.get("featureSets")
        if isinstance(feature_sets, dict):
            self.catalog.feature_sets[server] = [str(name) for name in cast("dict[str, Any]", feature_sets)]
        try:
            if "tools" in capabilities:
                self.catalog.tools[server] = {
                    t.name: tool_info(t.input_schema) for t in await conn.mcp.list_tools()
                }
            if "resources" in capabilities:
                self.catalog.resources[server] = [r.uri for r in await conn.mcp.list_resources()]
            if "prompts" in capabilities:
                self.catalog.prompts[server] = {
                    p.name: tuple(a.name for a in p.arguments) for p in await conn.mcp.list_prompts()
                }
        except MCPLHostError:
            return

    # --- commands ----------------------------------------------------------------------------

    async def execute(self, command: Command) -> bool:
        """Run ``command``; False (and one line saying why) when it failed (module rules)."""
        server = command.server or self.catalog.current
        try:
            if server not in self.catalog.servers:
                raise UnknownServer(server)
            handler: Callable[[Command, str], Any] = getattr(self, f"_do_{command.name}")
            ok = await handler(command, server)
        except (_Failed, CommandError, ArgumentError) as exc:
            self.say(f"error: {exc}", "red")
            ok = False
        except RemoteError as exc:
            self.say(f"server error {exc.code}: {self._shown(server, exc.message)}", "red")
            ok = False
        except RequestTimeout as exc:
            self.say(f"no answer: {exc}", "red")
            ok = False
        except (UnknownServer, ServerNotConnected, LocalProtocolError) as exc:
            self.say(f"error: {report.safe_text(str(exc))}", "red")
            ok = False
        except (MCPLHostError, OSError) as exc:
            self.say(f"failed: {report.safe_text(str(exc) or type(exc).__name__)}", "red")
            ok = False
        if ok is False:
            self.failures += 1
        return ok is not False

    async def _do_help(self, command: Command, server: str) -> None:
        for line in help_text(command.words[0] if command.words else None):
            self.say(line)

    async def _do_quit(self, command: Command, server: str) -> None:
        """Handled by the loop that reads the lines."""

    _do_exit = _do_quit

    async def _do_use(self, command: Command, server: str) -> None:
        self.catalog.current = server
        self.say(f"using {server}", "dim")

    async def _do_servers(self, command: Command, server: str) -> None:
        for name, snap in self.host.snapshot().items():
            granted = ", ".join(snap.effective_capabilities) or "nothing"
            mark = "*" if name == self.catalog.current else " "
            who = f"{snap.server_name} {snap.server_version}" if snap.server_name else "—"
            self.say(
                f"{mark} {name}: {snap.state.replace('_', ' ')}, {self._shown(name, who)}, granted {granted}"
            )

    async def _do_tools(self, command: Command, server: str) -> None:
        tools = await (await self._conn(server)).mcp.list_tools()
        self.catalog.tools[server] = {t.name: tool_info(t.input_schema) for t in tools}
        if not tools:
            self.say("no tools", "dim")
        for tool in tools:
            schema = tool.input_schema
            required = (
                {str(name) for name in cast("list[object]", schema.get("required") or [])}
                if isinstance(schema.get("required"), list)
                else set[str]()
            )
            names = [f"{name}*" if name in required else name for name in tool_info(schema).arguments]
            line = self._signature(server, tool.name, names, tool.description)
            line.append(
                f"  [{report.class_text(tool.classes, tool.class_source)}]", style="cyan"
            )  # RFC-008 §6
            self.out.line(line)

    def _signature(self, server: str, name: str, arguments: list[str], description: str | None) -> Text:
        """``name(arguments)  description`` (``*`` marks a required argument), escaped."""
        line = Text(self._shown(server, name), style="bold")
        line.append(f"({self._shown(server, ', '.join(arguments))})")
        if description:
            line.append(f"  {self._description(server, description)}", style="dim")
        return line

    async def _do_resources(self, command: Command, server: str) -> None:
        resources = await (await self._conn(server)).mcp.list_resources()
        self.catalog.resources[server] = [r.uri for r in resources]
        if not resources:
            self.say("no resources", "dim")
        for resource in resources:
            line = Text(self._shown(server, resource.uri), style="bold")
            for extra in (resource.name, resource.mime_type):
                if extra:
                    line.append(f"  {self._shown(server, extra)}", style="dim")
            if resource.description:
                line.append(f"  {self._description(server, resource.description)}", style="dim")
            self.out.line(line)

    async def _do_prompts(self, command: Command, server: str) -> None:
        prompts = await (await self._conn(server)).mcp.list_prompts()
        if not prompts:
            self.say("no prompts", "dim")
        for item in prompts:
            names = [f"{a.name}{'*' if a.required else ''}" for a in item.arguments]
            self.out.line(self._signature(server, item.name, names, item.description))

    async def _tool(self, server: str, name: str) -> Tool:
        tools = await (await self._conn(server)).mcp.list_tools()
        self.catalog.tools[server] = {t.name: tool_info(t.input_schema) for t in tools}
        found = next((t for t in tools if t.name == name), None)
        if found is None:
            names = ", ".join(report.safe_text(t.name, max_chars=80) for t in tools[:30]) or "none"
            raise _Failed(f"no tool {report.safe_text(name)!r} (there are: {names})")
        return found

    async def _do_call(self, command: Command, server: str) -> bool:
        name, words = command.words[0], command.words[1:]
        tool = await self._tool(server, name)
        arguments = parse_arguments(words, tool.input_schema)
        if not self.allow_unknown:  # docs/protocol.md CL1
            unknown_arguments(list(arguments), tool.input_schema, tool=name)
        try:
            limits = self.host.server(server).hosted.limits
            problems = await checked_schema_problems(
                arguments,
                tool.input_schema,
                seconds=limits.max_schema_check_seconds,
                inline_work=limits.max_inline_schema_work,
            )
        except UnusableSchema as exc:
            self.say(
                f"warning: the inputSchema of {name!r} cannot be checked: {exc}; sending unchecked", "yellow"
            )
            problems = []
        if problems:
            raise _Failed("the arguments do not fit the schema; nothing was sent: " + "; ".join(problems))
        result = await (await self._conn(server)).mcp.call_tool(name, arguments)
        content = report.redact_json(result.content, self.host.server(server).hosted.redactor)
        for block in _objects(content):
            if isinstance(block.get("text"), str):
                self.say(
                    report.safe_text(block["text"], max_chars=100_000, newlines=True),
                    "red" if result.is_error else None,
                )
            else:
                kind = report.safe_text(block.get("type"), max_chars=40)
                mime = (
                    f" {report.safe_text(block.get('mimeType'), max_chars=80)}"
                    if block.get("mimeType")
                    else ""
                )
                self.say(f"[{kind}{mime}]", "dim")
        if result.structured_content is not None:
            self.say(
                f"structuredContent: {self._shown(server, result.structured_content, max_chars=2000)}", "dim"
            )
        if result.is_error:
            self.say("the tool answered isError", "red")
            return False
        return True

    async def _do_read(self, command: Command, server: str) -> None:
        result = await (await self._conn(server)).mcp.read_resource(command.words[0])
        for item in _objects(
            report.redact_json(result.raw.get("contents"), self.host.server(server).hosted.redactor)
        ):
            if isinstance(item.get("text"), str):
                self.say(report.safe_text(item["text"], max_chars=100_000, newlines=True))
            else:
                blob = item.get("blob")
                size = f", {len(blob)} base64 characters" if isinstance(blob, str) else ""
                self.say(f"[{report.safe_text(item.get('mimeType') or 'blob', max_chars=80)}{size}]", "dim")

    async def _do_prompt(self, command: Command, server: str) -> None:
        name, words = command.words[0], command.words[1:]
        prompts = await (await self._conn(server)).mcp.list_prompts()
        found = next((p for p in prompts if p.name == name), None)
        if found is None:
            names = ", ".join(report.safe_text(p.name, max_chars=80) for p in prompts[:30]) or "none"
            raise _Failed(f"no prompt {report.safe_text(name)!r} (there are: {names})")
        result = await (await self._conn(server)).mcp.get_prompt(
            name, prompt_arguments(words, _objects(found.raw.get("arguments")), prompt=name)
        )
        for message in _objects(
            report.redact_json(result.raw.get("messages"), self.host.server(server).hosted.redactor)
        ):
            texts = [b["text"] for b in _objects(message.get("content")) if isinstance(b.get("text"), str)]
            role = report.safe_text(message.get("role"), max_chars=20)
            self.say(f"{role}: {report.safe_text(' '.join(texts), max_chars=100_000, newlines=True)}")

    async def _do_channels(self, command: Command, server: str) -> None:
        words = command.words
        if command.sub is None:
            channels = self.host.server(server).hosted.channels
            self.catalog.channels[server] = [str(d.get("id")) for d in channels if "id" in d]
            if not channels:
                self.say("no channels registered", "dim")
            for descriptor in channels:
                self.say(self._shown(server, descriptor, max_chars=500))
        elif command.sub == "open":
            schema = {"properties": {"type": {"type": "string"}, "id": {"type": "string"}}}
            given = parse_arguments(words, schema)
            unknown = sorted(set(given) - {"type", "address", "metadata", "id", "history"})
            if unknown:
                raise _Failed(
                    f"channels open takes type=, address=, metadata=, id= and history=, not {unknown[0]}="
                )
            metadata = given.get("metadata")
            if metadata is not None and not isinstance(metadata, dict):
                raise _Failed("metadata= must be a JSON object")
            opened = await (await self._conn(server)).channels.open(
                type=given.get("type"),
                address=given.get("address"),
                metadata=cast("dict[str, Any] | None", metadata),
                channel_id=given.get("id"),
                history=given.get("history"),
            )
            self.say(f"opened: {self._shown(server, opened.channel or opened.raw, max_chars=500)}")
        elif command.sub == "close":
            closed = await (await self._conn(server)).channels.close(words[0])
            self.say("closed" if closed else "not closed (the server said closed: false)")
        else:
            if words[0] == "--root" or words[0].startswith("--thread="):
                await self._publish_targeted(server, words)
                return
            conversation, channel, text = words[0], words[1], " ".join(words[2:])
            published = await (await self._conn(server)).channels.publish(conversation, channel, text)
            if published.mode == "notification":
                self.say("published (as a notification: no acknowledgement)")
            else:
                message = (
                    f", message {self._shown(server, published.message_id)}" if published.message_id else ""
                )
                self.say(f"published: delivered {published.delivered}{message}")

    async def _publish_targeted(self, server: str, words: Sequence[str]) -> None:
        """``channels publish --thread=ID|--root CONVERSATION CHANNEL TEXT...`` (RFC-011 §4):
        always a request; says the outcome (delivered, unconfirmed, failed) and why."""
        if len(words) < 4:
            raise _Failed("usage: channels publish [--thread=ID|--root] CONVERSATION CHANNEL TEXT...")
        thread = None if words[0] == "--root" else words[0].removeprefix("--thread=")
        conversation, channel, text = words[1], words[2], " ".join(words[3:])
        published = await (await self._conn(server)).channels.publish(
            conversation, channel, text, thread_id=thread
        )
        reason = f"; the server says {self._shown(server, published.reason)}" if published.reason else ""
        style = None if published.outcome == "delivered" else "yellow"
        self.say(f"published: {published.outcome} ({published.why}){reason}", style)

    async def _do_rollback(self, command: Command, server: str) -> bool:
        feature_set, checkpoint = command.words
        result = await (await self._conn(server)).state.rollback(feature_set, checkpoint)
        reason = f": {self._shown(server, result.reason)}" if result.reason else ""
        self.say(f"{result.outcome.replace('_', ' ')}{reason}", None if result.success else "yellow")
        return result.success

    async def _policy(self, verb: str, command: Command, server: str) -> None:
        pattern = command.words[0]
        hosted = self.host.server(server).hosted
        policy = changed_policy(hosted.policy, verb, pattern)
        change = await hosted.update_policy(policy)
        if change.deferred:
            self.say(f"{verb} {pattern}: kept for when {server} is connected again", "dim")
            return
        if change.error is not None:
            raise _Failed(f"the policy request failed: {report.safe_text(change.error)}")
        in_force = sorted(change.in_force.paths) if change.in_force is not None else []
        self.say(f"granted now: {', '.join(in_force) or 'nothing'}")
        blocking = still_denied(policy, pattern) if verb == "grant" else None
        if blocking is not None:
            self.say(f"{pattern} is still denied by the pattern {blocking}", "yellow")
        outcome = change.outcome
        if outcome is not None and not outcome.accepted:
            self.say(f"the server refused the policy (fallback {outcome.fallback})", "yellow")

    async def _do_grant(self, command: Command, server: str) -> None:
        await self._policy("grant", command, server)

    async def _do_deny(self, command: Command, server: str) -> None:
        await self._policy("deny", command, server)

    async def _do_restart(self, command: Command, server: str) -> None:
        self.host.server(server).restart()
        self.say(f"restarting {server}", "dim")

    async def _do_loglevel(self, command: Command, server: str) -> None:
        level = command.words[0]
        await (await self._conn(server)).mcp.request("logging/setLevel", {"level": level})
        self.say(f"{server} sends log messages from {level} up")

    async def _do_pending(self, command: Command, server: str) -> None:
        held = self.held.list()
        if not held:
            self.say("nothing is held", "dim")
        for request in held:
            shown = self._shown(
                request.server, asked(request.method, request.params), max_chars=report.MAX_EVENT_CHARS
            )
            self.say(f"#{request.id} {request.server} {request.method}: {shown}  ({answer_hint(request)})")

    async def _do_answer(self, command: Command, server: str) -> None:
        held_id, text = command.words[0].lstrip("#"), " ".join(command.words[1:])
        waiting = next((h for h in self.held.list() if h.id == held_id), None)
        if waiting is not None and waiting.method == "elicitation/create":
            try:
                elicitation_reply(text, elicitation_mode(waiting))
            except ValueError as exc:  # still held: the person may answer again
                raise _Failed(f"{exc} (quote a JSON object as one word); #{held_id} is still held") from None
        if not self.held.answer(held_id, text):
            known = ", ".join(h.id for h in self.held.list()) or "none"
            raise _Failed(f"no held request #{held_id} (held: {known})")
        self.catalog.held = [h.id for h in self.held.list()]
        self.say(f"answered #{held_id}", "dim")
