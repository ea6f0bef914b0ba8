"""The pure parts of a connection's opening, by plain calls: what a handshake timeout says
arrived instead of the answer (``handshake.Noise``; docs/protocol.md H4, D2), and the era
line's phrases for a lost transport and a refused probe (``opening``; S3, S3a). The
opening at work, over real pipes, is tested in test_handshake.py, test_era_probe.py and
test_handshake_deadline.py."""

from __future__ import annotations

from mcpl_host.handshake import Noise, id_text
from mcpl_host.jsonrpc.envelope import Response
from mcpl_host.jsonrpc.errors import ConnectionLost, RemoteError
from mcpl_host.jsonrpc.session import DroppedLine, LookAlikeResponse, PendingRequest
from mcpl_host.logging import Redactor
from mcpl_host.opening import discover_refusal, lost_phrase


def test_nothing_came_instead() -> None:
    assert Noise().described() == ""


def test_dropped_lines_are_counted_and_the_first_is_shown_redacted() -> None:
    noise = Noise()
    noise.dropped = 3
    noise.first_dropped = DroppedLine("not JSON", b"token=S3CRET-VALUE-123 hello")
    said = noise.described(Redactor(["S3CRET-VALUE-123"]))
    assert said.startswith("; 3 lines on its output could not be read as JSON-RPC; the first (not JSON): ")
    assert "S3CRET-VALUE-123" not in said
    noise.dropped = 1
    assert "; 1 line on its output" in noise.described()


def test_a_look_alike_id_of_initialize_is_named_with_its_type() -> None:
    noise = Noise()
    response = Response("1", {}, None, False, False)
    noise.look_alike = LookAlikeResponse(response, PendingRequest(1, "initialize"), None)
    assert noise.described() == (
        '; an answer arrived with the id \\"1\\", which only looks like the id 1 of initialize'
        " (JSON-RPC 2.0 §5: the same value and type)"
    )
    # One that resembles another request is not what a handshake timeout is about.
    noise.look_alike = LookAlikeResponse(response, PendingRequest(1, "tools/list"), None)
    assert noise.described() == ""


def test_an_id_reads_as_in_json() -> None:
    assert id_text("1") == '"1"'
    assert id_text(1) == 1
    assert id_text(None) is None


def test_a_lost_transport_is_said_without_server_text() -> None:
    assert lost_phrase(ConnectionLost("gone", exit_status=3)) == "the server exited with status 3"
    assert lost_phrase(ConnectionLost("gone")) == "the server closed its output"


def test_a_refused_probe_is_said_by_its_code_or_its_http_status() -> None:
    assert discover_refusal(RemoteError(-32601, "no")) == "refused with error -32601"
    http = RemoteError(-32600, "x", {"fromHost": True, "httpStatus": 404})
    assert discover_refusal(http) == "HTTP 404 without a JSON-RPC answer"
    ended = RemoteError(-32600, "x", {"fromHost": True})
    assert discover_refusal(ended) == "its HTTP answer ended without a JSON-RPC answer"
