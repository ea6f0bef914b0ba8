#!/usr/bin/env python3
"""mcpl-host at two revisions side by side: the hot path before and after a change, one run.

    .venv/bin/python scripts/bench_compare.py BASE [--rounds N] [--only seq,inflight,flood]

Checks out ``BASE`` (a git revision) into a temporary worktree, then runs
``scripts/bench.py --clients mcpl-host`` (this tree's benchmark, which drives mcpl-host
through its public API only) alternately against the package at ``BASE`` and the package of
this tree, ``--rounds`` times each, interleaved (base, this, base, this, ...), so that drift
in the machine's load hits both alike. Prints, per backend and figure, the median of each
side and the ratio this/base (below 1 is faster for times, above 1 for rates).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Figures compared, by measure: (metric, "lower" or "higher" is better).
FIGURES = {
    "seq": [("median_us", "lower"), ("p99_us", "lower"), ("cpu_us", "lower")],
    "inflight-100": [("req_per_s", "higher"), ("cpu_us", "lower")],
    "inflight-1000": [("req_per_s", "higher")],
    "flood": [("accepted_per_s", "higher"), ("refused", "lower")],
    "import": [("import_ms", "lower"), ("package_import_ms", "lower"), ("rss_mib", "lower")],
    "idle": [("rss_mib", "lower"), ("bringup_ms", "lower"), ("close_ms", "lower")],
}
# Streamable HTTP and WebSocket (scripts/bench/http_ws.py; --only http-json,http-sse,ws).
for _mode in ("http-json", "http-sse", "ws"):
    for _width in (1, 16, 100):
        FIGURES[f"{_mode}/inflight-{_width}"] = [("req_per_s", "higher"), ("cpu_us", "lower")]
    FIGURES[f"{_mode}/notify"] = [("per_s", "higher"), ("cpu_us", "lower")]
    FIGURES[f"{_mode}/big-8"] = [("ms", "lower"), ("cpu_ms", "lower")]


def run_once(package_root: Path, only: str, out: Path) -> dict[str, list[float]]:
    env = {"PYTHONPATH": str(package_root), "PATH": "/usr/bin:/bin"}
    command = [sys.executable, str(ROOT / "scripts" / "bench.py"), "--quick", "--clients", "mcpl-host"]
    command += ["--only", only, "--json", str(out)]
    subprocess.run(command, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    values: dict[str, list[float]] = defaultdict(list)
    for row in json.loads(out.read_text())["values"]:
        values[f"{row['backend']} {row['measure']} {row['metric']}"].extend(row["values"])
    return values


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="the git revision to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="seq,inflight,flood")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        base_tree = Path(scratch) / "base"
        subprocess.run(
            ["git", "worktree", "add", "-q", "--detach", str(base_tree), args.base], cwd=ROOT, check=True
        )
        try:
            sides: dict[str, dict[str, list[float]]] = {"base": defaultdict(list), "this": defaultdict(list)}
            for round_ in range(args.rounds):
                for side, tree in (("base", base_tree), ("this", ROOT)):
                    print(f"round {round_ + 1}: {side}", file=sys.stderr, flush=True)
                    for key, values in run_once(tree, args.only, Path(scratch) / f"{side}.json").items():
                        sides[side][key].extend(values)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base_tree)], cwd=ROOT, check=False)
    print(f"| figure | {args.base} | this tree | this/base |\n|---|---|---|---|")
    for key in sorted(sides["this"]):
        backend, measure, metric = key.split(" ")
        better = dict(FIGURES.get(measure, [])).get(metric)
        if better is None or key not in sides["base"]:
            continue
        base, this = statistics.median(sides["base"][key]), statistics.median(sides["this"][key])
        ratio = f"{this / base:.2f}" if base else "n/a"
        print(f"| {backend} {measure} {metric} ({better} is better) | {base:,.1f} | {this:,.1f} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
