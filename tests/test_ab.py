"""``python3 eval.py ab``: the statistics on synthetic timings (fixed seeds), the round order, the
throttle rule, the verdict's words, argument errors, the CPU path (correctness, then one line and
exit 2), the whole timed path on the host clock with the GPU parts stood in, and on a GPU a real
short A/B of two copies of the good fixture."""

import json
import math
import random
import re
import shutil
import subprocess
import sys

import pytest
from conftest import HAS_CUDA, ROOT

import ab
import harness

FIXTURES = ROOT / "tests" / "fixtures"
GOOD = FIXTURES / "good_submission.py"
TINY = FIXTURES / "tiny.txt"
GPU = "NVIDIA Test GPU"


def run_ab(*args, timeout=600):
    return subprocess.run([sys.executable, "eval.py", "ab", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


# --------------------------------------------------------------------------- Student t

# Two-sided 95% critical values of Student's t (the 0.975 quantile), from the standard printed
# tables, three decimals.
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 9: 2.262, 19: 2.093, 29: 2.045, 120: 1.980}


@pytest.mark.parametrize("df, expected", sorted(T_975.items()))
def test_t_quantile_matches_the_printed_table(df, expected):
    assert round(ab.t_quantile(0.975, df), 3) == expected
    assert ab.t_quantile(0.025, df) == pytest.approx(-ab.t_quantile(0.975, df), abs=1e-9)


def test_t_quantile_and_cdf_against_scipy():
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 3, 7, 15, 40, 300):
        for p in (0.6, 0.9, 0.975, 0.995):
            assert ab.t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-8)
        for t in (-3.0, -0.5, 0.0, 1.0, 4.0):
            assert ab.t_cdf(t, df) == pytest.approx(stats.t.cdf(t, df), abs=1e-10)


def test_t_quantile_rejects_bad_arguments():
    with pytest.raises(ValueError, match="0 < p < 1"):
        ab.t_quantile(1.0, 5)
    with pytest.raises(ValueError, match="df >= 1"):
        ab.t_quantile(0.9, 0)


# --------------------------------------------------------------------------- paired ratio

def synthetic_rounds(rng, n, base_us, ratio, drift_sd, noise_sd):
    """Per-round means of BASE and NEW: a shared per-round drift (what pairing cancels) times a
    true ratio, each with its own multiplicative noise."""
    base, new = [], []
    for _ in range(n):
        drift = math.exp(rng.gauss(0, drift_sd))
        base.append(base_us * drift * math.exp(rng.gauss(0, noise_sd)))
        new.append(base_us * ratio * drift * math.exp(rng.gauss(0, noise_sd)))
    return base, new


def test_known_ratio_is_recovered_and_called_faster():
    rng = random.Random(1234)
    base, new = synthetic_rounds(rng, 20, 30.0, 0.97, drift_sd=0.03, noise_sd=0.003)
    iv = ab.paired_ratio(base, new)
    assert iv["n"] == 20 and iv["low"] < 0.97 < iv["high"]
    assert iv["ratio"] == pytest.approx(0.97, rel=0.003)
    kind, sentence = ab.verdict(iv, GPU)
    assert kind == "faster" and sentence.startswith("faster by ") and f"on this GPU ({GPU})" in sentence


def test_pairing_removes_the_shared_drift():
    """A 3% drift per round shared by both sides would swamp a 1% difference unpaired; paired,
    the interval is as narrow as the 0.3% per-side noise allows."""
    rng = random.Random(7)
    base, new = synthetic_rounds(rng, 20, 30.0, 1.01, drift_sd=0.03, noise_sd=0.003)
    iv = ab.paired_ratio(base, new)
    assert ab.verdict(iv, GPU)[0] == "slower"
    assert iv["half_width_pct"] < 0.5
    unpaired_sd = math.sqrt(ab.statistics.variance([math.log(x) for x in base]) +
                            ab.statistics.variance([math.log(x) for x in new]))
    assert unpaired_sd > 5 * iv["sd_log"]


def test_a_a_intervals_contain_one_about_95_percent_of_the_time():
    """2000 A/A experiments of 10 rounds (true ratio 1): the share of intervals holding 1 is
    within 1.5 points of 95% (the binomial standard error at 2000 trials is 0.49 points)."""
    rng = random.Random(2024)
    hits = 0
    trials = 2000
    for _ in range(trials):
        base, new = synthetic_rounds(rng, 10, 20.0, 1.0, drift_sd=0.02, noise_sd=0.005)
        iv = ab.paired_ratio(base, new)
        hits += iv["low"] <= 1.0 <= iv["high"]
    assert abs(hits / trials - 0.95) < 0.015


def test_worker_sets_carry_the_process_to_process_part():
    """A/A with a steady offset per process pair (sd 0.4%) under per-round noise (sd 0.4%), as an
    H100 showed: an interval over 5 worker sets of 4 rounds holds 1.0 about 95% of the time; one
    over the 20 rounds alone, which cannot see the offsets, far less often."""
    rng = random.Random(11)
    trials, grouped_hits, round_hits = 1000, 0, 0
    for _ in range(trials):
        logs, sets = [], []
        for w in range(5):
            offset = rng.gauss(0, 0.004)
            for _ in range(4):
                logs.append(offset + rng.gauss(0, 0.004))
                sets.append(w)
        grouped = ab.grouped_interval(logs, sets)
        per_round = ab.grouped_interval(logs, [0] * len(logs))
        assert grouped["unit"] == "worker set" and grouped["n"] == 5 and per_round["unit"] == "round"
        grouped_hits += grouped["low"] <= 1.0 <= grouped["high"]
        round_hits += per_round["low"] <= 1.0 <= per_round["high"]
    assert abs(grouped_hits / trials - 0.95) < 0.025  # binomial s.e. at 1000 trials: 0.7 points
    assert round_hits / trials < 0.8


def test_no_difference_verdict_names_the_smallest_detectable_difference():
    rng = random.Random(99)
    base, new = synthetic_rounds(rng, 8, 50.0, 1.0, drift_sd=0.01, noise_sd=0.01)
    iv = ab.paired_ratio(base, new)
    kind, sentence = ab.verdict(iv, GPU)
    assert kind == "same"
    assert sentence.startswith(f"no difference this run could detect on this GPU ({GPU}): 95% interval ")
    assert f"about {iv['half_width_pct']:.2f}% (the interval's half-width)" in sentence
    assert ab.short_verdict(iv) == f"no difference (±{iv['half_width_pct']:.2f}%)"
    # the half-width is t * sd / sqrt(n) on the log scale, in percent
    half = ab.t_quantile(0.975, 7) * iv["sd_log"] / math.sqrt(8)
    assert iv["half_width_pct"] == pytest.approx(100 * (math.exp(half) - 1))


def test_slower_verdict_and_too_few_rounds():
    iv = ab.log_interval([math.log(1.05), math.log(1.06), math.log(1.04)])
    kind, sentence = ab.verdict(iv, GPU)
    assert kind == "slower" and sentence.startswith("slower by 5.00% on this GPU")
    one = ab.paired_ratio([10.0], [11.0])
    assert one["low"] is None and one["ratio"] == pytest.approx(1.1)
    assert ab.verdict(one, GPU) == ("unknown", f"too few rounds (1) for an interval on this GPU ({GPU})")
    with pytest.raises(ValueError, match="one base and one new value per round"):
        ab.paired_ratio([1.0, 2.0], [1.0])


def test_round_order_alternates():
    assert [ab.round_order(2, r) for r in range(4)] == [[0, 1], [1, 0], [0, 1], [1, 0]]
    assert ab.round_order(3, 1) == [2, 1, 0]


def test_labels_and_pairs():
    assert ab.labels_for(2, False) == (["BASE", "NEW"], [["BASE", "NEW"]])
    assert ab.labels_for(3, False) == (["BASE", "NEW1", "NEW2"], [["BASE", "NEW1"], ["BASE", "NEW2"]])
    assert ab.labels_for(3, True) == (["NEW", "BASE1", "BASE2"], [["BASE1", "NEW"], ["BASE2", "NEW"]])


# --------------------------------------------------------------------------- throttling and analysis

def test_throttle_reasons_void_a_round_but_idle_and_app_clocks_do_not():
    calm = [{"sm_mhz": 1980, "mem_mhz": 2619, "power_w": 300.0, "temp_c": 50, "reasons": 0x1},
            {"sm_mhz": 1755, "mem_mhz": 2619, "power_w": 420.5, "temp_c": 53, "reasons": 0x2}]
    s = ab.summarize_samples(calm)
    assert s["throttled"] is False and s["reasons"] == ["GpuIdle", "ApplicationsClocksSetting"]
    assert s["sm_mhz"] == [1755, 1980] and s["power_w_max"] == 420.5 and s["temp_c_max"] == 53
    hot = calm + [{"sm_mhz": 1410, "mem_mhz": 2619, "power_w": 700.0, "temp_c": 88, "reasons": 0x4 | 0x20}]
    s = ab.summarize_samples(hot)
    assert s["throttled"] is True and s["reasons"] == ["GpuIdle", "ApplicationsClocksSetting", "SwPowerCap",
                                                       "SwThermalSlowdown"]
    assert ab.summarize_samples([]) == {"samples": 0, "throttled": False, "reasons": [], "reasons_mask": 0}


def synthetic_record(rng, rounds, ratios, throttled=(), rounds_per_set=None):
    """A run record as ab writes it: per round and shape, 20 durations (ns) per side; with
    ``rounds_per_set``, consecutive rounds share a worker set."""
    shapes = list(ratios)
    base_ns = {s: 20e3 + 10e3 * i for i, s in enumerate(shapes)}
    record = {"gpu": {"name": GPU, "capability": "9.0"}, "shapes": shapes, "pairs": [["BASE", "NEW"]],
              "settings": {"mode": "leaderboard", "repeats": 20}, "rounds": [],
              "files": [{"label": "BASE", "path": "a.py", "sha256": "0" * 64, "passed": True},
                        {"label": "NEW", "path": "b.py", "sha256": "1" * 64, "passed": True}]}
    for index in range(rounds):
        drift = math.exp(rng.gauss(0, 0.02))
        times = {"BASE": {}, "NEW": {}}
        for s in shapes:
            slow = 1.3 if index in throttled else 1.0
            times["BASE"][s] = [base_ns[s] * drift * rng.gauss(1, 0.01) for _ in range(20)]
            times["NEW"][s] = [base_ns[s] * ratios[s] * slow * drift * rng.gauss(1, 0.01) for _ in range(20)]
        entry = {"index": index, "order": ["BASE", "NEW"], "times": times}
        if rounds_per_set:
            entry["worker_set"] = index // rounds_per_set
        if index in throttled:
            entry["excluded"] = "throttled (SwThermalSlowdown)"
        record["rounds"].append(entry)
    return record


def test_analysis_recovers_per_shape_and_geomean_ratios():
    ratios = {"7168x16384x1": 0.95, "4096x7168x8": 1.0, "7168x2048x4": 1.04}
    record = synthetic_record(random.Random(5), 16, ratios)
    (cmp,) = ab.analyze(record)
    rows = {r["shape"]: r for r in cmp["shapes"]}
    for shape, ratio in ratios.items():
        assert rows[shape]["low"] <= ratio <= rows[shape]["high"], shape
        assert rows[shape]["base_calls"] == rows[shape]["new_calls"] == 16 * 20
    assert rows["7168x16384x1"]["verdict"] == "faster" and rows["7168x2048x4"]["verdict"] == "slower"
    expected = math.prod(ratios.values()) ** (1 / 3)
    geo = cmp["geomean"]
    assert geo["low"] <= expected <= geo["high"] and geo["n"] == 16
    assert geo["new_geomean_us"] / geo["base_geomean_us"] == pytest.approx(expected, rel=0.01)
    # each side's mean is the mean of all its calls (the server's statistic)
    calls = [d for r in record["rounds"] for d in r["times"]["BASE"]["7168x16384x1"]]
    assert rows["7168x16384x1"]["base_mean_us"] == pytest.approx(sum(calls) / len(calls) / 1e3)


def test_throttled_rounds_are_left_out():
    ratios = {"7168x2048x4": 1.0}
    record = synthetic_record(random.Random(11), 12, ratios, throttled={3, 8})
    (cmp,) = ab.analyze(record)
    row = cmp["shapes"][0]
    assert row["n"] == 10 and 3 not in row["rounds"] and 8 not in row["rounds"]
    assert row["low"] <= 1.0 <= row["high"]  # the 30% slower throttled rounds would move it far
    for r in record["rounds"]:
        r.pop("excluded", None)
    assert ab.analyze(record)[0]["shapes"][0]["ratio"] > 1.03
    text = ab.format_report(synthetic_record(random.Random(11), 12, ratios, throttled={3}))
    assert "round 4 left out: throttled (SwThermalSlowdown)" in text and "11 of 12 rounds kept" in text


def test_report_table_and_verdict_line():
    record = synthetic_record(random.Random(3), 10, {"7168x16384x1": 0.9, "7168x2048x4": 0.92})
    record["comparisons"] = ab.analyze(record)
    text = ab.format_report(record)
    assert text.startswith(f"ab on {GPU} (compute capability 9.0), leaderboard mode: 10 of 10 rounds kept")
    assert "NEW vs BASE (ratio NEW / BASE; 95% Student t-interval on the per-round log ratios):" in text
    assert "verdict: NEW is faster by " in text and f"on this GPU ({GPU})" in text
    assert sum(line.lstrip().startswith(("7168x16384x1", "7168x2048x4", "geomean")) for line in text.splitlines()) == 3


# --------------------------------------------------------------------------- the command

@pytest.mark.parametrize("args, message", [
    ([GOOD], "ab needs at least two files"),
    ([GOOD, "missing.py"], "submission file missing.py not found"),
    ([GOOD, TINY], "a submission is a Python file ending in .py"),
    ([GOOD, GOOD, "--rounds", "1"], "--rounds must be at least 2"),
    ([GOOD, GOOD, "--repeats", "2"], "--repeats must be at least 3"),
    ([GOOD, GOOD, "--time-budget", "0"], "--time-budget must be a positive number"),
    ([GOOD, GOOD, "--shapes", "nope"], "--shapes nope: neither a shape set"),
    ([GOOD, GOOD, "--json", str(FIXTURES)], "--json"),
])
def test_argument_errors_are_one_line_exit_2(args, message):
    proc = run_ab(*args, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and message in proc.stderr, proc.stderr
    assert proc.stdout == ""


@pytest.mark.skipif(HAS_CUDA, reason="checks the refusal to time without a CUDA GPU")
def test_without_a_gpu_the_checks_run_then_one_line_and_exit_2():
    proc = run_ab(GOOD, FIXTURES / "good_plain_scales.py", "--shapes", TINY, "--check-shapes", TINY)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout.splitlines() == [f"BASE {GOOD}: PASS", f"NEW {FIXTURES / 'good_plain_scales.py'}: PASS"]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: timing needs a CUDA GPU")


def test_a_file_failing_its_checks_is_one_line():
    wrong = FIXTURES / "wrong_untouched_c.py"
    proc = run_ab(GOOD, wrong, "--shapes", TINY, "--check-shapes", TINY)
    lines = proc.stdout.splitlines()
    assert lines[0] == f"BASE {GOOD}: PASS"
    (fail,) = [line for line in lines if line.startswith("NEW")]
    assert fail.startswith(f"NEW {wrong}: FAIL m: 128; k: 256; l: 1; seed: 1111: mismatch found")
    assert re.search(r"ERROR at \(0, 0, 0\): result \S+, expected \S+ ", fail), fail  # labelled, as eval.py's
    assert "Hint: the output is c exactly as the harness handed it over" in fail
    assert proc.returncode == (harness.EXIT_FAIL if HAS_CUDA else harness.EXIT_USAGE), proc.stderr


def test_static_rules_fail_a_file_but_missing_headers_are_a_note(tmp_path, capsys):
    """The upload rules fail a file (one line); missing #!POPCORN lines are no server rule
    (harness.header_warnings: a note in the JSON)."""
    bad = tmp_path / "bad.py"
    bad.write_text("#!POPCORN leaderboard nvfp4_gemv\n#!POPCORN gpu NVIDIA\n# a cuda " + harness.FORBIDDEN_WORD +
                   " here\n" + GOOD.read_text())
    assert ab.main([str(GOOD), str(bad), "--shapes", str(TINY), "--check-shapes", str(TINY)]) == \
        (harness.EXIT_FAIL if HAS_CUDA else harness.EXIT_USAGE)
    out = capsys.readouterr().out
    assert f"NEW {bad}: FAIL line 3 contains the word" in out, out
    bare = tmp_path / "bare.py"
    bare.write_text("\n".join(line for line in GOOD.read_text().splitlines() if not line.startswith("#!POPCORN")))
    assert harness.static_problems(bare) == [] and len(harness.header_warnings(bare)) == 2


def test_a_file_the_precheck_rejects_fails_before_any_timing(capsys):
    """ab checks the server's pre-check (KernelGuard, where installed) with the upload rules:
    the replaying fixture fails in one line naming the rule, and is never timed."""
    pytest.importorskip("kernelguard")
    replay = FIXTURES / "wrong_cache_first_output.py"
    assert ab.main([str(GOOD), str(replay), "--shapes", str(TINY), "--check-shapes", str(TINY)]) == \
        (harness.EXIT_FAIL if HAS_CUDA else harness.EXIT_USAGE)
    (fail,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("NEW")]
    assert fail.startswith(f"NEW {replay}: FAIL the server's pre-check would refuse it: KernelGuard 0.3.1")
    assert "LAST_CALL_REPLAY" in fail


def test_without_kernelguard_one_line_says_the_precheck_was_not_run(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "kernelguard", None)  # import kernelguard raises ImportError
    ab.main([str(GOOD), str(GOOD), "--shapes", str(TINY), "--check-shapes", str(TINY), "--rounds", "2",
             "--repeats", "3", "--workers", "1"])
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "pre-check" in ln]
    assert len(lines) == 1 and harness.KERNELGUARD_INSTALL in lines[0], lines


def test_git_revision_and_hash(tmp_path):
    assert ab.sha256_of(GOOD) == __import__("hashlib").sha256(GOOD.read_bytes()).hexdigest()
    assert ab.git_revision(tmp_path / "x.py") is None  # not in a checkout
    rev = ab.git_revision(GOOD)
    if rev is not None:  # a git checkout (not an unpacked archive)
        assert rev == "untracked" or len(rev.split("-")[0]) == 12


def test_the_timed_path_runs_on_the_host_clock(tmp_path, monkeypatch, capsys):
    """The rounds, the order, the NVML record, the exclusion, the JSON and the table, run here
    with the GPU parts stood in: the workers have no CUDA, so eval.py's timed loop uses the host
    clock (at most CPU_MAX_REPEATS calls): the times are not GPU times, the path is the real one."""
    samples = iter([0x1] * 1000)

    class FakeNvml:
        def sample(self):
            return {"sm_mhz": 1980, "mem_mhz": 2619, "power_w": 300.0, "temp_c": 50, "reasons": next(samples)}

    monkeypatch.setattr(ab, "_cuda_available", lambda: True)
    monkeypatch.setattr(ab, "gpu_info", lambda: ({"name": GPU, "capability": "9.0"}, FakeNvml()))
    copy = tmp_path / "copy.py"
    shutil.copy(GOOD, copy)
    out = tmp_path / "ab.json"
    code = ab.main([str(GOOD), str(copy), "--shapes", str(TINY), "--check-shapes", str(TINY), "--rounds", "3",
                    "--workers", "3", "--repeats", "3", "--json", str(out)])
    assert code == 0
    record = json.loads(out.read_text())
    # a worker set per round: each set warms its files, and runs its first round, in the order
    # that alternates from set to set
    assert [r["order"] for r in record["rounds"]] == [["BASE", "NEW"], ["NEW", "BASE"], ["BASE", "NEW"]]
    assert [r["warm_order"] for r in record["rounds"]] == [r["order"] for r in record["rounds"]]
    assert [r["worker_set"] for r in record["rounds"]] == [0, 1, 2]
    # two rounds per set: the second set begins with NEW, as it warms NEW first
    code = ab.main([str(GOOD), str(copy), "--shapes", str(TINY), "--check-shapes", str(TINY), "--rounds", "4",
                    "--workers", "2", "--repeats", "3", "--json", str(out)])
    rounds = json.loads(out.read_text())["rounds"]
    assert code == 0 and [r["order"][0] for r in rounds] == ["BASE", "NEW", "NEW", "BASE"]
    assert [r.get("warm_order") for r in rounds] == [["BASE", "NEW"], None, ["NEW", "BASE"], None]
    assert record["shapes"] == ["128x256x1", "128x256x2"] and record["settings"]["mode"] == "leaderboard"
    for r in record["rounds"]:
        assert r["telemetry"]["samples"] >= 1 and r["telemetry"]["throttled"] is False
        for label in ("BASE", "NEW"):
            assert all(len(r["times"][label][s]) == 3 for s in record["shapes"])
    assert [f["sha256"] for f in record["files"]] == [ab.sha256_of(GOOD)] * 2
    # each file's kernel revision (the fixture names none) and bundle state (another path: not compared with kernels/)
    assert [(f["kernel_revision"], f["bundle"]) for f in record["files"]] == [(None, "not the kit's file")] * 2
    (cmp,) = record["comparisons"]
    assert cmp["geomean"]["n"] == 3 and cmp["geomean"]["verdict"] in ("faster", "slower", "same")
    printed = capsys.readouterr().out
    assert f"ab on {GPU}" in printed and "verdict: NEW" in printed
    assert record["impossible_times"] == [harness.unknown_peak_note(GPU)]  # no peak on record for the stand-in


def test_impossible_times_name_the_file_and_shape_below_bytes_over_peak():
    """Per file and shape over the kept rounds: a mean or median below gemv_bytes / peak (here an
    H100 SXM, 3.35 TB/s: 7168x2048x4 cannot take less than 9.878 µs) is one warning line naming
    the file; a round left out does not count; an unknown GPU gets one note."""
    case = harness.parse_test_cases("m: 7168; k: 2048; l: 4; seed: 1111")[0]
    files = [{"label": "BASE", "path": "base.py"}, {"label": "NEW", "path": "new.py"}]
    rounds = [{"index": 0, "times": {"BASE": {"7168x2048x4": [15000.0] * 5}, "NEW": {"7168x2048x4": [3000.0] * 5}}},
              {"index": 1, "times": {"BASE": {"7168x2048x4": [1000.0] * 5}, "NEW": {"7168x2048x4": [3000.0] * 5}},
               "excluded": "throttled (HwSlowdown)"}]
    record = {"gpu": {"name": "NVIDIA H100 80GB HBM3"}, "rounds": rounds}
    (line,) = ab.impossible_times(record, files, [case])
    assert line.startswith("NEW new.py: 7168x2048x4: mean 3.000 µs and median 3.000 µs below 9.878 µs")
    assert "3.35 TB/s" in line and "H100 SXM" in line
    assert "warning: " + line in ab.format_report({**record, "impossible_times": [line]})
    unknown = ab.impossible_times({**record, "gpu": {"name": "Stand-in GPU"}}, files, [case])
    assert unknown == [harness.unknown_peak_note("Stand-in GPU")] and "Stand-in GPU" in unknown[0]


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_a_short_real_a_b_of_two_copies(tmp_path):
    """Two copies of the good fixture on the GPU, two worker sets of two rounds: both pass,
    every round is recorded with its worker set, the interval is over the sets, and the verdict
    names this GPU."""
    copy = tmp_path / "copy.py"
    shutil.copy(GOOD, copy)
    out = tmp_path / "ab.json"
    proc = run_ab(GOOD, copy, "--shapes", TINY, "--check-shapes", TINY,
                  "--rounds", "4", "--workers", "2", "--repeats", "10", "--json", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(out.read_text())
    assert len(record["rounds"]) == 4 and [r["worker_set"] for r in record["rounds"]] == [0, 0, 1, 1]
    geo = record["comparisons"][0]["geomean"]
    if all(not r.get("excluded") for r in record["rounds"]):
        assert geo["unit"] == "worker set" and geo["n"] == 2
    assert f"on this GPU ({record['gpu']['name']})" in proc.stdout


# --------------------------------------------------------------------------- benchmarks/ab_calibration.py

def test_calibration_pieces():
    """The slowed copy calls the kernel, then spins the cycles asked; A/A experiments of whole
    worker sets and their coverage; the Wilson interval; the budget's half-width from the spread
    of the worker sets' means; the spread split within and between sets."""
    import torch

    from benchmarks import ab_calibration as cal

    spun = []
    namespace = {}
    source = "def custom_kernel(data):\n    return data * 2\n"
    real_sleep = getattr(torch.cuda, "_sleep", None)
    torch.cuda._sleep = spun.append
    try:
        exec(cal.with_sleep(source, 1234), namespace)
        assert namespace["custom_kernel"](21) == 42 and spun == [1234]
    finally:
        if real_sleep is None:
            del torch.cuda._sleep
        else:
            torch.cuda._sleep = real_sleep
    lo, hi = cal.wilson(19, 20)
    assert (round(lo, 3), round(hi, 3)) == (0.764, 0.991)
    # 21 worker sets of 2 rounds: experiments of 4 sets, the last set dropped
    record = synthetic_record(random.Random(8), 42, {"7168x2048x4": 1.0, "4096x7168x8": 1.0}, rounds_per_set=2)
    record["seconds_total"] = 84.0
    assert [len(b["rounds"]) for b in cal.blocks(record, 4)] == [8] * 5
    cov = cal.coverage(record, 4)
    assert set(cov) == {"7168x2048x4", "4096x7168x8", "geomean"} and cov["geomean"]["blocks"] == 5
    share = cov["geomean"]["share"]
    assert cov["geomean"]["se"] == pytest.approx(math.sqrt(share * (1 - share) / 5))
    det = cal.detectable(record, 60.0)  # 2 shapes x 60 s / 4 s per worker set = 30 sets
    assert det["sets_in_budget"] == 30
    (cmp,) = ab.analyze(record)
    row = cmp["shapes"][0]
    assert row["unit"] == "worker set" and row["n"] == 21
    assert det["7168x2048x4"]["half_width_pct"] == pytest.approx(
        100 * (math.exp(ab.t_quantile(0.975, 29) * row["sd_log"] / math.sqrt(30)) - 1))
    sp = cal.spread(record)
    assert sp["7168x2048x4"]["sets"] == 21 and sp["7168x2048x4"]["sd_within_set"] > 0


@pytest.mark.skipif(HAS_CUDA, reason="checks the refusal without a CUDA GPU")
def test_calibration_needs_a_gpu(tmp_path):
    proc = subprocess.run([sys.executable, "benchmarks/ab_calibration.py", "--out", str(tmp_path / "c")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == "error: the calibration needs a CUDA GPU (it runs eval.py ab)"


def test_help_prints_the_level_as_a_percentage():
    text = " ".join(ab.build_parser().format_help().split())
    assert "with a 95% interval on the ratio" in text and "%%" not in text
