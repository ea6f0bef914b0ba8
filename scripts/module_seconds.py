#!/usr/bin/env python3
"""Seconds each test module took, from a JUnit XML report of a whole run, as the JSON object
``tests/module_seconds.json`` holds ({"tests/test_x.py": seconds}, longest first; 0.1 s).

    .venv/bin/pytest --junitxml=/tmp/suite.xml
    .venv/bin/python scripts/module_seconds.py /tmp/suite.xml > tests/module_seconds.json

A test case's ``time`` is its set-up, call and tear-down (pytest's default
``junit_duration_report``); its module is its ``classname`` up to the first ``test_`` part
(``tests.found_secrets.test_found_secrets.Class`` -> ``tests/found_secrets/test_found_secrets.py``).
tests/conftest.py orders the modules by these numbers (its docstring says why).
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter


def module_of(classname: str) -> str:
    """The module path of a JUnit ``classname``."""
    parts: list[str] = []
    for part in classname.split("."):
        parts.append(part)
        if part.startswith("test_"):
            break
    return "/".join(parts) + ".py"


def module_seconds(report: str) -> dict[str, float]:
    """{module path: seconds}, longest first, rounded to 0.1 s."""
    seconds: Counter[str] = Counter()
    for case in ET.parse(report).iter("testcase"):
        seconds[module_of(case.get("classname", ""))] += float(case.get("time") or 0)
    return {module: round(total, 1) for module, total in seconds.most_common()}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: module_seconds.py REPORT.xml")
    print(json.dumps(module_seconds(sys.argv[1]), indent=1))
