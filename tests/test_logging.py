"""log_value(), Redactor, ServerValue and LogBudget (docs/protocol.md L1-L3, R6)."""

from __future__ import annotations

import io
import json
import unicodedata

import structlog
from hypothesis import given
from hypothesis import strategies as st

from mcpl_host.logging import (
    CUT_MARKER,
    REDACTED,
    LogBudget,
    Redactor,
    ServerValue,
    configure_logging,
    get_logger,
    log_value,
)
from mcpl_host.report import safe_text


def test_l1_escapes_newlines_quotes_and_controls() -> None:
    text = log_value('line1\nline2\r"quoted"\\ \x00\x1b[31m\u2028')
    assert "\n" not in text and "\r" not in text and '"' not in text.replace('\\"', "")
    assert "\\n" in text and '\\"' in text and "\\u0000" in text and "\\u001b" in text
    assert "\\u2028" in text


@given(st.text())
def test_l1_output_is_one_safe_line_for_any_text(value: str) -> None:
    text = log_value(value)
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in text)
    assert "\u2028" not in text and "\u2029" not in text
    text.encode("utf-8")  # never a lone surrogate


def test_l1_cut_at_256_utf16_units_with_a_marker() -> None:
    assert log_value("a" * 256) == "a" * 256
    cut = log_value("a" * 300)
    assert cut == "a" * 256 + CUT_MARKER
    # An astral character is two UTF-16 units and is never split.
    cut = log_value("a" * 255 + "\U0001f642" + "b")
    assert cut == "a" * 255 + CUT_MARKER


def test_l1_non_strings_render_as_json() -> None:
    assert log_value({"a": [1, None]}) == '{\\"a\\":[1,null]}'
    assert log_value(b"bytes\xff") == "bytes\ufffd"


def test_l2_redactor_replaces_secrets_of_four_or_more_characters() -> None:
    redactor = Redactor(["s3cr3t-token", "abc", 'pa"ss'])
    assert redactor.redact("auth s3cr3t-token ok abc") == f"auth {REDACTED} ok abc"
    # A secret inside a JSON-rendered value (escaped form) is caught too.
    assert "pa" not in log_value({"k": 'pa"ss'}, redactor).replace("k", "")


def test_l2_redaction_runs_before_the_cut_so_no_half_secret_shows() -> None:
    secret = "SECRETVALUE123"
    text = log_value("x" * 250 + secret, Redactor([secret]))
    assert "SECRET" not in text


def test_server_value_renders_safely_everywhere() -> None:
    value = ServerValue("evil\nline token123", Redactor(["token123"]))
    assert str(value) == repr(value) == value.__structlog__() == f"evil\\nline {REDACTED}"


def test_configured_json_logging_renders_server_values_escaped() -> None:
    stream = io.StringIO()
    configure_logging("debug", json_lines=True, stream=stream)
    try:
        get_logger().warning("server said", line=ServerValue('x"\ny', Redactor()))
    finally:
        structlog.reset_defaults()
    (line,) = stream.getvalue().splitlines()
    record = json.loads(line)
    assert record["line"] == 'x\\"\\ny'
    assert record["level"] == "warning"


def test_r6_budget_logs_n_then_one_summary_then_quiet() -> None:
    budget = LogBudget(3)
    assert [budget.take() for _ in range(6)] == ["log", "log", "log", "last", "quiet", "quiet"]
    assert budget.count == 6


# --- one escaper for log lines and the report ------------------------------------------------------

INVISIBLE = "a\u202eb\u202ac\u2066d\u2069e\u200bf\u200fg\ufeffh\u2028i\u2029j\u2060k\U000e0041l\xadm\u061cn"
INVISIBLE_ESCAPED = (
    "a\\u202eb\\u202ac\\u2066d\\u2069e\\u200bf\\u200fg\\ufeffh\\u2028i\\u2029j\\u2060k\\U000e0041l"
    "\\u00adm\\u061cn"
)


def _rendered_line(value: ServerValue, *, json_lines: bool = False) -> str:
    stream = io.StringIO()
    configure_logging("debug", json_lines=json_lines, stream=stream)
    try:
        get_logger().warning("server said", line=value)
    finally:
        structlog.reset_defaults()
    (line,) = stream.getvalue().splitlines()
    return line


def test_bidi_and_invisible_characters_are_escaped_alike_in_a_log_line_and_the_report() -> None:
    line = _rendered_line(ServerValue(INVISIBLE))
    assert f"line={INVISIBLE_ESCAPED}" in line
    assert safe_text(INVISIBLE) == INVISIBLE_ESCAPED
    assert json.loads(_rendered_line(ServerValue(INVISIBLE), json_lines=True))["line"] == INVISIBLE_ESCAPED
    for char in INVISIBLE:
        if not char.isalpha() or ord(char) > 0x7F:
            assert char not in line


def test_every_control_format_and_separator_character_is_escaped_by_both() -> None:
    unsafe = [
        chr(code)
        for code in range(0x110000)
        if unicodedata.category(chr(code)) in ("Cc", "Cf", "Zl", "Zp", "Cs")
    ]
    text = "".join(unsafe)
    shown_log = log_value(text, max_units=10 * len(text))
    shown_report = safe_text(text, max_chars=len(text), newlines=True)
    assert [c for c in shown_log if c in unsafe] == []
    assert [c for c in shown_report if c in unsafe and c != "\n"] == []
    shown_log.encode("utf-8")
    shown_report.encode("utf-8")


def test_the_report_keeps_quotes_and_log_lines_escape_them() -> None:
    text = 'say "hi" \\ ok\tend'
    assert safe_text(text) == 'say "hi" \\ ok\\tend'
    assert log_value(text) == 'say \\"hi\\" \\\\ ok\\tend'


def test_well_known_secret_shapes_are_masked_in_rendered_log_lines_without_configuration() -> None:
    token = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    for json_lines in (False, True):
        line = _rendered_line(
            ServerValue(f"token {token} and Bearer abcdefgh.ijklmnop"), json_lines=json_lines
        )
        assert token not in line and "abcdefgh" not in line and REDACTED in line
    assert token not in log_value({"nested": [f"x {token}"]})


def test_a_shape_straddling_the_cut_is_hidden_and_a_huge_value_is_cut() -> None:
    token = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    assert "ghp_A1" not in log_value("x" * 249 + " " + token)
    huge = log_value("y" * 10_000_000 + token)
    assert huge == "y" * 256 + CUT_MARKER
