"""Strip the symbol tables of the shared libraries in a wheelhouse's wheels, once per wheel.

    strip-wheels.py WHEELHOUSE NAME ...

For each named distribution's wheel in WHEELHOUSE that holds ELF shared libraries: unpack it
(``wheel unpack``), run ``strip --strip-unneeded`` on each library (what Debian's dh_strip does;
the dynamic symbols a library exports or imports stay), and pack it again (``wheel pack``,
which writes RECORD's hashes anew). Wheels ship their libraries unstripped: this takes about
55 MB off the product image (pyarrow's libraries, uvloop, numpy's and scipy's extensions).

Two kinds of library are left as they are:
- those auditwheel vendored into a ``<package>.libs`` directory (it rewrote their headers with
  patchelf, and stripping some of those leaves segments the dynamic loader refuses);
- any library whose stripped copy fails the loader's own check (each PT_LOAD segment's
  virtual address and file offset equal modulo the page size: glibc's "ELF load command
  address/offset not page-aligned"), or that stripping would not make smaller.

Stripping runs once per wheel: ``WHEELHOUSE/.stripped/`` keeps each stripped wheel and a
ledger of its sha256 before and after. A wheel already stripped is skipped, and one that
``pip wheel`` wrote again as it was (it copies from its own cache) gets the kept copy back.
Without a ``strip`` command nothing changes (a note says so).
"""

from __future__ import annotations

import hashlib
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename

ELF_MAGIC = b"\x7fELF"
PAGE = 4096
PT_LOAD = 1
#: A wheel is packed again only when stripping saves at least this much.
MIN_SAVING = 64 << 10


def sha256(path: Path) -> str:
    """The file's sha256, hex."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def loadable(path: Path) -> bool:
    """Whether every PT_LOAD segment of a 64-bit little-endian ELF file is page-congruent."""
    data = path.read_bytes()
    if data[:4] != ELF_MAGIC or data[4] != 2 or data[5] != 1:
        return False  # only 64-bit little-endian ELF (x86-64, aarch64) is checked and stripped
    phoff = struct.unpack_from("<Q", data, 0x20)[0]
    entsize, count = struct.unpack_from("<HH", data, 0x36)
    for index in range(count):
        kind, _, offset, vaddr = struct.unpack_from("<IIQQ", data, phoff + index * entsize)
        if kind == PT_LOAD and (vaddr - offset) % PAGE:
            return False
    return True


def libraries(tree: Path) -> list[Path]:
    """The ELF shared libraries under an unpacked wheel, less auditwheel's vendored ones."""
    found = []
    for path in sorted(tree.rglob("*.so*")):
        if not path.is_file() or path.is_symlink():
            continue
        if any(part.endswith(".libs") for part in path.relative_to(tree).parts[:-1]):
            continue
        with path.open("rb") as handle:
            if handle.read(4) == ELF_MAGIC:
                found.append(path)
    return found


def strip_library(path: Path, strip: str) -> int:
    """Strip ``path`` in place when the result is smaller and loadable; the bytes saved."""
    trial = path.with_name(path.name + ".stripped")
    done = subprocess.run(
        [strip, "--strip-unneeded", "-o", str(trial), str(path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    before = path.stat().st_size
    if done.returncode != 0 or not loadable(trial) or trial.stat().st_size >= before:
        trial.unlink(missing_ok=True)
        return 0
    shutil.copymode(path, trial)
    trial.replace(path)
    return before - path.stat().st_size


def strip_wheel(wheel: Path, strip: str) -> int:
    """Repack ``wheel`` with its libraries stripped; the bytes saved (0: left as it was)."""
    with tempfile.TemporaryDirectory(prefix="kyai-strip-") as scratch:
        work = Path(scratch)
        run = [sys.executable, "-m", "wheel"]
        subprocess.run([*run, "unpack", "--dest", str(work / "tree"), str(wheel)],
                       check=True, capture_output=True)  # fmt: skip
        (tree,) = (work / "tree").iterdir()
        saved = sum(strip_library(path, strip) for path in libraries(tree))
        if saved < MIN_SAVING:
            return 0  # not worth a new archive: the wheel stays as it was
        (work / "out").mkdir()
        subprocess.run([*run, "pack", "--dest-dir", str(work / "out"), str(tree)],
                       check=True, capture_output=True)  # fmt: skip
        (packed,) = (work / "out").iterdir()
        # wheel pack orders a compressed tag set its own way: the same wheel, another name.
        if parse_wheel_filename(packed.name) != parse_wheel_filename(wheel.name):
            raise SystemExit(f"strip-wheels: {wheel.name} was packed as {packed.name}")
        shutil.move(str(packed), wheel)
        return saved


def main() -> None:
    """Strip the named distributions' wheels in the wheelhouse."""
    house = Path(sys.argv[1])
    names = {canonicalize_name(name) for name in sys.argv[2:]}
    strip = shutil.which("strip")
    if strip is None:
        print("strip-wheels: no strip command (binutils): the wheels keep their symbol tables")
        return
    cache = house / ".stripped"
    cache.mkdir(exist_ok=True)
    ledger = cache / "ledger"
    # wheel name -> (sha256 as pip wrote it, sha256 stripped)
    known: dict[str, tuple[str, str]] = {}
    for line in ledger.read_text().splitlines() if ledger.exists() else []:
        name, original, stripped = line.split()
        known[name] = (original, stripped)
    total = 0
    for wheel in sorted(house.glob("*.whl")):
        if parse_wheel_filename(wheel.name)[0] not in names:
            continue
        current = sha256(wheel)
        original, stripped = known.get(wheel.name, ("", ""))
        if current == stripped:
            continue
        kept = cache / wheel.name
        if current == original and kept.exists() and sha256(kept) == stripped:
            shutil.copyfile(kept, wheel)  # pip wrote the original again: the stripped copy back
            continue
        with zipfile.ZipFile(wheel) as archive:
            native = any(".so" in Path(name).name for name in archive.namelist())
        saved = strip_wheel(wheel, strip) if native else 0
        known[wheel.name] = (current, sha256(wheel) if saved else current)
        if saved:
            shutil.copyfile(wheel, kept)
            total += saved
            print(f"strip-wheels: {wheel.name}: {saved / 2**20:.1f} MiB of symbols")
    ledger.write_text("".join(f"{n} {o} {s}\n" for n, (o, s) in sorted(known.items())))
    if total:
        print(f"strip-wheels: {total / 2**20:.1f} MiB in all")


if __name__ == "__main__":
    main()
