"""Instruction accounting of the cuda backend's K loop, on the CPU (no GPU needed).

Each config is compiled by NVRTC for sm_90a and sm_100a, disassembled with the cuobjdump of
Triton's wheel, and its K loop taken as the largest backward-branch body of the SASS that
loads from global memory. Reported per 16 bytes of a and lane (the loop body over RPT * U
chunks, since each lane reads RPT * U 16-byte chunks of a per step), with the opcode mix and
the registers, beside a paper minimum:

* sm_100a (f16x2 decode, Blackwell's e2m1 conversion): per 16 bytes = 32 values, 16
  conversions (one per byte: two values), 16 packed multiply-adds (HMUL2/HFMA2), the load of a
  and of its scale pair, one e4m3 pair conversion and one HMUL2 for the two group scales, and
  four mixed-precision fmas (FHFMA) adding the two half sums of each group: 40. The conversion
  reads its byte in place (a byte selector on its operand), so no shifts are counted.
* sm_90a (dp4a-sr2 decode): per 8 values 4 table lookups (PRMT), 4 dp4a (IDP), one XOR and
  two shifts (IMAD.HI); per group the difference of its two counters, per chunk the scale work
  (pair conversion, HMUL2, per group a conversion to f32, an int-to-float and an FFMA) and two
  loads: 44 + 2 + 8 + 2 = 56.

What is left out: b's preparation and its shared-memory traffic (amortised over RPT * U
chunks), addressing, the loop's own bookkeeping; those are what the count above the minimum
shows.

Progress goes to stderr: a line before the configs compile (each target's as one NVRTC program).

Usage (repository root):
  python3 benchmarks/sass_count.py [--config lpr=8,rpt=2,u=4,warps=1,v=1,pipe=0,minb=20,bsh=1 --arch sm_100a]
"""

from __future__ import annotations

import argparse
import collections
import sys

if not __package__:  # run as `python3 benchmarks/NAME.py`: kitpath puts the kit's root on sys.path
    import kitpath  # noqa: F401

import submission  # noqa: E402
from benchmarks import refusals  # noqa: E402

# The pieces `python3 eval.py compile` reads kernels with (cuda_check.py): this tool counts with the same
# code; cuobjdump, k_loop and opcode are taken from here by benchmarks/inflight.py, sass_dump.py and the tests.
from cuda_check import (  # noqa: E402, F401
    KitKernels,
    Variant,
    built_together,
    cuobjdump,
    dump,
    k_loop,
    opcode,
    resource_usage,
    sass_per_16b,
)

PAPER_MINIMUM = {"sm_100a": 40, "sm_90a": 56}


def missing_tools() -> str:
    """'' where NVRTC and cuobjdump are both here (all that compiling and disassembling the cuda
    backend needs, no GPU), else what is missing and how to get it."""
    try:
        submission.find_nvrtc()
    except submission.CudaBuildError as exc:
        return f"needs NVRTC (pip install nvidia-cuda-nvrtc): {exc}"
    return "" if cuobjdump() else "needs cuobjdump (Triton's wheel ships one)"


def disassemble(cfg: tuple, arch: str) -> tuple[str, str]:
    """(SASS text, resource usage text) of ``cfg`` (full steps, plain scales) for ``arch``."""
    name, source = submission.cuda_kernel(submission.CudaConfig.of(cfg), True, True)
    cubin = submission.cuda_compile(source, arch)
    return dump(cubin, "-sass"), dump(cubin, "-res-usage")


def count(cfg: tuple, arch: str) -> dict:
    """{"per_chunk": K-loop instructions per 16 bytes of a and lane, "loop": loop length,
    "ops": {opcode: per 16 bytes}, "registers", "minimum", "over_minimum"}."""
    cfg = submission.CudaConfig.of(cfg)
    sass, usage = disassemble(cfg, arch)
    return _counted(cfg, arch, sass, resource_usage(usage).get("registers"))


def count_many(todo: list) -> list[dict]:
    """``count`` of each (config, arch) of ``todo``: the configs of a target compiled as one NVRTC
    program and read with one cuobjdump call (cuda_check.built_together: about a second a config
    less than ``count`` one by one), a ring alone (KitKernels.alone); where that program does not
    compile, each config alone (its CudaBuildError names it)."""
    todo = [(submission.CudaConfig.of(cfg), arch) for cfg, arch in todo]
    kernels, found = KitKernels(submission), {}
    for arch in dict.fromkeys(arch for _, arch in todo):
        cfgs = [cfg for cfg in dict.fromkeys(cfg for cfg, a in todo if a == arch)
                if not kernels.alone(Variant(cfg, True, True, arch))]  # a ring: alone (count)
        if len(cfgs) > 1:
            read = built_together(kernels, [Variant(cfg, True, True, arch) for cfg in cfgs], sass=True)
            for cfg, got in zip(cfgs, read, strict=True):
                if got is not None:
                    found[cfg, arch] = _counted(cfg, arch, got[1], got[0]["registers"])
    out = []
    for cfg, arch in todo:
        try:
            out.append(found.get((cfg, arch)) or count(cfg, arch))
        except submission.CudaBuildError as exc:
            raise BuildFailed(cfg, arch, exc) from exc
    return out


class BuildFailed(Exception):
    """A config of ``count_many`` does not compile for a target: ``cfg``, ``arch``, ``error`` (the
    CudaBuildError)."""

    def __init__(self, cfg, arch: str, error: Exception):
        super().__init__(str(error))
        self.cfg, self.arch, self.error = cfg, arch, error


def _counted(cfg, arch: str, sass: str, registers) -> dict:
    chunks = cfg.rpt * cfg.u  # chunks per lane and step (ring: and stage)
    per_chunk, body = sass_per_16b(sass, chunks, ring=bool(cfg.ring))
    per_chunk = per_chunk or 0.0  # no loop found: nothing counted
    ops = collections.Counter(opcode(t) for t in body)
    return {"config": cfg, "arch": arch, "loop": len(body), "per_chunk": per_chunk,
            "ops": {k: round(v / chunks, 2) for k, v in ops.most_common()},
            "registers": registers, "minimum": PAPER_MINIMUM[arch],
            "over_minimum": per_chunk / PAPER_MINIMUM[arch]}


def default_configs() -> list[tuple]:
    """(shape, arch, config, role): per benchmark shape, the H100 table's cuda entry on sm_90a and
    on sm_100a what a B200 would run: the default and every tuner candidate with the f16x2 decode."""
    out = []
    h100 = submission.CUDA_MEASURED.get("NVIDIA H100 80GB HBM3", {})
    for m, k, l in submission.TUNED_SHAPES:
        shape = f"{m}x{k}x{l}"
        if (m, k, l) in h100:
            out.append((shape, "sm_90a", h100[(m, k, l)], "H100 table"))
        for i, cfg in enumerate(submission.BACKENDS["cuda"].candidates(m, k, l, (10, 0))):
            if cfg.decode == "f16x2":
                out.append((shape, "sm_100a", cfg, "B200 default" if i == 0 else "B200 tuner candidate"))
    return out


def table(rows: list[dict]) -> list[str]:
    out = ["| shape | arch | config | role | SASS per 16 B of a per lane | over the paper minimum | registers "
           "| top opcodes per 16 B |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        top = ", ".join(f"{k} {v}" for k, v in list(r["ops"].items())[:6])
        out.append(f"| {r['shape']} | {r['arch']} | {r['config']!r} | {r['role']} | {r['per_chunk']:.1f} | "
                   f"{r['over_minimum']:.2f}x of {r['minimum']} | {r['registers']} | {top} |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 benchmarks/sass_count.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="", help="one config, its fields by name or by position, comma-separated "
                                                 "(default: the table's and the B200 candidates of each benchmark "
                                                 "shape)")
    ap.add_argument("--arch", default=None, choices=sorted(PAPER_MINIMUM),
                    help="with --config: the arch it is compiled for (default sm_100a)")
    args = ap.parse_args(argv)
    if args.arch and not args.config:
        ap.error(f"--arch {args.arch} goes with --config (without it every config is counted for the arch "
                 "it runs on: the H100 table's on sm_90a, the B200's on sm_100a)")
    if args.config:
        arch = args.arch or "sm_100a"
        try:
            cfg = submission.CudaConfig.parse(args.config)
        except (TypeError, ValueError) as exc:
            ap.error(f"--config {args.config}: {exc}")
        if cfg.decode is None:
            cfg = cfg._replace(decode="f16x2" if arch == "sm_100a" else "dp4a-sr")
        problem = cfg.problem()
        if problem:
            ap.error(f"--config {args.config}: {problem}")
        todo = [("-", arch, cfg, "--config")]
    else:
        todo = default_configs()
    missing = missing_tools()
    if missing:
        print(f"sass_count.py {missing}", file=sys.stderr)
        return 2
    # the first config of each arch compiled before anything is printed: a kernel that does not
    # compile is one line naming the config and the arch (a later config's failure: the same line)
    problem = refusals.first_build_problem(submission, [(cfg, arch) for _, arch, cfg, _ in todo])
    if problem:
        print(f"sass_count.py: {problem}", file=sys.stderr)
        return 2
    print(f"sass_count: {len(todo)} configs, each target's as one program", file=sys.stderr, flush=True)
    try:
        counted = count_many([(cfg, arch) for _, arch, cfg, _ in todo])
    except BuildFailed as exc:
        print(f"sass_count.py: {refusals.build_line(exc.error, exc.cfg, exc.arch)}", file=sys.stderr)
        return 2
    rows = [{**c, "shape": shape, "role": role} for c, (shape, _, _, role) in zip(counted, todo, strict=True)]
    print("\n".join(table(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
