"""``mcpl-host replay`` and ``check --against``: a recording (``mcpl_host/recording.py``'s
JSON Lines format, version 1) read back as the server it recorded.

- ``script``: a recording's server side as a ``Script`` (pure).
- ``diff``: the first difference between two JSON values, named by its JSON Pointer (pure).
- ``matcher``: given each message the live host sends, what the replay answers (pure; the
  matching rule is docs/protocol.md RP1-RP8).
- ``serve``: the I/O shell: the replay as a server over stdio, WebSocket or Streamable HTTP.
- ``cli``: the ``mcpl-host replay`` command.
"""
