"""The distributions an image installs: a pip resolution report, less what is never imported.

    dist-closure.py REPORT ROOT [--without NAME ...]

REPORT is ``pip install --dry-run --report`` for ROOT. Prints ``name==version`` (sorted) for
every distribution ROOT needs, walking each one's ``Requires-Dist`` (markers evaluated for
this interpreter and the extras asked for), but not through a distribution named by
``--without``: one the product never imports, and what only it needs. A distribution that
another path still needs stays (``--without datasets`` keeps pyarrow, which the product needs
itself).
"""

from __future__ import annotations

import argparse
import json
from collections import deque
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def closure(report: dict, root: str, without: set[str]) -> list[str]:
    """``name==version`` of every distribution reachable from ``root`` avoiding ``without``."""
    resolved = {
        canonicalize_name(item["metadata"]["name"]): item["metadata"] for item in report["install"]
    }
    start = canonicalize_name(root)
    if start not in resolved:
        raise SystemExit(f"dist-closure: {root} is not in the report")
    extras: dict[str, set[str]] = {start: set()}
    queue = deque([start])
    while queue:
        name = queue.popleft()
        for line in resolved[name].get("requires_dist") or []:
            requirement = Requirement(line)
            wanted = extras[name] or {""}
            if requirement.marker is not None and not any(
                requirement.marker.evaluate({"extra": extra}) for extra in wanted
            ):
                continue
            dependency = canonicalize_name(requirement.name)
            if dependency in without or dependency not in resolved:
                continue
            asked = set(requirement.extras)
            if dependency not in extras or not asked <= extras[dependency]:
                extras[dependency] = extras.get(dependency, set()) | asked
                queue.append(dependency)
    return sorted(f"{resolved[name]['name']}=={resolved[name]['version']}" for name in extras)


def main() -> None:
    """Print the closure of the command line's ROOT."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("root")
    parser.add_argument("--without", action="append", default=[], metavar="NAME")
    args = parser.parse_args()
    report = json.loads(args.report.read_text())
    without = {canonicalize_name(name) for name in args.without}
    print("\n".join(closure(report, args.root, without)))


if __name__ == "__main__":
    main()
