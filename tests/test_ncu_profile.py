"""``python3 eval.py profile``: the server's Nsight Compute run over the kit's harness.

Without a GPU or Nsight Compute here, the tests check the command (the server's, word for word),
the refusals (no ncu, no GPU, counters not permitted, a file the server would refuse), the
extraction of the three tables from a stand-in of ``ncu --print-details body`` text, the mapping
of kernels to configurations, the pick step (what the benchmark keeps per case, handed on through
the settings the submission reads) and the whole pipeline with a stand-in ``ncu`` that runs the
wrapped command and prints the stand-in report. A real profile is a GPU check; the GPU tests here
check the pick step and its hand-over on the kit's submission without ncu.
"""

import json
import os
import stat
import sys
import textwrap
from types import SimpleNamespace
from typing import NamedTuple

import pytest
from conftest import HAS_CUDA, ROOT

import harness
import ncu_profile
import submission

FIXTURES = ROOT / "tests" / "fixtures"

# gpu-mode/kernelbot src/libkernelbot/run_eval.py at 4bdd839, profile_program_ncu: the wrapper
# and the read-back, word for word (the report path aside).
SERVER_WRAPPER = ["ncu", "--set", "full", "--nvtx", "--nvtx-include", "custom_kernel/", "--import-source", "1",
                  "-c", "10", "-o", "profile.ncu-rep", "--"]
SERVER_IMPORT = ["ncu", "--import", "profile.ncu-rep", "--print-details", "body"]
SERVER_TABLES = ("GPU Throughput", "Pipe Utilization (% of active cycles)", "Warp State (All Cycles)")


def kernel_block(heading: str, value: str) -> str:
    """One kernel of ``--print-details body`` text: a section table (not one of the three), the
    three tables and one more that the server leaves out; the kernel's heading indented by two
    spaces, its sections by four, as ncu prints them."""
    return textwrap.indent(textwrap.dedent(f"""\
      {heading}
        Section: GPU Speed Of Light Throughput
        ----------------------- ----------- ------------
        Metric Name             Metric Unit Metric Value
        ----------------------- ----------- ------------
        Duration                         us       {value}
        ----------------------- ----------- ------------

        GPU Throughput Chart
        Table Name : GPU Throughput
        ---------------- ----------- ------------
        Metric Name      Metric Unit Metric Value
        ---------------- ----------- ------------
        Memory [%]                 %        {value}
        ---------------- ----------- ------------

        Table Name : Memory Chart Breakdown
        ---------------- ----------- ------------
        DRAM [%]                   %        {value}
        ---------------- ----------- ------------

        Table Name : Pipe Utilization (% of active cycles)
        Table Description : Pipeline utilization based on the number of cycles the pipeline was active.
        -------------------- ----------- ------------
        ALU                            %        {value}
        -------------------- ----------- ------------

        Table Name : Warp State (All Cycles)
        ------------------------ ----------- ------------
        Stall Long Scoreboard           inst        {value}
        ------------------------ ----------- ------------

    """), "  ")


HEADINGS = [
    "nvfp4_gemv_8_2_4_1_3_1_610_2_1_8_100 (112, 1, 1)x(256, 1, 1), Context 1, Stream 7, Device 0, CC 10.0",
    "void fp4_gemv<64, 128, 256>(const unsigned char *, __half *, int) (64, 8, 1)x(256, 1, 1), Context 1, "
    "Stream 7, Device 0, CC 10.0",
    "_nvfp4_gemv_kernel (56, 4, 1)x(128, 1, 1), Context 1, Stream 7, Device 0, CC 10.0",
]
STANDIN = "[4242] python3.12@127.0.0.1\n" + "".join(
    kernel_block(h, v) for h, v in zip(HEADINGS, ("11.11", "22.22", "33.33"), strict=True))


def test_the_commands_are_the_servers():
    assert ncu_profile.ncu_command("ncu", "profile.ncu-rep") == SERVER_WRAPPER
    assert ncu_profile.import_command("ncu", "profile.ncu-rep") == SERVER_IMPORT
    assert ncu_profile.NCU_TABLES == SERVER_TABLES


def test_the_extract_keeps_the_three_tables_of_the_first_two_kernels_and_every_name():
    text = ncu_profile.server_extract(STANDIN)
    lines = text.splitlines()
    assert [ln for ln in lines if ncu_profile.is_kernel_line(ln)] == ["  " + h for h in HEADINGS]
    for table in SERVER_TABLES:
        assert sum(f"Table Name : {table}" in ln for ln in lines) == 2  # the first two kernels only
    assert "Memory Chart Breakdown" not in text and "Section: GPU Speed Of Light" not in text
    assert "11.11" in text and "22.22" in text and "33.33" not in text
    assert "Additional kernel launches follow" in text
    assert lines.index(next(ln for ln in lines if "Additional kernel" in ln)) < lines.index("  " + HEADINGS[2])
    assert "Table Description : Pipeline utilization" in text  # a table runs to its blank line


def test_the_extract_stops_after_its_line_limit(monkeypatch):
    monkeypatch.setattr(ncu_profile, "TABLE_LINE_LIMIT", 5)
    text = ncu_profile.server_extract(STANDIN)
    assert "Report has been truncated" in text
    assert sum(1 for ln in text.splitlines() if ln.startswith("    ")) == 6


def test_kernel_names_and_launches():
    sig, grid = ncu_profile.kernel_signature("  " + HEADINGS[1])
    assert sig == "fp4_gemv<64, 128, 256>(const unsigned char *, __half *, int)" and grid == "(64, 8, 1)x(256, 1, 1)"
    assert ncu_profile.base_name(sig) == "fp4_gemv" and ncu_profile.template_arguments(sig) == "<64, 128, 256>"
    sig, grid = ncu_profile.kernel_signature("  " + HEADINGS[0])
    assert sig == ncu_profile.base_name(sig) == "nvfp4_gemv_8_2_4_1_3_1_610_2_1_8_100"
    assert ncu_profile.template_arguments(sig) == ""


def test_kernels_are_matched_to_their_cases_configurations():
    """By name, case after case: a name used by two cases (a Triton kernel) takes each case's
    own entry in order; a kernel no case names falls back on its template arguments, or says so."""
    records = [{"case": {"m": 7168, "k": 16384, "l": 1, "seed": 1111},
                "configs": {"nvfp4_gemv_8_2_4_1_3_1_610_2_1_8_100": "cuda lpr=8 rpt=2"}},
               {"case": {"m": 4096, "k": 7168, "l": 8, "seed": 1111},
                "configs": {"_nvfp4_gemv_kernel": "triton BM=64"}},
               {"case": {"m": 7168, "k": 2048, "l": 4, "seed": 1111},
                "configs": {"_nvfp4_gemv_kernel": "triton BM=32"}}]
    text = STANDIN + kernel_block(HEADINGS[2], "44.44")
    rows = ncu_profile.kernel_rows(text, records)
    assert [r["config"] for r in rows] == ["cuda lpr=8 rpt=2",
                                           "template arguments <64, 128, 256> (from the kernel's name)",
                                           "triton BM=64", "triton BM=32"]
    assert rows[0]["case"] == "m: 7168; k: 16384; l: 1; seed: 1111" and rows[1]["case"] is None
    lines = ncu_profile.format_rows(rows, 3)
    assert lines[0] == "kernels profiled: 4 for 3 call(s) (ncu -c 10)"
    assert lines[-1].startswith("note: 4 kernels for 3 call(s): a call launched more than the kernel it keeps")
    unnamed = ncu_profile.format_rows(ncu_profile.kernel_rows(STANDIN, []), 3)
    assert "not named" in unnamed[1] and "template arguments" in unnamed[2] and not unnamed[-1].startswith("note")


def test_counters_not_permitted_is_one_line():
    said = ("==PROF== Connected to process 1\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to "
            "access NVIDIA GPU Performance Counters on the target device 0.\n")
    line = ncu_profile.permission_problem(said)
    assert line.startswith("error: ncu may not read") and "\n" not in line and ncu_profile.PERMISSION_HELP in line
    assert ncu_profile.permission_problem("==PROF== Disconnected") == ""


# --------------------------------------------------------------------------- the command line

def test_without_ncu_one_line_exit_2(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(ncu_profile, "_cuda_device", lambda: "Stand-in GPU")
    assert ncu_profile.main(["--ncu", str(tmp_path / "no-ncu"), str(FIXTURES / "good_submission.py")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Nsight Compute's command line is not found" in err


@pytest.mark.skipif(HAS_CUDA, reason="checks the refusal without a GPU")
def test_without_a_gpu_one_line_exit_2(capsys, tmp_path):
    fake = standin_ncu(tmp_path)
    assert ncu_profile.main(["--ncu", str(fake), str(FIXTURES / "good_submission.py")]) == 2
    err = capsys.readouterr().err
    assert err == "error: profiling needs a CUDA GPU: ncu profiles the kernels the submission launches\n"


def test_a_file_the_server_refuses_is_not_profiled(capsys, tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("# " + harness.FORBIDDEN_WORD + "\ndef custom_kernel(data):\n    return data[-1]\n")
    assert ncu_profile.main(["--ncu", str(standin_ncu(tmp_path)), str(bad)]) == harness.EXIT_FAIL
    assert "contains the word" in capsys.readouterr().err
    pytest.importorskip("kernelguard")
    replay = FIXTURES / "wrong_cache_first_output.py"
    assert ncu_profile.main(["--ncu", str(standin_ncu(tmp_path)), str(replay)]) == harness.EXIT_FAIL
    err = capsys.readouterr().err
    assert "pre-check refuses it for profile mode too" in err and "LAST_CALL_REPLAY" in err


def test_eval_py_dispatches_profile_without_popcorn_fd(tmp_path):
    """`eval.py profile` (no POPCORN_FD) is this tool; with POPCORN_FD it is protocol mode."""
    import subprocess
    env = {k: v for k, v in os.environ.items() if k != "POPCORN_FD"}
    proc = subprocess.run([sys.executable, "eval.py", "profile", "--ncu", str(tmp_path / "none")], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert ("needs a CUDA GPU" if not HAS_CUDA else "Nsight Compute's command line is not found") in proc.stderr


STANDIN_NCU = '''\
#!{python}
"""A stand-in for ncu: records its arguments, runs the command after "--" (passing every
descriptor on, as ncu does), writes a report file; --import prints a stand-in report."""
import json, os, subprocess, sys
args = sys.argv[1:]
if "--import" in args:
    sys.stdout.write(open(os.environ["STANDIN_REPORT"]).read())
    sys.exit(0)
if os.environ.get("STANDIN_DENY"):
    print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
          "Counters on the target device 0.")
    sys.exit(1)
with open(os.environ["STANDIN_ARGS"], "w") as f:
    json.dump({{"args": args, "POPCORN_NCU": os.environ.get("POPCORN_NCU")}}, f)
if os.environ.get("STANDIN_RUNS"):  # one line per run: its settings
    with open(os.environ["STANDIN_RUNS"], "a") as f:
        f.write(json.dumps({{k: os.environ.get(k) for k in ("POPCORN_NCU", "NVFP4_GEMV_BACKEND",
                                                             "NVFP4_GEMV_CONFIG")}}) + "\\n")
code = subprocess.call(args[args.index("--") + 1:], close_fds=False)
with open(args[args.index("-o") + 1], "w") as f:
    f.write("stand-in report")
sys.exit(code)
'''


def standin_ncu(tmp_path):
    path = tmp_path / "ncu"
    path.write_text(STANDIN_NCU.format(python=sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


CONFIGURED = '''
import os


def profile_configs():
    return {"nvfp4_gemv_8_2_4_1_3_1_610_2_1_8_100": f"torch path (POPCORN_NCU={os.environ.get('POPCORN_NCU')})"}
'''


def test_the_whole_run_with_a_standin_ncu(tmp_path, monkeypatch, capsys):
    """The pipeline end to end on this machine: the server's wrapper around protocol mode with
    POPCORN_NCU=1 (the harness's ncu path: the call runs, no torch table), the read-back, the
    extract, each kernel's configuration from the submission's profile_configs(), the report kept."""
    monkeypatch.setattr(ncu_profile, "_cuda_device", lambda: "Stand-in GPU")
    sub = tmp_path / "sub.py"
    sub.write_text((ROOT / "examples" / "minimal_torch.py").read_text() + CONFIGURED)
    report_text = tmp_path / "report.txt"
    report_text.write_text(STANDIN)
    monkeypatch.setenv("STANDIN_REPORT", str(report_text))
    monkeypatch.setenv("STANDIN_ARGS", str(tmp_path / "args.json"))
    monkeypatch.delenv("POPCORN_NCU", raising=False)
    out = tmp_path / "kept" / "mine.ncu-rep"
    code = ncu_profile.main([str(sub), "--ncu", str(standin_ncu(tmp_path)), "--shapes", str(FIXTURES / "tiny.txt"),
                             "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err
    seen = json.loads((tmp_path / "args.json").read_text())
    assert seen["POPCORN_NCU"] == "1"
    wrapper = seen["args"][:seen["args"].index("--") + 1]  # ncu's own name is not among its arguments
    assert wrapper[:-3] == SERVER_WRAPPER[1:-3] and wrapper[-3] == "-o" and wrapper[-2].endswith("/profile.ncu-rep")
    assert seen["args"][seen["args"].index("--") + 1:][1:] == ["eval.py", "profile", "cases.txt"]
    assert out.read_text() == "stand-in report"
    assert "Table Name : Warp State (All Cycles)" in captured.out
    assert "1. nvfp4_gemv_8_2_4_1_3_1_610_2_1_8_100 (112, 1, 1)x(256, 1, 1); case m: 128; k: 256; l: 1; seed: " \
           "1111: torch path (POPCORN_NCU=1)" in captured.out
    assert f"report kept: {out}" in captured.out


def test_counters_not_permitted_stops_the_run_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ncu_profile, "_cuda_device", lambda: "Stand-in GPU")
    monkeypatch.setenv("STANDIN_DENY", "1")
    code = ncu_profile.main([str(FIXTURES / "good_submission.py"), "--ncu", str(standin_ncu(tmp_path)),
                             "--shapes", str(FIXTURES / "tiny_one.txt"), "--out", str(tmp_path / "r.ncu-rep")])
    err = capsys.readouterr().err
    assert code == 2 and [ln for ln in err.splitlines() if ln.startswith("error:")] == [
        ncu_profile.permission_problem("ERR_NVGPUCTRPERM")]
    assert not (tmp_path / "r.ncu-rep").exists()


# --------------------------------------------------------------------------- the pick step

def test_a_pick_handed_on_is_the_config_the_submission_then_launches(monkeypatch):
    """config_text writes a config in the form NVFP4_GEMV_CONFIG parses: pinned through pin_env, every
    config of the cuda and triton backends' tables, families and leaders comes back as itself."""
    configs = [("cuda", c) for c in (*submission.CUDA_FAMILIES, *(c for cs in submission.CUDA_LEADERS.values()
                                                                   for c in cs))]
    configs += [(name, cfg) for name, _, _, cfg, _ in submission.table_entries()]
    assert {name for name, _ in configs} >= {"cuda", "triton"} and len(configs) > 20
    for name, cfg in configs:
        env = ncu_profile.pin_env(name, cfg)
        assert env[harness.ENV_BACKEND] == name
        monkeypatch.setenv(ncu_profile.ENV_CONFIG, env[ncu_profile.ENV_CONFIG])
        assert submission.config_for(name, None, 7168, 16384, 1) == cfg, env  # pinned: no data needed
    assert ncu_profile.pin_env("torch", None) == {harness.ENV_BACKEND: "torch"}
    assert ncu_profile.config_text(submission.CudaConfig(8, 2, 4, 1, bsh=True, ks=4, ki=True)) == (
        "lpr=8,rpt=2,u=4,warps=1,v=2,load=l1_evict_first,pipe=a_first,minb=0,bsh=true,ks=4,kb=1,bload=false,gs=0,"
        "ki=true,ring=0,pw=0")


class Backend(NamedTuple):
    races: bool = True
    config: type | None = None
    candidates: object = None
    exact: bool = False


class Tile(NamedTuple):
    tile: int
    ks: int = 1


def gpu_submission(tuned: Tile, forced: str = "fastest"):
    """A stand-in of the kit's submission on a GPU: cuda and triton race, torch is exact; the
    cuda backend's default (first candidate) is Tile(1), its tuned pick ``tuned``."""
    return SimpleNamespace(
        BACKENDS={"cuda": Backend(config=Tile, candidates=lambda m, k, l, cap: [Tile(1, cap[0]), Tile(2)]),
                  "triton": Backend(config=Tile, candidates=lambda m, k, l, cap: [Tile(64)]),
                  "torch": Backend(races=False, exact=True)},
        select_backend=lambda device: forced,
        backend_support=lambda device: {"cuda": (True, ""), "triton": (True, ""), "torch": (True, "")},
        config_for=lambda name, data, m, k, l: tuned if name == "cuda" else Tile(64))


ON_GPU = (SimpleNamespace(device=SimpleNamespace(type="cuda")),)
SHAPE = {"m": 7168, "k": 16384, "l": 1, "seed": 1111}


def test_the_pick_is_the_race_s_backend_with_the_tuned_config_beside_the_server_s_default(monkeypatch):
    """The pick: the backend the race kept for the shape (harness.backend_picks), its config_for;
    the server's profile on an untabled GPU: the first racing backend with its first candidate
    for this GPU's capability; "same" says whether they are one kernel."""
    monkeypatch.setattr(harness, "backend_picks", lambda: {"7168x16384x1": "cuda"})
    pick = ncu_profile.describe_pick(gpu_submission(Tile(2, 4)), ON_GPU, SHAPE, (10, 0))
    assert pick == {"shape": "7168x16384x1", "backend": "cuda", "config": "Tile(tile=2, ks=4)",
                    "pin": {harness.ENV_BACKEND: "cuda", ncu_profile.ENV_CONFIG: "cuda=tile=2,ks=4"},
                    "default": {"backend": "cuda", "config": "Tile(tile=1, ks=10)"}, "same": False, "why": ""}
    same = ncu_profile.describe_pick(gpu_submission(Tile(1, 10)), ON_GPU, SHAPE, (10, 0))
    assert same["same"] is True and same["pin"][ncu_profile.ENV_CONFIG] == "cuda=tile=1,ks=10"
    forced = ncu_profile.describe_pick(gpu_submission(Tile(2), forced="triton"), ON_GPU, SHAPE, (9, 0))
    assert forced["backend"] == "triton" and forced["same"] is False  # the server sets no NVFP4_GEMV_BACKEND
    monkeypatch.setattr(harness, "backend_picks", lambda: {})
    assert "names no backend for 7168x16384x1" in ncu_profile.describe_pick(
        gpu_submission(Tile(2)), ON_GPU, SHAPE, (9, 0))["why"]


def test_a_submission_without_the_surface_gets_no_pick_and_says_why():
    pick = ncu_profile.describe_pick(SimpleNamespace(custom_kernel=None), ON_GPU, SHAPE, (9, 0))
    assert pick["pin"] == {} and pick["default"] is None
    assert pick["why"].startswith("the submission has no select_backend, config_for, BACKENDS, backend_support")


def test_on_the_cpu_the_kit_s_pick_is_the_exact_backend_as_under_the_profiler():
    args = {"m": 128, "k": 256, "l": 1, "seed": 5}
    data = harness.generate_case(args)
    if data[0].device.type == "cuda":
        pytest.skip("checks the CPU's pick")
    submission.custom_kernel(data)
    pick = ncu_profile.describe_pick(submission, data, args, (0, 0))
    assert pick == {"shape": "128x256x1", "backend": "torch", "config": None, "pin": {harness.ENV_BACKEND: "torch"},
                    "default": {"backend": "torch", "config": None}, "same": True, "why": ""}


def test_cases_with_one_pick_share_a_run_and_several_runs_keep_a_report_each(tmp_path):
    pin = {harness.ENV_BACKEND: "cuda", ncu_profile.ENV_CONFIG: "cuda=lpr=8"}
    picks = [{"shape": "a", "pin": pin}, {"shape": "b", "pin": {harness.ENV_BACKEND: "triton"}},
             {"shape": "c", "pin": dict(reversed(pin.items()))}, {"shape": "d", "error": "x"}]
    assert ncu_profile.profile_groups(picks) == [(pin, [0, 2]), ({harness.ENV_BACKEND: "triton"}, [1]), ({}, [3])]
    out = tmp_path / "kept" / "mine.ncu-rep"
    assert ncu_profile.report_paths(out, [["a", "c"]]) == [out]
    assert ncu_profile.report_paths(out, [["a", "c"], ["b"]]) == [out.with_name("mine-a_c.ncu-rep"),
                                                                   out.with_name("mine-b.ncu-rep")]
    assert ncu_profile.report_paths(tmp_path / "r", [["a"], ["b"]])[1] == tmp_path / "r-b"


def test_each_kernel_line_says_whether_the_server_s_profile_shows_that_kernel():
    rows = [{"name": "k1", "launch": "(1, 1, 1)x(32, 1, 1)", "case": "m: 7168", "shape": "7168x16384x1",
             "config": "CudaConfig(lpr=8, rpt=2, u=4, warps=1, ks=4)"},
            {"name": "k2", "launch": "(1, 1, 1)x(32, 1, 1)", "case": "m: 4096", "shape": "4096x7168x8",
             "config": "CudaConfig(lpr=8, rpt=2, u=4, warps=1, minb=20)"},
            {"name": "k3", "launch": "", "case": None, "shape": None, "config": None}]
    picks = {"7168x16384x1": {"default": {"backend": "cuda", "config": "CudaConfig(lpr=8, rpt=2, u=4, warps=1, "
                                                                        "minb=20)"}, "same": False},
             "4096x7168x8": {"default": {"backend": "cuda", "config": "CudaConfig(lpr=8, rpt=2, u=4, warps=1, "
                                                                       "minb=20)"}, "same": True}}
    lines = ncu_profile.format_rows(rows, 2, picks, ["NVIDIA H100 80GB HBM3"])
    assert lines[1] == ("  1. k1 (1, 1, 1)x(32, 1, 1); case m: 7168: CudaConfig(lpr=8, rpt=2, u=4, warps=1, ks=4); "
                        "where no table names the GPU (as for the B200 today) the server's profile shows another "
                        "kernel: cuda CudaConfig(lpr=8, rpt=2, u=4, warps=1, minb=20), the submission's default for "
                        "this GPU's compute capability (no race, no tuning under POPCORN_NCU)")
    assert lines[2].endswith("minb=20); where no table names the GPU (as for the B200 today) the server's profile "
                             "shows this kernel too: it is the submission's default")
    assert "server's profile" not in lines[3]
    named = ncu_profile.format_rows(rows, 2, picks, ["NVIDIA B200"])
    assert "where no table names the GPU the server's profile shows" in named[1] and "B200" not in named[1]
    assert ncu_profile.format_rows(rows, 2)[1].endswith("ks=4)")  # no picks: the line as before


PICKING = '''

import os
from typing import NamedTuple

_exact = custom_kernel


class Tile(NamedTuple):
    tile: int


class Backend(NamedTuple):
    races: bool = True
    config: type | None = None
    candidates: object = None
    exact: bool = False


BACKENDS = {"fast": Backend(config=Tile, candidates=lambda m, k, l, cap: [Tile(1)]),
            "exact": Backend(races=False, exact=True)}
_FASTEST = {}
_LAST = []


def select_backend(device):
    return os.environ.get("NVFP4_GEMV_BACKEND", "fastest")


def backend_support(device):
    return {"fast": (True, ""), "exact": (True, "")}


def config_for(name, data, m, k, l):
    pinned = os.environ.get("NVFP4_GEMV_CONFIG", "")
    if pinned.startswith(name + "=tile="):
        return Tile(int(pinned.rsplit("=", 1)[1]))
    return Tile(1) if os.environ.get("POPCORN_NCU") else Tile(l)  # the tuner runs only without the profiler


def custom_kernel(data):
    m, half_k, l = data[0].shape
    _FASTEST[(data[0].device, m, 2 * half_k, l)] = "fast"
    _LAST[:] = [m, 2 * half_k, l]
    return _exact(data)


def profile_configs():
    return {"nvfp4_gemv_8_2_4_1_3_1_610_2_1_8_100": f"fast {config_for('fast', None, *_LAST)!r}"}
'''


def picking_run(tmp_path, monkeypatch, *extra, kernels: int = 1):
    """The whole run on a stand-in submission with the pick surface, whose tuner keeps Tile(l) and
    whose first call under the profiler keeps Tile(1), with a stand-in ncu (``kernels`` a run)."""
    monkeypatch.setattr(ncu_profile, "_cuda_device", lambda: "Stand-in GPU")
    sub = tmp_path / "sub.py"
    sub.write_text((ROOT / "examples" / "minimal_torch.py").read_text() + PICKING)
    report_text = tmp_path / "report.txt"
    report_text.write_text(kernel_block(HEADINGS[0], "11.11") * kernels)
    runs = tmp_path / "runs.jsonl"
    monkeypatch.setenv("STANDIN_REPORT", str(report_text))
    monkeypatch.setenv("STANDIN_ARGS", str(tmp_path / "args.json"))
    monkeypatch.setenv("STANDIN_RUNS", str(runs))
    for name in ("POPCORN_NCU", harness.ENV_BACKEND, ncu_profile.ENV_CONFIG):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "kept" / "mine.ncu-rep"
    code = ncu_profile.main([str(sub), "--ncu", str(standin_ncu(tmp_path)), "--shapes", str(FIXTURES / "tiny.txt"),
                             "--out", str(out), *extra])
    return code, [json.loads(line) for line in runs.read_text().splitlines()], out


def test_the_whole_run_profiles_each_case_with_the_benchmark_s_pick(tmp_path, monkeypatch, capsys):
    """The pick step runs the first calls without POPCORN_NCU (the tuner keeps Tile(l)); each case's
    run gets its pick through NVFP4_GEMV_BACKEND / NVFP4_GEMV_CONFIG under POPCORN_NCU=1 (where the
    submission alone would launch Tile(1)); one report per run; each kernel line names the config
    launched and whether the server's profile shows it."""
    code, runs, out = picking_run(tmp_path, monkeypatch)
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err
    assert runs == [{"POPCORN_NCU": "1", harness.ENV_BACKEND: "fast", ncu_profile.ENV_CONFIG: "fast=tile=1"},
                    {"POPCORN_NCU": "1", harness.ENV_BACKEND: "fast", ncu_profile.ENV_CONFIG: "fast=tile=2"}]
    assert out.with_name("mine-128x256x1.ncu-rep").is_file() and out.with_name("mine-128x256x2.ncu-rep").is_file()
    assert not out.exists()
    # The server's default (ncu_profile.server_default): on a GPU the first racing backend with its
    # first candidate, Tile(1); off a GPU the exact backend, which has no config.
    default = "fast Tile(tile=1)" if HAS_CUDA else "exact (no config)"
    assert "1. nvfp4_gemv_8_2_4_1_3_1_610_2_1_8_100 (112, 1, 1)x(256, 1, 1); case m: 128; k: 256; l: 2; seed: 2222: " \
           "fast Tile(tile=2); where no table names the GPU (as for the B200 today) the server's profile shows " \
           f"another kernel: {default}" in captured.out
    assert "the benchmark's pick (NVFP4_GEMV_BACKEND=fast NVFP4_GEMV_CONFIG=fast=tile=2)" in captured.err


def test_as_server_profiles_what_the_server_s_profile_launches(tmp_path, monkeypatch, capsys):
    """--as-server: one run without the picks, as the server's profile runs here (the submission's
    first calls under POPCORN_NCU keep Tile(1)); the lines still say what the server shows."""
    code, runs, out = picking_run(tmp_path, monkeypatch, "--as-server", kernels=2)
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err
    assert runs == [{"POPCORN_NCU": "1", harness.ENV_BACKEND: None, ncu_profile.ENV_CONFIG: None}]
    assert out.is_file()
    assert "l: 1; seed: 1111: fast Tile(tile=1); where no table names the GPU" in captured.out
    assert "l: 2; seed: 2222: fast Tile(tile=1); where no table names the GPU" in captured.out


def test_a_first_call_that_raises_fails_its_case_in_the_pick_step(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ncu_profile, "_cuda_device", lambda: "Stand-in GPU")
    sub = tmp_path / "sub.py"
    sub.write_text("def custom_kernel(data):\n    raise RuntimeError('no kernel here')\n")
    report_text = tmp_path / "report.txt"
    report_text.write_text(STANDIN)
    monkeypatch.setenv("STANDIN_REPORT", str(report_text))
    monkeypatch.setenv("STANDIN_ARGS", str(tmp_path / "args.json"))
    code = ncu_profile.main([str(sub), "--ncu", str(standin_ncu(tmp_path)), "--shapes", str(FIXTURES / "tiny_one.txt"),
                             "--out", str(tmp_path / "r.ncu-rep")])
    out = capsys.readouterr().out
    assert code == harness.EXIT_FAIL
    assert ("FAIL m: 128; k: 256; l: 1; seed: 1111: the pick step's first call raised RuntimeError: no kernel "
            "here") in out


def test_the_pick_step_is_this_file_run_in_a_process_of_its_own_without_the_profiler():
    cmd = ncu_profile.pick_command("python3", "w/submission.py", "w/cases.txt", "w/picks.json")
    assert cmd == ["python3", str(ROOT / "ncu_profile.py"), "--pick", "w/submission.py", "w/cases.txt", "w/picks.json"]
    assert ncu_profile.pick_env(False) == {"POPCORN_NCU": None, harness.ENV_PROFILE_CONFIGS: None, "POPCORN_FD": None}
    assert ncu_profile.pick_env(True)["POPCORN_NCU"] == "1"


# --------------------------------------------------------------------------- on a GPU

def _records(tmp_path, cases: list[dict], env: dict) -> list[dict]:
    """What a POPCORN_NCU=1 protocol run of the kit's submission launched per case (profile_configs
    after each call: harness.ENV_PROFILE_CONFIGS), without ncu; ``env`` adds its settings."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    for name in (*harness.SERVER_FILES, *harness.KIT_SUPPORT_FILES, "submission.py"):
        (work / name).write_text((ROOT / name).read_text())
    (work / "cases.txt").write_text(harness.test_file_text(cases))
    configs = work / "configs.jsonl"
    configs.unlink(missing_ok=True)
    run = harness.run_protocol(work, "profile", "cases.txt", timeout=900,
                               env={"POPCORN_NCU": "1", harness.ENV_PROFILE_CONFIGS: str(configs), **env})
    assert run.returncode == 0, run.stderr[-2000:]
    return ncu_profile.read_configs(configs)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_on_a_gpu_the_pinned_profile_launches_the_benchmark_s_pick(tmp_path):
    """The pick step on the kit's submission (the benchmark shapes: race and tuner), each pick handed
    on through pin_env to a POPCORN_NCU=1 run: that run's call launches exactly the picked kernel."""
    cases = harness.shape_set("benchmarks")
    cases = [{k: c[k] for k in harness.CASE_KEYS} for c in cases]
    (tmp_path / "cases.txt").write_text(harness.test_file_text(cases))
    import subprocess
    env = {k: v for k, v in os.environ.items() if k not in ("POPCORN_NCU", harness.ENV_BACKEND, ncu_profile.ENV_CONFIG)}
    out = tmp_path / "picks.json"
    subprocess.run(ncu_profile.pick_command(sys.executable, ROOT / "submission.py", tmp_path / "cases.txt", out),
                   cwd=ROOT, env=env, check=True, timeout=900)
    picks = json.loads(out.read_text())["picks"]
    assert [p["shape"] for p in picks] == [f"{c['m']}x{c['k']}x{c['l']}" for c in cases]
    for case, pick in zip(cases, picks, strict=True):
        assert pick["backend"] in submission.BACKENDS and not pick["why"], pick
        (record,) = _records(tmp_path, [case], pick["pin"])
        if pick["config"] is not None:
            assert set(record["configs"].values()) == {pick["config"]}, (pick, record)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_on_a_gpu_server_default_is_what_the_profiler_run_launches_on_an_untabled_shape(tmp_path):
    """server_default against the submission itself: under POPCORN_NCU=1, on a shape no table names
    (4096x4096x2, 16 MiB: large enough to be tuned elsewhere), the call launches that kernel."""
    import torch
    case = {"m": 4096, "k": 4096, "l": 2, "seed": 7}
    assert all(shape != (4096, 4096, 2) for _, _, shape, _, _ in submission.table_entries())
    device = torch.device("cuda")
    name, cfg = ncu_profile.server_default(submission, device, 4096, 4096, 2, torch.cuda.get_device_capability(device))
    (record,) = _records(tmp_path, [case], {})
    assert record["backend_picks"] == {"4096x4096x2": name}
    if cfg is not None:
        assert set(record["configs"].values()) == {repr(cfg)}


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_on_a_gpu_with_ncu_each_run_profiles_the_one_kernel_its_pick_names(tmp_path, capsys):
    """The whole run on the kit's submission and the benchmark shapes, with Nsight Compute (skipped
    without it, or without the right to read the counters): every run profiles one kernel per call,
    each named with its config, and keeps its report."""
    import shutil
    if shutil.which("ncu") is None:
        pytest.skip("needs Nsight Compute's ncu on the path")
    code = ncu_profile.main([str(ROOT / "submission.py"), "--out", str(tmp_path / "p.ncu-rep")])
    captured = capsys.readouterr()
    if ncu_profile.PERMISSION_ERROR in captured.err:
        pytest.skip("ncu may not read this GPU's performance counters here")
    assert code == 0, captured.out + captured.err
    runs = captured.err.count("the benchmark's pick (")
    assert runs >= 1 and captured.out.count("report kept: ") == runs
    counts = [line.split(": ", 1)[1] for line in captured.out.splitlines() if line.startswith("kernels profiled: ")]
    assert counts and all(c.split(" for ")[0] == c.split(" for ")[1].split(" ")[0] for c in counts), counts
    lines = [line for line in captured.out.splitlines() if line.startswith("  ") and "; case m: " in line]
    assert len(lines) == 3 and all("not named" not in line and "where no table names the GPU" in line
                                   for line in lines), lines
