"""benchmarks/latency.py without a GPU: it refuses in one line, its probe compiles (NVRTC), and its
summary's arithmetic (best read, knee, loaded latency, need per SM) on stand-in levels."""

import subprocess
import sys

import pytest
from conftest import HAS_CUDA, ROOT

import submission
from benchmarks import latency


def level(blocks, unroll, read_tbs, ns):
    return {"reader_blocks_per_sm": blocks, "unroll": unroll, "in_flight_per_sm": blocks * 128 * 16 * unroll,
            "read_bps": read_tbs * 1e12, "latency_ns": ns, "latency_cycles": ns * 1.98}


LEVELS = [level(0, 0, 0.0, 600.0), level(1, 1, 1.0, 620.0), level(1, 4, 2.5, 700.0), level(4, 4, 3.9, 900.0),
          level(8, 4, 4.0, 1400.0), level(15, 4, 4.0, 2500.0)]


def test_the_knee_is_the_least_in_flight_reading_95_percent_of_the_best():
    s = latency.summarize(LEVELS, 132)
    assert s["unloaded_latency_ns"] == 600.0 and s["best_read_bps"] == 4.0e12
    assert s["knee_in_flight_per_sm"] == 4 * 128 * 16 * 4 and s["knee_latency_ns"] == 900.0  # 3.9 >= 0.95 x 4.0
    assert s["need_per_sm"] == pytest.approx(4.0e12 * 900e-9 / 132)
    assert s["heaviest_latency_ns"] == 2500.0


def test_the_levels_need_not_come_in_order():
    assert latency.summarize(LEVELS[::-1], 132) == latency.summarize(LEVELS, 132)


def test_summarize_refuses_what_it_cannot_summarize():
    with pytest.raises(ValueError, match="unloaded level"):
        latency.summarize(LEVELS[1:], 132)
    with pytest.raises(ValueError, match="unloaded level"):
        latency.summarize(LEVELS[:1], 132)
    with pytest.raises(ValueError, match="SM count"):
        latency.summarize(LEVELS, 0)


def test_the_report_names_every_level_and_the_need():
    record = {"device": "NVIDIA H100 80GB HBM3", "sms": 132, "date": "2026-12-01", "hops": 20000, "chain_mb": 1024,
              "reps": 3, "levels": LEVELS, "summary": latency.summarize(LEVELS, 132)}
    text = "\n".join(latency.report(record))
    assert "| none (unloaded) | 0 | 0.00 | 600 |" in text and "| 15 x 4 | 122880 | 4.00 | 2500 |" in text
    assert f"need per SM = best read x knee latency / SMs = {4.0e12 * 900e-9 / 132 / 1024:.1f} KB" in text


@pytest.mark.skipif(HAS_CUDA, reason="checks the refusal without a GPU")
def test_without_a_gpu_it_refuses_in_one_line():
    proc = subprocess.run([sys.executable, "benchmarks/latency.py"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == ["latency.py needs a CUDA GPU (torch.cuda.is_available() is False here)"]


def test_bad_arguments_stop_at_the_arguments():
    with pytest.raises(SystemExit) as exc:
        latency.main(["--hops", "0"])
    assert exc.value.code == 2


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_the_probe_compiles_for_hopper_and_blackwell(arch):
    try:
        submission.find_nvrtc()
    except submission.CudaBuildError as exc:
        pytest.skip(f"needs NVRTC: {exc}")
    for unroll in sorted({u for _, u in latency.LEVELS} - {0}):
        assert submission.cuda_compile(latency.PROBE_SRC, arch, {"UNROLL": unroll})
