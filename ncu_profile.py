"""``python3 eval.py profile [SUBMISSION] [--shapes NAME|FILE] [--out PATH]``: profile a submission
with Nsight Compute as the competition server does, on this machine's GPU.

The server (gpu-mode/kernelbot ``src/libkernelbot/run_eval.py`` at
4bdd839ad76eaac0cdab986d30f8d77f989a289b, ``profile_program_ncu``) runs the problem's eval.py in
profile mode on the benchmark cases (all of them for nvfp4_gemv, which is ranked by the geometric
mean), with ``POPCORN_NCU=1``, under::

    ncu --set full --nvtx --nvtx-include custom_kernel/ --import-source 1 -c 10 -o profile.ncu-rep -- CMD

so that only kernels launched inside the NVTX range "custom_kernel" (one call per case, made by
eval.py's ncu path: ``harness.server_ncu_rule``) are profiled, at most 10 in all. It then reads the
report back with ``ncu --import profile.ncu-rep --print-details body`` and shows, in place of case
0's (empty) report, the name of every kernel profiled and, for the first two kernels only, three
of their tables: ``NCU_TABLES`` (at most ``TABLE_LINE_LIMIT`` table lines). It keeps the
.ncu-rep file for download.

This tool does the same over the kit's harness: it lays out the kit's eval.py, task.py, utils.py,
reference.py (and ``harness.KIT_SUPPORT_FILES``) with the submission as submission.py in a
temporary folder, runs the same ncu command around ``python eval.py profile CASES`` with
``POPCORN_NCU=1`` (protocol mode, a real ``POPCORN_FD`` pipe), prints the same extract of the
report (``server_extract``), then a list of the kernels profiled with their launch shapes and
configurations (``kernel_rows``), and keeps the report (``--out``, default ``profile.ncu-rep``).

What it profiles: what the benchmark runs. Under ``POPCORN_NCU`` the kit's submission launches
only the kernel it keeps, with no race and no tuning: on a GPU its tables do not name (a B200
today) that is the registry's first backend with its default config, while the benchmark there
runs the tuner's picks. So first, in a process of its own (``pick_command``, ``pick_main``), the
submission makes each case's first call as the benchmark does (no ``POPCORN_NCU``: the race and
the tuner run), and says per case which backend and config it kept (``describe_pick``: its
``select_backend``, the harness's ``backend_picks``, its ``config_for``). The profiled run then
gets that pick through the settings the submission reads (``pin_env``: ``NVFP4_GEMV_BACKEND``,
and ``NVFP4_GEMV_CONFIG`` in the form it parses, ``config_text``), one ncu run per distinct
pick (``profile_groups``; several runs keep one report each, ``report_paths``). Each kernel's
line then names its config and says whether the server's own profile shows the same kernel on
a GPU the tables do not name (``server_default``: what the submission launches there under
``POPCORN_NCU``). ``--as-server`` profiles without the picks, as the server's profile runs here.
A submission without that surface (``PICK_SURFACE``) is profiled as the server runs it, with a
line saying why.

The configurations: a kernel's name may carry them (template arguments, or a name built from
them); where the submission defines ``profile_configs()`` -- returning {kernel name: its
configuration, one line} for the kernels its latest call launched -- the harness records that
after each profiled call, outside the NVTX range (``harness.ENV_PROFILE_CONFIGS``), and each
kernel is matched to its case's entry by name. More kernels profiled than cases means a call
launched more than the kernel it keeps (a race of backends, a check, a copy): a note says so.

What stops it, each in one line: no submission file, a file the server would refuse (upload rules
or its pre-check: profile submissions are checked), no CUDA GPU, no ``ncu`` (Nsight Compute's
command line) on the path or at ``--ncu``, and performance counters this user may not read
(``ERR_NVGPUCTRPERM``). Exit status: 0 when every case ran and every report was read, 112 when a
case or the pick step failed or the server would refuse the file, 2 for those other stops, 130
Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import harness

NCU_TABLES = ("GPU Throughput", "Pipe Utilization (% of active cycles)", "Warp State (All Cycles)")
NCU_KERNEL_LIMIT = 10  # ncu -c: kernels profiled in all
TABLE_KERNELS = 2  # kernels whose tables the server shows; the others by name only
TABLE_LINE_LIMIT = 100  # table lines the server shows at most
NCU_TIMEOUT_S = 1800.0  # `--set full` replays each kernel some 40 times; ten kernels, the cases' imports
PERMISSION_ERROR = "ERR_NVGPUCTRPERM"
PERMISSION_HELP = "https://developer.nvidia.com/ERR_NVGPUCTRPERM"
LAUNCH = re.compile(r"\s\((\d+), (\d+), (\d+)\)x\((\d+), (\d+), (\d+)\)")
PICK_TIMEOUT_S = 900.0  # the pick step: per case a first call (compiles, the race, the tuner: seconds each)
ENV_CONFIG = "NVFP4_GEMV_CONFIG"  # submission.py's: a config per backend, "cuda=lpr=8,rpt=2,...;triton=..."
# What the pick step needs of a submission (the kit's public surface): without it, no pick is handed on.
PICK_SURFACE = ("select_backend", "config_for", "BACKENDS", "backend_support")
SERVER_GPU = "NVIDIA B200"  # the GPU the competition runs on


# --------------------------------------------------------------------------- the commands

def ncu_command(ncu: str, report: str | Path) -> list[str]:
    """The server's ncu wrapper, ending in ``--``: the profiled command follows it."""
    return [ncu, "--set", "full", "--nvtx", "--nvtx-include", "custom_kernel/", "--import-source", "1",
            "-c", str(NCU_KERNEL_LIMIT), "-o", str(report), "--"]


def import_command(ncu: str, report: str | Path) -> list[str]:
    """The server's read-back of the report: the details of every kernel, as text."""
    return [ncu, "--import", str(report), "--print-details", "body"]


# --------------------------------------------------------------------------- the pick step

def config_text(cfg) -> str:
    """A config (a named tuple) as ``NVFP4_GEMV_CONFIG`` takes it: every field by name, those left
    at None out (the GPU's default), bools as true / false: ``lpr=8,rpt=2,u=4,warps=1,v=1,...``."""
    def text(value) -> str:
        return str(value).lower() if isinstance(value, bool) else str(value)
    return ",".join(f"{name}={text(value)}" for name, value in cfg._asdict().items() if value is not None)


def pin_env(backend: str, cfg) -> dict:
    """The settings that make the submission launch ``backend`` with ``cfg`` on every call: its
    ``NVFP4_GEMV_BACKEND`` and, for a backend with configs, ``NVFP4_GEMV_CONFIG``."""
    env = {harness.ENV_BACKEND: backend}
    if cfg is not None:
        env[ENV_CONFIG] = f"{backend}={config_text(cfg)}"
    return env


def server_default(sub, device, m: int, k: int, l: int, capability: tuple) -> tuple:
    """(backend, config) the submission launches under the server's profiler (``POPCORN_NCU``, none
    of its own settings) on a GPU its tables do not name: no race, no tuning, so the registry's
    first racing backend that can run on ``device`` with its default config (the first of its
    candidates for ``capability``); off a GPU, auto's choice there, the exact backend. This is
    submission.py's rule (its ``profiling()``, ``_fastest``, ``config_for``), read through its
    public surface."""
    name = None
    if device.type == "cuda":
        support = sub.backend_support(device)
        name = next((n for n, b in sub.BACKENDS.items() if getattr(b, "races", False) and support[n][0]), None)
    if name is None:
        name = next((n for n, b in sub.BACKENDS.items() if getattr(b, "exact", False)), None)
    backend = sub.BACKENDS.get(name)
    if backend is None or getattr(backend, "config", None) is None or getattr(backend, "candidates", None) is None:
        return name, None
    return name, backend.candidates(m, k, l, capability)[0]


def describe_pick(sub, data, args: dict, capability: tuple) -> dict:
    """What the submission ``sub`` kept for this case after its first call on ``data``: {"shape",
    "backend", "config" (its repr, or None), "pin" (``pin_env``), "default" ({"backend", "config"}:
    ``server_default``), "same" (whether they are one kernel), "why" (why there is no pick, or
    '')}. The backend: the one ``select_backend`` forces, else the race's for this shape
    (``harness.backend_picks``); its config: ``config_for`` (cached by the first call: no new tuning)."""
    m, k, l = args["m"], args["k"], args["l"]
    shape = f"{m}x{k}x{l}"
    entry = {"shape": shape, "backend": None, "config": None, "pin": {}, "default": None, "same": None, "why": ""}
    missing = [name for name in PICK_SURFACE if not hasattr(sub, name)]
    if missing:
        entry["why"] = (f"the submission has no {', '.join(missing)}: it names no per-shape pick, so it is profiled "
                        "as it runs under the server's profiler")
        return entry
    device = data[0].device
    chosen = str(sub.select_backend(device))
    if chosen not in sub.BACKENDS:  # auto on a GPU ("fastest"): the race's pick, cached per shape
        chosen = harness.backend_picks().get(shape, "")
    if chosen not in sub.BACKENDS:
        entry["why"] = f"the submission names no backend for {shape} after its first call"
        return entry
    cfg = sub.config_for(chosen, data, m, k, l)
    default = server_default(sub, device, m, k, l, capability)
    entry.update(backend=chosen, config=None if cfg is None else repr(cfg), pin=pin_env(chosen, cfg),
                 default={"backend": default[0], "config": None if default[1] is None else repr(default[1])},
                 same=default == (chosen, cfg))
    return entry


def pick_command(python: str, submission: Path | str, cases: Path | str, out: Path | str) -> list[str]:
    """The pick step's command line: this file run with ``--pick`` (``pick_main``)."""
    return [python, str(Path(__file__).resolve()), "--pick", str(submission), str(cases), str(out)]


def pick_env(as_server: bool) -> dict:
    """The pick step's settings beside this process's: without ``POPCORN_NCU`` the first calls race
    and tune as the benchmark's do; ``as_server`` keeps ``POPCORN_NCU=1`` (the first calls launch
    what the server's profile launches here). Never the harness's profile record."""
    return {"POPCORN_NCU": "1" if as_server else None, harness.ENV_PROFILE_CONFIGS: None, "POPCORN_FD": None}


def pick_main(argv: list[str]) -> int:
    """``ncu_profile.py --pick SUBMISSION CASES OUT``, in a process of its own: per case of the test
    file CASES the submission's first call on the case's inputs, then ``describe_pick``; writes
    {"picks": [...], "tables": [the GPU models its tables name]} to OUT. A case whose first call
    raises gets {"shape", "error"}."""
    submission, cases, out = argv
    import torch
    sub = harness.load_submission(submission)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else (0, 0)
    picks = []
    for case in harness.read_test_file(cases):
        args = case.args
        try:
            data = harness.generate_case(args)
            sub.custom_kernel(data)  # the benchmark's first call: the race, the tuner
            if device.type == "cuda":
                torch.cuda.synchronize()
            picks.append(describe_pick(sub, data, args, capability))
        except Exception as exc:  # noqa: BLE001 - the case's line says it; the profile says the rest
            picks.append({"shape": f"{args['m']}x{args['k']}x{args['l']}",
                          "error": harness.one_line(f"{type(exc).__name__}: {exc}")})
    entries = getattr(sub, "table_entries", None)
    tables = sorted({entry[1] for entry in entries()}) if callable(entries) else []
    Path(out).write_text(json.dumps({"picks": picks, "tables": tables}, indent=1) + "\n")
    return 0


def profile_groups(picks: list[dict]) -> list[tuple[dict, list[int]]]:
    """[(the settings of one ncu run, the indices of its cases)]: the cases whose picks need the
    same settings share a run, in the order of their first case; a case without a pick runs with
    none (as the server's profile runs it)."""
    groups = {}
    for i, pick in enumerate(picks):
        groups.setdefault(tuple(sorted((pick.get("pin") or {}).items())), []).append(i)
    return [(dict(key), cases) for key, cases in groups.items()]


def report_paths(out: Path, shapes: list[list[str]]) -> list[Path]:
    """Where each run's report is kept: ``out`` for one run; for several, ``out`` with the run's
    shapes before its suffix (profile-7168x16384x1.ncu-rep)."""
    if len(shapes) == 1:
        return [out]
    suffix = ".ncu-rep" if out.name.endswith(".ncu-rep") else out.suffix
    stem = out.name[:len(out.name) - len(suffix)] if suffix else out.name
    return [out.with_name(f"{stem}-{'_'.join(dict.fromkeys(group))}{suffix}") for group in shapes]


def server_clause(pick: dict | None, tables: list[str]) -> str:
    """What a kernel line adds about the server's own profile where no table names the GPU (the
    B200's case while the tables do not name it): whether the submission launches this same kernel
    there under ``POPCORN_NCU``, or which one (its default for this GPU's compute capability); ''
    without a pick."""
    if not pick or not pick.get("default"):
        return ""
    where = "where no table names the GPU" + (f" (as for the {SERVER_GPU.removeprefix('NVIDIA ')} today)"
                                              if SERVER_GPU not in tables else "")
    if pick["same"]:
        return f"; {where} the server's profile shows this kernel too: it is the submission's default"
    default = pick["default"]
    return (f"; {where} the server's profile shows another kernel: {default['backend']} "
            f"{default['config'] or '(no config)'}, the submission's default for this GPU's compute capability (no "
            "race, no tuning under POPCORN_NCU)")


# --------------------------------------------------------------------------- reading the report

def is_kernel_line(line: str) -> bool:
    """A kernel's heading in ``--print-details body`` text: indented by exactly two spaces
    (sections and tables are indented further, the process line not at all)."""
    return len(line) >= 3 and line[:2] == "  " and line[2] != " "


def server_extract(text: str) -> str:
    """What the server shows of the report: every kernel's heading line, and for the first
    ``TABLE_KERNELS`` kernels the tables named in ``NCU_TABLES`` (from their "Table Name : "
    line to the next blank line), at most ``TABLE_LINE_LIMIT`` table lines in all, with the
    server's notes where it leaves kernels or lines out."""
    out, kernels, table, lines = [], 0, False, 0
    for line in text.splitlines():
        if is_kernel_line(line):
            if kernels:
                out.append("")
            kernels += 1
            if kernels == TABLE_KERNELS + 1:
                out += ["", "Additional kernel launches follow. Please check the .ncu-rep file for more details.", ""]
            out.append(line)
        if kernels > TABLE_KERNELS:
            continue
        if "Table Name : " in line:
            table = line.split("Table Name :", 1)[1].strip() in NCU_TABLES
            if table:
                out.append("")
        if not line.strip():
            table = False
        if table:
            out.append(line)
            lines += 1
            if lines > TABLE_LINE_LIMIT:
                out += ["", "[...]", "Report has been truncated. Please check the .ncu-rep file for more details."]
                break
    return "\n".join(out) + ("\n" if out else "")


def kernel_signature(line: str) -> tuple[str, str]:
    """(the kernel as named, its launch "grid x block") of a kernel heading line: the name
    without a leading ``void`` and without the launch and context that follow it."""
    text = line.strip()
    hits = list(LAUNCH.finditer(text))
    if not hits:
        return text.removeprefix("void ").split(", Context ", 1)[0], ""
    last = hits[-1]
    grid = f"({last[1]}, {last[2]}, {last[3]})x({last[4]}, {last[5]}, {last[6]})"
    return text[:last.start()].strip().removeprefix("void "), grid


def base_name(signature: str) -> str:
    """The function's name alone: before its template arguments or its parameter list."""
    return re.split(r"[<(]", signature, maxsplit=1)[0].strip()


def template_arguments(signature: str) -> str:
    """The template arguments a demangled name carries ("<64, 128, 256>"), or ''."""
    name = signature.split("(", 1)[0]
    return name[name.index("<"):] if "<" in name else ""


def read_configs(path: Path) -> list[dict]:
    """The harness's per-case records (``harness.ENV_PROFILE_CONFIGS``), in case order."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def kernel_rows(text: str, records: list[dict]) -> list[dict]:
    """One row per kernel profiled, in order: its name, launch, the case it belongs to and its
    configuration. A kernel is matched to the first case, from the previous kernel's on, whose
    recorded ``profile_configs()`` names it (full signature or bare name) and has not yet been
    matched to a kernel of that name (one launch of each named kernel per call: a Triton kernel
    that every case launches under one name goes to each case in turn); unmatched, its template
    arguments serve where it has them."""
    rows, at, used = [], 0, set()
    for line in text.splitlines():
        if not is_kernel_line(line):
            continue
        signature, grid = kernel_signature(line)
        name = base_name(signature)
        row = {"kernel": signature, "name": name, "launch": grid, "case": None, "shape": None, "config": None}
        for j in range(at, len(records)):
            configs = records[j].get("configs") or {}
            key = signature if signature in configs else name
            if key in configs and (j, key) not in used:
                at = j
                used.add((j, key))
                row["case"] = harness.spec_line(records[j]["case"])
                row["shape"] = "x".join(str(records[j]["case"].get(x)) for x in ("m", "k", "l"))
                row["config"] = configs[key]
                break
        if row["config"] is None and template_arguments(signature):
            row["config"] = f"template arguments {template_arguments(signature)} (from the kernel's name)"
        rows.append(row)
    return rows


def format_rows(rows: list[dict], cases: int, picks: dict | None = None, tables: list[str] = ()) -> list[str]:
    """The kernel list printed after the extract, with a note when more kernels than calls ran;
    ``picks`` ({"MxKxL": the pick step's entry}) add to a case's kernel what the server's own
    profile shows on a GPU the tables do not name (``server_clause``)."""
    lines = [f"kernels profiled: {len(rows)} for {cases} call(s) (ncu -c {NCU_KERNEL_LIMIT})"]
    for i, row in enumerate(rows, 1):
        where = f"; case {row['case']}" if row["case"] else ""
        config = row["config"] or ("not named: the name carries no configuration and the submission's "
                                   "profile_configs() does not name this kernel")
        clause = server_clause((picks or {}).get(row.get("shape")), list(tables)) if row["case"] else ""
        lines.append(f"  {i}. {row['name']} {row['launch']}{where}: {config}{clause}")
    if len(rows) > cases:
        lines.append(f"note: {len(rows)} kernels for {cases} call(s): a call launched more than the kernel it keeps "
                     "(a race of backends, a check, a copy), and those took the profiler's places")
    return lines


def permission_problem(text: str) -> str:
    """One line when ncu's output says this user may not read the performance counters, else ''."""
    if PERMISSION_ERROR not in text:
        return ""
    return (f"error: ncu may not read this GPU's performance counters here ({PERMISSION_ERROR}): run it with the "
            "rights the driver asks for, or have the driver loaded with NVreg_RestrictProfilingToAdminUsers=0 "
            f"({PERMISSION_HELP}); in a container that is the host's setting")


# --------------------------------------------------------------------------- the run

def _cuda_device() -> str:
    """The CUDA GPU's name, or '' without one (at once, without importing torch, on a machine
    without a CUDA driver: harness.cuda_device_name)."""
    return harness.cuda_device_name()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python3 eval.py profile",
        description="Profile a submission with Nsight Compute as the server does: its ncu command around eval.py's "
                    "profile mode (POPCORN_NCU=1), the same three tables of the report, and the .ncu-rep kept.")
    p.add_argument("file", nargs="?", metavar="SUBMISSION", help="the submission file (or --submission)")
    p.add_argument("--submission", help="the submission file (default: submission.py)")
    p.add_argument("--shapes", default="benchmarks", metavar="|".join(harness.SHAPE_SETS) + "|FILE",
                   help="the cases profiled, one call each (default %(default)s: what the server profiles)")
    p.add_argument("--out", default="profile.ncu-rep", metavar="PATH",
                   help="where the report is kept (default %(default)s; an existing file is replaced)")
    p.add_argument("--ncu", default="ncu", metavar="PATH", help="Nsight Compute's command line (default: ncu on PATH)")
    p.add_argument("--timeout", type=float, default=NCU_TIMEOUT_S, metavar="SECONDS",
                   help="seconds each profiled run may take (default %(default)g)")
    p.add_argument("--as-server", action="store_true",
                   help="profile what the server's profile launches here (POPCORN_NCU alone: the table's config or "
                        "the default), not the benchmark's picks")
    return p


def _usage(args) -> tuple[Path | None, list, str]:
    """(the submission, the cases, '') or (None, [], the one-line usage problem)."""
    if args.file and args.submission and args.file != args.submission:
        return None, [], f"two submissions given ({args.file} and --submission {args.submission}); give one"
    submission = Path(args.file or args.submission or "submission.py")
    problem = harness.submission_problem(submission) or harness.writable_file_problem(args.out, "--out",
                                                                                       "profile.ncu-rep")
    if not problem and not args.timeout > 0:
        problem = f"--timeout must be a positive number of seconds, got {args.timeout:g}"
    if problem:
        return None, [], problem
    try:
        cases = harness.shape_cases(args.shapes, "profile")
    except (OSError, ValueError) as exc:
        return None, [], str(exc)
    return submission, cases, ""


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    submission, cases, problem = _usage(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return harness.EXIT_USAGE
    refusals = [f"error: {submission}: {p}" for p in harness.static_problems(submission)]
    found = harness.precheck_file(submission)
    if found.rejected:
        refusals.append(f"error: {submission}: the server's pre-check refuses it for profile mode too: "
                        f"{found.summary()}")
    if refusals:
        print("\n".join(refusals), file=sys.stderr)
        return harness.EXIT_FAIL
    device = _cuda_device()
    if not device:
        print("error: profiling needs a CUDA GPU: ncu profiles the kernels the submission launches", file=sys.stderr)
        return harness.EXIT_USAGE
    ncu = shutil.which(args.ncu)
    if ncu is None:
        print(f"error: {args.ncu}: Nsight Compute's command line is not found (install Nsight Compute, e.g. the CUDA "
              "toolkit's nsight-compute package, or give its path with --ncu)", file=sys.stderr)
        return harness.EXIT_USAGE
    try:
        return _profile(args, submission, cases, ncu, device)
    except KeyboardInterrupt:
        print("error: interrupted (Ctrl-C); no report", file=sys.stderr)
        return harness.EXIT_INTERRUPTED


def _profile(args, submission: Path, cases: list, ncu: str, device: str) -> int:
    with tempfile.TemporaryDirectory(prefix="nvfp4_ncu_") as tmp:
        work = Path(tmp)
        for name in (*harness.SERVER_FILES, *harness.KIT_SUPPORT_FILES):
            shutil.copy(harness.HERE / name, work / name)
        shutil.copy(submission, work / "submission.py")
        (work / "pick-cases.txt").write_text(harness.test_file_text([c.args for c in cases]))
        found = _pick(args, work, len(cases))
        if found is None:
            return harness.EXIT_FAIL
        picks, tables = found
        failed = 0
        for pick, case in zip(picks, cases, strict=True):
            if pick.get("error"):
                failed += 1
                print(f"FAIL {harness.spec_line(case.args)}: the pick step's first call raised {pick['error']}")
            elif pick.get("why"):
                print(f"note: {pick['shape']}: {pick['why']}", file=sys.stderr)
        groups = [({}, list(range(len(cases))))] if args.as_server else profile_groups(picks)
        outs = report_paths(Path(args.out), [[picks[i]["shape"] for i in idx] for _, idx in groups])
        by_shape = {pick["shape"]: pick for pick in picks if pick.get("default")}
        for (pin, idx), out in zip(groups, outs, strict=True):
            code = _profile_run(args, work, [cases[i] for i in idx], pin, out, ncu, device, submission,
                                by_shape, tables)
            if code == harness.EXIT_USAGE:
                return code
            failed += code != harness.EXIT_OK
    return harness.EXIT_OK if not failed else harness.EXIT_FAIL


def _pick(args, work: Path, count: int) -> tuple[list, list] | None:
    """The pick step (``pick_main``) in its own process: ([one entry per case], [the tables' GPU
    models]), or None when it did not finish (said in one line, with its last lines)."""
    out = work / "picks.json"
    what = "the server's profile launches here" if args.as_server else "the benchmark runs"
    print(f"[profile] first calls as {what}, in a process of their own ({count} case(s))", file=sys.stderr,
          flush=True)
    env = dict(os.environ)
    for key, value in pick_env(args.as_server).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    try:
        run = subprocess.run(pick_command(sys.executable, work / "submission.py", work / "pick-cases.txt", out),
                             cwd=work, env=env, capture_output=True, text=True, timeout=PICK_TIMEOUT_S)
        said, code = run.stdout + run.stderr, run.returncode
    except subprocess.TimeoutExpired as exc:
        said, code = f"{exc.stdout or ''}{exc.stderr or ''}", f"stopped after {PICK_TIMEOUT_S:g} s"
    try:
        found = json.loads(out.read_text())
        picks, tables = found["picks"], found["tables"]
        if len(picks) != count:
            raise ValueError(f"{len(picks)} picks for {count} cases")
    except (OSError, ValueError, KeyError, TypeError):
        tail = "\n".join(str(said).strip().splitlines()[-8:])
        print(f"error: the pick step (each case's first call, in a process of its own) ended without its picks "
              f"(exit {code}); its last lines:\n{tail}", file=sys.stderr)
        return None
    return picks, tables


def _profile_run(args, work: Path, cases: list, pin: dict, out: Path, ncu: str, device: str, submission: Path,
                 picks: dict, tables: list) -> int:
    """One ncu run over ``cases`` with the settings ``pin``: the extract and the kernel list printed,
    the report kept at ``out``; EXIT_OK, EXIT_FAIL (a case failed, no report) or EXIT_USAGE (counters
    not permitted)."""
    name = ", ".join(dict.fromkeys(f"{c.args['m']}x{c.args['k']}x{c.args['l']}" for c in cases))
    (work / "cases.txt").write_text(harness.test_file_text([c.args for c in cases]))  # this run's cases
    folder = Path(tempfile.mkdtemp(prefix="run-", dir=work))
    report, configs = folder / "profile.ncu-rep", folder / "configs.jsonl"
    env = {"POPCORN_NCU": "1", "POPCORN_SEED": None, harness.ENV_PROFILE_CONFIGS: str(configs), **pin}
    settings = " ".join(f"{k}={v}" for k, v in pin.items())
    what = f"the benchmark's pick ({settings})" if pin else "as the server's profile runs it"
    print(f"[profile] {submission} on {device}, {name}, {what}: "
          f"{' '.join(ncu_command(Path(ncu).name, 'profile.ncu-rep'))} python eval.py profile ({len(cases)} case(s); "
          "ncu replays each kernel many times: minutes)", file=sys.stderr, flush=True)
    run = harness.run_protocol(work, "profile", "cases.txt", env=env, timeout=args.timeout,
                               prefix=ncu_command(ncu, report))
    said = run.stdout + run.stderr
    problem = permission_problem(said)
    if problem:
        print(problem, file=sys.stderr)
        return harness.EXIT_USAGE
    results = harness.results_from_popcorn(run.lines, "profile")
    failed = [r for r in results if not r.ok] or ([] if results else [None])
    for r in failed:
        print(f"FAIL {r.spec}: {r.error}" if r else f"FAIL: eval.py logged no case (exit {run.returncode})")
    if not report.is_file():
        tail = "\n".join(said.strip().splitlines()[-8:])
        print(f"error: ncu wrote no report (exit {run.returncode}); its last lines:\n{tail}", file=sys.stderr)
        return harness.EXIT_FAIL
    read = subprocess.run(import_command(ncu, report), capture_output=True, text=True, timeout=600)
    if read.returncode != 0:
        print(f"error: ncu could not read the report back (exit {read.returncode}): "
              f"{harness.one_line(read.stderr)[:500]}", file=sys.stderr)
        return harness.EXIT_FAIL
    print(f"profile: {device}, {submission}, {name}, {what}; ncu's report as the server shows it:")
    print(server_extract(read.stdout))
    print("\n".join(format_rows(kernel_rows(read.stdout, read_configs(configs)), len(cases), picks, tables)))
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(report), str(out))
    print(f"report kept: {out} (ncu-ui {out}, or ncu --import {out} --page details)")
    return harness.EXIT_OK if not failed and run.returncode == 0 else harness.EXIT_FAIL


if __name__ == "__main__":
    sys.exit(pick_main(sys.argv[2:]) if sys.argv[1:2] == ["--pick"] else main())
