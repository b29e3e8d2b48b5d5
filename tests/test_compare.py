"""benchmarks/compare.py: the strategy registry, the correctness gate, derived ratios and
geomeans, the CSV / markdown / PNG writers (CPU, synthetic timings), and on a GPU a short
end-to-end run of ``python -m benchmarks.compare`` that writes the three files."""

import csv
import io
import subprocess
import sys
import time

import pytest
import torch
from conftest import HAS_CUDA, ROOT, make_input, requires_cuda

import reference
import submission
from benchmarks import compare

ALL_KEYS = ["ceiling", "cuda", "triton", "scaled_mm", "official", "dequant_mm", "fp16_gemv", "graph"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------- registry

def test_registry_lists_every_strategy_in_order():
    entries = compare.registry(capability=(10, 0), has_triton=True)
    assert [e["key"] for e in entries] == ALL_KEYS == compare.KEYS
    assert all(e["available"] and e["reason"] == "" for e in entries)
    assert all(e["label"] and e["what"] for e in entries)
    assert len({e["label"] for e in entries}) == len(entries)


def test_registry_on_sm90_marks_fp4_scaled_mm_strategies():
    entries = {e["key"]: e for e in compare.registry(capability=(9, 0), has_triton=True)}
    for key in ("scaled_mm", "official"):
        assert not entries[key]["available"]
        assert entries[key]["reason"].startswith("n/a on sm_90")
    assert all(entries[k]["available"] for k in ALL_KEYS if k not in ("scaled_mm", "official"))


def test_registry_names_the_actual_capability():
    entries = {e["key"]: e for e in compare.registry(capability=(12, 0), has_triton=True)}
    assert entries["official"]["reason"].startswith("n/a on sm_120")
    old = {e["key"]: e for e in compare.registry(capability=(7, 5), has_triton=True)}
    assert [k for k in ALL_KEYS if old[k]["available"]] == ["dequant_mm", "fp16_gemv"]
    assert "n/a on sm_75" in old["triton"]["reason"] and "n/a on sm_75" in old["cuda"]["reason"]
    ampere = {e["key"]: e for e in compare.registry(capability=(8, 0), has_triton=True)}
    assert not ampere["cuda"]["available"] and "8.9" in ampere["cuda"]["reason"]


def test_registry_without_triton_or_cuda():
    no_triton = {e["key"]: e for e in compare.registry(capability=(9, 0), has_triton=False)}
    for key in ("ceiling", "triton", "graph"):
        assert not no_triton[key]["available"] and "triton" in no_triton[key]["reason"]
    no_cuda = compare.registry(capability=None)
    assert [e["key"] for e in no_cuda] == ALL_KEYS
    assert all(not e["available"] and "CUDA" in e["reason"] for e in no_cuda)


def test_registry_on_this_machine():
    entries = {e["key"]: e for e in compare.registry()}
    assert list(entries) == ALL_KEYS
    if not HAS_CUDA:
        assert all(not e["available"] and e["reason"] for e in entries.values())
        return
    major, minor = torch.cuda.get_device_capability()
    for key in ("scaled_mm", "official"):
        assert entries[key]["available"] == (major == 10)
        if major != 10:
            assert entries[key]["reason"].startswith(f"n/a on sm_{major}{minor}")


# --------------------------------------------------------------------------- correctness gate

def _fake(key, call, **kw):
    return compare.Strategy(key, f"fake {key}", "a test strategy", call=call, **kw)


def _torch_backend(data):
    return submission._torch_run(data, *submission.check_inputs(data))


@pytest.fixture
def small():
    data = reference.generate_input(128, 256, 2, 5, device="cpu")
    return data, compare.expected_output(data)


def test_gate_accepts_a_correct_strategy(small):
    data, expected = small
    assert compare.gate(_fake("good", _torch_backend), data, expected) == (True, "")


def test_gate_rejects_wrong_output(small):
    data, expected = small

    def off_by_a_lot(d):
        return _torch_backend(d).add_(1.0)

    ok, why = compare.gate(_fake("wrong", off_by_a_lot), data, expected)
    assert not ok and why.startswith("wrong output") and "mismatched" in why


def test_gate_rejects_an_unwritten_output(small):
    data, expected = small
    ok, why = compare.gate(_fake("lazy", lambda d: d[6]), data, expected)  # c poisoned, never written
    assert not ok and "nan" in why.lower()


def test_gate_rejects_wrong_dtype_and_exceptions(small):
    data, expected = small
    ok, why = compare.gate(_fake("fp32", lambda d: _torch_backend(d).float()), data, expected)
    assert not ok and "DTYPE" in why

    def boom(d):
        raise RuntimeError("kernel exploded\nsecond line")

    ok, why = compare.gate(_fake("boom", boom), data, expected)
    assert not ok and why == "RuntimeError: kernel exploded | second line"


def test_gate_sets_the_backend_env_only_inside(small, monkeypatch):
    data, expected = small
    monkeypatch.delenv(compare.ENV_BACKEND, raising=False)
    seen = []

    def spy(d):
        seen.append(compare.os.environ.get(compare.ENV_BACKEND))
        return _torch_backend(d)

    assert compare.gate(_fake("spy", spy, backend="torch"), data, expected)[0]
    assert seen == ["torch"] and compare.ENV_BACKEND not in compare.os.environ


@pytest.mark.parametrize("dist", ("official", "full-range", "gaussian"))
def test_dequantising_strategies_pass_the_gate_on_cpu(dist):
    data = make_input(256, 512, 2, 9, "cpu", dist)
    expected = compare.expected_output(data)
    byk = {s.key: s for s in compare.STRATEGIES}
    for key in ("dequant_mm", "fp16_gemv"):
        s = byk[key]
        state = s.prepare([data])[0]
        assert compare.gate(s, state, expected) == (True, ""), key


def test_dequant_fp16_is_exact():
    data = make_input(128, 128, 2, 3, "cpu", "full-range")
    a16, b16 = compare.dequant_operands(data)
    assert a16.shape == (2, 128, 128) and b16.shape == (2, 128, 1) and a16.dtype == torch.float16
    a, b, sfa, sfb = data[:4]
    for li in range(2):
        want_a = reference._scaled_rows(a[:, :, li], sfa[:, :, li])
        want_b = reference._scaled_rows(b[0:1, :, li], sfb[0:1, :, li])[0]
        assert torch.equal(a16[li].double(), want_a)
        assert torch.equal(b16[li, :, 0].double(), want_b)


# --------------------------------------------------------------------------- orchestration

class FakeTimer:
    """Host-clock stand-in for CudaTimer: records what it timed."""

    def __init__(self):
        self.timed = []

    def measure(self, fn, states):
        self.timed.append(fn)
        t0 = time.perf_counter()
        fn(states[0])
        us = (time.perf_counter() - t0) * 1e6
        return {"device_us": us, "harness_us": 2 * us, "device_runs": 1, "harness_runs": 1, "note": ""}

    def ceiling(self, nbytes, n_sets):
        return {"device_us": 1.0, "harness_us": 2.0, "device_runs": 1, "harness_runs": 1, "note": ""}


def test_measure_shape_checks_before_timing_and_goes_on_after_failures():
    shape = {"m": 128, "k": 256, "l": 1, "seed": 3}
    sets = [reference.generate_input(128, 256, 1, 3 + i, device="cpu") for i in range(2)]
    entries = [e for e in compare.registry(capability=(9, 0), has_triton=True)
               if e["key"] in ("ceiling", "scaled_mm", "dequant_mm")]

    def wrong(d):
        return torch.zeros_like(d[6])

    def boom(d):
        raise ValueError("no")

    fakes = [_fake("triton", _torch_backend), _fake("bad", wrong), _fake("raises", boom)]
    entries += [{"key": f.key, "label": f.label, "what": f.what, "strategy": f, "available": True, "reason": ""}
                for f in fakes]
    timer = FakeTimer()
    rows = {r.strategy: r for r in compare.measure_shape(shape, entries, timer, sets, 2)}
    assert rows["bad"].status == "failed" and rows["bad"].device_us is None
    assert rows["raises"].status == "failed" and "ValueError: no" in rows["raises"].reason
    assert wrong not in timer.timed and boom not in timer.timed
    assert rows["scaled_mm"].status == "n/a" and "n/a on sm_90" in rows["scaled_mm"].reason
    for key in ("ceiling", "dequant_mm", "triton"):
        assert rows[key].status == "ok" and rows[key].device_us > 0, key
    assert rows["ceiling"].ceiling_over_device == 1.0
    assert rows["dequant_mm"].ceiling_over_device == pytest.approx(1.0 / rows["dequant_mm"].device_us)
    assert rows["triton"].triton_over_device == 1.0
    assert all(r.bytes == compare.gemv_bytes(128, 256, 1) and r.sets == 2 for r in rows.values())


def _host_bound_error(reps):
    return compare.timing.HostBound(f"host queued {reps} calls in 9.0 ms, longer than the 5.0 ms hold: "
                        "device times would include host time")


def test_cuda_timer_retries_a_blocked_queue_then_reports_host_bound(monkeypatch):
    calls = []

    def device_times(fn, sets, reps, warmup):
        calls.append(reps)
        if reps > 20:
            raise _host_bound_error(reps)
        return [float(i) for i in range(reps)]

    monkeypatch.setattr(compare.timing, "device_times", device_times)
    monkeypatch.setattr(compare.timing, "harness_times", lambda fn, d, reps, warmup: [5.0] * reps)
    timer = compare.CudaTimer(reps=40, harness_reps=20)
    res = timer.measure(lambda s: None, [0, 1])
    assert calls == [40, 20] and res["device_runs"] == 20 and res["device_us"] == 9.5 and res["note"] == ""
    assert res["harness_us"] == 5.0 and res["harness_runs"] == 20

    def always_blocked(fn, sets, reps, warmup):
        raise _host_bound_error(reps)

    monkeypatch.setattr(compare.timing, "device_times", always_blocked)
    res = timer.measure(lambda s: None, [0])
    assert res["device_us"] is None and res["device_runs"] == 0 and "blocks the host" in res["note"]
    assert res["harness_us"] == 5.0

    def other_error(fn, sets, reps, warmup):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(compare.timing, "device_times", other_error)
    with pytest.raises(RuntimeError, match="illegal memory access"):
        timer.measure(lambda s: None, [0])


def test_cuda_timer_ceiling_takes_each_times_own_fastest_shape_and_policy(monkeypatch):
    """Device time: timing.read_ceiling's best (shape x policy); harness time:
    timing.read_ceiling_server's best on the first buffer, not the device winner re-timed."""
    calls = []
    monkeypatch.setattr(compare.timing, "make_read_buffers", lambda nbytes, n: [f"buf{i}" for i in range(n)])
    monkeypatch.setattr(compare.timing, "read_ceiling",
                        lambda nbytes, n, reps, bufs: calls.append(("clean", reps, bufs)) or
                        {"us": 12.5, "shape": (2048, 2, 8), "policy": "plain", "by_policy": {}})
    monkeypatch.setattr(compare.timing, "read_ceiling_server",
                        lambda nbytes, reps, buf: calls.append(("server", reps, buf)) or
                        {"us": 20.0, "shape": (1024, 1, 4), "policy": "cs", "by_policy": {}})
    res = compare.CudaTimer(reps=40, harness_reps=20).ceiling(1000, 3)
    assert calls == [("clean", 40, ["buf0", "buf1", "buf2"]), ("server", 20, "buf0")]
    assert res["device_us"] == 12.5 and res["harness_us"] == 20.0
    assert res["device_runs"] == 40 and res["harness_runs"] == 20
    assert res["detail"] == "device: launch (2048, 2, 8), plain; harness: launch (1024, 1, 4), cs"


def test_the_report_names_each_shapes_ceiling_policy():
    rows = [compare.Row(shape="256x512x1", m=256, k=512, l=1, strategy="ceiling", status="ok", device_us=10.0,
                        harness_us=12.0, detail="device: launch (1024, 1, 4), plain; harness: launch (1024, 1, 4), cs")]
    text = compare.format_report({}, compare.derive(rows), compare.geomeans(rows))
    assert ("- read ceiling on 256x512x1: device: launch (1024, 1, 4), plain; harness: launch (1024, 1, 4), cs"
            in text.splitlines())


# --------------------------------------------------------------------------- ratios, geomeans

def synthetic_rows():
    """Two shapes; ceiling 10/20 µs device, triton twice that; dequant slower by 8x; graph
    failed on one shape; scaled_mm n/a."""
    rows = []
    for shape, (m, k, l), base in (("256x512x1", (256, 512, 1), 10.0), ("128x1024x2", (128, 1024, 2), 20.0)):
        nbytes = compare.gemv_bytes(m, k, l)

        def row(key, status, dev=None, har=None, reason="", note="", shape=shape, m=m, k=k, l=l, nbytes=nbytes):
            return compare.Row(shape, m, k, l, key, status, reason, nbytes, 8, dev, har,
                               40 if dev else 0, 20 if har else 0, note=note)

        rows += [row("ceiling", "ok", base, 2 * base),
                 row("cuda", "ok", 1.5 * base, 2.5 * base),
                 row("triton", "ok", 2 * base, 3 * base),
                 row("scaled_mm", "n/a", reason="n/a on sm_90: FP4 torch._scaled_mm needs compute capability 10.x"),
                 row("official", "ok", None, 100 * base, note="no device time: it syncs"),
                 row("dequant_mm", "ok", 16 * base, 24 * base),
                 row("fp16_gemv", "ok", 4 * base, 6 * base),
                 (row("graph", "ok", 2 * base, 2 * base) if base == 10.0
                  else row("graph", "failed", reason="wrong output: Number of mismatched elements: 3"))]
    return compare.derive(rows)


def test_ratios_and_geomeans():
    rows = synthetic_rows()
    cell = {(r.shape, r.strategy): r for r in rows}
    tri = cell[("256x512x1", "triton")]
    assert tri.ceiling_over_device == pytest.approx(0.5) and tri.ceiling_over_harness == pytest.approx(2 / 3)
    deq = cell[("128x1024x2", "dequant_mm")]
    assert deq.triton_over_device == pytest.approx(2 / 16) and deq.ceiling_over_device == pytest.approx(1 / 16)
    assert cell[("256x512x1", "scaled_mm")].ceiling_over_device is None
    geo = compare.geomeans(rows)
    assert list(geo) == ALL_KEYS
    assert geo["triton"]["device_us"] == pytest.approx((20.0 * 40.0) ** 0.5)
    assert geo["triton"]["ceiling_over_device"] == pytest.approx(0.5)
    assert geo["dequant_mm"]["triton_over_harness"] == pytest.approx(3 / 24)
    assert geo["fp16_gemv"]["ceiling_over_harness"] == pytest.approx(2 / 6)
    assert geo["ceiling"]["device_us"] == pytest.approx((10.0 * 20.0) ** 0.5)
    # a shape without a timing leaves no geomean (eval.geomean's rule)
    assert all(v is None for v in geo["scaled_mm"].values())
    assert geo["graph"]["device_us"] is None
    assert geo["official"]["device_us"] is None and geo["official"]["harness_us"] == pytest.approx(1000 * 2 ** 0.5)


META = {"device": "Fake GPU 9000", "capability": [9, 0], "sms": 132, "l2_mb": 50.0, "date": "2026-01-01 00:00 UTC",
        "torch": "2.13.0", "triton": "3.9.0", "python": "3.11", "command": "python -m benchmarks.compare --reps 3",
        "distribution": "official", "reps": 40, "harness_reps": 20, "notes": ["a note"]}


def _read_csv(path):
    text = path.read_text()
    header = [ln for ln in text.splitlines() if ln.startswith("# ")]
    body = "\n".join(ln for ln in text.splitlines() if not ln.startswith("#"))
    return header, list(csv.DictReader(io.StringIO(body)))


def test_csv_writer(tmp_path):
    rows = synthetic_rows()
    path = compare.write_csv(tmp_path / "x.csv", META, rows, compare.geomeans(rows))
    header, recs = _read_csv(path)
    assert any("Fake GPU 9000" in h for h in header) and any("--reps 3" in h for h in header)
    assert any("torch 2.13.0, triton 3.9.0" in h for h in header) and any("2026-01-01" in h for h in header)
    assert len(recs) == 2 * 8 + 8
    assert tuple(recs[0]) == compare.CSV_FIELDS
    tri = next(r for r in recs if r["shape"] == "128x1024x2" and r["strategy"] == "triton")
    assert float(tri["device_us"]) == 40.0 and float(tri["ceiling_over_device"]) == pytest.approx(0.5)
    assert float(tri["device_gbps"]) == pytest.approx(compare.gemv_bytes(128, 1024, 2) / 40.0 / 1e3, rel=1e-5)
    na = next(r for r in recs if r["strategy"] == "scaled_mm")
    assert na["status"] == "n/a" and na["device_us"] == "" and "n/a on sm_90" in na["reason"]
    geo = {r["strategy"]: r for r in recs if r["shape"] == "geomean"}
    assert list(geo) == ALL_KEYS
    assert float(geo["triton"]["device_us"]) == pytest.approx(800 ** 0.5, rel=1e-5)
    assert geo["graph"]["device_us"] == ""


def test_markdown_table(tmp_path):
    rows = synthetic_rows()
    text = compare.write_markdown(tmp_path / "x.md", META, rows, compare.geomeans(rows), "x.png").read_text()
    for needle in ("Fake GPU 9000", "compute capability 9.0", "2026-01-01", "torch 2.13.0", "triton 3.9.0",
                   "python -m benchmarks.compare --reps 3", "![bar chart](x.png)", "a note"):
        assert needle in text, needle
    lines = text.splitlines()
    tables = [i for i, ln in enumerate(lines) if ln.startswith("| strategy |")]
    assert len(tables) == 2  # device, then harness
    dev = lines[tables[0]:tables[0] + 10]
    assert "256x512x1 µs (ceiling/time)" in dev[0] and "geomean triton/time" in dev[0]
    assert dev[2].startswith("| 1. ceiling: streaming read | 10.00 (1.00) | 20.00 (1.00) | 14.14 | 1.000 |")
    assert dev[3].startswith("| 2. cuda backend | 15.00 (0.67) | 30.00 (0.67) | 21.21 | 0.667 | 1.333 |")
    assert dev[4].startswith("| 3. triton backend | 20.00 (0.50) | 40.00 (0.50) | 28.28 | 0.500 | 1.000 |")
    assert "| n/a | n/a | - | - | - |" in dev[5]
    assert "host-blocking" in dev[6]
    assert dev[9].startswith("| 8. CUDA graph replay (triton) | 20.00 (0.50) | FAILED | - |")
    assert "n/a on sm_90" in text and "wrong output: Number of mismatched elements: 3" in text
    assert "no device time: it syncs" in text
    assert compare.format_report(META, rows, compare.geomeans(rows), "x.png") == text


def test_plot_writer(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (it is in the dev extra)")
    rows = synthetic_rows()
    path = compare.write_plot(tmp_path / "x.png", META, rows)
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 20_000


def test_plot_writer_with_nothing_timed(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (it is in the dev extra)")
    rows = [r for r in synthetic_rows() if r.status != "ok"]
    assert compare.write_plot(tmp_path / "y.png", META, rows).read_bytes()[:8] == PNG_MAGIC


def test_write_results_names_and_missing_matplotlib(tmp_path, monkeypatch):
    rows = synthetic_rows()
    stem = "compare-" + compare.device_slug(META["device"])
    assert stem == "compare-fake-gpu-9000"
    paths = compare.write_results(tmp_path / "a", stem, META, rows)
    assert set(paths) == ({"csv", "md", "png"} if _has_matplotlib() else {"csv", "md"})
    assert all(p.name.startswith(stem) and p.exists() for p in paths.values())
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails: the tables are still written
    paths = compare.write_results(tmp_path / "b", stem, META, rows)
    assert set(paths) == {"csv", "md"} and "![bar chart]" not in paths["md"].read_text()


def _has_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


# --------------------------------------------------------------------------- small helpers, CLI

def test_helpers():
    assert compare.gemv_bytes(128, 256, 1) == 128 * 128 + 128 * 16 + 128 + 16 + 256
    assert compare.parse_shape("512x4096x2") == {"m": 512, "k": 4096, "l": 2, "seed": 1111}
    with pytest.raises(Exception, match="M % 128"):
        compare.parse_shape("100x4096x2")
    bench = compare.pick_shapes("benchmarks")
    assert [(s["m"], s["k"], s["l"]) for s in bench] == [(7168, 16384, 1), (4096, 7168, 8), (7168, 2048, 4)]
    assert len(compare.pick_shapes("all")) == len(bench) + len(compare.pick_shapes("tests")) == 3 + 9
    assert compare.n_sets_for(66_000_000, 50_000_000) == 8
    assert compare.n_sets_for(2_000_000, 50_000_000) == 64
    assert compare.n_sets_for(12_000_000, 50_000_000) == 13
    assert compare.n_sets_for(1000, 0) == 8
    assert compare.device_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"


def test_cli_rejects_unknown_strategies():
    with pytest.raises(SystemExit):
        compare.parse_args(["--strategies", "triton,warp_drive"])


@pytest.mark.skipif(HAS_CUDA, reason="the CPU answer of main(); the GPU runs it for real below")
def test_main_without_cuda_explains_and_writes_nothing(tmp_path, capsys):
    assert compare.main(["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "needs a CUDA GPU" in err and all(k in err for k in ALL_KEYS)
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- GPU, end to end

@requires_cuda
def test_compare_end_to_end_on_one_small_shape(tmp_path):
    cmd = [sys.executable, "-m", "benchmarks.compare", "--shape", "256x1024x2", "--reps", "5",
           "--harness-reps", "3", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    files = sorted(p.name for p in tmp_path.iterdir())
    stem = "compare-" + compare.device_slug(torch.cuda.get_device_name()) + "-custom"
    assert files == [f"{stem}.csv", f"{stem}.md", f"{stem}.png"]
    _, recs = _read_csv(tmp_path / f"{stem}.csv")
    status = {r["strategy"]: r["status"] for r in recs if r["shape"] == "256x1024x2"}
    assert list(status) == ALL_KEYS
    fp4 = torch.cuda.get_device_capability()[0] == 10
    for key in ALL_KEYS:
        assert status[key] == ("ok" if fp4 or key not in ("scaled_mm", "official") else "n/a"), key
    assert "| strategy |" in proc.stdout and "[compare]" in proc.stderr
    assert (tmp_path / f"{stem}.png").read_bytes()[:8] == PNG_MAGIC


def test_help_lists_every_strategy_from_the_registry(capsys):
    """The strategies are listed where they are defined (--help, generated from STRATEGIES), not
    in a hand-written list that can drift (the docstring's once lacked the cuda backend)."""
    import re
    with pytest.raises(SystemExit):
        compare.parse_args(["--help"])
    text = capsys.readouterr().out
    for s in compare.STRATEGIES:
        assert f"  {s.key:<11} {s.what}" in text, s.key
    assert not re.search(r"^\s*\d+\. ``", compare.__doc__, re.M), "a numbered strategy list in the docstring"
