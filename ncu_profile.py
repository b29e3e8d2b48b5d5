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

The configurations: a kernel's name may carry them (template arguments, or a name built from
them); where the submission defines ``profile_configs()`` -- returning {kernel name: its
configuration, one line} for the kernels its latest call launched -- the harness records that
after each profiled call, outside the NVTX range (``harness.ENV_PROFILE_CONFIGS``), and each
kernel is matched to its case's entry by name. More kernels profiled than cases means a call
launched more than the kernel it keeps (a race of backends, a check, a copy): a note says so.

What stops it, each in one line: no submission file, a file the server would refuse (upload rules
or its pre-check: profile submissions are checked), no CUDA GPU, no ``ncu`` (Nsight Compute's
command line) on the path or at ``--ncu``, and performance counters this user may not read
(``ERR_NVGPUCTRPERM``). Exit status: 0 when every case ran and the report was read, 112 when a
case failed or the server would refuse the file, 2 for those other stops, 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
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


# --------------------------------------------------------------------------- the commands

def ncu_command(ncu: str, report: str | Path) -> list[str]:
    """The server's ncu wrapper, ending in ``--``: the profiled command follows it."""
    return [ncu, "--set", "full", "--nvtx", "--nvtx-include", "custom_kernel/", "--import-source", "1",
            "-c", str(NCU_KERNEL_LIMIT), "-o", str(report), "--"]


def import_command(ncu: str, report: str | Path) -> list[str]:
    """The server's read-back of the report: the details of every kernel, as text."""
    return [ncu, "--import", str(report), "--print-details", "body"]


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
        row = {"kernel": signature, "name": name, "launch": grid, "case": None, "config": None}
        for j in range(at, len(records)):
            configs = records[j].get("configs") or {}
            key = signature if signature in configs else name
            if key in configs and (j, key) not in used:
                at = j
                used.add((j, key))
                row["case"] = harness.spec_line(records[j]["case"])
                row["config"] = configs[key]
                break
        if row["config"] is None and template_arguments(signature):
            row["config"] = f"template arguments {template_arguments(signature)} (from the kernel's name)"
        rows.append(row)
    return rows


def format_rows(rows: list[dict], cases: int) -> list[str]:
    """The kernel list printed after the extract, with a note when more kernels than calls ran."""
    lines = [f"kernels profiled: {len(rows)} for {cases} call(s) (ncu -c {NCU_KERNEL_LIMIT})"]
    for i, row in enumerate(rows, 1):
        where = f"; case {row['case']}" if row["case"] else ""
        config = row["config"] or ("not named: the name carries no configuration and the submission's "
                                   "profile_configs() does not name this kernel")
        lines.append(f"  {i}. {row['name']} {row['launch']}{where}: {config}")
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
    """The CUDA GPU's name, or '' without one."""
    import torch
    return torch.cuda.get_device_name() if torch.cuda.is_available() else ""


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
                   help="seconds the profiled run may take (default %(default)g)")
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
        (work / "cases.txt").write_text(harness.test_file_text([c.args for c in cases]))
        report, configs = work / "profile.ncu-rep", work / "configs.jsonl"
        env = {"POPCORN_NCU": "1", "POPCORN_SEED": None, harness.ENV_PROFILE_CONFIGS: str(configs)}
        print(f"[profile] {submission} on {device}: {' '.join(ncu_command(Path(ncu).name, 'profile.ncu-rep'))} "
              f"python eval.py profile ({len(cases)} case(s); ncu replays each kernel many times: minutes)",
              file=sys.stderr, flush=True)
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
        print(f"profile: {device}, {submission}, ncu's report as the server shows it:")
        print(server_extract(read.stdout))
        print("\n".join(format_rows(kernel_rows(read.stdout, read_configs(configs)), len(cases))))
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(report), str(out))
        print(f"report kept: {out} (ncu-ui {out}, or ncu --import {out} --page details)")
    return harness.EXIT_OK if not failed and run.returncode == 0 else harness.EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
