"""The research tools (every benchmarks/*.py with a ``__main__``) on bad input: a kernel that does
not compile, a garbage or unwritable file, a flag that does nothing or a value it cannot take.
Each prints one line naming the config and the arch, the file or the flag (after argparse's usage,
where argparse refuses), exits 2 and shows no traceback of the kit's code.

The tools are called in this process, ``main(argv)``: every command's ``__main__`` exits with what
``main`` returns (checked below), argparse's refusals raise SystemExit(2), and an exception of the
kit's code would fail the test. A real process only for the two modules that are no commands.

The kernel that does not compile is the one a new user makes: ``int broken( {`` added to the
kit's kernels/nvfp4_gemv.cu and to submission.py's copy of it (a copy of the kit in a folder of
the test's, its bundle in sync). NVRTC's error (submission.CudaBuildError) comes at the first
config a tool compiles. The tools that compile on the CPU (sass_count, sass_dump, inflight,
projection, compile_table) report it here; the tools that need a GPU refuse on a machine without
one before they build anything (their case here), and on a GPU reach the build and report it
(the test marked gpu)."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HAS_CUDA, ROOT, load_file, requires_cuda
from test_apply_table import copy_kit, fixture

import submission
from benchmarks import (
    ab_calibration,
    apply_table,
    bench_configs,
    bench_kernel,
    compare,
    compile_table,
    cuda_build_probe,
    floor,
    inflight,
    latency,
    profile_one,
    projection,
    roofline,
    sass_count,
    sass_dump,
    server_sweep,
)

TOOLS = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if "__main__" in p.read_text())
MODULES = {"timing": "benchmarks/timing.py", "bench_options": "benchmarks/bench_options.py"}  # no commands
MAINS = {m.__name__.split(".")[-1]: m.main for m in (
    ab_calibration, apply_table, bench_configs, bench_kernel, compare, compile_table, cuda_build_probe, floor,
    inflight, latency, profile_one, projection, roofline, sass_count, sass_dump, server_sweep)}
BROKEN_LINE = "int broken( {"  # after the kernel's typedefs: NVRTC fails in about 0.03 s
AFTER = "typedef long long i64;\n"
GARBAGE = b"\x00\xff garbage {[ \n"
CONFIG = {"lpr": 8, "rpt": 2, "u": 4, "warps": 1}  # a config the kernel's rules take


def broken(text: str) -> str:
    assert text.count(AFTER) >= 1, "the kernel's typedefs moved: put BROKEN_LINE elsewhere"
    return text.replace(AFTER, AFTER + BROKEN_LINE + "\n", 1)


@pytest.fixture(scope="module")
def broken_kit(tmp_path_factory) -> Path:
    """A copy of the kit (submission.py, kernels/) whose kernel does not compile, its bundle in
    sync: its submission.py."""
    path = copy_kit(tmp_path_factory.mktemp("broken") / "kit")
    cu = path.parent / "kernels" / "nvfp4_gemv.cu"
    cu.write_text(broken(cu.read_text()))
    text = path.read_text()
    start = text.index('CUDA_SRC = r"""')
    path.write_text(text[:start] + broken(text[start:]))
    return path


@pytest.fixture(scope="module")
def broken_module(broken_kit):
    return load_file(broken_kit, "broken_submission")


@pytest.fixture
def kit_broken(monkeypatch, broken_module):
    """For one test, the kit's submission module is the broken copy wherever a tool takes it (each
    tool's ``submission``, sys.modules'), and the tools' caches of counts start empty."""
    for tool in (sass_count, inflight, projection, compare):
        monkeypatch.setattr(tool, "submission", broken_module)
    monkeypatch.setattr(bench_kernel, "submission", None)  # --submission sets it: put back after the test
    monkeypatch.setattr(inflight, "_MEASURED", {})
    monkeypatch.setattr(projection, "_STORE", [])
    monkeypatch.setitem(sys.modules, "submission", broken_module)


def garbage(tmp_path, name: str) -> str:
    path = tmp_path / name
    path.write_bytes(GARBAGE)
    return str(path)


def refused(capsys, tool: str, argv: list) -> str:
    """``tool``'s main(argv): exit status 2, nothing on stdout, one line on stderr (argparse's
    usage lines before it aside), no traceback; that line."""
    try:
        status = MAINS[tool](argv)
    except SystemExit as exc:  # argparse (usage, then its one error line) or ap.exit
        status = exc.code
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    lines = err.splitlines()
    if lines and lines[0].startswith("usage: "):
        lines = [ln for ln in lines if not ln.startswith(("usage: ", " "))]
    assert status == 2 and out == "" and len(lines) == 1, (status, out, err)
    return lines[0]


def _tools():
    missing = sass_count.missing_tools()
    if missing:
        pytest.skip(missing)


# --------------------------------------------------------------------------- every tool has its cases

def test_every_command_exits_with_what_its_main_returns():
    """``sys.exit(main())`` or ``raise SystemExit(main())`` ends each command, so main's 2 is the
    command's exit status; the modules that are no commands exit 2 themselves (tested below)."""
    assert set(TOOLS) == set(MAINS) | set(MODULES), set(TOOLS) ^ (set(MAINS) | set(MODULES))
    for tool in MAINS:
        tree = ast.parse((ROOT / "benchmarks" / f"{tool}.py").read_text())
        block = next(n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test))
        assert ast.unparse(block.body[-1]) in ("sys.exit(main())", "raise SystemExit(main())"), tool


def test_every_tool_has_a_bad_kernel_and_a_bad_file_case():
    kernel = set(CPU_BUILDS) | set(GPU_BUILDS) | {"apply_table"} | set(NO_KERNEL) | set(MODULES)
    files = {case.split()[0] for case in FILES} | set(NO_FILE) | set(MODULES)
    assert kernel == set(TOOLS) and files == set(TOOLS), (set(TOOLS) ^ kernel, set(TOOLS) ^ files)


# --------------------------------------------------------------------------- a kernel that does not compile

# The tools that compile on the CPU: {kit} is the broken kit's submission.py, {tmp} a folder of the test's.
CPU_BUILDS = {
    "sass_count": [],
    "sass_dump": ["--submission", "{kit}", "--out", "{tmp}/sass", "--only", "cuda"],
    "inflight": ["--md", "{tmp}/inflight.md"],
    "projection": ["--md", "{tmp}/projection.md"],
    "compile_table": ["--installed-only", "--submission", "{kit}", "--out", "{tmp}/table.md"],
}
NO_KERNEL = {"roofline": "roofline --plot-from draws a saved record: it builds no kernel"}


@pytest.mark.parametrize("tool", list(CPU_BUILDS))
def test_a_kernel_that_does_not_compile_is_one_line_naming_the_config_and_the_arch(tmp_path, capsys, kit_broken,
                                                                                  broken_kit, tool):
    """At the first config compiled, before anything is printed or written: the config, the arch,
    NVRTC's first error (the .cu line) and how many errors its log holds."""
    _tools()
    argv = [a.format(kit=broken_kit, tmp=tmp_path) for a in CPU_BUILDS[tool]]
    line = refused(capsys, tool, argv)
    assert " does not compile: nvfp4_gemv.cu(" in line and "error" in line and "CudaConfig(" in line, line
    assert " for sm_90a " in line or " for sm_100a " in line, line
    assert "errors in NVRTC's log)" in line, line
    assert list(tmp_path.iterdir()) == [], "nothing is written"


def test_a_sweep_is_not_applied_to_a_kernel_that_does_not_compile(tmp_path, capsys, broken_kit):
    """apply_table.py compiles nothing: a sweep names the kernel revision it timed, and the broken
    kernel is another revision (a sweep of it cannot have run), so the sweep is refused."""
    results = tmp_path / "sweep.json"
    results.write_text(json.dumps(fixture("h100")))
    before = broken_kit.read_text()
    line = refused(capsys, "apply_table", [str(results), "--submission", str(broken_kit)])
    assert line.startswith(f"error: the sweep records kernel revision {submission.kernel_revision()}, this "
                           "submission.py is kernel revision "), line
    assert broken_kit.read_text() == before


# The tools that need a GPU ({grid}: a grid of one config).
GPU_BUILDS = {
    "ab_calibration": ["--out", "{tmp}/calibration", "--submission", "{kit}"],
    "bench_configs": ["--grid", "{grid}"],
    "bench_kernel": ["--submission", "{kit}", "--shapes", "tests", "--no-server"],
    "compare": ["--strategies", "cuda", "--shape", "128x256x1", "--out", "{tmp}/compare"],
    "cuda_build_probe": ["--skip-load-inline"],
    "floor": [],
    "latency": [],  # its own kernel: the latency probe, broken the same way
    "profile_one": ["--shape", "128x256x1"],
    "server_sweep": ["--grid", "gs", "--out", "{tmp}/sweep"],
}


def _gpu_argv(tmp_path, broken_kit, tool, monkeypatch) -> list:
    grid = tmp_path.parent / f"{tmp_path.name}-grid.json"
    grid.write_text(json.dumps({"7168x16384x1": {"one": CONFIG}}))
    monkeypatch.setattr(latency, "PROBE_SRC", BROKEN_LINE + "\n" + latency.PROBE_SRC)
    return [a.format(kit=broken_kit, tmp=tmp_path, grid=grid) for a in GPU_BUILDS[tool]]


@pytest.mark.skipif(HAS_CUDA, reason="checks the refusal without a GPU")
@pytest.mark.parametrize("tool", list(GPU_BUILDS))
def test_without_a_gpu_a_gpu_tool_refuses_before_building_the_kernel(tmp_path, capsys, monkeypatch, kit_broken,
                                                                     broken_kit, tool):
    line = refused(capsys, tool, _gpu_argv(tmp_path, broken_kit, tool, monkeypatch))
    assert "needs a CUDA GPU" in line, line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("tool", list(GPU_BUILDS))
def test_on_a_gpu_a_kernel_that_does_not_compile_stops_the_tool_in_one_line(tmp_path, capsys, monkeypatch,
                                                                             kit_broken, broken_kit, tool):
    """Before any timing: the config (the latency probe: its name) and this GPU's arch."""
    line = refused(capsys, tool, _gpu_argv(tmp_path, broken_kit, tool, monkeypatch))
    assert " does not compile: " in line and " for sm_" in line, line
    assert ("the latency probe" if tool == "latency" else "CudaConfig(") in line, line
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- a garbage or unwritable file

# "TOOL what": (argv, words of the line); {garbage.EXT}: a file of garbage bytes, {tmp}: a folder
# of the test's (an output named by a folder where a file goes), {a_file}: a file where a folder goes.
FILES = {
    "ab_calibration --submission garbage": (["--out", "{tmp}/cal", "--submission", "{garbage.py}"],
                                            "error: --submission {garbage.py} does not import: "),
    "ab_calibration --out a file": (["--out", "{a_file}"], "error: --out {a_file} is a file, not a folder"),
    "apply_table RESULTS.json garbage": (["{garbage.json}", "--dry-run"], "error: cannot read {garbage.json}: "),
    "apply_table --submission garbage": (["tests/fixtures/sweep-h100.json", "--dry-run", "--submission",
                                          "{garbage.py}"], "error: --submission {garbage.py}: cannot read it "),
    "bench_configs --grid garbage": (["--grid", "{garbage.json}"],
                                     "bench_configs.py: --grid {garbage.json}: not a readable JSON file"),
    "bench_kernel --grid garbage": (["--sweep", "--grid", "{garbage.json}"],
                                    "error: --grid {garbage.json}: not a readable JSON file"),
    "bench_kernel --submission garbage": (["--submission", "{garbage.py}"],
                                          "error: --submission {garbage.py} does not import: "),
    "bench_kernel --json a folder": (["--json", "{tmp}"], "error: --json {tmp} is a folder"),
    "compare --out a file": (["--out", "{a_file}"], "error: --out {a_file} is a file, not a folder"),
    "compile_table --submission garbage": (["--installed-only", "--submission", "{garbage.py}"],
                                           "error: --submission {garbage.py} does not import: "),
    "floor --json a folder": (["--json", "{tmp}"], "floor.py: --json {tmp} is a folder"),
    "inflight --latency garbage": (["--latency", "{garbage.json}"], "inflight.py: {garbage.json}: "),
    "inflight --md a folder": (["--md", "{tmp}"], "inflight.py: --md {tmp} is a folder"),
    "latency --json a folder": (["--json", "{tmp}"], "latency.py: --json {tmp} is a folder"),
    "projection FULL.json SMS.json garbage": (["{garbage.txt}", "{garbage.txt}"],
                                              "projection.py: {garbage.txt}: not a readable JSON file"),
    "projection --latency garbage": (["--latency", "{garbage.json}"], "projection.py: {garbage.json}: "),
    "roofline --plot-from garbage": (["--plot-from", "{garbage.json}", "--out", "{tmp}/r.png"],
                                     "roofline: {garbage.json}: not a readable JSON file"),
    "roofline --out a folder": (["--plot-from", "{garbage.json}", "--out", "{tmp}"],
                                "roofline: --out {tmp} is a folder"),
    "sass_dump --submission garbage": (["--submission", "{garbage.py}", "--out", "{tmp}/sass", "--only", "cuda"],
                                       "error: --submission {garbage.py} does not import: "),
    "sass_dump --out a file": (["--out", "{a_file}", "--only", "cuda"],
                               "error: --out {a_file} is a file, not a folder"),
    "server_sweep --out a file": (["--grid", "gs", "--out", "{a_file}"],
                                  "server_sweep.py: --out {a_file} is a file, not a folder"),
}
NO_FILE = {
    "cuda_build_probe": "reads and writes no file",
    "profile_one": "reads and writes no file (its --shape and --config: the flags' test)",
    "sass_count": "reads and writes no file (its --config: the flags' test)",
}


@pytest.mark.parametrize("case", list(FILES))
def test_a_garbage_or_unwritable_file_is_one_line_naming_it(tmp_path, capsys, case):
    """Before any other work (on a machine without a GPU too): the option and the file."""
    argv, words = FILES[case]
    names = {f"garbage.{ext}": garbage(tmp_path, f"garbage.{ext}") for ext in ("py", "json", "txt")}
    (tmp_path / "a_file").write_text("")
    fill = {**names, "tmp": str(tmp_path), "a_file": str(tmp_path / "a_file")}

    def filled(text: str) -> str:
        for key, value in fill.items():
            text = text.replace("{" + key + "}", value)
        return text

    before = sorted(tmp_path.iterdir())
    line = refused(capsys, case.split()[0], [filled(a) for a in argv])
    assert filled(words) in line, line
    assert sorted(tmp_path.iterdir()) == before, "nothing is written"


@pytest.mark.parametrize("module", list(MODULES))
def test_the_modules_that_are_no_commands_say_so_whatever_they_are_given(tmp_path, module):
    """A module run as a script with a file: exit 2, what to run instead, no traceback (a process
    that imports no torch)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, MODULES[module], garbage(tmp_path, "garbage.json")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr, proc.stderr
    assert "A module, not a command" in proc.stderr and "python3 benchmarks/bench_kernel.py --help" in proc.stderr


# --------------------------------------------------------------------------- a flag that does nothing

# "TOOL what": (argv, words of the error line); {tmp} a folder of the test's, {grid} a grid of an
# official test shape (256x7168x1), not a benchmark shape.
FLAGS = {
    "sass_count --arch without --config": (["--arch", "sm_90a"], "--arch sm_90a goes with --config"),
    "sass_count --config garbage": (["--config", "garbage"], "--config garbage: "),
    "sass_count --config the kernel refuses": (["--config", "lpr=3,rpt=1,u=1,warps=1"], "--config lpr=3,"),
    "bench_kernel --probes without --sweep": (["--probes"], "--probes only goes with --sweep"),
    "bench_kernel --grid without --sweep": (["--grid", "{grid}"], "--grid only goes with --sweep"),
    "bench_kernel --probes without cuda": (["--sweep", "--probes", "--backends", "triton"],
                                           "--backends triton times no cuda"),
    "bench_kernel --grid of shapes not swept": (["--sweep", "--grid", "{grid}"],
                                                "not among the shapes swept (--shapes benchmarks"),
    "compare --shapes with --shape": (["--shapes", "tests", "--shape", "128x256x1"],
                                      "--shapes tests and --shape: --shape's shapes replace the set"),
    "compile_table --server-triton with --installed-only": (["--installed-only", "--server-triton", "{tmp}"],
                                                            "which --installed-only leaves out"),
    "compile_table --install-server-triton with --out": (["--install-server-triton", "--out", "{tmp}/t.md"],
                                                         "installs and exits: --out would do nothing"),
    "profile_one --read-policy without --backend read": (["--read-policy", "plain"],
                                                         "--read-policy plain goes with --backend read"),
    "profile_one --config with --backend read": (["--backend", "read", "--config", "8,2,4,1,2"],
                                                 "the read kernel takes no config"),
    "profile_one --shape garbage": (["--shape", "garbage"], "--shape 'garbage': expected MxKxL"),
    "ab_calibration more sets per experiment than sets": (["--out", "{tmp}/c", "--aa-sets", "2",
                                                           "--aa-sets-per-experiment", "4"],
                                                          "the A/A run would hold no experiment"),
    "ab_calibration --repeats 0": (["--out", "{tmp}/c", "--repeats", "0"], "--repeats: counts must be at least 1"),
    "ab_calibration --shapes a file": (["--out", "{tmp}/c", "--shapes", "{tmp}/tests.txt"], "invalid choice"),
    "server_sweep --rounds 0": (["--grid", "gs", "--out", "{tmp}/s", "--rounds", "0"], "--rounds must be at least 1"),
    "projection --latency of an H100": (["--latency", "{h100}"], "the projection reads the H200's (its calibration) "
                                                               "and the B200's"),
}
# a benchmarks/latency.py record of an H100 (numbers made up: only the GPU it names matters here)
H100_LATENCY = {"device": "NVIDIA H100 80GB HBM3", "sms": 132, "summary": {"knee_latency_ns": 600.0,
                                                                            "best_read_bps": 3.0e12}}


@pytest.mark.parametrize("case", list(FLAGS))
def test_a_flag_that_does_nothing_or_a_value_it_cannot_take_is_refused_naming_it(tmp_path, capsys, case):
    argv, words = FLAGS[case]
    grid, h100 = tmp_path / "grid.json", tmp_path / "h100.json"
    grid.write_text(json.dumps({"256x7168x1": [CONFIG]}))
    h100.write_text(json.dumps(H100_LATENCY))
    before = sorted(tmp_path.iterdir())
    line = refused(capsys, case.split()[0], [a.format(tmp=tmp_path, grid=grid, h100=h100) for a in argv])
    assert words in line, line
    assert sorted(tmp_path.iterdir()) == before, "nothing is written"


@pytest.mark.gpu
@requires_cuda
def test_on_a_gpu_bench_kernel_refuses_a_backend_the_submission_lacks(capsys):
    line = refused(capsys, "bench_kernel", ["--backends", "cuda,nonesuch", "--no-server"])
    assert line.startswith("bench_kernel.py: --backends cuda,nonesuch: nonesuch not among the backends of "), line


def test_bench_kernels_grid_and_probes_still_go_with_a_sweep_of_their_shapes(tmp_path):
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps({"256x7168x1": [CONFIG]}))
    args = bench_kernel.parse_args(["--sweep", "--probes", "--grid", str(grid), "--shapes", "tests",
                                    "--backends", "cuda,triton"])
    assert list(args.grid_configs) == ["256x7168x1"] and args.probes


def test_a_failed_build_is_one_line_however_nvrtc_fails():
    """refusals.build_line: NVRTC's first error line and the count of a real log; a failure
    without a log (no NVRTC) on one line, with the arch its message names."""
    from benchmarks import refusals
    log = ("NVRTC could not compile the cuda backend for sm_100a (NVRTC_ERROR_COMPILATION):\n"
           "nvfp4_gemv.cu(22): warning #2365-D: a parenthesized initializer\n  int broken( {\n      ^\n\n"
           "nvfp4_gemv.cu(32): error: expected a \"}\"\n  struct Q {};\n\n2 errors detected in the compilation of "
           "\"nvfp4_gemv.cu\".\n")
    cfg = submission.CudaConfig(**CONFIG, decode="f16x2")
    assert refusals.compile_failure(submission.CudaBuildError(log))
    assert refusals.build_line(submission.CudaBuildError(log), cfg) == (
        f'{cfg!r} for sm_100a does not compile: nvfp4_gemv.cu(32): error: expected a "}}" (2 errors in NVRTC\'s log)')
    missing = submission.CudaBuildError("NVRTC (libnvrtc.so) not found; set NVFP4_GEMV_NVRTC to its path.\nTried: x")
    assert not refusals.compile_failure(missing)
    assert refusals.build_line(missing, cfg, "sm_90a") == (f"{cfg!r} for sm_90a: NVRTC (libnvrtc.so) not found; set "
                                                           "NVFP4_GEMV_NVRTC to its path. | Tried: x")


@pytest.mark.usefixtures("shared_cubins")  # a kernel test_cuda_backend.py compiles too
def test_a_config_that_compiles_is_no_problem():
    _tools()
    from benchmarks import refusals
    cfg = submission.CudaConfig(**CONFIG, decode="dp4a-sr")
    assert refusals.build_problem(submission, cfg, "sm_90a") == ""
