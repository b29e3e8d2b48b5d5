#!POPCORN leaderboard nvfp4_gemv
#!POPCORN gpu NVIDIA
"""NVFP4 block-scaled batched GEMV: c[:, 0, l] = fp16(sum_k A[:, k, l] * B[0, k, l]).

One entry point, ``custom_kernel(data)``, dispatching to a backend of the registry ``BACKENDS``:

* ``cuda``: a hand-written CUDA kernel, compiled once per process for the GPU it runs on
  (sm_90a on H100/H200, sm_100a on B200) by NVRTC and launched through the CUDA driver, both
  reached with ctypes (the standard library): no build tools, no extension module. It
  launches on the device's legacy default queue (the driver's null handle), whatever queue
  torch has made current: ordered with the harness's work, which runs there; code that
  runs torch work on another queue must synchronise around ``custom_kernel`` itself.
* ``triton``: one Triton kernel for all L (any CUDA GPU of compute capability >= 8.0; on the
  CPU only under TRITON_INTERPRET=1, for tests).
* ``scaled_mm``: FP4 ``torch._scaled_mm`` per batch (needs compute capability 10.x). The
  blocked scale vectors are views of ``sfa_permuted`` / ``sfb_permuted`` (no copies).
* ``torch``: exact dequantise-and-multiply in plain torch; runs anywhere (CPU included).

``NVFP4_GEMV_BACKEND`` = auto or a backend's name forces one; a forced backend that cannot run
here raises, saying why (for cuda: the compiler's message). ``auto`` picks torch on the CPU; on
a CUDA GPU it times every backend of the registry that races (cuda, triton, and scaled_mm on
compute capability 10.x) on the first call with each shape, and keeps the fastest for the
process; a backend that fails to build is skipped with one warning. Before any candidate is
timed, its output on those inputs is compared with the exact torch backend's (the server's
tolerance); a wrong one is dropped with one line on stderr (``NVFP4_GEMV_VERIFY``=1 checks a
forced backend too and raises, =0 never checks).
Under a profiler as kernelbot runs one (``POPCORN_NCU`` set, not "0") a first call launches only
the kernel the process keeps: no race, no tuning and no check (the registry's first backend that
can run, with its table's config or its default), and ``profile_configs()`` names each kernel's
config for the report.

Configurations (tile shapes) are named tuples, one type per backend (``CudaConfig``,
``TritonConfig``); each backend has a table of the configs measured per GPU model
(kernels/tables.json). On a GPU model its table does not know, the first call with a large shape
times a short list of candidates on the real inputs and keeps the fastest. Each table entry names
the kernel revision it was measured with (``kernel_revision()``: a hash of what the compilers
see); an entry of another revision that no SASS proof makes equal (``same_sass``) is ignored with
one warning per process, and its shape is treated as untabled. ``NVFP4_GEMV_CONFIG`` pins one per
backend, by field names or by position: ``cuda=lpr=8,rpt=2,u=4,warps=1,decode=dp4a-sr2;triton=16,64,2,1``.
``NVFP4_GEMV_TUNE`` = auto | force (time the candidates even where the table knows the GPU) |
off. Each configuration is deterministic: repeated calls give bit-identical results. Decodes
(how a group of 16 e2m1 values meets b's) have one set of names across backends: ``tl``,
``f16x2``, ``dp4a``, ``dp4a-sr``, ``dp4a-sr2`` (and ``loads-only``, a timing probe).

Inputs ``(a, b, sfa, sfb, sfa_permuted, sfb_permuted, c)``: a [m, k/2, l] e2m1 pairs (low
nibble = even element), b [128, k/2, l] (row 0 used), plain scales sfa [m, k/16, l] and sfb
[128, k/16, l] (on the server, on the GPU like a), permuted scales (32, 4, rows/128, 4, k/64,
l) whose memory is a contiguous (l, rows/128, k/64, 32, 4, 4) array, c [m, 1, l] fp16.
Which scales each backend reads: ``cuda`` the plain sfa/sfb where they are on a's device with
unit stride along k/16 and pointer, row and batch strides multiples of 4 bytes, else the
permuted ones; ``triton`` the permuted ones (the plain ones with ``scales="plain"``),
``scaled_mm`` and ``torch`` the permuted ones only. Plain and permuted must hold the same values
(as the server's generator makes them): the first call with a layout checks the dtype, shape
and device of both, no call compares their values.

The file reads top to bottom: the entry point and its per-call fast path; the backend record
(``Backend``) and the registry; the measured tables; one block per backend (cuda, triton,
scaled_mm, torch), each ending in its ``register(...)`` line; then the machinery shared by all of
them (validation, config choice, the kernel revision, first-use verification, tuner, race), which
names no backend. Three blocks are copies of the kit's source files, marked ``# >>> bundle PATH
sha256=HASH`` ... ``# <<< bundle``: the CUDA kernel (kernels/nvfp4_gemv.cu), the measured tables
(kernels/tables.json) and the SASS proofs (kernels/same_sass.json). The file runs these copies and
reads nothing of kernels/. ``python3 eval.py bundle`` writes them from those files (HASH: the
copy it wrote) and ``python3 eval.py bundle --check`` says where they differ: edit the files, not
the copies (bundle refuses to overwrite an edited copy; ``--write-back`` moves the edit into its
file). The file stays the one that is uploaded: it imports nothing of the kit.

Public surface (what the kit's tools use; everything else may change without notice):
``custom_kernel``, ``select_backend``, ``backend_support``, ``run_backend``, ``check_inputs``,
``config_for``, ``BACKENDS``, ``Backend``, ``register``, ``TUNED_SHAPES``, ``tuned_shape``, ``DECODES``,
``profiling``, ``profile_configs``; the tables
and the kernel revision: ``table_entries``, ``kernel_revision``, ``same_sass``, ``stale_entries``;
cuda: ``CudaConfig``, ``CUDA_LOADS``, ``CUDA_PIPES``, ``CUDA_MEASURED``, ``CUDA_FAMILIES``,
``CUDA_LEADERS``, ``CudaBuildError``, ``cuda_arch``, ``cuda_grid``, ``cuda_kernel``, ``cuda_compile``,
``cuda_options``, ``blackwell_target``, ``cuda_compile_variants``, ``cuda_default``, ``cuda_default_decode``,
``cuda_probe``, ``cuda_driver``, ``cuda_load``, ``cuda_launch``, ``cuda_empty_kernel``, ``find_nvrtc``,
``nvrtc_version``, ``nvrtc_candidates``, the bulk-copy ring's ``RING_FAMILIES``, ``ring_config``, ``ring_smem``,
``ring_batches``; triton: ``TritonConfig``, ``TRITON_MEASURED``, ``triton_configs``, ``triton_launch``.
"""

import ast
import contextlib
import ctypes
import glob
import hashlib
import json
import os
import re
import sys
import tempfile
from typing import Callable, NamedTuple

import torch

from task import input_t, output_t

try:
    import triton
    import triton.language as tl
except ImportError:  # the torch and cuda backends still work; the Triton block below defines, never runs
    triton = None

    class tl:  # noqa: N801 - stands in for triton.language
        constexpr = staticmethod(lambda value=None: value)

ENV_BACKEND = "NVFP4_GEMV_BACKEND"
ENV_CONFIG = "NVFP4_GEMV_CONFIG"
ENV_TUNE = "NVFP4_GEMV_TUNE"  # auto (default) | force (ignore the measured table) | off (never time configs)
ENV_PROFILE = "POPCORN_NCU"  # set (not "" or "0") by kernelbot's profile runs: first calls launch only the kept kernel
ENV_VERIFY = "NVFP4_GEMV_VERIFY"  # unset: check auto's candidates | 1: forced backends too (raise) | 0: never
_FP4 = torch.float4_e2m1fn_x2
_E4M3 = torch.float8_e4m3fn


# =========================================================================== the entry point

def custom_kernel(data: input_t) -> output_t:
    """c = the GEMV of ``data``. A call whose tensors have the layout of an earlier call's (the
    harness hands each call fresh clones with the same layout) goes straight to that call's
    launch; any other call is a first call (``_first_call_path``: checks, backend, config)."""
    try:
        a = data[0]
        entry = _FAST.get((a.shape, a.stride(), a.dtype, a.device, os.environ.get(ENV_BACKEND)))
    except Exception:  # noqa: BLE001 - not the expected tuple: the checks of the first call say what is wrong
        entry = None
    if entry is not None:
        scales, layout, align, launch, by_pointers = entry
        if scales:  # a direct launch reading a, b, data[scales], data[scales + 1], c (written out: per-call cost)
            b, sa, sb, c = data[1], data[scales], data[scales + 1], data[6]
            if (b.shape, b.stride(), b.dtype, b.device, sa.shape, sa.stride(), sa.dtype, sa.device, sb.shape,
                    sb.stride(), sb.dtype, sb.device, c.shape, c.stride(), c.dtype, c.device) == layout:
                pa, pb, ps, pt = a.data_ptr(), b.data_ptr(), sa.data_ptr(), sb.data_ptr()
                if (pa | pb | ps | pt | c.data_ptr()) & 31 == align:
                    if by_pointers:
                        launch(pa, pb, ps, pt, c.data_ptr())
                    else:
                        launch(a, b, sa, sb, c)
                    return c
        elif _layout(*data[1:]) == layout and (a.data_ptr() | data[1].data_ptr()) & 31 == align:
            return launch(data)
    return _first_call_path(data)


# Per-call fast path: the decision of a first call (checks passed, backend picked, kernel built)
# is kept per input layout, keyed by a's layout and NVFP4_GEMV_BACKEND. An entry is
# (scales, layout, align, launch, by_pointers): ``scales`` the position of the sfa tensor a direct
# launch reads (2 plain, 4 permuted; the launch reads a, b, those two scales and c, and only
# their layout is compared: about half the attribute reads of comparing all seven, which is
# most of this path's host time), or 0 for a backend without a direct launch (the layout of
# all seven compared, the backend called); ``align`` the OR of the compared pointers mod 32 (the
# cuda kernel's 32-byte loads, no_allocate_l2_evict_first_256, need a 32-byte aligned a and fall back otherwise);
# ``by_pointers``: the launch takes the five data pointers instead of the tensors.
_FAST = {}


def _layout(*ts) -> tuple:
    return tuple(x for t in ts for x in (t.shape, t.stride(), t.dtype, t.device))


# =========================================================================== the backend record

class Backend(NamedTuple):
    """One backend: everything the shared machinery needs of it. ``run(data, m, k, l, cfg=None)``
    writes and returns c (cfg None: the config ``config_for`` picks). A backend with a config
    type names it (``config``: a NamedTuple class with ``problem()`` and ``shape_problem(m, k)``,
    each '' or why not, and the constructors ``of(value)`` and ``parse(text)``) and gives
    ``candidates(m, k, l, capability)`` (the default first) and ``measured`` ({GPU model: {(m, k,
    l): config}}); ``fast(data, m, k, l)`` gives its direct launch for the fast path, (scales
    position, launch, by_pointers), or None; ``ab_align``: the bytes of alignment it needs of a's
    and b's pointers and row and batch strides (0: none); ``revision()``: the text of what its
    compiler sees, independent of comments and layout (``kernel_revision`` hashes it)."""
    name: str
    supported: Callable  # (device) -> (ok, reason)
    run: Callable
    races: bool = True  # auto times it against the others on a GPU
    config: type | None = None
    candidates: Callable | None = None
    measured: dict | None = None
    fast: Callable | None = None
    ab_align: int = 0
    exact: bool = False  # its output is the exact answer: the reference of first-use verification,
    #                      auto's choice off the GPU and its fallback (never verified itself)
    revision: Callable | None = None  # () -> the text of what its compiler sees (kernel_revision hashes it)


BACKENDS = {}  # name -> Backend, in the order auto races them


def register(backend: Backend) -> Backend:
    """Add (or replace) a backend of the registry; its name becomes a value of NVFP4_GEMV_BACKEND."""
    if backend.name == "auto" or not backend.name:
        raise ValueError(f"a backend cannot be named {backend.name!r}")
    BACKENDS[backend.name] = backend
    return backend


# The one vocabulary of decodes (how a group of 16 e2m1 values of a meets b's), across backends;
# each backend's config type says which of them it has.
DECODES = {
    "tl": "fp16 bits per nibble in plain Triton operations, fp32 products (portable; the interpreter's)",
    "f16x2": "each byte of a to an fp16x2 pair, packed fp16 multiply-adds (Blackwell converts e2m1 itself)",
    "dp4a": "prmt byte tables (2|a|, +-2|b| chosen per byte by the sign) and dp4a integer dot products",
    "dp4a-sr": "dp4a with a's signs by prmt's sign-replicate mode, b prepared as +2b and -2b",
    "dp4a-sr2": "dp4a-sr with b prepared as +2b only, a's positive and negative values in two counters",
    "loads-only": "a timing probe: the loads with next to no arithmetic (wrong results)",
}


# =========================================================================== the measured tables
#
# Per backend and GPU model (torch.cuda.get_device_name), the config of each benchmark shape that
# a sweep measured fastest (benchmarks/bench_kernel.py --sweep: the time under the server's
# protocol, the clean device time breaking ties within 1%; benchmarks/apply_table.py writes the
# entries). Each entry names the kernel revision it was measured with (``kernel``; see
# ``kernel_revision``) and its record: the date, the kit's git revision, both times. It counts
# where that revision is this kernel's, or one that the proofs (benchmarks/sass_dump.py: the same
# SASS for every config both revisions compile) make equal to it; otherwise it is stale: ignored,
# with one warning per process, and its shape treated as untabled (``config_for``).

# >>> bundle kernels/tables.json sha256=3a8427a58a73ce79 (a copy: edit that file, then `python3 eval.py bundle`)
_TABLES_JSON = r"""
{
  "about": [
    "The measured tables of submission.py (python3 eval.py bundle copies this file into it).",
    "tables: per backend and GPU model (torch.cuda.get_device_name), the config of each benchmark shape that a",
    "sweep measured fastest: the lowest time under the server's protocol (server_us), the clean device time",
    "(clean_us) breaking ties within 1% (null: not measured that way). kernel: the kernel revision the entry was",
    "measured with (submission.kernel_revision()); an entry counts only where that is the current revision or one",
    "that kernels/same_sass.json proves to compile alike (tests/test_submission.py fails on any other). kit: the",
    "kit's git revision; sweep: what measured it. benchmarks/apply_table.py writes the entries.",
    "retired: entries taken out of the tables for want of such a proof; no longer answers, their configs are",
    "still tuner candidates and compiled by the compile checks. A new entry for the same shape replaces one."
  ],
  "notes": [
    "Retired when the kernel revision became a hash of what the compilers see: the cuda entries (the kernels of",
    "kits c3c10fd, 6fadabf and f60a1c9) and the H100 triton 7168x2048x4 entry (the kernel of kit 0cdea24) compile",
    "to other SASS than this kernel (benchmarks/sass_dump.py on both files); they wait for a sweep on those GPUs."
  ],
  "tables": {
    "triton": {
      "NVIDIA H100 80GB HBM3": [
        {
          "shape": [7168, 16384, 1],
          "config": "block_m=16,block_g=128,warps=4",
          "kernel": "3c2611b17aeb",
          "kit": "7228653",
          "date": "2026-11-25",
          "server_us": 32.7,
          "clean_us": 30.27,
          "sweep": "bench_kernel.py --sweep"
        },
        {
          "shape": [4096, 7168, 8],
          "config": "block_m=8,block_g=64,warps=1",
          "kernel": "3c2611b17aeb",
          "kit": "7228653",
          "date": "2026-11-25",
          "server_us": 55.15,
          "clean_us": 50.9,
          "sweep": "bench_kernel.py --sweep"
        }
      ],
      "NVIDIA H200": [
        {
          "shape": [7168, 16384, 1],
          "config": "block_m=8,block_g=128,warps=2",
          "kernel": "38d545c52b66",
          "kit": "f60a1c9",
          "date": "2026-11-25",
          "server_us": null,
          "clean_us": 26.9,
          "sweep": "bench_kernel.py --sweep"
        },
        {
          "shape": [4096, 7168, 8],
          "config": "block_m=16,block_g=32,warps=1",
          "kernel": "38d545c52b66",
          "kit": "f60a1c9",
          "date": "2026-11-25",
          "server_us": null,
          "clean_us": 40.4,
          "sweep": "bench_kernel.py --sweep"
        },
        {
          "shape": [7168, 2048, 4],
          "config": "block_m=16,block_g=64,warps=2",
          "kernel": "38d545c52b66",
          "kit": "f60a1c9",
          "date": "2026-11-25",
          "server_us": null,
          "clean_us": 15.1,
          "sweep": "bench_kernel.py --sweep"
        }
      ]
    },
    "cuda": {
      "NVIDIA H100 80GB HBM3": [
        {
          "shape": [7168, 16384, 1],
          "config": "lpr=8,rpt=1,u=4,warps=1,decode=dp4a-sr2,v=1,pipe=ptxas,minb=3,bsh=True,ks=8,ki=True",
          "kernel": "385b667cc3d1",
          "kit": "2fa0648",
          "date": "2026-11-26",
          "server_us": 29.82,
          "clean_us": 26.99,
          "sweep": "bench_kernel.py --sweep"
        },
        {
          "shape": [4096, 7168, 8],
          "config": "lpr=8,rpt=1,u=4,warps=1,decode=dp4a-sr2,v=1,pipe=ptxas,minb=4,bsh=True,ks=7,ki=True",
          "kernel": "385b667cc3d1",
          "kit": "2fa0648",
          "date": "2026-11-26",
          "server_us": 50.27,
          "clean_us": 46.61,
          "sweep": "bench_kernel.py --sweep"
        },
        {
          "shape": [7168, 2048, 4],
          "config": "lpr=8,rpt=1,u=4,warps=1,decode=dp4a-sr2,v=1,pipe=ptxas,minb=32,bsh=True",
          "kernel": "385b667cc3d1",
          "kit": "2fa0648",
          "date": "2026-11-26",
          "server_us": 17.57,
          "clean_us": 15.65,
          "sweep": "bench_kernel.py --sweep"
        }
      ],
      "NVIDIA H200": [
        {
          "shape": [7168, 16384, 1],
          "config": "lpr=32,rpt=4,u=4,warps=8,decode=dp4a-sr,pipe=ptxas,minb=1",
          "kernel": "6c6284255b2b",
          "kit": "c9de371",
          "date": "2026-11-29",
          "server_us": 24.35,
          "clean_us": 23.15,
          "sweep": "bench_kernel.py --sweep"
        },
        {
          "shape": [4096, 7168, 8],
          "config": "lpr=8,rpt=2,u=4,warps=1,decode=dp4a-sr2,v=1,pipe=ptxas,minb=5,bsh=True,ks=4,ki=True",
          "kernel": "6c6284255b2b",
          "kit": "c9de371",
          "date": "2026-11-29",
          "server_us": 39.95,
          "clean_us": 37.12,
          "sweep": "bench_kernel.py --sweep"
        },
        {
          "shape": [7168, 2048, 4],
          "config": "lpr=8,rpt=1,u=4,warps=1,decode=dp4a-sr2,v=1,pipe=ptxas,minb=32,bsh=True",
          "kernel": "6c6284255b2b",
          "kit": "c9de371",
          "date": "2026-11-29",
          "server_us": 14.35,
          "clean_us": 13.62,
          "sweep": "bench_kernel.py --sweep"
        }
      ]
    }
  },
  "retired": {
    "cuda": {},
    "triton": {
      "NVIDIA H100 80GB HBM3": [
        {
          "shape": [7168, 2048, 4],
          "config": "block_m=16,block_g=64,warps=2",
          "kernel": null,
          "kit": "0cdea24",
          "date": "2026-11-22",
          "server_us": 17.82,
          "clean_us": 16.54,
          "sweep": "bench_kernel.py --sweep"
        }
      ]
    }
  }
}
"""[1:]
# <<< bundle

# >>> bundle kernels/same_sass.json sha256=7d5cdb545cb74e64 (a copy: edit that file, then `python3 eval.py bundle`)
_SAME_SASS_JSON = r"""
{
  "about": [
    "Proofs that two kernel revisions compile to the same code for a backend: benchmarks/sass_dump.py (or the",
    "same compiles) on the files of both, every variant compared for sm_90a and sm_100a (cuda) or cc 90 and cc",
    "100 (triton), the instructions identical (kernel names aside). A table entry measured with either revision",
    "counts for the other (submission.same_sass follows chains of them). old_kit, new_kit: the files compared."
  ],
  "proofs": [
    {
      "backend": "cuda",
      "old": "385b667cc3d1",
      "new": "6c6284255b2b",
      "old_kit": "3ff93ea",
      "new_kit": "73d9f9a",
      "date": "2026-11-29",
      "tools": "NVRTC 13.0 and the cuobjdump of Triton 3.9.0's wheel, Triton 3.9.0",
      "compared": [
        "python3 benchmarks/sass_dump.py on both files: every cuda variant of the old file (244: the",
        "tables, the tuner's candidate lists for cc 9.0 and 10.0, the default family, the official test",
        "shapes), each for sm_90a and sm_100a: 488 files, no difference (the kernel names written as",
        "KERNEL); the new file's 12 bulk-copy ring variants (config field ring > 0, 24 files) are new kernels"
      ]
    },
    {
      "backend": "triton",
      "old": "385b667cc3d1",
      "new": "6c6284255b2b",
      "old_kit": "3ff93ea",
      "new_kit": "73d9f9a",
      "date": "2026-11-29",
      "tools": "NVRTC 13.0 and the cuobjdump of Triton 3.9.0's wheel, Triton 3.9.0",
      "compared": [
        "python3 benchmarks/sass_dump.py on both files: every Triton launch variant (84), each for cc 90",
        "and cc 100: 168 files, no difference (the Triton kernels' source is unchanged; the revision moved",
        "with the cuda kernel's)"
      ]
    },
    {
      "backend": "cuda",
      "old": "1f1f601d0d8b",
      "new": "385b667cc3d1",
      "old_kit": "e1ae8e1",
      "new_kit": "2fa0648",
      "date": "2026-11-26",
      "tools": "NVRTC 13.0 and the cuobjdump of Triton 3.9.0's wheel, Triton 3.9.0",
      "compared": [
        "python3 benchmarks/sass_dump.py on both files (the new one before its ki tuner family was added, the",
        "same kernel revision): every cuda variant of the tables, the tuner's candidate lists for cc 9.0 and",
        "10.0, the default family and the official test shapes (228 variants, each with ki false: the K parts",
        "contiguous, as before), each for sm_90a and sm_100a: 456 files, no difference (the kernel names written",
        "as KERNEL)"
      ]
    },
    {
      "backend": "triton",
      "old": "1f1f601d0d8b",
      "new": "385b667cc3d1",
      "old_kit": "e1ae8e1",
      "new_kit": "2fa0648",
      "date": "2026-11-26",
      "tools": "NVRTC 13.0 and the cuobjdump of Triton 3.9.0's wheel, Triton 3.9.0",
      "compared": [
        "python3 benchmarks/sass_dump.py on both files: every Triton launch variant (84), each for cc 90 and",
        "cc 100: 168 files, no difference (the Triton kernels' source is unchanged; the revision moved with the",
        "cuda kernel's)"
      ]
    },
    {
      "backend": "triton",
      "old": "3c2611b17aeb",
      "new": "1f1f601d0d8b",
      "old_kit": "7228653",
      "new_kit": "90b8b4f",
      "date": "2026-11-26",
      "tools": "NVRTC 13.0 and the cuobjdump of Triton 3.9.0's wheel, Triton 3.9.0",
      "compared": [
        "the Triton kernel and every function it calls: the same code but for DECODE's spelling (a number",
        "then, a name now); the launches of the H100 entries' configs, (16, 128, 4, 1) and (8, 64, 1, 1),",
        "each decode (dp4a, f16x2, tl), both scale layouts and EVEN_G as the shapes give it: 12 variants,",
        "24 SASS files, no difference"
      ]
    },
    {
      "backend": "triton",
      "old": "38d545c52b66",
      "new": "1f1f601d0d8b",
      "old_kit": "f60a1c9",
      "new_kit": "90b8b4f",
      "date": "2026-11-26",
      "tools": "NVRTC 13.0 and the cuobjdump of Triton 3.9.0's wheel, Triton 3.9.0",
      "compared": [
        "the Triton kernel and every function it calls: the same code but for DECODE's spelling; the",
        "launches of the H200 entries' configs, (8, 128, 2, 1), (16, 32, 1, 1) and (16, 64, 2, 1), each",
        "decode, both scale layouts and EVEN_G as the shapes give it: 24 variants, 48 SASS files, no",
        "difference"
      ]
    },
    {
      "backend": "cuda",
      "old": "b0872285e05d",
      "new": "1f1f601d0d8b",
      "old_kit": "3c388d5",
      "new_kit": "90b8b4f",
      "date": "2026-11-26",
      "tools": "NVRTC 13.0 and the cuobjdump of Triton 3.9.0's wheel, Triton 3.9.0",
      "compared": [
        "python3 benchmarks/sass_dump.py on both files: every cuda variant of the tables, the tuner's",
        "candidate lists for cc 9.0 and 10.0, the default family and the official test shapes (52",
        "configs, each with whole and partial steps and both scale layouts: 208 variants), each for",
        "sm_90a and sm_100a: 416 files, no difference (the kernel names written as KERNEL)"
      ]
    },
    {
      "backend": "triton",
      "old": "b0872285e05d",
      "new": "1f1f601d0d8b",
      "old_kit": "3c388d5",
      "new_kit": "90b8b4f",
      "date": "2026-11-26",
      "tools": "NVRTC 13.0 and the cuobjdump of Triton 3.9.0's wheel, Triton 3.9.0",
      "compared": [
        "python3 benchmarks/sass_dump.py on both files: every Triton launch variant (84), each for cc 90",
        "and cc 100: 168 files, no difference"
      ]
    },
    {
      "backend": "cuda",
      "old": "7753f77595f0",
      "new": "c94ac60702f4",
      "old_kit": "2bc31c0",
      "new_kit": "8f76e6d",
      "date": "2026-11-25",
      "tools": "NVRTC 13.0, Triton 3.9.0",
      "compared": [
        "every cuda config of the tables, the tuner's candidate lists for cc 9.0 and 10.0 and the default",
        "family: 104 variants with both step and scale layouts, each for sm_90a and sm_100a (208 files);",
        "no difference (benchmarks/RESULTS.md, \"Kernel revisions\")"
      ]
    },
    {
      "backend": "triton",
      "old": "7753f77595f0",
      "new": "c94ac60702f4",
      "old_kit": "2bc31c0",
      "new_kit": "8f76e6d",
      "date": "2026-11-25",
      "tools": "NVRTC 13.0, Triton 3.9.0",
      "compared": [
        "every Triton launch variant: 84, each for cc 90 and cc 100 (168 files); no difference",
        "(benchmarks/RESULTS.md, \"Kernel revisions\")"
      ]
    }
  ]
}
"""[1:]
# <<< bundle

# Config types read their text and dict forms with these two (each reads its positional form itself).

def _parse_config(cls, text: str):
    """A config of type ``cls`` from ``name=value`` pairs (fields with defaults may be left out)
    or from its positional form (``cls.of``); raises ValueError (one line)."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if all("=" not in p for p in parts):
        try:
            values = tuple(int(p) for p in parts)
        except ValueError:
            raise ValueError(f"{text!r}: a config is integers by position or name=value pairs "
                             f"({', '.join(cls._fields)})") from None
        return cls.of(values)
    fields = {}
    for p in parts:
        name, sep, value = (x.strip() for x in p.partition("="))
        if not sep:
            raise ValueError(f"{text!r}: name every field once one is named ({', '.join(cls._fields)})")
        if name not in cls._fields:
            raise ValueError(f"{text!r}: no field {name!r} (fields: {', '.join(cls._fields)})")
        fields[name] = int(value) if value.lstrip("-").isdigit() else value
    missing = [f for f in cls._fields if f not in cls._field_defaults and f not in fields]
    if missing:
        raise ValueError(f"{text!r}: {', '.join(missing)} missing")
    return cls(**fields)


def _config_from(cls, value):
    """``value`` as a config of type ``cls`` when it is one, text (``cls.parse``) or a dict of
    fields; None for a sequence (each type's ``of`` reads its own positional form)."""
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        return cls.parse(value)
    if isinstance(value, dict):
        return cls(**value)
    return None


_ENTRIES = {}  # (backend, GPU model, (m, k, l)) -> its entry of kernels/tables.json (revision, date, kit, times)


def _measured(backend: str, config: type, part: str = "tables") -> dict:
    """{GPU model: {(m, k, l): config}} of ``backend``'s entries in kernels/tables.json, stale ones
    included (``config_for`` skips them), each entry's record kept in _ENTRIES; with ``part``
    "retired", the entries retired from the tables for want of a proof that today's kernel
    compiles alike (no longer an answer, still a candidate for the tuner: what won once)."""
    out = {}
    for model, entries in json.loads(_TABLES_JSON).get(part, {}).get(backend, {}).items():
        for entry in entries:
            shape = tuple(entry["shape"])
            out.setdefault(model, {})[shape] = config.of(entry["config"])
            if part == "tables":
                _ENTRIES[(backend, model, shape)] = entry
    return out


def table_entries() -> list:
    """[(backend, GPU model, (m, k, l), config, record)] of every table entry of the registry's
    backends; the record is its entry of kernels/tables.json (``kernel``: the revision it was
    measured with; ``date``, ``kit``, ``server_us``, ``clean_us``)."""
    return [(name, model, shape, cfg, _ENTRIES.get((name, model, shape), {}))
            for name, backend in BACKENDS.items() for model, table in (backend.measured or {}).items()
            for shape, cfg in table.items()]



# =========================================================================== backend: cuda
#
# Why NVRTC through ctypes and not torch.utils.cpp_extension.load_inline: load_inline needs
# nvcc, ninja and a host compiler at run time and spends tens of seconds compiling torch's
# headers for the binding; NVRTC (a shared library that torch's CUDA wheels already depend
# on) compiles this header-free source in well under a second, and ctypes (the standard
# library) reaches both it and the driver, so the file imports nothing beyond the contract.
# Measured on an H100 and an H200: benchmarks/NOTES.md, "Build". Launches go to the default
# (legacy) queue, the one the harness's events are recorded on.

# The cuda kernel's choices by name, each tuple in the order of its enum in kernels/nvfp4_gemv.cu
# (a name's position is its number in the positional form configs were recorded in before they
# had names). Decodes: names of DECODES (enum DecodeId).
_CUDA_DECODES = ("dp4a", "f16x2", "dp4a-sr", "dp4a-sr2")
# How a and its scales are loaded (enum LoadA; the kernel's comments say what each load is). The
# names are benchmarks/timing.py's read policies where the load is the same.
CUDA_LOADS = ("nc_no_allocate", "plain", "l1_evict_first", "cs", "no_allocate_l2_256b", "no_allocate_l2_evict_first",
              "no_allocate_l2_evict_first_256")
# The order of a step's loads and arithmetic (enum Pipe): as ptxas schedules it; every load of a
# before the arithmetic; b's loads too, beside a's.
CUDA_PIPES = ("ptxas", "a_first", "ab_first")
_CUDA_BOOLS = ("bsh", "bload", "ki")  # the fields that are bools (0 / 1 and "true" / "false" taken too)


class _CudaFields(NamedTuple):
    lpr: int  # lanes per row: 2, 4, 8, 16, 32
    rpt: int  # rows per lane
    u: int  # 16-byte chunks of a row in flight per lane and step
    warps: int  # warps per block (times ks)
    decode: str | None = None  # a cuda decode of DECODES; None: the GPU's default (cuda_default_decode)
    v: int = 2  # adjacent chunks per lane (1 or 2, dividing u; 2 reads two chunks' scale pairs at once)
    load: str = "l1_evict_first"  # how a and its scales are loaded (CUDA_LOADS; the 32-byte one needs v 2)
    pipe: str = "a_first"  # the order of a step's loads and arithmetic (CUDA_PIPES; ab_first needs bsh False)
    minb: int = 0  # > 0: launch bounds asking registers enough for minb blocks per SM
    bsh: bool = False  # b prepared once per warp and step through shared memory (lpr * u == 32)
    ks: int = 1  # K split in ks parts over ks warps of a block, summed in a fixed order
    kb: int = 1  # and each of those in kb parts over kb blocks, summed by the last block in a fixed order
    bload: bool = False  # b and its scales loaded with L1 and L2 evict-last priority (else ld.global.nc)
    gs: int = 0  # 0: a block per row group; > 0: a grid of gs blocks per SM walking the row groups (ks = kb = 1)
    ki: bool = False  # the K parts' steps interleaved (part p: steps p, p + ks * kb, ...), else contiguous ranges
    ring: int = 0  # > 0: the persistent bulk-copy ring, this many stages per consumer warp (see CudaConfig)
    pw: int = 0  # the ring's producer warps per block (0: each consumer warp copies its own stages)


def _cuda_named(fields: tuple) -> tuple:
    """A config's fields with the load, pipe and bools by name where given by number (0 / 1 for a
    bool); anything else as it is (``problem()`` says what is wrong with it)."""
    named = dict(zip(_CudaFields._fields, fields, strict=True))
    for name, names in (("load", CUDA_LOADS), ("pipe", CUDA_PIPES)):
        value = named[name]
        if isinstance(value, int) and 0 <= value < len(names):  # a bool too: pipe was one once
            named[name] = names[value]
    for name in _CUDA_BOOLS:
        value = named[name]
        if isinstance(value, str) and value.lower() in ("true", "false"):
            named[name] = value.lower() == "true"
        elif isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
            named[name] = bool(value)
    return tuple(named.values())


class CudaConfig(_CudaFields):
    """A configuration of the cuda kernel: the template parameters of ``gemv_body`` (the
    defaults of the last ten: benchmarks/NOTES.md, "Loads" and "Pipelining"). A warp owns
    32 / lpr * rpt rows; one step of the K loop has lpr * u 16-byte chunks of each row in flight.
    The fields are those of the named tuple above; a load or pipe given by its number (its place in
    CUDA_LOADS, CUDA_PIPES) and a bool given as 0 / 1 are kept by name, so configs of either form
    compare equal.

    ring > 0 is the other kernel of kernels/nvfp4_gemv.cu, ``ring_body``: a persistent grid of
    minb blocks per SM of the current context, each reading an even share of the units (rpt
    consecutive rows of a batch) through a shared-memory ring that ``pw`` producer warps fill with
    bulk copies (pw 0: each consumer warp its own), ``ring`` stages per consumer warp; ``warps``
    teams of ``ks`` consumer warps, a team taking a unit at a time, its warps the unit's stages in
    turn (K parts interleaved) and adding their parts in a fixed order; a stage is rpt rows of 32 * u
    chunks (whole rows where
    rpt > 1), lane L reading chunks L, L + 32, ... of each. It reads the plain scales (16-byte
    aligned) and needs compute capability >= 9.0; lpr 32, v 1, ptxas, and the register tile's
    other fields (kb, bsh, bload, gs, ki, load) at their defaults."""
    __slots__ = ()

    def __new__(cls, *args, **kwargs):
        return tuple.__new__(cls, _cuda_named(_CudaFields(*args, **kwargs)))

    @classmethod
    def _make(cls, iterable) -> "CudaConfig":
        return cls(*iterable)  # _replace goes through here: its fields are named too

    def __repr__(self) -> str:
        """The canonical form: the four tile fields, then every field that is not its default."""
        parts = [f"lpr={self.lpr}", f"rpt={self.rpt}", f"u={self.u}", f"warps={self.warps}"]
        for name in self._fields[4:]:
            value = getattr(self, name)
            if value != self._field_defaults[name]:
                parts.append(f"{name}={value!r}".replace("'", '"'))
        return f"CudaConfig({', '.join(parts)})"

    @property
    def rows(self) -> int:
        """Rows per block (ring: rows per unit, the rpt rows a consumer warp takes at a time)."""
        return self.rpt if self.ring else self.warps * (32 // self.lpr) * self.rpt

    def problem(self) -> str:
        """'' when the kernel can be built with this config (whatever the shape), else the rule it
        breaks (the first of ``_CUDA_RULES``), in one line."""
        for broken, rule in _CUDA_RULES:
            try:
                if broken(self):
                    return f"cuda config {self!r}: {rule}"
            except TypeError:  # a field of the wrong type: the rule about that field says what it takes
                return f"cuda config {self!r}: {rule}"
        return ""

    def fits(self, m: int, k: int) -> bool:
        """Whether this config can run an m x k problem: blocks of at most 128 rows dividing M;
        every lane owns at least one 32-value chunk per step (lpr * u <= K / 32: a family with
        more lanes per row than the row has chunks is for longer rows); bsh steps span 32
        chunks; K splits in parts of whole steps (ks * kb of them), at most one part idle (the
        H100's 4096x7168x8 entry: 7 steps in 8 parts)."""
        if self.ring:
            return not self.shape_problem(m, k)
        steps = -(-(k // 32) // (self.lpr * self.u))
        return (self.rows <= 128 and m % self.rows == 0 and self.lpr * self.u <= k // 32 and self.u % self.v == 0
                and (not self.bsh or self.lpr * self.u == 32) and self.ks * self.kb <= steps + 1)

    def shape_problem(self, m: int, k: int) -> str:
        """'' when the kernel can run an m x k problem with this config (tails are masked), else why not."""
        if m % self.rows:
            return f"cuda config {self!r}: {self.rows} rows per block must divide M={m}"
        if self.ring:
            chunks, seg = k // 32, 32 * self.u
            if self.rpt > 1 and chunks != seg:
                return (f"cuda config {self!r}: a ring stage of rpt > 1 rows holds whole rows: 32 * u = {seg} "
                        f"chunks must equal K/32 = {chunks}")
            if chunks % seg or (chunks // seg) % self.ks:
                return (f"cuda config {self!r}: a ring stage of 32 * u = {seg} chunks must divide K/32 = {chunks} "
                        f"into a multiple of ks = {self.ks} stages")
        return ""

    def with_decode(self, capability: tuple) -> "CudaConfig":
        """This config, with the GPU's default decode where it names none."""
        return self if self.decode is not None else self._replace(decode=cuda_default_decode(capability, self.bsh))

    @classmethod
    def of(cls, value) -> "CudaConfig":
        """A CudaConfig from itself, from a dict of fields, from text (``parse``) or from a sequence
        of fields in order, trailing ones optional; the decode by name, or by its number in the
        positional form configs were recorded in before they had names (0 dp4a, 1 f16x2, 2 dp4a-sr,
        3 dp4a-sr2); load and pipe by name or number, bsh, bload and ki as bools or 0 / 1."""
        cfg = _config_from(cls, value)
        if cfg is not None:
            return cfg
        fields = list(value)
        if not 5 <= len(fields) <= len(cls._fields) or not all(isinstance(x, int) for x in fields[:4]):
            raise ValueError(f"cuda takes 5 to {len(cls._fields)} numbers ({', '.join(cls._fields)}; decode by its "
                             f"number), got {len(fields)}")
        if isinstance(fields[4], int):
            if not 0 <= fields[4] < len(_CUDA_DECODES):
                raise ValueError(f"decode number {fields[4]} of {value!r}: one of "
                                 f"{dict(enumerate(_CUDA_DECODES))}")
            fields[4] = _CUDA_DECODES[fields[4]]
        return cls(*fields)

    @classmethod
    def parse(cls, text: str) -> "CudaConfig":
        """``lpr=8,rpt=2,u=4,warps=1,decode=dp4a-sr2`` or positional ``8,2,4,1,3``."""
        return _parse_config(cls, text)

    def positional(self) -> tuple:
        """The positional form (decode, load and pipe by number, bools as 0 / 1), as older records hold configs."""
        codes = {"decode": _CUDA_DECODES, "load": CUDA_LOADS, "pipe": CUDA_PIPES}
        return tuple(codes[name].index(value) if name in codes else int(value) if name in _CUDA_BOOLS else value
                     for name, value in zip(self._fields, self, strict=True))


def _int_in(value, low: int, high: int | None = None) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low and (high is None or value <= high)


# What a config must be for the kernel to build, one rule a line: (broken(cfg), the rule).
_CUDA_RULES = (
    (lambda c: c.lpr not in (2, 4, 8, 16, 32), "lpr (lanes per row) must be 2, 4, 8, 16 or 32"),
    (lambda c: not _int_in(c.rpt, 1), "rpt (rows per lane) must be an integer >= 1"),
    (lambda c: not _int_in(c.u, 1), "u (chunks of a row per lane and step) must be an integer >= 1"),
    (lambda c: not _int_in(c.warps, 1, 32), "warps must be an integer in 1..32"),
    (lambda c: c.decode is not None and c.decode not in _CUDA_DECODES,
     f"decode must be one of {', '.join(_CUDA_DECODES)} (or None: the GPU's)"),
    (lambda c: c.v not in (1, 2), "v (adjacent chunks per lane) must be 1 or 2"),
    (lambda c: c.u % c.v, "v must divide u"),
    (lambda c: c.load not in CUDA_LOADS, f"load must be one of {', '.join(CUDA_LOADS)} (or its number 0-6)"),
    (lambda c: c.load == CUDA_LOADS[6] and c.v != 2, f"load {CUDA_LOADS[6]} needs v 2 (two chunks per 32-byte load)"),
    (lambda c: c.pipe not in CUDA_PIPES, f"pipe must be one of {', '.join(CUDA_PIPES)} (or its number 0-2)"),
    (lambda c: not _int_in(c.minb, 0), "minb must be an integer >= 0"),
    (lambda c: not isinstance(c.bsh, bool), "bsh must be a bool (or 0 / 1)"),
    (lambda c: c.bsh and c.lpr * c.u != 32, "bsh needs lpr * u = 32 (a step of 32 chunks, one per lane to prepare)"),
    (lambda c: c.pipe == "ab_first" and c.bsh, "pipe ab_first needs bsh False (bsh prepares b through shared memory)"),
    (lambda c: not _int_in(c.ks, 1), "ks must be an integer >= 1"),
    (lambda c: c.warps * c.ks > 32, "warps * ks must be at most 32 (1024 threads per block)"),
    (lambda c: not _int_in(c.kb, 1, 64), "kb must be an integer in 1..64"),
    (lambda c: not isinstance(c.bload, bool), "bload must be a bool (or 0 / 1)"),
    (lambda c: not _int_in(c.gs, 0, 32), "gs must be an integer in 0..32"),
    (lambda c: c.gs and (c.ks > 1 or c.kb > 1), "gs > 0 needs ks = kb = 1"),
    (lambda c: not isinstance(c.ki, bool), "ki must be a bool (or 0 / 1)"),
    (lambda c: c.ki and c.ks * c.kb == 1, "ki (interleaved K parts) needs K split in parts: ks * kb > 1"),
    (lambda c: not _int_in(c.ring, 0, 16), "ring must be an integer in 0..16 (stages per consumer warp; 0: no ring)"),
    (lambda c: c.ring and (c.lpr != 32 or c.v != 1 or c.pipe != "ptxas" or c.bsh or c.kb != 1
                           or c.bload or c.gs or c.ki or c.load != _CudaFields._field_defaults["load"]),
     "ring > 0 takes lpr 32, v 1, pipe ptxas and kb, bsh, bload, gs, ki, load at their defaults"),
    (lambda c: c.ring and not 1 <= c.minb <= 8, "ring > 0 needs minb in 1..8 (its blocks per SM)"),
    (lambda c: not _int_in(c.pw, 0, 8) or (c.pw and not c.ring), "pw must be an integer in 0..8, and 0 without a ring"),
    (lambda c: c.ring and (c.warps * c.ks + c.pw > 32 or (c.ks > 1 and c.warps > 14)),
     "ring > 0 needs warps * ks + pw <= 32 warps, and warps <= 14 teams where ks > 1 (a named barrier per team)"),
    (lambda c: c.ring and c.rpt > 8, "ring > 0 needs rpt <= 8 (rows per stage)"),
)


def cuda_default_decode(capability: tuple, bsh: bool = False) -> str:
    """The decode of a config that names none: f16x2 where the GPU converts e2m1 itself
    (compute capability 10.x; unmeasured: the tuner times the integer decodes there too);
    elsewhere dp4a-sr2 on bsh tiles and dp4a-sr on the others (benchmarks/NOTES.md, "Decode")."""
    return "f16x2" if capability[0] >= 10 else ("dp4a-sr2" if bsh else "dp4a-sr")


# >>> bundle kernels/nvfp4_gemv.cu sha256=16c5dfdd06fe818b (a copy: edit that file, then `python3 eval.py bundle`)
CUDA_SRC = r"""
// NVFP4 batched GEMV, c[r, l] = fp16(sum_k a[r, k, l] * b[0, k, l]) with both block scales.
// Compiled at run time by NVRTC; no headers. One kernel per configuration: gemv_body is
// instantiated by a small extern "C" wrapper that submission.py's cuda_kernel appends to this
// text (the template arguments are CudaConfig's fields). submission.py carries this file as
// embedded text, written by `python3 eval.py bundle`: edit this file, then bundle.
//
// To compile it alone: nvcc -arch=sm_90a -std=c++17 -DNVFP4_GEMV_EXAMPLE -c nvfp4_gemv.cu
// (the example kernel at the end instantiates one configuration; for sm_100a add
// -DHAS_E2M1_CVT=1 -DHAS_LD256=1, as submission.py's build does).
//
// A warp owns 32/LPR * RPT rows: LPR lanes share a row (lane t reads the row's 16-byte
// chunks t, t + LPR, ...), and each lane holds RPT rows. One step of the K loop puts
// RPT * U loads of 16 bytes of a (plus their scale pairs) in flight per lane, every one
// issued before the first is used; then b's chunks (L1/L2 resident) are read and decoded
// once per lane for its RPT rows. Each 16-byte chunk is two 16-value groups; each group's
// dot product is exact (an integer multiple of 1/4), times the exact fp32 product of the
// two e4m3 scales, summed in fp32 per lane; lanes of a row combine by a fixed butterfly,
// so repeated runs are bit-identical.
typedef unsigned int u32;
typedef unsigned short u16;
typedef long long i64;

// Set by submission.py's cuda_compile: 1 on Blackwell's architecture- and family-specific targets
// (blackwell_target: sm_100a, sm_103a, sm_110a, sm_120a, sm_121a, sm_100f, ...), 0 elsewhere.
#ifndef HAS_E2M1_CVT
#define HAS_E2M1_CVT 0  // cvt.rn.f16x2.e2m1x2 and the mixed-precision fma
#endif
#ifndef HAS_LD256
#define HAS_LD256 0  // 32-byte loads with the L2 eviction priority as a qualifier
#endif

struct __align__(16) Q { u32 w[4]; };

// The template arguments of gemv_body by name; each enum's names are those of CudaConfig's
// field in submission.py (load, pipe, decode), in the same order.
// LOAD: how a and its scales are read (read once; chosen by measurement: benchmarks/NOTES.md,
// "Loads"). The names match benchmarks/timing.py's read policies where the load is the same.
enum LoadA : int {
  LD_NC_NO_ALLOCATE = 0,               // ld.global.nc.L1::no_allocate
  LD_PLAIN = 1,                        // ld.global
  LD_L1_EVICT_FIRST = 2,               // ld.global.L1::evict_first
  LD_CS = 3,                           // ld.global.cs (evict-first at every level)
  LD_NO_ALLOCATE_L2_256B = 4,          // ld.global.L1::no_allocate.L2::256B (a 256-byte L2 prefetch)
  LD_NO_ALLOCATE_L2_EVICT_FIRST = 5,   // L1 no-allocate with an L2 evict-first cache policy (below)
  LD_NO_ALLOCATE_L2_EVICT_FIRST_256 = 6  // a lane's two adjacent chunks in one 32-byte load (ld_a32)
};
// PIPE: the order of a step's loads and arithmetic.
enum Pipe : int {
  PIPE_PTXAS = 0,     // as ptxas schedules it (with launch bounds, minb > 0, it hoists the loads)
  PIPE_A_FIRST = 1,   // every load of a issued before the step's arithmetic (b's loads after)
  PIPE_AB_FIRST = 2   // b's loads of the step too, beside a's, before any arithmetic
};
// DECODE: how a group of 16 e2m1 values meets b's (submission.DECODES says what each is).
enum DecodeId : int { DEC_DP4A = 0, DEC_F16X2 = 1, DEC_DP4A_SR = 2, DEC_DP4A_SR2 = 3 };

// The loads of a and its scales by LOAD, those spelled by a qualifier alone.
#define LD_FLAVOURS(T, R, PTXT, OUTS, ...)                                         \
  if (LOAD == LD_NC_NO_ALLOCATE)                                                   \
    asm("ld.global.nc.L1::no_allocate." PTXT " " OUTS ", [%" R "];" : __VA_ARGS__); \
  else if (LOAD == LD_PLAIN)                                                       \
    asm("ld.global." PTXT " " OUTS ", [%" R "];" : __VA_ARGS__);                   \
  else if (LOAD == LD_L1_EVICT_FIRST)                                              \
    asm("ld.global.L1::evict_first." PTXT " " OUTS ", [%" R "];" : __VA_ARGS__);   \
  else if (LOAD == LD_CS)                                                          \
    asm("ld.global.cs." PTXT " " OUTS ", [%" R "];" : __VA_ARGS__);                \
  else                                                                             \
    asm("ld.global.L1::no_allocate.L2::256B." PTXT " " OUTS ", [%" R "];" : __VA_ARGS__);
// LD_NO_ALLOCATE_L2_EVICT_FIRST: ld.global.L1::no_allocate.L2::cache_hint with an L2 evict-first policy (the L2
// priority that 16-byte loads can carry: the .L2::evict_first qualifier needs 32-byte loads).
// The policies are pure values (createpolicy), formed once per thread where the compiler hoists them.
__device__ __forceinline__ unsigned long long l2_first() {
  unsigned long long p;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ unsigned long long l2_last() {
  unsigned long long p;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  return p;
}
template <int LOAD>
__device__ __forceinline__ Q ld_a(const unsigned char* p) {
  Q q;
  if (LOAD == LD_NO_ALLOCATE_L2_EVICT_FIRST) {
    asm("ld.global.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
        : "=r"(q.w[0]), "=r"(q.w[1]), "=r"(q.w[2]), "=r"(q.w[3]) : "l"(p), "l"(l2_first()));
  } else {
    LD_FLAVOURS(Q, "4", "v4.u32", "{%0, %1, %2, %3}",
                "=r"(q.w[0]), "=r"(q.w[1]), "=r"(q.w[2]), "=r"(q.w[3]) : "l"(p))
  }
  return q;
}
template <int LOAD>
__device__ __forceinline__ u32 ld_scales16(const unsigned char* p) {
  u16 v;
  if (LOAD == LD_NO_ALLOCATE_L2_EVICT_FIRST)
    asm("ld.global.L1::no_allocate.L2::cache_hint.u16 %0, [%1], %2;" : "=h"(v) : "l"(p), "l"(l2_first()));
  else { LD_FLAVOURS(u16, "1", "u16", "%0", "=h"(v) : "l"(p)) }
  return v;
}
template <int LOAD>
__device__ __forceinline__ u32 ld_scales32(const unsigned char* p) {
  u32 v;
  if (LOAD == LD_NO_ALLOCATE_L2_EVICT_FIRST)
    asm("ld.global.L1::no_allocate.L2::cache_hint.u32 %0, [%1], %2;" : "=r"(v) : "l"(p), "l"(l2_first()));
  else { LD_FLAVOURS(u32, "1", "u32", "%0", "=r"(v) : "l"(p)) }
  return v;
}
// LD_NO_ALLOCATE_L2_EVICT_FIRST_256: a lane's two adjacent chunks (V = 2) in one 32-byte load
// with the L2 eviction priority as a qualifier, ld.global.L1::no_allocate.L2::evict_first.v8.u32,
// which ptxas 13.0 takes on 32-byte loads only, and those on sm_100a only (HAS_LD256); elsewhere
// the same 32 bytes as two 16-byte no-allocate loads (the same values: a stand-in that runs off
// Blackwell). The scales of a take LD_NC_NO_ALLOCATE. Needs a 32-byte aligned a (the launcher
// falls back to LD_NC_NO_ALLOCATE otherwise).
__device__ __forceinline__ void ld_a32(const unsigned char* p, Q& x, Q& y) {
#if HAS_LD256
  asm("ld.global.L1::no_allocate.L2::evict_first.v8.u32 {%0, %1, %2, %3, %4, %5, %6, %7}, [%8];"
      : "=r"(x.w[0]), "=r"(x.w[1]), "=r"(x.w[2]), "=r"(x.w[3]), "=r"(y.w[0]), "=r"(y.w[1]), "=r"(y.w[2]),
        "=r"(y.w[3]) : "l"(p));
#else
  asm("ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(x.w[0]), "=r"(x.w[1]), "=r"(x.w[2]), "=r"(x.w[3]) : "l"(p));
  asm("ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(y.w[0]), "=r"(y.w[1]), "=r"(y.w[2]), "=r"(y.w[3]) : "l"(p + 16));
#endif
}
// b and its scales are small and read by every row: cached loads (BLOAD false), or (BLOAD true)
// the same with an L1 evict-last priority and an L2 evict-last policy (kept while a passes through).
template <bool BLOAD>
__device__ __forceinline__ Q ld_b(const unsigned char* p) {
  Q q;
  if (BLOAD)
    asm("ld.global.nc.L1::evict_last.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
        : "=r"(q.w[0]), "=r"(q.w[1]), "=r"(q.w[2]), "=r"(q.w[3]) : "l"(p), "l"(l2_last()));
  else
    asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(q.w[0]), "=r"(q.w[1]), "=r"(q.w[2]), "=r"(q.w[3]) : "l"(p));
  return q;
}
template <bool BLOAD>
__device__ __forceinline__ u32 ld_b_scales(const unsigned char* p) {
  u16 v;
  if (BLOAD)
    asm("ld.global.nc.L1::evict_last.L2::cache_hint.u16 %0, [%1], %2;" : "=h"(v) : "l"(p), "l"(l2_last()));
  else asm("ld.global.nc.u16 %0, [%1];" : "=h"(v) : "l"(p));
  return v;
}

// Two e4m3 codes (bytes 0 and 1 of v) -> floats, exactly: e4m3 is a subset of fp16, and the
// NaN codes 0x7F / 0xFF stay NaN (NaN in, NaN out, as cuBLAS gives).
__device__ __forceinline__ void e4m3x2(u32 v, float& s0, float& s1) {
  asm("{ .reg .b16 t, l, h; .reg .b32 d; cvt.u16.u32 t, %2; cvt.rn.f16x2.e4m3x2 d, t;"
      " mov.b32 {l, h}, d; cvt.f32.f16 %0, l; cvt.f32.f16 %1, h; }"
      : "=f"(s0), "=f"(s1) : "r"(v));
}

// ---- "dp4a" (Decode<DEC_DP4A>): prmt is an 8-entry byte table: 4 magnitude codes -> the bytes 2|a|.
// b is prepared per chunk as bytes +2|b|, -2|b| and selector bases i + 4 sign(b_i); a second
// prmt, whose selectors XOR in a's signs, picks +-2|b| per byte; dp4a sums 4 products. The
// result is 4 x the group's dot product.
#define TLO 0x03020100u
#define THI 0x0C080604u
#define NLO 0xFDFEFF00u
#define NHI 0xF4F8FAFCu
struct BWord { u32 p0, n0, p1, n1, x; };
struct BDp4a { BWord w[4]; };
__device__ __forceinline__ BDp4a prep_dp4a(const Q& q) {
  BDp4a r;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    u32 v = q.w[j], s0 = v & 0x7777u, s1 = (v >> 16) & 0x7777u;
    r.w[j].p0 = __byte_perm(TLO, THI, s0);
    r.w[j].n0 = __byte_perm(NLO, NHI, s0);
    r.w[j].p1 = __byte_perm(TLO, THI, s1);
    r.w[j].n1 = __byte_perm(NLO, NHI, s1);
    r.w[j].x = ((v >> 1) & 0x44444444u) | 0x32103210u;
  }
  return r;
}
__device__ __forceinline__ int dot8(u32 v, const BWord& b, int acc) {
  u32 x = ((v >> 1) & 0x44444444u) ^ b.x;
  acc = __dp4a((int)__byte_perm(TLO, THI, v & 0x7777u), (int)__byte_perm(b.p0, b.n0, x), acc);
  return __dp4a((int)__byte_perm(TLO, THI, (v >> 16) & 0x7777u), (int)__byte_perm(b.p1, b.n1, x >> 16), acc);
}
__device__ __forceinline__ void dot_chunk(const Q& a, const BDp4a& b, float& g0, float& g1) {
  g0 = (float)dot8(a.w[1], b.w[1], dot8(a.w[0], b.w[0], 0));
  g1 = (float)dot8(a.w[3], b.w[3], dot8(a.w[2], b.w[2], 0));
}

// ---- "f16x2" (Decode<DEC_F16X2>): each byte (2 values) -> an fp16x2 pair; fma.rn.f16x2 sums 8 exact
// products per half (multiples of 1/4 below 288: exact in fp16); the halves add in fp32.
// Blackwell converts with its e2m1x2 instruction; elsewhere the same conversion is done in
// integer steps (fp16 bits (c & 7) << 9 | (c & 8) << 12 are value * 2^-14; times 2^14),
// an exact stand-in so that this path is tested off Blackwell.
// Byte J of w (two e2m1 values) -> fp16x2. Blackwell's conversion reads the byte in place
// (SASS F2FP.F16.E2M1.UNPACK_B with a byte selector: no shift to bring it down; the instruction
// counts: benchmarks/NOTES.md, "The e2m1 conversion with a byte selector").
template <int J>
__device__ __forceinline__ u32 e2m1x2(u32 w) {
  u32 d;
#if HAS_E2M1_CVT
  asm("{ .reg .b8 t0, t1, t2, t3; mov.b32 {t0, t1, t2, t3}, %1; cvt.rn.f16x2.e2m1x2 %0, t%2; }"
      : "=r"(d) : "r"(w), "n"(J));
#else
  const u32 x = w >> (8 * J);
  u32 bits = ((x & 7u) << 9) | ((x & 8u) << 12) | ((x & 0x70u) << 21) | ((x & 0x80u) << 24);
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(bits), "r"(0x74007400u));
#endif
  return d;
}
__device__ __forceinline__ u32 e2m1x2_any(u32 w, int j) {  // j: a constant once unrolled
  return j == 0 ? e2m1x2<0>(w) : j == 1 ? e2m1x2<1>(w) : j == 2 ? e2m1x2<2>(w) : e2m1x2<3>(w);
}
struct BF16 { u32 h[16]; };
__device__ __forceinline__ BF16 prep_f16(const Q& q) {
  BF16 r;
#pragma unroll
  for (int j = 0; j < 16; ++j) r.h[j] = e2m1x2_any(q.w[j >> 2], j & 3);
  return r;
}
__device__ __forceinline__ u32 dot_group_f16(const Q& a, const BF16& b, int g) {
  u32 acc;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int byte = 8 * g + j;
    const u32 ah = e2m1x2_any(a.w[byte >> 2], byte & 3);
    if (j == 0) asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(acc) : "r"(ah), "r"(b.h[byte]));
    else asm("fma.rn.f16x2 %0, %1, %2, %0;" : "+r"(acc) : "r"(ah), "r"(b.h[byte]));
  }
  return acc;  // two exact half sums of the group (8 products each)
}

// ---- "dp4a-sr" (Decode<DEC_DP4A_SR>): as dp4a, but a's signs are handled by prmt's sign-replicate mode
// instead of per-byte selection: with a selector nibble's bit 3 set (a negative value) prmt
// writes 0 for the non-negative table bytes. prmt(T, v) then holds 2|a| of a's non-negative
// values, prmt(T, v ^ 0x8888) of its negative ones; dp4a with +2b and with -2b (prepared once
// per chunk) sums both. 11 instructions per 8 values of a, 6 of them (4 prmt, 2 xor) on the
// integer pipe; the shift runs on the multiply-add pipe (shr_hi below).
__device__ __forceinline__ u32 prmt(u32 a, u32 b, u32 sel) {
  u32 d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}
struct Tables { u32 tlo, thi, nlo, nhi; };
// The tables in registers: ptxas would keep a constant in a uniform register and copy it to a
// regular one before every prmt; (threadIdx.x & zero), zero being a kernel argument that is
// always 0, makes the values per-lane as far as ptxas can tell, so they stay put.
__device__ __forceinline__ Tables tables(u32 zero) {
  const u32 z = threadIdx.x & zero;
  return Tables{0x03020100u | z, 0x0C080604u | z, 0xFDFEFF00u | z, 0xF4F8FAFCu | z};
}
struct BWordS { u32 b0, nb0, b1, nb1; };  // bytes +2b and -2b of the word's quads 0 and 1
struct BSigned { BWordS w[4]; };
// x >> k as the high word of x * 2^(32-k): on the multiply-add pipe (IMAD.HI) instead of the
// integer pipe's shift, which the prmt table lookups keep busy (Hopper issues integer-pipe
// instructions at half rate); ptxas keeps the multiply when it comes from inline PTX.
template <int K>
__device__ __forceinline__ u32 shr_hi(u32 x) {
  u32 d;
  asm("mul.hi.u32 %0, %1, %2;" : "=r"(d) : "r"(x), "n"(1u << (32 - K)));
  return d;
}
__device__ __forceinline__ BSigned prep_signed(const Q& q, const Tables& T) {
  BSigned r;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const u32 v = q.w[j], s0 = v & 0x7777u, s1 = shr_hi<16>(v) & 0x7777u;
    const u32 p0 = prmt(T.tlo, T.thi, s0), n0 = prmt(T.nlo, T.nhi, s0);
    const u32 p1 = prmt(T.tlo, T.thi, s1), n1 = prmt(T.nlo, T.nhi, s1);
    const u32 x = (shr_hi<1>(v) & 0x44444444u) | 0x32103210u;  // i + 4 sign(b_i)
    const u32 xh = shr_hi<16>(x);
    r.w[j].b0 = prmt(p0, n0, x);
    r.w[j].nb0 = prmt(p0, n0, x ^ 0x4444u);
    r.w[j].b1 = prmt(p1, n1, xh);
    r.w[j].nb1 = prmt(p1, n1, xh ^ 0x4444u);
  }
  return r;
}
// xh from vh by XOR, as in dot8_plus below.
__device__ __forceinline__ int dot8_signed(u32 v, const BWordS& b, const Tables& T, int acc) {
  const u32 x = v ^ 0x88888888u, vh = shr_hi<16>(v), xh = vh ^ 0x8888u;
  acc = __dp4a((int)prmt(T.tlo, T.thi, v), (int)b.b0, acc);
  acc = __dp4a((int)prmt(T.tlo, T.thi, x), (int)b.nb0, acc);
  acc = __dp4a((int)prmt(T.tlo, T.thi, vh), (int)b.b1, acc);
  return __dp4a((int)prmt(T.tlo, T.thi, xh), (int)b.nb1, acc);
}
__device__ __forceinline__ void dot_chunk(const Q& a, const BSigned& b, const Tables& T, float& g0, float& g1) {
  g0 = (float)dot8_signed(a.w[1], b.w[1], T, dot8_signed(a.w[0], b.w[0], T, 0));
  g1 = (float)dot8_signed(a.w[3], b.w[3], T, dot8_signed(a.w[2], b.w[2], T, 0));
}
__device__ __forceinline__ void dot_chunk(const Q& a, const BDp4a& b, const Tables&, float& g0, float& g1) {
  dot_chunk(a, b, g0, g1);
}

// ---- group scales. Each chunk's two groups g carry scales sa_g * sb_g; s_g = sa_g * sb_g * 2^-6
// is exact in fp16 (e4m3 products have <= 8 significant bits, lie in [2^-18, 448^2] and are
// multiples of 2^-18, so after 2^-6 they are multiples of 2^-24 below 3136: fp16's subnormal
// step and range), so one mul.rn.f16x2 forms both groups' scales from the e4m3 pairs (b's pair
// prepared as sb * 2^-6 once per chunk); the result is multiplied by 2^6 at the end. A group's
// dot (an integer times 1/4, or an fp16 half sum: <= 12 significant bits) times s_g is exact in
// fp32, so each group adds with one rounding, in a fixed order.
__device__ __forceinline__ u32 e4m3x2_f16x2(u32 v) {
  u32 d;
  asm("{ .reg .b16 t; cvt.u16.u32 t, %1; cvt.rn.f16x2.e4m3x2 %0, t; }" : "=r"(d) : "r"(v));
  return d;
}
__device__ __forceinline__ u32 hmul2(u32 x, u32 y) {
  u32 d;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(x), "r"(y));
  return d;
}
__device__ __forceinline__ u32 prep_sb(u32 sbv) { return hmul2(e4m3x2_f16x2(sbv), 0x24002400u); }  // x 2^-6
__device__ __forceinline__ float half_f32(u32 s, int h) {
  float f;
  if (h == 0) asm("{ .reg .b16 l, u; mov.b32 {l, u}, %1; cvt.f32.f16 %0, l; }" : "=f"(f) : "r"(s));
  else asm("{ .reg .b16 l, u; mov.b32 {l, u}, %1; cvt.f32.f16 %0, u; }" : "=f"(f) : "r"(s));
  return f;
}
// acc + (half HX of x) * (half HS of s), both fp16, one rounding: Blackwell's mixed-precision fma
// (FHFMA, halves picked by operand selectors); elsewhere the exact conversions and an fp32 fma
// (the same result bit for bit).
template <int HX, int HS>
__device__ __forceinline__ float fma_h(u32 x, u32 s, float acc) {
  float d;
#if HAS_E2M1_CVT
  asm("{ .reg .b16 x0, x1, s0, s1; mov.b32 {x0, x1}, %1; mov.b32 {s0, s1}, %2;"
      " fma.rn.f32.f16 %0, x%4, s%5, %3; }" : "=f"(d) : "r"(x), "r"(s), "f"(acc), "n"(HX), "n"(HS));
#else
  d = fmaf(half_f32(x, HX), half_f32(s, HS), acc);
#endif
  return d;
}
// One chunk of a row (a, its scale pair sa) into acc, b prepared (bc, sb from prep_sb).
__device__ __forceinline__ float accumulate(float acc, const Q& a, u32 sa, const BF16& bc, u32 sb, const Tables&) {
  const u32 s = hmul2(e4m3x2_f16x2(sa), sb);
  const u32 h0 = dot_group_f16(a, bc, 0), h1 = dot_group_f16(a, bc, 1);
  // (lo + hi) * s_g formed exactly (lo * s_g is exact, and so is the sum: lo + hi has <= 12
  // significant bits, s_g 11), then one add per group, as the integer decodes do. Adding the
  // two products to acc one by one (two fewer instructions) rounds twice per group and fails the
  // 1e-3 check on full-range rows with heavy cancellation (benchmarks/NOTES.md, "The f16x2
  // decode's group sum").
  acc += fma_h<1, 0>(h0, s, fma_h<0, 0>(h0, s, 0.f));
  return acc + fma_h<1, 1>(h1, s, fma_h<0, 1>(h1, s, 0.f));
}
template <class B>
__device__ __forceinline__ float accumulate(float acc, const Q& a, u32 sa, const B& bc, u32 sb, const Tables& T) {
  const u32 s = hmul2(e4m3x2_f16x2(sa), sb);
  float g0, g1;
  dot_chunk(a, bc, T, g0, g1);
  acc = fmaf(g0, half_f32(s, 0), acc);
  return fmaf(g1, half_f32(s, 1), acc);
}

// ---- "dp4a-sr2" (Decode<DEC_DP4A_SR2>): dp4a-sr with b prepared as +2b only (half the words to prepare,
// keep and read back): a's non-negative and negative values are summed into two counters
// against the same +2b bytes, and the group is their difference (one IMAD: the integer pipe is
// the busier one).
struct BWordP { u32 b0, b1; };  // bytes +2b of the word's quads 0 and 1
struct BPlus { BWordP w[4]; };
__device__ __forceinline__ BPlus prep_plus(const Q& q, const Tables& T) {
  BPlus r;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const u32 v = q.w[j], s0 = v & 0x7777u, s1 = shr_hi<16>(v) & 0x7777u;
    const u32 x = (shr_hi<1>(v) & 0x44444444u) | 0x32103210u;  // i + 4 sign(b_i)
    r.w[j].b0 = prmt(prmt(T.tlo, T.thi, s0), prmt(T.nlo, T.nhi, s0), x);
    r.w[j].b1 = prmt(prmt(T.tlo, T.thi, s1), prmt(T.nlo, T.nhi, s1), shr_hi<16>(x));
  }
  return r;
}
// The high half's selector xh = (v ^ 0x88888888) >> 16 as vh ^ 0x8888, an integer-pipe XOR, not
// a second IMAD.HI: it moves 4 instructions per 16 bytes of a from the multiply-add pipe (IDP,
// IMAD), the busier one under SM pressure, to the integer pipe (benchmarks/NOTES.md, "Decode").
__device__ __forceinline__ void dot8_plus(u32 v, const BWordP& b, const Tables& T, int& pos, int& neg) {
  const u32 x = v ^ 0x88888888u, vh = shr_hi<16>(v), xh = vh ^ 0x8888u;
  pos = __dp4a((int)prmt(T.tlo, T.thi, v), (int)b.b0, pos);
  neg = __dp4a((int)prmt(T.tlo, T.thi, x), (int)b.b0, neg);
  pos = __dp4a((int)prmt(T.tlo, T.thi, vh), (int)b.b1, pos);
  neg = __dp4a((int)prmt(T.tlo, T.thi, xh), (int)b.b1, neg);
}
__device__ __forceinline__ int sub_imad(int p, int n) {
  int d;
  asm("mad.lo.s32 %0, %1, -1, %2;" : "=r"(d) : "r"(n), "r"(p));
  return d;
}
__device__ __forceinline__ void dot_chunk(const Q& a, const BPlus& b, const Tables& T, float& g0, float& g1) {
  int p0 = 0, n0 = 0, p1 = 0, n1 = 0;
  dot8_plus(a.w[0], b.w[0], T, p0, n0);
  dot8_plus(a.w[1], b.w[1], T, p0, n0);
  dot8_plus(a.w[2], b.w[2], T, p1, n1);
  dot8_plus(a.w[3], b.w[3], T, p1, n1);
  g0 = (float)sub_imad(p0, n0);
  g1 = (float)sub_imad(p1, n1);
}

template <int DECODE> struct Decode;
template <> struct Decode<DEC_DP4A> {
  typedef BDp4a B;
  static __device__ __forceinline__ B prep(const Q& q, const Tables&) { return prep_dp4a(q); }
  static constexpr float scale = 16.0f;  // 2^6 / 4
};
template <> struct Decode<DEC_F16X2> {
  typedef BF16 B;
  static __device__ __forceinline__ B prep(const Q& q, const Tables&) { return prep_f16(q); }
  static constexpr float scale = 64.0f;
};
template <> struct Decode<DEC_DP4A_SR2> {
  typedef BPlus B;
  static __device__ __forceinline__ B prep(const Q& q, const Tables& T) { return prep_plus(q, T); }
  static constexpr float scale = 16.0f;  // 2^6 / 4
};
template <> struct Decode<DEC_DP4A_SR> {
  typedef BSigned B;
  static __device__ __forceinline__ B prep(const Q& q, const Tables& T) { return prep_signed(q, T); }
  static constexpr float scale = 16.0f;  // 2^6 / 4
};

// Byte offset of the scale pair of groups 2ch, 2ch + 1 of row r. PLAIN: row-major [rows, K/16]
// per batch (row stride rs). Permuted (blocked): scale (r, g) of a batch sits at
// (r / 128) * G * 128 + (g / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + g % 4.
template <bool PLAIN>
__device__ __forceinline__ i64 scale_row(int r, i64 rs, int groups) {
  if (PLAIN) return (i64)r * rs;
  return (i64)(r >> 7) * groups * 128 + (r & 31) * 16 + ((r >> 5) & 3) * 4;
}
template <bool PLAIN>
__device__ __forceinline__ i64 scale_col(int ch) {
  if (PLAIN) return 2 * (i64)ch;
  return (i64)(ch >> 1) * 512 + (ch & 1) * 2;
}

// The body of one kernel: its template arguments are a CudaConfig's fields (submission.py's
// cuda_kernel writes them). LPR lanes per row, RPT rows per lane, U 16-byte chunks of a row per
// lane and step, V of them adjacent, WARPS warps of rows per block; LOAD, PIPE, DECODE (the enums
// above); FULL: every step whole (no bounds checks); PLAIN: the plain scales (else the permuted
// ones); PROBE: the loads-only timing probe (wrong results); BSH: b prepared once per warp and
// step through shared memory; KS, KB: K split over KS warps of a block and KB blocks (KINT: the
// parts' steps interleaved); BLOAD: b's loads with the evict-last priority. bx: the block's row group.
template <int LPR, int RPT, int U, int V, int WARPS, int LOAD, int PIPE, bool FULL, bool PLAIN, int DECODE,
          bool PROBE, bool BSH, int KS, int KB, bool BLOAD, bool KINT>
__device__ __forceinline__ void gemv_body(
    const unsigned char* __restrict__ a, const unsigned char* __restrict__ b,
    const unsigned char* __restrict__ sfa, const unsigned char* __restrict__ sfb,
    u16* __restrict__ c, int chunks, i64 a_rs, i64 a_bs, i64 b_bs, i64 sfa_rs, i64 sfa_bs,
    i64 sfb_bs, i64 c_rs, i64 c_bs, u32 zero, float* __restrict__ part, u32* __restrict__ cnt, int bx) {
  constexpr int RS = 32 / LPR;          // rows side by side in a warp
  constexpr int BROWS = WARPS * RS * RPT;
  constexpr int STEP = LPR * U;         // chunks of a row per step
  // the loads of a's scales: LOAD, but LD_NC_NO_ALLOCATE where a takes 32-byte loads
  constexpr int SLOAD = LOAD == LD_NO_ALLOCATE_L2_EVICT_FIRST_256 ? LD_NC_NO_ALLOCATE : LOAD;
  static_assert(U % V == 0, "U must be a multiple of V");
  static_assert(!BSH || STEP == 32, "BSH: a step spans 32 chunks, one per lane to prepare");
  typedef Decode<DECODE> D;
  typedef typename D::B B;
  constexpr int NW = sizeof(B) / 16;    // 16-byte words of a prepared b chunk
  static_assert(sizeof(B) % 16 == 0, "prepared b chunk: whole 16-byte words");
  // BSH: the warp prepares b once per step, lane L the step's chunk L, into shared memory as
  // [word][chunk] (consecutive lanes, consecutive 16 bytes: no bank conflicts either way; the
  // lanes of a step that share a chunk read one address).
  __shared__ uint4 sh_b[BSH ? WARPS * KS : 1][BSH ? NW : 1][32];
  __shared__ u32 sh_s[BSH ? WARPS * KS : 1][32];
  const Tables T = tables(zero);
  // KS > 1: the block's WARPS * KS warps split K in KS parts of whole steps; warp w takes rows
  // (w % WARPS) and part kp = w / WARPS, and the parts' row sums add in a fixed order at the end.
  // KB > 1: K is split in KB * KS parts over the KB blocks blockIdx.z of a row group (see the end).
  const int lane = threadIdx.x & 31, t = lane % LPR, warp = threadIdx.x >> 5;
  const int rw = warp % WARPS, kp = warp / WARPS;
  const int row0 = bx * BROWS + rw * RS * RPT + lane / LPR;  // bx: the block's row group
  const i64 bi = blockIdx.y;
  const int nsteps = (chunks + STEP - 1) / STEP;
  constexpr int NP = KS * KB;
  const int pi = (KB > 1 ? (int)blockIdx.z * KS : 0) + kp;
  // part pi's steps: a contiguous range, or (KINT) steps pi, pi + NP, pi + 2 NP, ...: the parts of
  // a row group then read its K front side by side, whole stretches of a row at a time
  const int cbeg = NP == 1 ? 0 : KINT ? pi * STEP : (pi * nsteps / NP) * STEP;
  const int cend = NP == 1 || KINT ? chunks : min(((pi + 1) * nsteps / NP) * STEP, chunks);
  constexpr int CSTRIDE = KINT ? NP * STEP : STEP;  // chunks from one of the part's steps to the next
  // per row: a pointer at the lane's first chunk and its scale pointer; each step moves both
  const unsigned char* ap[RPT];
  const unsigned char* sp[RPT];
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    const int r = row0 + RS * i;
    ap[i] = a + bi * a_bs + r * a_rs + 16 * (i64)(cbeg + t * V);
    sp[i] = sfa + bi * sfa_bs + scale_row<PLAIN>(r, sfa_rs, 2 * chunks) + (PLAIN ? 2 * (i64)(cbeg + t * V) : 0);
  }
  const unsigned char* bp = b + bi * b_bs;
  const unsigned char* sbp = sfb + bi * sfb_bs;
  float acc[RPT];
#pragma unroll
  for (int i = 0; i < RPT; ++i) acc[i] = 0.f;
  Q av[RPT][U];
  u32 sa[RPT][U];
  // offset (in chunks) of the lane's u-th chunk from its first of the step: V adjacent chunks
  // per lane, LPR lanes side by side
  auto off = [&](int u) { return (u / V) * (LPR * V) + u % V; };

  // The step's loads of a and its scales: every one an immediate offset from the row's pointer.
  auto load = [&](int c0) {
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int ch = c0 + t * V + off(u);
        if (FULL || ch < chunks) {
          if (LOAD != LD_NO_ALLOCATE_L2_EVICT_FIRST_256) av[i][u] = ld_a<LOAD>(ap[i] + 16 * off(u));
          else if (u % 2 == 0) ld_a32(ap[i] + 16 * off(u), av[i][u], av[i][u + 1 < U ? u + 1 : u]);  // V = 2
          const unsigned char* sq = PLAIN ? sp[i] + 2 * off(u) : sp[i] + scale_col<false>(ch);
          if (V == 1) sa[i][u] = ld_scales16<SLOAD>(sq);
          else if (u % 2 == 0) sa[i][u] = ld_scales32<SLOAD>(sq);
          else sa[i][u] = sa[i][u - 1] >> 16;
        } else {
          av[i][u] = Q{{0u, 0u, 0u, 0u}};
          sa[i][u] = 0u;
        }
      }
      ap[i] += 16 * CSTRIDE;
      if (PLAIN) sp[i] += 2 * CSTRIDE;
    }
  };
  // b chunk ch and its scale pair as loaded (zeros past the end), and prepared
  auto load_b = [&](const unsigned char* bstep, int ch, Q& bq, u32& sbv) {
    bq = Q{{0u, 0u, 0u, 0u}};
    sbv = 0u;
    if (FULL || ch < chunks) {
      bq = ld_b<BLOAD>(bstep + 16 * (i64)ch);
      sbv = ld_b_scales<BLOAD>(sbp + scale_col<PLAIN>(ch));
    }
  };
  auto prep_b = [&](const unsigned char* bstep, int ch, B& bc, u32& sb) {
    Q bq;
    u32 sbv;
    load_b(bstep, ch, bq, sbv);
    bc = D::prep(bq, T);
    sb = prep_sb(sbv);
  };
  // PIPE_AB_FIRST: b's chunks of the step and their scales loaded beside a's, before any arithmetic
  // (no dependency on a's loads: on a short row the step's two round trips become one).
  Q bqs[PIPE == PIPE_AB_FIRST ? U : 1];
  u32 sbs[PIPE == PIPE_AB_FIRST ? U : 1];
  auto compute = [&](int c0, const unsigned char* bstep) {
    if (BSH && !PROBE) {
      B mine;
      u32 sbm;
      prep_b(bstep, c0 + lane, mine, sbm);
      __syncwarp();  // the last step's reads are done
      const uint4* w = reinterpret_cast<const uint4*>(&mine);
#pragma unroll
      for (int k = 0; k < NW; ++k) sh_b[BSH ? warp : 0][k][lane] = w[k];
      sh_s[BSH ? warp : 0][lane] = sbm;
      __syncwarp();
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int ch = c0 + t * V + off(u);
      if (PROBE) {  // timing probe: the same loads, next to no arithmetic (wrong results)
        Q bq;
        u32 sbv;
        load_b(bstep, ch, bq, sbv);
#pragma unroll
        for (int i = 0; i < RPT; ++i)
          acc[i] += (float)((av[i][u].w[0] ^ av[i][u].w[1] ^ av[i][u].w[2] ^ av[i][u].w[3]
                             ^ sa[i][u] ^ bq.w[0] ^ sbv) & 1u);
        continue;
      }
      B bc;
      u32 sb;
      if (BSH) {
        const int j = t * V + off(u);  // the chunk's index within the step
        uint4* w = reinterpret_cast<uint4*>(&bc);
#pragma unroll
        for (int k = 0; k < NW; ++k) w[k] = sh_b[BSH ? warp : 0][k][j];
        sb = sh_s[BSH ? warp : 0][j];
      } else if (PIPE == PIPE_AB_FIRST) {
        bc = D::prep(bqs[PIPE == PIPE_AB_FIRST ? u : 0], T);
        sb = prep_sb(sbs[PIPE == PIPE_AB_FIRST ? u : 0]);
      } else {
        prep_b(bstep, ch, bc, sb);
      }
#pragma unroll
      for (int i = 0; i < RPT; ++i) acc[i] = accumulate(acc[i], av[i][u], sa[i][u], bc, sb, T);
    }
  };

  for (int c0 = cbeg; c0 < cend; c0 += CSTRIDE) {
    load(c0);
    if (PIPE == PIPE_AB_FIRST) {
#pragma unroll
      for (int u = 0; u < U; ++u)
        load_b(bp, c0 + t * V + off(u), bqs[PIPE == PIPE_AB_FIRST ? u : 0], sbs[PIPE == PIPE_AB_FIRST ? u : 0]);
    }
    const unsigned char* bstep = bp;
    if (PIPE == PIPE_A_FIRST) {
      // All loads of the step are issued before the first use: ptxas would otherwise sink
      // each load next to its use (fewer registers, but one load in flight per lane). The b
      // loads depend on every one of them through `fold & zero` (zero is a kernel argument,
      // always 0; a 16-byte load completes as a whole, so one word suffices).
      u32 fold = 0u;
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int i = 0; i < RPT; ++i) fold ^= av[i][u].w[0] ^ sa[i][u];
      bstep = bp + (fold & zero);
    }
    compute(c0, bstep);
  }
  __shared__ float sh_r[KS > 1 ? KS : 1][KS > 1 ? BROWS : 1];
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    float v = acc[i];
#pragma unroll
    for (int o = LPR / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    acc[i] = v;
    if (KS > 1 && t == 0) sh_r[KS > 1 ? kp : 0][rw * RS * RPT + lane / LPR + RS * i] = v;
  }
  if (KS > 1) {
    __syncthreads();
    if (KB == 1 && kp != 0) return;
    if (kp == 0) {
#pragma unroll
      for (int i = 0; i < RPT; ++i) {
        float v = sh_r[0][rw * RS * RPT + lane / LPR + RS * i];
#pragma unroll
        for (int k = 1; k < KS; ++k) v += sh_r[KS > 1 ? k : 0][rw * RS * RPT + lane / LPR + RS * i];
        acc[i] = v;
      }
    }
  }
  if (KB > 1) {
    // K split over blocks: each block stores its rows' sums for its part z = blockIdx.z in
    // part[batch][z][row] and counts itself in cnt[batch][row group] (atomicInc wraps the count
    // to 0 on the KB-th arrival, ready for the next launch); the block that arrives last adds
    // the KB sums of its rows in the order z = 0, 1, ... (fixed whatever the arrival order, so
    // repeats are bit-identical; no float atomics) and writes c.
    const int m = gridDim.x * BROWS;
    __shared__ u32 sh_last;
    float* pr = part + bi * KB * (i64)m;
    if (kp == 0 && t == 0) {
#pragma unroll
      for (int i = 0; i < RPT; ++i) pr[(i64)blockIdx.z * m + row0 + RS * i] = acc[i];
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) sh_last = atomicInc(cnt + bi * gridDim.x + blockIdx.x, KB - 1) == KB - 1;
    __syncthreads();
    if (!sh_last || kp != 0) return;
    __threadfence();
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
      float v = __ldcg(pr + row0 + RS * i);
#pragma unroll
      for (int z = 1; z < KB; ++z) v += __ldcg(pr + (i64)z * m + row0 + RS * i);
      acc[i] = v;
    }
  }
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    if (t == 0) {
      u16 h;
      asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(acc[i] * D::scale));
      c[bi * c_bs + (i64)(row0 + RS * i) * c_rs] = h;
    }
  }
}

// ---- The persistent bulk-copy ring (CudaConfig ring > 0; needs sm_90 or later).
// A persistent grid (blocks per SM x the context's SMs, at most one block per unit): block i
// reads an even share of the units (RPT consecutive rows of one batch, whole K), no K split
// across blocks. NPW producer warps, each with one lane issuing two bulk copies per stage (a's
// bytes and their plain scales, each contiguous: a stage is RPT whole rows, or one row's
// segment of 32 U chunks) into a ring of RING slots per consumer warp, completing on the slot's
// full barrier (expect_tx). The consumer warps form TEAMS teams of KS warps; a team takes every
// TEAMS-th unit of the block, its warp kw the unit's stages kw, kw + KS, ... (K parts
// interleaved); lane L reads chunks L, L + 32, ... of each row of a stage from shared memory,
// frees the slot on its empty barrier and keeps the rows' sums in registers across the unit.
// b and its scales are prepared once per block and batch into shared memory. Sums: per lane in a
// fixed order, a fixed butterfly, then the team's KS parts in the order kw = 0, 1, ...: the same
// bits whatever the grid. Waits are bounded (RING_TIMEOUT_NS): a stuck barrier makes the
// consumers write NaN instead of hanging.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#ifndef RING_TIMEOUT_NS
#define RING_TIMEOUT_NS 200000000ull  // 0.2 s: about 10^4 times the longest benchmark launch
#endif
__device__ __forceinline__ u32 smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(u32 bar, u32 parity) {
  u32 ok;
  asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
               : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
  return ok != 0;
}
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// Wait for the phase of parity `parity` of barrier `bar`; false once RING_TIMEOUT_NS have passed.
__device__ __forceinline__ bool mbar_wait(u32 bar, u32 parity) {
  if (mbar_try_wait(bar, parity)) return true;
  const unsigned long long t0 = global_ns();
  while (!mbar_try_wait(bar, parity))
    if (global_ns() - t0 > RING_TIMEOUT_NS) return false;
  return true;
}
// `bytes` (a multiple of 16) from global `src` to shared `dst` (both 16-byte aligned), counted on
// barrier `bar`'s transaction count; `policy`: the L2 cache policy (createpolicy).
__device__ __forceinline__ void bulk_copy(u32 dst, const void* src, u32 bytes, u32 bar, unsigned long long policy) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
               " [%0], [%1], %2, [%3], %4;" ::"r"(dst), "l"(src), "r"(bytes), "r"(bar), "l"(policy) : "memory");
}

// The ring's shared memory, in bytes from the dynamic block's start (submission.py's ring_smem
// computes the same sizes): barriers, the teams' partial sums (two units' worth), the slots of
// a, the slots of a's scales, then b prepared for each batch the block touches
// ([batch][word][chunk] 16-byte words, then [batch][chunk] scale pairs).
template <int RPT, int U, int NCW, int RING>
struct RingLayout {
  static constexpr int SLOT_CH = RPT * 32 * U;           // chunks of a per stage
  static constexpr int SLOT_A = 16 * SLOT_CH;             // bytes of a per stage
  static constexpr int SLOT_S = 2 * SLOT_CH;              // bytes of its scales
  static constexpr int BARS = 2 * NCW * RING * 8;
  static constexpr int RED = (BARS + 2 * NCW * RPT * 4 + 127) / 128 * 128 - BARS;
  static constexpr int A0 = BARS + RED;
  static constexpr int S0 = A0 + NCW * RING * SLOT_A;
  static constexpr int B0 = (S0 + NCW * RING * SLOT_S + 127) / 128 * 128;
};

// groups: units per batch (M / RPT); batches: L. The grid is gridDim.x persistent blocks of
// 32 * (TEAMS * KS + NPW) threads: the consumer warps, then NPW producer warps, producer p
// feeding the consumer warps p, p + NPW, ... through their empty barriers; NPW = 0: each consumer
// warp's lane 0 copies the warp's own next stages, into the slot the warp has just read (no
// producer, no empty barrier; benchmarks/NOTES.md, "The bulk-copy ring done right").
template <int RPT, int U, int TEAMS, int KS, int RING, int NPW, int DECODE, bool PROBE>
__device__ __forceinline__ void ring_body(
    const unsigned char* __restrict__ a, const unsigned char* __restrict__ b,
    const unsigned char* __restrict__ sfa, const unsigned char* __restrict__ sfb,
    u16* __restrict__ c, int chunks, i64 a_rs, i64 a_bs, i64 b_bs, i64 sfa_rs, i64 sfa_bs,
    i64 sfb_bs, i64 c_rs, i64 c_bs, u32 zero, int groups, int batches) {
  constexpr int NCW = TEAMS * KS;  // consumer warps
  typedef RingLayout<RPT, U, NCW, RING> L;
  typedef Decode<DECODE> D;
  typedef typename D::B B;
  constexpr int NW = sizeof(B) / 16;
  static_assert(sizeof(B) % 16 == 0, "prepared b chunk: whole 16-byte words");
  static_assert(KS == 1 || TEAMS + 2 <= 16, "a named barrier per team of several warps (ids 2..), 16 in all");
  constexpr int SEG = 32 * U;  // chunks of a row per stage
  extern __shared__ __align__(128) unsigned char ring_smem[];
  const u32 bars = smem_addr(ring_smem);  // full[w][s] at 8 (w RING + s), empty[w][s] after them
  float* red = reinterpret_cast<float*>(ring_smem + L::BARS);  // [unit parity][warp][row]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const i64 units = (i64)groups * batches;
  const i64 ubeg = units * blockIdx.x / gridDim.x, uend = units * (blockIdx.x + 1) / gridDim.x;
  const int nunits = (int)(uend - ubeg);
  const int spw = (RPT > 1 ? 1 : chunks / SEG) / KS;  // stages of a unit per warp of its team
  if (threadIdx.x == 0) {
    for (int i = 0; i < NCW * RING; ++i) {
      mbar_init(bars + 8 * i, 1);                 // full: the producer's expect_tx
      mbar_init(bars + 8 * (NCW * RING + i), 1);  // empty: one lane of the consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (nunits <= 0) return;
  const i64 bfirst = ubeg / groups;  // the first batch of the block's share
  // The copies of consumer warp w's stage q of its team's unit j into its slot `slot`, completing on
  // the slot's full barrier; as few instructions as it can (no division: batches back to back,
  // the server's layout, put unit gu's bytes at gu * RPT * (row stride)).
  const bool packed = batches == 1 || (a_bs == (i64)groups * RPT * a_rs && sfa_bs == (i64)groups * RPT * sfa_rs);
  const i64 ua = RPT * a_rs, us = RPT * sfa_rs;
  auto copy_stage = [&](int w, int j, int q, int slot, unsigned long long policy) {
    const i64 gu = ubeg + w / KS + j * TEAMS;
    i64 oa = gu * ua, os = gu * us;
    if (!packed) {
      const u32 bi = (u32)gu / (u32)groups, r0 = ((u32)gu - bi * groups) * RPT;
      oa = bi * a_bs + r0 * a_rs;
      os = bi * sfa_bs + r0 * sfa_rs;
    }
    const u32 full = bars + 8 * (w * RING + slot);
    mbar_expect_tx(full, L::SLOT_A + L::SLOT_S);
    const int ch0 = (w % KS + KS * q) * SEG;
    bulk_copy(bars + L::A0 + (w * RING + slot) * L::SLOT_A, a + oa + 16 * ch0, L::SLOT_A, full, policy);
    bulk_copy(bars + L::S0 + (w * RING + slot) * L::SLOT_S, sfa + os + 2 * ch0, L::SLOT_S, full, policy);
  };

  if (NPW > 0 && warp >= NCW) {  // a producer: one lane
    if (lane != 0) return;
    const unsigned long long policy = l2_first();
    const int rounds = ((nunits + TEAMS - 1) / TEAMS) * spw;  // stages of the busiest consumer warp
    int j = 0, q = 0;  // round t: unit j of each team, the team's stage q of it
    for (int t = 0; t < rounds; ++t) {
      const int slot = t % RING;
      const u32 parity = ((t / RING) & 1) ^ 1;
      for (int w = warp - NCW; w < NCW; w += NPW) {
        if (w / KS + j * TEAMS >= nunits) break;  // and so for the warps after it
        const u32 empty = bars + 8 * (NCW * RING + w * RING + slot);
        if (!mbar_wait(empty, parity)) return;  // a consumer is stuck: it writes NaN, stop feeding
        copy_stage(w, j, q, slot, policy);
      }
      if (++q == spw) {
        q = 0;
        ++j;
      }
    }
    return;
  }
  // NPW = 0: each consumer warp feeds its own slots (lane 0): its first RING stages now, each later
  // one into the slot it has just read. total: the warp's stages; (jn, qn): the next to copy.
  const int total = warp / KS < nunits ? (nunits - 1 - warp / KS) / TEAMS * spw + spw : 0;
  int jn = 0, qn = 0;
  if (NPW == 0 && lane == 0) {
    const unsigned long long policy = l2_first();
    for (int s0 = 0; s0 < RING && s0 < total; ++s0) {
      copy_stage(warp, jn, qn, s0, policy);
      if (++qn == spw) qn = 0, ++jn;
    }
  }

  // The consumers: b of each batch of the share prepared once, by all consumer warps together.
  const Tables T = tables(zero);
  const int nb = (int)((uend - 1) / groups - bfirst) + 1;
  uint4* shb = reinterpret_cast<uint4*>(ring_smem + L::B0);                           // [batch][word][chunk]
  u32* shs = reinterpret_cast<u32*>(ring_smem + L::B0 + (i64)nb * NW * chunks * 16);  // [batch][chunk]
  if (!PROBE) {
    for (int i = threadIdx.x; i < nb * chunks; i += 32 * NCW) {
      const int bb = i / chunks, ch = i - bb * chunks;
      const B bc = D::prep(ld_b<false>(b + (bfirst + bb) * b_bs + 16 * (i64)ch), T);
      const uint4* w = reinterpret_cast<const uint4*>(&bc);
#pragma unroll
      for (int k = 0; k < NW; ++k) shb[((i64)bb * NW + k) * chunks + ch] = w[k];
      shs[(i64)bb * chunks + ch] = prep_sb(ld_b_scales<false>(sfb + (bfirst + bb) * sfb_bs + scale_col<true>(ch)));
    }
    asm volatile("bar.sync 1, %0;" ::"r"(32 * NCW) : "memory");  // the consumers only
  }
  const int team = warp / KS, kw = warp % KS;
  bool stuck = false;
  int t = 0;  // this warp's stage count
  // the unit's batch bb (from the share's first) and its place ug in that batch, carried from unit to unit
  int bb = 0, ug = (int)(ubeg - bfirst * groups) + team;
  while (ug >= groups) ug -= groups, ++bb;
  for (int unit = team, j = 0; unit < nunits; unit += TEAMS, ++j, ug += TEAMS) {
    while (ug >= groups) ug -= groups, ++bb;
    const i64 bi = bfirst + bb;
    float acc[RPT];
#pragma unroll
    for (int r = 0; r < RPT; ++r) acc[r] = 0.f;
    for (int q = 0; q < spw; ++q, ++t) {
      const int slot = t % RING;
      const u32 full = bars + 8 * (warp * RING + slot), empty = bars + 8 * (NCW * RING + warp * RING + slot);
      if (stuck || !mbar_wait(full, (t / RING) & 1)) {
        stuck = true;
        continue;
      }
      const Q* sa = reinterpret_cast<const Q*>(ring_smem + L::A0 + (warp * RING + slot) * L::SLOT_A);
      const u16* ss = reinterpret_cast<const u16*>(ring_smem + L::S0 + (warp * RING + slot) * L::SLOT_S);
      const int k0 = (kw + KS * q) * SEG;  // the stage's first chunk along K
#pragma unroll
      for (int i = 0; i < U; ++i) {
        const int jc = 32 * i + lane;  // the lane's chunk of each row of the stage
        if (PROBE) {  // timing probe: the stage's shared-memory reads, next to no arithmetic
#pragma unroll
          for (int r = 0; r < RPT; ++r) {
            const Q av = sa[r * SEG + jc];
            acc[r] += (float)((av.w[0] ^ av.w[1] ^ av.w[2] ^ av.w[3] ^ ss[r * SEG + jc]) & 1u);
          }
          continue;
        }
        const int kc = k0 + jc;  // its chunk along K
        B bc;
        uint4* w = reinterpret_cast<uint4*>(&bc);
#pragma unroll
        for (int k = 0; k < NW; ++k) w[k] = shb[((i64)bb * NW + k) * chunks + kc];
        const u32 sb = shs[(i64)bb * chunks + kc];
#pragma unroll
        for (int r = 0; r < RPT; ++r) acc[r] = accumulate(acc[r], sa[r * SEG + jc], ss[r * SEG + jc], bc, sb, T);
      }
      __syncwarp();
      if (NPW > 0) {
        if (lane == 0) mbar_arrive(empty);
      } else if (lane == 0 && t + RING < total) {
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the slot's reads before its refill
        copy_stage(warp, jn, qn, slot, l2_first());
        if (++qn == spw) qn = 0, ++jn;
      }
    }
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
      float v = stuck ? __int_as_float(0x7FC00000) : acc[r];  // NaN: a wait ran out (see RING_TIMEOUT_NS)
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      acc[r] = v;
      if (KS > 1 && lane == 0) red[((j & 1) * NCW + warp) * RPT + r] = v;
    }
    if (KS > 1) {  // the team's parts, added in a fixed order by its first warp
      asm volatile("bar.sync %0, %1;" ::"r"(2 + team), "r"(32 * KS) : "memory");
      if (kw != 0) continue;
#pragma unroll
      for (int r = 0; r < RPT; ++r) {
        float v = red[((j & 1) * NCW + warp) * RPT + r];
#pragma unroll
        for (int k = 1; k < KS; ++k) v += red[((j & 1) * NCW + warp + k) * RPT + r];
        acc[r] = v;
      }
    }
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < RPT; ++r) {
        u16 h;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(acc[r] * D::scale));
        c[bi * c_bs + ((i64)ug * RPT + r) * c_rs] = h;
      }
    }
  }
}
#endif

#ifdef NVFP4_GEMV_EXAMPLE
// One configuration, for a compiler or an editor that reads this file alone (submission.py never
// defines the macro): a bsh tile with K in 8 parts, CudaConfig(lpr=8, rpt=2, u=4, warps=1,
// decode="dp4a-sr2", v=1, pipe="ptxas", minb=2, bsh=True, ks=8), whole steps, plain scales.
extern "C" __global__ void __launch_bounds__(256, 2) nvfp4_gemv_example(
    const unsigned char* __restrict__ a, const unsigned char* __restrict__ b,
    const unsigned char* __restrict__ sfa, const unsigned char* __restrict__ sfb, u16* __restrict__ c, int chunks,
    i64 a_rs, i64 a_bs, i64 b_bs, i64 sfa_rs, i64 sfa_bs, i64 sfb_bs, i64 c_rs, i64 c_bs, u32 zero,
    float* __restrict__ part, u32* __restrict__ cnt, int groups) {
  const int bx = blockIdx.x;
  gemv_body<8, 2, 4, 1, 1, LD_L1_EVICT_FIRST, PIPE_PTXAS, true, true, DEC_DP4A_SR2, false, true, 8, 1, false, false>(
      a, b, sfa, sfb, c, chunks, a_rs, a_bs, b_bs, sfa_rs, sfa_bs, sfb_bs, c_rs, c_bs, zero, part, cnt, bx);
}
#endif
"""[1:]
# <<< bundle

# Kernel parameters, in order: a, b, sfa, sfb, c (pointers), chunks = K / 32 (int), the
# strides a_row, a_batch, b_batch (bytes), sfa_row, sfa_batch, sfb_batch (bytes; rows only
# for the plain layout), c_row, c_batch (elements), zero (always 0; see the kernel), then for
# kb > 1 the K split's scratch (part: l * kb * m floats; cnt: l * m / rows counters, zero before
# the first launch and left zero by each); null otherwise; groups = M / rows (the row groups,
# which a grid-stride launch, gs > 0, walks).
_CUDA_PARAMS = ("const unsigned char* __restrict__ a, const unsigned char* __restrict__ b, "
                "const unsigned char* __restrict__ sfa, const unsigned char* __restrict__ sfb, "
                "u16* __restrict__ c, int chunks, i64 a_rs, i64 a_bs, i64 b_bs, i64 sfa_rs, "
                "i64 sfa_bs, i64 sfb_bs, i64 c_rs, i64 c_bs, u32 zero, float* __restrict__ part, "
                "u32* __restrict__ cnt, int groups")
_CUDA_ARGS = "a, b, sfa, sfb, c, chunks, a_rs, a_bs, b_bs, sfa_rs, sfa_bs, sfb_bs, c_rs, c_bs, zero, part, cnt"


class CudaBuildError(RuntimeError):
    """The cuda backend could not be built or loaded here (message: the reason, with NVRTC's
    log when the compiler failed)."""


def cuda_arch(capability: tuple) -> str:
    """NVRTC target for a compute capability: the architecture-specific sm_90a / sm_100a (and
    sm_103a, sm_120a...) where they exist, else the plain sm_XY."""
    major, minor = capability
    return f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"


def _enumerator(prefix: str, value: str) -> str:
    """The C++ name of a config's choice: "LD_" and "l1_evict_first" -> LD_L1_EVICT_FIRST."""
    return prefix + value.upper().replace("-", "_")


def cuda_kernel(cfg, full: bool, plain: bool, probe: bool = False) -> tuple:
    """(kernel name, complete CUDA source) of one configuration (a CudaConfig naming its decode,
    or its positional form): ``full`` every step whole (no bounds checks), ``plain`` the plain
    scales, ``probe`` the loads-only timing probe. The source is the kernel (CUDA_SRC) and a
    wrapper that instantiates ``gemv_body`` with the config's fields; the name spells them, e.g.
    nvfp4_gemv_lpr8_rpt2_u4_w1_dp4a_sr2_v1_l1_evict_first_ptxas_minb2_bsh_ks8_full_plain
    (fields at their default after pipe left out)."""
    cfg = CudaConfig.of(cfg)
    if cfg.decode is None:
        raise ValueError(f"cuda_kernel needs a config naming its decode, got {cfg!r}")
    problem = cfg.problem()
    if problem:
        raise ValueError(problem)
    t = "true", "false"
    if cfg.ring:
        return _ring_kernel(cfg, full, plain, probe)
    template = [cfg.lpr, cfg.rpt, cfg.u, cfg.v, cfg.warps, _enumerator("LD_", cfg.load),
                _enumerator("PIPE_", cfg.pipe), t[not full], t[not plain], _enumerator("DEC_", cfg.decode),
                t[not probe], t[not cfg.bsh], cfg.ks, cfg.kb, t[not cfg.bload], t[not cfg.ki]]
    parts = ["nvfp4_gemv", f"lpr{cfg.lpr}", f"rpt{cfg.rpt}", f"u{cfg.u}", f"w{cfg.warps}",
             cfg.decode.replace("-", "_"), f"v{cfg.v}", cfg.load, cfg.pipe]
    parts += [f"minb{cfg.minb}"] * (cfg.minb > 0) + ["bsh"] * cfg.bsh + [f"ks{cfg.ks}"] * (cfg.ks > 1)
    parts += [f"kb{cfg.kb}"] * (cfg.kb > 1) + ["b_evict_last"] * cfg.bload + ["gs"] * (cfg.gs > 0) + ["ki"] * cfg.ki
    parts += ["full" if full else "tail", "plain" if plain else "permuted"] + ["probe"] * probe
    name = "_".join(parts)
    body = f"gemv_body<{', '.join(map(str, template))}>({_CUDA_ARGS}, bx);"
    if cfg.gs:  # grid-stride: the launch's gs blocks per SM walk the row groups
        body = f"for (int bx = blockIdx.x; bx < groups; bx += gridDim.x) {body}"
    else:
        body = f"const int bx = blockIdx.x; {body}"
    threads = 32 * cfg.warps * cfg.ks
    bounds = f"{threads}, {cfg.minb}" if cfg.minb else f"{threads}"
    wrapper = f'extern "C" __global__ void __launch_bounds__({bounds}) {name}({_CUDA_PARAMS}) {{ {body} }}\n'
    return name, CUDA_SRC + wrapper


def _ring_threads(cfg: CudaConfig) -> int:
    """Threads of a ring config's block: its warps * ks consumer warps and its producer warps."""
    return 32 * (cfg.warps * cfg.ks + cfg.pw)


def _ring_kernel(cfg: CudaConfig, full: bool, plain: bool, probe: bool) -> tuple:
    """cuda_kernel of a ring config: ring_body's wrapper, named like
    nvfp4_gemv_ring2_rpt1_u8_w16_dp4a_sr2_minb1 (the kernel's parameters, then L)."""
    if not (full and plain):
        raise ValueError(f"cuda config {cfg!r}: the ring reads whole stages of a and the plain scales "
                         "(full and plain only)")
    name = "_".join(["nvfp4_gemv", f"ring{cfg.ring}", f"rpt{cfg.rpt}", f"u{cfg.u}", f"w{cfg.warps}"]
                    + [f"ks{cfg.ks}"] * (cfg.ks > 1) + [f"pw{cfg.pw}", cfg.decode.replace("-", "_"), f"minb{cfg.minb}"]
                    + ["probe"] * probe)
    template = [cfg.rpt, cfg.u, cfg.warps, cfg.ks, cfg.ring, cfg.pw, _enumerator("DEC_", cfg.decode),
                ("false", "true")[probe]]
    body = (f"ring_body<{', '.join(map(str, template))}>(a, b, sfa, sfb, c, chunks, a_rs, a_bs, b_bs, sfa_rs, "
            "sfa_bs, sfb_bs, c_rs, c_bs, zero, groups, batches);")
    wrapper = (f'extern "C" __global__ void __launch_bounds__({_ring_threads(cfg)}, {cfg.minb}) '
               f"{name}({_CUDA_PARAMS}, int batches) {{ {body} }}\n")
    return name, CUDA_SRC + wrapper


# Bytes of a prepared b chunk per decode (sizeof(Decode<D>::B) in the kernel): the ring keeps one
# per chunk and batch of a block's share in shared memory, beside the chunk's prepared scale pair.
_PREPARED_B = {"dp4a": 80, "f16x2": 64, "dp4a-sr": 64, "dp4a-sr2": 32}


def ring_smem(cfg: CudaConfig, k: int, batches: int = 1) -> int:
    """Dynamic shared memory of a ring config's block (RingLayout in the kernel) whose share
    touches ``batches`` batches: the barriers, the stages of a and its scales, and b prepared."""
    stage, warps = cfg.rpt * 32 * cfg.u, cfg.warps * cfg.ks
    slots = warps * cfg.ring
    head = -(-(2 * slots * 8 + 2 * warps * cfg.rpt * 4) // 128) * 128 + slots * 18 * stage
    return -(-head // 128) * 128 + batches * (k // 32) * (_PREPARED_B[cfg.decode] + 4)


def ring_batches(units: int, groups: int, blocks: int) -> int:
    """The most batches one block's share touches (block i: units [units i / blocks, units (i+1) / blocks))."""
    most = 0
    for i in range(blocks):
        lo, hi = units * i // blocks, units * (i + 1) // blocks
        if hi > lo:
            most = max(most, (hi - 1) // groups - lo // groups + 1)
    return most


def cuda_empty_kernel(name: str) -> str:
    """The source of an empty kernel ``name`` taking the cuda backend's parameters (their integer
    types declared): what benchmarks/floor.py launches to time the launch path alone."""
    return ("typedef unsigned int u32;\ntypedef unsigned short u16;\ntypedef long long i64;\n"
            f'extern "C" __global__ void {name}({_CUDA_PARAMS}) {{}}\n')


def nvrtc_candidates() -> list:
    """Where libnvrtc may be: NVFP4_GEMV_NVRTC, the pip wheels beside torch (nvidia/cu13/lib,
    nvidia/cuda_nvrtc/lib, ...), torch's own lib folder, CUDA_HOME / CUDA_PATH, /usr/local/cuda,
    then the loader's search path."""
    paths = [os.environ.get("NVFP4_GEMV_NVRTC", "")]
    roots = [p for p in sys.path if p and os.path.isdir(p)]
    for root in roots:
        for sub in ("nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib", "nvidia/cu12/lib"):
            paths += sorted(glob.glob(os.path.join(root, sub, "libnvrtc.so*")), reverse=True)
    paths += sorted(glob.glob(os.path.join(os.path.dirname(torch.__file__), "lib", "libnvrtc*.so*")))
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            paths += sorted(glob.glob(os.path.join(home, "lib64", "libnvrtc.so*")), reverse=True)
    paths += ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"]
    seen, out = set(), []
    for p in paths:
        if p and "builtins" not in os.path.basename(p) and p not in seen:
            seen.add(p)
            out.append(p)
    return out


_NVRTC = []  # [lib] once found


def find_nvrtc():
    """The NVRTC library (ctypes), loaded once; raises CudaBuildError where there is none."""
    if not _NVRTC:
        tried = []
        for path in nvrtc_candidates():
            try:
                # its builtins library is opened by name at compile time: load it from the same
                # folder first (a pip wheel's folder is not on the loader's search path)
                for dep in sorted(glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so*"))):
                    ctypes.CDLL(dep, mode=ctypes.RTLD_GLOBAL)
                lib = ctypes.CDLL(path)
                lib.nvrtcCompileProgram  # noqa: B018 - raises AttributeError if not NVRTC
            except (OSError, AttributeError) as exc:
                tried.append(f"{path}: {exc}")
                continue
            lib.nvrtcGetErrorString.restype = ctypes.c_char_p
            lib.nvrtcGetErrorString.argtypes = [ctypes.c_int]
            _NVRTC.append(lib)
            break
        else:
            raise CudaBuildError("NVRTC (libnvrtc.so) not found; set NVFP4_GEMV_NVRTC to its path. Tried: "
                                 + "; ".join(tried[-4:]))
    return _NVRTC[0]


def nvrtc_version() -> tuple:
    lib = find_nvrtc()
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value


ENV_LINEINFO = "NVFP4_GEMV_LINEINFO"  # 1: compile with line information for a profiler's source view


def _profiling() -> bool:
    """Whether kernels are built for a profiler's source view: under NVFP4_GEMV_LINEINFO=1, or
    POPCORN_NCU=1 (what the server's profile mode sets when it runs the submission under ncu)."""
    return os.environ.get(ENV_LINEINFO) == "1" or os.environ.get("POPCORN_NCU") == "1"


def blackwell_target(arch: str) -> bool:
    """Whether NVRTC's ``arch`` has Blackwell's e2m1 conversion, ``cvt.rn.f16x2.e2m1x2``: an
    architecture-specific (``a``) or family-specific (``f``) target of compute capability 10.0 or
    later (sm_100a, sm_103a, sm_110a, sm_120a, sm_121a, sm_100f, sm_120f, ...), not the plain
    sm_100 / sm_120 (PTX ISA 9.1, cvt, "Target ISA Notes": sm_100a, sm_101a (sm_110a), sm_120a and
    the families sm_100f, sm_110f, sm_120f "or higher in the same family"; the mixed-precision fma
    and the 32-byte loads need sm_100 or higher). benchmarks/NOTES.md, "The Blackwell switch: every
    architecture- or family-specific target from sm_100 on"."""
    hit = re.fullmatch(r"sm_(\d+)([af]?)", arch)
    return bool(hit) and int(hit.group(1)) >= 100 and hit.group(2) in ("a", "f")


def cuda_options(arch: str, defines: dict | None = None) -> list:
    """NVRTC's options for ``arch`` (profiling aside): Blackwell's e2m1 conversion, its
    mixed-precision fma and 32-byte loads where the target has them (``blackwell_target``)."""
    blackwell = int(blackwell_target(arch))
    defines = {"HAS_E2M1_CVT": blackwell, "HAS_LD256": blackwell, **(defines or {})}
    return [f"--gpu-architecture={arch}", "-std=c++17", "--use_fast_math"] + [f"-D{k}={v}" for k, v in defines.items()]


def _source_file(source: str) -> str:
    """The path of a file holding ``source`` (written once, under the temporary folder): the name
    NVRTC gets for a profiled build, so that the profiler's source view (ncu --import-source)
    finds the text; its lines are kernels/nvfp4_gemv.cu's, then the wrapper."""
    folder = os.path.join(tempfile.gettempdir(), "nvfp4_gemv_sources")
    path = os.path.join(folder, f"nvfp4_gemv_{hashlib.sha256(source.encode()).hexdigest()[:16]}.cu")
    if not os.path.isfile(path):
        os.makedirs(folder, exist_ok=True)
        part = f"{path}.{os.getpid()}"
        with open(part, "w", encoding="utf-8") as f:
            f.write(source)
        os.replace(part, path)
    return path


def cuda_compile(source: str, arch: str, defines: dict | None = None) -> bytes:
    """NVRTC: CUDA source -> cubin for ``arch`` (e.g. "sm_90a"); needs no GPU. Raises
    CudaBuildError with the compiler's log. When profiling (NVFP4_GEMV_LINEINFO=1 or
    POPCORN_NCU=1) the program is named by a file holding its text and built with -lineinfo, so
    that ncu shows the kernel's source; otherwise with the options and name of every other build."""
    lib = find_nvrtc()
    prog = ctypes.c_void_p()

    def ok(res, what):
        if res != 0:
            raise CudaBuildError(f"NVRTC {what} failed: {lib.nvrtcGetErrorString(res).decode()}")

    opts = cuda_options(arch, defines)
    name = b"nvfp4_gemv.cu"
    if _profiling():
        name = _source_file(source).encode()
        opts.append("-lineinfo")
    ok(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name, 0, None, None), "create")
    try:
        copts = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        res = lib.nvrtcCompileProgram(prog, len(opts), copts)
        if res != 0:
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetProgramLog(prog, log)
            raise CudaBuildError(f"NVRTC could not compile the cuda backend for {arch} "
                                 f"({lib.nvrtcGetErrorString(res).decode()}):\n{log.value.decode(errors='replace')}")
        size = ctypes.c_size_t()
        ok(lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)), "cubin size")
        cubin = ctypes.create_string_buffer(size.value)
        ok(lib.nvrtcGetCUBIN(prog, cubin), "cubin")
        return cubin.raw
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


class _Driver:
    """The few CUDA driver calls the backend needs (libcuda, through ctypes)."""

    def __init__(self):
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise CudaBuildError(f"the CUDA driver (libcuda.so.1) could not be loaded: {exc}") from exc
        self.lib = lib
        vp = ctypes.c_void_p
        lib.cuModuleLoadData.argtypes = [ctypes.POINTER(vp), ctypes.c_char_p]
        lib.cuModuleGetFunction.argtypes = [ctypes.POINTER(vp), vp, ctypes.c_char_p]
        lib.cuCtxGetCurrent.argtypes = [ctypes.POINTER(vp)]
        lib.cuGetErrorString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        # cuLaunchKernel(function, grid x, y, z, block x, y, z, shared bytes, queue, params, extra)
        lib.cuLaunchKernel.argtypes = [vp] + [ctypes.c_uint] * 7 + [vp, ctypes.POINTER(vp), vp]
        self.launch = lib.cuLaunchKernel
        lib.cuFuncSetAttribute.argtypes = [vp, ctypes.c_int, ctypes.c_int]
        lib.cuOccupancyMaxActiveBlocksPerMultiprocessor.argtypes = [ctypes.POINTER(ctypes.c_int), vp, ctypes.c_int,
                                                                    ctypes.c_size_t]

    def error(self, res: int) -> str:
        s = ctypes.c_char_p()
        self.lib.cuGetErrorString(res, ctypes.byref(s))
        return f"CUDA error {res}: {s.value.decode() if s.value else '?'}"

    def function(self, cubin: bytes, name: str, device: torch.device):
        """Load ``cubin`` into ``device``'s primary context (torch's) and return the kernel."""
        with torch.cuda.device(device):
            torch.cuda.init()
            cur = ctypes.c_void_p()
            self.lib.cuCtxGetCurrent(ctypes.byref(cur))
            if not cur.value:
                torch.cuda.set_device(device)  # makes the primary context current here
                self.lib.cuCtxGetCurrent(ctypes.byref(cur))
            if not cur.value:
                raise CudaBuildError(f"no current CUDA context for {device}")
            mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
            res = self.lib.cuModuleLoadData(ctypes.byref(mod), cubin)
            if res:
                raise CudaBuildError(f"loading the cuda backend's cubin failed: {self.error(res)}")
            res = self.lib.cuModuleGetFunction(ctypes.byref(fn), mod, name.encode())
            if res:
                raise CudaBuildError(f"kernel {name} not found in the cubin: {self.error(res)}")
            return fn

    def blocks_per_sm(self, fn, threads: int, smem: int) -> int:
        """Blocks of ``fn`` that fit on one SM with ``threads`` threads and ``smem`` bytes of dynamic
        shared memory each (0 where they cannot run); allows ``fn`` that much dynamic shared memory."""
        res = self.lib.cuFuncSetAttribute(fn, 8, smem)  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        if res:
            return 0
        n = ctypes.c_int()
        res = self.lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(n), fn, threads, smem)
        return 0 if res else n.value

    def context_sms(self, device) -> int:
        """SMs of the current CUDA context (a green context's share, or the whole GPU): the
        driver's count (cuCtxGetDevResource, CUDA 12.4+), else the device's."""
        with torch.cuda.device(device):
            ctx = ctypes.c_void_p()
            try:
                if not self.lib.cuCtxGetCurrent(ctypes.byref(ctx)) and ctx.value:
                    # CUdevResource: a 4-byte type, 92 bytes of padding, then the SM resource, whose
                    # first field is smCount; the buffer is larger than the struct.
                    buf = (ctypes.c_ubyte * 512)()
                    if not self.lib.cuCtxGetDevResource(ctx, buf, 1):  # CU_DEV_RESOURCE_TYPE_SM
                        sms = int.from_bytes(bytes(buf[96:100]), "little")
                        if sms > 0:
                            return sms
            except AttributeError:  # a driver without cuCtxGetDevResource
                pass
            return torch.cuda.get_device_properties(device).multi_processor_count


_DRIVER = []


def cuda_driver() -> _Driver:
    """The CUDA driver (ctypes), loaded once: ``function(cubin, name, device)``, ``launch``."""
    if not _DRIVER:
        _DRIVER.append(_Driver())
    return _DRIVER[0]


class _CudaLaunch:
    """One configured launch: the kernel, its grid (x, y[, z]), and ctypes storage for its
    parameters; a call sets the five pointers and launches (no allocation, no synchronisation).
    ``scratch``: the K split's (part, cnt) tensors, kept alive here (None: null pointers);
    ``groups``: the row groups (M / rows), walked by a grid-stride kernel (default: grid x);
    ``smem``: dynamic shared memory bytes; ``batches``: L, a ring kernel's last parameter (None: none)."""

    def __init__(self, fn, grid: tuple, threads: int, scalars: tuple, scratch: tuple | None = None,
                 groups: int = 0, smem: int = 0, batches: int | None = None):
        self.fn, self.grid, self.threads, self.scratch = fn, grid, threads, scratch
        groups = groups or grid[0]
        self.ptrs = [ctypes.c_void_p() for _ in range(5)]
        work = [ctypes.c_void_p(t.data_ptr() if scratch else None) for t in (scratch or (None, None))]
        self.vals = ([ctypes.c_int(scalars[0])] + [ctypes.c_longlong(s) for s in scalars[1:9]] + [ctypes.c_uint(0)]
                     + work + [ctypes.c_int(groups)] + ([] if batches is None else [ctypes.c_int(batches)]))
        self.params = (ctypes.c_void_p * len(self.ptrs + self.vals))(*[ctypes.addressof(x) for x in self.ptrs
                                                                        + self.vals])
        self.launch = cuda_driver().launch
        u = ctypes.c_uint
        z = grid[2] if len(grid) > 2 else 1
        self.args = (fn, u(grid[0]), u(grid[1]), u(z), u(threads), u(1), u(1), u(smem), None, self.params, None)

    def __call__(self, a, b, sfa, sfb, c) -> None:
        self.launch_ptrs(a.data_ptr(), b.data_ptr(), sfa.data_ptr(), sfb.data_ptr(), c.data_ptr())

    def launch_ptrs(self, pa: int, pb: int, psa: int, psb: int, pc: int) -> None:
        p = self.ptrs
        p[0].value, p[1].value, p[2].value, p[3].value, p[4].value = pa, pb, psa, psb, pc
        res = self.launch(*self.args)
        if res:
            raise RuntimeError(f"cuda backend launch failed: {cuda_driver().error(res)}")


def cuda_launch(fn, grid: tuple, threads: int, scalars: tuple, scratch: tuple | None = None,
                groups: int = 0) -> _CudaLaunch:
    """The backend's launch of kernel ``fn`` (a driver function of ``cuda_driver().function``) on
    ``grid`` with ``threads`` per block: ``scalars`` are the nine integer parameters after the
    pointers (chunks, then the strides), ``scratch`` the K split's (part, cnt) tensors or None,
    ``groups`` the row groups (default: grid x). A call ``launch(a, b, sfa, sfb, c)`` or
    ``launch.launch_ptrs(...)`` launches it, without allocating or synchronising."""
    return _CudaLaunch(fn, grid, threads, scalars, scratch, groups)


_CUDA_FUNCS = {}  # (device, arch, kernel name) -> function


def cuda_load(device, name: str, cubin: bytes) -> None:
    """Load ``cubin``, compiled elsewhere (another process: ``cuda_compile(cuda_kernel(...)[1],
    arch)``), as kernel ``name`` on ``device``: the backend's launches of that kernel there use it
    and compile nothing."""
    device = torch.device(device)
    arch = cuda_arch(torch.cuda.get_device_capability(device))
    _CUDA_FUNCS[(device, arch, name)] = cuda_driver().function(cubin, name, device)
_CUDA_LAUNCH = {}  # launch key -> _CudaLaunch


def _cuda_function(device: torch.device, cfg: CudaConfig, full: bool, plain: bool, probe: bool = False):
    arch = cuda_arch(torch.cuda.get_device_capability(device))
    name, source = cuda_kernel(cfg, full, plain, probe)
    key = (device, arch, name)
    fn = _CUDA_FUNCS.get(key)
    if fn is None:
        cubin = cuda_compile(source, arch)
        fn = _CUDA_FUNCS[key] = cuda_driver().function(cubin, name, device)
    _KERNEL_CONFIGS[name] = repr(cfg)
    return fn


def _cuda_prepared(data, m: int, k: int, l: int, cfg=None, probe: bool = False) -> tuple:
    """(launch, index of the sfa tensor it reads: 2 plain / 4 permuted) for these inputs,
    built (compiled, loaded) on first use of a key."""
    a, b, sfa, sfb, sfa_p, sfb_p, c = data
    plain = _plain_scales(data, k, 4)  # v = 2 reads two chunks' scale pairs as one 4-byte word
    cfg = config_for("cuda", data, m, k, l) if cfg is None else CudaConfig.of(cfg)
    if cfg.ring and _ring_problem(data, cfg, m, k):
        cfg = cuda_default(m, k, l, torch.cuda.get_device_capability(a.device))  # a register tile reads any layout
    if cfg.load == CUDA_LOADS[6] and (a.data_ptr() | a.stride(0) | (a.stride(2) if l > 1 else 0)) % 32:
        cfg = cfg._replace(load=CUDA_LOADS[0])  # 32-byte loads need a 32-byte aligned a; this reads the same
    chunks = k // 32
    if plain:
        ss = (sfa.stride(0), sfa.stride(2), sfb.stride(2))
    else:
        ss = (0, m * (k // 16), b.shape[0] * (k // 16))
        sfa = sfa_p
    scalars = (chunks, a.stride(0), a.stride(2), b.stride(2), *ss, c.stride(0), c.stride(2))
    key = (a.device, m, l, scalars, cfg, plain, probe)
    run = _CUDA_LAUNCH.get(key)
    if run is None:
        problem = cfg.problem() or cfg.shape_problem(m, k)
        if problem:
            raise ValueError(problem)
        if cfg.decode is None:
            cfg = cfg.with_decode(torch.cuda.get_device_capability(a.device))
        full = chunks % (cfg.lpr * cfg.u) == 0
        fn = _cuda_function(a.device, cfg, full, plain, probe)
        if cfg.ring:
            run = _CUDA_LAUNCH[key] = _ring_launch(fn, cfg, m, k, l, scalars, a.device)
            return run, 2
        scratch = None
        if cfg.kb > 1:  # the K split's partial sums and arrival counters (zero; each launch leaves them zero)
            scratch = (torch.empty(l * cfg.kb * m, dtype=torch.float32, device=a.device),
                       torch.zeros(l * (m // cfg.rows), dtype=torch.int32, device=a.device))
        grid, threads = cuda_grid(cfg, m, l, a.device)
        run = _CUDA_LAUNCH[key] = _CudaLaunch(fn, grid, threads, scalars, scratch, m // cfg.rows)
    return run, 2 if plain else 4


def _ring_problem(data, cfg: CudaConfig, m: int, k: int) -> str:
    """'' where a ring config can read these inputs, else why not: the plain scales on a's device,
    16-byte aligned (the bulk copies), rows of a and sfa back to back where a stage holds several
    (rpt > 1), compute capability >= 9.0, the config's K rules."""
    a, sfa = data[0], data[2]
    if torch.cuda.get_device_capability(a.device) < (9, 0):
        return "the ring needs compute capability >= 9.0 (bulk copies, mbarriers)"
    if not _plain_scales(data, k, 16):
        return "the ring reads the plain scales, on a's device with 16-byte aligned pointers and strides"
    if cfg.rpt > 1 and (a.stride(0) != k // 2 or sfa.stride(0) != k // 16):
        return "a ring stage of several rows needs a's and sfa's rows back to back"
    return cfg.shape_problem(m, k)


def _ring_launch(fn, cfg: CudaConfig, m: int, k: int, l: int, scalars: tuple, device) -> "_CudaLaunch":
    """The launch of ring kernel ``fn``: minb blocks per SM of the current context (fewer where
    the shared memory allows fewer), at most one per unit, with the shared memory its busiest
    block's share needs."""
    drv = cuda_driver()
    units, threads = m // cfg.rpt * l, _ring_threads(cfg)
    blocks = min(units, cfg.minb * drv.context_sms(device))
    smem = ring_smem(cfg, k, ring_batches(units, m // cfg.rpt, blocks))
    fit = drv.blocks_per_sm(fn, threads, smem)
    if fit < 1:
        raise ValueError(f"cuda config {cfg!r}: a block of {threads} threads and {smem} bytes of shared memory "
                         f"does not fit on an SM of this GPU for {m}x{k}x{l}")
    if fit < cfg.minb:  # a persistent grid: every block resident at once
        blocks = min(units, fit * drv.context_sms(device))
        smem = ring_smem(cfg, k, ring_batches(units, m // cfg.rpt, blocks))
        drv.blocks_per_sm(fn, threads, smem)  # allows the (larger) shared memory of the fewer blocks
    return _CudaLaunch(fn, (blocks, 1, 1), threads, scalars, None, m // cfg.rpt, smem, l)


def cuda_grid(cfg: CudaConfig, m: int, l: int, device) -> tuple:
    """((blocks x, y, z), threads per block) of ``cfg``'s launch: a block per row group (M / rows)
    and batch, times kb; with gs > 0, gs blocks per SM of ``device`` walk the row groups; a ring
    config: minb blocks per SM of ``device``'s current context, at most one per unit (rpt rows),
    one producer warp beside its warps (with no device: the units)."""
    if cfg.ring:
        units = m // cfg.rpt * l
        if device is not None and torch.device(device).type == "cuda":
            units = min(units, cfg.minb * cuda_driver().context_sms(device))
        return (units, 1, 1), _ring_threads(cfg)
    groups = m // cfg.rows
    if cfg.gs and device is not None and torch.device(device).type == "cuda":
        groups = min(groups, cfg.gs * torch.cuda.get_device_properties(device).multi_processor_count)
    return (groups, l, cfg.kb), 32 * cfg.warps * cfg.ks


def _cuda_run(data, m: int, k: int, l: int, cfg=None, probe: bool = False) -> torch.Tensor:
    run, si = _cuda_prepared(data, m, k, l, cfg, probe)
    c = data[6]
    if data[0].device.index != torch.cuda.current_device():
        with torch.cuda.device(data[0].device):
            run(data[0], data[1], data[si], data[si + 1], c)
    else:
        run(data[0], data[1], data[si], data[si + 1], c)
    return c


def cuda_probe(data, cfg) -> torch.Tensor:
    """The loads-only timing probe of ``cfg`` on ``data`` (validated): wrong output by design."""
    return _cuda_run(data, *check_inputs(data), cfg, probe=True)


def _cuda_fast(data, m: int, k: int, l: int):
    run, si = _cuda_prepared(data, m, k, l)
    return si, run.launch_ptrs, True


def cuda_supported(device) -> tuple:
    """(ok, reason): a CUDA GPU of compute capability >= 8.9 (the e4m3 conversion the kernel
    uses) and NVRTC; whether the kernel builds is known on first use."""
    device = torch.device(device)
    if device.type != "cuda":
        return False, f"the cuda kernel needs a CUDA GPU, got {device.type}"
    cap = torch.cuda.get_device_capability(device)
    if cap < (8, 9):
        return False, f"the cuda kernel needs compute capability >= 8.9, this GPU is {cap[0]}.{cap[1]}"
    if _BROKEN.get("cuda"):
        return False, _BROKEN["cuda"]
    try:
        find_nvrtc()
    except CudaBuildError as exc:
        return False, str(exc)
    return True, ""


# Config families, without a decode (the GPU's default): the winners of the H100 and H200
# sweeps, the first that fits being the default for shapes no table names. The first four are
# bsh tiles, chosen under SM pressure (an H100 restricted to a B200's bytes per SM), the fourth
# splitting K; the fifth is the fourth with its K parts' steps interleaved, the best tile at an
# H200's bytes per SM (an H100 at 96 SMs) on 7168x16384x1 and 4096x7168x8 (benchmarks/NOTES.md,
# "K parts interleaved"); the sixth and seventh one-row bsh tiles with more warps per SM, the best
# at 96 SMs on 4096x7168x8 and 7168x2048x4 before that (benchmarks/NOTES.md, "The cuda kernel at
# 96 SMs (an H200's bytes per SM)"); the rest won whole-GPU sweeps. Each family's record:
# benchmarks/NOTES.md, "Tiles" (a row per family) and "K split".
CUDA_FAMILIES = (
    CudaConfig(lpr=8, rpt=2, u=4, warps=1, v=1, pipe="ptxas", minb=20, bsh=True),  # bsh, the best at 64 SMs
    CudaConfig(lpr=8, rpt=1, u=4, warps=2, v=1, pipe="ptxas", minb=16, bsh=True),  # bsh, two warps
    CudaConfig(lpr=4, rpt=2, u=8, warps=1, v=1, pipe="ptxas", minb=16, bsh=True),  # fewest sm_100a instructions
    CudaConfig(lpr=8, rpt=2, u=4, warps=1, v=1, pipe="ptxas", minb=5, bsh=True, ks=4),  # K in 4 parts, 64 SMs
    CudaConfig(lpr=8, rpt=2, u=4, warps=1, v=1, pipe="ptxas", minb=5, bsh=True, ks=4, ki=True),  # interleaved: 96 SMs
    CudaConfig(lpr=8, rpt=1, u=4, warps=4, v=1, pipe="ptxas", minb=8, bsh=True),  # one row, 4 warps: 96 SMs
    CudaConfig(lpr=8, rpt=1, u=4, warps=1, v=1, pipe="ptxas", minb=32, bsh=True),  # one row, 1 warp: 96 SMs
    CudaConfig(lpr=32, rpt=2, u=1, warps=1, v=1, pipe="ptxas", minb=1),  # H100 4096x7168x8, 7168x2048x4
    CudaConfig(lpr=32, rpt=8, u=1, warps=1, v=1, pipe="ptxas", minb=1),  # H200 4096x7168x8
    CudaConfig(lpr=32, rpt=4, u=1, warps=1, v=1, pipe="ptxas", minb=1),  # H200 7168x2048x4
    CudaConfig(lpr=32, rpt=4, u=4, warps=8, pipe="ptxas", minb=1),  # H200 7168x16384x1
    CudaConfig(lpr=32, rpt=2, u=8, warps=2, pipe="ptxas", minb=1),  # H100 7168x16384x1 (before ks)
    CudaConfig(lpr=16, rpt=2, u=2, warps=1, pipe="ptxas", minb=24),  # H100 7168x2048x4 clean
)

# Measured per GPU model: kernels/tables.json (see "the measured tables" above); the retired
# entries' configs stay tuner candidates.
CUDA_MEASURED = _measured("cuda", CudaConfig)
_CUDA_RETIRED = _measured("cuda", CudaConfig, "retired")


# The small-shape rule (_cuda_small): `python3 benchmarks/server_sweep.py --grid small` timed 1503
# configs over 15 shapes of 19 KB to 12.6 MB (the nine official test shapes among them) under the
# server's protocol on an H100, and the rule's pick was the fastest or within 2.0% of it on each
# (benchmarks/RESULTS.md, "Small shapes"; the data,
# whose means the numbers below are: benchmarks/results/server-sweep-small-h100.json). Such a
# call is a few DRAM round trips, not a long read: what wins is one step per row, its b loads
# beside a's (pipe ab_first), one warp per block.
_SMALL_U = 12  # most chunks per lane in one step: 9 won (2432x4608x2: 11.43 us, against 16.33 with
# lpr 32, u 4 and a partial step); 16 lost to the K split (128x16384x1: 8.28-8.44 against 6.85 us)
_SMALL_SPLIT_ROWS = 4  # K split over blocks below this many row groups per SM (128x16384x1: 1 per SM,
# 6.85 us with kb 8 against 9.76 without; 256x16384x1: 2 per SM, 7.80 against 10.12); 256x7168x1's
# 7 chunks per lane take no split (6.33 us, against 6.76 with kb 4)
_SMALL_RPT2_WARPS = 16  # two rows per lane from this many warps per SM, on steps of <= 2 chunks per lane
# (4096x1024x1, 31 per SM: 6.06 against 6.84 us; 1024x2048x1, 8 per SM: 5.40 against 5.47 with two)


def _sm_count(capability: tuple) -> int:
    """SMs of the current GPU where it has this capability, else of the usual GPU of it (H100: 132, B200: 148)."""
    if torch.cuda.is_available():
        dev = torch.cuda.current_device()
        if torch.cuda.get_device_capability(dev) == tuple(capability):
            return torch.cuda.get_device_properties(dev).multi_processor_count
    return 148 if capability[0] == 10 else 132


def _cuda_small(m: int, k: int, l: int, capability: tuple) -> CudaConfig:
    """The config of a shape below the tuner's size (see _SMALL_U): lanes per row and chunks per
    lane so that a row is one whole step where it can be; rows too long for that split over
    blocks where row groups are few per SM; two rows per lane where warps are many and steps short."""
    chunks, sms = k // 32, _sm_count(capability)
    lpr = next((p for p in (32, 16, 8, 4, 2) if chunks % p == 0 and chunks // p <= _SMALL_U), 0)
    kb = 1
    if lpr:
        u = chunks // lpr
    else:
        lpr = 32
        while lpr > 2 and lpr > chunks:
            lpr //= 2
        per_lane = -(-chunks // lpr)
        if m * l // (32 // lpr) < _SMALL_SPLIT_ROWS * sms:
            kb = min(16, -(-per_lane // 2))
            u = -(-per_lane // kb)
        else:
            u = -(-per_lane // -(-per_lane // 8))
    rpt = 2 if u <= 2 and m * l // (32 // lpr) >= _SMALL_RPT2_WARPS * sms else 1
    return CudaConfig(lpr, rpt, u, 1, cuda_default_decode(capability), v=1, pipe="ab_first", kb=kb)


def cuda_default(m: int, k: int, l: int, capability: tuple = (9, 0)) -> CudaConfig:
    """The config for a shape no table names: below the tuner's size the small-shape rule
    (_cuda_small); else the first family that fits the shape, else one with fewer lanes per
    row (and chunks per lane) where rows are short; the GPU's decode."""
    if _gemv_bytes(m, k, l) < _TUNE_MIN_BYTES:
        return _cuda_small(m, k, l, capability)
    for fam in CUDA_FAMILIES:
        cfg = fam.with_decode(capability)
        if cfg.fits(m, k):
            return cfg
    chunks = k // 32
    lpr = 32
    while lpr > 2 and lpr > chunks:
        lpr //= 2
    u = max(1, min(2, chunks // lpr))
    return CudaConfig(lpr, 1, u, 4 if 4 * (32 // lpr) <= 128 else 2, cuda_default_decode(capability), v=1, minb=0)


_cuda_default = cuda_default


# The public B200 leaders' geometry per K, in this kernel's config space: their threads and rows
# per block, and their loads of a where the tile has two adjacent chunks per lane
# (no_allocate_l2_evict_first_256: one 32-byte L1-no-allocate, L2-evict-first load, SASS
# LDG.E.NA.EFL2.256 on sm_100a as in theirs; else nc_no_allocate, no-allocate 16-byte loads).
# Timed by the tuner on compute capability 10.x beside the kit's own candidates (each checked
# against the exact answer first); never measured on a B200 by the kit, and the 32-byte load's
# sm_100a form never ran (its stand-in elsewhere: two 16-byte loads).
# From gau-nernst/gpu-mode-kernels, nvidia/nvfp4_gemv/
# submission_v2h.py at aee9cda6b6444f774ce5eaee1ec1a5c84acaa521 ("v2h") and the first place's
# code as BBuf/how-to-optim-algorithm-in-cuda, cuda-mode/Leaderboards, at
# 1d341caa44f876ee2255d09ce40aaf3f213909f9 reproduces it ("rank1"); benchmarks/results/leaders-sm100a.md.
_LD256 = CUDA_LOADS[6]  # no_allocate_l2_evict_first_256
CUDA_LEADERS = {
    16384: (CudaConfig(lpr=32, rpt=1, u=2, warps=1, load=_LD256, ks=8),  # v2h: 256 threads on 1 row, 32 B per thread
            CudaConfig(lpr=32, rpt=1, u=4, warps=1, load=_LD256, ks=4)),  # rank1: 128 threads on 1 row
    7168: (CudaConfig(lpr=16, rpt=1, u=2, warps=1, load=_LD256, ks=7),  # v2h: 224 threads on 2 rows, one load each
           CudaConfig(lpr=32, rpt=1, u=7, warps=4, v=1, load="nc_no_allocate")),  # rank1: 128 threads on 4 rows
    2048: (CudaConfig(lpr=16, rpt=1, u=4, warps=4, load=_LD256),),  # v2h and rank1: 128 threads on 8 rows
}


# The bulk-copy ring's families (CudaConfig ring > 0), timed by the tuner beside the register tiles
# on compute capability >= 9.0 (the race decides, GPU by GPU): (bytes of a per stage, teams,
# producer warps). A stage is whole rows where a row is at most that many bytes (as many rows as
# fit, up to 8), else a row's segment of that many bytes; two slots per consumer warp, one block
# per SM. Chosen on an H200 at full width and at 96 SMs (benchmarks/RESULTS.md, "The bulk-copy
# ring (H200)"): 8 KB stages with 8 teams and 2 producer warps were the best ring at 96 SMs on
# every shape; 4 KB stages with 16 teams and 4 producers the best at full width on 4096x7168x8.
RING_FAMILIES = ((8192, 8, 2), (4096, 16, 4))


def ring_config(m: int, k: int, stage: int, teams: int, producers: int, capability: tuple = (9, 0)):
    """The ring config of one family for an m x k shape, or None where the ring cannot take it (K
    not a multiple of 1024: a stage spans whole warps of 16-byte chunks; rows too long for
    segments of that size)."""
    chunks = k // 32
    if chunks % 32 or capability < (9, 0):
        return None
    row = 16 * chunks
    rpt, u = 1, chunks // 32
    if row <= stage:
        while rpt < 8 and 2 * rpt * row <= stage and m % (2 * rpt) == 0:
            rpt *= 2
    else:
        u = stage // 512
        if chunks % (32 * u):
            return None
    # b is prepared once into shared memory, as on the bsh tiles: their decode (fewest bytes of b to read back)
    cfg = CudaConfig(lpr=32, rpt=rpt, u=u, warps=teams, decode=cuda_default_decode(capability, bsh=True), v=1,
                     pipe="ptxas", minb=1, ring=2, pw=producers)
    return cfg if cfg.fits(m, k) else None


_PRESSURE_FAMILIES = 7  # the first families, the bsh tiles that won under SM pressure, timed first
_TUNE_CANDIDATES = 9  # configs the tuner times per shape (before the compute capability 10.x extras): the
# seven SM-pressure tiles and two of the GPU tables' (benchmarks/NOTES.md, "The cuda kernel at 96 SMs (an
# H200's bytes per SM)" and "K parts interleaved"); about 0.19 s of NVRTC each (benchmarks/NOTES.md, "Build")


def _cuda_candidates(m: int, k: int, l: int, capability) -> list:
    """What the tuner times for a shape (first: the default): the bsh tiles (SM pressure),
    what won on any GPU model for this shape (table entries, then retired ones), the families;
    _TUNE_CANDIDATES that fit, then the bulk-copy ring's families that fit (RING_FAMILIES, compute
    capability >= 9.0), and on compute capability 10.x an integer decode too on the top three and
    on the first ring (which decode wins there is unmeasured), the 32-byte loads on those of the six
    with two chunks per lane, and the public leaders' geometry for this K (CUDA_LEADERS)."""
    cap = capability if isinstance(capability, tuple) else (9, 0)
    cands = [cuda_default(m, k, l, cap)]
    cands += [f.with_decode(cap) for f in CUDA_FAMILIES[:_PRESSURE_FAMILIES]]
    for table in (*CUDA_MEASURED.values(), *_CUDA_RETIRED.values()):
        if (m, k, l) in table:
            cands.append(table[(m, k, l)]._replace(decode=None).with_decode(cap))
    cands += [f.with_decode(cap) for f in CUDA_FAMILIES]
    cands = [c for c in dict.fromkeys(cands) if c.fits(m, k)][:_TUNE_CANDIDATES]
    rings = [r for f in RING_FAMILIES if (r := ring_config(m, k, *f, cap)) is not None]
    cands += rings
    if cap[0] >= 10:
        cands += [r._replace(decode="dp4a-sr2") for r in rings[:1]]  # which decode wins there is unmeasured
        cands += [c._replace(decode="dp4a-sr2" if c.bsh else "dp4a-sr") for c in cands[:3]]
        cands += [c._replace(load=_LD256) for c in cands[:6] if c.v == 2]  # the leaders' 32-byte loads
        cands += [c.with_decode(cap) for c in CUDA_LEADERS.get(k, ()) if c.fits(m, k)]
    return list(dict.fromkeys(cands))


# What NVRTC sees of the cuda backend, for the kernel revision (``kernel_revision``).
_C_TOKEN = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?\*/|\n|[^\S\n]+|\w+|.', re.S)


def _c_tokens(source: str) -> str:
    """C source as its tokens one space apart, comments and layout left out; a preprocessor
    directive stays a line of its own (its continuation lines joined)."""
    out, line = [], []
    for tok in _C_TOKEN.findall(source.replace("\\\n", " ") + "\n"):
        if tok == "\n":
            if line and line[0] == "#":
                out.append("\n" + " ".join(line) + "\n")
            else:
                out += [f"{x} " for x in line]
            line = []
        elif not (tok.isspace() or tok.startswith("//") or tok.startswith("/*")):
            line.append(tok)
    return "".join(out)


def _cuda_revision_probes() -> list:
    """(config, full, plain, probe) of the configs whose wrappers the revision hashes: one config,
    and that config with each field changed to each of its names (decode, load, pipe), the other
    value (a bool), or a few small integers, where the result is a config the kernel takes."""
    base = CudaConfig(lpr=8, rpt=2, u=4, warps=1, decode="dp4a-sr2")
    names = {"decode": _CUDA_DECODES, "load": CUDA_LOADS, "pipe": CUDA_PIPES}
    ring = ring_config(7168, 16384, *RING_FAMILIES[0])
    cfgs = [base, ring, ring._replace(pw=0), ring._replace(ks=2, u=8), ring._replace(rpt=2, u=8, ring=3)]
    for field, value in zip(base._fields, base, strict=True):
        alts = names.get(field) or ((not value,) if isinstance(value, bool) else (1, 2, 3, 2 * value + 2))
        cfgs += [c for c in (base._replace(**{field: alt}) for alt in alts) if not c.problem()]
    flags = [(full, plain, probe) for full in (True, False) for plain in (True, False) for probe in (False, True)]
    return [(cfg, True, True, False) for cfg in dict.fromkeys(cfgs)] + [(base, *f) for f in flags]


def _cuda_revision() -> str:
    """The cuda backend's part of the kernel revision: the kernel source as tokens (no comments,
    no layout), NVRTC's options for sm_90a and sm_100a, and for each probe config the wrapper
    that cuda_kernel appends (the kernel's name left out), its grid and its threads per block."""
    parts = [_c_tokens(CUDA_SRC)] + [" ".join(cuda_options(arch)) for arch in ("sm_90a", "sm_100a")]
    for cfg, full, plain, probe in _cuda_revision_probes():
        name, source = cuda_kernel(cfg, full, plain, probe)
        wrapper = _c_tokens(source[len(CUDA_SRC):].replace(name, "KERNEL"))
        parts.append(f"{wrapper}| {cuda_grid(cfg, 56 * cfg.rows, 3, None)}")
    return "\n".join(parts)


def cuda_compile_variants() -> list:
    """Every (config, full, plain) the cuda backend can launch: the configs of every table (its
    retired entries too) and candidate list, and the default family, each with both layouts of the
    scales."""
    cfgs = set()
    for table in (*CUDA_MEASURED.values(), *_CUDA_RETIRED.values()):
        cfgs.update(table.values())
    for m, k, l in TUNED_SHAPES:
        for cap in ((9, 0), (10, 0)):
            cfgs.update(_cuda_candidates(m, k, l, cap))
    for k in (64, 128, 256, 512, 1536, 2048, 4096, 7168, 16384):
        for cap in ((9, 0), (10, 0)):
            cfgs.add(cuda_default(128, k, 1, cap))
            cfgs.add(cuda_default(7168, k, 4, cap))
    for m, k, l in _SMALL_SHAPES:
        for cap in ((9, 0), (10, 0)):
            cfgs.add(cuda_default(m, k, l, cap))
    return [(cfg, full, plain) for cfg in sorted(cfgs) for full in (True, False) for plain in (True, False)
            if not cfg.ring or (full and plain)]  # a ring reads whole stages and the plain scales only


register(Backend("cuda", cuda_supported, _cuda_run, config=CudaConfig, candidates=_cuda_candidates,
                 measured=CUDA_MEASURED, fast=_cuda_fast, ab_align=16, revision=_cuda_revision))


# =========================================================================== backend: triton

_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
_TRITON_DECODES = ("tl", "f16x2", "dp4a", "loads-only")
_jit = triton.jit if triton is not None else (lambda fn: fn)


class TritonConfig(NamedTuple):
    """A configuration of the Triton kernel (benchmarks/NOTES.md, "Triton" for the measurements
    behind the defaults)."""
    block_m: int  # rows per program
    block_g: int  # 16-element groups per step of the K loop
    warps: int  # num_warps
    stages: int = 1  # num_stages: Triton's cp.async pipelining of the K loop lost 5-60% in every sweep
    decode: str | None = None  # tl, f16x2 or dp4a (loads-only: a probe); None: dp4a, tl in the interpreter
    scales: str = "permuted"  # "plain": the plain scales where they are on a's device (slower, H100)

    def __repr__(self) -> str:
        parts = [f"block_m={self.block_m}", f"block_g={self.block_g}", f"warps={self.warps}"]
        for name in self._fields[3:]:
            value = getattr(self, name)
            if value != self._field_defaults[name]:
                parts.append(f"{name}={value!r}".replace("'", '"'))
        return f"TritonConfig({', '.join(parts)})"

    def problem(self) -> str:
        """'' when the kernel can be built with this config (whatever the shape), else why not."""
        if (not all(isinstance(x, int) and x > 0 and x & (x - 1) == 0 for x in self[:3]) or self.warps > 32
                or self.stages < 1 or self.decode not in (None, *_TRITON_DECODES)
                or self.scales not in ("permuted", "plain")):
            return ("triton's block_m, block_g and warps (<= 32) must be powers of two, stages >= 1, decode one "
                    f"of {', '.join(_TRITON_DECODES)}, scales permuted or plain; got {self!r}")
        return ""

    def shape_problem(self, m: int, k: int) -> str:
        return f"triton block_m={self.block_m} must divide M={m}" if m % self.block_m else ""

    @classmethod
    def of(cls, value) -> "TritonConfig":
        """A TritonConfig from itself, from a dict of fields, from text (``parse``) or from a
        sequence of fields in order: at least the four integers block_m, block_g, warps, stages
        (the positional form configs were recorded in before they had names)."""
        cfg = _config_from(cls, value)
        if cfg is not None:
            return cfg
        fields = tuple(value)
        if not 4 <= len(fields) <= len(cls._fields) or not all(isinstance(x, int) for x in fields[:4]):
            raise ValueError(f"triton takes 4 numbers (block_m, block_g, warps, stages), got {len(fields)}")
        return cls(*fields)

    @classmethod
    def parse(cls, text: str) -> "TritonConfig":
        """``block_m=16,block_g=64,warps=2`` or positional ``16,64,2,1``."""
        return _parse_config(cls, text)


# Grid (M / BLOCK_M, L): one program owns BLOCK_M rows of one batch and walks K in steps of
# BLOCK_G 16-element groups. A is read as uint64 words, one word = one group of 16 e2m1
# values = 8 bytes; a thread holds 4 adjacent groups of each of its rows (two 16-byte loads).
# b row 0 and its scales are loaded per step (tiny, L1/L2 resident) and prepared once per
# step for all the program's rows (Triton spreads that work over the program's threads and
# shares it through shared memory). Scales come from the plain [rows, K/16] layout when it
# lives on a's device (PLAIN), else from the permuted layout, where scale (row i, group j) of
# a batch sits at byte
#     (i // 128) * G * 128 + (j // 4) * 512 + (i % 32) * 16 + ((i % 128) // 32) * 4 + j % 4
# with G = K / 16 groups per row, so a batch spans M * G bytes.
#
# Every group dot below returns S = 4 * (the exact dot product of a group's 16 e2m1 values
# with b's), an integer held exactly in fp32; the scales are decoded exactly by the e4m3
# conversion, and each group adds S * sfa * (sfb / 4) to an fp32 accumulator (one per row
# and group slot of the tile, summed across the tile at the end: a fixed order, so repeated
# runs are bit-identical).
#
# Three implementations of the group dot, all exact:
# * "dp4a" (GPU, PTX): byte lookups and integer dot products. prmt with a 4-nibble selector
#   is an 8-entry byte table: it turns 4 magnitude codes into the bytes 2|a| (0..12) at once.
#   b is prepared per step as bytes +2|b| and -2|b| and selector bases i + 4 * sign(b_i); a
#   second prmt, whose selectors XOR in a's sign bits, picks +2|b| or -2|b| per byte; dp4a
#   multiplies and adds 4 byte pairs. 12 instructions per 8 values of a.
# * "f16x2" (GPU, PTX): nibbles n and n+4 of a 32-bit word moved by one shift and mask into
#   the two halves of an fp16x2 (the fp16 bits ((c & 7) << 9) of code c are |value| * 2^-14);
#   a's signs XORed into the sign bits of b's fp16x2 pair; fma.rn.f16x2 sums 8 products per
#   half, each partial sum a multiple of 2^-16 below 2^-5, exact in fp16. 19 per 8 values.
# * "tl" (portable; the one Triton's CPU interpreter runs): the same fp16 bit trick per
#   nibble in plain Triton operations, fp32 products and sums.

# e2m1 magnitude code -> 2|value| as a byte; for b also -2|value| (prmt tables).
_POS_LO, _POS_HI = 0x03020100, 0x0C080604
_NEG_LO, _NEG_HI = 0xFDFEFF00, 0xF4F8FAFC

def _ptx_quads(word, pn, xb):
    """PTX for the 8 values of a 32-bit word of a: the bytes 2|a| of each quad (m); the
    selectors i + 4 * (sign a_i xor sign b_i) (x, b's part xb precomputed); the bytes of
    +2|b| or -2|b| picked by them (bs); dp4a into acc."""
    (p0, n0), (p1, n1) = pn
    return (f"and.b32 s, {word}, 0x7777; prmt.b32 m, tlo, thi, s; "
            f"shr.b32 x, {word}, 1; and.b32 x, x, 0x44444444; xor.b32 x, x, {xb}; "
            f"prmt.b32 bs, {p0}, {n0}, x; dp4a.u32.s32 acc, m, bs, acc; "
            f"shr.b32 s, {word}, 16; and.b32 s, s, 0x7777; prmt.b32 m, tlo, thi, s; "
            f"shr.b32 x, x, 16; prmt.b32 bs, {p1}, {n1}, x; dp4a.u32.s32 acc, m, bs, acc;")

# b group (u64) -> per quad q of 4 values the bytes +2|b| ($2q) and -2|b| ($2q+1), and per
# 32-bit word w the selector base i + 4 * sign(b_i) for its 8 nibbles ($8 + w).
_PTX_B_DP4A = tl.constexpr(
    "{ .reg .b32 lo, hi, s, tlo, thi, ulo, uhi; mov.b64 {lo, hi}, $10; "
    f"mov.b32 tlo, {_POS_LO:#x}; mov.b32 thi, {_POS_HI:#x}; mov.b32 ulo, {_NEG_LO:#x}; mov.b32 uhi, {_NEG_HI:#x}; "
    + " ".join(
        f"shr.b32 s, {w}, {16 * h}; and.b32 s, s, 0x7777; "
        f"prmt.b32 ${2 * (2 * i + h)}, tlo, thi, s; prmt.b32 ${2 * (2 * i + h) + 1}, ulo, uhi, s;"
        for i, w in enumerate(("lo", "hi")) for h in range(2))
    + " ".join(f" shr.b32 s, {w}, 1; and.b32 s, s, 0x44444444; or.b32 ${8 + i}, s, 0x32103210;"
               for i, w in enumerate(("lo", "hi")))
    + " }")

# a group (u64) . b group -> fp32 of 4 * dot (an integer).
_PTX_DOT_DP4A = tl.constexpr(
    "{ .reg .b32 lo, hi, s, x, m, bs, acc, tlo, thi; mov.b64 {lo, hi}, $1; "
    f"mov.b32 tlo, {_POS_LO:#x}; mov.b32 thi, {_POS_HI:#x}; mov.b32 acc, 0; "
    + _ptx_quads("lo", (("$2", "$3"), ("$4", "$5")), "$10") + " "
    + _ptx_quads("hi", (("$6", "$7"), ("$8", "$9")), "$11")
    + " cvt.rn.f32.s32 $0, acc; }")

def _ptx_pair(word, n):
    """PTX putting |a| of nibbles n, n+4 of `word` into t (fp16x2 of value * 2^-14) and
    their signs at bits 15/31 of u."""
    mag = f"shl.b32 t, {word}, {9 - 4 * n};" if n < 3 else f"shr.b32 t, {word}, 3;"
    sign = f"shl.b32 u, {word}, {12 - 4 * n};" if n < 3 else f"mov.b32 u, {word};"
    return f"{mag} and.b32 t, t, 0x0E000E00; {sign} and.b32 u, u, 0x80008000;"

# b group (u64) -> 8 fp16x2 registers of true values; pair p = 4 * word + n.
_PTX_B_F16X2 = tl.constexpr(
    "{ .reg .b32 lo, hi, t, u, k; mov.b64 {lo, hi}, $8; mov.b32 k, 0x74007400; "
    + " ".join(_ptx_pair(w, n) + f" or.b32 t, t, u; mul.rn.f16x2 ${4 * i + n}, t, k;"
               for i, w in enumerate(("lo", "hi")) for n in range(4))
    + " }")

# a group (u64) . b group (8 fp16x2) -> fp32 of 4 * dot: (sum of the halves) * 2^16.
_PTX_DOT_F16X2 = tl.constexpr(
    "{ .reg .b32 lo, hi, t, u, acc; .reg .b16 h0, h1; .reg .f32 f0, f1; mov.b64 {lo, hi}, $1; "
    + " ".join(_ptx_pair(w, n) + f" xor.b32 u, u, ${2 + 4 * i + n}; "
               + ("mul.rn.f16x2 acc, t, u;" if i == 0 and n == 0 else "fma.rn.f16x2 acc, t, u, acc;")
               for i, w in enumerate(("lo", "hi")) for n in range(4))
    + " mov.b32 {h0, h1}, acc; cvt.f32.f16 f0, h0; cvt.f32.f16 f1, h1; add.f32 f0, f0, f1; "
    "mul.f32 $0, f0, 0f47800000; }")

@_jit
def _group_dot_dp4a(qa, qb):
    """b's step prepared once per thread ([BLOCK_G] -> 10 registers per group), then the
    group dot per (row, group)."""
    b0, b1, b2, b3, b4, b5, b6, b7, x0, x1 = tl.inline_asm_elementwise(
        _PTX_B_DP4A, "=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,l", [qb], dtype=(tl.int32,) * 10, is_pure=True, pack=1)
    return tl.inline_asm_elementwise(
        _PTX_DOT_DP4A, "=f,l,r,r,r,r,r,r,r,r,r,r",
        [qa, b0[None, :], b1[None, :], b2[None, :], b3[None, :], b4[None, :], b5[None, :],
         b6[None, :], b7[None, :], x0[None, :], x1[None, :]],
        dtype=tl.float32, is_pure=True, pack=1)

@_jit
def _group_dot_f16x2(qa, qb):
    b0, b1, b2, b3, b4, b5, b6, b7 = tl.inline_asm_elementwise(
        _PTX_B_F16X2, "=r,=r,=r,=r,=r,=r,=r,=r,l", [qb], dtype=(tl.int32,) * 8, is_pure=True, pack=1)
    return tl.inline_asm_elementwise(
        _PTX_DOT_F16X2, "=f,l,r,r,r,r,r,r,r,r",
        [qa, b0[None, :], b1[None, :], b2[None, :], b3[None, :],
         b4[None, :], b5[None, :], b6[None, :], b7[None, :]],
        dtype=tl.float32, is_pure=True, pack=1)

@_jit
def _e2m1_tl(w, n: tl.constexpr):
    """Nibble n of uint32 words -> fp32 2 * value (fp16 bits = value * 2^-14, times 2^15)."""
    x = w >> (4 * n)
    bits = ((x & 7) << 9) | ((x & 8) << 12)
    return bits.to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32) * 32768.0

@_jit
def _group_dot_tl(qa, qb):
    a_lo = qa.to(tl.uint32)
    a_hi = (qa >> 32).to(tl.uint32)
    b_lo = qb.to(tl.uint32)
    b_hi = (qb >> 32).to(tl.uint32)
    s = _e2m1_tl(a_lo, 0) * _e2m1_tl(b_lo, 0)[None, :]
    for n in tl.static_range(1, 8):
        s += _e2m1_tl(a_lo, n) * _e2m1_tl(b_lo, n)[None, :]
    for n in tl.static_range(8):
        s += _e2m1_tl(a_hi, n) * _e2m1_tl(b_hi, n)[None, :]
    return s

@_jit
def _e4m3(s):
    """uint8 e4m3 codes -> fp32, exactly; the NaN codes 0x7F / 0xFF give NaN (NaN in, NaN
    out, as cuBLAS gives; Triton's interpreter would read 0x7F as 480)."""
    v = s.to(tl.float8e4nv, bitcast=True).to(tl.float32)
    return tl.where((s & 0x7F) == 0x7F, float("nan"), v)

@_jit
def _nvfp4_gemv_kernel(
    a_ptr, b_ptr, sfa_ptr, sfb_ptr, c_ptr,
    n_groups,  # K / 16
    stride_am, stride_al, stride_bl,  # a, b strides in 8-byte words
    sfa_rstride, sfa_bstride, sfb_bstride,  # scale strides in bytes (row: plain layout only)
    stride_cm, stride_cl,  # c strides in elements
    BLOCK_M: tl.constexpr, BLOCK_G: tl.constexpr, STAGES: tl.constexpr, EVEN_G: tl.constexpr,
    DECODE: tl.constexpr, A_EVICT: tl.constexpr, PLAIN: tl.constexpr,
):
    pid_m = tl.program_id(0)
    li = tl.program_id(1).to(tl.int64)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    gs = tl.arange(0, BLOCK_G)
    a_rows = a_ptr.to(tl.pointer_type(tl.uint64)) + li * stride_al + rows[:, None].to(tl.int64) * stride_am
    b_row = b_ptr.to(tl.pointer_type(tl.uint64)) + li * stride_bl
    if PLAIN:  # [rows, K/16] per batch, row-major
        sa_rows = (sfa_ptr.to(tl.pointer_type(tl.uint8)) + li * sfa_bstride
                   + rows[:, None].to(tl.int64) * sfa_rstride)
    else:
        sa_rows = (sfa_ptr.to(tl.pointer_type(tl.uint8)) + li * sfa_bstride
                   + ((rows // 128) * (n_groups * 128) + (rows % 32) * 16 + ((rows % 128) // 32) * 4)[:, None])
    sb_row = sfb_ptr.to(tl.pointer_type(tl.uint8)) + li * sfb_bstride
    acc = tl.zeros([BLOCK_M, BLOCK_G], dtype=tl.float32)
    for g0 in tl.range(0, n_groups, BLOCK_G, num_stages=STAGES):
        g = g0 + gs
        if PLAIN:
            gp = g
        else:
            gp = (g // 4) * 512 + (g % 4)  # scale byte of group g within a batch's row block
        if EVEN_G:
            qa = tl.load(a_rows + g[None, :], eviction_policy=A_EVICT)
            sa = tl.load(sa_rows + gp[None, :], eviction_policy=A_EVICT)
            qb = tl.load(b_row + g, eviction_policy="evict_last")
            sb = tl.load(sb_row + gp, eviction_policy="evict_last")
        else:
            gm = g < n_groups
            qa = tl.load(a_rows + g[None, :], mask=gm[None, :], other=0, eviction_policy=A_EVICT)
            sa = tl.load(sa_rows + gp[None, :], mask=gm[None, :], other=0, eviction_policy=A_EVICT)
            qb = tl.load(b_row + g, mask=gm, other=0, eviction_policy="evict_last")
            sb = tl.load(sb_row + gp, mask=gm, other=0, eviction_policy="evict_last")
        if DECODE == "dp4a":
            s = _group_dot_dp4a(qa, qb)
        elif DECODE == "f16x2":
            s = _group_dot_f16x2(qa, qb)
        elif DECODE == "tl":
            s = _group_dot_tl(qa, qb)
        else:  # "loads-only", a timing probe (wrong results): the loads with next to no arithmetic
            s = (qa ^ qb[None, :]).to(tl.uint32).to(tl.float32)
        acc += s * (_e4m3(sa) * (_e4m3(sb) * 0.25)[None, :])
    out = tl.sum(acc, axis=1)
    tl.store(c_ptr + rows * stride_cm + li * stride_cl, out.to(tl.float16))



# Eviction policy for A and its scales (read once): "evict_first" against none was within the
# run-to-run spread on the H100; kept as the intent for bigger L2s. ".cg" loads were slower (and
# cannot combine with an eviction policy). Measurements: benchmarks/NOTES.md, "Triton".
_TRITON_EVICT = "evict_first"
# The GPU's decode where a config names none: dp4a beat f16x2 and tl (fp32 per nibble) on every
# benchmark shape of the H100 (benchmarks/NOTES.md, "Decode").
_TRITON_DECODE = "dp4a"

# Measured per GPU model: kernels/tables.json (see "the measured tables" above; the retired
# entries' configs are still compiled by the compile checks).
TRITON_MEASURED = _measured("triton", TritonConfig)
_TRITON_RETIRED = _measured("triton", TritonConfig, "retired")
# The tiles that survived the H100 sweeps (benchmarks/NOTES.md, "Triton"), per K.
_TRITON_EXTRA = {
    16384: (TritonConfig(8, 128, 2), TritonConfig(2, 128, 1), TritonConfig(16, 128, 4)),
    7168: (TritonConfig(16, 32, 1), TritonConfig(8, 64, 1)),
    2048: (TritonConfig(16, 32, 1), TritonConfig(8, 64, 2)),
}


def _triton_default(m: int, k: int, l: int) -> TritonConfig:
    """The config for a shape no table names: 4 rows per thread with 2 warps, the winner on
    both K = 7168 and K = 2048 on the H100; no step much wider than a row."""
    block_g = 64
    while block_g > 4 and block_g >= 2 * (k // 16):
        block_g //= 2
    return TritonConfig(16, block_g, 2)


def _triton_candidates(m: int, k: int, l: int, capability=None) -> list:
    extra = [c for c in _TRITON_EXTRA.get(k, ()) if not c.shape_problem(m, k)]
    return list(dict.fromkeys([_triton_default(m, k, l)] + extra))


def triton_configs(m: int, k: int, l: int) -> list:
    """Every config the triton backend can launch for a shape: the default and tuning
    candidates, the configs measured for any GPU model, each with every decode but the probe
    and both scale layouts (what benchmarks/compile_table.py compiles)."""
    cfgs = _triton_candidates(m, k, l)
    for table in (*TRITON_MEASURED.values(), *_TRITON_RETIRED.values()):
        if (m, k, l) in table and table[(m, k, l)] not in cfgs:
            cfgs.append(table[(m, k, l)])
    return [cfg._replace(decode=decode, scales=scales) for cfg in cfgs for decode in _TRITON_DECODES[:3]
            for scales in ("permuted", "plain")]


def triton_launch(data, m: int, k: int, l: int, cfg) -> tuple:
    """(kernel, grid, args, kwargs) of the Triton launch the backend makes for these inputs
    with ``cfg`` (its decode resolved, and whether the plain scales are read): ``kernel[grid](*args,
    **kwargs)`` is the launch."""
    cfg = TritonConfig.of(cfg)
    decode = cfg.decode or ("tl" if _INTERPRET else _TRITON_DECODE)
    plain = cfg.scales == "plain" and _plain_scales(data, k, 1)
    a, b, sfa, sfb, sfa_p, sfb_p, c = data
    n_groups = k // 16
    if plain:
        sa, sb = sfa.view(torch.uint8), sfb.view(torch.uint8)
        scale_strides = (sfa.stride(0), sfa.stride(2), sfb.stride(2))
    else:
        sa, sb = sfa_p.view(torch.uint8), sfb_p.view(torch.uint8)
        scale_strides = (0, m * n_groups, b.shape[0] * n_groups)
    args = (a.view(torch.uint8), b.view(torch.uint8), sa, sb, c, n_groups, a.stride(0) // 8, a.stride(2) // 8,
            b.stride(2) // 8, *scale_strides, c.stride(0), c.stride(2))
    kwargs = dict(BLOCK_M=cfg.block_m, BLOCK_G=cfg.block_g, STAGES=cfg.stages, EVEN_G=n_groups % cfg.block_g == 0,
                  DECODE=decode, A_EVICT=_TRITON_EVICT, PLAIN=plain, num_warps=cfg.warps, num_stages=cfg.stages)
    return _nvfp4_gemv_kernel, (m // cfg.block_m, l, 1), args, kwargs


# Launch cache. Triton's JIT launch re-derives every argument's specialisation on each call
# (a few µs of Python per call, which the leaderboard's timing includes). After the first
# launch of a key, the compiled kernel is called directly; the key holds everything the
# specialisation depends on (the integer arguments, pointer alignment, constexprs, device).
# The direct path is checked once against the JIT path's output; if it differs or raises
# (another Triton version, say), that key keeps the JIT path.
_TRITON_LAUNCH = {}


def _direct_runner(compiled, grid, args, consts, c):
    """compiled[grid] (Triton's launcher, without the binder), if it reproduces c exactly."""
    try:
        run = compiled[grid]
        scratch = torch.empty_like(c).fill_(float("nan"))
        run(*args[:4], scratch, *args[5:], *consts)
        if torch.equal(scratch, c):
            return run
    except Exception:  # noqa: BLE001 - any failure means: keep the JIT path
        pass
    return None


def _triton_key(data, m: int, l: int, args: tuple, kwargs: dict) -> tuple:
    c = data[6]
    aligned = (args[0].data_ptr() | args[1].data_ptr() | args[2].data_ptr() | args[3].data_ptr()
               | c.data_ptr()) & 15 == 0
    return (args[5:], m, l, aligned, tuple(kwargs.items()), c.device)


def _triton_run(data, m: int, k: int, l: int, cfg=None) -> torch.Tensor:
    c = data[6]
    if cfg is None:
        cfg = config_for("triton", data, m, k, l)
    kernel, grid, args, kwargs = triton_launch(data, m, k, l, cfg)
    key = _triton_key(data, m, l, args, kwargs)
    run = _TRITON_LAUNCH.get(key)
    if run is not None:
        run(*args, *run.consts)
        return c
    _KERNEL_CONFIGS[getattr(kernel, "__name__", "_nvfp4_gemv_kernel")] = repr(TritonConfig.of(cfg))
    compiled = kernel[grid](*args, **kwargs)
    if key not in _TRITON_LAUNCH and not _INTERPRET:
        _TRITON_LAUNCH[key] = None  # JIT path unless the direct one proves itself
        consts = tuple(v for n, v in kwargs.items() if not n.startswith("num_"))
        run = _direct_runner(compiled, grid, args, consts, c)
        if run is not None:
            run.consts = consts
            _TRITON_LAUNCH[key] = run
    return c


def _triton_fast(data, m: int, k: int, l: int):
    """(index of the sfa tensor the launch reads, call(a, b, sfa, sfb, c), False) of the direct
    runner of these inputs' launch, once the JIT path has built it; None where there is none.
    The runner takes the tensors as they are (it reads their data pointers)."""
    if _INTERPRET:
        return None
    _, _, args, kwargs = triton_launch(data, m, k, l, config_for("triton", data, m, k, l))
    run = _TRITON_LAUNCH.get(_triton_key(data, m, l, args, kwargs))
    if run is None:
        return None
    tail = args[5:] + run.consts
    return (2 if kwargs["PLAIN"] else 4), (lambda a, b, sa, sb, c_: run(a, b, sa, sb, c_, *tail)), False


def triton_supported(device) -> tuple:
    """(ok, reason): Triton on a CUDA GPU of compute capability >= 8.0, or on the CPU under
    Triton's interpreter (TRITON_INTERPRET=1 before import; for tests, slow)."""
    device = torch.device(device)
    if triton is None:
        return False, "triton is not installed"
    if device.type == "cuda":
        cap = torch.cuda.get_device_capability(device)
        if cap < (8, 0):
            return False, f"the triton kernel needs compute capability >= 8.0, this GPU is {cap[0]}.{cap[1]}"
        return True, ""
    if device.type == "cpu" and _INTERPRET:
        return True, ""
    return False, f"the triton kernel needs a CUDA GPU (or TRITON_INTERPRET=1 on the CPU), got {device.type}"


# What Triton compiles for the triton backend, for the kernel revision (``kernel_revision``): this
# file's text, read once at import (the copy a tool imports from a temporary file may be gone later).
def _own_text() -> str:
    try:
        with open(__file__, encoding="utf-8") as f:
            return f.read()
    except (OSError, NameError):  # no file: the revision's triton part is then empty
        return ""


_OWN_TEXT = _own_text()


def _names_in(node: ast.AST) -> set:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _defined(node: ast.stmt) -> list:
    """The names a top-level statement defines (functions, classes, assignments)."""
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [n.id for target in node.targets for n in ast.walk(target) if isinstance(n, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def _is_jit(node: ast.stmt) -> bool:
    """A top-level function decorated as a Triton kernel (``@triton.jit``, ``@_jit``, ...)."""
    return isinstance(node, ast.FunctionDef) and any(
        (d.id if isinstance(d, ast.Name) else d.attr if isinstance(d, ast.Attribute) else "").endswith("jit")
        for d in node.decorator_list)


def _code_text(node: ast.stmt) -> str:
    """A definition as code, without docstrings, comments or layout; a class by its fields."""
    if isinstance(node, ast.ClassDef):
        return "\n".join(ast.unparse(s) for s in node.body if isinstance(s, ast.AnnAssign))
    for inner in ast.walk(node):
        body = getattr(inner, "body", None)
        if (isinstance(inner, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            inner.body = body[1:] or [ast.Pass()]
    return ast.unparse(node)


def _triton_revision() -> str:
    """The triton backend's part of the kernel revision: this file's Triton kernels (top-level
    @jit functions), the functions that launch them (name one), and every top-level definition
    those reach, as code without docstrings, comments or layout (a class by its fields)."""
    if not _OWN_TEXT:
        return ""
    body = ast.parse(_OWN_TEXT).body
    defs = {name: node for node in body for name in _defined(node)}
    kernels = {node.name for node in body if _is_jit(node)}
    todo = [node for node in body if isinstance(node, ast.FunctionDef) and (_is_jit(node) or kernels & _names_in(node))]
    found = {}
    while todo:
        node = todo.pop()
        if id(node) in found:
            continue
        found[id(node)] = node
        reach = _names_in(ast.Module([s for s in node.body if isinstance(s, ast.AnnAssign)], [])) if isinstance(
            node, ast.ClassDef) else _names_in(node)
        todo += [defs[name] for name in reach if name in defs]
    return "\n".join(sorted(_code_text(node) for node in found.values()))


register(Backend("triton", triton_supported, _triton_run, config=TritonConfig, candidates=_triton_candidates,
                 measured=TRITON_MEASURED, fast=_triton_fast, ab_align=8, revision=_triton_revision))


# =========================================================================== backend: scaled_mm

def _blocked(sf_p: torch.Tensor) -> torch.Tensor:
    """Permuted scales -> [l, rows*k/16] blocked vectors: a view (the memory already is the
    cuBLAS blocked order per batch)."""
    return sf_p.permute(5, 2, 4, 0, 1, 3).reshape(sf_p.shape[5], -1)


def _scaled_mm_run(data, m: int, k: int, l: int, cfg=None) -> torch.Tensor:
    a, b, _, _, sfa_p, sfb_p, _ = data
    if a.dtype != _FP4:
        a, b = a.view(_FP4), b.view(_FP4)
    sa = _blocked(sfa_p)
    sb = _blocked(sfb_p)
    mm = torch._scaled_mm

    def one(i):
        return mm(a[:, :, i], b[:, :, i].transpose(0, 1), sa[i], sb[i], bias=None, out_dtype=torch.float16)[:, 0]

    if l == 1:
        return one(0).view(m, 1, 1)
    if l == 2:
        cols = (one(0), one(1))
    elif l == 4:
        cols = (one(0), one(1), one(2), one(3))
    elif l == 8:
        cols = (one(0), one(1), one(2), one(3), one(4), one(5), one(6), one(7))
    else:
        cols = []
        i = 0
        while i + 4 <= l:
            cols += (one(i), one(i + 1), one(i + 2), one(i + 3))
            i += 4
        while i < l:
            cols.append(one(i))
            i += 1
    return torch.stack(cols, dim=1).view(m, 1, l)


def scaled_mm_supported(device) -> tuple:
    """(ok, reason): FP4 ``torch._scaled_mm`` needs CUDA compute capability 10.x (Blackwell)."""
    device = torch.device(device)
    if device.type != "cuda":
        return False, f"FP4 torch._scaled_mm needs a CUDA device, got {device.type}"
    cap = torch.cuda.get_device_capability(device)
    if cap[0] != 10:
        return False, f"FP4 torch._scaled_mm needs compute capability 10.x, this GPU is {cap[0]}.{cap[1]}"
    return True, ""


register(Backend("scaled_mm", scaled_mm_supported, _scaled_mm_run))



# =========================================================================== backend: torch

# Elements of A decoded at once (bounds the fp32 temporaries to ~64 MiB).
_TORCH_CHUNK = 1 << 24
# e2m1 code -> value (bit 3 is the sign; code 8 is -0.0).
_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)

_LUT = {}


def _e2m1_lut(device) -> torch.Tensor:
    lut = _LUT.get(device)
    if lut is None:
        lut = _LUT[device] = torch.tensor(_E2M1, dtype=torch.float32, device=device)
    return lut


def _plain_from_permuted(sf_p: torch.Tensor, rows: int, k: int) -> torch.Tensor:
    """(32, 4, rows/128, 4, k/64, l) permuted scales -> [rows, k/16, l] plain (on sf_p's device)."""
    return sf_p.permute(2, 1, 0, 4, 3, 5).reshape(rows, k // 16, sf_p.shape[5])


def _torch_run(data, m: int, k: int, l: int, cfg=None) -> torch.Tensor:
    """Exact: each 16-element group's dot product is exact in fp32 (multiples of 1/4 below
    2^10), times the exact fp32 product of the two e4m3 scales; the groups sum in float64 and
    the result rounds once to fp16. Reads the permuted scales, so it stays on a's device."""
    a, b, _, _, sfa_p, sfb_p, c = data
    lut = _e2m1_lut(a.device)
    g = k // 16
    sa_all = _plain_from_permuted(sfa_p, m, k)  # [m, g, l] e4m3
    sb_all = _plain_from_permuted(sfb_p[:, :, :1], 128, k)  # row block 0 holds row 0
    a8 = a.view(torch.uint8)
    b8 = b.view(torch.uint8)
    rows = max(1, min(m, _TORCH_CHUNK // k))
    for li in range(l):
        b0 = b8[0, :, li]
        bv = torch.stack((lut[(b0 & 15).long()], lut[(b0 >> 4).long()]), dim=-1).reshape(g, 16)
        sb = sb_all[0, :, li].to(torch.float32)
        for r0 in range(0, m, rows):
            blk = a8[r0:r0 + rows, :, li]
            av = torch.stack((lut[(blk & 15).long()], lut[(blk >> 4).long()]), dim=-1).reshape(-1, g, 16)
            group = (av * bv).sum(dim=-1)  # exact
            terms = group * (sa_all[r0:r0 + rows, :, li].to(torch.float32) * sb)  # exact
            c[r0:r0 + rows, 0, li] = terms.double().sum(dim=-1).to(torch.float16)
    return c


def torch_supported(device) -> tuple:
    return True, ""


register(Backend("torch", torch_supported, _torch_run, races=False, exact=True))



# =========================================================================== shared machinery
#
# Written once over the registry: nothing below names a backend.

# --------------------------------------------------------------------------- validation

def _permuted_strides(rb: int, kb: int, l: int) -> tuple:
    """Strides of a (32, 4, rb, 4, kb, l) view of contiguous (l, rb, kb, 32, 4, 4) memory."""
    return (16, 4, kb * 512, 1, 512, rb * kb * 512)


def check_inputs(data) -> tuple:
    """Validation of what every backend needs, on the first call with a layout (and on any
    call the fast path does not recognise); returns (m, k, l). Raises TypeError/ValueError
    naming the constraint that fails: dtypes, shapes and devices of all seven tensors, the
    plain scales included even where the backend reads the permuted ones. What a kernel
    additionally needs of the memory layout is checked by ``_layout_problem``."""
    if not isinstance(data, (tuple, list)) or len(data) != 7:
        got = f"{len(data)} items" if isinstance(data, (tuple, list)) else type(data).__name__
        raise TypeError(f"data must be the tuple (a, b, sfa, sfb, sfa_permuted, sfb_permuted, c), got {got}")
    if not all(isinstance(x, torch.Tensor) for x in data):
        raise TypeError("data must hold 7 torch tensors (a, b, sfa, sfb, sfa_permuted, sfb_permuted, c)")
    a, b, sfa, sfb, sfa_p, sfb_p, c = data
    if a.dtype != _FP4 and a.dtype != torch.uint8:
        raise TypeError(f"a must be float4_e2m1fn_x2 (or its uint8 bytes), got {a.dtype}")
    if b.dtype != a.dtype:
        raise TypeError(f"b must have a's dtype {a.dtype}, got {b.dtype}")
    if sfa_p.dtype != _E4M3 or sfb_p.dtype != _E4M3:
        raise TypeError(f"sfa_permuted/sfb_permuted must be float8_e4m3fn, got {sfa_p.dtype}/{sfb_p.dtype}")
    if c.dtype != torch.float16:
        raise TypeError(f"c must be float16, got {c.dtype}")
    if a.dim() != 3 or b.dim() != 3 or c.dim() != 3:
        raise ValueError(f"a, b, c must be 3-D, got {a.dim()}-D, {b.dim()}-D, {c.dim()}-D")
    m, kh, l = a.shape
    k = 2 * kh
    if m % 128 or m == 0:
        raise ValueError(f"M % 128 == 0 required (M > 0), got M={m}")
    if k % 64 or k == 0:
        raise ValueError(f"K % 64 == 0 required (K > 0), got K={k}")
    if l < 1:
        raise ValueError(f"L >= 1 required, got L={l}")
    nb = b.shape[0]
    if nb % 128 or b.shape[1] != kh or b.shape[2] != l:
        raise ValueError(f"b must be [128*j, K/2, L] = [*, {kh}, {l}], got {tuple(b.shape)}")
    if tuple(c.shape) != (m, 1, l):
        raise ValueError(f"c must be [M, 1, L] = {(m, 1, l)}, got {tuple(c.shape)}")
    if a.stride(1) != 1 or b.stride(1) != 1:
        raise ValueError("a and b must be K-major (stride 1 along K/2)")
    kb = k // 64
    if tuple(sfa_p.shape) != (32, 4, m // 128, 4, kb, l) or sfa_p.stride() != _permuted_strides(m // 128, kb, l):
        raise ValueError(f"sfa_permuted must be a (32, 4, {m // 128}, 4, {kb}, {l}) view of contiguous "
                         f"(L, M/128, K/64, 32, 4, 4) memory; got shape {tuple(sfa_p.shape)} strides {sfa_p.stride()}")
    if tuple(sfb_p.shape) != (32, 4, nb // 128, 4, kb, l) or sfb_p.stride() != _permuted_strides(nb // 128, kb, l):
        raise ValueError(f"sfb_permuted must be a (32, 4, {nb // 128}, 4, {kb}, {l}) view of contiguous "
                         f"(L, N/128, K/64, 32, 4, 4) memory; got shape {tuple(sfb_p.shape)} strides {sfb_p.stride()}")
    dev = a.device
    if b.device != dev or sfa_p.device != dev or sfb_p.device != dev or c.device != dev:
        raise ValueError(f"a, b, sfa_permuted, sfb_permuted, c must share one device; got {a.device}, {b.device}, "
                         f"{sfa_p.device}, {sfb_p.device}, {c.device}")
    # The plain scales: checked here (first call with a layout only; the per-call fast path
    # compares just what its launch reads), whether or not the backend reads them.
    for sf, what, rows in ((sfa, "sfa", m), (sfb, "sfb", nb)):
        if sf.dtype != _E4M3:
            raise TypeError(f"{what} must be float8_e4m3fn, got {sf.dtype}")
        if tuple(sf.shape) != (rows, k // 16, l):
            raise ValueError(f"{what} must be [{'M' if what == 'sfa' else 'N'}, K/16, L] = {(rows, k // 16, l)}, "
                             f"got {tuple(sf.shape)}")
        if sf.device != dev and sf.device.type != "cpu":
            raise ValueError(f"{what} must be on a's device {dev} (or the CPU), got {sf.device}")
    return m, k, l


def _plain_scales(data, k: int, align: int) -> bool:
    """Whether a kernel can read the plain sfa/sfb: on a's device, e4m3, [rows, K/16, L] with
    unit stride along K/16, and pointer, row and batch strides multiples of ``align`` bytes.
    Otherwise the kernels read the permuted copies (e.g. plain scales built on the CPU)."""
    a, b, sfa, sfb = data[:4]
    for sf, rows in ((sfa, a.shape[0]), (sfb, b.shape[0])):
        if (sf.device != a.device or sf.dtype != _E4M3 or sf.dim() != 3
                or tuple(sf.shape) != (rows, k // 16, a.shape[2]) or sf.stride(1) != 1
                or (sf.data_ptr() | sf.stride(0) | (sf.stride(2) if sf.shape[2] > 1 else 0)) % align):
            return False
    return True


def _layout_problem(name: str, data) -> str:
    """'' when backend ``name`` can read this memory layout, else the constraint it breaks."""
    need = BACKENDS[name].ab_align
    if not need:
        return ""
    a, b = data[0], data[1]
    for t, what in ((a, "a"), (b, "b")):
        if t.data_ptr() % need:
            return (f"the {name} backend needs {what}'s data pointer {need}-byte aligned "
                    f"(it is {t.data_ptr() % need} bytes past)")
        batch = t.stride(2) if t.shape[2] > 1 else 0  # a size-1 dimension's stride is never used
        if t.stride(0) % need or batch % need:
            return (f"the {name} backend needs {what}'s row and batch strides to be multiples of {need} bytes; "
                    f"got {t.stride(0)} and {t.stride(2)}")
    return ""


# --------------------------------------------------------------------------- configurations

# The shapes whose candidate lists are kept (the benchmark shapes); other shapes tune over
# the default family.
TUNED_SHAPES = ((7168, 16384, 1), (4096, 7168, 8), (7168, 2048, 4))
# The official test shapes (the server's task.yml), whose configs the compile checks build
_SMALL_SHAPES = ((128, 256, 1), (128, 1536, 1), (128, 3072, 1), (256, 7168, 1), (2432, 4608, 2), (384, 7168, 2),
                 (512, 512, 2), (512, 4096, 2), (512, 1536, 2))
# Shapes moving fewer bytes than this are not tuned (the default config; timing candidates
# would cost more than it could save). Below it the cuda backend's rule was within 2% of the best
# of 1503 configs on 15 shapes (0-0.1 us a call on the H100; benchmarks/RESULTS.md, "Small
# shapes"), while tuning costs about 1.3 s on the first call with a shape (six candidates at
# about 0.19 s of NVRTC each, plus their timed calls; benchmarks/history/2026-11-25-h100-fc2fcbc-21e5205.md).
_TUNE_MIN_BYTES = 16 << 20
_CHOSEN = {}  # (device, backend, m, k, l) -> config picked in this process


def _pinned_configs() -> dict:
    """NVFP4_GEMV_CONFIG, e.g. "cuda=lpr=32,rpt=2,u=1,warps=1;triton=8,128,2,1": {backend:
    config}, each used for every shape (for benchmarking one config). Raises ValueError (one
    line) for a part that is not a backend with configs, or a config its kernel cannot build."""
    spec = os.environ.get(ENV_CONFIG, "")
    names = [n for n, b in BACKENDS.items() if b.config is not None]
    out = {}
    for part in (p.strip() for p in spec.split(";")):
        if not part:
            continue
        name, sep, fields = part.partition("=")
        name = name.strip()
        if not sep or name not in names:
            raise ValueError(f"{ENV_CONFIG}: {part!r} is not " + " or ".join(f"{n}=..." for n in names)
                             + " (fields by name or by position, e.g. \"cuda=lpr=32,rpt=2,u=1,warps=1;"
                             "triton=16,64,2,1\")")
        try:
            cfg = BACKENDS[name].config.parse(fields)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{ENV_CONFIG}: {part!r}: {exc}") from None
        problem = cfg.problem()
        if problem:
            raise ValueError(f"{ENV_CONFIG}: {part!r}: {problem}")
        out[name] = cfg
    return out


def _pinned_config(name: str):
    """The config NVFP4_GEMV_CONFIG pins for backend ``name``, or None (``_pinned_configs``)."""
    return _pinned_configs().get(name)


_TUNE_MODES = ("auto", "force", "off")


def _tune_mode() -> str:
    """NVFP4_GEMV_TUNE: auto (default), force or off; anything else raises ValueError."""
    mode = os.environ.get(ENV_TUNE, "auto").strip().lower() or "auto"
    if mode not in _TUNE_MODES:
        raise ValueError(f"{ENV_TUNE}={mode!r}: choose one of {', '.join(_TUNE_MODES)}")
    return mode


def _gemv_bytes(m: int, k: int, l: int) -> int:
    return m * k // 2 * l + m * k // 16 * l + 2 * m * l


def tuned_shape(m: int, k: int, l: int) -> bool:
    """Whether a first call with this shape, on a GPU whose table does not name it, times the
    candidates (NVFP4_GEMV_TUNE=auto): a shape of at least _TUNE_MIN_BYTES; below it the default
    config alone runs."""
    return _gemv_bytes(m, k, l) >= _TUNE_MIN_BYTES


def config_for(name: str, data, m: int, k: int, l: int):
    """The config of backend ``name`` for this shape: pinned by NVFP4_GEMV_CONFIG, else the
    one measured for this GPU model (unless its entry is stale: ``_table_entry``), else (large
    shapes on a GPU) the fastest of the
    candidates timed now on these inputs, else the default; cached for the process.
    NVFP4_GEMV_TUNE=force times the candidates even where the table knows the GPU (to compare
    the tuner's pick with the table's), =off never times them. None for a backend without configs."""
    backend = BACKENDS[name]
    if backend.config is None:
        return None
    pinned = _pinned_config(name)
    if pinned is not None:
        problem = pinned.shape_problem(m, k)
        if problem:
            raise ValueError(f"{ENV_CONFIG}: {problem}")
        return pinned
    dev = data[0].device
    key = (dev, name, m, k, l)
    cfg = _CHOSEN.get(key)
    if cfg is None:
        cap = torch.cuda.get_device_capability(dev) if dev.type == "cuda" else (0, 0)
        cands = backend.candidates(m, k, l, cap)
        cfg = cands[0]
        if dev.type == "cuda":
            tune = "off" if profiling() else _tune_mode()
            known = _table_entry(name, torch.cuda.get_device_name(dev), (m, k, l))
            if known is not None and tune != "force":
                cfg = known
            elif len(cands) > 1 and tuned_shape(m, k, l) and tune != "off":
                cfg = _tune(name, data, m, k, l, cands)
        _CHOSEN[key] = cfg
    return cfg


# --------------------------------------------------------------------------- the kernel revision
#
# A table entry says which config was fastest for the kernel it was measured with. The kernel
# revision names that kernel: a hash of what each backend's compiler sees (its ``revision()``:
# for cuda the kernel's tokens and the launch code's output, for triton the kernels' code), so
# that comments and layout leave it as it is and any other edit changes it. Two revisions whose
# compiled code is the same for a backend (benchmarks/sass_dump.py: every config both compile,
# every target, the same instructions) are recorded in kernels/same_sass.json, and an entry of
# either counts for the other.

_REVISION = {}  # "current" -> this file's kernel revision (computed on first use)
_STALE_SAID = []  # the warning about stale entries, once said


def kernel_revision() -> str:
    """This file's kernel revision: the first 12 hex digits of the sha256 of every backend's
    ``revision()`` text (what its compiler sees, comments and layout left out)."""
    if "current" not in _REVISION:
        digest = hashlib.sha256()
        for name, backend in sorted(BACKENDS.items()):
            if backend.revision is not None:
                digest.update(f"{name}\n{backend.revision()}\n\0".encode())
        _REVISION["current"] = digest.hexdigest()[:12]
    return _REVISION["current"]


def same_sass(backend: str, revision: str, current: str | None = None) -> bool:
    """Whether kernels of ``revision`` compile to the same code as those of ``current`` (default:
    this file's) for ``backend``: the same revision, or one linked to it by a chain of the proofs
    of kernels/same_sass.json."""
    current = kernel_revision() if current is None else current
    links = {}
    for proof in json.loads(_SAME_SASS_JSON).get("proofs", []):
        if proof.get("backend") == backend:
            links.setdefault(proof["old"], set()).add(proof["new"])
            links.setdefault(proof["new"], set()).add(proof["old"])
    seen, todo = {revision}, [revision]
    while todo:
        for nxt in links.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return current in seen


def stale_entries() -> list:
    """[(backend, GPU model, (m, k, l), revision)] of the table entries measured with a kernel
    revision that is neither this one nor made equal to it by a proof (``same_sass``): what
    ``config_for`` ignores."""
    return [(name, model, shape, info.get("kernel")) for name, model, shape, _, info in table_entries()
            if not same_sass(name, info.get("kernel") or "")]


def _table_entry(name: str, model: str, shape: tuple):
    """The config backend ``name``'s table holds for ``model`` and ``shape``, or None: none there,
    or the entry is stale (measured with another kernel; said once per process on stderr, and the
    shape is treated as untabled)."""
    cfg = (BACKENDS[name].measured or {}).get(model, {}).get(shape)
    if cfg is None:
        return None
    revision = _ENTRIES.get((name, model, shape), {}).get("kernel") or ""
    if same_sass(name, revision):
        return cfg
    if not _STALE_SAID:
        stale = stale_entries()
        _STALE_SAID.append(stale)
        print(f"nvfp4_gemv: {len(stale)} table entr{'y' if len(stale) == 1 else 'ies'} measured with another kernel "
              f"than this one (revision {kernel_revision()}) and no proof that it compiles alike (kernels/"
              f"same_sass.json) ignored, the shapes untabled: "
              + ", ".join(f"{b} {mdl} {'x'.join(map(str, s))} (kernel {r or 'not named'})" for b, mdl, s, r in stale),
              file=sys.stderr)
    return None


# --------------------------------------------------------------------------- verified first use
#
# Every candidate that auto dispatch or the tuner would pick by its time (a backend in the race,
# a config in the tuner) is first run once on the inputs of the first call with a shape, with c
# poisoned, and its output compared with the exact torch backend's on the same inputs (computed
# once per first call, into a scratch tensor, and shared by all its candidates). A wrong one is
# dropped for the process with one line on stderr; under a forced backend (what one benchmarks
# or debugs) only with NVFP4_GEMV_VERIFY=1, which raises instead. This happens on the first call
# with a shape only (the harness's untimed correctness run), never on the per-call fast path.

# The server's checker: |out - exact| <= atol + rtol * |exact|, NaN only where the exact answer is
# NaN, infinities only where it has the same one (reference.py's check_implementation).
_VERIFY_RTOL = _VERIFY_ATOL = 1e-3
_EXACT = {}  # id(data) -> [data, its exact answer or None]: the first calls under way
_WRONG = {}  # (GPU model, backend, config) -> why it was dropped (wrong output; skipped for the process)
_VERIFIED = set()  # first-call keys of forced backends checked under NVFP4_GEMV_VERIFY=1


def profiling() -> bool:
    """Whether this process is being profiled the way kernelbot profiles (``POPCORN_NCU`` set and
    not "0"): then a first call launches only the kernel the submission keeps (no race, no tuning,
    no verification: the table's config or the default, the first backend of the registry that can
    run), so that Nsight Compute's first kernels are the ones every later call launches."""
    return os.environ.get(ENV_PROFILE, "").strip() not in ("", "0")


_KERNEL_CONFIGS = {}  # kernel name as the profiler prints it -> its config (one line), for each kernel built


def profile_configs() -> dict:
    """{kernel name: config} of every kernel this process has built or launched (cuda: one name per
    config; triton: its kernel and the config of its latest launch): what a profile report names
    beside each kernel. Launches nothing."""
    return dict(_KERNEL_CONFIGS)


def _verify_policy() -> str:
    """What a first call does with a candidate's output: "drop" a wrong one (auto), "raise"
    (a forced backend with NVFP4_GEMV_VERIFY=1), or "" (no check)."""
    want = os.environ.get(ENV_VERIFY, "").strip()
    if want not in ("", "0", "1"):
        raise ValueError(f"{ENV_VERIFY}={want!r}: choose 1 (forced backends too), 0 (never), or leave it unset "
                         "(auto's candidates only)")
    if want == "0" or profiling():
        return ""
    if (os.environ.get(ENV_BACKEND, "auto").strip().lower() or "auto") == "auto":
        return "drop"
    return "raise" if want == "1" else ""


@contextlib.contextmanager
def _first_call(data):
    """Keeps ``data``'s exact answer for every candidate checked inside (nested uses share it)."""
    if id(data) in _EXACT:
        yield
        return
    _EXACT[id(data)] = [data, None]
    try:
        yield
    finally:
        del _EXACT[id(data)]


def _exact(data, m: int, k: int, l: int) -> torch.Tensor:
    """The exact answer of ``data`` (the exact backend, into a scratch c)."""
    box = _EXACT.get(id(data)) or [data, None]
    if box[1] is None:
        box[1] = _exact_backend().run(tuple(data[:6]) + (torch.empty_like(data[6]),), m, k, l)
    return box[1]


def _mismatch(out, exact: torch.Tensor) -> str:
    """'' when ``out`` passes the server's check against ``exact``, else where it first fails.
    Compared on the device; only the first bad element comes to the host."""
    if not isinstance(out, torch.Tensor) or out.shape != exact.shape or out.dtype != exact.dtype:
        got = f"{tuple(out.shape)} {out.dtype}" if isinstance(out, torch.Tensor) else type(out).__name__
        return f"output {got}, expected {tuple(exact.shape)} {exact.dtype}"
    r, e = out.detach().to(exact.device, torch.float64), exact.to(torch.float64)
    bad = (r - e).abs() > _VERIFY_ATOL + _VERIFY_RTOL * e.abs()
    bad |= r.isnan() ^ e.isnan()
    bad |= (r.isposinf() ^ e.isposinf()) | (r.isneginf() ^ e.isneginf())
    if not bool(bad.any()):
        return ""
    i = tuple(int(x) for x in bad.nonzero()[0])
    return f"c[{', '.join(map(str, i))}] = {float(r[i])!r}, exact {float(e[i])!r}"


def _gpu_model(device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else str(device)


def _verify(name: str, cfg, out, data, m: int, k: int, l: int, policy: str) -> bool:
    """Whether candidate (``name``, ``cfg``), whose output on ``data`` is ``out``, is right.
    A wrong one is remembered in _WRONG and said once on stderr ("drop"), or raises ("raise")."""
    where = _mismatch(out, _exact(data, m, k, l))
    if not where:
        return True
    gpu = _gpu_model(data[0].device)
    what = (f"the {name} backend (config {cfg if cfg is not None else 'none'}) gave a wrong result on {gpu} "
            f"for {m}x{k}x{l}: {where} (rtol = atol = {_VERIFY_RTOL:g})")
    if policy == "raise":
        raise RuntimeError(f"nvfp4_gemv: {what} [{ENV_VERIFY}=1]")
    if (gpu, name, cfg) not in _WRONG:
        _WRONG[gpu, name, cfg] = what
        print(f"nvfp4_gemv: {what}; dropped for this process", file=sys.stderr)
    return False


def _known_wrong(name: str, cfg, device) -> bool:
    return (_gpu_model(device), name, cfg) in _WRONG


def _run_first(name: str, data, m: int, k: int, l: int):
    """The first call's run of backend ``name`` (picked or forced). A forced one is checked
    once per shape and layout when NVFP4_GEMV_VERIFY=1 (raises when wrong)."""
    run = BACKENDS[name].run
    if BACKENDS[name].exact or not os.environ.get(ENV_VERIFY) or _verify_policy() != "raise":
        return run(data, m, k, l)
    key = _fastest_key(data, m, k, l) + (name,)
    if key in _VERIFIED:
        return run(data, m, k, l)
    with _first_call(data):
        data[6].fill_(float("nan"))
        out = run(data, m, k, l)
        _verify(name, config_for(name, data, m, k, l), out, data, m, k, l, "raise")
    _VERIFIED.add(key)
    return out


def _tune(name: str, data, m: int, k: int, l: int, cands: list):
    """The fastest of ``cands`` on ``data``: each built and run once (and its output checked
    against the exact answer, see _verify), then timed L2-cold and interleaved (_cold_times);
    candidates that fail or are wrong are skipped."""
    run = BACKENDS[name].run
    policy = _verify_policy()
    ok, first_error = [], None
    with _first_call(data):
        for cfg in cands:
            if policy and _known_wrong(name, cfg, data[0].device):
                continue
            try:
                if policy:
                    data[6].fill_(float("nan"))  # unwritten elements fail the check
                out = run(data, m, k, l, cfg)
            except Exception as exc:  # noqa: BLE001 - a config that fails is not a candidate
                first_error = first_error or exc
                continue
            if not policy or _verify(name, cfg, out, data, m, k, l, policy):
                ok.append(cfg)
    if not ok:
        raise first_error or RuntimeError(f"no config of the {name} backend gave the right answer for "
                                          f"{m}x{k}x{l} here (the lines above say where each went wrong)")
    times = _cold_times([lambda c=cfg: run(data, m, k, l, c) for cfg in ok], data[0].device)
    return ok[times.index(min(times))]


_FLUSH = {}  # device -> scratch buffer of twice the L2 (zeroed between timed calls)

# Timed calls per candidate in a race, interleaved, each L2-cold. With 5 back-to-back calls on
# one input (the first version) an H200 ranked configs by their L2-warm time; with 7 cold ones
# the tuner still kept configs up to 8% slower than the table's (benchmarks/NOTES.md, "Tuner").
# 21 calls cost well under 10 ms of GPU time per race, next to ~0.2 s of compiling per config.
_RACE_REPS = 21
# GPU cycles the device is kept busy (a spin, ~100 us at 2 GHz) after each flush, so that the host
# part of the call being timed (Python, the launch) is hidden behind it and the events time the
# device. On an H100, with the flush alone a race timed the host path, not the kernels, on
# 7168x16384x1 and 7168x2048x4; 4096x7168x8 was the same either way (benchmarks/NOTES.md, "Tuner").
_HOLD_CYCLES = 200_000


def _cold_times(fns: list, device, reps: int = _RACE_REPS) -> list:
    """Median device milliseconds of each of ``fns``, called in turn ``reps`` times, each call
    after a write of twice the L2 (so it starts L2-cold, as on the leaderboard) and a spin that
    hides its host time, between its own pair of events; one synchronisation at the end."""
    flush = _FLUSH.get(device)
    if flush is None:
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 64 << 20) or (64 << 20)
        flush = _FLUSH[device] = torch.empty(2 * l2 // 4, dtype=torch.int32, device=device)
    events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
              for _ in fns]
    hold = getattr(torch.cuda, "_sleep", None)
    for r in range(reps):
        for fn, ev in zip(fns, events, strict=True):
            flush.zero_()
            if hold is not None:
                hold(_HOLD_CYCLES)
            ev[r][0].record()
            fn()
            ev[r][1].record()
    events[-1][-1][1].synchronize()
    return [sorted(s.elapsed_time(e) for s, e in ev)[reps // 2] for ev in events]


# --------------------------------------------------------------------------- dispatch

_BROKEN = {}  # backend -> why it failed to build here (auto skips it for the process)
_FASTEST = {}  # (device, a's strides, plain scales on a's device, m, k, l) -> backend measured fastest


def _exact_backend() -> Backend:
    """The backend whose output is the exact answer (the reference of first-use verification,
    auto's choice off the GPU and its fallback)."""
    return next(b for b in BACKENDS.values() if b.exact)


def backend_support(device) -> dict:
    """{backend: (ok, reason)} for this device; never raises for an unsupported backend."""
    return {name: b.supported(device) for name, b in BACKENDS.items()}


def select_backend(device) -> str:
    """The backend ``custom_kernel`` uses on ``device`` under the current environment:
    a backend name, or "fastest" (auto on a GPU: measured per shape on first use)."""
    want = os.environ.get(ENV_BACKEND, "auto").strip().lower() or "auto"
    if want != "auto" and want not in BACKENDS:
        raise ValueError(f"{ENV_BACKEND}={want!r} is not a backend: choose one of {', '.join(('auto', *BACKENDS))}")
    _pinned_configs(), _tune_mode()  # the other settings, checked before any work (ValueError)
    device = torch.device(device)
    if want == "auto":
        return "fastest" if device.type == "cuda" else _exact_backend().name
    ok, why = BACKENDS[want].supported(device)
    if not ok:
        raise RuntimeError(f"{ENV_BACKEND}={want} cannot run on {device}: {why}")
    return want


def _warm_backend(name: str, data, m: int, k: int, l: int):
    """One call that builds, tunes and warms the backend for this shape (raises if it fails);
    returns its output."""
    return BACKENDS[name].run(data, m, k, l)


def _race(names: list, data, m: int, k: int, l: int) -> dict:
    """{backend: median device ms} of warmed backends, L2-cold and interleaved."""
    times = _cold_times([lambda n=n: BACKENDS[n].run(data, m, k, l) for n in names], data[0].device)
    return dict(zip(names, times, strict=True))


def _fastest_key(data, m, k, l) -> tuple:
    a = data[0]
    return a.device, a.stride(), data[2].device == a.device, m, k, l  # (m, k, l) last: eval.py reads them


def _fastest(data, m: int, k: int, l: int) -> str:
    """The fastest racing backend for this shape on this GPU, timed once on the first call
    with the shape and cached for the process. A backend that cannot run here, cannot read
    this layout, fails (a build error: one warning, then skipped for the process) or gives a
    wrong answer on these inputs (_verify) is no candidate; with none left, the exact backend."""
    key = _fastest_key(data, m, k, l)
    name = _FASTEST.get(key)
    if name is None and profiling():  # no race: the first backend that can run, as it will be kept
        name = _FASTEST[key] = next((cand for cand, backend in BACKENDS.items() if backend.races
                                     and backend.supported(data[0].device)[0] and not _layout_problem(cand, data)),
                                    _exact_backend().name)
    if name is None:
        policy = _verify_policy()
        ready = []
        with _first_call(data):
            for cand, backend in list(BACKENDS.items()):
                if not backend.races or not backend.supported(data[0].device)[0] or _layout_problem(cand, data):
                    continue
                try:
                    if policy:
                        data[6].fill_(float("nan"))  # unwritten elements fail the check
                    out = _warm_backend(cand, data, m, k, l)
                    cfg = config_for(cand, data, m, k, l) if policy else None  # may tune: inside the try
                except Exception as exc:  # noqa: BLE001 - skipped, said once
                    if cand not in _BROKEN:
                        _BROKEN[cand] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                        print(f"nvfp4_gemv: the {cand} backend failed here and is skipped: {_BROKEN[cand]}",
                              file=sys.stderr)
                    continue
                if not policy or _verify(cand, cfg, out, data, m, k, l, policy):
                    ready.append(cand)
        times = _race(ready, data, m, k, l) if len(ready) > 1 else {n: 0.0 for n in ready}
        name = _FASTEST[key] = min(times, key=times.get) if times else _exact_backend().name
    return name


def run_backend(name: str, data, cfg=None) -> torch.Tensor:
    """Run one backend on ``data`` (validated), with ``cfg`` (its config type, or the
    positional or text form) or its chosen config."""
    m, k, l = check_inputs(data)
    problem = _layout_problem(name, data)
    if problem:
        raise ValueError(problem)
    backend = BACKENDS[name]
    if cfg is not None and backend.config is not None:
        cfg = backend.config.of(cfg)
    return backend.run(data, m, k, l, cfg)


def _first_call_path(data):
    """A call the fast path does not recognise: the checks, the backend (raced on first use of
    a shape under auto), its first run (verified where asked), and the fast-path entry for
    later calls with this layout (one GPU only: the entry does not switch devices)."""
    m, k, l = check_inputs(data)
    name = select_backend(data[0].device)
    if name == "fastest":
        name = _fastest(data, m, k, l)
    else:
        problem = _layout_problem(name, data)
        if problem:
            raise ValueError(problem)
    out = _run_first(name, data, m, k, l)
    a = data[0]
    key = (a.shape, a.stride(), a.dtype, a.device, os.environ.get(ENV_BACKEND))
    if a.device.type != "cuda" or torch.cuda.device_count() == 1:
        backend = BACKENDS[name]
        fast = backend.fast(data, m, k, l) if backend.fast is not None else None
        if fast:
            scales, launch, by_pointers = fast
            b, sa, sb, c = data[1], data[scales], data[scales + 1], data[6]
            _FAST[key] = (scales, _layout(b, sa, sb, c),
                          (a.data_ptr() | b.data_ptr() | sa.data_ptr() | sb.data_ptr() | c.data_ptr()) & 31,
                          launch, by_pointers)
        else:
            _FAST[key] = (0, _layout(*data[1:]), (a.data_ptr() | data[1].data_ptr()) & 31,
                          lambda d, f=backend.run, shape=(m, k, l): f(d, *shape), False)
    return out
