"""The image build's host-side scripts: which distributions the image installs, and the
stripping of the wheels' shared libraries (scripts/dist-closure.py, scripts/strip-wheels.py)."""

from __future__ import annotations

import ast
import base64
import ctypes
import hashlib
import importlib.util
import re
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script(name: str) -> ModuleType:
    path = ROOT / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name.replace("-", "_"), path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


closure = _script("dist-closure").closure
strip_wheels = _script("strip-wheels")


def report(**requires: list[str]) -> dict[str, Any]:
    """A pip report: one distribution per keyword (``_`` for ``-``), version 1.0."""
    return {
        "install": [
            {"metadata": {"name": name.replace("_", "-"), "version": "1.0", "requires_dist": deps}}
            for name, deps in requires.items()
        ]
    }


RESOLVED = report(
    app=[
        "lib-b>=1", "lib-c", 'dev-tool; extra == "dev"', "plugin[fast]",
        'win-only; sys_platform == "win32"',
    ],
    lib_b=["only-b", "shared"],
    lib_c=["shared"],
    only_b=[],
    shared=[],
    dev_tool=[],
    plugin=['speedup; extra == "fast"', 'slow; extra == "slow"'],
    speedup=[],
    slow=[],
    win_only=[],
)  # fmt: skip


def test_the_closure_follows_requirements_markers_and_extras() -> None:
    assert closure(RESOLVED, "app", set()) == [
        "app==1.0", "lib-b==1.0", "lib-c==1.0", "only-b==1.0", "plugin==1.0", "shared==1.0",
        "speedup==1.0",
    ]  # fmt: skip


def test_without_drops_a_distribution_and_what_only_it_needs() -> None:
    # only-b goes with lib-b; shared stays, lib-c still needs it
    assert closure(RESOLVED, "app", {"lib-b"}) == [
        "app==1.0", "lib-c==1.0", "plugin==1.0", "shared==1.0", "speedup==1.0",
    ]  # fmt: skip


def test_the_root_must_be_in_the_report() -> None:
    with pytest.raises(SystemExit, match="absent is not in the report"):
        closure(RESOLVED, "absent", set())


def test_the_product_list_holds_no_tool_and_no_dataset_api() -> None:
    """kyai-operator's real requirements, as installed here, walked as the image build does."""
    from importlib.metadata import distributions

    installed = {
        "install": [
            {"metadata": {"name": dist.metadata["Name"], "version": dist.version,
                          "requires_dist": dist.metadata.get_all("Requires-Dist") or []}}
            for dist in distributions()
        ]
    }  # fmt: skip
    names = {
        line.split("==")[0].lower()
        for line in closure(installed, "kyai-operator", {"click", "datasets"})
    }
    assert {"kyai-operator", "if-verifiable", "kopf", "scipy", "nltk", "pyarrow"} <= names
    assert not {"datasets", "pandas", "multiprocess", "click", "kyai-devcluster"} & names


# --------------------------------------------------------------------------- slim-venv

SLIM_VENV = ROOT / "scripts" / "slim-venv.sh"


def _kept_kubernetes_apis() -> set[str]:
    match = re.search(r'^KEEP_KUBERNETES_APIS="([^"]*)"$', SLIM_VENV.read_text(), re.MULTILINE)
    assert match is not None, "slim-venv.sh sets KEEP_KUBERNETES_APIS"
    return set(match.group(1).split())


def _named_kubernetes_apis(root: Path) -> dict[str, set[str]]:
    """The API modules of ``kubernetes.client`` each product file names, by class or module."""
    import kubernetes.client

    exports: dict[str, str] = kubernetes.client._exports  # the client's own lazy-import table
    modules = {
        name: target.rsplit(".", 1)[-1] for name, target in exports.items() if name.endswith("Api")
    }
    files = set(modules.values())
    named: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Attribute):
                names.append(node.attr)
            elif isinstance(node, ast.Name):
                names.append(node.id)
            elif isinstance(node, ast.ImportFrom):
                names.extend(alias.name for alias in node.names)
                if (node.module or "").startswith("kubernetes.client.api."):
                    names.append((node.module or "").rsplit(".", 1)[-1])
            for name in names:
                module = modules.get(name) or (name if name in files else None)
                if module is not None:
                    named.setdefault(str(path.relative_to(root)), set()).add(module)
    return named


def test_every_kubernetes_api_the_product_names_survives_the_slimming() -> None:
    """slim-venv.sh deletes the client's API modules but the kept ones: the product's code
    (operator/kyai) and what the image build runs there must name no other."""
    kept = _kept_kubernetes_apis()
    import kubernetes.client.api

    shipped = Path(kubernetes.client.api.__file__).parent
    assert kept and all((shipped / f"{module}.py").is_file() for module in kept), kept
    named = _named_kubernetes_apis(ROOT / "operator" / "kyai")
    used = set().union(*named.values())
    assert {"core_v1_api", "custom_objects_api"} <= used, named  # the scan does see them
    missing = {path: apis - kept for path, apis in named.items() if apis - kept}
    assert not missing, f"add these to KEEP_KUBERNETES_APIS in scripts/slim-venv.sh: {missing}"
    warm = _named_kubernetes_apis(ROOT / "scripts")
    assert set().union(set(), *warm.values()) <= kept, warm


def test_the_scan_sees_an_api_named_any_way(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("from kubernetes import client\nclient.AppsV1Api()\n")
    (tmp_path / "b.py").write_text("from kubernetes.client import BatchV1Api\n")
    (tmp_path / "c.py").write_text("from kubernetes.client.api.storage_v1_api import X\n")
    (tmp_path / "d.py").write_text("ApiClient(); ApiException; client.Configuration()\n")
    (tmp_path / "e.py").write_text("from kubernetes.client.api import policy_v1_api\n")
    (tmp_path / "f.py").write_text("my_api = store_api = 1\n")  # not the client's modules
    assert _named_kubernetes_apis(tmp_path) == {
        "a.py": {"apps_v1_api"}, "b.py": {"batch_v1_api"}, "c.py": {"storage_v1_api"},
        "e.py": {"policy_v1_api"},
    }  # fmt: skip


def test_slim_venv_keeps_the_named_kubernetes_apis_only(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    site = venv / "lib" / "python3.11" / "site-packages"
    api = site / "kubernetes" / "client" / "api"
    api.mkdir(parents=True)
    (site / "pyarrow").mkdir()
    files = ["__init__.py", "core_v1_api.py", "custom_objects_api.py", "apps_v1_api.py",
             "batch_v1_api.py", "well_known_api.py"]  # fmt: skip
    for name in files:
        (api / name).write_text("")
    subprocess.run(["sh", str(SLIM_VENV), str(venv)], check=True, timeout=60)
    kept = sorted(path.name for path in api.iterdir())
    assert kept == ["__init__.py", "core_v1_api.py", "custom_objects_api.py"]


# --------------------------------------------------------------------------- stripping

#: Enough functions that their symbols and debug information pass the 64 KiB a repack needs.
C_SOURCE = (
    'static const char message[] = "stripped and still loaded";\n'
    "int answer(void) { return 42; }\n"
    "const char *hello(void) { return message; }\n"
    + "".join(f"static int helper{i}(int x) {{ return x * {i}; }}\n" for i in range(3000))
    + "int use_helpers(int x) { return "
    + " + ".join(f"helper{i}(x)" for i in range(3000))
    + "; }\n"
)


def _compile(tmp_path: Path, name: str) -> Path:
    gcc = shutil.which("gcc")
    if gcc is None or shutil.which("strip") is None:
        pytest.skip("gcc and binutils are needed (CI machines have them)")
    source = tmp_path / "lib.c"
    source.write_text(C_SOURCE)
    library = tmp_path / name
    subprocess.run([gcc, "-g", "-O0", "-shared", "-fPIC", "-o", str(library), str(source)],
                   check=True)  # fmt: skip
    return library


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _wheel(house: Path, library: Path) -> Path:
    """A wheel ``native-1.0`` holding the library twice: as its own and as auditwheel's."""
    files = {
        "native/__init__.py": b"",
        "native/_native.so": library.read_bytes(),
        "native.libs/libvendored-1a2b3c.so": library.read_bytes(),
        "native-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: native\nVersion: 1.0\n",
        "native-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\n"
            b"Tag: cp311-cp311-linux_x86_64\n"
        ),
    }
    record = [_record_line(name, data) for name, data in files.items()]
    record.append("native-1.0.dist-info/RECORD,,")
    wheel = house / "native-1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        archive.writestr("native-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return wheel


def _strip(house: Path, *names: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "strip-wheels.py"), str(house), *names],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip


def test_a_wheels_libraries_are_stripped_and_still_load(tmp_path: Path) -> None:
    library = _compile(tmp_path, "libnative.so")
    house = tmp_path / "house"
    house.mkdir()
    wheel = _wheel(house, library)
    other = shutil.copy(wheel, house / "other-1.0-cp311-cp311-linux_x86_64.whl")
    before = zipfile.ZipFile(wheel).read("native/_native.so")
    done = _strip(house, "native")
    assert "native-1.0-cp311-cp311-linux_x86_64.whl" in done.stdout
    with zipfile.ZipFile(wheel) as archive:
        after = archive.read("native/_native.so")
        vendored = archive.read("native.libs/libvendored-1a2b3c.so")
        record = archive.read("native-1.0.dist-info/RECORD").decode().splitlines()
    assert len(after) < len(before) and vendored == before  # auditwheel's copy untouched
    assert _record_line("native/_native.so", after) in record  # RECORD written anew
    loaded = tmp_path / "loaded.so"
    loaded.write_bytes(after)
    native = ctypes.CDLL(str(loaded))
    native.hello.restype = ctypes.c_char_p
    assert native.answer() == 42 and native.hello() == b"stripped and still loaded"
    assert Path(other).read_bytes() == (tmp_path / "house" / other.name).read_bytes()
    assert zipfile.ZipFile(other).read("native/_native.so") == before  # not named: untouched


def test_a_wheel_is_stripped_once_and_its_stripped_copy_comes_back(tmp_path: Path) -> None:
    library = _compile(tmp_path, "libnative.so")
    house = tmp_path / "house"
    house.mkdir()
    wheel = _wheel(house, library)
    original = wheel.read_bytes()
    _strip(house, "native")
    stripped = wheel.read_bytes()
    again = _strip(house, "native")
    assert again.stdout == "" and wheel.read_bytes() == stripped
    wheel.write_bytes(original)  # what pip wheel does when it copies from its own cache
    restored = _strip(house, "native")
    assert restored.stdout == "" and wheel.read_bytes() == stripped  # the kept copy, not a repack
    ledger = (house / ".stripped" / "ledger").read_text().split()
    assert ledger == [
        wheel.name,
        hashlib.sha256(original).hexdigest(),
        hashlib.sha256(stripped).hexdigest(),
    ]


def test_a_library_the_loader_would_refuse_is_not_loadable(tmp_path: Path) -> None:
    library = _compile(tmp_path, "libnative.so")
    assert strip_wheels.loadable(library)
    data = bytearray(library.read_bytes())
    phoff = struct.unpack_from("<Q", data, 0x20)[0]
    entsize, count = struct.unpack_from("<HH", data, 0x36)
    for index in range(count):
        at = phoff + index * entsize
        kind, _, offset = struct.unpack_from("<IIQ", data, at)
        if kind == 1 and offset:  # the first PT_LOAD past the file's start: off by one byte
            struct.pack_into("<Q", data, at + 8, offset + 1)
            break
    broken = tmp_path / "broken.so"
    broken.write_bytes(bytes(data))
    assert not strip_wheels.loadable(broken)
    with pytest.raises(OSError, match=r"page-aligned|ELF"):
        ctypes.CDLL(str(broken))
    assert not strip_wheels.loadable(tmp_path / "lib.c")  # not ELF at all
