"""benchmarks/roofline.py (bench_kernel.py --roofline) on the CPU: the grid and the shape sets,
the limit and what it counts, the table / markdown / summary of a synthetic record, the plot of
a record (also from its JSON, without torch), the options, and the refusal without CUDA. The
measurement itself needs a GPU (bench_kernel.py --roofline)."""

import json
import math
import statistics
import subprocess
import sys

import pytest
from conftest import BENCHMARKS, HAS_CUDA, OFFICIAL_TESTS, ROOT

import harness
import reference
from benchmarks import bench_kernel, roofline, timing

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
MATPLOTLIB = "matplotlib is not installed (it is in the dev extra)"


# --------------------------------------------------------------------------- shapes

def test_grid_has_25_to_35_shapes_within_the_problem_constraints():
    assert 25 <= len(roofline.GRID) <= 35
    assert len(set(roofline.GRID)) == len(roofline.GRID)
    for m, k, l in roofline.GRID:
        assert m % 128 == 0 and 128 <= m <= 16384, (m, k, l)
        assert k % 256 == 0 and 256 <= k <= 16384, (m, k, l)
        assert 1 <= l <= 8, (m, k, l)
    ms, ks, ls = zip(*roofline.GRID, strict=True)
    assert (min(ms), max(ms), min(ks), max(ks), min(ls), max(ls)) == (128, 16384, 256, 16384, 1, 8)


def test_grid_spreads_bytes_moved_on_a_log_scale_from_20_kb_to_over_400_mb():
    """In order of bytes moved, from at most 20 KB to at least 400 MB, no two successive shapes
    more than 2.01x apart (the module's comment)."""
    sizes = [timing.gemv_bytes(*s) for s in roofline.GRID]
    assert sizes == sorted(sizes)
    assert sizes[0] <= 20_000 and sizes[-1] >= 400e6
    assert max(b / a for a, b in zip(sizes[:-1], sizes[1:], strict=True)) <= 2.01


def test_grid_covers_small_m_with_long_k_and_large_m_with_short_k():
    grid = set(roofline.GRID)
    assert {(128, 16384, 1), (256, 7168, 1), (128, 16384, 8)} <= grid
    assert any(m >= 8192 and k <= 512 for m, k, _ in grid)
    assert any(m == 16384 and k == 256 for m, k, _ in grid)


def test_shape_sets_hold_the_grid_and_every_official_shape_once_with_its_seed():
    grid, tests, both = (roofline.shapes(w) for w in ("grid", "tests", "both"))
    assert [(s["m"], s["k"], s["l"]) for s in grid] == list(roofline.GRID)
    assert all(s["sets"] == ["grid"] and s["seed"] == roofline.SEED for s in grid)
    official = {(m, k, l): seed for m, k, l, seed in OFFICIAL_TESTS + BENCHMARKS}
    assert {(s["m"], s["k"], s["l"]): s["seed"] for s in tests} == official
    keys = [(s["m"], s["k"], s["l"]) for s in both]
    assert len(keys) == len(set(keys)) == len(set(roofline.GRID) | set(official))
    by_key = {(s["m"], s["k"], s["l"]): s for s in both}
    for m, k, l, seed in OFFICIAL_TESTS:
        assert "test" in by_key[(m, k, l)]["sets"] and by_key[(m, k, l)]["seed"] == seed
    for m, k, l, _ in BENCHMARKS:
        assert "benchmark" in by_key[(m, k, l)]["sets"]
    assert by_key[(256, 7168, 1)]["sets"] == ["grid", "test"]  # in both: listed once, with both tags


def test_an_unknown_shape_set_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match="choose from grid, tests, both"):
        roofline.shapes("benchmarks")


# --------------------------------------------------------------------------- the limit

def test_limit_is_floor_plus_bytes_over_bandwidth():
    assert roofline.limit_us(5_000_000, 3.0, 2_500_000.0) == 5.0  # 3 µs + 5 MB / (2.5 MB/µs)
    assert roofline.limit_us(0, 3.25, 1.0) == 3.25


def test_targets_are_1_3_from_1_mb_and_1_5_below():
    assert roofline.target(1_000_000) == 1.3 and roofline.target(10**9) == 1.3
    assert roofline.target(999_999) == 1.5 and roofline.target(18_832) == 1.5


@pytest.mark.parametrize("m, k, l", [(128, 256, 1), (256, 1536, 3)])
def test_bytes_are_what_a_gemv_reads_and_writes(m, k, l):
    """timing.gemv_bytes counted from the tensors themselves: all of a and sfa, row 0 of b and
    sfb in every batch, all of c."""
    a, b, sfa, sfb, _, _, c = reference.generate_input(m, k, l, 0, device="cpu")
    counted = (a.untyped_storage().nbytes() + sfa.untyped_storage().nbytes() + b[0].numel() * b.element_size()
               + sfb[0].numel() * sfb.element_size() + c.numel() * c.element_size())
    assert timing.gemv_bytes(m, k, l) == counted


# --------------------------------------------------------------------------- the record's views

def _result(mean, lim):
    return {"mean_us": mean, "median_us": mean - 0.5, "ratio": mean / lim, "median_ratio": (mean - 0.5) / lim, "n": 5}


def _record():
    """A hand-made record: three shapes (an official test shape under 1 MB, one of 1 MB or more,
    a grid shape), floor 3 µs, 2.5 MB/µs; one wrong triton result."""
    rows = []
    for (m, k, l), sets, cuda, triton, auto in (
        ((2432, 4608, 2), ["test"], 10.0, 12.0, 10.0),
        ((128, 256, 1), ["grid", "test"], 4.5, None, 4.0),
        ((16384, 16384, 3), ["grid"], 200.0, 220.0, 201.0),
    ):
        nbytes = timing.gemv_bytes(m, k, l)
        lim = 3.0 + nbytes / 2.5e6
        rows.append({"shape": f"{m}x{k}x{l}", "m": m, "k": k, "l": l, "sets": sets, "bytes": nbytes,
                     "limit_us": lim, "backends": {
                         "cuda": {"config": {"lpr": 8}, **_result(cuda, lim)},
                         "triton": ({"config": {"block_m": 16}, **_result(triton, lim)} if triton
                                    else {"config": {"block_m": 16}, "wrong": ["full-range: mismatch"]})},
                     "auto": {"backend": "fastest: cuda", **_result(auto, lim)}})
    info = {"device": "NVIDIA H100 80GB HBM3", "capability": [9, 0], "sms": 132, "date": "2026-01-02",
            "kit_revision": "0123abc", "kernel_revision": "k1", "torch": "2.9", "triton": "3.5"}
    return {"info": info, "command": "python3 benchmarks/bench_kernel.py --roofline", "floor_us": 3.0,
            "floor_times_us": [3.0] * 3, "read": {"bytes": 1 << 30, "us": (1 << 30) / 2.5e6, "shape": [1024, 4, 4],
                                                  "bytes_per_us": 2.5e6},
            "backends": ["triton", "cuda"], "reps": 5, "rows": rows}


def test_table_has_one_row_per_shape_in_order_of_bytes_with_mean_and_x_limit():
    lines = roofline.table_lines(_record())
    assert lines[0] == ("| shape (m x k x l) | set | MB | limit µs | cuda µs (x limit) | triton µs (x limit) "
                        "| auto µs (x limit) | auto's pick |")
    assert lines[1] == "|---|---|---|---|---|---|---|---|"
    lim_small = 3.0 + 18832 / 2.5e6
    assert lines[2] == (f"| 128x256x1 | grid, test | 0.0188 | {lim_small:.2f} | 4.50 ({4.5 / lim_small:.2f}x) | WRONG "
                        f"| 4.00 ({4.0 / lim_small:.2f}x) | fastest: cuda |")
    assert lines[3].startswith("| 2432x4608x2 | test | 12.6 | 8.05 | 10.00 (1.24x) | 12.00 (1.49x) | 10.00 (1.24x) |")
    assert lines[4].startswith("| 16384x16384x3 | grid | 453 | 184.24 | 200.00 (1.09x) |")
    assert len(lines) == 5


def test_summary_geomeans_and_the_official_shapes_against_their_targets():
    rec = _record()
    s = roofline.summary(rec)
    rows = sorted(rec["rows"], key=lambda r: r["bytes"])
    for name in ("cuda", "auto"):
        ratios = [(r["auto"] if name == "auto" else r["backends"][name])["mean_us"] / r["limit_us"] for r in rows]
        assert math.isclose(s[name]["geomean_ratio"], statistics.geometric_mean(ratios), rel_tol=1e-12)
        assert s[name]["timed"] == 3 and s[name]["wrong"] == 0
    assert s["triton"]["timed"] == 2 and s["triton"]["wrong"] == 1
    t = s["tests_auto"]
    assert t["shapes"] == t["timed"] == 2
    assert math.isclose(t["geomean_mean_us"], math.sqrt(10.0 * 4.0), rel_tol=1e-12)
    # 128x256x1: 4.0 / 3.0075 = 1.33x, within 1.5 (under 1 MB); 2432x4608x2: 10 / 8.05 = 1.24x, within 1.3
    assert t["within_target"] == 2 and t["over_target"] == []
    rec["rows"][0]["auto"] = _result(12.0, rec["rows"][0]["limit_us"])  # 2432x4608x2 at 1.49x: over 1.3
    assert roofline.summary(rec)["tests_auto"]["over_target"] == ["2432x4608x2"]


def test_markdown_page_says_what_was_measured_and_holds_the_table():
    rec = _record()
    text = "\n".join(roofline.md_lines(rec))
    assert "NVIDIA H100 80GB HBM3 (compute capability 9.0, 132 SMs). Date: 2026-01-02. Kit 0123abc" in text
    assert "`python3 benchmarks/bench_kernel.py --roofline`" in text
    assert "Floor 3.00 µs" in text and "read bandwidth 2.500 TB/s" in text and "mean of 5 calls" in text
    assert all(line in text for line in roofline.table_lines(rec))
    # triton: 12 / 8.049 = 1.491x and 220 / 184.24 = 1.194x, geomean 1.334x
    assert "- triton: geomean 1.33x limit over 2 shapes, 1 wrong" in text


def test_the_series_are_the_backends_in_plot_order_then_auto():
    assert roofline.series_names(_record()) == ["cuda", "triton", "auto"]
    assert roofline.series_names({"backends": ["scaled_mm", "cuda"]}) == ["cuda", "scaled_mm", "auto"]


# --------------------------------------------------------------------------- the plot

def test_plot_writes_a_png_of_a_record(tmp_path):
    pytest.importorskip("matplotlib", reason=MATPLOTLIB)
    path = tmp_path / "sub" / "roofline.png"
    roofline.plot(_record(), path)
    assert path.read_bytes()[:8] == PNG_MAGIC


def _without_torch(*args):
    """python3 -m benchmarks.roofline ARGS, with torch made unimportable."""
    code = ("import sys; sys.modules['torch'] = None; from benchmarks import roofline; "
            "sys.exit(roofline.main(sys.argv[1:]))")
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_plot_from_a_saved_record_needs_no_torch(tmp_path):
    pytest.importorskip("matplotlib", reason=MATPLOTLIB)
    record = tmp_path / "r.json"
    record.write_text(json.dumps(_record()))
    proc = _without_torch("--plot-from", str(record), "--out", str(tmp_path / "r.png"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "r.png").read_bytes()[:8] == PNG_MAGIC


@pytest.mark.parametrize("text, words", [("{", "not a readable JSON file"),
                                          ('{"rows": []}', "not a roofline record")])
def test_plot_from_a_file_that_is_no_record_says_so_in_one_line(tmp_path, text, words):
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    proc = _without_torch("--plot-from", str(bad), "--out", str(tmp_path / "x.png"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and words in proc.stderr, proc.stderr
    assert not (tmp_path / "x.png").exists()


# --------------------------------------------------------------------------- the options

def test_roofline_options_parse(tmp_path):
    args = bench_kernel.parse_args(["--roofline", "--roofline-shapes", "grid", "--json", str(tmp_path / "r.json"),
                                    "--md", str(tmp_path / "r.md"), "--backends", "cuda", "--reps", "7"])
    assert args.roofline and args.roofline_shapes == "grid" and args.reps == 7 and args.plot == ""
    assert bench_kernel.parse_args(["--roofline"]).roofline_shapes == "both"
    assert harness.SHAPE_SETS  # the official sets roofline.shapes reads


@pytest.mark.parametrize("argv, words", [
    (["--roofline", "--sweep"], "not with --sweep"),
    (["--roofline", "--sms", "64", "--no-server"], "not with --sms, --no-server"),
    (["--roofline", "--shapes", "tests"], "not with --shapes"),
    (["--roofline-shapes", "grid"], "--plot and --roofline-shapes go with --roofline"),
    (["--plot", "x.png"], "--plot and --roofline-shapes go with --roofline"),
    (["--roofline", "--roofline-shapes", "all"], "invalid choice: 'all'"),
])
def test_roofline_options_that_do_not_fit_are_refused(capsys, argv, words):
    with pytest.raises(SystemExit) as info:
        bench_kernel.parse_args(argv)
    assert info.value.code == 2 and words in capsys.readouterr().err


@pytest.mark.skipif(HAS_CUDA, reason="checks the refusal without CUDA")
@pytest.mark.parametrize("extra", [[], ["--submission", "tests/fixtures/good_submission.py"]],
                         ids=["kit", "--submission"])
def test_roofline_without_cuda_says_so_in_one_line_and_exits_2(capsys, monkeypatch, tmp_path, extra):
    import submission as kit  # in sys.modules before --submission replaces it (conftest then restores it)
    monkeypatch.setattr(bench_kernel, "submission", kit)
    out = [str(tmp_path / n) for n in ("r.json", "r.md", "r.png")]
    argv = ["--roofline", "--json", out[0], "--md", out[1]] + extra
    try:
        import matplotlib  # noqa: F401
        argv += ["--plot", out[2]]
    except ImportError:
        pass
    assert bench_kernel.main([a if not a.startswith("tests/") else str(ROOT / a) for a in argv]) == 2
    err = capsys.readouterr()
    assert err.out == "" and err.err.count("\n") == 1 and err.err.startswith("bench_kernel.py needs a CUDA GPU")
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- the run, on a stand-in GPU

def test_measure_records_times_wrong_results_and_auto_on_a_stand_in_gpu(monkeypatch, tmp_path, capsys):
    """bench_kernel.measure_roofline's plumbing on the CPU: a stand-in submission (cuda right, triton wrong by one
    row, custom_kernel right) and stand-in timers (each call run once, then fixed times); the
    record has the limits from the stand-in floor and bandwidth, mean and median, WRONG where
    wrong, auto's backend; the JSON, markdown and plot are written; the exit status is 1."""
    import types

    import torch

    import quant

    def exact(d):
        return reference.ref_kernel(d[:6] + (d[6].clone(),))

    def wrong(d):
        out = exact(d)
        out[0] += 1
        return out

    runs = {"cuda": exact, "triton": wrong}
    fake = types.SimpleNamespace(
        BACKENDS={n: types.SimpleNamespace(races=True, config=object) for n in runs},
        backend_support=lambda dev: {n: (True, "") for n in runs},
        config_for=lambda name, data, m, k, l: (8, 2),
        run_backend=lambda name, data, cfg=None: runs[name](data),
        custom_kernel=exact, select_backend=lambda dev: "cuda")
    monkeypatch.setattr(bench_kernel, "submission", fake)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)  # check() waits for the GPU
    monkeypatch.setattr(bench_kernel, "env_info", lambda: {"device": "stand-in", "capability": [9, 0], "sms": 1})
    monkeypatch.setattr(bench_kernel, "check_cases", lambda m, k, l, seed: [
        (dist, data, exact(data)) for dist in ("official", "full-range")
        for data in [quant.fill(reference.generate_input(m, k, l, seed, device="cpu"), dist)]])
    monkeypatch.setattr(timing, "bare_launch_floor", lambda: [3.0, 2.0, 4.0])
    monkeypatch.setattr(timing, "read_ceiling", lambda nbytes, n_sets, reps: {"us": nbytes / 2.5e6,
                                                                              "shape": (1024, 4, 4)})
    calls = []

    def harness(fn, data, reps):
        fn(data)
        calls.append(reps)
        return [4.0, 5.0, 9.0]  # mean 6, median 5

    monkeypatch.setattr(timing, "harness_times", harness)
    monkeypatch.setattr(roofline, "GRID", ((128, 256, 1), (256, 512, 2)))
    paths = {n: tmp_path / f"r.{n}" for n in ("json", "md", "png")}
    argv = ["--roofline", "--roofline-shapes", "grid", "--reps", "3", "--json", str(paths["json"]),
            "--md", str(paths["md"])]
    try:
        import matplotlib  # noqa: F401
        argv += ["--plot", str(paths["png"])]
    except ImportError:
        del paths["png"]
    args = bench_kernel.parse_args(argv)
    assert bench_kernel.measure_roofline(args, argv) == 1
    record = json.loads(paths["json"].read_text())
    assert record["floor_us"] == 3.0 and record["read"]["bytes_per_us"] == 2.5e6
    assert record["backends"] == ["cuda", "triton"]
    assert calls == [3, 3, 3, 3]  # cuda and auto per shape; triton was wrong, so not timed
    for row, (m, k, l) in zip(record["rows"], roofline.GRID, strict=True):
        lim = 3.0 + timing.gemv_bytes(m, k, l) / 2.5e6
        assert row["shape"] == f"{m}x{k}x{l}" and row["limit_us"] == lim
        assert row["backends"]["cuda"] == {"config": [8, 2], "mean_us": 6.0, "median_us": 5.0, "ratio": 6.0 / lim,
                                           "median_ratio": 5.0 / lim, "n": 3}
        assert row["backends"]["triton"]["config"] == [8, 2] and "mean_us" not in row["backends"]["triton"]
        assert all(w.startswith(("official: ", "full-range: ")) for w in row["backends"]["triton"]["wrong"])
        assert row["auto"]["backend"] == "cuda" and row["auto"]["mean_us"] == 6.0
    assert record["summary"]["triton"]["wrong"] == 2
    assert "| 128x256x1 | grid, test |" not in paths["md"].read_text()  # grid only: no official tag
    assert "| 128x256x1 | grid | 0.0188 |" in paths["md"].read_text()
    if "png" in paths:
        assert paths["png"].read_bytes()[:8] == PNG_MAGIC
    assert "| 256x512x2 | grid |" in capsys.readouterr().out
