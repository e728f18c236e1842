"""``kyai view`` (a local web page) and ``kyai report`` (the same page as one file).

Both take the same inputs: run directories (``kyai run`` / ``kyai judge`` wrote them), or a
cluster's EvaluationRuns of one namespace (``-n NS``), or an EvaluationSweep's runs and
table (``--sweep NAME [-n NS]``). ``register`` builds the parsers only; the handlers import
the rest, and need the ``plotly`` package (the ``view`` extra: without it, exit 2 saying
what to install).
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kyai._argtypes import number
from kyai._exitcodes import EXIT_OK, EXIT_USAGE

if TYPE_CHECKING:
    from kyai.view.sources import Sources

#: ``kyai view``'s port when ``--port`` is not given.
DEFAULT_PORT = 8765

VIEW_HELP = "serve a local web page of runs: scores, ranks, two runs side by side, questions"
REPORT_HELP = "write the page of kyai view as one self-contained HTML file (no network)"

_INPUTS = (
    "Runs come from run directories (RUN_DIR: what `kyai run` / `kyai judge` wrote, or its "
    "summary.json), or from the cluster of the kubeconfig: the EvaluationRuns of a namespace "
    "(-n NS), or an EvaluationSweep's runs and ranked table (--sweep NAME, -n for its "
    "namespace). The page shows every run's score with its interval, errors by kind and "
    "serving figures; the scores and tie-aware ranks per comparison key (a forest plot, the "
    "ranks of kyai leaderboard); two runs of one key side by side (the figures of kyai "
    "compare and the questions they scored differently, searchable); a sweep's table and its "
    "score/TTFT chart with the Pareto front; and each run's questions. What cannot be read "
    "(a missing directory, a run not judged, files not reachable) is listed on the page."
)


def _port(text: str) -> int:
    value = number(text, int)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port (0-65535; 0: a free one)")
    return value


def _add_inputs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "runs",
        nargs="*",
        type=Path,
        metavar="RUN_DIR",
        help="run directories (or their summary.json); not with -n or --sweep",
    )
    parser.add_argument(
        "-n",
        "--namespace",
        metavar="NS",
        help="the EvaluationRuns of this namespace (with --sweep: the sweep's namespace, "
        "default the kubeconfig context's)",
    )
    parser.add_argument(
        "--sweep", metavar="NAME", help="this EvaluationSweep's runs and ranked table"
    )
    parser.add_argument(
        "--results-root",
        type=Path,
        metavar="DIR",
        help="where the cluster runs' results claims can be read (a copy or a mount): a "
        "run's files are the first of DIR/NAMESPACE/CLAIM/RUN, DIR/CLAIM/RUN and DIR/RUN "
        "holding summary.json (a devcluster's: WORKDIR/volumes); without it, cluster runs "
        "are shown from their status",
    )


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``view`` and ``report`` sub-commands."""
    view = subparsers.add_parser(
        "view",
        help=VIEW_HELP,
        description="Serve a web page of the runs on 127.0.0.1 until interrupted (Ctrl-C); "
        "each load of the page reads the runs again. " + _INPUTS,
    )
    _add_inputs(view)
    view.add_argument(
        "--port",
        type=_port,
        default=DEFAULT_PORT,
        metavar="PORT",
        help=f"the port on 127.0.0.1 (default: {DEFAULT_PORT}; 0: a free one)",
    )
    view.set_defaults(handler=_handle_view)
    report = subparsers.add_parser(
        "report",
        help=REPORT_HELP,
        description="Write the page kyai view serves as one self-contained HTML file "
        "(Plotly and the data inlined: it opens without network, for CI artefacts and "
        "mail). " + _INPUTS,
    )
    _add_inputs(report)
    report.add_argument(
        "-o", "--output", type=Path, required=True, metavar="FILE", help="the HTML file to write"
    )
    report.set_defaults(handler=_handle_report)


def _check_inputs(command: str, args: argparse.Namespace) -> str | None:
    """Why the inputs given do not go together (None: they do)."""
    if args.runs and (args.namespace is not None or args.sweep is not None):
        return "give run directories or a cluster's runs (-n NS, --sweep NAME), not both"
    if not args.runs and args.namespace is None and args.sweep is None:
        return f"nothing to show: kyai {command} RUN_DIR... | --sweep NAME [-n NS] | -n NS"
    if args.runs and args.results_root is not None:
        return "--results-root reads a cluster's runs (-n, --sweep), not run directories"
    return None


def read_sources(args: argparse.Namespace) -> Sources:
    """The runs the arguments name (:class:`~kyai.view.sources.ViewError` when they cannot be)."""
    from kyai.view.sources import cluster_sources, directory_sources

    if args.runs:
        return directory_sources(args.runs)
    return cluster_sources(args.namespace, args.sweep, args.results_root)


def page(args: argparse.Namespace, *, inline_plotly: bool) -> tuple[str, str]:
    """The page of the runs the arguments name, and its Content Security Policy."""
    from kyai.view.page import render
    from kyai.view.payload import build

    data = build(read_sources(args), now=datetime.now(UTC))
    return render(data, inline_plotly=inline_plotly)


def _prepare(command: str, args: argparse.Namespace) -> str | None:
    """Plotly's JavaScript; None (after saying why) when the inputs or Plotly are missing."""
    from kyai.view.page import PlotlyMissing, plotly_js

    problem = _check_inputs(command, args)
    if problem is not None:
        print(f"kyai {command}: {problem}", file=sys.stderr)
        return None
    try:
        return plotly_js()
    except PlotlyMissing as exc:
        print(f"kyai {command}: {exc}", file=sys.stderr)
        return None


def _handle_report(args: argparse.Namespace) -> int:
    from kyai.view.sources import ViewError

    if _prepare("report", args) is None:
        return EXIT_USAGE
    try:
        html, _ = page(args, inline_plotly=True)
    except ViewError as exc:
        print(f"kyai report: {exc}", file=sys.stderr)
        return exc.code
    try:
        args.output.write_text(html, encoding="utf-8")
    except OSError as exc:
        print(f"kyai report: {args.output}: cannot be written: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"kyai report: wrote {args.output} ({len(html.encode()) // 1024} KiB)")
    return EXIT_OK


def _handle_view(args: argparse.Namespace) -> int:
    from kyai.view.server import make_server
    from kyai.view.sources import ViewError

    plotly = _prepare("view", args)
    if plotly is None:
        return EXIT_USAGE
    try:
        page(args, inline_plotly=False)  # bad input fails here, before the server starts
        server = make_server(args.port, lambda: page(args, inline_plotly=False), plotly)
    except ViewError as exc:
        print(f"kyai view: {exc}", file=sys.stderr)
        return exc.code
    except OSError as exc:
        print(f"kyai view: cannot listen on 127.0.0.1:{args.port}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"kyai view: serving {server.url} (Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("kyai view: stopped", file=sys.stderr)
    finally:
        server.server_close()
    return EXIT_OK
