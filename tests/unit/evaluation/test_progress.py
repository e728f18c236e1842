import io

from kyai.evaluation import Progress, ProgressUpdate
from kyai.evaluation._client import RetryNote


def test_plain_lines_when_not_a_terminal() -> None:
    stream = io.StringIO()
    seen: list[ProgressUpdate] = []
    progress = Progress(
        "generate", total=3, done=1, stream=stream, interval_s=0.0, listener=seen.append
    )
    progress.advance()
    progress.advance(error=True)
    progress.close()
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("kyai generate: 1/3 rows, 0 errors")
    assert lines[-1].startswith("kyai generate: 3/3 rows, 1 errors")
    assert [(u.done, u.errors) for u in seen] == [(2, 0), (3, 1)]


def test_lines_are_rate_limited() -> None:
    stream = io.StringIO()
    progress = Progress("judge", total=100, stream=stream, interval_s=3600.0)
    for _ in range(100):
        progress.advance()
    progress.close()
    assert len(stream.getvalue().splitlines()) == 2  # the first and the final line


def note(attempt: int, what: str = "unreachable: connection refused") -> RetryNote:
    return RetryNote(what, attempt, 6, 2.0**attempt)


def test_a_retry_says_what_failed_the_attempt_and_the_next_wait() -> None:
    stream = io.StringIO()
    seen: list[ProgressUpdate] = []
    progress = Progress("generate", total=4, stream=stream, listener=seen.append, side="candidate")
    progress.retrying(note(3))
    assert stream.getvalue().splitlines()[-1] == (
        "kyai generate: candidate unreachable: connection refused; attempt 3 of 6, next in 8 s"
    )
    assert seen[-1].message == (
        "candidate unreachable: connection refused; attempt 3 of 6, next in 8 s"
    )


def test_concurrent_retries_say_one_line_per_attempt_until_a_row_succeeds() -> None:
    stream = io.StringIO()
    progress = Progress("judge", total=4, stream=stream, interval_s=3600.0, side="judge")
    for attempt in (1, 2):
        for _ in range(16):  # sixteen requests in flight, failing alike
            progress.retrying(note(attempt, "answered HTTP 503: Service Unavailable"))
    said = [line for line in stream.getvalue().splitlines() if "attempt" in line]
    assert [line.split("; ")[1] for line in said] == ["attempt 1 of 6, next in 2 s",
                                                      "attempt 2 of 6, next in 4 s"]  # fmt: skip
    progress.advance()  # a row answered: what was retried is over ...
    assert progress.snapshot().message is None
    progress.retrying(note(1))  # ... and a new failure is said again from its first attempt
    assert "attempt 1 of 6" in stream.getvalue().splitlines()[-1]


def test_the_message_ends_with_the_phase() -> None:
    seen: list[ProgressUpdate] = []
    progress = Progress("generate", total=1, stream=io.StringIO(), listener=seen.append)
    progress.retrying(note(1))
    progress.advance(error=True)  # the row failed after its retries: still the message
    assert seen[-1].message is not None
    progress.close()
    assert seen[-1].message is None and seen[-1].done == 1


def test_no_echo_prints_nothing_and_still_tells_the_listener() -> None:
    stream = io.StringIO()
    seen: list[ProgressUpdate] = []
    progress = Progress("generate", total=2, stream=stream, listener=seen.append, echo=False)
    progress.retrying(note(1))
    progress.advance()
    progress.advance()
    progress.close()
    assert stream.getvalue() == ""
    assert [update.done for update in seen] == [0, 1, 2]
    assert seen[0].message is not None


def test_waits_are_said_in_whole_seconds_and_tenths_under_one() -> None:
    assert RetryNote("x", 1, 2, 4.4).text("judge").endswith("next in 4 s")
    assert RetryNote("x", 1, 2, 0.62).text("judge").endswith("next in 0.6 s")
