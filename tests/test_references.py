"""Bulk content references (MCPL §19): the pure rules by plain calls, the fetcher against a
loopback origin, and the whole path through ``Host`` on the current-spec fixture server."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import ssl
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import anyio
import pytest
import trustme

from mcpl_host import Host, ServerConfig
from mcpl_host.check.rules import reference_problems
from mcpl_host.events import PushEvent
from mcpl_host.limits import Limits, limit_problem
from mcpl_host.logging import CUT_MARKER
from mcpl_host.mcpl.grants import GrantPolicy
from mcpl_host.mcpl.references import (
    REFERENCE_ID_META,
    AuthBinding,
    ContentView,
    Passed,
    Reference,
    ReferenceFields,
    ReferenceRegistry,
    UnknownReference,
    Withheld,
    display_label,
    origin_of,
    read_block,
    reference_ids,
)
from mcpl_host.secrets import Redactor
from mcpl_host.services.references import FetchPolicy, ReferenceFetcher, ReferenceFetchError
from tests import forkserver
from tests.conftest import FIXTURES
from tests.reference_origin import Origin

SERVER = FIXTURES / "current_spec" / "server.py"
WAV = b"RIFF0000WAVEpayload"
NOW = datetime(2026, 9, 1, tzinfo=timezone.utc)


def _digest(data: bytes) -> str:
    return "sha256:" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")


def _fields(block: dict[str, Any]) -> ReferenceFields:
    reading = read_block(block)
    assert isinstance(reading, Reference), reading
    return reading.fields


# --- reading (pure) ---------------------------------------------------------------------------


def test_a_resource_block_is_read_with_every_field() -> None:
    fields = _fields(
        {
            "type": "resource",
            "uri": "https://a.example/x",
            "mimeType": "audio/wav",
            "sizeBytes": 12,
            "digest": _digest(WAV),
            "expiresAt": "2026-09-07T00:00:00Z",
            "name": "x.wav",
            "disposition": "ref",
        }
    )
    assert (fields.kind, fields.size_bytes, fields.disposition, fields.dropped) == ("resource", 12, "ref", ())
    assert not fields.expired(NOW) and fields.expired(datetime(2026, 9, 8, tzinfo=timezone.utc))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("sizeBytes", -1),
        ("sizeBytes", 3.5),
        ("sizeBytes", 2**53),
        ("sizeBytes", True),
        ("mimeType", "a" * 256),
        ("name", 7),
        ("expiresAt", "a" * 65),
        ("digest", "sha256:short"),
        ("disposition", "inline-ok"),
    ],
)
def test_an_invalid_optional_field_is_dropped_and_never_keeps_the_block_from_its_disposition(
    field: str, value: Any
) -> None:
    block = {"type": "resource", "uri": "https://a.example/x", "disposition": "never", field: value}
    if field == "disposition":
        del block["disposition"]
        block[field] = value
    fields = _fields(block)
    assert fields.dropped == (field,)
    if field != "disposition":
        assert fields.disposition == "never"


def test_a_float_with_no_fraction_is_an_integer_size() -> None:
    assert _fields({"type": "resource", "uri": "u", "sizeBytes": 12.0}).size_bytes == 12


def test_an_unparseable_expiry_is_already_expired() -> None:
    assert _fields({"type": "resource", "uri": "u", "expiresAt": "not-a-date"}).expired(NOW)
    assert _fields({"type": "resource", "uri": "u", "expiresAt": "2026-09-02T00:00:00"}).expired(NOW) is False


@pytest.mark.parametrize(
    "block",
    [
        {"type": "image", "data": "AAAA", "mimeType": "image/png", "disposition": "never"},
        {"type": "audio", "data": "AAAA", "mimeType": "audio/wav", "disposition": "ref"},
        {"type": "image", "data": "AAAA", "uri": "https://a.example/x", "mimeType": "image/png"},
        {"type": "resource", "resource": {"uri": "x", "blob": "AAAA"}, "disposition": "never"},
        {"type": "resource", "uri": "a" * 4097},
        {"type": "resource", "uri": 7},
        "not a block",
    ],
)
def test_blocks_that_fail_closed_are_withheld(block: Any) -> None:
    assert isinstance(read_block(block), Withheld)
    view = ContentView(ReferenceRegistry()).model_content([block], "tool t")
    assert view[0]["text"].startswith("[content withheld:") and "AAAA" not in str(view)


def test_text_and_plain_inline_blocks_pass_as_sent() -> None:
    for block in ({"type": "text", "text": "hi"}, {"type": "image", "data": "AAAA", "mimeType": "image/png"}):
        assert read_block(block) == Passed(block)


def test_an_mcp_resource_link_is_a_reference_with_no_disposition() -> None:
    fields = _fields(
        {
            "type": "resource_link",
            "uri": "https://a.example/x",
            "name": "x",
            "size": 5,
            "disposition": "never",
        }
    )
    assert (fields.kind, fields.size_bytes, fields.name, fields.disposition) == (
        "resource_link",
        5,
        "x",
        None,
    )


def test_the_stub_is_bounded_clean_and_never_shows_the_uri() -> None:
    registry = ReferenceRegistry()
    block = {
        "type": "resource",
        "uri": "https://a.example/x?sig=secret",
        "name": "bad\u202e\u0000" + "n" * 200,
        "mimeType": "audio/wav",
        "sizeBytes": 4233704,
    }
    view = ContentView(registry, label_chars=20).model_content(
        [{"type": "text", "text": "t"}, block], "tool r\u0007"
    )
    assert view[0] == {"type": "text", "text": "t"}
    stub = view[1]
    assert (
        stub["text"].startswith("[reference ref_")
        and "secret" not in stub["text"]
        and "a.example" not in stub["text"]
    )
    assert "\u202e" not in stub["text"] and "\u0007" not in stub["text"]
    assert (
        f'name "badnnnnnnnnnnnnnnnnn{CUT_MARKER}"' in stub["text"]
        and "size 4233704 bytes (claimed)" in stub["text"]
    )
    assert len(stub["text"]) < 200
    assert reference_ids(view) == [stub["_meta"][REFERENCE_ID_META]]
    assert registry.lookup(reference_ids(view)[0]).fields.uri == block["uri"]


def test_the_servers_secrets_never_reach_a_stub() -> None:
    view = ContentView(ReferenceRegistry(), redactor=Redactor(["hunter2-long-secret"])).model_content(
        [{"type": "resource", "uri": "u", "name": "key hunter2-long-secret.txt"}], "tool t"
    )
    assert "hunter2" not in view[0]["text"] and 'name "key ' in view[0]["text"]


def test_display_label_removes_controls_and_marks_the_cut() -> None:
    assert display_label("a\u0000b\u2066c") == "abc"
    assert display_label("x" * 10, 4) == "xxxx" + CUT_MARKER


def test_registry_ids_are_never_reused_and_evicted_ids_are_unknown() -> None:
    registry = ReferenceRegistry(max_records=2)
    fields = ReferenceFields("resource", "u")
    first, second, third = (registry.register(fields, "p", AuthBinding()) for _ in range(3))
    assert len({first.id, second.id, third.id}) == 3 and len(registry) == 2
    with pytest.raises(UnknownReference, match="unknown reference"):
        registry.lookup(first.id)
    assert registry.lookup(third.id) is third
    assert ReferenceRegistry().register(fields, "p", AuthBinding()).id != first.id  # another prefix


def test_the_binding_never_shows_its_credential() -> None:
    binding = AuthBinding("https://a.example", {"Authorization": "Bearer s3cr3t"})
    assert "s3cr3t" not in repr(binding) and "s3cr3t" not in repr(
        ReferenceRegistry().register(ReferenceFields("resource", "u"), "p", binding)
    )


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("https://A.example:443/x", "https://a.example"),
        ("wss://a.example:8443/mcp?token=t", "https://a.example:8443"),
        ("ws://127.0.0.1:80/", "http://127.0.0.1"),
        ("http://[::1]:8080/", "http://[::1]:8080"),
        ("file:///etc/passwd", None),
        ("http://a.example:99999/", None),
    ],
)
def test_origin_of(url: str, origin: str | None) -> None:
    assert origin_of(url) == origin


def test_reference_limits_are_checked_like_every_other() -> None:
    assert limit_problem("max_reference_redirects", 0) is None
    assert limit_problem("max_reference_records", 0) is not None


def test_the_check_rule_names_each_problem_with_its_section() -> None:
    problems = reference_problems(
        "push/event payload.content",
        [
            {"type": "text", "text": "ok"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png", "disposition": "never"},
            {"type": "resource", "uri": "https://a.example/x", "sizeBytes": -1},
        ],
    )
    assert len(problems) == 2
    assert problems[0].startswith(
        "push/event payload.content[1]: an inline image block claimed a disposition"
    )
    assert "[2]: invalid sizeBytes" in problems[1] and "MCPL §19.8" in problems[1]
    assert reference_problems("x", [{"type": "resource", "uri": "https://a.example/x", "sizeBytes": 3}]) == []


# --- the fetcher against a loopback origin ----------------------------------------------------

CASES: dict[str, dict[str, Any]] = {
    "plain": {"response": {"bodyBase64": base64.b64encode(WAV).decode()}},
    "bomb": {"response": {"bodyBase64": base64.b64encode(b"\0" * 4_000_000).decode(), "gzip": True}},
}
pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def origin() -> Iterator[Origin]:
    served = Origin(CASES)
    yield served
    served.close()


def _record(registry: ReferenceRegistry, uri: str, binding: AuthBinding | None = None, **extra: Any) -> str:
    fields = _fields({"type": "resource", "uri": uri, **extra})
    return registry.register(fields, "test", binding or AuthBinding()).id


async def test_the_default_policy_dials_only_https_at_the_dialed_origin(origin: Origin) -> None:
    registry = ReferenceRegistry()
    plain = _record(registry, f"{origin.url}/case/plain/payload", AuthBinding(origin.url))
    with pytest.raises(ReferenceFetchError) as refused:
        await ReferenceFetcher(registry).fetch(plain)
    assert refused.value.reason == "scheme" and origin.count("plain") == 0
    elsewhere = _record(registry, "https://elsewhere.example/x")
    with pytest.raises(ReferenceFetchError) as refused:
        await ReferenceFetcher(registry, FetchPolicy(schemes=("https",))).fetch(elsewhere)
    assert refused.value.reason == "origin"


async def test_the_dialed_origin_gets_the_credential_and_the_payload_is_stored_by_id(
    origin: Origin, tmp_path: Path
) -> None:
    origin.reset("plain")
    registry = ReferenceRegistry()
    binding = AuthBinding(origin.url, {"Authorization": "Bearer fixture-secret"})
    ref = _record(
        registry, f"{origin.url}/case/plain/payload", binding, name="../../evil", digest=_digest(WAV)
    )
    policy = FetchPolicy(schemes=("http",), store_dir=str(tmp_path))
    payload = await ReferenceFetcher(registry, policy).fetch(ref)
    assert payload.data == WAV and payload.digest_verified is True and payload.media_type == "audio/wav"
    assert payload.storage_name == f"{ref}.wav" and payload.path == str(tmp_path / f"{ref}.wav")
    assert (tmp_path / f"{ref}.wav").read_bytes() == WAV and [p.name for p in tmp_path.iterdir()] == [
        f"{ref}.wav"
    ]
    assert origin.requests["plain"][-1]["Authorization"] == "Bearer fixture-secret"
    verified = registry.lookup(ref).verified
    assert verified is not None and (verified.size, verified.digest_verified) == (len(WAV), True)


async def test_the_default_policy_fetches_https_from_the_dialed_origin_with_its_credential() -> None:
    authority = trustme.CA()
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(server_tls)
    client_tls = ssl.create_default_context()
    authority.configure_trust(client_tls)
    served = Origin(CASES, tls=server_tls)
    try:
        registry = ReferenceRegistry()
        binding = AuthBinding(origin_of(served.url), {"Authorization": "Bearer fixture-secret"})
        ref = _record(registry, f"{served.url}/case/plain/payload", binding)
        payload = await ReferenceFetcher(registry, FetchPolicy(ssl_context=client_tls)).fetch(ref)
        assert (
            payload.data == WAV and served.requests["plain"][-1]["Authorization"] == "Bearer fixture-secret"
        )
    finally:
        served.close()


async def test_a_gzip_bomb_stops_at_the_ceiling_of_decoded_bytes(origin: Origin) -> None:
    registry = ReferenceRegistry()
    ref = _record(registry, f"{origin.url}/case/bomb/payload")
    policy = FetchPolicy(schemes=("http",), origins=(origin.url,))
    with pytest.raises(ReferenceFetchError) as refused:
        await ReferenceFetcher(registry, policy, Limits(max_reference_bytes=100_000)).fetch(ref)
    assert refused.value.reason == "too_large"
    assert len(gzip.compress(b"\0" * 4_000_000)) < 100_000  # the wire bytes alone would pass


async def test_expired_unknown_and_failing_references(origin: Origin) -> None:
    registry = ReferenceRegistry()
    policy = FetchPolicy(schemes=("http",), origins=(origin.url,))
    fetcher = ReferenceFetcher(registry, policy)
    expired = _record(registry, f"{origin.url}/case/plain/payload", expiresAt="2000-01-01T00:00:00Z")
    missing = _record(registry, f"{origin.url}/case/missing/payload")
    for ref, reason in ((expired, "expired"), (missing, "status")):
        with pytest.raises(ReferenceFetchError) as refused:
            await fetcher.fetch(ref)
        assert refused.value.reason == reason and origin.url not in str(refused.value)
    with pytest.raises(UnknownReference):
        await fetcher.fetch("ref_none")


# --- end to end through Host ------------------------------------------------------------------


async def test_host_gives_the_application_stubs_and_fetches_on_request_only(
    origin: Origin, tmp_path: Path
) -> None:
    origin.reset("plain")
    uri = f"{origin.url}/case/plain/payload?signature=fixture-secret"
    block = {"type": "resource", "uri": uri, "name": "chord.wav", "mimeType": "audio/wav", "sizeBytes": 19}
    blocks = [{"type": "text", "text": "rendered"}, {**block, "disposition": "never"}]
    config = ServerConfig(
        name="refs",
        command=sys.executable,
        args=(str(SERVER),),
        grant_policy=GrantPolicy(grant_all_advertised=True),
    )
    with anyio.fail_after(20):
        async with Host({"refs": config}) as host:
            pushes = host.subscribe(kinds=["push_event"])
            await host.wait_ready(timeout=10)
            conn = await host.server("refs").connected()
            result = await conn.mcp.call_tool("ref_result", {"blocks": blocks})
            assert result.content == blocks and result.model_content is not None
            assert result.model_content[0] == blocks[0] and "fixture-secret" not in str(result.model_content)
            assert "from tool ref_result" in result.model_content[1]["text"]
            async with anyio.create_task_group() as group:
                group.start_soon(conn.mcp.call_tool, "ref_push", {"blocks": blocks})
                event = await pushes.__anext__()
            assert isinstance(event, PushEvent) and event.model_content is not None
            assert event.params["payload"]["content"] == blocks and "modelContent" not in event.params
            assert "push event of refs.events" in event.model_content[1]["text"]
            assert event.to_json()["modelContent"] == event.model_content
            assert origin.count("plain") == 0  # nothing fetched on receipt
            registry = host.server("refs").hosted.references
            (ref,) = reference_ids(result.model_content)
            policy = FetchPolicy(schemes=("http",), origins=(origin.url,), store_dir=str(tmp_path))
            payload = await ReferenceFetcher(registry, policy, host.server("refs").hosted.limits).fetch(ref)
            assert payload.data == WAV and origin.count("plain") == 1
            assert payload.path is not None and Path(payload.path).name == f"{ref}.wav"


def test_probe_shows_the_demo_servers_reference_as_a_stub() -> None:
    command = [
        *forkserver.CLI,
        "probe",
        "--json",
        "--env",
        "DEMO_PUSH_COUNT=1",
        "--listen",
        "1",
    ]
    done = forkserver.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    (push,) = [event for event in json.loads(done.stdout)["events"] if event.get("method") == "push/event"]
    assert "not-for-models" in json.dumps(push["params"])  # the application keeps the raw block
    stub = push["modelContent"][1]["text"]
    assert stub.startswith("[reference ref_") and 'name "tick-1.wav"' in stub and "not-for-models" not in stub
