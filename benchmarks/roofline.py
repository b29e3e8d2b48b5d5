"""The roofline view: each kernel's time under the leaderboard's protocol against the time the
memory system allows for its bytes, over a grid of shapes (``bench_kernel.py --roofline``). This
file holds the definitions, the shapes, the record's views and the plot; the measurement itself is
``bench_kernel.measure_roofline``.

Definitions (everything measured in the same run, on the same GPU):

* **bytes** of a shape: ``timing.gemv_bytes(m, k, l)``, what a GEMV must move (a, sfa, b row 0
  and sfb row 0 of every batch, c).
* **floor**: the median of ``timing.bare_launch_floor`` (the leaderboard's protocol: sync, clear
  the L2, event, launch of an empty Triton kernel, event, sync): the smallest time that protocol
  reports for any one-launch kernel.
* **read bandwidth**: bytes per µs of a plain streaming read of ``READ_BYTES`` (1 GiB, far above
  any L2), ``timing.read_ceiling``: the fastest of its launch shapes, median device time.
* **limit** of a shape = floor + bytes / read bandwidth.
* **time**: ``timing.harness_times`` (the leaderboard's protocol) of a backend with the config
  ``config_for`` picks (cuda, triton: ``run_backend``), and of ``custom_kernel`` ("auto", with the
  backend it ran); mean and median both kept (the leaderboard scores the mean). Every one is
  checked against the exact reference first (``bench_kernel.check_cases``, official and
  full-range data); a wrong result is recorded instead of a time.
* **x limit** = mean time / limit (the JSON also has the median's).

Shapes (``--roofline-shapes``): ``grid`` (``GRID``: M 128-16384, K 256-16384, L 1-8, bytes moved
spread on a log scale from 19 KB to 453 MB), ``tests`` (shapes.json's test and benchmark
shapes) or ``both`` (the default). Output: a table on stdout, and with ``--json`` / ``--md`` /
``--plot`` the record, a markdown page and a PNG (x: bytes moved, log; y: time / limit, log;
one series per backend and auto; official shapes ringed; lines at 1.0 and at the targets,
``TARGETS``). The plot is a function of the JSON record alone:

    python3 -m benchmarks.roofline --plot-from RECORD.json --out roofline.png

redraws it on any machine (no GPU, no torch needed).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

if not __package__:  # run as `python3 benchmarks/NAME.py`: kitpath puts the kit's root on sys.path
    import kitpath  # noqa: F401

import harness  # noqa: E402  shape sets (harness.py imports no torch at the top)
from benchmarks.bench_options import ROOFLINE_SHAPES as SHAPE_CHOICES  # noqa: E402  grid, tests, both

READ_BYTES = 1 << 30  # the streaming read that gives the bandwidth: 1 GiB, 20x an H100's L2
READ_REPS = 20  # timed reads per launch shape (median)
SEED = 1111  # the grid's inputs: the seed shapes.json gives every official case
SERIES = ("cuda", "triton", "auto")  # the plot's order; other backends follow
# The targets the plot and summary check: at most 1.3x the limit for shapes moving 1 MB
# (1e6 bytes) or more, 1.5x below.
TARGET_BYTES = 1_000_000
TARGETS = {"large": 1.3, "small": 1.5}

# (M, K, L), in order of bytes moved (timing.gemv_bytes: 19 KB to 453 MB, successive shapes
# at most 2.01x apart). Small M with long K (128x16384x1, 128x16384x8, 256x7168x1, 256x16384x2),
# large M with short K (16384x256x1, 16384x512x4, 16384x1536x8, 1024x256x1), square-ish between.
GRID = (
    (128, 256, 1), (128, 512, 1), (128, 1024, 1), (1024, 256, 1), (384, 1024, 1), (128, 4096, 1),
    (512, 1536, 1), (128, 8192, 1), (2048, 768, 1), (256, 7168, 1), (128, 16384, 1), (4096, 768, 1),
    (16384, 256, 1), (512, 3072, 4), (256, 16384, 2), (1024, 3072, 4), (128, 16384, 8), (8192, 3072, 1),
    (16384, 512, 4), (1024, 16384, 3), (4096, 2048, 8), (2048, 16384, 3), (8192, 8192, 2),
    (16384, 1536, 8), (8192, 16384, 2), (16384, 8192, 3), (16384, 16384, 2), (16384, 16384, 3),
)


def shapes(which: str = "both", shape_sets: dict | None = None) -> list[dict]:
    """The shapes of ``which`` (``SHAPE_CHOICES``), each {"m", "k", "l", "seed", "sets"}: "sets"
    lists where it comes from ("grid", "test", "benchmark"); a shape in several is listed once."""
    if which not in SHAPE_CHOICES:
        raise ValueError(f"unknown roofline shape set {which!r}; choose from {', '.join(SHAPE_CHOICES)}")
    out: dict = {}

    def add(m, k, l, seed, tag):
        row = out.setdefault((m, k, l), {"m": m, "k": k, "l": l, "seed": seed, "sets": []})
        if tag not in row["sets"]:
            row["sets"].append(tag)

    if which in ("grid", "both"):
        for m, k, l in GRID:
            add(m, k, l, SEED, "grid")
    if which in ("tests", "both"):
        for tag, name in (("test", "tests"), ("benchmark", "benchmarks")):
            for case in harness.shape_set(name, shape_sets):
                add(case["m"], case["k"], case["l"], case["seed"], tag)
    return list(out.values())


def limit_us(nbytes: int, floor_us: float, bytes_per_us: float) -> float:
    """floor + bytes / read bandwidth (µs)."""
    return floor_us + nbytes / bytes_per_us


def target(nbytes: int) -> float:
    """The x-limit target of a shape moving ``nbytes``."""
    return TARGETS["large"] if nbytes >= TARGET_BYTES else TARGETS["small"]


def time_stats(times: list, lim: float) -> dict:
    """The record of one series' times (µs) at one shape: mean, median, each over the limit, count."""
    mean, med = statistics.fmean(times), statistics.median(times)
    return {"mean_us": mean, "median_us": med, "ratio": mean / lim, "median_ratio": med / lim, "n": len(times)}


# --------------------------------------------------------------------------- the record's views

def series_names(record: dict) -> list:
    """The record's series: its backends in SERIES order (others after), then auto."""
    names = list(record.get("backends") or [])
    return sorted(names, key=lambda n: SERIES.index(n) if n in SERIES else len(SERIES)) + ["auto"]


def result_of(row: dict, name: str) -> dict:
    """A row's result for series ``name`` ("auto" or a backend): {} where there is none."""
    return row.get("auto", {}) if name == "auto" else row.get("backends", {}).get(name, {})


def _cell(res: dict) -> str:
    if "wrong" in res:
        return "WRONG"
    if "mean_us" not in res:
        return "-"
    return f"{res['mean_us']:.2f} ({res['ratio']:.2f}x)"


def table_row(row: dict, backends: list) -> str:
    """One markdown table row: shape, sets, MB, limit µs, per series mean µs (x limit), auto's pick."""
    cells = [row["shape"], ", ".join(row.get("sets", [])), f"{row['bytes'] / 1e6:.3g}", f"{row['limit_us']:.2f}"]
    cells += [_cell(result_of(row, n)) for n in list(backends) + ["auto"]]
    cells.append(row.get("auto", {}).get("backend", "?"))
    return "| " + " | ".join(cells) + " |"


def table_lines(record: dict) -> list:
    """The table: one row per shape in order of bytes moved."""
    names = series_names(record)[:-1]
    head = ("| shape (m x k x l) | set | MB | limit µs | "
            + " | ".join(f"{n} µs (x limit)" for n in names + ["auto"]) + " | auto's pick |")
    out = [head, "|" + "---|" * (len(names) + 6)]
    for row in sorted(record["rows"], key=lambda r: (r["bytes"], r["shape"])):
        out.append(table_row(row, names))
    return out


def _geomean(xs) -> float:
    xs = list(xs)
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def summary(record: dict) -> dict:
    """Per series: geomean of x limit over the shapes it timed, how many it timed, how many were
    wrong; for auto on the official test shapes: the geomean of means and how many meet their
    target (``target``)."""
    out = {}
    for name in series_names(record):
        res = [result_of(r, name) for r in record["rows"]]
        timed = [x for x in res if "ratio" in x]
        out[name] = {"geomean_ratio": _geomean(x["ratio"] for x in timed), "timed": len(timed),
                     "wrong": sum("wrong" in x for x in res)}
    tests = [r for r in record["rows"] if "test" in r.get("sets", [])]
    timed = [r for r in tests if "mean_us" in r.get("auto", {})]
    out["tests_auto"] = {
        "shapes": len(tests), "timed": len(timed),
        "geomean_mean_us": _geomean(r["auto"]["mean_us"] for r in timed),
        "within_target": sum(r["auto"]["ratio"] <= target(r["bytes"]) for r in timed),
        "over_target": [r["shape"] for r in timed if r["auto"]["ratio"] > target(r["bytes"])],
    }
    return out


def summary_lines(record: dict) -> list:
    s = record.get("summary") or summary(record)
    out = [f"- {name}: " + (f"geomean {s[name]['geomean_ratio']:.2f}x limit over {s[name]['timed']} shapes"
                            if s[name]["timed"] else "no shape timed")
           + (f", {s[name]['wrong']} wrong" if s[name]["wrong"] else "") for name in series_names(record)]
    t = s["tests_auto"]
    if t["timed"]:
        out.append(f"- auto on the official test shapes: geomean of means {t['geomean_mean_us']:.2f} µs; "
                   f"{t['within_target']} of {t['timed']} timed within target ({TARGETS['large']}x limit from "
                   f"{TARGET_BYTES / 1e6:g} MB, {TARGETS['small']}x below)"
                   + (f"; over: {', '.join(t['over_target'])}" if t["over_target"] else ""))
    return out


def md_lines(record: dict) -> list:
    info = record["info"]
    read = record["read"]
    cap = info.get("capability", ["?", "?"])
    return [
        "# Roofline: time against floor + bytes / read bandwidth", "",
        f"Device: {info.get('device', '?')} (compute capability {cap[0]}.{cap[1]}, {info.get('sms', '?')} SMs). "
        f"Date: {info.get('date', '?')}. Kit {info.get('kit_revision', '?')}, "
        f"kernel {info.get('kernel_revision', '?')}; "
        f"torch {info.get('torch', '?')}, triton {info.get('triton', '?')}.", "",
        f"Command (on a CUDA machine, from the repository root): `{record['command']}`", "",
        f"Floor {record['floor_us']:.2f} µs (an empty Triton kernel under the leaderboard's protocol, median); "
        f"read bandwidth {read['bytes_per_us'] / 1e6:.3f} TB/s (a plain streaming read of {read['bytes']} bytes, "
        f"{read['us']:.1f} µs, median device time). Limit = floor + bytes / bandwidth. Times: the leaderboard's "
        f"protocol (sync, L2 clear, event, call, event, sync), mean of {record.get('reps', '?')} calls (the JSON "
        "also has the median); x limit = mean / limit. auto = custom_kernel, with the backend it ran.", "",
    ] + table_lines(record) + [""] + summary_lines(record) + [""]


# --------------------------------------------------------------------------- the plot

MARKERS = {"cuda": "o", "triton": "s", "auto": "^"}


def plot(record: dict, path) -> None:
    """The PNG at ``path`` of a roofline record (the JSON ``bench_kernel.py --roofline --json``
    writes): x = bytes moved (log), y = mean time / limit (log), one series per backend and
    auto; official test shapes ringed and labelled, benchmark shapes ringed with a square; lines
    at 1.0 and at the targets (TARGETS: 1.3 from 1 MB, 1.5 below). Needs matplotlib only."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 6.2), dpi=120)
    rows = record["rows"]
    ys_all = []
    for name in series_names(record):
        pts = [(r["bytes"], result_of(r, name)["ratio"]) for r in rows if "ratio" in result_of(r, name)]
        if not pts:
            continue
        xs, ys = zip(*sorted(pts), strict=True)
        ys_all += ys
        ax.scatter(xs, ys, marker=MARKERS.get(name, "D"), s=42 if name == "auto" else 26,
                   alpha=0.9 if name == "auto" else 0.6, zorder=3 if name == "auto" else 2,
                   label=f"{name} (geomean {_geomean(ys):.2f}x)")
    for tag, marker, label in (("test", "o", "official test shape"), ("benchmark", "s", "benchmark shape")):
        ringed = [r for r in rows if tag in r.get("sets", []) and "ratio" in r.get("auto", {})]
        if ringed:
            ax.scatter([r["bytes"] for r in ringed], [r["auto"]["ratio"] for r in ringed], marker=marker, s=190,
                       facecolors="none", edgecolors="black", linewidths=1.0, zorder=4, label=f"{label} (auto)")
            for r in ringed:
                ax.annotate(r["shape"], (r["bytes"], r["auto"]["ratio"]), textcoords="offset points",
                            xytext=(6, 6), fontsize=6.5, zorder=5)
    xs_all = [r["bytes"] for r in rows] or [TARGET_BYTES]
    lo, hi = min(xs_all + [TARGET_BYTES]) / 1.5, max(xs_all + [TARGET_BYTES]) * 1.5
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.axhline(1.0, color="black", linewidth=1.0, zorder=1, label="limit: floor + bytes / read bandwidth")
    ax.hlines(TARGETS["large"], TARGET_BYTES, hi, colors="tab:red", linestyles="--", zorder=1,
              label=f"target {TARGETS['large']}x (from {TARGET_BYTES / 1e6:g} MB)")
    ax.hlines(TARGETS["small"], lo, TARGET_BYTES, colors="tab:purple", linestyles=":", zorder=1,
              label=f"target {TARGETS['small']}x (below {TARGET_BYTES / 1e6:g} MB)")
    top = max(ys_all + [TARGETS["small"]]) * 1.25
    ax.set_ylim(min(ys_all + [1.0]) / 1.15, top)
    ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%.1f"))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%.1f"))
    ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.set_xlabel("bytes moved (a, sfa, b row 0, sfb row 0, c)")
    ax.set_ylabel("time / limit (mean under the leaderboard's protocol)")
    info, read = record.get("info", {}), record.get("read", {})
    ax.set_title(f"{info.get('device', '?')}, {info.get('date', '?')}, kit {info.get('kit_revision', '?')}: "
                 f"floor {record.get('floor_us', float('nan')):.2f} µs, "
                 f"read {read.get('bytes_per_us', float('nan')) / 1e6:.2f} TB/s", fontsize=9)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7.5, loc="upper right")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def main(argv: list | None = None) -> int:
    """``python3 -m benchmarks.roofline --plot-from JSON --out PNG``: redraw a record's plot."""
    ap = argparse.ArgumentParser(
        prog="python3 -m benchmarks.roofline",
        description="Redraw the plot of a roofline record (the JSON of python3 benchmarks/bench_kernel.py "
                    "--roofline --json PATH); no GPU needed. The measurement itself: bench_kernel.py --roofline.")
    ap.add_argument("--plot-from", metavar="JSON", required=True, help="a roofline record (bench_kernel.py "
                    "--roofline --json)")
    ap.add_argument("--out", metavar="PNG", required=True, help="the PNG to write")
    args = ap.parse_args(argv)
    problem = harness.writable_file_problem(args.out, "--out", "roofline.png")
    if problem:
        print(f"roofline: {problem}", file=sys.stderr)
        return 2
    try:
        record = json.loads(Path(args.plot_from).read_text())
    except (OSError, ValueError) as exc:
        print(f"roofline: {args.plot_from}: not a readable JSON file ({type(exc).__name__}: {exc})", file=sys.stderr)
        return 2
    if not isinstance(record, dict) or not isinstance(record.get("rows"), list) or "read" not in record:
        print(f"roofline: {args.plot_from}: not a roofline record (bench_kernel.py --roofline --json writes one)",
              file=sys.stderr)
        return 2
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("roofline: the plot needs matplotlib (python3 -m pip install matplotlib)", file=sys.stderr)
        return 2
    plot(record, args.out)
    print(f"wrote plot: {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
