"""``mcpl-host check``: a conformance smoke test of an MCP or MCPL server.

``registry`` (check ids, categories, spec sections, the result model), ``evidence`` (what a
run saw), ``rules`` (one pure rule per check), ``schemas`` (JSON Schema validation),
``runner`` (the I/O driver), ``report`` (terminal, JSON, JUnit) and ``cli`` (the command).
"""

from mcpl_host.check.registry import CHECKS, CheckResult, CheckSpec
from mcpl_host.check.rules import evaluate
from mcpl_host.check.runner import CheckOptions, Target, run_checks

__all__ = ["CHECKS", "CheckOptions", "CheckResult", "CheckSpec", "Target", "evaluate", "run_checks"]
