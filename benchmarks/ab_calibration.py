"""How far to trust ``python3 eval.py ab`` on this GPU: three checks in one run (needs CUDA).

    python3 benchmarks/ab_calibration.py --out benchmarks/results/ab-calibration   # needs CUDA

(a) A/A: the submission against a copy of itself in one ``eval.py ab`` run of ``--aa-sets``
    worker sets (each file in a fresh process per set) of ``--aa-rounds`` rounds each, cut into
    experiments of ``--aa-sets-per-experiment`` consecutive worker sets, each analysed as ab
    analyses a run: how often its 95% interval holds 1.0 (per shape and for the geomean), with
    that share's binomial standard error and Wilson 95% interval; and the spread split into its
    process-to-process and round-to-round parts.
(b) A known slowdown: two copies of the submission whose ``custom_kernel`` also runs
    ``torch.cuda._sleep(cycles)`` after the kernel, BASE with ``--sleep-base`` cycles, NEW with
    ``--slow-ns`` nanoseconds more (both carry the extra launch, so the difference is the extra
    spin alone). The difference is measured twice in this process: by CUDA events around the
    spin alone, and inside the harness's timed region (L2 clear, events around custom_kernel and
    the spin), the two wrappers alternating call by call; then ab runs the two files in worker
    sets: was it detected, with the right sign, and how its estimate compares with the known.
(c) From the A/A run: the smallest difference detectable (the 95% interval's half-width) within
    ``--budget`` seconds per benchmark shape, from the spread of the worker sets' means and the
    time a worker set took.

Writes calibration.json (everything, with both ab records) and calibration.md under ``--out``. The
kit's own submission.py whose copies differ from kernels/ is refused in one line before anything
runs (``bundle.refuse_if_out_of_sync``).
Its defaults are sized to fit about 8 minutes on an H100 (each worker set costs two processes'
start, the kit's first-call race and a warm-up).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

if not __package__:  # run as `python3 benchmarks/NAME.py`: kitpath puts the kit's root on sys.path
    import kitpath  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent

import ab  # noqa: E402
import harness  # noqa: E402
from benchmarks import refusals  # noqa: E402

# The wrapper appended to a copy of the submission: custom_kernel, then a spin of CYCLES clock cycles.
SLEEP_WRAPPER = """

import torch as _calibration_torch

_calibration_inner = custom_kernel


def custom_kernel(data):
    out = _calibration_inner(data)
    _calibration_torch.cuda._sleep({cycles})
    return out
"""


def with_sleep(source: str, cycles: int) -> str:
    """The submission's source with custom_kernel followed by ``torch.cuda._sleep(cycles)``."""
    return source.rstrip("\n") + "\n" + SLEEP_WRAPPER.format(cycles=int(cycles))


def blocks(record: dict, size: int) -> list[dict]:
    """The kept rounds of an ab record cut into experiments of ``size`` consecutive worker sets
    (a last partial experiment dropped), each a record of its own for ``ab.analyze``."""
    kept = [r for r in record["rounds"] if not r.get("excluded")]
    sets = sorted({r.get("worker_set", 0) for r in kept})
    groups = [sets[i:i + size] for i in range(0, len(sets) - size + 1, size)]
    return [{**record, "rounds": [r for r in kept if r.get("worker_set", 0) in group]} for group in groups]


def spread(record: dict) -> dict:
    """Per shape: the sd of the per-round log ratios within a worker set (pooled) and the sd of the
    worker sets' means: how much of the spread comes with the process."""
    kept = [r for r in record["rounds"] if not r.get("excluded")]
    (base, new), = record["pairs"][:1] or [(None, None)]
    out = {}
    for shape in record["shapes"]:
        by_set = {}
        for r in kept:
            tb, tn = r["times"].get(base, {}).get(shape), r["times"].get(new, {}).get(shape)
            if tb and tn:
                by_set.setdefault(r.get("worker_set", 0), []).append(math.log((sum(tn) / len(tn)) /
                                                                              (sum(tb) / len(tb))))
        within = [x - sum(v) / len(v) for v in by_set.values() if len(v) > 1 for x in v]
        dof = sum(len(v) - 1 for v in by_set.values() if len(v) > 1)
        means = [sum(v) / len(v) for v in by_set.values()]
        out[shape] = {"sets": len(means),
                      "sd_within_set": math.sqrt(sum(x * x for x in within) / dof) if dof else None,
                      "sd_of_set_means": statistics.stdev(means) if len(means) > 1 else None}
    return out


def wilson(hits: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score 95% interval of a binomial share."""
    if n == 0:
        return (0.0, 1.0)
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def coverage(record: dict, size: int) -> dict:
    """Per shape and for the geomean: how many A/A blocks' intervals hold 1.0."""
    out = {}
    for block in blocks(record, size):
        (cmp,) = ab.analyze(block)
        for row in [*cmp["shapes"], {**cmp["geomean"], "shape": "geomean"}]:
            if row.get("low") is None:
                continue
            hit = out.setdefault(row["shape"], {"blocks": 0, "hold_1": 0})
            hit["blocks"] += 1
            hit["hold_1"] += row["low"] <= 1.0 <= row["high"]
    for hit in out.values():
        p = hit["hold_1"] / hit["blocks"]
        hit.update(share=p, se=math.sqrt(p * (1 - p) / hit["blocks"]), wilson95=wilson(hit["hold_1"], hit["blocks"]))
    return out


def detectable(record: dict, budget_s: float) -> dict:
    """Per shape and geomean: the 95% half-width (percent) after as many worker sets as fit in
    ``budget_s`` seconds per shape, from the spread of the run's worker-set means and the time a
    worker set took (its rounds, its processes' start and warm-up)."""
    kept = [r for r in record["rounds"] if not r.get("excluded")]
    sets = sorted({r.get("worker_set", 0) for r in kept})
    if len(sets) < 2:
        return {}
    per_set_s = (record.get("seconds_total") or sum(r["seconds"] for r in kept)) / len(sets)
    count = max(2, int(budget_s * len(record["shapes"]) / per_set_s))
    (cmp,) = ab.analyze(record)
    out = {"seconds_per_set": per_set_s, "sets_in_budget": count}
    for row in [*cmp["shapes"], {**cmp["geomean"], "shape": "geomean"}]:
        if row.get("sd_log") is None:
            continue
        half = ab.t_quantile(0.975, count - 1) * row["sd_log"] / math.sqrt(count)
        out[row["shape"]] = {"sd_log": row["sd_log"], "half_width_pct": 100 * (math.exp(half) - 1)}
    return out


def sleep_ns_per_cycle(cycles: int = 2_000_000, reps: int = 5) -> float:
    """Nanoseconds per ``torch.cuda._sleep`` cycle: the median of ``reps`` event-timed spins."""
    import torch
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e6 / cycles)
    return sorted(times)[len(times) // 2]


def repo_path(path) -> str:
    """``path`` as this script hands it to eval.py ab (run from the repository root) and as the log and
    the records name it: relative to the repository root when inside it (no folder of the machine that
    ran it), else absolute."""
    p = Path(path).resolve()
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)


def run_ab(files: list[Path], json_path: Path, args, sets: int, rounds_per_set: int, budget_s: float) -> dict:
    cmd = [sys.executable, "eval.py", "ab", *map(repo_path, files), "--shapes", args.shapes,
           "--rounds", str(sets * rounds_per_set), "--workers", str(sets), "--repeats", str(args.repeats),
           "--time-budget", str(budget_s), "--json", repo_path(json_path)]
    print("+ " + " ".join(cmd[1:]), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, cwd=ROOT)
    if proc.returncode != 0 or not json_path.is_file():
        raise SystemExit(f"error: {' '.join(cmd[1:])} exited {proc.returncode}")
    return json.loads(json_path.read_text())


def harness_delta_ns(submission: Path, shapes: str, base_cycles: int, new_cycles: int, calls: int = 200) -> dict:
    """Per shape: the mean extra time (ns) the harness's timed region shows for the NEW wrapper
    over the BASE one, in this process, the two alternating call by call (L2 clear, events
    around custom_kernel and the spin, as eval.py times it), with the standard error."""
    import torch

    from utils import clear_l2_cache
    kernel = harness.load_submission(submission, keep=False).custom_kernel
    out = {}
    for case in harness.shape_set(shapes):
        data = harness.generate_case({k: case[k] for k in harness.CASE_KEYS})
        kernel(data)  # the first call: compile, race
        diffs = []
        for i in range(2 * calls):
            cycles = new_cycles if i % 2 else base_cycles
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            clear_l2_cache()
            start.record()
            kernel(data)
            torch.cuda._sleep(cycles)
            end.record()
            torch.cuda.synchronize()
            ns = start.elapsed_time(end) * 1e6
            diffs.append(ns if i % 2 else -ns)
        pairs = [diffs[2 * j] + diffs[2 * j + 1] for j in range(calls)]
        mean = sum(pairs) / calls
        out[f"{case['m']}x{case['k']}x{case['l']}"] = {
            "mean_ns": mean, "se_ns": statistics.stdev(pairs) / math.sqrt(calls), "calls": calls}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="How far to trust ``python3 eval.py ab`` on this GPU (needs CUDA).")
    p.add_argument("--out", required=True, help="folder for calibration.json and calibration.md")
    p.add_argument("--submission", default=None, help="the file calibrated (default: the kit's submission.py)")
    p.add_argument("--shapes", default="benchmarks", choices=harness.SHAPE_SETS,
                   help="shapes.json set timed (default %(default)s)")
    p.add_argument("--repeats", type=int, default=20, help="ab's calls per file, shape and round (default %(default)s)")
    p.add_argument("--aa-sets", type=int, default=24, help="worker sets of the A/A run (default %(default)s)")
    p.add_argument("--aa-rounds", type=int, default=2, help="rounds per worker set (default %(default)s)")
    p.add_argument("--aa-sets-per-experiment", type=int, default=4,
                   help="worker sets per A/A experiment (default %(default)s)")
    p.add_argument("--aa-budget", type=float, default=240.0, help="A/A run's --time-budget (s)")
    # 1000 ns: on an H100 (2026-11-25) a 300 ns spin showed inside the harness's timed region as
    # +212 / -120 / +242 (+-40) ns on the three shapes, not additive; on 7168x2048x4 spins of 2000
    # and 10000 cycles added 0.59 and 4.61 us over one of 680 (0.67 and 4.71 us by the clock).
    p.add_argument("--slow-ns", type=float, default=1000.0, help="the known slowdown (ns, default %(default)g)")
    p.add_argument("--sleep-base", type=int, default=100, help="cycles BASE spins (default %(default)s)")
    p.add_argument("--slow-sets", type=int, default=6, help="worker sets of the slowdown run (default %(default)s)")
    p.add_argument("--slow-budget", type=float, default=90.0, help="slowdown run's --time-budget (s)")
    p.add_argument("--budget", type=float, default=120.0, help="seconds per shape for (c) (default %(default)g)")
    args = p.parse_args(argv)
    counts = ("repeats", "aa_sets", "aa_rounds", "aa_sets_per_experiment", "sleep_base", "slow_sets")
    times = ("aa_budget", "slow_ns", "slow_budget", "budget")
    low = [f"--{n.replace('_', '-')}" for n in counts if getattr(args, n) < 1]
    low += [f"--{n.replace('_', '-')}" for n in times if getattr(args, n) <= 0]
    if low:
        p.error(f"{', '.join(low)}: counts must be at least 1, times above 0")
    if args.aa_sets_per_experiment > args.aa_sets:
        p.error(f"--aa-sets-per-experiment {args.aa_sets_per_experiment} is more than --aa-sets {args.aa_sets}: "
                "the A/A run would hold no experiment")
    submission = Path(args.submission) if args.submission else ROOT / "submission.py"
    problem = harness.submission_problem(submission)  # a .py file whose text is Python: without torch
    problem = (refusals.folder_problem(args.out, "--out") or (problem and f"--submission: {problem}")
               or refusals.source_problem(submission))
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    import bundle  # the standard library and harness only
    bundle.refuse_if_out_of_sync(submission, tool="benchmarks/ab_calibration.py")  # its record names one kernel
    if not harness.cuda_available():  # no torch imported where the machine has no CUDA driver
        print("error: the calibration needs a CUDA GPU (it runs eval.py ab)", file=sys.stderr)
        return 2
    try:  # on the GPU: it imports, and its cuda kernel (if it has the kit's) compiles, before any run
        problem = refusals.gpu_build_problem(harness.load_tool_submission(submission))
        problem = problem and f"--submission {submission}: {problem}"
    except ValueError as exc:  # it does not import: one line naming --submission
        problem = str(exc)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = out / "files"
    work.mkdir(exist_ok=True)
    args.submission = repo_path(submission)  # as the record names it
    args.out = harness.kit_path(out, output=True)
    command = harness.kit_command(["python3", "benchmarks/ab_calibration.py"], sys.argv[1:] if argv is None else argv,
                                  ("--out",))
    source = submission.read_text()
    t0 = time.monotonic()

    copy = work / "submission_copy.py"
    shutil.copy(submission, copy)
    aa = run_ab([submission, copy], out / "aa.json", args, args.aa_sets, args.aa_rounds, args.aa_budget)
    cov = coverage(aa, args.aa_sets_per_experiment)
    det = detectable(aa, args.budget)

    rate_before = sleep_ns_per_cycle()
    extra = max(1, round(args.slow_ns / rate_before))
    in_harness = harness_delta_ns(submission, args.shapes, args.sleep_base, args.sleep_base + extra)
    base_file, new_file = work / "sleep_base.py", work / "sleep_more.py"
    base_file.write_text(with_sleep(source, args.sleep_base))
    new_file.write_text(with_sleep(source, args.sleep_base + extra))
    slow = run_ab([base_file, new_file], out / "slow.json", args, args.slow_sets, 2, args.slow_budget)
    rate_after = sleep_ns_per_cycle()
    known_ns = [extra * rate_before, extra * rate_after]
    (cmp,) = slow["comparisons"]
    slow_rows = []
    for row in cmp["shapes"]:
        est = None if row["ratio"] is None else (row["ratio"] - 1) * row["base_mean_us"] * 1e3
        slow_rows.append({"shape": row["shape"], "detected": row["verdict"] == "slower",
                          "verdict": row["verdict"], "estimated_ns": est, "ratio": row["ratio"],
                          "low": row["low"], "high": row["high"], "base_mean_us": row["base_mean_us"],
                          "in_harness_ns": in_harness.get(row["shape"])})
    report = {"command": command, "gpu": aa["gpu"], "versions": aa["versions"],
              "seconds": round(time.monotonic() - t0, 1),
              "settings": vars(args), "aa": {"coverage": cov, "spread": spread(aa), "record": aa},
              "slowdown": {"extra_cycles": extra, "ns_per_cycle": [rate_before, rate_after], "known_ns": known_ns,
                           "rows": slow_rows, "record": slow},
              "detectable": det}
    (out / "calibration.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "calibration.md").write_text(markdown(report))
    print(markdown(report))
    return 0


def markdown(r: dict) -> str:
    s = r["settings"]
    lines = [f"# eval.py ab calibration on {r['gpu']['name']}", "",
             f"{r['versions']}; {r['seconds']} s in all; {s['repeats']} calls per file, shape and round.", "",
             f"Command (on a CUDA machine, from the repository root): `{r.get('command', '?')}`", "",
             f"## (a) A/A: {s['aa_sets']} worker sets of {s['aa_rounds']} rounds, experiments of "
             f"{s['aa_sets_per_experiment']} sets; interval holds 1.0", "",
             "| shape | experiments | hold 1.0 | share | binomial s.e. | Wilson 95% |", "|---|---|---|---|---|---|"]
    for shape, c in r["aa"]["coverage"].items():
        lines.append(f"| {shape} | {c['blocks']} | {c['hold_1']} | {c['share']:.3f} | {c['se']:.3f} | "
                     f"{c['wilson95'][0]:.3f}-{c['wilson95'][1]:.3f} |")
    lines += ["", "Spread of the per-round log ratio NEW / BASE: within a worker set, and of the worker sets' means:",
              "", "| shape | sets | sd within a set | sd of set means |", "|---|---|---|---|"]
    for shape, v in r["aa"]["spread"].items():
        within = "-" if v["sd_within_set"] is None else f"{v['sd_within_set']:.4f}"
        means = "-" if v["sd_of_set_means"] is None else f"{v['sd_of_set_means']:.4f}"
        lines.append(f"| {shape} | {v['sets']} | {within} | {means} |")
    sl = r["slowdown"]
    lines += ["", f"## (b) known slowdown: +{sl['extra_cycles']} spin cycles = {sl['known_ns'][0]:.0f} ns "
              f"(events around the spin alone, before the run) / {sl['known_ns'][1]:.0f} ns (after)", "",
              "| shape | in the harness's timed region, one process (ns) | ab verdict | ratio | 95% interval | "
              "ab's estimate (ns) |", "|---|---|---|---|---|---|"]
    for row in sl["rows"]:
        iv = "-" if row["low"] is None else f"{row['low']:.4f}-{row['high']:.4f}"
        est = "-" if row["estimated_ns"] is None else f"{row['estimated_ns']:.0f}"
        h = row.get("in_harness_ns")
        inh = "-" if not h else f"{h['mean_ns']:.0f} ± {h['se_ns']:.0f}"
        lines.append(f"| {row['shape']} | {inh} | {row['verdict']} | {row['ratio']:.4f} | {iv} | {est} |")
    d = r["detectable"]
    if d:
        lines += ["", f"## (c) smallest detectable difference in {s['budget']:g} s per shape "
                  f"({d['sets_in_budget']} worker sets of {d['seconds_per_set']:.1f} s)", "",
                  "| shape | sd of worker-set mean log ratio | 95% half-width |", "|---|---|---|"]
        for shape, v in d.items():
            if isinstance(v, dict):
                lines.append(f"| {shape} | {v['sd_log']:.4f} | {v['half_width_pct']:.2f}% |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
