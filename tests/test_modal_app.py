"""modal_app.py offline: Modal cannot be reached from here, so these tests check what can be
checked without it -- the module imports without a token, the function's settings, the
function body run locally on CPU (test mode, tiny shapes; ``all`` with the reduced CPU loops),
the server harness's plan (the fetch steps run against a local git repository; the run folder,
command lines and environment seen by a stand-in server eval.py that logs a sample written
here), the local entrypoint's messages with a stand-in for the remote call, ``modal run
--help`` and the argument checks that stop ``modal run`` before it connects. The remote run
itself and the server's real files are not exercised here."""

import inspect
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from typing import NamedTuple

import pytest
from conftest import ROOT, collect_here

modal = pytest.importorskip("modal")
import harness as kit_harness  # noqa: E402
import modal_app  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
TINY = [{"m": 128, "k": 256, "l": 1, "seed": 1111}, {"m": 128, "k": 256, "l": 2, "seed": 2222}]


def no_token_env(tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODAL_")}
    env["HOME"] = str(tmp_path)  # no ~/.modal.toml
    return env


def source(name: str) -> str:
    return (FIXTURES / f"{name}.py").read_text()


# --------------------------------------------------------------------------- `modal run` command lines

# Runs `python -m modal run modal_app.py ARGS` once for each job of the JSON file named by its argument,
# all in this one process: the job's environment and sys.argv as `python -m modal` has them, then
# modal's own entry point (modal/__main__.py's main()); stdout and stderr are caught at the file
# descriptors (what modal or Python writes through any stream lands there too), SystemExit gives
# the exit status. `modal run FILE` imports FILE anew on every call (importlib's
# spec_from_file_location and exec_module, modal/cli/import_refs.py), so modal_app's preflight runs
# each time; the module left over from the call before is dropped anyway, as a process of its own
# would not have it. Prints the results as one JSON list.
MODAL_RUN_BATCH = textwrap.dedent('''
    import json, os, signal, sys, tempfile, time, traceback, warnings

    import modal.__main__ as modal_cli


    class LimitReached(BaseException):
        pass


    def at_the_limit(signum, frame):
        raise LimitReached


    def run(args, env, limit):
        os.environ.clear()
        os.environ.update(env)
        sys.argv = [modal_cli.__file__, "run", "modal_app.py", *args]
        sys.modules.pop("modal_app", None)
        sys.stdout.flush()
        sys.stderr.flush()
        caught, saved = [tempfile.TemporaryFile(), tempfile.TemporaryFile()], [os.dup(1), os.dup(2)]
        for fd, file in zip((1, 2), caught):
            os.dup2(file.fileno(), fd)
        code, t0 = None, time.monotonic()
        signal.alarm(limit)
        try:
            with warnings.catch_warnings():  # a warning shown once per process shows again
                modal_cli.main()
            code = 0
        except SystemExit as exc:  # as Python exits with it
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except LimitReached:
            print(f"(stopped at its limit of {limit} s)", file=sys.stderr)
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            signal.alarm(0)
        seconds = time.monotonic() - t0
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, old in zip((1, 2), saved):
            os.dup2(old, fd)
            os.close(old)
        out = []
        for file in caught:
            file.seek(0)
            out.append(file.read().decode(errors="replace"))
            file.close()
        return {"returncode": code, "stdout": out[0], "stderr": out[1], "seconds": seconds}


    signal.signal(signal.SIGALRM, at_the_limit)
    with open(sys.argv[1]) as jobs:
        results = [run(**job) for job in json.load(jobs)]
    sys.stdout.write(json.dumps(results))
''')
TOKEN = {"MODAL_TOKEN_ID": "ak-test", "MODAL_TOKEN_SECRET": "as-test"}  # never used: nothing gets that far
MODAL_ENVIRONMENTS = {"no token": {}, "token": TOKEN,
                      "token, no network": {**TOKEN, "MODAL_SERVER_URL": "https://127.0.0.1:9"}}  # a closed port
# modal's config reads these from os.environ on every config.get (modal/config.py), so they may differ
# between the command lines of one process; what it reads once, at import (HOME for ~/.modal.toml,
# MODAL_CONFIG_PATH, MODAL_PROFILE, MODAL_LOGLEVEL), may not: one process per set of everything else.
PER_CALL_ENVIRONMENT = ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "MODAL_SERVER_URL")


class Ran(NamedTuple):
    """What one `modal run modal_app.py ARGS` gave: exit status (None: stopped at its limit), output, seconds."""
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float


def modal_run_jobs(word_file) -> list[tuple[str, list[str], int]]:
    """(environment, arguments, limit in seconds) of every `modal run` command line the tests below look up."""
    jobs = [("token", args, 50) for args, _ in ARG_ERRORS + JOB_ARG_ERRORS + AB_ARG_ERRORS]
    jobs += [("token", ["--image", "latest"], 50), ("no token", ["--help"], 120)]
    jobs += [("no token", ["--mode", mode], 120) for mode in ("test", "quick")]
    jobs += [("no token", args, 50) for args in UNKNOWN_OPTIONS]
    jobs += [("token, no network", args, 50) for args in UNREACHABLE_ARGS]
    jobs += [(env, args, 50) for env in ("no token", "token, no network")
             for args in (["--submission", str(word_file)], ["--job", "ab", "--against", str(word_file)])]
    return jobs


@pytest.fixture(scope="module")
def word_file(tmp_path_factory):
    """A submission that breaks the server's upload rules: it has the forbidden word in a comment."""
    return broken_files(tmp_path_factory.mktemp("upload"))["the word"]


@pytest.fixture(scope="module")
def modal_runs(tmp_path_factory, word_file) -> dict:
    """Every `modal run modal_app.py ARGS` of modal_run_jobs, by (environment, *ARGS): each stops in
    modal_app's preflight, at import, so what each costs as a process of its own is the start of
    Python and the import of modal (about 1.4 CPU-s). Here one fresh interpreter (pytest's state
    stays out) runs them all through modal's own entry point, one after another: one start and one
    modal import for many command lines. test_modal_run_help_describes_every_option runs the real
    command line as its own process, and the batch's --help must print just what it prints."""
    home = tmp_path_factory.mktemp("home")  # no ~/.modal.toml
    jobs = {(name, *args): {"args": args, "env": {**no_token_env(home), **MODAL_ENVIRONMENTS[name]}, "limit": limit}
            for name, args, limit in modal_run_jobs(word_file)}
    groups: dict[tuple, list] = {}
    for key, job in jobs.items():
        fixed = tuple(sorted((k, v) for k, v in job["env"].items() if k not in PER_CALL_ENVIRONMENT))
        groups.setdefault(fixed, []).append(key)
    runs = {}
    for fixed, keys in groups.items():
        listed = tmp_path_factory.mktemp("batch") / "jobs.json"
        listed.write_text(json.dumps([jobs[key] for key in keys]))
        proc = subprocess.run([sys.executable, "-c", MODAL_RUN_BATCH, str(listed)], cwd=ROOT, env=dict(fixed),
                              capture_output=True, text=True, timeout=60 + sum(jobs[key]["limit"] for key in keys))
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr  # nothing outside the command lines
        runs.update((key, Ran(**result)) for key, result in zip(keys, json.loads(proc.stdout), strict=True))
    return runs


# --------------------------------------------------------------------------- definition


def test_imports_without_a_token(tmp_path):
    proc = subprocess.run([sys.executable, "-c", "import modal_app; print(modal_app.app.name)"],
                          cwd=ROOT, env=no_token_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "nvfp4-gemv-kit"


def test_function_settings():
    assert modal_app.FUNCTION_OPTIONS == {"gpu": "B200", "timeout": 3600}
    spec = getattr(modal_app.run_remote, "_spec_", None)  # Modal internals: checked where present
    if spec is not None:
        assert spec.gpus == "B200"
    assert "devel" in modal_app.CUDA_IMAGE  # nvcc for inline CUDA
    assert tuple(int(x) for x in modal_app.PYTHON_VERSION.split(".")) >= (3, 12)
    assert modal_app.TORCH_PACKAGES == ("torch==2.9.1", "triton==3.5.1")
    assert modal_app.TORCH_INDEX_URL.endswith("/cu130")
    assert any(p.startswith("numpy==") for p in modal_app.PYPI_PACKAGES)
    assert any(p.startswith("nvidia-cutlass-dsl==") for p in modal_app.PYPI_PACKAGES)  # the server's eval.py imports it
    assert set(modal_app.SERVER_FILES) == {"eval.py", "task.py", "utils.py", "reference.py"}
    assert {"nvfp4.py", "quant.py"} <= set(modal_app.LAYOUT_FILES) <= set(modal_app.KIT_FILES)
    for name in modal_app.KIT_FILES:
        assert (ROOT / name).is_file(), name


@pytest.fixture(scope="module")
def help_process(tmp_path_factory):
    """`python -m modal run modal_app.py --help` as a process of its own, the real command line
    (the other `modal run` command lines run together: modal_runs)."""
    return subprocess.run([sys.executable, "-m", "modal", "run", "modal_app.py", "--help"], cwd=ROOT,
                          env=no_token_env(tmp_path_factory.mktemp("home")), capture_output=True, text=True,
                          timeout=120)


def test_modal_run_help_describes_every_option(help_process):
    """`modal run --help` describes every option of main(), with its choices (the table is
    main()'s signature, so it cannot drift), and stops before anything else (no token here)."""
    params = list(inspect.signature(modal_app.main.info.raw_f).parameters)
    assert list(modal_app.OPTION_HELP) == params
    proc = help_process
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    for name, (metavar, what) in modal_app.OPTION_HELP.items():
        assert f"--{name.replace('_', '-')} {metavar}" in text and " ".join(what.split()) in text, name
    assert "--mode test|benchmark|leaderboard|all" in text
    assert "--harness kit|server|both|kernelbot|kit+kernelbot|all" in text
    assert "--job eval|check|bench|sweep|roofline|ab|all" in text
    for job in ("check = the kit's whole test suite", "bench = benchmarks/bench_kernel.py", "sweep = bench_kernel.py",
                "all = check, bench, sweep in turn"):
        assert job in text, job


def test_a_batched_modal_run_gives_what_its_own_process_gives(help_process, modal_runs):
    """The batch of modal_runs runs a command line as a process of its own does: `modal run
    modal_app.py --help` gives the same exit status, stdout and stderr both ways."""
    batched = modal_runs[("no token", "--help")]
    assert help_process.returncode == 0 and help_process.stdout.strip()
    assert (batched.returncode, batched.stdout, batched.stderr) == (
        help_process.returncode, help_process.stdout, help_process.stderr)


ARG_ERRORS = [
    (["--mode", "bogus"], "--mode must be one of test, benchmark, leaderboard, all, got 'bogus'"),
    (["--runs", "0"], "--runs must be at least 1, got 0"),
    (["--runs=x"], "--runs must be a whole number (at least 1), got 'x'"),
    (["--harness", "nope"], "--harness must be one of kit, server, both, kernelbot, kit+kernelbot, all, got 'nope'"),
    (["--harness", "kit+kernelbot", "--harness-date", "2025-11-11"],
     "KernelBot's harness runs the server's task at f83cb92 (2026-01-13) only"),
    (["--mode", "test", "--mode", "bogus"], "got 'bogus'"),  # the last one given counts, as in click
    (["--submission", "missing.py"], "missing.py not found"),
    (["--submission", "tests"], "tests is a folder, not a submission file"),
    (["--harness-date", "2025-12"], "--harness-date must be one of 2025-11-11, 2026-01-13, got '2025-12'"),
]


@pytest.mark.parametrize("args,message", ARG_ERRORS)
def test_modal_run_rejects_bad_arguments_before_connecting(modal_runs, args, message):
    """With a token (never used) Modal would be contacted next (a minute of retries without a
    network): a bad argument stops `modal run` first, in one line, exit 2."""
    proc = modal_runs[("token", *args)]
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and message in proc.stderr, proc.stderr
    assert proc.seconds < 30


def test_modal_run_preflight_errors(modal_runs):
    """Without a token: the token is the problem named (after the arguments)."""
    proc = modal_runs["no token", "--mode", "test"]
    assert proc.returncode == 2 and "modal setup" in proc.stderr, proc.stderr
    proc = modal_runs["no token", "--mode", "quick"]
    assert proc.returncode == 2 and "--mode must be one of" in proc.stderr, proc.stderr


def test_plan():
    assert modal_app.plan("all") == ["test", "benchmark", "leaderboard"]
    assert modal_app.plan("benchmark") == ["benchmark"]
    with pytest.raises(ValueError, match="--mode"):
        modal_app.plan("profile")
    assert modal_app.harness_plan("both") == ["kit", "server"]
    assert modal_app.harness_plan("server") == ["server"]
    assert modal_app.harness_plan("kernelbot") == ["kernelbot"]
    assert modal_app.harness_plan("kit+kernelbot") == ["kit", "kernelbot"]
    assert modal_app.harness_plan("all") == ["kit", "server", "kernelbot"]
    with pytest.raises(ValueError, match="--harness"):
        modal_app.harness_plan("official")


# --------------------------------------------------------------------------- the function body


def test_function_body_passes_a_correct_submission_locally():
    (result,) = modal_app.run_remote.local(source("good_submission"), "test", 1, TINY)
    assert result["passed"] is True, result
    assert result["harness"] == "kit" and result["revision"] == "this repository"
    (entry,) = result["modes"]["test"]
    assert entry["returncode"] == 0 and entry["lines"]["check"] == "pass"
    assert [c["status"] for c in entry["summary"]["cases"]] == ["pass", "pass"]


def test_the_kit_harness_runs_the_leaderboard_loop_of_the_harness_date(monkeypatch, tmp_path):
    """--harness-date reaches the kit's eval.py as NVFP4_EVAL_HARNESS_DATE (and picks the server's
    folder of that date for the server harness)."""
    seen = []
    folders = {date: tmp_path / date for date in kit_harness.HARNESS_DATES}
    for date, folder in folders.items():
        folder.mkdir()
        for name in modal_app.SERVER_FILES:
            (folder / name).write_text(f"# {date}\n")
        (folder / "REVISION").write_text(modal_app.SERVER_COMMITS[date] + "\n")
    monkeypatch.setattr(modal_app, "SERVER_DIRS", folders)

    def fake_run_protocol(work, mode, test_file, timeout, env):
        seen.append(env)
        return kit_harness.ProtocolRun(0, {"test-count": "0", "check": "pass"}, "", "")

    monkeypatch.setattr(kit_harness, "run_protocol", fake_run_protocol)
    result = modal_app.evaluate(source("good_submission"), "test", 1, TINY, TINY, harness_date="2025-11-11")
    assert result["harness_date"] == "2025-11-11" and seen[0][kit_harness.ENV_HARNESS_DATE] == "2025-11-11"
    result = modal_app.evaluate(source("good_submission"), "test", 1, TINY, TINY, harness="server",
                                harness_date="2025-11-11")
    assert seen[1][kit_harness.ENV_HARNESS_DATE] is None
    assert result["revision"] == modal_app.SERVER_COMMITS["2025-11-11"]


def test_function_body_runs_all_modes_locally():
    """mode all on CPU: test, benchmark, leaderboard in turn (host-clock form of the timed
    loops), each summarized from the parsed lines, the median included."""
    result = modal_app.evaluate(source("good_submission"), "all", 1, TINY[:1], TINY[:1])
    assert result["passed"] is True, result
    assert [len(result["modes"][m]) for m in ("test", "benchmark", "leaderboard")] == [1, 1, 1]
    for m in ("benchmark", "leaderboard"):
        case = result["modes"][m][0]["summary"]["cases"][0]
        assert case["runs"] >= 3 and case["median_us"] > 0 and case["mean_us"] > 0
    assert modal_app.report(result).rstrip().endswith("PASS")


def test_report_of_repeated_runs():
    def run(mean_ns):
        lines = kit_harness.parse_popcorn(
            "benchmark-count: 1\nbenchmark.0.spec: m: 7168; k: 16384; l: 1; seed: 1111\n"
            f"benchmark.0.runs: 50\nbenchmark.0.mean: {mean_ns}\nbenchmark.0.std: 1.0\n"
            f"benchmark.0.err: 0.1\nbenchmark.0.best: {mean_ns}\nbenchmark.0.worst: {mean_ns}\n"
            f"benchmark.0.median: {mean_ns}\ncheck: pass\n")
        summary = kit_harness.summarize("benchmark", kit_harness.results_from_popcorn(lines, "benchmark"))
        return {"returncode": 0, "lines": lines, "summary": summary, "stderr_tail": ""}

    result = {"device": "NVIDIA B200", "harness": "kit", "revision": "this repository", "passed": True,
              "modes": {"benchmark": [run(10e3), run(12e3)]}}
    text = modal_app.report(result)
    assert "[benchmark run 1/2]" in text and "[benchmark run 2/2]" in text
    assert "geomean of means per run: 10.000, 12.000 µs; average 11.000 µs" in text


def test_a_time_below_bytes_over_peak_is_a_warning_in_the_report_and_the_json():
    """7168x16384x1 moves 66.1 MB: on a B200 (8 TB/s, DGX B200 datasheet) no call takes less than
    8.260 µs with the L2 cleared; 3 µs is flagged, 10 µs is not; an unknown GPU gets one note."""
    def run(mean_ns):
        lines = kit_harness.parse_popcorn(
            "benchmark-count: 1\nbenchmark.0.spec: m: 7168; k: 16384; l: 1; seed: 1111\n"
            f"benchmark.0.runs: 50\nbenchmark.0.mean: {mean_ns}\nbenchmark.0.std: 1.0\n"
            f"benchmark.0.err: 0.1\nbenchmark.0.best: {mean_ns}\nbenchmark.0.worst: {mean_ns}\ncheck: pass\n")
        summary = kit_harness.summarize("benchmark", kit_harness.results_from_popcorn(lines, "benchmark"))
        return {"returncode": 0, "lines": lines, "summary": summary, "stderr_tail": ""}

    result = {"device": "NVIDIA B200", "harness": "server", "revision": "f83cb92", "passed": True,
              "modes": {"benchmark": [run(3e3), run(10e3)]}}
    text = modal_app.report(result)
    warnings = [ln for ln in text.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1 and "7168x16384x1: mean 3.000 µs below 8.260 µs" in warnings[0]
    modal_app.flag_impossible_times([result])
    first, second = (e["summary"]["impossible_times"] for e in result["modes"]["benchmark"])
    assert len(first) == 1 and second == []
    unknown = modal_app.report({**result, "device": "NVIDIA Future GPU"})
    assert "warning: no peak memory bandwidth on record for NVIDIA Future GPU" in unknown


def test_function_body_reports_a_wrong_submission_and_stops():
    (result,) = modal_app.run_remote.local(source("wrong_untouched_c"), "all", 1, TINY)
    assert result["passed"] is False
    assert list(result["modes"]) == ["test"]  # no timed mode after a failed test mode
    (entry,) = result["modes"]["test"]
    assert entry["returncode"] == 112
    assert "mismatch found" in entry["summary"]["cases"][0]["error"]
    text = modal_app.report(result)
    assert "FAIL: mismatch found" in text and text.rstrip().endswith("FAIL")


# --------------------------------------------------------------------------- the local entrypoint


class FakeRemote:
    """Stands in for the Modal function: records calls, returns or raises what it is given."""

    def __init__(self, outcome):
        self.outcome, self.calls, self.gpu = outcome, [], None

    def with_options(self, gpu):
        self.gpu = gpu
        return self

    def remote(self, *args):
        self.calls.append(args)
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


def entry(**kwargs):
    return modal_app.main.info.raw_f(**kwargs)


def test_entrypoint_errors(tmp_path, monkeypatch, capsys):
    good = str(FIXTURES / "good_submission.py")
    with pytest.raises(SystemExit) as exc:
        entry(submission=str(tmp_path / "nope.py"))
    assert exc.value.code == 2 and "not found" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        entry(submission=good, mode="fast")
    assert "--mode must be one of" in capsys.readouterr().err
    monkeypatch.setattr(modal_app, "run_remote", FakeRemote(modal.exception.AuthError("no token")))
    with pytest.raises(SystemExit):
        entry(submission=good)
    assert "modal setup" in capsys.readouterr().err
    monkeypatch.setattr(modal_app, "run_remote", FakeRemote(RuntimeError("container exited with code 137")))
    with pytest.raises(SystemExit) as exc:
        entry(submission=good)
    assert exc.value.code == 1
    assert "the remote run failed: RuntimeError: container exited with code 137" in capsys.readouterr().err


def test_entrypoint_prints_tables_and_writes_json(tmp_path, monkeypatch, capsys):
    crashed = {"device": "NVIDIA B200", "harness": "kit", "revision": "this repository", "passed": False,
               "modes": {"test": [{
                   "returncode": 1, "seconds": 3.0, "lines": {},
                   "summary": {"mode": "test", "passed": False, "cases": []},
                   "stderr_tail": "Traceback ...\nImportError: cannot import name 'custom_kernel'"}]}}
    fake = FakeRemote([crashed])
    monkeypatch.setattr(modal_app, "run_remote", fake)
    out = tmp_path / "r.json"
    with pytest.raises(SystemExit) as exc:
        entry(submission=str(FIXTURES / "good_submission.py"), mode="test", gpu="H100", out=str(out))
    assert exc.value.code == 1
    assert fake.gpu == "H100" and fake.calls[0][1:] == ("test", 1, None, None, ["kit"], "2026-01-13")
    printed = capsys.readouterr().out
    assert "eval.py exited 1; remote stderr (tail):" in printed and "ImportError" in printed
    saved = json.loads(out.read_text())
    assert saved["gpu_requested"] == "H100" and saved["passed"] is False and saved["harness"] == "kit"
    assert saved["results"] == [crashed]


def summary_of(mode, text):
    lines = kit_harness.parse_popcorn(text)
    return lines, kit_harness.summarize(mode, kit_harness.results_from_popcorn(lines, mode))


FULL = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize("harness, other, date, head", [
    ("both", "server", "2025-11-11", f"=== harness: server (the server's files, gpu-mode/reference-kernels at {FULL})"),
    ("kit+kernelbot", "kernelbot", "2026-01-13",
     f"=== harness: kernelbot (KernelBot's run_config, benchmark mode, on gpu-mode/kernelbot at {FULL}, "
     f"gpu-mode/reference-kernels at {FULL})"),
], ids=["both", "kit+kernelbot"])
def test_entrypoint_two_harnesses_side_by_side(tmp_path, monkeypatch, capsys, harness, other, date, head):
    """--harness both (or kit+kernelbot): one remote call with both harnesses; each harness's
    tables under its name and revision, then one comparison table; the verdict is both verdicts."""
    spec = "m: 7168; k: 16384; l: 1; seed: 1111"

    def result(harness, revision, mean_ns, passed):
        lines, summary = summary_of("benchmark", f"benchmark-count: 1\nbenchmark.0.spec: {spec}\n"
                                    f"benchmark.0.runs: 40\nbenchmark.0.mean: {mean_ns}\nbenchmark.0.std: 9.0\n"
                                    f"benchmark.0.err: 1.0\nbenchmark.0.best: {mean_ns}\n"
                                    f"benchmark.0.worst: {mean_ns}\ncheck: pass\n")
        return {"device": "NVIDIA B200", "harness": harness, "revision": revision, "passed": passed,
                "kernelbot_mode": "benchmark",
                "modes": {"benchmark": [{"returncode": 0, "lines": lines, "summary": summary, "stderr_tail": ""}]}}

    revision = FULL if other == "server" else f"gpu-mode/kernelbot at {FULL}, gpu-mode/reference-kernels at {FULL}"
    fake = FakeRemote([result("kit", "this repository", 10e3, True), result(other, revision, 11e3, True)])
    monkeypatch.setattr(modal_app, "run_remote", fake)
    entry(submission=str(FIXTURES / "good_submission.py"), mode="benchmark", harness=harness,
          out=str(tmp_path / "r.json"), harness_date=date)
    assert fake.calls[0][-2:] == (["kit", other], date)
    assert json.loads((tmp_path / "r.json").read_text())["harness_date"] == date
    printed = capsys.readouterr().out
    assert "=== harness: kit (this repository's eval.py" in printed
    assert head in printed
    assert re.search(r"benchmark\s+PASS 10\.000 µs\s+PASS 11\.000 µs", printed), printed
    assert re.search(r"test\s+not run\s+not run", printed)
    assert printed.rstrip().endswith("PASS")


def test_server_harness_on_another_gpu_warns(tmp_path, monkeypatch, capsys):
    assert modal_app.gpu_warning("kit", "H100") is None and modal_app.gpu_warning("server", "B200") is None
    assert modal_app.gpu_warning("kit+kernelbot", "H100") and modal_app.gpu_warning("kernelbot", "B200") is None
    fake = FakeRemote([])
    monkeypatch.setattr(modal_app, "run_remote", fake)
    entry(submission=str(FIXTURES / "good_submission.py"), harness="both", gpu="H100", out=str(tmp_path / "r.json"))
    err = capsys.readouterr().err
    assert "warning: --gpu H100: the server's reference.py computes the expected output with FP4" in err
    assert fake.gpu == "H100" and fake.calls  # a warning, not a refusal


# --------------------------------------------------------------------------- the server harness


def git(*args, cwd):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def test_server_files_and_commit_pinned():
    assert modal_app.SERVER_REPO_URL == "https://github.com/gpu-mode/reference-kernels"
    assert set(modal_app.SERVER_COMMITS) == set(kit_harness.HARNESS_DATES) == set(modal_app.SERVER_DIRS)
    assert all(re.fullmatch(r"[0-9a-f]{40}", c) for c in modal_app.SERVER_COMMITS.values())
    assert modal_app.SERVER_COMMIT == modal_app.SERVER_COMMITS[kit_harness.HARNESS_DATE]
    assert len(set(modal_app.SERVER_DIRS.values())) == len(modal_app.SERVER_DIRS)
    assert modal_app.SERVER_SOURCES == {
        "eval.py": "problems/nvidia/eval.py", "utils.py": "problems/nvidia/utils.py",
        "reference.py": "problems/nvidia/nvfp4_gemv/reference.py", "task.py": "problems/nvidia/nvfp4_gemv/task.py"}
    assert set(modal_app.SERVER_SOURCES) == set(modal_app.SERVER_FILES)
    fetch = modal_app.server_fetch_commands()
    assert all(modal_app.SERVER_COMMIT in c for c in fetch[1:3]) and modal_app.SERVER_REPO_URL in fetch[0]
    assert modal_app.harness_sources("server") == {n: modal_app.Path(modal_app.SERVER_DIR) / n
                                                   for n in modal_app.SERVER_FILES}
    assert modal_app.harness_sources("kit") == {n: ROOT / n for n in modal_app.LAYOUT_FILES}


def local_repository(repo, paths, later: str) -> str:
    """A stand-in repository at ``repo``: ``paths`` written as "# PATH as pinned" and committed (the
    commit returned, full hash), then ``later`` changed in a second commit that must be ignored."""
    repo.mkdir()
    git("init", "-q", cwd=repo)
    for path in paths:
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(f"# {path} as pinned\n")
    git("add", ".", cwd=repo)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "pinned", cwd=repo)
    full = git("rev-parse", "HEAD", cwd=repo)
    (repo / later).write_text("# a later revision\n")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "later", cwd=repo)
    return full


def run_steps(commands) -> None:
    for command in commands:
        proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, (command, proc.stderr)


def test_server_fetch_commands_against_a_local_repository(tmp_path):
    """The image build steps, run here against a stand-in repository: the four files of the
    pinned (short) commit under their run-folder names, a later commit ignored, the full hash
    recorded; an unknown commit fails with a message."""
    repo = tmp_path / "reference-kernels"
    full = local_repository(repo, modal_app.SERVER_SOURCES.values(), "problems/nvidia/eval.py")
    dest = tmp_path / "server"
    run_steps(modal_app.server_fetch_commands(full[:7], str(dest), str(repo)))
    assert sorted(p.name for p in dest.iterdir()) == sorted([*modal_app.SERVER_FILES, "REVISION"])
    for name, path in modal_app.SERVER_SOURCES.items():
        assert (dest / name).read_text() == f"# {path} as pinned\n"
    assert (dest / "REVISION").read_text().strip() == full
    assert modal_app.harness_revision("server", dest) == full

    bad = modal_app.server_fetch_commands("deadbee", str(tmp_path / "other"), str(repo))
    outcomes = [subprocess.run(["sh", "-c", c], capture_output=True, text=True, timeout=120) for c in bad[:2]]
    assert outcomes[1].returncode != 0 and "commit deadbee not found" in outcomes[1].stderr


# A stand-in for the server's eval.py: it records what it was given (argv, run folder, the
# first line of each harness file, environment) and logs a sample of the server's output
# written for this test -- no median key, a test.N.message, and in leaderboard mode a failed
# second case after which it logs `check: fail` and exits 0, as the server's leaderboard does.
FAKE_SERVER_EVAL = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path

    mode, test_file = sys.argv[1], sys.argv[2]
    specs = Path(test_file).read_text().splitlines()
    record = {"argv": sys.argv, "files": sorted(os.listdir(".")), "tests": Path(test_file).read_text(),
              "heads": {n: Path(n).read_text().splitlines()[0] for n in ("utils.py", "reference.py", "task.py")},
              "env": sorted(k for k in os.environ if k.startswith(("NVFP4_", "POPCORN_")))}
    with open(os.environ["FAKE_SERVER_RECORD"], "a") as f:
        f.write(json.dumps(record) + "\\n")
    out = os.fdopen(int(os.environ["POPCORN_FD"]), "w")
    log = lambda key, value: print(f"{key}: {value}", file=out, flush=True)
    if mode == "test":
        log("test-count", len(specs))
        for i, spec in enumerate(specs):
            log(f"test.{i}.spec", spec)
            log(f"test.{i}.status", "pass")
            log(f"test.{i}.message", "Maximum error: 0.0")
        log("check", "pass")
        sys.exit(0)
    log("benchmark-count", len(specs))
    for i, spec in enumerate(specs):
        if mode == "leaderboard" and i == 1:
            log(f"benchmark.{i}.spec", spec)
            log(f"benchmark.{i}.status", "fail")
            log(f"benchmark.{i}.error", "Number of mismatched elements: 3")
            break
        if mode == "benchmark":
            log(f"benchmark.{i}.spec", spec)
        for key, value in (("runs", 40), ("mean", 20500.0 + 1000 * i), ("std", 300.5), ("err", 47.5),
                           ("best", 20000.0), ("worst", 21900.0)):
            log(f"benchmark.{i}.{key}", value)
        if mode == "leaderboard":
            log(f"benchmark.{i}.spec", spec)
    log("check", "fail" if mode == "leaderboard" else "pass")
    sys.exit(0)
""")


def test_server_harness_run_folder_command_lines_and_parsing(tmp_path, monkeypatch):
    server = tmp_path / "server"
    server.mkdir()
    (server / "eval.py").write_text(FAKE_SERVER_EVAL)
    for name in ("utils.py", "reference.py", "task.py"):
        (server / name).write_text(f"# server {name}\n")
    full = "89abcdef" * 5
    (server / "REVISION").write_text(full + "\n")
    record = tmp_path / "record.jsonl"
    for name in [k for k in os.environ if k.startswith("NVFP4_")]:
        monkeypatch.delenv(name)  # as in the container: none of the user's kit settings (a cache folder, say)
    monkeypatch.setenv("FAKE_SERVER_RECORD", str(record))
    monkeypatch.setenv("POPCORN_SEED", "7")  # never passed on: the seeds of the test file count

    result = modal_app.evaluate(source("good_submission"), "all", 1, TINY, TINY, harness="server", server_dir=server)

    seen = [json.loads(line) for line in record.read_text().splitlines()]
    assert [r["argv"] for r in seen] == [["eval.py", "test", "tests.txt"], ["eval.py", "benchmark", "benchmarks.txt"],
                                         ["eval.py", "leaderboard", "benchmarks.txt"]]
    for r in seen:
        assert r["files"] == sorted([*modal_app.SERVER_FILES, "submission.py", "tests.txt", "benchmarks.txt"])
        assert r["tests"] == kit_harness.test_file_text(TINY)
        assert r["heads"] == {n: f"# server {n}" for n in ("utils.py", "reference.py", "task.py")}
        assert r["env"] == ["POPCORN_FD"]  # no median switch, no seed
    assert result["harness"] == "server" and result["revision"] == full
    assert result["passed"] is False and list(result["modes"]) == ["test", "benchmark", "leaderboard"]
    test = result["modes"]["test"][0]["summary"]
    assert test["passed"] and [c["status"] for c in test["cases"]] == ["pass", "pass"]
    bench = result["modes"]["benchmark"][0]["summary"]
    assert bench["passed"] and [c["mean_us"] for c in bench["cases"]] == [20.5, 21.5]
    assert [c["median_us"] for c in bench["cases"]] == [None, None] and bench["geomean_median_us"] is None
    board = result["modes"]["leaderboard"][0]
    assert board["returncode"] == 0 and board["summary"]["passed"] is False  # exit 0, check: fail
    assert [c["status"] for c in board["summary"]["cases"]] == ["pass", "fail"]
    assert board["summary"]["cases"][1]["error"] == "Number of mismatched elements: 3"
    text = modal_app.report(result)
    assert f"=== harness: server (the server's files, gpu-mode/reference-kernels at {full})" in text
    assert "FAIL: Number of mismatched elements: 3" in text and text.rstrip().endswith("server: FAIL")


# --------------------------------------------------------------------------- KernelBot's harness

def test_kernelbot_harness_is_pinned_to_the_revisions_the_kit_mirrors():
    """KernelBot at the runner image's revision, the task at the server head the kit mirrors
    (f83cb92, harness date 2026-01-13); both fetched by the image build of either image, with
    PyYAML (its task loader's import) in each."""
    assert modal_app.KERNELBOT_COMMIT == "4bdd839ad76eaac0cdab986d30f8d77f989a289b"
    assert modal_app.KERNELBOT_COMMIT in modal_app.IMAGE_SOURCES["runner"]
    assert modal_app.SERVER_COMMITS[modal_app.KERNELBOT_DATE] == "f83cb92a534cc67fa98d7e9813e7f8238abdb4e0"
    assert modal_app.KERNELBOT_REPO_URL == "https://github.com/gpu-mode/kernelbot"
    for kind in modal_app.IMAGES:
        assert ("run", tuple(modal_app.kernelbot_fetch_commands())) in modal_app.image_steps(kind)
        assert any(p.lower().startswith("pyyaml") for p in packages(kind)), kind


def test_kernelbot_fetch_commands_against_local_repositories(tmp_path):
    """KernelBot's package and the server's task folder (task.yml names ../eval.py and ../utils.py:
    they sit one level up, as in problems/nvidia) of the pinned commits, each full hash recorded."""
    kernelbot, reference = tmp_path / "kernelbot", tmp_path / "reference-kernels"
    ours = local_repository(kernelbot, ["src/libkernelbot/__init__.py", "src/libkernelbot/run_eval.py", "README.md"],
                            "src/libkernelbot/run_eval.py")
    task = ["problems/nvidia/eval.py", "problems/nvidia/utils.py", "problems/nvidia/nvfp4_gemv/task.yml",
            "problems/nvidia/nvfp4_gemv/reference.py", "problems/nvidia/nvfp4_gemm/task.yml"]
    theirs = local_repository(reference, task, "problems/nvidia/nvfp4_gemv/task.yml")
    dest, task_dest = tmp_path / "kb", tmp_path / "task"
    run_steps(modal_app.kernelbot_fetch_commands(ours[:7], theirs, str(dest), str(task_dest), str(kernelbot),
                                                 str(reference)))
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*")) == [
        "REVISION", "libkernelbot", "libkernelbot/__init__.py", "libkernelbot/run_eval.py"]
    assert (dest / "libkernelbot/run_eval.py").read_text() == "# src/libkernelbot/run_eval.py as pinned\n"
    assert sorted(str(p.relative_to(task_dest)) for p in task_dest.rglob("*")) == [
        "REVISION", "eval.py", "nvfp4_gemv", "nvfp4_gemv/reference.py", "nvfp4_gemv/task.yml", "utils.py"]
    assert (task_dest / modal_app.KERNELBOT_TASK).read_text() == "# problems/nvidia/nvfp4_gemv/task.yml as pinned\n"
    assert [(d / "REVISION").read_text().strip() for d in (dest, task_dest)] == [ours, theirs]


# A stand-in for KernelBot's package (gpu-mode/kernelbot src/libkernelbot at 4bdd839, the parts the
# harness calls: consts.GPU_TO_SM and SubmissionMode, task.make_task_definition and
# build_task_config, run_eval.run_config returning a FullResult of EvalResults), written for this
# test: run_config records where and how it was called, writes the task's files into the working
# directory as KernelBot does, and returns the stages of the mode with lines in the server's format
# (test, then benchmark, then leaderboard for leaderboard mode; the stage named by
# STAND_IN_FAIL fails with `check: fail` and exit 0, and ends the run).
STAND_IN_KERNELBOT = {
    "__init__.py": "",
    "consts.py": """
        import enum

        class SubmissionMode(enum.Enum):
            TEST = "test"
            BENCHMARK = "benchmark"
            LEADERBOARD = "leaderboard"

        GPU_TO_SM = {"B200": "100", "H100": "90a"}
    """,
    "task.py": """
        import json
        import types
        from pathlib import Path

        def make_task_definition(path):  # the stand-in's task.yml is JSON (a subset of YAML)
            return types.SimpleNamespace(task={**json.loads(Path(path).read_text()), "root": str(Path(path).parent)})

        def build_task_config(task=None, submission_content=None, arch=None, mode=None):
            files = {name: submission_content if source == "@SUBMISSION@" else (Path(task["root"]) / source).read_text()
                     for name, source in task["files"].items()}
            return {"lang": "py", "main": "eval.py", "sources": files, "arch": arch, "mode": mode.value,
                    "tests": task["tests"], "benchmarks": task["benchmarks"], "ranking_by": "geom"}
    """,
    "run_eval.py": """
        import dataclasses, json, os, shutil, sys
        from pathlib import Path

        @dataclasses.dataclass
        class RunResult:
            success: bool
            passed: bool
            stderr: str
            exit_code: int
            duration: float
            result: dict

        @dataclasses.dataclass
        class EvalResult:
            compilation: object
            run: RunResult

        @dataclasses.dataclass
        class FullResult:
            success: bool
            error: str
            system: dict
            runs: dict

        STAGES = {"test": ["test"], "benchmark": ["benchmark"], "leaderboard": ["test", "benchmark", "leaderboard"]}

        def spec(case):
            return "; ".join(f"{k}: {v}" for k, v in case.items())

        def lines(stage, cases, fail):
            if stage == "test":
                out = {"test-count": len(cases)}
                for i, case in enumerate(cases):
                    out.update({f"test.{i}.spec": spec(case), f"test.{i}.status": "pass"})
            else:
                out = {"benchmark-count": len(cases)}
                for i, case in enumerate(cases):
                    out.update({f"benchmark.{i}.spec": spec(case), f"benchmark.{i}.runs": 40,
                                f"benchmark.{i}.mean": 20500.0 + 1000 * i, f"benchmark.{i}.std": 300.5,
                                f"benchmark.{i}.err": 47.5, f"benchmark.{i}.best": 20000.0,
                                f"benchmark.{i}.worst": 21900.0})
            out["check"] = "fail" if fail else "pass"
            return {k: str(v) for k, v in out.items()}

        def run_config(config):
            for name, text in config["sources"].items():
                Path(name).write_text(text)
            with open(os.environ["STAND_IN_RECORD"], "a") as record:
                record.write(json.dumps({"cwd": os.getcwd(), "files": sorted(os.listdir(".")),
                                         "python3": os.path.realpath(shutil.which("python3")),
                                         "config": {k: v for k, v in config.items() if k != "sources"},
                                         "submission": config["sources"]["submission.py"]}) + "\\n")
            runs = {}
            for stage in STAGES[config["mode"]]:
                fail = stage == os.environ.get("STAND_IN_FAIL")
                cases = config["tests" if stage == "test" else "benchmarks"]
                runs[stage] = EvalResult(None, RunResult(True, not fail, f"{stage} stderr", 0, 1.25,
                                                         lines(stage, cases, fail)))
                if fail:
                    break
            return FullResult(True, "", {"gpu": "stand-in"}, runs)
    """,
}
STAND_IN_TASK = {"files": {"submission.py": "@SUBMISSION@", "eval.py": "../eval.py"},
                 "tests": [{"m": 7168, "k": 16384, "l": 1, "seed": 1}], "benchmarks": [{"m": 256, "k": 64, "l": 1}]}


@pytest.fixture
def stand_in_kernelbot(tmp_path, monkeypatch):
    """The stand-in package and task folders where the image build puts KernelBot's (REVISION
    files included), the record file its run_config appends to; ``libkernelbot`` imported afresh."""
    kernelbot, task = tmp_path / "kernelbot", tmp_path / "task"
    (kernelbot / "libkernelbot").mkdir(parents=True)
    for name, text in STAND_IN_KERNELBOT.items():
        (kernelbot / "libkernelbot" / name).write_text(textwrap.dedent(text))
    (task / "nvfp4_gemv").mkdir(parents=True)
    (task / "eval.py").write_text("# the server's eval.py\n")
    (task / modal_app.KERNELBOT_TASK).write_text(json.dumps(STAND_IN_TASK))
    (kernelbot / "REVISION").write_text("a" * 40 + "\n")
    (task / "REVISION").write_text("b" * 40 + "\n")
    monkeypatch.setattr(modal_app, "KERNELBOT_DIR", str(kernelbot))
    monkeypatch.setattr(modal_app, "KERNELBOT_TASK_DIR", str(task))
    monkeypatch.setenv("STAND_IN_RECORD", str(tmp_path / "record.jsonl"))
    for name in [m for m in sys.modules if m.split(".")[0] == "libkernelbot"]:
        monkeypatch.delitem(sys.modules, name)
    yield tmp_path / "record.jsonl"
    for name in [m for m in sys.modules if m.split(".")[0] == "libkernelbot"]:
        del sys.modules[name]


def test_kernelbot_harness_calls_run_config_as_popcorns_local_runner_does(stand_in_kernelbot, monkeypatch):
    """The task from task.yml, build_task_config with the B200's arch and KernelBot's mode (the
    kit's all: its leaderboard mode), run_config in a fresh folder with python3 this interpreter;
    every stage recorded under its name (the test stage once over --runs 2), each summarised from
    its lines; the working directory, PATH and the import path as they were."""
    monkeypatch.setattr(modal_app, "gpu_name", lambda: "NVIDIA B200")
    before = os.getcwd(), os.environ["PATH"], list(sys.path)
    result = modal_app.evaluate(source("good_submission"), "all", 2, TINY, TINY[:1], harness="kernelbot")
    assert (os.getcwd(), os.environ["PATH"], sys.path) == before
    calls = [json.loads(line) for line in stand_in_kernelbot.read_text().splitlines()]
    assert len(calls) == 2
    for call in calls:
        assert call["config"]["mode"] == "leaderboard" and call["config"]["arch"] == "100"
        assert call["config"]["tests"] == TINY and call["config"]["benchmarks"] == TINY[:1]  # the kit's small cases
        assert call["files"] == [".bin", "eval.py", "submission.py"] and call["submission"] == source("good_submission")
        assert call["python3"] == os.path.realpath(sys.executable)
        assert not os.path.exists(call["cwd"])  # a folder of its own, removed
    assert result["harness"] == "kernelbot" and result["passed"] is True and result["kernelbot_mode"] == "leaderboard"
    assert result["revision"] == f"gpu-mode/kernelbot at {'a' * 40}, gpu-mode/reference-kernels at {'b' * 40}"
    assert result["system"] == {"gpu": "stand-in"} and result["harness_date"] == modal_app.KERNELBOT_DATE
    assert {m: len(runs) for m, runs in result["modes"].items()} == {"test": 1, "benchmark": 2, "leaderboard": 2}
    test = result["modes"]["test"][0]
    assert test["returncode"] == 0 and test["seconds"] == 1.2 and test["stderr_tail"] == "test stderr"
    assert [c["status"] for c in test["summary"]["cases"]] == ["pass", "pass"]
    board = result["modes"]["leaderboard"][1]["summary"]
    assert board["passed"] and board["cases"][0]["mean_us"] == 20.5
    text = modal_app.report(result)
    head = f"=== harness: kernelbot (KernelBot's run_config, leaderboard mode, on {result['revision']})"
    assert text.startswith(head)
    assert "[leaderboard run 2/2]" in text and text.rstrip().endswith("kernelbot: PASS")


@pytest.mark.parametrize("mode, fail, stages", [("all", "benchmark", ["test", "benchmark"]),
                                                ("leaderboard", "leaderboard", ["test", "benchmark", "leaderboard"]),
                                                ("test", "test", ["test"])])
def test_kernelbot_harness_reports_a_failed_stage_and_stops(stand_in_kernelbot, monkeypatch, mode, fail, stages):
    """A stage that logs `check: fail` (exit 0, as the server's leaderboard mode) fails the run,
    and no later run_config is made (--runs 3)."""
    monkeypatch.setenv("STAND_IN_FAIL", fail)
    result = modal_app.evaluate(source("good_submission"), mode, 3, TINY, TINY[:1], harness="kernelbot")
    assert result["passed"] is False and list(result["modes"]) == stages
    assert result["modes"][fail][0]["returncode"] == 0 and not result["modes"][fail][0]["summary"]["passed"]
    assert len(stand_in_kernelbot.read_text().splitlines()) == 1
    assert modal_app.report(result).rstrip().endswith("kernelbot: FAIL")


def test_kernelbot_harness_that_cannot_run_says_why_in_the_report(tmp_path, monkeypatch):
    """Without KernelBot's package where the image puts it (here, on this machine): the result
    fails with one line naming the import, and the report prints it."""
    monkeypatch.setattr(modal_app, "KERNELBOT_DIR", str(tmp_path / "none"))
    monkeypatch.setattr(modal_app, "KERNELBOT_TASK_DIR", str(tmp_path / "none"))
    result = modal_app.kernelbot_evaluate(source("good_submission"), "test", 1, TINY)
    assert result["passed"] is False and result["modes"] == {}
    assert result["error"] == "ModuleNotFoundError: No module named 'libkernelbot'"
    assert "\nerror: ModuleNotFoundError: No module named 'libkernelbot'\n" in modal_app.report(result)


def test_kit_and_kernelbot_run_in_one_call_side_by_side(stand_in_kernelbot):
    """--harness kit+kernelbot: the remote function runs the kit's eval.py (for real, here on the
    CPU), then KernelBot's run_config, in one container; the comparison has a column for each."""
    results = modal_app.run_remote.local(source("good_submission"), "test", 1, TINY, None, ["kit", "kernelbot"])
    assert [r["harness"] for r in results] == ["kit", "kernelbot"] and all(r["passed"] for r in results)
    table = modal_app.comparison(results)
    assert re.search(r"^test\s+PASS\s+PASS$", table, re.M) and re.search(r"kit\s+kernelbot$", table, re.M), table


# --------------------------------------------------------------------------- the jobs: settings and arguments


def test_job_settings():
    """The jobs' function: the default GPU, a limit above every step's own, the eval image's
    layers plus pytest, and the checkout's files in JOB_DIR (every top-level module the suite
    imports, tests/ and benchmarks/)."""
    assert modal_app.JOB_OPTIONS == {"gpu": "B200", "timeout": modal_app.JOB_TIMEOUT_S}
    assert modal_app.JOB_TIMEOUT_S > max(modal_app.STEP_TIMEOUT_S.values())
    assert set(modal_app.JOB_STEPS) == {"check", "bench", "sweep"}
    assert set(modal_app.STEP_TIMEOUT_S) == set(modal_app.JOB_STEPS) | {"roofline"}
    spec = getattr(modal_app.run_job_remote, "_spec_", None)  # Modal internals: checked where present
    if spec is not None:
        assert spec.gpus == "B200"
    assert any(p.startswith("pytest==") for p in modal_app.TEST_PACKAGES)
    assert {p.name for p in ROOT.glob("*.py")} <= set(modal_app.JOB_FILES)
    for name in (*modal_app.JOB_FILES, *modal_app.JOB_DIRS, *modal_app.CHECK_IGNORE):
        assert (ROOT / name).exists(), name
    shipped = modal.FilePatternMatcher(*modal_app.JOB_IGNORE)  # True: left out of JOB_DIR
    assert shipped(modal_app.Path("results")) and shipped(modal_app.Path("results/bench-h100.md"))
    assert shipped(modal_app.Path("fixtures/__pycache__/a.pyc"))
    assert not shipped(modal_app.Path("bench_kernel.py")) and not shipped(modal_app.Path("fixtures/sweep-b200.json"))
    assert inspect.signature(modal_app.main.info.raw_f).parameters["job"].default == "eval"


JOB_ARG_ERRORS = [
    (["--job", "bogus"], "--job must be one of eval, check, bench, sweep, roofline, ab, all, got 'bogus'"),
    (["--gpu", "B300"], "--gpu must be a Modal GPU type"),
    (["--job", "check", "--gpu", "H100:x"], "got 'H100:x'"),
    (["--job", "bench", "--bench-args", "--no-such-option 1"], "unrecognized arguments: --no-such-option 1"),
    (["--job", "bench", "--bench-args=--reps x"], "argument --reps: invalid int value: 'x'"),
    (["--job", "sweep", "--sweep-args", "--shapes some"], "argument --shapes: invalid choice: 'some'"),
    (["--job", "sweep", "--sweep-args", "--json mine.json"], "--sweep-args: --json is set by the job itself"),
    (["--job", "all", "--bench-args", '--shapes "all'], "No closing quotation"),
    (["--job", "sweep", "--sweep-args", "--grid /tmp/grid.json"], "must be a file of this checkout under tests/"),
]
# --job ab's (the same test below)
GOOD_FILE = "tests/fixtures/good_submission.py"
AB_ARG_ERRORS = [
    (["--job", "ab"], "--job ab needs --against BASE[,BASE...]"),
    (["--job", "ab", "--against", "nobody-v9.py"], "submission file nobody-v9.py not found"),
    (["--job", "ab", "--against", "tests"], "tests is a folder, not a submission file"),
    (["--job", "ab", "--against", "submission.py", "--against", GOOD_FILE], "--against given more than once"),
    (["--job", "ab", "--against", GOOD_FILE, "--ab-args", "--json x.json"], "--json is set by the job"),
    (["--job", "ab", "--against", GOOD_FILE, "--ab-args", "--rounds x"], "argument --rounds: invalid int"),
    (["--job", "ab", "--against", GOOD_FILE, "--ab-args", "extra.py"], "the files come from --submission"),
]


@pytest.mark.parametrize("args,message", JOB_ARG_ERRORS + AB_ARG_ERRORS,
                         ids=[" ".join(a) for a, _ in JOB_ARG_ERRORS + AB_ARG_ERRORS])
def test_modal_run_rejects_bad_job_arguments_before_connecting(modal_runs, args, message):
    proc = modal_runs[("token", *args)]
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and message in proc.stderr, proc.stderr


UNKNOWN_OPTIONS = [["--bogus"], ["--job", "bench", "--bogus=1"]]


@pytest.mark.parametrize("args", UNKNOWN_OPTIONS, ids=["--bogus", "--bogus=1"])
def test_an_unknown_option_is_reported_before_the_token_check(modal_runs, args):
    """No token here: the unknown option is what is reported (it was the token before)."""
    proc = modal_runs[("no token", *args)]
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()], proc.stderr
    assert "error: no option --bogus" in proc.stderr and "--bench-args" in proc.stderr, proc.stderr


UNREACHABLE_ARGS = [[], ["--job", "all"]]


@pytest.mark.parametrize("args", UNREACHABLE_ARGS, ids=["no arguments (eval)", "--job all"])
def test_modal_unreachable_is_one_line(modal_runs, args):
    """A token but no way to Modal's server (here a closed local port as the server): one line,
    exit 2, at once (modal itself would retry for a minute, then print a traceback)."""
    proc = modal_runs[("token, no network", *args)]
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()], proc.stderr
    assert "error: cannot reach Modal at 127.0.0.1:9" in proc.stderr


def test_without_modal_or_modal_run_it_says_so_in_one_line(tmp_path):
    """`python3 modal_app.py` where the modal package is missing names the install; with it,
    the `modal run` command line to use. Exit 2 both."""
    hide = ("import runpy, sys; sys.modules['modal'] = None; sys.argv = ['modal_app.py', '--job', 'all']; "
            "runpy.run_path('modal_app.py', run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", hide], cwd=ROOT, env=no_token_env(tmp_path), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "the modal package is not installed" in proc.stderr and 'pip install -e ".[modal]"' in proc.stderr
    proc = subprocess.run([sys.executable, "modal_app.py", "--job", "all"], cwd=ROOT, env=no_token_env(tmp_path),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "modal run modal_app.py --job all" in proc.stderr


def test_bench_option_parser_mirrors_bench_kernel():
    """The options checked locally are bench_kernel.py's own (benchmarks/bench_options.py, which
    imports no torch, since the local side may lack it): the same names, values taken or not, int
    types and choices."""
    from benchmarks import bench_kernel

    def options(parser):
        return {tuple(a.option_strings): a for a in parser._actions if a.option_strings and a.dest != "help"}

    real, mirror = options(bench_kernel.build_parser()), options(modal_app.bench_option_parser())
    assert set(real) == set(mirror)
    for flags, action in real.items():
        copy = mirror[flags]
        assert copy.nargs == action.nargs and copy.dest == action.dest, flags
        assert copy.type == (action.type if action.type in (int, float) else None), flags
        assert list(copy.choices or []) == list(action.choices or []), flags


def test_click_passes_quoted_bench_args_through():
    """`modal run` builds its options from main(): a quoted option string that starts with
    "--" arrives whole (checked with modal's own command builder, where it has one)."""
    run = pytest.importorskip("modal.cli.run")
    build = getattr(run, "_get_click_command_for_local_entrypoint", None)
    if build is None:
        pytest.skip("this modal version builds its command line elsewhere")
    command = build(modal_app.app, modal_app.main)
    ctx = command.make_context("modal_app.py", ["--job", "bench", "--bench-args", "--shapes all --reps 80",
                                                "--sweep-args=--backends cuda"])
    assert ctx.params["job"] == "bench" and ctx.params["bench_args"] == "--shapes all --reps 80"
    assert ctx.params["sweep_args"] == "--backends cuda" and ctx.params["mode"] == "all"


def test_preflight_lets_good_job_arguments_through(monkeypatch):
    monkeypatch.setattr(modal_app, "_has_token", lambda: True)
    monkeypatch.setattr(modal_app, "modal_unreachable", lambda: None)
    assert modal_app.preflight(["--job", "all", "--gpu", "h100", "--bench-args", "--shapes all",
                                "--sweep-args", "--backends cuda --reps 20"]) is None
    assert modal_app.preflight([]) is None  # the default: eval of submission.py
    monkeypatch.setattr(modal_app, "modal_unreachable", lambda: "error: cannot reach Modal at x:443 (down)")
    assert modal_app.preflight(["--job", "check"]) == (2, "error: cannot reach Modal at x:443 (down)")


# --------------------------------------------------------------------------- the jobs: the GPU side, run here

DEMO_SUITE = textwrap.dedent('''
    import pytest


    def test_ok():
        assert 1 + 1 == 2


    @pytest.mark.parametrize("x", [1, 2])
    def test_compare(x):
        assert x == 1, f"x is {x}"


    @pytest.mark.skip(reason="needs a CUDA GPU")
    def test_skipped():
        pass


    @pytest.fixture
    def broken():
        raise RuntimeError("fixture broke")


    def test_error(broken):
        pass
''')


def test_check_step_runs_pytest_and_returns_the_junit_summary(tmp_path):
    """The check body on a small suite: counts, each failure's pytest id and message, skip
    reasons; a failed test fails the step."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_demo.py").write_text(DEMO_SUITE)
    result = modal_app.job_step("check", kit_dir=tmp_path, echo=False)
    assert result["junit"] == {"tests": 5, "failures": 1, "errors": 1, "skipped": 1, "passed": 2,
                               "seconds": result["junit"]["seconds"]}
    assert result["failures"][0] == {"name": "tests/test_demo.py::test_compare[2]", "kind": "failure",
                                      "message": "AssertionError: x is 2 assert 2 == 1"}
    assert result["failures"][1]["name"] == "tests/test_demo.py::test_error" and "fixture broke" in \
        result["failures"][1]["message"]
    assert result["skipped"] == {"needs a CUDA GPU": 1}
    assert result["returncode"] == 1 and result["passed"] is False and result["timed_out"] is False
    assert result["command"].startswith("python3 -m pytest -q -rs -p no:cacheprovider --junitxml=OUT/junit.xml")
    (tmp_path / "tests" / "test_demo.py").write_text("def test_ok():\n    pass\n")
    assert modal_app.job_step("check", kit_dir=tmp_path, echo=False)["passed"] is True


def test_check_command_collects_the_whole_suite(tmp_path, monkeypatch, capsys):
    """What the check step runs, with --collect-only here: every test file of the kit but the
    local side's, no error. Its pytest options in a session of this process (conftest.collect_here)."""
    cmd = modal_app.job_command("check", "", tmp_path)
    assert cmd[:3] == [sys.executable, "-m", "pytest"], cmd
    code, out, _, _ = collect_here(cmd[3:], monkeypatch, capsys)
    assert code == 0, out[-3000:]
    files = {line.split("::")[0] for line in out.splitlines() if "::" in line}
    expected = {f"tests/{p.name}" for p in (ROOT / "tests").glob("test_*.py")} - set(modal_app.CHECK_IGNORE)
    assert files == expected


# A stand-in for bench_kernel.py: records its arguments, prints a line, writes the recorded
# B200 sweep as its JSON and a table as its Markdown (or sleeps, for the time limit).
FAKE_BENCH = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path

    argv = sys.argv[1:]
    Path(os.environ["FAKE_BENCH_RECORD"]).write_text(json.dumps(argv))
    if os.environ.get("FAKE_BENCH_SLEEP"):
        time.sleep(float(os.environ["FAKE_BENCH_SLEEP"]))
    print("== 7168x16384x1: a progress line", flush=True)
    Path(argv[argv.index("--json") + 1]).write_text(Path(os.environ["FAKE_BENCH_JSON"]).read_text())
    Path(argv[argv.index("--md") + 1]).write_text("# Kernel benchmark results\\n\\n| shape | ... |\\n")
""")


@pytest.fixture
def fake_kit(tmp_path, monkeypatch):
    kit = tmp_path / "kit"
    (kit / "benchmarks").mkdir(parents=True)
    (kit / "benchmarks" / "bench_kernel.py").write_text(FAKE_BENCH)
    monkeypatch.setenv("FAKE_BENCH_RECORD", str(tmp_path / "argv.json"))
    monkeypatch.setenv("FAKE_BENCH_JSON", str(FIXTURES / "sweep-b200.json"))
    return kit


@pytest.mark.parametrize("step, extra, argv", [
    ("bench", "--shapes all --reps 80", ["--json", "OUT/bench.json", "--md", "OUT/bench.md", "--shapes", "all",
                                         "--reps", "80"]),
    ("sweep", "--backends 'cuda'", ["--sweep", "--json", "OUT/sweep.json", "--md", "OUT/sweep.md", "--backends",
                                    "cuda"]),
    ("roofline", "", ["--roofline", "--json", "OUT/roofline.json", "--md", "OUT/roofline.md"]),
], ids=["bench", "sweep", "roofline"])
def test_bench_steps_pass_their_arguments_and_return_the_files(fake_kit, tmp_path, step, extra, argv):
    result = modal_app.job_step(step, extra, kit_dir=fake_kit, echo=False)
    seen = json.loads((tmp_path / "argv.json").read_text())
    assert [re.sub(r"^/.*/(\w+\.(json|md))$", r"OUT/\1", a) for a in seen] == argv
    assert result["command"] == "python3 benchmarks/bench_kernel.py " + " ".join(argv)
    assert result["json"] == json.loads((FIXTURES / "sweep-b200.json").read_text())
    assert result["md"].startswith("# Kernel benchmark results")
    assert result["passed"] is True and "a progress line" in result["output_tail"]


def test_a_step_is_stopped_at_its_limit(fake_kit, monkeypatch):
    monkeypatch.setenv("FAKE_BENCH_SLEEP", "60")
    monkeypatch.setitem(modal_app.STEP_TIMEOUT_S, "bench", 2)
    t0 = time.monotonic()
    result = modal_app.job_step("bench", "", kit_dir=fake_kit, echo=False)
    assert time.monotonic() - t0 < 30
    assert result["timed_out"] is True and result["passed"] is False and result["json"] is None


@pytest.mark.skipif(modal_app.gpu_name() != "cpu (no CUDA)", reason="checks bench_kernel.py's refusal without a GPU")
def test_bench_step_without_a_gpu_reports_bench_kernels_refusal():
    result = modal_app.job_step("bench", "", kit_dir=ROOT, echo=False)
    assert result["returncode"] == 2 and result["passed"] is False and result["json"] is None
    assert "needs a CUDA GPU" in result["output_tail"]
    provenance = {"kit_revision": "r", "kernel_revision": "k", "gpu_requested": "B200"}
    _, markdown, _ = modal_app.job_report(result, provenance)
    assert "bench: FAIL (exit 2)" in markdown and "needs a CUDA GPU" in markdown


# --------------------------------------------------------------------------- the jobs: the local side


class FakeJobs:
    """Stands in for the jobs' Modal function: one outcome (a result, or an exception to raise)
    per step; records the calls and the GPU asked for."""

    def __init__(self, outcomes):
        self.outcomes, self.calls, self.gpu = outcomes, [], None

    def with_options(self, gpu):
        self.gpu = gpu
        return self

    def remote(self, step, extra):
        self.calls.append((step, extra))
        outcome = self.outcomes[step]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


ENV = {"device": "NVIDIA B200", "driver": "580.65.06", "torch": "2.9.1+cu130", "triton": "3.5.1",
       "python": "3.12.12", "date": "2026-12-01"}


def check_result(passed: bool) -> dict:
    failures = [] if passed else [{"name": "tests/test_cuda_backend.py::test_gpu_shapes[x]", "kind": "failure",
                                   "message": "AssertionError: mismatch"}]
    return {"step": "check", **ENV, "command": "python3 -m pytest -q", "returncode": 0 if passed else 1,
            "seconds": 200.0, "timed_out": False, "output_tail": "...\n", "passed": passed,
            "junit": {"tests": 430, "failures": len(failures), "errors": 0, "skipped": 10,
                      "passed": 420 - len(failures), "seconds": 190.2},
            "failures": failures, "skipped": {"checks the CPU refusal": 10}}


def sweep_result() -> dict:
    results = json.loads((FIXTURES / "sweep-b200.json").read_text())
    results["info"].update(kernel_revision=apply_table_kernel_revision(), kit_revision="unknown")
    return {"step": "sweep", **ENV, "command": "python3 benchmarks/bench_kernel.py --sweep", "returncode": 0,
            "seconds": 900.0, "timed_out": False, "output_tail": "", "passed": True, "json": results,
            "md": "# Kernel benchmark results\n\n| table |\n"}


def apply_table_kernel_revision():
    from benchmarks import apply_table
    return apply_table.kernel_revision()


def test_job_all_reports_every_step_even_after_a_failure(tmp_path, monkeypatch, capsys):
    """check fails, bench's container fails, sweep passes: all three run in turn, each printed
    and written (JSON and Markdown named by step, GPU model and date) with the checkout's
    revision; the sweep's JSON is what apply_table reads; exit 1."""
    from benchmarks import apply_table

    fake = FakeJobs({"check": check_result(False), "bench": RuntimeError("container exited\nwith code 137"),
                     "sweep": sweep_result()})
    monkeypatch.setattr(modal_app, "run_job_remote", fake)
    with pytest.raises(SystemExit) as exc:
        entry(job="all", out=str(tmp_path / "out"), bench_args="--shapes all", sweep_args="--backends cuda")
    assert exc.value.code == 1
    assert fake.calls == [("check", ""), ("bench", "--shapes all"), ("sweep", "--backends cuda")] and fake.gpu is None
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert [re.sub(r"\d{8}-\d{6}", "DATE", n) for n in names] == [
        "bench-b200-DATE.json", "bench-b200-DATE.md", "check-nvidia-b200-DATE.json", "check-nvidia-b200-DATE.md",
        "sweep-nvidia-b200-DATE.json", "sweep-nvidia-b200-DATE.md"]
    records = {n.split("-")[0]: json.loads((tmp_path / "out" / n).read_text()) for n in names if n.endswith(".json")}
    revision = apply_table.kit_revision(ROOT)
    for step, record in records.items():
        assert record["info"]["kit_revision"] == revision and record["info"]["gpu_requested"] == "B200", step
        assert record["job"]["step"] == step
    assert records["check"]["junit"]["failures"] == 1 and records["check"]["info"]["driver"] == "580.65.06"
    assert records["check"]["failures"][0]["name"] == "tests/test_cuda_backend.py::test_gpu_shapes[x]"
    assert records["bench"]["job"]["error"] == ("the remote run failed: RuntimeError: container exited with code 137")
    sweep = records["sweep"]
    assert set(sweep) >= {"info", "command", "rows", "sweeps", "job"}
    assert sweep["info"]["device"] == "NVIDIA B200" and sweep["info"]["driver"] == "580.65.06"
    assert sweep["info"]["kernel_revision"] == apply_table.kernel_revision()
    sub = tmp_path / "submission.py"
    sub.write_text((ROOT / "submission.py").read_text())
    sweep_json = next((tmp_path / "out").glob("sweep-*.json"))
    assert apply_table.main([str(sweep_json), "--submission", str(sub), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "check: FAIL (419 passed, 1 failed, 0 with errors, 10 skipped in 190.2 s; exit 1)" in out
    assert "bench: FAIL (the remote run failed: RuntimeError: container exited with code 137)" in out
    assert "sweep: PASS (exit 0)" in out
    assert "### 7168x16384x1 cuda: 8 configs ranked, 1 wrong (the first 5)" in out
    assert "| 1 | (32, 2, 8, 2, 1, 2, 2, 0, 1) | 11.00 | 10.05 |" in out  # the tie rule's winner first
    assert f"python3 benchmarks/apply_table.py {sweep_json}" in out
    markdown = (tmp_path / "out" / names[5]).read_text()
    assert markdown.startswith("# Config sweep on NVIDIA B200")
    assert "### 7168x16384x1 cuda: 8 configs ranked, 1 wrong\n" in markdown  # the file holds every config
    assert "## Kernel benchmark results" in markdown


def test_job_on_another_gpu_and_a_passing_step(tmp_path, monkeypatch, capsys):
    fake = FakeJobs({"check": check_result(True)})
    monkeypatch.setattr(modal_app, "run_job_remote", fake)
    entry(job="check", gpu="H100", out=str(tmp_path))  # returns: every step passed
    assert fake.gpu == "H100" and fake.calls == [("check", "")]
    out = capsys.readouterr().out
    assert out.rstrip().endswith("check: PASS (420 passed, 0 failed, 0 with errors, 10 skipped in 190.2 s; exit 0)")
    assert "- 10 x checks the CPU refusal" in out


def test_job_without_a_token_or_connection_stops_in_one_line(tmp_path, monkeypatch, capsys):
    for error, said in ((modal.exception.AuthError("no token"), "modal setup"),
                        (modal.exception.ConnectionError("Deadline\nexceeded"),
                         "cannot reach Modal: Deadline exceeded")):
        fake = FakeJobs({"check": error, "bench": check_result(True)})
        monkeypatch.setattr(modal_app, "run_job_remote", fake)
        with pytest.raises(SystemExit) as exc:
            entry(job="all", out=str(tmp_path))
        assert exc.value.code == 2 and fake.calls == [("check", "")]
        err = capsys.readouterr().err
        assert said in err.strip().splitlines()[-1]
    assert list(tmp_path.iterdir()) == []


def test_no_arguments_runs_eval_only(tmp_path, monkeypatch):
    """`modal run modal_app.py` as before: eval of submission.py, mode all, kit harness."""
    evals, jobs = FakeRemote([]), FakeJobs({})
    monkeypatch.setattr(modal_app, "run_remote", evals)
    monkeypatch.setattr(modal_app, "run_job_remote", jobs)
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(modal_app, "default_out", lambda gpu: tmp_path / "r.json")
    entry()
    assert evals.calls and evals.calls[0][1:] == ("all", 1, None, None, ["kit"], "2026-01-13") and jobs.calls == []
    assert evals.calls[0][0] == (ROOT / "submission.py").read_text()


# --------------------------------------------------------------------------- --job ab


def test_ab_job_on_cpu_checks_then_says_timing_needs_a_gpu():
    """The GPU side of --job ab, run here: the files go to eval.py ab (NEW first), which on this
    CPU checks them and stops with its one line."""
    new = {"name": "mine.py", "source": source("good_submission")}
    against = [{"name": "base.py", "source": source("good_plain_scales")}]
    result = modal_app.ab_job(new, against, "--shapes tests/fixtures/tiny.txt --check-shapes tests/fixtures/tiny.txt",
                              kit_dir=ROOT, echo=False)
    assert [f["file"] for f in result["files"]] == ["mine.py", "base.py"]
    assert result["command"].startswith("python3 eval.py ab TMP/file0/mine.py TMP/file1/base.py --new-first --json")
    if modal_app.gpu_name() == "cpu (no CUDA)":
        assert result["returncode"] == 2 and result["passed"] is False
        assert "NEW TMP/file0/mine.py: PASS" in result["output_tail"]
        assert "timing needs a CUDA GPU" in result["output_tail"]


def test_ab_entrypoint_writes_json_and_markdown(tmp_path, monkeypatch, capsys):
    """--job ab's local side: one remote call with the submission's source and each --against
    file's; ab's table printed; JSON and Markdown under --out naming each file."""
    import random as _random

    from test_ab import synthetic_record

    import ab as ab_module
    record = synthetic_record(_random.Random(1), 6, {"7168x16384x1": 0.97})
    record["comparisons"] = ab_module.analyze(record)
    remote_result = {"step": "ab", "device": "NVIDIA B200", "driver": "580", "torch": "2.9.1", "triton": "3.5.1",
                     "python": "3.12", "date": "2026-12-01", "command": "python3 eval.py ab ...", "returncode": 0,
                     "passed": True, "json": record, "output_tail": "",
                     "files": [{"file": "submission.py", "name": "submission.py"},
                               {"file": "base.py", "name": "base.py"}]}
    fake = FakeRemote(remote_result)
    monkeypatch.setattr(modal_app, "run_ab_remote", fake)
    base = tmp_path / "base.py"
    base.write_text(source("good_plain_scales"))
    entry(job="ab", submission=str(FIXTURES / "good_submission.py"), against=f"{base},{base}",
          out=str(tmp_path / "out"), ab_args="--rounds 6")
    (new, bases, ab_args), = fake.calls
    assert new == {"name": "good_submission.py", "source": source("good_submission")} and ab_args == "--rounds 6"
    assert bases == [{"name": "base.py", "source": source("good_plain_scales")}] * 2
    printed = capsys.readouterr().out
    assert "verdict: NEW is faster by" in printed and "ab: PASS" in printed
    names = sorted(re.sub(r"\d{8}-\d{6}", "DATE", p.name) for p in (tmp_path / "out").iterdir())
    assert names == ["ab-nvidia-b200-DATE.json", "ab-nvidia-b200-DATE.md"]
    md = next((tmp_path / "out").glob("*.md")).read_text()
    assert "- `base.py`: the local file base.py" in md
    saved = json.loads(next((tmp_path / "out").glob("*.json")).read_text())
    assert saved["ab"]["comparisons"][0]["geomean"]["verdict"] == "faster"
    monkeypatch.setattr(modal_app, "run_ab_remote", FakeRemote(RuntimeError("container exited")))
    with pytest.raises(SystemExit) as exc:
        entry(job="ab", submission=str(FIXTURES / "good_submission.py"), against=str(base),
              out=str(tmp_path / "out2"))
    assert exc.value.code == 1
    assert "ab: FAIL (the remote run failed: RuntimeError: container exited)" in capsys.readouterr().out




def test_preflight_lets_good_ab_arguments_through(monkeypatch):
    monkeypatch.setattr(modal_app, "_has_token", lambda: True)
    monkeypatch.setattr(modal_app, "modal_unreachable", lambda: None)
    monkeypatch.chdir(ROOT)
    assert modal_app.preflight(["--job", "ab", "--against", "submission.py,tests/fixtures/good_submission.py",
                                "--ab-args", "--rounds 30 --mode benchmark"]) is None


def test_job_roofline_writes_its_record_and_draws_the_plot_here(tmp_path, monkeypatch, capsys):
    """--job roofline: one step, bench_kernel.py --roofline in the container; its record and
    Markdown written like the other jobs', and the plot (a function of the record) drawn on this
    machine, since the container's PNG does not come back."""
    pytest.importorskip("matplotlib")
    record = json.loads((ROOT / "benchmarks" / "results" / "roofline-h100.json").read_text())
    record["info"]["device"] = "NVIDIA B200"  # as a B200 container's run would name it
    result = {"step": "roofline", **ENV, "command": "python3 benchmarks/bench_kernel.py --roofline", "returncode": 0,
              "seconds": 60.0, "timed_out": False, "output_tail": "", "passed": True, "json": record,
              "md": "# Roofline: time against floor + bytes / read bandwidth\n"}
    fake = FakeJobs({"roofline": result})
    monkeypatch.setattr(modal_app, "run_job_remote", fake)
    entry(job="roofline", out=str(tmp_path / "out"))  # returns (exit 0) when every step passed
    assert fake.calls == [("roofline", "")]
    names = sorted(re.sub(r"\d{8}-\d{6}", "DATE", p.name) for p in (tmp_path / "out").iterdir())
    assert names == ["roofline-nvidia-b200-DATE.json", "roofline-nvidia-b200-DATE.md", "roofline-nvidia-b200-DATE.png"]
    assert next((tmp_path / "out").glob("*.png")).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "roofline plot written to" in capsys.readouterr().err


# --------------------------------------------------------------------------- --image: the pins or the runner's image


def packages(kind: str) -> list[str]:
    return [p for op, *args in modal_app.image_steps(kind) if op in ("pip", "uv") for p in args[0]]


def test_the_leaderboard_image_keeps_its_pins_and_is_the_default():
    steps = modal_app.image_steps("leaderboard")
    assert steps[0] == ("registry", modal_app.CUDA_IMAGE, modal_app.PYTHON_VERSION)
    assert ("pip", modal_app.TORCH_PACKAGES, modal_app.TORCH_INDEX_URL) in steps
    assert packages("leaderboard") == [*modal_app.TORCH_PACKAGES, *modal_app.PYPI_PACKAGES]
    assert modal_app.DEFAULT_IMAGE == "leaderboard" and modal_app.IMAGE_KIND == "leaderboard"
    assert inspect.signature(modal_app.main.info.raw_f).parameters["image"].default == "leaderboard"


def test_the_runner_image_is_kernelbots_at_4bdd839():
    """gpu-mode/kernelbot src/runners/modal_runner.py at 4bdd839: CUDA 13.3.0 devel on Ubuntu 24.04,
    Python 3.13, the CUTLASS DSL 4.5.2, cuda-python 13.0, torch 2.12.0 installed last (by uv),
    the CUTLASS v4.5.2 headers and MathDx with their include paths."""
    steps = modal_app.image_steps("runner")
    assert steps[0] == ("registry", "nvidia/cuda:13.3.0-devel-ubuntu24.04", "3.13")
    installs = [args[0] for op, *args in steps if op in ("pip", "uv")]
    assert all(op != "pip" for op, *_ in steps), "kernelbot installs with uv"
    assert installs[-1] == ("torch==2.12.0",)
    assert {"nvidia-cutlass-dsl==4.5.2", "cuda-python[all]==13.0", "numpy~=2.3"} <= set(packages("runner"))
    assert not any(p.startswith(("torch==2.9", "triton==")) for p in packages("runner"))
    run = " ".join(c for op, *args in steps if op == "run" for c in args[0])
    assert "--branch v4.5.2 https://github.com/NVIDIA/cutlass.git /opt/cutlass" in run
    assert modal_app.RUNNER_MATHDX["sha256"] in run and "sha256sum -c" in run
    assert ("env", modal_app.RUNNER_ENV) in steps
    assert "/opt/cutlass/include" in modal_app.RUNNER_ENV["CPLUS_INCLUDE_PATH"]
    assert "git" in modal_app.RUNNER_APT_PACKAGES  # the server harness's fetch step needs it


@pytest.mark.parametrize("kind", ["leaderboard", "runner"])
def test_each_image_fetches_the_server_files_and_kernelbots_names_itself_and_builds_offline(kind):
    steps = modal_app.image_steps(kind)
    assert steps[-1] == ("env", {modal_app.ENV_IMAGE: kind})
    fetch = [c for date, commit in modal_app.SERVER_COMMITS.items()
             for c in modal_app.server_fetch_commands(commit, modal_app.SERVER_DIRS[date])]
    assert steps[-3:-1] == [("run", tuple(fetch)), ("run", tuple(modal_app.kernelbot_fetch_commands()))]
    assert isinstance(modal_app.build_base_image(kind), modal.Image)  # defined lazily: nothing is built here
    summary = modal_app.image_summary(kind)
    assert summary["image"] == kind and summary["base"] == steps[0][1] and summary["packages"] == packages(kind)
    json.dumps(summary)
    with pytest.raises(ValueError, match="--image must be one of leaderboard, runner"):
        modal_app.image_steps("latest")


def test_the_image_is_chosen_by_modal_runs_option_or_in_a_container_by_its_own(monkeypatch):
    assert modal_app.selected_image(["--image", "runner"]) == "runner"
    assert modal_app.selected_image(["--job", "check", "--image=runner"]) == "runner"
    assert modal_app.selected_image(["--image", "runner", "--image", "leaderboard"]) == "leaderboard"
    assert modal_app.selected_image([]) == "leaderboard"
    assert modal_app.selected_image(["--image", "bogus"]) == "leaderboard"  # the preflight refuses it
    monkeypatch.setattr(modal_app.modal, "is_local", lambda: False)
    monkeypatch.setenv(modal_app.ENV_IMAGE, "runner")
    assert modal_app.selected_image(["--image", "leaderboard"]) == "runner"


def test_modal_run_help_and_a_bad_image(modal_runs):
    proc = modal_runs["token", "--image", "latest"]
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "error: --image must be one of leaderboard, runner, got 'latest'"), proc.stderr
    help_text = " ".join(modal_app.help_text().split())
    assert "--image leaderboard|runner" in help_text and "CUDA 13.3.0, Python 3.13, torch==2.12.0" in help_text


def test_the_image_in_use_is_recorded_by_the_container(monkeypatch):
    assert modal_app.job_environment()["image"] == "none"
    monkeypatch.setenv(modal_app.ENV_IMAGE, "runner")
    env = modal_app.job_environment()
    assert env["image"] == "runner" and set(env) == set(modal_app.ENVIRONMENT_KEYS)
    result = modal_app.evaluate(source("good_submission"), "test", 1, TINY[:1])
    assert result["image"] == "runner" and result["passed"] is True


def test_eval_records_the_image_asked_for_and_refuses_one_the_module_did_not_define(tmp_path, monkeypatch, capsys):
    good = str(FIXTURES / "good_submission.py")
    fake = FakeRemote([{"device": "NVIDIA B200", "image": "runner", "harness": "kit", "revision": "this repository",
                        "passed": True, "modes": {}}])
    monkeypatch.setattr(modal_app, "run_remote", fake)
    with pytest.raises(SystemExit) as exc:
        entry(submission=good, image="runner", out=str(tmp_path / "r.json"))
    assert exc.value.code == 2 and fake.calls == []
    assert "this module defined its functions on the leaderboard image" in capsys.readouterr().err
    monkeypatch.setattr(modal_app, "IMAGE_KIND", "runner")
    entry(submission=good, image="runner", out=str(tmp_path / "r.json"))
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["image_requested"] == "runner" and saved["results"][0]["image"] == "runner"
    assert saved["image_pins"]["base"] == modal_app.RUNNER_CUDA_IMAGE
    assert "torch==2.12.0" in saved["image_pins"]["packages"]
    assert "image runner" in capsys.readouterr().err


def test_job_records_the_image_asked_for_and_the_one_it_ran_in(tmp_path, monkeypatch, capsys):
    fake = FakeJobs({"check": {**check_result(True), "image": "runner", "cutlass_dsl": "4.5.2"}})
    monkeypatch.setattr(modal_app, "run_job_remote", fake)
    monkeypatch.setattr(modal_app, "IMAGE_KIND", "runner")
    entry(job="check", image="runner", out=str(tmp_path))
    record = json.loads(next(tmp_path.glob("check-*.json")).read_text())
    info = record["info"]
    assert info["image_requested"] == "runner" and info["image"] == "runner" and info["cutlass_dsl"] == "4.5.2"
    assert info["image_pins"]["source"].startswith("gpu-mode/kernelbot src/runners/modal_runner.py at 4bdd839")
    assert "image runner;" in next(tmp_path.glob("check-*.md")).read_text()


# --------------------------------------------------------------------------- the upload rules before Modal

FORBIDDEN = "str" + "eam"


def broken_files(tmp_path) -> dict:
    good = source("good_submission")
    files = {"the word": good.replace("def custom_kernel", f"# a {FORBIDDEN.upper()} here\ndef custom_kernel", 1),
             "empty": "", "too big": good + "#" * 1_000_001}
    out = {}
    for name, text in files.items():
        path = tmp_path / (name.replace(" ", "_") + ".py")
        path.write_text(text)
        out[name] = path
    return out


@pytest.mark.parametrize("rule, words", [("the word", f"contains the word '{FORBIDDEN}'"),
                                         ("empty", "the file is empty"), ("too big", "over 1,000,000 bytes")])
def test_check_args_applies_the_upload_rules_to_what_a_job_sends(tmp_path, rule, words):
    bad = str(broken_files(tmp_path)[rule])
    good = str(FIXTURES / "good_submission.py")
    for args in ({"submission": bad}, {"submission": bad, "job": "ab", "against": good},
                 {"submission": good, "job": "ab", "against": f"{good},{bad}"}):
        problem = modal_app.check_args(mode="all", harness="kit", runs=1, **args)
        assert problem and problem.startswith(f"error: {bad} breaks the server's upload rules") and words in problem
        assert "\n" not in problem
    assert modal_app.check_args(good, "all", "kit", 1) is None
    assert modal_app.check_args(bad, "all", "kit", 1, job="check") is None  # the jobs send the checkout


@pytest.mark.parametrize("token", [False, True], ids=["no token", "a token, no network"])
def test_modal_run_refuses_a_file_breaking_the_upload_rules_before_the_token_and_the_network(modal_runs, word_file,
                                                                                             token):
    bad = word_file
    line = next(n for n, text in enumerate(bad.read_text().splitlines(), 1) if FORBIDDEN in text.lower())
    for args in (["--submission", str(bad)], ["--job", "ab", "--against", str(bad)]):
        proc = modal_runs[("token, no network" if token else "no token", *args)]
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip().splitlines() == [
            f"error: {bad} breaks the server's upload rules, so nothing is sent: line {line} contains the word "
            f"'{FORBIDDEN}' (any case, comments included): the server rejects the whole file"], proc.stderr


def test_check_args_applies_the_precheck_where_kernelguard_is_installed():
    """A file KernelGuard (the server's pre-check, 0.3.1) would reject is not sent: one line
    naming the rule; the kit's submission passes it."""
    pytest.importorskip("kernelguard")
    replay = str(FIXTURES / "wrong_cache_first_output.py")
    good = str(FIXTURES / "good_submission.py")
    for args in ({"submission": replay}, {"submission": good, "job": "ab", "against": replay}):
        problem = modal_app.check_args(mode="all", harness="kit", runs=1, **args)
        assert problem and problem.startswith(f"error: {replay}: the server's pre-check would refuse it, so nothing "
                                              "is sent: KernelGuard 0.3.1") and "LAST_CALL_REPLAY" in problem
        assert "\n" not in problem
    assert modal_app.check_args(str(ROOT / "submission.py"), "all", "kit", 1) is None


def test_without_kernelguard_the_precheck_is_skipped(monkeypatch):
    monkeypatch.setitem(sys.modules, "kernelguard", None)
    assert modal_app.upload_problem(str(FIXTURES / "wrong_cache_first_output.py")) is None


def test_a_missing_header_is_a_warning_not_a_refusal(tmp_path, monkeypatch, capsys):
    plain = tmp_path / "plain.py"
    plain.write_text("\n".join(source("good_submission").splitlines()[2:]) + "\n")
    assert modal_app.check_args(str(plain), "all", "kit", 1) is None
    fake = FakeRemote([])
    monkeypatch.setattr(modal_app, "run_remote", fake)
    entry(submission=str(plain), out=str(tmp_path / "r.json"))
    err = capsys.readouterr().err
    assert f"warning: {plain}: no header line '#!POPCORN leaderboard nvfp4_gemv'" in err and fake.calls


# --------------------------------------------------------------------------- the bench job's B200 projection


def bench_result(device: str) -> dict:
    """A bench step's result on ``device``: one cuda row and one triton row of a B200-like run."""
    rows = [{"shape": "7168x2048x4", "backend": "cuda", "kernel_us": 12.0, "ceiling_us": 10.0, "bytes": 33_090_000,
             "config": {"lpr": 8, "rpt": 2, "u": 4, "warps": 1, "decode": "f16x2", "v": 1, "pipe": "ptxas",
                        "minb": 20, "bsh": True}},
            {"shape": "7168x2048x4", "backend": "triton", "kernel_us": 13.0, "config": [16, 64, 2, 1]}]
    return {"step": "bench", **ENV, "device": device, "command": "python3 benchmarks/bench_kernel.py",
            "returncode": 0, "seconds": 300.0, "timed_out": False, "output_tail": "", "passed": True,
            "json": {"info": {"device": device, "sms": 148}, "rows": rows}, "md": "# Kernel benchmark results\n"}


@pytest.fixture
def stand_in_counts(monkeypatch):
    """SASS counts stood in for every config (nothing compiled)."""
    from benchmarks import inflight, projection
    counts = {"registers": 91, "shared": 3200, "loop": 400, "per_chunk": 50.0, "loads": 8, "bytes": 16, "burst": 8,
              "first_use": "F2FP"}
    monkeypatch.setattr(projection, "_STORE", [{}])
    monkeypatch.setattr(inflight, "measure", lambda cfg, arch: dict(counts))


def test_bench_on_a_b200_prints_its_times_beside_the_projection(stand_in_counts):
    """One table: shape, config, measured µs, projected µs, ratio (and the read ceilings'), for the
    cuda rows of a B200 run, in the file and on the terminal; none on another GPU."""
    provenance = {"kit_revision": "r", "kernel_revision": "k", "gpu_requested": "B200"}
    _, markdown, short = modal_app.job_report(bench_result("NVIDIA B200"), provenance)
    for text in (markdown, short):
        assert "## B200: measured beside the projection" in text
        assert "| shape | config | measured µs | projected µs | measured / projected |" in text
        rows = [ln for ln in text.splitlines() if ln.startswith("| 7168x2048x4 | lpr=8")]
        assert len(rows) == 1 and rows[0].split("|")[3].strip() == "12.00", rows
        projected = float(rows[0].split("|")[4])
        assert rows[0].split("|")[5].strip() == f"{12.0 / projected:.3f}"
    _, markdown, _ = modal_app.job_report(bench_result("NVIDIA H100 80GB HBM3"), provenance)
    assert "measured beside the projection" not in markdown


def test_a_projection_that_fails_leaves_the_bench_report_whole(monkeypatch):
    from benchmarks import projection

    def broken(record):
        raise RuntimeError("no counts")

    monkeypatch.setattr(projection, "measured_beside_projected", broken)
    provenance = {"kit_revision": "r", "kernel_revision": "k", "gpu_requested": "B200"}
    _, markdown, _ = modal_app.job_report(bench_result("NVIDIA B200"), provenance)
    assert "## Kernel benchmark results" in markdown and "not projected (RuntimeError: no counts)" in markdown
