"""RFC-010 rev 1: context injection deprecated. Written from the RFC's text (§4.1, §4.2):
no frozen conformance vectors exist for RFC-010 (its §9 question 3 asks for a reference-host
diagnostic and a migrated server instead).

Through a ``Host`` over real pipes to ``fixtures/current_spec/server.py``, whose
``injections`` part advertises the three ``inject.*`` paths and answers
``context/beforeInference`` with a non-empty ``contextInjections``; asyncio and trio:

- granted injections are still applied (§4.1: MUST, for the rest of 0.5);
- one warning per connection names the injecting server (§4.1): once for two hooks, again
  after a restart (a new connection);
- the injection paths are not granted by grant-all (the default of the command line) nor by
  any widening: only a pattern naming them grants them (§4.1, SHOULD NOT);
- ``GrantPolicy.ignore_injections`` applies the 0.6 rule (§4.2): nothing granted, nothing
  applied, the warning still given.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
import pytest

from mcpl_host import GrantPolicy, ServerConfig
from mcpl_host.config import parse_config
from mcpl_host.host import Host
from mcpl_host.mcpl.compat import widen
from mcpl_host.mcpl.grants import VOCABULARY, names_path
from mcpl_host.mcpl.injections import INJECT, read_injections
from mcpl_host.services.turns import FanoutResult
from mcpl_host.shell.commands import changed_policy

from .conftest import FIXTURES
from .test_cli import probe_json
from .wire import FAST

SERVER = str(FIXTURES / "current_spec" / "server.py")
INJECT_PATHS = frozenset(INJECT.values())
NAMED = GrantPolicy(grant=("contextHooks.beforeInference.inject.*",), grant_all_advertised=True)
MODEL = {"id": "m", "vendor": "v", "contextWindow": 1000, "capabilities": []}
TOLD = "deprecated by MCPL RFC-010"


def _config(policy: GrantPolicy, name: str = "injector") -> dict[str, ServerConfig]:
    return {
        name: ServerConfig(
            name=name, command=sys.executable, args=(SERVER,), limits=FAST, grant_policy=policy
        )
    }


async def _hook(host: Host, turn: int) -> FanoutResult:
    return await host.before_inference(
        inference_id=f"inf-{turn}", conversation_id="c", turn_index=turn, user_message="hi", model=MODEL
    )


def _told(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [entry for entry in logs if TOLD in str(entry.get("event"))]


# --- the grant: pure ----------------------------------------------------------------------------


def test_grant_all_and_wildcards_never_grant_an_injection_path() -> None:
    every = frozenset(VOCABULARY)
    assert not GrantPolicy(grant_all_advertised=True).compute(every).paths & INJECT_PATHS
    # A wildcard of the upper segments matches the leaves but does not name them.
    wide = GrantPolicy(grant=("contextHooks.*.*.*", "*.*.inject.*", "*.*.*.*"))
    assert not wide.compute(every).paths & INJECT_PATHS
    # The 0.4 profile's widened bound (every leaf of an advertised top-level capability).
    bound = widen({"contextHooks.beforeInference.observe"})
    assert INJECT_PATHS <= bound
    granted = GrantPolicy(grant_all_advertised=True).compute(bound).paths
    assert "contextHooks.beforeInference.observe" in granted and not granted & INJECT_PATHS
    # Named: the subtree or a leaf.
    assert NAMED.compute(every).paths >= INJECT_PATHS
    leaf = GrantPolicy(grant=("contextHooks.beforeInference.inject.beforeUser",)).compute(every)
    assert leaf.paths & INJECT_PATHS == {"contextHooks.beforeInference.inject.beforeUser"}
    assert names_path("contextHooks.beforeInference.inject.*", "contextHooks.beforeInference.inject.system")
    assert not names_path("contextHooks.*.inject.*", "contextHooks.beforeInference.inject.system")
    # The 0.6 rule: nothing, whatever is named; deny still wins over a name.
    assert not GrantPolicy(grant=NAMED.grant, ignore_injections=True).compute(every).paths & INJECT_PATHS
    denied = GrantPolicy(grant=NAMED.grant, deny=("contextHooks.beforeInference.inject.system",))
    assert "contextHooks.beforeInference.inject.system" not in denied.compute(every).paths


def test_ignored_answers_are_counted_never_applied() -> None:
    grant = NAMED.compute(VOCABULARY)
    answer = {"contextInjections": [{"namespace": "n", "position": "system", "content": "x"}]}
    assert len(read_injections(answer, grant).injections) == 1
    ignored = read_injections(answer, grant, ignore=True)
    assert (ignored.injections, ignored.dropped, ignored.returned) == ((), (), 1)
    assert read_injections({"contextInjections": []}, grant).returned == 0


def test_config_key_and_command_line_switch() -> None:
    entry = {"command": "x", "grant": ["contextHooks.beforeInference.inject.*"], "ignoreInjections": True}
    config = parse_config({"mcpServers": {"s": entry}}).servers["s"]
    assert config.grant_policy.ignore_injections is True
    assert (
        parse_config({"mcpServers": {"s": {"command": "x"}}}).servers["s"].grant_policy.ignore_injections
        is False
    )


# --- through a Host -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_named_injections_applied_and_told_once_per_connection(
    anyio_backend: str, logs: list[dict[str, Any]]
) -> None:
    with anyio.fail_after(30):
        async with Host(_config(NAMED)) as host:
            await host.wait_ready("injector", timeout=20)
            for turn in (0, 1):
                fan = await _hook(host, turn)
                (result,) = fan.results
                assert (result.returned, result.ignored) == (2, False)
                assert [i.content[0]["text"] for i in fan.injections("beforeUser")] == [
                    f"recap for inf-{turn}"
                ]
                assert len(fan.injections("afterUser")) == 1
            told = _told(logs)
            assert len(told) == 1  # two answers, one connection: one warning
            assert told[0]["server"] == "injector" and told[0]["section"] == "RFC-010 §4.1"
            handle = host.server("injector")
            first = await handle.connected()
            handle.restart()
            assert (await handle.connected()) is not first  # it waits for the new connection
            fan = await _hook(host, 2)
            assert len(fan.injections("beforeUser")) == 1
            assert len(_told(logs)) == 2  # a new connection: told again


@pytest.mark.anyio
async def test_grant_all_grants_no_injection(anyio_backend: str, logs: list[dict[str, Any]]) -> None:
    with anyio.fail_after(30):
        async with Host(_config(GrantPolicy(grant_all_advertised=True))) as host:
            await host.wait_ready("injector", timeout=20)
            conn = await host.server("injector").connected()
            assert conn.grant is not None
            assert "contextHooks.beforeInference.observe" in conn.grant.paths
            assert INJECT_PATHS <= conn.grant.advertised and not conn.grant.paths & INJECT_PATHS
            fan = await _hook(host, 0)
            (result,) = fan.results
            assert result.injections == () and {d.reason for d in result.dropped} == {"not_granted"}
            assert len(_told(logs)) == 1  # the server still injects: the operator is told


@pytest.mark.anyio
async def test_the_06_rule_ignores_injections(anyio_backend: str, logs: list[dict[str, Any]]) -> None:
    policy = GrantPolicy(grant=NAMED.grant, grant_all_advertised=True, ignore_injections=True)
    with anyio.fail_after(30):
        async with Host(_config(policy)) as host:
            await host.wait_ready("injector", timeout=20)
            conn = await host.server("injector").connected()
            assert conn.grant is not None and not conn.grant.paths & INJECT_PATHS
            fan = await _hook(host, 0)
            (result,) = fan.results
            assert (result.injections, result.dropped, result.returned, result.ignored) == ((), (), 2, True)
            assert not any(fan.injections(position) for position in ("system", "beforeUser", "afterUser"))
            told = _told(logs)
            assert len(told) == 1 and "ignored" in told[0]["event"]


def test_the_shell_grants_a_named_injection_path_under_grant_all() -> None:
    policy = changed_policy(
        GrantPolicy(grant_all_advertised=True), "grant", "contextHooks.beforeInference.inject.*"
    )
    assert policy.grant == ("contextHooks.beforeInference.inject.*",) and policy.grant_all_advertised
    kept = changed_policy(GrantPolicy(ignore_injections=True), "deny", "pushEvents")
    assert kept.ignore_injections  # a change keeps the 0.6 switch


def test_probe_ignore_injections_grants_none_even_when_named() -> None:
    named = (
        "--grant",
        "contextHooks.beforeInference.inject.*",
        "--grant",
        "contextHooks.beforeInference.observe",
    )
    doc, _ = probe_json(*named, "--", sys.executable, SERVER)
    assert INJECT_PATHS <= set(doc["grant"]["effectiveCapabilities"])
    doc, _ = probe_json(*named, "--ignore-injections", "--", sys.executable, SERVER)
    assert not INJECT_PATHS & set(doc["grant"]["effectiveCapabilities"])
    assert "contextHooks.beforeInference.observe" in doc["grant"]["effectiveCapabilities"]
