"""Targeted publish's pure rules (RFC-011 rev 3, ``mcpl.publish_target``) and its two
``mcpl-host check`` rules over hand-built evidence (plain calls, no I/O)."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from mcpl_host.check import rules
from mcpl_host.mcpl.publish_target import (
    ABSENT,
    ReplyTarget,
    incoming_thread_problem,
    publish_target,
    publish_target_problem,
    reply_target_of_message,
    reply_target_of_push,
    targeted_outcome,
    thread_target_problem,
)
from mcpl_host.report import render_report

from .test_check_rules import _mcpl_run, _rpc


def _descriptor(**capabilities: Any) -> dict[str, Any]:
    return {"id": "c", "type": "chat", "direction": "bidirectional", "capabilities": capabilities}


def test_declaration_values() -> None:
    assert publish_target(_descriptor(publish={"target": "exact"})) == "exact"
    assert publish_target(_descriptor(publish={"target": "root"})) == "root"
    for invalid in ({"target": "thread"}, {"target": None}, {}, "exact"):
        assert publish_target(_descriptor(publish=invalid)) is None
        assert publish_target_problem(_descriptor(publish=invalid)) is not None
    assert publish_target_problem(_descriptor(history=True)) is None  # no declaration, no problem
    assert publish_target_problem({"id": "c"}) is None and publish_target(None) is None


@pytest.mark.parametrize(
    ("result", "thread", "outcome"),
    [
        ({"delivered": True, "messageId": "m", "threadId": "t"}, "t", "delivered"),
        ({"delivered": True, "messageId": "m", "threadId": None}, None, "delivered"),
        ({"delivered": True, "messageId": "m"}, "t", "unconfirmed"),
        ({"delivered": True, "messageId": "m"}, None, "unconfirmed"),
        ({"delivered": True, "threadId": "u"}, "t", "unconfirmed"),
        ({"delivered": True, "threadId": None}, "t", "unconfirmed"),
        ({"delivered": True, "threadId": "t"}, None, "unconfirmed"),
        ({"delivered": False, "reason": "archived"}, "t", "failed"),
        ({"delivered": False, "messageId": "m"}, "t", "unconfirmed"),
        ({"delivered": "yes"}, "t", "unconfirmed"),
        (None, "t", "unconfirmed"),
    ],
)
def test_outcome_table_of_rfc_011_section_5(result: Any, thread: str | None, outcome: str) -> None:
    assert targeted_outcome(result, thread)[0] == outcome


def test_thread_target_domain_is_closed() -> None:
    assert [thread_target_problem(v) for v in (ABSENT, None, "t")] == [None, None, None]
    assert all(thread_target_problem(v) is not None for v in ("", 5, {}, [], True))


def test_reply_targets() -> None:
    assert reply_target_of_message({"channelId": "c", "threadId": "t"}) == ReplyTarget("c", "t")
    assert reply_target_of_message({"channelId": "c"}) == ReplyTarget("c", None)
    assert reply_target_of_message({"channelId": "c", "threadId": 5}) is None  # never the root instead
    assert reply_target_of_push({"origin": {"mcplChannelId": "c", "threadId": "t"}}) == ReplyTarget("c", "t")
    assert reply_target_of_push({"origin": {"channel": "c"}}) is None
    assert reply_target_of_push({}) is None
    assert ReplyTarget("c", None).to_json() == {"channelId": "c", "threadId": None}


def test_inbound_binding_problems() -> None:
    assert incoming_thread_problem({"threadId": "t"}, "root") is not None
    assert incoming_thread_problem({"threadId": "t"}, "exact") is None
    assert incoming_thread_problem({}, "root") is None


def _register(target: object) -> tuple[str, Any]:
    channel = _descriptor(publish={"target": target})
    return ("in", _rpc(id=7, method="channels/register", params={"channels": [channel]}))


def test_check_rule_publish_target_value() -> None:
    judge = rules.RULES["channels.publish-target.value"]
    assert judge(_mcpl_run(_register("exact"))).status == "passed"
    assert judge(_mcpl_run(_register("thread"))).status == "failed"
    assert judge(_mcpl_run()).status == "skipped"


def test_check_rule_publish_target_echo() -> None:
    judge = rules.RULES["channels.publish-target.echo"]
    publish = ("out", _rpc(id=3, method="channels/publish", params={"channelId": "c", "threadId": "t"}))
    echoed = ("in", _rpc(id=3, result={"delivered": True, "messageId": "m", "threadId": "t"}))
    unechoed = ("in", _rpc(id=3, result={"delivered": True, "messageId": "m"}))
    refused = ("in", _rpc(id=3, result={"delivered": False, "reason": "no such thread"}))
    assert judge(_mcpl_run(publish, echoed)).status == "passed"
    assert judge(_mcpl_run(publish, unechoed)).status == "failed"
    assert judge(_mcpl_run(publish, refused)).status == "passed"
    assert judge(_mcpl_run()).status == "skipped"


def test_probe_report_shows_each_channel_s_publish_target() -> None:
    out = io.StringIO()
    channels = [
        {**_descriptor(publish={"target": "root"}), "id": "c:root"},
        {**_descriptor(publish={"target": "thread"}), "id": "c:bad"},
        {**_descriptor(), "id": "c:none"},
    ]
    render_report(Console(file=out, width=120), {"server": {"name": "s"}, "channels": channels})
    lines = [line for line in out.getvalue().splitlines() if "c:" in line]
    assert [line.split("│")[3].strip() for line in lines] == ["root", "invalid", "none"]
