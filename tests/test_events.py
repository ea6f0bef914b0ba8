"""``mcpl_host.events`` by plain calls: the bounds of a subscription nobody reads, deliveries
that no full subscription holds back, and the order that puts ``ready`` first."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from mcpl_host.events import (
    Connecting,
    ConnectingOrder,
    Delivery,
    EventBus,
    HostEvent,
    PushEvent,
    Ready,
    ServerNotification,
    Subscription,
    json_bytes,
)


def push(params: dict[str, Any], server: str = "s", *, delivered: bool = True) -> PushEvent:
    return PushEvent(
        server=server,
        id=1,
        feature_set="f",
        event_id="e",
        params=params,
        delivery=Delivery() if delivered else None,
    )


def delivery(n: int) -> PushEvent:
    return push({"n": n})


def note(n: int, server: str = "s") -> ServerNotification:
    return ServerNotification(server=server, method="test/n", params={"n": n})


def connecting(attempt: int = 1) -> Connecting:
    return Connecting(server="s", attempt=attempt)


def ready() -> Ready:
    return Ready(
        server="s",
        attempt=1,
        server_name="",
        server_version="",
        protocol_version="",
        mcpl="active",
        effective_capabilities=[],
    )


def n_of(event: HostEvent) -> Any:
    assert isinstance(event, (PushEvent, ServerNotification))
    return event.params["n"]


def test_a_full_subscription_misses_a_delivery_and_counts_it_while_the_read_one_takes_it() -> None:
    bus = EventBus()
    stopped = bus.add(Subscription(max_queued=1))  # the application stopped reading it
    read = bus.add(Subscription(max_queued=4))
    events = [delivery(n) for n in range(3)]
    offered = [bus.offer(event, bus.matching(event)) for event in events]
    assert offered == [(2, 0), (1, 1), (1, 1)]  # never waits for the full one
    assert stopped.dropped == 2 and bus.dropped == 2
    assert [read.receive_nowait() for _ in range(3)] == events
    # Taken by the read one, the delivery queued in the stopped one is an observation there.
    assert stopped.has_room_for_delivery()
    only = stopped.receive_nowait()
    assert isinstance(only, PushEvent) and only.params["n"] == 0 and only.delivery is None


def test_a_delivery_nobody_took_keeps_its_place_until_it_is_withdrawn() -> None:
    sub = Subscription(max_queued=1)
    first = delivery(0)
    assert sub.put_delivery(first)
    assert not sub.has_room_for_delivery()  # still waiting for this consumer
    assert first.delivery is not None
    first.delivery.withdrawn = True  # its request was refused: it is never shown
    assert sub.has_room_for_delivery() and len(sub) == 0
    assert sub.dropped == 0


def test_taken_deliveries_turned_observations_are_bounded_oldest_first() -> None:
    sub = Subscription(max_queued=2)
    for n in range(3):
        sub.put_observation(note(n))  # 0 dropped for 2
    taken = delivery(3)
    assert sub.put_delivery(taken)
    assert taken.delivery is not None
    taken.delivery.take()  # another consumer took it
    sub.put_delivery(delivery(4))
    assert sub.put_delivery(delivery(5))  # compaction: 3 is an observation now, 1 dropped
    assert [n_of(sub.receive_nowait()) for _ in range(len(sub))] == [2, 3, 4, 5]
    assert sub.dropped == 2


def test_an_unread_subscription_drops_its_oldest_lifecycle_event_and_never_blocks() -> None:
    bus = EventBus()
    sub = bus.add(Subscription(max_queued_lifecycle=2))
    for attempt in range(1, 4):
        bus.emit_lifecycle(connecting(attempt))
    assert bus.dropped == 1 and sub.dropped == 1
    attempts = [sub.receive_nowait() for _ in range(2)]
    assert [e.attempt for e in attempts if isinstance(e, Connecting)] == [2, 3]


def test_connecting_order_holds_observations_until_the_event_that_ends_connecting() -> None:
    order = ConnectingOrder(max_held=2)
    assert order.observation(note(0))  # not connecting: at once
    assert order.lifecycle(connecting()) == []
    assert order.connecting("s") and not order.connecting("other")
    assert not order.observation(note(1))
    assert order.observation(ServerNotification(server="other", method="test/n", params={}))
    assert not order.observation(note(2))
    assert not order.observation(note(3))  # past max_held: the oldest held is dropped
    assert order.dropped == 1
    released = order.lifecycle(ready())
    assert [n_of(e) for e in released] == [2, 3]
    assert not order.connecting("s") and order.observation(note(4))


@pytest.mark.anyio
async def test_a_waiting_turn_wakes_when_the_consumer_takes_one() -> None:
    sub = Subscription(max_queued=1)
    assert sub.put_delivery(delivery(0))
    turn = anyio.Event()
    sub.wait_turn(turn)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(turn.wait)
            await anyio.wait_all_tasks_blocked()
            sub.receive_nowait()
    assert sub.has_room_for_delivery()


@pytest.mark.anyio
async def test_each_take_gives_one_waiting_delivery_its_turn_oldest_first() -> None:
    # Thousands of servers pushing at once: waking every waiting delivery on each take
    # cost each take a pass over all of them (a 1,000-server burst refused pushes at the
    # delivery timeout). One take, one turn, in the order they queued.
    sub = Subscription(max_queued=1)
    assert sub.put_delivery(delivery(0))
    turns = [anyio.Event() for _ in range(3)]
    for turn in turns:
        sub.wait_turn(turn)
    sub.receive_nowait()
    assert [turn.is_set() for turn in turns] == [True, False, False]
    assert sub.put_delivery(delivery(1))  # the first one used its turn
    sub.receive_nowait()
    assert [turn.is_set() for turn in turns] == [True, True, False]


@pytest.mark.anyio
async def test_a_turn_given_up_is_skipped_and_a_turn_not_used_is_handed_on() -> None:
    sub = Subscription(max_queued=1)
    assert sub.put_delivery(delivery(0))
    gone, first, second, third = (anyio.Event() for _ in range(4))
    for turn in (gone, first, second, third):
        sub.wait_turn(turn)
    gone.set()  # its delivery timed out while waiting: skipped
    sub.receive_nowait()
    assert first.is_set() and not second.is_set()
    # The first was cancelled before it used its turn: handed on, so the room is not lost.
    sub.hand_on()
    assert second.is_set() and not third.is_set()
    assert sub.put_delivery(delivery(1))  # the second used it: no room to hand on now
    sub.hand_on()
    assert not third.is_set()


@pytest.mark.anyio
async def test_a_turn_found_used_queues_again_at_the_head() -> None:
    sub = Subscription(max_queued=1)
    assert sub.put_delivery(delivery(0))
    first, later = anyio.Event(), anyio.Event()
    sub.wait_turn(first)
    sub.wait_turn(later)
    sub.receive_nowait()
    assert first.is_set()
    assert sub.put_delivery(delivery(1))  # a new delivery took the room before it ran
    again = anyio.Event()
    sub.wait_turn(again, first=True)
    sub.receive_nowait()
    assert again.is_set() and not later.is_set()


@pytest.mark.anyio
async def test_closing_or_ending_gives_every_waiting_delivery_its_turn() -> None:
    for stop in (Subscription.close, Subscription.end):
        sub = Subscription(max_queued=1)
        assert sub.put_delivery(delivery(0))
        turns = [anyio.Event() for _ in range(3)]
        for turn in turns:
            sub.wait_turn(turn)
        stop(sub)
        assert all(turn.is_set() for turn in turns)
        late = anyio.Event()
        sub.wait_turn(late)
        assert late.is_set()


def test_a_full_subscription_passes_over_its_queue_only_after_a_delivery_in_it_settled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each check for room on a full subscription passed over its whole queue (1,024
    # deliveries by default): with thousands of deliveries waiting, that was most of a burst.
    import mcpl_host.events as events

    bus = EventBus()
    full = bus.add(Subscription(max_queued=2))
    other = bus.add(Subscription(max_queued=4))
    queued = [delivery(n) for n in range(2)]
    for event in queued:
        bus.offer(event, bus.matching(event))
    looked: list[object] = []
    original = events.delivery_of

    def counting(event: HostEvent) -> Delivery | None:
        looked.append(event)
        return original(event)

    monkeypatch.setattr(events, "delivery_of", counting)
    for _ in range(5):
        assert not full.has_room_for_delivery()
    assert looked == []  # nothing settled: no pass over the queue
    assert other.receive_nowait() is queued[0]  # taken elsewhere: one pass makes room
    looked.clear()
    assert full.has_room_for_delivery()
    assert len(looked) == len(queued)


def test_closing_one_subscription_withdraws_only_the_deliveries_nobody_else_holds() -> None:
    bus = EventBus()
    closing = bus.add(Subscription())
    other = bus.add(Subscription(servers=["s"], kinds=["push_event"]))
    shared, alone = delivery(0), push({}, "t")
    bus.offer(shared, bus.matching(shared))
    bus.offer(alone, bus.matching(alone))
    closing.close()
    assert shared.delivery is not None and not shared.delivery.withdrawn
    assert alone.delivery is not None and alone.delivery.withdrawn
    assert other.receive_nowait() is shared and shared.delivery.taken.is_set()


def big(kind: str, n: int, size: int, *, delivered: bool = False) -> HostEvent:
    data = {"n": n, "text": "x" * size}
    if kind == "push_event":
        return push(data, delivered=delivered)
    return ServerNotification(server="s", method="test/n", params=data)


def test_a_subscription_holds_at_most_its_bytes_dropping_the_oldest_observations() -> None:
    sub = Subscription(max_queued=1024, max_queued_bytes=10_000)
    events = [big("notification", n, 1_000) for n in range(30)]
    for event in events:
        sub.put_observation(event)
    assert sub.queued_bytes <= 10_000
    kept = [n_of(sub.receive_nowait()) for _ in range(len(sub))]
    assert kept == list(range(30 - len(kept), 30))  # the newest, in order
    assert sub.dropped == 30 - len(kept) and sub.dropped_bytes == sum(
        json_bytes(e) for e in events[: sub.dropped]
    )
    assert sub.queued_bytes == 0  # taking them gives their bytes back


def test_lifecycle_events_and_deliveries_are_never_dropped_for_bytes() -> None:
    sub = Subscription(max_queued=1024, max_queued_bytes=5_000)
    sub.put_lifecycle(ready())
    sub.put_observation(big("notification", 0, 1_000))
    first = big("push_event", 1, 3_000, delivered=True)
    assert sub.put_delivery(first)
    # Room for a second delivery is made by dropping the observation, never the delivery.
    second = big("push_event", 2, 1_500, delivered=True)
    assert sub.put_delivery(second)
    assert sub.dropped == 1
    # A third does not fit beside two deliveries still waiting for this consumer: missed.
    assert not sub.put_delivery(big("push_event", 3, 1_500, delivered=True))
    assert sub.dropped == 2
    assert [sub.receive_nowait().kind for _ in range(len(sub))] == ["ready", "push_event", "push_event"]


def test_connecting_order_holds_at_most_its_bytes_per_server() -> None:
    order = ConnectingOrder(max_held=100, max_held_bytes=5_000)
    order.lifecycle(connecting())
    for n in range(20):
        assert not order.observation(big("notification", n, 1_000))
    released = order.lifecycle(ready())
    assert [n_of(event) for event in released] == list(range(20 - len(released), 20))
    assert sum(json_bytes(event) for event in released) <= 5_000
    assert order.dropped == 20 - len(released) > 0


def note_of(n: int, size: int) -> HostEvent:
    return ServerNotification(server="s", method="n", params={"n": n, "pad": "a" * size})


def test_a_subscription_holds_at_most_max_queued_bytes_of_observations_oldest_dropped() -> None:
    """Bounded by count only, an unread subscription held 1,024 notifications of whatever
    size the server chose (33 MiB each at the default max_line_bytes)."""
    bus = EventBus()
    sub = bus.add(Subscription(max_queued=1024, max_queued_bytes=1000))
    for n in range(10):
        bus.observe(note_of(n, 290))  # some 310 bytes each as JSON
    assert [n_of(sub.receive_nowait()) for _ in range(len(sub))] == [7, 8, 9]
    assert sub.dropped == 7 and bus.dropped == 7
    bus.observe(note_of(10, 5000))  # alone over the bound: the newest is kept
    assert [n_of(sub.receive_nowait()) for _ in range(len(sub))] == [10]
    # Received ones no longer count: three fit again.
    for n in range(11, 14):
        bus.observe(note_of(n, 290))
    assert len(sub) == 3 and sub.dropped == 7


def test_connecting_order_holds_at_most_max_held_bytes() -> None:
    order = ConnectingOrder(max_held=1024, max_held_bytes=1000)
    order.lifecycle(connecting())
    assert not any(order.observation(note_of(n, 290)) for n in range(10))
    released = order.lifecycle(ready())
    assert [n_of(e) for e in released] == [7, 8, 9] and order.dropped == 7


def test_the_size_of_any_event_data_is_counted_without_raising() -> None:
    assert json_bytes(ServerNotification(server="s", method="m", params={"id": 10**30, "text": "\udcff"})) > 0
    assert (
        json_bytes(ServerNotification(server="s", method="m", params={(1, 2): 1})) > 0
    )  # an application's data


@pytest.mark.anyio
async def test_a_take_between_the_room_check_and_the_wait_is_not_missed() -> None:
    # The Host checks for room and queues its turn with no checkpoint between: the consumer
    # may take an event before the waiting task runs, and that take still gives it the turn
    # (a waiter that missed it slept until the delivery timeout).
    sub = Subscription(max_queued=1)
    assert sub.put_delivery(delivery(0))
    assert not sub.has_room_for_delivery()
    turn = anyio.Event()
    sub.wait_turn(turn)
    sub.receive_nowait()  # the consumer runs before the waiting task does
    with anyio.fail_after(5):
        await turn.wait()
    assert sub.has_room_for_delivery()


def test_each_kind_gives_the_json_mcpl_host_run_prints_keys_in_order() -> None:
    from mcpl_host.events import (
        EVENT_KINDS,
        ChannelsChanged,
        Degraded,
        Disconnected,
        GaveUp,
        HeldMessage,
        InputStream,
        ManifestChange,
        PolicyReceipt,
        Reconnecting,
        Refusal,
        ServerRequest,
        SessionRenewed,
        Stalled,
        event_json,
    )
    from mcpl_host.mcpl.input_streams import InputStreamUpdate
    from mcpl_host.mcpl.manifest_diff import Impact

    connected = {
        "attempt": 1,
        "server_name": "n",
        "server_version": "v",
        "protocol_version": "2025-06-18",
        "mcpl": "active",
        "effective_capabilities": ["tools"],
        "mode": None,
    }
    profile = {"profile": "strict", "profile_reason": "r", "policy_form": "request", "grants_nothing": False}
    error = {"code": -32002, "message": "m"}
    cases: list[tuple[HostEvent, dict[str, Any]]] = [
        (Connecting(server="s", attempt=2), {"attempt": 2}),
        (
            Ready(server="s", **connected),
            {
                "attempt": 1,
                "serverName": "n",
                "serverVersion": "v",
                "protocolVersion": "2025-06-18",
                "mcpl": "active",
                "effectiveCapabilities": ["tools"],
                "mode": None,
            },
        ),
        (
            Degraded(server="s", **connected, **profile, reason="off"),
            {
                "attempt": 1,
                "serverName": "n",
                "serverVersion": "v",
                "protocolVersion": "2025-06-18",
                "mcpl": "active",
                "effectiveCapabilities": ["tools"],
                "mode": None,
                "profile": "strict",
                "profileReason": "r",
                "policyForm": "request",
                "grantsNothing": False,
                "reason": "off",
            },
        ),
        (
            Disconnected(server="s", attempt=1, phase="start", uptime_seconds=None, reason="x"),
            {
                "attempt": 1,
                "phase": "start",
                "uptimeSeconds": None,
                "reason": "x",
                "exitStatus": None,
                "closeCode": None,
                "stderrTail": [],
            },
        ),
        (Reconnecting(server="s", attempt=1, delay_seconds=0.5), {"attempt": 1, "delaySeconds": 0.5}),
        (
            GaveUp(server="s", reason="r", failures=3, window_seconds=60),
            {"reason": "r", "failures": 3, "windowSeconds": 60},
        ),
        (push({"n": 1}), {"id": 1, "featureSet": "f", "eventId": "e", "params": {"n": 1}}),
        (
            PushEvent(server="s", id=1, feature_set="f", event_id="e", params={}, answer={"accepted": True}),
            {"id": 1, "featureSet": "f", "eventId": "e", "params": {}, "answer": {"accepted": True}},
        ),
        (
            ServerRequest(
                server="s", id="k", method="roots/list", params=None, input_request=True, error=error
            ),
            {"id": "k", "method": "roots/list", "params": None, "inputRequest": True, "error": error},
        ),
        (
            # A handler's null result is an answer, shown as such (not a request still waiting).
            ServerRequest(server="s", id=2, method="x/y", params={}, answered=True, answer=None),
            {"id": 2, "method": "x/y", "params": {}, "answer": None},
        ),
        (
            ServerRequest(server="s", id=3, method="x/y", params={}),
            {"id": 3, "method": "x/y", "params": {}},
        ),
        (note(1), {"method": "test/n", "params": {"n": 1}}),
        (
            ServerNotification(server="s", method="channels/incoming", params={}, error=error),
            {"method": "channels/incoming", "params": {}, "error": error, "reason": None},
        ),
        (
            Refusal(
                server="s", id=None, method="channels/changed", params={}, error=error, notification=True
            ),
            {
                "id": None,
                "method": "channels/changed",
                "params": {},
                "error": error,
                "reason": None,
                "notification": True,
            },
        ),
        (
            HeldMessage(server="s", method="m", params={}, id=3, capability="c"),
            {"method": "m", "params": {}, "id": 3, "capability": "c"},
        ),
        (
            ManifestChange(
                server="s", domains=("tools",), impacts=(Impact("capability-revoked", "applied", "tools"),)
            ),
            {
                "domains": ["tools"],
                "impacts": [{"impact": "capability-revoked", "disposition": "applied", "detail": "tools"}],
            },
        ),
        (
            PolicyReceipt(server="s", accepted=True),
            {
                "accepted": True,
                "mode": None,
                "fallback": None,
                "reason": None,
                "unavailableFeatures": [],
                "defects": [],
            },
        ),
        (ChannelsChanged(server="s", channels=[{"id": "c"}]), {"channels": [{"id": "c"}]}),
        (  # RFC-009 §10: the metadata, never the provisional text
            InputStream(server="s", update=InputStreamUpdate("s1", "updated", 2, "c", "a", "m", "words")),
            {
                "streamId": "s1",
                "status": "updated",
                "revision": 2,
                "channelId": "c",
                "senderId": "a",
                "messageId": "m",
            },
        ),
        (
            Stalled(server="s", explanation="e", silent_seconds=1.0),
            {"explanation": "e", "silentSeconds": 1.0, "waiting": [], "refused": None, "profile": None},
        ),
        (SessionRenewed(server="s", renewals=2), {"renewals": 2}),
    ]
    assert sorted({event.kind for event, _ in cases}) == sorted(EVENT_KINDS)
    for event, data in cases:
        assert list(event.to_json().items()) == list(data.items()), event.kind
        assert event_json(event) == {"server": "s", "kind": event.kind, "time": event.time, "data": data}
    assert "params" not in repr(push({"secret": "x"})) and "secret" not in repr(push({"secret": "x"}))
