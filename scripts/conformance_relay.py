"""The client command the conformance suite runs when ``scripts/conformance.py`` shares one
Python process among the scenarios: it hands its arguments and ``MCP_CONFORMANCE_*``
variables to that process (the Unix socket ``$MCPL_CONFORMANCE_SOCKET``), which runs the
scenario with ``mcpl_host.conformance_client.run_request``, and exits with the status it
answers, its line on stderr. Standard library only, run with ``python -I -S``: it starts in
milliseconds, where importing the host takes most of a second of CPU.
"""

import json
import os
import socket
import sys

SOCKET_ENV = "MCPL_CONFORMANCE_SOCKET"


def main() -> int:
    request = {
        "args": sys.argv[1:],
        "environ": {key: value for key, value in os.environ.items() if key.startswith("MCP_CONFORMANCE_")},
    }
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(os.environ[SOCKET_ENV])
        sock.sendall(json.dumps(request).encode() + b"\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    reply = json.loads(answer)
    if reply.get("line"):
        print(reply["line"], file=sys.stderr)
    return int(reply["status"])


if __name__ == "__main__":
    sys.exit(main())
