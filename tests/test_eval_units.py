"""eval.py's pure parts, in process: test-file parser, secret seed, statistics, stopping rule,
geometric mean, popcorn line parsing, summaries and tables, protocol exit codes."""

import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

import eval as ev
import harness

# --------------------------------------------------------------------------- the server's upload rules

HEADERS = "#!POPCORN leaderboard nvfp4_gemv\n#!POPCORN gpu NVIDIA\n"
BODY = "def custom_kernel(data):\n    return data[-1]\n"
WORD = harness.FORBIDDEN_WORD  # the word the server rejects, spelled once, in eval.py


def _static(tmp_path, content) -> list[str]:
    path = tmp_path / "submission.py"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return harness.static_problems(path)


@pytest.mark.parametrize("content, expected", [
    (HEADERS + BODY + f"# one {WORD} per call\n", ["line 5 contains the word"]),
    (HEADERS + f"x = 1  # {WORD.upper()}\n" + BODY, ["line 3 contains the word"]),
    (HEADERS + f"{WORD[0].upper()}{WORD[1:3]}{WORD[3:].upper()}s = None\n" + BODY, ["line 3 contains the word"]),
    (f'"""A doc{WORD}ing string."""\n' + HEADERS + BODY, ["line 1 contains the word"]),
    (BODY + f"# {WORD}\n", ["line 3 contains the word"]),
    (HEADERS + BODY + "#" * (harness.MAX_SUBMISSION_BYTES + 1) + "\n",
     ["bytes; the server rejects files over 1,000,000 bytes"]),
    ("", ["the file is empty"]),
    (HEADERS.encode() + b"# caf\xe9\n" + BODY.encode(), ["the file is not UTF-8"]),
], ids=["word in a comment", "upper case", "mixed case", "word inside a word", "no headers, the word",
        "over 1 MB", "empty", "not UTF-8"])
def test_static_problems_one_line_per_broken_rule(tmp_path, content, expected):
    """The server's upload rules (gpu-mode/kernelbot api_utils.py at 01a0072): one line per
    rule broken, each naming it; the header lines are none of them."""
    problems = _static(tmp_path, content)
    assert len(problems) == len(expected), problems
    for problem, words in zip(problems, expected, strict=True):
        assert words in problem and "\n" not in problem


@pytest.mark.parametrize("content, missing", [
    (HEADERS + BODY, []),
    ("#!POPCORN gpu NVIDIA\n" + BODY, ["--leaderboard nvfp4_gemv"]),
    ("#!POPCORN leaderboard nvfp4_gemv\n" + BODY, ["--gpu NVIDIA"]),
    (BODY, ["--leaderboard nvfp4_gemv", "--gpu NVIDIA"]),
], ids=["both", "no leaderboard header", "no gpu header", "none"])
def test_header_warnings_name_the_command_line_option_instead(tmp_path, content, missing):
    """popcorn-cli's header lines: missing ones are warnings (the server never reads them), each
    naming the popcorn-cli option that replaces it; never a static problem."""
    assert _static(tmp_path, content) == []
    warnings = harness.header_warnings(tmp_path / "submission.py")
    assert len(warnings) == len(missing)
    for warning, option in zip(warnings, missing, strict=True):
        assert option in warning and "\n" not in warning


def test_static_problems_accept_a_good_file_at_the_size_limit(tmp_path):
    content = HEADERS + BODY
    assert _static(tmp_path, content + "#" * (harness.MAX_SUBMISSION_BYTES - len(content) - 1) + "\n") == []


def test_the_kit_and_its_fixture_submissions_pass_the_upload_rules():
    """submission.py and every fixture run as a submission (tests/fixtures/*.py) would be
    accepted by the server: headers on top, no forbidden word, small."""
    root = Path(ev.__file__).parent
    paths = [root / "submission.py", *sorted((root / "tests" / "fixtures").glob("*.py"))]
    assert len(paths) > 5
    assert {str(p.relative_to(root)): harness.static_problems(p) for p in paths} == \
        {str(p.relative_to(root)): [] for p in paths}


def test_harness_never_spells_the_forbidden_word():
    """harness.py keeps the word the server refuses out of its text (it spells it in parts and
    builds torch's names that hold it), so that the file would pass the upload rule too."""
    text = Path(harness.__file__).read_text(encoding="utf-8").lower()
    assert WORD not in text


def test_human_mode_refuses_what_the_server_refuses(tmp_path, capsys):
    """Before any case: one ``error:`` line per broken rule, naming the file; exit 112."""
    path = tmp_path / "mine.py"
    path.write_text(BODY + "x = 1\n" * harness.MAX_SUBMISSION_BYTES + f"# a {WORD.title()} of launches\n")
    assert ev.human_main(["--submission", str(path)]) == harness.EXIT_FAIL == 112
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert captured.out == "" and len(lines) == 2, captured.err
    assert all(line.startswith(f"error: {path}: ") and line.endswith("; no case ran") for line in lines)
    assert "bytes; the server rejects" in lines[0] and "contains the word" in lines[1]


# --------------------------------------------------------------------------- the backend a submission picks


def _registry(supported, select=None):
    """A submission with the kit's registry convention: BACKENDS (records with ``supported``) and select_backend."""
    import types
    backends = {"torch": types.SimpleNamespace(supported=lambda device: (True, "")),
                "mine": types.SimpleNamespace(supported=supported)}
    return types.SimpleNamespace(BACKENDS=backends, select_backend=select or (lambda device: "torch"))


def _raise(exc):
    raise exc


CONTRACT = "not the (ok, reason) pair the registry expects, e.g. (True, '') or (False, 'needs a CUDA GPU')"


@pytest.mark.parametrize("module, status, words", [
    (_registry(lambda device: (False, "needs a GPU")), "ok", "torch"),
    (_registry(lambda device: True), "broken", f"backend 'mine': supported(device) gave True, {CONTRACT}"),
    (_registry(lambda device: "yes"), "broken", f"backend 'mine': supported(device) gave 'yes', {CONTRACT}"),
    (_registry(lambda device: (True,)), "broken", f"backend 'mine': supported(device) gave (True,), {CONTRACT}"),
    (_registry(lambda device: _raise(KeyError("cc"))), "broken",
     f"backend 'mine': supported(device) gave an exception (KeyError: 'cc'), {CONTRACT}"),
    (_registry(lambda device: (True, ""), lambda device: _raise(RuntimeError("no GPU here"))), "cannot run",
     "RuntimeError: no GPU here"),
    (_registry(lambda device: (True, ""), lambda device: _raise(ValueError("NVFP4_GEMV_BACKEND='x'"))),
     "invalid setting", "NVFP4_GEMV_BACKEND='x'"),
    (_registry(lambda device: (True, ""), lambda device: _raise(TypeError("cannot unpack non-iterable bool"))),
     "broken", "select_backend(device) raised TypeError: cannot unpack non-iterable bool"),
], ids=["a pair", "a bare bool", "a string", "a 1-tuple", "raises", "select: RuntimeError", "select: ValueError",
        "select: TypeError"])
def test_a_backend_breaking_the_supported_contract_is_the_submissions_fault(monkeypatch, module, status, words):
    """select_backend's RuntimeError is the machine's (cannot run), its ValueError a setting's; a
    backend of the registry whose supported(device) is no (ok, reason) pair, or a select_backend
    raising anything else, is the submission's fault ("broken"), named with the contract."""
    monkeypatch.setattr(harness, "_submission", lambda: module)
    got_status, got = harness._backend_here()
    assert (got_status, got.split(" (docs/submission.md")[0]) == (status, words)
    if status == "broken" and "supported" in words:
        assert got.endswith('(docs/submission.md, "Extending it")')


# --------------------------------------------------------------------------- a submission without custom_kernel


NO_KERNEL = "the submission defines no custom_kernel: the harness calls custom_kernel(data) with each case's inputs"


@pytest.mark.parametrize("module, words", [
    ({"kernel": lambda data: data[-1]}, NO_KERNEL),
    ({"custom_kernel": 3}, "the submission's custom_kernel is not a function (type int)"),
], ids=["none", "not a function"])
def test_a_missing_custom_kernel_is_named_not_called_an_import_failure(monkeypatch, capsys, module, words):
    """Every mode's case (protocol mode's too) fails with one line naming custom_kernel; the
    module imported, so nothing says the import raised, and no traceback is printed."""
    import types
    monkeypatch.setitem(sys.modules, "submission", types.SimpleNamespace(**module))
    monkeypatch.setitem(harness._worker_config, "submission", None)
    case = {"m": 128, "k": 256, "l": 1, "seed": 1}
    assert harness.submission_import_problem() == words
    assert harness._run_test_case(case) == (False, words)
    assert harness.run_benchmark_case(case, False, 1, 1e9) == words
    assert harness._run_profile_case(case) == (False, words)
    assert capsys.readouterr().err == ""


def test_human_mode_stops_in_one_line_without_custom_kernel(tmp_path, capfd):
    """Before any case: one error line naming the file and custom_kernel, exit 112; no case runs
    (not nine identical FAIL lines saying the import raised)."""
    path = tmp_path / "no_entry.py"
    path.write_text(HEADERS + "def kernel(data):\n    return data[-1]\n")
    assert ev.human_main([str(path)]) == harness.EXIT_FAIL
    out, err = capfd.readouterr()
    assert out == "" and err.splitlines() == [f"error: {path}: {NO_KERNEL}; no case ran"], err


# --------------------------------------------------------------------------- labelled mismatches


def test_human_mode_labels_the_servers_mismatch_numbers():
    """utils.verbose_allclose's lines (the server's format: result, then expected) get their
    names; NaN and infinities too; other text is left as it is."""
    import torch

    from utils import verbose_allclose
    got = torch.tensor([-0.63330078125, float("nan"), 3.0, float("-inf")], dtype=torch.float16)
    want = torch.tensor([100.5, 1.0, 3.0, 2.0], dtype=torch.float16)
    server = "mismatch found! " + " ".join(verbose_allclose(got, want))
    assert "ERROR at (0,): -0.63330078125 100.5 " in server  # the server's format, unlabelled
    assert harness.labelled(server) == ("mismatch found! Number of mismatched elements: 3 of 4 "
                                        "ERROR at (0,): result -0.63330078125, expected 100.5 "
                                        "ERROR at (1,): result nan, expected 1.0 "
                                        "ERROR at (3,): result -inf, expected 2.0")
    audit = "; ".join(verbose_allclose(got, want, max_print=1))  # the audit's and ab's joining
    assert harness.labelled(audit) == ("Number of mismatched elements: 3 of 4; ERROR at (0,): result -0.63330078125, "
                                       "expected 100.5; ... and 2 more mismatched elements.")
    for other in ("SIZE MISMATCH: received shape (2,), expected (3,)", "ERROR at (0,): tensor(1.) x", ""):
        assert harness.labelled(other) == other


def test_the_table_holds_a_mismatch_briefly_with_its_hint():
    """A table row gets a mismatch as its count and first element (labelled), the hint's first
    clause kept; other failures as they are."""
    import torch

    from utils import verbose_allclose
    got = torch.tensor([5.0, 1.0, 3.0, 7.0, 9.0, 11.0, 13.0], dtype=torch.float16)
    want = torch.zeros(7, dtype=torch.float16)
    text = "mismatch found! custom implementation doesn't match reference: " + " ".join(verbose_allclose(got, want))
    assert len(text) > 250 and "... and 2 more mismatched elements." in text
    first = "the first at (0,): result 5.0, expected 0.0"
    assert harness.brief(text) == harness.brief(harness.labelled(text)) == f"mismatch: 7 of 7 elements differ, {first}"
    hinted = text + harness.HINT_MARK + "the output is c as it came: write into c."
    hint = f"{harness.HINT_MARK}the output is c as it came"
    assert harness.brief(hinted) == f"mismatch: 7 of 7 elements differ, {first}.{hint}"
    for other in ("custom_kernel raised ValueError: no", "not run: a case before it ran past --timeout 5 s"):
        assert harness.brief(other) == other


@pytest.mark.parametrize("given, hinted", [("mine.py", True), (None, False)], ids=["human mode", "protocol mode"])
def test_an_output_that_is_c_untouched_gets_a_hint_for_a_person(monkeypatch, given, hinted):
    """custom_kernel returning c as handed over fails with the server's text, plus (for a file
    given to human mode, the audit or ab: not in protocol mode, which logs the server's text) a
    hint saying that c came back unwritten; a wrong output that is not c gets no hint."""
    import types
    monkeypatch.setitem(harness._worker_config, "submission", given)
    case = {"m": 128, "k": 256, "l": 1, "seed": 1}
    monkeypatch.setitem(sys.modules, "submission", types.SimpleNamespace(custom_kernel=lambda data: data[-1]))
    ok, message = harness._run_test_case(case)
    assert not ok and message.startswith("mismatch found!")
    assert (harness.HINT_MARK + "the output is c exactly as the harness handed it over" in message) is hinted
    monkeypatch.setitem(sys.modules, "submission", types.SimpleNamespace(custom_kernel=lambda data: data[-1] * 0 + 1))
    ok, message = harness._run_test_case(case)
    assert not ok and "mismatch found!" in message and harness.HINT_MARK not in message


# --------------------------------------------------------------------------- parser


def test_parser_reads_keys_and_converts_integers():
    cases = harness.parse_test_cases("m: 128; k: 256; l: 1; seed: 1111\n  m:7168 ;k: 16384;l: 1; seed: -5\n")
    assert [c.args for c in cases] == [{"m": 128, "k": 256, "l": 1, "seed": 1111},
                                       {"m": 7168, "k": 16384, "l": 1, "seed": -5}]
    assert cases[0].spec == "m: 128; k: 256; l: 1; seed: 1111"  # the spec is the line verbatim


def test_parser_keeps_alphabetic_values_as_strings():
    (case,) = harness.parse_test_cases("m: 128; mode: fast")
    assert case.args == {"m": 128, "mode": "fast"}


@pytest.mark.parametrize("line, reason", [
    ("m: 128; k: 256;", "nothing there"),                                     # empty part after the last ';'
    ("m 128", "no ':' (expected key: value)"),                                # no colon
    ("m: 12.5", "the value '12.5' is neither an integer nor a word"),         # not an integer
    ("m: 128.5", "the value '128.5' is neither an integer nor a word"),
    ("m: full-range", "the value 'full-range' is neither an integer nor a word"),  # '-' is not alphabetic
    ("m1: 128", "the key 'm1' is not letters only"),                          # digits in a key
    ("", "nothing there (a blank line"),                                      # a blank line is not a case
], ids=["trailing ;", "no colon", "decimal", "decimal 128.5", "dash", "digit in key", "blank line"])
def test_parser_rejects_bad_lines(line, reason):
    """Each rejected line says why, in one line."""
    with pytest.raises(harness.TestFileError, match="^line 2: invalid test case") as info:
        harness.parse_test_cases(f"m: 128; k: 256; l: 1; seed: 1\n{line}\n")
    assert str(info.value).endswith(reason) or reason in str(info.value).rsplit("': ", 1)[-1], str(info.value)
    assert "\n" not in str(info.value)


# --------------------------------------------------------------------------- shapes for the human mode


@pytest.mark.parametrize("text, error", [
    ("", "holds no test cases"),
    ("m: 128; k: 256; l: 1; seed: 1\nm: 100; k: 256; l: 1; seed: 1\n",
     "line 2: m must be a positive multiple of 128, got 100: 'm: 100; k: 256; l: 1; seed: 1'"),
    ("m: 0; k: 256; l: 1; seed: 1", "line 1: m must be a positive multiple of 128, got 0"),
    ("m: 128; k: 224; l: 1; seed: 1", "line 1: k must be a positive multiple of 64, got 224"),
    ("m: 128; k: 256; l: 0; seed: 1", "line 1: l must be >= 1, got 0"),
    ("m: 128; k: 256; l: 1; seed: abc", "line 1: seed must be an integer, got 'abc'"),
    ("m: abc; k: 256; l: 1; seed: 1", "line 1: m must be an integer, got 'abc'"),
    ("m: 128; k: 256; l: 1", "line 1: a case has exactly the keys m, k, l, seed; missing seed"),
    ("m: 128; k: 256; l: 1; seed: 1; n: 2", "line 1: a case has exactly the keys m, k, l, seed; unknown n"),
    ("m: 128; k: 256; l: 1; seed: 1\n\nm: 128; k: 256; l: 1; seed: 2", "line 2: invalid test case"),
])
def test_test_file_is_checked_before_any_case(tmp_path, text, error):
    """Human mode reads a shapes file whole, first: an empty file, a case the problem cannot
    have, or a line that does not parse is an error naming the file and the line."""
    path = tmp_path / "shapes.txt"
    path.write_text(text)
    with pytest.raises(harness.TestFileError) as info:
        harness.read_test_file(path)
    assert str(info.value).startswith(f"{path}")
    assert error in str(info.value)


def test_test_file_that_is_a_directory(tmp_path):
    with pytest.raises(harness.TestFileError, match="is a directory, not a test file"):
        harness.read_test_file(tmp_path)


def test_shapes_names_and_files(tmp_path):
    """--shapes: the named sets win over a file or directory of that name (the repository has a
    tests/ directory); anything else must be an existing file."""
    tests = harness.load_shapes()["tests"]
    assert [c.args for c in harness.shape_cases("tests", "benchmark")] == [
        {k: t[k] for k in harness.CASE_KEYS} for t in tests]
    assert len(harness.shape_cases(None, "test")) == len(tests)  # the default of test mode
    assert len(harness.shape_cases(None, "leaderboard")) == len(harness.load_shapes()["benchmarks"])
    with pytest.raises(harness.TestFileError, match="neither a shape set"):
        harness.shape_cases("official", "test")
    good = tmp_path / "one.txt"
    good.write_text("m: 256; k: 512; l: 3; seed: 7\n")
    assert [c.args for c in harness.shape_cases(str(good), "test")] == [{"m": 256, "k": 512, "l": 3, "seed": 7}]


def test_shape_sets_are_one_vocabulary():
    """The named sets of shapes.json are the same words in eval.py, benchmarks/compare.py and
    benchmarks/bench_kernel.py."""
    from benchmarks import bench_kernel, compare
    shapes = harness.load_shapes()
    assert harness.SHAPE_SETS == ("tests", "benchmarks", "all")
    assert harness.shape_set("tests") == shapes["tests"] and harness.shape_set("benchmarks") == shapes["benchmarks"]
    assert len(harness.shape_set("all")) == len(shapes["tests"]) + len(shapes["benchmarks"])
    assert compare.parse_args(["--shapes", "tests"]).shapes == "tests"
    assert bench_kernel.parse_args(["--shapes", "tests"]).shapes == "tests"
    for parse in (compare.parse_args, bench_kernel.parse_args):
        with pytest.raises(SystemExit):
            parse(["--shapes", "official"])


def test_secret_seed_combines_every_case_seed():
    text = "m: 128; k: 256; l: 1; seed: 1111\nm: 128; k: 256; l: 2\n"
    cases = harness.parse_test_cases(text, secret_seed=98765)
    a, b = 1111, 98765
    assert cases[0].args["seed"] == a + (a + b) * (a + b + 1) // 2
    assert "seed" not in cases[1].args  # no seed, nothing to combine
    assert harness.parse_test_cases(text)[0].args["seed"] == 1111  # without a secret: unchanged


def test_combine_seeds_values():
    assert harness.combine_seeds(0, 0) == 0
    assert harness.combine_seeds(1, 2) == 1 + 3 * 4 // 2
    # distinct pairs give distinct seeds (Cantor pairing is a bijection)
    seen = {harness.combine_seeds(a, b) for a in range(40) for b in range(40)}
    assert len(seen) == 1600


def test_spec_line_round_trips_through_the_parser():
    case = {"m": 4096, "k": 7168, "l": 8, "seed": 1111, "sol_us": 17.275}
    assert harness.spec_line(case) == "m: 4096; k: 7168; l: 8; seed: 1111"
    (parsed,) = harness.parse_test_cases(harness.spec_line(case))
    assert parsed.args == {"m": 4096, "k": 7168, "l": 8, "seed": 1111}


def test_shapes_json_parses_as_test_files():
    shapes = harness.load_shapes()
    for key in ("tests", "benchmarks"):
        cases = harness.parse_test_cases(harness.test_file_text(shapes[key]))
        assert [c.args["m"] for c in cases] == [s["m"] for s in shapes[key]]


# --------------------------------------------------------------------------- statistics


def test_stats_mean_sample_std_err_best_worst():
    d = [10.0, 12.0, 14.0, 20.0]
    s = harness.calculate_stats(d)
    assert s.runs == 4 and s.mean == 14.0 and s.best == 10.0 and s.worst == 20.0
    assert s.std == pytest.approx(statistics.stdev(d))  # n - 1 denominator
    assert s.err == pytest.approx(statistics.stdev(d) / 2.0)


def test_stats_single_run_has_zero_spread():
    s = harness.calculate_stats([5.0])
    assert (s.runs, s.mean, s.std, s.err) == (1, 5.0, 0.0, 0.0)


def test_stopping_rule():
    steady = [1000.0] * 3  # err == 0: converged
    assert not harness.should_stop(steady[:2], 1e9, 1e12)  # fewer than three repeats
    assert not harness.should_stop(steady, harness.MIN_WALL_NS, 1e12)  # not yet past 100 ms
    assert harness.should_stop(steady, harness.MIN_WALL_NS + 1, 1e12)  # converged after 100 ms
    noisy = [1000.0, 3000.0, 2000.0]  # err / mean ~ 0.29: not converged
    assert not harness.should_stop(noisy, 2e8, 1e12)
    assert harness.should_stop(noisy, 2e8, 5000.0)  # mean x runs = 6000 ns > budget
    assert harness.should_stop(noisy, harness.MAX_WALL_NS + 1, 1e12)  # wall-clock cap


def test_loop_constants_match_the_server():
    assert harness.BENCH_WARMUP == (200, 1e8) and harness.BENCH_CASE == (200, 10e9)
    assert harness.LEADERBOARD_WARMUP == (1000, 5e8) and harness.LEADERBOARD_CASE == (1000, 30e9)
    # gpu-mode/reference-kernels problems/nvidia/eval.py at baaabf4 (the leaderboard's own run) and
    # at aaf640d..f83cb92: warm-up of tests[0], then per case (repeats, ns budget)
    assert harness.LEADERBOARD_REPEATS == {"2025-11-11": ((200, 1e7), (200, 30e9)),
                                      "2026-01-13": ((1000, 5e8), (1000, 30e9))}
    assert harness.HARNESS_DATE == "2026-01-13"
    assert (harness.MIN_WALL_NS, harness.MAX_WALL_NS, harness.REL_ERR_TARGET, harness.RECHECK_SEED_STEP) == \
        (1e8, 120e9, 1e-3, 13)


def test_geomean():
    assert harness.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert harness.geomean([3.0]) == pytest.approx(3.0)
    assert harness.geomean([1.0, 10.0, 100.0]) == pytest.approx(10.0)
    assert harness.geomean([]) is None
    assert harness.geomean([1.0, None]) is None  # a failed case has no score
    assert harness.geomean([1.0, 0.0]) is None


# --------------------------------------------------------------------------- popcorn lines


def test_parse_popcorn_splits_at_the_first_colon_space():
    text = "test-count: 1\ntest.0.spec: m: 128; k: 256\ntest.0.error: a: b: c\ncheck: fail\n"
    lines = harness.parse_popcorn(text)
    assert lines == {"test-count": "1", "test.0.spec": "m: 128; k: 256",
                     "test.0.error": "a: b: c", "check": "fail"}


def test_results_from_popcorn_timed_and_failed():
    lines = harness.parse_popcorn(
        "benchmark-count: 2\n"
        "benchmark.0.spec: m: 7168; k: 16384; l: 1; seed: 1111\n"
        "benchmark.0.runs: 10\nbenchmark.0.mean: 20000.0\nbenchmark.0.std: 10.0\n"
        "benchmark.0.err: 3.0\nbenchmark.0.best: 19000.0\nbenchmark.0.worst: 25000.0\n"
        "benchmark.0.median: 19500.0\n"
        "benchmark.1.spec: m: 4096; k: 7168; l: 8; seed: 1111\n"
        "benchmark.1.status: fail\nbenchmark.1.error: boom\ncheck: fail\n")
    res = harness.results_from_popcorn(lines, "benchmark")
    assert [r.ok for r in res] == [True, False]
    assert res[0].args == {"m": 7168, "k": 16384, "l": 1, "seed": 1111}
    assert res[1].error == "boom"
    summary = harness.summarize("benchmark", res)
    row = summary["cases"][0]
    assert row["mean_us"] == 20.0 and row["median_us"] == 19.5 and row["sol_us"] == 8.622
    assert row["pct_of_sol"] == pytest.approx(100 * 8.622 / 20.0)
    assert summary["geomean_mean_us"] is None  # one case failed: no score


# --------------------------------------------------------------------------- tables


def _timed(spec, durations):
    (case,) = harness.parse_test_cases(spec)
    return harness.CaseResult(spec, case.args, True, durations=durations)


def test_summary_and_table_of_a_timed_mode():
    res = [_timed("m: 7168; k: 16384; l: 1; seed: 1111", [10e3, 20e3, 30e3, 40e3]),
           _timed("m: 128; k: 256; l: 1; seed: 1", [1e3, 1e3, 4e3])]
    s = harness.summarize("leaderboard", res)
    a, b = s["cases"]
    assert (a["runs"], a["mean_us"], a["median_us"], a["best_us"], a["worst_us"]) == (4, 25.0, 25.0, 10.0, 40.0)
    assert a["sol_us"] == 8.622 and b["sol_us"] is None and b["pct_of_sol"] is None
    assert s["geomean_mean_us"] == pytest.approx(math.sqrt(25.0 * 2.0))
    assert s["geomean_median_us"] == pytest.approx(math.sqrt(25.0 * 1.0))
    table = harness.format_table(s, "NVIDIA H100 80GB HBM3")
    assert table.startswith("leaderboard: NVIDIA H100 80GB HBM3")
    assert "% of SOL   <- SOL: official B200 figures; this GPU is not a B200" in table  # said by the column
    assert "34.5%" in table  # 8.622 / 25
    assert "geomean of means:   7.071 µs" in table and "leaderboard: PASS" in table
    b200 = harness.format_table(s, "NVIDIA B200")
    assert "not a B200" not in b200


def test_table_shows_failures():
    res = [harness.CaseResult("m: 128; k: 256; l: 1; seed: 1", {"m": 128, "k": 256, "l": 1, "seed": 1},
                         False, error="mismatch found!")]
    table = harness.format_table(harness.summarize("benchmark", res), "NVIDIA B200")
    assert "FAIL: mismatch found!" in table and "benchmark: FAIL" in table
    table = harness.format_table(harness.summarize("test", res), "cpu")
    assert "FAIL: mismatch found!" in table and "test: FAIL" in table


# --------------------------------------------------------------------------- protocol exits


def test_protocol_exit_codes(tmp_path, monkeypatch):
    monkeypatch.delenv("POPCORN_FD", raising=False)
    assert ev.protocol_main(["test", "x.txt"]) == harness.EXIT_NO_FD == 111
    assert ev.main(["test", "x.txt"]) == 111  # positional mode without POPCORN_FD: not human mode
    monkeypatch.setenv("POPCORN_FD", "99")  # never opened: every case below returns first
    assert ev.protocol_main(["test"]) == harness.EXIT_USAGE == 2
    assert ev.protocol_main(["bogus", "x.txt"]) == 2
    assert ev.protocol_main(["test", str(tmp_path / "missing.txt")]) == harness.EXIT_BAD_TESTS == 113
    bad = tmp_path / "bad.txt"
    bad.write_text("m: 128; k 256\n")
    assert ev.protocol_main(["test", str(bad)]) == 113
    good = tmp_path / "good.txt"
    good.write_text("m: 128; k: 256; l: 1; seed: 1\n")
    monkeypatch.setenv(harness.ENV_DISTRIBUTION, "no-such-distribution")
    assert ev.protocol_main(["test", str(good)]) == 2


def test_official_distribution_needs_no_quant_module(monkeypatch):
    """Beside the server's own reference.py (no quant.py, no nvfp4.py) the official inputs still
    work; any other distribution says what it needs."""
    monkeypatch.setitem(sys.modules, "quant", None)  # import quant now raises ImportError
    assert ev._distribution_from("official") == "official"
    with pytest.raises(ValueError, match="need the kit's quant.py"):
        ev._distribution_from("gaussian")


def test_distribution_names_come_from_quant():
    import quant
    assert [ev._distribution_from(name) for name in quant.DISTRIBUTIONS] == list(quant.DISTRIBUTIONS)
    with pytest.raises(ValueError, match="unknown distribution 'nope'; choose from official, full-range"):
        ev._distribution_from("nope")


def test_protocol_usage_errors_say_one_line(tmp_path, monkeypatch, capsys):
    """A missing test-file argument and a POPCORN_FD that is no open descriptor: one line on
    stderr each (exit 2, and exit 1 as the server's traceback gives), no traceback."""
    monkeypatch.setenv("POPCORN_FD", "987")  # never opened
    assert ev.main(["test"]) == harness.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("usage: POPCORN_FD=<fd> python3 eval.py test|benchmark")
    good = tmp_path / "good.txt"
    good.write_text("m: 128; k: 256; l: 1; seed: 1\n")
    for fd in ("987", "three"):
        monkeypatch.setenv("POPCORN_FD", fd)
        assert ev.main(["test", str(good)]) == harness.EXIT_BAD_FD == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"POPCORN_FD={fd} is not an open file descriptor")


@pytest.mark.parametrize("text, error", [
    ("", "holds no test cases"),
    ("m: abc; k: 256; l: 1; seed: 1\n", "line 1: m must be an integer, got 'abc'"),
    ("m: 128.5; k: 256; l: 1; seed: 1\n", "the value '128.5' is neither an integer nor a word"),
    ("m: 100; k: 256; l: 1; seed: 1\n", "line 1: m must be a positive multiple of 128, got 100"),
], ids=["empty", "m: abc", "m: 128.5", "m: 100"])
def test_protocol_checks_the_test_file_before_any_case(tmp_path, monkeypatch, capsys, text, error):
    """What human mode refuses, protocol mode refuses too, before anything runs: exit 113 and
    one line naming the file and the line (an empty file once gave check: pass; m: abc a
    TypeError inside every case)."""
    monkeypatch.setenv("POPCORN_FD", "99")  # never opened: the test file is checked before
    path = tmp_path / "tests.txt"
    path.write_text(text)
    assert ev.main(["test", str(path)]) == harness.EXIT_BAD_TESTS
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(str(path)) and error in err, err


def test_protocol_secret_seed_must_be_an_integer(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("POPCORN_FD", "99")
    monkeypatch.setenv("POPCORN_SEED", "abc")
    good = tmp_path / "good.txt"
    good.write_text("m: 128; k: 256; l: 1; seed: 1\n")
    assert ev.main(["test", str(good)]) == harness.EXIT_USAGE
    assert capsys.readouterr().err == "POPCORN_SEED must be an integer, got 'abc'\n"


@pytest.mark.parametrize("argv", [["--mode", "test"], ["--help"], ["--submission", "x.py", "--mode", "test"]],
                         ids=["--mode test", "--help", "--submission"])
def test_protocol_mode_says_popcorn_fd_selected_it(monkeypatch, capsys, argv):
    """Human-mode options with POPCORN_FD still exported: one line saying that POPCORN_FD picks
    protocol mode, and how to reach the human mode (not "unknown mode '--mode'")."""
    monkeypatch.setenv("POPCORN_FD", "99")
    assert ev.main(argv) == harness.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("POPCORN_FD is set, which selects protocol mode"), err
    assert f"python3 eval.py human {' '.join(argv)}" in err


def test_protocol_unsets_the_secret_seed(tmp_path, monkeypatch):
    monkeypatch.setenv("POPCORN_FD", "99")
    monkeypatch.setenv("POPCORN_SEED", "123")
    assert ev.protocol_main(["test", str(tmp_path / "missing.txt")]) == 113
    import os
    assert "POPCORN_SEED" not in os.environ


# --------------------------------------------------------------------------- human mode helpers


def test_worker_heartbeat(monkeypatch):
    """A call that runs longer than HEARTBEAT_S reports every HEARTBEAT_S seconds (human mode
    prints "still running"); a short one does not."""
    import time
    monkeypatch.setattr(harness, "HEARTBEAT_S", 0.25)
    beats = []
    with harness.Worker(None, "official", True, heartbeat=beats.append) as worker:
        worker.call(time.sleep, 0.0)  # the worker process starts here
        beats.clear()
        worker.call(time.sleep, 1.2)
    assert len(beats) >= 3 and beats == sorted(beats) and beats[0] >= 0.25


def test_the_heartbeat_names_the_limit_and_how_to_stop():
    line = ev.heartbeat_line(20.4, 600)
    assert line.startswith("    ... still running (20 s of at most 600 s") and "--timeout" in line and "Ctrl-C" in line


def test_sigterm_raises_terminated_in_the_block_and_the_handler_comes_back():
    import signal
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(harness.Terminated), harness.sigterm_raises():
        os.kill(os.getpid(), signal.SIGTERM)
        __import__("time").sleep(5)  # not reached: the handler runs as os.kill returns
    assert signal.getsignal(signal.SIGTERM) is before


def test_worker_start_spawns_its_process_in_the_callers_order():
    """A worker's process is spawned by its first call; start() makes that call, so processes
    start in the order their workers are started (ab alternates it from worker set to set): each
    start() runs in a process of its own, and a second start() finds the same process."""
    import os
    with harness.Worker(None, "official", True) as second, harness.Worker(None, "official", True) as first:
        a = first.start()
        b = second.start()
        assert a != os.getpid() and b not in (a, os.getpid())
        assert first.start() == a and second.call(os.getpid) == b


def test_worker_timeout_kills_the_call_and_starts_afresh(monkeypatch):
    """A call past the timeout fails (WorkerDied naming the limit) within about the limit, and
    the next call runs in a fresh worker."""
    import os
    import time
    with harness.Worker(None, "official", True, timeout=1.5) as worker:
        first = worker.call(os.getpid)
        t0 = time.monotonic()
        with pytest.raises(harness.WorkerDied, match="ran longer than 1.5 s"):
            worker.call(time.sleep, 60)
        assert time.monotonic() - t0 < 20
        assert worker.call(os.getpid) != first


def test_a_worker_that_stops_after_a_timeout_runs_nothing_more():
    """Human mode's worker: after a call ran past the timeout, each later call fails at once,
    naming the timeout, without a process (one hang costs one timeout, not one per case)."""
    import time
    with harness.Worker(None, "official", True, timeout=1.5, stop_after_timeout=True) as worker:
        worker.call(os.getpid)
        with pytest.raises(harness.WorkerDied, match="ran longer than 1.5 s"):
            worker.call(time.sleep, 60)
        assert worker.stopped == "a case before it ran past --timeout 1.5 s"
        t0 = time.monotonic()
        for _ in range(3):
            with pytest.raises(harness.WorkerDied, match="^not run: a case before it ran past --timeout 1.5 s$"):
                worker.call(os.getpid)
        assert time.monotonic() - t0 < 1 and worker._pool is None


def test_backend_picks_and_label(monkeypatch):
    """The per-shape choice cache of a submission (``_FASTEST``: keys ending in m, k, l) is
    reported; a submission without one reports nothing; the label names what ran."""
    import types
    fake = types.SimpleNamespace(_FASTEST={("cuda:0", 7168, 16384, 1): "scaled_mm",
                                           ("cuda:0", 4096, 7168, 8): "triton"})
    monkeypatch.setitem(__import__("sys").modules, "submission", fake)
    picks = harness.backend_picks()
    assert picks == {"7168x16384x1": "scaled_mm", "4096x7168x8": "triton"}
    assert ev._backend_label({"backend": "fastest", "backend_picks": picks}) == \
        "fastest (7168x16384x1: scaled_mm, 4096x7168x8: triton)"
    assert ev._backend_label({"backend": "triton"}) == "triton"
    assert ev._backend_label({"backend": None}) == ""
    monkeypatch.setitem(__import__("sys").modules, "submission", types.SimpleNamespace())
    assert harness.backend_picks() == {}


def test_table_names_the_backend():
    res = [harness.CaseResult("m: 128; k: 256; l: 1; seed: 1", {"m": 128, "k": 256, "l": 1, "seed": 1}, True)]
    table = harness.format_table(harness.summarize("test", res), "cpu (no CUDA)", "torch")
    assert table.splitlines()[0] == "test: cpu (no CUDA), backend torch"


class _RecordingWorker:
    """Stands in for harness.Worker: records each call's case and (repeats, budget), returns 3 durations."""

    def __init__(self):
        self.calls = []

    def call(self, fn, args, recheck, repeats, budget):
        self.calls.append((args["m"], recheck, repeats, budget))
        return [1000.0, 1000.0, 1000.0]


@pytest.mark.parametrize("date", sorted(harness.LEADERBOARD_REPEATS))
@pytest.mark.parametrize("leaderboard", [False, True], ids=["benchmark", "leaderboard"])
def test_timed_modes_warm_up_on_the_first_case_only_with_the_dated_repeats(date, leaderboard):
    """As the server's eval.py (every revision of problems/nvidia/eval.py): one warm-up call of
    run_single_benchmark on tests[0], then each case, rechecked only in leaderboard mode; the
    repeats and budgets of the harness date picked."""
    tests = [harness.TestCase({"m": m, "k": 256, "l": 1, "seed": 1}, f"m: {m}") for m in (128, 256, 384)]
    worker = _RecordingWorker()
    lines = []
    results = harness.run_timed_mode(lambda k, v: lines.append(k), worker, tests, leaderboard, harness_date=date)
    warm, per_case = harness.LEADERBOARD_REPEATS[date] if leaderboard else (harness.BENCH_WARMUP, harness.BENCH_CASE)
    assert worker.calls == [(128, False, *warm)] + [(m, leaderboard, *per_case) for m in (128, 256, 384)]
    assert all(r.ok for r in results) and lines[-1] == "check"


def test_an_unknown_harness_date_is_one_line(tmp_path):
    with pytest.raises(ValueError, match="unknown harness date '2025-12'; choose from 2025-11-11, 2026-01-13"):
        ev._harness_date_from("2025-12")
    assert ev._harness_date_from(None) == harness.HARNESS_DATE


def test_distribution_names_are_read_without_importing_quant(monkeypatch):
    """Where quant is not imported yet, harness.distributions() reads the names from quant.py's
    source (importing it would import torch): the same names, in the same order."""
    import quant
    monkeypatch.delitem(sys.modules, "quant")
    assert harness.distributions() == tuple(quant.DISTRIBUTIONS)
    assert "quant" not in sys.modules


# What eval.py's own process does on a machine without a CUDA driver: each prints whether torch
# got imported there (the cases' worker imports it; the process that parses, checks and prints
# needs it only to ask a driver about the GPU).
_TORCH_FREE_RUNS = {
    "--help": ["--help"],
    "test mode": ["--shapes", "tests/fixtures/tiny_one.txt"],
    "benchmark refused": ["--mode", "benchmark", "--shapes", "tests/fixtures/tiny_one.txt"],
    "profile refused": ["profile"],
    "protocol test mode": ["test", "tests/fixtures/tiny_one.txt"],
}


@pytest.mark.skipif(not harness.no_cuda_driver(), reason="a CUDA driver is present: eval.py asks torch about the GPU")
@pytest.mark.parametrize("argv", _TORCH_FREE_RUNS.values(), ids=_TORCH_FREE_RUNS.keys())
def test_without_a_cuda_driver_eval_py_itself_imports_no_torch(argv, tmp_path):
    """eval.py's own process stays at a fraction of a second: about 2 s of CPU per run (import
    torch) saved, the worker that runs the cases aside."""
    code = ("import runpy, sys, os\n"
            "sys.argv = ['eval.py', *sys.argv[1:]]\n"
            "try:\n    runpy.run_path('eval.py', run_name='__main__')\n"
            "finally:\n    print('torch imported:', 'torch' in sys.modules, file=sys.__stderr__)\n")
    env = {**os.environ, "POPCORN_FD": "1"} if argv[0] == "test" else {
        k: v for k, v in os.environ.items() if k != "POPCORN_FD"}
    proc = subprocess.run([sys.executable, "-c", code, *argv], cwd=Path(ev.__file__).parent, capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.stderr.splitlines()[-1] == "torch imported: False", proc.stderr[-2000:]


def test_eval_imports_none_of_the_modules_its_subcommands_live_in():
    """eval.py imports none of audit.py, ab.py, cuda_check.py and cute_check.py at the top (its main()
    imports the one that `eval.py audit|ab|compile` names), nor the submission: the server's layout,
    which has eval.py and harness.py without them, imports as before (tests/test_imports.py: no circle)."""
    code = ("import sys, eval; bad = [m for m in ('audit', 'ab', 'cuda_check', 'cute_check', 'submission') "
            "if m in sys.modules]; print(bad)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=Path(ev.__file__).parent, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stderr


@pytest.mark.parametrize("environ, ncu", [({}, True), ({"POPCORN_NCU": "0"}, True), ({"POPCORN_NCU": "1"}, True),
                                          ({"POPCORN_NCU": "no"}, True), ({"POPCORN_NCU": ""}, False)])
def test_the_servers_popcorn_ncu_rule_quirk_included(environ, ncu):
    """bool(os.getenv("POPCORN_NCU", "0")): true unset ("0" is a non-empty string), false only empty."""
    assert harness.server_ncu_rule(environ) is ncu
    assert harness.server_ncu_rule(environ) is bool(environ.get("POPCORN_NCU", "0"))


# --------------------------------------------------------------------------- impossible times

def test_gemv_bytes_is_the_benchmarks_count():
    from benchmarks.timing import gemv_bytes
    for case in harness.shape_set("all"):
        assert harness.gemv_bytes(case["m"], case["k"], case["l"]) == gemv_bytes(case["m"], case["k"], case["l"])


@pytest.mark.parametrize("name, model, tbps", [
    ("NVIDIA B200", "B200", 8.0), ("NVIDIA H100 80GB HBM3", "H100 SXM", 3.35), ("NVIDIA H100 PCIe", "H100 PCIe", 2.0),
    ("NVIDIA H100 NVL", "H100 NVL", 3.9), ("NVIDIA H200", "H200", 4.8), ("NVIDIA H200 NVL", "H200", 4.8),
    ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM", 2.039), ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe", 1.935),
    ("NVIDIA A100-SXM4-40GB", "A100 40GB", 1.555), ("NVIDIA A10G", "A10", 0.6), ("NVIDIA L4", "L4", 0.3),
    ("NVIDIA L40S", "L40S", 0.864), ("NVIDIA GB200", "GB200", 8.0)])
def test_peak_bandwidth_of_known_gpus(name, model, tbps):
    found = harness.peak_bandwidth(name)
    assert found[0] == model and found[1] == pytest.approx(tbps * 1e12)
    assert "datasheet" in found[2] or "product brief" in found[2]  # each figure names its source


def test_an_unnamed_variant_gets_the_familys_highest_peak_and_an_unknown_gpu_none():
    assert harness.peak_bandwidth("NVIDIA H100")[1] == max(
        bps for pattern, _, bps, _ in harness.PEAK_BANDWIDTH if "H100" in pattern)
    assert harness.peak_bandwidth("NVIDIA A100-PCIE-80GB")[1] == 2.039e12  # not recognised as PCIe: the highest
    assert harness.peak_bandwidth("NVIDIA GeForce RTX 4090") is None and harness.floor_us(128, 256, 1, "cpu") is None
    assert "cpu" in harness.unknown_peak_note("cpu") and harness.unknown_peak_note("NVIDIA B200") == ""


def test_impossible_times_of_a_summary():
    """A timed mode's rows: a mean or a median below bytes / peak is one line each; a failed
    case, a row without times and test mode give none."""
    rows = [{"m": 7168, "k": 16384, "l": 1, "status": "pass", "mean_us": 3.0, "median_us": 2.9},
            {"m": 4096, "k": 7168, "l": 8, "status": "pass", "mean_us": 50.0, "median_us": 5.0},
            {"m": 7168, "k": 2048, "l": 4, "status": "pass", "mean_us": 18.0, "median_us": None},
            {"m": 7168, "k": 2048, "l": 4, "status": "fail", "error": "x"}]
    lines = harness.impossible_times({"mode": "benchmark", "cases": rows}, "NVIDIA H100 80GB HBM3")
    assert len(lines) == 2
    assert lines[0].startswith("7168x16384x1: mean 3.000 µs and median 2.900 µs below 19.727 µs, the time 66.1 MB")
    assert lines[1].startswith("4096x7168x8: median 5.000 µs below 39.468 µs")
    assert "H100 SXM's peak memory bandwidth of 3.35 TB/s" in lines[0]
    assert harness.impossible_times({"mode": "test", "cases": rows}, "NVIDIA H100 80GB HBM3") == []
    assert harness.impossible_times({"mode": "benchmark", "cases": rows}, "NVIDIA Future GPU") == []


def test_docs_list_the_peaks_the_check_uses():
    """docs/eval.md's table of peaks is harness.PEAK_BANDWIDTH, row for row, source included."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "eval.md").read_text()
    table = text.split("## Impossible times", 1)[1].split("| --- | --- | --- |\n", 1)[1].split("\n\n", 1)[0]
    rows = [[cell.strip() for cell in line.strip("|").split(" | ")] for line in table.splitlines()]
    assert rows == [[model, f"{bps / 1e12:g}", source] for _, model, bps, source in harness.PEAK_BANDWIDTH]
