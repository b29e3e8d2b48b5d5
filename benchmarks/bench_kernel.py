"""Kernel benchmark of submission.py against the read ceiling (needs a CUDA GPU).

A script, not a test; without CUDA it says so and exits 2. For each shape (default: the
benchmark shapes of shapes.json):
  1. correctness first: the timed backend against reference.ref_kernel (exact) on official
     and full-range data, output poisoned with NaN; a mismatch aborts the shape.
  2. device time of the kernel, L2 cold: 8 rotating input sets (bytes together well above
     the L2), events around each call, median of >= 20 (default 40) calls;
  3. the read ceiling: a plain read of the same number of bytes (a + sfa + b row 0 + sfb row
     0 + c), same protocol, in the same run (benchmarks/timing.py); ratio = ceiling / kernel;
  4. harness time (the leaderboard protocol: sync, clear L2, event, custom_kernel(data),
     event, sync) beside the bare-launch floor (same protocol, empty Triton kernel), and the
     host cost per call of custom_kernel and of a bare Triton launch.

The table records the backend that ran (the submission's ``select_backend``; for
"fastest", the pick it cached for the shape where it exposes one).

Usage (repository root):
  python3 benchmarks/bench_kernel.py                       # table for the submission as is
  python3 benchmarks/bench_kernel.py --shapes tests        # the official test shapes instead
  python3 benchmarks/bench_kernel.py --sweep               # also time candidate configs
  python3 benchmarks/bench_kernel.py --md benchmarks/RESULTS.md --json out.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import triton  # noqa: E402

import eval as ev  # noqa: E402  shape sets, backend picks
import reference  # noqa: E402
import submission  # noqa: E402
from benchmarks import timing  # noqa: E402
from utils import verbose_allclose  # noqa: E402

N_SETS = 8
DEFAULT_REPS = 40

# Tile shapes (BLOCK_M, BLOCK_G, num_warps) kept after the broad sweeps of NOTES.md (BLOCK_G
# 16..1024, 1..8 warps, 1..16 rows per thread, num_stages 1..4, register prefetch, K-step
# rotation, register caps), per K.
SWEEP_TILES = {
    16384: [(8, 128, 2), (2, 128, 1), (16, 128, 4), (4, 512, 4)],
    7168: [(16, 64, 2), (16, 32, 1), (8, 64, 1)],
    2048: [(16, 64, 2), (16, 32, 1), (8, 64, 2)],
}


def sweep_configs(m: int, k: int) -> list[tuple]:
    """Candidate (BLOCK_M, BLOCK_G, num_warps, num_stages, prefetch, rotate) for --sweep.
    Triton lays a [BLOCK_M, BLOCK_G] tile out with 4 groups (32 bytes of a row) per thread,
    BLOCK_G / 4 threads along K (at most 32, then warps along K), the rest of the warp and
    the warps along M; each thread owns R = BLOCK_M * BLOCK_G / (128 * warps) rows (for
    BLOCK_G <= 128). Sweeps on the H100 (NOTES.md): R >= 8 and 8 warps never won;
    num_stages > 1 (cp.async pipelining through shared memory) lost by 5-60%; kept as a check."""
    tiles = SWEEP_TILES.get(k) or [(16, 64, 2), (8, 128, 2), (16, 32, 1)]
    return [(bm, bg, w, stages) for bm, bg, w in tiles if m % bm == 0 and bg <= max(128, 2 * k // 16)
            for stages in (1, 3)]


def check_cases(m, k, l, seed) -> list:
    """(distribution, data, expected) on official and full-range data; expected = ref_kernel."""
    cases = []
    for dist in ("official", "full-range"):
        data = reference.generate_input(m, k, l, seed, device="cuda", distribution=dist)
        cases.append((dist, data, reference.ref_kernel(data[:6] + (data[6].clone(),))))
    return cases


def check(fn, cases) -> list[str]:
    """Mismatch reasons of fn against the expected outputs (c poisoned with NaN first)."""
    problems = []
    for dist, data, expected in cases:
        data[6].fill_(float("nan"))
        out = fn(data)
        torch.cuda.synchronize()
        reasons = verbose_allclose(out, expected, rtol=reference.RTOL, atol=reference.ATOL)
        if reasons:
            problems.append(f"{dist}: " + " | ".join(reasons))
    return problems


def triton_fn(m, k, l, cfg=None, decode=""):
    if cfg is not None:
        submission._TRITON_CONFIGS[(m, k, l)] = cfg
    return lambda d: submission._triton_backend(d, m, k, l, decode)


def env_info() -> dict:
    p = torch.cuda.get_device_properties(0)
    return {
        "device": torch.cuda.get_device_name(0), "capability": list(torch.cuda.get_device_capability(0)),
        "sms": p.multi_processor_count, "l2_mb": getattr(p, "L2_cache_size", 0) / 1e6,
        "torch": torch.__version__, "triton": triton.__version__, "date": datetime.date.today().isoformat(),
        "backend_support": {k: list(v) for k, v in getattr(submission, "backend_support", lambda device: {})(
            torch.device("cuda")).items()},
    }


def backend_that_ran(m: int, k: int, l: int) -> str:
    """The backend custom_kernel used for this shape: the submission's ``select_backend``, and
    for "fastest" the pick it cached for the shape (``eval._backend_picks``) where it exposes
    one; "unknown" for a submission without ``select_backend``."""
    select = getattr(submission, "select_backend", None)
    if select is None:
        return "unknown"
    name = select(torch.device("cuda"))
    pick = ev._backend_picks().get(f"{m}x{k}x{l}") if name == "fastest" else None
    return f"{name}: {pick}" if pick else name


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python3 benchmarks/bench_kernel.py", description=__doc__.split("\n\n")[0],
                                 epilog="Progress and the table go to stdout. NVFP4_GEMV_BACKEND is ignored: the "
                                        "submission's own (auto) choice is what is timed and recorded.")
    ap.add_argument("--shapes", choices=ev.SHAPE_SETS, default="benchmarks",
                    help="shapes.json set: benchmarks (default), tests (the official correctness cases), or all")
    ap.add_argument("--reps", type=int, default=DEFAULT_REPS,
                    help="timed calls per shape for the device time (median; default %(default)s)")
    ap.add_argument("--sweep", action="store_true",
                    help="also time the candidate Triton tile configs, cache hints and decodes per shape "
                         "(the kit's own submission only; minutes)")
    ap.add_argument("--json", metavar="PATH", default="",
                    help="also write the environment, rows and sweeps as JSON to PATH")
    ap.add_argument("--md", metavar="PATH", default="",
                    help="also write the table as markdown to PATH (the format of benchmarks/RESULTS.md)")
    return ap


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.reps < 1:
        ap.error("--reps must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_kernel.py needs a CUDA GPU (CUDA events, L2-cold timing); this machine has none. "
              "On the CPU: python3 eval.py (correctness) and python3 -m pytest", file=sys.stderr)
        return 2
    info = env_info()
    print(json.dumps(info))
    picks = ev.shape_set(args.shapes)
    os.environ.pop("NVFP4_GEMV_BACKEND", None)
    floor = timing.median(timing.bare_launch_floor())
    bare_host = timing.bare_launch_host_cost()
    rows, sweeps = [], {}
    saved_configs, saved_hints = dict(submission._TRITON_CONFIGS), submission._TRITON_EVICT
    for s in picks:
        m, k, l, seed = s["m"], s["k"], s["l"], s["seed"]
        shape = f"{m}x{k}x{l}"
        nbytes = timing.gemv_bytes(m, k, l)
        ceil = timing.read_ceiling(nbytes, N_SETS, args.reps)
        sets = [reference.generate_input(m, k, l, seed + i, device="cuda") for i in range(N_SETS)]
        cases = check_cases(m, k, l, seed)
        print(f"== {shape}: {nbytes / 1e6:.2f} MB, read ceiling {ceil['us']:.2f} us "
              f"({nbytes / ceil['us'] / 1e3:.0f} GB/s) launch {ceil['shape']}", flush=True)
        if args.sweep:
            res = []
            for cfg in sweep_configs(m, k):
                for decode in ("dp4a",):
                    fn = triton_fn(m, k, l, cfg, decode)
                    try:
                        bad = check(fn, cases)
                        us = timing.median(timing.device_times(fn, sets, args.reps)) if not bad else float("nan")
                    except Exception as e:  # a config that does not compile is reported, not fatal
                        bad, us = [f"{type(e).__name__}: {str(e)[:200]}"], float("nan")
                    res.append({"cfg": cfg, "decode": decode, "us": us, "ratio": ceil["us"] / us, "bad": bad})
                    print(f"   sweep {shape} cfg={cfg} {decode}: {us:.2f} us ratio {ceil['us'] / us:.3f}"
                          + (f" WRONG {bad}" if bad else ""), flush=True)
            good = sorted((r for r in res if not r["bad"]), key=lambda r: r["us"])
            if good:  # cache hints and the portable decode, on the best config
                best = good[0]["cfg"]
                for hints, decode in (("", "dp4a"), ("evict_first", "f16x2"), ("evict_first", "tl")):
                    submission._TRITON_EVICT = hints
                    fn = triton_fn(m, k, l, best, decode)
                    try:
                        bad = check(fn, cases)
                        us = timing.median(timing.device_times(fn, sets, args.reps)) if not bad else float("nan")
                    except Exception as e:
                        bad, us = [f"{type(e).__name__}: {str(e)[:200]}"], float("nan")
                    res.append({"cfg": best, "decode": decode, "hints": hints, "us": us,
                                "ratio": ceil["us"] / us, "bad": bad})
                    print(f"   sweep {shape} cfg={best} {decode} evict={hints!r}: {us:.2f} us "
                          f"ratio {ceil['us'] / us:.3f}" + (f" WRONG {bad}" if bad else ""), flush=True)
                submission._TRITON_EVICT = saved_hints
                # probe: the best tile with its arithmetic removed (loads and a trivial use):
                # how fast this access pattern alone runs
                fn = triton_fn(m, k, l, best, "loads-only")
                us = timing.median(timing.device_times(fn, sets, args.reps))
                res.append({"cfg": best, "decode": "loads-only", "us": us, "ratio": ceil["us"] / us, "bad": ["probe"]})
                print(f"   probe {shape} cfg={best} loads-only: {us:.2f} us ratio {ceil['us'] / us:.3f}", flush=True)
            sweeps[shape] = res
            submission._TRITON_CONFIGS.clear()
            submission._TRITON_CONFIGS.update(saved_configs)
        bad = check(submission.custom_kernel, cases)
        backend = backend_that_ran(m, k, l)  # after the calls above: a "fastest" pick is made by then
        if bad:
            print(f"   {shape}: custom_kernel ({backend}) WRONG: {bad}")
            rows.append({"shape": shape, "backend": backend, "wrong": bad})
            continue
        triton_ran = backend in ("triton", "fastest: triton")
        run = triton_fn(m, k, l) if triton_ran else submission.custom_kernel
        dev = timing.median(timing.device_times(run, sets, args.reps))
        harness = timing.median(timing.harness_times(submission.custom_kernel, sets[0]))
        host = timing.host_cost(submission.custom_kernel, sets[0])
        row = {"shape": shape, "backend": backend,
               "config": list(submission._triton_config(m, k, l)) if triton_ran else None,
               "bytes": nbytes, "ceiling_us": ceil["us"], "ceiling_launch": list(ceil["shape"]), "kernel_us": dev,
               "ratio": ceil["us"] / dev, "harness_us": harness, "floor_us": floor, "host_us": host,
               "bare_host_us": bare_host, "sol_b200_us": s.get("sol_us"),
               "direct_launch": any(v is not None and key[1] == m and key[2] == l and key[0][0] == k // 16
                                    for key, v in submission._TRITON_LAUNCH.items())}
        rows.append(row)
        config = f" {tuple(row['config'])}" if row["config"] else ""
        print(f"   {shape} [{backend}{config}]: kernel {dev:.2f} us, ceiling {ceil['us']:.2f} us, "
              f"ratio {row['ratio']:.3f}; harness {harness:.2f} us (floor {floor:.2f}); host/call {host:.1f} us "
              f"(bare launch {bare_host:.1f}); direct launch path: {row['direct_launch']}", flush=True)
    print_table(info, rows)
    command = " ".join(["python3", "benchmarks/bench_kernel.py"] + (sys.argv[1:] if argv is None else list(argv)))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"info": info, "command": command, "rows": rows, "sweeps": sweeps},
                                              indent=1, default=str))
        print(f"wrote JSON: {args.json}", file=sys.stderr)
    if args.md:
        Path(args.md).parent.mkdir(parents=True, exist_ok=True)
        write_md(Path(args.md), info, rows, command)
        print(f"wrote markdown: {args.md}", file=sys.stderr)
    return 0 if all("wrong" not in r for r in rows) else 1


def table_lines(info, rows) -> list[str]:
    out = ["| shape (m x k x l) | backend, config | kernel µs | read ceiling µs | ceiling / kernel "
           "| harness µs | bare-launch floor µs | host µs/call (bare launch) |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "wrong" in r:
            out.append(f"| {r['shape']} | {r['backend']} | WRONG | | | | | |")
            continue
        config = f" {tuple(r['config'])}" if r.get("config") else ""
        out.append(f"| {r['shape']} | {r['backend']}{config} | {r['kernel_us']:.2f} | "
                   f"{r['ceiling_us']:.2f} | {r['ratio']:.3f} | {r['harness_us']:.2f} | {r['floor_us']:.2f} | "
                   f"{r['host_us']:.1f} ({r['bare_host_us']:.1f}) |")
    return out


def print_table(info, rows):
    print(f"\n{info['device']} (cc {info['capability']}), torch {info['torch']}, triton {info['triton']}, "
          f"{info['date']}")
    print("\n".join(table_lines(info, rows)))


def write_md(path: Path, info, rows, command):
    text = [
        "# Kernel benchmark results", "",
        f"Device: {info['device']} (compute capability {info['capability'][0]}.{info['capability'][1]}, "
        f"{info['sms']} SMs, L2 {info['l2_mb']:.0f} MB). Date: {info['date']}. "
        f"torch {info['torch']}, triton {info['triton']}.", "",
        f"Command (on a CUDA machine, from the repository root): `{command}`", "",
        "Kernel: device time, L2 cold (8 rotating input sets, events per call, median of the calls). "
        "Read ceiling: the same protocol around a plain read of the same bytes (a + sfa + b row 0 + "
        "sfb row 0 + c). Harness: the leaderboard protocol (sync, clear L2, event, custom_kernel, event, "
        "sync), host time included; the floor is that protocol around an empty Triton kernel.", "",
    ] + table_lines(info, rows) + [""]
    path.write_text("\n".join(text))


if __name__ == "__main__":
    sys.exit(main())
