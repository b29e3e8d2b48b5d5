"""benchmarks/bench_kernel.py's command line, on any machine: it says what it needs, its
options are described, and it records the backend that ran (the timing itself needs a GPU:
.ci/gpu-run runs it there)."""

import types

import pytest
from conftest import HAS_CUDA

from benchmarks import bench_kernel


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
