#!/usr/bin/env python3
"""Benchmarks of mcpl-host against the official MCP SDK client and a floor client.

    .venv/bin/python scripts/bench.py            # the full run (a few minutes)
    .venv/bin/python scripts/bench.py --quick    # under a minute
    .venv/bin/python scripts/bench.py --profile  # where mcpl-host's time goes

The suite lives in ``scripts/bench/`` (see its ``run`` module for every option).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench.run import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
