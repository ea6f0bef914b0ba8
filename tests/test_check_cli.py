"""``mcpl-host check`` end to end: real fixture servers as child processes, over real pipes
(and a real WebSocket on loopback for shape 3), the command run as a subprocess.

Every run is started once, by the module fixture ``runs``, a few at a time in threads (each
is a subprocess: most of its time is spent waiting on a server's silence), and the tests
read their JSON reports, JUnit files and exit statuses. What is asserted, per fixture, is
the exact set of failed checks and of warned checks: a fixture that should fail one check
must fail it and no other.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from mcpl_host.check.registry import CHECKS
from mcpl_host.check.schemas import report_schema

from . import forkserver
from .conftest import FIXTURES
from .wire import bridge_url

CLI = [sys.executable, "-m", "mcpl_host.cli", "check"]
CHECK_FIXTURES = FIXTURES / "check"
PY = sys.executable
#: Seconds for one run (a run that hangs fails its test instead of the session).
RUN_TIMEOUT = 120
SECRET = "supersecretvalue"
#: Short windows: the fixtures push every 0.2 s (the demo every 0.3 s, set below).
FAST = ["--listen", "1", "--reduction-listen", "1"]


def fixture(name: str, *faults: str) -> list[str]:
    argv = ["--", PY, str(CHECK_FIXTURES / name)]
    for fault in faults:
        argv += ["--fault", fault]
    return argv


@dataclass
class Run:
    status: int
    stdout: str
    stderr: str
    junit: Path | None

    @property
    def doc(self) -> dict[str, Any]:
        return json.loads(self.stdout)

    def ids(self, status: str) -> set[str]:
        return {c["id"] for c in self.doc["checks"] if c["status"] == status}

    def check(self, check_id: str) -> dict[str, Any]:
        return next(c for c in self.doc["checks"] if c["id"] == check_id)


PLAIN_JSONRPC = (
    "silent-unknown-method",
    "silent-invalid-request",
    "silent-id-null",
    "stdout-noise",
    "reuse-ids",
    "crlf-unsupported",
    "big-message-crash",
)
PLAIN_LIFECYCLE = (
    "bad-discover",
    "bad-server-info",
    "bad-capabilities",
    "request-before-initialized",
    "ignore-stdin-eof",
    "ignore-sigterm",
)
PLAIN_TOOLS = (
    "bad-tool-schema",
    "pagination-loop",
    "bad-output",
    "unknown-tool-success",
    "bad-resource-read",
    "unknown-prompt-success",
)
STRICT_A = (
    "wrong-revision",
    "bad-receipt",
    "out-of-vocab-uses",
    "push-before-receipt",
    "ignore-reduction",
    "bad-incoming",
    "bad-inference",
    "bad-state",
)
STRICT_B = ("bad-push-params", "undeclared-feature-set", "uses-incomplete", "bad-register", "bad-references")
DEMO = ["--env", "DEMO_PUSH_INTERVAL=0.3"]

#: name -> (arguments, failed ids, warned ids). ``{ws}`` is the WebSocket bridge's URL.
EXPECTED: dict[str, tuple[list[str], set[str], set[str]]] = {
    "demo": ([*FAST, *DEMO], set(), set()),
    "demo-defaults": ([], set(), set()),
    "plain": ([*FAST, *fixture("plain_mcp.py")], set(), set()),
    "plain-jsonrpc": (
        [*FAST, "--secret", f"FIXTURE_BANNER={SECRET}", *fixture("plain_mcp.py", *PLAIN_JSONRPC)],
        {
            "jsonrpc.unknown-method",
            "jsonrpc.invalid-request",
            "jsonrpc.id-null",
            "jsonrpc.big-message",
            "jsonrpc.server-ids",
            "stdout.only-json",
        },
        # silent to every unknown method, server/discover included: a host waits its window
        {"jsonrpc.crlf", "init.discover"},
    ),
    "plain-lifecycle": (
        [*FAST, "--shutdown-timeout", "1", *fixture("plain_mcp.py", *PLAIN_LIFECYCLE)],
        {"init.discover", "init.server-info", "init.capabilities", "init.before-initialized", "shutdown.stdin-close", "shutdown.sigterm"},
        set(),
    ),
    "plain-tools": (
        [*FAST, *fixture("plain_mcp.py", *PLAIN_TOOLS)],
        {
            "tools.list.schema",
            "tools.list.pagination",
            "tools.call.output-schema",
            "tools.call.unknown-tool",
            "resources.read.listed",
            "prompts.get.unknown-prompt",
        },
        set(),
    ),
    "shape4": ([*FAST, *fixture("shape4_strict_05.py")], set(), set()),
    "shape4-a": (
        [*FAST, *fixture("shape4_strict_05.py", *STRICT_A)],
        {
            "mcpl.revision.digest",
            "mcpl.policy.receipt.shape",
            "mcpl.uses.vocabulary",
            "mcpl.pre-policy.quiet",
            "mcpl.reduction.respected",
            "channels.incoming.params",
            "inference.params",
            "state.update.params",
        },
        set(),
    ),
    "shape4-b": (
        [*FAST, *fixture("shape4_strict_05.py", *STRICT_B)],
        {"push.params", "push.featureset-declared", "mcpl.uses.complete", "channels.register.shape"},
        {"references.fields"},
    ),
    "shape4-dead": (
        [*FAST, *fixture("shape4_strict_05.py", "die-on-itemized")],
        {"channels.register.itemized", "tools.list.schema", "tools.call.unknown-tool"},
        set(),
    ),
    "shape1": (
        [*FAST, *fixture("shape1_04_notification_only.py")],
        {"mcpl.policy.request-form", "mcpl.pre-policy.quiet", "mcpl.uses.complete"},
        {"mcpl.version", "mcpl.advertisement.shape"},
    ),
    "shape2": ([*FAST, *fixture("shape2_04_request_form.py")], {"stdout.only-json"}, {"mcpl.version"}),
    "shape3": (
        [*FAST, *fixture("shape3_says_05_acts_04.py")],
        {"mcpl.pre-policy.quiet", "mcpl.policy.request-form", "mcpl.uses.vocabulary", "tools.list.schema", "tools.call.unknown-tool"},
        set(),
    ),
    "demo-http": ([*FAST, "--url", "{http}"], set(), set()),
    # The MCP Python SDK 2.x serves both eras on stdio: its DiscoverResult passes init.discover.
    # It leaves a request with a non-string method or "id": null unanswered (JSON-RPC 2.0 §5
    # asks for an error answer), as mcp-server-time, built on it, does.
    # Through a config entry whose probe window outlasts the SDK's start-up on a loaded
    # machine: init.discover judges the answer, not how fast Python imports the SDK.
    "sdk-both-eras": (
        ["--config", "{sdk-config}", "--server", "sdk"],
        {"jsonrpc.invalid-request", "jsonrpc.id-null"},
        {"tools.call.unknown-tool", "prompts.get.unknown-prompt"},
    ),
    "shape3-ws": (
        [*FAST, "--ws", "{ws}"],
        {"mcpl.pre-policy.quiet", "mcpl.policy.request-form", "mcpl.uses.vocabulary", "tools.list.schema", "tools.call.unknown-tool"},
        set(),
    ),
}  # fmt: skip
#: Runs of real servers: they must run to the end with a report that validates.
REAL: dict[str, list[str]] = {"mcp-server-time": ["--", PY, "-m", "mcp_server_time"]}
if os.environ.get("MCPL_TEST_SERVER_EVERYTHING"):
    REAL["server-everything"] = ["--", os.environ["MCPL_TEST_SERVER_EVERYTHING"], "stdio"]


@contextlib.contextmanager
def _bridge(program: str, server: list[str], scheme: str) -> Iterator[str]:
    """A bridge fixture (``ws_bridge.py``, ``http_bridge.py``) serving ``server`` (a new
    child per session); its URL. It exits at the end of its stdin, its children stopped."""
    with bridge_url([PY, str(FIXTURES / program), "--", *server], scheme) as url:
        yield url


@pytest.fixture(scope="module")
def ws_bridge() -> Iterator[str]:
    """Shape 3 over WebSocket (one message per frame)."""
    with _bridge("ws_bridge.py", [PY, str(CHECK_FIXTURES / "shape3_says_05_acts_04.py")], "ws") as url:
        yield url


@pytest.fixture(scope="module")
def http_bridge() -> Iterator[str]:
    """The demo server over Streamable HTTP."""
    with _bridge("http_bridge.py", [PY, str(FIXTURES / "demo_server.py")], "http") as url:
        yield f"{url}mcp"


def _run(args: list[str], junit: Path | None = None, json_output: bool = True) -> Run:
    argv = [*CLI, *(["--json"] if json_output else []), *(["--junit", str(junit)] if junit else []), *args]
    done = forkserver.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    return Run(done.returncode, done.stdout, done.stderr, junit)


@pytest.fixture(scope="module")
def runs(ws_bridge: str, http_bridge: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """Every run of ``EXPECTED`` and ``REAL``, four at a time."""
    folder = tmp_path_factory.mktemp("check")
    sdk_config = folder / "sdk.json"
    sdk_entry = {
        "command": PY,
        "args": [str(FIXTURES / "sdk_features_server.py"), "stdio"],
        "limits": {"discoverTimeoutSeconds": 30, "handshakeTimeoutSeconds": 60},
    }
    sdk_config.write_text(json.dumps({"mcpServers": {"sdk": sdk_entry}}), encoding="utf-8")
    urls = {"{ws}": ws_bridge, "{http}": http_bridge, "{sdk-config}": str(sdk_config)}
    jobs = {name: [urls.get(a, a) for a in args] for name, (args, _, _) in EXPECTED.items()}
    jobs.update(REAL)
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {name: pool.submit(_run, args, folder / f"{name}.xml") for name, args in jobs.items()}
        return {name: future.result() for name, future in futures.items()}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_fixture_fails_exactly_what_it_should(runs: dict[str, Run], name: str) -> None:
    run = runs[name]
    assert "Traceback" not in run.stderr, run.stderr
    _, failed, warned = EXPECTED[name]
    reasons = {c["id"]: c["reason"] for c in run.doc["checks"] if c["status"] in ("failed", "warned")}
    assert run.ids("failed") == failed, reasons
    assert run.ids("warned") == warned, reasons
    assert run.status == (1 if failed else 0)
    assert run.doc["ok"] is (not failed) and run.doc["exitStatus"] == run.status
    assert [c["id"] for c in run.doc["checks"]] == [spec.id for spec in CHECKS]


@pytest.mark.parametrize("name", [*EXPECTED, *REAL])
def test_json_report_validates_against_the_shipped_schema(runs: dict[str, Run], name: str) -> None:
    jsonschema.Draft202012Validator.check_schema(report_schema())
    jsonschema.Draft202012Validator(report_schema()).validate(runs[name].doc)


def test_the_schema_refuses_a_report_that_breaks_it(runs: dict[str, Run]) -> None:
    doc = runs["plain-tools"].doc
    doc["checks"][0]["status"] = "fine"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(report_schema()).validate(doc)


def test_every_failure_and_warning_says_why_where_and_shows_evidence(runs: dict[str, Run]) -> None:
    for name in ("plain-jsonrpc", "plain-tools", "shape4-a", "shape1"):
        for check in runs[name].doc["checks"]:
            if check["status"] in ("failed", "warned"):
                assert check["reason"] and check["spec"], check
    evidence = runs["shape4-a"].check("mcpl.reduction.respected")["evidence"]
    assert len(evidence) == 1 and '"method":"push/event"' in evidence[0]
    only_json = runs["plain-jsonrpc"].check("stdout.only-json")
    assert only_json["evidence"] and "starting up" in only_json["evidence"][0]


def test_mcpl_deviations_say_what_strict_and_04_hosts_do(runs: dict[str, Run]) -> None:
    shape1 = runs["shape1"]
    request_form = shape1.check("mcpl.policy.request-form")
    assert request_form["compat"]["hostedBy04Profile"] is True
    assert "MCP-only" in request_form["compat"]["strict"]
    assert "notification" in request_form["compat"]["profile04"]
    assert "-32601" in request_form["reason"]
    assert shape1.check("mcpl.pre-policy.quiet")["compat"]["hostedBy04Profile"] is True
    reduction = runs["shape4-a"].check("mcpl.reduction.respected")
    assert reduction["compat"]["hostedBy04Profile"] is False
    # a passing MCPL check, and every MCP check, carry no compatibility note
    assert runs["shape4"].check("mcpl.policy.request-form")["compat"] is None
    assert runs["plain-tools"].check("tools.list.schema")["compat"] is None
    # the featureSets shape is named
    assert "array" in shape1.check("mcpl.advertisement.shape")["reason"]
    assert shape1.doc["server"]["mcpl"] == {
        "version": "0.4",
        "featureSetsShape": "array",
        "state": "mcp-only",
    }


def test_shape3_says_what_went_wrong_in_one_chain(runs: dict[str, Run]) -> None:
    for name in ("shape3", "shape3-ws"):
        reason = runs[name].check("mcpl.policy.request-form")["reason"]
        assert "after the host refused its channels/register (-32002" in reason, reason
        assert "went unanswered, and so did a ping" in reason
    ws = runs["shape3-ws"].doc
    assert ws["target"]["transport"] == "websocket"
    assert runs["demo-http"].doc["target"]["transport"] == "http"
    assert runs["demo-http"].check("jsonrpc.invalid-request")["status"] == "skipped"
    for check_id in ("stdout.only-json", "jsonrpc.crlf", "shutdown.stdin-close", "shutdown.sigterm"):
        assert runs["shape3-ws"].check(check_id)["status"] == "skipped"


def test_a_secret_never_reaches_the_reports(runs: dict[str, Run]) -> None:
    run = runs["plain-jsonrpc"]
    assert SECRET not in run.stdout and SECRET not in run.stderr
    assert run.junit is not None and SECRET not in run.junit.read_text(encoding="utf-8")
    assert "[redacted]" in run.check("stdout.only-json")["evidence"][0]


def test_real_servers_run_to_the_end(runs: dict[str, Run]) -> None:
    for name in REAL:
        run = runs[name]
        assert run.status in (0, 1), run.stderr
        assert "Traceback" not in run.stderr
        statuses = {c["id"]: c["status"] for c in run.doc["checks"]}
        assert statuses["init.answers"] == "passed" and statuses["shutdown.stdin-close"] == "passed"
        # The MCPL checks do not apply to a plain MCP server, but references.fields does: the
        # host reads MCP's resource_link blocks as references too (docs/protocol.md B1).
        assert all(
            statuses[s.id] == "skipped"
            for s in CHECKS
            if s.category == "mcpl" and s.id != "references.fields"
        )
        assert statuses["references.fields"] in ("passed", "warned", "skipped")


# --- JUnit ------------------------------------------------------------------------------------


def _junit(run: Run) -> ET.Element:
    assert run.junit is not None
    root = ET.parse(run.junit).getroot()
    assert root.tag == "testsuites"
    return root


@pytest.mark.parametrize("name", ["plain-tools", "shape1", "demo"])
def test_junit_has_the_required_structure(runs: dict[str, Run], name: str) -> None:
    run = runs[name]
    root = _junit(run)
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == list(run.doc["categories"])
    cases = 0
    for suite in suites:
        for attribute in (
            "name",
            "tests",
            "failures",
            "errors",
            "skipped",
            "time",
            "timestamp",
            "hostname",
            "id",
            "package",
        ):
            assert suite.get(attribute) is not None, attribute
        members = suite.findall("testcase")
        assert int(suite.get("tests", "-1")) == len(members)
        assert int(suite.get("failures", "-1")) == sum(1 for c in members if c.find("failure") is not None)
        assert int(suite.get("skipped", "-1")) == sum(1 for c in members if c.find("skipped") is not None)
        assert suite.find("properties") is not None and suite.find("system-out") is not None
        for case in members:
            assert case.get("name") and case.get("classname") == f"mcpl-host.check.{suite.get('name')}"
            float(case.get("time", "x"))
            failure = case.find("failure")
            if failure is not None:
                assert failure.get("message") and failure.get("type") and failure.text
        cases += len(members)
    assert cases == len(run.doc["checks"]) == int(root.get("tests", "-1"))
    failed = {c.get("name") for c in root.iter("testcase") if c.find("failure") is not None}
    assert failed == run.ids("failed")


def test_junit_carries_warnings_in_system_out(runs: dict[str, Run]) -> None:
    root = _junit(runs["shape1"])
    mcpl = next(s for s in root.findall("testsuite") if s.get("name") == "mcpl")
    out = mcpl.findtext("system-out") or ""
    assert "warning: mcpl.version" in out and "warning: mcpl.advertisement.shape" in out


# --- expected failures, selection, exit statuses ------------------------------------------------


def test_expected_failures_make_the_run_pass(tmp_path: Path) -> None:
    listed = tmp_path / "known.txt"
    listed.write_text(
        "# known problems of this server\ntools.list.schema\ntools.call.unknown-tool  # the SDK's\n\n"
        "tools.list.pagination\ntools.call.output-schema\n",
        encoding="utf-8",
    )
    only = ["--only", "tools.list.*", "--only", "tools.call.*"]  # the four listed (not tools.class)
    args = [*only, "--expected-failures", str(listed), *fixture("plain_mcp.py", *PLAIN_TOOLS)]
    run = _run(args, tmp_path / "report.xml")
    assert run.status == 0, run.doc["summary"]
    assert run.doc["ok"] is True and run.doc["summary"]["expectedFailures"] == 4
    assert all(c["expectedFailure"] for c in run.doc["checks"] if c["status"] == "failed")
    root = _junit(run)
    assert not list(root.iter("failure"))
    assert all((c.find("skipped") is not None) for c in root.iter("testcase"))


def test_a_failure_not_listed_still_fails_the_run(tmp_path: Path) -> None:
    listed = tmp_path / "known.txt"
    listed.write_text("tools.list.schema\n", encoding="utf-8")
    run = _run(
        ["--only", "tools", "--expected-failures", str(listed), *fixture("plain_mcp.py", *PLAIN_TOOLS)]
    )
    assert run.status == 1
    assert run.check("tools.list.schema")["expectedFailure"] is True
    assert run.check("tools.list.pagination")["expectedFailure"] is False


def test_a_stale_expected_failure_fails_the_run(tmp_path: Path) -> None:
    listed = tmp_path / "known.txt"
    # tools.list.schema passes on the conformant server; mcpl.version is skipped (plain MCP)
    # and resources.* is not selected: neither of those two is stale.
    listed.write_text("tools.list.schema\nmcpl.version\nresources.read.listed\n", encoding="utf-8")
    args = ["--only", "tools", "--only", "mcpl.version", "--expected-failures", str(listed)]
    run = _run([*args, *fixture("plain_mcp.py")], tmp_path / "report.xml")
    assert run.status == 1
    stale = {c["id"] for c in run.doc["checks"] if c["staleExpectedFailure"]}
    assert stale == {"tools.list.schema"}
    assert run.doc["summary"]["staleExpectedFailures"] == 1
    failures = [c for c in _junit(run).iter("testcase") if c.find("failure") is not None]
    assert [c.get("name") for c in failures] == ["tools.list.schema"]
    failure = failures[0].find("failure")
    assert failure is not None and failure.get("type") == "StaleExpectedFailure"


def test_only_and_skip_select_by_id_or_category_glob(tmp_path: Path) -> None:
    run = _run(["--only", "jsonrpc", "--only", "init.*", "--skip", "jsonrpc.big-*", *fixture("plain_mcp.py")])
    ids = {c["id"] for c in run.doc["checks"]}
    assert ids == {s.id for s in CHECKS if s.category == "jsonrpc" or s.id.startswith("init.")} - {
        "jsonrpc.big-message"
    }
    assert run.status == 0


@pytest.mark.parametrize(
    "args",
    [
        ["--only", "no.such.check"],
        ["--skip", "*"],
        ["--ws", "ws://127.0.0.1:1/", "--url", "http://127.0.0.1:1/"],
        ["--token", "x", "--", PY, "server.py"],
        ["--call", "now={not json", "--", PY, "server.py"],
        ["--config", "servers.json"],
    ],
)
def test_usage_errors_exit_2_and_start_nothing(args: list[str]) -> None:
    run = _run(args, json_output=False)
    assert run.status == 2, run.stderr
    assert "Error" in run.stderr and run.stdout == ""


def test_an_unknown_id_in_the_expected_failures_file_is_a_usage_error(tmp_path: Path) -> None:
    listed = tmp_path / "known.txt"
    listed.write_text("tools.list.schema\ntools.lsit.pagination\n", encoding="utf-8")
    run = _run(["--expected-failures", str(listed), *fixture("plain_mcp.py")], json_output=False)
    assert run.status == 2
    assert "line 2" in run.stderr and "tools.lsit.pagination" in run.stderr


def test_terminal_summary_shows_failures_first_and_counts(tmp_path: Path) -> None:
    run = _run(
        ["--only", "tools", "--only", "prompts", *fixture("plain_mcp.py", *PLAIN_TOOLS)], json_output=False
    )
    assert run.status == 1
    out = run.stdout
    assert out.index("Failures (5)") < out.index("category") < out.index("Result: failed (5 failed)")
    assert "tools.list.pagination" in out and "spec: MCP 2025-11-25 Utilities, Pagination" in out
    for row in ("tools           1       4       0        0", "prompts         2       1       0        0"):
        assert row.split() in [line.split() for line in out.splitlines()]


def test_list_names_every_check() -> None:
    done = forkserver.run([*CLI, "--list"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0
    assert [line.split()[0] for line in done.stdout.splitlines()] == [spec.id for spec in CHECKS]


def test_a_config_entry_is_checked_with_its_settings(tmp_path: Path) -> None:
    config = tmp_path / "servers.json"
    plain = {"command": PY, "args": [str(CHECK_FIXTURES / "plain_mcp.py"), "--fault", "unknown-tool-success"]}
    config.write_text(json.dumps({"mcpServers": {"plain": plain}}), encoding="utf-8")
    run = _run(["--only", "tools", "--config", str(config), "--server", "plain"])
    assert run.status == 1
    assert run.ids("failed") == {"tools.call.unknown-tool"}
    assert run.doc["target"] == {"shown": f"{config} server plain", "transport": "stdio"}


def test_a_flooding_server_is_checked_within_the_bounds() -> None:
    # The probes come after the flood: their answers lie past the bound of kept lines.
    run = _run(
        [
            "--only",
            "lifecycle",
            "--only",
            "tools",
            "--only",
            "jsonrpc",
            *fixture("plain_mcp.py", "flood"),
        ]
    )
    assert run.status == 0, {c["id"]: c["reason"] for c in run.doc["checks"] if c["status"] != "passed"}
    # 25,000 lines in each session: each keeps only up to Limits.max_check_messages
    assert "more lines were past the bound of kept lines" in run.check("stdout.only-json")["reason"]


def test_sigterm_mid_check_closes_the_server_and_exits_130() -> None:
    # No pushes: the listen window (30 s) is where the signal lands. The server's stderr
    # line "initialized" (logged at debug) says the session is up.
    args = [
        "--listen",
        "30",
        "--log-level",
        "debug",
        "--env",
        "MCPL_FX_PUSHES=0",
        *fixture("shape4_strict_05.py"),
    ]
    check = subprocess.Popen(
        [*CLI, "--json", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert check.stderr is not None
        for line in check.stderr:
            if "[strict-05] initialized" in line:
                break
        check.send_signal(signal.SIGTERM)
        stdout, stderr = check.communicate(timeout=30)
    finally:
        if check.poll() is None:
            check.kill()
            check.wait()
    assert check.returncode == 130
    assert "interrupted by SIGTERM; every server was closed" in stderr
    assert stdout == ""


def test_init_discover_tells_the_eras_apart(runs: dict[str, Run]) -> None:
    both = runs["sdk-both-eras"].check("init.discover")
    assert both["status"] == "passed" and both["reason"].startswith("a DiscoverResult: the server speaks")
    # The probe has a session of its own: a server of both eras that kept to the stateless
    # one there still gets its raw handshake-era session.
    assert runs["sdk-both-eras"].check("jsonrpc.ping")["status"] == "passed"
    demo = runs["demo"].check("init.discover")
    assert demo["status"] == "passed" and demo["reason"].startswith("answered error -32601: a handshake-era")
    silent = runs["plain-jsonrpc"].check("init.discover")
    assert silent["status"] == "warned" and "Limits.discover_timeout_seconds" in silent["reason"]
    ws = runs["shape3-ws"].check("init.discover")
    assert ws["status"] == "skipped"
