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
#: A quality gate failed: --fail-under / --max-error-rate of ``kyai run`` / ``kyai judge``,
#: --threshold of ``kyai lm-eval``, --non-inferiority of ``kyai compare``.
EXIT_GATE_FAILED = 4
#: Interrupted (SIGINT, Ctrl-C): 128 + 2, as shells report it.
EXIT_INTERRUPTED = 130

#: What each exit status means, as ``--help`` lists them.
MEANINGS: dict[int, str] = {
    EXIT_OK: "success",
    EXIT_FAILURE: "an unexpected failure",
    EXIT_USAGE: "bad input: a flag, a file, a run directory",
    EXIT_UNREACHABLE: "a server cannot be reached or is configured so that no request can succeed",
    EXIT_GATE_FAILED: "a quality gate failed",
    EXIT_INTERRUPTED: "interrupted (SIGINT, Ctrl-C)",
}

#: The statuses each sub-command can exit with (others: every status but the gate's).
COMMAND_CODES: dict[str, tuple[int, ...]] = {
    "run": (
        EXIT_OK,
        EXIT_FAILURE,
        EXIT_USAGE,
        EXIT_UNREACHABLE,
        EXIT_GATE_FAILED,
        EXIT_INTERRUPTED,
    ),
    "judge": (
        EXIT_OK,
        EXIT_FAILURE,
        EXIT_USAGE,
        EXIT_UNREACHABLE,
        EXIT_GATE_FAILED,
        EXIT_INTERRUPTED,
    ),
    "lm-eval": (
        EXIT_OK,
        EXIT_FAILURE,
        EXIT_USAGE,
        EXIT_UNREACHABLE,
        EXIT_GATE_FAILED,
        EXIT_INTERRUPTED,
    ),
    # Serves until SIGTERM/SIGINT (then 0); bad settings are 2.
    "judge-gateway": (EXIT_OK, EXIT_FAILURE, EXIT_USAGE),
    # Sets an annotation: the schedule missing is bad input, the API server unreachable 3.
    "run-now": (EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_INTERRUPTED),
    # Reads files only: no server to reach.
    "compare": (EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_GATE_FAILED, EXIT_INTERRUPTED),
}
_DEFAULT_CODES = (EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_INTERRUPTED)

#: The gates of each sub-command that exits with :data:`EXIT_GATE_FAILED`: its ``--help``
#: names its own, never another command's.
GATES: dict[str, tuple[str, ...]] = {
    "run": ("--fail-under", "--max-error-rate"),
    "judge": ("--fail-under", "--max-error-rate"),
    "lm-eval": ("--threshold",),
    "compare": ("--non-inferiority",),
}


def exit_codes_epilog(command: str) -> str:
    """The "exit status" section of a sub-command's ``--help``."""
    codes = COMMAND_CODES.get(command, _DEFAULT_CODES)
    meanings = dict(MEANINGS)
    if EXIT_GATE_FAILED in codes:
        meanings[EXIT_OK] = "success, whatever the score when no gate is set"
        gates = GATES.get(command)
        if gates:
            meanings[EXIT_GATE_FAILED] += f" ({', '.join(gates)})"
    lines = ["exit status:"]
    lines += [f"  {code:<4} {meanings[code]}" for code in codes]
    return "\n".join(lines)
