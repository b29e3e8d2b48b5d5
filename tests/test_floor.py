"""benchmarks/floor.py on any machine: it refuses without CUDA in one line, its empty kernels
compile for the GPUs it will run on, and its table and words follow the record (synthetic here;
the numbers come from a GPU run)."""

import subprocess
import sys

import pytest
from conftest import HAS_CUDA, ROOT

import submission
from benchmarks import floor


@pytest.mark.skipif(HAS_CUDA, reason="checks the refusal without CUDA")
def test_without_cuda_it_says_so_in_one_line_and_exits_2(tmp_path):
    out = tmp_path / "floor.json"
    proc = subprocess.run([sys.executable, "benchmarks/floor.py", "--json", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("floor.py needs a CUDA GPU")
    assert not out.exists()


def test_fewer_than_50_calls_are_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        floor.main(["--reps", "49"])
    assert exc.value.code == 2 and "--reps must be >= 50" in capsys.readouterr().err


def test_help_describes_every_option_and_names_the_servers_source():
    parser = floor.build_parser()
    assert all(a.help for a in parser._actions)
    assert "needs a CUDA GPU" in parser.description
    assert "f83cb92a534cc67fa98d7e9813e7f8238abdb4e0" in parser.description


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_the_empty_kernels_compile_and_the_kit_one_takes_the_launchs_parameters(arch):
    try:
        submission.find_nvrtc()
    except submission.CudaBuildError as exc:
        pytest.skip(f"no NVRTC here: {exc}")
    src = floor.kit_params_source()
    assert f"floor_params({submission._CUDA_PARAMS})" in src
    # _CudaLaunch passes 5 pointers, 10 scalars, the K split's 2 scratch pointers and the row groups
    assert submission._CUDA_PARAMS.count(",") + 1 == 18
    for source in (src, floor.EMPTY_CUDA_SRC):
        assert submission.cuda_compile(source, arch)[:4] == b"\x7fELF"


def synthetic_record():
    def t(med, mean):
        return {"median": med, "mean": mean, "n": 100}

    def proto(s, n, nh, cs=None, csh=None):
        out = {"server": t(*s), "no clear": t(*n), "no clear, held": t(*nh)}
        if cs:
            out.update({"clear, sync": t(*cs), "clear, sync, held": t(*csh)})
        return out

    return {"info": {"device": "Fake GPU", "capability": [9, 0], "torch": "2.13.0", "triton": "3.9.0",
                     "date": "2026-01-01", "kit_revision": "abc"}, "reps": 100,
            "rows": [
                {"what": "events", "shape": "", "detail": "nothing", "times": proto((1.0, 1.1), (1.5, 1.6), (0.5, 0.6),
                                                                                    (1.4, 1.5), (0.6, 0.7))},
                {"what": "empty triton", "shape": "", "detail": "1 program",
                 "times": proto((3.0, 3.2), (9.0, 9.5), (2.0, 2.1), (8.0, 8.4), (2.5, 2.6))},
                {"what": "kit params", "shape": "7168x2048x4", "detail": "grid 112 x 4",
                 "times": proto((3.5, 3.6), (6.0, 6.1), (2.5, 2.6))},
                {"what": "custom_kernel", "shape": "7168x2048x4", "detail": "submission.custom_kernel",
                 "times": proto((17.5, 17.9), (20.0, 20.5), (15.0, 15.2))},
                {"what": "empty cuda", "shape": "", "detail": "NVRTC", "times": {}, "error": "RuntimeError: no"},
            ], "errors": ["kit params 4096x7168x8: CudaBuildError: none"]}


def test_the_table_gives_median_and_mean_per_protocol_and_dashes_where_unmeasured():
    lines = floor.table_lines(synthetic_record())
    assert lines[0] == ("| what | shape | server: median / mean µs | no clear: median / mean µs | no clear, held: "
                        "median / mean µs | clear, sync: median / mean µs | clear, sync, held: median / mean µs "
                        "| detail |")
    assert lines[1] == "|---|---|---|---|---|---|---|---|"
    assert lines[3] == ("| empty triton | - | 3.00 / 3.20 | 9.00 / 9.50 | 2.00 / 2.10 | 8.00 / 8.40 | 2.50 / 2.60 "
                        "| 1 program |")
    assert lines[4] == "| kit params | 7168x2048x4 | 3.50 / 3.60 | 6.00 / 6.10 | 2.50 / 2.60 | - | - | grid 112 x 4 |"
    assert lines[6] == "| empty cuda | - | - | - | - | - | - | NVRTC; ERROR RuntimeError: no |"


def test_the_words_are_the_differences_of_the_medians():
    said = floor.words(synthetic_record())
    assert said[0] == "- The events alone, under the server's protocol: 1.00 µs."
    assert said[1] == ("- empty triton: 3.00 µs under the server's protocol, 2.00 over the events alone; 2.00 with "
                       "no clear and the GPU held (the launch on the device, L2 clean).")
    assert said[2] == ("  Dirty L2 alone (clear, sync, held minus no clear, held): +0.50 µs. "
                       "Right behind the clear (server minus clear, sync, held): +0.50 µs.")
    assert said[3] == ("  Host launch time exposed once the GPU is idle (clear, sync minus clear, sync, held): "
                       "+5.50 µs; without any clear (no clear minus no clear, held): +7.00 µs.")
    # no empty cuda time: the kit-params line has no difference to it
    assert said[4] == ("- 7168x2048x4 under the server's protocol: the kit's parameters and grid, returning at "
                       "once: 3.50 µs; custom_kernel 17.50 µs, of which 20% is that floor.")
    assert said[5] == "- not measured: kit params 4096x7168x8: CudaBuildError: none"
    report = floor.report_lines(synthetic_record())
    assert report[0].startswith("Fake GPU (cc [9, 0]), torch 2.13.0, triton 3.9.0, 2026-01-01, kit abc")
