"""The benchmark suite of mcpl-host (run it with ``scripts/bench.py``; see ``bench.run``).

mcpl-host, the official MCP Python SDK client and a floor client (``bench.floor``) are
measured side by side, in one run, on asyncio and trio, against the same C echo server
(``echo_server.c``, compiled on first use into ``.bench-build/``). Speed is measured here,
never in the test suite.
"""
