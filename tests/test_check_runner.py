"""The runner of ``mcpl-host check`` through the library (asyncio and trio): its bounds on
what a server can make it do."""

from __future__ import annotations

import functools
import sys

import anyio
import pytest

from mcpl_host import HostedServer, ServerConfig
from mcpl_host.check.registry import CHECKS_BY_ID
from mcpl_host.check.rules import evaluate
from mcpl_host.check.runner import GRANT_ALL, CheckOptions, Target, run_checks
from mcpl_host.limits import Limits

from .conftest import FIXTURES

pytestmark = pytest.mark.anyio
PLAIN = str(FIXTURES / "check" / "plain_mcp.py")


async def test_a_pathological_output_schema_is_validated_within_the_bound() -> None:
    # now's outputSchema has "^(a+)+$" and its result 64 a's then "!": a backtracking
    # matcher would take for ever; the worker process is stopped at the bound.
    limits = Limits(check_validation_timeout_seconds=0.5, close_grace_seconds=1)
    config = ServerConfig(
        command=sys.executable, args=(PLAIN, "--fault", "redos-output"), grant_policy=GRANT_ALL, limits=limits
    )
    hosted = functools.partial(HostedServer, config)
    with anyio.fail_after(30):
        evidence = await run_checks(
            Target(hosted, "stdio", "plain"),
            CheckOptions(limits=limits),
            frozenset({"main", "lists", "calls"}),
        )
    (result,) = evaluate(evidence, [CHECKS_BY_ID["tools.call.output-schema"]])
    assert result.status == "failed"
    assert "validation against its outputSchema did not finish within 0.5 s" in result.reason
