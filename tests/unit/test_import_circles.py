"""No import circle in the house, not even through an import made lazily or for types.

A module may import another lazily (inside a function, or by name through a package's
``lazy_exports`` table or ``importlib.import_module``) to keep a dependency off start-up — the
chat client loads its httpx transport only when asked for httpx — but the one imported never
imports it back: the dependency runs one way. The same holds for imports under
``if TYPE_CHECKING:``: import-linter's layers leave them out, but two modules that name each
other's types cannot be read apart either (the API models and the engines were such a pair).
The scan reads the sources (no import is run): every ``import`` and ``from … import`` anywhere
in a module (module level, functions, ``try``, ``if TYPE_CHECKING:``),
``importlib.import_module("…")`` with a literal name, and the names a lazy package's table
resolves to. The graph is every module of kyai, kyai_devcluster and kyai_testing; a circle
fails the test, naming its modules in order.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    ROOT / "operator" / "kyai",
    ROOT / "tools" / "devcluster" / "src" / "kyai_devcluster",
    ROOT / "tools" / "testing" / "src" / "kyai_testing",
)

Graph = dict[str, set[str]]


def module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
    return isinstance(node, ast.If) and name == "TYPE_CHECKING"


def _nodes(tree: ast.AST, *, type_checking: bool) -> Iterator[ast.AST]:
    """Every node; without ``type_checking``, not the bodies of ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if not type_checking and _type_checking(node):
            assert isinstance(node, ast.If)
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _absolute(module: str | None, level: int, source: str, is_package: bool) -> str:
    if level == 0:
        return module or ""
    base = source.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def _lazy_table(tree: ast.Module, package: str) -> dict[str, str]:
    """``{name: submodule}`` of a package's ``lazy_exports(__name__, {...})`` table."""
    for node in ast.walk(tree):
        call = node.value if isinstance(node, ast.Assign) else None
        if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "lazy_exports":
            table = call.args[1]
            assert isinstance(table, ast.Dict)
            found = {}
            for key, value in zip(table.keys, table.values, strict=True):
                assert key is not None
                relative = ast.literal_eval(key)
                submodule = package + relative if relative.startswith(".") else relative
                for name in ast.literal_eval(value):
                    found[name] = submodule
            return found
    return {}


def import_graph(*packages: Path, type_checking: bool = True) -> Graph:
    """``{module: the modules of the trees it imports, lazily or not}``."""
    trees = {
        module_name(p, package): (p, ast.parse(p.read_text("utf-8")))
        for package in packages
        for p in package.rglob("*.py")
    }
    packages = {name for name, (path, _) in trees.items() if path.name == "__init__.py"}
    tables = {name: _lazy_table(tree, name) for name in packages for tree in [trees[name][1]]}
    graph: Graph = {name: set() for name in trees}

    def target(module: str, name: str | None = None) -> str | None:
        """The module of the tree that ``from module import name`` (or ``import module``) runs."""
        if name is not None and f"{module}.{name}" in trees:
            return f"{module}.{name}"
        if name is not None and name in tables.get(module, {}):
            return tables[module][name]
        return module if module in trees else None

    for source, (path, tree) in trees.items():
        is_package = path.name == "__init__.py"
        found = graph[source]
        for node in _nodes(tree, type_checking=type_checking):
            if isinstance(node, ast.Import):
                found.update(filter(None, (target(alias.name) for alias in node.names)))
            elif isinstance(node, ast.ImportFrom):
                module = _absolute(node.module, node.level, source, is_package)
                found.update(filter(None, (target(module, a.name) for a in node.names)))
            elif (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                anchor = node.args[1] if len(node.args) > 1 else None
                name = node.args[0].value
                if name.startswith(".") and isinstance(anchor, ast.Constant):
                    name = str(anchor.value) + name
                found.update(filter(None, [target(name)]))
        found.update(tables.get(source, {}).values())  # a lazy package's names, by name
        found.discard(source)
    return graph


def circles(graph: Mapping[str, set[str]], watched: str = "") -> list[list[str]]:
    """The circles through ``watched`` (a package and its modules; all by default).

    Each strongly connected group of modules that holds one, as one shortest circle from its
    first watched module.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(start: str) -> None:  # Tarjan's algorithm, iteratively
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    found = []
    for group in groups:
        inside = sorted(
            m for m in group if not watched or m == watched or m.startswith(watched + ".")
        )
        if inside:
            found.append(_shortest_circle(graph, inside[0], group))
    return sorted(found)


def _shortest_circle(graph: Mapping[str, set[str]], start: str, group: set[str]) -> list[str]:
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & group):
                if child == start:
                    return [*paths[node], start]
                if child not in paths:
                    paths[child] = [*paths[node], child]
                    following.append(child)
        frontier = following
    raise AssertionError(f"{start} is in no circle")


def test_no_module_imports_one_that_imports_it_back() -> None:
    found = circles(import_graph(*PACKAGES))
    assert found == [], "import circles: " + "; ".join(" -> ".join(c) for c in found)


def test_the_engines_never_name_the_api_models() -> None:
    # api/ derives its framework enum from the engines' registry: the engines read specs
    # through their own protocols (kyai.engines._specs), not even importing api/ for types.
    graph = import_graph(PACKAGES[0])
    for module, imported in graph.items():
        if module == "kyai.engines" or module.startswith("kyai.engines."):
            assert not {m for m in imported if m.startswith("kyai.api")}, module


def test_the_chat_client_and_its_httpx_transport_depend_one_way() -> None:
    graph = import_graph(PACKAGES[0])
    assert "kyai.evaluation._httpx_backend" in graph["kyai.evaluation._client"]  # lazily
    for backend in ("_httpx_backend", "_aiohttp_backend"):
        imported = graph[f"kyai.evaluation.{backend}"]
        assert "kyai.evaluation._transport" in imported
        assert "kyai.evaluation._client" not in imported, backend


def write(package: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return package


def test_the_scan_sees_a_circle_closed_by_a_lazy_import(tmp_path: Path) -> None:
    package = write(
        tmp_path / "kyai",
        {
            "__init__.py": "",
            "evaluation/__init__.py": "",
            "evaluation/_client.py": (
                "def backend():\n    from kyai.evaluation._httpx_backend import Backend\n"
            ),
            "evaluation/_httpx_backend.py": "from kyai.evaluation._client import TIMEOUT\n",
            "evaluation/_ok.py": "from kyai.evaluation import _client\n",
        },
    )
    assert circles(import_graph(package)) == [
        ["kyai.evaluation._client", "kyai.evaluation._httpx_backend", "kyai.evaluation._client"]
    ]


def test_the_scan_sees_a_circle_closed_for_type_checking_only(tmp_path: Path) -> None:
    package = write(
        tmp_path / "kyai",
        {
            "__init__.py": "",
            "api/__init__.py": "from kyai.engines import REGISTRY\n",
            "engines/__init__.py": (
                "from typing import TYPE_CHECKING\nREGISTRY = {}\n"
                "if TYPE_CHECKING:\n    from kyai.api import Spec\n"
            ),
        },
    )
    assert circles(import_graph(package)) == [["kyai.api", "kyai.engines", "kyai.api"]]
    assert circles(import_graph(package, type_checking=False)) == []


def test_the_scan_follows_lazy_tables_relative_imports_and_import_module(tmp_path: Path) -> None:
    package = write(
        tmp_path / "kyai",
        {
            "__init__.py": "",
            "_lazy.py": "",
            "evaluation/__init__.py": (
                "from typing import TYPE_CHECKING\n"
                "from kyai._lazy import lazy_exports\n"
                "if TYPE_CHECKING:\n    from kyai.evaluation._a import A\n"
                '__getattr__, __dir__ = lazy_exports(__name__, {"._a": ("A",)})\n'
            ),
            # _a reaches _b by name; _b takes A from the package, whose table loads _a.
            "evaluation/_a.py": (
                "import importlib\n\nclass A: ...\n\n"
                'def load():\n    return importlib.import_module("._b", "kyai.evaluation")\n'
            ),
            "evaluation/_b.py": (
                "from . import _c\n\ndef use():\n    from kyai.evaluation import A\n"
            ),
            "evaluation/_c.py": "",
            # A circle outside kyai.evaluation is not watched here.
            "other/__init__.py": "",
            "other/x.py": "from kyai.other import y\n",
            "other/y.py": "from kyai.other import x\n",
        },
    )
    graph = import_graph(package, type_checking=False)
    assert graph["kyai.evaluation._b"] == {"kyai.evaluation._a", "kyai.evaluation._c"}
    assert graph["kyai.evaluation"] == {"kyai._lazy", "kyai.evaluation._a"}
    assert circles(graph, "kyai.evaluation") == [
        ["kyai.evaluation._a", "kyai.evaluation._b", "kyai.evaluation._a"]
    ]


def test_aiohttp_processes_never_import_httpx() -> None:
    """What the lazy import is for: a client over aiohttp, and the commands that use one, do not
    load httpx (a tenth of a second of start-up)."""
    script = (
        "import sys\n"
        "import kyai.evaluation._generate, kyai.evaluation._judge, kyai.evaluation.cli\n"
        "from kyai.evaluation import ChatClient\n"
        "ChatClient('http://127.0.0.1:9')\n"
        "print('httpx' in sys.modules, 'kyai.evaluation._httpx_backend' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["False", "False"]
