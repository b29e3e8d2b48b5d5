"""The per-call floor of the leaderboard's protocol, taken apart (needs a CUDA GPU).

A script, not a test; without CUDA it says so and exits 2. Every call below is timed by a
pair of CUDA events around it (median and mean of ``--reps`` calls, default 100), under
several protocols:

* ``server``: the leaderboard's (``timing.harness_times``): sync, the server's L2 clear (a 4 GiB
  write), start event, call, end event, sync. There is no sync between the clear and the start
  event: gpu-mode/reference-kernels, problems/nvidia/eval.py at
  f83cb92a534cc67fa98d7e9813e7f8238abdb4e0 synchronizes before the clear, then records, calls,
  records and synchronizes. The call is queued behind the clear's milliseconds of device work,
  so the host's launch time is hidden, and it runs right after the clear.
* ``no clear``: the same without the clear: the GPU is idle when the start event is recorded,
  so the host's launch time lies between the events.
* ``no clear, held``: the GPU held by a spin (``torch.cuda._sleep``, about 200 µs) before the
  start event: the host queues the call meanwhile; device time with a clean(er) L2.
* ``clear, sync``: the clear, then a sync, then the events: the L2 is left as dirty as under
  the server, but the call starts on an idle GPU (host launch time exposed again).
* ``clear, sync, held``: the clear, a sync, a spin, the events: a dirty L2 without the host's
  time and without the call sitting right behind the clear.

What is timed:

* ``events``: nothing between the two events;
* ``empty triton``: an empty Triton kernel, one program (``timing.bare_launch_floor``'s);
* ``empty cuda``: an empty kernel with no parameters through the cuda backend's driver launch
  (NVRTC via ``submission.cuda_compile``, ``submission.cuda_driver().function`` and its
  ``launch``), one block of 32 threads;
* ``kit params``, per benchmark shape: ``submission.cuda_empty_kernel``, an empty kernel taking
  the cuda backend's parameters, launched with ``submission.cuda_launch`` on the grid (M / rows,
  L) and block size of the config ``submission.config_for("cuda", ...)`` picks, on
  ``reference.generate_input`` data: the kit's launch path and grid with a kernel that returns at
  once;
* ``custom_kernel``, per benchmark shape: the kit's real entry point, for scale.

The L2 clear's own cost is never between the events. The table gives median / mean µs per
protocol; the lines after it say what the differences mean.

Usage (repository root, on a CUDA machine):
  python3 benchmarks/floor.py
  python3 benchmarks/floor.py --reps 200 --json out/floor.json
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

if not __package__:  # run as `python3 benchmarks/NAME.py`: kitpath puts the kit's root on sys.path
    import kitpath  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent

# torch is imported where the GPU is timed: --help, an argument error and the refusal on a
# machine without a CUDA GPU (harness.cuda_available) import none of it.
from harness import SHAPE_SETS  # noqa: E402  tests, benchmarks, all (harness imports no torch at the top)

PROTOCOLS = ("server", "no clear", "no clear, held", "clear, sync", "clear, sync, held")
# the protocols every item is timed under; the two "clear, sync" ones only for the empty kernels
ITEM_PROTOCOLS = PROTOCOLS[:3]
HOLD_S = 200e-6  # the spin before the start event: above the host's 20-35 µs per launch seen on the H100
DEFAULT_REPS = 100
EMPTY_CUDA_SRC = 'extern "C" __global__ void floor_empty() {}\n'


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python3 benchmarks/floor.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=DEFAULT_REPS,
                    help=f"timed calls per item and protocol (default {DEFAULT_REPS}; at least 50)")
    ap.add_argument("--json", default="", help="write the run's record (JSON) here")
    ap.add_argument("--shapes", choices=SHAPE_SETS, default="benchmarks",
                    help="shape set of shapes.json for the per-shape items: benchmarks (default), tests or all")
    return ap


# --------------------------------------------------------------------------- protocols

def _events():
    import torch
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


def protocol_times(protocol: str, fn, data, reps: int, warmup: int = 3) -> list[float]:
    """µs of ``fn(data)`` between two events, ``reps`` calls, under ``protocol`` (PROTOCOLS)."""
    import torch

    from benchmarks import timing
    from utils import clear_l2_cache
    if protocol == "server":
        return timing.harness_times(fn, data, reps, warmup)
    clear = protocol.startswith("clear")
    hold = protocol.endswith("held")
    cycles = int(HOLD_S * timing.clock_hz()) if hold else 0
    for _ in range(warmup):
        fn(data)
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        if clear:
            clear_l2_cache()
            torch.cuda.synchronize()
        if hold:
            torch.cuda._sleep(cycles)
        start, end = _events()
        start.record()
        fn(data)
        end.record()
        torch.cuda.synchronize()
        out.append(start.elapsed_time(end) * 1e3)
    return out


def summary(xs: list[float]) -> dict:
    return {"median": float(statistics.median(xs)), "mean": float(statistics.fmean(xs)), "n": len(xs)}


# --------------------------------------------------------------------------- what is timed

def _empty_cuda(sub, dev):
    """The empty parameterless kernel through the cuda backend's driver launch."""
    import torch
    arch = sub.cuda_arch(torch.cuda.get_device_capability(dev))
    fn = sub.cuda_driver().function(sub.cuda_compile(EMPTY_CUDA_SRC, arch), "floor_empty", dev)
    u = ctypes.c_uint
    args = (fn, u(1), u(1), u(1), u(32), u(1), u(1), u(0), None, None, None)
    launch = sub.cuda_driver().launch

    def run(_):
        res = launch(*args)
        if res:
            raise RuntimeError(f"empty cuda kernel launch failed: {sub.cuda_driver().error(res)}")
    return run


def kit_params_source() -> str:
    """An empty kernel with the cuda backend's parameter list (its integer types declared)."""
    import submission
    return submission.cuda_empty_kernel("floor_params")


def _kit_params(sub, dev, data, m: int, k: int, l: int) -> tuple:
    """(launch of the empty kit-parameter kernel on the picked config's grid and block, detail)."""
    import torch
    cfg = sub.config_for("cuda", data, m, k, l)
    cfg = sub.CudaConfig.of(cfg)
    arch = sub.cuda_arch(torch.cuda.get_device_capability(dev))
    fn = sub.cuda_driver().function(sub.cuda_compile(kit_params_source(), arch), "floor_params", dev)
    a, b, sfa, sfb, _, _, c = data
    scalars = (k // 32, a.stride(0), a.stride(2), b.stride(2), sfa.stride(0), sfa.stride(2), sfb.stride(2),
               c.stride(0), c.stride(2))
    grid, threads = sub.cuda_grid(cfg, m, l, dev)
    run = sub.cuda_launch(fn, grid, threads, scalars, None, m // cfg.rows)  # the K split's scratch: null, never read
    return (lambda d: run(d[0], d[1], d[2], d[3], d[6])), (f"grid {grid[0]} x {grid[1]} x {grid[2]}, {threads} "
                                                          f"threads, {cfg!r}")


def measure(reps: int, shapes: list) -> dict:
    """Every item under its protocols; an item that cannot be built is recorded with why."""
    import torch

    import reference
    import submission as sub
    from benchmarks import timing
    dev = torch.device("cuda")
    rows, errors = [], []

    def add(what: str, shape: str, detail: str, fn, data, protocols):
        row = {"what": what, "shape": shape, "detail": detail, "times": {}}
        t0 = time.perf_counter()
        try:
            for p in protocols:
                row["times"][p] = summary(protocol_times(p, fn, data, reps))
        except Exception as exc:  # noqa: BLE001 - one item's failure is a line of the record
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
        rows.append(row)
        cells = ", ".join(f"{p} {v['median']:.2f}" for p, v in row["times"].items())
        print(f"   {what} {shape}: {cells}" + (f" ERROR {row['error']}" if "error" in row else "")
              + f" ({time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)

    x = torch.empty(1, device=dev)
    add("events", "", "nothing between the events", lambda _: None, None, PROTOCOLS)
    add("empty triton", "", "timing.empty_kernel, 1 program", lambda _: timing.empty_kernel[(1,)](x), None,
        PROTOCOLS)
    try:
        add("empty cuda", "", "NVRTC, driver launch, 1 block of 32", _empty_cuda(sub, dev), None, PROTOCOLS)
    except Exception as exc:  # noqa: BLE001 - no NVRTC or driver here: said, the rest goes on
        errors.append(f"empty cuda: {type(exc).__name__}: {exc}")
    for s in shapes:
        m, k, l = s["m"], s["k"], s["l"]
        shape = f"{m}x{k}x{l}"
        data = reference.generate_input(m, k, l, s["seed"], device="cuda")
        try:
            fn, detail = _kit_params(sub, dev, data, m, k, l)
            add("kit params", shape, detail, fn, data, ITEM_PROTOCOLS)
        except Exception as exc:  # noqa: BLE001
            errors.append(f"kit params {shape}: {type(exc).__name__}: {str(exc)[:300]}")
        add("custom_kernel", shape, "submission.custom_kernel", sub.custom_kernel, data, ITEM_PROTOCOLS)
    return {"rows": rows, "errors": errors}


# --------------------------------------------------------------------------- report

def _cell(row: dict, protocol: str) -> str:
    v = row.get("times", {}).get(protocol)
    return "-" if v is None else f"{v['median']:.2f} / {v['mean']:.2f}"


def table_lines(record: dict) -> list[str]:
    """Markdown: one line per item, median / mean µs per protocol."""
    out = ["| what | shape | " + " | ".join(f"{p}: median / mean µs" for p in PROTOCOLS) + " | detail |",
           "|---|---|" + "---|" * len(PROTOCOLS) + "---|"]
    for r in record["rows"]:
        detail = r["detail"] + (f"; ERROR {r['error']}" if "error" in r else "")
        out.append(f"| {r['what']} | {r['shape'] or '-'} | " + " | ".join(_cell(r, p) for p in PROTOCOLS)
                   + f" | {detail} |")
    return out


def _med(record: dict, what: str, protocol: str, shape: str = ""):
    for r in record["rows"]:
        if r["what"] == what and r["shape"] == shape and protocol in r.get("times", {}):
            return r["times"][protocol]["median"]
    return None


def words(record: dict) -> list[str]:
    """What the medians say, as differences (each line only where both sides were measured)."""
    out = []
    med = lambda *a: _med(record, *a)  # noqa: E731
    ev = med("events", "server")
    if ev is not None:
        out.append(f"- The events alone, under the server's protocol: {ev:.2f} µs.")
    for what in ("empty triton", "empty cuda"):
        s, h, cs, csh, n = (med(what, p) for p in ("server", "no clear, held", "clear, sync", "clear, sync, held",
                                                    "no clear"))
        if s is None:
            continue
        line = f"- {what}: {s:.2f} µs under the server's protocol"
        if ev is not None:
            line += f", {s - ev:.2f} over the events alone"
        if h is not None:
            line += f"; {h:.2f} with no clear and the GPU held (the launch on the device, L2 clean)"
        line += "."
        out.append(line)
        if csh is not None and h is not None:
            out.append(f"  Dirty L2 alone (clear, sync, held minus no clear, held): {csh - h:+.2f} µs. "
                       f"Right behind the clear (server minus clear, sync, held): {s - csh:+.2f} µs.")
        if cs is not None and csh is not None:
            out.append(f"  Host launch time exposed once the GPU is idle (clear, sync minus clear, sync, held): "
                       f"{cs - csh:+.2f} µs" + (f"; without any clear (no clear minus no clear, held): {n - h:+.2f} µs"
                                                if n is not None and h is not None else "") + ".")
    base = med("empty cuda", "server")
    shapes = list(dict.fromkeys(r["shape"] for r in record["rows"] if r["shape"]))
    for shape in shapes:
        kp, ck = med("kit params", "server", shape), med("custom_kernel", "server", shape)
        parts = []
        if kp is not None:
            parts.append(f"the kit's parameters and grid, returning at once: {kp:.2f} µs"
                         + (f" ({kp - base:+.2f} over the empty cuda kernel)" if base is not None else ""))
        if ck is not None:
            parts.append(f"custom_kernel {ck:.2f} µs" + (f", of which {kp / ck:.0%} is that floor" if kp else ""))
        if parts:
            out.append(f"- {shape} under the server's protocol: " + "; ".join(parts) + ".")
    for e in record.get("errors", []):
        out.append(f"- not measured: {e}")
    return out


def env_info() -> dict:
    import torch
    import triton

    from benchmarks.apply_table import kernel_revision, kit_revision
    p = torch.cuda.get_device_properties(0)
    return {"device": torch.cuda.get_device_name(0), "capability": list(torch.cuda.get_device_capability(0)),
            "sms": p.multi_processor_count, "torch": torch.__version__, "triton": triton.__version__,
            "date": datetime.date.today().isoformat(), "kit_revision": kit_revision(ROOT),
            "kernel_revision": kernel_revision(str(ROOT / "submission.py"))}


def report_lines(record: dict) -> list[str]:
    info = record.get("info", {})
    return ([f"{info.get('device', '?')} (cc {info.get('capability', '?')}), torch {info.get('torch', '?')}, "
             f"triton {info.get('triton', '?')}, {info.get('date', '?')}, kit {info.get('kit_revision', '?')}; "
             f"{record.get('reps', '?')} calls per cell", ""]
            + table_lines(record) + [""] + words(record))


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.reps < 50:
        ap.error("--reps must be >= 50 (median and mean of at least 50 calls)")
    import harness
    problem = harness.writable_file_problem(args.json or None, "--json", "floor.json")
    if problem:
        ap.exit(2, f"floor.py: {problem}\n")
    if not harness.cuda_available():
        print("floor.py needs a CUDA GPU (CUDA events, the server's L2 clear); this machine has none",
              file=sys.stderr)
        return 2
    import submission
    from benchmarks import refusals
    problem = refusals.gpu_build_problem(submission)  # custom_kernel and the kit's launch: the cuda backend
    if problem:
        print(f"floor.py: {problem}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    record = {"info": env_info(), "reps": args.reps,
              "command": harness.kit_command(["python3", "benchmarks/floor.py"],
                                             sys.argv[1:] if argv is None else argv, ("--json",))}
    record.update(measure(args.reps, harness.shape_set(args.shapes)))
    record["seconds"] = round(time.perf_counter() - t0, 1)
    print("\n".join(report_lines(record)))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(record, indent=1))
        print(f"wrote JSON: {args.json}", file=sys.stderr)
    return 0 if not record["errors"] and all("error" not in r for r in record["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
