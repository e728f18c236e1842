"""The docs site's link checks: the validation settings of mkdocs.yml fail a build on bad links.

``make docs`` builds the real site with ``--strict``; this test builds a two-page site with
the same ``validation:`` block and shows that each kind of bad link fails the build, naming
the page and the link. It also keeps ``make docs`` honest: ``--quiet`` would hide the warnings
and let ``--strict`` pass them (the Makefile's command is checked).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).parent / "mkdocs"


def mkdocs_config() -> dict[str, Any]:
    """mkdocs.yml read as MkDocs reads it (its ``extra:`` holds a Python tag)."""
    from mkdocs.utils.yaml import get_yaml_loader

    loaded: dict[str, Any] = yaml.load(  # the project's own file, with MkDocs' loader
        (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=get_yaml_loader()
    )
    return loaded


def site(tmp_path: Path, page: str) -> Path:
    """A site of two pages (index.md holding ``page``, other.md) with mkdocs.yml's validation."""
    validation = mkdocs_config()["validation"]
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text(f"# Home\n\n{page}\n", encoding="utf-8")
    (docs / "other.md").write_text("# Other\n\n## A part\n\nText.\n", encoding="utf-8")
    config = {
        "site_name": "t",
        "site_dir": str(tmp_path / "site"),
        "nav": ["index.md", "other.md"],
        "validation": validation,
    }
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return tmp_path / "mkdocs.yml"


def build(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        # Not --quiet: it hides the warnings, and --strict then counts none.
        [str(MKDOCS), "build", "--strict", "-f", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.skipif(not MKDOCS.exists(), reason="mkdocs is in the dev extra")
@pytest.mark.parametrize(
    ("link", "said"),
    [
        ("[gone](missing.md)", "'missing.md', but the target is not found"),
        ("[part](other.md#no-such-part)", "does not contain an anchor '#no-such-part'"),
        ("[here](#nowhere)", "there is no such anchor on this page"),
        ("[dir](some/dir/)", "unrecognized relative link 'some/dir/'"),
    ],
)
def test_a_bad_link_fails_the_build(tmp_path: Path, link: str, said: str) -> None:
    result = build(site(tmp_path, link))
    assert result.returncode != 0, result.stderr
    assert said in result.stderr and "index.md" in result.stderr, result.stderr


@pytest.mark.skipif(not MKDOCS.exists(), reason="mkdocs is in the dev extra")
def test_good_links_build(tmp_path: Path) -> None:
    result = build(site(tmp_path, "[part](other.md#a-part), [web](https://example.org/)"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "site" / "other" / "index.html").is_file()


def test_make_docs_builds_strictly_and_shows_its_warnings() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    (command,) = [line for line in makefile.splitlines() if "mkdocs build" in line]
    assert "--strict" in command and "--quiet" not in command and " -q" not in command
    assert re.search(r"^test: .*\bdocs\b", makefile, re.MULTILINE), "make test runs make docs"


@pytest.mark.skipif(not MKDOCS.exists(), reason="mkdocs is in the dev extra")
def test_a_plain_strict_build_prints_no_end_of_life_banner(tmp_path: Path) -> None:
    # Run as anyone would, without the Makefile's NO_MKDOCS_2_WARNING (a test that loaded
    # mkdocs.yml in this process has set it here: it is taken out).
    env = {key: value for key, value in os.environ.items() if key != "NO_MKDOCS_2_WARNING"}
    result = subprocess.run(
        [str(MKDOCS), "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    said = result.stdout + result.stderr
    assert "Building documentation" in said, said  # the theme was loaded
    assert "end of life" not in said and "NO_MKDOCS_2_WARNING" not in said, said
