"""Shared test setup.

On a machine without CUDA, Triton kernels run in Triton's interpreter: the variable must be
set before any ``@triton.jit`` function is created, hence here, before tests import modules.
"""

import json
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The official shapes as (m, k, l, seed) tuples, from the kit's single source.
_SHAPES = json.loads((ROOT / "shapes.json").read_text())
OFFICIAL_TESTS = [(t["m"], t["k"], t["l"], t["seed"]) for t in _SHAPES["tests"]]
BENCHMARKS = [(t["m"], t["k"], t["l"], t["seed"]) for t in _SHAPES["benchmarks"]]

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


# ------------------------------------------------------------------ Triton's interpreter: patched once a launch
# Under TRITON_INTERPRET=1 Triton re-patches triton.language for the interpreter at every call of a
# @triton.jit helper (triton.runtime.interpreter._patch_lang: inspect.getmembers over the language
# modules), although the launch that runs the helper patched the same modules already: a third of
# the interpreter tests' CPU (cProfile of test_interpreter_tile_shapes[plain-scales-cfg4], Triton
# 3.9.0: 22 of 63 s). Within one launch (GridExecutor.__call__) a helper whose language modules
# were patched earlier in the launch (by the launch itself, or by a helper: Triton never undoes a
# helper's patch) runs without patching again; everything else goes through Triton's own code.
class _NoPatchScope:
    """What a skipped patch gives back: nothing to restore (the launch's own scope restores)."""

    def restore(self) -> None:
        pass


def interpreter_patches_once() -> bool:
    """Install the once-per-launch patching in triton.runtime.interpreter; False (and nothing
    changed) where that module lacks the functions it wraps."""
    try:
        import triton.language as tl
        from triton.runtime import interpreter as ti
    except Exception:  # noqa: BLE001 - no Triton, or one without an interpreter: nothing to speed up
        return False
    grid, patch = getattr(ti, "GridExecutor", None), getattr(ti, "_patch_lang", None)
    if grid is None or patch is None or "__call__" not in vars(grid):
        return False
    if getattr(patch, "kit_once", False):
        return True
    state = threading.local()
    langs: dict = {}  # fn -> the language modules in its globals (what _patch_lang patches for it)

    def langs_of(fn) -> frozenset:
        if fn not in langs:
            langs[fn] = frozenset(id(v) for v in fn.__globals__.values() if v is tl or v is tl.core)
        return langs[fn]

    def patch_lang(fn):
        patched = getattr(state, "patched", None)
        if patched is not None and langs_of(fn) <= patched:
            return _NoPatchScope()
        scope = patch_lang.real(fn)
        if getattr(state, "in_launch", False):  # patched now for the rest of the launch (a helper's
            state.patched = (patched or frozenset()) | langs_of(fn)  # own patches are never undone)
        return scope

    def launch(self, *args, **kwargs):
        saved = getattr(state, "in_launch", False), getattr(state, "patched", None)
        state.in_launch, state.patched = True, None
        try:
            return launch.real(self, *args, **kwargs)
        finally:
            state.in_launch, state.patched = saved

    patch_lang.kit_once, patch_lang.real, launch.real = True, patch, grid.__call__
    ti._patch_lang, grid.__call__ = patch_lang, launch
    return True


if os.environ.get("TRITON_INTERPRET") == "1":
    interpreter_patches_once()

requires_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")


def progress(config: pytest.Config, message: str) -> None:
    """A line on the terminal now, past pytest's output capture, for a step that takes longer
    than ~10 s (a module fixture running many subprocesses) -- only with ``-s`` (capture off),
    so that the progress dots of a plain run stay on one line."""
    if config.getoption("capture") != "no":
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None:
        return
    if capture is None:
        reporter.write_line(message)
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(message)


def make_input(m: int, k: int, l: int, seed: int, device=None, dist: str = "official"):
    """The inputs of one case: ``reference.generate_input`` (official values; device None: CUDA
    when available), then ``quant.fill`` with ``dist`` (a key of ``quant.DISTRIBUTIONS``)."""
    import quant
    import reference
    return quant.fill(reference.generate_input(m, k, l, seed, device=device), dist)


def load_file(path: Path, name: str):
    """The Python file at ``path`` imported as a module named ``name`` (the kit's one loader,
    harness.load_submission, leaving sys.path and sys.modules as they were)."""
    import harness

    return harness.load_submission(path, name, keep=False)


def module_of(text: str, name: str):
    """``text`` written to a file of its own and imported from it as a module named ``name``. A real
    file: Triton's @jit reads the source of its functions from their file when it compiles them."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="nvfp4_test_")) / f"{name}.py"
    path.write_text(text)
    return load_file(path, name)


def assert_server_test_mode_passes(folder: Path, submission: Path, dist: str | None = None) -> None:
    """The server's layout in ``folder`` (its files and the kit's support files beside ``submission``
    copied as submission.py), the official test cases, ``python eval.py test FILE`` with POPCORN_FD
    (``dist``: the kit's input distribution, None the official one): every case passes."""
    import shutil

    import harness

    for name in (*harness.SERVER_FILES, *harness.KIT_SUPPORT_FILES):
        shutil.copy(ROOT / name, folder / name)
    shutil.copy(submission, folder / "submission.py")
    (folder / "tests.txt").write_text(harness.test_file_text(harness.shape_set("tests")))
    env = {"POPCORN_SEED": None, harness.ENV_DISTRIBUTION: dist, harness.ENV_CHECK_INPUTS: None,
           harness.ENV_BACKEND: None}
    run = harness.run_protocol(folder, "test", "tests.txt", env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.lines["check"] == "pass", run.lines
    count = int(run.lines["test-count"])
    assert count == len(OFFICIAL_TESTS)
    assert all(run.lines[f"test.{i}.status"] == "pass" for i in range(count)), run.lines


def replace_inputs(data, **new):
    """``data`` (a, b, sfa, sfb, sfa_p, sfb_p, c) with the tensors named in ``new`` replaced: the
    bad-input tests' one way of building a broken input tuple."""
    names = ("a", "b", "sfa", "sfb", "sfa_p", "sfb_p", "c")
    return tuple(new.get(n, t) for n, t in zip(names, data, strict=True))


# The kit's own top-level modules: a test that loads one of them anew (compile_table.load_submission
# and bench_kernel.py install a fresh ``submission`` module, as their command lines need) must not
# hand the next test another module object than the one its file imported.
KIT_MODULES = ("submission", "eval", "audit", "reference", "utils", "task", "quant", "nvfp4")


@pytest.fixture(autouse=True)
def _kit_modules_as_found():
    """Each test leaves sys.modules' entries of the kit's modules, and sys.path, as it found them
    (the suite's result then does not depend on the order of its tests: a submission loaded from a
    test's folder puts that folder on sys.path, and worker processes spawned later inherit it)."""
    before = {name: sys.modules.get(name) for name in KIT_MODULES}
    path = list(sys.path)
    yield
    sys.path[:] = path
    for name, module in before.items():
        if module is not None and sys.modules.get(name) is not module:
            sys.modules[name] = module


@pytest.fixture
def device() -> torch.device:
    return torch.device("cuda" if HAS_CUDA else "cpu")


def set_backend(monkeypatch, sub, name: str, **fields) -> None:
    """For one test, backend ``name`` of ``sub``'s registry with ``fields`` of its record replaced
    (e.g. ``run=stub``, ``supported=lambda device: (True, "")``)."""
    monkeypatch.setitem(sub.BACKENDS, name, sub.BACKENDS[name]._replace(**fields))


def kernel_backends(sub) -> list:
    """The backends of ``sub``'s registry that auto races on a GPU, in their order."""
    return [name for name, b in sub.BACKENDS.items() if b.races]


# ---- The suite in parts: `pytest --part N/M` (what `.ci/gpu-run OUTDIR --part N/M` runs) ----
# Each test file goes whole to one part; files are dealt out by weight, heaviest first, each to
# the part with the least weight so far (ties: the lower part), so the parts are deterministic and
# every collected test is in exactly one of them (tests/test_parts.py checks both).
# Weights: estimated seconds per file on one H100 80GB HBM3 (torch 2.11, triton 3.6). The total is
# the measured one: the whole suite took four parts of about 9 minutes each on 2026-11-25
# (benchmarks/history/2026-11-25-h100-f0455a2.md); its split among the
# files is an estimate from what each file runs on a GPU (timed A/Bs, eval.py subprocesses,
# kernel compiles), not a per-file measurement. A run with --part prints each file's measured
# seconds at its end: replace these numbers by those. A file missing here weighs DEFAULT_FILE_WEIGHT.
FILE_WEIGHTS = {
    "test_ab.py": 360, "test_eval_protocol.py": 300, "test_submission.py": 210, "test_audit.py": 180,
    "test_cuda_backend.py": 150, "test_triton_kernel.py": 150, "test_readme.py": 120, "test_starter.py": 90,
    "test_modal_app.py": 75, "test_compile_gate.py": 60, "test_eval_units.py": 45, "test_bench_kernel.py": 45,
    "test_compare.py": 45, "test_cute.py": 30, "test_quant.py": 30, "test_reference.py": 30, "test_verify.py": 30,
    "test_apply_table.py": 30, "test_roofline.py": 30, "test_registry.py": 30, "test_read_policies.py": 20,
    "test_floor.py": 20, "test_sass_count.py": 15, "test_isolation.py": 10, "test_parts.py": 30, "test_contract.py": 30,
    "test_projection.py": 15, "test_result_paths.py": 10, "test_bench_configs.py": 20, "test_cuda_check.py": 10,
}
DEFAULT_FILE_WEIGHT = 30


def parse_part(spec: str) -> tuple[int, int]:
    """``"N/M"`` -> (N, M) with 1 <= N <= M; anything else is a UsageError naming the form."""
    n, sep, m = str(spec).partition("/")
    if sep and n.strip().isdigit() and m.strip().isdigit() and 1 <= int(n) <= int(m):
        return int(n), int(m)
    raise pytest.UsageError(f"--part {spec!r}: expected N/M with whole numbers 1 <= N <= M (e.g. --part 2/5)")


def assign_parts(files, m: int) -> dict[str, int]:
    """Test file name -> its part (1..m): heaviest first (then by name), each to the lightest part."""
    load = [0] * m
    out = {}
    for name in sorted(set(files), key=lambda f: (-FILE_WEIGHTS.get(f, DEFAULT_FILE_WEIGHT), f)):
        part = min(range(m), key=lambda i: (load[i], i))
        load[part] += FILE_WEIGHTS.get(name, DEFAULT_FILE_WEIGHT)
        out[name] = part + 1
    return out


def suite_files(extra=()) -> list[str]:
    """The names of tests/test_*.py, with ``extra`` (files collected from elsewhere): the
    assignment depends on the folder, not on which files one command line names."""
    return sorted({p.name for p in (ROOT / "tests").glob("test_*.py")} | set(extra))


# ---- Both cores: test files in worker processes (pytest-xdist, in the dev extra) ----
# On a machine without a CUDA GPU a plain `python3 -m pytest` runs whole test files in
# NVFP4_TEST_WORKERS processes (default: the CPUs this process may use, at most MAX_AUTO_WORKERS),
# each file to one worker, the heaviest files first (CPU_FILE_SECONDS), so a module's fixtures run
# once. One process instead: where CUDA is present (the GPU tests time kernels and must not share
# the GPU), under --part or --gpu-only (what .ci/gpu-run runs), when the command line names single
# tests (`file::test`) or one file, with -n 0, without pytest-xdist installed, with NVFP4_TEST_WORKERS=1, and
# in a pytest started by a test (an xdist worker's environment names it).
WORKERS_ENV = "NVFP4_TEST_WORKERS"
MAX_AUTO_WORKERS = 4
# CPU seconds per test file (its tests and the processes they start; setup + call + teardown) of the
# suite with two workers on the 2-core CPU machine, 2026-11-29, kit f737615: only the order in which
# files are handed to the workers (heaviest first) uses them. A file missing here (under 5 s) counts
# DEFAULT_CPU_SECONDS.
CPU_FILE_SECONDS: dict[str, float] = {
    "test_compile_gate.py": 228, "test_cuda_backend.py": 143, "test_eval_protocol.py": 111,
    "test_triton_kernel.py": 82, "test_ab.py": 67, "test_readme.py": 61, "test_modal_app.py": 58,
    "test_audit.py": 39, "test_cute.py": 35, "test_ncu_profile.py": 34, "test_starter.py": 23, "test_quant.py": 19,
    "test_sass_count.py": 17, "test_workers.py": 16, "test_submission.py": 15, "test_bench_kernel.py": 14,
    "test_apply_table.py": 13, "test_eval_units.py": 11, "test_bundle.py": 10, "test_imports.py": 9,
    "test_read_policies.py": 8, "test_parts.py": 6, "test_contract.py": 6,
    "test_cuda_check.py": 32,  # 2026-12-07, kit 9c8a8ac, one process, a fresh cache as on CI (cached: 8)
}
DEFAULT_CPU_SECONDS = 3.0


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the OS tells it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def auto_workers(config, environ=os.environ, cuda: bool = HAS_CUDA) -> tuple[int, str]:
    """(worker processes for this run, why): 0 means the one pytest process runs every test."""
    if not config.pluginmanager.hasplugin("xdist"):  # not installed, or -p no:xdist: no -n option either
        return 0, "pytest-xdist not installed or disabled"
    if getattr(config.option, "numprocesses", None) is not None:
        return 0, "-n given"
    if environ.get("PYTEST_XDIST_WORKER"):
        return 0, "a pytest started by a test"
    if cuda:
        return 0, "a CUDA GPU is present (its tests time kernels)"
    if config.getoption("part", None) or config.getoption("gpu_only", False):
        return 0, "--part/--gpu-only"
    if config.getoption("collectonly", False) or config.getoption("usepdb", False):
        return 0, "--collect-only/--pdb"
    if any("::" in str(arg) for arg in config.args):
        return 0, "single tests named"
    if len(config.args) == 1 and str(config.args[0]).endswith(".py"):
        return 0, "one test file"  # a file goes whole to one worker: the others would only start
    raw = environ.get(WORKERS_ENV, "").strip()
    if raw:
        if not raw.isdigit():
            raise pytest.UsageError(f"{WORKERS_ENV}={raw!r}: expected a whole number of worker processes (1: none)")
        n = int(raw)
        return (n, f"{WORKERS_ENV}={n}") if n > 1 else (0, f"{WORKERS_ENV}={raw}")
    cpus = usable_cpus()
    n = min(cpus, MAX_AUTO_WORKERS)
    return (n, f"{cpus} CPUs") if n > 1 else (0, "one CPU")


# One compute thread per worker: torch's CPU ops (and the harness workers, eval.py runs and tools the
# tests start, which inherit the variable) otherwise each take a thread per core, and N workers on N
# cores spin-wait on each other's cores. Measured on the 2-core CPU machine, 2026-11-29, kit f9d3153:
# the whole suite with 2 workers, 11 min 12 s and 1301 CPU-s with torch's default, 10 min 13 s and
# 1183 CPU-s with one thread (docs/setup.md, "How long"). A value the user set is kept.
THREADS_ENV = "OMP_NUM_THREADS"


def worker_threads_env(environ=os.environ) -> dict:
    """What a run with worker processes adds to the environment before they start."""
    return {} if environ.get(THREADS_ENV, "").strip() else {THREADS_ENV: "1"}


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    n, _ = auto_workers(config)
    if n > 1:  # what `-n N --dist loadfile` sets, before xdist reads it
        config.option.numprocesses = n
        config.option.dist = "loadfile"
        config.option.tx = ["popen"] * n
        config.option.loadscopereorder = False  # keep the order below: heaviest files first
        os.environ.update(worker_threads_env())  # the workers start after this hook, with it


def file_order_key(path_name: str) -> float:
    return -CPU_FILE_SECONDS.get(path_name, DEFAULT_CPU_SECONDS)


def pytest_addoption(parser):
    parser.addoption("--part", metavar="N/M", default=None,
                     help="run only part N of M of the suite (whole test files, balanced by the "
                          "weights in tests/conftest.py); prints the seconds per file at the end")
    parser.addoption("--gpu-only", action="store_true", default=False,
                     help="run only the tests that need a GPU (marked gpu, or skipped where there is no "
                          "CUDA GPU by a skipif naming it): on a GPU machine after the CPU suite passed")


def needs_gpu(item) -> bool:
    """Whether a test is one of the GPU tests: the ``gpu`` marker, or a skipif whose reason names a
    CUDA GPU and whose condition is false here (it would run on this machine)."""
    if item.get_closest_marker("gpu") is not None:
        return True
    for mark in item.iter_markers("skipif"):
        reason = str(mark.kwargs.get("reason", ""))
        if ("CUDA" in reason or "GPU" in reason) and mark.args and not mark.args[0] and "without" not in reason:
            return True
    return False


def pytest_configure(config):
    _part(config)  # a bad --part is refused before anything is collected
    if not os.environ.get(CUBINS_ENV):  # this run's own folder; worker processes inherit the variable
        os.environ[CUBINS_ENV] = config._nvfp4_cubins = tempfile.mkdtemp(prefix="nvfp4_test_cubins_")


def pytest_unconfigure(config):
    folder = getattr(config, "_nvfp4_cubins", None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop(CUBINS_ENV, None)


# --------------------------------------------------------------------------- a collection in this process
class _Collected:
    """What an in-process pytest collected: the ids it kept, and how many it deselected."""

    def __init__(self):
        self.ids, self.deselected = [], 0

    def pytest_deselected(self, items):
        self.deselected += len(items)

    def pytest_collection_finish(self, session):
        self.ids = [item.nodeid for item in session.items]


def collect_here(args: list[str], monkeypatch, capsys) -> tuple[int, str, list[str], int]:
    """``pytest --collect-only ARGS`` in a pytest session of this process, from the kit's root as
    a plain run starts: (exit status, what it printed, the test ids it kept, how many it
    deselected). The suite's test modules are imported already here, so it collects without
    importing and assertion-rewriting them again, as a second process would (about 8 CPU-s on the
    2-core CPU machine, 2026-11-29, kit dfc6fea)."""
    monkeypatch.chdir(ROOT)
    capsys.readouterr()
    found = _Collected()
    code = pytest.main([*args, "--collect-only"], plugins=[found])
    return code, capsys.readouterr().out, found.ids, found.deselected


# --------------------------------------------------------------------------- NVRTC cubins shared in a run
# The cuda backend's kernels are compiled by several test files (every variant in
# test_cuda_backend.py; the SASS counts, the ring and others a subset): each source is compiled
# once per run, by whichever test (in whichever worker process) comes first.
CUBINS_ENV = "KIT_TEST_CUBINS"  # not an NVFP4_ name: tests check that the kit passes no NVFP4_ setting on


@pytest.fixture
def shared_cubins(monkeypatch):
    """submission.cuda_compile, remembered for this run in the folder $KIT_TEST_CUBINS: the same
    source, arch and options compiled earlier in the run (any test, any worker) give that cubin
    back; the first compile of each is NVRTC's, and one that fails is never remembered."""
    import hashlib

    import submission
    real, folder = submission.cuda_compile, Path(os.environ[CUBINS_ENV])

    def cuda_compile(source: str, arch: str, defines: dict | None = None) -> bytes:
        options = (submission.cuda_options(arch, defines), submission._profiling())
        path = folder / (hashlib.sha256(repr((source, arch, options)).encode()).hexdigest() + ".cubin")
        if path.is_file():
            return path.read_bytes()
        cubin = real(source, arch, defines)
        part = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}")
        part.write_bytes(cubin)
        os.replace(part, path)  # whole or absent: another worker may read it at once
        return cubin

    monkeypatch.setattr(submission, "cuda_compile", cuda_compile)


def _part(config):
    spec = config.getoption("part", None)
    return parse_part(spec) if spec else None


def pytest_report_header(config):
    part = _part(config)
    if part is None:
        n = getattr(config.option, "numprocesses", None)
        if n and config.option.dist == "loadfile":
            return (f"{n} worker processes, whole test files each, the heaviest first "
                    f"(tests/conftest.py; {WORKERS_ENV}=1 or -n 0: one process)")
        return None
    n, m = part
    parts = assign_parts(suite_files(), m)
    mine = [f for f, p in parts.items() if p == n]
    weight = sum(FILE_WEIGHTS.get(f, DEFAULT_FILE_WEIGHT) for f in mine)
    return f"part {n}/{m} (estimated {weight} s on an H100): {', '.join(sorted(mine)) or 'no files'}"


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):  # a worker: hand out the heaviest files first
        items.sort(key=lambda item: file_order_key(item.path.name))  # stable: a file's order stays
    if config.getoption("gpu_only", False):
        drop = [item for item in items if not needs_gpu(item)]
        if drop:
            config.hook.pytest_deselected(items=drop)
        items[:] = [item for item in items if needs_gpu(item)]
    part = _part(config)
    if part is None:
        return
    n, m = part
    parts = assign_parts(suite_files(item.path.name for item in items), m)
    keep = [item for item in items if parts[item.path.name] == n]
    drop = [item for item in items if parts[item.path.name] != n]
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep


_FILE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter, config):
    part = _part(config)
    if part is None or not _FILE_SECONDS:
        return
    terminalreporter.write_sep("-", f"part {part[0]}/{part[1]}: seconds per test file (setup + call + teardown)")
    for path, seconds in sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{seconds:8.1f}  {path}")
