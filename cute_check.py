"""``python3 eval.py compile [SUBMISSION] [--arch ARCH ...] [--shapes NAME|FILE]``: compile a CuTe DSL
submission for Blackwell (or another architecture) on a machine without a GPU.

The CUTLASS Python DSL (``nvidia-cutlass-dsl``, ``import cutlass``) compiles a kernel for the
architecture named by ``CUTE_DSL_ARCH`` without asking a GPU; only loading and launching the
result needs one. For each architecture (default ``sm_100a``, the B200's) this check runs a
child process with ``CUTE_DSL_ARCH`` set and no GPU visible (``CUDA_VISIBLE_DEVICES=""``), in
which it

* imports the submission;
* replaces every launch of a compiled CuTe function by a no-op that counts it (the DSL's
  ``JitCompiledFunction.run_compiled_program``), and counts the functions compiled;
* per shape (default: the benchmark shapes of shapes.json; ``--shapes tests|benchmarks|all|FILE``
  as eval.py takes it), triggers compilation:

  - when the file defines ``compile_for(m, k, l)`` (the convention: compile what
    ``custom_kernel`` would run for that shape, return anything), it calls that;
  - otherwise it calls ``custom_kernel(data)`` on CPU tensors laid out as the server's inputs
    (``reference.generate_input(..., device="cpu")``). That reaches the compile of a submission
    that compiles on its first call (``cute.compile`` on pointers, as the official template
    does, or a ``@cute.jit`` function called directly), as long as nothing before the compile
    needs CUDA;

* prints one line per shape: ``compiled`` (with how many functions the DSL compiled for it;
  0 when an earlier shape's compiled function serves, e.g. dynamic shapes) or ``FAIL`` with the
  DSL's error in one line (the first error line of its message, then how many more).

What it cannot check: the results, anything the GPU decides at run time (a launch the device
refuses, a memory fault, a wrong answer), a kernel compiled only on a path that CPU tensors do
not take, and code that needs CUDA before it compiles (that is reported as a failure with its
error).

Exit status: 0 when every shape compiled for every architecture; 1 when one failed (or the
file did not import); 2 for a usage error, an ``--arch`` the installed DSL does not compile for
(one line naming those it does: the first child checks every ``--arch`` against the DSL's
``Arch`` list before anything is imported or compiled), a file that is not a CuTe DSL
submission (one line: it imports no ``cutlass``) or no DSL installed here
(``python3 -m pip install -e ".[cute]"``).

A DSL installed with ``pip install --target DIR`` (found through ``PYTHONPATH``) has its
package folder ``nvidia_cutlass_dsl/python_packages`` (``dsl_packages`` in later versions) added
to the path here, as its ``.pth`` file would.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_ARCHS = ("sm_100a",)
DSL_DIST = "nvidia-cutlass-dsl"
CUTE_IMPORT = re.compile(r"^\s*(?:import\s+cutlass\b|from\s+cutlass\b)", re.MULTILINE)
ARCH_RE = re.compile(r"^sm_\d{2,3}[af]?$")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
MAX_LINE = 300  # characters of an error kept in its one line
CHILD_TIMEOUT_S = 900  # one architecture: imports (~3 s) and the shapes' compiles (~1 s each measured)
EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


# --------------------------------------------------------------------------- helpers

def is_cute_source(text: str) -> bool:
    """Whether a submission's source imports the CUTLASS DSL (``import cutlass...`` or
    ``from cutlass... import``) on a line of its own."""
    return bool(CUTE_IMPORT.search(text))


def add_dsl_paths() -> None:
    """Make ``import cutlass`` work for a DSL installed with ``pip --target`` (no .pth read)."""
    if importlib.util.find_spec("cutlass") is not None:
        return
    spec = importlib.util.find_spec("nvidia_cutlass_dsl")
    if spec is None or not spec.submodule_search_locations:
        return
    for root in spec.submodule_search_locations:
        for name in ("python_packages", "dsl_packages"):
            folder = Path(root) / name
            if (folder / "cutlass").is_dir() and str(folder) not in sys.path:
                sys.path.append(str(folder))


def dsl_version() -> str | None:
    try:
        return importlib.metadata.version(DSL_DIST)
    except importlib.metadata.PackageNotFoundError:
        return None


def dsl_installed() -> bool:
    """Whether the CUTLASS DSL is installed and ``import cutlass`` finds it (``add_dsl_paths`` first)."""
    add_dsl_paths()
    return dsl_version() is not None and importlib.util.find_spec("cutlass") is not None


def one_line(exc: BaseException) -> str:
    """An exception of the DSL (or any) as one line: its type and the first line that says
    ``error`` in its message or its causes' (the DSL wraps compiler failures in an "ICE"
    banner and appends the IR), else the first line; with the count of further error lines."""
    texts, seen, e = [], set(), exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        texts.append(ANSI.sub("", str(e)))
        e = getattr(e, "cause", None) or e.__cause__ or e.__context__
    lines = list(dict.fromkeys(re.sub(r"\s+", " ", ln).strip() for t in texts for ln in t.splitlines()))
    lines = [ln for ln in lines if ln]
    lines = [ln for ln in lines if "ICE" not in ln and not ln.startswith("Caused exception:")] or lines
    errors = [ln for ln in lines if re.search(r"\berror\b", ln, re.IGNORECASE)]
    head = (errors or lines or [""])[0]
    more = len(errors) - 1
    text = f"{type(exc).__name__}: {head}" + (f" (+{more} more error lines)" if more > 0 else "")
    return text if len(text) <= MAX_LINE else text[:MAX_LINE - 3] + "..."


def load_shapes(name: str) -> list[tuple[int, int, int]]:
    """(m, k, l) of ``--shapes``: a named set of shapes.json (``harness.SHAPE_SETS``: tests,
    benchmarks, all) or a test file, as eval.py takes them. Raises ValueError naming the choices."""
    from harness import SHAPE_SETS, TestFileError, shape_cases
    try:
        cases = shape_cases(name, "benchmark")
    except TestFileError as exc:
        raise ValueError(f"--shapes must be one of {', '.join(SHAPE_SETS)} or a test file: {exc}") from None
    return [(int(c.args["m"]), int(c.args["k"]), int(c.args["l"])) for c in cases]


# --------------------------------------------------------------------------- child (one arch)

def dsl_archs() -> list[str] | None:
    """The architecture names the installed DSL compiles for (its ``Arch`` enum; aliases it
    resolves, such as sm_110 / sm_101, count too), or None where this DSL version has no such
    list. Imports the DSL: for the child process."""
    try:
        from cutlass.base_dsl.arch import Arch
    except ImportError:
        return None
    return list(Arch.__members__)


def unknown_archs(archs: list[str]) -> list[str]:
    """Those of ``archs`` the installed DSL does not compile for ([] where it has no list)."""
    try:
        from cutlass.base_dsl.arch import Arch
    except ImportError:
        return []
    out = []
    for arch in archs:
        try:
            Arch[arch]
        except KeyError:
            out.append(arch)
    return out


def _child(path: Path, shapes: list, archs: list | None = None) -> dict:
    """In a process with CUTE_DSL_ARCH set (this file run as a script: its folder, the kit's,
    first on sys.path): import, intercept launches, compile per shape. ``archs``: every
    architecture of the run, checked against the DSL's list first (``unknown_archs``); one it
    does not take stops this child before the submission is imported."""
    from harness import load_submission
    add_dsl_paths()
    out = {"version": dsl_version(), "arch": os.environ.get("CUTE_DSL_ARCH", ""), "import": None, "shapes": []}
    try:
        import cutlass
        from cutlass.base_dsl import jit_executor
    except Exception as exc:  # noqa: BLE001  (any import failure is reported, not raised)
        out["import"] = "the CUTLASS DSL does not import: " + one_line(exc)
        return out
    out["version"] = getattr(cutlass, "__version__", None) or out["version"]
    unknown = unknown_archs(archs or [])
    if unknown:
        out.update(unknown_archs=unknown, dsl_archs=dsl_archs())
        return out
    counts = {"compiled": 0, "launches": 0}
    cls = jit_executor.JitCompiledFunction
    init = cls.__init__

    def counting_init(self, *args, **kwargs):
        counts["compiled"] += 1
        init(self, *args, **kwargs)

    def no_launch(self, exe_args):
        counts["launches"] += 1
        return None

    cls.__init__ = counting_init
    _no_driver_jit(counts)
    cls.run_compiled_program = no_launch
    if hasattr(jit_executor, "JitExecutor"):
        jit_executor.JitExecutor.run_compiled_program = no_launch
    try:
        module = load_submission(path)
    except BaseException as exc:  # noqa: BLE001
        out["import"] = "the submission does not import: " + one_line(exc)
        return out
    hook = getattr(module, "compile_for", None)
    out["via"] = "compile_for" if callable(hook) else "custom_kernel"
    for m, k, l in shapes:
        before = dict(counts)
        t0 = time.perf_counter()
        row = {"shape": [m, k, l]}
        try:
            if callable(hook):
                hook(m, k, l)
            else:
                import reference
                module.custom_kernel(reference.generate_input(m, k, l, 1111, device="cpu"))
            row["ok"] = True
        except CompiledNoDriver:
            row["ok"] = True
            row["note"] = ("device code compiled; this DSL version's JIT engine needs a CUDA driver, so "
                           "its host-side wrapper was not built")
            out["shapes"].append(dict(row, seconds=round(time.perf_counter() - t0, 2),
                                      compiled=counts["compiled"] - before["compiled"], launches=0))
            break  # the DSL's state after this is not reliable: the parent goes on in a new process
        except BaseException as exc:  # noqa: BLE001
            row["ok"] = False
            row["error"] = one_line(exc)
        row["seconds"] = round(time.perf_counter() - t0, 2)
        row["compiled"] = counts["compiled"] - before["compiled"]
        row["launches"] = counts["launches"] - before["launches"]
        out["shapes"].append(row)
    out["total_compiled"] = counts["compiled"]
    return out


class CompiledNoDriver(BaseException):  # not Exception: the DSL wraps those
    """The DSL compiled the device code, then asked for a CUDA driver to build its JIT engine."""


def _no_driver_jit(counts: dict) -> None:
    """DSL versions before 4.4 (measured: 4.3.5) check for a CUDA driver (``cuInit``) after the
    device code compiled, when they wrap the module in a JIT engine; 4.5.2 does not. There, the
    driver check's error means the compile succeeded: it becomes ``CompiledNoDriver``."""
    try:
        from cutlass.base_dsl import compiler
    except ImportError:
        return
    cls = getattr(compiler, "Compiler", None)
    if cls is None or not hasattr(cls, "_check_cuda_dependencies_once"):
        return
    jit = cls.jit

    def jit_or_mark(self, *args, **kwargs):
        try:
            return jit(self, *args, **kwargs)
        except Exception as exc:
            if type(exc).__name__ == "CudaDriverDependencyError":
                counts["compiled"] += 1
                raise CompiledNoDriver() from None
            raise

    cls.jit = jit_or_mark


def _run_child(path: Path, arch: str, shapes: list, archs: list | None = None) -> dict:
    env = dict(os.environ, CUTE_DSL_ARCH=arch, CUDA_VISIBLE_DEVICES="", CUTE_DSL_DISABLE_FILE_CACHING="1")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(path), json.dumps(shapes),
           json.dumps(archs or [])]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"arch": arch, "import": f"no answer within {CHILD_TIMEOUT_S} s", "shapes": []}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("CUTE_CHECK "):
            return json.loads(line[len("CUTE_CHECK "):])
    tail = " | ".join(ln.strip() for ln in (proc.stderr or proc.stdout).strip().splitlines()[-3:])
    return {"arch": arch, "import": f"the check's process ended with status {proc.returncode}: {tail}"[:MAX_LINE],
            "shapes": []}


def run_arch(path: Path, arch: str, shapes: list, archs: list | None = None) -> dict:
    """Every shape for one architecture: one child process, or a new one after a shape that
    left the DSL without its JIT engine (``CompiledNoDriver``: the child stops there).
    ``archs``: the architectures the first child checks before anything is compiled (the
    result then holds ``unknown_archs`` and no shapes where the DSL lacks one)."""
    res = _run_child(path, arch, shapes, archs)
    if res.get("unknown_archs"):
        return res
    while not res.get("import") and len(res["shapes"]) < len(shapes):
        more = _run_child(path, arch, shapes[len(res["shapes"]):])
        if more.get("import"):
            res["import"] = more["import"]
            break
        res["shapes"] += more["shapes"]
    return res


def report(name: str, res: dict) -> bool:
    arch = res.get("arch", "?")
    if res.get("import"):
        print(f"{name} [{arch}] FAIL {res['import']}")
        return False
    ok = True
    compiled_before = False
    for row in res["shapes"]:
        m, k, l = row["shape"]
        label = f"{name} [{arch}] {m}x{k}x{l}:"
        if not row["ok"]:
            ok = False
            print(f"{label} FAIL {row['error']}")
        elif row["compiled"] == 0 and not compiled_before:
            ok = False
            print(f"{label} FAIL nothing was compiled ({res['via']} returned without a CuTe compilation; "
                  "define compile_for(m, k, l) to compile what custom_kernel runs on a GPU)")
        else:
            what = (f"{row['compiled']} function(s) compiled" if row["compiled"]
                    else "no new compilation (a function compiled for an earlier shape serves it)")
            launches = f", {row['launches']} launch(es) skipped" if row["launches"] else ""
            note = f" ({row['note']})" if row.get("note") else ""
            print(f"{label} compiled: {what}{launches}, {row['seconds']:.2f} s via {res['via']}{note}")
        compiled_before = compiled_before or row["compiled"] > 0
    return ok


# --------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        res = _child(Path(argv[1]), [tuple(s) for s in json.loads(argv[2])], json.loads(argv[3]) if argv[3:] else [])
        sys.stdout.flush()
        print("CUTE_CHECK " + json.dumps(res), flush=True)
        return 0
    ap = argparse.ArgumentParser(prog="python3 eval.py compile", description=__doc__.split("\n\n")[0])
    ap.add_argument("submission", nargs="?", default="submission.py", help="the file (default submission.py)")
    ap.add_argument("--arch", action="append", help="target, repeatable (default sm_100a, the B200); e.g. sm_90a")
    ap.add_argument("--shapes", default="benchmarks", metavar="tests|benchmarks|all|FILE",
                    help="the shapes compiled: a set of shapes.json or a test file, as eval.py takes them "
                         "(default benchmarks)")
    args = ap.parse_args(argv)
    path = Path(args.submission)
    from harness import submission_problem
    problem = submission_problem(path)
    if problem:  # a folder, a missing file, no .py: what it wants, in one line
        print(f"error: {problem}; eval.py compile takes a CuTe DSL submission file", file=sys.stderr)
        return EXIT_USAGE
    archs = args.arch or list(DEFAULT_ARCHS)
    bad = [a for a in archs if not ARCH_RE.match(a)]
    if bad:
        print(f"error: --arch takes names like sm_100a or sm_90a, got {', '.join(bad)}", file=sys.stderr)
        return EXIT_USAGE
    try:
        shapes = load_shapes(args.shapes)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        print(f"error: {path}: not UTF-8", file=sys.stderr)
        return EXIT_USAGE
    if not is_cute_source(text):
        print(f"{path}: not a CuTe DSL submission (it imports no `cutlass`): nothing to compile")
        return EXIT_USAGE
    if not dsl_installed():
        print(f"error: the CUTLASS DSL ({DSL_DIST}) is not installed here: python3 -m pip install -e \".[cute]\"",
              file=sys.stderr)
        return EXIT_USAGE
    results = []
    for arch in archs:  # the first child checks every --arch against the DSL before anything compiles
        res = run_arch(path.resolve(), arch, shapes, archs if not results else None)
        if res.get("unknown_archs"):
            known = res.get("dsl_archs") or []
            print(f"error: --arch {', '.join(res['unknown_archs'])}: {DSL_DIST} {res.get('version') or '?'} compiles "
                  f"for {', '.join(known)}", file=sys.stderr)
            return EXIT_USAGE
        results.append(res)
    version = next((r["version"] for r in results if r.get("version")), dsl_version())
    print(f"{path}: {DSL_DIST} {version}; shapes: {args.shapes}; no GPU used (launches skipped, results unchecked)")
    ok = True
    for res in results:
        ok = report(path.name, res) and ok
    return EXIT_OK if ok else EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
