"""RFC-006 from the command line, over the bundled demo server with ``DEMO_COALESCING=1``:
``probe --coalesce --listen`` shows each coalesced push's outcome and what the drained inbox
gives a model; without ``--coalesce`` the demo keeps to plain pushes (it coalesces only with a
host advertising ``eventCoalescing``); ``check`` judges the ``coalesce`` members and the
``push/render`` answers (push.coalesce, push.render.answer). The demo pushes within 0.2 s
of the receipt: the listen windows are 2 s."""

from __future__ import annotations

import json
import os
from typing import Any

from . import forkserver

TIMEOUT = 60
DEMO = ["--env", "DEMO_COALESCING=1", "--env", "DEMO_PUSH_COUNT=1"]


def _run(*args: str) -> dict[str, Any]:
    done = forkserver.run([*forkserver.CLI, *args], capture_output=True, text=True, timeout=TIMEOUT)
    assert "Traceback" not in done.stderr, done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def _outcomes(doc: dict[str, Any]) -> dict[str, Any]:
    pushes = [e for e in doc["events"] if e["kind"] == "push/event"]
    return {e["params"]["eventId"]: (e["answer"].get("coalesce") or {}).get("outcome") for e in pushes}


def test_probe_coalesce_shows_outcomes_and_the_drained_inbox() -> None:
    doc = _run("probe", "--json", "--coalesce", *DEMO, "--listen", "2")
    assert _outcomes(doc) == {
        "plan-edit-1": "first",
        "plan-edit-2": "replaced",
        "battery-1": "first",
        "battery-2": "replaced",
        "note-1": "first",
        "note-1-deleted": "retracted",
        "tick-1": None,
    }
    assert [(i["eventId"], i["text"]) for i in doc["inbox"] if i["eventId"] != "tick-1"] == [
        ("plan-edit-2", "The plan was edited 2 time(s) by olena, omar."),  # rendered, no data shown
        ("battery-2", "Battery 79%"),
    ]


def test_probe_without_coalesce_sees_the_demo_keep_to_plain_pushes() -> None:
    doc = _run("probe", "--json", *DEMO, "--listen", "2")
    assert _outcomes(doc) == {"tick-1": None}
    assert "inbox" not in doc


def test_check_judges_coalesce_members_and_render_answers() -> None:
    doc = _run("check", "--json", "--only", "push.*", "--listen", "2", *DEMO)
    status = {c["id"]: (c["status"], c["spec"]) for c in doc["checks"] if c["id"].startswith("push.")}
    assert status["push.coalesce"] == ("passed", "RFC-006 §13, §3.1")
    assert status["push.render.answer"] == ("passed", "RFC-006 §5.2, §5.3")


def test_probe_coalesce_on_a_terminal_shows_outcomes_and_the_inbox() -> None:
    done = forkserver.run(
        [*forkserver.CLI, "probe", "--coalesce", *DEMO, "--listen", "2"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "battery-2: Battery 79%  → accepted (replaced)" in done.stdout
    assert "note-1-deleted: Note 1 was deleted.  → accepted (retracted)" in done.stdout
    assert "Event inbox, drained once (3 item(s) a model would read)" in done.stdout
    assert "plan-edit-2: The plan was edited 2 time(s) by olena, omar." in done.stdout
