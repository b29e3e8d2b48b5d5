"""The suite in parts (`pytest --part N/M`, `.ci/gpu-run OUTDIR --part N/M|bench`): every test is in
exactly one part, the parts are balanced by the weights of tests/conftest.py, and gpu-run's parts
run what they say (checked on the CPU with a stand-in ``python3``)."""

import os
import random
import re
import subprocess
import sys
from pathlib import Path

import conftest
import pytest
from conftest import DEFAULT_FILE_WEIGHT, FILE_WEIGHTS, ROOT, assign_parts, collect_here, parse_part, suite_files


def weight(name: str) -> int:
    return FILE_WEIGHTS.get(name, DEFAULT_FILE_WEIGHT)


@pytest.mark.parametrize("m", range(1, 9))
def test_every_test_file_is_in_exactly_one_part(m):
    files = suite_files()
    parts = assign_parts(files, m)
    assert sorted(parts) == files
    assert set(parts.values()) <= set(range(1, m + 1))
    if m <= len(files):
        assert set(parts.values()) == set(range(1, m + 1)), "a part with no file"


@pytest.mark.parametrize("m", [2, 3, 4, 5, 6])
def test_the_parts_are_balanced_and_do_not_depend_on_the_order_of_the_files(m):
    files = suite_files()
    parts = assign_parts(files, m)
    shuffled = files[:]
    random.Random(m).shuffle(shuffled)
    assert assign_parts(shuffled, m) == parts
    loads = [sum(weight(f) for f, p in parts.items() if p == n) for n in range(1, m + 1)]
    # Heaviest first, each to the lightest part: no part exceeds the mean by more than one file.
    assert max(loads) <= sum(loads) / m + max(weight(f) for f in files), loads


def test_the_weights_name_only_test_files_that_exist():
    stale = sorted(set(FILE_WEIGHTS) - set(suite_files()))
    assert not stale, f"FILE_WEIGHTS in tests/conftest.py names files that are gone: {stale}"


@pytest.mark.parametrize("spec", ["0/3", "4/3", "3", "a/b", "1/0", ""])
def test_a_bad_part_is_a_usage_error_naming_the_form(spec):
    with pytest.raises(pytest.UsageError, match="N/M"):
        parse_part(spec)


def selected(n: int, m: int, monkeypatch, capsys) -> tuple[list[str], int]:
    """The test ids ``pytest --collect-only -q --part N/M`` selects, and how many it collected in all
    (conftest.collect_here: in this process). Its printed summary agrees with what it collected."""
    code, out, ids, deselected = collect_here(["-q", "-p", "no:cacheprovider", "--part", f"{n}/{m}"], monkeypatch,
                                              capsys)
    assert code == 0, out[-2000:]
    counts = re.search(r"(\d+)/(\d+) tests? collected \((\d+) deselected\)", out)
    assert counts, out[-2000:]
    assert [line for line in out.splitlines() if "::" in line] == ids
    assert len(ids) == int(counts[1]) == int(counts[2]) - int(counts[3])
    assert int(counts[3]) == deselected
    return ids, int(counts[2])


def test_the_parts_partition_the_collected_suite(monkeypatch, capsys):
    m = 2
    results = [selected(n, m, monkeypatch, capsys) for n in range(1, m + 1)]
    parts = [ids for ids, _ in results]
    whole = {total for _, total in results}
    assert len(whole) == 1, "the parts collected different suites"
    every = [test for part in parts for test in part]
    assert len(every) == len(set(every)), "a test in two parts"
    assert len(every) == whole.pop(), "the parts together are not the collected suite"
    assignment = assign_parts(suite_files(), m)
    # a file that collects no test here (skipped whole, e.g. test_modal_app.py without modal) is in no part's ids
    seen = {Path(test.split("::")[0]).name for test in every}
    for n, part in enumerate(parts, 1):
        assert {Path(test.split("::")[0]).name for test in part} == {f for f, p in assignment.items()
                                                                     if p == n and f in seen}


def test_pytest_refuses_a_bad_part_before_collecting():
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--part", "3/2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "--part '3/2': expected N/M" in proc.stderr
    assert "collected" not in proc.stdout


# A stand-in for python3: says a CUDA GPU is there and records each command line instead of running it
# (after GPU_RUN_SLEEP seconds, where that is set); `eval.py bundle --check` fails with the line
# GPU_RUN_BUNDLE_ERROR where that is set.
FAKE_PYTHON = """#!/bin/sh
[ -n "$GPU_RUN_SLEEP" ] && sleep "$GPU_RUN_SLEEP"
echo "$*" >> "$GPU_RUN_CALLS"
if [ "$*" = "eval.py bundle --check" ] && [ -n "$GPU_RUN_BUNDLE_ERROR" ]; then
    echo "$GPU_RUN_BUNDLE_ERROR" >&2
    exit 1
fi
exit 0
"""


def gpu_run(tmp_path: Path, *args: str, env_extra: dict | None = None,
            bundle_error: str = "") -> tuple[subprocess.CompletedProcess, list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "python3"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    calls = tmp_path / "calls.txt"
    calls.write_text("")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "GPU_RUN_CALLS": str(calls),
           "GPU_RUN_BUNDLE_ERROR": bundle_error}
    env.pop("PART_BUDGET_S", None)
    env.update(env_extra or {})
    proc = subprocess.run(["bash", str(ROOT / ".ci" / "gpu-run"), str(tmp_path / "out"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    # The first call is the bundle check, the second the CUDA check, the third the versions line.
    return proc, calls.read_text().splitlines()[3:]


BENCH = ["benchmarks/bench_kernel.py", "-m benchmarks.compare", "benchmarks/floor.py", "eval.py --mode benchmark"]


def test_gpu_run_whole_runs_the_suite_then_the_benchmarks(tmp_path):
    proc, calls = gpu_run(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert calls[0].startswith("-m pytest") and "--part" not in calls[0]
    assert [b for b in BENCH if any(b in c for c in calls[1:])] == BENCH
    assert (tmp_path / "out" / "gpu-run.log").is_file()


def test_gpu_run_a_part_runs_that_part_of_the_suite_only(tmp_path):
    proc, calls = gpu_run(tmp_path, "--part", "2/5")
    assert proc.returncode == 0, proc.stderr
    assert calls == ["-m pytest -q -rs -p no:cacheprovider --part 2/5"]
    assert (tmp_path / "out" / "gpu-run-part-2-of-5.log").is_file()


def test_gpu_run_the_bench_part_runs_the_benchmarks_only(tmp_path):
    proc, calls = gpu_run(tmp_path, "--part=bench")
    assert proc.returncode == 0, proc.stderr
    assert not any(c.startswith("-m pytest") for c in calls)
    assert [b for b in BENCH if any(b in c for c in calls)] == BENCH
    assert (tmp_path / "out" / "gpu-run-bench.log").is_file()


def test_gpu_run_gpu_only_passes_the_selection_to_pytest(tmp_path):
    proc, calls = gpu_run(tmp_path, "--gpu-only", "--part", "1/2")
    assert proc.returncode == 0, proc.stderr
    assert calls == ["-m pytest -q -rs -p no:cacheprovider --gpu-only --part 1/2"]
    (tmp_path / "whole").mkdir()
    proc, calls = gpu_run(tmp_path / "whole", "--gpu-only")
    assert proc.returncode == 0, proc.stderr
    assert calls[0] == "-m pytest -q -rs -p no:cacheprovider --gpu-only"


def test_gpu_run_a_part_has_no_budget_unless_part_budget_s_sets_one(tmp_path):
    """Unset, every step of a part runs; with PART_BUDGET_S the part stops its steps once that many
    seconds have passed (here 1 s, spent before the first step: every step is skipped, with a line)."""
    (tmp_path / "free").mkdir()
    proc, calls = gpu_run(tmp_path / "free", "--part", "bench")
    assert proc.returncode == 0, proc.stderr
    assert [b for b in BENCH if any(b in c for c in calls)] == BENCH
    assert "budget" not in (tmp_path / "free" / "out" / "gpu-run-bench.log").read_text()
    (tmp_path / "spent").mkdir()  # the stand-in python3 sleeps 2 s a call: the CUDA check spends the budget
    proc, calls = gpu_run(tmp_path / "spent", "--part", "bench",
                          env_extra={"PART_BUDGET_S": "1", "GPU_RUN_SLEEP": "2"})
    assert proc.returncode == 0, proc.stderr
    assert calls == []
    log = (tmp_path / "spent" / "out" / "gpu-run-bench.log").read_text()
    assert log.count("skipped: the part's budget of 1 s is spent") == len(BENCH)


@pytest.mark.parametrize("budget", ["9m", "-1", "x"])
def test_gpu_run_refuses_a_budget_that_is_not_whole_seconds_in_one_line(tmp_path, budget):
    proc, calls = gpu_run(tmp_path, "--part", "1/2", env_extra={"PART_BUDGET_S": budget})
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "PART_BUDGET_S" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_gpu_run_checks_the_bundle_first_and_refuses_an_out_of_sync_tree_in_one_line(tmp_path):
    """`python3 eval.py bundle --check` runs before anything else; where it fails, gpu-run stops
    with its line (exit 2): the benchmarks' records would name a kernel that kernels/ does not hold."""
    proc, _ = gpu_run(tmp_path)
    assert proc.returncode == 0 and (tmp_path / "calls.txt").read_text().splitlines()[0] == "eval.py bundle --check"
    (tmp_path / "refused").mkdir()
    why = "kernels/nvfp4_gemv.cu line 6 differs from its copy in submission.py (line 779): the copy was edited"
    proc, calls = gpu_run(tmp_path / "refused", bundle_error=f"error: {why}")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f".ci/gpu-run: submission.py does not hold its sources, nothing run: {why}\n"
    assert (tmp_path / "refused" / "calls.txt").read_text().splitlines() == ["eval.py bundle --check"]
    assert not (tmp_path / "refused" / "out").exists()


@pytest.mark.parametrize("args", [["--part", "0/4"], ["--part", "5/4"], ["--part", "x"], ["--part"]])
def test_gpu_run_refuses_a_bad_part_in_one_line(tmp_path, args):
    proc, calls = gpu_run(tmp_path, *args)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "--part" in proc.stderr
    assert not (tmp_path / "out").exists()


class _Item:
    """A stand-in collected test: its markers by name."""

    def __init__(self, *marks):
        self.marks = marks

    def get_closest_marker(self, name):
        return next((m for m in self.marks if m.name == name), None)

    def iter_markers(self, name):
        return (m for m in self.marks if m.name == name)


@pytest.mark.parametrize("marks, expected", [
    ((pytest.mark.gpu.mark,), True),
    ((pytest.mark.skipif(False, reason="needs a CUDA GPU").mark,), True),
    ((pytest.mark.skipif(True, reason="needs a CUDA GPU").mark,), False),
    ((pytest.mark.skipif(False, reason="checks the refusal without a CUDA GPU").mark,), False),
    ((pytest.mark.skipif(False, reason="nvidia-cutlass-dsl not installed").mark,), False),
    ((), False),
], ids=["gpu-marker", "skipif-no-cuda-would-run", "skipif-no-cuda-skipped", "refusal-test", "other-skipif", "plain"])
def test_gpu_only_keeps_the_tests_that_need_a_gpu(marks, expected):
    """--gpu-only keeps a test marked gpu, or one whose skipif names a CUDA GPU and would run here."""
    assert conftest.needs_gpu(_Item(*marks)) is expected
