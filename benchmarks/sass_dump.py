"""The SASS of every kernel a submission can launch, one file per kernel variant, on the CPU
(no GPU): for checking that an edit of submission.py leaves the compiled kernels as they were.

    python3 benchmarks/sass_dump.py --submission submission.py --out /tmp/sass-new
    python3 benchmarks/sass_dump.py --submission /tmp/old_submission.py --out /tmp/sass-old
    diff -r /tmp/sass-old /tmp/sass-new     # nothing: the same instructions, every variant

What is dumped:
* cuda: every (config, whole steps or not, plain or permuted scales) of the submission's
  ``cuda_compile_variants()`` (every table entry, the tuner's candidates for H100/H200 and
  B200, the default family), compiled by NVRTC for sm_90a and sm_100a, disassembled with
  ``cuobjdump -sass``. Files are named by the config's eleven fields in the kernel's order
  (lpr, rpt, u, warps, decode, v, load, pipe, minb, bsh, ks), the decode by its name, the load
  and pipe by their numbers and the bools as 0 / 1, so that files written from a positional
  config, from one with numbered choices and from one with named choices (``CUDA_LOADS``,
  ``CUDA_PIPES``) of the same kernel compare. The kernel's name (which spells its config, in a
  form that has changed) is written as KERNEL in the SASS.
* triton: every launch variant ``benchmarks/compile_table.py`` compiles (its
  ``launch_variants``), for cc 90 and cc 100, disassembled the same way; files named by the
  variant's constexprs (decode by name), warps and stages.

Progress goes to stderr, one line per 20 variants. Needs NVRTC (nvidia-cuda-nvrtc) and the
cuobjdump of Triton's wheel; runs without TRITON_INTERPRET (it re-executes itself without it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

if not __package__:  # run as `python3 benchmarks/NAME.py`: kitpath puts the kit's root on sys.path
    import kitpath  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent

CUDA_ARCHS = ("sm_90a", "sm_100a")
TRITON_ARCHS = (90, 100)
# The cuda kernel's decodes by the numbers of positional configs (the form recorded before
# configs had names), and the Triton kernel's DECODE constexpr of the same era.
CUDA_DECODE_NAMES = {0: "dp4a", 1: "f16x2", 2: "dp4a-sr", 3: "dp4a-sr2"}
TRITON_DECODE_NAMES = {0: "tl", 1: "f16x2", 2: "dp4a", 3: "loads-only"}
CUDA_FIELDS = 11
_HEADER = re.compile(r"^\s*(code for|Fatbin|=+|arch = |code version|host = |compile_size)", re.M)


def _sass(cubin: bytes) -> str:
    from cuda_check import dump  # `python3 eval.py compile`'s disassembly (the cuobjdump of Triton's wheel)
    out = dump(cubin, "-sass")
    return "\n".join(ln.rstrip() for ln in out.splitlines() if not _HEADER.match(ln)) + "\n"


def _numbered(sub, name: str, value):
    """A named config's field as file names write it: load and pipe by number, bools as 0 / 1."""
    names = {"load": getattr(sub, "CUDA_LOADS", ()), "pipe": getattr(sub, "CUDA_PIPES", ())}.get(name, ())
    if isinstance(value, str) and value in names:
        return names.index(value)
    return int(value) if isinstance(value, bool) else value


def cuda_key(sub, cfg) -> str:
    """The eleven fields of a cuda config, decode named, load and pipe numbered, as a file-name
    stem (then any later field that is not its default)."""
    if hasattr(cfg, "_fields"):  # a named config
        fields = [_numbered(sub, n, v) for n, v in zip(cfg._fields, cfg, strict=True)]
    else:  # positional (a file from before named configs): the fields it leaves out from its defaults
        shape = sub._CUDA_SHAPE
        fields = list(cfg) + list(shape)[len(cfg) - 5:]
        fields[4] = CUDA_DECODE_NAMES[fields[4]]
    assert len(fields) >= CUDA_FIELDS, cfg
    # fields added after the first eleven (kb) named only where not their default, so that the
    # files of the kernels that existed before them keep their names
    extra = [f"{n}{v}" for n, v in zip(sub.CudaConfig._fields[CUDA_FIELDS:], fields[CUDA_FIELDS:], strict=True)
             if v != _numbered(sub, n, sub.CudaConfig._field_defaults[n])]
    return "-".join([str(x) for x in fields[:CUDA_FIELDS]] + extra)


def dump_cuda(sub, out: Path) -> int:
    variants = sub.cuda_compile_variants()
    n = 0
    for i, (cfg, full, plain) in enumerate(variants):
        name, source = sub.cuda_kernel(cfg, full, plain)
        for arch in CUDA_ARCHS:
            path = out / "cuda" / f"{cuda_key(sub, cfg)}.full{int(full)}.plain{int(plain)}.{arch}.sass"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("kernel KERNEL\n" + _sass(sub.cuda_compile(source, arch)).replace(name, "KERNEL"))
            n += 1
        if i % 20 == 19 or i == len(variants) - 1:
            print(f"sass_dump: cuda {i + 1}/{len(variants)} variants", file=sys.stderr, flush=True)
    return n


def triton_key(variant: dict) -> str:
    consts = dict(variant["constexprs"])
    if isinstance(consts.get("DECODE"), int):
        consts["DECODE"] = TRITON_DECODE_NAMES[consts["DECODE"]]
    text = json.dumps([consts, variant["signature"], variant.get("attrs", {}), variant["num_warps"],
                       variant["num_stages"]], sort_keys=True, default=str)
    readable = "-".join(f"{k}={v}" for k, v in sorted(consts.items()))
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{readable}.w{variant['num_warps']}.s{variant['num_stages']}.{digest}"


def dump_triton(sub, out: Path) -> int:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend

    from benchmarks import compile_table as ct
    kernels = ct.kernels_of(sub)
    variants = ct.launch_variants(sub, kernels)
    n = 0
    for i, v in enumerate(variants):
        fn = kernels[v["kernel"]]
        index = {name: j for j, name in enumerate(fn.arg_names)}
        attrs = {(index[name],): CUDABackend.parse_attr(a) if isinstance(a, str) else a
                 for name, a in v.get("attrs", {}).items()}
        for arch in TRITON_ARCHS:
            src = triton.compiler.ASTSource(fn=fn, signature=v["signature"], constexprs=v["constexprs"], attrs=attrs)
            compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32),
                                      options={"num_warps": v["num_warps"], "num_stages": v["num_stages"]})
            path = out / "triton" / f"{v['kernel']}.{triton_key(v)}.cc{arch}.sass"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(_sass(compiled.asm["cubin"]))
            n += 1
        if i % 20 == 19 or i == len(variants) - 1:
            print(f"sass_dump: triton {i + 1}/{len(variants)} variants", file=sys.stderr, flush=True)
    return n


CUDA_NEEDS = ("cuda_compile_variants", "cuda_kernel", "cuda_compile")  # the kit's cuda backend's functions used


def dumpable(sub, only: str | None) -> tuple[list[str], str]:
    """(the parts of ``--only`` (None: both) the submission has kernels for, '') or ([], why
    not, in one line): cuda needs the kit's cuda backend's ``CUDA_NEEDS``, triton module-level
    ``@triton.jit`` functions named ``*_kernel``. A part left out of the default is said on
    stderr."""
    from benchmarks import compile_table as ct
    missing = [name for name in CUDA_NEEDS if not callable(getattr(sub, name, None))]
    why = {"cuda": f"no {', '.join(f'{n}()' for n in missing)} (the kit's cuda backend's)" if missing else "",
           "triton": "" if ct.kernels_of(sub) else f"no @triton.jit function named *{ct.KERNEL_SUFFIX}"}
    asked = [only] if only else ["cuda", "triton"]
    parts = [part for part in asked if not why[part]]
    if not parts:
        return [], "no kernel to dump: " + "; ".join(why[part] for part in asked)
    for part in asked:
        if why[part]:
            print(f"sass_dump: {part} skipped: {why[part]}", file=sys.stderr)
    return parts, ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 benchmarks/sass_dump.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--submission", default=str(ROOT / "submission.py"))
    ap.add_argument("--out", required=True, help="folder written (one .sass file per variant and arch)")
    ap.add_argument("--only", choices=("cuda", "triton"), default=None)
    args = ap.parse_args(argv)
    from benchmarks import refusals
    from harness import load_tool_submission
    problem = refusals.folder_problem(args.out, "--out")
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if os.environ.get("TRITON_INTERPRET", "0") == "1" and args.only != "cuda":  # the Triton kernels would be
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # interpreter functions
        return subprocess.run([sys.executable, str(Path(__file__).resolve()), *(argv or sys.argv[1:])],
                              env=env).returncode
    try:
        sub = load_tool_submission(args.submission)
    except ValueError as exc:  # no such file, or it does not import: one line
        print(f"error: {exc}", file=sys.stderr)
        return 2
    parts, problem = dumpable(sub, args.only)
    if problem:
        print(f"error: {args.submission}: {problem}", file=sys.stderr)
        return 2
    if "cuda" in parts:  # the first variant for each arch, before anything is written
        from benchmarks.sass_count import missing_tools
        problem = missing_tools() or refusals.first_build_problem(
            sub, [(cfg, arch) for cfg, _, _ in sub.cuda_compile_variants()[:1] for arch in CUDA_ARCHS])
        if problem:
            print(f"error: {args.submission}: {problem}", file=sys.stderr)
            return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    with tempfile.TemporaryDirectory() as cache:
        os.environ["TRITON_CACHE_DIR"] = cache
        try:
            if "cuda" in parts:
                counts["cuda"] = dump_cuda(sub, out)
        except getattr(sub, "CudaBuildError", RuntimeError) as exc:  # a later variant's: the line above names it
            print(f"error: {args.submission}: {refusals.build_line(exc)}", file=sys.stderr)
            return 2
        if "triton" in parts:
            counts["triton"] = dump_triton(sub, out)
    print(f"sass_dump: wrote {', '.join(f'{n} {k}' for k, n in counts.items())} SASS files to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
