import io

from kyai.evaluation import Progress, ProgressUpdate


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
