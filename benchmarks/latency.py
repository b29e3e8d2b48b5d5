"""DRAM latency on this GPU, unloaded and while a read keeps the DRAM busy, and the bytes in flight
per SM it takes to keep it busy (needs CUDA).

One kernel, compiled by NVRTC (``submission.cuda_compile``) and launched through the cuda
backend's driver calls (``submission.cuda_driver``), does both things at once, so no second
queue is needed:

* block 0, thread 0 chases pointers: ``--hops`` dependent 4-byte loads (``ld.global.cg``: past
  L1), each holding the position of the next, through a random cycle over 128-byte lines of a
  ``--chain-mb`` buffer (default 1024 MiB, far beyond any L2 of these GPUs; each chase goes on
  where the last one ended, so no hop reads a line read before and each is a DRAM access); the
  time per hop (``%globaltimer``, ns; ``clock64``, SM cycles) is the latency;
* the other blocks (``B`` per SM, 128 threads each) read a separate 2 GiB buffer in a grid-stride
  loop, ``U`` independent 16-byte L1-no-allocate loads per thread per iteration, from before the
  chase starts (the chaser waits until every reader block has begun) until it ends (a flag it
  sets); the bytes they read over their time is the read bandwidth under which the latency was
  taken. Their loads in flight per SM are B x 128 x 16 x U bytes.

Levels: no readers (the unloaded latency), then B x U = 1x1, 1x2, 1x4, 2x4, 4x4, 8x4, 15x4
(2 to 120 KB in flight per SM), each ``--reps`` times (medians). Summary (``summarize``): the
best read bandwidth of the levels; the knee, the level of least in flight whose read reaches
``KNEE`` (95%) of the best; the loaded latency, the latency at the knee; and what the GPU needs
in flight per SM (Little's law): best read x loaded latency / SMs. Beyond the knee more bytes in
flight only queue (the latency grows, the read does not), so the knee's latency, not the
latency at the heaviest load, is what a kernel must cover.

    python3 benchmarks/latency.py [--json FILE] [--hops 20000] [--reps 3]   # needs CUDA

benchmarks/inflight.py --latency FILE takes the JSON in place of its cited latency.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time
from pathlib import Path

if not __package__:  # run as `python3 benchmarks/NAME.py`: kitpath puts the kit's root on sys.path
    import kitpath  # noqa: F401

KNEE = 0.95
LEVELS = ((0, 0), (1, 1), (1, 2), (1, 4), (2, 4), (4, 4), (8, 4), (15, 4))  # (reader blocks per SM, loads per thread)
READ_THREADS = 128
READ_BUFFER = 2 << 30
LINE = 128

PROBE_SRC = r"""
typedef unsigned long long u64;
__device__ __forceinline__ u64 gtime() { u64 t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }

// ctl[0]: reader blocks started; ctl[1]: stop. out[0]: chase ns, out[1]: chase cycles, out[2]: sink,
// out[3]: bytes read, out[4]: first reader start (ns), out[5]: last reader end (ns).
extern "C" __global__ void __launch_bounds__(128, 16) latency_probe(
    const unsigned* __restrict__ chain, int hops, const uint4* __restrict__ buf, long long n16,
    unsigned* ctl, u64* out, unsigned first) {
  const unsigned readers = gridDim.x - 1;
  if (blockIdx.x == 0) {
    if (threadIdx.x != 0) return;
    const u64 w0 = gtime();
    while (readers && *(volatile unsigned*)&ctl[0] < readers && gtime() - w0 < 50000000ull) {}
    unsigned i = first;  // where the last chase ended: no line is visited twice (nor found in L2)
    const u64 c0 = clock64(), t0 = gtime();
    for (int h = 0; h < hops; ++h) asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(i) : "l"(chain + i));
    const u64 c1 = clock64(), t1 = gtime();
    out[0] = t1 - t0;
    out[1] = c1 - c0;
    out[2] = i;
    __threadfence();
    atomicExch(&ctl[1], 1u);
    return;
  }
  if (threadIdx.x == 0) atomicAdd(&ctl[0], 1u);
  const u64 start = gtime();
  const long long stride = (long long)readers * blockDim.x;
  long long idx = (long long)(blockIdx.x - 1) * blockDim.x + threadIdx.x;
  unsigned acc = 0;
  u64 n = 0;
  for (;;) {
    unsigned v[UNROLL][4];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      long long j = idx + u * stride;
      if (j >= n16) j -= n16;
      asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(v[u][0]), "=r"(v[u][1]), "=r"(v[u][2]), "=r"(v[u][3]) : "l"(buf + j));
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) acc ^= v[u][0] ^ v[u][1] ^ v[u][2] ^ v[u][3];
    idx += UNROLL * stride;
    if (idx >= n16) idx -= n16;
    ++n;
    if ((n & 7) == 0 && (*(volatile unsigned*)&ctl[1] || gtime() - start > 500000000ull)) break;
  }
  const u64 end = gtime();
  if (acc == 0x9e3779b9u) out[2] = acc;  // keeps the loads (never true for the zero-filled buffer)
  atomicAdd(&out[3], n * UNROLL * 16ull);
  atomicMin(&out[4], start);
  atomicMax(&out[5], end);
}
"""


def summarize(levels: list, sms: int) -> dict:
    """The summary of measured levels (dicts with reader_blocks_per_sm, in_flight_per_sm, read_bps,
    latency_ns): unloaded latency, best read, the knee (the least in flight reading >= KNEE of the
    best) and its latency, and the need per SM = best read x knee latency / SMs."""
    if sms < 1:
        raise ValueError(f"summarize needs the GPU's SM count (>= 1), got {sms}")
    unloaded = [lv for lv in levels if not lv["reader_blocks_per_sm"]]
    loaded = sorted((lv for lv in levels if lv["reader_blocks_per_sm"]), key=lambda lv: lv["in_flight_per_sm"])
    if not unloaded or not loaded:
        raise ValueError("summarize needs the unloaded level and at least one loaded level")
    best = max(lv["read_bps"] for lv in loaded)
    knee = next(lv for lv in loaded if lv["read_bps"] >= KNEE * best)
    return {"unloaded_latency_ns": unloaded[0]["latency_ns"], "best_read_bps": best,
            "knee_in_flight_per_sm": knee["in_flight_per_sm"], "knee_read_bps": knee["read_bps"],
            "knee_latency_ns": knee["latency_ns"], "need_per_sm": best * knee["latency_ns"] * 1e-9 / sms,
            "heaviest_latency_ns": loaded[-1]["latency_ns"]}


def report(record: dict) -> list:
    """Markdown lines of a record: the levels, then the summary in words."""
    s = record["summary"]
    out = [f"DRAM latency on {record['device']} ({record['sms']} SMs), {record['date']}: pointer chase of "
           f"{record['hops']} hops over {record['chain_mb']} MiB, medians of {record['reps']}", "",
           "| reader blocks per SM x loads per thread | reader bytes in flight per SM | read TB/s | latency ns "
           "| latency cycles |", "|---|---|---|---|---|"]
    for lv in record["levels"]:
        b, u = lv["reader_blocks_per_sm"], lv["unroll"]
        out.append(f"| {f'{b} x {u}' if b else 'none (unloaded)'} | {lv['in_flight_per_sm']} | "
                   f"{lv['read_bps'] / 1e12:.2f} | {lv['latency_ns']:.0f} | {lv['latency_cycles']:.0f} |")
    out += ["", f"unloaded latency {s['unloaded_latency_ns']:.0f} ns; best read {s['best_read_bps'] / 1e12:.2f} TB/s; "
            f"knee (>= {KNEE:.0%} of it) at {s['knee_in_flight_per_sm'] / 1024:.1f} KB in flight per SM, latency "
            f"{s['knee_latency_ns']:.0f} ns (heaviest load: {s['heaviest_latency_ns']:.0f} ns); need per SM = "
            f"best read x knee latency / SMs = {s['need_per_sm'] / 1024:.1f} KB"]
    return out


def measure(args) -> dict:  # pragma: no cover - needs CUDA
    import torch

    import submission

    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    sms = props.multi_processor_count
    arch = submission.cuda_arch(torch.cuda.get_device_capability(dev))
    nodes = args.chain_mb * (1 << 20) // LINE
    words = LINE // 4
    perm = torch.randperm(nodes, device=dev, dtype=torch.int64)
    chain = torch.zeros(nodes * words, dtype=torch.int32, device=dev)
    chain[perm * words] = (torch.roll(perm, -1) * words).to(torch.int32)
    buf = torch.zeros(READ_BUFFER, dtype=torch.uint8, device=dev)
    ctl = torch.zeros(2, dtype=torch.int32, device=dev)
    out = torch.zeros(6, dtype=torch.int64, device=dev)
    drv = submission.cuda_driver()
    fns = {}
    pos = [0]  # the chase goes on where the last one ended, so every hop reads a line not read before

    def probe(blocks_per_sm: int, unroll: int, hops: int) -> tuple:
        u = max(unroll, 1)
        if u not in fns:
            cubin = submission.cuda_compile(PROBE_SRC, arch, {"UNROLL": u})
            fns[u] = drv.function(cubin, "latency_probe", dev)
        ctl.zero_()
        out.zero_()
        out[4] = (1 << 63) - 1
        vals = [ctypes.c_void_p(chain.data_ptr()), ctypes.c_int(hops), ctypes.c_void_p(buf.data_ptr()),
                ctypes.c_longlong(READ_BUFFER // 16), ctypes.c_void_p(ctl.data_ptr()), ctypes.c_void_p(out.data_ptr()),
                ctypes.c_uint(pos[0])]
        params = (ctypes.c_void_p * len(vals))(*[ctypes.addressof(v) for v in vals])
        grid = 1 + blocks_per_sm * sms
        res = drv.launch(fns[u], grid, 1, 1, READ_THREADS, 1, 1, 0, None, params, None)
        if res:
            raise RuntimeError(f"latency probe launch failed: {drv.error(res)}")
        torch.cuda.synchronize()
        o = out.tolist()
        pos[0] = int(o[2])
        read = o[3] / ((o[5] - o[4]) * 1e-9) if blocks_per_sm and o[5] > o[4] else 0.0
        return o[0] / hops, o[1] / hops, read

    probe(0, 1, 1000)  # load the module, touch the chain's pages
    levels = []
    for blocks, unroll in LEVELS:
        runs = [probe(blocks, unroll, args.hops) for _ in range(args.reps)]
        levels.append({"reader_blocks_per_sm": blocks, "unroll": unroll,
                       "in_flight_per_sm": blocks * READ_THREADS * 16 * unroll,
                       "latency_ns": statistics.median(r[0] for r in runs),
                       "latency_cycles": statistics.median(r[1] for r in runs),
                       "read_bps": statistics.median(r[2] for r in runs)})
        print(f"latency: {blocks} x {unroll}: {levels[-1]['latency_ns']:.0f} ns, "
              f"{levels[-1]['read_bps'] / 1e12:.2f} TB/s", file=sys.stderr, flush=True)
    return {"device": torch.cuda.get_device_name(dev), "sms": sms, "capability": [props.major, props.minor],
            "date": time.strftime("%Y-%m-%d"),
            "torch": torch.__version__, "chain_mb": args.chain_mb, "hops": args.hops, "reps": args.reps,
            "levels": levels, "summary": summarize(levels, sms)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 benchmarks/latency.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default="", help="write the record here (benchmarks/inflight.py --latency reads it)")
    ap.add_argument("--hops", type=int, default=20000, help="dependent loads per chase (default 20000)")
    ap.add_argument("--reps", type=int, default=3, help="chases per level, medians kept (default 3)")
    ap.add_argument("--chain-mb", type=int, default=1024, help="MiB the chase walks (default 1024)")
    args = ap.parse_args(argv)
    if args.hops < 1 or args.reps < 1 or args.chain_mb < 1:
        ap.error("--hops, --reps and --chain-mb must be >= 1")
    import harness  # no torch at its top
    problem = harness.writable_file_problem(args.json or None, "--json", "latency.json")
    if problem:
        ap.exit(2, f"latency.py: {problem}\n")
    if not harness.cuda_available():  # no torch imported where the machine has no CUDA driver
        print("latency.py needs a CUDA GPU (torch.cuda.is_available() is False here)", file=sys.stderr)
        return 2
    import torch

    import submission
    from benchmarks import refusals

    try:
        submission.find_nvrtc()
    except submission.CudaBuildError as exc:
        print(f"latency.py needs NVRTC: {exc}", file=sys.stderr)
        return 2
    arch = submission.cuda_arch(torch.cuda.get_device_capability())
    try:  # the probe compiled before any GPU work: one that does not compile is one line
        submission.cuda_compile(PROBE_SRC, arch, {"UNROLL": 1})
    except submission.CudaBuildError as exc:
        print(f"latency.py: {refusals.build_line(exc, 'the latency probe (UNROLL 1)', arch)}", file=sys.stderr)
        return 2
    record = measure(args)
    print("\n".join(report(record)))
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
