"""README.md and the reference pages it links (``PAGES``: docs/cli.md, docs/library.md) as a
new user meets them: every command example of their ``sh`` blocks, and every ``python`` block
as a program, runs as written in a copy of the repository whose ``.venv`` was made by the
README's first command (once per test session).

- The README's first ``sh`` block is the set-up: its first command makes the ``.venv`` (it
  is run here, and is the fixture); its second runs this test suite, which is where we are,
  so it is not run again.
- Each example must exit 0 with no traceback. One that needs a program the machine lacks
  (``npx``, ``jq``) is skipped, naming it. A line or program shown on two pages (the
  README's everyday commands are also in docs/cli.md) runs once.
- ``text`` blocks are for shapes and placeholders: a ``mcpl-host`` line there must be a
  synopsis (``[OPTIONS]``) or name a placeholder host (``example.com``), so that nothing
  runnable escapes these tests.
- A relative link between the pages (and to docs/protocol.md, docs/architecture.md) leads
  to a file that exists and, with ``#anchor``, to a heading or ``<a id>`` there.
- The environment list in docs/cli.md is the code's (``transports.stdio.ENV_ALLOWLIST``)
  and ``--help``'s.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from mcpl_host.cli_target import passed_environment
from mcpl_host.transports.stdio import ENV_ALLOWLIST, ENV_ALLOWLIST_PREFIXES

from . import forkserver
from .test_cli import run_cli

ROOT = Path(__file__).resolve().parent.parent
#: The pages whose examples run here: the README first (its first ``sh`` block is the set-up),
#: then the reference it links.
PAGES = ("README.md", "docs/cli.md", "docs/library.md")
TEXTS = {page: (ROOT / page).read_text(encoding="utf-8") for page in PAGES}
README = TEXTS["README.md"]
#: Seconds for the set-up command (it installs from the package registry) and for one example.
SETUP_TIMEOUT = 900
EXAMPLE_TIMEOUT = 300
_FENCE = re.compile(r"^( *)```(\w*)\n(.*?)^\1```", re.S | re.M)
#: Every fenced block of every page, in page order: (page, language, body).
BLOCKS = [(page, language, body) for page in PAGES for _indent, language, body in _FENCE.findall(TEXTS[page])]


def commands(body: str) -> list[str]:
    """The command lines of an ``sh`` block (comment and blank lines left out)."""
    return [line.strip() for line in body.splitlines() if line.strip() and not line.strip().startswith("#")]


SH_BLOCKS = [commands(body) for _page, language, body in BLOCKS if language == "sh"]
SETUP, SUITE = SH_BLOCKS[0][0], SH_BLOCKS[0][1]
EXAMPLES = list(dict.fromkeys(line for block in SH_BLOCKS[1:] for line in block))
PROGRAMS = list(dict.fromkeys(body for _page, language, body in BLOCKS if language == "python"))


def program_under(heading: str) -> int:
    """The number (in ``PROGRAMS``) of the first ``python`` block after the heading (of any
    level) named ``heading``, on whichever page has it."""
    pattern = re.compile(rf"^#+ {re.escape(heading)}\n(.*?)^```python\n(.*?)^```", re.S | re.M)
    found = [match.group(2) for text in TEXTS.values() for match in pattern.finditer(text)]
    assert len(found) == 1, f"no single python block under {heading!r} in {PAGES}"
    return PROGRAMS.index(found[0])


def test_the_readme_has_what_these_tests_expect() -> None:
    assert next(page for page, language, _ in BLOCKS if language == "sh") == "README.md"
    assert SETUP.startswith("python3 -m venv .venv && .venv/bin/pip install")
    assert SUITE.endswith(".venv/bin/pytest")
    assert len(EXAMPLES) >= 15 and len(PROGRAMS) >= 2
    for page in PAGES:  # each reference page is linked from the README and has examples
        assert page == "README.md" or f"]({page})" in README, f"the README does not link {page}"
        assert any(p == page and language in ("sh", "python") for p, language, _ in BLOCKS), page
    for page, language, _ in BLOCKS:
        assert language in ("sh", "python", "text", "yaml"), f"a block without a language in {page}"


@pytest.fixture(scope="session")
def fresh_checkout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A copy of the repository's files (as git knows them) with a ``.venv`` made by the
    README's first command, as a new user would run it."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    copy = tmp_path_factory.mktemp("readme") / "mcpl-host"
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    done = subprocess.run(
        ["sh", "-c", SETUP],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=SETUP_TIMEOUT,
        stdin=subprocess.DEVNULL,
        env=user_env(),
    )
    assert done.returncode == 0, f"the README's set-up failed:\n{done.stdout}\n{done.stderr}"
    assert "mcpl-demo" in done.stdout and "Listening for 3 s" in done.stdout
    yield copy


def user_env() -> dict[str, str]:
    """This environment as a new user's shell has it: no virtual environment active (the
    one running these tests is neither on PATH nor in VIRTUAL_ENV), so that an example that
    forgets ``.venv/bin/`` fails here as it would there."""
    ours = {str(Path(sys.executable).parent), str(Path(sys.prefix) / "bin")}
    env = {key: value for key, value in os.environ.items() if key != "VIRTUAL_ENV"}
    env["PATH"] = os.pathsep.join(d for d in env.get("PATH", "").split(os.pathsep) if d not in ours)
    return env


def _needs(line: str) -> list[str]:
    return [program for program in ("npx", "jq") if re.search(rf"(^|[|;&]\s*|--\s+){program}\b", line)]


def _missing(line: str) -> list[str]:
    return [program for program in _needs(line) if shutil.which(program) is None]


#: The command of the README's examples, as a new user's shell finds it.
SCRIPT = ".venv/bin/mcpl-host"


def forkable(line: str) -> list[str] | None:
    """The arguments of an example that is the command alone (``.venv/bin/mcpl-host ARGS``,
    a trailing comment allowed), or None for a line the shell must run: one with operators,
    expansions or globs (``|``, ``;``, ``&&``, ``$``, quotes around ``$``...)."""
    if any(char in line for char in "$`*?[~{"):
        return None
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:
        return None
    if not tokens or tokens[0] != SCRIPT or any(set(token) <= set("();<>|&") for token in tokens):
        return None
    return tokens[1:]


def _run_example(checkout: Path, line: str, forks: forkserver.ForkServer) -> subprocess.CompletedProcess[str]:
    """``line`` run in the checkout: by the shell, or, for the command alone, as a fork of
    ``forks``, a server on the checkout's ``.venv`` interpreter that imported the CLI from
    it (the same packages, without an interpreter's start per example; the set-up ran the
    installed script itself)."""
    args = forkable(line)
    if args is not None:
        return forkserver.run(
            [*forkserver.CLI, *args],
            input="",
            env=user_env(),
            cwd=checkout,
            timeout=EXAMPLE_TIMEOUT,
            text=True,
            server=forks,
        )
    return subprocess.run(
        ["sh", "-c", line],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=EXAMPLE_TIMEOUT,
        stdin=subprocess.DEVNULL,
        env=user_env(),
    )


def _run_program(checkout: Path, number: int) -> subprocess.CompletedProcess[str]:
    program = checkout / f"readme_example_{number}.py"
    program.write_text(PROGRAMS[number], encoding="utf-8")
    return subprocess.run(
        [str(checkout / ".venv" / "bin" / "python"), program.name],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=EXAMPLE_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )


@dataclass
class Runs:
    """Each command example (by its line) and each ``python`` block (by its number), run once
    in the fresh checkout: what it did, or what running it raised."""

    examples: dict[str, Future[subprocess.CompletedProcess[str]]]
    programs: dict[int, Future[subprocess.CompletedProcess[str]]]


@pytest.fixture(scope="module")
def runs(fresh_checkout: Path) -> Iterator[Runs]:
    """Every example and program, started together, four at a time in threads: each is a
    child process that spends most of its time waiting on its servers (``--listen 3``,
    ``check``'s windows)."""
    forks = forkserver.ForkServer(str(fresh_checkout / ".venv" / "bin" / "python"), str(fresh_checkout))
    with ThreadPoolExecutor(max_workers=4) as pool:
        yield Runs(
            {
                line: pool.submit(_run_example, fresh_checkout, line, forks)
                for line in EXAMPLES
                if not _missing(line)
            },
            {number: pool.submit(_run_program, fresh_checkout, number) for number in range(len(PROGRAMS))},
        )
    forks.close()


@pytest.mark.parametrize("line", EXAMPLES)
def test_each_command_example_runs_as_written(runs: Runs, line: str) -> None:
    missing = _missing(line)
    if missing:
        pytest.skip(f"needs {', '.join(missing)}, which this machine lacks")
    done = runs.examples[line].result()
    assert done.returncode == 0, f"{line}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    assert "Traceback" not in done.stdout + done.stderr and done.stdout.strip()


@pytest.mark.parametrize("number", range(len(PROGRAMS)))
def test_each_python_block_is_a_program_that_runs(runs: Runs, number: int) -> None:
    done = runs.programs[number].result()
    assert done.returncode == 0, f"{PROGRAMS[number]}\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr and done.stdout.strip()


def test_the_framework_example_does_what_it_says(runs: Runs) -> None:
    """The program under "For framework authors" (docs/library.md), run above as written in
    the fresh checkout, prints what the page says it prints."""
    done = runs.programs[program_under("For framework authors")].result()
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    # A tool's classes and their source (RFC-008 §5): the server's _meta, or none (unclassed).
    assert lines[:5] == [
        "tool echo: classes ['body'] from server",
        "tool add: classes ['shell'] from server",
        "tool now: classes [] from none",
        "tool note: classes ['notes'] from server",
        "tool unnote: classes ['notes'] from server",
    ]
    assert lines[5] == "turn 0: 'hello', system context from ['memory']"
    # One model request per drain of the inbox: the two ticks, in order, in one or two
    # requests (how many a drain holds depends on when it is made).
    reply = lines.index("reply in thread 'ticks': delivered")  # echoed (RFC-011 §5)
    turns = [line for line in lines[6:reply] if line.startswith("turn ")]
    assert 1 <= len(turns) <= 2 and len(turns) + 1 == reply - 6, lines
    read = [re.fullmatch(r"turn \d: '(.*)', system context from \['memory'\]", turn) for turn in turns]
    assert all(read) and " / ".join(m.group(1) for m in read if m) == "tick 1 / tick 2", turns
    # The reference on the last tick reaches the model as the host's stub (MCPL §19), printed
    # before the request that reads it; its URI, with the signature in its query, reaches no
    # output at all.
    (stub,) = [line for line in lines[6:reply] if not line.startswith("turn ")]
    assert re.fullmatch(
        r'  the model sees: \[reference ref_[0-9a-f]+: name "tick-2\.wav", type audio/wav \(claimed\), '
        r"size 96044 bytes \(claimed\); from push event of demo\.clock\]",
        stub,
    ), stub
    assert lines[lines.index(stub) + 1] == turns[-1]
    assert "demo.invalid" not in done.stdout and "not-for-models" not in done.stdout
    # RFC-006: a note retracted while unread is gone; read, its retraction is a notice.
    assert lines[reply + 1 :] == [
        "note 1: first",
        "unnote 1: retracted",
        "note 2: first",
        "read: ['Note 2: call Ada']",
        "unnote 2: noted",
        "read: ['Note 2 was deleted.']",
        "pushEvents in force: False",
        # RFC-007: the call reported to the watcher, never to the clock itself.
        "2 + 3 = 5 reported to ['watcher']",
        "watcher saw: [('clock--add', 'started'), ('clock--add', 'completed')]",
        "closed: {'clock': 'closed', 'memory': 'closed', 'watcher': 'closed'}",
    ]


def test_the_host_program_calls_a_tool_and_ends_by_itself(runs: Runs) -> None:
    (number,) = [n for n, body in enumerate(PROGRAMS) if "Host(load_config(" in body]
    done = runs.programs[number].result()  # the run of test_each_python_block_is_a_program_that_runs
    assert done.returncode == 0, done.stderr
    assert "demo ready\n1 + 2 = 3\nstopped by None\n" in done.stdout


def test_text_blocks_hold_no_runnable_example() -> None:
    for page, language, body in BLOCKS:
        if language != "text":
            continue
        for line in body.splitlines():
            if line.startswith("mcpl-host"):
                assert "[OPTIONS]" in line or "example.com" in line, f"{page}: runnable but not run: {line}"


def anchors(text: str) -> set[str]:
    """The anchors of a Markdown page as GitHub makes them: each heading's text lowercased,
    without punctuation (``§``, backticks, colons...), spaces as hyphens; and every
    ``<a id="...">``."""
    outside = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    slugs = {
        re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        for heading in re.findall(r"^#+ (.*)$", outside, re.M)
    }
    return slugs | set(re.findall(r'<a id="([^"]+)"></a>', text))


LINKED = (*PAGES, "docs/architecture.md", "docs/protocol.md")


@pytest.mark.parametrize("page", LINKED)
def test_the_links_between_pages_lead_somewhere(page: str) -> None:
    text = (ROOT / page).read_text(encoding="utf-8")
    outside = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    for target in re.findall(r"\]\(([^)\s]+)\)", outside):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto: and the like: not ours to check
        path, _, anchor = target.partition("#")
        linked = ((ROOT / page).parent / path).resolve() if path else ROOT / page
        assert linked.is_file(), f"{page}: {target} leads to no file"
        if anchor:
            assert anchor in anchors(linked.read_text(encoding="utf-8")), (
                f"{page}: {target} leads to no anchor"
            )


def test_the_environment_list_is_the_same_in_the_docs_help_and_code() -> None:
    listed = passed_environment()
    assert set(listed.split(", ")) == set(ENV_ALLOWLIST) | {f"{p}*" for p in ENV_ALLOWLIST_PREFIXES}
    assert listed in " ".join(TEXTS["docs/cli.md"].split())
    for command in ("probe", "call", "shell"):
        shown = run_cli(command, "--help").stdout
        assert listed in " ".join(shown.split()), command


def test_an_empty_token_is_named_as_such() -> None:
    for target in (["--ws", "wss://mcpl.example.com/v1"], ["--url", "https://mcp.example.com/mcp"]):
        done = run_cli("probe", *target, "--token", "")
        assert done.returncode == 2
        assert (
            "--token is empty" in done.stderr and "--ws:" not in done.stderr and "--url:" not in done.stderr
        )


def test_the_suite_command_is_the_one_ci_runs() -> None:
    assert SUITE in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
