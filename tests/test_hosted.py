"""What belongs to a server outlives its transports, and the Host loses nothing that matters.

Each test names a fault the layer an agent framework embeds once had: a revoked capability
coming back after a restart, held state lost on restart, pushes accepted and then dropped, a
``ready`` event evicted, the application's channel patterns widened by the host, and a close
that waited the whole close grace. Real fixture processes over real pipes, on asyncio and
trio; ``fixtures/attempts.py`` runs a different script on each start of a server.
"""

from __future__ import annotations

import io
import json
import sys
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpl_host import (
    FeatureSetPolicy,
    GrantPolicy,
    Host,
    HostedServer,
    HostHandlers,
    Limits,
    ServerConfig,
    Subscription,
)
from mcpl_host.events import PushEvent, ServerNotification
from mcpl_host.host import DROPPED_EVENTS_LOGGED
from mcpl_host.supervisor_policy import RestartPolicy

from .conftest import FIXTURES
from .wire import DONE_METHOD, MCP_HANDSHAKE, MCPL_HANDSHAKE, MCPL_RESULT, SCRIPTED, Script, mark, push_event

pytestmark = pytest.mark.anyio

TIMEOUT = 60
QUICK = Limits(close_grace_seconds=0.5, terminate_grace_seconds=1.0, handshake_timeout_seconds=10.0)
RESTART = RestartPolicy(base_delay_seconds=0.05, jitter=0.0)
GRANT_ALL = GrantPolicy(grant_all_advertised=True)


def attempts_config(tmp_path: Path, scripts: Sequence[Script], **kwargs: Any) -> ServerConfig:
    """A server that runs ``scripts[n]`` on its n-th start (the last one after that)."""
    args = [str(FIXTURES / "attempts.py"), str(tmp_path / "starts")]
    for script in scripts:
        args += [str(script.path), str(script.record_path)]
    kwargs.setdefault("limits", QUICK)
    kwargs.setdefault("restart_policy", RESTART)
    return ServerConfig(name="s", transport="stdio", command=sys.executable, args=tuple(args), **kwargs)


def script_config(script: Script, **kwargs: Any) -> ServerConfig:
    kwargs.setdefault("limits", QUICK)
    kwargs.setdefault("restart_policy", RESTART)
    args = (str(SCRIPTED), str(script.path), str(script.record_path))
    return ServerConfig(name="s", transport="stdio", command=sys.executable, args=args, **kwargs)


def answer(script: Script, request_id: Any) -> dict[str, Any]:
    (found,) = [m for m in script.messages() if "method" not in m and m.get("id") == request_id]
    return found


async def until(notes: Subscription, method: str = DONE_METHOD) -> None:
    """Wait for the script's notification ``method`` on a notifications-only subscription
    (made before the host is entered, so it misses nothing)."""
    async for event in notes:
        if isinstance(event, ServerNotification) and event.method == method:
            return


# -- the policy the application set outlives the transport ----------------------------------


async def test_a_revoked_capability_stays_revoked_after_the_server_is_killed_and_restarted(
    tmp_path: Path,
) -> None:
    first = Script(
        tmp_path,
        [
            *MCPL_HANDSHAKE,
            mark("up"),
            {"expect": {"method": "featureSets/update"}},  # the application's runtime reduction
            {"reply": {"accepted": True}},
            {"exit": 1},  # killed from outside
        ],
        name="first",
    )
    second = Script(
        tmp_path,
        [
            {"expect": {"method": "initialize"}},
            {"reply": MCPL_RESULT},
            {"expect": {"method": "notifications/initialized"}},
            {"expect": {"method": "featureSets/update"}},
            {"reply": {"accepted": True}},
            {"send": push_event(5)},
            {"wait_response": 5},
        ],
        name="second",
    )
    host = Host({"s": attempts_config(tmp_path, [first, second], grant_policy=GRANT_ALL)})
    notes = host.subscribe(kinds=["notification"])
    with anyio.fail_after(TIMEOUT):
        async with host:
            await host.wait_ready("s", timeout=20)
            change = await host.server("s").hosted.update_policy(
                GrantPolicy(grant_all_advertised=True, deny=("pushEvents",))
            )
            assert change.in_force is not None and "pushEvents" not in change.in_force.paths
            await until(notes)
    initial = [m for m in second.messages() if m.get("method") == "featureSets/update"][0]
    assert initial["params"]["effectiveCapabilities"] == ["tools"]
    assert "pushEvents" in initial["params"]["deniedCapabilities"]
    assert answer(second, 5)["error"]["code"] == -32002


async def test_a_feature_set_state_entry_survives_a_restart(tmp_path: Path) -> None:
    update = {"featureSet": "demo", "checkpoint": "c1", "data": {"n": 1}}
    first = Script(
        tmp_path,
        [
            *MCPL_HANDSHAKE,
            {"send": {"jsonrpc": "2.0", "id": 1, "method": "state/update", "params": update}},
            {"wait_response": 1, "expect_result": {"accepted": True}},
            {"exit": 1},
        ],
        name="first",
    )
    second = Script(
        tmp_path,
        [
            *MCPL_HANDSHAKE,
            {"send": {"jsonrpc": "2.0", "id": 2, "method": "state/get", "params": {"featureSet": "demo"}}},
            {"wait_response": 2},
        ],
        name="second",
    )
    host = Host({"s": attempts_config(tmp_path, [first, second], grant_policy=GRANT_ALL)})
    notes = host.subscribe(kinds=["notification"])
    with anyio.fail_after(TIMEOUT):
        async with host:
            await until(notes)
    assert answer(second, 2)["result"] == {"checkpoint": "c1", "data": {"n": 1}}


# -- events: nothing accepted and then lost, no lifecycle event evicted ------------------------


async def test_forty_pushes_to_a_slow_application_are_each_taken_or_refused_with_a_reason(
    tmp_path: Path,
) -> None:
    steps: list[dict[str, Any]] = [*MCPL_HANDSHAKE]
    steps += [{"send": push_event(n, f"e{n}")} for n in range(40)]
    steps.append(mark("sent"))
    steps.append({"wait_responses": list(range(40)), "timeout": 30})  # concurrent: any order
    script = Script(tmp_path, steps)
    # Every push waits for room as long as the test may take: how slowly a loaded machine
    # schedules the application must not decide whether a push is taken.
    limits = Limits(close_grace_seconds=0.5, terminate_grace_seconds=1.0, delivery_timeout_seconds=TIMEOUT)
    host = Host({"s": script_config(script, grant_policy=GRANT_ALL, limits=limits)}, max_queued_events=8)
    taken: list[str] = []
    notes = host.subscribe(kinds=["notification"])
    with anyio.fail_after(TIMEOUT):
        async with host:
            await until(notes, "test/mark")  # the application is busy until every push was sent
            async for event in host.events():
                if isinstance(event, PushEvent):
                    taken.append(event.event_id)
                elif isinstance(event, ServerNotification) and event.method == DONE_METHOD:
                    break
    results = {n: answer(script, n)["result"] for n in range(40)}
    accepted = [f"e{n}" for n, result in results.items() if result["accepted"] is True]
    refused = [result for result in results.values() if result["accepted"] is not True]
    assert sorted(accepted) == sorted(taken)  # every push answered accepted was taken
    assert all(result.get("reason") for result in refused)  # every other one says why
    assert len(accepted) == 40  # the application read them all in the end


async def test_an_unread_default_subscription_never_holds_back_the_one_the_application_reads(
    tmp_path: Path,
) -> None:
    # The framework example (docs/library.md): the application reads only its own subscription to
    # one server's pushes; the default subscription (made with the host) is never read.
    # More pushes than a subscription holds (``max_queued_events``; MAX_QUEUED_EVENTS, 1,024,
    # by default: set smaller here, the rule is the same at any bound) must each be taken by
    # the subscription that is read and answered accepted.
    bound = 64
    pushes = bound + 76
    steps: list[dict[str, Any]] = [*MCPL_HANDSHAKE]
    steps += [{"send": push_event(n, f"e{n}")} for n in range(pushes)]
    steps.append({"wait_responses": list(range(pushes)), "timeout": 60})
    script = Script(tmp_path, steps)
    limits = Limits(close_grace_seconds=0.5, terminate_grace_seconds=1.0, delivery_timeout_seconds=1.0)
    host = Host({"s": script_config(script, grant_policy=GRANT_ALL, limits=limits)}, max_queued_events=bound)
    triggers = host.subscribe(servers=["s"], kinds=["push_event"])
    notes = host.subscribe(servers=["s"], kinds=["notification"])
    taken: list[str] = []
    with anyio.fail_after(TIMEOUT):
        async with host:
            async with anyio.create_task_group() as tg:

                async def read() -> None:
                    async for event in triggers:
                        assert isinstance(event, PushEvent)
                        taken.append(event.event_id)

                tg.start_soon(read)
                await until(notes)  # every push was answered
                tg.cancel_scope.cancel()
    results = [answer(script, n)["result"] for n in range(pushes)]
    refused = [result for result in results if result["accepted"] is not True]
    assert refused == []
    assert sorted(taken) == sorted(f"e{n}" for n in range(pushes))  # concurrent: any order
    assert len(host.events()) <= 2 * bound  # the unread one stays bounded


async def test_a_subscription_the_application_stopped_reading_is_bounded_and_says_what_it_lost(
    tmp_path: Path, rendered_logs: io.StringIO
) -> None:
    steps: list[dict[str, Any]] = [*MCPL_HANDSHAKE]
    steps += [{"send": push_event(n, f"e{n}")} for n in range(40)]
    steps.append({"wait_responses": list(range(40)), "timeout": 30})
    script = Script(tmp_path, steps)
    host = Host({"s": script_config(script, grant_policy=GRANT_ALL)}, max_queued_events=8)
    stopped = host.subscribe(kinds=["push_event"])  # read by nobody from the start
    read = host.subscribe(kinds=["push_event"])
    notes = host.subscribe(kinds=["notification"])
    taken: list[str] = []
    with anyio.fail_after(TIMEOUT):
        async with host:
            async with anyio.create_task_group() as tg:

                async def take() -> None:
                    async for event in read:
                        assert isinstance(event, PushEvent)
                        taken.append(event.event_id)

                tg.start_soon(take)
                await until(notes)
                tg.cancel_scope.cancel()
    assert [answer(script, n)["result"] for n in range(40)] == [{"accepted": True}] * 40
    assert sorted(taken) == sorted(f"e{n}" for n in range(40))
    assert len(stopped) <= 2 * 8 and stopped.dropped >= 40 - 2 * 8
    assert host.dropped_events == stopped.dropped + host.events().dropped + notes.dropped
    lines = [json.loads(line) for line in rendered_logs.getvalue().splitlines()]
    full = [line["event"] for line in lines if line["event"].startswith("event subscription full: ")]
    assert len(full) == DROPPED_EVENTS_LOGGED + 1 and full[-1].endswith("; more go unlogged")
    assert all(line["dropped"] > 0 for line in lines if line["event"] in full)


async def test_an_unread_subscription_is_bounded_in_bytes_not_only_in_events(tmp_path: Path) -> None:
    # 100 notifications of 64 KiB each are far fewer than a subscription's count bound
    # (1,024) but 6.4 MiB: the default subscription nobody reads keeps at most its bytes,
    # the newest, and says what it dropped; the memory the host holds is measured.
    size, count, bound = 64 * 1024, 100, 1024 * 1024
    flood = [
        {"send": {"jsonrpc": "2.0", "method": "test/noise", "params": {"n": n, "text": "x" * size}}}
        for n in range(count)
    ]
    script = Script(tmp_path, [*MCP_HANDSHAKE, *flood, mark("done")])
    host = Host({"s": script_config(script)}, max_queued_event_bytes=bound)
    notes = host.subscribe(kinds=["notification"])
    with anyio.fail_after(TIMEOUT):
        async with host:
            tracemalloc.start()
            try:
                before = tracemalloc.get_traced_memory()[0]
                await until(notes, "test/mark")  # read: nothing is kept here
                held = tracemalloc.get_traced_memory()[0] - before
            finally:
                tracemalloc.stop()
            unread = host.events()
            assert unread.queued_bytes <= bound
            queued = _drain(unread)
    kept = [e.params["n"] for e in queued if isinstance(e, ServerNotification) and e.method == "test/noise"]
    assert kept == list(range(count - len(kept), count))  # the newest, in order
    assert unread.dropped >= count - len(kept) and unread.dropped_bytes > (count - 16) * size
    assert held < 3 * bound  # about the bound: 6.4 MiB before


def _drain(subscription: Subscription) -> list[Any]:
    events = []
    while len(subscription):
        events.append(subscription.receive_nowait())
    return events


async def test_a_ready_event_is_never_lost_under_a_flood_of_other_events(tmp_path: Path) -> None:
    flood = [{"send": {"jsonrpc": "2.0", "method": "test/noise", "params": {"n": n}}} for n in range(200)]
    script = Script(tmp_path, [*MCP_HANDSHAKE, *flood])
    host = Host({"s": script_config(script)}, max_queued_events=8)
    notes = host.subscribe(kinds=["notification"])
    with anyio.fail_after(TIMEOUT):
        async with host:
            await until(notes)  # the flood is over before the application reads anything
            kinds: list[str] = []
            while len(host.events()):
                kinds.append(host.events().receive_nowait().kind)
    assert kinds[:2] == ["connecting", "ready"]
    assert host.dropped_events > 0  # observations were dropped, oldest first; lifecycle never


@pytest.mark.parametrize("era", ["mcp", "mcpl", "mcpl-push"])
async def test_ready_comes_before_a_notification_written_with_the_last_answer_of_the_handshake(
    tmp_path: Path, era: str
) -> None:
    # The notification arrives in the same chunk as the answer that ends the handshake, so
    # the read loop reports it before the supervisor has had a turn to emit ready.
    note = {"jsonrpc": "2.0", "method": "test/early", "params": {}}
    if era == "mcp":
        steps: list[dict[str, Any]] = [
            {"expect": {"method": "initialize"}},
            {"reply": MCP_HANDSHAKE[1]["reply"], "then": [note]},
            {"expect": {"method": "notifications/initialized"}},
        ]
    elif era == "mcpl":
        steps = [*MCPL_HANDSHAKE[:-1], {"reply": {"accepted": True}, "then": [note]}]
    else:  # a push (a delivery) in the same write as the receipt, then the notification
        steps = [
            *MCPL_HANDSHAKE[:-1],
            {"reply": {"accepted": True}, "then": [push_event(1, "early"), note]},
            {"wait_response": 1},
        ]
    script = Script(tmp_path, steps)
    host = Host({"s": script_config(script, grant_policy=GRANT_ALL)})
    kinds: list[str] = []
    with anyio.fail_after(TIMEOUT):
        async with host:
            async for event in host.events():
                kinds.append(event.method if isinstance(event, ServerNotification) else event.kind)
                if kinds[-1] == DONE_METHOD:
                    break
    assert kinds[:2] == ["connecting", "ready"], kinds
    assert "test/early" in kinds
    if era == "mcpl-push":
        assert "push_event" in kinds and answer(script, 1)["result"] == {"accepted": True}


async def test_observations_held_until_ready_are_bounded_counted_and_follow_it(
    tmp_path: Path, rendered_logs: io.StringIO
) -> None:
    flood = [{"send": {"jsonrpc": "2.0", "method": "test/noise", "params": {"n": n}}} for n in range(50)]
    steps = [*MCPL_HANDSHAKE[:-1], *flood, MCPL_HANDSHAKE[-1]]  # all while connecting
    script = Script(tmp_path, steps)
    host = Host({"s": script_config(script, grant_policy=GRANT_ALL)}, max_queued_events=8)
    seen: list[tuple[str, Any]] = []
    with anyio.fail_after(TIMEOUT):
        async with host:
            async for event in host.events():
                params = event.params if isinstance(event, (ServerNotification, PushEvent)) else None
                seen.append((event.kind, params.get("n") if isinstance(params, dict) else None))
                if isinstance(event, ServerNotification) and event.method == DONE_METHOD:
                    break
    assert seen[:2] == [("connecting", None), ("ready", None)]
    noise = [n for kind, n in seen if kind == "notification" and n is not None]
    # The newest of those held (at most 8, the receipt among them), in order, after ready.
    assert noise == sorted(noise) and noise[-1] == 49 and noise[0] >= 50 - 8
    assert host.dropped_events >= 42
    lines = [json.loads(line) for line in rendered_logs.getvalue().splitlines()]
    assert any(
        line["event"] == "event subscription full: dropped the oldest observation held until ready"
        for line in lines
    )


# -- the application's handlers are used as they are ------------------------------------------


async def test_the_applications_channel_patterns_are_enforced_through_the_host(tmp_path: Path) -> None:
    manifest = {**MCPL_RESULT["capabilities"]["experimental"]["mcpl"], "channels": {"register": True}}
    result = {**MCPL_RESULT, "capabilities": {"tools": {}, "experimental": {"mcpl": manifest}}}
    channels = [
        {"id": "discord:acme/general", "type": "discord", "label": "general", "direction": "bidirectional"},
        {"id": "discord:other/x", "type": "discord", "label": "x", "direction": "bidirectional"},
    ]
    script = Script(
        tmp_path,
        [
            {"expect": {"method": "initialize"}},
            {"reply": result},
            {"expect": {"method": "notifications/initialized"}},
            {"expect": {"method": "featureSets/update"}},
            {"reply": {"accepted": True}},
            {
                "send": {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "channels/register",
                    "params": {"channels": channels},
                }
            },
            {"wait_response": 1},
        ],
    )
    host = Host(
        {"s": script_config(script, grant_policy=GRANT_ALL)},
        handlers_factory=lambda name: HostHandlers(channel_patterns=("discord:acme/*",)),
    )
    notes = host.subscribe(kinds=["notification"])
    with anyio.fail_after(TIMEOUT):
        async with host:
            await until(notes)
    assert answer(script, 1)["result"]["results"] == [
        {"id": "discord:acme/general", "accepted": True},
        {"id": "discord:other/x", "accepted": False, "reason": "capability_denied"},
    ]


# -- closing ---------------------------------------------------------------------------------


async def test_closing_never_waits_the_close_grace_for_a_server_that_exits_on_stdin_eof(
    tmp_path: Path,
) -> None:
    script = Script(tmp_path, MCP_HANDSHAKE)
    grace = Limits(close_grace_seconds=3.0, terminate_grace_seconds=3.0, handshake_timeout_seconds=10.0)
    slowest = 0.0
    for _run in range(50):
        with anyio.fail_after(TIMEOUT):
            with anyio.CancelScope() as scope:
                async with Host({"s": script_config(script, limits=grace)}) as host:
                    await host.wait_ready("s", timeout=20)
                    await (await host.server("s").connected()).mcp.notify(
                        "test/last-words"
                    )  # output queued as the cancel lands
                    cancelled_at = anyio.current_time()
                    scope.cancel()
                    await anyio.sleep_forever()
            slowest = max(slowest, anyio.current_time() - cancelled_at)
    # The server exits as soon as its stdin closes; nothing may wait for the 3 s grace.
    assert slowest < grace.close_grace_seconds / 2, f"slowest close took {slowest:.2f} s"
    assert sum(1 for m in script.messages() if m.get("method") == "test/last-words") == 50


async def test_a_hosted_server_changes_only_through_its_methods_and_keeps_the_policy_once() -> None:
    # Nothing here opens a transport.
    hosted = HostedServer(ServerConfig(name="s", command="unused-server"))
    for name in (
        "name",
        "handlers",
        "limits",
        "state_store",
        "event_dedupe",
        "policy",
        "feature_set_policy",
        "compat",
        "protocol",
        "transport_factory",
        "config",
        "publish_mode",
        "publish_as_notification",
        "policy_as_notification",
        "channels",
        "learned_era",
        "connections_opened",
    ):
        with pytest.raises(AttributeError):
            setattr(hosted, name, getattr(hosted, name))

    tools = GrantPolicy(grant=("tools",))
    hosted.set_policy(tools)
    feature_sets = FeatureSetPolicy()
    hosted.set_policy(feature_set_policy=feature_sets)
    assert hosted.policy is tools and hosted.feature_set_policy is feature_sets
    # Not connected: the change is stored (through set_policy) for the next handshake.
    change = await hosted.update_policy(GRANT_ALL)
    assert change.deferred and hosted.policy is GRANT_ALL and hosted.feature_set_policy is feature_sets

    hosted.learn_publish_as_notification()
    assert hosted.publish_mode == "auto" and hosted.publish_as_notification
    hosted.set_publish_mode("request")  # the application's choice forgets what "auto" learned
    assert hosted.publish_mode == "request" and not hosted.publish_as_notification
    assert not hosted.policy_as_notification
    hosted.learn_policy_as_notification()
    assert hosted.policy_as_notification

    hosted.set_compat("strict")
    hosted.set_protocol("handshake")
    assert (hosted.compat, hosted.protocol) == ("strict", "handshake")
    assert hosted.says_mcpl  # a compat setting says MCPL (docs/protocol.md S3b)
    for bad in (
        lambda: hosted.set_publish_mode("sometimes"),  # type: ignore[arg-type]
        lambda: hosted.set_compat("0.3"),  # type: ignore[arg-type]
        lambda: hosted.set_protocol("both"),  # type: ignore[arg-type]
    ):
        with pytest.raises(ValueError):
            bad()
    assert (hosted.publish_mode, hosted.compat, hosted.protocol) == ("request", "strict", "handshake")

    hosted.channels_changed([{"id": "discord:acme/general"}])
    shown = hosted.channels
    shown.append({"id": "not registered"})
    assert hosted.channels == [{"id": "discord:acme/general"}]
