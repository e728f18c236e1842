"""HumanEval inside the sandbox: assemble prompt + completion, run the tests, report.

Loaded by the sandbox child as a trusted harness (standard library only, never ``kyai``);
:func:`run` is its entry point. :func:`extract_code` and :func:`assemble` are pure and also
used by the tests.

What an answer may look like (the ``humaneval-code`` generation prompt asks for the indented
body only, but models do not always comply):

1. **Fences.** When the answer holds Markdown fences, the code is the fenced block that
   defines the entry point, or else the first fenced block (an unclosed fence: everything
   after it). Text outside the fences is ignored. Without fences the whole answer is code.
2. **A whole function.** When the code (dedented) defines ``def <entry_point>(`` at top
   level, it replaces the prompt's function: the program is the prompt's text before the
   entry point's ``def`` line (imports, helper functions) followed by the code.
3. **A body.** Otherwise the code is the function's body, appended to the prompt. The first
   of these that compiles is run: the code as given; the code dedented and re-indented to the
   body's indentation (for answers that lost or changed their indentation); the code with
   only its first line indented (for answers whose first line was stripped).
   When none compiles, the answer scores 0 as a syntax error.

Then the row's ``test`` code runs in the same namespace and ``check(<entry_point>)`` is
called, exactly as HumanEval's own harness does.
"""

from __future__ import annotations

import linecache
import re
import textwrap
import traceback
from dataclasses import dataclass
from typing import Any

_FENCE = re.compile(r"^[ \t]*```[^\n]*\n(.*?)(?:^[ \t]*```[ \t]*$|\Z)", re.MULTILINE | re.DOTALL)
_MAX_TEXT = 2000


@dataclass(frozen=True)
class Assembly:
    """A program to run, or why there is none."""

    program: str | None
    form: str
    syntax_error: str | None = None


def extract_code(answer: str, entry_point: str) -> str:
    """The code part of an answer (rule 1 of the module docstring)."""
    blocks = [match.group(1) for match in _FENCE.finditer(answer)]
    if not blocks:
        return answer
    defining = re.compile(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", re.MULTILINE)
    for block in blocks:
        if defining.search(block):
            return block
    return blocks[0]


def _body_indent(prompt: str) -> str:
    """The indentation of the prompt's last non-blank line (its docstring's closing)."""
    for line in reversed(prompt.splitlines()):
        if line.strip():
            return line[: len(line) - len(line.lstrip())] or "    "
    return "    "


def _compiles(program: str) -> str | None:
    """None when the program compiles, else the error message."""
    try:
        compile(program, "<humaneval>", "exec")
    except (SyntaxError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _prefix_before_def(prompt: str, entry_point: str) -> str:
    match = re.search(rf"^def\s+{re.escape(entry_point)}\s*\(", prompt, re.MULTILINE)
    return prompt[: match.start()] if match else prompt


def assemble(prompt: str, answer: str, entry_point: str) -> Assembly:
    """Build the program for an answer (rules 2 and 3 of the module docstring)."""
    code = extract_code(answer, entry_point)
    if not code.endswith("\n"):
        code += "\n"
    dedented = textwrap.dedent(code)
    if re.search(rf"^def\s+{re.escape(entry_point)}\s*\(", dedented, re.MULTILINE):
        program = _prefix_before_def(prompt, entry_point) + dedented
        error = _compiles(program)
        if error is None:
            return Assembly(program, "function")
        return Assembly(None, "function", error)
    if not prompt.endswith("\n"):
        prompt += "\n"
    indent = _body_indent(prompt)
    lines = code.split("\n")
    candidates = [
        ("body", prompt + code),
        ("body-reindented", prompt + textwrap.indent(dedented, indent)),
        (
            "body-first-line-indented",
            prompt + indent + lines[0].lstrip() + "\n" + "\n".join(lines[1:]),
        ),
    ]
    first_error: str | None = None
    for form, program in candidates:
        error = _compiles(program)
        if error is None:
            return Assembly(program, form)
        first_error = first_error or error
    return Assembly(None, "body", first_error)


def _register(filename: str, source: str) -> None:
    """Let tracebacks show the lines of code compiled from strings."""
    lines = source.splitlines(keepends=True)
    linecache.cache[filename] = (len(source), None, lines, filename)


def _failure(exc: BaseException, form: str) -> dict[str, Any]:
    frames = traceback.extract_tb(exc.__traceback__)
    where = ""
    for frame in reversed(frames):
        if frame.filename in ("<humaneval>", "<humaneval-test>"):
            where = f"{frame.filename} line {frame.lineno}: {(frame.line or '').strip()}"
            break
    return {
        "status": "failed",
        "form": form,
        "exception_type": type(exc).__name__,
        "message": f"{type(exc).__name__}: {exc}"[:_MAX_TEXT],
        "where": where[:_MAX_TEXT],
        "traceback": "".join(traceback.format_exception(exc))[-_MAX_TEXT:],
    }


def run(payload: dict[str, Any], host: Any) -> dict[str, Any]:
    """Assemble and run one HumanEval problem.

    Reports ``passed``, ``syntax_error``, ``bad_test`` or ``failed`` (with the exception).
    """
    del host  # HumanEval makes no calls to the parent.
    prompt = str(payload["prompt"])
    entry_point = str(payload["entry_point"])
    test = str(payload["test"])
    assembly = assemble(prompt, str(payload["completion"]), entry_point)
    if assembly.program is None:
        return {"status": "syntax_error", "form": assembly.form, "message": assembly.syntax_error}
    _register("<humaneval>", assembly.program)
    _register("<humaneval-test>", test)
    try:
        test_code = compile(test, "<humaneval-test>", "exec")
    except SyntaxError as exc:
        return {"status": "bad_test", "form": assembly.form, "message": f"SyntaxError: {exc}"}
    namespace: dict[str, Any] = {"__name__": "__humaneval__"}
    try:
        exec(compile(assembly.program, "<humaneval>", "exec"), namespace)
        exec(test_code, namespace)
        namespace["check"](namespace[entry_point])
    except BaseException as exc:
        return _failure(exc, assembly.form)
    return {"status": "passed", "form": assembly.form}
