"""``python3 eval.py profile``: the server's Nsight Compute run over the kit's harness.

Without a GPU or Nsight Compute here, the tests check the command (the server's, word for word),
the refusals (no ncu, no GPU, counters not permitted, a file the server would refuse), the
extraction of the three tables from a stand-in of ``ncu --print-details body`` text, the mapping
of kernels to configurations, and the whole pipeline with a stand-in ``ncu`` that runs the
wrapped command and prints the stand-in report. A real profile is a GPU check.
"""

import json
import os
import stat
import sys
import textwrap

import pytest
from conftest import HAS_CUDA, ROOT

import harness
import ncu_profile

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
