"""Bytes of a in flight per SM for every B200 candidate of the cuda kernel, beside what each GPU
needs to keep its DRAM busy (CPU only: NVRTC and the cuobjdump of Triton's wheel, no GPU).

Why: at an H200's bytes per SM the kernel is latency-bound (benchmarks/NOTES.md, "The cuda kernel
at 96 SMs (an H200's bytes per SM)"): warps wait on their own loads, too few are resident, and
the bytes in flight per SM, bounded by registers, decide. A B200 carries more bytes per SM still.

Per benchmark shape (``submission.TUNED_SHAPES``), for every config the tuner times on compute
capability 10.0 (``submission.BACKENDS["cuda"].candidates(m, k, l, (10, 0))``, which holds the
public leaders' geometry of ``submission.CUDA_LEADERS``), each compiled for sm_100a:

* registers and static shared memory: NVRTC (``submission.cuda_kernel`` / ``cuda_compile``,
  whole steps, plain scales), then ``cuobjdump -res-usage`` (as benchmarks/sass_count.py does);
* resident blocks and warps per SM on a B200 by the CUDA occupancy rules, as
  ``cuda_occupancy.h`` computes them (Triton's wheel ships it:
  triton/backends/nvidia/include/cuda_occupancy.h, ``cudaOccMaxBlocksPerSMRegsLimit``,
  ``cudaOccMaxBlocksPerSMSmemLimit``) with the limits of compute capability 10.0 (CUDA C++
  Programming Guide, "Compute Capabilities", the table of technical specifications, which gives
  9.0 the same): 64K 32-bit registers, 2048 threads (64 warps), 32 blocks and 228 KB of shared
  memory per SM. Registers go to warps in units of 256 (a warp of R registers per thread holds
  ceil(32 R / 256) x 256), and each of the SM's 4 sub-partitions holds 16K of them, so at most
  4 x floor(16384 / that) warps fit; shared memory goes to blocks in units of 128 bytes, each
  block with 1 KB more that the driver reserves;
* the grid's blocks per SM (M / rows x L x kb blocks over 148 SMs): below the occupancy limit
  the grid, not the registers, bounds the warps an SM holds;
* bytes of a in flight per SM before first use: per lane, the loads of a the K loop issues
  before the first instruction that reads one, times their bytes (16, or 32 for the 32-byte
  load), times the lanes resident per SM (32 x warps: the fewer of what occupancy allows and
  what the grid gives).

Counting the loads in flight (``k_loop_loads``): the K loop is benchmarks/sass_count.py's (the
largest backward-branch body that loads from global memory), read in address order. A load of a
is an LDG of 128 or 256 bits that is not one of b's (b is read with ``ld.global.nc.v4``: SASS
``LDG.E.128.CONSTANT``, or ``LDG.E.EL.128.CONSTANT`` with bload; the scales are 16- and 32-bit
loads); their number must be the step's RPT x U (RPT x U / 2 with 32-byte loads), or the config
is refused. Walking the body, each load of a marks its destination registers (4 per 16 bytes);
the first instruction of any other kind that reads a marked register is the first use (F2FP on
sm_100a's f16x2 decode, LOP3 or PRMT on the integer decodes, LOP3 where pipe a_first folds the
loads): there the warp waits for its oldest load. The loads issued before it are those in
flight; a load of a whose registers nothing after it in the body reads is consumed in the next
iteration and counts too (in flight across the back edge).

What each GPU needs (Little's law): read bandwidth x loaded DRAM latency, over its SMs: the
bytes that must be in flight per SM to keep the DRAM busy. Defaults (``default_gpus``, each with
its source): the B200's latency is a public pointer-chase measurement, 860 cycles on a B200 (and
700 on an H100 SXM; one thread, clocks not locked: markdewing/AI_kernels, latency/README.md at
0d701add13c82ea0533d5fc0c5755c72b28a287b, its data latency/data/b200.dat at b6bc563), taken to
nanoseconds at ``CLOCK_HZ`` (1.98 GHz, the clock benchmarks/projection.py assumes). That is the
unloaded latency, so the need is a lower bound until the loaded one is known. The H200 is not in
that source: the H100's number stands in. ``--latency FILE`` (benchmarks/latency.py's JSON,
repeatable) replaces a GPU's latency and read bandwidth with the measured ones (the latency where
the read first reaches 95% of its best; the best read). Read bandwidths: the B200's
``bench_kernel.B200_READ_BPS``; the H100's and H200's the slope of the kit's read ceilings over
the three benchmark shapes (``READ_RECORDS``; the intercept is the fixed cost of a timed read).

The candidates are ranked per shape by bytes in flight per SM over the B200's need (1.0: enough
to cover the latency at full bandwidth, if every warp kept its loads in flight; they do not
while they compute, which benchmarks/projection.py models).

Usage (repository root):
  python3 benchmarks/inflight.py [--md benchmarks/results/b200-inflight.md] [--json FILE] [--latency FILE ...]
Progress goes to stderr, a line per config compiled.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

if not __package__:  # run as `python3 benchmarks/NAME.py`: kitpath puts the kit's root on sys.path
    import kitpath  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent

import harness  # noqa: E402
import submission  # noqa: E402
from benchmarks import refusals, sass_count, timing  # noqa: E402
from benchmarks.bench_kernel import B200_READ_BPS, B200_SMS  # noqa: E402

CLOCK_HZ = 1.98e9  # the H100 SXM's top boost clock, the B200's taken to be about the same (projection.py)
DEFAULT_JSON = ROOT / "benchmarks" / "results" / "b200-inflight.json"

# The SM's limits on compute capability 9.0 and 10.0 (CUDA C++ Programming Guide, "Compute
# Capabilities"; cuda_occupancy.h's allocation units).
SM_REGISTERS = 65536
SM_SUBPARTITIONS = 4
REG_UNIT = 256  # registers per warp are allocated in these units
SM_THREADS = 2048
SM_BLOCKS = 32
SM_SHARED = 228 * 1024
SHARED_UNIT = 128
SHARED_RESERVED = 1024  # per block, by the driver (compute capability >= 8.0)

# The kit's read ceilings (clean device time, µs) of the three benchmark shapes, in
# submission.TUNED_SHAPES order, by GPU: the H100's of 2026-11-26 (kit 1014cfa,
# benchmarks/history/2026-11-26-h100-a696cf6-a0606f4.md, "The state at kit 6736912 (benchmarks/RESULTS.md's
# current state until 2026-11-28)"), the H200's of 2026-11-25 (kit c3c10fd, the whole-GPU
# row of `bench_kernel.py --sms auto`, benchmarks/history/2026-11-25-h100-h200-c3c10fd-c0e828a.md).
READ_RECORDS = {
    "H100": (25.31, 45.97, 15.04),
    "H200": (18.99, 32.94, 11.97),
}
CITED_LATENCY_CYCLES = {"B200": 860, "H100": 700}  # markdewing/AI_kernels, latency/README.md (see the docstring)
CITED_L2_CYCLES = {"B200": 295, "H100": 291}  # the same source's L2 hit latency
# The H200 kernel times that calibrate benchmarks/projection.py: clean device µs of the kit's
# cuda configs on one H200, 2026-11-25, kit c3c10fd (kernel revision dd5bdb48218a), read ceilings
# READ_RECORDS["H200"]: the H200 table's entries then and the BSH tile of the same machine's sweep
# (benchmarks/history/2026-11-25-h100-h200-c3c10fd-c0e828a.md, its part "An H200"; positional
# configs: lpr, rpt, u, warps, decode number, v, load, pipe, minb[, bsh]).
H200_POINTS = (
    ((7168, 16384, 1), (32, 4, 4, 8, 2, 2, 2, 0, 1), 22.86),
    ((4096, 7168, 8), (32, 8, 1, 1, 2, 1, 2, 0, 1), 39.14),
    ((4096, 7168, 8), (8, 2, 4, 1, 3, 1, 2, 0, 20, 1), 37.55),
    ((7168, 2048, 4), (32, 4, 1, 1, 2, 1, 2, 0, 1), 13.73),
    ((7168, 2048, 4), (8, 2, 4, 1, 3, 1, 2, 0, 20, 1), 13.57),
)
KNEE = 0.95  # the loaded latency is taken where the read first reaches this share of its best (latency.py)


def read_fit(ceilings_us, shapes=None) -> tuple[float, float]:
    """(fixed µs, bytes per second): the least-squares line ceiling = fixed + bytes / rate over the
    benchmark shapes (``submission.TUNED_SHAPES`` unless given)."""
    shapes = shapes or submission.TUNED_SHAPES
    xs = [timing.gemv_bytes(*s) for s in shapes]
    ys = list(ceilings_us)
    if len(xs) != len(ys) or len(xs) < 2:
        raise ValueError(f"read_fit needs one ceiling per shape (>= 2), got {len(ys)} for {len(xs)} shapes")
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = (sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
             / sum((x - mx) ** 2 for x in xs))  # µs per byte
    if slope <= 0:
        raise ValueError(f"read_fit: ceilings {ys} do not grow with the bytes")
    return my - slope * mx, 1e6 / slope


@dataclass(frozen=True)
class Gpu:
    """What a GPU needs in flight: ``read_bps`` x ``latency_ns`` / ``sms`` bytes per SM."""
    name: str
    sms: int
    read_bps: float
    latency_ns: float
    source: str

    @property
    def need_per_sm(self) -> float:
        return self.read_bps * self.latency_ns * 1e-9 / self.sms


def default_gpus() -> dict:
    """The GPUs' needs from the cited and recorded numbers (see the module's docstring)."""
    ns = {g: c / CLOCK_HZ * 1e9 for g, c in CITED_LATENCY_CYCLES.items()}
    cite = "cycles, pointer chase, markdewing/AI_kernels latency/README.md at 0d701ad, at 1.98 GHz; unloaded"
    fits = {g: read_fit(c) for g, c in READ_RECORDS.items()}
    return {
        "B200": Gpu("B200", B200_SMS, B200_READ_BPS, ns["B200"],
                    f"read: bench_kernel.B200_READ_BPS; latency: {CITED_LATENCY_CYCLES['B200']} {cite}"),
        "H200": Gpu("H200", 132, fits["H200"][1], ns["H100"],
                    "read: slope of the kit's read ceilings, 2026-11-25, kit c3c10fd; latency: the H100's "
                    f"{CITED_LATENCY_CYCLES['H100']} {cite} (no H200 in the source)"),
        "H100": Gpu("H100", 132, fits["H100"][1], ns["H100"],
                    f"read: slope of the kit's read ceilings, 2026-11-26, kit 1014cfa; latency: "
                    f"{CITED_LATENCY_CYCLES['H100']} {cite}"),
    }


def gpu_label(device: str) -> str:
    """B200, H200 or H100 for a device name; '' for another GPU."""
    return next((g for g in ("B200", "H200", "H100") if g in (device or "")), "")


def with_measured(gpus: dict, record: dict) -> dict:
    """``gpus`` with the one a benchmarks/latency.py record measured replaced by its numbers."""
    record = record if isinstance(record, dict) else {}
    label = gpu_label(str(record.get("device", "")))
    summary = record.get("summary") if isinstance(record.get("summary"), dict) else {}
    if not label or not summary.get("knee_latency_ns") or not summary.get("best_read_bps"):
        raise ValueError("not a benchmarks/latency.py record of an H100, H200 or B200 "
                         "(device, summary.knee_latency_ns, summary.best_read_bps)")
    return {**gpus, label: Gpu(label, int(record.get("sms") or gpus[label].sms), float(summary["best_read_bps"]),
                               float(summary["knee_latency_ns"]),
                               f"measured: benchmarks/latency.py on {record['device']}, {record.get('date', '?')}")}


# ----------------------------------------------------------------------------- the K loop's loads

_REG = re.compile(r"\bR(\d+)(\.64)?")
_B_LOADS = ({"128", "CONSTANT"}, {"EL", "128", "CONSTANT"})  # ld.global.nc.v4 (bload: L1::evict_last)


def a_load_bytes(text: str) -> int:
    """Bytes a SASS instruction loads of a: 16 or 32 for an LDG of 128 or 256 bits that is not
    one of b's loads; 0 for anything else."""
    op = text.split()[0] if text.strip() else ""
    if not op.startswith("LDG"):
        return 0
    quals = set(op.split(".")[1:]) - {"E"}
    width = 32 if "256" in quals else 16 if "128" in quals else 0
    return 0 if quals in _B_LOADS else width


def _regs(operands: str) -> set:
    out = set()
    for m in _REG.finditer(operands):
        n = int(m.group(1))
        out |= {n, n + 1} if m.group(2) else {n}
    return out


def _sources(text: str) -> set:
    """Registers an instruction reads: every operand after the first (the destination), all of
    them for stores and reductions."""
    parts = text.split(None, 1)
    if len(parts) < 2:
        return set()
    op, operands = parts
    if op.startswith(("ST", "RED", "ATOM")):
        return _regs(operands)
    return _regs(operands.split(",", 1)[1]) if "," in operands else set()


def _dest(text: str, nbytes: int) -> set:
    """The registers a load of ``nbytes`` writes: its register operands before the address, which
    share the bytes (a 32-byte load may name two 16-byte halves, e.g. ``LDG.E.NA.EFL2.256 R8, R4,
    desc[UR14][R24.64]``)."""
    heads = [o.strip() for o in text.split(None, 1)[1].split("[", 1)[0].split(",")]
    firsts = [int(m.group(1)) for m in (re.fullmatch(r"R(\d+)", h) for h in heads) if m]
    per = nbytes // 4 // max(1, len(firsts))
    return {r + i for r in firsts for i in range(per)}


def k_loop_loads(body: list) -> dict:
    """{"loads": loads of a in the loop body, "bytes": bytes each, "burst": those in flight at
    the first use (see the docstring), "first_use": the opcode that first reads one (None if
    none does)}."""
    loads = [(i, a_load_bytes(t)) for i, t in enumerate(body) if a_load_bytes(t)]
    widths = {w for _, w in loads}
    marked, first, first_op = set(), None, None
    for i, text in enumerate(body):
        if a_load_bytes(text):
            marked |= _dest(text, a_load_bytes(text))
        elif first is None and _sources(text) & marked:
            first, first_op = i, sass_count.opcode(text)
    after = [i for i, w in loads if first is not None and i > first]
    wrapped = [i for i in after if not any(_dest(body[i], a_load_bytes(body[i])) & _sources(t)
                                           for t in body[i + 1:] if not a_load_bytes(t))]
    burst = sum(1 for i, _ in loads if first is None or i < first) + len(wrapped)
    return {"loads": len(loads), "bytes": max(widths) if widths else 0, "burst": burst, "first_use": first_op}


_MEASURED = {}


def measure(cfg, arch: str = "sm_100a") -> dict:
    """What the compiled kernel of ``cfg`` (a CudaConfig naming its decode) says for ``arch``:
    registers, static shared bytes, the K loop's length and SASS per 16 B of a and lane, its loads
    of a and those in flight before first use. Compiled once per (config, arch)."""
    cfg = submission.CudaConfig.of(cfg)
    key = (cfg, arch)
    if key not in _MEASURED:  # the compile, the resources and the K loop: `python3 eval.py compile`'s pieces
        sass, usage = sass_count.disassemble(cfg, arch)
        per_chunk, body = sass_count.sass_per_16b(sass, cfg.rpt * cfg.u, ring=bool(cfg.ring))
        usage = sass_count.resource_usage(usage)
        counts = {"registers": usage.get("registers"), "shared": usage.get("shared", 0), "loop": len(body),
                  "per_chunk": per_chunk or 0.0}
        if cfg.ring:  # a ring: its bytes in flight are its slots', not registers'
            stage = 16 * cfg.rpt * 32 * cfg.u  # bytes of a a stage
            _MEASURED[key] = {**counts, "loads": 0, "bytes": stage, "burst": 0, "first_use": None,
                              "ring_bytes": (cfg.ring - 1) * cfg.warps * cfg.ks * stage}
        else:
            loads = k_loop_loads(body)
            expected = cfg.rpt * cfg.u // (2 if loads["bytes"] == 32 else 1)
            if loads["loads"] != expected:
                raise ValueError(f"{cfg!r} on {arch}: {loads['loads']} loads of a found in the K loop, the step has "
                                 f"{expected}: the SASS is not what benchmarks/inflight.py reads")
            _MEASURED[key] = {**counts, **loads, "ring_bytes": 0}
    return _MEASURED[key]


def occupancy(registers: int, threads: int, shared: int) -> dict:
    """{"blocks": resident blocks per SM, "warps": resident warps per SM, "limit": what bounds
    them (registers, threads, blocks, shared)} by cuda_occupancy.h's rules (see the docstring)."""
    warps_per_block = -(-threads // 32)
    per_warp = -(-registers * 32 // REG_UNIT) * REG_UNIT
    limits = {"registers": SM_SUBPARTITIONS * (SM_REGISTERS // SM_SUBPARTITIONS // per_warp) // warps_per_block,
              "threads": SM_THREADS // (warps_per_block * 32), "blocks": SM_BLOCKS,
              "shared": SM_SHARED // (-(-(shared + SHARED_RESERVED) // SHARED_UNIT) * SHARED_UNIT)}
    limit = min(limits, key=limits.get)
    return {"blocks": limits[limit], "warps": limits[limit] * warps_per_block, "limit": limit}


def last_wave(grid: int, slots: int) -> float:
    """The share of the block slots (resident blocks per SM x SMs) that the grid's last wave fills:
    1.0 when the blocks fill whole waves. At an H200's bytes per SM (an H100 at 96 SMs) the same
    tile ran 7% slower with 1.5 waves (last wave 0.5) than with 1.87 (0.87) on the same K
    (benchmarks/NOTES.md, "Waves at 96 SMs"; a reading, not a model: 2.0 waves ran below 1.87).
    Not in the ranking (the tuner measures it); shown beside."""
    if slots <= 0:
        return 0.0
    rest = grid % slots
    return 1.0 if rest == 0 else rest / slots


def row(shape: tuple, cfg, gpu: Gpu, counts: dict, role: str = "") -> dict:
    """The table's row of one config on one shape and GPU, from its ``measure`` counts. A ring
    (ring > 0): its block holds its producer warps too and the dynamic shared memory its launch
    asks (submission.ring_smem); its grid is minb blocks per SM, at most one per unit; its bytes
    in flight are every consumer warp's slots but the one it reads ((ring - 1) x warps x ks
    stages of a per block), whatever the decode does."""
    m, k, l = shape
    cfg = submission.CudaConfig.of(cfg)
    if cfg.ring:
        threads = submission.cuda_grid(cfg, m, l, None)[1]
        units = m // cfg.rows * l
        grid = min(units, cfg.minb * gpu.sms)
        shared = counts["shared"] + submission.ring_smem(cfg, k, submission.ring_batches(units, m // cfg.rows, grid))
        occ = occupancy(counts["registers"], threads, shared)
    else:
        threads = 32 * cfg.warps * cfg.ks
        occ = occupancy(counts["registers"], threads, counts["shared"])
        grid = m // cfg.rows * l * cfg.kb
    slots = occ["blocks"] * gpu.sms
    grid_per_sm = grid / gpu.sms
    blocks = min(occ["blocks"], grid_per_sm)
    warps = blocks * cfg.warps * cfg.ks
    in_flight = counts["ring_bytes"] * blocks if cfg.ring else counts["burst"] * counts["bytes"] * 32 * warps
    return {"shape": f"{m}x{k}x{l}", "config": dict(cfg._asdict()), "role": role, "threads": threads, **counts,
            "occupancy": occ, "grid_blocks": grid, "grid_per_sm": grid_per_sm, "resident_warps": warps,
            "waves": grid / slots if slots else math.inf, "last_wave": last_wave(grid, slots),
            "in_flight_per_sm": in_flight, "need_per_sm": gpu.need_per_sm, "ratio": in_flight / gpu.need_per_sm}


def candidates(shape: tuple) -> list:
    """(config, role) of what the tuner times for ``shape`` on compute capability 10.0."""
    m, k, l = shape
    leaders = {c.with_decode((10, 0)) for c in submission.CUDA_LEADERS.get(k, ())}
    out = []
    for i, cfg in enumerate(submission.BACKENDS["cuda"].candidates(m, k, l, (10, 0))):
        out.append((cfg, "default" if i == 0 else "leaders' geometry" if cfg in leaders else "candidate"))
    return out


def table(gpus: dict, progress=None) -> list:
    """Every row, ranked per shape by bytes in flight over the B200's need (best first)."""
    rows = []
    todo = [(s, c, r) for s in submission.TUNED_SHAPES for c, r in candidates(s)]
    for i, (shape, cfg, role) in enumerate(todo):
        if progress:
            progress(f"inflight: {i + 1}/{len(todo)} {cfg!r}")
        rows.append(row(shape, cfg, gpus["B200"], measure(cfg, "sm_100a"), role))
    order = {f"{m}x{k}x{l}": i for i, (m, k, l) in enumerate(submission.TUNED_SHAPES)}
    rows.sort(key=lambda r: (order[r["shape"]], -r["ratio"], r["per_chunk"]))
    for shape in order:
        for rank, r in enumerate([r for r in rows if r["shape"] == shape], 1):
            r["rank"] = rank
    return rows


def _cfg_text(config: dict) -> str:
    return repr(submission.CudaConfig.of(config))[len("CudaConfig("):-1]


def sass_summary(rows: list, bound: float = 60.0) -> str:
    """The K loop's SASS per 16 B over the rows, by family (the kit's f16x2 tiles, the integer
    decodes, the leaders' geometry): range, and the configs over ``bound``."""
    families = {}
    for r in rows:
        cfg = submission.CudaConfig.of(r["config"])
        name = ("the leaders' geometry" if r["role"] == "leaders' geometry" else
                f"the kit's tiles, {cfg.decode} decode")
        families.setdefault(name, {})[_cfg_text(r["config"])] = r["per_chunk"]
    parts = []
    for name, counts in sorted(families.items()):
        over = [f"{cfg} {v:.1f}" for cfg, v in counts.items() if v > bound]
        parts.append(f"{name} {min(counts.values()):.1f}-{max(counts.values()):.1f}"
                     + (f" (over {bound:g}: {'; '.join(over)})" if over else f" (none over {bound:g})"))
    return "; ".join(parts)


def markdown(rows: list, gpus: dict, revision: str, date: str, command: str = "python3 benchmarks/inflight.py") -> list:
    out = ["# Bytes of a in flight per SM: the B200 candidates against what each GPU needs", "",
           f"Generated by `{command}` on {date} "
           f"(CPU: NVRTC {'.'.join(map(str, submission.nvrtc_version()))}, sm_100a; kernel revision {revision}). "
           "Method: the docstring of benchmarks/inflight.py. Nothing here is measured on a GPU.", "",
           "## What each GPU needs", "",
           "Little's law: read bandwidth x DRAM latency over the SMs, the bytes that must be in flight per SM "
           "to keep the DRAM busy.", "",
           "| GPU | SMs | read TB/s | latency ns | need per SM (KB) | source |", "|---|---|---|---|---|---|"]
    for g in gpus.values():
        out.append(f"| {g.name} | {g.sms} | {g.read_bps / 1e12:.2f} | {g.latency_ns:.0f} | "
                   f"{g.need_per_sm / 1024:.1f} | {g.source} |")
    out += ["", "## The B200 candidates, ranked per shape by bytes in flight per SM over the B200's need", "",
            "Per lane: the loads of a the K loop issues before the first instruction that reads one (in flight) "
            "of those of the step. Resident: blocks per SM by the occupancy rules (and what bounds them); "
            "warps per SM the fewer of that and the grid's blocks per SM. SASS: the K loop per 16 B of a and "
            "lane (sm_100a; the kit's bound is 60). Waves: the grid's blocks over the block slots (blocks per SM "
            "x 148), and the share of the slots its last wave fills (benchmarks/inflight.py, last_wave).", "",
            "| rank | shape | config | role | registers | threads per block | blocks per SM (limit) | grid blocks "
            "per SM | waves (last wave full) | warps per SM | loads of a per lane: in flight / step (bytes each) | "
            "first use | KB in flight per SM | / B200 need | SASS per 16 B |", "|---" * 15 + "|"]
    for r in rows:
        occ = r["occupancy"]
        out.append(f"| {r['rank']} | {r['shape']} | {_cfg_text(r['config'])} | {r['role']} | {r['registers']} | "
                   f"{r['threads']} | {occ['blocks']} ({occ['limit']}) | {r['grid_per_sm']:.1f} | "
                   f"{r['waves']:.2f} ({r['last_wave']:.2f}) | {r['resident_warps']:.1f} | "
                   f"{r['burst']} / {r['loads']} ({r['bytes']}) | {r['first_use']} | "
                   f"{r['in_flight_per_sm'] / 1024:.1f} | {r['ratio']:.2f} | {r['per_chunk']:.1f} |")
    out += ["", "SASS of the K loop per 16 B of a and lane (sm_100a), by family: " + sass_summary(rows) + "."]
    h200 = gpus["H200"]
    out += ["", "## The same count for the H200 configs that calibrate benchmarks/projection.py", "",
            "On the H200 (sm_90a, today's kernel) beside what they measured there (clean device time, 2026-11-25, "
            "kit c3c10fd): bytes in flight above the need did not give the read. A warp has its loads in flight only "
            "while it waits; between waits it computes (benchmarks/projection.py's latency term).", "",
            "| shape | config | registers | warps per SM | loads in flight / step | KB in flight per SM | / H200 need "
            "| measured µs | read ceiling / measured |", "|---" * 9 + "|"]
    ceilings = dict(zip(submission.TUNED_SHAPES, READ_RECORDS["H200"], strict=True))
    for shape, cfg, us in H200_POINTS:
        r = row(shape, cfg, h200, measure(cfg, "sm_90a"))
        out.append(f"| {r['shape']} | {_cfg_text(r['config'])} | {r['registers']} | {r['resident_warps']:.1f} | "
                   f"{r['burst']} / {r['loads']} | {r['in_flight_per_sm'] / 1024:.1f} | {r['ratio']:.2f} | {us:.2f} | "
                   f"{ceilings[shape] / us:.3f} |")
    return out


COUNT_KEYS = ("registers", "shared", "loop", "per_chunk", "loads", "bytes", "burst", "first_use", "ring_bytes")


def record(rows: list, gpus: dict, revision: str, date: str) -> dict:
    """The JSON form: what benchmarks/projection.py reads back (``stored``) instead of compiling:
    the rows, and the sm_90a counts of the H200 configs that calibrate it."""
    calibration = [{"config": dict(submission.CudaConfig.of(cfg)._asdict()), "arch": "sm_90a",
                    **measure(cfg, "sm_90a")} for _, cfg, _ in H200_POINTS]
    return {"kernel_revision": revision, "date": date, "gpus": {k: asdict(g) for k, g in gpus.items()},
            "rows": rows, "calibration": calibration}


def stored(path: Path = DEFAULT_JSON) -> dict:
    """{(CudaConfig, arch): measure()'s dict} from a record written by this script for the current
    kernel revision; {} where there is none or it is of another revision."""
    try:
        data = json.loads(Path(path).read_text())
        if data.get("kernel_revision") != submission.kernel_revision():
            return {}
        out = {(submission.CudaConfig.of(r["config"]), r.get("arch", "sm_100a")): {k: r[k] for k in COUNT_KEYS}
               for r in data.get("rows", []) + data.get("calibration", [])}
        return out
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 benchmarks/inflight.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--md", default="", help="write the Markdown table here (default: print it)")
    ap.add_argument("--json", default="", help=f"write the rows as JSON here (e.g. {DEFAULT_JSON.relative_to(ROOT)}, "
                                               "which benchmarks/projection.py reads)")
    ap.add_argument("--latency", action="append", default=[], metavar="FILE",
                    help="a benchmarks/latency.py --json record: its GPU's measured latency and read replace the "
                         "defaults (repeatable)")
    args = ap.parse_args(argv)
    gpus = default_gpus()
    for path in args.latency:
        try:
            gpus = with_measured(gpus, json.loads(Path(path).read_text()))
        except (OSError, ValueError) as exc:
            print(f"inflight.py: {path}: {exc}", file=sys.stderr)
            return 2
    problem = (harness.writable_file_problem(args.md or None, "--md", "b200-inflight.md")
               or harness.writable_file_problem(args.json or None, "--json", "b200-inflight.json"))
    if problem:
        print(f"inflight.py: {problem}", file=sys.stderr)
        return 2
    missing = sass_count.missing_tools()
    if missing:
        print(f"inflight.py {missing}", file=sys.stderr)
        return 2
    # the first B200 candidate (sm_100a) and the first H200 point (sm_90a) compiled before anything
    # is printed: a kernel that does not compile is one line naming the config and the arch
    problem = refusals.first_build_problem(submission, [(candidates(submission.TUNED_SHAPES[0])[0][0], "sm_100a"),
                                                        (submission.CudaConfig.of(H200_POINTS[0][1]), "sm_90a")])
    if problem:
        print(f"inflight.py: {problem}", file=sys.stderr)
        return 2
    revision, date = submission.kernel_revision(), time.strftime("%Y-%m-%d")
    try:
        rows = table(gpus, lambda line: print(line, file=sys.stderr, flush=True))
        given = [a for p in args.latency for a in ("--latency", p)] + (["--md", args.md] if args.md else []) + \
            (["--json", args.json] if args.json else [])
        command = harness.kit_command(["python3", "benchmarks/inflight.py"], given, ("--md", "--json"))
        text = "\n".join(markdown(rows, gpus, revision, date, command)) + "\n"
        saved = json.dumps(record(rows, gpus, revision, date), indent=1) + "\n" if args.json else ""
    except submission.CudaBuildError as exc:  # a later config's: the line above names it, this one its arch
        print(f"inflight.py: {refusals.build_line(exc)}", file=sys.stderr)
        return 2
    if args.md:
        Path(args.md).write_text(text)
    else:
        print(text, end="")
    if args.json:
        Path(args.json).write_text(saved)
    return 0


if __name__ == "__main__":
    sys.exit(main())
