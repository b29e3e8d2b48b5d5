"""A B200 projection of the cuda backend from a model calibrated on the H200 (CPU only).

The model, per shape (m x k x l) and config on a GPU of S SMs at clock f (CLOCK_HZ):

    time = t0 + (read^2 + issue^2 + latency^2)^(1/2)

* read = bytes / read bandwidth (bytes: benchmarks/timing.gemv_bytes). t0 and the bandwidth are
  the line through the GPU's read ceilings over the three benchmark shapes
  (benchmarks/inflight.py ``read_fit``: the fixed cost of a timed read, its slope). On the B200:
  bench_kernel.py's B200_READ_BPS (6.0 TB/s, a measured copy rate) and the H200's t0 (an
  assumption: the same launch, ramp and drain).
* issue = the K loop's warp instructions / (S x 4 per cycle x f): SASS per 16 B of a and lane
  (sm_90a for the H200, sm_100a for the B200) x the 16-byte chunks of a / 32 lanes; one warp
  instruction per cycle per SM sub-partition, Hopper and Blackwell alike; f = 1.98 GHz, the
  H100 SXM's top boost clock, the B200's taken to be about the same ("clock speeds are similar
  to the H100's high power SXM5 variant", https://chipsandcheese.com/p/nvidias-b200-keeping-the-cuda-juggernaut).
* latency = waves x steps x (trips x L + L2 + N x c / f), what a warp that waits on its own loads
  takes: each step of the K loop is ``trips`` DRAM round trips of latency L (the step's loads of a
  over those in flight before first use, rounded up: benchmarks/inflight.py counts both in the
  SASS), one L2 round trip more where b's loads wait for a's (pipe a_first without bsh), then its
  N instructions (the loop's length) at c cycles each. ``steps``: a warp's share of the row's
  steps (ks x kb parts); ``waves``: the busiest SM's blocks (ceil(grid / S)) over the blocks
  resident per SM (registers, threads, shared memory: benchmarks/inflight.py ``occupancy``). L and
  the L2 latency: benchmarks/inflight.py's per GPU (cited unloaded latencies until
  benchmarks/latency.py has measured the loaded one; ``--latency FILE``).
* c, cycles per instruction of one warp's arithmetic between its waits (its dependency chains
  and the issue slots it shares), is the one constant fitted: to the H200's measured kernel
  times (benchmarks/inflight.py H200_POINTS: five configs on one H200, 2026-11-25, kit c3c10fd),
  least squares in log time. The same c is then used for the B200's sm_100a loops.
* The terms overlap only in part, so they combine as a smooth maximum, the root of the sum of
  squares (NORM = 2). The exponent was chosen on the same five H200 points: with a hard maximum
  the best c is 6.2 cycles and the points lie 0.89-1.15 of the model; with NORM = 2, c is about
  0.9 cycles and they lie within 2% (1.5 to 50 in between and beyond are worse). Two choices made
  on five points: the H200 fit is not a test of the model, the first B200 run is. A warp issues
  at most one instruction a cycle, so c < 1 says the latency term is a little large already at
  the unloaded latency; at twice that latency no c fits (the search stops at its bound and the
  K = 16384 point lies 8% below the model): a measured loaded latency well above the unloaded
  one would refute the per-step round trip as counted here.

A bulk-copy ring (CudaConfig ring > 0) has its own latency term (``_ring_latency``): its warps
wait on barriers, not on their own loads, so the larger of Little's law over the ring's bytes in
flight per SM and one consumer warp's stages in a row at c cycles an instruction. Not fitted: on
five H200 ring times (2026-11-28, benchmarks/history/2026-11-28-h200-8969eb7-6f6b4fd.md) the
model with the tiles' c put them at 0.97-1.09 of itself.

The issue term is the model of the earlier projection (kept, and checked against the H100 by
``FULL.json SMS.json`` below); the latency term is what the H200 and an H100 at 96 SMs showed
(benchmarks/NOTES.md, "The cuda kernel at 96 SMs (an H200's bytes per SM)"): too few warps, each
waiting on its own loads. What is left out: the K-split epilogue, b's shared-memory traffic,
DRAM queueing beyond L (the smooth maximum with the read term stands in for it), the tail of a
grid that does not divide the SMs within a wave.

The B200 rows are a projection, never a measurement. benchmarks/results/b200-inflight.json
(written by ``python3 benchmarks/inflight.py --json``, of the same kernel revision) supplies the
SASS counts; a config it lacks is compiled (NVRTC and the cuobjdump of Triton's wheel). The
Modal bench job prints a B200 run's times beside this projection (``measured_beside_projected``).

With ``FULL.json SMS.json`` (bench_kernel.py --json outputs on an H100: one at full width with the
harness rows, one of --sms with the B200-equivalent point) it first prints the issue model
(max(bytes / read, issue) + the per-call floor) against the H100's measured device times at full
width and at the SM-pressure point. A file that is not such a record (or lacks a field the
projection reads): one line on stderr naming what is wrong, exit 2.

Usage: python3 benchmarks/projection.py [--latency FILE ...] [--md FILE] [FULL.json SMS.json]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

if not __package__:  # run as `python3 benchmarks/NAME.py`: kitpath puts the kit's root on sys.path
    import kitpath  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent

import harness  # noqa: E402
import submission  # noqa: E402
from benchmarks import inflight, refusals, sass_count, timing  # noqa: E402
from benchmarks.bench_kernel import B200_READ_BPS, B200_SMS  # noqa: E402

CLOCK_HZ = inflight.CLOCK_HZ
ISSUE_PER_CYCLE = 4
OFFICIAL_READ_BPS = 7.66e12  # the official speed of light's bandwidth (shapes.json)
NORM = 2  # the terms combine as (read^2 + issue^2 + latency^2)^(1/2): see the docstring


def issue_us(m: int, k: int, l: int, per_chunk: float, sms: int) -> float:
    warp_insts = m * k // 32 * l / 32 * per_chunk
    return warp_insts / (sms * ISSUE_PER_CYCLE * CLOCK_HZ) * 1e6


# ----------------------------------------------------------------------------- the model


class Machine:
    """What the model needs of a GPU: SMs, the read line (t0 µs, bytes/s), DRAM and L2 latency (ns)."""

    def __init__(self, name: str, sms: int, t0_us: float, read_bps: float, latency_ns: float, l2_ns: float):
        self.name, self.sms, self.t0_us, self.read_bps = name, sms, t0_us, read_bps
        self.latency_ns, self.l2_ns = latency_ns, l2_ns

    def __repr__(self) -> str:
        return (f"{self.name}: {self.sms} SMs, read {self.read_bps / 1e12:.2f} TB/s + {self.t0_us:.2f} µs, "
                f"DRAM latency {self.latency_ns:.0f} ns, L2 {self.l2_ns:.0f} ns, {CLOCK_HZ / 1e9:.2f} GHz")


def machines(gpus: dict | None = None) -> dict:
    """The H200 (calibration) and the B200 (projection) from benchmarks/inflight.py's GPUs
    (``inflight.default_gpus()`` unless given, e.g. with latency.py's measurements): the B200's
    latency is its cited one scaled by the H200's loaded / cited where the H200's was measured."""
    gpus = gpus or inflight.default_gpus()
    cited = inflight.default_gpus()
    t0, bps = inflight.read_fit(inflight.READ_RECORDS["H200"])
    l2 = {g: c / CLOCK_HZ * 1e9 for g, c in inflight.CITED_L2_CYCLES.items()}
    scale = gpus["H200"].latency_ns / cited["H200"].latency_ns
    return {"H200": Machine("H200", gpus["H200"].sms, t0, bps, gpus["H200"].latency_ns, l2["H100"]),
            "B200": Machine("B200", B200_SMS, t0, B200_READ_BPS, gpus["B200"].latency_ns * scale, l2["B200"])}


def _ring_latency(shape: tuple, cfg, counts: dict, gpu: Machine, c: float) -> dict:
    """A bulk-copy ring's latency term (µs): its warps wait on barriers, not on their own loads, so
    the larger of Little's law over the ring's bytes in flight per SM (a's bytes per SM x L /
    those in flight: benchmarks/inflight.py's count of the slots) and one consumer warp's stages
    one after another (stages x its loop's N instructions x c / f)."""
    m, k, l = shape
    threads = submission.cuda_grid(cfg, m, l, None)[1]
    units = m // cfg.rows * l
    grid = min(units, cfg.minb * gpu.sms)
    smem = submission.ring_smem(cfg, k, submission.ring_batches(units, m // cfg.rows, grid))
    occ = inflight.occupancy(counts["registers"], threads, counts["shared"] + smem)
    if not occ["blocks"]:
        raise ValueError(f"{cfg!r}: no block fits an SM ({counts['registers']} registers, {smem} B shared)")
    blocks = min(occ["blocks"], -(-grid // gpu.sms))
    waves = -(-grid // (occ["blocks"] * gpu.sms))
    per_unit = 1 if cfg.rpt > 1 else (k // 32) // (32 * cfg.u)
    units_per_block = -(-units // grid)
    stages = waves * -(-units_per_block // cfg.warps) * per_unit // cfg.ks
    little = m * k // 2 * l / gpu.sms * gpu.latency_ns / (counts["ring_bytes"] * blocks) / 1e3
    chain = stages * counts["loop"] * c / CLOCK_HZ * 1e6
    return {"latency": max(little, chain), "waves": waves, "steps": stages, "trips": 0}


def terms(shape: tuple, cfg, counts: dict, gpu: Machine, c: float) -> dict:
    """The model's terms (µs) for ``cfg`` on ``shape``: read, issue, latency, and time = t0 + their
    max (a ring's latency term: ``_ring_latency``)."""
    m, k, l = shape
    cfg = submission.CudaConfig.of(cfg)
    if cfg.ring:
        out = {"read": timing.gemv_bytes(m, k, l) / gpu.read_bps * 1e6,
               "issue": issue_us(m, k, l, counts["per_chunk"], gpu.sms), **_ring_latency(shape, cfg, counts, gpu, c)}
        out["time"] = gpu.t0_us + sum(out[x] ** NORM for x in ("read", "issue", "latency")) ** (1 / NORM)
        out["bound"] = max(("read", "issue", "latency"), key=out.get)
        return out
    chunks = k // 32
    nsteps = -(-chunks // (cfg.lpr * cfg.u))
    steps = -(-nsteps // (cfg.ks * cfg.kb))
    groups = m // cfg.rows
    blocks_x = min(groups, cfg.gs * gpu.sms) if cfg.gs else groups
    steps *= -(-groups // blocks_x)  # a grid-stride block walks several row groups
    occ = inflight.occupancy(counts["registers"], 32 * cfg.warps * cfg.ks, counts["shared"])
    if not occ["blocks"]:
        raise ValueError(f"{cfg!r}: no block fits an SM ({counts['registers']} registers)")
    busiest = -(-blocks_x * l * cfg.kb // gpu.sms)  # blocks of the busiest SM
    waves = -(-busiest // occ["blocks"])
    trips = -(-counts["loads"] // max(1, counts["burst"]))
    l2 = gpu.l2_ns if cfg.pipe == "a_first" and not cfg.bsh else 0.0
    step_ns = trips * gpu.latency_ns + l2 + counts["loop"] * c / CLOCK_HZ * 1e9
    out = {"read": timing.gemv_bytes(m, k, l) / gpu.read_bps * 1e6,
           "issue": issue_us(m, k, l, counts["per_chunk"], gpu.sms),
           "latency": waves * steps * step_ns / 1e3, "waves": waves, "steps": steps, "trips": trips}
    out["time"] = gpu.t0_us + sum(out[x] ** NORM for x in ("read", "issue", "latency")) ** (1 / NORM)
    out["bound"] = max(("read", "issue", "latency"), key=out.get)
    return out


def fit_c(points: list, gpu: Machine, lo: float = 0.05, hi: float = 50.0) -> float:
    """The c that minimises the sum of squared log(model / measured) over ``points`` ((shape, config,
    counts, measured µs)): a golden-section search on log c (the sum is flat where no point is
    latency-bound; then the smallest c of the flat part is returned)."""
    def loss(logc):
        return sum(math.log(terms(s, cfg, n, gpu, math.exp(logc))["time"] / us) ** 2 for s, cfg, n, us in points)

    a, b = math.log(lo), math.log(hi)
    grid = [a + (b - a) * i / 200 for i in range(201)]
    best = min(grid, key=lambda x: (round(loss(x), 12), x))
    a, b = max(a, best - (b - a) / 200), min(b, best + (b - a) / 200)
    g = (math.sqrt(5) - 1) / 2
    for _ in range(60):
        x1, x2 = b - g * (b - a), a + g * (b - a)
        if loss(x1) <= loss(x2):
            b = x2
        else:
            a = x1
    return math.exp((a + b) / 2)


# ----------------------------------------------------------------------------- counts


_STORE = []


def counts(cfg, arch: str) -> dict | None:
    """benchmarks/inflight.py's counts of ``cfg`` for ``arch``: from its JSON record of this kernel
    revision, else compiled here; None where neither can be had (no NVRTC or cuobjdump). A kernel
    that does not compile raises CudaBuildError, its message one line naming the config and the
    arch (``refusals.build_line``)."""
    cfg = submission.CudaConfig.of(cfg)
    if cfg.decode is None:
        cfg = cfg.with_decode((10, 0) if arch.startswith("sm_10") else (9, 0))
    if not _STORE:
        _STORE.append(inflight.stored())
    hit = _STORE[0].get((cfg, arch))
    if hit is not None:
        return hit
    try:
        return inflight.measure(cfg, arch)
    except (submission.CudaBuildError, OSError, ValueError, subprocess.CalledProcessError) as exc:
        if isinstance(exc, submission.CudaBuildError) and refusals.compile_failure(exc):
            raise submission.CudaBuildError(refusals.build_line(exc, cfg, arch)) from None
        why = harness.one_line(f"{type(exc).__name__}: {exc}")
        print(f"projection.py: no SASS counts for {cfg!r} on {arch} ({why})", file=sys.stderr)
        return None


def calibration(gpu: Machine) -> tuple[float, list]:
    """(c, rows): c fitted to the H200 points, and per point (shape, config, counts, measured µs, terms)."""
    points = []
    for shape, cfg, us in inflight.H200_POINTS:
        n = counts(cfg, "sm_90a")
        if n is None:
            raise submission.CudaBuildError("the H200 calibration needs the SASS counts of its configs (NVRTC)")
        points.append((shape, submission.CudaConfig.of(cfg), n, us))
    c = fit_c(points, gpu)
    return c, [(s, cfg, n, us, terms(s, cfg, n, gpu, c)) for s, cfg, n, us in points]


def _cfg_text(cfg) -> str:
    return repr(submission.CudaConfig.of(cfg))[len("CudaConfig("):-1]


def _shape(shape: tuple) -> str:
    return "x".join(map(str, shape))


def calibration_table(gpu: Machine, c: float, rows: list) -> list:
    out = [f"## The H200 calibration ({gpu!r})", "",
           f"Fitted: c = {c:.2f} cycles per instruction of a warp's arithmetic between its waits"
           + (" (at the search's bound: no c fits these points)" if not 0.06 < c < 49 else "") + ". Measured: clean "
           "device time, one H200, 2026-11-25, kit c3c10fd "
           "(benchmarks/history/2026-11-25-h100-h200-c3c10fd-c0e828a.md); counts: today's kernel for sm_90a.", "",
           "| shape | config | SASS per 16 B | loads in flight / step | registers | read µs | issue µs | latency µs "
           "| model µs | measured µs | measured / model |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s, cfg, n, us, t in rows:
        out.append(f"| {_shape(s)} | {_cfg_text(cfg)} | {n['per_chunk']:.1f} | {n['burst']} / {n['loads']} | "
                   f"{n['registers']} | {t['read']:.2f} | {t['issue']:.2f} | {t['latency']:.2f} | {t['time']:.2f} | "
                   f"{us:.2f} | {us / t['time']:.3f} |")
    return out


def b200_rows(gpu: Machine, c: float) -> list:
    """Per benchmark shape, every B200 candidate's projection, fastest first: (shape, config, role, counts, terms)."""
    out = []
    for shape in submission.TUNED_SHAPES:
        rows = []
        for cfg, role in inflight.candidates(shape):
            n = counts(cfg, "sm_100a")
            if n is not None:
                rows.append((shape, cfg, role, n, terms(shape, cfg, n, gpu, c)))
        out += sorted(rows, key=lambda r: r[4]["time"])
    return out


def b200_table(gpu: Machine, c: float, rows: list) -> list:
    out = [f"## B200 projection (a model, not a measurement; {gpu!r}; c = {c:.2f})", "",
           "Per shape, fastest first. read / projected: the share of the projected read ceiling (t0 + read) the "
           "kernel would reach.", "",
           "| shape | config | role | SASS per 16 B | read µs | issue µs | latency µs (waves x steps, trips) | bound "
           "| projected µs | read / projected |", "|---|---|---|---|---|---|---|---|---|---|"]
    for s, cfg, role, n, t in rows:
        out.append(f"| {_shape(s)} | {_cfg_text(cfg)} | {role} | {n['per_chunk']:.1f} | {t['read']:.2f} | "
                   f"{t['issue']:.2f} | {t['latency']:.2f} ({t['waves']} x {t['steps']}, {t['trips']}) | "
                   f"{t['bound']} | {t['time']:.2f} | {(gpu.t0_us + t['read']) / t['time']:.3f} |")
    return out


def measured_beside_projected(record: dict, gpus: dict | None = None) -> list:
    """Markdown: a bench_kernel.py record's cuda rows (a B200 run's) beside the projection of the
    config each ran: shape, config, measured µs (clean device time), projected µs, measured /
    projected, and the read ceiling measured / projected (which of the two parts missed). [] where
    the record has no timed cuda row; a row whose counts cannot be had says so."""
    rows = [r for r in _cuda_rows(record) if isinstance(r.get("shape"), str)]
    if not rows:
        return []
    ms = machines(gpus)
    try:
        c, _ = calibration(ms["H200"])
    except submission.CudaBuildError as exc:
        return ["## B200: measured beside the projection", "", f"not projected: {exc}"]
    gpu = ms["B200"]
    out = ["## B200: measured beside the projection", "",
           f"Projection: benchmarks/projection.py ({gpu!r}, c = {c:.2f} from the H200). Measured: this run's clean "
           "device time. A ratio near 1 confirms the model; the read ceilings' ratio says whether the miss is the "
           "memory's or the kernel's.", "",
           "| shape | config | measured µs | projected µs | measured / projected | read ceiling: measured / projected "
           "µs |", "|---|---|---|---|---|---|"]
    for r in rows:
        shape = tuple(int(x) for x in r["shape"].split("x"))
        try:
            cfg = submission.CudaConfig.of(r["config"]).with_decode((10, 0))
            n = counts(cfg, "sm_100a")
            t = terms(shape, cfg, n, gpu, c) if n else None
        except (TypeError, ValueError) as exc:
            cfg, t = r.get("config"), None
            print(f"projection.py: {r['shape']}: config {cfg!r} not projected ({exc})", file=sys.stderr)
        ceiling = r.get("ceiling_us")
        read_cell = (f"{ceiling:.2f} / {gpu.t0_us + t['read']:.2f}" if t and isinstance(ceiling, (int, float))
                     else "-")
        cfg_text = _cfg_text(cfg) if hasattr(cfg, "_fields") else str(cfg)
        if t:
            out.append(f"| {r['shape']} | {cfg_text} | {r['kernel_us']:.2f} | {t['time']:.2f} | "
                       f"{r['kernel_us'] / t['time']:.3f} | {read_cell} |")
        else:
            out.append(f"| {r['shape']} | {cfg_text} | {r['kernel_us']:.2f} | - (no SASS counts) | - | - |")
    return out


# ----------------------------------------------------------------------------- the H100 check


def _rows(run: dict) -> dict:
    return {r["shape"]: r for r in run.get("rows", []) if r.get("backend") == "cuda" and "kernel_us" in r}


def project(full: dict, sms_run: dict) -> list[str]:
    """The issue model (max(read ceiling, issue)) against an H100's measured device times, at full
    width and at the SM-pressure point."""
    full_rows = _rows(full)
    point = next((p for p in sms_run.get("points", []) if p.get("sms")), {})
    n = point.get("sms") or 0
    pressure_rows = _rows(point)
    device_sms = full["info"]["sms"]
    out = [f"## The issue model on the H100 ({full['info']['device']}, {full['info']['date']}): model vs measured "
           f"device time, µs (full width: {device_sms} SMs; pressure: {n} SMs)", "",
           "| shape | full: config, SASS/16 B (sm_90a), read, issue, model, measured, measured/model "
           "| pressure: the same |", "|---|---|---|"]
    for shape in full_rows:
        m, k, l = (int(x) for x in shape.split("x"))
        cells = []
        for rows, sms in ((full_rows, device_sms), (pressure_rows, n)):
            p = rows.get(shape)
            if p is None:
                cells.append("-")
                continue
            cfg = submission.CudaConfig.of(p["config"])
            try:
                per = sass_count.count(cfg, "sm_90a")["per_chunk"]
            except submission.CudaBuildError as exc:
                raise submission.CudaBuildError(refusals.build_line(exc, cfg, "sm_90a")) from None
            iss = issue_us(m, k, l, per, sms)
            model = max(p["ceiling_us"], iss)
            cells.append(f"{cfg}, {per:.1f}, {p['ceiling_us']:.2f}, {iss:.2f}, {model:.2f}, {p['kernel_us']:.2f}, "
                         f"{p['kernel_us'] / model:.2f}")
        out.append(f"| {shape} | {cells[0]} | {cells[1]} |")
    return out


CUDA_ROW_KEYS = ("shape", "config", "kernel_us", "ceiling_us", "bytes")


def _cuda_rows(record: dict) -> list:
    """The rows of a bench_kernel.py record that the projection reads: the cuda backend's, timed."""
    rows = record.get("rows")
    return [r for r in rows if isinstance(r, dict) and r.get("backend") == "cuda" and "kernel_us" in r] \
        if isinstance(rows, list) else []


def record_problem(full, sms_run, full_name: str = "FULL.json", sms_name: str = "SMS.json") -> str:
    """What makes the two records unusable for ``project``, in one line ("" when nothing): each must
    be the bench_kernel.py --json record the usage names, with the fields the projection reads."""
    for name, record, what in ((full_name, full, "a bench_kernel.py --json record at full width"),
                               (sms_name, sms_run, "a bench_kernel.py --sms ... --json record")):
        if not isinstance(record, dict):
            return f"{name}: a JSON {type(record).__name__}, not {what} (a JSON object)"
    info = full.get("info")
    if "points" in full and "rows" not in full:
        return (f"{full_name}: a bench_kernel.py --sms record (points, no rows): the full-width record comes "
                "first, the --sms one second")
    if not isinstance(info, dict) or not isinstance(info.get("sms"), int) or info["sms"] < 1:
        return f"{full_name}: no info.sms (the GPU's SM count): not a bench_kernel.py --json record at full width"
    rows = _cuda_rows(full)
    if not rows:
        return (f"{full_name}: no row of the cuda backend with a kernel time (rows[] with backend cuda and kernel_us):"
                " run bench_kernel.py with the cuda backend")
    missing = sorted({key for r in rows for key in CUDA_ROW_KEYS if key not in r})
    if missing:
        return f"{full_name}: cuda rows without {', '.join(missing)}: not a bench_kernel.py --json record"
    if not any(isinstance(r, dict) and "floor_us" in r for r in full.get("rows", [])):
        return (f"{full_name}: no harness row with floor_us (the per-call cost): run bench_kernel.py without "
                "--no-server")
    points = sms_run.get("points")
    if not isinstance(points, list):
        return f"{sms_name}: no points[]: not a bench_kernel.py --sms ... --json record"
    if not any(isinstance(p, dict) and p.get("sms") and _cuda_rows(p) for p in points):
        return (f"{sms_name}: no point below full width (points[].sms > 0) with a cuda row: run bench_kernel.py "
                "--sms auto (or --sms N) with the cuda backend")
    return ""


def paper(gpus: dict | None = None) -> list[str]:
    """The calibration and the B200 projection, as Markdown lines."""
    ms = machines(gpus)
    c, rows = calibration(ms["H200"])
    return calibration_table(ms["H200"], c, rows) + [""] + b200_table(ms["B200"], c, b200_rows(ms["B200"], c))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 benchmarks/projection.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("records", nargs="*", metavar="FULL.json SMS.json",
                    help="bench_kernel.py --json output at full width (with the harness rows), then its --sms ... "
                         "--json output (the first point below full width is used): the H100 check first")
    ap.add_argument("--latency", action="append", default=[], metavar="FILE",
                    help="a benchmarks/latency.py --json record (H200 or B200): its measured latency replaces the "
                         "cited one (repeatable)")
    ap.add_argument("--md", default="", help="write the Markdown here too")
    args = ap.parse_args(argv)
    if len(args.records) not in (0, 2):
        print(f"projection.py: {len(args.records)} record(s) given: FULL.json and SMS.json go together",
              file=sys.stderr)
        return 2
    gpus = inflight.default_gpus()
    for path in args.latency:
        try:
            record = json.loads(Path(path).read_text())
            gpus = inflight.with_measured(gpus, record)
        except (OSError, ValueError) as exc:
            print(f"projection.py: {path}: {exc}", file=sys.stderr)
            return 2
        if inflight.gpu_label(str(record.get("device", ""))) not in ("H200", "B200"):  # H100: nothing reads it
            print(f"projection.py: --latency {path}: a record of {record.get('device')}; the projection reads the "
                  "H200's (its calibration) and the B200's", file=sys.stderr)
            return 2
    problem = harness.writable_file_problem(args.md or None, "--md", "b200-projection.md")
    if problem:
        print(f"projection.py: {problem}", file=sys.stderr)
        return 2
    lines = []
    if args.records:
        records = []
        for path in args.records:
            try:
                records.append(json.loads(Path(path).read_text()))
            except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
                print(f"projection.py: {path}: not a readable JSON file ({type(exc).__name__}: {exc})",
                      file=sys.stderr)
                return 2
        full, sms_run = records
        problem = record_problem(full, sms_run, *args.records)
        if problem:
            print(f"projection.py: {problem}", file=sys.stderr)
            return 2
        try:
            lines = project(full, sms_run) + [""]
        except submission.CudaBuildError as exc:
            print(f"projection.py: {exc}", file=sys.stderr)
            return 2
        except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a field of the right name, the wrong kind
            print(f"projection.py: {args.records[0]} / {args.records[1]}: a field the projection reads is malformed "
                  f"({type(exc).__name__}: {exc})", file=sys.stderr)
            return 2
    try:
        lines += paper(gpus)
    except submission.CudaBuildError as exc:
        print(f"projection.py: {exc}", file=sys.stderr)
        return 2
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.md:
        measured = [g.name for g in gpus.values() if g.source.startswith("measured")]
        head = ["# A B200 projection of the cuda kernel, calibrated on the H200", "",
                f"Generated by `python3 benchmarks/projection.py{''.join(f' --latency {p}' for p in args.latency)} "
                f"--md {args.md}` on {time.strftime('%Y-%m-%d')} (CPU; kernel revision {submission.kernel_revision()}; "
                "SASS counts: benchmarks/results/b200-inflight.json). The model and its sources: the docstring of "
                "benchmarks/projection.py. DRAM latencies: "
                + (f"measured on {', '.join(measured)} (benchmarks/latency.py), the rest cited"
                   if measured else "cited and unloaded (benchmarks/results/b200-inflight.md), until "
                   "benchmarks/latency.py has measured the loaded ones")
                + ". Nothing here is measured on a B200.", ""]
        Path(args.md).write_text("\n".join(head) + "\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
