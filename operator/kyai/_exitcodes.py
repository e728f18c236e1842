"""The exit statuses of every ``kyai`` sub-command, defined once."""

from __future__ import annotations

#: The command did what it was asked (whatever the score).
EXIT_OK = 0
#: Something failed that is neither the user's input nor the servers' configuration.
EXIT_FAILURE = 1
#: Bad input: a flag, a file, a run directory.
EXIT_USAGE = 2
#: A server cannot be reached or is configured so that no request can succeed.
EXIT_UNREACHABLE = 3
#: A quality gate failed (reserved for a later issue).
EXIT_GATE_FAILED = 4
#: Interrupted (SIGINT, Ctrl-C): 128 + 2, as shells report it.
EXIT_INTERRUPTED = 130
