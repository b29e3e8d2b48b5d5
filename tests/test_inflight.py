"""benchmarks/inflight.py: which SASS loads are a's, how many are in flight before first use,
the occupancy rules, the read line, the rows' arithmetic (stand-in counts), a latency record
replacing a GPU's numbers, and the counts of a few compiled configs (NVRTC, no GPU)."""

import json

import pytest
from conftest import ROOT

import submission
from benchmarks import inflight, sass_count, timing


@pytest.mark.parametrize("text, nbytes", [
    ("LDG.E.EF.128 R12, desc[UR10][R48.64]", 16),          # a, L1 evict-first
    ("LDG.E.NA.128.CONSTANT R8, desc[UR4][R2.64]", 16),    # a, nc_no_allocate
    ("LDG.E.NA.EFL2.256 R8, R4, desc[UR14][R24.64]", 32),  # a, the 32-byte load
    ("LDG.E.128 R8, desc[UR4][R2.64+0x80]", 16),           # a, plain
    ("LDG.E.128.CONSTANT R56, desc[UR10][R16.64]", 0),     # b (ld.global.nc.v4)
    ("LDG.E.EL.128.CONSTANT R56, desc[UR10][R16.64]", 0),  # b with bload
    ("LDG.E.EF.U16 R74, desc[UR10][R38.64]", 0),           # a scale pair
    ("LDG.E.EF R70, desc[UR10][R38.64]", 0),               # two scale pairs
    ("F2FP.F16.E2M1.UNPACK_B R84, R12", 0),
])
def test_a_load_is_a_16_or_32_byte_ldg_that_is_not_bs(text, nbytes):
    assert inflight.a_load_bytes(text) == nbytes


def test_a_32_byte_load_writes_both_halves_it_names():
    assert inflight._dest("LDG.E.NA.EFL2.256 R8, R4, desc[UR14][R24.64]", 32) == set(range(4, 12))
    assert inflight._dest("LDG.E.EF.128 R12, desc[UR10][R48.64]", 16) == {12, 13, 14, 15}


def test_loads_in_flight_are_those_before_the_first_instruction_reading_one():
    body = [
        "LDG.E.128.CONSTANT R56, desc[UR10][R16.64]",   # b: not counted
        "LDG.E.EF.128 R12, desc[UR10][R48.64]",
        "IADD3 R38, P0, PT, R11, R80, RZ",              # reads no loaded register
        "LDG.E.EF.128 R40, desc[UR10][R36.64]",
        "F2FP.F16.E2M1.UNPACK_B R84, R56",               # reads b's register only
        "F2FP.F16.E2M1.UNPACK_B R86, R13.B1",            # the first use of a
        "LDG.E.EF.128 R20, desc[UR10][R48.64+0x80]",     # after it, read below: not in flight then
        "HFMA2 R84, R20, R57, R84",
        "LDG.E.EF.128 R24, desc[UR10][R48.64+0x100]",    # read only in the next iteration: in flight
        "HFMA2 R84, R40, R58, R84",
    ]
    got = inflight.k_loop_loads(body)
    assert got == {"loads": 4, "bytes": 16, "burst": 3, "first_use": "F2FP"}


def test_a_store_reads_all_its_operands():
    assert inflight._sources("STS.128 [R2], R44") == {2, 44}
    assert inflight._sources("HFMA2 R84, R84, R56, -RZ") == {84, 56}
    assert inflight._sources("IMAD.WIDE R18, R23, 0x2, R12") == {23, 12}


@pytest.mark.parametrize("regs, threads, shared, blocks, warps, limit", [
    (91, 32, 3200, 20, 20, "registers"),    # 2912 -> 3072 per warp: 5 per sub-partition
    (62, 32, 3200, 32, 32, "registers"),    # 2048 per warp: 8 per sub-partition, 32 warps (and 32 blocks)
    (24, 32, 0, 32, 32, "blocks"),          # 1024 per warp: 64 warps of registers, but 32 blocks
    (31, 256, 1056, 8, 64, "registers"),    # 1024 per warp: 16 per sub-partition, 64 warps
    (32, 1024, 0, 2, 64, "registers"),      # 64 warps of registers; 2048 threads gives the same
    (255, 32, 0, 8, 8, "registers"),        # 8192 per warp: 2 per sub-partition
    (16, 64, 100 * 1024, 2, 4, "shared"),   # 101 KB per block with the driver's 1 KB
])
def test_occupancy_follows_the_cuda_rules(regs, threads, shared, blocks, warps, limit):
    assert inflight.occupancy(regs, threads, shared) == {"blocks": blocks, "warps": warps, "limit": limit}


def test_read_fit_recovers_a_line_and_refuses_a_short_or_flat_record():
    shapes = submission.TUNED_SHAPES
    t0, bps = 4.5, 5.0e12
    ceilings = [t0 + timing.gemv_bytes(*s) / bps * 1e6 for s in shapes]
    fit = inflight.read_fit(ceilings, shapes)
    assert fit[0] == pytest.approx(t0) and fit[1] == pytest.approx(bps)
    with pytest.raises(ValueError, match="one ceiling per shape"):
        inflight.read_fit(ceilings[:2], shapes)
    with pytest.raises(ValueError, match="do not grow"):
        inflight.read_fit([10.0, 10.0, 10.0], shapes)


COUNTS = {"registers": 91, "shared": 3200, "loop": 406, "per_chunk": 50.75, "loads": 8, "bytes": 16, "burst": 8,
          "first_use": "F2FP", "ring_bytes": 0}


def test_a_row_is_loads_in_flight_times_lanes_resident_over_the_need():
    gpu = inflight.Gpu("B200", 148, 6.0e12, 500.0, "stand-in")
    assert gpu.need_per_sm == pytest.approx(6.0e12 * 500e-9 / 148)
    cfg = submission.CudaConfig(lpr=8, rpt=2, u=4, warps=1, decode="f16x2", v=1, pipe="ptxas", minb=20, bsh=True)
    big = inflight.row((4096, 7168, 8), cfg, gpu, COUNTS)  # 4096 rows / 8 x 8 batches = 4096 blocks: 27.7 per SM
    assert big["occupancy"]["blocks"] == 20 and big["resident_warps"] == 20
    assert big["in_flight_per_sm"] == 8 * 16 * 32 * 20 and big["ratio"] == pytest.approx(81920 / gpu.need_per_sm)
    small = inflight.row((7168, 16384, 1), cfg, gpu, COUNTS)  # 896 blocks: 6.05 per SM, fewer than 20 fit
    assert small["grid_per_sm"] == pytest.approx(896 / 148) and small["resident_warps"] == pytest.approx(896 / 148)
    assert small["in_flight_per_sm"] == pytest.approx(8 * 16 * 32 * 896 / 148)
    assert small["waves"] == pytest.approx(896 / (20 * 148)) and small["last_wave"] == pytest.approx(896 / 2960)
    assert big["waves"] == pytest.approx(4096 / 2960) and big["last_wave"] == pytest.approx((4096 - 2960) / 2960)


@pytest.mark.parametrize("grid, slots, fill", [(896, 480, 416 / 480), (960, 480, 1.0), (480, 480, 1.0),
                                               (100, 480, 100 / 480), (896, 0, 0.0)],
                         ids=["1.87-waves", "two-whole", "one-whole", "under-one", "no-slots"])
def test_the_last_wave_is_the_share_of_slots_the_grid_leaves_for_it(grid, slots, fill):
    assert inflight.last_wave(grid, slots) == pytest.approx(fill)


def test_the_defaults_cite_their_sources_and_a_latency_record_replaces_one():
    gpus = inflight.default_gpus()
    assert set(gpus) == {"B200", "H200", "H100"}
    assert gpus["B200"].latency_ns == pytest.approx(860 / inflight.CLOCK_HZ * 1e9)
    assert "markdewing/AI_kernels" in gpus["B200"].source and "unloaded" in gpus["B200"].source
    record = {"device": "NVIDIA H200", "sms": 132, "date": "2026-12-01",
              "summary": {"knee_latency_ns": 800.0, "best_read_bps": 4.5e12}}
    new = inflight.with_measured(gpus, record)
    assert new["H200"].latency_ns == 800.0 and new["H200"].read_bps == 4.5e12 and "measured" in new["H200"].source
    assert new["B200"] == gpus["B200"]
    with pytest.raises(ValueError, match="not a benchmarks/latency.py record"):
        inflight.with_measured(gpus, {"device": "NVIDIA A100", "summary": record["summary"]})


def test_a_bad_latency_file_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "lat.json"
    bad.write_text(json.dumps({"device": "NVIDIA H100 80GB HBM3"}))
    assert inflight.main(["--latency", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"inflight.py: {bad}: not a benchmarks/latency.py record")


def test_the_stored_record_is_read_back_for_this_kernel_revision_only(tmp_path, monkeypatch):
    cfg = submission.CudaConfig(lpr=8, rpt=2, u=4, warps=1, decode="f16x2", v=1, pipe="ptxas", minb=20, bsh=True)
    record = {"kernel_revision": "abc", "rows": [{"config": dict(cfg._asdict()), **COUNTS}],
              "calibration": [{"config": dict(cfg._asdict()), "arch": "sm_90a", **COUNTS}]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(record))
    monkeypatch.setattr(submission, "kernel_revision", lambda: "abc")
    assert inflight.stored(path) == {(cfg, "sm_100a"): COUNTS, (cfg, "sm_90a"): COUNTS}
    monkeypatch.setattr(submission, "kernel_revision", lambda: "other")
    assert inflight.stored(path) == {}
    assert inflight.stored(tmp_path / "missing.json") == {}


def _tools():
    missing = sass_count.missing_tools()
    if missing:
        pytest.skip(missing)


@pytest.mark.parametrize("cfg, arch", [
    (submission.CudaConfig(lpr=8, rpt=2, u=4, warps=1, decode="f16x2", v=1, pipe="ptxas", minb=20, bsh=True),
     "sm_100a"),
    (submission.CudaConfig(lpr=32, rpt=1, u=2, warps=1, decode="f16x2", load="no_allocate_l2_evict_first_256", ks=8),
     "sm_100a"),
    (submission.CudaConfig(lpr=32, rpt=1, u=7, warps=4, decode="f16x2", v=1, load="nc_no_allocate"), "sm_100a"),
    (submission.CudaConfig.of(inflight.H200_POINTS[0][1]), "sm_90a"),
], ids=["default", "32-byte loads", "a_first", "H200 entry"])
def test_compiled_loops_have_the_steps_loads_and_a_first_use(cfg, arch):
    """measure() refuses a loop whose loads of a are not the step's; here every one is found,
    some are in flight before the first use, and the registers are the compiler's."""
    _tools()
    got = inflight.measure(cfg, arch)
    assert got["loads"] == cfg.rpt * cfg.u // (2 if cfg.load == "no_allocate_l2_evict_first_256" else 1)
    assert 1 <= got["burst"] <= got["loads"] and got["first_use"] is not None
    assert 0 < got["registers"] <= 255 and got["per_chunk"] == got["loop"] / (cfg.rpt * cfg.u)


def test_the_committed_table_is_of_this_kernel_revision():
    """benchmarks/results/b200-inflight.json (which projection.py reads instead of compiling) was
    written for the kernel the kit ships: after a kernel change, rerun inflight.py."""
    record = json.loads((ROOT / "benchmarks" / "results" / "b200-inflight.json").read_text())
    assert record["kernel_revision"] == submission.kernel_revision()
    shapes = {r["shape"] for r in record["rows"]}
    assert shapes == {f"{m}x{k}x{l}" for m, k, l in submission.TUNED_SHAPES}


def test_a_ring_row_counts_its_slots_in_flight_and_its_launchs_shared_memory():
    """A bulk-copy ring's bytes in flight are its slots' (every consumer warp's but the one it
    reads), per resident block; its block holds its producer warps and the dynamic shared memory
    its launch asks, which bound it to one block per SM here."""
    cfg = submission.CudaConfig(lpr=32, rpt=1, u=16, warps=8, decode="f16x2", v=1, pipe="ptxas", minb=1, ring=2,
                                pw=2)
    counts = dict(COUNTS, registers=73, shared=0, loads=0, burst=0, bytes=8192, ring_bytes=8 * 8192)
    r = inflight.row((7168, 16384, 1), cfg, inflight.default_gpus()["B200"], counts)
    assert r["threads"] == 32 * 10
    assert r["occupancy"]["blocks"] == 1 and r["occupancy"]["limit"] == "shared"
    assert r["grid_blocks"] == 148 and r["in_flight_per_sm"] == 8 * 8192
