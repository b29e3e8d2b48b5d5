"""bench_kernel.py's command-line options, importable without torch (modal_app.py checks a
job's options with them on a machine that may have no torch)."""

from __future__ import annotations

import argparse
import sys

if not __package__:  # run as `python3 benchmarks/NAME.py`: kitpath puts the kit's root on sys.path
    import kitpath  # noqa: F401

import harness  # noqa: E402  the shape sets (harness.py imports no torch at the top)

DESCRIPTION = "Kernel benchmark of submission.py against the read ceiling (needs a CUDA GPU)."
DEFAULT_REPS = 40
ROOFLINE_SHAPES = ("grid", "tests", "both")  # --roofline-shapes (benchmarks/roofline.py's shapes())


def build_parser(parser_class=argparse.ArgumentParser) -> argparse.ArgumentParser:
    """bench_kernel.py's options (``parser_class``: an ArgumentParser subclass, e.g. one whose
    errors raise)."""
    ap = parser_class(prog="python3 benchmarks/bench_kernel.py", description=DESCRIPTION,
                                 epilog="Progress and the table go to stdout. NVFP4_GEMV_BACKEND is ignored: the "
                                        "submission's own (auto) choice is what is timed and recorded.")
    ap.add_argument("--shapes", choices=harness.SHAPE_SETS, default="benchmarks",
                    help="shapes.json set: benchmarks (default), tests (the official correctness cases), or all")
    ap.add_argument("--reps", type=int, default=DEFAULT_REPS,
                    help="timed calls per shape for the device time (median; default %(default)s); with "
                         "--roofline: calls per shape and series under the leaderboard's protocol")
    ap.add_argument("--sweep", action="store_true",
                    help="also time every candidate config of each backend (cuda: a wider grid) and the cuda "
                         "kernel's loads-only probe (minutes)")
    ap.add_argument("--probes", action="store_true",
                    help="with --sweep: also time the loads-only probe of every swept cuda config")
    ap.add_argument("--backends", default="",
                    help="kernel backends to time, comma-separated (default: every backend of the submission's "
                         "registry that races and has configs: cuda, triton in the kit's; those that cannot run "
                         "here are left out)")
    ap.add_argument("--grid", metavar="PATH", default="",
                    help="JSON file {'MxKxL': [cuda config, ...]} replacing the cuda sweep grid (each config a dict of "
                         "submission.CudaConfig's fields, or its fields in order)")
    ap.add_argument("--json", metavar="PATH", default="",
                    help="also write the environment, rows and sweeps as JSON to PATH")
    ap.add_argument("--md", metavar="PATH", default="",
                    help="also write the table as markdown to PATH (the format of benchmarks/RESULTS.md)")
    ap.add_argument("--submission", metavar="PATH", default="",
                    help="time this submission file instead of the kit's submission.py (it must keep the kit's "
                         "public surface: run_backend, config_for, BACKENDS, ...)")
    ap.add_argument("--sms", metavar="N[,N...]|auto", default="",
                    help="SM pressure: rerun in a fresh process per N on a green context of N SMs (0 or 'all': "
                         "the whole GPU), the read ceiling measured at the same N; 'auto': the whole GPU, then "
                         "the N that gives each SM a B200's share of the bytes (see the top of this file)")
    ap.add_argument("--no-server", action="store_true",
                    help="skip the server-protocol timings and custom_kernel's harness rows (faster; --sms "
                         "children always skip them)")
    ap.add_argument("--roofline", action="store_true",
                    help="the roofline view (benchmarks/roofline.py): per shape of a grid over M, K, L and the "
                         "official shapes, each backend's and custom_kernel's time under the leaderboard's "
                         "protocol against floor + bytes / read bandwidth, both measured in the same run; a "
                         "table, and with --json, --md, --plot the record, a page and a PNG (--backends, "
                         "--reps, --submission apply; not with --shapes, --sweep, --probes, --grid, --sms, "
                         "--no-server)")
    ap.add_argument("--roofline-shapes", choices=ROOFLINE_SHAPES, default="both",
                    help="with --roofline: grid (M 128-16384, K 256-16384, L 1-8), tests (shapes.json's test "
                         "and benchmark shapes) or both (default)")
    ap.add_argument("--plot", metavar="PATH", default="",
                    help="with --roofline: also write the plot (PNG, needs matplotlib) to PATH; "
                         "python3 -m benchmarks.roofline --plot-from JSON --out PNG redraws it from --json's record")
    ap.add_argument("--sms-child", type=int, default=-1, help=argparse.SUPPRESS)  # internal: run on N SMs
    return ap


def sms_points(spec: str) -> list:
    """--sms: [0 (the whole GPU), ...] or ["auto"]; raises ValueError on anything else."""
    if spec.strip() == "auto":
        return ["auto"]
    out = []
    for part in spec.split(","):
        part = part.strip()
        if part in ("all", "0"):
            out.append(0)
        elif part.isdigit() and int(part) >= 1:
            out.append(int(part))
        else:
            raise ValueError(f"{part!r} is not an SM count (a positive integer, 0 or 'all'), nor 'auto'")
    return out


if __name__ == "__main__":
    _asked = bool({"-h", "--help"} & set(sys.argv[1:]))
    print(__doc__.split("\n\n")[0] + "\n\nA module, not a command: benchmarks/bench_kernel.py and modal_app.py "
          "import it. Run\n    python3 benchmarks/bench_kernel.py --help", file=sys.stdout if _asked else sys.stderr)
    sys.exit(0 if _asked else 2)
