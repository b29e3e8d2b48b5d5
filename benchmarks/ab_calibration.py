"""How far to trust ``python3 eval.py ab`` on this GPU: three checks in one run (needs CUDA).

    python3 benchmarks/ab_calibration.py --out benchmarks/results/ab-calibration   # needs CUDA

(a) A/A: the submission against a copy of itself, ``--aa-blocks`` x ``--aa-rounds`` rounds in one
    ``eval.py ab`` run, cut into ``--aa-blocks`` disjoint blocks of ``--aa-rounds`` rounds, each
    block one A/A experiment: how often its 95% interval holds 1.0 (per shape and for the
    geomean), with that share's binomial standard error and Wilson 95% interval.
(b) A known slowdown: two copies of the submission whose ``custom_kernel`` also runs
    ``torch.cuda._sleep(cycles)`` after the kernel, BASE with ``--sleep-base`` cycles, NEW with
    enough more to add ``--slow-ns`` nanoseconds (both carry the extra launch, so the difference
    is the extra spin alone). Cycles per nanosecond are measured here with CUDA events around a
    long ``_sleep`` before and after the run; the added time is reported as measured. Then: was
    it detected, with the right sign, and how the estimated difference compares with the known.
(c) From the A/A run: the smallest difference detectable (the 95% interval's half-width) within
    ``--budget`` seconds per benchmark shape, from the per-round spread and the seconds a round
    took.

Writes calibration.json (everything, with both ab records) and calibration.md under ``--out``.
Its defaults are sized to fit about 8 minutes on an H100 (an estimate, not yet a measurement:
the A/A run's 80 rounds and the slowdown run's 16, each also stopping at its ``--time-budget``,
plus two workers' start, checks and warm-up per run).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import ab  # noqa: E402

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
    """The kept rounds of an ab record cut into consecutive blocks of ``size`` rounds (a last
    partial block dropped), each a record of its own for ``ab.analyze``."""
    kept = [r for r in record["rounds"] if not r.get("excluded")]
    return [{**record, "rounds": kept[i:i + size]} for i in range(0, len(kept) - size + 1, size)]


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
    """Per shape and geomean: the 95% half-width (percent) after as many rounds as fit in
    ``budget_s`` seconds per shape, from the run's per-round log-ratio spread and round time."""
    kept = [r for r in record["rounds"] if not r.get("excluded")]
    if len(kept) < 2:
        return {}
    per_round_s = sum(r["seconds"] for r in kept) / len(kept)
    rounds = max(2, int(budget_s * len(record["shapes"]) / per_round_s))
    (cmp,) = ab.analyze(record)
    out = {"seconds_per_round": per_round_s, "rounds_in_budget": rounds}
    for row in [*cmp["shapes"], {**cmp["geomean"], "shape": "geomean"}]:
        if row.get("sd_log") is None:
            continue
        half = ab.t_quantile(0.975, rounds - 1) * row["sd_log"] / math.sqrt(rounds)
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


def run_ab(files: list[Path], json_path: Path, args, rounds: int, budget_s: float) -> dict:
    cmd = [sys.executable, "eval.py", "ab", *map(str, files), "--shapes", args.shapes, "--rounds", str(rounds),
           "--repeats", str(args.repeats), "--time-budget", str(budget_s), "--json", str(json_path)]
    print("+ " + " ".join(cmd[1:]), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, cwd=ROOT)
    if proc.returncode != 0 or not json_path.is_file():
        raise SystemExit(f"error: {' '.join(cmd[1:])} exited {proc.returncode}")
    return json.loads(json_path.read_text())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for calibration.json and calibration.md")
    p.add_argument("--submission", default=str(ROOT / "submission.py"))
    p.add_argument("--shapes", default="benchmarks")
    p.add_argument("--repeats", type=int, default=20, help="ab's calls per file, shape and round (default %(default)s)")
    p.add_argument("--aa-blocks", type=int, default=20, help="A/A experiments (default %(default)s)")
    p.add_argument("--aa-rounds", type=int, default=4, help="rounds per A/A experiment (default %(default)s)")
    p.add_argument("--aa-budget", type=float, default=200.0, help="A/A run's --time-budget (s)")
    p.add_argument("--slow-ns", type=float, default=300.0, help="the known slowdown (ns, default %(default)g)")
    p.add_argument("--sleep-base", type=int, default=100, help="cycles BASE spins (default %(default)s)")
    p.add_argument("--slow-rounds", type=int, default=16, help="rounds of the slowdown run (default %(default)s)")
    p.add_argument("--slow-budget", type=float, default=90.0, help="slowdown run's --time-budget (s)")
    p.add_argument("--budget", type=float, default=120.0, help="seconds per shape for (c) (default %(default)g)")
    args = p.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("error: the calibration needs a CUDA GPU (it runs eval.py ab)", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = out / "files"
    work.mkdir(exist_ok=True)
    source = Path(args.submission).read_text()
    t0 = time.monotonic()

    copy = work / "submission_copy.py"
    shutil.copy(args.submission, copy)
    aa = run_ab([Path(args.submission), copy], out / "aa.json", args, args.aa_blocks * args.aa_rounds, args.aa_budget)
    cov = coverage(aa, args.aa_rounds)
    det = detectable(aa, args.budget)

    rate_before = sleep_ns_per_cycle()
    extra = max(1, round(args.slow_ns / rate_before))
    base_file, new_file = work / "sleep_base.py", work / "sleep_more.py"
    base_file.write_text(with_sleep(source, args.sleep_base))
    new_file.write_text(with_sleep(source, args.sleep_base + extra))
    slow = run_ab([base_file, new_file], out / "slow.json", args, args.slow_rounds, args.slow_budget)
    rate_after = sleep_ns_per_cycle()
    known_ns = [extra * rate_before, extra * rate_after]
    (cmp,) = slow["comparisons"]
    slow_rows = []
    for row in cmp["shapes"]:
        est = None if row["ratio"] is None else (row["ratio"] - 1) * row["base_mean_us"] * 1e3
        slow_rows.append({"shape": row["shape"], "detected": row["verdict"] == "slower",
                          "verdict": row["verdict"], "estimated_ns": est, "ratio": row["ratio"],
                          "low": row["low"], "high": row["high"], "base_mean_us": row["base_mean_us"]})
    report = {"gpu": aa["gpu"], "versions": aa["versions"], "seconds": round(time.monotonic() - t0, 1),
              "settings": vars(args), "aa": {"coverage": cov, "record": aa},
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
             f"## (a) A/A: {s['aa_blocks']} blocks of {s['aa_rounds']} rounds, interval holds 1.0", "",
             "| shape | blocks | hold 1.0 | share | binomial s.e. | Wilson 95% |", "|---|---|---|---|---|---|"]
    for shape, c in r["aa"]["coverage"].items():
        lines.append(f"| {shape} | {c['blocks']} | {c['hold_1']} | {c['share']:.3f} | {c['se']:.3f} | "
                     f"{c['wilson95'][0]:.3f}-{c['wilson95'][1]:.3f} |")
    sl = r["slowdown"]
    lines += ["", f"## (b) known slowdown: +{sl['extra_cycles']} spin cycles = {sl['known_ns'][0]:.0f} ns "
              f"(before the run) / {sl['known_ns'][1]:.0f} ns (after)", "",
              "| shape | verdict | ratio | 95% interval | estimated ns |", "|---|---|---|---|---|"]
    for row in sl["rows"]:
        iv = "-" if row["low"] is None else f"{row['low']:.4f}-{row['high']:.4f}"
        est = "-" if row["estimated_ns"] is None else f"{row['estimated_ns']:.0f}"
        lines.append(f"| {row['shape']} | {row['verdict']} | {row['ratio']:.4f} | {iv} | {est} |")
    d = r["detectable"]
    if d:
        lines += ["", f"## (c) smallest detectable difference in {s['budget']:g} s per shape "
                  f"({d['rounds_in_budget']} rounds of {d['seconds_per_round']:.2f} s)", "",
                  "| shape | sd of per-round log ratio | 95% half-width |", "|---|---|---|"]
        for shape, v in d.items():
            if isinstance(v, dict):
                lines.append(f"| {shape} | {v['sd_log']:.4f} | {v['half_width_pct']:.2f}% |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
