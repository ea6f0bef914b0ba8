"""RFC-007 tool lifecycle: the pure decisions (``mcpl_host.mcpl.tool_lifecycle``) by plain
calls, the grant rule (TL1) and the config key. The wire is in
tests/test_vectors_tool_lifecycle.py, tests/test_vectors_tools_observe_parser.py and
tests/test_tool_lifecycle_host.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcpl_host.config import ConfigError, parse_config
from mcpl_host.jsonrpc.errors import HandlerError, LocalProtocolError
from mcpl_host.mcpl.grants import GrantPolicy, names_path
from mcpl_host.mcpl.tool_lifecycle import (
    DEFAULT_INPUTS_CLASSES,
    MINTED_PREFIX,
    CallFacts,
    CallPhases,
    Delivery,
    Narrowing,
    ObserveFilter,
    Rule,
    ToolLifecyclePolicy,
    bound_input,
    call_id_for,
    decide,
    first_match,
    lifecycle_params,
    parse_observe,
    policy_diagnostics,
    select_fields,
    still_observes,
)
from mcpl_host.secrets import Redactor

OBSERVE = "toolLifecycle.observe"
INPUTS = "toolLifecycle.inputs"
BOTH = frozenset({OBSERVE, INPUTS})
SHELL_INPUTS = ToolLifecyclePolicy(inputs=Narrowing(classes=("shell",)))


def _call(tool: str = "x--run", classes: tuple[str, ...] = ("shell",), **kw: Any) -> CallFacts:
    server, _, name = tool.partition("--")
    host = kw.pop("host", False)
    return CallFacts(
        tool,
        classes,
        None if host else server,
        None if host else name,
        kw.pop("conversation", "conv_1"),
        "inf_1",
        kw.pop("arguments", {"a": 1}),
    )


def _filter(params: dict[str, Any]) -> ObserveFilter | None:
    parsed = parse_observe(params, max_rules=64, max_paths=64)
    assert not isinstance(parsed, HandlerError)
    return parsed.filter


# --- TL1: the grant -----------------------------------------------------------------------------


def test_lifecycle_paths_are_granted_only_when_named() -> None:
    every = frozenset({OBSERVE, INPUTS, "pushEvents"})
    assert GrantPolicy(grant_all_advertised=True).compute(every).paths == {"pushEvents"}
    assert not GrantPolicy(grant=("*.observe", "*.inputs", "*.*")).compute(every).paths & BOTH
    assert GrantPolicy(grant=("toolLifecycle.*",)).compute(every).paths == BOTH
    assert GrantPolicy(grant=(OBSERVE,)).compute(every).paths == {OBSERVE}
    assert not GrantPolicy(grant=("toolLifecycle",)).compute(every).paths  # the bare parent: neither
    assert not GrantPolicy(grant=("toolLifecycle.*",), deny=(INPUTS,)).compute(every).paths & {INPUTS}
    assert names_path("toolLifecycle.*", OBSERVE) and not names_path("*.observe", OBSERVE)


def test_diagnostics_at_grant_computation() -> None:
    assert policy_diagnostics(frozenset({INPUTS}), SHELL_INPUTS) == (
        "toolLifecycle.inputs granted without toolLifecycle.observe: it delivers nothing",
    )
    assert "narrowed to NO tools" in policy_diagnostics(BOTH, ToolLifecyclePolicy())[0]
    assert policy_diagnostics(BOTH, SHELL_INPUTS) == ()
    assert policy_diagnostics(frozenset({OBSERVE}), ToolLifecyclePolicy()) == ()


# --- the filter -----------------------------------------------------------------------------


def test_parse_keeps_the_rules_in_order() -> None:
    parsed = _filter(
        {
            "rules": [
                {"match": {"serverTool": "click"}, "input": ["x", "target.window_id"]},
                {"match": {"class": "comms"}, "report": False},
                {"match": {}},
            ]
        }
    )
    assert parsed == ObserveFilter(
        (
            Rule(server_tool="click", input=("x", "target.window_id")),
            Rule(tool_class="comms", report=False),
            Rule(),
        )
    )
    assert _filter({}) is None and _filter({"rules": None}) is None
    assert _filter({"rules": []}) == ObserveFilter(())


@pytest.mark.parametrize(
    ("params", "data"),
    [
        ({"rules": [{"match": {}}] * 65}, {"limit": "rules"}),
        ({"rules": [{"match": {}, "input": ["a"] * 65}]}, {"limit": "paths"}),
    ],
)
def test_over_a_limit_names_it(params: dict[str, Any], data: dict[str, str]) -> None:
    error = parse_observe(params, max_rules=64, max_paths=64)
    assert isinstance(error, HandlerError) and error.code == -32602 and error.data == data


def test_an_error_names_keys_never_values() -> None:
    error = parse_observe({"rules": [{"match": {"tool": "s3cr3t" * 100}}]}, max_rules=64, max_paths=64)
    assert isinstance(error, HandlerError)
    assert "s3cr3t" not in json.dumps(error.to_error())
    assert "rules[0].match.tool" in error.message


def test_patterns_and_first_match() -> None:
    rules = _filter({"rules": [{"match": {"tool": "x--*"}, "input": ["a"]}, {"match": {}, "input": True}]})
    assert rules is not None
    assert first_match(rules, _call()) == Rule(tool="x--*", input=("a",))
    assert first_match(rules, _call("y--go")) == Rule(input=True)
    case = _filter({"rules": [{"match": {"tool": "X--*"}}]})
    assert case is not None and first_match(case, _call()) is None  # case-sensitive
    literal = _filter({"rules": [{"match": {"tool": "x--r?n"}}]})
    assert literal is not None and first_match(literal, _call()) is None  # only * is special
    host = _filter({"rules": [{"match": {"serverId": "*"}}]})
    assert host is not None and first_match(host, _call("host--act", host=True)) is None
    unclassed = _filter({"rules": [{"match": {"class": "shell"}}]})
    assert unclassed is not None and first_match(unclassed, _call(classes=())) is None


# --- fields and the bound ---------------------------------------------------------------------


def test_field_selection() -> None:
    args = {"x": 812, "y": 440, "button": "left", "target": {"window_id": 3312, "title": "Invoice.pdf"}}
    assert select_fields(args, ("x", "y", "target.window_id")) == {
        "x": 812,
        "y": 440,
        "target": {"window_id": 3312},
    }
    assert select_fields(args, ("z", "x.q", "target.none")) == {}
    assert select_fields(args, ("target", "target.window_id")) == {"target": args["target"]}
    assert select_fields(args, True) == args and select_fields(args, ()) == {}


def test_bound_cuts_strings_and_drops_members() -> None:
    small = {"a": 1}
    assert bound_input(small, 100) == (small, False)
    value, altered = bound_input({"text": "é" * 100_000, "n": 1}, 1024) or ({}, False)
    assert altered and len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()) <= 1024
    assert value["text"].startswith("éé") and value["n"] == 1
    assert bound_input({"a": 1}, 1) is None  # not even {} fits: withheld


# --- the decision -----------------------------------------------------------------------------


def _decide(call: CallFacts, *, granted: frozenset[str] = BOTH, **kw: Any) -> Delivery | None:
    return decide(
        call,
        granted=granted,
        policy=kw.pop("policy", SHELL_INPUTS),
        observe_filter=kw.pop("observe_filter", None),
        own=kw.pop("own", False),
        max_input_bytes=kw.pop("max_input_bytes", 16384),
    )


def test_the_five_steps() -> None:
    everything = _filter({"rules": [{"match": {}, "input": True}]})
    assert _decide(_call(), granted=frozenset()) is None  # 1: not granted
    assert _decide(_call(), own=True) is None  # its own tool
    narrowed = ToolLifecyclePolicy(
        observe=Narrowing(conversations=("conv_1",)), inputs=Narrowing(classes=("shell",))
    )
    assert _decide(_call(conversation="conv_2"), policy=narrowed) is None
    assert _decide(_call()) == Delivery()  # 2-3: no filter, metadata only
    assert _decide(_call(), observe_filter=everything) == Delivery(input={"a": 1})
    assert _decide(_call(), granted=frozenset({OBSERVE}), observe_filter=everything) == Delivery()
    assert _decide(_call(classes=("comms",)), observe_filter=everything) == Delivery(input_withheld=True)
    assert _decide(_call(classes=()), observe_filter=everything) == Delivery(input_withheld=True)
    unnarrowed = ToolLifecyclePolicy()
    assert _decide(_call(), policy=unnarrowed, observe_filter=everything) == Delivery(input_withheld=True)
    paused = _filter({"rules": []})
    assert _decide(_call(), observe_filter=paused) is None
    big = _call(arguments={"s": "x" * 100})
    cut = _decide(big, observe_filter=everything, max_input_bytes=40)
    assert cut is not None and cut.input_altered and cut.input is not None
    assert _decide(big, observe_filter=everything, max_input_bytes=1) == Delivery(input_withheld=True)


def test_known_credentials_are_hidden_and_say_so() -> None:
    everything = _filter({"rules": [{"match": {}, "input": True}]})
    secret = "tok-0123456789abcdef"
    call = _call(arguments={"cmd": f"curl -H {secret}", "n": [1, {"k": secret}], "ok": "ls"})
    masked = CallFacts(
        *[
            getattr(call, f)
            for f in (
                "tool",
                "classes",
                "server_id",
                "server_tool",
                "conversation_id",
                "inference_id",
                "arguments",
            )
        ],
        Redactor([secret]).redact,
    )
    delivery = _decide(masked, observe_filter=everything)
    assert delivery is not None and delivery.input_altered and delivery.input is not None
    assert secret not in json.dumps(delivery.input) and delivery.input["ok"] == "ls"
    plain = _decide(_call(arguments={"ok": "ls"}), observe_filter=everything)
    assert plain == Delivery(input={"ok": "ls"})  # nothing hidden: not altered


def test_an_inputs_narrowing_by_conversation_alone() -> None:
    everything = _filter({"rules": [{"match": {}, "input": True}]})
    by_conversation = ToolLifecyclePolicy(inputs=Narrowing(conversations=("conv_1",)))
    assert _decide(_call(), policy=by_conversation, observe_filter=everything) == Delivery(input={"a": 1})
    assert _decide(
        _call(conversation="conv_2"), policy=by_conversation, observe_filter=everything
    ) == Delivery(input_withheld=True)
    assert _decide(_call(classes=("comms",)), policy=by_conversation, observe_filter=everything) == Delivery(
        input_withheld=True
    )


def test_the_named_default_is_selected_never_applied() -> None:
    everything = _filter({"rules": [{"match": {}, "input": True}]})
    default = ToolLifecyclePolicy(inputs=Narrowing(classes=DEFAULT_INPUTS_CLASSES))
    assert _decide(_call(classes=("computer",)), policy=default, observe_filter=everything) == Delivery(
        input={"a": 1}
    )
    assert _decide(_call(classes=("memory",)), policy=default, observe_filter=everything) == Delivery(
        input_withheld=True
    )


def test_terminals_follow_the_grant_not_the_filter() -> None:
    assert still_observes(_call(), granted=BOTH, policy=SHELL_INPUTS)
    assert not still_observes(_call(), granted=frozenset({INPUTS}), policy=SHELL_INPUTS)
    assert not still_observes(_call(), granted=None, policy=SHELL_INPUTS)
    away = ToolLifecyclePolicy(observe=Narrowing(tools=("y--*",)))
    assert not still_observes(_call(), granted=BOTH, policy=away)


def test_params_per_phase() -> None:
    call = _call()
    started = lifecycle_params(call, "c1", "started", Delivery(input={"a": 1}, input_altered=True))
    assert started == {
        "toolCallId": "c1",
        "inferenceId": "inf_1",
        "conversationId": "conv_1",
        "tool": "x--run",
        "class": ["shell"],
        "serverId": "x",
        "serverTool": "run",
        "phase": "started",
        "input": {"a": 1},
        "inputAltered": True,
    }
    done = lifecycle_params(call, "c1", "completed", Delivery(input={"a": 1}), is_error=True, duration_ms=5)
    assert done["isError"] is True and done["durationMs"] == 5 and "input" not in done
    pending = lifecycle_params(_call("host--act", host=True), "c2", "pending", Delivery(input={"a": 1}))
    assert "input" not in pending and "serverId" not in pending and "serverTool" not in pending
    assert "isError" not in lifecycle_params(call, "c1", "failed", is_error=True)


def test_phases_in_order_and_one_terminal() -> None:
    phases = CallPhases()
    phases.advance("pending")
    phases.advance("started")
    phases.advance("completed")
    for later in ("completed", "aborted", "started"):
        with pytest.raises(LocalProtocolError):
            phases.advance(later)
    fresh = CallPhases()
    with pytest.raises(LocalProtocolError):
        fresh.advance("failed")  # a terminal with no opening
    fresh.advance("started")
    with pytest.raises(LocalProtocolError):
        fresh.advance("pending")


def test_call_ids() -> None:
    assert call_id_for("toolu_01ABC", set(), 1) == "toolu_01ABC"
    assert call_id_for("toolu_01ABC", {"toolu_01ABC"}, 2) == f"{MINTED_PREFIX}2"
    assert call_id_for(None, set(), 3) == f"{MINTED_PREFIX}3"
    assert call_id_for(f"{MINTED_PREFIX}9", set(), 4) == f"{MINTED_PREFIX}4"


# --- the config key ---------------------------------------------------------------------------


def test_config_key() -> None:
    entry = {
        "command": "x",
        "grant": ["toolLifecycle.*"],
        "toolLifecycle": {
            "observe": {"tools": ["computer--*"], "conversations": ["conv_*"]},
            "inputs": {"classes": "default"},
        },
    }
    config = parse_config({"mcpServers": {"s": entry}}).servers["s"]
    assert config.tool_lifecycle == ToolLifecyclePolicy(
        observe=Narrowing(tools=("computer--*",), conversations=("conv_*",)),
        inputs=Narrowing(classes=DEFAULT_INPUTS_CLASSES),
    )
    with pytest.raises(ConfigError, match="not a tool class"):
        parse_config(
            {"mcpServers": {"s": {"command": "x", "toolLifecycle": {"inputs": {"classes": ["shel"]}}}}}
        )
    with pytest.raises(ConfigError, match="toolLifecycle"):
        parse_config({"mcpServers": {"s": {"command": "x", "toolLifecycle": {"input": {}}}}})
