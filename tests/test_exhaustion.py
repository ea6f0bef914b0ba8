"""Resource exhaustion from one server: every piece of server-controlled work that is not
O(message size) has a bound in ``Limits``, and a server that hits one gets a refusal naming
it (or the call fails naming it), never a frozen event loop or a host that grows without end
(docs/protocol.md, "State", "Channels", "Manifest changes"). Memory and time figures of the
same cases against default limits: ``scripts/exhaustion.py``."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpl_host import GrantPolicy, Limits, RequestContext
from mcpl_host.mcpl.state import FeatureSetStateStore, StateProblem

from . import forkserver
from .wire import FAST, FIXTURES, Script, TestHandlers, mcpl_handshake, mcpl_result, server_request

pytestmark = pytest.mark.anyio

MANIFEST = {
    "version": "0.5",
    "pushEvents": True,
    "channels": {"register": True, "incoming": True},
    "featureSets": {
        "demo": {"description": "d", "uses": ["pushEvents"]},
        "other": {"description": "o", "uses": ["pushEvents"]},
        "chat": {"description": "c", "uses": ["channels.register", "channels.incoming"]},
    },
}
ALL = GrantPolicy(grant_all_advertised=True)


def handshake(manifest: Any = MANIFEST) -> list[dict[str, Any]]:
    return mcpl_handshake(mcpl_result(manifest))


call = server_request


def answers(script: Script) -> dict[Any, dict[str, Any]]:
    """The host's answers to the server's requests, by id."""
    return {m["id"]: m for m in script.messages() if "method" not in m and "id" in m}


def rendered(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def limits(**changes: Any) -> Limits:
    return dataclasses.replace(FAST, **changes)


def update(request_id: Any, checkpoint: str, feature_set: str = "demo", **body: Any) -> list[dict[str, Any]]:
    """A ``state/update`` and the wait for its answer (requests are served concurrently)."""
    params = {"featureSet": feature_set, "checkpoint": checkpoint, **body}
    return [call(request_id, "state/update", params), {"wait_response": request_id}]


#: The patch of the report: under 1 KB, each operation copies the whole document into itself.
DOUBLING = [{"op": "copy", "from": "", "path": f"/d{n}"} for n in range(30)]


# --- CPU on the event loop: state/update patches ------------------------------------------------


async def test_a_patch_that_doubles_the_document_is_refused_before_it_grows(
    tmp_path: Path, rendered_logs: io.StringIO
) -> None:
    # A 1 KiB document, doubled 30 times, would be 1 TiB; the bound is 64 KiB.
    script = Script(
        tmp_path,
        [
            *handshake(),
            *update(1, "c1", data={"seed": "x" * 1000}),
            *update(2, "c2", parent="c1", patch=DOUBLING),
            call(3, "state/get", {"featureSet": "demo"}),
            {"wait_response": 3},
        ],
    )
    with anyio.fail_after(30):
        async with script.connect(
            grant_policy=ALL, limits=limits(max_state_bytes=64 * 1024, max_patch_seconds=60.0)
        ) as conn:
            await script.finished(conn)
            store = conn.hosted.state_store
            assert isinstance(store, FeatureSetStateStore)
            assert store.total_bytes < 64 * 1024
    got = answers(script)
    assert got[1]["result"] == {"accepted": True}
    assert got[2]["result"] == {"accepted": False, "reason": "limit_exceeded", "limit": "maxStateBytes"}
    assert got[3]["result"] == {"checkpoint": "c1", "data": {"seed": "x" * 1000}}  # unchanged
    (line,) = [e for e in rendered(rendered_logs) if e["event"] == "state/update refused: over a bound"]
    assert line["level"] == "warning" and line["limit"] == "max_state_bytes"
    # 1 KiB doubles to 64 KiB at the 6th copy: the 7th (operation 6) is refused, unapplied.
    assert "after patch operation 6 " in line["problem"] and "max_state_bytes = 65536" in line["problem"]


async def test_the_doubling_patch_is_refused_with_default_limits(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *handshake(),
            *update(1, "c1", data={"seed": "x" * 1000}),
            *update(2, "c2", parent="c1", patch=DOUBLING),
        ],
    )
    with anyio.fail_after(30):
        async with script.connect(grant_policy=ALL) as conn:
            await script.finished(conn)
    assert answers(script)[2]["result"] == {
        "accepted": False,
        "reason": "limit_exceeded",
        "limit": "maxStateBytes",
    }


async def test_patch_operation_count_and_time_are_bounded(tmp_path: Path, rendered_logs: io.StringIO) -> None:
    add = [{"op": "add", "path": f"/k{n}", "value": n} for n in range(11)]
    script = Script(
        tmp_path,
        [
            *handshake(),
            *update(1, "c1", data={}),
            *update(2, "c2", parent="c1", patch=add),  # 11 operations, the bound is 10
            *update(3, "c3", parent="c1", patch=add[:10]),
        ],
    )
    with anyio.fail_after(30):
        async with script.connect(grant_policy=ALL, limits=limits(max_patch_operations=10)) as conn:
            await script.finished(conn)
    got = answers(script)
    assert got[2]["result"] == {"accepted": False, "reason": "limit_exceeded", "limit": "maxPatchOperations"}
    assert got[3]["result"] == {"accepted": True}
    # A bound on time: no operation takes less than a nanosecond.
    script = Script(
        tmp_path,
        [
            *handshake(),
            *update(1, "c1", data={}),
            *update(2, "c2", parent="c1", patch=add),
        ],
        name="slow",
    )
    with anyio.fail_after(30):
        async with script.connect(grant_policy=ALL, limits=limits(max_patch_seconds=1e-9)) as conn:
            await script.finished(conn)
    assert answers(script)[2]["result"] == {
        "accepted": False,
        "reason": "limit_exceeded",
        "limit": "maxPatchSeconds",
    }
    problems = [
        e["problem"] for e in rendered(rendered_logs) if e["event"] == "state/update refused: over a bound"
    ]
    assert (
        problems[0]
        == "the patch has 11 operations, over Limits.max_patch_operations = 10 (maxPatchOperations)"
    )
    assert problems[1].startswith("the patch took longer than Limits.max_patch_seconds = 1e-09 s")


async def test_state_documents_and_the_total_per_server_are_bounded(tmp_path: Path) -> None:
    # Documents of about 3 KB: two fit in the 9 KB total, later ones push out the oldest;
    # one over the 4 KB per-document bound is refused, and so is one that cannot fit beside
    # the current documents of the other feature sets.
    def doc(n: int, size: int = 3000) -> dict[str, Any]:
        return {"n": n, "pad": "x" * size}

    steps = [*handshake()]
    for n in range(8):
        steps.extend(update(n, f"c{n}", data=doc(n), parent=f"c{n - 1}" if n else None))
    steps += [
        *update(10, "big", data=doc(10, 5000)),
        *update(11, "o1", feature_set="other", data=doc(11)),
        *update(12, "k1", feature_set="chat", data=doc(12, 3900)),  # 3 + 3 + 3.9 KB > 9 KB
        *update(13, "k2", feature_set="chat", data=doc(13, 2800)),  # 3 + 3 + 2.8 KB fit
        call(14, "state/get", {"featureSet": "demo"}),
        {"wait_response": 14},
    ]
    script = Script(tmp_path, steps)
    bounds = limits(max_state_bytes=4000, max_total_state_bytes=9000)
    with anyio.fail_after(30):
        async with script.connect(grant_policy=ALL, limits=bounds) as conn:
            await script.finished(conn)
            store = conn.hosted.state_store
            assert isinstance(store, FeatureSetStateStore)
            assert store.total_bytes <= 9000
            assert store.get("demo", "c0") is None  # made room for the later ones
            assert store.get("demo", "c7") is not None
    got = answers(script)
    assert all(got[n]["result"] == {"accepted": True} for n in range(8))
    assert got[10]["result"] == {"accepted": False, "reason": "limit_exceeded", "limit": "maxStateBytes"}
    assert got[11]["result"] == {"accepted": True}
    assert got[12]["result"] == {"accepted": False, "reason": "limit_exceeded", "limit": "maxTotalStateBytes"}
    assert got[13]["result"] == {"accepted": True}
    assert got[14]["result"] == {"checkpoint": "c7", "data": doc(7)}


async def test_repeated_large_updates_keep_the_store_within_its_bound(tmp_path: Path) -> None:
    steps = [*handshake()]
    for n in range(40):
        steps.extend(update(n, f"c{n}", data={"pad": "y" * 20_000, "n": n}))
    script = Script(tmp_path, steps)
    bounds = limits(max_state_bytes=32 * 1024, max_total_state_bytes=100_000)
    sizes: list[int] = []
    with anyio.fail_after(30):
        async with script.connect(grant_policy=ALL, limits=bounds) as conn:
            await script.finished(conn)
            store = conn.hosted.state_store
            assert isinstance(store, FeatureSetStateStore)
            sizes.append(store.total_bytes)
            current = store.current("demo")
    assert all(m["result"] == {"accepted": True} for m in answers(script).values())
    assert sizes[0] <= 100_000
    assert current is not None and current.checkpoint == "c39"


async def test_a_tool_result_patch_over_the_bound_keeps_a_reference(
    tmp_path: Path, rendered_logs: io.StringIO
) -> None:
    script = Script(
        tmp_path,
        [
            *handshake(),
            {"expect": {"method": "tools/call"}},
            {"reply": {"content": [], "state": {"checkpoint": "t1", "data": {"seed": "z" * 1000}}}},
            {"expect": {"method": "tools/call"}},
            {"reply": {"content": [], "state": {"checkpoint": "t2", "parent": "t1", "patch": DOUBLING}}},
            {"expect": {"method": "tools/call"}},
            {"reply": {"content": []}},
        ],
    )
    with anyio.fail_after(30):
        async with script.connect(grant_policy=ALL, limits=limits(max_state_bytes=16 * 1024)) as conn:
            for _ in range(3):
                await conn.state.call_tool_with_state("t", {}, feature_set="demo")
            held = conn.hosted.state_store.current("demo")
    assert held is not None and held.checkpoint == "t2" and not held.has_data
    calls = [m for m in script.messages() if m.get("method") == "tools/call"]
    assert calls[1]["params"]["state"] == {"seed": "z" * 1000}
    assert calls[2]["params"]["checkpoint"] == "t2" and "state" not in calls[2]["params"]
    (line,) = [e for e in rendered(rendered_logs) if e["event"] == "tool result state not fully applied"]
    assert line["level"] == "warning" and line["limit"] == "max_state_bytes"


# --- pure parts of the state bounds --------------------------------------------------------------


def test_the_patch_deadline_is_checked_after_each_operation() -> None:
    ticks = iter(range(100))
    store = FeatureSetStateStore(Limits(max_patch_seconds=2.5), clock=lambda: float(next(ticks)))
    assert store.apply("f", {"checkpoint": "a", "data": []}) is None
    patch = [{"op": "add", "path": "/-", "value": n} for n in range(5)]
    # The clock reads 0 at the start, then 1, 2, 3 after each operation: the third is over.
    problem = store.apply(
        "f", {"checkpoint": "b", "parent": "a", "patch": patch}, keep_reference_on_problem=False
    )
    assert isinstance(problem, StateProblem) and problem.limit == "max_patch_seconds"
    assert "by operation 2" in problem.detail
    current = store.current("f")
    assert current is not None and current.checkpoint == "a" and current.data == []


def test_a_patch_is_measured_as_it_goes_shrinking_included() -> None:
    store = FeatureSetStateStore(Limits(max_state_bytes=2000))
    assert store.apply("f", {"checkpoint": "a", "data": {"big": "x" * 1500}}) is None
    # Replacing the big value by another as big fits; so does removing it and adding another.
    swap = [
        {"op": "replace", "path": "/big", "value": "y" * 1500},
        {"op": "remove", "path": "/big"},
        {"op": "add", "path": "/new", "value": "z" * 1500},
        {"op": "test", "path": "/new", "value": "z" * 1500},
        {"op": "move", "from": "/new", "path": "/moved"},
    ]
    assert store.apply("f", {"checkpoint": "b", "parent": "a", "patch": swap}) is None
    current = store.current("f")
    assert current is not None and current.data == {"moved": "z" * 1500}
    grow = [{"op": "copy", "from": "/moved", "path": "/again"}]
    problem = store.apply("f", {"checkpoint": "c", "parent": "b", "patch": grow})
    assert isinstance(problem, StateProblem) and problem.reason == "limit_exceeded"


def test_only_rfc_6902_operations_and_sane_pointers_are_applied() -> None:
    store = FeatureSetStateStore()
    assert store.apply("f", {"checkpoint": "a", "data": {"s": "x"}}) is None
    for patch in (
        [{"op": "append", "path": "/s", "value": "y"}],  # the library's own, not RFC 6902
        [{"op": "add", "path": "/a" * 300, "value": 1}],
        [{"op": "copy", "from": "/nope", "path": "/b"}],
        ["not an operation"],
    ):
        problem = store.apply(
            "f", {"checkpoint": "b", "parent": "a", "patch": patch}, keep_reference_on_problem=False
        )
        assert isinstance(problem, StateProblem) and problem.reason == "not_applied", patch
    current = store.current("f")
    assert current is not None and current.checkpoint == "a"


def test_held_data_is_a_fresh_copy_at_each_reading() -> None:
    store = FeatureSetStateStore()
    data = {"list": [1, 2]}
    assert store.apply("f", {"checkpoint": "a", "data": data}) is None
    data["list"].append(3)
    first = store.request_params("f")["state"]
    first["list"].append(4)
    assert store.request_params("f") == {"state": {"list": [1, 2]}}


def test_the_default_limits_hold_for_a_normal_state() -> None:
    store = FeatureSetStateStore()
    assert store.apply("f", {"checkpoint": "a", "data": {"items": list(range(1000))}}) is None
    patch = [{"op": "replace", "path": f"/items/{n}", "value": -n} for n in range(500)]
    assert store.apply("f", {"checkpoint": "b", "parent": "a", "patch": patch}) is None
    current = store.current("f")
    assert current is not None and current.data["items"][499] == -499


# --- memory: lists that page on and on ---------------------------------------------------------

LISTS = [
    ("tools/list", "tools", "list_tools", lambda n: {"name": f"t{n}", "inputSchema": {}}),
    ("resources/list", "resources", "list_resources", lambda n: {"uri": f"file:///{n}", "name": f"r{n}"}),
    (
        "resources/templates/list",
        "resourceTemplates",
        "list_resource_templates",
        lambda n: {"uriTemplate": f"file:///{n}/{{x}}", "name": f"r{n}"},
    ),
    ("prompts/list", "prompts", "list_prompts", lambda n: {"name": f"p{n}"}),
]


def pages(
    method: str, key: str, entry: Any, count: int, per_page: int = 1, pad: int = 0
) -> list[dict[str, Any]]:
    """``count`` pages, each with a fresh cursor (a server that pages forever, as far as the
    host will follow it)."""
    steps: list[dict[str, Any]] = []
    for n in range(count):
        items = [{**entry(n * per_page + i), "description": "d" * pad} for i in range(per_page)]
        steps += [{"expect": {"method": method}}, {"reply": {key: items, "nextCursor": f"cursor-{n + 1}"}}]
    return steps


PLAIN = [
    {"expect": {"method": "initialize"}},
    {
        "reply": {
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}, "resources": {}, "prompts": {}},
            "serverInfo": {"name": "pager", "version": "0"},
        }
    },
    {"expect": {"method": "notifications/initialized"}},
]


@pytest.mark.parametrize(("method", "key", "call_name", "entry"), LISTS, ids=[m for m, *_ in LISTS])
async def test_a_list_that_pages_forever_fails_naming_the_bound(
    tmp_path: Path, method: str, key: str, call_name: str, entry: Any
) -> None:
    from mcpl_host.limits import LimitExceeded

    cases = [
        ("max_list_pages", limits(max_list_pages=10), pages(method, key, entry, 12)),
        ("max_list_items", limits(max_list_items=7), pages(method, key, entry, 12, per_page=3)),
        ("max_list_bytes", limits(max_list_bytes=2000), pages(method, key, entry, 12, pad=700)),
    ]
    for limit, bounds, steps in cases:
        script = Script(tmp_path, [*PLAIN, *steps, {"hang": True}], name=limit)
        with anyio.fail_after(30):
            async with script.connect(limits=bounds) as conn:
                with pytest.raises(LimitExceeded) as caught:
                    await getattr(conn.mcp, call_name)()
                assert conn.is_open  # the connection goes on
        assert caught.value.limit == limit
        assert f"over Limits.{limit} = " in str(caught.value) and str(caught.value).startswith(method)
        asked = [m for m in script.messages() if m.get("method") == method]
        expected = {"max_list_pages": 10, "max_list_items": 3, "max_list_bytes": 3}[limit]
        assert len(asked) == expected, limit  # stopped at the bound, not one page later


def test_the_probe_reports_a_list_over_its_bound_as_a_failure(tmp_path: Path) -> None:
    import sys

    steps = [*PLAIN, *pages("tools/list", "tools", LISTS[0][3], 101), {"hang": True}]
    script = tmp_path / "pager.json"
    script.write_text(json.dumps(steps))
    command = [sys.executable, str(FIXTURES / "scripted_server.py"), str(script), str(tmp_path / "rec.jsonl")]
    done = forkserver.run(
        [*forkserver.CLI, "probe", "--json", "--", *command],
        capture_output=True,
        text=True,
        timeout=60,
    )
    doc = json.loads(done.stdout)
    assert done.returncode == 1 and doc["ok"] is False, done.stderr
    assert doc["error"]["type"] == "LimitExceeded"
    assert doc["error"]["message"] == (
        "tools/list has a next page after page 100: over Limits.max_list_pages = 100"
        " (maxListPages in a config file)"
    )


# --- memory: channels, eventIds, tags ------------------------------------------------------------


def channel(channel_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": channel_id, "type": "chat", "direction": "inbound", **extra}


class Recorder(TestHandlers):
    def __init__(self) -> None:
        super().__init__()
        self.pushes: list[dict[str, Any]] = []

    async def push_event(self, context: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
        self.pushes.append(params)
        return {"accepted": True, "inferenceId": f"inference-{len(self.pushes)}"}


async def test_channels_per_server_and_descriptor_size_are_bounded(
    tmp_path: Path, rendered_logs: io.StringIO
) -> None:
    def register(request_id: int, *channels: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            call(request_id, "channels/register", {"channels": list(channels)}),
            {"wait_response": request_id},
        ]

    script = Script(
        tmp_path,
        [
            *handshake(),
            *register(1, *(channel(f"c{n}") for n in range(3))),
            *register(2, *(channel(f"d{n}") for n in range(4))),
            *register(3, channel("c0", label="replaced")),  # an id already registered: replaced
            *register(4, channel("c1", label="x" * 20_000)),  # over 16 KiB (the default)
            call(5, "channels/list"),
            {"wait_response": 5},
        ],
    )
    with anyio.fail_after(30):
        async with script.connect(grant_policy=ALL, limits=limits(max_channels=5)) as conn:
            await script.finished(conn)
            assert len(conn.hosted.channels) == 5
    got = answers(script)
    over = {"accepted": False, "reason": "limit_exceeded", "limit": "maxChannels"}
    assert got[2]["result"]["results"] == [
        {"id": "d0", "accepted": True},
        {"id": "d1", "accepted": True},
        {"id": "d2", **over},
        {"id": "d3", **over},
    ]
    assert got[3]["result"]["results"] == [{"id": "c0", "accepted": True}]
    assert got[4]["result"]["results"] == [
        {"id": "c1", "accepted": False, "reason": "limit_exceeded", "limit": "maxChannelDescriptorBytes"}
    ]
    listed = got[5]["result"]["channels"]
    assert [c["id"] for c in listed] == ["c0", "c1", "c2", "d0", "d1"] and listed[0]["label"] == "replaced"
    lines = [
        e for e in rendered(rendered_logs) if e["event"] == "channels/register: items refused over a bound"
    ]
    assert [(e["refused"], e["limits"], e["registered"]) for e in lines] == [
        (2, ["max_channels"], 5),
        (1, ["max_channel_descriptor_bytes"], 5),
    ]


async def test_many_register_calls_stop_at_the_default_bound(tmp_path: Path) -> None:
    steps = [*handshake()]
    for n in range(20):
        batch = [channel(f"ch-{n}-{i}") for i in range(60)]
        steps += [call(n, "channels/register", {"channels": batch}), {"wait_response": n}]
    script = Script(tmp_path, steps)
    with anyio.fail_after(60):
        async with script.connect(grant_policy=ALL) as conn:
            await script.finished(conn)
            registered = len(conn.hosted.channels)
    items = [item for m in answers(script).values() for item in m["result"]["results"]]
    assert registered == 1024 == sum(item["accepted"] for item in items)
    assert sum(item.get("limit") == "maxChannels" for item in items) == 20 * 60 - 1024


def push(request_id: Any, event_id: str, **extra: Any) -> dict[str, Any]:
    params = {
        "featureSet": "demo",
        "eventId": event_id,
        "timestamp": "2026-01-01T00:00:00Z",
        "payload": {"content": [{"type": "text", "text": "hi"}]},
        **extra,
    }
    return call(request_id, "push/event", params)


async def test_remembered_event_ids_stay_within_their_bound(tmp_path: Path) -> None:
    steps = [*handshake()]
    for n in range(10):
        steps += [push(n, f"e{n}"), {"wait_response": n}]
    steps += [push(10, "e9"), {"wait_response": 10}, push(11, "e0"), {"wait_response": 11}]
    script = Script(tmp_path, steps)
    handlers = Recorder()
    with anyio.fail_after(30):
        async with script.connect(
            grant_policy=ALL, handlers=handlers, limits=limits(max_remembered_event_ids=4)
        ) as conn:
            await script.finished(conn)
            remembered = len(conn.hosted.event_dedupe)
    got = answers(script)
    assert remembered == 4
    assert got[10]["result"] == got[9]["result"]  # e9 is remembered: the original answer
    # e0 was forgotten to keep the bound: handled again, as a new event.
    assert [p["eventId"] for p in handlers.pushes] == [*(f"e{n}" for n in range(10)), "e0"]


async def test_the_tags_of_one_event_are_bounded(tmp_path: Path) -> None:
    tags = ["chat:dm", *(f"t:{n}" for n in range(5000))]
    script = Script(tmp_path, [*handshake(), push(1, "e1", tags=tags), {"wait_response": 1}])
    handlers = Recorder()
    with anyio.fail_after(30):
        async with script.connect(grant_policy=ALL, handlers=handlers, limits=limits(max_tags=10)) as conn:
            await script.finished(conn)
    (event,) = handlers.pushes
    # The first ten, then what the core closure implies (MCPL §16.3).
    assert event["tags"] == [*tags[:10], "chat:addressed", "chat:private"]


# --- CPU on the event loop: hostile manifests -----------------------------------------------------


def nested(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = {"a": value}
    return value


def over_bound_manifests() -> dict[str, Any]:
    base = {"version": "0.5", "pushEvents": True}
    one = {"description": "d", "uses": ["pushEvents"]}
    return {
        "max_manifest_depth": {**base, "vendorX": nested(40)},
        "max_manifest_bytes": {**base, "vendorX": "x" * (1024 * 1024)},
        "max_feature_sets": {**base, "featureSets": {f"s{n}": one for n in range(300)}},
        "max_manifest_set_entries": {**base, "featureSets": {"s": {**one, "uses": ["pushEvents"] * 2000}}},
        "max_ontology_tags": {
            **base,
            "featureSets": {"s": {**one, "tagOntology": {"tags": {f"t:{n}": {} for n in range(2000)}}}},
        },
    }


@pytest.mark.parametrize("limit", list(over_bound_manifests()))
async def test_a_manifest_over_a_bound_is_served_as_plain_mcp(
    tmp_path: Path, rendered_logs: io.StringIO, limit: str
) -> None:
    manifest = over_bound_manifests()[limit]
    result = {
        "protocolVersion": "2025-06-18",
        "serverInfo": {"name": "s", "version": "0"},
        "capabilities": {"tools": {}, "experimental": {"mcpl": manifest}},
    }
    script = Script(
        tmp_path,
        [
            {"expect": {"method": "initialize"}},
            {"reply": result},
            {"expect": {"method": "notifications/initialized"}},
            {"expect": {"method": "ping"}},  # no featureSets/update: MCPL is not served
            {"reply": {}},
        ],
    )
    with anyio.fail_after(30):
        async with script.connect(grant_policy=ALL) as conn:
            await conn.mcp.ping()
            assert conn.mcpl_state.value == "none" and conn.grant is None
    (line,) = [
        e
        for e in rendered(rendered_logs)
        if e["event"] == "MCPL manifest over a bound; served as a plain MCP server"
    ]
    assert line["level"] == "warning" and line["limit"] == limit
    assert f"over Limits.{limit} = " in line["problem"]


async def test_a_fetched_manifest_over_a_bound_keeps_the_manifest_in_force(
    tmp_path: Path, rendered_logs: io.StringIO
) -> None:
    from mcpl_host.mcpl.manifest import manifest_digest

    hostile = over_bound_manifests()["max_feature_sets"]
    notice = {
        "jsonrpc": "2.0",
        "method": "mcpl/manifestChanged",
        "params": {"revision": manifest_digest(hostile)},
    }
    script = Script(
        tmp_path,
        [
            *handshake(),
            {"send": notice},
            {"expect": {"method": "mcpl/manifest"}},
            {"reply": hostile},
            push(1, "after"),  # pushes are still served under the manifest in force
            {"wait_response": 1},
        ],
    )
    handlers = Recorder()
    with anyio.fail_after(30):
        async with script.connect(grant_policy=ALL, handlers=handlers) as conn:
            await script.finished(conn)
            assert conn.policy.state.manifest == MANIFEST
            assert conn.grant is not None and "pushEvents" in conn.grant.paths
    assert answers(script)[1]["result"]["accepted"] is True
    (line,) = [
        e
        for e in rendered(rendered_logs)
        if e["event"] == "fetched manifest over a bound; the manifest in force is kept"
    ]
    assert line["limit"] == "max_feature_sets"
    assert not [m for m in script.messages() if m.get("method") == "featureSets/update"][1:]


def test_manifest_bounds_are_checked_in_order_and_within_bounds_pass() -> None:
    from mcpl_host.mcpl.manifest import manifest_limit_problem

    for limit, manifest in over_bound_manifests().items():
        found = manifest_limit_problem(manifest, Limits())
        assert found is not None and found[1] == limit, limit
    assert manifest_limit_problem(MANIFEST, Limits()) is None
    # The array form of featureSets is counted too; a deep manifest is refused before any walk
    # could recurse (a value nested 5,000 levels, as the iterative parser may give).
    assert manifest_limit_problem({"featureSets": [{"name": f"s{n}"} for n in range(300)]}, Limits()) == (
        "the manifest declares too many feature sets, over Limits.max_feature_sets = 256",
        "max_feature_sets",
    )
    found = manifest_limit_problem({"vendorX": nested(5000)}, Limits())
    assert found is not None and found[1] == "max_manifest_depth"
