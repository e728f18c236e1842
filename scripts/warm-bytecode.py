"""Write byte code for what the product loads, and only that (image build step).

Run with byte-code writing on (``PYTHONDONTWRITEBYTECODE`` unset): every module imported here
leaves its ``.pyc`` beside its source, so the operator and the worker Jobs start without
compiling what they load, on the image's read-only root file system. What no path below
loads (the Kubernetes client's API classes and models the product never uses, most of nltk,
sympy's and huggingface_hub's unused corners, ...) keeps its source only: about 50 MB less
than ``compileall`` over the whole virtualenv, and correct either way (a module without byte code
is compiled in memory when it is first imported).

The paths: every module of the ``kyai`` package (the operator, the controllers, the workers,
the graders, the gateway, the command line), then the imports those modules make inside
functions, each exercised once: the Kubernetes client and its configuration loaders, the
statistics (scipy.stats), the math and IFEval graders, the parquet reader, the Hub download.

Usage: ``python warm-bytecode.py`` (exits non-zero, naming the module, when one fails).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import tempfile
from pathlib import Path


def product_modules() -> list[str]:
    """Every module of the kyai package but ``__main__`` modules (they run when imported)."""
    import kyai

    return [
        info.name
        for info in pkgutil.walk_packages(kyai.__path__, "kyai.")
        if not info.name.endswith("__main__")
    ]


def exercise() -> None:
    """The imports the product makes inside functions, and the lazy ones of its libraries."""
    import huggingface_hub.file_download  # noqa: F401 (kyai.datasets: the Hub download)
    import kubernetes.client
    import kubernetes.config
    import math_verify
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kyai.graders._ifeval import check_instructions
    from kyai.stats import compare, ranks, score_interval

    # The client's modules load lazily: what the product reaches (its configuration, the
    # custom objects API, its exceptions; kyai.controllers, kyai.worker_status, kyai.gateway).
    kubernetes.client.CustomObjectsApi(
        kubernetes.client.ApiClient(kubernetes.client.Configuration())
    )
    assert kubernetes.client.exceptions.ApiException and kubernetes.config.ConfigException
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "rows.parquet"
        pq.write_table(pa.table({"instruction": ["a", "b"]}), path)
        assert pq.ParquetFile(path).read().to_pylist()[1] == {"instruction": "b"}
    assert math_verify.verify(math_verify.parse("$\\frac{1}{2}$"), math_verify.parse("0.5"))
    assert check_instructions("No commas.", [("punctuation:no_comma", {})], prompt="")[0].strict
    binary = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    continuous = [0.5, 0.25, 1.0, 0.75, 0.0, 1.0]
    score_interval(binary)
    score_interval(continuous)
    compare(binary, binary[::-1])
    compare(continuous, continuous[::-1])
    ranks([binary, binary[::-1], continuous])


def main() -> None:
    """Import and exercise what the product loads, writing its byte code."""
    if sys.flags.dont_write_bytecode:
        raise SystemExit("warm-bytecode: byte-code writing is off (unset PYTHONDONTWRITEBYTECODE)")
    for name in product_modules():
        importlib.import_module(name)
    exercise()
    print(f"warm-bytecode: {len(sys.modules)} modules loaded")


if __name__ == "__main__":
    main()
