"""A B200 projection of the cuda backend from a model, checked against the H100 first (CPU only).

The model, per benchmark shape:

    time = max(bytes / read bandwidth, issued instructions / (SMs x 4 per cycle x clock)) + per-call cost

* bytes: what the GEMV must move (benchmarks/timing.gemv_bytes); read bandwidth: on the H100 the
  read ceiling measured in the same run (at that SM count); on the B200 B200_READ_BPS of
  bench_kernel.py (6.0 TB/s, a measured copy rate) and, as the optimistic end, the 7.66 TB/s
  behind the official speed of light.
* issued instructions: the K loop's SASS instructions per 16 bytes of a and lane
  (benchmarks/sass_count.py; sm_90a for the H100's config, sm_100a for the B200's) times the
  16-byte chunks of a, over 32 lanes per warp instruction; the prologue, b's reads outside the
  loop and the reduction are left out.
* 4 warp instructions per cycle per SM (one per SM sub-partition, Hopper and Blackwell alike),
  at CLOCK_HZ: the H100 SXM's top boost clock; the B200's is taken to be about the same
  ("clock speeds are similar to the H100's high power SXM5 variant",
  https://chipsandcheese.com/p/nvidias-b200-keeping-the-cuda-juggernaut). An assumption.
* per-call cost: the harness time of an empty kernel under the leaderboard's protocol, measured
  on the H100 in the same run (bench_kernel.py's floor), taken as the B200's too.

The H100 rows compare the model with the measured device time at full width and at the
SM-pressure point: their ratio says how far the model can be trusted (it ignores latency,
occupancy and the integer pipe's half rate, so it can only be optimistic). The B200 rows are a
projection, never a measurement: "model" as above, "adjusted" multiplied by the H100's
measured / model ratio at the SM-pressure point (where each H100 SM carries a B200 SM's bytes).

Usage: python3 benchmarks/projection.py FULL.json SMS.json   (bench_kernel.py --json outputs:
one at full width with the harness rows, one of --sms with the B200-equivalent point). A file that
is not such a record (or lacks a field the projection reads): one line on stderr naming what is
wrong, exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if not __package__:  # run as `python3 benchmarks/NAME.py`: kitpath puts the kit's root on sys.path
    import kitpath  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent

import submission  # noqa: E402
from benchmarks import sass_count  # noqa: E402
from benchmarks.bench_kernel import B200_READ_BPS, B200_SMS  # noqa: E402

CLOCK_HZ = 1.98e9
ISSUE_PER_CYCLE = 4
OFFICIAL_READ_BPS = 7.66e12  # the official speed of light's bandwidth (shapes.json)


def issue_us(m: int, k: int, l: int, per_chunk: float, sms: int) -> float:
    warp_insts = m * k // 32 * l / 32 * per_chunk
    return warp_insts / (sms * ISSUE_PER_CYCLE * CLOCK_HZ) * 1e6


def _rows(run: dict) -> dict:
    return {r["shape"]: r for r in run.get("rows", []) if r.get("backend") == "cuda" and "kernel_us" in r}


def project(full: dict, sms_run: dict) -> list[str]:
    full_rows = _rows(full)
    floor = next((r["floor_us"] for r in full.get("rows", []) if "floor_us" in r), 0.0)
    point = next((p for p in sms_run.get("points", []) if p.get("sms")), {})
    n = point.get("sms") or 0
    pressure_rows = _rows(point)
    device_sms = full["info"]["sms"]
    out = [f"H100 ({full['info']['device']}, {full['info']['date']}): model vs measured device time, µs "
           f"(full width: {device_sms} SMs; pressure: {n} SMs)", "",
           "| shape | full: config, SASS/16 B (sm_90a), read, issue, model, measured, measured/model "
           "| pressure: the same |", "|---|---|---|"]
    factors = {}
    for shape in full_rows:
        m, k, l = (int(x) for x in shape.split("x"))
        cells = []
        for rows, sms in ((full_rows, device_sms), (pressure_rows, n)):
            p = rows.get(shape)
            if p is None:
                cells.append("-")
                continue
            cfg = submission.CudaConfig.of(p["config"])
            per = sass_count.count(cfg, "sm_90a")["per_chunk"]
            iss = issue_us(m, k, l, per, sms)
            model = max(p["ceiling_us"], iss)
            cells.append(f"{cfg}, {per:.1f}, {p['ceiling_us']:.2f}, {iss:.2f}, {model:.2f}, {p['kernel_us']:.2f}, "
                         f"{p['kernel_us'] / model:.2f}")
            factors[shape] = p["kernel_us"] / model  # the pressure point's, where there is one
        out.append(f"| {shape} | {cells[0]} | {cells[1]} |")
    out += ["", f"B200 projection (a model, not a measurement): bytes at {B200_READ_BPS / 1e12:.2f} TB/s "
            f"(and {OFFICIAL_READ_BPS / 1e12:.2f}), {B200_SMS} SMs, {CLOCK_HZ / 1e9:.2f} GHz, per-call cost "
            f"{floor:.2f} µs (the H100's floor); adjusted = model x the H100's measured/model at {n} SMs", "",
            "| shape | B200 config (sm_100a) | SASS/16 B | read µs | issue µs | model µs | adjusted µs "
            "| official speed of light µs |", "|---|---|---|---|---|---|---|---|"]
    sol = {f"{s['m']}x{s['k']}x{s['l']}": s.get("sol_us") for s in json.loads((ROOT / "shapes.json").read_text())
           ["benchmarks"]}
    for shape in full_rows:
        m, k, l = (int(x) for x in shape.split("x"))
        cands = [c for c in submission.BACKENDS["cuda"].candidates(m, k, l, (10, 0)) if c.decode == "f16x2"]
        counts = {c: sass_count.count(c, "sm_100a")["per_chunk"] for c in cands}
        cfg = min(counts, key=counts.get)
        nbytes = full_rows[shape]["bytes"]
        read = nbytes / B200_READ_BPS * 1e6
        iss = issue_us(m, k, l, counts[cfg], B200_SMS)
        model = max(read, iss) + floor
        adjusted = max(read, iss) * factors.get(shape, float("nan")) + floor
        out.append(f"| {shape} | {cfg} | {counts[cfg]:.1f} | {read:.2f} ({nbytes / OFFICIAL_READ_BPS * 1e6:.2f}) | "
                   f"{iss:.2f} | {model:.2f} | {adjusted:.2f} | {sol.get(shape)} |")
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 benchmarks/projection.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("full", help="bench_kernel.py --json output at full width (with the harness rows)")
    ap.add_argument("sms", help="bench_kernel.py --sms ... --json output (its first point below full width is used)")
    args = ap.parse_args(argv)
    try:
        full, sms_run = (json.loads(Path(p).read_text()) for p in (args.full, args.sms))
    except (OSError, ValueError) as exc:
        print(f"projection.py: {exc}", file=sys.stderr)
        return 2
    problem = record_problem(full, sms_run, args.full, args.sms)
    if problem:
        print(f"projection.py: {problem}", file=sys.stderr)
        return 2
    try:
        lines = project(full, sms_run)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a field of the right name, the wrong kind
        print(f"projection.py: {args.full} / {args.sms}: a field the projection reads is malformed "
              f"({type(exc).__name__}: {exc})", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
