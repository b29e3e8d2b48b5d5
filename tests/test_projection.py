"""benchmarks/projection.py on records it cannot use: one line naming what is wrong, exit 2, no
traceback and no empty tables; on a well-formed pair (SASS counts stood in) it prints both tables."""

import json
import subprocess
import sys

import pytest
from conftest import ROOT, set_backend

import submission
from benchmarks import projection, sass_count
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


def test_a_well_formed_pair_prints_both_tables(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sass_count, "count", lambda cfg, arch: {"per_chunk": 56.0 if arch == "sm_90a" else 40.0})
    set_backend(monkeypatch, submission, "cuda",
                candidates=lambda m, k, l, cc: [submission.CudaConfig.of("lpr=8,rpt=2,u=4,warps=1,decode=f16x2")])
    rc, out, err = run_main(tmp_path, capsys, full_record(), sms_record())
    assert rc == 0, err
    assert "B200 projection" in out
    assert out.count(f"| {SHAPE} |") == 2, out
