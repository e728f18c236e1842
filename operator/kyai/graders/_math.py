r"""MATH-500: the candidate's final answer compared with the reference by math-verify.

Extraction (:func:`extract_final_answer`) follows the seed's ``math-final-answer-judge``
prompt, in this order:

1. ``final_answer``: the text after the last "Final answer:" (also "final answer is",
   "**Final Answer:**", "final answer ="), up to the end of its line, or the next paragraph when
   the line is empty;
2. ``boxed``: the content of the last ``\boxed{...}`` (or ``\fbox{...}``), braces balanced;
3. ``last_result``: otherwise the whole response goes to math-verify, whose own extraction
   takes the last clearly stated expression.

An extracted answer that holds a ``\boxed{}`` is reduced to its content; a trailing full stop,
surrounding Markdown bold and outer math delimiters (``$``, ``$$``, ``\(...\)``,
``\[...\]``) are removed, and the answer is handed to math-verify as ``$answer$`` (as the
plain text when math-verify finds nothing in that form). The reference is prepared the same
way: a bare answer such as MATH-500's ``\frac{14}{3}`` is read as ``$\frac{14}{3}$``; a full
solution has its final answer extracted first.

Comparison: ``verify(parse(gold), parse(answer))``, gold first (math-verify is not
symmetric), with math-verify's defaults (``float_rounding=6``, strict variables). So
``\frac{1}{2}`` = ``0.5``, ``2\sqrt{2}`` = ``\sqrt{8}`` and ``10\%`` = ``0.1``, but ``1/3`` ≠
``0.33`` and ``\pi/2`` ≠ ``1.5708`` (too few decimals).

math-verify's own timeouts use ``SIGALRM``, which only works in a main thread, so they are
disabled and the comparisons run in a small pool of worker processes instead (at most
``GradingContext.concurrency``; fresh ``python -c`` interpreters speaking one JSON line per
job over stdin/stdout, with a minimal environment and an address-space limit). Inside a worker,
the main thread, each row's whole comparison (both parses and ``verify``) has a ``SIGALRM``
deadline of ``timeout_seconds``; should a worker not answer within ``hard_timeout_seconds``
(C code ignores signals) the parent kills it and the next row starts a new one. Either way the
row scores 0 with ``error_kind`` ``grader_timeout`` and the run goes on.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.metadata
import json
import logging
import os
import re
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from kyai.graders._types import (
    CANDIDATE_ERROR,
    GRADER_ERROR,
    INVALID_ROW,
    NO_ANSWER,
    TIMEOUT,
    Grade,
    GradeInput,
    GradingContext,
    GradingOutcome,
)

__all__ = [
    "MathExtraction",
    "MathGrader",
    "extract_final_answer",
]

#: Bumped whenever the extraction or comparison rules change (part of the comparison key).
RULES_VERSION: Final = "1"


_LOG = logging.getLogger(__name__)

# "Final answer: x", "final answer is x", "**Final Answer:** x", "Final answer = x".
_FINAL_ANSWER = re.compile(
    r"\bfinal\s+answer\b[ \t*_]*(?:\bis\b[ \t]*:?|[:：=])[ \t*_]*", re.IGNORECASE
)
_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
_OUTER_DELIMITERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
_UNESCAPED_DOLLAR = re.compile(r"(?<!\\)\$")


@dataclass(frozen=True)
class MathExtraction:
    """The candidate's final answer as extracted, and the rule that found it.

    ``answer`` is the text handed to math-verify (None when the response is blank);
    ``rule`` is ``final_answer``, ``boxed`` or ``last_result`` (the whole response).
    """

    answer: str | None
    rule: str | None


def _last_boxed(text: str) -> str | None:
    """The content of the last balanced boxed expression (``boxed`` or ``fbox``), or None.

    One pass with a stack of open braces, so unbalanced boxes cannot make it quadratic.
    """
    content_start = {m.end() - 1: m.end() for m in _BOX_OPEN.finditer(text)}
    if not content_start:
        return None
    stack: list[int] = []
    best: tuple[int, int] | None = None
    position = 0
    while position < len(text):
        char = text[position]
        if char == "\\":
            position += 2  # an escaped brace (or any escaped character) does not count
            continue
        if char == "{":
            stack.append(position)
        elif char == "}" and stack:
            opened = stack.pop()
            start = content_start.get(opened)
            if start is not None and (best is None or start > best[0]):
                best = (start, position)
        position += 1
    return text[best[0] : best[1]] if best is not None else None


def _clean(answer: str) -> str:
    """Strip what surrounds a stated answer: full stop, bold, outer math delimiters."""
    text = answer.strip()
    boxed = _last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    for _ in range(3):
        before = text
        text = text.strip().rstrip(".").strip().strip("*").strip()  # Markdown emphasis
        for opening, closing in _OUTER_DELIMITERS:
            if (
                text.startswith(opening)
                and text.endswith(closing)
                and len(text) > len(opening) + len(closing)
            ):
                inner = text[len(opening) : -len(closing)]
                if opening not in inner:  # "$a$ or $b$" keeps its delimiters
                    text = inner
                break
        if text == before:
            break
    return text.strip()


def extract_final_answer(text: str) -> MathExtraction:
    """Extract a response's final answer (see the module docstring for the rules)."""
    if not text.strip():
        return MathExtraction(None, None)
    for match in reversed(list(_FINAL_ANSWER.finditer(text))):
        line_end = text.find("\n", match.end())
        rest = text[match.end() : line_end if line_end != -1 else len(text)]
        if not rest.strip(" \t*_"):
            # The answer is on the following lines: take the next paragraph.
            following = text[match.end() :].lstrip("\n \t*_")
            rest = re.split(r"\n\s*\n", following, maxsplit=1)[0]
        answer = _clean(rest)
        if answer:
            return MathExtraction(answer, "final_answer")
    boxed = _last_boxed(text)
    if boxed is not None and boxed.strip():
        return MathExtraction(_clean(boxed), "boxed")
    return MathExtraction(text.strip(), "last_result")


def _for_math_verify(answer: str) -> tuple[str, str | None]:
    r"""The text math-verify parses first, and a plain-text fallback (or None).

    Text that already holds math delimiters (paired ``$``, ``\(``, ``\[``) or a box is
    passed as is; anything else is wrapped in ``$...$``, a lone dollar sign (``$7``) being read
    as currency.
    """
    dollars = len(_UNESCAPED_DOLLAR.findall(answer))
    if "\\(" in answer or "\\[" in answer or "\\boxed" in answer or (dollars and dollars % 2 == 0):
        return answer, None
    plain = _UNESCAPED_DOLLAR.sub(lambda _: "\\$", answer)
    return f"${plain}$", answer


def _gold_source(gold: str) -> tuple[str, str | None]:
    text = gold.strip()
    if _FINAL_ANSWER.search(text) or _BOX_OPEN.search(text):
        extracted = extract_final_answer(text)
        if extracted.answer is not None and extracted.rule != "last_result":
            return _for_math_verify(extracted.answer)
        return text, None
    return _for_math_verify(text)


# --------------------------------------------------------------------------- worker side


class _Deadline(BaseException):
    """Raised by the worker's SIGALRM handler.

    A BaseException, so library code that catches ``Exception`` cannot swallow it.
    """


def _on_alarm(signum: int, frame: object) -> None:
    raise _Deadline


def _show(parsed: Sequence[Any]) -> str | None:
    # parse() returns [sympy value, matched text]; the text is safe to show (str() of a huge
    # sympy value can itself take forever).
    for item in reversed(parsed):
        if isinstance(item, str):
            return item[:300]
    return None


def _compare(mv: Any, job: Mapping[str, Any]) -> dict[str, Any]:
    gold = mv.parse(job["gold"], parsing_timeout=None)
    if not gold and job["gold_plain"] is not None:
        gold = mv.parse(job["gold_plain"], parsing_timeout=None)
    if not gold:
        return {"status": "bad_gold"}
    answer = mv.parse(job["answer"], parsing_timeout=None)
    if not answer and job["answer_plain"] is not None:
        answer = mv.parse(job["answer_plain"], parsing_timeout=None)
    if not answer:
        return {"status": "no_answer"}
    equal = mv.verify(gold, answer, timeout_seconds=None)
    return {
        "status": "ok",
        "equal": bool(equal),
        "gold_parsed": _show(gold),
        "answer_parsed": _show(answer),
    }


def _limit_memory(limit_bytes: int | None) -> None:
    if not limit_bytes:
        return
    try:
        import resource

        _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        wanted = limit_bytes if hard == resource.RLIM_INFINITY else min(limit_bytes, hard)
        resource.setrlimit(resource.RLIMIT_AS, (wanted, hard))
    except (ImportError, ValueError, OSError):  # pragma: no cover - platform dependent
        pass


def _serve(read: Any, write: Any) -> None:
    """Answer comparison jobs, one JSON line in and one JSON line out, until EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when workers stop
    signal.signal(signal.SIGALRM, _on_alarm)
    for name in ("math_verify", "latex2sympy2_extended"):
        logging.getLogger(name).setLevel(logging.CRITICAL)

    def send(message: Mapping[str, Any]) -> None:
        write.write(json.dumps(message) + "\n")
        write.flush()

    try:
        mv = importlib.import_module("math_verify")
    except Exception as exc:
        send({"status": "error", "message": f"math-verify cannot be imported: {exc!r}"})
        return
    send({"status": "ready"})
    for line in read:
        try:
            job = json.loads(line)
            signal.setitimer(signal.ITIMER_REAL, float(job["timeout"]))
            try:
                reply = _compare(mv, job)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except _Deadline:
            reply = {"status": "timeout"}
        except MemoryError:
            reply = {"status": "error", "message": "The comparison ran out of memory."}
        except Exception as exc:
            reply = {"status": "error", "message": repr(exc)[:500]}
        send(reply)


def _worker_entry() -> None:
    """Entry point of a worker process (``python -c``): serve jobs on stdin/stdout.

    The protocol keeps the original stdout to itself; anything a library prints goes to
    stderr.
    """
    memory_limit = os.environ.get(_MEMORY_ENV)
    _limit_memory(int(memory_limit) if memory_limit else None)
    protocol_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    _serve(sys.stdin, protocol_out)


# --------------------------------------------------------------------------- parent side

_MEMORY_ENV: Final = "KYAI_MATH_WORKER_MEMORY_LIMIT"
_ENV_KEEP: Final = frozenset({"PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "SYSTEMROOT"})
_WORKER_CODE: Final = "from kyai.graders._math import _worker_entry; _worker_entry()"
# Replies are short; a line longer than this is a broken worker.
_LINE_LIMIT: Final = 1024 * 1024


class _WorkerGone(Exception):
    """The worker did not answer in time, or died."""


class _Worker:
    """One comparison process, spoken to with one JSON line per job."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls, *, memory_limit_bytes: int | None, timeout: float) -> _Worker:
        package_root = str(Path(__file__).resolve().parents[2])  # the folder holding kyai/
        # Only what an interpreter needs: the worker never sees the parent's secrets.
        env = {k: v for k, v in os.environ.items() if k in _ENV_KEEP or k.startswith("LC_")}
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p
        )
        if memory_limit_bytes:
            env[_MEMORY_ENV] = str(memory_limit_bytes)
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _WORKER_CODE,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=env,
            limit=_LINE_LIMIT,
        )
        worker = cls(process)
        try:
            reply = await worker._receive(timeout)
            if reply.get("status") != "ready":
                raise _WorkerGone(str(reply.get("message", reply)))
        except BaseException:
            await worker.close(kill=True)
            raise
        return worker

    async def _receive(self, timeout: float) -> dict[str, Any]:
        assert self.process.stdout is not None
        try:
            line = await asyncio.wait_for(self.process.stdout.readline(), timeout)
        except TimeoutError as exc:
            raise _WorkerGone(f"no answer within {timeout:g} s") from exc
        except (ValueError, OSError) as exc:
            raise _WorkerGone(f"unreadable answer ({exc!r})") from exc
        if not line:
            raise _WorkerGone(f"the worker exited (code {self.process.returncode})")
        try:
            reply = json.loads(line)
        except ValueError as exc:
            raise _WorkerGone(f"the worker sent {line[:200]!r}") from exc
        if not isinstance(reply, dict):
            raise _WorkerGone(f"the worker sent {reply!r}")
        return reply

    async def request(self, job: Mapping[str, Any], timeout: float) -> dict[str, Any]:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write((json.dumps(job) + "\n").encode())
            await self.process.stdin.drain()
        except (OSError, RuntimeError) as exc:
            raise _WorkerGone(f"the worker is gone ({exc!r})") from exc
        return await self._receive(timeout)

    def kill_now(self) -> None:
        if self.process.returncode is None:
            try:
                self.process.kill()
            except ProcessLookupError:  # pragma: no cover - exited meanwhile
                pass

    async def close(self, *, kill: bool = False) -> None:
        if kill:
            self.kill_now()
        if self.process.stdin is not None and not self.process.stdin.is_closing():
            self.process.stdin.close()
        try:
            await asyncio.wait_for(self.process.wait(), 2.0)
        except TimeoutError:
            self.kill_now()
            await self.process.wait()


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


@dataclass(frozen=True)
class _Prepared:
    index: int
    job: dict[str, Any]
    extraction: MathExtraction


class MathGrader:
    """MATH-500 grader: final-answer extraction + math-verify equivalence, fail-closed.

    Args:
        timeout_seconds: the deadline of one row's comparison inside its worker (math-verify
            parse + verify), after which the row scores 0 (``grader_timeout``).
        hard_timeout_seconds: how long the parent waits for a worker's answer before killing
            the process (default ``timeout_seconds + 5``).
        memory_limit_bytes: address-space limit of each worker (None: no limit).
        startup_timeout_seconds: how long a new worker may take to import math-verify.
    """

    name = "math-verify"

    def __init__(
        self,
        *,
        timeout_seconds: float = 10.0,
        hard_timeout_seconds: float | None = None,
        memory_limit_bytes: int | None = 4 * 1024**3,
        startup_timeout_seconds: float = 120.0,
    ) -> None:
        if not timeout_seconds > 0:
            raise ValueError(f"timeout_seconds must be positive, got {timeout_seconds!r}.")
        if hard_timeout_seconds is not None and not hard_timeout_seconds > 0:
            raise ValueError(
                f"hard_timeout_seconds must be positive, got {hard_timeout_seconds!r}."
            )
        self.timeout_seconds = float(timeout_seconds)
        self.hard_timeout_seconds = (
            float(hard_timeout_seconds)
            if hard_timeout_seconds is not None
            else self.timeout_seconds + 5.0
        )
        self.memory_limit_bytes = memory_limit_bytes
        self.startup_timeout_seconds = startup_timeout_seconds

    @property
    def identity(self) -> Mapping[str, Any]:
        """Name, rules version, the math-verify stack's versions and the row deadline."""
        return {
            "name": self.name,
            "version": RULES_VERSION,
            "math_verify": _version("math-verify"),
            "latex2sympy2_extended": _version("latex2sympy2_extended"),
            "sympy": _version("sympy"),
            "timeout_seconds": self.timeout_seconds,
        }

    def _prepare(self, index: int, item: GradeInput) -> _Prepared | Grade:
        if item.candidate_failed:
            return Grade(
                score=0.0,
                error_kind=CANDIDATE_ERROR,
                message="The candidate failed on this row; nothing to grade.",
            )
        gold = item.row.ground_truth_response
        if not gold.strip():
            return Grade(
                score=0.0, error_kind=INVALID_ROW, message="The row has no reference answer."
            )
        extraction = extract_final_answer(item.response)
        if extraction.answer is None:
            return Grade(
                score=0.0,
                scores={"accuracy": 0.0},
                error_kind=NO_ANSWER,
                message="The response is empty: no final answer.",
            )
        if extraction.rule == "last_result":
            answer, answer_plain = extraction.answer, None
        else:
            answer, answer_plain = _for_math_verify(extraction.answer)
        gold_source, gold_plain = _gold_source(gold)
        job = {
            "gold": gold_source,
            "gold_plain": gold_plain,
            "answer": answer,
            "answer_plain": answer_plain,
            "timeout": self.timeout_seconds,
        }
        return _Prepared(index, job, extraction)

    def _grade_reply(self, prepared: _Prepared, reply: Mapping[str, Any]) -> Grade:
        extraction = prepared.extraction
        extracted = extraction.answer if extraction.rule != "last_result" else None
        details: dict[str, Any] = {"rule": extraction.rule, "gold_source": prepared.job["gold"]}
        status = reply.get("status")
        if status == "ok":
            details["gold_parsed"] = reply.get("gold_parsed")
            details["answer_parsed"] = reply.get("answer_parsed")
            equal = bool(reply.get("equal"))
            score = 1.0 if equal else 0.0
            shown = extracted if extracted is not None else reply.get("answer_parsed")
            return Grade(
                score=score,
                scores={"accuracy": score},
                extracted=shown,
                message=(
                    f"Ground truth answer: {reply.get('gold_parsed')}. Candidate answer: "
                    f"{shown}. Equivalent: {'yes' if equal else 'no'}."
                ),
                details=details,
            )
        if status == "no_answer":
            return Grade(
                score=0.0,
                scores={"accuracy": 0.0},
                error_kind=NO_ANSWER,
                message="math-verify found no mathematical answer in the extracted text.",
                extracted=extracted,
                details=details,
            )
        if status == "bad_gold":
            return Grade(
                score=0.0,
                error_kind=INVALID_ROW,
                message="math-verify cannot read the reference answer.",
                extracted=extracted,
                details=details,
            )
        if status == "timeout":
            return Grade(
                score=0.0,
                scores={"accuracy": 0.0},
                error_kind=TIMEOUT,
                message=(
                    f"The comparison did not finish within {self.timeout_seconds:g} s "
                    "and was interrupted."
                ),
                extracted=extracted,
                details=details,
            )
        return Grade(
            score=0.0,
            error_kind=GRADER_ERROR,
            message=f"The comparison failed: {reply.get('message', reply)}.",
            extracted=extracted,
            details=details,
        )

    async def grade(self, inputs: Sequence[GradeInput], context: GradingContext) -> GradingOutcome:
        """Grade every input; comparisons run in at most ``context.concurrency`` workers."""
        grades: list[Grade | None] = [None] * len(inputs)
        pending: list[_Prepared] = []
        for index, item in enumerate(inputs):
            try:
                prepared = self._prepare(index, item)
            except Exception as exc:  # a grader bug must not lose the row
                prepared = Grade(
                    score=0.0, error_kind=GRADER_ERROR, message=f"Extraction failed: {exc!r}."
                )
            if isinstance(prepared, Grade):
                grades[index] = prepared
            else:
                pending.append(prepared)
        if pending:
            for prepared, grade in zip(
                pending, await self._compare_all(pending, context), strict=True
            ):
                grades[prepared.index] = grade
        final = tuple(g if g is not None else Grade(score=0.0) for g in grades)
        metrics: dict[str, float] = {}
        if final:
            metrics["accuracy"] = sum(g.score for g in final) / len(final)
            metrics["no_answer_rate"] = sum(g.error_kind == NO_ANSWER for g in final) / len(final)
        return GradingOutcome(grades=final, metrics=metrics)

    async def _compare_all(
        self, pending: Sequence[_Prepared], context: GradingContext
    ) -> list[Grade]:
        size = max(1, min(int(context.concurrency), len(pending)))
        workers: list[_Worker] = []
        idle: asyncio.Queue[_Worker | None] = asyncio.Queue()

        async def start() -> _Worker | None:
            try:
                worker = await _Worker.start(
                    memory_limit_bytes=self.memory_limit_bytes,
                    timeout=self.startup_timeout_seconds,
                )
            except (_WorkerGone, OSError) as exc:
                _LOG.warning("A math-verify worker failed to start: %s", exc)
                return None
            workers.append(worker)
            return worker

        async def run(prepared: _Prepared) -> Grade:
            worker = await idle.get()
            try:
                if worker is None:
                    worker = await start()
                if worker is None:
                    return Grade(
                        score=0.0,
                        error_kind=GRADER_ERROR,
                        message="No math-verify worker process could be started.",
                    )
                try:
                    reply = await worker.request(prepared.job, self.hard_timeout_seconds)
                except _WorkerGone as exc:
                    await worker.close(kill=True)
                    worker = None  # the next row that needs one starts a fresh worker
                    return Grade(
                        score=0.0,
                        scores={"accuracy": 0.0},
                        error_kind=TIMEOUT,
                        message=f"The comparison worker was killed: {exc}.",
                        extracted=prepared.extraction.answer
                        if prepared.extraction.rule != "last_result"
                        else None,
                        details={"rule": prepared.extraction.rule},
                    )
                return self._grade_reply(prepared, reply)
            except Exception as exc:
                return Grade(
                    score=0.0, error_kind=GRADER_ERROR, message=f"Comparison failed: {exc!r}."
                )
            finally:
                idle.put_nowait(worker)

        try:
            for worker in await asyncio.gather(*(start() for _ in range(size))):
                idle.put_nowait(worker)
            return list(await asyncio.gather(*(run(p) for p in pending)))
        except BaseException:
            for worker in workers:  # cancelled or failed: stop busy workers at once
                worker.kill_now()
            raise
        finally:
            for worker in workers:
                await worker.close()
