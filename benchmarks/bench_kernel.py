"""Kernel benchmark of submission.py against the read ceiling (needs a CUDA GPU).

A script, not a test; without CUDA it says so and exits 2. For each shape (default: the
benchmark shapes of shapes.json) and each kernel backend (cuda, triton):
  1. correctness first: the backend against reference.ref_kernel (exact) on official and
     full-range data, output poisoned with NaN; a mismatch is reported instead of a time.
  2. device time of the kernel with the config it picks, L2 cold: 8 rotating input sets
     (bytes together well above the L2), events around each call, median of >= 20 (default
     40) calls; the same with the plain scales moved to the CPU (the kernel then reads the
     permuted scales), for the plain-vs-permuted comparison;
  3. the read ceiling: a read of the same number of bytes (a + sfa + b row 0 + sfb row 0 +
     c), same protocol, in the same run (benchmarks/timing.py), the fastest of its launch
     shapes x load policies (plain, evict_first, .cs, no-allocate ...; the winner's shape and
     policy are recorded, and each policy's best); ratio = ceiling / kernel; then both again
     under the leaderboard's protocol ("server": the server's L2 clear before each call, whose
     dirty lines are written back while the kernel reads; median of 20), the read's shapes x
     policies raced again there (the fastest loads differ with a dirty L2);
  4. for custom_kernel (auto: the backend it races to): harness time (the leaderboard
     protocol: sync, clear L2, event, custom_kernel(data), event, sync) beside the
     bare-launch floor (same protocol, empty Triton kernel), and the host cost per call of
     custom_kernel and of a bare Triton launch (medians of 7 alternating rounds of 200 calls).

The table records the backend that ran (the submission's ``select_backend``; for
"fastest", the pick it cached for the shape where it exposes one); its first line (``info``)
the kernel revision and ``bundle``, the state of the kit's submission.py against kernels/
(``bundle.kit_state``). The kit's own submission.py whose copies differ from kernels/ is refused
in one line before anything runs (``bundle.refuse_if_out_of_sync``): a record names one kernel.

Usage (repository root):
  python3 benchmarks/bench_kernel.py                       # table for the submission as is
  python3 benchmarks/bench_kernel.py --shapes tests        # the official test shapes instead
  python3 benchmarks/bench_kernel.py --sweep               # also time candidate configs
  python3 benchmarks/bench_kernel.py --md benchmarks/RESULTS.md --json out.json
  python3 benchmarks/bench_kernel.py --sms auto            # SM pressure: whole GPU, then a B200's bytes per SM
  python3 benchmarks/bench_kernel.py --roofline --json r.json --md r.md --plot r.png  # benchmarks/roofline.py

SM pressure (--sms): a B200 moves about twice an H100's bytes per second per SM, so a kernel
that keeps up at full H100 width can be issue-bound on a B200. --sms N,... reruns the kernel
table in a fresh process per N, each on a CUDA green context of N SMs (0 or "all": the whole
GPU), with the read ceiling measured at the same N in the same process, and prints per N the
ratio read / kernel, each backend's config picked by its tuner at that N (NVFP4_GEMV_TUNE=force, as on
a GPU model no table names; NVFP4_GEMV_TUNE=auto times the table's picks instead). "auto" = the
whole GPU, then the N at which this GPU's own read bandwidth
(its best read ceiling at full width) per SM equals a B200's (B200_READ_BPS / B200_SMS).
What it does not model: a B200's latencies, L2 (126 MB), clocks and its 256-bit loads.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if not __package__:  # run as `python3 benchmarks/NAME.py`: kitpath puts the kit's root on sys.path
    import kitpath  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent

# torch, triton and what imports them (quant, reference, utils, benchmarks/timing.py, the
# submission) are imported where they are used: --help, an argument error and the refusal on a
# machine without a CUDA GPU import none of them (harness.cuda_available asks no torch there).
import bundle  # noqa: E402  whether the kit's submission.py holds its sources
import harness  # noqa: E402  shape sets, backend picks, the CUDA question
from benchmarks.bench_options import build_parser, sms_points  # noqa: E402

submission = None  # the submission module timed: load() sets it (main: --submission), current() reads it


def load(path: str | None = None):
    """Import the submission to time (default: the kit's submission.py) as the module
    ``submission``, and make it the one every helper below uses. A ``path`` that is no
    submission file or does not import raises ValueError (one line, ``harness.load_tool_submission``)."""
    global submission
    if path is None:
        import submission as kit_submission  # the kit's own (ROOT is first on sys.path)
        submission = kit_submission
    else:
        submission = harness.load_tool_submission(path)
    return submission


def current():
    """The submission being timed, the kit's own unless load() chose another."""
    return submission if submission is not None else load()


def current_file() -> str:
    """The file of the submission being timed, without importing it: load()'s, else the kit's
    submission.py (the one ``current`` imports)."""
    if submission is not None:
        return submission.__file__
    kit = sys.modules.get("submission")
    return kit.__file__ if kit is not None else str(ROOT / "submission.py")


from benchmarks import refusals, roofline  # noqa: E402
from benchmarks.apply_table import kernel_revision, kit_revision  # noqa: E402

N_SETS = 8
# A B200's read bandwidth and SM count, for the SM count at which this GPU carries a B200's bytes
# per SM: device-to-device copies of "over 6,000 GB/s" measured on B200s with the CUDA samples
# (https://www.newmind.ai/journal/18); 148 SMs (https://chipsandcheese.com/p/nvidias-b200-keeping-
# the-cuda-juggernaut). The official speed of light assumes 7.66 TB/s (shapes.json), which would
# ask for fewer SMs still (about 50 on an H100).
B200_READ_BPS = 6.0e12
B200_SMS = 148

def as_json(cfg):
    """A config as the JSON records hold it: a dict of its fields (a named config), else a list."""
    return dict(cfg._asdict()) if hasattr(cfg, "_asdict") else (None if cfg is None else list(cfg))


def config_text(cfg) -> str:
    """A config of a row (a dict of fields, a list, or a config) in its canonical form."""
    if isinstance(cfg, dict):
        return "(" + ", ".join(f"{k}={v}" for k, v in cfg.items()) + ")"
    return repr(cfg) if hasattr(cfg, "_fields") else str(tuple(cfg))


def check_cases(m, k, l, seed) -> list:
    """(distribution, data, expected) on official and full-range data; expected = ref_kernel."""
    import quant
    import reference
    cases = []
    for dist in ("official", "full-range"):
        data = quant.fill(reference.generate_input(m, k, l, seed, device="cuda"), dist)
        cases.append((dist, data, reference.ref_kernel(data[:6] + (data[6].clone(),))))
    return cases


def check(fn, cases) -> list[str]:
    """Mismatch reasons of fn against the expected outputs (c poisoned with NaN first)."""
    import torch

    import reference
    from utils import verbose_allclose
    problems = []
    for dist, data, expected in cases:
        data[6].fill_(float("nan"))
        out = fn(data)
        torch.cuda.synchronize()
        reasons = verbose_allclose(out, expected, rtol=reference.RTOL, atol=reference.ATOL)
        if reasons:
            problems.append(f"{dist}: " + " | ".join(reasons))
    return problems


def backend_fn(name, cfg=None, probe=False):
    """One backend with a fixed config (None: the config it picks itself)."""
    sub = current()
    if probe:
        return lambda d: sub.cuda_probe(d, cfg)
    return lambda d: sub.run_backend(name, d, cfg)


def with_cpu_scales(data):
    """The same inputs with the plain scales moved to the CPU: the kernels then read the
    permuted scales (how a kernel meets hand-built inputs)."""
    return data[:2] + (data[2].cpu(), data[3].cpu()) + data[4:]


def cuda_sweep_configs(m, k, l, cap) -> list:
    """A grid around the cuda backend's candidates: lanes per row, rows per lane, chunks in
    flight per lane, warps per block (blocks of at most 128 rows that divide M), each with
    PIPE 1 (every load of a step before its arithmetic) and with PIPE 0 and launch bounds
    (MINB 1: ptxas then hoists about half the loads with no wait; the winners of 2026-11-25)."""
    sub = current()
    chunks = k // 32
    dec = sub.cuda_default_decode(cap)
    out = list(sub.BACKENDS["cuda"].candidates(m, k, l, cap))
    for lpr in (32, 16, 8):
        for rpt in (1, 2, 4):
            for u in (2, 4, 8, 16):
                for warps in (2, 4, 8):
                    u_ = min(u, max(1, chunks // lpr))
                    cfg = sub.CudaConfig(lpr, rpt, u_, warps, dec)
                    if cfg.rows <= 128 and m % cfg.rows == 0 and lpr <= chunks and rpt * u_ <= 16:
                        out += [cfg, cfg._replace(v=2, load=2, pipe=0, minb=1)]
    return list(dict.fromkeys(out))


SERVER_REPS = 20


def timed(fn, sets, cases, reps, server: bool = True) -> tuple:
    """(median device µs, median µs under the server's protocol or nan, problems) of fn:
    checked first, timed only if right."""
    from benchmarks import timing
    us = server_us = float("nan")
    try:
        bad = check(fn, cases)
        if not bad:
            us = timing.median(timing.device_times(fn, sets, reps))
            if server:
                server_us = timing.median(timing.harness_times(fn, sets[0], SERVER_REPS))
    except Exception as e:  # a config that does not build or run is reported, not fatal
        bad = [f"{type(e).__name__}: {str(e)[:300]}"]
    return us, server_us, bad


def timed_probe(cfg, sets, reps, ceiling_us, shape) -> dict:
    """The cuda kernel's loads-only probe of ``cfg`` (wrong output by design, so not checked):
    its sweep record, printed; a probe that cannot be timed (HostBound, a build error) is
    recorded as such."""
    from benchmarks import timing
    try:
        us = timing.median(timing.device_times(backend_fn("cuda", cfg, probe=True), sets, reps))
    except Exception as e:  # noqa: BLE001 - reported, not fatal
        print(f"   probe {shape} cuda {cfg} loads-only: not timed ({type(e).__name__}: {str(e)[:200]})", flush=True)
        return {"backend": "cuda", "cfg": as_json(cfg), "us": float("nan"), "ratio": float("nan"),
                "bad": ["probe", str(e)[:200]]}
    print(f"   probe {shape} cuda {cfg} loads-only: {us:.2f} us ratio {ceiling_us / us:.3f}", flush=True)
    return {"backend": "cuda", "cfg": as_json(cfg), "us": us, "ratio": ceiling_us / us, "bad": ["probe"]}


def env_info() -> dict:
    import torch
    import triton
    p = torch.cuda.get_device_properties(0)
    return {
        "device": torch.cuda.get_device_name(0), "capability": list(torch.cuda.get_device_capability(0)),
        "sms": p.multi_processor_count, "l2_mb": getattr(p, "L2_cache_size", 0) / 1e6,
        "torch": torch.__version__, "triton": triton.__version__, "date": datetime.date.today().isoformat(),
        "backend_support": {k: list(v) for k, v in current().backend_support(torch.device("cuda")).items()},
        "kernel_revision": kernel_revision(current().__file__), "kit_revision": kit_revision(ROOT),
        "bundle": bundle.kit_state(current().__file__).state,
    }


def backend_that_ran(m: int, k: int, l: int) -> str:
    """The backend custom_kernel used for this shape: the submission's ``select_backend``, and
    for "fastest" the pick it cached for the shape (``harness.backend_picks``) where it exposes
    one; "unknown" for a submission without ``select_backend``."""
    select = getattr(current(), "select_backend", None)
    if select is None:
        return "unknown"
    import torch
    name = select(torch.device("cuda"))
    pick = harness.backend_picks().get(f"{m}x{k}x{l}") if name == "fastest" else None
    return f"{name}: {pick}" if pick else name


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.reps < 1:
        ap.error("--reps must be >= 1")
    if args.sms:
        try:
            args.sms_points = sms_points(args.sms)
        except ValueError as exc:
            ap.error(f"--sms {args.sms}: {exc}")
    if args.roofline:
        clash = [f"--{n.replace('_', '-')}" for n in ("sweep", "probes", "grid", "sms", "no_server")
                 if getattr(args, n)] + (["--shapes"] if args.shapes != ap.get_default("shapes") else [])
        if clash:
            ap.error(f"--roofline times its own shapes (--roofline-shapes) under the leaderboard's protocol: "
                     f"not with {', '.join(clash)}")
        if args.plot:
            try:
                import matplotlib  # noqa: F401
            except ImportError:
                ap.error("--plot needs matplotlib (python3 -m pip install matplotlib)")
    elif args.plot or args.roofline_shapes != ap.get_default("roofline_shapes"):
        ap.error("--plot and --roofline-shapes go with --roofline")
    for flag, given, what in (("--probes", args.probes, "times the probes of the swept cuda configs"),
                              ("--grid", args.grid, "replaces the cuda sweep's grid")):
        if given and not args.sweep:
            ap.error(f"{flag} only goes with --sweep (it {what})")
        if given and args.backends and "cuda" not in args.backends.split(","):
            ap.error(f"{flag} {what}, and --backends {args.backends} times no cuda")
    if args.submission:
        try:
            load(args.submission)
        except ValueError as exc:  # no such file, or it does not import: one line, no traceback
            ap.exit(2, f"error: {exc}\n")
    for option, example in zip(OUTPUT_OPTIONS, ("bench.json", "bench.md", "roofline.png"), strict=True):
        problem = harness.writable_file_problem(getattr(args, option[2:]) or None, option, example)  # before the run
        if problem:
            ap.exit(2, f"error: {problem}\n")
    args.grid_configs = {}
    if args.grid:
        try:
            args.grid_configs = grid_configs(args.grid)
        except ValueError as exc:
            ap.error(f"--grid {args.grid}: {exc}")
        swept = {f"{c['m']}x{c['k']}x{c['l']}" for c in harness.shape_set(args.shapes)}
        idle = [shape for shape in args.grid_configs if shape not in swept]
        if idle:
            ap.error(f"--grid {args.grid}: {', '.join(idle)} not among the shapes swept (--shapes {args.shapes}: "
                     f"{', '.join(sorted(swept))})")
    return args


def grid_configs(path: str) -> dict:
    """--grid: {shape: [config tuple, ...]} of a JSON file {'MxKxL': [cuda config, ...]}; raises
    ValueError (one line) for a file that is not that, or for a config the submission's cuda
    backend cannot build (its ``_config_problem``, where it has one), before any GPU work."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"not a readable JSON file ({type(exc).__name__}: {exc})") from None
    if not isinstance(raw, dict) or not all(isinstance(v, list) for v in raw.values()):
        raise ValueError("must hold {'MxKxL': [cuda config, ...]}")
    kind = current().CudaConfig
    out = {}
    for shape, cfgs in raw.items():
        out[shape] = []
        for c in cfgs:
            try:
                cfg = kind.of(c)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{shape}: {c!r}: {exc}") from None
            why = cfg.problem()
            if why:
                raise ValueError(f"{shape}: {why}")
            out[shape].append(cfg)
    return out


OUTPUT_OPTIONS = ("--json", "--md", "--plot")  # the files a run writes


def record_command(argv: list) -> str:
    """This script's command line as its records name it, run from the kit's root: files by their
    path in the kit, outputs outside it by their name (``harness.kit_command``)."""
    return harness.kit_command(["python3", "benchmarks/bench_kernel.py"], argv, OUTPUT_OPTIONS)


def b200_equivalent_sms(full_rows: list) -> tuple:
    """(N, bytes/s): the SM count at which this GPU's best full-width read bandwidth (bytes/s, the
    second item) per SM equals a B200's, rounded up to an even count (the green-context
    granularity seen on an H100)."""
    bw = max(r["bytes"] / r["ceiling_us"] * 1e6 for r in full_rows if "ceiling_us" in r and "bytes" in r)
    n = bw * B200_SMS / B200_READ_BPS
    return int(-(-n // 2) * 2), bw


def measure_roofline(args, argv: list) -> int:
    """The roofline run (--roofline, benchmarks/roofline.py's definitions; CUDA checked by the
    caller): prints the table, writes --json / --md / --plot; 0 if every result was right, else 1."""
    import torch

    from benchmarks import timing
    sub = current()
    command = record_command(argv)
    info = env_info()
    print(json.dumps(info), flush=True)
    os.environ.pop(harness.ENV_BACKEND, None)  # auto: what custom_kernel picks itself
    t_start = time.perf_counter()
    floor_times = timing.bare_launch_floor()
    floor = timing.median(floor_times)
    read = timing.read_ceiling(roofline.READ_BYTES, 1, roofline.READ_REPS)
    bw = roofline.READ_BYTES / read["us"]
    print(f"floor {floor:.2f} us (empty Triton kernel, the leaderboard's protocol); read bandwidth "
          f"{bw / 1e6:.3f} TB/s ({roofline.READ_BYTES} bytes in {read['us']:.1f} us, launch {read['shape']})",
          flush=True)
    dev = torch.device("cuda")
    wanted = args.backends.split(",") if args.backends else [
        n for n, b in sub.BACKENDS.items() if b.races and b.config is not None]
    names = [n for n in wanted if n and sub.backend_support(dev)[n][0]]
    rows = []
    todo = roofline.shapes(args.roofline_shapes)
    for i, s in enumerate(todo, 1):
        m, k, l = s["m"], s["k"], s["l"]
        shape = f"{m}x{k}x{l}"
        nbytes = timing.gemv_bytes(m, k, l)
        lim = roofline.limit_us(nbytes, floor, bw)
        row = {"shape": shape, "m": m, "k": k, "l": l, "sets": s["sets"], "bytes": nbytes, "limit_us": lim,
               "backends": {}, "auto": {}}
        try:
            cases = check_cases(m, k, l, s["seed"])
        except Exception as exc:  # noqa: BLE001 - no inputs (out of memory, say): every series says why
            why = [f"inputs: {type(exc).__name__}: {str(exc)[:300]}"]
            row["backends"] = {name: {"wrong": why} for name in names}
            row["auto"] = {"backend": "?", "wrong": why}
            rows.append(row)
            print(f"[{i}/{len(todo)}] {shape}: no inputs ({why[0]})", flush=True)
            continue
        data = cases[0][1]  # the official inputs, also the ones timed
        for name in names:
            res = row["backends"][name] = {}
            try:
                cfg = sub.config_for(name, data, m, k, l)
                res["config"] = as_json(cfg)
                fn = backend_fn(name, cfg)
                bad = check(fn, cases)
                if not bad:
                    res.update(roofline.time_stats(timing.harness_times(fn, data, args.reps), lim))
            except Exception as exc:  # noqa: BLE001 - a backend that cannot run a shape is recorded
                bad = [f"{type(exc).__name__}: {str(exc)[:300]}"]
            if bad:
                res["wrong"] = bad
        try:
            bad = check(sub.custom_kernel, cases)
            if not bad:
                times = timing.harness_times(sub.custom_kernel, data, args.reps)
                row["auto"].update(roofline.time_stats(times, lim))
        except Exception as exc:  # noqa: BLE001 - recorded as the backends' are
            bad = [f"{type(exc).__name__}: {str(exc)[:300]}"]
        try:
            row["auto"]["backend"] = backend_that_ran(m, k, l)
        except Exception as exc:  # noqa: BLE001 - e.g. a submission whose select_backend raises here
            row["auto"]["backend"] = f"unknown ({type(exc).__name__})"
        if bad:
            row["auto"]["wrong"] = bad
        rows.append(row)
        del cases, data
        torch.cuda.empty_cache()
        print(f"[{i}/{len(todo)} {time.perf_counter() - t_start:.0f} s] " + roofline.table_row(row, names),
              flush=True)
    record = {"info": info, "command": command, "floor_us": floor, "floor_times_us": floor_times,
              "read": {"bytes": roofline.READ_BYTES, "us": read["us"], "shape": list(read["shape"]),
                       "bytes_per_us": bw},
              "backends": names, "reps": args.reps, "rows": rows, "seconds": time.perf_counter() - t_start}
    record["summary"] = roofline.summary(record)
    print("\n" + "\n".join(roofline.table_lines(record) + [""] + roofline.summary_lines(record)))
    write_outputs(args, record, roofline.md_lines(record))
    if args.plot:
        roofline.plot(record, args.plot)
        print(f"wrote plot: {args.plot}", file=sys.stderr)
    wrong = [r for r in rows if "wrong" in r["auto"] or any("wrong" in b for b in r["backends"].values())]
    return 1 if wrong else 0



def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Its records name one kernel revision: the kit's own submission.py must hold its sources.
    bundle.refuse_if_out_of_sync(current_file(), tool="benchmarks/bench_kernel.py")
    argv = sys.argv[1:] if argv is None else list(argv)
    green = None
    if args.sms_child > 0:  # first, before anything touches the GPU
        from benchmarks import timing
        try:
            green = timing.enter_green_context(args.sms_child)  # noqa: F841 - kept alive for the run
        except RuntimeError as exc:
            print(f"bench_kernel.py --sms: {exc}; skipped", file=sys.stderr)
            return 3
    if args.sms_child >= 0:
        args.no_server = True
    if not harness.cuda_available():
        print("bench_kernel.py needs a CUDA GPU (CUDA events, L2-cold timing); this machine has none. "
              "On the CPU: python3 eval.py (correctness) and python3 -m pytest", file=sys.stderr)
        return 2
    unknown = [n for n in args.backends.split(",") if n and n not in current().BACKENDS]
    if unknown:  # (the submission's registry: checked where the submission is imported, after the CUDA check)
        print(f"bench_kernel.py: --backends {args.backends}: {', '.join(unknown)} not among the backends of "
              f"{current_file()} ({', '.join(current().BACKENDS)})", file=sys.stderr)
        return 2
    if not args.backends or "cuda" in args.backends.split(","):  # a kernel that does not build: one line, now
        problem = refusals.gpu_build_problem(current())
        if problem:
            print(f"bench_kernel.py: {current_file()}: {problem}", file=sys.stderr)
            return 2
    if args.roofline:
        return measure_roofline(args, argv)
    if args.sms and args.sms_child < 0:
        return sms_main(args, argv)
    import torch

    import reference
    from benchmarks import timing
    command = record_command(argv)
    info = env_info()
    if args.sms_child >= 0:
        info["context_sms"] = timing.context_sm_count()
        info["launch_scaling_us"] = timing.launch_scaling(submission)
    print(json.dumps(info))
    cap = torch.cuda.get_device_capability(0)
    picks = harness.shape_set(args.shapes)
    os.environ.pop("NVFP4_GEMV_BACKEND", None)
    floor = timing.median(timing.bare_launch_floor())
    dev = torch.device("cuda")
    sub = current()
    wanted = args.backends.split(",") if args.backends else [
        n for n, b in sub.BACKENDS.items() if b.races and b.config is not None]
    names = [n for n in wanted if n and sub.backend_support(dev)[n][0]]
    rows, sweeps, ceilings = [], {}, {}
    for s in picks:
        m, k, l, seed = s["m"], s["k"], s["l"], s["seed"]
        shape = f"{m}x{k}x{l}"
        nbytes = timing.gemv_bytes(m, k, l)
        ceil = timing.read_ceiling(nbytes, N_SETS, args.reps)
        sceil = ({"us": float("nan"), "shape": (), "policy": "", "by_policy": {}} if args.no_server
                 else timing.read_ceiling_server(nbytes, SERVER_REPS))
        ceilings[shape] = ceiling_record(ceil, sceil)
        sets = [reference.generate_input(m, k, l, seed + i, device="cuda") for i in range(N_SETS)]
        cpu_sets = [with_cpu_scales(d) for d in sets]
        cases = check_cases(m, k, l, seed)
        cpu_cases = [(dist, with_cpu_scales(d), e) for dist, d, e in cases]
        print(f"== {shape}: {nbytes / 1e6:.2f} MB, read ceiling {ceil['us']:.2f} us "
              f"({nbytes / ceil['us'] / 1e3:.0f} GB/s) {timing.policy_text(ceil)}; under the server's protocol "
              f"{sceil['us']:.2f} us" + (f" {timing.policy_text(sceil)}" if sceil["policy"] else ""), flush=True)
        print("   read per policy (clean; server): " + policy_line(ceilings[shape]), flush=True)
        for name in names:
            t0 = time.perf_counter()
            try:
                cfg = sub.config_for(name, sets[0], m, k, l)
            except Exception as e:
                print(f"   {shape} {name}: no config ({type(e).__name__}: {str(e)[:300]})", flush=True)
                rows.append({"shape": shape, "backend": name, "wrong": [str(e)[:300]]})
                continue
            pick_s = time.perf_counter() - t0
            res = []
            if args.sweep:
                grid = (cuda_sweep_configs(m, k, l, cap) if name == "cuda"
                        else sub.BACKENDS[name].candidates(m, k, l, cap))
                if name == "cuda" and args.grid:
                    grid = args.grid_configs.get(shape, grid)
                for c in grid:
                    us, s_us, bad = timed(backend_fn(name, c), sets, cases, args.reps, server=not args.no_server)
                    res.append({"backend": name, "cfg": as_json(c), "us": us, "ratio": ceil["us"] / us,
                                "server_us": s_us, "server_ratio": sceil["us"] / s_us, "bad": bad,
                                "ceiling_policy": ceil["policy"], "server_ceiling_policy": sceil["policy"]})
                    print(f"   sweep {shape} {name} {c}: {us:.2f} us ratio {ceil['us'] / us:.3f}; server "
                          f"{s_us:.2f} us ratio {sceil['us'] / s_us:.3f}" + (f" WRONG {bad}" if bad else ""),
                          flush=True)
                    if name == "cuda" and args.probes:
                        res.append(timed_probe(c, sets, args.reps, ceil["us"], shape))
                if name == "cuda":
                    res.append(timed_probe(cfg, sets, args.reps, ceil["us"], shape))
            sweeps[f"{shape} {name}"] = res
            us, s_us, bad = timed(backend_fn(name, cfg), sets, cases, args.reps, server=not args.no_server)
            us_perm, _, bad_perm = timed(backend_fn(name, cfg), cpu_sets, cpu_cases, args.reps, server=False)
            others = {}  # the configs measured best on other GPU models, timed here beside the pick
            for model, table in (sub.BACKENDS[name].measured or {}).items():
                other = table.get((m, k, l))
                if model != info["device"] and other is not None and tuple(other) != tuple(cfg):
                    o_us, _, o_bad = timed(backend_fn(name, other), sets, cases, args.reps, server=False)
                    others[model] = {"config": as_json(other), "us": o_us, "wrong": o_bad}
                    print(f"   {shape} {name}: {model}'s config {other}: {o_us:.2f} us"
                          + (f" WRONG {o_bad}" if o_bad else ""), flush=True)
            row = {"shape": shape, "backend": name, "config": as_json(cfg), "pick_s": pick_s, "bytes": nbytes,
                   "ceiling_us": ceil["us"], "ceiling_launch": list(ceil["shape"]),
                   "ceiling_policy": ceil["policy"], "kernel_us": us,
                   "ratio": ceil["us"] / us, "permuted_us": us_perm, "permuted_ratio": ceil["us"] / us_perm,
                   "server_us": s_us, "server_ceiling_us": sceil["us"], "server_ratio": sceil["us"] / s_us,
                   "server_ceiling_launch": list(sceil["shape"]), "server_ceiling_policy": sceil["policy"],
                   "sol_b200_us": s.get("sol_us"), "other_gpu_configs": others}
            if bad or bad_perm:
                row["wrong"] = bad + bad_perm
            rows.append(row)
            print(f"   {shape} [{name} {cfg}] (picked in {pick_s:.2f} s): kernel {us:.2f} us "
                  f"(permuted scales {us_perm:.2f}), ceiling {ceil['us']:.2f} us, ratio {row['ratio']:.3f}; "
                  f"server {s_us:.2f} us, ceiling {sceil['us']:.2f}, ratio {row['server_ratio']:.3f}"
                  + (f" WRONG {row['wrong']}" if "wrong" in row else ""), flush=True)
        if args.no_server:
            continue
        bad = check(sub.custom_kernel, cases)
        chosen = backend_that_ran(m, k, l)
        harness_us = timing.median(timing.harness_times(sub.custom_kernel, sets[0]))
        host, bare_host = timing.host_cost_beside_bare(sub.custom_kernel, sets[0])
        row = {"shape": shape, "backend": chosen, "harness_us": harness_us, "floor_us": floor,
               "host_us": host, "bare_host_us": bare_host, "ceiling_us": ceil["us"]}
        if bad:
            row["wrong"] = bad
        rows.append(row)
        print(f"   {shape} custom_kernel ({chosen}): harness {harness_us:.2f} us (floor {floor:.2f}); "
              f"host/call {host:.1f} us (bare Triton launch {bare_host:.1f})" + (f" WRONG {bad}" if bad else ""),
              flush=True)
    print_table(info, rows)
    print("\n".join([""] + ceiling_lines(ceilings)))
    write_outputs(args, {"info": info, "command": command, "rows": rows, "sweeps": sweeps, "ceilings": ceilings},
                  md_lines(info, rows, command) + ceiling_lines(ceilings) + [""])
    return 0 if all("wrong" not in r for r in rows) else 1


def write_outputs(args, record: dict, lines: list) -> None:
    """--json (the run's record) and --md (its page, ``lines``), folders made as needed."""
    for path, text, what in ((args.json, lambda: json.dumps(record, indent=1, default=str), "JSON"),
                             (args.md, lambda: "\n".join(lines), "markdown")):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text())
            print(f"wrote {what}: {path}", file=sys.stderr)


def ceiling_record(ceil: dict, sceil: dict) -> dict:
    """The JSON record of one shape's read ceilings (timing.best_read's dicts, clean and under
    the server's protocol): the winner's µs, launch and policy, each policy's best, refusals."""
    def one(c):
        return {"us": c["us"], "launch": list(c.get("shape", ())), "policy": c.get("policy", ""),
                "by_policy": {p: {"us": v["us"], "launch": list(v["shape"])}
                              for p, v in c.get("by_policy", {}).items()},
                "errors": c.get("errors", {})}
    return {"clean": one(ceil), "server": one(sceil)}


def policy_line(rec: dict) -> str:
    """'plain 25.41; 28.10, cs 25.40; 27.95, ...' for a ceiling_record."""
    clean, server = rec["clean"]["by_policy"], rec["server"]["by_policy"]
    cells = []
    for p in dict.fromkeys([*clean, *server]):
        c = f"{clean[p]['us']:.2f}" if p in clean else "-"
        s = f"{server[p]['us']:.2f}" if p in server else "-"
        cells.append(f"{p} {c}; {s}")
    return ", ".join(cells)


def ceiling_lines(ceilings: dict) -> list[str]:
    """Markdown: the read's best µs per load policy and shape, clean and under the server's
    protocol (each at its own fastest launch shape); the winners of each shape marked *."""
    if not ceilings:
        return []
    policies = list(dict.fromkeys(p for rec in ceilings.values() for kind in ("clean", "server")
                                  for p in rec[kind]["by_policy"]))
    out = ["## Read ceiling per load policy", "",
           "Median µs of the read at the policy's fastest launch shape: clean (rotating sets); server "
           "protocol. * marks the ceiling (the fastest policy) of each column.", "",
           "| load policy | " + " | ".join(f"{s} clean | {s} server" for s in ceilings) + " |",
           "|---|" + "---|---|" * len(ceilings)]
    for p in policies:
        cells = []
        for rec in ceilings.values():
            for kind in ("clean", "server"):
                v = rec[kind]["by_policy"].get(p)
                cells.append("-" if v is None else f"{v['us']:.2f}" + (" *" if rec[kind]["policy"] == p else ""))
        out.append(f"| {p} | " + " | ".join(cells) + " |")
    errors = {(s, kind, p): e for s, rec in ceilings.items() for kind in ("clean", "server")
              for p, e in rec[kind]["errors"].items()}
    for (s, kind, p), e in errors.items():
        out += ["", f"{s} {kind}: {p} not timed ({e})"]
    return out


def table_lines(info, rows) -> list[str]:
    out = ["| shape (m x k x l) | backend, config | kernel µs | read ceiling µs | ceiling / kernel "
           "| kernel µs, permuted scales | harness µs (bare-launch floor) | host µs/call (bare Triton launch) "
           "| server protocol: kernel µs (read ceiling, ratio) |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "wrong" in r:
            out.append(f"| {r['shape']} | {r['backend']} | WRONG: {str(r['wrong'])[:80]} | | | | | | |")
        elif "harness_us" in r:
            out.append(f"| {r['shape']} | custom_kernel, {r['backend']} | | {r['ceiling_us']:.2f} | | | "
                       f"{r['harness_us']:.2f} ({r['floor_us']:.2f}) | {r['host_us']:.1f} ({r['bare_host_us']:.1f}) "
                       "| |")
        else:
            policy = f" {r['server_ceiling_policy']}" if r.get("server_ceiling_policy") else ""
            clean = f" {r['ceiling_policy']}" if r.get("ceiling_policy") else ""
            server = (f"{r['server_us']:.2f} ({r['server_ceiling_us']:.2f}{policy}, {r['server_ratio']:.3f})"
                      if "server_us" in r else "")
            out.append(f"| {r['shape']} | {r['backend']} {config_text(r['config'])} | {r['kernel_us']:.2f} | "
                       f"{r['ceiling_us']:.2f}{clean} | {r['ratio']:.3f} | {r['permuted_us']:.2f} | | | {server} |")
    return out


def print_table(info, rows):
    print(f"\n{info['device']} (cc {info['capability']}), torch {info['torch']}, triton {info['triton']}, "
          f"{info['date']}")
    print("\n".join(table_lines(info, rows)))


def md_lines(info, rows, command) -> list:
    return [
        "# Kernel benchmark results", "",
        f"Device: {info['device']} (compute capability {info['capability'][0]}.{info['capability'][1]}, "
        f"{info['sms']} SMs, L2 {info['l2_mb']:.0f} MB). Date: {info['date']}. "
        f"torch {info['torch']}, triton {info['triton']}.", "",
        f"Command (on a CUDA machine, from the repository root): `{command}`", "",
        "Kernel: device time, L2 cold (8 rotating input sets, events per call, median of the calls). "
        "Read ceiling: the same protocol around a read of the same bytes (a + sfa + b row 0 + "
        "sfb row 0 + c), the fastest of its launch shapes x load policies (table below). Harness: the "
        "leaderboard protocol (sync, clear L2, event, custom_kernel, event, sync), host time included; "
        "the floor is that protocol around an empty Triton kernel. Server "
        "protocol: the kernel (and the read) alone under that protocol, median of 20: the clear leaves "
        "the L2 full of dirty lines whose write-back shares the DRAM with the call; its read ceiling is the "
        "fastest shape x policy under that protocol. Host µs/call: CPU "
        "time per call without sync, custom_kernel and a bare Triton launch in 7 alternating rounds of "
        "200 calls, medians.", "",
    ] + table_lines(info, rows) + [""]


# --------------------------------------------------------------------------- SM pressure

def _without(argv: list, names: tuple) -> list:
    """argv without the options ``names`` and their values (``--x v`` and ``--x=v``)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in names:
            skip = True
        elif not any(a.startswith(n + "=") for n in names):
            out.append(a)
    return out


def _sms_child(n: int, base: list) -> dict | None:
    """One point: this script on n SMs (0: the whole GPU) in a fresh process; its JSON, or None
    where the child skipped (no green context here: it said why)."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "point.json"
        # configs picked by the tuner on the restricted GPU, as on a GPU model no table names (a
        # B200), unless NVFP4_GEMV_TUNE says otherwise
        env = {**os.environ, "NVFP4_GEMV_TUNE": os.environ.get("NVFP4_GEMV_TUNE", "force")}
        rc = subprocess.run([sys.executable, str(Path(__file__).resolve()), *base, "--sms-child", str(n),
                             "--json", str(out)], env=env).returncode
        if rc == 3:
            return None
        if not out.exists():
            return {"sms": n, "error": f"the run on {n or 'all'} SMs exited {rc} without results", "rows": []}
        data = json.loads(out.read_text())
    data["command"] = record_command([*base, "--sms-child", str(n)])  # without the temporary file
    data["sms"], data["rc"] = n, rc
    return data


def sms_main(args, argv: list) -> int:
    base = _without(argv, ("--sms", "--json", "--md", "--sms-child"))
    points = list(args.sms_points)
    results = []
    if points == ["auto"]:
        full = _sms_child(0, base)
        if full is None or not full.get("rows"):
            print("bench_kernel.py --sms auto: no full-width run, so no B200-equivalent point", file=sys.stderr)
            return 1
        results.append(full)
        n, bw = b200_equivalent_sms(full["rows"])
        sms = full["info"]["sms"]
        print(f"B200-equivalent point: {n} of {sms} SMs (best full-width read {bw / 1e12:.2f} TB/s "
              f"x {B200_SMS} / {B200_READ_BPS / 1e12:.1f} TB/s)", flush=True)
        points = [n] if n < sms else []
    for n in points:
        point = _sms_child(n, base)
        if point is None:
            return 0  # the child said in one line why there is no green context here
        results.append(point)
    lines = sms_table(results)
    print("\n" + "\n".join(lines))
    command = record_command(argv)
    info = next((r["info"] for r in results if "info" in r), {})
    write_outputs(args, {"command": command, "points": results}, [
        "# SM-pressure benchmark", "",
        f"Device: {info.get('device', '?')}, {info.get('sms', '?')} SMs. Date: {info.get('date', '?')}. "
        f"torch {info.get('torch', '?')}, triton {info.get('triton', '?')}.", "",
        f"Command (on a CUDA machine, from the repository root): `{command}`", "",
        SMS_NOTE, ""] + lines + [""])
    return 0 if all(not r.get("error") and r.get("rc", 0) == 0 for r in results) else 1


SMS_NOTE = ("Each row: one process on a CUDA green context of that many SMs (driver: the count the driver "
            "reports for the context). Per shape: the read ceiling's device time at that SM count, then "
            "read / kernel for each backend's picked config (L2 cold, 8 rotating sets, median). Spin: one "
            "compute-bound kernel launched through Triton and through the cuda backend's driver path; its "
            "time must scale as 1 / SMs, which shows both paths run inside the green context.")


def sms_table(results: list) -> list:
    shapes = list(dict.fromkeys(r["shape"] for p in results for r in p.get("rows", []) if "kernel_us" in r))
    backends = list(dict.fromkeys(r["backend"] for p in results for r in p.get("rows", []) if "kernel_us" in r))
    head = "| SMs (driver) | spin µs: triton, cuda | " + " | ".join(
        f"{s}: read µs, " + ", ".join(backends) for s in shapes) + " |"
    out = [head, "|" + "---|" * (2 + len(shapes))]
    for p in results:
        info = p.get("info", {})
        label = f"{p['sms'] or info.get('sms', 'all')} ({info.get('context_sms', '?')})"
        spin = info.get("launch_scaling_us", {})
        cells = [label, f"{spin.get('triton', float('nan')):.1f}, {spin.get('cuda', float('nan')):.1f}"]
        for shape in shapes:
            rows = {r["backend"]: r for r in p.get("rows", []) if r.get("shape") == shape and "kernel_us" in r}
            ceil = next((r["ceiling_us"] for r in rows.values()), float("nan"))
            cells.append(f"{ceil:.2f}, " + ", ".join(
                f"{rows[b]['ratio']:.3f}" if b in rows and "wrong" not in rows[b] else "-" for b in backends))
        if p.get("error"):
            cells.append(p["error"])
        out.append("| " + " | ".join(cells) + " |")
    return out


if __name__ == "__main__":
    sys.exit(main())
