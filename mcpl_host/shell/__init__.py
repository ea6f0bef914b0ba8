"""``mcpl-host shell``: an interactive session with one server, or every server of a config.

- ``commands``: the command language (pure): parsing a line, help, ``grant``/``deny``.
- ``completion``: what can be completed, from what the servers listed (pure).
- ``held``: the shell's ``HostHandlers``: ``inference/request`` held until answered by hand.
- ``session``: one session over a ``Host``: runs commands, prints events.
- ``terminal``: the prompt (prompt_toolkit) or the piped input, and the printers.
- ``cli``: the ``mcpl-host shell`` command.
"""
