"""The nvfp4_gemv harness's command line: the competition server's eval, reproduced, plus a
human mode. The pieces it shares with ``eval.py audit``, ``eval.py ab`` and the tools (the
worker, the timed loops, the upload rules, test files, tables) live in harness.py, which
protocol mode needs beside this file; this file adds the two modes and the subcommands' dispatch.

PROTOCOL MODE (what the server runs, as ``python eval.py MODE TESTFILE``, with ``submission.py``
beside this file and its own ``task.py``, ``utils.py`` and ``reference.py``)::

    POPCORN_FD=<fd> python3 eval.py test|benchmark|leaderboard|profile TESTFILE

It mirrors the GPU MODE NVIDIA ``eval.py`` (written anew for this kit). The server revision and
every fact taken from it -- exit codes, seeds, the loops' repeat and time limits, the L2 clear,
the inputs -- are recorded once, in docs/server.md ("The server this kit mirrors");
harness.py's constants (``EXIT_*``, ``BENCH_*``, ``LEADERBOARD_*``, ...) carry them. In short:

* ``key: value`` lines go to the file descriptor named by ``POPCORN_FD`` (exit 111 when it
  is unset, 2 with fewer than two arguments, an unknown mode or a ``POPCORN_SEED`` that is no
  integer, 113 for a test file that cannot be read, holds no case, has a line that does not
  parse or a case nvfp4_gemv cannot have (``case_problem``); each with one line on stderr,
  before anything runs). A ``POPCORN_FD`` that
  names no open file descriptor stops the run with one line on stderr and exit 1 (the
  server's traceback exits 1 too). Exit 0 when everything passed, 112 when not.
* Before any case runs, one line on stderr names the file tested: the ``submission.py`` the
  worker imports, the first on the import path, which begins with this file's folder (run from
  another folder, the file beside eval.py runs, not the working directory's). It is checked
  against the server's upload rules (``static_problems``: empty, size, UTF-8, the
  forbidden word); a file that breaks one gets one line on stderr per rule, ``check: fail``
  and exit 112, as the server refuses such an upload. The ``#!POPCORN`` header lines are not
  checked here: the server never reads them (popcorn-cli does; human mode and the audit warn).
* ``POPCORN_SEED`` (removed from the environment once read) mixes into every case seed as
  ``a + (a+b)(a+b+1)//2`` (a: case seed, b: secret seed); ``set_seed(seed or 42)``.
* Every case runs in one long-lived ``spawn`` worker process; the submission receives
  clones of the inputs.
* test: ``test-count``, then per case ``test.{i}.spec``, ``test.{i}.status`` pass|fail and
  ``test.{i}.error``; then ``check``.
* benchmark: a warm-up on the first case, then per case one untimed correctness check and a timed loop
  (synchronize, clear L2, event, ``custom_kernel(data)``, event, synchronize) with the
  server's stopping rule (``should_stop``). Logs ``benchmark-count``,
  ``benchmark.{i}.spec/runs/mean/std/err/best/worst`` (ns) and ``check``.
* leaderboard: like benchmark, each repeat on a fresh input whose output is checked; the
  first failure ends the run.
* profile: per case one call, on the server's rule for ``POPCORN_NCU``
  (``harness.server_ncu_rule``: ``bool(os.getenv("POPCORN_NCU", "0"))``, which is true when the
  variable is unset, "0" being a non-empty string): the Nsight Compute path -- the inputs made
  inside an NVTX range "generate input", the call inside one named "custom_kernel" (what the
  server's ``ncu --nvtx-include custom_kernel/`` profiles) and an empty report; only
  ``POPCORN_NCU=`` (set, empty) takes the torch profiler's path, a table per case. Reports are
  base64 with altchars ``+*``. ``python3 eval.py profile [SUBMISSION]`` without ``POPCORN_FD``
  runs the server's ncu command over this harness (ncu_profile.py).

Where this file knowingly differs from the server's:

* It does not import the CUTLASS DSL (the server catches ``cutlass...OpError`` only; any
  other exception from a submission crashes the server's harness with a traceback). Here
  every exception of the submission -- at import or in ``custom_kernel`` -- becomes a
  failed case with its text (one line), and a worker process that dies (segfault,
  ``os._exit``) fails its case and is replaced: the harness itself never crashes.
* It fails a submission that writes into its input tensors (a, b, sfa, sfb and the permuted
  scales; ``c`` is the output buffer and may be written). The server hands over clones and
  does not look, but its benchmark loop reuses one input for every repeat, so such a
  submission times something else than it claims. ``NVFP4_EVAL_CHECK_INPUTS=0`` turns this
  check off and gives the server's verdict.
* leaderboard mode exits 112 when a case failed (the server's ``problems/nvidia/eval.py`` at
  1b76272 and 31237d0 exits 0 there, after logging ``check: fail``).
* ``NVFP4_EVAL_DISTRIBUTION`` (default ``official``) picks the input values
  (``quant.DISTRIBUTIONS``, applied by ``quant.fill``); the server always uses the official
  ones. The others need the kit's quant.py (and nvfp4.py) importable beside this file.
* ``NVFP4_EVAL_HARNESS_DATE`` (default ``2026-01-13``, the head) picks leaderboard mode's
  repeats by the date of the server's loop (``LEADERBOARD_REPEATS``); ``2025-11-11`` is the
  loop the nvfp4_gemv leaderboard itself ran (human mode: ``--harness-date``).
* ``NVFP4_EVAL_LOG_MEDIAN=1`` adds ``benchmark.{i}.median`` lines (for modal_app.py's table);
  off by default, so the key set is the server's.
* Without CUDA (never the case on the server; useful for tests) the timed loops use the host
  clock, skip the L2 flush and stop after ``CPU_MAX_REPEATS`` repeats: verdicts are real,
  times are not.

HUMAN MODE (``python3 eval.py [options]`` without POPCORN_FD, or ``python3 eval.py human
[options]``): runs the same loops and prints a table per mode (runs, mean, median, best, worst
in µs, the official B200 speed of light and the share of it reached) with the geometric mean
of the means (the leaderboard's score) and of the medians; ``--mode profile`` prints the torch
profiler's table per case, on a CPU too (the ncu path only where ``POPCORN_NCU`` is set to a
true value, i.e. under ncu; ``python3 eval.py profile``, no ``--mode``, is Nsight Compute's run,
ncu_profile.py). A failed check's numbers are labelled (``ERROR at (i, j, l): result R,
expected E``, ``harness.labelled``; protocol mode logs the server's unlabelled text); the whole
message goes to stderr as the case ends, and the table's row holds its short form
(``harness.brief``: a mismatch as its count and first element); an output that is ``c`` as it
was handed over gets a hint saying so. After a benchmark or
leaderboard table, a ``warning:`` line on stderr names each shape whose mean or median lies
below what its bytes take at the GPU's peak memory bandwidth (``harness.impossible_times``:
with the L2 cleared before every call, no output computed from that call's inputs comes
sooner), or says that the GPU has no peak on record. See ``python3
eval.py --help``.
Its worker is judged (``harness.JudgedWorker``): what the judge relies on -- torch's timers, the
checker, this harness -- is sealed before the submission is imported and checked after the import
and after every call; a patch found is one line naming it, in place of the case's time (found at
the import: one ``error:`` line, no case runs, exit 112), and an output that is a torch.Tensor
subclass fails its case, named. Protocol mode does none of this: it is the server's path, and a
file that patches the timers fools it as it fools the server.
The submission picks its backend from ``NVFP4_GEMV_BACKEND`` (``--backend`` sets it); the
worker inherits the environment. Before any case runs, human mode checks the server's upload
rules (``static_problems``; each broken rule one ``error:`` line naming the file, exit 112;
a missing ``#!POPCORN`` header line is one ``warning:`` line, ``header_warnings``) and its
arguments: the submission (an existing ``.py`` file, positional or ``--submission``; it is
imported with the kit's folder first on the path, so a reference.py, utils.py or task.py beside
it is not used, which one ``warning:`` line says, ``harness.shadowed_files``; one that does not
import stops the run with its traceback and one ``error:`` line, exit 112, before any case, and
so does one without a callable ``custom_kernel`` or one that needs the CUTLASS DSL where it is not
installed, in one line without a traceback, the latter naming the install command),
``--json`` (a path it can write), the shapes (``--shapes``: a named set of shapes.json or a
file, every case valid for the problem and small enough for this machine's memory), the timed modes' need of CUDA and,
where the submission has ``select_backend(device)``, that its backend can run here (without
one, ``--backend`` gets a ``warning:`` line: nothing reads it); any of these failing stops with
one ``error:`` line on stderr and exit 2. The kit's own submission.py runs as it is (the file that
would be uploaded; it runs its own copies of kernels/): where those copies differ from kernels/,
one ``warning:`` line names the side that changed (``bundle.warn_if_out_of_sync``). The first
line of each table and the ``--json`` record name the submission's kernel revision (its
``kernel_revision()``, or none) and its ``bundle`` state (in sync, source edited, block edited,
both edited, unknown, or not the kit's file: ``bundle.kit_state``). A passing test mode adds one
``note:`` line on stderr, before its table (which ends in ``test: PASS``): caching and deferred
work are ``eval.py audit``'s job. A case that runs longer
than ``HEARTBEAT_S`` prints a "still running" line every ``HEARTBEAT_S`` seconds, naming the
limit and Ctrl-C; one that runs past ``--timeout`` (default ``CASE_TIMEOUT_S``) fails and its
worker is killed, and the run stops there: each case after it is one "not run" line (a hang
costs one timeout, not one per case). Ctrl-C ends the run with one line and exit 130; SIGTERM
with one line and exit 143 (``harness.sigterm_raises``); either way the worker ends with it.

A ``select_backend`` that raises anything but ValueError (a setting) or RuntimeError (this
machine), or a backend of its registry whose ``supported(device)`` gives no (ok, reason) pair,
is the submission's fault, not the machine's: one ``error: ...; no case ran`` line, exit 112, as
for a submission that does not import (``harness._backend_here``: "broken").

Public surface (what tests and other tools may call): ``main`` (the command line, subcommands
included), ``protocol_main``, ``human_main``, ``device_name``, ``HARNESS_COPIES``,
``heartbeat_line``; everything else they need is harness.py's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from harness import (
    CASE_TIMEOUT_S,
    ENV_BACKEND,
    ENV_CHECK_INPUTS,
    ENV_DISTRIBUTION,
    ENV_HARNESS_DATE,
    ENV_LOG_MEDIAN,
    EXIT_BAD_FD,
    EXIT_BAD_TESTS,
    EXIT_FAIL,
    EXIT_INTERRUPTED,
    EXIT_NO_FD,
    EXIT_OK,
    EXIT_TERMINATED,
    EXIT_USAGE,
    HARNESS_DATE,
    HARNESS_DATES,
    MODES,
    SHAPE_SETS,
    JudgedWorker,
    Terminated,
    TestFileError,
    Worker,
    backend_picks,
    backend_status,
    brief,
    cuda_device_name,
    distributions,
    env_flag,
    format_table,
    header_warnings,
    impossible_times,
    input_bytes,
    labelled,
    read_test_file,
    run_mode,
    safe_call,
    shadowed_files,
    shape_cases,
    sigterm_raises,
    static_problems,
    submission_import_problem,
    submission_kernel_revision,
    submission_problem,
    summarize,
    unknown_peak_note,
    with_secret,
    writable_file_problem,
)

HERE = Path(__file__).resolve().parent
# Copies of a case's inputs the harness holds at once (the generated inputs, the clone handed to
# the submission, the pristine copy it is compared with): what human mode checks fits the machine.
HARNESS_COPIES = 3


def _distribution_from(name: str) -> str:
    if name == "official":  # the server's values: no need to ask (the server's reference.py has no list)
        return name
    choices = distributions()
    if name not in choices:
        hint = "" if len(choices) > 1 else " (the others need the kit's quant.py and nvfp4.py beside eval.py)"
        raise ValueError(f"unknown distribution {name!r}; choose from {', '.join(choices)}{hint}")
    return name


def _harness_date_from(value: str | None) -> str:
    date = value or HARNESS_DATE
    if date not in HARNESS_DATES:
        raise ValueError(f"unknown harness date {date!r}; choose from {', '.join(HARNESS_DATES)} (the dates of "
                         "the server's leaderboard loops)")
    return date


def _protocol_submission() -> Path | None:
    """The file protocol mode's worker imports as ``submission``: the first ``submission.py`` on
    the import path the spawned worker inherits, which begins with this file's folder (the
    server's layout), whatever the working directory; None when there is none."""
    import importlib.machinery
    spec = importlib.machinery.PathFinder.find_spec("submission", sys.path)
    return Path(spec.origin) if spec is not None and spec.origin and spec.origin.endswith(".py") else None


def _protocol_static_problems(path: Path | None) -> list[str]:
    """``static_problems`` of the submission protocol mode imports, one line each, naming the
    file. [] when there is none (each case then says the import failed)."""
    return [f"{path}: {problem}" for problem in static_problems(path)] if path is not None else []


def protocol_main(argv: list[str]) -> int:
    fd = os.environ.get("POPCORN_FD")
    if not fd:
        return EXIT_NO_FD
    if argv and argv[0].startswith("-"):  # human mode's options, with POPCORN_FD left exported
        print(f"POPCORN_FD is set, which selects protocol mode (POPCORN_FD=<fd> python3 eval.py "
              f"{'|'.join(MODES)} TESTFILE), so {argv[0]!r} is no mode; for the human mode unset POPCORN_FD "
              f"or run `python3 eval.py human {' '.join(argv)}`", file=sys.stderr)
        return EXIT_USAGE
    if len(argv) < 2:
        print(f"usage: POPCORN_FD=<fd> python3 eval.py {'|'.join(MODES)} TESTFILE (got {len(argv)} "
              "argument(s))", file=sys.stderr)
        return EXIT_USAGE
    mode, test_file = argv[0], argv[1]
    if mode not in MODES:
        print(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}", file=sys.stderr)
        return EXIT_USAGE
    secret = os.environ.pop("POPCORN_SEED", None)  # pop also unsets it for child processes
    try:
        secret = int(secret) if secret else None
    except ValueError:
        print(f"POPCORN_SEED must be an integer, got {secret!r}", file=sys.stderr)
        return EXIT_USAGE
    try:  # the whole file first: readable, at least one case, every case one this problem can run
        tests = with_secret(read_test_file(test_file), secret)
    except TestFileError as exc:
        print(exc, file=sys.stderr)
        return EXIT_BAD_TESTS
    # The server's eval.py seeds this process's RNGs here (set_seed(seed or 42)); no case uses them:
    # each runs in a spawned worker, which starts with fresh ones. Not done here, so that this
    # process does not import torch (about 2 s of CPU per run).
    try:
        distribution = _distribution_from(os.environ.get(ENV_DISTRIBUTION, "official"))
    except ValueError as exc:
        print(f"{ENV_DISTRIBUTION}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        harness_date = _harness_date_from(os.environ.get(ENV_HARNESS_DATE))
    except ValueError as exc:
        print(f"{ENV_HARNESS_DATE}: {exc}", file=sys.stderr)
        return EXIT_USAGE

    try:
        out = os.fdopen(int(fd), "w")
    except (OSError, ValueError) as exc:
        print(f"POPCORN_FD={fd} is not an open file descriptor ({exc}): protocol mode writes its results "
              f"there, e.g. `POPCORN_FD=3 python3 eval.py {mode} {test_file} 3>log.txt`", file=sys.stderr)
        return EXIT_BAD_FD
    os.set_inheritable(int(fd), False)

    def log(key, value):
        print(f"{key}: {value}", file=out, flush=True)

    submission = _protocol_submission()
    problems = _protocol_static_problems(submission)
    if problems:  # the server refuses such an upload before anything runs
        for problem in problems:
            print(problem, file=sys.stderr)
        log("check", "fail")
        out.close()
        return EXIT_FAIL
    # Which file runs, in one line: from another folder it is the one beside eval.py, not the
    # working directory's (the server's layout has only the one).
    print(f"eval.py {mode} {test_file}: " + (f"submission {submission}" if submission else
          f"no submission.py beside eval.py ({HERE}): every case fails to import it"), file=sys.stderr, flush=True)

    try:
        with Worker(None, distribution, env_flag(ENV_CHECK_INPUTS, True)) as worker:
            results = run_mode(mode, log, worker, tests, env_flag(ENV_LOG_MEDIAN, False), harness_date=harness_date)
    finally:
        out.close()
    return EXIT_OK if all(r.ok for r in results) else EXIT_FAIL


# =========================================================================== human mode

NO_CUDA = "cpu (no CUDA)"


def device_name() -> str:
    """The GPU's name, or NO_CUDA. Without a CUDA driver on the machine torch is not imported
    (harness.cuda_device_name): this process then stays at a fraction of a second (the worker
    imports torch for the cases)."""
    return cuda_device_name() or NO_CUDA


def human_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python3 eval.py",
        description="Check and time an nvfp4_gemv submission with the server's rules.",
        epilog="Protocol mode (as the server runs it): POPCORN_FD=<fd> python3 eval.py MODE TESTFILE. "
               "Audit (what the server would disqualify: caches, deferred work, static rules): "
               "python3 eval.py audit [SUBMISSION]. A/B timing of two or more submissions: "
               "python3 eval.py ab BASE NEW [NEW ...]. "
               "Compile check without a GPU: the kit's cuda kernel (kernels/nvfp4_gemv.cu, or a file's) for sm_90a and "
               "sm_100a, every kernel the GPUs may launch, registers and SASS beside the last commit's; a CuTe DSL "
               "submission for sm_100a: python3 eval.py compile [SUBMISSION] [--arch ARCH] [--all]. "
               "The kit's sources (kernels/) copied into submission.py: "
               "python3 eval.py bundle [--check | --write-back] [--force] [--no-compile]. "
               "Nsight Compute profile of what the benchmark runs, as the server takes it (a CUDA GPU and ncu; "
               "refused on a CPU), not --mode profile: python3 eval.py profile [SUBMISSION]. "
               f"Environment: {ENV_BACKEND} (submission backend), {ENV_CHECK_INPUTS}=0 (server verdict "
               "on input writes).")
    p.add_argument("file", nargs="?", metavar="SUBMISSION", help="the submission file (or --submission)")
    p.add_argument("--submission", help="the submission file (default: submission.py)")
    p.add_argument("--mode", default="test", choices=(*MODES, "all"),
                   help="profile = one call per case under the torch profiler, its table (runs on a CPU too; "
                        "Nsight Compute is the subcommand python3 eval.py profile); all = test, then benchmark, "
                        "then leaderboard, each only if the previous passed")
    p.add_argument("--shapes", metavar="|".join(SHAPE_SETS) + "|FILE",
                   help="tests: the official correctness cases; benchmarks: the timed cases; all: both "
                        "(all from shapes.json); or a FILE of lines 'm: 128; k: 256; l: 1; seed: 1111' "
                        "(checked before any case runs). Default: tests in test mode, benchmarks in the others")
    p.add_argument("--distribution", default="official", metavar="|".join(distributions()),
                   help="input values (default %(default)s: the server's)")
    p.add_argument("--backend", metavar="NAME",
                   help=f"sets {ENV_BACKEND} for the submission: auto or a backend of its registry (the kit's "
                        "submission.BACKENDS; a name it lacks is refused in one line before any case runs)")
    p.add_argument("--harness-date", default=HARNESS_DATE, choices=HARNESS_DATES,
                   help="the server's leaderboard loop of that date: 2025-11-11 = the nvfp4_gemv leaderboard's "
                        "own (200 repeats per case; compare with its public results), 2026-01-13 = the head "
                        "(1000 repeats; default %(default)s)")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    p.add_argument("--timeout", type=float, default=CASE_TIMEOUT_S, metavar="SECONDS",
                   help="seconds one case (or warm-up) may run before it fails and its worker is stopped "
                        "(default %(default)g)")
    args = p.parse_args(argv)
    if args.file and args.submission and args.file != args.submission:
        print(f"error: two submissions given ({args.file} and --submission {args.submission}); give one",
              file=sys.stderr)
        return EXIT_USAGE
    args.submission = args.file or args.submission or "submission.py"
    try:
        with sigterm_raises():  # SIGTERM, as Ctrl-C: the worker is killed on the way out
            return _human(args)
    except KeyboardInterrupt:  # the worker ignores Ctrl-C and was killed on the way out
        print("error: interrupted (Ctrl-C); no result", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated:
        print("error: terminated (SIGTERM); no result", file=sys.stderr)
        return EXIT_TERMINATED


def _memory_problem(cases: dict, cuda: bool) -> str:
    """'' when every case's inputs fit this machine (GPU memory with CUDA, else RAM) with the
    harness's copies of them, else the first case that does not."""
    if cuda:
        import torch
        capacity, where = torch.cuda.get_device_properties(0).total_memory, "GPU memory"
    else:
        try:
            capacity, where = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "memory (no CUDA)"
        except (AttributeError, OSError, ValueError):  # no sysconf here: nothing to compare with
            return ""
    for mode_cases in cases.values():
        for case in mode_cases:
            need = HARNESS_COPIES * input_bytes(case.args["m"], case.args["k"], case.args["l"])
            if need > capacity:
                return (f"the case '{case.spec}' needs about {need / 1e9:,.1f} GB ({HARNESS_COPIES} copies of its "
                        f"inputs), more than this machine's {capacity / 1e9:,.1f} GB of {where}")
    return ""


def _human(args) -> int:
    submission = Path(args.submission)
    problem = submission_problem(submission) or writable_file_problem(args.json, "--json", "out.json")
    if not problem and not args.timeout > 0:
        problem = f"--timeout must be a positive number of seconds, got {args.timeout:g}"
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    problems = static_problems(submission)
    if problems:  # the server would refuse the upload: no case runs
        for problem in problems:
            print(f"error: {submission}: {problem}; no case ran", file=sys.stderr)
        return EXIT_FAIL
    sync = "not the kit's file"
    if (Path(__file__).parent / "bundle.py").is_file():  # in the kit: its own submission.py beside its sources
        import bundle  # the standard library and harness only

        sync = bundle.warn_if_out_of_sync(submission)[0].state  # it runs as it is: the file that would be uploaded
    for warning in header_warnings(submission):
        print(f"warning: {submission}: {warning}", file=sys.stderr)
    shadowed = shadowed_files(submission)
    if shadowed:  # the loader puts the kit's folder first: these are not imported
        print(f"warning: {submission.parent} holds its own {', '.join(shadowed)}: the kit's are used (the server, "
              "too, puts its own beside the submission)", file=sys.stderr)
    try:
        distribution = _distribution_from(args.distribution)
        modes = ["test", "benchmark", "leaderboard"] if args.mode == "all" else [args.mode]
        cases = {m: shape_cases(args.shapes, m) for m in modes}
    except (OSError, ValueError) as exc:  # TestFileError is a ValueError
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.backend:
        os.environ[ENV_BACKEND] = args.backend
    device = device_name()
    cuda = device != NO_CUDA
    if not cuda and any(m in ("benchmark", "leaderboard") for m in modes):
        print("error: benchmark and leaderboard modes need a CUDA GPU (times come from CUDA events "
              "and L2 flushes); on this machine use --mode test", file=sys.stderr)
        return EXIT_USAGE
    problem = _memory_problem(cases, cuda)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    compile_check = None
    if not cuda and (Path(__file__).parent / "cuda_check.py").is_file():  # in the kit, no GPU here: does it build?
        import cuda_check  # the standard library only: the check runs in a process of its own, beside the cases

        compile_check = cuda_check.header_check(submission)

    running = []  # the mode's worker: once it is stopped (a case ran past --timeout), no case runs

    def progress(msg):
        stopped = running and running[-1].stopped
        if stopped and msg.startswith("["):  # a case that will not run: its one line
            msg = f"{msg}: not run ({stopped})"
        elif stopped and msg.startswith("    FAIL: not run: "):  # ... said already
            return
        print(labelled(msg), file=sys.stderr, flush=True)

    def heartbeat(seconds):
        progress(heartbeat_line(seconds, args.timeout))

    requested = os.environ.get(ENV_BACKEND, "auto")
    report = {"submission": str(submission), "device": device, "distribution": distribution,
              "harness_date": args.harness_date,
              "backend": None, "backend_requested": requested, "kernel_revision": None, "bundle": sync,
              "shapes": {m: args.shapes or ("tests" if m == "test" else "benchmarks") for m in modes},
              "modes": {}}
    passed = True
    for mode in modes:
        # A fresh worker per mode, as the server starts eval.py once per mode; judged: what the
        # submission patches changes no time and no verdict (harness.JudgedWorker).
        with JudgedWorker(str(submission), distribution, env_flag(ENV_CHECK_INPUTS, True), heartbeat,
                          timeout=args.timeout, ignore_interrupt=True, stop_after_timeout=True) as worker:
            running.append(worker)
            if mode == modes[0]:  # the import, then the backend, once, before any case: one line each
                problem = safe_call(worker, submission_import_problem)
                if problem:  # an import's traceback (the submission's frames) went to stderr once
                    print(f"error: {submission}: {problem}; no case ran", file=sys.stderr)
                    report.update(passed=False, import_error=str(problem))
                    _write_json(args.json, report, progress)
                    return EXIT_FAIL
                status, backend = backend_status(worker)
                if status == "invalid setting":
                    print(f"error: the submission rejects its settings: {backend}", file=sys.stderr)
                    return EXIT_USAGE
                if status == "cannot run":
                    print(f"error: the submission cannot run on this machine ({device}): {backend}",
                          file=sys.stderr)
                    return EXIT_USAGE
                if status == "broken":  # the submission's fault, not the machine's
                    print(f"error: {submission}: {backend}; no case ran", file=sys.stderr)
                    return EXIT_FAIL
                report["backend"] = backend or None
                revision = safe_call(worker, submission_kernel_revision)
                report["kernel_revision"] = revision if isinstance(revision, str) else None
                if backend:
                    progress(f"[backend] {backend} ({ENV_BACKEND}={requested})")
                elif args.backend:
                    print(f"warning: --backend {args.backend}: {submission} has no backend registry (no "
                          f"select_backend(device)); {ENV_BACKEND} is read by the kit's submission only and is "
                          "ignored here", file=sys.stderr)
            results = run_mode(mode, lambda k, v: None, worker, cases[mode], progress=progress,
                               harness_date=args.harness_date, ncu=env_flag("POPCORN_NCU", False))
            for r in results:  # the table and the JSON say which value is which
                r.error = labelled(r.error)
            picks = safe_call(worker, backend_picks) if report["backend"] == "fastest" else None
        if isinstance(picks, dict) and picks:
            report["backend_picks"] = {**report.get("backend_picks", {}), **picks}
        summary = summarize(mode, results)
        if mode == "profile":
            for r in results:
                if r.ok:
                    print(f"--- profile {r.spec}\n{r.report}")
        if mode == "test" and summary["passed"]:  # on stderr, before the table: the output ends in its verdict
            progress(f"note: test mode checks each output once, on fresh inputs; caching and deferred work are the "
                     f"audit's job: python3 eval.py audit {submission}")
        table = format_table(_briefly(summary), device, _backend_label(report),
                             f"kernel {report['kernel_revision'] or 'none'}, bundle: {report['bundle']}")
        if compile_check is not None:  # the header's next lines: whether its cuda kernel compiles
            report["cuda_compile"], table = compile_check.result(), compile_check.below_first_line(table)
            compile_check = None
        print(table, flush=True)
        print()
        if mode in ("benchmark", "leaderboard"):  # the L2 cleared before each call: bytes / peak bounds it
            found = summary["impossible_times"] = impossible_times(summary, device)
            note = unknown_peak_note(device)  # an unknown GPU: nothing found, and one line says why
            for line in found + ([note] if note else []):
                print(f"warning: {line}", file=sys.stderr, flush=True)
        report["modes"][mode] = summary
        if not summary["passed"]:
            passed = False
            break
    report["passed"] = passed
    _write_json(args.json, report, progress)
    return EXIT_OK if passed else EXIT_FAIL


def heartbeat_line(seconds: float, timeout: float) -> str:
    """Human mode's line for a case still running after ``seconds``: the limit and how to stop."""
    return (f"    ... still running ({seconds:.0f} s of at most {timeout:g} s: --timeout SECONDS sets the limit; "
            "Ctrl-C stops the run now)")


def _briefly(summary: dict) -> dict:
    """``summary`` for the table: each failure in its short form (``harness.brief``; the whole
    text went to stderr as the case ended, and goes to the JSON)."""
    return {**summary, "cases": [{**row, "error": brief(row["error"])} if row.get("error") else row
                                 for row in summary["cases"]]}


def _write_json(path: str | None, report: dict, progress) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(report, indent=2) + "\n")
        progress(f"wrote JSON: {path}")


def _backend_label(report: dict) -> str:
    """"triton", or "fastest (7168x16384x1: triton, ...)" with the per-shape picks; "" if unknown."""
    name = report.get("backend") or ""
    picks = report.get("backend_picks")
    if name == "fastest" and picks:
        name += " (" + ", ".join(f"{shape}: {pick}" for shape, pick in picks.items()) + ")"
    return name


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "human":
        return human_main(argv[1:])
    if argv and argv[0] == "audit":  # the checks live in audit.py, beside this file
        from audit import main as audit_main
        return audit_main(argv[1:])
    if argv and argv[0] == "ab":  # paired A/B timing lives in ab.py, beside this file
        from ab import main as ab_main
        return ab_main(argv[1:])
    if argv and argv[0] == "compile":  # cuda_check.py, beside this file (a CuTe DSL file: cute_check.py)
        from cuda_check import main as compile_main
        return compile_main(argv[1:])
    if argv and argv[0] == "bundle":  # the kit's sources copied into submission.py: bundle.py, beside this file
        from bundle import main as bundle_main
        return bundle_main(argv[1:])
    if os.environ.get("POPCORN_FD"):
        return protocol_main(argv)
    if argv and argv[0] == "profile":  # without POPCORN_FD: the server's ncu run, in ncu_profile.py beside this file
        from ncu_profile import main as profile_main
        return profile_main(argv[1:])
    if argv and argv[0] in MODES:
        print("POPCORN_FD is not set: protocol mode writes its results to that file descriptor. "
              "For the human mode run `python3 eval.py --help`.", file=sys.stderr)
        return EXIT_NO_FD
    return human_main(argv)


if __name__ == "__main__":
    sys.exit(main())
