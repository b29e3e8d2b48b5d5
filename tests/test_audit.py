"""``python3 eval.py audit``: the kit's submission and the known-good fixtures pass every check;
each known-wrong pattern (a result cached by pointer, by a hash of a sample of the values, by
the input object; work left on a thread or another device queue; a forbidden word) fails the
check written for it. The audit runs here in this process (``audit.audit``), and once through
the command line for its exit status and line format.
"""

import dataclasses
import math
import os
import re
import subprocess
import sys

import pytest
import torch
from conftest import HAS_CUDA, ROOT, requires_cuda

import audit
import harness
import quant
import reference
import submission

FIXTURES = ROOT / "tests" / "fixtures"
LINE = re.compile(r"^(PASS|FAIL|WARN|INFO) ([^:]+): \S")


def _statuses(path, shapes=None, tolerance_shapes=(), timing_cases=()) -> dict:
    """{check name without the shape tag: [statuses]} of one audit (by default without the
    tolerance checks, which test_tolerance_used_* cover, and without the impossible-time check,
    which test_*impossible_time* cover)."""
    out = {}
    for check in audit.audit(path, shapes, tolerance_shapes=tolerance_shapes, timing_cases=timing_cases):
        out.setdefault(re.sub(r" \[\d+x\d+x\d+\]$", "", check.name), []).append(check.status)
    return out


def _failed(statuses: dict) -> set:
    return {name for name, got in statuses.items() if "FAIL" in got}


IN_PLACE = {f"in place, {label}" for label, _ in audit.IN_PLACE}
ALL = {"static rules", "header lines", audit.PRECHECK, audit.PRECHECK_NEWEST, "first call",
       "same inputs again, c poisoned", "deterministic", *IN_PLACE, "fresh tensors, earlier values",
       "plain torch.Tensor output", "inputs untouched, output apart", "output complete on return", "judge untouched"}
PRECHECKS = (audit.PRECHECK, audit.PRECHECK_NEWEST)


@pytest.mark.parametrize("path", [ROOT / "submission.py", FIXTURES / "good_submission.py",
                                  FIXTURES / "good_plain_scales.py"], ids=lambda p: p.stem)
def test_good_submissions_pass_every_check(path):
    """good_plain_scales reads only the plain scales, the kit's torch backend only the permuted
    ones: the scale writes must change both alike for both to pass."""
    statuses = _statuses(path)
    assert set(statuses) == ALL
    assert _failed(statuses) == set(), statuses
    assert statuses["fresh tensors, earlier values"] == ["INFO"] * len(statuses["first call"])
    assert all(statuses[name] == ["INFO"] for name in PRECHECKS)  # KernelGuard's verdict is never a PASS
    assert all(s == ["PASS"] * len(s) for name, s in statuses.items()
               if name not in ("fresh tensors, earlier values", *PRECHECKS))


@pytest.mark.parametrize("fixture, must_fail, may_fail", [
    ("wrong_cache_by_pointer", IN_PLACE, set()),
    ("wrong_cache_by_value_hash", {"in place, one row of a far from its start",
                                   "in place, sfa only (one row, plain and permuted)"}, set()),
    ("wrong_returns_earlier_output", {"same inputs again, c poisoned", *IN_PLACE}, set()),
    # on a GPU the audit runs a second shape, whose first call this fixture also answers from its cache
    ("wrong_cache_first_output", {"same inputs again, c poisoned", *IN_PLACE, "fresh tensors, earlier values"},
     {"static rules", "first call", *PRECHECKS}),
    ("wrong_deferred_thread", {"output complete on return"}, set()),
], ids=lambda v: v if isinstance(v, str) else "")
def test_each_wrong_pattern_fails_its_check(fixture, must_fail, may_fail):
    statuses = _statuses(FIXTURES / f"{fixture}.py")
    failed = _failed(statuses)
    assert must_fail <= failed, statuses
    assert failed - must_fail <= may_fail, statuses  # the other checks still say what they check


@requires_cuda
def test_gpu_work_left_on_another_queue_fails():
    statuses = _statuses(FIXTURES / "wrong_deferred_queue.py", shapes=[(256, 1024, 2)])
    assert _failed(statuses) == {"output complete on return"}, statuses


@requires_cuda
@pytest.mark.parametrize("fixture", ["wrong_cache_by_pointer", "wrong_deferred_thread"])
def test_gpu_audit_flags_on_the_gpu_too(fixture):
    statuses = _statuses(FIXTURES / f"{fixture}.py")
    assert _failed(statuses), statuses


@requires_cuda
def test_gpu_kit_submission_passes_on_its_gpu_shapes():
    statuses = _statuses(ROOT / "submission.py")
    assert _failed(statuses) == set(), statuses
    assert len(statuses["first call"]) == len(audit.GPU_SHAPES)


def test_forbidden_word_fails_static_rules_and_missing_headers_are_info(tmp_path):
    """The forbidden word is the server's rule (FAIL); the #!POPCORN lines are popcorn-cli's,
    which the server never reads (INFO naming the missing line)."""
    word = "str" + "eam"
    bad = tmp_path / "submission.py"
    bad.write_text((FIXTURES / "good_submission.py").read_text().split("\n", 2)[2] + f"# {word.upper()}\n")
    statuses = _statuses(bad)
    assert _failed(statuses) == {"static rules"}
    rules, headers, _, _ = audit.static_checks(bad)
    assert rules.status == "FAIL" and word in rules.reason and "POPCORN" not in rules.reason
    assert headers.status == "INFO" and "#!POPCORN leaderboard nvfp4_gemv" in headers.reason


def test_a_file_without_headers_passes_the_static_rules(tmp_path):
    path = tmp_path / "submission.py"
    path.write_text((FIXTURES / "good_submission.py").read_text().split("\n", 2)[2])
    rules, headers, _, _ = audit.static_checks(path)
    assert (rules.status, headers.status) == ("PASS", "INFO")
    assert "--leaderboard nvfp4_gemv" in headers.reason and "--gpu NVIDIA" in headers.reason


def test_a_submission_that_does_not_import_fails_in_one_line(tmp_path):
    bad = tmp_path / "submission.py"
    bad.write_text("#!POPCORN leaderboard nvfp4_gemv\n#!POPCORN gpu NVIDIA\nraise ImportError('nope')\n")
    checks = audit.audit(bad)
    assert [(c.status, c.name) for c in checks] == [("PASS", "static rules"), ("PASS", "header lines"),
                                                    ("INFO", audit.PRECHECK), ("INFO", audit.PRECHECK_NEWEST),
                                                    ("FAIL", "import")]
    assert "ImportError: nope" in checks[4].reason and "\n" not in checks[4].reason


def test_the_audit_leaves_the_module_name_submission_alone():
    """The audit loads the file under test once, before any check calls it (the tolerance checks,
    most of a CPU audit's time, only call the kernel: left out here)."""
    audit.audit(FIXTURES / "good_submission.py", tolerance_shapes=())
    assert sys.modules["submission"] is submission


@pytest.mark.parametrize("what", [w for _, w in audit.IN_PLACE])
def test_in_place_writes_change_only_their_part_and_keep_the_scales_consistent(what):
    """Each write changes what its name says and nothing else, and the permuted scales stay the
    plain ones in the permuted layout (a submission may read either)."""
    m, k, l = audit.CPU_SHAPES[0]
    data = audit._inputs(m, k, l, 1, torch.device("cpu"))
    before = [t.view(torch.uint8).clone() for t in data[:6]]
    audit._write_in_place(data, audit._inputs(m, k, l, 2, torch.device("cpu")), what)
    changed = [not torch.equal(t.view(torch.uint8), b) for t, b in zip(data[:6], before, strict=True)]
    want = {"all": [True] * 6, "a-row": [True, False, False, False, False, False],
            "b": [False, True, False, False, False, False], "sfa-row": [False, False, True, False, True, False],
            "sfb": [False, False, False, True, False, True]}[what]
    assert changed == want
    for plain, permuted in ((data[2], data[4]), (data[3], data[5])):
        assert torch.equal(reference.permuted_from_plain(plain).view(torch.uint8), permuted.view(torch.uint8))
    rows = {"a-row": (m - 3, l - 1), "sfa-row": (m - 3, l - 1)}.get(what)
    if rows:  # one row of one batch: every other element as before
        t, b = (data[0], before[0]) if what == "a-row" else (data[2], before[2])
        diff = (t.view(torch.uint8) != b).any(dim=1).nonzero().tolist()
        assert diff == [list(rows)]


def test_command_line_exit_status_and_lines(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVFP4_")}
    proc = subprocess.run([sys.executable, "eval.py", "audit", str(FIXTURES / "wrong_cache_by_pointer.py")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 112, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines and all(LINE.match(ln) for ln in lines), lines
    assert any(ln.startswith("FAIL in place, all inputs") for ln in lines)
    missing = subprocess.run([sys.executable, "eval.py", "audit", str(tmp_path / "none.py")], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=600)
    assert missing.returncode == 2 and "not found" in missing.stderr and missing.stdout == ""



def test_a_folder_is_no_submission(tmp_path, capsys):
    """The same one-line check as eval.py and modal_app.py (harness.submission_problem)."""
    assert audit.main([str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: {tmp_path} is a folder, not a submission file (name the .py file in it)\n"


def test_the_cache_hint_only_follows_a_right_first_call(tmp_path):
    """A plain wrong answer (zeros) is wrong from its first call: no guess at caching. A result
    cached by pointer is right first and wrong later: the guess is made. (Without the tolerance
    checks, which make no guess: nearly all of the audit's time on a CPU.)"""
    zeros = tmp_path / "zeros.py"
    zeros.write_text((FIXTURES / "good_submission.py").read_text().split("\n", 2)[0] + "\n"
                     "import torch\n\n\ndef custom_kernel(data):\n    c = data[-1]\n    c.zero_()\n    return c\n")
    checks = audit.audit(zeros, tolerance_shapes=())
    failed = [c for c in checks if c.status == "FAIL"]
    assert failed and failed[0].name.startswith("first call")
    assert re.search(r"; ERROR at \(0, 0, 0\): result 0\.0, expected -?\d+\.\d+; ", failed[0].reason), failed[0].reason
    assert not any("cached" in c.reason or "read from c" in c.reason for c in failed), [c.line() for c in failed]
    cached = audit.audit(FIXTURES / "wrong_cache_by_pointer.py", tolerance_shapes=())
    assert any(c.status == "FAIL" and "cached by object, pointer" in c.reason for c in cached)


SMALL = ((128, 256, 1), (256, 1024, 2), (512, 4096, 2))


def test_tolerance_used_sees_what_the_servers_data_hides():
    """fp32 group sums: exact on the server's data, a share of the tolerance on full-range data
    (one fp16 step off the correctly rounded answer near 1: about half of atol + rtol |x|)."""
    kernel = harness.load_submission(FIXTURES / "good_fp32_group_sums.py", keep=False).custom_kernel
    checks = {c.name: c for c in audit.tolerance_checks(kernel, [(*s, 4242) for s in SMALL], "cpu")}
    assert set(checks) == {f"tolerance used, {d}" for d in quant.DISTRIBUTIONS}
    assert all(c.status == "INFO" for c in checks.values())
    assert checks["tolerance used, official"].reason == ("exact on every element of 3 case(s) (seed 4242: the "
                                                         "inputs eval.py --distribution draws)")
    full = re.match(r"(\d+\.\d)% of atol \+ rtol \|expected\| at most over 3 case\(s\) \(seed 4242: the inputs "
                    r"eval.py --distribution draws\); largest at ", checks["tolerance used, full-range"].reason)
    assert full and 0 < float(full.group(1)) < 100, checks["tolerance used, full-range"].reason


def test_tolerance_used_fails_beyond_the_tolerance_on_the_servers_data():
    low = harness.load_submission(FIXTURES / "wrong_low_precision.py", keep=False).custom_kernel
    (official, *_) = audit.tolerance_checks(low, SMALL[:1], "cpu")
    assert official.status == "FAIL" and "(beyond the tolerance: eval.py --distribution official fails it)" in \
        official.reason


def test_the_tolerance_check_draws_the_inputs_eval_py_draws():
    """Over the official test cases by default, each with its own seed, the inputs of every
    distribution are bit for bit those eval.py's worker makes (harness.generate_case): what the
    audit measures is what `eval.py --distribution D` checks (both seeds were once 4242 and 1111)."""
    import inspect
    assert inspect.signature(audit.audit).parameters["tolerance_shapes"].default is None
    cases = [(c["m"], c["k"], c["l"], c["seed"]) for c in harness.shape_set("tests")]
    for dist in quant.DISTRIBUTIONS:
        for m, k, l, seed in cases[:4]:
            mine = audit._case_inputs(m, k, l, seed, dist, reference.default_device())
            theirs = harness.generate_case({"m": m, "k": k, "l": l, "seed": seed}, dist)
            assert all(torch.equal(x.view(torch.uint8) if x.element_size() == 1 else x,
                                   y.view(torch.uint8) if y.element_size() == 1 else y)
                       for x, y in zip(mine, theirs, strict=True)), (dist, m, k, l)


FP16_SUMS = """
import torch

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def decode(packed, scales):
    table = torch.tensor(E2M1, device=packed.device)
    codes = packed.view(torch.uint8).long()
    values = torch.stack((table[codes & 15], table[codes >> 4]), dim=2).flatten(1, 2)
    return values * scales.float().repeat_interleave(16, dim=1)


def custom_kernel(data):
    a, b, sfa, sfb, _, _, c = data
    prod = decode(a, sfa) * decode(b[:1], sfb[:1])
    m, k, l = prod.shape
    groups = prod.reshape(m, k // 16, 16, l).sum(dim=2)
    acc = torch.zeros((m, l), dtype=torch.float16, device=c.device)
    for g in range(k // 16):  # the group sums accumulated in fp16
        acc = acc + groups[:, g, :].to(torch.float16)
    c[:, 0, :] = acc
    return c
"""


def test_the_audit_and_eval_py_agree_on_a_case(tmp_path):
    """An fp16 accumulator: `eval.py --distribution D` fails a case exactly where the audit's
    tolerance used on it is over 100%, per distribution."""
    sub = tmp_path / "fp16_sums.py"
    sub.write_text(FP16_SUMS)
    case = tmp_path / "case.txt"
    case.write_text("m: 128; k: 1536; l: 1; seed: 1111\n")
    kernel = harness.load_submission(sub, keep=False).custom_kernel
    checks = {c.name: c for c in audit.tolerance_checks(kernel, [(128, 1536, 1, 1111)], reference.default_device())}
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVFP4_") and k != "POPCORN_FD"}
    for dist in quant.DISTRIBUTIONS:
        proc = subprocess.run([sys.executable, "eval.py", "--submission", str(sub), "--shapes", str(case),
                               "--distribution", dist], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        beyond = "beyond the tolerance" in checks[f"tolerance used, {dist}"].reason
        assert (proc.returncode == 112) == beyond and proc.returncode in (0, 112), (dist, proc.stderr[-2000:])


@pytest.mark.parametrize("out, expected, share", [
    ([1.0, 2.0], [1.0, 2.0], 0.0),
    ([1.001, 2.0], [1.0, 2.0], (1.0009765625 - 1) / (1e-3 + 1e-3)),  # 1.001 in fp16: one step above 1
    ([float("nan"), 1.0], [float("nan"), 1.0], 0.0),
    ([float("inf"), 1.0], [float("inf"), 1.0], 0.0),
    ([float("nan"), 1.0], [0.0, 1.0], float("inf")),
    ([float("-inf"), 1.0], [float("inf"), 1.0], float("inf")),
    ([1.0, 0.0], [1.0, float("inf")], float("inf")),
], ids=["exact", "half the tolerance", "both NaN", "same inf", "NaN for a number", "opposite inf", "missed inf"])
def test_tolerance_used_counts_as_the_checker_does(out, expected, share):
    """share > 1 exactly where utils.verbose_allclose reports a mismatch."""
    from utils import verbose_allclose
    o, e = torch.tensor(out, dtype=torch.float16), torch.tensor(expected, dtype=torch.float16)
    got, _ = audit.tolerance_used(o, e)
    assert got == pytest.approx(share) if math.isfinite(share) else got == share
    assert (got > 1) == bool(verbose_allclose(o, e, rtol=reference.RTOL, atol=reference.ATOL))


@requires_cuda
def test_gpu_kit_submission_stays_inside_the_tolerance_on_every_distribution():
    """The kit's kernels on the official test shapes: at most the tolerance on every distribution
    (the number itself is in `eval.py audit`'s output)."""
    checks = audit.tolerance_checks(submission.custom_kernel, [(c["m"], c["k"], c["l"], c["seed"])
                                                                for c in harness.shape_set("tests")], "cuda")
    assert len(checks) == len(quant.DISTRIBUTIONS)
    assert all(c.status == "INFO" and "beyond" not in c.reason for c in checks), [c.line() for c in checks]


# --------------------------------------------------------------------------- the pre-check (KernelGuard)

def test_precheck_fails_a_last_call_replay_naming_kernelguard_and_its_rule():
    """The server's pre-check (kernelguard 0.3.1, default profile) rejects the fixture that
    replays its first output; the audit says so, naming KernelGuard and the rule."""
    pytest.importorskip("kernelguard")
    check = audit.precheck_check(FIXTURES / "wrong_cache_first_output.py")
    assert check.status == "FAIL" and check.name == audit.PRECHECK
    assert "KernelGuard 0.3.1" in check.reason and "LAST_CALL_REPLAY" in check.reason, check.reason
    assert "KERNELGUARD_ENABLED" in check.reason


@pytest.mark.parametrize("path", [ROOT / "submission.py", ROOT / "examples" / "minimal_torch.py",
                                  FIXTURES / "wrong_cache_by_pointer.py"], ids=lambda p: p.stem)
def test_precheck_passes_the_kit_with_its_rules_as_info(path):
    """The kit's submission is classified but not rejected (its torch._scaled_mm reference path
    matches a telemetry rule): INFO naming the classification; so is a cache KernelGuard does not
    see (the audit's own checks catch that one)."""
    pytest.importorskip("kernelguard")
    check = audit.precheck_check(path)
    assert check.status == "INFO" and "not rejected" in check.reason, check.reason
    assert "so the server runs it" in check.reason, check.reason


def test_a_precheck_that_does_not_reject_says_what_that_means_for_the_upload():
    """The INFO line of a classification the server only logs (the kit's own file: low_confidence,
    SCALED_MM_REF) says on that line that the server runs the file, not only the verdict's words."""
    found = harness.Precheck(installed=True, version=harness.KERNELGUARD_VERSION, classification="low_confidence",
                             rules=["SCALED_MM_REF (high)"])
    assert found.summary() == (
        f"KernelGuard {harness.KERNELGUARD_VERSION}, default profile: not rejected (low_confidence), so the server "
        "runs it: its pre-check refuses only a rejected file and logs any other classification; matched rules: "
        "SCALED_MM_REF (high)")


def test_precheck_without_kernelguard_is_one_info_line_with_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "kernelguard", None)  # import kernelguard raises ImportError
    check = audit.precheck_check(FIXTURES / "wrong_cache_first_output.py")
    assert check.status == "INFO" and harness.KERNELGUARD_INSTALL in check.reason and "\n" not in check.reason


def test_precheck_reports_an_analysis_that_raises(monkeypatch):
    kernelguard = pytest.importorskip("kernelguard")

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(kernelguard, "analyze_code", broken)
    found = harness.kernelguard_precheck("def custom_kernel(data):\n    return data[-1]\n")
    assert found.installed and not found.rejected and "RuntimeError: boom" in found.summary()


def test_a_text_checked_again_in_the_process_gets_the_same_verdict_without_a_second_analysis(monkeypatch):
    """harness.kernelguard_precheck keeps a verdict per text and analyser: the same text again is
    not analysed again (a copy comes back: changing it changes nothing kept); another text, or
    another analyser, is; an analysis that raised is not kept."""
    kernelguard = pytest.importorskip("kernelguard")
    real, calls = kernelguard.analyze_code, []

    def counted(source, **kwargs):
        calls.append(source)
        if source.startswith("# raise once") and calls.count(source) == 1:
            raise RuntimeError("boom")
        return real(source, **kwargs)

    monkeypatch.setattr(kernelguard, "analyze_code", counted)
    text = "def custom_kernel(data):\n    return data[-1]\n# a text no other test checks\n"
    first = harness.kernelguard_precheck(text)
    first.rules.append("changed by the caller")
    again = harness.kernelguard_precheck(text)
    assert calls == [text] and "changed by the caller" not in again.rules
    assert again == dataclasses.replace(first, rules=again.rules) and again.summary() == harness.kernelguard_precheck(
        text).summary()
    other = "# another\n" + text
    harness.kernelguard_precheck(other)
    assert calls == [text, other]
    raising = "# raise once\n" + text
    assert harness.kernelguard_precheck(raising).error and not harness.kernelguard_precheck(raising).error
    assert calls == [text, other, raising, raising]
    second = []
    monkeypatch.setattr(kernelguard, "analyze_code", lambda source, **kwargs: second.append(source) or real(
        source, **kwargs))
    harness.kernelguard_precheck(text)  # another analyser: analysed again
    assert second == [text]


def test_precheck_names_another_installed_version(monkeypatch):
    pytest.importorskip("kernelguard")
    import importlib.metadata
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "9.9.9")
    found = harness.kernelguard_precheck("def custom_kernel(data):\n    return data[-1]\n")
    assert "KernelGuard 9.9.9" in found.summary() and "the server pins 0.3.1" in found.summary()


def test_command_line_fails_the_replay_on_the_precheck(tmp_path):
    """`eval.py audit` of the replaying fixture: a FAIL line naming KernelGuard and its rule."""
    pytest.importorskip("kernelguard")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVFP4_")}
    proc = subprocess.run([sys.executable, "eval.py", "audit", str(FIXTURES / "wrong_cache_first_output.py")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 112, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("FAIL pre-check"))
    assert "KernelGuard" in line and "LAST_CALL_REPLAY" in line


# --------------------------------------------------------------------------- impossible times

BENCHMARK_CASES = [(c["m"], c["k"], c["l"], c["seed"]) for c in harness.shape_set("benchmarks")]


@pytest.mark.parametrize("times_us, status", [([30.0] * 10, "PASS"), ([3.0] * 10, "FAIL"),
                                              ([2000.0] + [3.0] * 9, "FAIL"), ([25.0] * 9 + [3.0], "PASS")],
                         ids=["possible", "all below", "mean above, median below", "one fast call"])
def test_impossible_time_checks_the_mean_and_the_median_against_bytes_over_peak(monkeypatch, times_us, status):
    """7168x2048x4 on an H100 SXM (3.35 TB/s): no call under 9.878 µs. A cache hit on most calls
    is caught by the median even where one slow first call lifts the mean; one fast call is not."""
    monkeypatch.setattr(harness, "time_calls", lambda *args: [t * 1e3 for t in times_us])
    (check,) = audit.timing_checks(None, [(7168, 2048, 4, 1111)], "NVIDIA H100 80GB HBM3")
    assert (check.status, check.name) == (status, "impossible time [7168x2048x4]"), check.line()
    assert ("9.878 µs" in check.reason) and ("3.35 TB/s" in check.reason)


def test_impossible_time_on_an_unknown_gpu_is_one_info_line(monkeypatch):
    monkeypatch.setattr(harness, "time_calls", lambda *args: pytest.fail("no timing without a peak"))
    assert [c.line() for c in audit.timing_checks(None, BENCHMARK_CASES, "NVIDIA Future GPU")] == [
        "INFO impossible time: " + harness.unknown_peak_note("NVIDIA Future GPU")]


def test_impossible_time_reports_a_failing_timed_loop(monkeypatch):
    monkeypatch.setattr(harness, "time_calls", lambda *args: "mismatch found! custom implementation doesn't match")
    (check,) = audit.timing_checks(None, [(7168, 2048, 4, 1111)], "NVIDIA B200")
    assert check.status == "FAIL" and "the timed loop failed: mismatch found" in check.reason


def test_impossible_time_is_not_run_on_the_cpu():
    if HAS_CUDA:
        pytest.skip("checks the CPU's audit")
    names = {c.name for c in audit.audit(FIXTURES / "good_submission.py", tolerance_shapes=())}
    assert not any(n.startswith("impossible time") for n in names)


@requires_cuda
def test_gpu_impossible_time_fails_a_cache_kept_across_calls():
    """wrong_cache_by_pointer serves every timed call after the first from its cache (the
    benchmark loop reuses one input): its median is the host's time between the two events, below
    bytes / peak on the two large benchmark shapes (floors of 8.3 and 16.5 µs even on a B200; the
    third's, 4.1 µs there, is near what a cache hit takes from Python)."""
    statuses = _statuses(FIXTURES / "wrong_cache_by_pointer.py", shapes=[(256, 1024, 2)], timing_cases=BENCHMARK_CASES)
    assert statuses["impossible time"][:2] == ["FAIL", "FAIL"], statuses


@requires_cuda
def test_gpu_impossible_time_passes_the_kit():
    statuses = _statuses(ROOT / "submission.py", shapes=[(256, 1024, 2)], timing_cases=BENCHMARK_CASES)
    assert statuses["impossible time"] == ["PASS"] * len(BENCHMARK_CASES), statuses


def test_the_submission_may_be_given_as_eval_py_takes_it(tmp_path, capsys):
    """`eval.py audit --submission X` as `eval.py --submission X`; two different files: one line."""
    assert audit.main(["--submission", str(tmp_path / "none.py")]) == 2
    assert capsys.readouterr().err == f"error: submission file {tmp_path / 'none.py'} not found\n"
    assert audit.main(["a.py", "--submission", "b.py"]) == 2
    assert "two submissions given" in capsys.readouterr().err


# --------------------------------------------------------------------------- the public reward-hack patterns

TINY_SHAPE = [(128, 256, 2)]  # tests/fixtures/tiny.txt's larger case: every per-shape check, little CPU
# fixture -> (the checks it must fail, the words a failing line names the pattern with); a background
# thread's work (wrong_deferred_thread) is test_each_wrong_pattern_fails_its_check's
PATTERNS = {
    "wrong_patched_timer": ({"judge untouched", audit.PRECHECK, audit.PRECHECK_NEWEST},
                            "time.perf_counter_ns was replaced (a patched timer)"),
    "wrong_patched_timer_hidden": ({"judge untouched"}, "torch.cuda.Event.elapsed_time was replaced (a patched timer)"),
    "wrong_patched_checker": ({"judge untouched", "first call", "same inputs again, c poisoned", *IN_PLACE,
                               "fresh tensors, earlier values"}, "reference.check_implementation was replaced (a "
                                                                 "patched checker)"),
    "wrong_lazy_output": ({"plain torch.Tensor output", "first call", "same inputs again, c poisoned", *IN_PLACE,
                           "fresh tensors, earlier values"}, "a subclass of torch.Tensor"),
    "wrong_lazy_output_hidden": ({"plain torch.Tensor output", "first call", "same inputs again, c poisoned",
                                  *IN_PLACE, "fresh tensors, earlier values"}, "a subclass of torch.Tensor"),
    "wrong_deferred_calls": ({"same inputs again, c poisoned", *IN_PLACE, "fresh tensors, earlier values"},
                             "deferred to a later call (calls batched or deferred)"),
    "wrong_output_in_inputs": ({"inputs untouched, output apart", *IN_PLACE},
                               "the output shares memory with input(s) b (an input returned or copied as the output)"),
    "wrong_stale_output": ({"same inputs again, c poisoned", *IN_PLACE}, "a stale output"),
    "wrong_cache_native": (IN_PLACE - {"in place, one row of a far from its start"}, "a result cached by object, "
                                                                                   "pointer or a sample"),
}


@pytest.fixture(scope="module")
def pattern_audits():
    """One audit per fixture on the tiny shape (without the tolerance checks), run when first
    asked for; each audit puts back what its file replaced."""
    done = {}

    def get(name):
        if name not in done:
            done[name] = audit.audit(FIXTURES / f"{name}.py", TINY_SHAPE, tolerance_shapes=(), timing_cases=())
        return done[name]
    return get


@pytest.mark.parametrize("fixture", sorted(PATTERNS))
def test_each_public_pattern_fails_the_audit_naming_it(pattern_audits, fixture):
    must_fail, words = PATTERNS[fixture]
    checks = pattern_audits(fixture)
    failed = {re.sub(r" \[\d+x\d+x\d+\]$", "", c.name) for c in checks if c.status == "FAIL"}
    assert must_fail <= failed, [c.line() for c in checks if c.status != "PASS"]
    assert any(words in c.reason for c in checks if c.status == "FAIL"), [c.line() for c in checks]


def test_a_patch_is_put_back_once_the_audit_has_seen_it(pattern_audits):
    """The audit of a file that patches the timers and the checker leaves this process as it was."""
    import time

    import utils
    before = (time.perf_counter_ns, torch.cuda.Event.elapsed_time, reference.check_implementation,
              utils.verbose_allclose, utils.clear_l2_cache)
    for name in ("wrong_patched_timer", "wrong_patched_timer_hidden", "wrong_patched_checker"):
        pattern_audits(name)
        assert (time.perf_counter_ns, torch.cuda.Event.elapsed_time, reference.check_implementation,
                utils.verbose_allclose, utils.clear_l2_cache) == before, name


def test_the_static_rules_miss_what_is_spelled_past_them_and_warn_of_a_critical_rule(pattern_audits):
    """KernelGuard (0.3.1 and the newest) calls the hidden timer patch and the hidden lazy output
    valid: only the audit's own checks catch them. The plain lazy output matches LAZY_TENSOR
    (critical) at low confidence: a WARN line, not INFO."""
    pytest.importorskip("kernelguard")
    for name in ("wrong_patched_timer_hidden", "wrong_lazy_output_hidden"):
        guard = [c for c in pattern_audits(name) if c.name in PRECHECKS]
        assert [c.status for c in guard] == ["INFO", "INFO"], [c.line() for c in guard]
        assert all("(valid)" in c.reason or "not installed" in c.reason for c in guard), [c.line() for c in guard]
    lazy = next(c for c in pattern_audits("wrong_lazy_output") if c.name == audit.PRECHECK)
    assert lazy.status == "WARN" and "LAZY_TENSOR (critical)" in lazy.reason, lazy.line()


@pytest.mark.parametrize("path", [ROOT / "examples" / "minimal_torch.py"], ids=lambda p: p.stem)
def test_the_kits_examples_pass_every_check(path):
    statuses = _statuses(path, shapes=TINY_SHAPE)
    assert _failed(statuses) == set(), statuses


def test_the_newest_kernelguard_is_named_or_its_install_command_given(monkeypatch, tmp_path):
    """Without the side folder: one INFO line with the install command; with it: its verdict, named
    as the newest release."""
    monkeypatch.setenv(harness.ENV_KERNELGUARD_NEWEST, str(tmp_path / "none"))
    check = audit.precheck_check(FIXTURES / "good_submission.py", newest=True)
    assert check.status == "INFO" and harness.KERNELGUARD_NEWEST_INSTALL in check.reason, check.line()
    monkeypatch.delenv(harness.ENV_KERNELGUARD_NEWEST)
    if not (harness.kernelguard_newest_dir() / "kernelguard.py").is_file():
        pytest.skip(f"KernelGuard {harness.KERNELGUARD_NEWEST} is not installed on the side "
                    f"({harness.KERNELGUARD_NEWEST_INSTALL})")
    check = audit.precheck_check(FIXTURES / "wrong_patched_timer.py", newest=True)
    assert check.status == "FAIL" and f"KernelGuard {harness.KERNELGUARD_NEWEST}, the newest release" in check.reason
    assert "TIMER_MONKEYPATCH (critical)" in check.reason, check.line()


@requires_cuda
@pytest.mark.parametrize("fixture", ["wrong_patched_timer_hidden", "wrong_lazy_output_hidden", "wrong_cache_native",
                                     "wrong_deferred_calls"])
def test_gpu_public_patterns_fail_on_the_gpu_too(fixture):
    statuses = _statuses(FIXTURES / f"{fixture}.py", shapes=[(256, 1024, 2)])
    assert PATTERNS[fixture][0] <= _failed(statuses), statuses


@requires_cuda
@pytest.mark.parametrize("name", ["starter_cuda", "cute_gemv"])
def test_gpu_examples_pass_every_check(name):
    if name == "cute_gemv":
        pytest.importorskip("cutlass", reason="the CUTLASS DSL is not installed")
    statuses = _statuses(ROOT / "examples" / f"{name}.py", shapes=[(256, 1024, 2)])
    assert _failed(statuses) == set(), statuses
