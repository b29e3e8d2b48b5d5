"""benchmarks/projection.py: on records it cannot use, one line naming what is wrong, exit 2, no
traceback and no empty tables; on a well-formed pair (SASS counts stood in) the H100 check, the H200
calibration and the B200 projection; the model's arithmetic, the fit of its constant, and the
measured-beside-projected table of a B200 run, on stand-in counts."""

import json
import math
import subprocess
import sys

import pytest
from conftest import ROOT

import submission
from benchmarks import inflight, projection, sass_count, timing
from benchmarks.bench_kernel import as_json

SHAPE = "7168x2048x4"
CONFIG = as_json(submission.CudaConfig.of("lpr=8,rpt=2,u=4,warps=1"))


def cuda_row(**extra) -> dict:
    return {"shape": SHAPE, "backend": "cuda", "config": CONFIG, "kernel_us": 16.0, "ceiling_us": 15.0,
            "bytes": 33_090_000, **extra}


def full_record() -> dict:
    return {"info": {"device": "NVIDIA H100 80GB HBM3", "date": "2026-11-25", "sms": 132},
            "rows": [cuda_row(), {"shape": SHAPE, "backend": "cuda", "harness_us": 17.7, "floor_us": 3.1}]}


def sms_record() -> dict:
    return {"command": "python3 benchmarks/bench_kernel.py --sms auto",
            "points": [{"sms": 0, **full_record()}, {"sms": 78, "rows": [cuda_row(kernel_us=20.0)]}]}


def write(tmp_path, full, sms) -> list[str]:
    paths = []
    for name, record in (("full.json", full), ("sms.json", sms)):
        path = tmp_path / name
        path.write_text(record if isinstance(record, str) else json.dumps(record))
        paths.append(str(path))
    return paths


def run_main(tmp_path, capsys, full, sms) -> tuple[int, str, str]:
    """projection.main on the two records, in this process (a traceback would fail the test)."""
    rc = projection.main(write(tmp_path, full, sms))
    out, err = capsys.readouterr()
    return rc, out, err


def drop(record: dict, *path):
    record = json.loads(json.dumps(record))
    node = record
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return record


BAD = {
    "empty objects": ({}, {}, "full.json: no info.sms"),
    "a list": ([1, 2], sms_record(), "full.json: a JSON list"),
    "the records swapped": (sms_record(), full_record(), "full.json: a bench_kernel.py --sms record"),
    "shapes.json": (json.loads((ROOT / "shapes.json").read_text()), sms_record(), "full.json: no info.sms"),
    "no cuda row": ({**full_record(), "rows": [r for r in full_record()["rows"] if "kernel_us" not in r]},
                    sms_record(), "no row of the cuda backend"),
    "a cuda row without bytes": (drop(full_record(), "rows", 0, "bytes"), sms_record(), "cuda rows without bytes"),
    "no floor": ({**full_record(), "rows": [cuda_row()]}, sms_record(), "no harness row with floor_us"),
    "an empty sms record": (full_record(), {}, "sms.json: no points[]"),
    "no pressure point": (full_record(), {"points": [{"sms": 0, **full_record()}]}, "sms.json: no point below"),
    "a malformed config": ({**full_record(), "rows": [cuda_row(config="nonsense"), full_record()["rows"][1]]},
                           sms_record(), "a field the projection reads is malformed"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_an_unusable_record_is_one_line_naming_what_is_wrong(tmp_path, capsys, case):
    full, sms, words = BAD[case]
    rc, out, err = run_main(tmp_path, capsys, full, sms)
    assert rc == 2 and out == "", out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("projection.py: ") and words in lines[0], err


def test_a_file_that_is_not_json_is_one_line(tmp_path, capsys):
    rc, out, err = run_main(tmp_path, capsys, "not json", sms_record())
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1


def test_the_command_on_empty_objects_exits_2_with_one_line_and_no_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "benchmarks/projection.py", *write(tmp_path, {}, {})], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [f"projection.py: {tmp_path / 'full.json'}: no info.sms (the GPU's "
                                                "SM count): not a bench_kernel.py --json record at full width"]


def test_record_problem_passes_a_well_formed_pair():
    assert projection.record_problem(full_record(), sms_record()) == ""


COUNTS = {"registers": 91, "shared": 3200, "loop": 400, "per_chunk": 50.0, "loads": 8, "bytes": 16, "burst": 4,
          "first_use": "F2FP", "ring_bytes": 0}


@pytest.fixture
def stand_in_counts(monkeypatch):
    """Every config's SASS counts stood in (nothing compiled, no stored record read)."""
    monkeypatch.setattr(projection, "_STORE", [{}])
    monkeypatch.setattr(inflight, "measure", lambda cfg, arch: dict(COUNTS, per_chunk=70.0 if arch == "sm_90a"
                                                                    else 50.0, ring_bytes=65536 * bool(cfg.ring)))
    monkeypatch.setattr(sass_count, "count", lambda cfg, arch: {"per_chunk": 56.0 if arch == "sm_90a" else 40.0})


def test_a_well_formed_pair_prints_the_h100_check_the_calibration_and_the_projection(tmp_path, capsys,
                                                                                      stand_in_counts):
    rc, out, err = run_main(tmp_path, capsys, full_record(), sms_record())
    assert rc == 0, err
    assert "## The issue model on the H100" in out and "## The H200 calibration" in out and "## B200 projection" in out
    assert out.count(f"| {SHAPE} |") == 1 + 2 + len(inflight.candidates((7168, 2048, 4)))


def test_without_records_it_prints_the_calibration_and_the_projection(capsys, stand_in_counts):
    assert projection.main([]) == 0
    out = capsys.readouterr().out
    assert "## The H100" not in out and "## B200 projection" in out


def test_one_record_alone_is_one_line(tmp_path, capsys):
    path = tmp_path / "full.json"
    path.write_text(json.dumps(full_record()))
    assert projection.main([str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip().splitlines() == [
        "projection.py: 1 record(s) given: FULL.json and SMS.json go together"]


def test_terms_follow_the_model():
    """steps, waves, round trips and the root of the sum of squares, by hand."""
    gpu = projection.Machine("X", 100, 5.0, 4.0e12, 500.0, 150.0)
    cfg = submission.CudaConfig(lpr=8, rpt=2, u=4, warps=1, decode="f16x2", v=1, pipe="ptxas", minb=20, bsh=True)
    m, k, l = 4096, 7168, 8
    t = projection.terms((m, k, l), cfg, COUNTS, gpu, 2.0)
    steps = math.ceil(k // 32 / 32)  # 224 chunks, 32 per step
    busiest = math.ceil(m // 8 * l / 100)  # 4096 blocks over 100 SMs
    waves = math.ceil(busiest / 20)  # 91 registers: 20 blocks resident
    latency = waves * steps * (2 * 500.0 + 400 * 2.0 / projection.CLOCK_HZ * 1e9) / 1e3  # 8 loads, 4 per trip
    read = timing.gemv_bytes(m, k, l) / 4.0e12 * 1e6
    issue = projection.issue_us(m, k, l, 50.0, 100)
    assert (t["steps"], t["waves"], t["trips"]) == (steps, waves, 2)
    assert t["latency"] == pytest.approx(latency) and t["read"] == pytest.approx(read)
    assert t["issue"] == pytest.approx(issue)
    assert t["time"] == pytest.approx(5.0 + math.sqrt(read ** 2 + issue ** 2 + latency ** 2))
    a_first = projection.terms((m, k, l), cfg._replace(pipe="a_first", bsh=False), COUNTS, gpu, 2.0)
    assert a_first["latency"] == pytest.approx(latency + waves * steps * 150.0 / 1e3)  # b waits on a: an L2 trip


def test_the_fit_recovers_the_constant_that_made_the_times():
    gpu = projection.Machine("X", 132, 5.0, 4.7e12, 400.0, 150.0)
    cfgs = [submission.CudaConfig(lpr=8, rpt=2, u=4, warps=1, decode="dp4a-sr2", v=1, pipe="ptxas", minb=20,
                                  bsh=True),
            submission.CudaConfig(lpr=32, rpt=8, u=1, warps=1, decode="dp4a-sr", v=1, pipe="ptxas", minb=1)]
    points = [(s, cfg, COUNTS, projection.terms(s, cfg, COUNTS, gpu, 1.7)["time"])
              for s in submission.TUNED_SHAPES for cfg in cfgs]
    assert projection.fit_c(points, gpu) == pytest.approx(1.7)


def b200_record(**extra):
    cfg = submission.CudaConfig.of("lpr=8,rpt=2,u=4,warps=1,decode=f16x2,v=1,pipe=0,minb=20,bsh=1")
    rows = [{"shape": SHAPE, "backend": "cuda", "kernel_us": 12.0, "ceiling_us": 10.0, "bytes": 33_090_000,
             "config": as_json(cfg)},
            {"shape": SHAPE, "backend": "triton", "kernel_us": 13.0, "config": [16, 64, 2, 1]}]
    return {"info": {"device": "NVIDIA B200", "sms": 148}, "rows": rows, **extra}


def test_a_b200_run_is_printed_beside_the_projection(stand_in_counts):
    lines = projection.measured_beside_projected(b200_record())
    table = [ln for ln in lines if ln.startswith(f"| {SHAPE} |")]
    assert len(table) == 1  # the cuda row only
    cells = [c.strip() for c in table[0].strip("|").split("|")]
    ms = projection.machines()
    c, _ = projection.calibration(ms["H200"])
    cfg = submission.CudaConfig.of(b200_record()["rows"][0]["config"])
    t = projection.terms((7168, 2048, 4), cfg, dict(COUNTS, per_chunk=50.0), ms["B200"], c)
    assert cells[2] == "12.00" and cells[3] == f"{t['time']:.2f}" and cells[4] == f"{12.0 / t['time']:.3f}"
    assert cells[5] == f"10.00 / {ms['B200'].t0_us + t['read']:.2f}"
    assert "| shape | config | measured µs | projected µs | measured / projected |" in "\n".join(lines)


def test_a_run_without_cuda_rows_gets_no_table_and_missing_counts_are_said(monkeypatch, stand_in_counts):
    assert projection.measured_beside_projected({"rows": []}) == []
    def sm_90a_only(cfg, arch):
        if arch != "sm_90a":
            raise submission.CudaBuildError("no NVRTC here")
        return COUNTS

    monkeypatch.setattr(inflight, "measure", sm_90a_only)
    lines = projection.measured_beside_projected(b200_record())
    assert any("- (no SASS counts) |" in ln for ln in lines), lines


def test_a_bad_latency_file_is_one_line(tmp_path, capsys):
    path = tmp_path / "lat.json"
    path.write_text("[1, 2]")
    assert projection.main(["--latency", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip().splitlines() == [
        f"projection.py: {path}: not a benchmarks/latency.py record of an H100, H200 or B200 (device, "
        "summary.knee_latency_ns, summary.best_read_bps)"]
