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

import pytest
from conftest import ROOT

modal = pytest.importorskip("modal")
import eval as kit_eval  # noqa: E402
import modal_app  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
TINY = [{"m": 128, "k": 256, "l": 1, "seed": 1111}, {"m": 128, "k": 256, "l": 2, "seed": 2222}]


def no_token_env(tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODAL_")}
    env["HOME"] = str(tmp_path)  # no ~/.modal.toml
    return env


def source(name: str) -> str:
    return (FIXTURES / f"{name}.py").read_text()


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


def test_modal_run_help_describes_every_option(tmp_path):
    """`modal run --help` describes every option of main(), with its choices (the table is
    main()'s signature, so it cannot drift), and stops before anything else (no token here)."""
    params = list(inspect.signature(modal_app.main.info.raw_f).parameters)
    assert list(modal_app.OPTION_HELP) == params
    proc = subprocess.run([sys.executable, "-m", "modal", "run", "modal_app.py", "--help"], cwd=ROOT,
                          env=no_token_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    for name, (metavar, what) in modal_app.OPTION_HELP.items():
        assert f"--{name.replace('_', '-')} {metavar}" in text and " ".join(what.split()) in text, name
    assert "--mode test|benchmark|leaderboard|all" in text and "--harness kit|server|both" in text
    assert "--job eval|check|bench|sweep|all" in text
    for job in ("check = the kit's whole test suite", "bench = benchmarks/bench_kernel.py", "sweep = bench_kernel.py",
                "all = check, bench, sweep in turn"):
        assert job in text, job


ARG_ERRORS = [
    (["--mode", "bogus"], "--mode must be one of test, benchmark, leaderboard, all, got 'bogus'"),
    (["--runs", "0"], "--runs must be at least 1, got 0"),
    (["--runs=x"], "--runs must be a whole number (at least 1), got 'x'"),
    (["--harness", "nope"], "--harness must be one of kit, server, both, got 'nope'"),
    (["--mode", "test", "--mode", "bogus"], "got 'bogus'"),  # the last one given counts, as in click
    (["--submission", "missing.py"], "missing.py not found"),
]


@pytest.mark.parametrize("args,message", ARG_ERRORS)
def test_modal_run_rejects_bad_arguments_before_connecting(tmp_path, args, message):
    """With a token (never used) Modal would be contacted next (a minute of retries without a
    network): a bad argument stops `modal run` first, in one line, exit 2."""
    env = no_token_env(tmp_path)
    env.update(MODAL_TOKEN_ID="ak-test", MODAL_TOKEN_SECRET="as-test")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "modal", "run", "modal_app.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=50)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and message in proc.stderr, proc.stderr
    assert time.monotonic() - t0 < 30


def test_modal_run_preflight_errors(tmp_path):
    """Without a token: the token is the problem named (after the arguments)."""
    env = no_token_env(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "modal", "run", "modal_app.py", "--mode", "test"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "modal setup" in proc.stderr, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "modal", "run", "modal_app.py", "--mode", "quick"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--mode must be one of" in proc.stderr, proc.stderr


def test_plan():
    assert modal_app.plan("all") == ["test", "benchmark", "leaderboard"]
    assert modal_app.plan("benchmark") == ["benchmark"]
    with pytest.raises(ValueError, match="--mode"):
        modal_app.plan("profile")
    assert modal_app.harness_plan("both") == ["kit", "server"]
    assert modal_app.harness_plan("server") == ["server"]
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
        lines = kit_eval.parse_popcorn(
            "benchmark-count: 1\nbenchmark.0.spec: m: 7168; k: 16384; l: 1; seed: 1111\n"
            f"benchmark.0.runs: 50\nbenchmark.0.mean: {mean_ns}\nbenchmark.0.std: 1.0\n"
            f"benchmark.0.err: 0.1\nbenchmark.0.best: {mean_ns}\nbenchmark.0.worst: {mean_ns}\n"
            f"benchmark.0.median: {mean_ns}\ncheck: pass\n")
        summary = kit_eval.summarize("benchmark", kit_eval.results_from_popcorn(lines, "benchmark"))
        return {"returncode": 0, "lines": lines, "summary": summary, "stderr_tail": ""}

    result = {"device": "NVIDIA B200", "harness": "kit", "revision": "this repository", "passed": True,
              "modes": {"benchmark": [run(10e3), run(12e3)]}}
    text = modal_app.report(result)
    assert "[benchmark run 1/2]" in text and "[benchmark run 2/2]" in text
    assert "geomean of means per run: 10.000, 12.000 µs; average 11.000 µs" in text


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
    assert fake.gpu == "H100" and fake.calls[0][1:] == ("test", 1, None, None, ["kit"])
    printed = capsys.readouterr().out
    assert "eval.py exited 1; remote stderr (tail):" in printed and "ImportError" in printed
    saved = json.loads(out.read_text())
    assert saved["gpu_requested"] == "H100" and saved["passed"] is False and saved["harness"] == "kit"
    assert saved["results"] == [crashed]


def summary_of(mode, text):
    lines = kit_eval.parse_popcorn(text)
    return lines, kit_eval.summarize(mode, kit_eval.results_from_popcorn(lines, mode))


def test_entrypoint_both_harnesses_side_by_side(tmp_path, monkeypatch, capsys):
    """--harness both: one remote call with both harnesses; each harness's tables under its
    name and revision, then one comparison table; the verdict is both verdicts."""
    spec = "m: 7168; k: 16384; l: 1; seed: 1111"

    def result(harness, revision, mean_ns, passed):
        lines, summary = summary_of("benchmark", f"benchmark-count: 1\nbenchmark.0.spec: {spec}\n"
                                    f"benchmark.0.runs: 40\nbenchmark.0.mean: {mean_ns}\nbenchmark.0.std: 9.0\n"
                                    f"benchmark.0.err: 1.0\nbenchmark.0.best: {mean_ns}\n"
                                    f"benchmark.0.worst: {mean_ns}\ncheck: pass\n")
        return {"device": "NVIDIA B200", "harness": harness, "revision": revision, "passed": passed,
                "modes": {"benchmark": [{"returncode": 0, "lines": lines, "summary": summary, "stderr_tail": ""}]}}

    full = "0123456789abcdef0123456789abcdef01234567"
    fake = FakeRemote([result("kit", "this repository", 10e3, True), result("server", full, 11e3, True)])
    monkeypatch.setattr(modal_app, "run_remote", fake)
    entry(submission=str(FIXTURES / "good_submission.py"), mode="benchmark", harness="both",
          out=str(tmp_path / "r.json"))
    assert fake.calls[0][-1] == ["kit", "server"]
    printed = capsys.readouterr().out
    assert "=== harness: kit (this repository's eval.py" in printed
    assert f"=== harness: server (the server's files, gpu-mode/reference-kernels at {full})" in printed
    assert re.search(r"benchmark\s+PASS 10\.000 µs\s+PASS 11\.000 µs", printed), printed
    assert re.search(r"test\s+not run\s+not run", printed)
    assert printed.rstrip().endswith("PASS")


def test_server_harness_on_another_gpu_warns(tmp_path, monkeypatch, capsys):
    assert modal_app.gpu_warning("kit", "H100") is None and modal_app.gpu_warning("server", "B200") is None
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
    assert re.fullmatch(r"[0-9a-f]{7,40}", modal_app.SERVER_COMMIT)
    assert modal_app.SERVER_SOURCES == {
        "eval.py": "problems/nvidia/eval.py", "utils.py": "problems/nvidia/utils.py",
        "reference.py": "problems/nvidia/nvfp4_gemv/reference.py", "task.py": "problems/nvidia/nvfp4_gemv/task.py"}
    assert set(modal_app.SERVER_SOURCES) == set(modal_app.SERVER_FILES)
    fetch = modal_app.server_fetch_commands()
    assert all(modal_app.SERVER_COMMIT in c for c in fetch[1:3]) and modal_app.SERVER_REPO_URL in fetch[0]
    assert modal_app.harness_sources("server") == {n: modal_app.Path(modal_app.SERVER_DIR) / n
                                                   for n in modal_app.SERVER_FILES}
    assert modal_app.harness_sources("kit") == {n: ROOT / n for n in modal_app.LAYOUT_FILES}


def test_server_fetch_commands_against_a_local_repository(tmp_path):
    """The image build steps, run here against a stand-in repository: the four files of the
    pinned (short) commit under their run-folder names, a later commit ignored, the full hash
    recorded; an unknown commit fails with a message."""
    repo = tmp_path / "reference-kernels"
    repo.mkdir()
    git("init", "-q", cwd=repo)
    for path in modal_app.SERVER_SOURCES.values():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(f"# {path} as pinned\n")
    git("add", ".", cwd=repo)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "pinned", cwd=repo)
    full = git("rev-parse", "HEAD", cwd=repo)
    (repo / "problems/nvidia/eval.py").write_text("# a later revision\n")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "later", cwd=repo)

    dest = tmp_path / "server"
    for command in modal_app.server_fetch_commands(full[:7], str(dest), str(repo)):
        proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, (command, proc.stderr)
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
    monkeypatch.setenv("FAKE_SERVER_RECORD", str(record))
    monkeypatch.setenv("POPCORN_SEED", "7")  # never passed on: the seeds of the test file count

    result = modal_app.evaluate(source("good_submission"), "all", 1, TINY, TINY, harness="server", server_dir=server)

    seen = [json.loads(line) for line in record.read_text().splitlines()]
    assert [r["argv"] for r in seen] == [["eval.py", "test", "tests.txt"], ["eval.py", "benchmark", "benchmarks.txt"],
                                         ["eval.py", "leaderboard", "benchmarks.txt"]]
    for r in seen:
        assert r["files"] == sorted([*modal_app.SERVER_FILES, "submission.py", "tests.txt", "benchmarks.txt"])
        assert r["tests"] == kit_eval.test_file_text(TINY)
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
