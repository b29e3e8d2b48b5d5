"""benchmarks/bench_kernel.py's command line, on any machine: it says what it needs, its
options are described, and it records the backend that ran (the timing itself needs a GPU:
.ci/gpu-run runs it there). Also the other benchmark scripts' command lines (compile_table.py's
are in tests/test_compile_gate.py)."""

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
from conftest import HAS_CUDA, ROOT, requires_cuda

import harness
import submission
from benchmarks import bench_kernel, timing


@pytest.mark.skipif(HAS_CUDA, reason="checks the refusal without CUDA")
def test_without_cuda_it_says_so_in_one_line_and_exits_2(capsys, tmp_path):
    assert bench_kernel.main(["--json", str(tmp_path / "out.json")]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1
    assert out.err.startswith("bench_kernel.py needs a CUDA GPU")
    assert list(tmp_path.iterdir()) == []


def test_help_describes_every_option():
    parser = bench_kernel.build_parser()
    assert "needs a CUDA GPU" in parser.description
    for action in parser._actions:
        assert action.help, f"{action.option_strings} has no help text"
    assert "tests,benchmarks,all" in parser.format_help()


@pytest.mark.parametrize("select, cache, expected", [
    ("triton", {}, "triton"),
    ("fastest", {("cuda:0", 7168, 2048, 4): "scaled_mm"}, "fastest: scaled_mm"),
    ("fastest", {}, "fastest"),  # no pick cached for the shape (or none exposed)
    (None, {}, "unknown"),  # a submission without select_backend
])
def test_records_the_backend_that_ran(monkeypatch, select, cache, expected):
    fake = types.SimpleNamespace(_FASTEST=cache)
    if select is not None:
        fake.select_backend = lambda device: select
    monkeypatch.setattr(bench_kernel, "submission", fake)
    monkeypatch.setitem(__import__("sys").modules, "submission", fake)
    assert bench_kernel.backend_that_ran(7168, 2048, 4) == expected


def test_table_rows_name_backend_and_config():
    """A kernel row names the backend and its config; the custom_kernel row names the backend
    that ran (a "fastest" pick included) with harness and host times; a wrong one says so."""
    kernel = {"shape": "7168x2048x4", "backend": "cuda", "config": [16, 2, 2, 2, 2], "kernel_us": 20.0,
              "ceiling_us": 15.0, "ratio": 0.75, "permuted_us": 21.0}
    harness = {"shape": "7168x2048x4", "backend": "fastest: cuda", "harness_us": 22.0, "floor_us": 3.0,
               "host_us": 30.0, "bare_host_us": 20.0, "ceiling_us": 15.0}
    lines = bench_kernel.table_lines({}, [kernel, harness, {"shape": "x", "backend": "triton", "wrong": ["bad"]}])
    assert lines[2].startswith("| 7168x2048x4 | cuda (16, 2, 2, 2, 2) | 20.00 | 15.00 | 0.750 | 21.00 |")
    assert lines[3].startswith("| 7168x2048x4 | custom_kernel, fastest: cuda | | 15.00 | | | 22.00 (3.00) "
                               "| 30.0 (20.0) |")
    assert "WRONG" in lines[4]


def test_rows_and_the_policy_table_name_each_ceilings_load_policy():
    """The kernel row names the policy of each ceiling; the per-policy table gives every policy's
    best per shape, clean and server, marks each column's winner and lists refused policies."""
    a, b = (1024, 1, 4), (2048, 2, 8)
    clean = timing.best_read({(a, "plain"): 25.5, (b, "cs"): 25.4, (a, "evict_first"): 25.6})
    server = timing.best_read({(a, "plain"): 28.4, (a, "cs"): 27.9, (b, "evict_first"): 27.8},
                              {"nc_no_allocate": "RuntimeError: refused"})
    rec = bench_kernel.ceiling_record(clean, server)
    assert rec["clean"] == {"us": 25.4, "launch": [2048, 2, 8], "policy": "cs", "errors": {},
                            "by_policy": {"plain": {"us": 25.5, "launch": [1024, 1, 4]},
                                          "evict_first": {"us": 25.6, "launch": [1024, 1, 4]},
                                          "cs": {"us": 25.4, "launch": [2048, 2, 8]}}}
    assert rec["server"]["policy"] == "evict_first"
    assert rec["server"]["errors"] == {"nc_no_allocate": "RuntimeError: refused"}
    assert bench_kernel.policy_line(rec) == "plain 25.50; 28.40, evict_first 25.60; 27.80, cs 25.40; 27.90"
    lines = bench_kernel.ceiling_lines({"7168x2048x4": rec})
    assert lines[4] == "| load policy | 7168x2048x4 clean | 7168x2048x4 server |"
    assert lines[6:9] == ["| plain | 25.50 | 28.40 |", "| evict_first | 25.60 | 27.80 * |", "| cs | 25.40 * | 27.90 |"]
    assert lines[-1] == "7168x2048x4 server: nc_no_allocate not timed (RuntimeError: refused)"
    kernel = {"shape": "7168x2048x4", "backend": "cuda", "config": [16, 2, 2, 2, 2], "kernel_us": 20.0,
              "ceiling_us": 25.4, "ceiling_policy": "cs", "ratio": 1.27, "permuted_us": 21.0, "server_us": 28.0,
              "server_ceiling_us": 27.8, "server_ceiling_policy": "evict_first", "server_ratio": 0.993}
    row = bench_kernel.table_lines({}, [kernel])[2]
    assert "| 25.40 cs | 1.270 |" in row and "| 28.00 (27.80 evict_first, 0.993) |" in row
    # a --no-server run: no server ceiling, no per-policy server cells
    none = bench_kernel.ceiling_record(clean, {"us": float("nan"), "shape": (), "policy": "", "by_policy": {}})
    assert bench_kernel.ceiling_lines({"s": none})[6] == "| plain | 25.50 | - |"


def _script(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(HAS_CUDA, reason="checks the refusal without CUDA")
@pytest.mark.parametrize("script", ["benchmarks/cuda_build_probe.py", "benchmarks/profile_one.py"])
def test_gpu_scripts_refuse_in_one_line_without_cuda(script):
    proc = _script(script)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr.count("\n") == 1 and "needs a CUDA GPU" in proc.stderr, proc.stderr


@pytest.mark.parametrize("args, words", [
    (["benchmarks/profile_one.py", "--help"],
     ["ncu --clock-control none", "python3 benchmarks/profile_one.py --shape 4096x7168x8 --backend cuda --config",
      "--kernel-name regex:_read_kernel"]),
    (["benchmarks/cuda_build_probe.py", "--help"], ["--skip-load-inline", "NVRTC"]),
    (["benchmarks/timing.py", "--help"], ["A module, not a command", "python3 benchmarks/bench_kernel.py --help"]),
    (["benchmarks/bench_options.py", "--help"],
     ["A module, not a command", "python3 benchmarks/bench_kernel.py --help"]),
    (["modal_app.py", "--help"], ["modal run modal_app.py --help"]),
], ids=["profile_one", "cuda_build_probe", "timing", "bench_options", "modal_app"])
def test_help_says_it_all(args, words):
    """--help prints the whole text (profile_one's ncu example was cut off; timing.py and
    `python modal_app.py` printed nothing): exit 0."""
    if args[0] == "modal_app.py":
        pytest.importorskip("modal", reason="modal_app.py's --help needs the modal package (pip install -e .[modal])")
    proc = _script(*args)
    assert proc.returncode == 0, proc.stderr
    for word in words:
        assert word in proc.stdout, (word, proc.stdout)


@pytest.mark.parametrize("script", ["benchmarks/timing.py", "benchmarks/bench_options.py", "modal_app.py"])
def test_modules_run_as_scripts_point_to_the_command(script):
    proc = _script(script)
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.strip(), proc.stderr


# A sitecustomize.py that writes the command line of every process that imports torch to the file
# KIT_TEST_TORCH_LOG names: on PYTHONPATH, it sees each Python process a command starts
# (.ci/gpu-run starts several; it sends the CUDA check's stderr to /dev/null).
TORCH_LOGGER = """import os
import sys


class _TorchImportLog:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "torch":
            with open(os.environ["KIT_TEST_TORCH_LOG"], "a") as log:
                log.write(" ".join(sys.argv) + "\\n")
        return None


sys.meta_path.insert(0, _TorchImportLog)
"""

# The command lines' help, argument errors and refusals for want of a CUDA GPU: (arguments, exit
# status, words). Exit status 0: the words are in stdout; 2: stdout is empty and the words are in
# stderr (in its one line where the words start with the script's name or "error:"). {tmp}: a
# folder of the test's, which a refusal leaves unmade. benchmarks/compare.py is not here: its
# --help and its refusal name the submission's backends (submission.BACKENDS), and submission.py
# imports torch.
_TORCH_FREE_COMMANDS = {
    "bench_kernel": (["benchmarks/bench_kernel.py"], 2, "bench_kernel.py needs a CUDA GPU"),
    "bench_kernel --json": (["benchmarks/bench_kernel.py", "--json", "{tmp}/out.json"], 2,
                            "bench_kernel.py needs a CUDA GPU"),
    "bench_kernel --roofline": (["benchmarks/bench_kernel.py", "--roofline", "--json", "{tmp}/r.json"], 2,
                                "bench_kernel.py needs a CUDA GPU"),
    "bench_kernel --help": (["benchmarks/bench_kernel.py", "--help"], 0, "--roofline"),
    "bench_kernel --reps 0": (["benchmarks/bench_kernel.py", "--reps", "0"], 2, "--reps must be >= 1"),
    "bench_kernel --submission": (["benchmarks/bench_kernel.py", "--submission", "{tmp}/missing.py"], 2,
                                  "error: --submission: submission file"),
    "profile_one": (["benchmarks/profile_one.py"], 2, "profile_one.py needs a CUDA GPU"),
    "profile_one --help": (["benchmarks/profile_one.py", "--help"], 0, "ncu --clock-control none"),
    "cuda_build_probe": (["benchmarks/cuda_build_probe.py"], 2, "cuda_build_probe.py needs a CUDA GPU"),
    "cuda_build_probe --help": (["benchmarks/cuda_build_probe.py", "--help"], 0, "--skip-load-inline"),
    "timing": (["benchmarks/timing.py"], 2, "A module, not a command"),
    "timing --help": (["benchmarks/timing.py", "--help"], 0, "A module, not a command"),
    "server_sweep": (["benchmarks/server_sweep.py", "--grid", "loads", "--out", "{tmp}"], 2,
                     "server_sweep.py needs a CUDA GPU"),
    "server_sweep --help": (["benchmarks/server_sweep.py", "--help"], 0, "--grid"),
    "floor": (["benchmarks/floor.py", "--json", "{tmp}/floor.json"], 2, "floor.py needs a CUDA GPU"),
    "floor --help": (["benchmarks/floor.py", "--help"], 0, "--reps"),
    "ab_calibration": (["benchmarks/ab_calibration.py", "--out", "{tmp}"], 2,
                       "error: the calibration needs a CUDA GPU"),
    "sass_dump --submission": (["benchmarks/sass_dump.py", "--submission", "{tmp}/missing.py", "--out", "{tmp}"],
                               2, "error: --submission: submission file"),
    ".ci/gpu-run": ([".ci/gpu-run", "{tmp}"], 2, ".ci/gpu-run needs a CUDA GPU"),
}


@pytest.mark.skipif(not harness.no_cuda_driver(), reason="a CUDA driver is present: the tools ask torch about the GPU")
@pytest.mark.parametrize("args, status, words", _TORCH_FREE_COMMANDS.values(), ids=_TORCH_FREE_COMMANDS.keys())
def test_without_a_cuda_driver_help_and_refusals_import_no_torch(tmp_path, args, status, words):
    """--help, a bad argument and the refusal on a machine without a CUDA driver print what they
    always did, and no process of theirs imports torch (about 2 s of CPU each)."""
    site, out = tmp_path / "site", tmp_path / "out"
    site.mkdir()
    (site / "sitecustomize.py").write_text(TORCH_LOGGER)
    log = tmp_path / "torch.log"
    log.write_text("")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")])),
               KIT_TEST_TORCH_LOG=str(log))
    argv = [a.replace("{tmp}", str(out)) for a in args]
    command = ["bash", *argv] if argv[0].startswith(".ci/") else [sys.executable, *argv]
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert log.read_text() == "", f"torch imported by: {log.read_text()}"
    assert proc.returncode == status, proc.stderr
    if status == 0:
        assert words in proc.stdout, proc.stdout
        return
    assert proc.stdout == "" and words in proc.stderr, proc.stderr
    if words.startswith((argv[0], Path(argv[0]).name, "error:")):
        assert proc.stderr.count("\n") == 1, proc.stderr
    assert not out.exists()


SYNTAX_ERROR = "#!POPCORN leaderboard nvfp4_gemv\n#!POPCORN gpu NVIDIA\ndef custom_kernel(data:\n    return 1\n"


@pytest.mark.parametrize("name, words", [
    ("missing.py", "error: --submission: submission file {path} not found"),
    ("syntax.py", "error: --submission {path} does not import: SyntaxError: '(' was never closed (syntax.py, line 3)"),
], ids=["missing", "syntax error"])
def test_bench_kernel_refuses_a_bad_submission_in_one_line(tmp_path, capsys, name, words):
    """--submission that is not there or does not import: one line, exit 2, at the arguments
    (before the CUDA check: the same on a CPU and a GPU), no traceback."""
    path = tmp_path / name
    if name == "syntax.py":
        path.write_text(SYNTAX_ERROR)
    with pytest.raises(SystemExit) as info:
        bench_kernel.parse_args(["--submission", str(path)])
    out, err = capsys.readouterr()
    assert info.value.code == 2 and out == "" and err.splitlines() == [words.format(path=path)], err


@pytest.mark.parametrize("name, args, words", [
    ("missing.py", [], "error: --submission: submission file {path} not found"),
    ("syntax.py", [], "error: --submission {path} does not import: SyntaxError: '(' was never closed"),
    ("examples/minimal_torch.py", [], "error: {path}: no kernel to dump: no cuda_compile_variants(), cuda_kernel(), "
     "cuda_compile() (the kit's cuda backend's); no @triton.jit function named *_kernel"),
    ("examples/minimal_torch.py", ["--only", "cuda"], "error: {path}: no kernel to dump: no cuda_compile_variants()"),
], ids=["missing", "syntax error", "no kernels", "no cuda backend"])
def test_sass_dump_refuses_a_submission_it_cannot_dump_in_one_line(tmp_path, name, args, words):
    """benchmarks/sass_dump.py: a missing file, one that does not import, one without kernels
    (a plain-torch submission): one line, exit 2, nothing written (not a traceback)."""
    path = ROOT / name if "/" in name else tmp_path / name
    if name == "syntax.py":
        path.write_text(SYNTAX_ERROR)
    out = tmp_path / "sass"
    proc = _script("benchmarks/sass_dump.py", "--submission", str(path), "--out", str(out), *args)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(words.format(path=path)), proc.stderr
    assert not out.exists()


def test_sass_dump_finds_the_kits_cuda_backend():
    """The kit's submission has the cuda backend's functions (its Triton kernels are jit functions
    only outside Triton's interpreter, where sass_dump.py runs itself)."""
    from benchmarks import sass_dump
    assert sass_dump.dumpable(submission, "cuda") == (["cuda"], "")


def _stalling(stall_at):
    """A GPU call whose host side sleeps 0.1 s on the calls numbered in ``stall_at`` (from 1)."""
    import time

    import torch
    x = torch.zeros(1, device="cuda")
    calls = [0]

    def fn(_):
        calls[0] += 1
        if stall_at(calls[0]):
            time.sleep(0.1)
        x.add_(1)
    return fn


@requires_cuda
def test_gpu_device_times_survives_one_host_stall():
    """One host stall while queuing voids that round only: the next round, with twice the hold,
    gives the times (calls 1-4 are warmup and the launch-time estimate, 5 the first timed)."""
    times = timing.device_times(_stalling(lambda n: n == 5), [None], reps=5)
    assert len(times) == 5 and all(t >= 0 for t in times)


@requires_cuda
def test_gpu_device_times_raises_host_bound_when_every_round_stalls():
    """A stall in every round (each 0.1 s, more than the last hold of 0.08 s) is HostBound."""
    with pytest.raises(timing.HostBound, match="3 tries"):
        timing.device_times(_stalling(lambda n: n >= 5 and (n - 5) % 5 == 0), [None], reps=5)


@pytest.mark.parametrize("text, words", [
    ('{"4096x7168x8": [[8, 2, 4, 1, 3, 0, 2, 0, 16, 1]]}', "must be 1 or 2"),
    ('{"4096x7168x8": [[8, 2, 4, 1, 3, 1, 2, 0, 16, 1, 0]]}', "ks must be an integer >= 1"),
    ('{"4096x7168x8": [[8, 2, "4"]]}', "cuda takes 5 to 17 numbers"),
    ('{"4096x7168x8": [{"lpr": 8, "rpt": 2, "u": 4, "warps": 1, "lanes": 2}]}', "unexpected keyword argument 'lanes'"),
    ('[1, 2]', "must hold {'MxKxL': [cuda config, ...]}"),
    ('{"4096x7168x8": [', "not a readable JSON file"),
], ids=["V 0", "KS 0", "a string", "unknown field", "a list", "broken JSON"])
def test_a_bad_grid_is_refused_in_one_line_before_any_work(tmp_path, capsys, text, words):
    """--grid: a file the sweep cannot use, or a config the cuda backend cannot build, stops the
    command at its arguments (exit 2), naming the file and what is wrong."""
    path = tmp_path / "grid.json"
    path.write_text(text)
    with pytest.raises(SystemExit) as info:
        bench_kernel.parse_args(["--sweep", "--grid", str(path)])
    err = capsys.readouterr().err
    assert info.value.code == 2 and f"--grid {path}: " in err and words in err


def test_a_good_grid_is_read_as_configs(tmp_path):
    """By position (decode by its number, the recorded form) or as a dict of fields."""
    import submission
    path = tmp_path / "grid.json"
    path.write_text('{"7168x16384x1": [[8, 2, 4, 1, 3, 1, 2, 0, 2, 1, 8], [32, 2, 8, 2, 2], '
                    '{"lpr": 32, "rpt": 2, "u": 8, "warps": 2, "decode": "dp4a-sr"}]}')
    args = bench_kernel.parse_args(["--sweep", "--grid", str(path)])
    tile = submission.CudaConfig(lpr=32, rpt=2, u=8, warps=2, decode="dp4a-sr")
    assert args.grid_configs == {"7168x16384x1": [
        submission.CudaConfig(lpr=8, rpt=2, u=4, warps=1, decode="dp4a-sr2", v=1, pipe=0, minb=2, bsh=1, ks=8),
        tile, tile]}


def test_options_import_without_torch_and_nothing_reads_argv_at_import(tmp_path):
    """benchmarks/bench_options.py imports without torch (modal_app.py checks a job's options with
    it), and importing bench_kernel.py with an unrelated --submission on the command line loads
    no submission (main() and parse_args() choose it, not the import)."""
    code = ("import sys; sys.modules['torch'] = None; from benchmarks import bench_options; "
            "print(bench_options.build_parser().parse_args(['--reps', '3']).reps)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "3", proc.stderr
    code = ("import sys; sys.argv = ['x', '--submission', sys.argv[1]]; from benchmarks import bench_kernel; "
            "print(bench_kernel.submission is None, 'submission' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "missing.py")], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.split() == ["True", "False"], proc.stderr


@pytest.mark.skipif(HAS_CUDA, reason="checks the refusal without CUDA")
def test_server_sweep_without_cuda_says_so_and_exits_2(capsys, tmp_path):
    from benchmarks import server_sweep
    assert server_sweep.main(["--grid", "loads", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("server_sweep.py needs a CUDA GPU")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("grid", ["small", "loads", "gs"])
@pytest.mark.parametrize("cap, sms", [((9, 0), 132), ((10, 0), 148)], ids=["sm90", "sm100"])
def test_server_sweep_grids_hold_only_configs_that_run_their_shape(grid, cap, sms):
    """Every config of a sweep grid builds and fits its shape; the small grid starts with the
    submission's own pick, the loads grid covers load 0-5 x bload 0-1 on each tile."""
    from benchmarks import server_sweep
    shapes, make = server_sweep.GRIDS[grid]
    for m, k, l in shapes:
        cfgs = make(m, k, l, cap, sms)
        assert cfgs and len(cfgs) == len(set(cfgs))
        assert all(c.problem() == "" and c.fits(m, k) for c in cfgs), (m, k, l)
        if grid == "small":
            assert cfgs[0] == submission._cuda_default(m, k, l, cap)
        elif grid == "loads":
            tiles = {c._replace(load=0, bload=0) for c in cfgs}
            assert len(cfgs) == 12 * len(tiles)
        else:
            assert any(c.gs for c in cfgs) and all(c.ks == 1 for c in cfgs if c.gs)
