"""``python -m kyai.engines CHART_SCHEMA``: list every engine under the chart's engineImages.

``make crds`` runs it on ``charts/kyai-operator/values.schema.json`` so that a new engine in
the registry is a value the chart accepts without editing the schema by hand.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kyai.engines import ENGINES

_IMAGE = "A full image reference (repository:tag or @digest); empty for the built-in default."


def update_schema(text: str) -> str:
    """The chart's values schema with one ``engineImages`` property per registered engine."""
    schema = json.loads(text)
    images = schema["properties"]["engineImages"]
    images["properties"] = {name: {"type": "string", "description": _IMAGE} for name in ENGINES}
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    """Rewrite the schema file named by the only argument."""
    if len(argv) != 1:
        print("usage: python -m kyai.engines CHART_SCHEMA", file=sys.stderr)
        return 2
    path = Path(argv[0])
    path.write_text(update_schema(path.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
