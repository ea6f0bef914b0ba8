"""The shell's pure parts: the command language (``shell.commands``), completion
(``shell.completion``) and held requests (``shell.held``); what the event watcher
(``shell.session``) keeps once an event is printed. Plain calls, no terminal."""

from __future__ import annotations

import anyio
import pytest

from mcpl_host.client_features import ElicitationResult
from mcpl_host.jsonrpc.errors import HandlerError
from mcpl_host.mcpl.grants import GrantPolicy
from mcpl_host.probe_features import elicitation_reply
from mcpl_host.shell.commands import (
    COMMANDS,
    Command,
    CommandError,
    changed_policy,
    help_text,
    parse_line,
    still_denied,
)
from mcpl_host.shell.completion import Catalog, ToolInfo, complete, tool_info
from mcpl_host.shell.held import HeldRequest, HeldRequests, answer_hint, asked, inference_answer, question


@pytest.mark.parametrize(
    ("line", "command"),
    [
        ("tools", Command("tools")),
        ("tools time", Command("tools", "time")),
        ("call add a=1 'b=2 3'", Command("call", None, ("add", "a=1", "b=2 3"))),
        (
            "@time call get_current_time timezone=UTC",
            Command("call", "time", ("get_current_time", "timezone=UTC")),
        ),
        ("channels", Command("channels")),
        (
            "channels open type=discord address={}",
            Command("channels", None, ("type=discord", "address={}"), "open"),
        ),
        (
            "channels publish c1 ch1 hello there",
            Command("channels", None, ("c1", "ch1", "hello", "there"), "publish"),
        ),
        ("answer 1 forty two", Command("answer", None, ("1", "forty", "two"))),
        ("use time", Command("use", "time", ("time",))),
        ("restart  # the clock is stuck", Command("restart")),
    ],
)
def test_lines_parse_into_commands(line: str, command: Command) -> None:
    assert parse_line(line) == command


@pytest.mark.parametrize("line", ["", "   ", "# a comment"])
def test_blank_and_comment_lines_are_no_command(line: str) -> None:
    assert parse_line(line) is None


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("cal add", "unknown command 'cal'; did you mean 'call'?"),
        ("zzz", "unknown command 'zzz'; type help for the commands"),
        ("call", "usage: call TOOL [KEY=VALUE...|JSON]"),
        ("read", "usage: read URI"),
        ("grant a b", "usage: grant PATTERN"),
        ("channels opn", "unknown channels command 'opn'; did you mean 'open'?"),
        (
            "channels publish c1 ch1",
            "usage: channels publish [--thread=ID|--root] CONVERSATION CHANNEL TEXT...",
        ),
        ("call echo 'text=unclosed", "cannot read the line: no closing quotation"),
        ("@", "'@' must be followed by a server name"),
        ("@time", "no command after @time"),
        ("@one tools two", "two servers named: @one and 'two'"),
    ],
)
def test_bad_lines_are_one_sentence_errors(line: str, message: str) -> None:
    with pytest.raises(CommandError) as caught:
        parse_line(line)
    assert str(caught.value) == message


def test_help_lists_every_command_and_one_command() -> None:
    lines = help_text()
    assert all(any(line.startswith(name) for line in lines) for name in COMMANDS if name != "exit")
    assert help_text("grant") == ["grant PATTERN", "  grant the capabilities matching PATTERN (runs at once)"]
    with pytest.raises(CommandError):
        help_text("nope")


def test_grant_and_deny_change_the_policy() -> None:
    everything = GrantPolicy(grant_all_advertised=True)
    denied = changed_policy(everything, "deny", "pushEvents")
    assert denied == GrantPolicy(grant_all_advertised=True, deny=("pushEvents",))
    assert changed_policy(denied, "deny", "pushEvents") == denied  # no repeats
    assert changed_policy(denied, "grant", "pushEvents") == everything
    listed = GrantPolicy(grant=("tools",))
    assert changed_policy(listed, "grant", "channels.*") == GrantPolicy(grant=("tools", "channels.*"))
    assert changed_policy(listed, "deny", "tools") == GrantPolicy(deny=("tools",))
    wide = GrantPolicy(grant_all_advertised=True, deny=("channels.*",))
    narrowed = changed_policy(wide, "grant", "channels.publish")
    assert still_denied(narrowed, "channels.publish") == "channels.*"  # the deny still wins
    assert still_denied(narrowed, "tools") is None
    with pytest.raises(CommandError, match='did you mean "pushEvents"'):
        changed_policy(everything, "grant", "pushEvnts")


CATALOG = Catalog(
    servers=["demo", "time"],
    current="demo",
    tools={
        "demo": {
            "add": ToolInfo(("a", "b")),
            "ask": ToolInfo(("question",)),
            "echo": ToolInfo(("text", "loud"), {"loud": ("true", "false")}),
        },
        "time": {"get_current_time": ToolInfo(("timezone",))},
    },
    resources={"demo": ["demo://readme"]},
    prompts={"demo": {"greet": ("name",)}},
    feature_sets={"demo": ["demo.clock", "demo.tools"]},
    channels={"demo": ["discord:1"]},
    held=["1", "2"],
)


def texts(line: str) -> list[str]:
    return [s.text for s in complete(line, CATALOG)]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("ca", ["call "]),
        ("re", ["resources ", "read ", "restart "]),
        ("call ", ["add ", "ask ", "echo "]),
        ("call a", ["add ", "ask "]),
        ("call add ", ["a=", "b="]),
        ("call add a=1 ", ["b="]),
        ("call echo loud=", ["loud=true ", "loud=false "]),
        ("call echo loud=t", ["loud=true "]),
        ("@time call ", ["get_current_time "]),
        ("@t", ["@time "]),
        ("@time call get_current_time t", ["timezone="]),
        ("read ", ["demo://readme "]),
        ("prompt greet ", ["name="]),
        ("use ", ["demo ", "time "]),
        ("tools t", ["time "]),
        ("grant pushE", ["pushEvents "]),
        ("deny channels.p", ["channels.publish "]),
        ("loglevel w", ["warning "]),
        ("answer ", ["1 ", "2 "]),
        ("answer 1 ", []),
        ("rollback demo.c", ["demo.clock "]),
        ("channels ", ["open ", "close ", "publish "]),
        ("channels open type=x ", ["address=", "metadata=", "id=", "history="]),
        ("channels close ", ["discord:1 "]),
        ("help g", ["grant "]),
        ("nonsense ", []),
    ],
)
def test_completion(line: str, expected: list[str]) -> None:
    assert texts(line) == expected


def test_a_suggestion_replaces_the_word_being_typed() -> None:
    (suggestion,) = complete("call echo loud=t", CATALOG)
    assert suggestion.replaces == len("loud=t")


def test_tool_info_reads_names_enums_and_booleans() -> None:
    schema = {
        "type": "object",
        "properties": {"mode": {"enum": ["fast", 2]}, "on": {"type": "boolean"}, "n": {"type": "integer"}},
    }
    info = tool_info(schema)
    assert info.arguments == ("mode", "on", "n")
    assert dict(info.values) == {"mode": ("fast", "2"), "on": ("true", "false")}
    assert tool_info(None) == ToolInfo()


def test_the_question_of_an_inference_request() -> None:
    assert (
        question({"messages": [{"role": "user", "content": "first"}, {"role": "user", "content": "last"}]})
        == "last"
    )
    blocks = [{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}]
    assert question({"messages": [{"role": "user", "content": blocks}]}) == "a b"
    assert question({"messages": []}) == "" and question(None) == ""
    assert inference_answer("42") == {
        "content": "42",
        "model": "mcpl-host-shell (answered by hand)",
        "finishReason": "end_turn",
        "usage": {"inputTokens": 0, "outputTokens": 0},
    }


@pytest.mark.anyio
async def test_held_requests_are_answered_by_id_or_expire() -> None:
    seen: list[str] = []
    arrived = anyio.Event()

    def on_held(request: HeldRequest) -> None:
        seen.append(f"held {request.id}")
        arrived.set()

    held = HeldRequests(on_held=on_held, on_expired=lambda r: seen.append(f"expired {r.id}"))
    answers: list[str] = []

    async def ask() -> None:
        answers.append(await held.hold("demo", "inference/request", {"messages": []}, timeout=30))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            await arrived.wait()
            assert [r.id for r in held.list()] == ["1"]
            assert held.answer("9", "x") is False
            assert held.answer("1", "forty-two") is True
    assert answers == ["forty-two"] and len(held) == 0
    with pytest.raises(HandlerError, match="not answered by hand within 0 seconds"):
        await held.hold("demo", "inference/request", {}, timeout=0)
    assert seen == ["held 1", "held 2", "expired 2"]


def test_what_a_held_request_asks_and_how_to_answer_it() -> None:
    form = {
        "mode": "form",
        "message": "Who?",
        "requestedSchema": {"type": "object", "properties": {"name": {}, "age": {}}, "required": ["name"]},
    }
    url = {"mode": "url", "message": "Sign in", "url": "https://example.com/x", "elicitationId": "e1"}
    sampling = {"messages": [{"role": "user", "content": {"type": "text", "text": "six times seven?"}}]}
    assert asked("elicitation/create", form) == "Who? (fields: name*, age)"
    assert asked("elicitation/create", url) == "Sign in (URL, not opened: https://example.com/x)"
    assert asked("sampling/createMessage", sampling) == "six times seven?"
    assert asked("elicitation/create", {"message": 7}) == " (fields: none)"
    assert (
        answer_hint(HeldRequest("3", "s", "elicitation/create", form))
        == "answer 3 JSON|accept|decline|cancel"
    )
    assert answer_hint(HeldRequest("4", "s", "elicitation/create", url)) == "answer 4 accept|decline|cancel"
    assert answer_hint(HeldRequest("5", "s", "sampling/createMessage", sampling)) == "answer 5 TEXT"


def test_an_elicitation_answer_is_an_action_or_a_form() -> None:
    assert elicitation_reply(" decline ") == ElicitationResult("decline")
    assert elicitation_reply('{"name": "Ada"}') == ElicitationResult("accept", {"name": "Ada"})
    assert elicitation_reply('{"name": "Ada"}', "url") == ElicitationResult("accept")  # no content
    for bad in ("maybe", "[1]", '"accept"', "{name: Ada}"):
        with pytest.raises(ValueError, match="JSON object"):
            elicitation_reply(bad)


class _Printed:
    """A ``shell.session.Printer`` that counts the event lines and keeps none."""

    def __init__(self) -> None:
        self.events = 0

    def line(self, text: object) -> None:
        pass

    def event(self, head: object, rest: object) -> None:
        self.events += 1


@pytest.mark.anyio
async def test_the_event_watcher_keeps_nothing_of_the_last_event_while_it_waits() -> None:
    # The shell prints each event (cut to a line) and waits for the next holding nothing of
    # it: an 8 MiB notification and what was made of it are freed while the server stays
    # silent, not kept until its next event. The host is a stand-in with one subscription.
    from types import SimpleNamespace
    from typing import Any, cast

    from mcpl_host.events import ServerNotification, Subscription
    from mcpl_host.logging import Redactor
    from mcpl_host.shell.session import Session

    from .memory import kept_bytes

    subscription = Subscription()
    server = SimpleNamespace(hosted=SimpleNamespace(redactor=Redactor()))
    host = SimpleNamespace(servers=["s"], events=lambda: subscription, server=lambda name: server)
    printed = _Printed()
    session = Session(cast(Any, host), HeldRequests(), printed, current="s")
    big = 8 * 2**20
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            await tg.start(session.watch_events)
            with kept_bytes() as kept:
                note = ServerNotification(
                    server="s", method="notifications/message", params={"blob": "x" * big}
                )
                assert subscription.put_observation(note)
                del note
                await anyio.wait_all_tasks_blocked()  # printed, and the watcher waiting again
            assert printed.events == 1
            subscription.end()
    assert kept.bytes < 2**20, f"{kept.bytes} bytes kept after the event was printed"
