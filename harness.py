"""The nvfp4_gemv harness: the pieces that eval.py (its command line), ab.py, audit.py and the
tools share, in one module that imports only the standard library at the top (torch, utils,
reference and quant are imported where they are used, so that modal_app.py and anyone
formatting results can import it on a machine without torch).

What the server's ``problems/nvidia/eval.py`` does and where the kit differs is said at the
top of eval.py; the facts taken from the server (exit codes, seeds, the loops' repeats and
time limits) are the constants here, recorded in docs/server.md. A layout that runs the kit's
eval.py in protocol mode copies this file beside it (``KIT_SUPPORT_FILES``).

Public surface (what eval.py, ab.py, audit.py, cute_check.py, modal_app.py and benchmarks/ use;
every other name is private to this file):

* files and layout: ``HERE``, ``SHAPES_JSON``, ``SERVER_FILES``, ``KIT_SUPPORT_FILES``;
* exit codes and modes: ``EXIT_OK``, ``EXIT_USAGE``, ``EXIT_NO_FD``, ``EXIT_FAIL``,
  ``EXIT_BAD_TESTS``, ``EXIT_BAD_FD``, ``EXIT_INTERRUPTED``, ``EXIT_TERMINATED``, ``MODES``;
* the timed loops: ``BENCH_WARMUP``, ``BENCH_CASE``, ``LEADERBOARD_REPEATS``,
  ``HARNESS_DATES``, ``HARNESS_DATE``, ``LEADERBOARD_WARMUP``, ``LEADERBOARD_CASE``,
  ``MIN_WALL_NS``, ``MAX_WALL_NS``, ``REL_ERR_TARGET``, ``RECHECK_SEED_STEP``,
  ``CPU_MAX_REPEATS``, ``HEARTBEAT_S``, ``CASE_TIMEOUT_S``;
* cases and environment: ``INPUT_NAMES``, ``CASE_KEYS``, ``SHAPE_SETS``, ``ENV_DISTRIBUTION``,
  ``ENV_CHECK_INPUTS``, ``ENV_LOG_MEDIAN``, ``ENV_BACKEND``, ``ENV_HARNESS_DATE``,
  ``ENV_PROFILE_CONFIGS``, ``env_flag``, ``server_ncu_rule``;
* the upload rules and argument checks: ``MAX_SUBMISSION_BYTES``, ``FORBIDDEN_WORD``,
  ``REQUIRED_HEADERS``, ``static_problems``, ``header_warnings``, ``submission_problem``,
  ``writable_file_problem``;
* the server's pre-check: ``KERNELGUARD_VERSION``, ``KERNELGUARD_INSTALL``, ``Precheck``,
  ``kernelguard_precheck``, ``precheck_file``; the newest release beside it: ``KERNELGUARD_NEWEST``,
  ``ENV_KERNELGUARD_NEWEST``, ``KERNELGUARD_NEWEST_INSTALL``, ``kernelguard_newest_dir``,
  ``install_kernelguard_newest``; packages on the side: ``install_aside``;
* the one loader of a submission file: ``load_submission``, ``load_tool_submission`` (a tool's
  ``--submission``, one-line errors), ``KIT_OWN_FILES``, ``shadowed_files``,
  ``submission_import_problem`` (in the worker);
* commands as records name them (from the kit's root, files by their path in the kit):
  ``kit_path``, ``kit_command``;
* test files and shapes: ``TestCase``, ``TestFileError``, ``combine_seeds``,
  ``parse_test_cases``, ``with_secret``, ``case_problem``, ``read_test_file``, ``input_bytes``,
  ``gemv_bytes``, ``spec_line``, ``load_shapes``, ``test_file_text``, ``shape_set``, ``shape_cases``;
* impossible times: ``PEAK_BANDWIDTH``, ``peak_bandwidth``, ``floor_us``, ``impossible_time``,
  ``unknown_peak_note``, ``impossible_times``;
* statistics: ``Stats``, ``calculate_stats``, ``should_stop``, ``geomean``;
* in the worker process (or any process): ``run_benchmark_case`` (the timed loop, for
  ``Worker.call``), ``time_calls`` (the same loop on a kernel in this process),
  ``generate_case``, ``distributions``, ``no_cuda_driver`` (no CUDA, known without torch),
  ``cuda_available``, ``cuda_device_name`` (torch's answers, without torch where no driver is),
  ``backend_picks``, ``submission_kernel_revision``, ``user_traceback``, ``one_line``;
* the judge a submission cannot patch (human mode, ab, the audit): ``SEALED_MODULES``,
  ``SEALED_CALLABLES``, ``SEAL_UNSEALED``, ``SEALED_CLASSES``, ``SEALED_OPS``, ``Seal``,
  ``JudgeRefused``, ``JudgedWorker`` (``Worker``'s calls in a sealed process);
* the parent side: ``Worker``, ``WorkerDied``, ``Terminated``, ``sigterm_raises``, ``CaseResult``,
  ``safe_call``, ``backend_status``, ``warm_up``, ``run_test_mode``, ``run_timed_mode``,
  ``run_profile_mode``, ``run_mode``;
* messages of a failed check: ``labelled`` (which number is the result, which the expected
  value), ``brief`` (a mismatch in one short phrase, for tables), ``HINT_MARK`` (what begins a
  hint for a person);
* the protocol's client side (run eval.py as the server does, read its lines):
  ``ProtocolRun``, ``parse_popcorn``, ``run_protocol``, ``results_from_popcorn``;
* tables: ``sol_lookup``, ``summarize``, ``fmt``, ``format_table``.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import importlib.util
import io
import json
import math
import multiprocessing
import os
import pickle
import re
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback
import types
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHAPES_JSON = HERE / "shapes.json"

# The server copies its own eval.py, task.py, utils.py and reference.py beside the submission.
# A layout built from the kit's files (tests, modal_app.py) copies KIT_SUPPORT_FILES too: the
# kit's eval.py imports this file, its reference.py imports nvfp4.py, and distributions other
# than "official" need quant.py.
SERVER_FILES = ("eval.py", "task.py", "utils.py", "reference.py")
KIT_SUPPORT_FILES = ("harness.py", "nvfp4.py", "quant.py")

EXIT_OK, EXIT_USAGE, EXIT_NO_FD, EXIT_FAIL, EXIT_BAD_TESTS = 0, 2, 111, 112, 113
EXIT_BAD_FD = 1  # POPCORN_FD names no open descriptor: the server dies with a traceback, exit 1
MODES = ("test", "benchmark", "leaderboard", "profile")

# (max repeats, budget in ns of summed kernel time) of each timed loop. Each mode warms up on
# its first case only, then times every case.
BENCH_WARMUP = (200, 1e8)
BENCH_CASE = (200, 10e9)
# Leaderboard mode's (warm-up, per case) by the date of the server's eval.py that set them
# (gpu-mode/reference-kernels problems/nvidia/eval.py): "2025-11-11" is baaabf4 (baaabf45...),
# the files the nvfp4_gemv leaderboard ran on from 2025-11-11 to its deadline, 2025-11-29 (the
# public results were taken under it); "2026-01-13" is aaf640d (aaf640da..., "more loops"),
# unchanged to the head f83cb92 (f83cb92a...). Nothing else of this problem's harness differs
# between the two (the benchmark loop, the stopping rule, the 4 GiB L2 clear are the same).
LEADERBOARD_REPEATS = {
    "2025-11-11": ((200, 1e7), (200, 30e9)),
    "2026-01-13": ((1000, 5e8), (1000, 30e9)),
}
HARNESS_DATES = tuple(LEADERBOARD_REPEATS)
HARNESS_DATE = "2026-01-13"  # the default: the head the kit mirrors
LEADERBOARD_WARMUP, LEADERBOARD_CASE = LEADERBOARD_REPEATS[HARNESS_DATE]
MIN_WALL_NS = 1e8  # no stop before 100 ms of wall time ...
MAX_WALL_NS = 120e9  # ... and none later than 120 s
REL_ERR_TARGET = 1e-3
RECHECK_SEED_STEP = 13
CPU_MAX_REPEATS = 5  # host-clock fallback without CUDA: a verdict, not a timing

INPUT_NAMES = ("a", "b", "sfa", "sfb", "sfa_permuted", "sfb_permuted")  # c is the output
CASE_KEYS = ("m", "k", "l", "seed")  # what generate_input takes
# Named sets of shapes.json, the same words in eval.py, benchmarks/compare.py and
# benchmarks/bench_kernel.py: the official correctness cases, the timed cases, both.
SHAPE_SETS = ("tests", "benchmarks", "all")
HEARTBEAT_S = 10.0  # human mode: a "still running" line after this long in one case, and again
# Human mode's default --timeout per call in the worker: a benchmark case stops by 120 s of
# wall time (MAX_WALL_NS), a leaderboard case re-checks up to 1000 fresh inputs, and a first
# call on a new GPU compiles and tunes; 10 minutes leaves room for all of it on a slow machine.
CASE_TIMEOUT_S = 600.0
EXIT_INTERRUPTED = 130  # human mode, Ctrl-C (128 + SIGINT, as a shell reports it)
EXIT_TERMINATED = 143  # human mode, SIGTERM (128 + SIGTERM, as a shell reports a process it ended)
ENV_DISTRIBUTION = "NVFP4_EVAL_DISTRIBUTION"
ENV_CHECK_INPUTS = "NVFP4_EVAL_CHECK_INPUTS"
ENV_LOG_MEDIAN = "NVFP4_EVAL_LOG_MEDIAN"
ENV_BACKEND = "NVFP4_GEMV_BACKEND"
ENV_HARNESS_DATE = "NVFP4_EVAL_HARNESS_DATE"  # one of HARNESS_DATES: the leaderboard loop's repeats
# A file the profile mode's worker appends each case's kernel configurations to (``eval.py profile``
# sets it; the protocol's lines stay the server's).
ENV_PROFILE_CONFIGS = "NVFP4_EVAL_PROFILE_CONFIGS"

_CASE_RE = re.compile(r"\s*([a-zA-Z]+):\s*([a-zA-Z]+|[+-]?[0-9]+)\s*")


# =========================================================================== static rules
# What the server checks of the uploaded file before anything runs (gpu-mode/kernelbot,
# src/kernelbot/api/api_utils.py at 01a0072acaa33c85e532f89ef80479a765fcb756, to_submit_info:
# empty file, more than 1_000_000 bytes, not UTF-8, the forbidden word below in any case). The
# header lines are popcorn-cli's, not the server's: its `submit` takes the leaderboard and the GPU
# from `--leaderboard` / `--gpu` as well, and the server's eval.py never reads them (kernelbot
# src/libkernelbot/submission.py at 4bdd839ad76eaac0cdab986d30f8d77f989a289b,
# handle_popcorn_directives: the command's values, else the directives, else an error). So a
# missing header is a warning (human mode, audit), never a verdict.
MAX_SUBMISSION_BYTES = 1_000_000
FORBIDDEN_WORD = "str" + "eam"  # spelled in two parts so that this file could itself be uploaded
_QUEUE = FORBIDDEN_WORD.capitalize()  # in torch's names of its CUDA queue class and function
REQUIRED_HEADERS = ("#!POPCORN leaderboard nvfp4_gemv", "#!POPCORN gpu NVIDIA")


def static_problems(path: Path | str) -> list[str]:
    """One line per upload rule of the server's that the submission file breaks (empty list:
    none): empty, size, encoding, the forbidden word (with the line it first appears on)."""
    raw = Path(path).read_bytes()
    if not raw:
        return ["the file is empty (the server rejects an empty upload)"]
    out = []
    if len(raw) > MAX_SUBMISSION_BYTES:
        out.append(f"the file is {len(raw):,} bytes; the server rejects files over {MAX_SUBMISSION_BYTES:,} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return out + [f"the file is not UTF-8 ({exc}); the server rejects it"]
    for number, line in enumerate(text.splitlines(), 1):
        if FORBIDDEN_WORD in line.lower():
            out.append(f"line {number} contains the word {FORBIDDEN_WORD!r} (any case, comments included): "
                       "the server rejects the whole file")
            break
    return out


def header_warnings(path: Path | str) -> list[str]:
    """One line per ``#!POPCORN`` header line missing near the top of a readable file: what
    popcorn-cli would then need on its command line (``--leaderboard nvfp4_gemv``, ``--gpu``)
    or ask for. Not a server rule: nothing fails on it."""
    try:
        head = [ln.strip() for ln in Path(path).read_bytes().decode("utf-8").splitlines()[:10]]
    except (OSError, UnicodeDecodeError):  # static_problems reports an unreadable file
        return []
    return [f"no header line {header!r} near the top: popcorn-cli then needs "
            f"--{header.split()[1]} {header.split()[2]} on its command line (or asks); the server itself "
            "does not read it" for header in REQUIRED_HEADERS if header not in head]


def submission_problem(submission: Path) -> str:
    """'' when ``submission`` names a submission file, else why not in one line (a folder, a
    missing file, no .py): the one check of eval.py, ``eval.py audit`` and modal_app.py."""
    if submission.is_dir():
        return f"{submission} is a folder, not a submission file (name the .py file in it)"
    if not submission.is_file():
        return f"submission file {submission} not found"
    if submission.suffix != ".py":
        return (f"{submission}: a submission is a Python file ending in .py "
                "(the server runs it as submission.py)")
    return ""


def writable_file_problem(path: str | None, option: str, example: str) -> str:
    """'' when ``path`` (the value of ``option``) can be written as a file at the end of a run,
    else why not in one line (checked first, so that a long run does not end in an error)."""
    if path is None:
        return ""
    target = Path(path)
    if target.is_dir():
        return f"{option} {path} is a folder; give a file path such as {target / example}"
    folder = target.parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        return f"{option} {path}: {folder} is a file, not a folder"
    if not os.access(folder, os.W_OK | os.X_OK) or (target.exists() and not os.access(target, os.W_OK)):
        return f"{option} {path}: no permission to write there"
    return ""


# =========================================================================== the pre-check
# gpu-mode/kernelbot at 4bdd839ad76eaac0cdab986d30f8d77f989a289b (src/libkernelbot/kernelguard.py,
# pinned kernelguard==0.3.1 in its pyproject.toml) runs KernelGuard, a rule-based static
# classifier, on each benchmark, leaderboard, profile and private submission where the deployment
# sets KERNELGUARD_ENABLED (test mode is not checked), through `kernelguard --api-mode` with its
# KERNELGUARD_PROFILE / KERNELGUARD_CONFIG when set, and refuses a submission the classifier marks
# ``should_filter``, naming the matched rules. The deployment's switch, profile and config are not
# public: the kit runs 0.3.1 with its default profile, which is what the command runs without them.
KERNELGUARD_VERSION = "0.3.1"
KERNELGUARD_INSTALL = f"python3 -m pip install kernelguard=={KERNELGUARD_VERSION}"
# The newest release beside it (PyPI's newest on 2026-12-07, `pip index versions kernelguard`): its
# rules may already name what the server's version does not. It lives on the side, in a folder of
# its own outside the clone (as benchmarks/compile_table.py keeps the server's Triton), and is
# loaded there under another module name (KernelGuard is one pure-Python file), so the two run in
# one process without touching the installed 0.3.1.
KERNELGUARD_NEWEST = "0.3.2"
ENV_KERNELGUARD_NEWEST = "NVFP4_KERNELGUARD_NEWEST"  # its folder, if not the default
KERNELGUARD_NEWEST_INSTALL = "python3 eval.py audit --install-kernelguard"


@dataclasses.dataclass
class Precheck:
    """What KernelGuard made of a submission: ``installed`` False when it is not importable
    here (then nothing else is set); ``rejected`` its ``should_filter``; ``rules`` the matched
    rules as "NAME (severity)", sorted and unique; ``error`` when the analysis itself raised."""
    installed: bool
    version: str = ""
    newest: bool = False  # the newest release, on the side (KERNELGUARD_NEWEST), not the server's
    rejected: bool = False
    classification: str = ""
    reason: str = ""
    rules: list = dataclasses.field(default_factory=list)
    error: str = ""

    def label(self) -> str:
        """"KernelGuard 0.3.1, default profile" (with a note when another version is installed)."""
        if self.newest:
            return f"KernelGuard {self.version or '?'}, the newest release, default profile"
        note = "" if self.version == KERNELGUARD_VERSION else f"; the server pins {KERNELGUARD_VERSION}"
        return f"KernelGuard {self.version or '?'}, default profile{note}"

    def critical(self) -> list[str]:
        """The matched rules of critical severity (a hack pattern, whatever the classification)."""
        return [rule for rule in self.rules if rule.endswith("(critical)")]

    def summary(self) -> str:
        """One line: the verdict, the classification and the rules."""
        if not self.installed and self.newest:
            return (f"KernelGuard {KERNELGUARD_NEWEST} (the newest release) is not installed on the side "
                    f"({kernelguard_newest_dir()}): {KERNELGUARD_NEWEST_INSTALL}")
        if not self.installed:
            return f"KernelGuard is not installed here: {KERNELGUARD_INSTALL} (or pip install -e \".[guard]\")"
        if self.error:
            return (f"{self.label()}: the analysis raised {self.error} (the server's pre-check then answers "
                    "'unavailable' unless its deployment fails open)")
        rules = ", ".join(self.rules) if self.rules else "none"
        if self.newest:
            verdict = f"rejected ({self.classification}, {self.reason})" if self.rejected else \
                f"not rejected ({self.classification})"
            return (f"{self.label()}: {verdict}; matched rules: {rules} (the server runs {KERNELGUARD_VERSION}: a rule "
                    "only this release matches names a pattern the server's pre-check does not see yet)")
        if self.rejected:
            return (f"{self.label()}: rejected ({self.classification}, {self.reason}); matched rules: {rules}; the "
                    "server refuses such a submission where its pre-check is on (KERNELGUARD_ENABLED)")
        return (f"{self.label()}: not rejected ({self.classification}), so the server runs it: its pre-check "
                f"refuses only a rejected file and logs any other classification; matched rules: {rules}")


# KernelGuard's verdicts in this process, by the text and the analyser that gave them: on the kit's
# 190 kB submission.py the analysis takes 1.5-2.5 s, and one process may check the same text more
# than once (modal_app's preflight and its job, eval.py ab's files). A failed analysis is not kept.
_PRECHECKS: dict[tuple, Precheck] = {}


def kernelguard_newest_dir() -> Path:
    """Where the newest KernelGuard lives: $NVFP4_KERNELGUARD_NEWEST, else a per-user cache folder
    named for the release (outside the clone, so CI's fresh clones reuse it)."""
    env = os.environ.get(ENV_KERNELGUARD_NEWEST)
    if env:
        return Path(env)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "nvfp4-gemv-kit" / f"kernelguard-{KERNELGUARD_NEWEST}"


def install_aside(requirement: str, path: Path) -> Path:
    """``pip install --no-deps --target`` of ``requirement`` into ``path``, replacing what is there;
    atomically (into a fresh folder beside it, then renamed), so an interrupted install leaves
    nothing half done. The kit's packages on the side: the server's Triton
    (benchmarks/compile_table.py), the newest KernelGuard."""
    import shutil
    import tempfile
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=path.name + ".", dir=path.parent))
    try:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(tmp), requirement],
                       check=True)
        shutil.rmtree(path, ignore_errors=True)
        tmp.rename(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def install_kernelguard_newest(path: Path | None = None) -> Path:
    """Install kernelguard==KERNELGUARD_NEWEST (no dependencies: it has none) into ``path`` (default
    ``kernelguard_newest_dir()``) unless it is there already (``install_aside``)."""
    path = Path(path or kernelguard_newest_dir())
    if (path / f"kernelguard-{KERNELGUARD_NEWEST}.dist-info").is_dir() and (path / "kernelguard.py").is_file():
        return path
    return install_aside(f"kernelguard=={KERNELGUARD_NEWEST}", path)


_NEWEST: dict = {}  # the side KernelGuard's module, loaded once per folder


def _kernelguard_newest():
    """(the newest KernelGuard's module loaded from its folder as ``kernelguard_newest``, its
    version) or (None, '') when it is not there."""
    folder = kernelguard_newest_dir()
    found = sorted(folder.glob("kernelguard-*.dist-info"))
    if not (folder / "kernelguard.py").is_file() or not found:
        return None, ""
    if folder not in _NEWEST:
        spec = importlib.util.spec_from_file_location("kernelguard_newest", folder / "kernelguard.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["kernelguard_newest"] = module  # its dataclasses look their module up by name
        spec.loader.exec_module(module)
        _NEWEST[folder] = module
    return _NEWEST[folder], found[-1].name.removeprefix("kernelguard-").removesuffix(".dist-info")


def kernelguard_precheck(source: str, newest: bool = False) -> Precheck:
    """KernelGuard on a submission's text, in this process, as ``kernelguard --api-mode``
    analyses its standard input (the default profile, no structural hash); the same text
    analysed earlier in this process by the same KernelGuard gives that verdict again.
    ``newest``: the newest release, on the side (``kernelguard_newest_dir``), not the installed one."""
    if newest:
        kernelguard, installed = _kernelguard_newest()
        if kernelguard is None:
            return Precheck(installed=False, newest=True)
    else:
        try:
            import kernelguard
        except ImportError:
            return Precheck(installed=False)
        try:
            from importlib.metadata import version
            installed = version("kernelguard")
        except Exception:  # noqa: BLE001 - a copy without metadata still runs
            installed = ""
    key = (hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest(), installed, id(kernelguard),
           getattr(kernelguard, "analyze_code", None), getattr(kernelguard, "configure_runtime", None))
    if key in _PRECHECKS:
        return dataclasses.replace(_PRECHECKS[key], rules=list(_PRECHECKS[key].rules))
    try:
        kernelguard.configure_runtime(profile=kernelguard.DEFAULT_PROFILE_NAME)
        result = kernelguard.analyze_code(source, compute_structural_hash=False)
    except Exception as exc:  # noqa: BLE001 - reported, never fatal
        return Precheck(installed=True, version=installed, error=one_line(f"{type(exc).__name__}: {exc}"),
                        newest=newest)
    rules = sorted({f"{m.get('pattern', 'unknown')} ({m.get('severity', '?')})"
                    for m in result.get("matched_patterns", []) if isinstance(m, dict)})
    found = Precheck(installed=True, version=installed, newest=newest, rejected=bool(result.get("should_filter")),
                     classification=str(result.get("classification", "unknown")),
                     reason=str(result.get("filter_reason") or ""), rules=rules)
    _PRECHECKS[key] = dataclasses.replace(found, rules=list(rules))
    return found


def precheck_file(path: Path | str, newest: bool = False) -> Precheck:
    """``kernelguard_precheck`` of a file's text (undecodable bytes replaced: the upload rules
    report those)."""
    return kernelguard_precheck(Path(path).read_bytes().decode("utf-8", "replace"), newest)


# =========================================================================== the loader

def load_submission(path: Path | str, name: str = "submission", keep: bool = True):
    """The file at ``path`` imported as the module ``name``, as the server imports its
    submission.py: while it runs, the module is ``sys.modules[name]`` (what dataclasses, pickling
    and a module that imports itself need), the kit's folder is first on ``sys.path`` and the
    file's folder second: ``task``, ``reference`` and ``utils`` are the kit's, as on the server its
    own files sit beside the submission, even where the file's folder holds others
    (``shadowed_files``); files only beside the submission are still found. ``keep`` (the worker,
    the tools' command lines): both stay so afterwards, and ``import submission`` finds this
    file; ``keep=False`` (the audit, a text compiled aside): ``sys.path`` and whatever module held
    ``name`` before are put back. When the import raises, they are put back too and the error
    goes to the caller."""
    path = Path(path).resolve()
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None:
        raise ImportError(f"{path}: not a Python source file (a submission's name ends in .py)")
    saved_path, saved_module = list(sys.path), sys.modules.get(name)
    sys.path.insert(0, str(path.parent))
    if path.parent != HERE:
        sys.path.insert(0, str(HERE))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        keep = False
        raise
    finally:
        if not keep:
            sys.path[:] = saved_path
            if saved_module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = saved_module
    return module


def load_tool_submission(path: Path | str, option: str = "--submission"):
    """The submission file a tool's ``option`` names, loaded as ``load_submission`` does (kept);
    ValueError with one line naming the option where it is no submission file
    (``submission_problem``) or its import raises (the exception's type and message: the
    command line prints that line, not a traceback)."""
    problem = submission_problem(Path(path))
    if problem:
        raise ValueError(f"{option}: {problem}")
    try:
        return load_submission(path)
    except Exception as exc:  # noqa: BLE001 - any failure of the file's own code, in one line
        raise ValueError(one_line(f"{option} {path} does not import: {type(exc).__name__}: {exc}")) from None


# The kit's files a submission's folder may hold copies or other versions of: the server's four
# (it puts its own beside the submission) and what the kit's eval.py and reference.py import.
KIT_OWN_FILES = (*SERVER_FILES, *KIT_SUPPORT_FILES)


def shadowed_files(path: Path | str) -> list[str]:
    """The names of ``KIT_OWN_FILES`` that the folder of the submission at ``path`` holds with
    other contents than the kit's ([] for the kit's own folder): ``load_submission`` imports the
    kit's, not those."""
    folder = Path(path).resolve().parent
    if folder == HERE:
        return []
    out = []
    for name in KIT_OWN_FILES:
        theirs, ours = folder / name, HERE / name
        try:
            if theirs.is_file() and ours.is_file() and theirs.read_bytes() != ours.read_bytes():
                out.append(name)
        except OSError:
            continue
    return out


def submission_import_problem() -> str:
    """In the worker: '' when the submission imports and defines a callable ``custom_kernel``,
    else why not in one line (``_load_kernel``)."""
    return _load_kernel()[1]


# =========================================================================== commands in records

# What looks like a file among a command's arguments (besides anything with a folder in it).
_FILE_SUFFIXES = (".json", ".py", ".md", ".png", ".csv", ".txt", ".log", ".ncu-rep")


def kit_path(path: Path | str, output: bool = False) -> str:
    """``path`` (relative to the current folder, or absolute) as a record names it: relative to
    the kit's root where it is inside the kit; outside it, an ``output`` by its name alone (the
    command, run again from the kit's root, writes it there) and anything else absolute (a file
    the kit does not ship: such a command does not run from the kit)."""
    full = Path(path).expanduser().resolve()
    if full.is_relative_to(HERE):
        return full.relative_to(HERE).as_posix() or "."
    return full.name if output else str(full)


def kit_command(program: list | tuple, argv: list | tuple, outputs: tuple = ()) -> str:
    """The command line a record names, to be run from the kit's root: ``program`` (e.g.
    ``["python3", "benchmarks/floor.py"]``), then ``argv`` with the value of each option in
    ``outputs`` (``--json PATH`` or ``--json=PATH``) and each other argument that names an
    existing file or folder and looks like a path (has a folder in it or a file suffix) written
    by ``kit_path``: no folder of the machine that ran it, where the files are the kit's."""
    def arg(value: str, output: bool) -> str:
        looks = "/" in value or value.endswith(_FILE_SUFFIXES)
        return kit_path(value, output) if output or (looks and Path(value).expanduser().exists()) else value

    out, output_next = [], False
    for a in map(str, argv):
        if output_next:
            out.append(arg(a, True))
            output_next = False
        elif a.startswith("--") and "=" in a:
            option, _, value = a.partition("=")
            out.append(f"{option}={arg(value, option in outputs)}")
        elif a in outputs:
            out.append(a)
            output_next = True
        else:
            out.append(arg(a, False))
    return shlex.join([*map(str, program), *out])


# =========================================================================== test files

@dataclasses.dataclass
class TestCase:
    args: dict
    spec: str


class TestFileError(ValueError):
    pass


def combine_seeds(a: int, b: int) -> int:
    """Case seed ``a`` and secret seed ``b`` -> one seed (Cantor pairing plus ``a``): public,
    small case seeds reveal nothing of a large secret one."""
    return int(a + (a + b) * (a + b + 1) // 2)


def parse_test_cases(text: str, secret_seed: int | None = None) -> list[TestCase]:
    """Lines like ``m: 128; k: 256; l: 1; seed: 1111`` -> test cases (integers converted).

    Every ';'-separated part of every line must match ``key: value``; a blank line does not.
    Raises TestFileError naming the line (number and text) and the part.
    """
    cases = []
    for number, line in enumerate(text.splitlines(), 1):
        args = {}
        for part in line.split(";"):
            hit = _CASE_RE.fullmatch(part)
            if hit is None:
                raise TestFileError(f"line {number}: invalid test case: '{line}': '{part}': {_part_problem(part)}")
            key, value = hit[1], hit[2]
            try:
                value = int(value)
            except ValueError:
                pass
            args[key] = value
        cases.append(TestCase(args=args, spec=line))
    return with_secret(cases, secret_seed)


def with_secret(cases: list[TestCase], secret_seed: int | None) -> list[TestCase]:
    """Every case's seed combined with the secret one (``combine_seeds``); None: unchanged."""
    if secret_seed is not None:
        for case in cases:
            if "seed" in case.args:
                case.args["seed"] = combine_seeds(case.args["seed"], secret_seed)
    return cases


def _part_problem(part: str) -> str:
    """Why one ';'-separated part of a test-file line is not ``key: value``."""
    if not part.strip():
        return "nothing there (a blank line, or a ';' with nothing after it)"
    key, sep, value = part.partition(":")
    if not sep:
        return "no ':' (expected key: value)"
    if not re.fullmatch(r"\s*[a-zA-Z]+\s*", key):
        return f"the key {key.strip()!r} is not letters only"
    return f"the value {value.strip()!r} is neither an integer nor a word of letters"


def case_problem(args: dict) -> str:
    """'' when a parsed case is one nvfp4_gemv can run (exactly the integer keys m, k, l, seed
    with m a positive multiple of 128, k a positive multiple of 64, l >= 1), else what is wrong."""
    missing = [key for key in CASE_KEYS if key not in args]
    unknown = [key for key in args if key not in CASE_KEYS]
    if missing or unknown:
        return (f"a case has exactly the keys {', '.join(CASE_KEYS)}"
                + (f"; missing {', '.join(missing)}" if missing else "")
                + (f"; unknown {', '.join(unknown)}" if unknown else ""))
    not_int = [key for key in CASE_KEYS if not isinstance(args[key], int)]
    if not_int:
        return "; ".join(f"{key} must be an integer, got {args[key]!r}" for key in not_int)
    m, k, l = args["m"], args["k"], args["l"]
    if m <= 0 or m % 128:
        return f"m must be a positive multiple of 128, got {m}"
    if k <= 0 or k % 64:
        return f"k must be a positive multiple of 64, got {k}"
    if l < 1:
        return f"l must be >= 1, got {l}"
    return ""


def read_test_file(path: Path | str) -> list[TestCase]:
    """A test file for the human mode, checked before any case runs: readable, not a directory,
    at least one case, every case valid for the problem (``case_problem``). Raises
    TestFileError naming the file, the line number and what is wrong."""
    path = Path(path)
    if path.is_dir():
        raise TestFileError(f"{path} is a directory, not a test file of lines like "
                            "'m: 128; k: 256; l: 1; seed: 1111'")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise TestFileError(f"could not read test file {path}: {exc}") from None
    try:
        cases = parse_test_cases(text)
    except TestFileError as exc:
        raise TestFileError(f"{path}, {exc}") from None
    if not cases:
        raise TestFileError(f"{path} holds no test cases (lines like 'm: 128; k: 256; l: 1; seed: 1111')")
    for number, case in enumerate(cases, 1):
        problem = case_problem(case.args)
        if problem:
            raise TestFileError(f"{path}, line {number}: {problem}: '{case.spec}'")
    return cases


def input_bytes(m: int, k: int, l: int) -> int:
    """Bytes of one case's seven inputs: a, b (padded to 128 rows), the plain and the permuted
    scales of each, c."""
    rows = m + 128
    return rows * k // 2 * l + 2 * rows * k // 16 * l + 2 * m * l


def gemv_bytes(m: int, k: int, l: int) -> int:
    """Bytes a GEMV must move at least: a, sfa, row 0 of b and of sfb (every batch) and c (the
    same count as benchmarks/timing.py's)."""
    return m * k // 2 * l + m * k // 16 * l + k // 2 * l + k // 16 * l + 2 * m * l


def spec_line(case: dict) -> str:
    """``{"m": 128, "k": 256, "l": 1, "seed": 1111, ...}`` -> ``m: 128; k: 256; l: 1; seed: 1111``
    (only m, k, l, seed: the keys a test file carries)."""
    return "; ".join(f"{key}: {case[key]}" for key in ("m", "k", "l", "seed") if key in case)


def load_shapes(path: Path | str = SHAPES_JSON) -> dict:
    """shapes.json: ``{"tests": [...], "benchmarks": [... with sol_us]}``."""
    return json.loads(Path(path).read_text())


def test_file_text(cases: list[dict]) -> str:
    return "\n".join(spec_line(c) for c in cases) + "\n"


def shape_set(name: str, shapes: dict | None = None) -> list[dict]:
    """The cases of a named set (``SHAPE_SETS``) of shapes.json: "tests", "benchmarks", or "all"
    (benchmarks, then tests); a shape (m, k, l) listed twice is kept once."""
    shapes = load_shapes() if shapes is None else shapes
    if name not in SHAPE_SETS:
        raise ValueError(f"unknown shape set {name!r}; choose from {', '.join(SHAPE_SETS)}")
    picks = {"tests": shapes["tests"], "benchmarks": shapes["benchmarks"],
             "all": shapes["benchmarks"] + shapes["tests"]}[name]
    out, seen = [], set()
    for case in picks:
        key = (case["m"], case["k"], case["l"])
        if key not in seen:
            seen.add(key)
            out.append(case)
    return out


def shape_cases(choice: str | None, mode: str) -> list[TestCase]:
    """--shapes: a named set (``SHAPE_SETS``; none given: tests in test mode, benchmarks in
    the others) or a test file, checked by ``read_test_file``. Raises TestFileError."""
    choice = choice or ("tests" if mode == "test" else "benchmarks")
    if choice in SHAPE_SETS:
        return parse_test_cases(test_file_text(shape_set(choice)))
    if not Path(choice).exists():
        raise TestFileError(f"--shapes {choice}: neither a shape set ({', '.join(SHAPE_SETS)}) nor an "
                            "existing file")
    return read_test_file(choice)



# =========================================================================== impossible times
# Peak memory bandwidth per GPU model, from the vendor's datasheets (decimal TB/s). With the L2
# cleared before every call, as the server's timed loops do, a call cannot move its
# ``gemv_bytes`` faster than the peak: a shape timed below bytes / peak was not computed from that
# call's inputs (an output kept across calls). Clean-L2 benchmarks whose inputs fit in the L2 can
# legally beat it: the check belongs to the timed modes that clear it. Patterns are tried in order
# on the CUDA device name (torch.cuda.get_device_name, nvidia-smi's name); where a name leaves the
# variant open, the family's highest peak is used, so that the check never flags a possible time.
PEAK_BANDWIDTH = (
    # (pattern, model, bytes per second, source)
    (r"\bGB200\b", "GB200", 8.0e12,
     "NVIDIA GB200 NVL72 datasheet: 576 TB/s of HBM3e bandwidth for 72 Blackwell GPUs"),
    (r"\bB200\b", "B200", 8.0e12,
     "NVIDIA DGX B200 datasheet: 64 TB/s of HBM3e bandwidth for its 8 B200 GPUs"),
    (r"\bGH200\b", "GH200", 4.9e12,
     "NVIDIA GH200 Grace Hopper Superchip datasheet: 4.9 TB/s (144 GB HBM3e; 4 TB/s with 96 GB HBM3)"),
    (r"\bH200\b", "H200", 4.8e12,
     "NVIDIA H200 Tensor Core GPU datasheet: 4.8 TB/s (H200 SXM and H200 NVL)"),
    (r"\bH100\b.*\bPCIe\b", "H100 PCIe", 2.0e12,
     "NVIDIA H100 Tensor Core GPU datasheet (2022): 2 TB/s (H100 PCIe); product brief PB-11133-001: over 2,000 GB/s"),
    (r"\bH100\b.*\bNVL\b", "H100 NVL", 3.9e12, "NVIDIA H100 Tensor Core GPU datasheet: 3.9 TB/s (H100 NVL)"),
    (r"\bH100\b.*\b(SXM|HBM3)\b", "H100 SXM", 3.35e12,
     "NVIDIA H100 Tensor Core GPU datasheet: 3.35 TB/s (H100 SXM)"),
    (r"\bH100\b", "H100 (variant not named: H100 NVL's peak, the family's highest)", 3.9e12,
     "NVIDIA H100 Tensor Core GPU datasheet: 3.35 TB/s (SXM), 3.9 TB/s (NVL)"),
    (r"\bA100\b.*80GB.*PCIe", "A100 80GB PCIe", 1.935e12,
     "NVIDIA A100 Tensor Core GPU datasheet: 1,935 GB/s (A100 80GB PCIe)"),
    (r"\bA100\b.*40GB", "A100 40GB", 1.555e12, "NVIDIA A100 Tensor Core GPU datasheet: 1,555 GB/s (A100 40GB)"),
    (r"\bA100\b", "A100 80GB SXM", 2.039e12,
     "NVIDIA A100 Tensor Core GPU datasheet: 2,039 GB/s (A100 80GB SXM, the family's highest)"),
    (r"\bL40S\b", "L40S", 0.864e12, "NVIDIA L40S datasheet: 864 GB/s"),
    (r"\bL4\b", "L4", 0.3e12, "NVIDIA L4 Tensor Core GPU datasheet: 300 GB/s"),
    (r"\bA10G?\b", "A10", 0.6e12, "NVIDIA A10 Tensor Core GPU datasheet: 600 GB/s"),
)


def peak_bandwidth(device: str) -> tuple[str, float, str] | None:
    """(model, peak bytes per second, its source) of a CUDA device name, or None when the
    kit has no figure for it (``PEAK_BANDWIDTH``)."""
    for pattern, model, bps, source in PEAK_BANDWIDTH:
        if re.search(pattern, device or "", re.IGNORECASE):
            return model, bps, source
    return None


def floor_us(m: int, k: int, l: int, device: str) -> float | None:
    """The least time, in µs, one call of the shape can take on ``device`` with the L2 cleared:
    ``gemv_bytes`` at the GPU's peak bandwidth; None for an unknown GPU."""
    peak = peak_bandwidth(device)
    return None if peak is None else gemv_bytes(m, k, l) / peak[1] * 1e6


def impossible_time(m: int, k: int, l: int, device: str, mean_us: float | None,
                    median_us: float | None = None) -> str:
    """'' when the shape's times are possible on ``device`` (or unknown), else one line: the
    mean (or the median: most calls) below ``floor_us``."""
    floor = floor_us(m, k, l, device)
    if floor is None:
        return ""
    low = [(name, v) for name, v in (("mean", mean_us), ("median", median_us)) if v is not None and v < floor]
    if not low:
        return ""
    model, bps, source = peak_bandwidth(device)
    said = " and ".join(f"{name} {v:.3f} µs" for name, v in low)
    return (f"{m}x{k}x{l}: {said} below {floor:.3f} µs, the time {gemv_bytes(m, k, l) / 1e6:.1f} MB take at "
            f"the {model}'s peak memory bandwidth of {bps / 1e12:g} TB/s ({source}) with the L2 cleared: those "
            "outputs did not come from the calls' inputs (a result kept across calls?)")


def unknown_peak_note(device: str) -> str:
    """One line for a GPU without a peak bandwidth on record ('' when there is one)."""
    if peak_bandwidth(device) is not None:
        return ""
    return (f"no peak memory bandwidth on record for {device or 'this GPU'} (harness.PEAK_BANDWIDTH): the "
            "impossible-time check did not run")


def impossible_times(summary: dict, device: str) -> list[str]:
    """``impossible_time`` of every timed case of a ``summarize`` output (mean and median)."""
    if summary.get("mode") not in ("benchmark", "leaderboard"):
        return []
    out = []
    for row in summary.get("cases", []):
        if row.get("status") == "pass" and row.get("mean_us") is not None:
            line = impossible_time(row["m"], row["k"], row["l"], device, row["mean_us"], row.get("median_us"))
            if line:
                out.append(line)
    return out


# =========================================================================== statistics

@dataclasses.dataclass
class Stats:
    runs: int
    mean: float
    std: float
    err: float
    best: float
    worst: float


def calculate_stats(durations: list[float]) -> Stats:
    """Mean, sample standard deviation (n - 1), standard error of the mean, best, worst."""
    runs = len(durations)
    mean = sum(durations) / runs
    var = sum((d - mean) ** 2 for d in durations) / (runs - 1) if runs > 1 else 0.0
    std = math.sqrt(var)
    return Stats(runs=runs, mean=mean, std=std, err=std / math.sqrt(runs),
                 best=float(min(durations)), worst=float(max(durations)))


def should_stop(durations: list[float], wall_ns: float, budget_ns: float) -> bool:
    """The timed loop's stopping rule, checked after each repeat: never before three repeats
    and 100 ms of wall time; then stop when the mean is known to 0.1 %, when the summed
    kernel time passes the budget, or after 120 s of wall time."""
    if len(durations) < 3 or wall_ns <= MIN_WALL_NS:
        return False
    s = calculate_stats(durations)
    return s.err < REL_ERR_TARGET * s.mean or s.mean * s.runs > budget_ns or wall_ns > MAX_WALL_NS


def geomean(values) -> float | None:
    """Geometric mean of positive numbers; None when empty or when any is missing/non-positive."""
    values = list(values)
    if not values or any(v is None or not v > 0 for v in values):
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


# =========================================================================== the worker
# Everything below up to the parent side runs in the spawned worker process.

_worker_config = {"submission": None, "distribution": "official", "check_inputs": True}


def _worker_init(submission_path: str | None, distribution: str, check_inputs: bool,
                 ignore_interrupt: bool = False) -> None:
    _worker_config.update(submission=submission_path, distribution=distribution,
                          check_inputs=check_inputs)
    if ignore_interrupt:  # human mode: Ctrl-C reaches the whole process group; the parent ends the worker
        import signal
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _submission():
    """The submission module: ``import submission`` (the server's layout) or the file given to
    the human mode, loaded under the module name ``submission`` (``load_submission``)."""
    path = _worker_config["submission"]
    if path is not None and "submission" not in sys.modules:
        return load_submission(path)
    import submission
    return submission


# The CUTLASS DSL's top-level package and the kit's install command for it (pyproject.toml's extra).
_DSL_PACKAGE = "cutlass"
_DSL_INSTALL = 'python3 -m pip install -e ".[cute]"'


def _missing_dsl(exc: BaseException) -> str:
    """The one line for a submission whose import failed because the CUTLASS DSL is not
    installed here (a ModuleNotFoundError for ``cutlass`` itself), with the install command;
    '' for any other failure."""
    if not isinstance(exc, ModuleNotFoundError) or exc.name != _DSL_PACKAGE:
        return ""  # a module inside an installed DSL that is missing is the submission's error
    return one_line(f"importing the submission raised ModuleNotFoundError: {exc}: it uses the CUTLASS DSL, "
                    f"which is not installed here: {_DSL_INSTALL}")


def _kernel_problem(module) -> str:
    """'' when the submission module has a callable ``custom_kernel``, else why not in one line."""
    kernel = getattr(module, "custom_kernel", None)
    if kernel is None:
        return ("the submission defines no custom_kernel: the harness calls custom_kernel(data) with each "
                "case's inputs")
    if not callable(kernel):
        return f"the submission's custom_kernel is not a function (type {type(kernel).__name__})"
    return ""


def _load_kernel():
    """(the submission's ``custom_kernel``, '') or (None, why not in one line): the import raised
    (its traceback, the submission's frames, goes to stderr once: ``_describe``; a missing CUTLASS
    DSL is one line with its install command, ``_missing_dsl``) or the module has no callable
    ``custom_kernel``."""
    try:
        module = _submission()
    except BaseException as exc:
        return None, _missing_dsl(exc) or _describe(exc, "importing the submission")
    problem = _kernel_problem(module)
    return (None, problem) if problem else (module.custom_kernel, "")


def _registry_problem(module, device) -> str:
    """'' when every backend of the submission's registry (``BACKENDS``: name -> a record with
    ``supported(device)``, the kit's convention) answers ``supported(device)`` with an (ok,
    reason) pair, else the first that does not, in one line naming the contract."""
    backends = getattr(module, "BACKENDS", None)
    for name, backend in backends.items() if isinstance(backends, dict) else ():
        supported = getattr(backend, "supported", None)
        if not callable(supported):
            continue
        try:
            answer = supported(device)
        except Exception as exc:  # a check that raises breaks the same contract
            answer = f"an exception ({type(exc).__name__}: {exc})"
        else:
            if isinstance(answer, tuple) and len(answer) == 2 and isinstance(answer[1], str):
                continue
            answer = repr(answer)
        return one_line(f"backend {name!r}: supported(device) gave {answer}, not the (ok, reason) pair the "
                        "registry expects, e.g. (True, '') or (False, 'needs a CUDA GPU') (docs/submission.md, "
                        "\"Extending it\")")
    return ""


def _backend_here() -> tuple[str, str]:
    """("ok", name) with the backend the submission's ``select_backend(device)`` picks for the
    device the inputs live on; ("invalid setting", why) when it raises ValueError (a setting
    such as NVFP4_GEMV_BACKEND it cannot use), ("cannot run", why) when it raises RuntimeError
    (the kit's answer for a backend this machine lacks), ("broken", why) when it raises anything
    else or a backend of its registry breaks the (ok, reason) contract of ``supported``
    (``_registry_problem``: a fault of the submission, not of the machine); ("unknown", "") when
    the submission has no such function or does not import (its cases then say why)."""
    try:
        module = _submission()
    except BaseException:
        return "unknown", ""
    select = getattr(module, "select_backend", None)
    if not callable(select):
        return "unknown", ""
    import torch
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    problem = _registry_problem(module, device)
    if problem:
        return "broken", problem
    try:
        return "ok", str(select(device))
    except ValueError as exc:
        return "invalid setting", one_line(str(exc))
    except RuntimeError as exc:
        return "cannot run", one_line(f"{type(exc).__name__}: {exc}")
    except BaseException as exc:
        return "broken", one_line(f"select_backend(device) raised {type(exc).__name__}: {exc}")


def submission_kernel_revision() -> str | None:
    """The submission's ``kernel_revision()`` (the kit's: a hash of what its compilers see of the
    copies it runs) where it has one, else None; None too where it does not import or raises."""
    try:
        revision = getattr(_submission(), "kernel_revision", None)
        return str(revision()) if callable(revision) else None
    except Exception:
        return None


def backend_picks() -> dict:
    """{"MxKxL": backend} from the submission's per-shape choice cache (``_FASTEST``, keys
    ending in (m, k, l)) where it has one; {} otherwise."""
    try:
        cache = getattr(sys.modules.get("submission"), "_FASTEST", None) or {}
        return {"x".join(str(v) for v in key[-3:]): str(name) for key, name in cache.items()}
    except Exception:
        return {}


def one_line(text: str) -> str:
    return " | ".join(line.strip() for line in str(text).strip().splitlines() if line.strip())


# The server's mismatch lines (utils.verbose_allclose): "ERROR at (i, j, l): RESULT EXPECTED".
_MISMATCH = re.compile(r"ERROR at (\([^)]*\)): ([^\s;,]+) ([^\s;,]+)")
_LABELLED = re.compile(r"ERROR at \([^)]*\): result [^\s,]+, expected [^\s;,]+")  # ... as ``labelled`` writes them
_MISMATCHED = re.compile(r"Number of mismatched elements: (\d+) of (\d+)")


def labelled(text: str) -> str:
    """``text`` with each of the server's mismatch lines saying which number is the result and
    which the expected value ("ERROR at (0, 0, 0): result -0.6333, expected 100.5"): for what a
    person reads (human mode, the audit, ab); protocol mode logs the server's text as it is."""
    def label(hit):
        index, got, want = hit.groups()
        try:
            float(got), float(want)
        except ValueError:  # not two numbers: another format, left as it is
            return hit.group(0)
        return f"ERROR at {index}: result {got}, expected {want}"
    return _MISMATCH.sub(label, text)


def brief(text: str) -> str:
    """A failed check's message for a table row: the server's mismatch text (a count, then up to
    five elements) as the count and the first element, with a hint's first clause (to its first
    colon) after it; any other text as it is. The whole text goes to stderr and the JSON."""
    text = labelled(text)
    count, first = _MISMATCHED.search(text), _LABELLED.search(text)
    if count is None or first is None:
        return text
    hint = text.rsplit(HINT_MARK, 1)[1].split(":", 1)[0] if HINT_MARK in text else ""
    return (f"mismatch: {count[1]} of {count[2]} elements differ, the first {first[0].replace('ERROR ', '', 1)}"
            + (f".{HINT_MARK}{hint}" if hint else ""))


_REPORTED: set = set()  # the summary lines whose traceback this worker has printed


def _harness_frame(filename: str) -> bool:
    """A frame of this harness or of the import machinery, not of the submission."""
    return filename.startswith("<frozen ") or Path(filename).resolve() == Path(__file__).resolve()


def user_traceback(exc: BaseException) -> str:
    """The traceback of ``exc`` (and of the exceptions it was raised from) without the
    harness's own frames: what the submission's author needs to read."""
    te = traceback.TracebackException.from_exception(exc)
    seen, todo = set(), [te]
    while todo:
        part = todo.pop()
        if id(part) in seen:
            continue
        seen.add(id(part))
        part.stack = traceback.StackSummary.from_list([f for f in part.stack if not _harness_frame(f.filename)])
        todo += [x for x in (part.__cause__, part.__context__) if x is not None]
    return "".join(te.format())


def _describe(exc: BaseException, doing: str) -> str:
    """The one-line summary of a failure of the submission; its traceback (the submission's
    frames) goes to stderr the first time this worker meets that failure."""
    summary = one_line(f"{doing} raised {type(exc).__name__}: {exc}")
    if summary not in _REPORTED:
        _REPORTED.add(summary)
        print(f"{doing} raised:\n{user_traceback(exc)}", end="", file=sys.stderr)
    return summary


def distributions() -> tuple:
    """The input distributions eval.py offers (quant.DISTRIBUTIONS); the one place that asks.
    Beside the server's own reference.py there is no quant.py: then only "official". The names
    are read from quant.py's source where it is not imported yet: importing it imports torch
    (about 2 s), which eval.py's own process otherwise never needs on a machine without CUDA."""
    if "quant" in sys.modules:  # imported (or blocked: None, as ``import quant`` then raises ImportError)
        module = sys.modules["quant"]
        return ("official",) if module is None else tuple(module.DISTRIBUTIONS)
    spec = importlib.util.find_spec("quant")
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return ("official",)
    import ast
    for node in ast.parse(Path(spec.origin).read_text()).body:
        if (isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "DISTRIBUTIONS" for t in node.targets)
                and isinstance(node.value, ast.Dict)):
            return tuple(k.value for k in node.value.keys if isinstance(k, ast.Constant))
    from quant import DISTRIBUTIONS  # not a literal dict: ask the module itself
    return tuple(DISTRIBUTIONS)


def no_cuda_driver() -> bool:
    """True when this machine has no CUDA driver library (libcuda): torch.cuda.is_available()
    is then False as well, and a process can say "no CUDA" without importing torch (about 2 s
    of CPU). False means only that a driver is present: ask torch."""
    import ctypes
    names = ("nvcuda.dll",) if sys.platform == "win32" else ("libcuda.so.1", "libcuda.so", "libcuda.dylib")
    for name in names:
        try:
            ctypes.CDLL(name)
            return False
        except OSError:
            continue
    return True


def cuda_available() -> bool:
    """torch.cuda.is_available(), answered without importing torch where the machine has no CUDA
    driver (``no_cuda_driver``): the one place the kit's processes ask before timing or naming a GPU."""
    if no_cuda_driver():
        return False
    import torch
    return torch.cuda.is_available()


def cuda_device_name() -> str:
    """The CUDA GPU's name (torch.cuda.get_device_name()), '' without one (``cuda_available``)."""
    if not cuda_available():
        return ""
    import torch
    return torch.cuda.get_device_name()


def generate_case(args: dict, distribution: str = "official"):
    """A case's inputs (``args``: the keys ``CASE_KEYS``): ``reference.generate_input`` exactly as
    the server calls it (so this file also runs beside the server's reference.py), then, for a
    ``distribution`` other than "official", ``quant.fill`` on the result."""
    from reference import generate_input
    data = generate_input(**args)
    if distribution == "official":
        return data
    import quant
    return quant.fill(data, distribution)


def _generate(args: dict):
    """The case's inputs in the worker, with the distribution it was started with."""
    return generate_case(args, _worker_config["distribution"])


def _clone(data):
    import torch
    if isinstance(data, (tuple, list)):
        return type(data)(_clone(x) for x in data)
    if isinstance(data, dict):
        return {k: _clone(v) for k, v in data.items()}
    return data.clone() if isinstance(data, torch.Tensor) else data


def _sync() -> None:
    import torch
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _same_tensor(x, y) -> bool:
    import torch
    if not isinstance(x, torch.Tensor) or x.shape != y.shape or x.dtype != y.dtype \
            or x.stride() != y.stride() or x.device != y.device:
        return False
    if x.element_size() == 1:  # fp4 pairs and fp8 codes: compare the bytes
        return torch.equal(x.view(torch.uint8), y.view(torch.uint8))
    return torch.equal(x, y)


def _inputs_changed(seen, pristine) -> str:
    """'' when the submission left its inputs alone, else a failure message."""
    if not _worker_config["check_inputs"]:
        return ""
    if not isinstance(seen, tuple) or len(seen) != len(pristine):
        return "the input tuple was replaced"
    changed = [name for name, x, y in zip(INPUT_NAMES, seen, pristine, strict=False) if not _same_tensor(x, y)]
    if not changed:
        return ""
    return ("custom_kernel modified its input tensor(s) in place: " + ", ".join(changed)
            + " (only c may be written; the server's benchmark loop reuses one input for every"
            " repeat. NVFP4_EVAL_CHECK_INPUTS=0 skips this kit-only check)")


def _check(data, output) -> tuple[bool, str]:
    from reference import check_implementation
    try:
        return check_implementation(data, output)
    except BaseException as exc:  # a malformed output can make the comparison itself fail
        return False, _describe(exc, "checking the output")


def _run_test_case(args: dict, seal: Seal | None = None) -> tuple[bool, str]:
    """One correctness check: (passed, message). ``seal`` (a judged worker): the call is followed
    by the seal's check, and its output must be exactly a torch.Tensor (``Seal.check``)."""
    custom_kernel, problem = _load_kernel()
    if problem:
        return False, problem
    try:
        data = _generate(args)
        given = _clone(data)
        _sync()
    except BaseException as exc:
        return False, _describe(exc, f"generate_input({args})")
    try:
        output = custom_kernel(given)
        (_sync if seal is None else seal.sync)()
    except BaseException as exc:
        return False, _describe(exc, "custom_kernel")
    changed = (seal.check("after custom_kernel", output) if seal is not None else "") or _inputs_changed(given, data)
    if changed:
        return False, changed
    hint = _untouched_hint(data, output)  # before the check: the reference writes its answer into data's c
    ok, message = _check(data, output)
    return ok, message if ok else message + hint


HINT_MARK = " Hint: "  # what a message adds for a person (``brief`` keeps it)


def _untouched_hint(data, output) -> str:
    """For a wrong output that is c exactly as generated (``data[-1]``, before the call): a hint
    saying so, for a person (the file given to human mode, the audit or ab); '' otherwise, and
    always in protocol mode, which logs the server's text."""
    if _worker_config["submission"] is None or not _same_tensor(output, data[-1]):
        return ""
    return (HINT_MARK + "the output is c exactly as the harness handed it over: custom_kernel returned c "
            "without writing it (write the result into c, or return a new tensor)")


def run_benchmark_case(args: dict, recheck: bool, max_repeats: int, budget_ns: float, seal: Seal | None = None):
    """One correctness check, then the timed loop (``time_calls``), in the worker. Returns the
    list of durations (ns) or a failure message (str)."""
    custom_kernel, problem = _load_kernel()
    if problem:
        return problem
    return time_calls(custom_kernel, args, recheck, max_repeats, budget_ns, _generate, seal)


def time_calls(custom_kernel, args: dict, recheck: bool, max_repeats: int, budget_ns: float, generate=None,
               seal: Seal | None = None):
    """The server's timed loop on ``custom_kernel``: one checked call, then up to ``max_repeats``
    timed ones (synchronize, clear the L2, event, call, event, synchronize; ``recheck``: a fresh,
    checked input before each, as leaderboard mode; else the same input every time, as benchmark
    mode) until ``should_stop``. ``generate(args)`` makes a case's inputs (default the official
    ones). ``seal`` (human mode, ab, the audit): each call is timed through the references the seal
    took before the submission was imported (``Seal.timed``) and followed by its check (a patch or
    a torch.Tensor subclass fails the case: ``Seal.check``); None (protocol mode): the server's own
    loop, which looks torch.cuda.Event up when it times. Returns the durations (ns) or a failure
    message (str)."""
    import torch

    from utils import clear_l2_cache
    generate = generate or generate_case
    args = dict(args)
    cuda = torch.cuda.is_available()
    if not cuda:
        max_repeats = min(max_repeats, CPU_MAX_REPEATS)
    try:
        data = generate(args)
        pristine = _clone(data)
        given = _clone(data)
        output = custom_kernel(given)
        (_sync if seal is None else seal.sync)()
        fault = (seal.check("after the checked call", output) if seal is not None else "") or _inputs_changed(
            given, pristine)
        if fault:
            return fault
        good, message = _check(pristine, output)
        if not good:
            return message
        durations = []
        t0 = time.perf_counter_ns()
        for _ in range(max_repeats):
            if recheck:
                if "seed" in args:
                    args["seed"] += RECHECK_SEED_STEP
                data = generate(args)
                pristine = _clone(data)
            _sync()
            if seal is not None:
                output, took = seal.timed(custom_kernel, data)
                fault = seal.check("after a timed call", output, ops=recheck)  # the dispatcher: before a check
                if fault:
                    return fault
                durations.append(took)
            elif cuda:
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                clear_l2_cache()
                start.record()
                output = custom_kernel(data)
                end.record()
                torch.cuda.synchronize()
                durations.append(start.elapsed_time(end) * 1e6)  # ms -> ns
            else:
                h0 = time.perf_counter_ns()
                output = custom_kernel(data)
                durations.append(float(time.perf_counter_ns() - h0))
            if recheck:
                fault = _inputs_changed(data, pristine)
                if fault:
                    return fault
                good, message = _check(pristine, output)
                if not good:
                    return message
            del output
            if should_stop(durations, time.perf_counter_ns() - t0, budget_ns):
                break
        return durations
    except BaseException as exc:
        return _describe(exc, "custom_kernel")


def _nvtx(name: str):
    """``torch.cuda.nvtx.range(name)`` with CUDA (what Nsight Compute's ``--nvtx-include``
    selects by), a no-op without it (a CPU build of torch has no NVTX)."""
    import contextlib

    import torch
    if not torch.cuda.is_available():
        return contextlib.nullcontext()
    return torch.cuda.nvtx.range(name)


def _record_profile_configs(args: dict) -> None:
    """After a profiled call, outside its NVTX range: where ``ENV_PROFILE_CONFIGS`` names a
    file (``eval.py profile`` sets it), append one JSON line with the case and what the
    submission's optional ``profile_configs()`` says of the kernels that call launched
    ({kernel name: its configuration}), and its per-shape backend picks. Never fails the case."""
    target = os.environ.get(ENV_PROFILE_CONFIGS)
    if not target:
        return
    entry = {"case": {key: args.get(key) for key in CASE_KEYS}, "configs": {}, "backend_picks": backend_picks()}
    try:
        describe = getattr(_submission(), "profile_configs", None)
        if callable(describe):
            entry["configs"] = {str(k): str(v) for k, v in dict(describe()).items()}
    except Exception as exc:  # noqa: BLE001 - a note in the record, not a failed case
        entry["error"] = one_line(f"profile_configs() raised {type(exc).__name__}: {exc}")
    with open(target, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")


def _run_profile_case(args: dict, ncu: bool = False):
    """(True, the report of one profiled call) or (False, a failure message). ``ncu``: the
    server's Nsight Compute path (``_run_single_profile_ncu``): inputs made inside an NVTX range
    "generate input", one call inside an NVTX range "custom_kernel" (what ``ncu --nvtx-include
    custom_kernel/`` profiles), and an empty report (the tables come from ncu's own report).
    Otherwise the torch profiler's table of one call, inside the same ranges."""
    custom_kernel, problem = _load_kernel()
    if problem:
        return False, problem
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
        cuda = torch.cuda.is_available()
        with _nvtx("generate input"):
            data = _generate(args)
            _sync()
        given = _clone(data)
        if ncu:
            with _nvtx("custom_kernel"):
                custom_kernel(given)
                _sync()
            _record_profile_configs(args)
            return True, ""
        activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
        with profile(activities=activities) as prof:
            with _nvtx("custom_kernel"):
                custom_kernel(given)
                _sync()
        sort = "self_cuda_time_total" if cuda else "self_cpu_time_total"
        return True, prof.key_averages().table(sort_by=sort, row_limit=20)
    except BaseException as exc:
        return False, _describe(exc, "profiling custom_kernel")


# =========================================================================== parent side

class Worker:
    """One spawned worker process that runs case after case; replaced if it dies."""

    def __init__(self, submission: str | None, distribution: str, check_inputs: bool, heartbeat=None,
                 timeout: float | None = None, ignore_interrupt: bool = False, stop_after_timeout: bool = False):
        """``heartbeat(seconds)``, if given, is called every ``HEARTBEAT_S`` seconds that one
        call has been running (human mode: a "still running" line). ``timeout``: seconds one
        call may run before the worker is killed and the call fails (``WorkerDied``); None:
        no limit (protocol mode, as on the server). ``stop_after_timeout``: after a call ran
        past the timeout, every later call fails at once without running (``stopped`` says
        why; human mode: one hang costs one timeout, not one per case); otherwise the next call
        starts a fresh worker. ``ignore_interrupt``: the worker ignores Ctrl-C, which the parent
        answers by killing it (no traceback from the worker)."""
        self._initargs = (submission, distribution, check_inputs, ignore_interrupt)
        self._pool = None
        self._heartbeat = heartbeat
        self._timeout = timeout
        self._stop_after_timeout = stop_after_timeout
        self.stopped = ""  # why later calls do not run ('' while they do)

    def _wait(self, future):
        t0 = time.monotonic()
        while True:
            elapsed = time.monotonic() - t0
            left = None if self._timeout is None else self._timeout - elapsed
            if left is not None and left <= 0:
                self.kill()
                if self._stop_after_timeout:
                    self.stopped = f"a case before it ran past --timeout {self._timeout:g} s"
                raise WorkerDied(f"the case ran longer than {self._timeout:g} s and was stopped "
                                 "(human mode's --timeout sets the limit)")
            waits = [w for w in (HEARTBEAT_S if self._heartbeat else None, left) if w is not None]
            try:
                return future.result(timeout=min(waits) if waits else None)
            except FutureTimeout:
                if self._heartbeat and (self._timeout is None or time.monotonic() - t0 < self._timeout):
                    self._heartbeat(time.monotonic() - t0)

    def start(self) -> int:
        """Spawn the worker process now, if it is not running (otherwise the first call spawns
        it), so that processes start in the order the caller chooses; returns its process id."""
        return self.call(os.getpid)

    def call(self, fn, *args):
        """fn(*args) in the worker; ``WorkerDied`` if the process died on it or ran past the timeout,
        or without running it once the worker is ``stopped``."""
        if self.stopped:
            raise WorkerDied(f"not run: {self.stopped}")
        if self._pool is None:
            self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_worker_init, initargs=self._initargs)
        try:
            return self._wait(self._pool.submit(fn, *args))
        except BrokenProcessPool as exc:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
            raise WorkerDied(_WORKER_DIED) from exc

    def kill(self):
        """End the worker process now, whatever it is running (a later call starts a fresh one)."""
        if self._pool is not None:
            for proc in list((getattr(self._pool, "_processes", None) or {}).values()):
                proc.kill()
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def close(self):
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if exc_type is None:
            self.close()
        else:  # e.g. Ctrl-C: do not wait for a case that may never end
            self.kill()


class WorkerDied(RuntimeError):
    pass


# =========================================================================== the judge's seal
# What a submission cannot patch (human mode's worker, eval.py ab's workers, the audit): the judge
# takes what it relies on before any user code runs, times and checks through those references
# only, and after the import and after every call checks that nothing it relies on was replaced.
# Protocol mode does none of this (Worker, no seal): it is the server's path, and is fooled as the
# server is. What this does and cannot do: docs/eval.md, "What a submission cannot patch".

# The kit's modules the judge runs (their whole namespaces, their classes and functions' code).
SEALED_MODULES = ("harness", "reference", "utils", "task", "nvfp4", "quant")
# Other namespaces whose callables and classes the judge's path reads (values that are not callable,
# such as torch.cuda's lazy-initialisation flags, change legitimately and are not sealed).
# torch.manual_seed is left out: torch._dynamo wraps it when it is first imported (a legitimate
# torch.compile does that), and the judge's verdicts do not depend on it (the checks compare with
# the reference on the same inputs).
SEALED_CALLABLES = ("torch", "torch.cuda", "torch._C", "time", "builtins")
SEAL_UNSEALED = ("torch.manual_seed",)
SEALED_CLASSES = ("torch.Tensor", "torch.cuda.Event")
# The aten operators the judge's own torch calls go through (the checker, the clones, the L2
# clear): a kernel registered over one of them (torch.library) changes what the judge computes.
SEALED_OPS = ("aten::clone", "aten::copy_", "aten::_to_copy", "aten::sub.Tensor", "aten::abs", "aten::mul.Tensor",
              "aten::add.Tensor", "aten::gt.Tensor", "aten::le.Tensor", "aten::eq.Tensor", "aten::isnan",
              "aten::isposinf", "aten::isneginf", "aten::bitwise_xor.Tensor", "aten::bitwise_or.Tensor",
              "aten::sum", "aten::nonzero", "aten::equal", "aten::empty.memory_format", "aten::empty_like",
              "aten::fill_.Scalar", "aten::randn", "aten::view", "aten::index.Tensor", "aten::matmul", "aten::mm")
_MAX_NAMED = 6  # patches named in one refusal line, at most
# What a replaced name is to the judge, said beside it (the pattern the patch belongs to).
_TIMERS = ("time.perf_counter_ns", "time.perf_counter", "time.monotonic", "time.monotonic_ns", "time.time",
           "time.time_ns", "torch.cuda.Event", "torch.cuda.synchronize", "torch.cuda.current_" + FORBIDDEN_WORD,
           "utils.clear_l2_cache", "torch.cuda.Event.elapsed_time", "torch.cuda.Event.record",
           "torch.cuda.Event.synchronize", "torch._C._cuda_synchronize", "torch._C._CudaEventBase")
_CHECKERS = ("reference.check_implementation", "reference.ref_kernel", "utils.verbose_allclose",
             "utils.match_reference", "utils.make_match_reference")


def _role(label: str) -> str:
    """" (a patched timer)" and the like: the pattern a replaced name belongs to."""
    name = label.removesuffix("'s code")
    if name in _TIMERS:
        return " (a patched timer)"
    if name in _CHECKERS:
        return " (a patched checker)"
    if name.startswith(("harness.", "audit.")):
        return " (the kit's judge patched)"
    return ""


class JudgeRefused(WorkerDied):
    """A result the judge will not report: the submission changed what the judge relies on."""


_MISSING = object()
# The hooks that see or steer the judge's own calls, each as the phrase that names it once changed.
_TRACE, _PROFILE = "a trace function was set (sys.settrace)", "a profile function was set (sys.setprofile)"
_THREAD_TRACE = "a trace function was set for new threads (threading.settrace)"
_THREAD_PROFILE = "a profile function was set for new threads (threading.setprofile)"
_FUNCTION_MODE = "a torch function mode was entered (TorchFunctionMode: it sees every torch call the judge makes)"
_DISPATCH_MODE = "a torch dispatch mode was entered (TorchDispatchMode: it computes every torch op the judge runs)"


def _dotted(name: str):
    """The object a dotted name of an imported module (and attributes) names."""
    head, *rest = name.split(".")
    obj = sys.modules[head]
    for i, part in enumerate(rest, 1):
        obj = sys.modules.get(".".join([head, *rest[:i]])) or getattr(obj, part)
    return obj


class Seal:
    """What the judge relies on, taken before any user code runs: its namespaces' entries (the kit's
    modules whole, ``SEALED_CALLABLES``' callables and classes, ``SEALED_CLASSES``' attributes), the
    code of every function among them, the profile and trace hooks, the torch function and dispatch
    mode stacks, the dispatcher's kernels of ``SEALED_OPS``, and the clocks the judge times with.
    ``problems()`` names whatever was replaced since; ``restore()`` puts it back (the audit does, so
    that its later checks and the process it runs in are the kit's again); ``timed``, ``sync`` and
    ``copy`` time, wait and read an output through the references taken here only. ``extra``: more
    modules to seal whole (the audit's own)."""

    def __init__(self, extra: tuple = ()):
        import builtins  # noqa: F401 - sealed by name below (SEALED_CALLABLES)
        import threading
        import time as time_module

        import torch

        import reference  # noqa: F401 - imported before the submission: sealed below
        import utils  # noqa: F401
        for name in ("quant", "nvfp4", "task"):
            try:
                __import__(name)
            except ImportError:  # beside the server's own reference.py: what is there is sealed
                pass
        self._torch, self._threading = torch, threading
        self._values, self._closed, self._codes, self._restore = [], [], [], []
        for name in (*SEALED_MODULES, *extra):
            module = sys.modules.get(name)
            if module is not None:
                self._take(name, vars(module), every=True, closed=True)
        for name in SEALED_CALLABLES:
            self._take(name, vars(_dotted(name)), every=False, closed=False)
        for name in SEALED_CLASSES:
            self._take(name, _dotted(name).__dict__, every=True, closed=True)
        self._modules = [(name, sys.modules[name]) for name in (*SEALED_MODULES, *extra, "torch", "time")
                         if name in sys.modules]
        self._hooks = self._hook_state()
        self._ops = {op: self._op_dump(op) for op in SEALED_OPS}
        self.count = len(self._values)
        # The clocks and the output's reader, taken now: C functions, which no assignment reaches.
        self._cuda = torch.cuda.is_available()
        self._perf, self._type, self._tensor = time_module.perf_counter_ns, type, torch.Tensor
        self._clone, self._detach = torch._C.TensorBase.clone, torch._C.TensorBase.detach
        if self._cuda:
            C = torch._C
            # torch's CUDA queue class and the current-queue function: their names hold the word the
            # server refuses in an upload (FORBIDDEN_WORD), which this file never spells
            self._event, self._queue_cls = C._CudaEventBase, getattr(C, f"_Cuda{_QUEUE}Base")
            self._record, self._elapsed = C._CudaEventBase.record, C._CudaEventBase.elapsed_time
            self._cuda_sync, self._device = C._cuda_synchronize, C._cuda_getDevice
            self._current = getattr(C, f"_cuda_getCurrent{_QUEUE}")
            self._randn, self._float32 = torch.randn, torch.float32
        self.tainted: list[str] = []  # what a check found; a judged worker refuses from then on
        self.history: list[str] = []  # every finding, "when: what" (the audit's "judge untouched" check)
        # This seal's methods are its own copies, bound here: a replaced ``Seal.check`` (or its code
        # swapped) is what the next check finds, not what it runs.
        for name in _SEAL_METHODS:
            fn = getattr(Seal, name)
            own = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
            own.__kwdefaults__ = fn.__kwdefaults__
            setattr(self, name, types.MethodType(own, self))

    def _take(self, label: str, namespace, every: bool, closed: bool) -> None:
        """Seal ``namespace``'s entries (``every``: all; else the callables and classes);
        ``closed``: a name added later is a patch too (it can shadow a builtin or an inherited
        method)."""
        for key, value in list(namespace.items()):
            sealed = every or callable(value) or isinstance(value, types.ModuleType)
            if not sealed or f"{label}.{key}" in SEAL_UNSEALED:
                continue
            self._values.append((namespace, key, value, f"{label}.{key}"))
            for fn in (value, getattr(value, "__func__", None), getattr(value, "fget", None)):
                code = getattr(fn, "__code__", None) if isinstance(fn, types.FunctionType) else None
                if code is not None:
                    self._codes.append((fn, code, fn.__defaults__, fn.__kwdefaults__, f"{label}.{key}"))
            if every and isinstance(value, type) and value.__module__ == namespace.get("__name__"):
                self._take(f"{label}.{key}", value.__dict__, every=True, closed=True)  # the module's own classes
        if closed:
            self._closed.append((namespace, frozenset(namespace.keys()), label))

    def _hook_state(self) -> tuple:
        """(name, value) of every hook that sees or steers the judge's own calls."""
        torch, threading = self._torch, self._threading
        state = [(_TRACE, sys.gettrace()), (_PROFILE, sys.getprofile()),
                 (_THREAD_TRACE, getattr(threading, "_trace_hook", None)),
                 (_THREAD_PROFILE, getattr(threading, "_profile_hook", None)),
                 (_FUNCTION_MODE, torch._C._len_torch_function_stack()),
                 (_DISPATCH_MODE, torch._C._len_torch_dispatch_stack())]
        monitoring = getattr(sys, "monitoring", None)
        if monitoring is not None:  # Python 3.12+
            state += [(f"a sys.monitoring tool was registered (id {i})", monitoring.get_tool(i)) for i in range(6)]
        frames = getattr(getattr(getattr(torch._C, "_dynamo", None), "eval_frame", None), "get_eval_frame_callback",
                         None)
        if frames is not None:
            state.append(("a frame evaluation callback was set (PEP 523)", frames()))
        return tuple(state)

    def _op_dump(self, op: str) -> str:
        try:
            return self._torch._C._dispatch_dump(op)
        except RuntimeError:  # not an operator of this torch
            return ""

    def problems(self, ops: bool = True) -> list[str]:
        """What was replaced since the seal, one short phrase each; ``ops``: the dispatcher too."""
        found = [f"{label} was {'deleted' if d.get(key, _MISSING) is _MISSING else 'replaced'}{_role(label)}"
                 for d, key, value, label in self._values if d.get(key, _MISSING) is not value]
        found += [f"{label}'s code was replaced{_role(label)}" for fn, code, defaults, kwdefaults, label in self._codes
                  if fn.__code__ is not code or fn.__defaults__ is not defaults or fn.__kwdefaults__ is not kwdefaults]
        for d, keys, label in self._closed:
            if d.keys() != keys:
                found += [f"{label}.{key} was added" for key in sorted(set(d) - keys, key=str)]
        found += [f"sys.modules[{name!r}] was replaced" for name, module in self._modules
                  if sys.modules.get(name) is not module]
        found += [name for (name, was), (_, now) in zip(self._hooks, self._hook_state(), strict=True)
                  if now is not was and now != was]
        if ops:
            found += [f"a kernel of {op} was registered over the one the judge uses (torch.library)"
                      for op, dump in self._ops.items() if self._op_dump(op) != dump]
        return found

    def refusal(self, found: list[str], when: str) -> str:
        """The one line that refuses a result, naming what was found (``_MAX_NAMED`` at most)."""
        named = "; ".join(found[:_MAX_NAMED]) + (f"; and {len(found) - _MAX_NAMED} more" if len(found) > _MAX_NAMED
                                                 else "")
        return (f"the submission changed what the judge relies on ({when}): {named}; no time or verdict of this "
                "process is reported")

    def check(self, when: str, output=_MISSING, ops: bool = True) -> str:
        """'' when nothing was replaced (and ``output``, where given, is exactly a torch.Tensor or
        no tensor at all), else the refusal (``refusal``) or the output's problem; a patch found
        taints the seal for good."""
        found = self.tainted or self.problems(ops)
        if found:
            if not self.tainted:
                self.history.append(f"{when}: {'; '.join(found)}")
            self.tainted = found
            return self.refusal(found, when)
        return "" if output is _MISSING else self.output_problem(output)

    def check_and_restore(self, when: str, output=_MISSING) -> str:
        """``check``, then, where a patch was found, ``restore``: the caller (the audit) goes on
        with the judge as it was, the finding kept in ``history``."""
        problem = self.check(when, output)
        if self.tainted:
            self.restore()
        return problem

    def output_problem(self, output) -> str:
        """'' unless ``output`` is an instance of a torch.Tensor subclass: the output must be
        exactly torch.Tensor, whose values nothing of the submission's computes when it is read."""
        kind = self._type(output)
        if kind is self._tensor or not any(c is self._tensor for c in kind.__mro__):
            return ""
        return (f"custom_kernel returned a {kind.__module__}.{kind.__qualname__}, a subclass of torch.Tensor: the "
                "output must be exactly torch.Tensor (a subclass, a lazy output say, can compute or change its values "
                "when the checker reads them, after the timed window)")

    def copy(self, output):
        """A copy of ``output`` read through its storage by the torch taken at the seal, without any
        dispatch the submission controls (exactly a torch.Tensor, no torch mode active); None when
        that cannot be had (then ``check`` says why)."""
        torch = self._torch
        if self._type(output) is not self._tensor or torch._C._len_torch_function_stack() \
                or torch._C._len_torch_dispatch_stack():
            return None
        return self._clone(self._detach(output))

    def sync(self) -> None:
        """torch.cuda.synchronize() through the C function taken at the seal (nothing without CUDA)."""
        if self._cuda:
            self._cuda_sync()

    def _current_queue(self):
        """The current CUDA queue of the current device, as torch.cuda's current-queue function builds it."""
        sid, index, kind = self._current(self._device())
        return self._queue_cls(**{f"{FORBIDDEN_WORD}_id": sid}, device_index=index, device_type=kind)

    def timed(self, kernel, data):
        """(output, ns): one call timed as the server's loop times it -- the L2 cleared (a fresh 4 GiB
        ``randn``, utils.clear_l2_cache), an event recorded on the current queue before and after
        the call, the device synchronised, the events' elapsed time -- through the references taken
        at the seal; without CUDA, the host clock around the call."""
        if not self._cuda:
            t0 = self._perf()
            output = kernel(data)
            return output, float(self._perf() - t0)
        start, end = self._event(enable_timing=True), self._event(enable_timing=True)
        dummy = self._randn((1 << 32) // 4, dtype=self._float32, device="cuda")
        del dummy
        self._record(start, self._current_queue())
        output = kernel(data)
        self._record(end, self._current_queue())
        self._cuda_sync()
        return output, self._elapsed(start, end) * 1e6  # ms -> ns

    def restore(self) -> None:
        """Put back whatever was replaced since the seal (names, code, hooks; torch modes popped);
        kernels registered over the dispatcher's are not removed (``problems`` still names them)."""
        torch, threading = self._torch, self._threading
        for d, key, value, label in self._values:
            if d.get(key, _MISSING) is not value:
                owner = _dotted(label.rsplit(".", 1)[0]) if isinstance(d, types.MappingProxyType) else None
                if owner is not None:
                    setattr(owner, key, value)
                else:
                    d[key] = value
        for fn, code, defaults, kwdefaults, _ in self._codes:
            fn.__code__, fn.__defaults__, fn.__kwdefaults__ = code, defaults, kwdefaults
        for d, keys, label in self._closed:
            for key in set(d) - keys:
                if isinstance(d, types.MappingProxyType):
                    delattr(_dotted(label), key)
                else:
                    del d[key]
        for name, module in self._modules:
            sys.modules[name] = module
        hooks = dict(self._hooks)
        if sys.gettrace() is not hooks[_TRACE]:
            sys.settrace(hooks[_TRACE])
        if sys.getprofile() is not hooks[_PROFILE]:
            sys.setprofile(hooks[_PROFILE])
        threading._trace_hook, threading._profile_hook = hooks[_THREAD_TRACE], hooks[_THREAD_PROFILE]
        while torch._C._len_torch_function_stack() > hooks[_FUNCTION_MODE]:
            torch._C._pop_torch_function_stack()
        while torch._C._len_torch_dispatch_stack() > hooks[_DISPATCH_MODE]:
            torch._C._pop_torch_dispatch_stack()
        self.tainted = []


_SEAL_METHODS = ("_hook_state", "_op_dump", "problems", "refusal", "check", "check_and_restore", "output_problem",
                 "copy", "sync", "_current_queue", "timed", "restore")

# The worker-side entry points a judged worker runs, by name; those that call the submission and
# time or check it take the seal.
_JUDGED_ENTRIES = ("getpid", "submission_import_problem", "_backend_here", "submission_kernel_revision",
                   "backend_picks", "_run_test_case", "run_benchmark_case", "_run_profile_case")
_SEALED_ENTRIES = ("_run_test_case", "run_benchmark_case")
_WORKER_DIED = "the worker process died while running the submission (a crash, os._exit or an out-of-memory kill)"


def _judged_loop(conn, initargs: tuple) -> None:
    """The judged worker process: its settings (``_worker_init``), the seal, then requests until
    the parent closes the pipe. Everything it uses after the seal was taken before any user code
    ran: the entry points by name in a table of its own (a replaced ``harness.run_benchmark_case``
    is not what runs), raw reads and writes of the pipe's descriptor, the C pickler, and this
    frame's own code, which nothing changes once it runs. The submission is imported before the
    first request that needs it and checked right after; every request's result is checked
    before it leaves; a patch found refuses this and every later result."""
    _worker_init(*initargs)
    seal = Seal()
    read, write, loads, dumps, pid = os.read, os.write, pickle.loads, pickle.dumps, os.getpid
    entries = {fn.__name__: fn for fn in (submission_import_problem, _backend_here, submission_kernel_revision,
                                          backend_picks, _run_test_case, run_benchmark_case, _run_profile_case)}
    fd, imported = conn.fileno(), False
    while True:
        head = b""
        while len(head) < 4:
            chunk = read(fd, 4 - len(head))
            if not chunk:
                return  # the parent closed the pipe
            head += chunk
        size, body = int.from_bytes(head, "big", signed=True), b""
        while len(body) < size:
            body += read(fd, size - len(body))
        name, args = loads(body)
        reply = ("ok", pid())
        if name != "getpid":
            if not imported:
                imported = True
                try:  # the first user code; its failure is the entries' to report
                    _submission()
                except BaseException:  # noqa: BLE001
                    pass
            problem = seal.check("after importing the submission" if name == "submission_import_problem" else
                                 f"before {name}")
            if problem:
                reply = ("refused", problem)
            else:
                try:
                    value = entries[name](*args, seal=seal) if name in _SEALED_ENTRIES else entries[name](*args)
                    problem = seal.check(f"after {name}")
                    reply = ("refused", problem) if problem else ("ok", value)
                except BaseException as exc:  # noqa: BLE001 - the harness's own failure, in one line
                    reply = ("error", one_line(f"{type(exc).__name__}: {exc}"))
        data = dumps(reply, 4)
        message = len(data).to_bytes(4, "big", signed=True) + data
        while message:
            message = message[write(fd, message):]


class _PlainUnpickler(pickle.Unpickler):
    """What comes back from a judged worker is plain values; anything else is refused unread (a
    submission that writes to the pipe gets no code run in the parent)."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"the judged worker sent {module}.{name}; only plain values come back")


class _Reply:
    """The pending reply of a judged worker, waited on as ``Worker._wait`` waits on a future."""

    def __init__(self, conn):
        self._conn = conn

    def result(self, timeout=None):
        if not self._conn.poll(timeout):
            raise FutureTimeout()
        return _PlainUnpickler(io.BytesIO(self._conn.recv_bytes())).load()


class JudgedWorker(Worker):
    """``Worker`` for human mode and ``eval.py ab``: the same calls, heartbeat, timeout and Ctrl-C
    handling, but in a process of its own that seals the judge before the submission is imported
    (``_judged_loop``); a result it refuses raises ``JudgeRefused`` (a ``WorkerDied``: the case
    fails with the line naming the patch). ``fn`` is one of the worker's entry points
    (``_JUDGED_ENTRIES``), named, not sent."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._proc = self._conn = None

    def call(self, fn, *args):
        name = getattr(fn, "__name__", "")
        if name not in _JUDGED_ENTRIES:
            raise ValueError(f"{name or fn!r} is not an entry point of the judged worker "
                             f"({', '.join(_JUDGED_ENTRIES)})")
        if self.stopped:  # a call before ran past the timeout (stop_after_timeout): nothing runs
            raise WorkerDied(f"not run: {self.stopped}")
        if self._proc is None:
            ctx = multiprocessing.get_context("spawn")
            self._conn, child = ctx.Pipe()
            self._proc = ctx.Process(target=_judged_loop, args=(child, self._initargs))
            self._proc.start()
            child.close()
        try:
            self._conn.send_bytes(pickle.dumps((name, args), 4))
            status, value = self._wait(_Reply(self._conn))
        except (EOFError, OSError, pickle.UnpicklingError, ValueError) as exc:
            self.kill()
            raise WorkerDied(_WORKER_DIED) from exc
        if status == "refused":
            raise JudgeRefused(value)
        if status == "error":
            raise RuntimeError(value)
        return value

    def kill(self):
        if self._proc is not None:
            self._proc.kill()
            self.close()

    def close(self):
        if self._proc is not None:
            self._conn.close()
            self._proc.join(timeout=30)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join()
            self._proc = self._conn = None


class Terminated(BaseException):
    """SIGTERM, raised in the main thread by ``sigterm_raises``, as Ctrl-C raises KeyboardInterrupt:
    a ``Worker`` left by it kills its process on the way out (``__exit__``)."""


@contextlib.contextmanager
def sigterm_raises():
    """While the block runs, SIGTERM raises ``Terminated`` in the main thread instead of ending
    the process at once, so that the way out ends the spawned worker too and the process exits
    after its own cleanup (multiprocessing's resource tracker then ends with it); the handler
    before is restored afterwards. Outside the main thread (no signal handlers there), nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_terminated(signum, frame):
        raise Terminated()

    before = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


@dataclasses.dataclass
class CaseResult:
    """What a mode found for one case. durations in ns (timed modes), report (profile)."""
    spec: str
    args: dict
    ok: bool
    error: str = ""
    durations: list | None = None
    report: str = ""
    logged: dict | None = None  # stats read back from protocol lines (no durations there)


def safe_call(worker: Worker, fn, *args):
    """worker.call, with every failure of the worker turned into a WorkerDied value."""
    try:
        return worker.call(fn, *args)
    except WorkerDied as exc:
        return exc
    except Exception as exc:  # e.g. a result that does not pickle: fail the case, not the harness
        return WorkerDied(one_line(f"the harness could not run this case: {type(exc).__name__}: {exc}"))


def backend_status(worker: Worker) -> tuple[str, str]:
    """``_backend_here`` in the worker; ("unknown", "") if the worker died on it."""
    out = safe_call(worker, _backend_here)
    return out if isinstance(out, tuple) else ("unknown", "")


def run_test_mode(log, worker: Worker, tests: list[TestCase], progress=None) -> list[CaseResult]:
    log("test-count", len(tests))
    results = []
    for idx, test in enumerate(tests):
        log(f"test.{idx}.spec", test.spec)
        if progress:
            progress(f"[test {idx + 1}/{len(tests)}] {test.spec}")
        out = safe_call(worker, _run_test_case, test.args)
        ok, message = (False, str(out)) if isinstance(out, WorkerDied) else out
        results.append(CaseResult(test.spec, test.args, ok, "" if ok else message))
        log(f"test.{idx}.status", "pass" if ok else "fail")
        if not ok:
            log(f"test.{idx}.error", one_line(message))
        elif message:
            log(f"test.{idx}.message", one_line(message))
        if progress:
            progress(f"    {'pass' if ok else 'FAIL: ' + one_line(message)}")
    log("check", "pass" if all(r.ok for r in results) else "fail")
    return results


def _log_stats(log, idx: int, durations: list, with_median: bool) -> None:
    stats = calculate_stats(durations)
    for field in dataclasses.fields(Stats):
        log(f"benchmark.{idx}.{field.name}", getattr(stats, field.name))
    if with_median:
        log(f"benchmark.{idx}.median", statistics.median(durations))


def warm_up(worker: Worker, tests: list[TestCase], leaderboard: bool, progress=None,
            harness_date: str = HARNESS_DATE) -> None:
    """The timed modes' warm-up, as the server's: the first case through the timed loop with
    the warm-up's limits (leaderboard: those of ``harness_date``) and no re-check (its verdict
    is not used)."""
    name = "leaderboard" if leaderboard else "benchmark"
    warm = LEADERBOARD_REPEATS[harness_date][0] if leaderboard else BENCH_WARMUP
    if progress:
        progress(f"[{name}] warm-up {tests[0].spec}")
    safe_call(worker, run_benchmark_case, tests[0].args, False, *warm)


def run_timed_mode(log, worker: Worker, tests: list[TestCase], leaderboard: bool,
                   with_median: bool = False, progress=None, harness_date: str = HARNESS_DATE) -> list[CaseResult]:
    """benchmark (leaderboard=False) or leaderboard mode (its repeats: those of ``harness_date``)."""
    name = "leaderboard" if leaderboard else "benchmark"
    per_case = LEADERBOARD_REPEATS[harness_date][1] if leaderboard else BENCH_CASE
    warm_up(worker, tests, leaderboard, progress, harness_date)
    log("benchmark-count", len(tests))
    results = []
    for idx, test in enumerate(tests):
        log(f"benchmark.{idx}.spec", test.spec)
        if progress:
            progress(f"[{name} {idx + 1}/{len(tests)}] {test.spec}")
        out = safe_call(worker, run_benchmark_case, test.args, leaderboard, *per_case)
        if isinstance(out, list):
            results.append(CaseResult(test.spec, test.args, True, durations=out))
            _log_stats(log, idx, out, with_median)
            if progress:
                s = calculate_stats(out)
                progress(f"    {s.runs} runs, mean {s.mean / 1e3:.3f} µs, best {s.best / 1e3:.3f} µs")
        else:
            results.append(CaseResult(test.spec, test.args, False, error=one_line(str(out))))
            log(f"benchmark.{idx}.status", "fail")
            log(f"benchmark.{idx}.error", one_line(str(out)))
            if progress:
                progress(f"    FAIL: {one_line(str(out))}")
            if leaderboard:
                break
    log("check", "pass" if all(r.ok for r in results) else "fail")
    return results


def server_ncu_rule(environ=None) -> bool:
    """The server's choice of its Nsight Compute path in profile mode, quirk included:
    ``bool(os.getenv("POPCORN_NCU", "0"))`` (problems/nvidia/eval.py at f83cb92,
    ``run_single_profile``) is true whenever the variable is unset ("0" is a non-empty string)
    or set to anything but the empty string, "0" included. Only ``POPCORN_NCU=`` (empty) takes
    the torch profiler's path."""
    environ = os.environ if environ is None else environ
    return bool(environ.get("POPCORN_NCU", "0"))


def run_profile_mode(log, worker: Worker, tests: list[TestCase], progress=None,
                     ncu: bool | None = None) -> list[CaseResult]:
    """Profile mode: per case one call, profiled by Nsight Compute around the process (``ncu``
    True: the server's ncu path, an empty report) or by the torch profiler (False: its table).
    ``ncu`` None: the server's rule (``server_ncu_rule``)."""
    ncu = server_ncu_rule() if ncu is None else ncu
    log("benchmark-count", len(tests))
    results = []
    for idx, test in enumerate(tests):
        log(f"benchmark.{idx}.spec", test.spec)
        if progress:
            progress(f"[profile {idx + 1}/{len(tests)}] {test.spec}")
        out = safe_call(worker, _run_profile_case, test.args, ncu)
        ok, text = (False, str(out)) if isinstance(out, WorkerDied) else out
        if ok:
            results.append(CaseResult(test.spec, test.args, True, report=text))
            log(f"benchmark.{idx}.report", base64.b64encode(text.encode("utf-8"), b"+*").decode("ascii"))
        else:
            results.append(CaseResult(test.spec, test.args, False, error=one_line(text)))
            log(f"benchmark.{idx}.status", "fail")
            log(f"benchmark.{idx}.error", one_line(text))
    log("check", "pass" if all(r.ok for r in results) else "fail")
    return results


def run_mode(mode: str, log, worker: Worker, tests: list[TestCase], with_median: bool = False,
             progress=None, harness_date: str = HARNESS_DATE, ncu: bool | None = None) -> list[CaseResult]:
    """One mode over ``tests``; ``ncu``: profile mode's path (None: the server's rule)."""
    if mode == "test":
        return run_test_mode(log, worker, tests, progress)
    if mode in ("benchmark", "leaderboard"):
        return run_timed_mode(log, worker, tests, mode == "leaderboard", with_median, progress, harness_date)
    if mode == "profile":
        return run_profile_mode(log, worker, tests, progress, ncu)
    raise ValueError(f"unknown mode {mode!r}")


def env_flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    return default if value is None else value.strip().lower() not in ("0", "false", "no", "off", "")


# =========================================================================== popcorn client
# Used by the tests and modal_app.py: run eval.py the way the server does and read its lines.

@dataclasses.dataclass
class ProtocolRun:
    returncode: int
    lines: dict  # key -> value, in order
    stdout: str
    stderr: str


def parse_popcorn(text: str) -> dict:
    """``key: value`` lines -> dict (a value keeps everything after the first ': ')."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(": ")
        if sep:
            out[key.strip()] = value
        elif line.endswith(":"):
            out[line[:-1].strip()] = ""
    return out


def run_protocol(workdir: Path | str, mode: str, test_file: Path | str, env: dict | None = None,
                 timeout: float | None = None, python: str = sys.executable,
                 prefix: list | tuple = ()) -> ProtocolRun:
    """``python eval.py MODE TESTFILE`` in ``workdir`` with a fresh ``os.pipe()`` whose write end
    is ``POPCORN_FD``; returns the exit status and the parsed lines. ``env`` adds to (or, with
    a value None, removes from) this process's environment; ``prefix`` goes before the command
    (a wrapper such as ``ncu ... --``, which passes the descriptor on)."""
    full_env = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            full_env.pop(key, None)
        else:
            full_env[key] = value
    read_fd, write_fd = os.pipe()
    full_env["POPCORN_FD"] = str(write_fd)
    chunks = []
    try:
        proc = subprocess.Popen([*prefix, python, "eval.py", mode, str(test_file)], cwd=str(workdir),
                                env=full_env, pass_fds=(write_fd,), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    finally:
        os.close(write_fd)  # the child holds its own copy; EOF comes when it closes it

    def drain():
        with os.fdopen(read_fd, "rb") as f:
            chunks.append(f.read())

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        stderr += f"\n[run_protocol] killed after {timeout} s"
    reader.join(timeout=30)
    text = b"".join(chunks).decode("utf-8", "replace")
    return ProtocolRun(proc.returncode, parse_popcorn(text), stdout, stderr)


def results_from_popcorn(lines: dict, mode: str) -> list[CaseResult]:
    """The parsed lines of one protocol run -> CaseResults; a timed case carries the logged
    stats (ns) in ``logged`` (the median only where NVFP4_EVAL_LOG_MEDIAN=1 logged it)."""
    prefix = "test" if mode == "test" else "benchmark"
    count = int(lines.get(f"{prefix}-count", 0))
    results = []
    for idx in range(count):
        spec = lines.get(f"{prefix}.{idx}.spec")
        if spec is None:
            break
        try:
            args = parse_test_cases(spec)[0].args
        except TestFileError:
            args = {}
        key = f"{prefix}.{idx}."
        if mode == "test":
            ok = lines.get(key + "status") == "pass"
            results.append(CaseResult(spec, args, ok, lines.get(key + "error", "")))
        elif key + "mean" in lines:
            logged = {f: float(lines[key + f]) for f in
                      ("runs", "mean", "std", "err", "best", "worst", "median") if key + f in lines}
            results.append(CaseResult(spec, args, True, logged=logged))
        elif key + "report" in lines:
            report = base64.b64decode(lines[key + "report"], b"+*").decode("utf-8", "replace")
            results.append(CaseResult(spec, args, True, report=report))
        else:
            results.append(CaseResult(spec, args, False, lines.get(key + "error", "no result")))
    return results


# =========================================================================== tables

def _case_numbers(res: CaseResult) -> dict | None:
    """runs / mean / median / best / worst / std / err in ns of a timed case (None if failed)."""
    if not res.ok:
        return None
    if res.durations:
        s = calculate_stats(res.durations)
        return {"runs": s.runs, "mean": s.mean, "median": statistics.median(res.durations),
                "best": s.best, "worst": s.worst, "std": s.std, "err": s.err}
    ps = res.logged
    if ps:
        return {"runs": int(ps["runs"]), "mean": ps["mean"], "median": ps.get("median"),
                "best": ps["best"], "worst": ps["worst"], "std": ps["std"], "err": ps["err"]}
    return None


def sol_lookup(shapes: dict | None = None) -> dict:
    """(m, k, l) -> official B200 speed-of-light µs, from shapes.json."""
    shapes = load_shapes() if shapes is None else shapes
    return {(b["m"], b["k"], b["l"]): b["sol_us"] for b in shapes.get("benchmarks", []) if "sol_us" in b}


def summarize(mode: str, results: list[CaseResult], sol: dict | None = None) -> dict:
    """JSON-ready summary of one mode: per-case rows and the geometric means (µs)."""
    sol = sol_lookup() if sol is None else sol
    rows = []
    for res in results:
        row = {"spec": res.spec, **{k: res.args.get(k) for k in ("m", "k", "l", "seed")},
               "status": "pass" if res.ok else "fail"}
        if not res.ok:
            row["error"] = res.error
        nums = _case_numbers(res) if mode in ("benchmark", "leaderboard") else None
        if nums:
            row["runs"] = nums["runs"]
            for key in ("mean", "median", "best", "worst", "std", "err"):
                row[f"{key}_us"] = None if nums[key] is None else nums[key] / 1e3
            s = sol.get((row["m"], row["k"], row["l"]))
            row["sol_us"] = s
            row["pct_of_sol"] = 100.0 * s / row["mean_us"] if s and row["mean_us"] else None
        rows.append(row)
    out = {"mode": mode, "passed": all(r.ok for r in results), "cases": rows}
    if mode in ("benchmark", "leaderboard"):
        out["geomean_mean_us"] = geomean(r.get("mean_us") for r in rows) if rows else None
        out["geomean_median_us"] = geomean(r.get("median_us") for r in rows) if rows else None
    return out


def fmt(value, spec=".3f") -> str:
    return "-" if value is None else format(value, spec)


def format_table(summary: dict, device: str = "", backend: str = "", provenance: str = "") -> str:
    """The human-readable table of one mode's ``summarize`` output (``backend``: the submission's
    backend that ran, and ``provenance``: what else names the code that ran, such as its kernel
    revision; both named in the first line)."""
    mode, rows = summary["mode"], summary["cases"]
    lines = []
    device = (device or "unknown device") + (f", backend {backend}" if backend else "") + \
        (f", {provenance}" if provenance else "")
    if mode in ("benchmark", "leaderboard"):
        b200 = "B200" in device.upper()
        note = "" if b200 else "   <- SOL: official B200 figures; this GPU is not a B200"
        lines.append(f"{mode}: {device}")
        head = (f"{'m':>6} {'k':>6} {'l':>2} {'runs':>5} {'mean µs':>10} {'median µs':>10} "
                f"{'best µs':>10} {'worst µs':>10} {'SOL µs':>8} {'% of SOL':>9}")
        lines += [head + note, "-" * len(head)]
        for r in rows:
            lead = f"{fmt(r['m'], 'd'):>6} {fmt(r['k'], 'd'):>6} {fmt(r['l'], 'd'):>2}"
            if r["status"] != "pass" or "mean_us" not in r:
                lines.append(f"{lead} FAIL: {r.get('error', '')}")
                continue
            pct = fmt(r["pct_of_sol"], ".1f") + ("%" if r["pct_of_sol"] is not None else "")
            lines.append(f"{lead} {r['runs']:>5} {fmt(r['mean_us']):>10} {fmt(r['median_us']):>10} "
                         f"{fmt(r['best_us']):>10} {fmt(r['worst_us']):>10} "
                         f"{fmt(r['sol_us']):>8} {pct:>9}")
        lines.append(f"geomean of means:   {fmt(summary['geomean_mean_us'])} µs   (the leaderboard's score)")
        lines.append(f"geomean of medians: {fmt(summary['geomean_median_us'])} µs")
        lines.append("% of SOL = SOL µs / mean µs (100% = at the speed of light)")
    else:
        lines.append(f"{mode}: {device}")
        for r in rows:
            tail = "pass" if r["status"] == "pass" else f"FAIL: {r.get('error', '')}"
            lines.append(f"  {r['spec']:<40} {tail}")
    lines.append(f"{mode}: {'PASS' if summary['passed'] else 'FAIL'}")
    return "\n".join(lines)


