"""Compile every Triton kernel of submission.py for Hopper (cc 90) and Blackwell (cc 100) on this
machine -- no GPU needed: Triton compiles for a target it does not run on, with the ptxas its
wheel ships -- and tabulate registers, spills and shared memory per kernel, config and arch.

    python3 benchmarks/compile_table.py              # the installed Triton and the server's
    python3 benchmarks/compile_table.py --out FILE   # default: benchmarks/results/compile-table.md
    python3 benchmarks/compile_table.py --install-server-triton   # what .ci/run does first

Two Triton versions: the installed one, and the server's (``SERVER_TRITON``, the version its
torch 2.9.1 requires), installed with ``--no-deps`` into its own folder (``server_triton_dir()``)
so the project's own pins stay as they are. Each version compiles in its own subprocess, with
TRITON_INTERPRET unset (tests/conftest.py sets it on CPU, which makes ``@triton.jit`` functions
interpreter functions), a fresh TRITON_CACHE_DIR (every row is a real compile) and
TRITON_DUMP_PTXAS_LOG=1 (registers and spills come from ptxas's own report of that compile).

What is compiled (``launch_variants``): ``submission.triton_compile_variants()`` where the
submission defines it -- a list of dicts {"constexprs", "num_warps", "num_stages", "signature"}
(optional "attrs" {arg name: "D" or [["tt.divisibility", 16]]}, "kernel" (name) and "source"
(a label)) covering everything the backend can launch. Otherwise, where the submission has
``triton_configs(m, k, l)`` (every config it can launch for a shape) and ``triton_launch(data, m,
k, l, cfg)`` (the launch its backend makes: kernel, grid, args, kwargs), every such launch on
the official shapes and on 128 x K x 1 for K = 64, 128, ... 4096 (the default config family:
every step of its BLOCK_G halving for small K, both EVEN_G). The launch arguments are
specialised as Triton's JIT does, by the Triton version under test (value 1 -> constexpr;
multiples of 16 and 16-byte-aligned pointers -> divisibility 16), and each distinct (kernel,
constexprs, warps, stages) is kept once, as the first shape launched it (benchmark shapes
first, then tests, then the family). Progress goes to stderr, a line per 20 compiles.

tests/test_compile_gate.py runs the same ``Worker``s and fails on any compile error, for either version.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if not __package__:  # run as `python3 benchmarks/NAME.py`: kitpath puts the kit's root on sys.path
    import kitpath  # noqa: F401

from benchmarks import refusals  # noqa: E402  (no torch or triton at the top either)
from harness import install_aside, load_submission, one_line, writable_file_problem  # noqa: E402  (no torch or triton at the top)

ROOT = Path(__file__).resolve().parent.parent
SUBMISSION = ROOT / "submission.py"
OUT_MD = ROOT / "benchmarks" / "results" / "compile-table.md"
ARCHS = (90, 100)  # H100/H200, B200
SERVER_TRITON = "3.5.1"  # what the server's torch 2.9.1 requires (modal_app.TORCH_PACKAGES pins the same)
ENV_SERVER_TRITON = "NVFP4_SERVER_TRITON"  # folder of the server's Triton (default: server_triton_dir())
PROBE_DECODE = "loads-only"  # a timing probe with wrong output: not compiled here
KERNEL_SUFFIX = "_kernel"  # a module-level @triton.jit function named *_kernel is a kernel
WORKER_TIMEOUT_S = 900
PROGRESS = "compile_table: "  # the prefix of a progress line (stderr; a worker's are passed on as they come)
DEFAULT_FAMILY_MAX_K = 4096  # 128 x K x 1, K = 64 ... this: K/16 up to 4x the default BLOCK_G (64)


def server_triton_dir() -> Path:
    """Where the server's Triton lives: $NVFP4_SERVER_TRITON, else a per-user cache folder
    (outside the clone, so CI's fresh clones reuse it)."""
    env = os.environ.get(ENV_SERVER_TRITON)
    if env:
        return Path(env)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "nvfp4-gemv-kit" / f"triton-{SERVER_TRITON}"


def triton_version_at(path: Path | None) -> str | None:
    """The version of the Triton that ``path`` holds (None: none there); path None: the installed one."""
    proc = subprocess.run([sys.executable, "-c", "import triton; print(triton.__version__); print(triton.__file__)"],
                          env=_child_env(path), capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        return None
    version, where = proc.stdout.split()[:2]
    inside = path is None or Path(where).resolve().is_relative_to(Path(path).resolve())
    return version if inside else None


def install_server_triton(path: Path | None = None) -> Path:
    """Install triton==SERVER_TRITON (no dependencies: it has none) into ``path`` unless it is
    there already; atomically, so an interrupted install leaves nothing half done."""
    path = Path(path or server_triton_dir())
    if triton_version_at(path) == SERVER_TRITON:
        return path
    return install_aside(f"triton=={SERVER_TRITON}", path)


# ----------------------------------------------------------------------------- what to compile

def kernels_of(sub) -> dict:
    """{name: JITFunction} of the module-level ``@triton.jit`` functions named ``*_kernel``."""
    from triton.runtime.jit import JITFunction
    return {name: fn for name, fn in vars(sub).items()
            if isinstance(fn, JITFunction) and name.endswith(KERNEL_SUFFIX)}


def _jit_specialize(value, param) -> tuple:
    """(type, key) that Triton's JIT derives for one argument value, by the installed Triton's
    own rule (the native one from 3.6 on; the Python one before)."""
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.runtime import jit
    specialize, align = not param.do_not_specialize, not param.do_not_specialize_on_alignment
    if hasattr(jit, "native_specialize_impl"):
        return tuple(jit.native_specialize_impl(CUDABackend, value, param.is_const, specialize, align))
    if hasattr(jit, "create_specialize_impl"):
        impl = jit.create_specialize_impl(CUDABackend.get_arg_specialization)
        return tuple(impl(value, param.is_const, specialize, align))
    raise RuntimeError(f"triton {_triton_version()}: no known argument specialiser in triton.runtime.jit")


def variant_from_launch(fn, args: tuple, kwargs: dict, source: str) -> dict:
    """A launch ``fn[grid](*args, **kwargs)`` as a compile variant (see the module doc)."""
    values = dict(zip(fn.arg_names[:len(args)], args, strict=True))
    values.update({k: v for k, v in kwargs.items() if k in fn.arg_names})
    signature, constexprs, attrs = {}, {}, {}
    for param in fn.params:
        value = values[param.name]
        if param.is_constexpr:
            signature[param.name], constexprs[param.name] = "constexpr", value
            continue
        ty, key = _jit_specialize(value, param)
        signature[param.name] = ty
        if ty == "constexpr":
            constexprs[param.name] = value
        elif isinstance(key, str) and key:
            attrs[param.name] = key
    return {"kernel": fn.__name__, "source": source, "signature": signature, "constexprs": constexprs,
            "attrs": attrs, "num_warps": kwargs.get("num_warps", 4), "num_stages": kwargs.get("num_stages", 3)}


def launched_variants(sub, kernels: dict) -> list[dict]:
    """The launches the submission's triton backend makes (``triton_launch``) for every config it
    can launch (``triton_configs``) on the official shapes and the default family."""
    import reference
    shapes = json.loads((ROOT / "shapes.json").read_text())
    cases = [(s["m"], s["k"], s["l"], f"{s['m']}x{s['k']}x{s['l']} (benchmark)") for s in shapes["benchmarks"]]
    cases += [(s["m"], s["k"], s["l"], f"{s['m']}x{s['k']}x{s['l']} (test)") for s in shapes["tests"]]
    cases += [(128, k, 1, f"128x{k}x1 (default family)") for k in range(64, DEFAULT_FAMILY_MAX_K + 1, 64)]
    variants, seen = [], set()
    for m, k, l, source in cases:
        data = reference.generate_input(m, k, l, 1111, device="cpu")
        for cfg in sub.triton_configs(m, k, l):
            try:
                kernel, _, args, kwargs = sub.triton_launch(data, m, k, l, cfg)
            except ValueError:
                continue  # a config that cannot run this shape
            name = kernel.__name__
            v = variant_from_launch(kernels[name], args, kwargs, source)
            key = (name, json.dumps([v["constexprs"], v["num_warps"], v["num_stages"]], sort_keys=True))
            if key not in seen:
                seen.add(key)
                variants.append(v)
    return variants


def launch_variants(sub, kernels: dict | None = None) -> list[dict]:
    """Every compile variant of the submission's kernels (see the module doc)."""
    kernels = kernels_of(sub) if kernels is None else kernels
    if not hasattr(sub, "triton_compile_variants"):
        if hasattr(sub, "triton_launch") and hasattr(sub, "triton_configs"):
            return launched_variants(sub, kernels)
        return []
    out = []
    for v in sub.triton_compile_variants():
        v = dict(v)
        name = v.get("kernel")
        if name is None:
            if len(kernels) != 1:
                raise ValueError(f"triton_compile_variants(): name the kernel (one of {sorted(kernels)})")
            name = next(iter(kernels))
        v["kernel"] = getattr(name, "__name__", name)
        v.setdefault("source", "triton_compile_variants()")
        v.setdefault("attrs", {})
        out.append(v)
    return out


# ----------------------------------------------------------------------------- compiling

_PTXAS_REGS = re.compile(r"Used (\d+) registers")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def _triton_version() -> str:
    import triton
    return triton.__version__


def compile_variant(fn, variant: dict, arch: int) -> dict:
    """Compile one variant for ``cuda:arch``; the row of the table (``error`` set on failure)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend

    index = {name: i for i, name in enumerate(fn.arg_names)}
    attrs = {(index[name],): CUDABackend.parse_attr(a) if isinstance(a, str) else a
             for name, a in variant.get("attrs", {}).items()}
    row = {"kernel": variant["kernel"], "source": variant["source"], "arch": arch,
           "constexprs": {k: v for k, v in variant["constexprs"].items() if variant["signature"].get(k) == "constexpr"
                          and k in index and fn.params[index[k]].is_constexpr},
           "num_warps": variant["num_warps"], "num_stages": variant["num_stages"],
           "regs": None, "spill_stores": None, "spill_loads": None, "stack": None, "shared": None, "error": None}
    t0 = time.perf_counter()
    log = io.StringIO()
    try:
        src = triton.compiler.ASTSource(fn=fn, signature=variant["signature"], constexprs=variant["constexprs"],
                                        attrs=attrs)
        with contextlib.redirect_stdout(log):  # TRITON_DUMP_PTXAS_LOG=1 prints ptxas -v here
            compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32),
                                      options={"num_warps": variant["num_warps"], "num_stages": variant["num_stages"]})
        if "cubin" not in compiled.asm:
            raise RuntimeError("no cubin produced")
        row["shared"] = compiled.metadata.shared
        regs, frame = _PTXAS_REGS.findall(log.getvalue()), _PTXAS_FRAME.findall(log.getvalue())
        if regs and frame:
            row["regs"] = int(regs[-1])
            row["stack"], row["spill_stores"], row["spill_loads"] = (int(x) for x in frame[-1])
        else:
            row["error"] = "compiled, but ptxas printed no register/spill report (TRITON_DUMP_PTXAS_LOG=1?)"
    except Exception as exc:  # noqa: BLE001 - every failure is a row of the table
        lines = [ln for ln in f"{type(exc).__name__}: {exc}".splitlines() if ln.strip()]
        row["error"] = " | ".join(lines[:8])[:2000]
    row["seconds"] = round(time.perf_counter() - t0, 2)
    return row


def compile_all(submission: Path | str = SUBMISSION) -> dict:
    """In this process (TRITON_INTERPRET must be unset): every variant for every arch."""
    import triton
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        raise RuntimeError("TRITON_INTERPRET=1: the kernels are interpreter functions; use run_worker()")
    t0 = time.perf_counter()
    sub = load_submission(submission)
    kernels = kernels_of(sub)
    variants = launch_variants(sub, kernels)
    problems = [f"kernel {name} has no compile variant" for name in kernels
                if not any(v["kernel"] == name for v in variants)]
    problems += [f"variant for unknown kernel {v['kernel']}" for v in variants if v["kernel"] not in kernels]
    todo = [(v, arch) for v in variants if v["kernel"] in kernels for arch in ARCHS]
    rows = []
    for i, (v, arch) in enumerate(todo):
        rows.append(compile_variant(kernels[v["kernel"]], v, arch))
        if i % 20 == 19 or i == len(todo) - 1:
            print(f"{PROGRESS}triton {triton.__version__}: {i + 1}/{len(todo)} compiles", file=sys.stderr, flush=True)
    return {"triton": triton.__version__, "triton_file": triton.__file__, "kernels": sorted(kernels),
            "variants": variants, "rows": rows,
            "problems": problems, "seconds": round(time.perf_counter() - t0, 1)}


def _child_env(triton_path: Path | None, cache_dir: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if triton_path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(triton_path)] + [p for p in [env.get("PYTHONPATH")] if p])
    if cache_dir is not None:
        env.update(TRITON_CACHE_DIR=cache_dir, TRITON_DUMP_PTXAS_LOG="1")
    return env


class Worker:
    """``compile_all`` in a subprocess with the Triton at ``triton_path`` (None: the installed
    one); started at construction, so two workers compile in parallel. ``result()`` waits."""

    def __init__(self, triton_path: Path | None = None, submission: Path | str = SUBMISSION,
                 timeout: float = WORKER_TIMEOUT_S):
        self.triton_path, self.timeout = triton_path, timeout
        self._tmp = tempfile.TemporaryDirectory(prefix="nvfp4_compile_")
        self._out = Path(self._tmp.name) / "result.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(self._out),
               "--submission", str(Path(submission).resolve())]
        env = _child_env(triton_path, str(Path(self._tmp.name) / "cache"))
        self._log = Path(self._tmp.name) / "worker.log"  # a file, not a pipe: nothing blocks the worker
        self._shown = 0  # characters of the log already looked at for progress lines
        self._started = time.monotonic()
        with open(self._log, "w") as log:
            self._proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)

    def progress(self) -> bool:
        """Pass the worker's new progress lines on to stderr; whether it is still running."""
        running = self._proc.poll() is None
        text = self._log.read_text(errors="replace")
        for line in text[self._shown:].splitlines(keepends=True):
            if not line.endswith("\n"):
                break
            self._shown += len(line)
            if line.startswith(PROGRESS):
                print(line.rstrip(), file=sys.stderr, flush=True)
        return running

    def result(self) -> dict:
        try:
            self._proc.wait(timeout=self.timeout)
            self.progress()
            output = self._log.read_text(errors="replace")
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
            output = f"timed out after {self.timeout} s\n{self._log.read_text(errors='replace')}"
        try:
            if self._proc.returncode != 0 or not self._out.is_file():
                raise RuntimeError(f"compile worker (triton at {self.triton_path or 'site-packages'}) exited "
                                   f"{self._proc.returncode}:\n{output[-4000:]}")
            return json.loads(self._out.read_text())
        finally:
            self._tmp.cleanup()


def failures(result: dict) -> list[str]:
    """One line per problem of a compile run: an error row, a missing report, a missing kernel."""
    out = list(result["problems"])
    for r in result["rows"]:
        if r["error"]:
            out.append(f"triton {result['triton']}, {r['kernel']} cc {r['arch']} {_config(r)} "
                       f"(from {r['source']}): {r['error']}")
    return out


# ----------------------------------------------------------------------------- the table

def _config(row: dict) -> str:
    c = " ".join(f"{k}={v}" for k, v in row["constexprs"].items())
    return f"{c} warps={row['num_warps']} stages={row['num_stages']}"


def markdown(result: dict) -> str:
    """The register/spill/shared-memory table of one compile run, one row per variant, the
    archs side by side."""
    rows = result["rows"]
    names = list(dict.fromkeys(k for r in rows for k in r["constexprs"]))
    head = ["kernel", *names, "warps", "stages"]
    for arch in ARCHS:
        head += [f"regs {arch}", f"spill st/ld B {arch}", f"shared B {arch}"]
    head.append("first launched by")
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    by_variant = {}
    for r in rows:
        by_variant.setdefault((r["kernel"], json.dumps(r["constexprs"]), r["num_warps"], r["num_stages"]), {})[
            r["arch"]] = r
    for (kernel, _, warps, stages), per_arch in by_variant.items():
        first = next(iter(per_arch.values()))
        cells = [kernel]
        cells += [str(first["constexprs"].get(n, "")) for n in names]
        cells += [str(warps), str(stages)]
        for arch in ARCHS:
            r = per_arch.get(arch)
            if r is None or r["error"]:
                cells += ["ERROR", "", ""]
            else:
                cells += [str(r["regs"]), f"{r['spill_stores']}/{r['spill_loads']}", str(r["shared"])]
        cells.append(first["source"])
        lines.append("| " + " | ".join(cells) + " |")
    errors = failures(result)
    if errors:
        lines += ["", "Errors:", *[f"- {e}" for e in errors]]
    return "\n".join(lines)


def report(results: list[dict], command: str) -> str:
    out = ["# Triton kernels of submission.py compiled for cc 90 and cc 100 (no GPU)", "",
           f"Generated {datetime.date.today().isoformat()} by `{command}` on a CPU-only machine. Registers and",
           "spill stores/loads (bytes per thread) are ptxas's report of each compile; shared is the dynamic",
           "shared memory Triton requests at launch (metadata.shared). One row per compile variant: every",
           "config, decode and EVEN_G that submission.py can launch (see benchmarks/compile_table.py);",
           "'first launched by' is the first shape whose launch produced it."]
    for res in results:
        total = len(res["rows"])
        out += ["", f"## Triton {res['triton']}", "",
                f"{total} compiles ({len(res['variants'])} variants x {len(ARCHS)} archs) in {res['seconds']} s.", "",
                markdown(res)]
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- the cuda backend

CUDA_ARCHS = ("sm_90a", "sm_100a")


def cuda_rows(sub) -> list[dict]:
    """Registers, stack and spill bytes of every cuda kernel variant the submission can launch
    (its ``cuda_compile_variants``), compiled by NVRTC for each of CUDA_ARCHS (no GPU), read with
    the cubin's own record (``cuda_check.cubin_usage``); [] when NVRTC is missing here."""
    from cuda_check import cubin_usage  # `python3 eval.py compile`'s reading of a cubin
    try:
        sub.find_nvrtc()
    except Exception:  # noqa: BLE001 - no NVRTC here: no table
        return []
    rows = []
    todo = [cfg for cfg, full, plain in sub.cuda_compile_variants() if full and plain]
    for i, cfg in enumerate(todo):  # the masked tail and permuted-scale variants: compiled by the gate, not tabled
        if i % 10 == 9 or i == len(todo) - 1:
            print(f"{PROGRESS}cuda: {i + 1}/{len(todo)} configs", file=sys.stderr, flush=True)
        name, source = sub.cuda_kernel(cfg, True, True)
        for arch in CUDA_ARCHS:
            usage = cubin_usage(sub.cuda_compile(source, arch))
            rows.append({"config": cfg, "arch": arch, "regs": usage["registers"], "stack": usage["stack"],
                         "shared": usage["shared"]})
    return rows


def cuda_markdown(rows: list[dict]) -> str:
    out = ["| config | arch | registers | stack bytes | static shared bytes |", "|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['config']!r} | {r['arch']} | {r['regs']} | {r['stack']} | {r['shared']} |")
    return "\n".join(out)


# ----------------------------------------------------------------------------- CLI

def gate(submission: Path | str = SUBMISSION, server: Path | None = None) -> list[dict]:
    """Compile with the installed Triton and, where ``server`` is given, the server's, in parallel."""
    workers = [Worker(None, submission)] + ([Worker(server, submission)] if server is not None else [])
    while any([w.progress() for w in workers]) and time.monotonic() - workers[0]._started < workers[0].timeout:
        time.sleep(1)
    return [w.result() for w in workers]


def _out_problem(out: str) -> str:
    """'' when the markdown file ``out`` can be written, else why not (checked before compiling)."""
    return writable_file_problem(out, "--out", "compile-table.md")


def _submission_problem(path: str) -> str:
    """'' when ``path`` is a Python file that imports (in a subprocess, as the workers will
    import it), else why not, in one line."""
    if not Path(path).is_file():
        return f"--submission {path} not found (or not a file)"
    code = "import sys; from harness import load_submission; load_submission(sys.argv[1])"  # the root: the cwd
    proc = subprocess.run([sys.executable, "-c", code, str(Path(path).resolve())], cwd=ROOT,
                          env=_child_env(None), capture_output=True, text=True, timeout=WORKER_TIMEOUT_S)
    if proc.returncode:
        last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return f"--submission {path} does not import: {last}"
    return ""


def summary(results: list[dict], rows: list[dict]) -> list[str]:
    """A few lines for the terminal (the table itself goes to the file): per Triton version the
    compile count, time, register range, spills and errors; the cuda backend's the same."""
    out = []
    for res in results:
        ok = [r for r in res["rows"] if not r["error"]]
        regs = [r["regs"] for r in ok if r["regs"]]
        spills = sum(1 for r in ok if (r["spill_stores"] or 0) + (r["spill_loads"] or 0))
        out.append(f"Triton {res['triton']}: {len(res['rows'])} compiles ({len(res['variants'])} variants x "
                   f"{len(ARCHS)} archs) in {res['seconds']} s; registers "
                   f"{min(regs, default=0)}-{max(regs, default=0)}; {spills} with spills; "
                   f"{len(failures(res))} errors")
        out += [f"  error: {e}" for e in failures(res)]
    if rows:
        regs = [r["regs"] for r in rows]
        out.append(f"cuda backend: {len(rows)} compiles; registers {min(regs)}-{max(regs)}; "
                   f"{sum(1 for r in rows if r['stack'])} with a stack (spilled registers)")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--submission", default=None, help="the file whose kernels are compiled (default: the "
                        "kit's submission.py)")
    parser.add_argument("--out", default=None, help=f"markdown file written (default {OUT_MD.relative_to(ROOT)})")
    parser.add_argument("--server-triton", default=None, help=f"folder holding triton=={SERVER_TRITON} "
                        f"(default ${ENV_SERVER_TRITON} or {server_triton_dir()})")
    parser.add_argument("--installed-only", action="store_true", help="skip the server's Triton")
    parser.add_argument("--install-server-triton", action="store_true",
                        help=f"install triton=={SERVER_TRITON} into the server-Triton folder if missing, and exit")
    parser.add_argument("--worker", metavar="JSON", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.install_server_triton:
        idle = [flag for flag, value in (("--submission", args.submission), ("--out", args.out),
                                          ("--installed-only", args.installed_only)) if value]
        if idle:
            parser.error(f"--install-server-triton installs and exits: {', '.join(idle)} would do nothing")
    elif args.installed_only and args.server_triton:
        parser.error("--server-triton names the server's Triton, which --installed-only leaves out")
    args.submission, args.out = args.submission or str(SUBMISSION), args.out or str(OUT_MD)
    if args.worker:
        Path(args.worker).write_text(json.dumps(compile_all(args.submission)))
        return 0
    server = Path(args.server_triton) if args.server_triton else server_triton_dir()
    if args.install_server_triton:
        print(f"server Triton {SERVER_TRITON}: {install_server_triton(server)}")
        return 0
    if args.installed_only:
        server = None
    elif triton_version_at(server) != SERVER_TRITON:
        print(f"error: no triton=={SERVER_TRITON} at {server}; run `python3 benchmarks/compile_table.py "
              "--install-server-triton` (or pass --installed-only)", file=sys.stderr)
        return 2
    problem = _out_problem(args.out) or refusals.source_problem(args.submission)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        sub = load_submission(args.submission)
    except Exception as exc:  # noqa: BLE001 - the file's own code failed: one line
        print(f"error: {one_line(f'--submission {args.submission} does not import: {type(exc).__name__}: {exc}')}",
              file=sys.stderr)
        return 2
    cuda = hasattr(sub, "cuda_compile_variants")
    if cuda and refusals.cuda_buildable(sub):  # the cuda part's first config, each arch, before the Triton workers
        first = [(cfg, arch) for cfg, _, _ in sub.cuda_compile_variants()[:1] for arch in CUDA_ARCHS]
        problem = refusals.first_build_problem(sub, first)
        if problem:
            print(f"error: --submission {args.submission}: {problem}", file=sys.stderr)
            return 2
    problem = _submission_problem(args.submission)  # it imports as the workers will import it
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        results = gate(args.submission, server)
    except RuntimeError as exc:  # a worker died: its last line says why
        print(f"error: {str(exc).strip().splitlines()[-1]}", file=sys.stderr)
        return 1
    command = "python3 benchmarks/compile_table.py" + (" --installed-only" if server is None else "")
    text = report(results, command)
    try:
        rows = cuda_rows(sub) if cuda else []
    except getattr(sub, "CudaBuildError", RuntimeError) as exc:  # a later config's: the line above names it
        print(f"error: --submission {args.submission}: {refusals.build_line(exc)}", file=sys.stderr)
        return 2
    if rows:
        text += ("\n## CUDA backend (NVRTC " + ".".join(map(str, sub.nvrtc_version()))
                 + ")\n\nEvery config the cuda backend can launch (whole steps, plain scales; the gate in "
                 "tests/test_cuda_backend.py\ncompiles the other variants too), read from the cubin (what "
                 "cuobjdump -res-usage prints). A stack\nabove 0 is spilled registers (the MINB configs trade a "
                 "few for occupancy)."
                 "\n\n" + cuda_markdown(rows) + "\n")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print("\n".join(summary(results, rows)))
    print(f"the table: {args.out}")
    return 1 if any(failures(r) for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
