"""README.md is a short front page: at most 250 lines, and every relative link leads somewhere.

Everything else lives on the docs site (docs/, mkdocs.yml); the README links into it with
relative links, so they work on GitHub too.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_LINES = 250
#: ``[text](target)`` and ``![alt](target)``, the target up to a space or the closing paren.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def relative_links(text: str) -> list[str]:
    """The target path of every link that is not a URL or an in-page anchor, in order.

    Code blocks are left out; the prose is joined into one line, so a link whose text wraps
    is found too.
    """
    prose, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            prose.append(line)
    found = []
    for target in LINK.findall(" ".join(prose)):
        parts = urlsplit(target)
        if not (parts.scheme or parts.netloc or target.startswith("#")):
            found.append(unquote(parts.path))
    return found


def test_the_readme_is_at_most_250_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_LINES, (
        f"README.md has {len(lines)} lines, at most {MAX_LINES}: move the detail to a page of "
        "the docs site (docs/) and link to it"
    )


def test_every_relative_link_of_the_readme_points_to_a_file_that_exists() -> None:
    links = relative_links(README.read_text(encoding="utf-8"))
    assert any(path.startswith("docs/") for path in links)  # it links into the site
    missing = [path for path in links if not (README.parent / path).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_the_link_finder_finds_links_images_and_wrapped_links() -> None:
    text = (
        "see [a](docs/a.md#part) and ![shot](docs/s.png)\n"
        "[wrapped\ntext](docs/b.md), [web](https://x.org/y.md), [here](#top)\n"
        "```\n[in code](docs/c.md)\n```\n"
    )
    assert relative_links(text) == ["docs/a.md", "docs/s.png", "docs/b.md"]
