"""benchmarks/bench_configs.py: the grid is checked before any GPU work (bad shapes, unknown fields,
configs the kernel's rules refuse each stop it in one line naming them), without a GPU it says so
after the check, and on a GPU it checks each config, then times it beside the read ceiling."""

import json
import subprocess
import sys

import pytest
from conftest import HAS_CUDA, ROOT

import submission
from benchmarks import bench_configs

R2 = {"lpr": 8, "rpt": 2, "u": 4, "warps": 1, "decode": "dp4a-sr2", "v": 1, "pipe": "ptxas", "minb": 5, "bsh": True,
      "ks": 4, "ki": True}


def write(tmp_path, grid) -> str:
    path = tmp_path / "grid.json"
    path.write_text(grid if isinstance(grid, str) else json.dumps(grid))
    return str(path)


def test_a_grid_reads_as_shapes_and_named_configs(tmp_path):
    grid = bench_configs.load_grid(write(tmp_path, {"7168x16384x1": {"r2": R2},
                                                    "256X7168x2": [dict(R2, ks=1, ki=False, minb=0)]}))
    assert set(grid) == {(7168, 16384, 1), (256, 7168, 2)}
    assert grid[(7168, 16384, 1)] == {"r2": submission.CudaConfig(**R2)}
    (name, cfg), = grid[(256, 7168, 2)].items()  # a list names each config by its text
    assert name == repr(cfg) and cfg.ks == 1


@pytest.mark.parametrize("grid, says", [
    ("not json", "grid.json"),
    ({}, "non-empty object of shapes"),
    ({"7168x16384": {"r2": R2}}, "shape '7168x16384' is not MxKxL"),
    ({"7168x0x1": {"r2": R2}}, "shape '7168x0x1' is not MxKxL"),
    ({"7168x16384x1": {}}, "7168x16384x1: no configs"),
    ({"7168x16384x1": {"bad": dict(R2, rows=3)}}, "7168x16384x1 bad: "),
    ({"7168x16384x1": {"noki": dict(R2, ks=1)}}, "needs K split in parts: ks * kb > 1"),
    ({"7168x16384x1": {"pipe": dict(R2, pipe="roll")}}, "pipe must be one of"),
], ids=["not-json", "empty", "two-dims", "zero-k", "no-configs", "unknown-field", "rule", "bad-pipe"])
def test_a_bad_grid_stops_in_one_line_naming_it(tmp_path, grid, says):
    with pytest.raises(ValueError) as exc:
        bench_configs.load_grid(write(tmp_path, grid))
    assert str(exc.value).startswith(f"--grid {tmp_path / 'grid.json'}: ") and says in str(exc.value)
    assert "\n" not in str(exc.value)


def test_bad_arguments_stop_at_the_arguments(tmp_path):
    with pytest.raises(SystemExit):
        bench_configs.parse_args(["--grid", "g.json", "--rounds", "0"])
    with pytest.raises(SystemExit):
        bench_configs.parse_args([])  # --grid is required


@pytest.mark.skipif(HAS_CUDA, reason="checks the refusal without a GPU")
def test_without_a_gpu_it_checks_the_grid_then_refuses_in_one_line(tmp_path):
    path = write(tmp_path, {"7168x16384x1": {"r2": R2, "r1": dict(R2, rpt=1, ks=8, minb=3)}})
    proc = subprocess.run([sys.executable, "benchmarks/bench_configs.py", "--grid", path], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "bench_configs.py needs a CUDA GPU; the grid is valid (2 configs on 1 shapes)"]


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU (times kernels)")
def test_on_a_gpu_each_round_has_a_ceiling_and_every_config_a_time_and_probe(tmp_path):
    path = write(tmp_path, {"256x7168x2": {"one": dict(R2, rpt=1, ks=2, minb=8)},
                            "512x4096x1": {"two": dict(R2, minb=2)}})
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, "benchmarks/bench_configs.py", "--grid", path, "--rounds", "2",
                           "--reps", "5", "--json", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rec = json.loads(out.read_text())
    assert set(rec["shapes"]) == {"256x7168x2", "512x4096x1"}
    for shape in rec["shapes"].values():
        assert len(shape["ceiling"]) == 2 and all(c["us"] > 0 for c in shape["ceiling"])
        for cfg in shape["configs"].values():
            assert len(cfg["us"]) == 2 and len(cfg["probe_us"]) == 2 and min(cfg["us"] + cfg["probe_us"]) > 0
    assert proc.stdout.count("round ") == 4
