"""The MCPL bulk-reference vectors (SPEC §19, RFC-005 §11), run against the real host.

``tests/vectors/mcpl-spec/bulk-reference-vectors.json`` (43 cases) and
``bulk-reference-legacy-schema.json`` are byte-for-byte copies (tests/vectors/README.md);
``content-block-schema.json`` is SPEC App. B.1 as printed. Per case:

- each expanded block is validated against App. B.1 (jsonschema) and compared with
  ``schemaValid``; case 7 also against the legacy schema (``legacySchemaValid``);
- ``render``: the original blocks reach the host from the fixture server
  (fixtures/current_spec/references.py) on every lane of §19.4: a tool result, a
  ``push/event``, a ``channels/incoming`` message, an injection. The application's record
  keeps the raw blocks; the model-visible form (``model_content``) is checked: stub or none,
  ``hidden`` strings absent, ``includes`` present, bounded, labels free of control and bidi
  characters, the invalid fields dropped. No request reaches the loopback origin on receipt;
- ``fetch``: the same, then ``services.references.ReferenceFetcher`` against a loopback
  HTTP origin serving the case's fixture (body, gzip, stream, redirect to a second origin):
  the outcome, requests made, bytes, digest, observed type, storage name, the aborted stream,
  the credential never reaching the second origin;
- ``registry``: ids never reused, an evicted and an unknown id answer "unknown reference".

The host's display profile: labels cut at ``Limits.reference_label_chars`` (120), marked with
``CUT_MARKER``; a stub never shows the URI (docs/protocol.md, "Bulk content references").
"""

from __future__ import annotations

import base64
import json
import re
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import orjson
import pytest

from mcpl_host import ServerConfig, connect
from mcpl_host.client_features import RequestContext
from mcpl_host.handlers import HostHandlers
from mcpl_host.limits import Limits
from mcpl_host.logging import CUT_MARKER, UNSAFE_CHARACTERS
from mcpl_host.mcpl.grants import GrantPolicy
from mcpl_host.mcpl.references import AuthBinding, UnknownReference, reference_ids
from mcpl_host.server_connection import ServerConnection
from mcpl_host.services.references import FetchPolicy, ReferenceFetcher, ReferenceFetchError
from tests.conftest import FIXTURES
from tests.reference_origin import Origin, expand

HERE = Path(__file__).resolve().parent / "vectors" / "mcpl-spec"
VECTOR_FILE = "bulk-reference-vectors.json"
FILE = json.loads((HERE / VECTOR_FILE).read_text(encoding="utf-8"))
CASES: list[dict[str, Any]] = FILE["cases"]
TOKEN: str = FILE["fixtures"]["token"]
#: App. B.1 as printed, with the rule its prose adds (docs/protocol.md, B19-schema): "the
#: existing oneOf still rejects a block carrying both data and uri" (with a disposition, the
#: printed branches leave only the uri one, so the printed schema alone accepts it).
SCHEMA = {
    "allOf": [
        json.loads((HERE / "content-block-schema.json").read_text(encoding="utf-8")),
        {
            "if": {"properties": {"type": {"enum": ["image", "audio"]}}},
            "then": {"not": {"required": ["data", "uri"]}},
        },
    ]
}
LEGACY_SCHEMA = json.loads((HERE / "bulk-reference-legacy-schema.json").read_text(encoding="utf-8"))["schema"]
SERVER = FIXTURES / "current_spec" / "server.py"
LABEL_CHARS = Limits().reference_label_chars
#: The most characters one lane's model-visible form of a case may hold (every case has at
#: most two blocks; a stub is at most three labels plus its frame).
MAX_VIEW_CHARS = 2 * (3 * (LABEL_CHARS + len(CUT_MARKER)) + 200)
UNSAFE = re.compile(f"[{UNSAFE_CHARACTERS}]")
LANES = ("tool", "push", "incoming", "injection")
pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# --- the loopback origins -----------------------------------------------------------------


@pytest.fixture(scope="module")
def origins() -> Iterator[tuple[Origin, Origin]]:
    cases = {case["id"]: case for case in CASES}
    second = Origin(cases)
    first = Origin(cases, redirect_to=second)
    yield first, second
    first.close()
    second.close()


# --- the host -------------------------------------------------------------------------------


class Recorder(HostHandlers):
    """The application: keeps what each lane delivered."""

    def __init__(self) -> None:
        super().__init__()
        self.pushes: list[dict[str, Any]] = []
        self.messages: list[dict[str, Any]] = []
        self.registered = anyio.Event()

    async def push_event(self, context: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
        self.pushes.append(params)
        return {"accepted": True}

    async def channel_message(self, context: RequestContext, message: dict[str, Any]) -> str | None:
        self.messages.append(message)
        return None

    def on_channels_changed(self, server: str, channels: list[dict[str, Any]]) -> None:
        if channels:
            self.registered.set()


class Session:
    def __init__(self, conn: ServerConnection, recorder: Recorder) -> None:
        self.conn = conn
        self.recorder = recorder
        self.turn = 0

    async def lanes(self, blocks: list[Any]) -> dict[str, tuple[list[Any], list[dict[str, Any]]]]:
        """Per lane: (the raw blocks the application got, the model-visible form)."""
        conn, recorder = self.conn, self.recorder
        found: dict[str, tuple[list[Any], list[dict[str, Any]]]] = {}
        result = await conn.mcp.call_tool("ref_result", {"blocks": blocks})
        assert result.model_content is not None
        found["tool"] = (result.content, result.model_content)
        await conn.mcp.call_tool("ref_push", {"blocks": blocks})
        push = recorder.pushes[-1]
        found["push"] = (push["payload"]["content"], push["modelContent"])
        await conn.mcp.call_tool("ref_incoming", {"blocks": blocks})
        message = recorder.messages[-1]
        found["incoming"] = (message["content"], message["modelContent"])
        await conn.mcp.call_tool("ref_inject", {"blocks": blocks})
        self.turn += 1
        answer = await conn.hooks.before_inference(
            inference_id=f"inf-{self.turn}",
            conversation_id="c1",
            turn_index=self.turn,
            user_message="hi",
            model={"id": "m", "vendor": "v", "contextWindow": 1000, "capabilities": []},
        )
        assert answer is not None and answer.outcome == "ok", answer
        injection = answer.injections[0]
        assert injection.model_content is not None
        found["injection"] = (list(injection.content), list(injection.model_content))
        return found


@pytest.fixture(scope="module")
async def session(anyio_backend: str) -> AsyncIterator[Session]:
    recorder = Recorder()
    config = ServerConfig(
        command=sys.executable,
        args=(str(SERVER),),
        grant_policy=GrantPolicy(grant_all_advertised=True, grant=("contextHooks.beforeInference.inject.*",)),
    )
    async with connect(config, handlers=recorder) as conn:
        with anyio.fail_after(10):
            await recorder.registered.wait()
        yield Session(conn, recorder)


# --- the checks -----------------------------------------------------------------------------


def view_checks(
    case: dict[str, Any], view: list[dict[str, Any]], expect: dict[str, Any], origin: str
) -> None:
    """The model-visible expectations of one lane at one stage."""
    text = orjson.dumps(view).decode()
    for hidden in expect.get("hidden", []):
        shown = expand(hidden, origin, case["id"])
        assert shown not in text, f"{shown[:60]!r} reached the model-visible form"
    ids = reference_ids(view)
    if "stub" in expect:
        assert bool(ids) is expect["stub"], view
    for included in expect.get("includes", []):
        assert included in text
    assert len(text) <= MAX_VIEW_CHARS, f"model-visible form of {len(text)} characters"
    for block in view:
        if isinstance(block.get("text"), str) and reference_ids([block]):
            assert not UNSAFE.search(block["text"]), "a control or bidi character in a stub"


async def render_checks(session: Session, case: dict[str, Any], origin: Origin) -> dict[str, list[str]]:
    """Every lane's checks; returns each lane's reference ids."""
    blocks = expand(case["blocks"], origin.url, case["id"])
    expect = case["expect"]
    lanes = await session.lanes(blocks)
    registry = session.conn.hosted.references
    ids: dict[str, list[str]] = {}
    for lane, (raw, view) in lanes.items():
        assert raw == blocks, f"{lane}: the application lost the raw blocks"
        view_checks(case, view, {**expect, **expect.get("before", {})}, origin.url)
        ids[lane] = reference_ids(view)
        for ref in ids[lane]:
            record = registry.lookup(ref)
            for missing in expect.get("missingFields", []):
                assert missing in record.fields.dropped
                attribute = {"sizeBytes": "size_bytes", "mimeType": "mime_type", "expiresAt": "expires_at"}
                assert getattr(record.fields, attribute.get(missing, missing)) is None
            if case["id"].startswith("08-push-size-9007199254740991"):
                assert record.fields.size_bytes == 2**53 - 1
        if expect.get("kind") == "invalid":
            assert "[content withheld" in view[0]["text"]
        field = expect.get("displayField")
        if field:
            original = blocks[0][field]
            stub = next(block["text"] for block in view if reference_ids([block]))
            over = len(original) > LABEL_CHARS
            assert (CUT_MARKER in stub) is over
            assert original[:LABEL_CHARS] in stub and original[: LABEL_CHARS + 1] not in stub
        if expect.get("cleanLabel"):
            assert not any(UNSAFE.search(block.get("text", "")) for block in view)
    all_ids = [ref for found in ids.values() for ref in found]
    assert len(all_ids) == len(set(all_ids)), "a reference id was reused"
    assert origin.count(case["id"]) == 0, "receipt made a request"
    return ids


def schema_checks(case: dict[str, Any], origin: str) -> None:
    blocks = expand(case["blocks"], origin, case["id"])
    valid = [jsonschema.Draft202012Validator(SCHEMA).is_valid(block) for block in blocks]
    assert valid == case["schemaValid"]
    if "legacySchemaValid" in case:
        legacy = [jsonschema.Draft202012Validator(LEGACY_SCHEMA).is_valid(block) for block in blocks]
        assert all(legacy) is case["legacySchemaValid"]
    if case.get("emitterConformant") is False:  # §19.6.1: schema-valid, but a credential in the uri
        assert all(valid) and case["knownEmbeddedCredential"] in blocks[0]["uri"]


async def fetch_checks(session: Session, case: dict[str, Any], origins: tuple[Origin, Origin]) -> None:
    first, second = origins
    expect = case["expect"]
    ids = await render_checks(session, case, first)
    registry = session.conn.hosted.references
    ref = ids["tool"][0]
    before = registry.lookup(ref).fields
    limits = Limits(max_reference_bytes=case.get("maxBytes", Limits().max_reference_bytes))
    fetcher = ReferenceFetcher(registry, FetchPolicy(schemes=("http",), origins=(first.url,)), limits)
    payload = None
    try:
        payload = await fetcher.fetch(ref)
    except ReferenceFetchError as exc:
        error = str(exc)
        assert first.url not in error and TOKEN not in error
        if case["id"].startswith("12-"):
            assert exc.reason == "origin"  # the redirect leaves the allowed origins: refused
    if "ok" in expect:
        assert (payload is not None) is expect["ok"]
    if "requests" in expect:
        assert first.count(case["id"]) == expect["requests"]
    if payload is not None:
        if "decodedBase64" in expect:
            assert payload.data == base64.b64decode(expect["decodedBase64"])
        if "digestVerified" in expect:
            assert payload.digest_verified is expect["digestVerified"]
        if "savedMime" in expect:
            assert payload.media_type == expect["savedMime"]
        if expect.get("storageFromId"):
            assert payload.storage_name.startswith(ref) and "/" not in payload.storage_name
            assert re.fullmatch(r"ref_[0-9a-f]+\.[a-z0-9]+", payload.storage_name)
        assert len(payload.data) <= limits.max_reference_bytes
    if expect.get("abortStream"):
        done = first.stream_done[case["id"]]
        with anyio.fail_after(10):
            await anyio.to_thread.run_sync(done.wait)
        chunks = case["response"]["stream"]["chunks"]
        assert first.stream_sent[case["id"]] < chunks, "the transfer was not aborted"
    if expect.get("unchanged"):
        assert registry.lookup(ref).fields == before and registry.lookup(ref).verified is None
    if expect.get("redirectSafe"):
        await redirect_checks(session, case, origins, ref)
    after = {**expect, **expect.get("after", {})}
    after.pop("stub", None)  # after a fetch: a stub or the verified bytes (03-verified-ref)
    result = await session.conn.mcp.call_tool(
        "ref_result", {"blocks": expand(case["blocks"], first.url, case["id"])}
    )
    assert result.model_content is not None
    view_checks(case, result.model_content, after, first.url)


async def redirect_checks(
    session: Session, case: dict[str, Any], origins: tuple[Origin, Origin], ref: str
) -> None:
    """With the second origin allowed too and the connection's credential bound to the first:
    the credential reaches the first origin only, and the hops stay bounded."""
    first, second = origins
    registry = session.conn.hosted.references
    bound = registry.register(
        registry.lookup(ref).fields,
        "redirect check",
        AuthBinding(first.url, {"Authorization": f"Bearer {TOKEN}"}),
    )
    policy = FetchPolicy(schemes=("http",), origins=(first.url, second.url))
    seen_first, seen_second = first.count(case["id"]), second.count(case["id"])
    await ReferenceFetcher(registry, policy).fetch(bound.id)
    assert first.requests[case["id"]][-1].get("Authorization") == f"Bearer {TOKEN}"
    assert second.count(case["id"]) == seen_second + 1 and first.count(case["id"]) == seen_first + 1
    assert "Authorization" not in second.requests[case["id"]][-1]
    with pytest.raises(ReferenceFetchError) as refused:
        await ReferenceFetcher(registry, policy, Limits(max_reference_redirects=0)).fetch(bound.id)
    assert refused.value.reason == "redirects"


async def registry_checks(session: Session, case: dict[str, Any], origin: Origin) -> None:
    blocks = expand(case["blocks"], origin.url, case["id"])
    registry = session.conn.hosted.references
    first = await session.conn.mcp.call_tool("ref_result", {"blocks": blocks})
    again = await session.conn.mcp.call_tool("ref_result", {"blocks": blocks})
    assert first.model_content is not None and again.model_content is not None
    (old,), (twice,) = reference_ids(first.model_content), reference_ids(again.model_content)
    assert old != twice
    many = await session.conn.mcp.call_tool("ref_many", {"count": case["registrations"], "uri": origin.url})
    assert many.model_content is not None and len(reference_ids(many.model_content)) == case["registrations"]
    late = await session.conn.mcp.call_tool("ref_result", {"blocks": blocks})
    assert late.model_content is not None
    (new,) = reference_ids(late.model_content)
    assert new not in (old, twice) and registry.lookup(new).fields.uri == blocks[0]["uri"]
    for gone in (old, twice, "ref_unknown"):
        with pytest.raises(UnknownReference):
            registry.lookup(gone)
        with pytest.raises(UnknownReference):
            await ReferenceFetcher(registry).fetch(gone)
    assert origin.count(case["id"]) == 0
    view_checks(case, late.model_content, {"hidden": case["expect"]["hidden"]}, origin.url)


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
async def test_bulk_reference_vector(
    case: dict[str, Any], session: Session, origins: tuple[Origin, Origin], record_property: Any
) -> None:
    record_property("vector_file", VECTOR_FILE)
    for origin in origins:
        origin.reset(case["id"])
    with anyio.fail_after(20):
        schema_checks(case, origins[0].url)
        if case["operation"] == "render":
            await render_checks(session, case, origins[0])
        elif case["operation"] == "fetch":
            await fetch_checks(session, case, origins)
        else:
            await registry_checks(session, case, origins[0])


def test_vector_file_is_the_published_one() -> None:
    assert FILE["format"] == "mcpl-bulk-references-1" and len(CASES) == 43
    assert {case["operation"] for case in CASES} == {"render", "fetch", "registry"}
