"""A ``push/event`` answered in the read loop while the application's handler is the
library's own (docs/protocol.md, "Push idempotency"; ``services.push``, "Answered at once";
``inbound``, ``EagerJob``): de-duplication as before, and only while no admitted request
waits for its turn, so handlers start in wire order, back-pressure still counts a push that
must wait, and a cancelled push that waited is never answered."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from mcpl_host import GrantPolicy, HostHandlers, RequestContext, ServerConnection
from mcpl_host.events import HostEvent
from mcpl_host.inbound import LATER
from mcpl_host.jsonrpc.envelope import Request
from mcpl_host.limits import Limits
from mcpl_host.logging import Redactor, get_logger
from mcpl_host.mcpl.tags import EventDeduplicator
from mcpl_host.observe import Reporter
from mcpl_host.services.push import PushService, _InFlight, event_fingerprint

from .wire import MCPL_HANDSHAKE, Script, TestHandlers, mark, push_event, server_notification, server_request

pytestmark = pytest.mark.anyio

ONE_AT_A_TIME = Limits(
    max_concurrent_inbound=1,
    max_queued_inbound=4,
    close_grace_seconds=2.0,
    terminate_grace_seconds=1.0,
    handshake_timeout_seconds=10.0,
)


# --- PushService.answer_now, plain calls --------------------------------------------------------


class _Watching:
    def __init__(self) -> None:
        self.events: list[HostEvent] = []

    def observe(self, event: HostEvent) -> None:
        self.events.append(event)


class _Own(HostHandlers):
    async def push_event(self, context: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
        return {"accepted": False, "reason": "mine"}


def _service(
    handlers: HostHandlers | None = None,
    dedupe: EventDeduplicator | None = None,
    observer: _Watching | None = None,
) -> PushService:
    handlers = handlers or HostHandlers()
    return PushService(
        handlers,
        Reporter("s", handlers, observer),
        dedupe if dedupe is not None else EventDeduplicator(),
        log=get_logger("test"),
        redactor=Redactor(),
    )


def _push(request_id: int, event_id: str = "e1", **changes: Any) -> Request:
    message = push_event(request_id, event_id)
    return Request(request_id, "push/event", {**message["params"], **changes})


def test_a_new_push_is_accepted_at_once_and_remembered() -> None:
    dedupe = EventDeduplicator()
    service = _service(dedupe=dedupe)
    assert service.answer_now(_push(1)) == b'{"accepted":true}'  # the result's JSON text
    assert service.answer_now(_push(2)) == b'{"accepted":true}'  # a duplicate: the result again
    assert len(dedupe) == 1


def test_a_duplicate_gets_the_result_remembered_whoever_answered_it() -> None:
    dedupe = EventDeduplicator()
    request = _push(1)
    fingerprint = event_fingerprint(request.params)
    kept = json.dumps({"accepted": True, "inferenceId": "inf-7"}).encode()
    dedupe.remember("e1", (fingerprint, 0, kept), time.monotonic())  # another transport's
    assert _service(dedupe=dedupe).answer_now(request) == kept  # the text kept, as it is


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"payload": {"content": [{"type": "text", "text": "big"}], "n": 2**70}},
        {"origin": {"z": 1, "a": [2]}},
    ],
)
def test_the_fingerprint_kept_at_once_is_the_one_a_job_computes(changes: dict[str, Any]) -> None:
    # A duplicate answered at once and one served as a job compare the same digest (MCPL
    # §9.4: a retry from another transport), params beyond orjson (an integer over 64 bits) too.
    dedupe = EventDeduplicator()
    request = _push(1, **changes)
    assert _service(dedupe=dedupe).answer_now(request) == b'{"accepted":true}'
    kept = dedupe.check("e1", time.monotonic())
    assert kept is not None and kept[0] == event_fingerprint(request.params)


def test_a_result_kept_beyond_orjson_is_served_as_a_job() -> None:
    dedupe = EventDeduplicator()
    request = _push(1)
    kept = {"accepted": True, "inferenceId": 2**70}  # kept as a dict (services.push._kept)
    dedupe.remember("e1", (event_fingerprint(request.params), 0, kept), time.monotonic())
    assert _service(dedupe=dedupe).answer_now(request) is LATER


def test_a_reused_id_with_other_params_from_another_transport_is_a_new_event() -> None:
    dedupe = EventDeduplicator()
    kept = json.dumps({"accepted": False, "reason": "old"}).encode()
    dedupe.remember("e1", (12345, 0, kept), time.monotonic())  # another transport, other params
    with capture_logs() as logs:
        assert _service(dedupe=dedupe).answer_now(_push(1)) == b'{"accepted":true}'
    assert [e["log_level"] for e in logs if e["event"].startswith("push/event reuses")] == ["info"]


def test_a_duplicate_of_a_push_in_flight_is_left_to_wait_for_it() -> None:
    dedupe = EventDeduplicator()
    service = _service(dedupe=dedupe)
    request = _push(1)
    marker = _InFlight(event_fingerprint(request.params), 0)
    dedupe.claim("e1", marker, time.monotonic())
    assert service.answer_now(request) is LATER


@pytest.mark.parametrize("who", ["handler", "observer"])
def test_an_own_handler_or_an_observer_serves_the_push_as_a_job(who: str) -> None:
    dedupe = EventDeduplicator()
    if who == "handler":
        service = _service(_Own(), dedupe)
    else:
        service = _service(dedupe=dedupe, observer=_Watching())
    assert service.answer_now(_push(1)) is LATER
    assert len(dedupe) == 0  # nothing claimed: the job does it all


def test_an_instance_handler_is_the_applications_too() -> None:
    handlers = HostHandlers()

    async def mine(context: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
        return {"accepted": True}

    handlers.push_event = mine  # type: ignore[method-assign]
    assert _service(handlers).answer_now(_push(1)) is LATER


def test_tag_problems_are_still_logged_at_once(logs: list[dict[str, Any]]) -> None:
    assert _service().answer_now(_push(1, tags=["chat:dm", 7])) == b'{"accepted":true}'
    assert [e["event"] for e in logs] == ["push/event tag problems"]


# --- on the wire ----------------------------------------------------------------------------------


class Turns(TestHandlers):
    """``test/slow`` holds the one worker until ``release``, telling the server it started
    (``test/started``); every other request is answered at once. ``push_event`` is the
    library's own."""

    def __init__(self) -> None:
        super().__init__()
        self.connection: ServerConnection | None = None
        self.release = anyio.Event()

    async def request(self, context: RequestContext, params: Any) -> Any:
        if context.method == "test/slow":
            assert self.connection is not None
            self.connection.connection.notify_nowait("test/started")
            await self.release.wait()
        return {"method": context.method}


def answered_ids(script: Script) -> list[Any]:
    """The ids of the host's answers, in the order it wrote them."""
    return [m["id"] for m in script.messages() if "method" not in m and "id" in m]


async def run_turns(script: Script, release_at: str) -> None:
    handlers = Turns()
    with anyio.fail_after(30):
        async with script.connect(
            handlers=handlers, limits=ONE_AT_A_TIME, grant_policy=GrantPolicy(grant_all_advertised=True)
        ) as conn:
            handlers.connection = conn
            await handlers.mark(release_at).wait()
            handlers.release.set()
            await script.finished(conn)


async def test_a_push_is_answered_while_the_only_worker_is_busy(tmp_path: Path) -> None:
    # Nothing waits for its turn when the push is read: it is answered in the read loop,
    # before the request that holds the one worker. A cancellation of it then changes nothing.
    script = Script(
        tmp_path,
        [
            *MCPL_HANDSHAKE,
            server_request(1, "test/slow"),
            {"wait_for": {"method": "test/started"}},
            {"send": push_event(2)},
            {"wait_response": 2, "expect_result": {"accepted": True}, "timeout": 5},
            server_notification("notifications/cancelled", {"requestId": 2}),
            mark("push answered"),
            {"wait_response": 1},
        ],
    )
    await run_turns(script, "push answered")
    assert answered_ids(script) == [2, 1]


async def test_pushes_behind_a_waiting_request_wait_their_turn_and_count_for_back_pressure(
    tmp_path: Path,
) -> None:
    # Request 2 waits for the one worker, so the pushes behind it wait too, in wire order:
    # four waiting pause the reader (Limits.max_queued_inbound), so the mark behind them is
    # read only once the worker is released; then everything is answered in wire order.
    pushes = [{"send": push_event(n, f"e{n}")} for n in range(3, 9)]
    script = Script(
        tmp_path,
        [
            *MCPL_HANDSHAKE,
            server_request(1, "test/slow"),
            {"wait_for": {"method": "test/started"}},
            server_request(2, "test/quick"),
            *pushes,
            mark("sent"),
            {"wait_responses": list(range(1, 9))},
        ],
    )
    handlers = Turns()
    with anyio.fail_after(30):
        async with script.connect(
            handlers=handlers, limits=ONE_AT_A_TIME, grant_policy=GrantPolicy(grant_all_advertised=True)
        ) as conn:
            handlers.connection = conn
            pool = conn.connection.pool
            while pool.waiting < ONE_AT_A_TIME.max_queued_inbound:
                await anyio.lowlevel.checkpoint()
            assert not handlers.mark("sent").is_set()  # the reader paused behind the queue
            handlers.release.set()
            await script.finished(conn)
    assert answered_ids(script) == list(range(1, 9))
    got = {m["id"]: m for m in script.messages() if "method" not in m and "id" in m}
    assert all(got[n]["result"] == {"accepted": True} for n in range(3, 9))


async def test_a_push_cancelled_while_it_waits_is_never_answered(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCPL_HANDSHAKE,
            server_request(1, "test/slow"),
            {"wait_for": {"method": "test/started"}},
            server_request(2, "test/quick"),
            {"send": push_event(3)},
            server_notification("notifications/cancelled", {"requestId": 3}),
            mark("sent"),
            {"wait_responses": [1, 2]},
            server_request(4, "ping"),
            {"wait_response": 4},
        ],
    )
    await run_turns(script, "sent")
    assert answered_ids(script) == [1, 2, 4]


async def test_a_duplicate_answered_at_once_gets_the_same_result(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCPL_HANDSHAKE,
            {"send": push_event(1, "e1")},
            {"wait_response": 1, "expect_result": {"accepted": True}},
            {"send": push_event(2, "e1")},
            {"wait_response": 2, "expect_result": {"accepted": True}},
        ],
    )
    with anyio.fail_after(30):
        async with script.connect(grant_policy=GrantPolicy(grant_all_advertised=True)) as conn:
            await script.finished(conn)
            window = conn.hosted.event_dedupe
    assert len(window) == 1
    assert answered_ids(script) == [1, 2]
