"""``mcpl-host check``'s RFC-006 rules over hand-built evidence: ``push.coalesce`` (RFC-006
§13, the host's own ``coalesce_problem``) and ``push.render.answer`` (§5.2, §5.3)."""

from __future__ import annotations

from typing import Any

import pytest

from mcpl_host.check import rules

from .test_check_rules import PUSH, _mcpl_run, _rpc


def _push(coalesce: Any) -> tuple[str, Any]:
    return ("in", {**PUSH, "params": {**PUSH["params"], "coalesce": coalesce}})


def _incoming(*messages: dict[str, Any]) -> tuple[str, Any]:
    return ("in", _rpc(id=7, method="channels/incoming", params={"messages": list(messages)}))


MESSAGE = {"channelId": "c", "messageId": "m", "content": [{"type": "text", "text": "x"}]}


def test_coalesce_is_skipped_without_it_and_passes_when_well_formed() -> None:
    assert rules.push_coalesce(_mcpl_run(("in", PUSH))).status == "skipped"
    good = _mcpl_run(
        _push({"key": "K", "deferred": True, "data": {"a": 1}}),
        _incoming({**MESSAGE, "eventId": "e", "coalesce": {"key": "m"}}),
    )
    assert rules.push_coalesce(good).status == "passed"


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (_push({"key": "x" * 257}), "push/event: coalesce.key must be at most 256 bytes"),
        (_push({"key": "K", "retract": True, "deferred": True}), "coalesce.retract is exclusive with deferred"),
        (_incoming({**MESSAGE, "coalesce": {"key": "m"}}), "channels/incoming: eventId is required with coalesce"),
        (_incoming({**MESSAGE, "eventId": "e", "coalesce": {"key": "m", "deferred": True}}), "coalesce.deferred is not allowed"),
    ],
)  # fmt: skip
def test_malformed_coalesce_fails_naming_the_field(line: tuple[str, Any], reason: str) -> None:
    verdict = rules.push_coalesce(_mcpl_run(line))
    assert verdict.status == "failed" and reason in verdict.reason, verdict


RENDER = (
    "out",
    _rpc(
        id=3,
        method="push/render",
        params={"featureSet": "a.events", "key": "K", "eventId": "n", "notices": [], "dropped": 0},
    ),
)


@pytest.mark.parametrize(
    ("answer", "status", "reason"),
    [
        (None, "skipped", "no push/render"),
        (_rpc(id=3, result={"content": [{"type": "text", "text": "r"}], "timestamp": "t"}), "passed", "answered"),
        (_rpc(id=3, result={"content": []}), "passed", "answered"),
        (_rpc(id=3, result={"content": "text"}), "failed", "not an array"),
        (_rpc(id=3, result={"content": [{"text": "no type"}]}), "failed", "content[0] is not a content block"),
        (_rpc(id=3, error={"code": -32603, "message": "x"}), "failed", "an error answer (-32603)"),
        ("unanswered", "failed", "no answer within the host's bound"),
    ],
)  # fmt: skip
def test_render_answers(answer: Any, status: str, reason: str) -> None:
    lines = [] if answer is None else [RENDER] if answer == "unanswered" else [RENDER, ("in", answer)]
    verdict = rules.push_render_answer(_mcpl_run(*lines))
    assert verdict.status == status and reason in verdict.reason, verdict
