"""The cuda kernel compiled without a GPU: ``python3 eval.py compile [SUBMISSION] [--arch ARCH ...] [--all]
[--shapes tests|benchmarks|all|FILE]``.

What it compiles. With no SUBMISSION: kernels/nvfp4_gemv.cu as ``python3 eval.py bundle`` would
copy it into the kit's submission.py (the other bundled files too: kernels/tables.json says which
configs the GPUs run), with a note where submission.py's own copy differs. Given a file: the
CUDA source that file carries, the kit's submission.py or a file built like it (``cuda_kernel``,
``cuda_compile``, ``CudaConfig``, ``BACKENDS``), or one built like examples/starter_cuda.py
(``compile_cubin(cfg, target)``, ``CONFIGS``, ``DEFAULT``). A CuTe DSL file (``import cutlass``)
goes to cute_check.py, as before (its flags: ``--arch``, ``--shapes``).

Which kernels. NVRTC for sm_90a and sm_100a (``--arch``, repeatable, for others: sm_120a,
sm_103a, ...), each kernel as the kit's build makes it (``cuda_kernel`` then ``cuda_compile``,
the options of ``cuda_options``). By default what those GPUs may launch on the official test and
benchmark shapes (``--shapes`` narrows it): on sm_100a, as on any target of compute capability 10
or later, every candidate the tuner times where it times them (``tuned_shape``; no table names
the B200, so its first call races them all and drops a candidate that fails to build without a
word), the default config elsewhere; on sm_90a the H100 and H200 table entries and the defaults;
whole steps or a masked tail as the shape needs, the plain scales (the server's layout). ``--all``:
every variant of ``cuda_compile_variants`` (both scale layouts and step kinds). The starter: the
config each shape launches. Every kernel of the set is compiled, so an error that only one
target's ``#if`` or one candidate's template reaches is found as surely as a syntax error.

What it says. The first answer (the first error, or "compiles") on stderr once the first kernel of
each target has compiled; then either NVRTC's own lines of the first kernel that failed (they name
the .cu line), its target and config, the others that failed, exit 1; or one table: per kernel
its target, config, registers, spilled bytes (the stack frame), static shared memory and, on
Blackwell targets, the K loop's SASS per 16 B of a and lane (benchmarks/sass_count.py's measure:
the largest backward-branch body that loads from global memory, over the chunks a lane reads
per step), each beside the same figure for the last commit's kernel (``git show HEAD:...``,
built with HEAD's own submission.py; ``--no-head``: none) as a difference, and a line that sums
the differences up.
Registers, stack and shared memory come from the cubin itself (``cubin_usages``: what ``cuobjdump
-res-usage`` prints, read without it), the SASS from ``cuobjdump -sass`` (Triton's wheel ships
cuobjdump). The first kernel of each target is compiled alone (the first answer); the rest of a
target's go up to BATCH to an NVRTC program (the kernel once, each wrapper after it) read with one
cuobjdump call (``build_many``; a bulk-copy ring alone): each kernel's figures are what it gives
compiled alone, as the backend builds it (the same registers, stack, shared memory and SASS text
for every kernel of ``cuda_compile_variants`` on sm_90a, sm_100a and sm_120a, 2026-12-07), and a
program that does not compile is compiled again kernel by kernel for each kernel's own log. No
projected time: these are facts of the compiler.

The cache. Each kernel's result (its figures, or NVRTC's log) is kept in ``cache_dir()``
($NVFP4_GEMV_CACHE, else $XDG_CACHE_HOME or ~/.cache, then nvfp4-gemv-kit/cuda-check), keyed by
the source NVRTC compiles (the kernel and its wrapper: the config), the target, the options and
the NVRTC version: a repeat is fast, and the first run after an edit compiles for real.

The same check elsewhere: ``python3 eval.py bundle`` runs ``--status`` on the text it is about to
write and refuses a kernel that does not compile; eval.py's human mode on a machine without a GPU
names the outcome in its header (``header_check``: this file run as ``--status FILE`` in a process
of its own, eval.py's staying torch-free; cached per file hash, ``status_cached``). The tools of
benchmarks/ that compile and read the cuda kernel (sass_count.py, sass_dump.py, inflight.py,
compile_table.py) use its pieces: ``cuobjdump``, ``dump``, ``resource_usage``, ``cubin_usage``,
``cubin_usages``, ``function_sass``, ``k_loop``, ``opcode``, ``sass_per_16b``, and sass_count.py
``built_together`` (each target's configs as one program).

Exit status: 0 every kernel compiles, 1 one does not (or the source is one bundle refuses to
copy), 2 bad arguments, a file with no CUDA kernel this check knows, or no NVRTC here.

Public surface: ``main``, ``Variant``, ``KitKernels``, ``StarterKernels``, ``kernels_of``, ``KIT_NEEDS``,
``launch_set``, ``build``, ``build_many``, ``built_together``, ``compile_set``, ``BATCH``, ``first_error``,
``failure_report``, ``table``, ``differences``, ``capability``, ``cache_dir``, ``carries_cuda``, ``status_cached``,
``header_check``, ``HeaderCheck``, ``status_line``, ``cuobjdump``, ``dump``, ``resource_usage``,
``cubin_usage``, ``cubin_usages``, ``function_sass``, ``k_loop``, ``opcode``, ``sass_per_16b``,
``DEFAULT_ARCHS``, ``ENV_CACHE``, ``EXIT_USAGE``.
"""

from __future__ import annotations

import argparse
import atexit
import ctypes
import hashlib
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent
KERNEL = "kernels/nvfp4_gemv.cu"
COMMAND = "python3 eval.py compile"
DEFAULT_ARCHS = ("sm_90a", "sm_100a")
DEFAULT_SHAPES = "all"  # the official benchmark and test shapes (harness.SHAPE_SETS)
ARCH_RE = re.compile(r"^sm_(\d{2,3})[af]?$")
ENV_CACHE = "NVFP4_GEMV_CACHE"
CHECK_VERSION = 2  # what a cache entry holds; a new value leaves the old entries unread
STATUS_TIMEOUT_S = 900  # eval.py and bundle wait this long for --status (the default set: ~10 s measured)
MAX_LOG_LINES = 30  # of NVRTC's log printed for the first failure
CUDA_DEF = re.compile(r"^def (cuda_kernel|compile_cubin)\(", re.MULTILINE)
EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


class CheckError(Exception):
    """The check cannot run (message: one line; ``code``: the exit status)."""

    def __init__(self, message: str, code: int = EXIT_USAGE):
        super().__init__(message)
        self.code = code


# --------------------------------------------------------------------------- SASS: cuobjdump and the K loop

_INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_TARGET = re.compile(r"0x([0-9a-f]+)")
_PREDICATE = re.compile(r"^@!?U?P[T0-9]+\s+")
_USAGE = re.compile(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)")


def cuobjdump() -> str:
    """The cuobjdump of Triton's wheel (or on PATH); '' where there is none."""
    import shutil
    try:
        import triton
        path = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        if path.exists():
            return str(path)
    except ImportError:
        pass
    return shutil.which("cuobjdump") or ""


def dump(cubin: bytes, *flags: str) -> str:
    """``cuobjdump FLAGS`` of a cubin (e.g. "-sass", "-res-usage"); raises CalledProcessError."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(cubin)
        return subprocess.run([cuobjdump(), *flags, str(path)], capture_output=True, text=True, check=True).stdout


def resource_usage(text: str) -> dict:
    """{"registers", "stack", "shared", "local"} of the first function of ``cuobjdump -res-usage``'s
    text (bytes per thread for stack and local: the stack frame holds spilled registers; static
    shared bytes per block); {} where it names none."""
    hit = _USAGE.search(text)
    return dict(zip(("registers", "stack", "shared", "local"), map(int, hit.groups()), strict=True)) if hit else {}


# The cubin's own record of a kernel's resources (the ELF NVRTC writes): the section ``.nv.info``
# holds, per kernel symbol, attributes of (format, attribute) byte pairs; the ones read here are
# 4-byte-sized (format 0x04) pairs of (symbol index, value): 0x2f the register count, 0x11 the
# stack frame's bytes per thread. Static shared memory is the size of ``.nv.shared.<kernel>``.
# Equal to what ``cuobjdump -res-usage`` prints as REG, STACK and SHARED on every kernel compared
# (2026-12-07, NVRTC 13.0, the cuobjdump of Triton 3.9.0's wheel: 260 kernels of
# ``cuda_compile_variants`` for sm_90a, sm_100a and sm_120a, the 89 of ``python3 eval.py compile
# --arch sm_90a --arch sm_100a --arch sm_120a``, the starter's 6; tests/test_cuda_check.py compares
# a few each run), without a process per kernel (cuobjdump: about 0.3 s a call on the 2-core CPU
# machine, as long as NVRTC takes for most kernels).
_EI_SIZED, _EI_REGCOUNT, _EI_FRAME_SIZE = 0x04, 0x2F, 0x11


def _elf_sections(cubin: bytes) -> list[tuple[str, int, int, int]]:
    """(name, offset, size, link) of each section of an ELF64 file (a cubin), in the file's order
    (a link is an index into it); raises on anything else."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise ValueError("not an ELF64 file")
    table = struct.unpack_from("<Q", cubin, 0x28)[0]
    entry, count, names = struct.unpack_from("<HHH", cubin, 0x3A)
    heads = [struct.unpack_from("<IIQQQQI", cubin, table + i * entry) for i in range(count)]
    base = heads[names][4]
    return [(cubin[base + h[0]:cubin.index(b"\0", base + h[0])].decode(), h[4], h[5], h[6]) for h in heads]


def cubin_usages(cubin: bytes) -> dict:
    """{kernel name: {"registers", "stack", "shared"}} of every kernel of a cubin (an ELF64 file, one
    NVRTC program's kernels), read from the file itself as ``resource_usage`` reads one kernel from
    cuobjdump's text; {} where the file is no such ELF or names no register count."""
    try:
        heads = _elf_sections(cubin)
        sections = {name: (offset, size, link) for name, offset, size, link in heads}
        symtab = sections[".symtab"]
        strtab = heads[symtab[2]][1]
        symbols = []
        for i in range(symtab[0], symtab[0] + symtab[1], 24):
            at = strtab + struct.unpack_from("<I", cubin, i)[0]
            symbols.append(cubin[at:cubin.index(b"\0", at)].decode())
        values: dict = {}  # attribute -> {symbol index: value}
        i, end = sections[".nv.info"][0], sum(sections[".nv.info"][:2])
        while i + 2 <= end:
            kind, attribute = cubin[i], cubin[i + 1]
            i += 2
            if kind != _EI_SIZED:  # the other formats: no value (0x01), one byte (0x02), two (0x03)
                i += {0x02: 1, 0x03: 2}.get(kind, 0)
                continue
            size = struct.unpack_from("<H", cubin, i)[0]
            if size == 8:
                symbol, value = struct.unpack_from("<II", cubin, i + 2)
                values.setdefault(attribute, {}).setdefault(symbol, value)
            i += 2 + size
    except (IndexError, KeyError, ValueError, struct.error, UnicodeDecodeError):
        return {}
    out = {}
    for symbol, registers in values.get(_EI_REGCOUNT, {}).items():
        name = symbols[symbol] if symbol < len(symbols) else ""
        if f".text.{name}" not in sections:  # a kernel has its own text section
            continue
        shared = sections.get(f".nv.shared.{name}", (0, 0))[1]
        out[name] = {"registers": registers, "stack": values.get(_EI_FRAME_SIZE, {}).get(symbol, 0), "shared": shared}
    return out


def cubin_usage(cubin: bytes) -> dict:
    """{"registers", "stack", "shared"} of the first kernel of a cubin (``cubin_usages``: in the
    order of the cubin's record); {} where the file is no such ELF or names no register count."""
    return next(iter(cubin_usages(cubin).values()), {})


def function_sass(text: str) -> dict:
    """{kernel name: its SASS} from ``cuobjdump -sass`` of a cubin holding several kernels."""
    parts = re.split(r"^\s*Function : (\S+)\s*$", text, flags=re.MULTILINE)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def opcode(text: str) -> str:
    return text.split()[0].split(".")[0]


def k_loop(sass: str, ring: bool = False) -> list[str]:
    """The instructions of the largest backward-branch body that loads from global memory
    (address order), predicates dropped. The loads matter: with the K split (KS > 1) the epilogue
    that adds the parts' sums through shared memory is a larger loop than the K loop and loads
    nothing from global memory (taken for the K loop before 2026-11-25, it gave e.g. 55.25 instead
    of 51.25 SASS per 16 B for a KS 4 B200 candidate). ``ring``: a bulk-copy ring's consumer loop
    instead, which reads a from shared memory: the smallest backward-branch body that waits on a
    barrier (SYNCS) and reads 16-byte words of shared memory (LDS.128), i.e. one stage (with a
    unit's sum and store where a stage is a whole unit)."""
    insns = [(int(m.group(1), 16), m.group(2)) for m in _INSN.finditer(sass)]
    best: list[str] = []
    for addr, text in insns:
        if "BRA" not in text:
            continue
        target = _TARGET.search(text.split("BRA", 1)[1])
        if target and int(target.group(1), 16) < addr:
            body = [t for a, t in insns if int(target.group(1), 16) <= a <= addr]
            ops = [_PREDICATE.sub("", t) for t in body]
            if ring:
                if (any(o.startswith("SYNCS.PHASECHK") for o in ops) and any(o.startswith("LDS.128") for o in ops)
                        and (not best or len(body) < len(best))):
                    best = body
            elif any(opcode(o) == "LDG" for o in ops) and len(body) > len(best):
                best = body
    return [_PREDICATE.sub("", t) for t in best]


def sass_per_16b(sass: str, chunks: int, ring: bool = False) -> tuple[float | None, list[str]]:
    """(the K loop's instructions per 16 B of a and lane, the loop): the loop over ``chunks``, the
    16-byte chunks a lane reads per step (rpt x u); None where no such loop is found."""
    body = k_loop(sass, ring)
    return (len(body) / chunks if body else None), body


# --------------------------------------------------------------------------- the kernels of a file

class Variant(NamedTuple):
    """One kernel: a config of the file's config type, whole steps (no bounds checks) or a masked
    tail, the plain or the permuted scales, and the NVRTC target."""
    config: object
    full: bool
    plain: bool
    arch: str


def capability(arch: str) -> tuple[int, int]:
    """The compute capability an NVRTC target is for: sm_90a (9, 0), sm_100a (10, 0), sm_120a (12, 0)."""
    digits = ARCH_RE.match(arch).group(1)
    return int(digits[:-1]), int(digits[-1])


def _sha(*parts) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _nvrtc_version(lib) -> str:
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return f"NVRTC {major.value}.{minor.value}"


class KitKernels:
    """The kernels of a file built like the kit's submission.py. ``kernel_text``: the kernel to
    compile in place of the file's own copy (CUDA_SRC), with the file's wrappers (the default:
    kernels/nvfp4_gemv.cu as bundle would copy it). ``block_line``: the 0-based line of the file
    where its copy of the kernel starts, for naming the file's line of an error (None: the kernel is
    its own file)."""
    kind = "kit"

    def __init__(self, module, file_text: str = "", kernel_text: str | None = None, block_line: int | None = None):
        self.module, self.kernel_text, self.block_line = module, kernel_text, block_line
        self.errors = (module.CudaBuildError, ValueError, TypeError)  # a config the file's CudaConfig refuses
        self._options = getattr(module, "cuda_options", None)
        self._file = _sha(file_text)  # keys the options where the file does not name them (cuda_options)
        self._compiler = None

    def missing(self) -> str:
        """'' where NVRTC is here, else why not."""
        try:
            self.module.find_nvrtc()
        except self.module.CudaBuildError as exc:
            return str(exc)
        return ""

    def compiler(self) -> str:
        if self._compiler is None:
            self._compiler = "NVRTC {}.{}".format(*self.module.nvrtc_version())
        return self._compiler

    def config(self, cfg):
        """``cfg`` (another file's config: the last commit's kernels get today's) as this file's
        CudaConfig; ValueError where it sets a field this file lacks to anything but its default."""
        mine = self.module.CudaConfig
        if isinstance(cfg, mine) or not hasattr(cfg, "_asdict"):
            return cfg
        fields, defaults = cfg._asdict(), getattr(type(cfg), "_field_defaults", {})
        extra = [name for name, value in fields.items() if name not in mine._fields and defaults.get(name) != value]
        if extra:
            raise ValueError(f"this CudaConfig has no field {', '.join(extra)}")
        return mine(**{name: value for name, value in fields.items() if name in mine._fields})

    def source(self, v: Variant) -> str:
        source = self.module.cuda_kernel(self.config(v.config), v.full, v.plain)[1]
        if self.kernel_text is not None:
            source = self.kernel_text + source[len(self.module.CUDA_SRC):]
        return source

    def key(self, v: Variant) -> str:
        options = self._options(v.arch) if self._options else self._file
        return _sha(CHECK_VERSION, self.source(v), v.arch, options, self.compiler())

    def compile(self, v: Variant) -> bytes:
        return self.module.cuda_compile(self.source(v), v.arch)

    def compile_source(self, source: str, arch: str) -> bytes:
        return self.module.cuda_compile(source, arch)

    @staticmethod
    def alone(v: Variant) -> bool:
        """Whether ``v`` is compiled in a program of its own: a bulk-copy ring, whose dynamic shared
        memory is the program's, not its kernel's (in one program with a ring, every other kernel's
        static shared memory grew by 1024 B on sm_90a, 2026-12-07, NVRTC 13.0)."""
        return bool(getattr(v.config, "ring", 0))

    def together(self, variants: list) -> tuple[str, list[str]] | None:
        """(one program's source holding every variant's kernel: the kernel once, then each wrapper;
        the kernels' names), or None where one is compiled ``alone``, a source is not the file's
        kernel and a wrapper, or two share a name (then each is compiled alone)."""
        base, names, wrappers = self.module.CUDA_SRC, [], []
        if any(self.alone(v) for v in variants):
            return None
        for v in variants:
            name, source = self.module.cuda_kernel(self.config(v.config), v.full, v.plain)
            if not source.startswith(base):
                return None
            names.append(name)
            wrappers.append(source[len(base):])
        if len(set(names)) < len(names):
            return None
        return (self.kernel_text if self.kernel_text is not None else base) + "".join(wrappers), names

    @staticmethod
    def chunks(v: Variant) -> tuple[int, bool]:
        """(16-byte chunks of a a lane reads per step, whether it is the bulk-copy ring)."""
        return v.config.rpt * v.config.u, bool(v.config.ring)

    @staticmethod
    def label(v: Variant) -> str:
        text = repr(v.config)
        text = text[text.index("(") + 1:-1] if "(" in text else text
        return text + ("" if v.full else ", tail") + ("" if v.plain else ", permuted scales")

    def launch_set(self, arch: str, shapes: list) -> list[Variant]:
        """What a GPU of ``arch`` may launch on ``shapes`` (see the module's docstring)."""
        mod, cap = self.module, capability(arch)
        tuned = getattr(mod, "tuned_shape", None) or (lambda m, k, l: (m, k, l) in mod.TUNED_SHAPES)
        tables = [table for model, table in (getattr(mod, "CUDA_MEASURED", None) or {}).items()
                  if cap[0] == 9 and ("H100" in model or "H200" in model)]
        out = []
        for m, k, l in shapes:
            cands = mod.BACKENDS["cuda"].candidates(m, k, l, cap)
            if cap[0] == 9:
                picks = cands[:1] + [table[(m, k, l)].with_decode(cap) for table in tables if (m, k, l) in table]
            else:
                picks = cands if tuned(m, k, l) else cands[:1]
            out += [Variant(cfg, bool(cfg.ring) or (k // 32) % (cfg.lpr * cfg.u) == 0, True, arch) for cfg in picks]
        return list(dict.fromkeys(out))

    def every_variant(self, arch: str) -> list[Variant]:
        return [Variant(cfg, full, plain, arch) for cfg, full, plain in self.module.cuda_compile_variants()]

    def file_line(self, line: int) -> int | None:
        """The file's line holding line ``line`` of the kernel (None: the kernel is its own file)."""
        return None if self.block_line is None else self.block_line + line


class StarterKernels:
    """The kernels of a file built like examples/starter_cuda.py: ``compile_cubin(cfg, target)``
    builds ``CUDA_SRC`` for one config of ``CONFIGS`` (per shape) or ``DEFAULT``."""
    kind = "starter"
    errors = (RuntimeError, ValueError)

    def __init__(self, module, file_text: str = ""):
        self.module, self._file, self._compiler = module, _sha(file_text), None

    def missing(self) -> str:
        try:
            self.module.nvrtc()
        except RuntimeError as exc:
            return str(exc)
        return ""

    def compiler(self) -> str:
        if self._compiler is None:
            self._compiler = _nvrtc_version(self.module.nvrtc())
        return self._compiler

    def key(self, v: Variant) -> str:  # the options live in compile_cubin: the file's text keys them
        return _sha(CHECK_VERSION, getattr(self.module, "CUDA_SRC", ""), repr(v.config), v.arch, self._file,
                    self.compiler())

    def compile(self, v: Variant) -> bytes:
        return self.module.compile_cubin(v.config, v.arch)

    @staticmethod
    def alone(v: Variant) -> bool:  # compile_cubin builds one config a program
        return True

    @staticmethod
    def together(variants: list) -> None:
        return None

    @staticmethod
    def chunks(v: Variant) -> None:  # its K loop's step is not a config field: no SASS count
        return None

    @staticmethod
    def label(v: Variant) -> str:
        return repr(v.config)

    def launch_set(self, arch: str, shapes: list) -> list[Variant]:
        configs = self.module.CONFIGS
        return list(dict.fromkeys(Variant(configs.get((m, k, l), self.module.DEFAULT), True, True, arch)
                                  for m, k, l in shapes))

    def every_variant(self, arch: str) -> list[Variant]:
        return [Variant(cfg, True, True, arch) for cfg in dict.fromkeys([*self.module.CONFIGS.values(),
                                                                          self.module.DEFAULT])]

    @staticmethod
    def file_line(line: int) -> None:
        return None


KIT_NEEDS = ("cuda_kernel", "cuda_compile", "cuda_compile_variants", "CudaConfig", "BACKENDS", "CudaBuildError",
             "find_nvrtc", "nvrtc_version", "CUDA_SRC")
STARTER_NEEDS = ("compile_cubin", "nvrtc", "CONFIGS", "DEFAULT")


def kernels_of(module, file_text: str = "", kernel_text: str | None = None, block_line: int | None = None):
    """The kernels of a loaded submission: KitKernels, StarterKernels, or None (no CUDA kernel this
    check knows)."""
    if all(hasattr(module, name) for name in KIT_NEEDS):
        return KitKernels(module, file_text, kernel_text, block_line)
    if all(hasattr(module, name) for name in STARTER_NEEDS):
        return StarterKernels(module, file_text)
    return None


def launch_set(kernels, archs, shapes: list, every: bool = False) -> list[Variant]:
    """The kernels of the check, target by target: ``launch_set`` per target, or (``every``) every variant."""
    out = []
    for arch in archs:
        out += kernels.every_variant(arch) if every else kernels.launch_set(arch, shapes)
    return list(dict.fromkeys(out))


def carries_cuda(text: str) -> bool:
    """Whether a file's text defines the functions a CUDA kernel this check knows is built by
    (``def cuda_kernel(`` or ``def compile_cubin(`` at the top level): read without importing it."""
    return bool(CUDA_DEF.search(text))


# --------------------------------------------------------------------------- the cache

def cache_dir() -> Path:
    """Where results are kept: $NVFP4_GEMV_CACHE, else the user's cache folder (XDG_CACHE_HOME or
    ~/.cache) / nvfp4-gemv-kit / cuda-check."""
    env = os.environ.get(ENV_CACHE)
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nvfp4-gemv-kit" / "cuda-check"


def _cache_read(kind: str, key: str) -> dict | None:
    try:
        value = json.loads((cache_dir() / kind / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(value, dict) or value.pop("version", None) != CHECK_VERSION:
        return None
    return value


def _cache_write(kind: str, key: str, value: dict) -> None:
    """Whole or absent: another process may read the file at once; a cache that cannot be written
    (a read-only home) is no error."""
    path = cache_dir() / kind / f"{key}.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f"{path.name}.{os.getpid()}.{id(value)}")
        part.write_text(json.dumps({**value, "version": CHECK_VERSION}))
        os.replace(part, path)
    except OSError:
        pass


# --------------------------------------------------------------------------- compiling

def _log(message: str) -> list[str]:
    """NVRTC's own lines from a build error's message (the kit's and the starter's put one line of
    their own first)."""
    lines = str(message).splitlines()
    head = lines[0] if lines else ""
    if len(lines) > 1 and head.rstrip().endswith(":"):
        lines = lines[1:]
    elif ": " in head and "could not compile" in head:
        lines = [head.split(": ", 1)[1]] + lines[1:]
    return [ln.rstrip() for ln in lines if ln.strip()]


def first_error(log: list[str]) -> str:
    """The line of NVRTC's log that names the first error (else its first line)."""
    return next((ln.strip() for ln in log if re.search(r"\berror\b", ln)), log[0].strip() if log else "")


def _wanted(kernels, v: Variant, count_sass: bool, tools: bool) -> tuple:
    """(the cache key of ``v``, the chunks its SASS count needs or None, its cached result where
    that answers: a failure, or every figure asked for; a compile-only run keeps no SASS count).
    Raises kernels.errors where the file's cuda_kernel refuses the config."""
    key = kernels.key(v)
    chunks = kernels.chunks(v) if count_sass and tools else None
    hit = _cache_read("kernels", key)
    if hit is not None and (not hit["ok"] or (hit.get("registers") is not None
                                              and (chunks is None or hit.get("loop") is not None))):
        return key, chunks, hit
    return key, chunks, None


def _figures(usage: dict, sass: str, chunks) -> dict:
    result = {"ok": True, "registers": None, "stack": None, "shared": None, "sass": None, "loop": None, **usage}
    if chunks:  # cuobjdump for the SASS only: the resources are the cubin's own record
        per, body = sass_per_16b(sass, *chunks)
        result.update(sass=per, loop=len(body))
    return result


def build(kernels, v: Variant, count_sass: bool, tools: bool = True) -> dict:
    """One kernel compiled (or its cached result): {"ok": True, "registers", "stack", "shared"
    (``cubin_usage``), "sass" (per 16 B), "loop" (its instructions; both None unless ``count_sass``
    and ``tools``, whether cuobjdump is here)} or {"ok": False, "log": NVRTC's lines}."""
    try:
        key, chunks, hit = _wanted(kernels, v, count_sass, tools)
    except kernels.errors as exc:  # the file's cuda_kernel refuses the config: no source at all
        return {"ok": False, "log": [str(exc)]}
    if hit is not None:
        return hit
    try:
        cubin = kernels.compile(v)
    except kernels.errors as exc:
        result = {"ok": False, "log": _log(str(exc))}
    else:
        result = _figures(cubin_usage(cubin), dump(cubin, "-sass") if chunks else "", chunks)
    _cache_write("kernels", key, result)
    return result


def build_many(kernels, variants: list, count_sass: bool, tools: bool = True) -> list[dict]:
    """``build`` of several kernels of one target, those not in the cache compiled as one NVRTC
    program (the kernel once, every variant's wrapper after it) and read with one cuobjdump call
    (``built_together``), where the file's kernels allow it; where that program does not compile, each
    kernel is compiled alone (its own log, its own line numbers). Each kernel's figures are its
    own (``cubin_usages``, ``function_sass``) and kept under its own key: the same as built alone,
    which tests/test_cuda_check.py compares."""
    assert len({v.arch for v in variants}) <= 1, "one target per program"
    results, todo = [], []
    for v in variants:
        try:
            key, chunks, hit = _wanted(kernels, v, count_sass, tools)
        except kernels.errors:
            hit, key, chunks = None, None, None  # build() gives its answer
        else:
            if hit is None and not kernels.alone(v):
                todo.append((len(results), key, chunks))
        results.append(hit)
    if len(todo) > 1:
        read = built_together(kernels, [variants[i] for i, _, _ in todo], any(chunks for _, _, chunks in todo))
        for (i, key, chunks), got in zip(todo, read, strict=True):
            if got is not None:
                results[i] = _figures(*got, chunks)
                _cache_write("kernels", key, results[i])
    return [res if res is not None else build(kernels, v, count_sass, tools)
            for res, v in zip(results, variants, strict=True)]


def built_together(kernels, variants: list, sass: bool) -> list:
    """Each variant's (usage: ``cubin_usages``, its SASS text: '' unless ``sass``), its kernel
    built in one NVRTC program with the others' (``kernels.together``; one target) and read with
    at most one cuobjdump call; None for each where they cannot share a program (a ring, another
    file's kind of source) or that program does not compile (each alone then names its own error),
    and for a kernel missing from what the program gives."""
    together = kernels.together(variants)
    if together is None:
        return [None] * len(variants)
    source, names = together
    try:
        cubin = kernels.compile_source(source, variants[0].arch)
    except kernels.errors:
        return [None] * len(variants)
    usages = cubin_usages(cubin)
    texts = function_sass(dump(cubin, "-sass")) if sass else {}
    return [(usages[name], texts.get(name, "")) if name in usages and (not sass or name in texts) else None
            for name in names]


# Kernels per NVRTC program (and per cuobjdump call) where compile_set builds many: one program
# parses the kernel once (about 0.05 s of the 0.14 s a variant takes alone) and one cuobjdump call
# reads every kernel's SASS (its start, about 0.3 s, is most of a call on one kernel); smaller than
# the whole set, so that both cores work and a program that fails recompiles few kernels alone.
# Measured: docs/setup.md, "How long" (the kernels per program, kit 045f53b).
BATCH = 16


def _workers() -> int:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cpus, 8))


def sass_target(arch: str) -> bool:
    """Whether the table counts an arch's K loop: the Blackwell targets (compute capability >= 10)."""
    return capability(arch)[0] >= 10


def _batches(indices: list, variants: list, size: int | None = None) -> list[list]:
    """``indices`` grouped by target, each target's cut into nearly equal groups of at most ``size``
    (default BATCH)."""
    out, size = [], size or BATCH
    for arch in dict.fromkeys(variants[i].arch for i in indices):
        mine = [i for i in indices if variants[i].arch == arch]
        groups = -(-len(mine) // size)
        out += [mine[g::groups] for g in range(groups)]
    return out


def compile_set(kernels, variants: list, measure: bool = False, head=None, on_first=None) -> tuple[list, list]:
    """Every variant compiled (NVRTC in threads: it runs outside the GIL), the first of each target
    first, alone: where one of those fails the rest is not compiled (their results are None); the
    rest in programs of up to BATCH kernels of a target (``build_many``). Registers and the like
    from the cubin; ``measure``: the SASS count too, on Blackwell targets, where cuobjdump is here.
    ``head``: another file's kernels (the last commit's) whose same variants are compiled once all
    of ours compiled, for the table's differences (None where its code does not build the variant).
    ``on_first(seconds)``: called once the first of each target compiled. Returns (results, head's
    results)."""
    tools = bool(cuobjdump())
    results, theirs = [None] * len(variants), [None] * len(variants)
    firsts = list({v.arch: i for i, v in reversed(list(enumerate(variants)))}.values())
    started = time.perf_counter()

    def many(which, group):
        arch = variants[group[0]].arch
        return build_many(which, [variants[i] for i in group], measure and sass_target(arch), tools)

    with ThreadPoolExecutor(_workers()) as pool:
        for i, res in zip(firsts, pool.map(lambda i: many(kernels, [i])[0], firsts), strict=True):
            results[i] = res
        if not all(results[i]["ok"] for i in firsts):
            return results, theirs
        if on_first:
            on_first(time.perf_counter() - started)
        groups = _batches([i for i in range(len(variants)) if results[i] is None], variants)
        for group, found in zip(groups, pool.map(lambda g: many(kernels, g), groups), strict=True):
            for i, res in zip(group, found, strict=True):
                results[i] = res
        if head is None or not all(res["ok"] for res in results):
            return results, theirs
        groups = _batches(list(range(len(variants))), variants)
        for group, found in zip(groups, pool.map(lambda g: many(head, g), groups), strict=True):
            for i, res in zip(group, found, strict=True):
                theirs[i] = res if res["ok"] else None
    return results, theirs


# --------------------------------------------------------------------------- loading files, HEAD

def load_file(path: Path, name: str, display: str):
    """The file imported as module ``name`` (harness.load_submission, nothing kept); CheckError
    with one line where it does not import."""
    from harness import load_submission, one_line
    try:
        return load_submission(path, name, keep=False)
    except Exception as exc:  # noqa: BLE001 - any failure of the file's own code, in one line
        raise CheckError(one_line(f"{display} does not import: {type(exc).__name__}: {exc}")) from None


def _git(cwd: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.decode("utf-8", errors="replace") if proc.returncode == 0 else None


def head_file(path: Path) -> tuple[str | None, str]:
    """(the text of ``path`` at the last commit of its repository, the commit's short hash), or
    (None, why not)."""
    path = path.resolve()
    top = _git(path.parent, "rev-parse", "--show-toplevel")
    if top is None:
        return None, f"{path.parent} is not in a git checkout"
    rev = (_git(path.parent, "rev-parse", "--short", "HEAD") or "").strip()
    rel = path.relative_to(Path(top.strip()).resolve()).as_posix()
    text = _git(path.parent, "show", f"HEAD:{rel}") if rev else None
    return (text, rev) if text is not None else (None, f"HEAD has no {rel}")


def _module_of_text(text: str, name: str, display: str):
    """``text`` imported as a module from a folder of its own (the kit's folder first on sys.path)."""
    with tempfile.TemporaryDirectory(prefix="nvfp4_cuda_check_") as tmp:
        path = Path(tmp) / "submission.py"
        path.write_text(text, encoding="utf-8")
        return load_file(path, name, display)


def _bundled_head(sub: Path) -> tuple[str | None, str]:
    """(HEAD's submission.py with its blocks copied from HEAD's sources, the commit), or (None, why)."""
    import bundle
    text, rev = head_file(sub)
    if text is None:
        return None, rev
    files = {}
    try:
        for block in bundle.blocks(text):
            source, _ = head_file(sub.parent / block.path)
            if source is None:
                return None, f"HEAD has no {block.path}"
            files[block.path] = source
        with tempfile.TemporaryDirectory() as tmp:
            for rel, content in files.items():
                (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
                (Path(tmp) / rel).write_text(content, encoding="utf-8")
            return bundle.bundled(text, Path(tmp)), rev
    except bundle.BundleError as exc:
        return None, f"HEAD's {sub.name} cannot be bundled: {exc}"


def head_kernels(text: str | None, label: str, kind: str):
    """(HEAD's kernels of the same kind, or None; HEAD's commit, or why there are none). ``text``:
    the file at HEAD (None: ``label`` says why there is none)."""
    if text is None:
        return None, label
    try:
        module = _module_of_text(text, "nvfp4_cuda_check_head", f"the file at HEAD ({label})")
    except CheckError as exc:
        return None, str(exc)
    found = kernels_of(module, text)
    if found is None or found.kind != kind:
        return None, f"the file at HEAD ({label}) builds no kernel of the same kind"
    return found, label


# --------------------------------------------------------------------------- the report

def _number(value) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}".rstrip("0").rstrip(".") if isinstance(value, float) else str(value)


def _cell(now, then) -> str:
    if now is None or then is None or now == then:
        return _number(now)
    return f"{_number(now)} ({'+' if now > then else '-'}{_number(abs(now - then))})"


COLUMNS = (("registers", "registers"), ("stack", "spilled B"), ("shared", "shared B"), ("sass", "SASS per 16 B"))


def table(kernels, variants: list, results: list, theirs: list) -> list[str]:
    """The success table: a row per kernel, each figure beside HEAD's as a difference."""
    rows = [["target", "config", *(title for _, title in COLUMNS)]]
    for v, mine, head in zip(variants, results, theirs, strict=True):
        rows.append([v.arch, kernels.label(v), *(_cell(mine.get(key), (head or {}).get(key)) for key, _ in COLUMNS)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return lines


def differences(variants: list, results: list, theirs: list) -> str:
    """One line summing up the differences from HEAD, per figure ("SASS per 16 B on sm_100a +3.5
    (12 of 38 kernels)", "registers -1 to +2 (4 of 51)", "spilled bytes the same")."""
    parts = []
    for key, name in (("sass", "SASS per 16 B"), ("registers", "registers"), ("stack", "spilled bytes"),
                      ("shared", "shared memory")):
        for arch in sorted({v.arch for v in variants}) if key == "sass" else [None]:
            pairs = [(mine[key], head[key]) for v, mine, head in zip(variants, results, theirs, strict=True)
                     if head is not None and mine.get(key) is not None and head.get(key) is not None
                     and arch in (None, v.arch)]
            if not pairs:
                continue
            label = f"{name} on {arch}" if arch else name
            deltas = [a - b for a, b in pairs if a != b]
            if not deltas:
                parts.append(f"{label} the same")
                continue
            low, high = min(deltas), max(deltas)
            span = f"{low:+g}" if low == high else f"{low:+g} to {high:+g}"
            parts.append(f"{label} {span} ({len(deltas)} of {len(pairs)} kernels)")
    return "; ".join(parts)


def _archs_text(archs) -> str:
    archs = list(archs)
    return archs[0] if len(archs) == 1 else ", ".join(archs[:-1]) + " and " + archs[-1]


def failure_report(kernels, name: str, variants: list, results: list) -> list[str]:
    """The lines of a failure: NVRTC's own lines of the first kernel that failed, its target and
    config; the others that failed, grouped by their first error line."""
    failed = [(v, r) for v, r in zip(variants, results, strict=True) if r is not None and not r["ok"]]
    v, r = failed[0]
    compiled = sum(1 for res in results if res is not None)
    lines = [f"error: {name} does not compile for {v.arch} ({kernels.label(v)}); {kernels.compiler()} says:"]
    log = r["log"]
    lines += log[:MAX_LOG_LINES] + [f"... ({len(log) - MAX_LOG_LINES} more lines)"] * (len(log) > MAX_LOG_LINES)
    at = re.search(r"\((\d+)\): ", first_error(log))
    line = kernels.file_line(int(at.group(1))) if at else None
    if line is not None:
        lines.append(f"(line {at.group(1)} of the kernel is {name} line {line})")
    groups = {}
    for other, res in failed[1:]:
        groups.setdefault(first_error(res["log"]), []).append(other)
    for error, others in groups.items():
        same = "the same error" if error == first_error(log) else error
        shown = "; ".join(f"{o.arch} {kernels.label(o)}" for o in others[:4])
        more = f" and {len(others) - 4} more" if len(others) > 4 else ""
        lines.append(f"also fails ({same}): {shown}{more}")
    lines.append(f"{len(failed)} of the {compiled} kernels compiled so far failed ({len(variants)} in the set)")
    return lines


# --------------------------------------------------------------------------- --status: the header's and bundle's check

def status_of(kernels, variants: list, results: list) -> dict:
    """What eval.py's header and bundle read of a check of the default set."""
    failed = [(v, r) for v, r in zip(variants, results, strict=True) if r is not None and not r["ok"]]
    archs = {}
    for v in variants:
        archs[v.arch] = archs.get(v.arch, 0) + 1
    compiled = sum(1 for r in results if r is not None)
    said = (f"{len(failed)} of {compiled} kernels" + ("" if compiled == len(variants) else
                                                      f" compiled so far, {len(variants)} in the set"))
    return {"compiles": not failed, "kind": kernels.kind, "compiler": kernels.compiler(), "archs": archs,
            "failures": [{"arch": v.arch, "config": kernels.label(v), "error": _short(first_error(r["log"]))}
                         for v, r in failed], "failed": said,
            "log": failed[0][1]["log"][:MAX_LOG_LINES] if failed else [], "missing": ""}


def _short(line: str, most: int = 240) -> str:
    return line if len(line) <= most else line[:most - 3] + "..."


def _file_sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def status_cached(path: Path | str) -> dict | None:
    """The status of the file at ``path`` from the cache (keyed by its bytes), or None."""
    try:
        return _cache_read("status", _file_sha(Path(path).read_bytes()))
    except OSError:
        return None


def status_line(status: dict, subject: str = "cuda kernel") -> str:
    """The header's line of a status ('' for a file with no CUDA kernel)."""
    if not status or status.get("kind") is None:
        return ""
    if status.get("missing"):
        return f"{subject}: not compiled here ({str(status['missing'])[:200]})"
    if status.get("error"):
        return f"{subject}: the compile check gave no answer: {str(status['error'])[:300]}"
    archs = status.get("archs") or {}
    if status.get("compiles"):
        return (f"{subject}: compiles for {_archs_text(archs)} ({sum(archs.values())} kernels, "
                f"{status.get('compiler')}; no GPU used)")
    first = (status.get("failures") or [{}])[0]
    return (f"{subject}: does not compile for {first.get('arch')} ({first.get('config')}; {status.get('failed')}): "
            f"{first.get('error')} (`{COMMAND}` shows NVRTC's lines)")


def _status_main(path: Path) -> dict:
    """The default set of the file at ``path`` compiled (no figures), its status cached by the
    file's bytes."""
    data = path.read_bytes()
    key = _file_sha(data)
    cached = _cache_read("status", key)
    if cached is not None:
        return cached
    text = data.decode("utf-8", errors="replace")
    if not carries_cuda(text):
        return {"kind": None}
    try:
        kernels = kernels_of(load_file(path, "nvfp4_cuda_check_status", str(path)), text,
                             block_line=_block_line(text))
    except CheckError as exc:
        return {"kind": "unknown", "error": str(exc)}
    if kernels is None:
        return {"kind": None}
    missing = kernels.missing()
    if missing:
        return {"kind": kernels.kind, "missing": missing}
    from cute_check import load_shapes
    variants = launch_set(kernels, DEFAULT_ARCHS, load_shapes(DEFAULT_SHAPES))
    results, _ = compile_set(kernels, variants)
    status = status_of(kernels, variants, results)
    _cache_write("status", key, status)
    return status


class _Pending:
    """One file's status on its way: from the cache, or from this file run as ``--status FILE`` in a
    process of its own (the caller stays torch-free)."""

    def __init__(self, path: Path):
        self.status, self.proc = status_cached(path), None
        if self.status is None:
            cmd = [sys.executable, str(Path(__file__).resolve()), "--status", str(Path(path).resolve())]
            self.proc = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True)
            atexit.register(self._stop)

    def _stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()

    def result(self, timeout: float) -> dict:
        if self.proc is not None:
            try:
                out, err = self.proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._stop()
                out, err = "", f"no answer within {timeout:g} s"
            found = [ln for ln in out.splitlines() if ln.startswith("CUDA_CHECK ")]
            tail = " | ".join(ln.strip() for ln in (err or "").strip().splitlines()[-2:])
            self.status = (json.loads(found[-1][len("CUDA_CHECK "):]) if found
                           else {"kind": "unknown", "error": tail or f"exit {self.proc.returncode}"})
            self.proc = None
        return self.status


class HeaderCheck:
    """eval.py's header lines on a machine without a GPU: whether the file's cuda kernel compiles
    and, for the kit's own submission.py whose copies differ from kernels/, whether kernels/ as
    bundle would copy them does (the edit bundle has not written yet)."""

    def __init__(self, path: Path):
        self.pending = {"cuda kernel": _Pending(path)}
        self._staged = None
        text = _unbundled(path)
        if text is not None:
            self._staged = tempfile.TemporaryDirectory(prefix="nvfp4_cuda_check_")
            staged = Path(self._staged.name) / "submission.py"
            staged.write_text(text, encoding="utf-8")
            self.pending[f"{KERNEL} as bundle would copy it"] = _Pending(staged)
        self._result = None

    @property
    def computing(self) -> bool:
        return any(p.proc is not None for p in self.pending.values())

    def result(self, timeout: float = STATUS_TIMEOUT_S) -> dict:
        """{subject: status}, once every status is in."""
        if self._result is None:
            self._result = {subject: p.result(timeout) for subject, p in self.pending.items()}
            if self._staged is not None:
                self._staged.cleanup()
        return self._result

    def below_first_line(self, table: str) -> str:
        """``table`` (eval.py's) with the header's lines after its first line."""
        lines = [line for subject, status in self.result().items() if (line := status_line(status, subject))]
        first, _, rest = table.partition("\n")
        return "\n".join([first, *lines, rest])


def _unbundled(path: Path) -> str | None:
    """The text bundle would write into the kit's own submission.py where its copies differ from
    their sources (None for another file, or one in sync)."""
    import bundle
    if bundle.kit_state(path).state in (bundle.IN_SYNC, bundle.NOT_KIT):
        return None
    try:
        return bundle.bundled(Path(path).read_text(encoding="utf-8"), Path(path).resolve().parent)
    except (bundle.BundleError, OSError, UnicodeDecodeError):
        return None


def header_check(path: Path | str) -> HeaderCheck | None:
    """For eval.py's header on a machine without a GPU: None where the file carries no CUDA kernel
    this check knows (read without importing it), else its statuses on their way (a line on
    stderr when they must be computed)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    if not carries_cuda(text):
        return None
    check = HeaderCheck(Path(path))
    if check.computing:
        print(f"[compile] the cuda kernel compiling for {_archs_text(DEFAULT_ARCHS)} beside the cases (no GPU "
              "here; the answer is kept per file)", file=sys.stderr, flush=True)
    return check


# --------------------------------------------------------------------------- the command line

def _block_line(text: str, path: str = KERNEL) -> int | None:
    """The 0-based line of ``text`` where its bundled copy of ``path`` starts (None: no such block)."""
    import bundle
    try:
        return next((b.first for b in bundle.blocks(text) if b.path == path), None)
    except bundle.BundleError:
        return None


def _default_target(args) -> tuple:
    """(display name, the text to load, the line its kernel's copy starts at (None: the kernel is its
    own file), HEAD's text, HEAD's commit or why there is none) of the kit's own kernel as bundle
    would copy it into submission.py."""
    import bundle
    sub = bundle.SUBMISSION
    try:
        text = bundle.bundled(sub.read_text(encoding="utf-8"), sub.parent)
    except (bundle.BundleError, OSError) as exc:
        raise CheckError(f"{KERNEL} cannot be copied as bundle would: {exc}", EXIT_FAIL) from None
    state = bundle.kit_state(sub)
    if state.why:
        print(f"note: this compiles {KERNEL} as `python3 eval.py bundle` would copy it; submission.py's own copy "
              f"differs: {state.why}", file=sys.stderr)
    head_text, head_why = _bundled_head(sub) if not args.no_head else (None, "--no-head")
    return KERNEL, text, None, head_text, head_why


def _given_target(path: Path, args) -> tuple:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise CheckError(f"{path}: not UTF-8 text") from None
    head_text, head_why = head_file(path) if not args.no_head else (None, "--no-head")
    return str(path), text, _block_line(text), head_text, head_why


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=COMMAND, description="Compile the kit's cuda kernel (or a file's) with NVRTC for each target, without "
        "a GPU: every kernel the GPUs may launch on the official shapes; registers, spills, shared memory and the "
        "Blackwell K loop's SASS per 16 B beside the last commit's. A CuTe DSL file (import cutlass) goes to its own "
        "check (docs/cute.md).")
    ap.add_argument("submission", nargs="?", help=f"a file carrying a CUDA kernel (default: {KERNEL} as bundle would "
                                                  "copy it into submission.py)")
    ap.add_argument("--arch", action="append", metavar="ARCH",
                    help=f"an NVRTC target, repeatable (default {' and '.join(DEFAULT_ARCHS)}); e.g. sm_120a")
    ap.add_argument("--all", action="store_true", help="every variant cuda_compile_variants knows (both scale "
                                                        "layouts and step kinds), not what the shapes launch")
    ap.add_argument("--shapes", metavar="tests|benchmarks|all|FILE",
                    help=f"the shapes whose kernels are compiled (default {DEFAULT_SHAPES}: the official benchmark "
                         "and test shapes)")
    ap.add_argument("--no-head", action="store_true", help="no comparison with the last commit's kernel")
    return ap


def _is_cute(argv: list[str]) -> bool:
    """Whether the file the arguments name is a CuTe DSL submission (the CuTe check takes it)."""
    args, _ = _parser().parse_known_args(argv)
    if not args.submission:
        return False
    try:
        text = Path(args.submission).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    from cute_check import is_cute_source
    return is_cute_source(text)


def _check(args) -> int:
    from cute_check import load_shapes
    archs = list(dict.fromkeys(args.arch or DEFAULT_ARCHS))
    bad = [a for a in archs if not ARCH_RE.match(a)]
    if bad:
        raise CheckError(f"--arch takes NVRTC targets like sm_100a or sm_90a, got {', '.join(bad)}")
    if args.all and args.shapes:
        raise CheckError("--all compiles every variant whatever the shapes: give --all or --shapes, not both")
    try:
        shapes = load_shapes(args.shapes or DEFAULT_SHAPES)
    except ValueError as exc:
        raise CheckError(str(exc)) from None
    if args.submission:
        from harness import submission_problem
        problem = submission_problem(Path(args.submission))
        if problem:
            raise CheckError(f"{problem}; {COMMAND} takes a submission file carrying a CUDA kernel "
                             "(submission.py, examples/starter_cuda.py) or a CuTe DSL one")
        name, text, block_line, head_text, head_why = _given_target(Path(args.submission), args)
    else:
        name, text, block_line, head_text, head_why = _default_target(args)
    if not carries_cuda(text):
        raise CheckError(f"{name}: no CUDA kernel this check knows (neither submission.py's cuda_kernel nor the "
                         "starter's compile_cubin) and no CuTe DSL import: nothing to compile")
    module = (load_file(Path(args.submission), "nvfp4_cuda_check", name) if args.submission
              else _module_of_text(text, "nvfp4_cuda_check", name))
    kernels = kernels_of(module, text, block_line=block_line)
    if kernels is None:
        raise CheckError(f"{name} defines cuda_kernel or compile_cubin but not the rest of what this check builds "
                         f"with ({', '.join(KIT_NEEDS)}, or {', '.join(STARTER_NEEDS)})")
    missing = kernels.missing()
    if missing:
        raise CheckError(f"no NVRTC here ({missing}); the dev extra installs it: python3 -m pip install -e \".[dev]\"")
    variants = launch_set(kernels, archs, shapes, args.all)
    head, head_label = head_kernels(head_text, head_why, kernels.kind)
    started = time.perf_counter()

    def first(seconds):
        todo = [f"the other {len(variants) - len(archs)}"] * (len(variants) > len(archs))
        todo += ["HEAD's"] * (head is not None)
        print(f"{name}: compiles for {_archs_text(archs)} (the first kernel of each target, {seconds:.1f} s)"
              + (f"; now {' and '.join(todo)}" if todo else ""), file=sys.stderr, flush=True)

    results, theirs = compile_set(kernels, variants, measure=True, head=head, on_first=first)
    for row in results:
        if row is not None and not row["ok"] and re.search(r"gpu-architecture|invalid value for", " ".join(row["log"])):
            raise CheckError(f"--arch: {kernels.compiler()} does not take a target here: {first_error(row['log'])}")
    default = not args.arch and not args.shapes and not args.all
    if default and all(r is not None for r in results):
        _cache_write("status", _file_sha(text.encode("utf-8")), status_of(kernels, variants, results))
    if not all(r is not None and r["ok"] for r in results):
        for line in failure_report(kernels, name, variants, results):
            print(line, file=sys.stderr)
        return EXIT_FAIL
    seconds = time.perf_counter() - started
    counts = {}
    for v in variants:
        counts[v.arch] = counts.get(v.arch, 0) + 1
    what = ("every variant" if args.all else "what the GPUs may launch on the "
            + (f"shapes of {args.shapes}" if args.shapes else "official benchmark and test shapes"))
    print(f"{name}: compiles for " + _archs_text(f"{a} ({n} kernels)" for a, n in counts.items())
          + f"; {what}; {kernels.compiler()}, {seconds:.1f} s, no GPU used")
    if not cuobjdump():
        print("note: no cuobjdump here (Triton's wheel ships one): registers, spills and SASS not read",
              file=sys.stderr)
    print("\n".join(table(kernels, variants, results, theirs)))
    if head is None:
        print(f"no comparison with the last commit: {head_label}")
    else:
        said = differences(variants, results, theirs)
        print(f"beside HEAD ({head_label}): (+n) / (-n) is this kernel's figure minus HEAD's; "
              + (said or "no figure to compare"))
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--status"] and len(argv) == 2:  # eval.py's header and bundle: one JSON line
        print("CUDA_CHECK " + json.dumps(_status_main(Path(argv[1]))), flush=True)
        return EXIT_OK
    if _is_cute(argv):
        from cute_check import main as cute_main
        return cute_main(argv)
    args = _parser().parse_args(argv)
    try:
        return _check(args)
    except CheckError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("error: interrupted (Ctrl-C)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
