"""Sweep cuda configs under the server's protocol (needs a CUDA GPU), interleaved.

    python3 benchmarks/server_sweep.py --grid small --out DIR     # the small-shape rule's sweep
    python3 benchmarks/server_sweep.py --grid loads --out DIR     # load flavours of a and b
    python3 benchmarks/server_sweep.py --grid gs --out DIR        # grid-stride launches

Every config of a shape is first checked against the exact reference on full-range data (c
poisoned with NaN; a wrong one is reported and not timed), then all of them are timed in
``--rounds`` rounds, each round calling every config once in an order that reverses from round
to round, each call under the leaderboard's protocol (sync, the server's 4 GiB L2 clear, event,
the kernel, event, sync): configs compared in one run see the same drift. Per config: mean and
median µs. Kernels are compiled in parallel processes first (NVRTC needs no GPU).

Grids:
* ``small``: shapes of 20 KB to 12.6 MB (the official test shapes and six more), lanes per
  row (the largest power of two up to 32 that the row's chunks allow, and half of it), chunks
  per lane (2, 4, and the whole row in one step), warps per block 1/2/4, rows per lane 1/2, K
  split over 1-16 blocks (where steps allow and the blocks stay under 8 per SM), pipe 1 and 2;
  plus the config the submission picks. Also measured: the floor (an empty kernel under the same
  protocol), a 1 GiB read's bandwidth, and the read ceiling of each shape's bytes under the
  protocol (benchmarks/timing.py).
* ``loads``: on the benchmark shapes, the H100 and H200 table entries and the first four
  families that fit; on six small shapes, the submission's pick (and its v = 2 form); each with
  load 0-5 (a and its scales) and bload 0-1 (b and its scales).
* ``gs``: on the benchmark shapes, the table entries as they are, and up to six tiles without a
  K split (the tables' and the families') with a block per row group (gs 0) and with grids of
  1, 2, 4, 8 blocks per SM walking the row groups.

Writes DIR/server_sweep_<grid>.json (with the command, run from the kit's root:
``harness.kit_command``); prints the best configs per shape.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

if not __package__:  # run as `python3 benchmarks/NAME.py`: kitpath puts the kit's root on sys.path
    import kitpath  # noqa: F401

import harness  # noqa: E402  kit_command, the CUDA question (no torch where no driver is)

# The submission (S), torch and what imports them are imported in the functions that use them:
# --help, an argument error and the refusal on a machine without a CUDA GPU import none of them.

SMALL_SHAPES = [(128, 256, 1), (128, 1536, 1), (128, 3072, 1), (256, 7168, 1), (2432, 4608, 2), (384, 7168, 2),
                (512, 512, 2), (512, 4096, 2), (512, 1536, 2), (128, 16384, 1), (256, 16384, 1), (1024, 7168, 1),
                (128, 7168, 4), (1024, 2048, 1), (4096, 1024, 1)]
BENCH_SHAPES = [(7168, 16384, 1), (4096, 7168, 8), (7168, 2048, 4)]
LOAD_SMALL_SHAPES = [(256, 7168, 1), (2432, 4608, 2), (384, 7168, 2), (512, 4096, 2), (128, 16384, 1), (128, 3072, 1)]


def small_grid(m: int, k: int, l: int, cap: tuple, sms: int) -> list:
    import submission as S
    chunks = k // 32
    dec = S.cuda_default_decode(cap)
    l0 = 32
    while l0 > 2 and l0 > chunks:
        l0 //= 2
    out = [S.cuda_default(m, k, l, cap)]
    for lpr in sorted({l0, max(2, l0 // 2)}):
        for u in sorted({2, 4, min(-(-chunks // lpr), 16)}):
            for warps in (1, 2, 4):
                for kb in (1, 2, 4, 8, 16):
                    for rpt in (1, 2):
                        for pipe in ("a_first", "ab_first"):
                            c = S.CudaConfig(lpr, rpt, u, warps, dec, v=1, pipe=pipe, kb=kb)
                            if c.problem() or not c.fits(m, k):
                                continue
                            if kb > 1 and (kb > -(-chunks // (lpr * u)) or (m // c.rows) * l * kb > 8 * sms):
                                continue
                            out.append(c)
    return list(dict.fromkeys(out))


def load_grid(m: int, k: int, l: int, cap: tuple, sms: int) -> list:
    import submission as S
    if (m, k, l) in BENCH_SHAPES:
        base = [t[(m, k, l)]._replace(decode=None).with_decode(cap) for t in S.CUDA_MEASURED.values() if (m, k, l) in t]
        base += [f.with_decode(cap) for f in S.CUDA_FAMILIES if f.fits(m, k)][:4]
    else:
        d = S.cuda_default(m, k, l, cap)
        base = [d] + ([d._replace(v=2)] if d.u % 2 == 0 else [])
    return list(dict.fromkeys(b._replace(load=ld, bload=bl) for b in dict.fromkeys(base)
                              for ld in S.CUDA_LOADS[:6] for bl in (False, True)))


def gs_grid(m: int, k: int, l: int, cap: tuple, sms: int) -> list:
    import submission as S
    tables = [t[(m, k, l)]._replace(decode=None).with_decode(cap) for t in S.CUDA_MEASURED.values() if (m, k, l) in t]
    tiles = [c for c in dict.fromkeys(tables + [f.with_decode(cap) for f in S.CUDA_FAMILIES])
             if c.fits(m, k) and c.ks == 1 and c.kb == 1][:6]
    return list(dict.fromkeys(tables + [t._replace(gs=g) for t in tiles for g in (0, 1, 2, 4, 8)]))


GRIDS = {"small": (SMALL_SHAPES, small_grid), "loads": (BENCH_SHAPES + LOAD_SMALL_SHAPES, load_grid),
         "gs": (BENCH_SHAPES, gs_grid)}


def _compile(job: tuple) -> tuple:
    """(kernel name, cubin) of one job; a build that fails raises CudaBuildError, one line naming it."""
    import submission as S
    from benchmarks import refusals
    cfg, full, arch = job
    name, source = S.cuda_kernel(cfg, full, True)
    try:
        return name, S.cuda_compile(source, arch)
    except S.CudaBuildError as exc:
        raise S.CudaBuildError(refusals.build_line(exc, cfg, arch)) from None


def interleaved(cfgs: list, data, rounds: int) -> dict:
    """{config: [µs per round]} under the leaderboard's protocol, the order reversing each round."""
    import submission as S
    from benchmarks import timing
    times = {c: [] for c in cfgs}
    for r in range(rounds):
        for c in (cfgs if r % 2 == 0 else cfgs[::-1]):
            times[c].append(timing.harness_call(lambda d, c=c: S.run_backend("cuda", d, c), data))
    return times


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 benchmarks/server_sweep.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--grid", choices=sorted(GRIDS), required=True)
    ap.add_argument("--rounds", type=int, default=15, help="timed calls per config, interleaved (default %(default)s)")
    ap.add_argument("--out", required=True, help="folder for server_sweep_<grid>.json")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    from benchmarks import refusals
    problem = refusals.folder_problem(args.out, "--out")
    if problem:
        ap.exit(2, f"server_sweep.py: {problem}\n")
    if not harness.cuda_available():
        print("server_sweep.py needs a CUDA GPU; this machine has none", file=sys.stderr)
        return 2
    import torch

    import quant
    import reference
    import submission as S
    from benchmarks import timing
    dev = torch.device("cuda", 0)
    cap = torch.cuda.get_device_capability(dev)
    arch, sms = S.cuda_arch(cap), torch.cuda.get_device_properties(dev).multi_processor_count
    shapes, grid = GRIDS[args.grid]
    plan = {shape: grid(*shape, cap, sms) for shape in shapes}
    jobs = {}
    for (_m, k, _l), cfgs in plan.items():
        for c in cfgs:
            full = (k // 32) % (c.lpr * c.u) == 0
            jobs[S.cuda_kernel(c, full, True)[0]] = (c, full, arch)
    t0 = time.time()
    try:
        cubins = dict([_compile(next(iter(jobs.values())))])  # the first here: a kernel that does not compile
        with ProcessPoolExecutor(max(1, min(15, (os.cpu_count() or 2) - 1))) as ex:  # stops before the pool
            cubins.update(ex.map(_compile, list(jobs.values())[1:], chunksize=4))
    except S.CudaBuildError as exc:  # one line naming the config and the arch (_compile)
        print(f"server_sweep.py: {exc}", file=sys.stderr)
        return 2
    print(f"compiled {len(cubins)} kernels in {time.time() - t0:.1f} s", flush=True)
    for name, cubin in cubins.items():
        S.cuda_load(dev, name, cubin)
    floor = timing.bare_launch_floor(50)
    big = timing.read_ceiling(1 << 30, 2, 10)
    rec = {"command": harness.kit_command(["python3", "benchmarks/server_sweep.py"],
                                          sys.argv[1:] if argv is None else argv, ("--out",)),
           "device": torch.cuda.get_device_name(dev), "torch": torch.__version__, "grid": args.grid,
           "rounds": args.rounds, "floor_us": statistics.median(floor), "read_bps": (1 << 30) / (big["us"] * 1e-6),
           "shapes": {}}
    print(f"floor {rec['floor_us']:.2f} us, read {rec['read_bps'] / 1e9:.0f} GB/s", flush=True)
    for (m, k, l), cfgs in plan.items():
        case = quant.fill(reference.generate_input(m, k, l, 7, device="cuda"), "full-range")
        expected = reference.ref_kernel(case[:6] + (case[6].clone(),))
        data = reference.generate_input(m, k, l, 11, device="cuda")
        good, wrong = [], []
        for c in cfgs:
            case[6].fill_(float("nan"))
            out = S.run_backend("cuda", case, c).clone()
            again = S.run_backend("cuda", case, c)
            if (torch.allclose(out.float(), expected.float(), rtol=reference.RTOL, atol=reference.ATOL)
                    and torch.equal(out.view(torch.int16), again.view(torch.int16))):
                good.append(c)
            else:
                wrong.append(repr(c))
            S.run_backend("cuda", data, c)
        times = interleaved(good, data, args.rounds)
        rows = sorted(({"cfg": c._asdict(), "mean": statistics.mean(t), "median": statistics.median(t)}
                       for c, t in times.items()), key=lambda r: r["mean"])
        nbytes = timing.gemv_bytes(m, k, l)
        entry = {"bytes": nbytes, "limit_us": rec["floor_us"] + nbytes / rec["read_bps"] * 1e6,
                 "picked": repr(S.cuda_default(m, k, l, cap)), "rows": rows, "wrong": wrong}
        if args.grid == "small":
            entry["server_read_us"] = timing.read_ceiling_server(nbytes, 20)["us"]
        rec["shapes"][f"{m}x{k}x{l}"] = entry
        pick = next((r["mean"] for r in rows if repr(S.CudaConfig(**r["cfg"])) == entry["picked"]), float("nan"))
        print(f"{m}x{k}x{l}: {nbytes / 1e6:.2f} MB, limit {entry['limit_us']:.2f} us"
              + (f", read under the protocol {entry['server_read_us']:.2f}" if "server_read_us" in entry else "")
              + f"; default {pick:.2f}; best " + "; ".join(f"{S.CudaConfig(**r['cfg'])!r} {r['mean']:.2f}"
                                                           for r in rows[:3])
              + (f"; WRONG {wrong}" if wrong else ""), flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    path = Path(args.out) / f"server_sweep_{args.grid}.json"
    path.write_text(json.dumps(rec, indent=0))
    print(f"wrote {path}", file=sys.stderr)
    return 0 if all(not e["wrong"] for e in rec["shapes"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
