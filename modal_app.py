"""Time an nvfp4_gemv submission on a cloud B200 (Modal) with the kit's own harness.

    modal setup                                  # once: stores a Modal token
    modal run modal_app.py --submission submission.py --mode all --runs 3

The GPU function lays out the server's files (eval.py, task.py, utils.py, reference.py, the
modules the kit's reference.py imports -- nvfp4.py, quant.py -- and the submission renamed
submission.py) in a temporary directory and runs ``python eval.py MODE
FILE`` there with ``POPCORN_FD`` the write end of an ``os.pipe()`` -- test, then benchmark,
then leaderboard, each only if the previous one passed -- on the official shapes of
shapes.json. It returns the parsed ``key: value`` lines; the local side prints eval.py's own
tables and writes a JSON file (default under benchmarks/results/).

Flags: --submission PATH, --mode test|benchmark|leaderboard|all, --runs N (the timed modes
run N times; each run's table and the mean of the per-run geometric means are printed),
--gpu NAME (default B200), --out PATH.

The body of the GPU function is ``evaluate``, plain Python that runs anywhere (the tests run
it on CPU in test mode). Modal bills the container per second while it runs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import modal

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
import eval as kit_eval  # noqa: E402  (imports without torch: tables, popcorn client)

# ----------------------------------------------------------------------------- settings
# Every pin lives here (README says why these).
APP_NAME = "nvfp4-gemv-kit"
DEFAULT_GPU = "B200"
TIMEOUT_S = 3600  # one call: test + N x benchmark + N x leaderboard, with image start
CUDA_IMAGE = "nvidia/cuda:13.0.1-devel-ubuntu24.04"  # devel: nvcc for inline CUDA submissions
PYTHON_VERSION = "3.12"
TORCH_INDEX_URL = "https://download.pytorch.org/whl/cu130"  # the official runner's index
TORCH_PACKAGES = ("torch==2.9.1", "triton==3.5.1")  # triton: the version torch 2.9.1 requires
PYPI_PACKAGES = ("numpy==2.3.5",)
SERVER_FILES = kit_eval.SERVER_FILES  # what the server copies
LAYOUT_FILES = (*SERVER_FILES, *kit_eval.KIT_SUPPORT_FILES)  # ... and what the kit's reference.py imports
KIT_FILES = (*LAYOUT_FILES, "shapes.json")
MODES = ("test", "benchmark", "leaderboard", "all")
PROTOCOL_TIMEOUT_S = 1500  # one eval.py run
RESULTS_DIR = HERE / "benchmarks" / "results"
FUNCTION_OPTIONS = {"gpu": DEFAULT_GPU, "timeout": TIMEOUT_S}

# In the container the kit files sit in /root beside this module, as they do locally.
image = (
    modal.Image.from_registry(CUDA_IMAGE, add_python=PYTHON_VERSION)
    .entrypoint([])
    .pip_install(*TORCH_PACKAGES, index_url=TORCH_INDEX_URL)
    .pip_install(*PYPI_PACKAGES)
)
for _name in KIT_FILES:
    image = image.add_local_file(HERE / _name, f"/root/{_name}")

app = modal.App(APP_NAME)


# ----------------------------------------------------------------------------- the GPU side

def plan(mode: str) -> list[str]:
    if mode not in MODES:
        raise ValueError(f"--mode must be one of {', '.join(MODES)}, got {mode!r}")
    return ["test", "benchmark", "leaderboard"] if mode == "all" else [mode]


def gpu_name() -> str:
    """The GPU's name from nvidia-smi (this process never touches CUDA: eval.py's processes
    have the GPU to themselves); "cpu (no CUDA)" without one."""
    try:
        proc = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return "cpu (no CUDA)"
    names = proc.stdout.strip().splitlines()
    return names[0].strip() if proc.returncode == 0 and names else "cpu (no CUDA)"


def evaluate(submission_source: str, mode: str = "all", runs: int = 1,
             test_shapes: list[dict] | None = None, benchmark_shapes: list[dict] | None = None,
             kit_dir: str | Path = HERE) -> dict:
    """Run eval.py in protocol mode on ``submission_source``, mode after mode, and return
    ``{"device", "passed", "modes": {mode: [run, ...]}}`` where each run holds the exit
    status, the parsed lines, eval.py's summary and the tail of its stderr."""
    kit_dir = Path(kit_dir)
    shapes = kit_eval.load_shapes(kit_dir / "shapes.json")
    cases = {"test": test_shapes or shapes["tests"], "timed": benchmark_shapes or shapes["benchmarks"]}
    sol = kit_eval.sol_lookup(shapes)
    result = {"device": gpu_name(), "passed": True, "modes": {}}
    with tempfile.TemporaryDirectory(prefix="nvfp4_eval_") as tmp:
        work = Path(tmp)
        for name in LAYOUT_FILES:
            shutil.copy(kit_dir / name, work / name)
        (work / "submission.py").write_text(submission_source)
        (work / "tests.txt").write_text(kit_eval.test_file_text(cases["test"]))
        (work / "benchmarks.txt").write_text(kit_eval.test_file_text(cases["timed"]))
        for m in plan(mode):
            for _ in range(1 if m == "test" else max(1, runs)):
                test_file = "tests.txt" if m == "test" else "benchmarks.txt"
                t0 = time.time()
                proc = kit_eval.run_protocol(work, m, test_file, timeout=PROTOCOL_TIMEOUT_S,
                                             env={kit_eval.ENV_LOG_MEDIAN: "1", "POPCORN_SEED": None})
                summary = kit_eval.summarize(m, kit_eval.results_from_popcorn(proc.lines, m), sol)
                summary["passed"] = summary["passed"] and proc.returncode == 0
                result["modes"].setdefault(m, []).append({
                    "returncode": proc.returncode, "seconds": round(time.time() - t0, 1),
                    "lines": proc.lines, "summary": summary, "stderr_tail": proc.stderr[-4000:]})
                if proc.returncode != 0:
                    result["passed"] = False
                    return result
    return result


@app.function(image=image, **FUNCTION_OPTIONS)
def run_remote(submission_source: str, mode: str = "all", runs: int = 1,
               test_shapes: list[dict] | None = None, benchmark_shapes: list[dict] | None = None) -> dict:
    return evaluate(submission_source, mode, runs, test_shapes, benchmark_shapes)


# ----------------------------------------------------------------------------- the local side

def report(result: dict) -> str:
    """The tables of every run (eval.py's formatter) and, for repeated timed modes, the
    per-run geometric means and their average."""
    out = []
    for m, entries in result["modes"].items():
        geos = []
        for i, entry in enumerate(entries):
            title = f"[{m} run {i + 1}/{len(entries)}]" if len(entries) > 1 else f"[{m}]"
            out += [title, kit_eval.format_table(entry["summary"], result["device"])]
            if entry["returncode"] not in (0, kit_eval.EXIT_FAIL) or not entry["summary"]["cases"]:
                out.append(f"eval.py exited {entry['returncode']}; remote stderr (tail):\n"
                           + entry["stderr_tail"][-2000:])
            elif entry["returncode"] == kit_eval.EXIT_FAIL:
                out.append("remote stderr (tail):\n" + entry["stderr_tail"][-1500:])
            geos.append(entry["summary"].get("geomean_mean_us"))
            out.append("")
        if m != "test" and len(entries) > 1:
            shown = ", ".join(kit_eval._fmt(g) for g in geos)
            ok = [g for g in geos if g is not None]
            avg = sum(ok) / len(ok) if ok and len(ok) == len(geos) else None
            out.append(f"{m}: geomean of means per run: {shown} µs; average {kit_eval._fmt(avg)} µs")
            out.append("")
    out.append("PASS" if result["passed"] else "FAIL")
    return "\n".join(out)


def default_out(gpu: str) -> Path:
    return RESULTS_DIR / f"modal-{gpu.lower().replace(':', 'x')}-{time.strftime('%Y%m%d-%H%M%S')}.json"


def _has_token() -> bool:
    from modal.config import config
    return bool(config.get("token_id")) and bool(config.get("token_secret"))


NO_TOKEN = "error: no Modal token found. Run `modal setup` once (or set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET)."


def _fail(message: str, code: int = 2):
    print(message, file=sys.stderr)
    raise SystemExit(code)


@app.local_entrypoint()
def main(submission: str = "submission.py", mode: str = "all", runs: int = 1,
         gpu: str = DEFAULT_GPU, out: str = ""):
    path = Path(submission)
    if not path.is_file():
        _fail(f"error: submission file {path} not found")
    try:
        plan(mode)
    except ValueError as exc:
        _fail(f"error: {exc}")
    if runs < 1:
        _fail("error: --runs must be at least 1")
    fn = run_remote if gpu == DEFAULT_GPU else run_remote.with_options(gpu=gpu)
    print(f"running {path} on Modal ({gpu}), mode {mode}, runs {runs} ...", file=sys.stderr)
    try:
        result = fn.remote(path.read_text(), mode, runs)
    except modal.exception.AuthError:
        _fail(NO_TOKEN)
    except Exception as exc:  # the container failed: image build, timeout, GPU unavailable...
        _fail(f"error: the remote run failed: {type(exc).__name__}: {exc}", 1)
    result.update(gpu_requested=gpu, submission=str(path), mode=mode, runs=runs)
    print(report(result))
    dest = Path(out) if out else default_out(gpu)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results written to {dest}", file=sys.stderr)
    if not result["passed"]:
        raise SystemExit(1)


# ----------------------------------------------------------------------------- preflight
# `modal run` connects (and builds the image) before it calls main(), so the errors a user
# can fix locally are reported here, at import, when the module is loaded by `modal run`.

def _flag(argv: list[str], name: str, default: str) -> str:
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return default


def preflight(argv: list[str]) -> str | None:
    """The first problem that would stop ``modal run modal_app.py ARGS`` (None if none)."""
    if any(a in ("-h", "--help") for a in argv):
        return None
    if not _has_token() and _flag(argv, "--profile", "") == "":  # another profile: modal checks
        return NO_TOKEN
    sub = Path(_flag(argv, "--submission", "submission.py"))
    if not sub.is_file():
        return f"error: submission file {sub} not found"
    return None


def _loaded_by_modal_run() -> bool:
    prog = Path(sys.argv[0])
    is_modal = prog.name == "modal" or (prog.name == "__main__.py" and prog.parent.name == "modal")
    return is_modal and "run" in sys.argv[1:3] and modal.is_local()


if __name__ != "__main__" and _loaded_by_modal_run():
    _problem = preflight(sys.argv[2:])
    if _problem:
        print(_problem, file=sys.stderr)
        raise SystemExit(2)
