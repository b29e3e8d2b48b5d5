"""Time an nvfp4_gemv submission on a cloud B200 (Modal), under the kit's harness, the
server's own harness, or both.

    modal setup                                  # once: stores a Modal token
    modal run modal_app.py --submission submission.py --mode all --runs 3
    modal run modal_app.py --harness both        # the kit's eval.py and the server's, same GPU

The GPU function lays out a harness's four files (eval.py, task.py, utils.py, reference.py)
and the submission renamed submission.py in a temporary directory and runs ``python eval.py
MODE FILE`` there with ``POPCORN_FD`` the write end of an ``os.pipe()`` -- test, then
benchmark, then leaderboard, each only if the previous one passed -- on the official shapes
of shapes.json. Harness ``kit``: this repository's files (plus nvfp4.py and quant.py, which its
reference.py and eval.py import). Harness ``server``: the literal files
of gpu-mode/reference-kernels at ``SERVER_COMMIT`` (``SERVER_SOURCES``), fetched by git when
the Modal image is built (never stored in this repository); the build records the full commit
hash it resolved, and every result carries it. The function returns the parsed ``key: value``
lines; the local side prints the same tables for every harness (eval.py's formatter) and
writes a JSON file (default under benchmarks/results/).

Options: see ``OPTION_HELP`` (``modal run modal_app.py --help`` prints it). Arguments are
checked when `modal run` loads this module, before Modal is contacted.

The body of the GPU function is ``evaluate``, plain Python that runs anywhere (the tests run
it on CPU in test mode, with stand-in server files). Modal bills the container per second
while it runs.
"""

from __future__ import annotations

import inspect
import json
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Literal

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
# numpy; the CUTLASS DSL, which the server's eval.py imports (its OpError), at the version of
# the GPU MODE runner image that also pinned torch 2.9.1 from cu130.
PYPI_PACKAGES = ("numpy==2.3.5", "nvidia-cutlass-dsl==4.3.5")
SERVER_FILES = kit_eval.SERVER_FILES  # what the server copies
LAYOUT_FILES = (*SERVER_FILES, *kit_eval.KIT_SUPPORT_FILES)  # ... and what the kit's reference.py imports
KIT_FILES = (*LAYOUT_FILES, "shapes.json")
MODES = ("test", "benchmark", "leaderboard", "all")
HARNESSES = ("kit", "server", "both")
# The server's harness: gpu-mode/reference-kernels at the repository head the kit's inputs were
# compared with, bit for bit on an H100 (short hash: no full hash of it could be read; the image
# build resolves it with git -- an ambiguous or unknown prefix fails the build -- and records the
# full hash in SERVER_DIR/REVISION, which every server result carries).
SERVER_REPO_URL = "https://github.com/gpu-mode/reference-kernels"
SERVER_COMMIT = "f83cb92"
SERVER_SOURCES = {  # file in the run folder -> path in the repository
    "eval.py": "problems/nvidia/eval.py",
    "utils.py": "problems/nvidia/utils.py",
    "reference.py": "problems/nvidia/nvfp4_gemv/reference.py",
    "task.py": "problems/nvidia/nvfp4_gemv/task.py",
}
SERVER_DIR = "/root/server"
PROTOCOL_TIMEOUT_S = 1500  # one eval.py run
RESULTS_DIR = HERE / "benchmarks" / "results"
FUNCTION_OPTIONS = {"gpu": DEFAULT_GPU, "timeout": TIMEOUT_S}



def server_fetch_commands(commit: str = SERVER_COMMIT, dest: str = SERVER_DIR,
                          repo_url: str = SERVER_REPO_URL) -> list[str]:
    """Shell commands (one image build step each) that put the server's files of ``commit``
    into ``dest`` under their run-folder names, with the resolved full hash in dest/REVISION."""
    clone = "/tmp/reference-kernels"
    return [
        f"rm -rf {clone} && git clone --quiet --filter=blob:none --no-checkout {repo_url} {clone}",
        f"git -C {clone} rev-parse --verify --quiet {commit}^{{commit}} > {clone}.rev "
        f"|| (echo 'error: commit {commit} not found in {repo_url}' >&2; exit 1)",
        f"git -C {clone} checkout --quiet {commit} -- {' '.join(SERVER_SOURCES.values())}",
        f"mkdir -p {dest} && " + " && ".join(f"cp {clone}/{src} {dest}/{name}" for name, src in SERVER_SOURCES.items())
        + f" && mv {clone}.rev {dest}/REVISION && rm -rf {clone}",
    ]


# In the container the kit files sit in /root beside this module, as they do locally; the
# server's files in SERVER_DIR (a build step: local files have to come last).
image = (
    modal.Image.from_registry(CUDA_IMAGE, add_python=PYTHON_VERSION)
    .entrypoint([])
    .apt_install("git")
    .pip_install(*TORCH_PACKAGES, index_url=TORCH_INDEX_URL)
    .pip_install(*PYPI_PACKAGES)
    .run_commands(*server_fetch_commands())
)
for _name in KIT_FILES:
    image = image.add_local_file(HERE / _name, f"/root/{_name}")

app = modal.App(APP_NAME)


# ----------------------------------------------------------------------------- the GPU side

def plan(mode: str) -> list[str]:
    if mode not in MODES:
        raise ValueError(f"--mode must be one of {', '.join(MODES)}, got {mode!r}")
    return ["test", "benchmark", "leaderboard"] if mode == "all" else [mode]


def harness_plan(harness: str) -> list[str]:
    if harness not in HARNESSES:
        raise ValueError(f"--harness must be one of {', '.join(HARNESSES)}, got {harness!r}")
    return ["kit", "server"] if harness == "both" else [harness]


def harness_sources(harness: str, kit_dir: str | Path = HERE, server_dir: str | Path = SERVER_DIR) -> dict:
    """{file in the run folder: where it comes from} of one harness (the submission aside)."""
    if harness == "kit":
        return {name: Path(kit_dir) / name for name in LAYOUT_FILES}
    return {name: Path(server_dir) / name for name in SERVER_FILES}


def harness_revision(harness: str, server_dir: str | Path = SERVER_DIR) -> str:
    """What ran: "this repository" for the kit; the server's full commit hash (from the image
    build's REVISION file) for the server."""
    if harness == "kit":
        return "this repository"
    rev = Path(server_dir) / "REVISION"
    return rev.read_text().strip() if rev.is_file() else f"unknown (no {rev})"


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
             kit_dir: str | Path = HERE, harness: str = "kit", server_dir: str | Path = SERVER_DIR) -> dict:
    """Run one harness's eval.py in protocol mode on ``submission_source``, mode after mode, and
    return ``{"device", "harness", "revision", "passed", "modes": {mode: [run, ...]}}`` where
    each run holds the exit status, the parsed lines, the summary and the tail of stderr. A
    mode passes when eval.py exits 0, logs ``check: pass`` and every case passed (the server's
    leaderboard mode exits 0 after a failure)."""
    if harness not in ("kit", "server"):
        raise ValueError(f"harness must be kit or server, got {harness!r}")
    kit_dir = Path(kit_dir)
    shapes = kit_eval.load_shapes(kit_dir / "shapes.json")
    cases = {"test": test_shapes or shapes["tests"], "timed": benchmark_shapes or shapes["benchmarks"]}
    sol = kit_eval.sol_lookup(shapes)
    # The kit's eval.py also logs the median; the server's runs in the environment as it is.
    env = {"POPCORN_SEED": None, kit_eval.ENV_LOG_MEDIAN: "1" if harness == "kit" else None}
    result = {"device": gpu_name(), "harness": harness, "revision": harness_revision(harness, server_dir),
              "passed": True, "modes": {}}
    with tempfile.TemporaryDirectory(prefix="nvfp4_eval_") as tmp:
        work = Path(tmp)
        for name, src in harness_sources(harness, kit_dir, server_dir).items():
            shutil.copy(src, work / name)
        (work / "submission.py").write_text(submission_source)
        (work / "tests.txt").write_text(kit_eval.test_file_text(cases["test"]))
        (work / "benchmarks.txt").write_text(kit_eval.test_file_text(cases["timed"]))
        for m in plan(mode):
            for _ in range(1 if m == "test" else max(1, runs)):
                test_file = "tests.txt" if m == "test" else "benchmarks.txt"
                t0 = time.time()
                proc = kit_eval.run_protocol(work, m, test_file, timeout=PROTOCOL_TIMEOUT_S, env=env)
                summary = kit_eval.summarize(m, kit_eval.results_from_popcorn(proc.lines, m), sol)
                summary["passed"] = summary["passed"] and proc.returncode == 0 and proc.lines.get("check") == "pass"
                result["modes"].setdefault(m, []).append({
                    "returncode": proc.returncode, "seconds": round(time.time() - t0, 1),
                    "lines": proc.lines, "summary": summary, "stderr_tail": proc.stderr[-4000:]})
                if not summary["passed"]:
                    result["passed"] = False
                    return result
    return result


@app.function(image=image, **FUNCTION_OPTIONS)
def run_remote(submission_source: str, mode: str = "all", runs: int = 1,
               test_shapes: list[dict] | None = None, benchmark_shapes: list[dict] | None = None,
               harnesses: list[str] | None = None) -> list[dict]:
    """``evaluate`` once per harness (default: the kit's), in turn, on the same GPU."""
    return [evaluate(submission_source, mode, runs, test_shapes, benchmark_shapes, harness=h)
            for h in harnesses or ["kit"]]


# ----------------------------------------------------------------------------- the local side

def report(result: dict) -> str:
    """The tables of every run of one harness (eval.py's formatter) and, for repeated timed
    modes, the per-run geometric means and their average."""
    out = [f"=== harness: {result['harness']} ({harness_label(result)})", ""]
    for m, entries in result["modes"].items():
        geos = []
        for i, entry in enumerate(entries):
            title = f"[{m} run {i + 1}/{len(entries)}]" if len(entries) > 1 else f"[{m}]"
            out += [title, kit_eval.format_table(entry["summary"], result["device"])]
            if entry["returncode"] not in (0, kit_eval.EXIT_FAIL) or not entry["summary"]["cases"]:
                out.append(f"eval.py exited {entry['returncode']}; remote stderr (tail):\n"
                           + entry["stderr_tail"][-2000:])
            elif not entry["summary"]["passed"]:
                out.append("remote stderr (tail):\n" + entry["stderr_tail"][-1500:])
            geos.append(entry["summary"].get("geomean_mean_us"))
            out.append("")
        if m != "test" and len(entries) > 1:
            shown = ", ".join(kit_eval._fmt(g) for g in geos)
            ok = [g for g in geos if g is not None]
            avg = sum(ok) / len(ok) if ok and len(ok) == len(geos) else None
            out.append(f"{m}: geomean of means per run: {shown} µs; average {kit_eval._fmt(avg)} µs")
            out.append("")
    out.append(f"{result['harness']}: {'PASS' if result['passed'] else 'FAIL'}")
    return "\n".join(out)


def harness_label(result: dict) -> str:
    if result["harness"] == "kit":
        return "this repository's eval.py, task.py, utils.py, reference.py"
    return f"the server's files, {SERVER_REPO_URL.split('github.com/')[-1]} at {result['revision']}"


def comparison(results: list[dict]) -> str:
    """Verdict and geomean of means (last run) per mode, one column per harness."""
    head = f"{'mode':<12}" + "".join(f"{r['harness']:>24}" for r in results)
    lines = [f"harnesses side by side on {results[0]['device']}:", head]
    for m in plan("all"):
        cells = []
        for r in results:
            entry = (r["modes"].get(m) or [None])[-1]
            if entry is None:
                cells.append("not run")
                continue
            geo = entry["summary"].get("geomean_mean_us")
            cells.append(("PASS" if entry["summary"]["passed"] else "FAIL")
                         + ("" if geo is None else f" {kit_eval._fmt(geo)} µs"))
        lines.append(f"{m:<12}" + "".join(f"{c:>24}" for c in cells))
    return "\n".join(lines)


def default_out(gpu: str) -> Path:
    return RESULTS_DIR / f"modal-{gpu.lower().replace(':', 'x')}-{time.strftime('%Y%m%d-%H%M%S')}.json"


def _has_token() -> bool:
    from modal.config import config
    return bool(config.get("token_id")) and bool(config.get("token_secret"))


NO_TOKEN = "error: no Modal token found. Run `modal setup` once (or set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET)."

# The local entrypoint's options, in its parameter order: (metavar, what it does). `modal run`
# builds its options from main()'s signature without any help text, so this module prints
# this table for `modal run modal_app.py --help` (see preflight).
OPTION_HELP = {
    "submission": ("PATH", "the submission file (default submission.py)"),
    "mode": ("|".join(MODES), "test, benchmark or leaderboard; all = the three in turn, each only if the "
             "previous passed (default all)"),
    "harness": ("|".join(HARNESSES), "kit = this repository's eval.py, task.py, utils.py, reference.py; "
                f"server = those of {SERVER_REPO_URL.split('github.com/')[-1]} at {SERVER_COMMIT} (fetched when "
                "the image is built); both = kit, then server, in one container on the same GPU (default kit)"),
    "runs": ("N", "how often each timed mode runs, at least 1 (default 1): every run's table, then the "
             "average of the per-run geometric means"),
    "gpu": ("NAME", f"the Modal GPU type (default {DEFAULT_GPU}; e.g. H100). The server's reference.py uses "
            "FP4 torch._scaled_mm, which needs a B200"),
    "out": ("PATH", "where the JSON results go (default benchmarks/results/modal-GPU-DATE.json)"),
}


def help_text() -> str:
    lines = ["Usage: modal run modal_app.py [OPTIONS]", "",
             "  Run an nvfp4_gemv submission on a Modal GPU under the kit's harness, the server's own",
             "  harness, or both; print eval.py's tables; write the results as JSON.", "", "Options:"]
    for name, (metavar, text) in OPTION_HELP.items():
        lines.append(f"  --{name} {metavar}")
        lines += textwrap.wrap(text, 96, initial_indent="      ", subsequent_indent="      ",
                               break_on_hyphens=False)
    lines += ["  -h, --help", "      this text", "",
              "Modal's own options (--detach, --env, --profile, ...): `modal run --help`."]
    return "\n".join(lines)


def check_args(submission: str, mode: str, harness: str, runs) -> str | None:
    """The first argument error (a message), or None. ``runs`` may be the raw text."""
    for flag, value, choices in (("--mode", mode, MODES), ("--harness", harness, HARNESSES)):
        if value not in choices:
            return f"error: {flag} must be one of {', '.join(choices)}, got {value!r}"
    try:
        n = int(runs)
    except (TypeError, ValueError):
        return f"error: --runs must be a whole number (at least 1), got {runs!r}"
    if n < 1:
        return f"error: --runs must be at least 1, got {n}"
    if not Path(submission).is_file():
        return f"error: submission file {submission} not found"
    return None


def gpu_warning(harness: str, gpu: str) -> str | None:
    if "server" in harness_plan(harness) and "B200" not in gpu.upper():
        return (f"warning: --gpu {gpu}: the server's reference.py computes the expected output with FP4 "
                "torch._scaled_mm, which runs only on a B200 (compute capability 10.x); its cases will fail")
    return None


def _fail(message: str, code: int = 2):
    print(message, file=sys.stderr)
    raise SystemExit(code)


@app.local_entrypoint()
def main(submission: str = "submission.py", mode: Literal[MODES] = "all", harness: Literal[HARNESSES] = "kit",
         runs: int = 1, gpu: str = DEFAULT_GPU, out: str = ""):
    """The local side: check the arguments, run the harnesses remotely, print and save."""
    problem = check_args(submission, mode, harness, runs)
    if problem:
        _fail(problem)
    warning = gpu_warning(harness, gpu)
    if warning:
        print(warning, file=sys.stderr)
    path = Path(submission)
    fn = run_remote if gpu == DEFAULT_GPU else run_remote.with_options(gpu=gpu)
    print(f"running {path} on Modal ({gpu}), harness {harness}, mode {mode}, runs {runs} ...", file=sys.stderr)
    try:
        results = fn.remote(path.read_text(), mode, runs, None, None, harness_plan(harness))
    except modal.exception.AuthError:
        _fail(NO_TOKEN)
    except Exception as exc:  # the container failed: image build, timeout, GPU unavailable...
        _fail(f"error: the remote run failed: {type(exc).__name__}: {exc}", 1)
    passed = all(r["passed"] for r in results)
    print("\n\n".join(report(r) for r in results))
    if len(results) > 1:
        print("\n" + comparison(results))
    print("PASS" if passed else "FAIL")
    record = {"gpu_requested": gpu, "submission": str(path), "mode": mode, "runs": runs, "harness": harness,
              "passed": passed, "results": results}
    dest = Path(out) if out else default_out(gpu)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(record, indent=2) + "\n")
    print(f"results written to {dest}", file=sys.stderr)
    if not passed:
        raise SystemExit(1)


# ----------------------------------------------------------------------------- preflight
# `modal run` connects (and builds the image) before it calls main(), so what a user can fix
# locally is reported here, at import, when `modal run` loads this module: --help (modal's
# own help of main() has no descriptions), argument errors, then a missing token.

def _flag(argv: list[str], name: str, default: str) -> str:
    """The value of option ``name`` in ``argv`` (the last one given wins, as in click)."""
    value = default
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def preflight(argv: list[str]) -> tuple[int, str] | None:
    """(exit status, text) if ``modal run modal_app.py ARGS`` should stop before Modal is
    contacted (status 0: the help text, for stdout), else None."""
    if any(a in ("-h", "--help") for a in argv):
        return 0, help_text()
    defaults = {name: p.default for name, p in inspect.signature(main.info.raw_f).parameters.items()}
    args = {name: _flag(argv, f"--{name}", str(defaults[name])) for name in defaults}
    problem = check_args(args["submission"], args["mode"], args["harness"], args["runs"])
    if problem:
        return 2, problem
    if not _has_token() and _flag(argv, "--profile", "") == "":  # another profile: modal checks
        return 2, NO_TOKEN
    return None


def _loaded_by_modal_run() -> bool:
    prog = Path(sys.argv[0])
    is_modal = prog.name == "modal" or (prog.name == "__main__.py" and prog.parent.name == "modal")
    return is_modal and "run" in sys.argv[1:3] and modal.is_local()


if __name__ != "__main__" and _loaded_by_modal_run():
    _stop = preflight(sys.argv[2:])
    if _stop:
        print(_stop[1], file=sys.stdout if _stop[0] == 0 else sys.stderr)
        raise SystemExit(_stop[0])


if __name__ == "__main__":  # `python modal_app.py`: this file is run by Modal's command line
    _asked = any(a in ("-h", "--help") for a in sys.argv[1:])
    print("modal_app.py runs under Modal's command line: modal run modal_app.py [OPTIONS]; "
          "every option: modal run modal_app.py --help", file=sys.stdout if _asked else sys.stderr)
    raise SystemExit(0 if _asked else 2)
