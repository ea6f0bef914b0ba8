"""Machine-readable outputs stay valid for their format whatever a server sends: a server
whose names, descriptions and messages hold U+FFFE, ``]]>``, NUL, C0 controls, an ANSI
escape and a lone surrogate (``fixtures/check/plain_mcp.py --fault hostile-text``).

JUnit (``check --junit``) must parse with a strict XML 1.0 parser (expat) and hold only
XML 1.0 characters; every JSON document (``check --json``, ``probe --json``, ``call``) must
parse with a strict JSON parser (orjson: no lone surrogate, no NaN); the terminal report
holds no control character raw. The CLI runs as a child process over real pipes.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import orjson
import pytest

from mcpl_host import report
from mcpl_host.jsonrpc.framing import loads_line
from mcpl_host.logging import get_logger

from . import forkserver
from .conftest import FIXTURES
from .test_cli import CLI, TIMEOUT

SERVER = ["--", sys.executable, str(FIXTURES / "check" / "plain_mcp.py"), "--fault", "hostile-text"]
#: Characters outside XML 1.0's Char production (XML 1.0 §2.2).
NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
#: What a terminal must never get raw: C0 controls but newline, DEL, C1 controls.
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def run(*args: str) -> subprocess.CompletedProcess[bytes]:
    return forkserver.run([*CLI, *args], capture_output=True, timeout=TIMEOUT)


def strict_json(data: bytes) -> object:
    return orjson.loads(data)  # refuses lone surrogates (RFC 8259 §8.2) and NaN


def test_check_junit_and_json_hold_whatever_the_server_sends(tmp_path: Path) -> None:
    junit = tmp_path / "report.xml"
    done = run("check", "--json", "--junit", str(junit), "--listen", "1", "--reduction-listen", "1", *SERVER)
    assert b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")
    doc = strict_json(done.stdout)
    assert isinstance(doc, dict) and "checks" in doc
    data = junit.read_bytes()
    text = data.decode("utf-8")  # strict UTF-8: no surrogate was written
    assert NOT_XML.search(text) is None
    root = ET.fromstring(data)  # expat: well-formed XML 1.0
    assert root.tag == "testsuites"
    failures = " ".join((f.text or "") + f.get("message", "") for f in root.iter("failure"))
    assert "hostile\\ufffe]]>" in failures  # the tool with the invalid schema, its name escaped


def test_check_terminal_summary_holds_no_raw_control_characters() -> None:
    done = run("check", "--listen", "1", "--reduction-listen", "1", *SERVER)
    out = done.stdout.decode("utf-8")
    assert "Traceback" not in done.stderr.decode(errors="replace")
    assert RAW_CONTROL.search(out) is None, [m.group() for m in RAW_CONTROL.finditer(out)][:5]


def test_probe_json_and_terminal_hold_whatever_the_server_sends() -> None:
    done = run("probe", "--json", *SERVER)
    assert b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")
    doc = strict_json(done.stdout)
    assert isinstance(doc, dict)
    shown = run("probe", *SERVER)
    out = shown.stdout.decode("utf-8")
    assert RAW_CONTROL.search(out) is None, [m.group() for m in RAW_CONTROL.finditer(out)][:5]
    assert RAW_CONTROL.search(shown.stderr.decode("utf-8")) is None


def test_call_json_holds_whatever_the_server_sends() -> None:
    done = run("call", "echo", "text=hi", *SERVER)
    assert b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")
    doc = strict_json(done.stdout)
    assert isinstance(doc, dict)
    failed = run("call", "nosuch", *SERVER)  # the server's error message, in the error document
    assert RAW_CONTROL.search(failed.stderr.decode("utf-8")) is None


def test_a_json_log_line_holding_a_lone_surrogate_is_strict_json(rendered_logs: io.StringIO) -> None:
    # A field that is not a ServerValue (an exception's message naming what a server sent)
    # still reaches the JSON line renderer: it must neither raise nor write "\ud800".
    get_logger("test").warning("refused", error="Unknown tool: \ud800\ufffe\x1b[31m")
    (line,) = rendered_logs.getvalue().splitlines()
    parsed = strict_json(line.encode("utf-8"))
    assert isinstance(parsed, dict) and parsed["event"] == "refused"
    assert parsed["error"] == "Unknown tool: \\ud800\ufffe\x1b[31m"


def test_shell_output_holds_no_raw_control_characters() -> None:
    commands = "servers\ntools\ncall echo text=hi\ncall nosuch\nresources\nprompts\nprompt hello who=x\n"
    done = forkserver.run(
        [*CLI, "shell", *SERVER], input=commands.encode(), capture_output=True, timeout=TIMEOUT
    )
    out, err = done.stdout.decode("utf-8"), done.stderr.decode("utf-8")
    assert "Traceback" not in err
    assert "hi\ufffe]]>\\u0000\\u0001" in out, out  # the echo, its controls escaped
    assert RAW_CONTROL.search(out) is None, [m.group() for m in RAW_CONTROL.finditer(out)][:5]
    assert RAW_CONTROL.search(err) is None, [m.group() for m in RAW_CONTROL.finditer(err)][:5]


def test_json_documents_hold_an_infinity_beside_a_big_integer(capsys: pytest.CaptureFixture[bytes]) -> None:
    # A server's 1e400 reads as infinity (the standard library's parser, used for a line
    # with an integer beyond 64 bits); the document must still be strict JSON.
    value = loads_line(b'{"a": 1e400, "b": -1e400, "n": 18446744073709551616, "s": "\\ud800"}')
    report.print_json({"result": value})
    report.print_json_line({"result": value})
    out = capsys.readouterr().out
    document, line, end = out.rsplit("\n", 2)
    assert end == ""
    for text in (document, line):
        parsed = strict_json(text.encode())
        assert isinstance(parsed, dict)
        assert parsed["result"]["a"] is None and parsed["result"]["s"] == "\\ud800"
