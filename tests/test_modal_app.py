"""modal_app.py offline: Modal cannot be reached from here, so these tests check what can be
checked without it -- the module imports without a token, the function's settings, the
function body run locally on CPU (test mode, tiny shapes; ``all`` with the reduced CPU loops),
the local entrypoint's messages with a stand-in for the remote call, and ``modal run --help``.
The remote run itself is not exercised here."""

import json
import os
import subprocess
import sys

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
    assert set(modal_app.SERVER_FILES) == {"eval.py", "task.py", "utils.py", "reference.py"}
    assert {"nvfp4.py", "quant.py"} <= set(modal_app.LAYOUT_FILES) <= set(modal_app.KIT_FILES)
    for name in modal_app.KIT_FILES:
        assert (ROOT / name).is_file(), name


def test_modal_run_help_lists_the_flags(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "modal", "run", "modal_app.py", "--help"], cwd=ROOT,
                          env=no_token_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for flag in ("--submission", "--mode", "--runs", "--gpu", "--out"):
        assert flag in proc.stdout, flag


def test_modal_run_preflight_errors(tmp_path):
    """Problems a user fixes locally are reported before Modal is contacted."""
    env = no_token_env(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "modal", "run", "modal_app.py", "--mode", "test"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "modal setup" in proc.stderr, proc.stderr
    env.update(MODAL_TOKEN_ID="ak-test", MODAL_TOKEN_SECRET="as-test")  # a token, never used
    proc = subprocess.run([sys.executable, "-m", "modal", "run", "modal_app.py", "--submission",
                           str(tmp_path / "missing.py")], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "missing.py not found" in proc.stderr, proc.stderr


def test_plan():
    assert modal_app.plan("all") == ["test", "benchmark", "leaderboard"]
    assert modal_app.plan("benchmark") == ["benchmark"]
    with pytest.raises(ValueError, match="--mode"):
        modal_app.plan("profile")


# --------------------------------------------------------------------------- the function body


def test_function_body_passes_a_correct_submission_locally():
    result = modal_app.run_remote.local(source("good_submission"), "test", 1, TINY)
    assert result["passed"] is True, result
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

    result = {"device": "NVIDIA B200", "passed": True, "modes": {"benchmark": [run(10e3), run(12e3)]}}
    text = modal_app.report(result)
    assert "[benchmark run 1/2]" in text and "[benchmark run 2/2]" in text
    assert "geomean of means per run: 10.000, 12.000 µs; average 11.000 µs" in text


def test_function_body_reports_a_wrong_submission_and_stops():
    result = modal_app.run_remote.local(source("wrong_untouched_c"), "all", 1, TINY)
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
    crashed = {"device": "NVIDIA B200", "passed": False, "modes": {"test": [{
        "returncode": 1, "seconds": 3.0, "lines": {},
        "summary": {"mode": "test", "passed": False, "cases": []},
        "stderr_tail": "Traceback ...\nImportError: cannot import name 'custom_kernel'"}]}}
    fake = FakeRemote(crashed)
    monkeypatch.setattr(modal_app, "run_remote", fake)
    out = tmp_path / "r.json"
    with pytest.raises(SystemExit) as exc:
        entry(submission=str(FIXTURES / "good_submission.py"), mode="test", gpu="H100", out=str(out))
    assert exc.value.code == 1
    assert fake.gpu == "H100" and fake.calls[0][1:] == ("test", 1)
    printed = capsys.readouterr().out
    assert "eval.py exited 1; remote stderr (tail):" in printed and "ImportError" in printed
    saved = json.loads(out.read_text())
    assert saved["gpu_requested"] == "H100" and saved["passed"] is False
