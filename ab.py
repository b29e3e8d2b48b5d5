"""``python3 eval.py ab BASE NEW [NEW ...]``: is NEW faster than BASE, on this GPU, by how much,
and how sure is that?

Every file is first checked as eval.py checks a submission: the server's upload rules
(``harness.static_problems``; a missing ``#!POPCORN`` header line is noted, not failed: popcorn-cli
reads those lines, the server's harness does not), the server's pre-check where KernelGuard is
installed (``harness.kernelguard_precheck``: a file it would reject fails; without it, a note) and
test mode on the official test shapes
(``--check-shapes``), each file in its own long-lived worker process (``harness.JudgedWorker``: the
judge sealed before the file is imported; a file that patches the timers, the checker or the
harness fails, naming the patch, and is not timed). A file
that fails gets one line and is not timed. Without CUDA the run stops there: one line says
timing needs a CUDA GPU, exit 2. Each file runs as it is: the kit's own submission.py whose copies
differ from kernels/ gets one ``warning:`` line naming the side that changed
(``bundle.warn_if_out_of_sync``), and the record and the table name each file's kernel revision
(its ``kernel_revision()``, or none) and ``bundle`` state (``bundle.kit_state``).

Then each file's worker is warmed as eval.py warms one (``harness.warm_up``) and the rounds run.
In a round every shape is timed once per file through eval.py's own timed loop
(``harness.run_benchmark_case``: synchronize, clear the L2, event, ``custom_kernel``, event,
synchronize; in leaderboard mode, the default and the scored one, a fresh input before every
call, checked after it), capped at ``--repeats`` calls; the files take turns in an order that
alternates from round to round (A B, B A, A B, ...: a drift in the GPU's state falls on both
sides alike). While a round runs, NVML (``libnvidia-ml.so.1`` through ctypes; no package
needed) is read every ``NVML_PERIOD_S``: SM and memory clocks, power, temperature, throttle
reasons. A round in which the GPU throttled for any reason but idling or an application-clock
setting is reported and left out of the statistics.

Statistics (pure functions below, tested on synthetic timings): per shape, each side's mean of
all its timed calls (the server's statistic) and per round the ratio of the two sides' round
means (paired: what changes from round to round cancels within a round). The rounds are shared
out among ``--workers`` worker sets, each file in a fresh process per set (started, warmed and
first timed in an order that alternates from set to set), because two processes of one file can differ steadily (the
kit's per-process race and tuning, memory placement, the order the processes started in: on an
H100 an A/A run in one worker set gave offsets up to 0.40% with per-round noise of 0.3-0.5%).
The ratio NEW / BASE is exp of the mean over the worker sets of their mean per-round log ratio,
with a 95% Student t-interval over the worker sets (N - 1 degrees of freedom; with one worker set,
over the rounds, which leaves the process-to-process part out). The geomean ratio (the ratio of
the leaderboard scores) is treated the same way on each round's mean log ratio over the shapes.
Verdict: faster when the whole interval lies below 1, slower when above, else "no difference this
run could detect", with the smallest difference it could have detected (the interval's
half-width) -- always for the GPU it ran on.

After the table, a ``warning:`` line names each file and shape whose mean or median lies below
the shape's bytes at the GPU's peak memory bandwidth (``harness.impossible_time``: with the L2
cleared before every call, no output computed from that call's inputs comes sooner), or says
that the GPU has no peak on record.

Exit status: 0 when every file passed and was timed; 112 when one failed its checks or failed
during timing (the others are still compared); 2 for bad arguments or without CUDA; 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import math
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import harness

MODES = ("leaderboard", "benchmark")
LEVEL = 0.95  # the intervals' confidence level
# Rounds and calls per file, shape and round by default: 20 x 50 = 1000 timed calls per file and
# shape, the count the server's leaderboard loop stops at (harness.LEADERBOARD_CASE). Not yet tuned
# by a measurement: benchmarks/ab_calibration.py gives the spread per round to choose by.
DEFAULT_ROUNDS = 20
# Worker sets per run: on an H100 (2026-11-25) an A/A run of one worker per file (80 rounds) gave
# steady offsets of -0.09% / +0.40% / +0.18% on the three benchmark shapes whatever the order, with
# per-round log-ratio sd 0.3-0.5%: the process, not the round, is the unit that varies, so the
# interval is taken over fresh worker sets (Student t with N - 1 degrees of freedom). With the
# sd of the sets' means measured then (0.33% / 0.32% / 1.23%), 10 sets give half-widths of
# about 0.24% / 0.23% / 0.88% in about 90 s of a two-file run (9 s a set: two processes' start,
# race and warm-up, two rounds); 5 sets gave 0.4-1.5%.
DEFAULT_WORKERS = 10
DEFAULT_REPEATS = 50
MIN_REPEATS = 3  # harness.should_stop never stops before three calls
NVML_PERIOD_S = 0.05  # how often NVML is read while a round runs
NVML_LIBRARY = "libnvidia-ml.so.1"
# Throttle-reason bits of NVML (nvml.h, nvmlClocksThrottleReason*): the names reported.
THROTTLE_REASONS = {
    0x1: "GpuIdle", 0x2: "ApplicationsClocksSetting", 0x4: "SwPowerCap", 0x8: "HwSlowdown",
    0x10: "SyncBoost", 0x20: "SwThermalSlowdown", 0x40: "HwThermalSlowdown", 0x80: "HwPowerBrakeSlowdown",
    0x100: "DisplayClockSetting",
}
# Reasons that do not void a round: an idle GPU between calls, clocks set by the application clocks.
BENIGN_REASONS = 0x1 | 0x2
NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0


# =========================================================================== statistics

def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 1e-15
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    out = d
    for m in range(1, 500):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            out *= c * d
        if abs(c * d - 1.0) < eps:
            break
    return out


def incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function, 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: int) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` >= 1 degrees of freedom (bisection)."""
    if not 0.0 < p < 1.0 or df < 1:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df >= 1, got p={p}, df={df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def log_interval(logs: list[float], level: float = LEVEL) -> dict:
    """Paired statistic of per-round log ratios: ``ratio`` = exp(mean), its ``level`` Student
    t-interval ``low``/``high`` (None with fewer than two rounds), ``half_width_pct`` (the
    interval's half-width as a percentage of the ratio), ``n`` and ``sd_log``."""
    n = len(logs)
    if n == 0:
        return {"n": 0, "ratio": None, "low": None, "high": None, "half_width_pct": None, "sd_log": None}
    mean = sum(logs) / n
    if n < 2:
        return {"n": 1, "ratio": math.exp(mean), "low": None, "high": None, "half_width_pct": None, "sd_log": None}
    sd = statistics.stdev(logs)
    half = t_quantile(0.5 + level / 2.0, n - 1) * sd / math.sqrt(n)
    return {"n": n, "ratio": math.exp(mean), "low": math.exp(mean - half), "high": math.exp(mean + half),
            "half_width_pct": 100.0 * (math.exp(half) - 1.0), "sd_log": sd}


def paired_ratio(base: list[float], new: list[float], level: float = LEVEL) -> dict:
    """``log_interval`` of log(new[r] / base[r]) over the rounds r (per-round means)."""
    if len(base) != len(new):
        raise ValueError(f"paired_ratio needs one base and one new value per round, got {len(base)} and {len(new)}")
    return log_interval([math.log(n / b) for b, n in zip(base, new, strict=True)], level)


def grouped_interval(logs: list[float], groups: list[int], level: float = LEVEL) -> dict:
    """``log_interval`` over the groups' means of ``logs`` (one group per worker set) when there
    are two groups or more, else over the logs themselves; ``groups`` names the unit."""
    sets = sorted(set(groups))
    if len(sets) < 2:
        return {**log_interval(logs, level), "unit": "round"}
    means = [statistics.fmean([x for x, g in zip(logs, groups, strict=True) if g == k]) for k in sets]
    return {**log_interval(means, level), "unit": "worker set", "rounds": len(logs)}


def verdict(iv: dict, gpu: str, level: float = LEVEL) -> tuple[str, str]:
    """(faster|slower|same|unknown, a sentence) for an interval of NEW / BASE on ``gpu``."""
    pct = round(100 * level)
    where = f"on this GPU ({gpu})"
    if iv.get("low") is None:
        return "unknown", f"too few rounds ({iv.get('n', 0)}) for an interval {where}"
    ratio, low, high = iv["ratio"], iv["low"], iv["high"]
    if high < 1.0:
        return "faster", (f"faster by {100 * (1 - ratio):.2f}% {where} ({pct}% interval: "
                          f"{100 * (1 - high):.2f}% to {100 * (1 - low):.2f}% faster)")
    if low > 1.0:
        return "slower", (f"slower by {100 * (ratio - 1):.2f}% {where} ({pct}% interval: "
                          f"{100 * (low - 1):.2f}% to {100 * (high - 1):.2f}% slower)")
    return "same", (f"no difference this run could detect {where}: {pct}% interval {100 * (low - 1):+.2f}% to "
                    f"{100 * (high - 1):+.2f}%; the smallest difference it could detect is about "
                    f"{iv['half_width_pct']:.2f}% (the interval's half-width)")


def short_verdict(iv: dict) -> str:
    """The verdict in a table cell."""
    kind, _ = verdict(iv, "")
    if kind == "faster":
        return f"faster {100 * (1 - iv['ratio']):.2f}%"
    if kind == "slower":
        return f"slower {100 * (iv['ratio'] - 1):.2f}%"
    if kind == "same":
        return f"no difference (±{iv['half_width_pct']:.2f}%)"
    return "too few rounds"


def summarize_samples(samples: list[dict]) -> dict:
    """NVML samples of one round -> SM and memory clock ranges (MHz), peak power (W) and
    temperature (C), the throttle reasons seen (names), and whether any of them voids the round."""
    if not samples:
        return {"samples": 0, "throttled": False, "reasons": [], "reasons_mask": 0}

    def span(key):
        values = [s[key] for s in samples if s.get(key) is not None]
        return [min(values), max(values)] if values else None

    def peak(key):
        values = [s[key] for s in samples if s.get(key) is not None]
        return max(values) if values else None

    mask = 0
    for s in samples:
        mask |= int(s.get("reasons") or 0)
    return {"samples": len(samples), "sm_mhz": span("sm_mhz"), "mem_mhz": span("mem_mhz"),
            "power_w_max": peak("power_w"), "temp_c_max": peak("temp_c"), "reasons_mask": mask,
            "reasons": reason_names(mask), "throttled": bool(mask & ~BENIGN_REASONS)}


def reason_names(mask: int) -> list[str]:
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    rest = mask & ~sum(THROTTLE_REASONS)
    return names + ([f"0x{rest:x}"] if rest else [])


def shape_key(args: dict) -> str:
    return f"{args['m']}x{args['k']}x{args['l']}"


def analyze(record: dict) -> list[dict]:
    """The comparisons of a run record (``record["rounds"]``: per round ``excluded`` and
    ``times[label][shape]`` = durations in ns; ``record["pairs"]``: [base label, new label];
    ``record["shapes"]``, ``record["gpu"]["name"]``): per pair, per shape each side's mean (µs)
    over the kept rounds, the paired ratio and its verdict, and the same for the geomean."""
    gpu = record.get("gpu", {}).get("name", "unknown GPU")
    shapes = record["shapes"]
    kept = [r for r in record["rounds"] if not r.get("excluded")]
    out = []
    for base, new in record["pairs"]:
        rows, per_round_logs = [], {}
        sets = {r["index"]: r.get("worker_set", 0) for r in kept}
        for shape in shapes:
            pooled = {base: [], new: []}
            logs, rounds_used = [], []
            for r in kept:
                tb, tn = r["times"].get(base, {}).get(shape), r["times"].get(new, {}).get(shape)
                if not tb or not tn:
                    continue
                pooled[base] += tb
                pooled[new] += tn
                logs.append(math.log((sum(tn) / len(tn)) / (sum(tb) / len(tb))))
                rounds_used.append(r["index"])
                per_round_logs.setdefault(r["index"], {})[shape] = logs[-1]
            iv = grouped_interval(logs, [sets[i] for i in rounds_used])
            kind, sentence = verdict(iv, gpu)
            rows.append({"shape": shape, "base_mean_us": _mean_us(pooled[base]), "new_mean_us": _mean_us(pooled[new]),
                         "base_calls": len(pooled[base]), "new_calls": len(pooled[new]), "rounds": rounds_used,
                         **iv, "verdict": kind, "sentence": sentence})
        complete = [(i, logs) for i, logs in sorted(per_round_logs.items()) if len(logs) == len(shapes)]
        geo = grouped_interval([sum(logs.values()) / len(logs) for _, logs in complete], [sets[i] for i, _ in complete])
        kind, sentence = verdict(geo, gpu)
        geo.update(verdict=kind, sentence=sentence,
                   base_geomean_us=harness.geomean(r["base_mean_us"] for r in rows),
                   new_geomean_us=harness.geomean(r["new_mean_us"] for r in rows))
        out.append({"base": base, "new": new, "shapes": rows, "geomean": geo})
    return out


def _mean_us(durations: list[float]) -> float | None:
    return sum(durations) / len(durations) / 1e3 if durations else None


def round_order(count: int, index: int) -> list[int]:
    """The order the files take in round ``index``: forward in even rounds, reversed in odd
    ones (two files: A B, B A, A B, ...)."""
    order = list(range(count))
    return order if index % 2 == 0 else order[::-1]


# =========================================================================== NVML (ctypes)

class Nvml:
    """The GPU's clocks, power, temperature and throttle reasons from NVML's C library, read
    through ctypes (no Python package needed). ``Nvml.open()`` returns (Nvml or None, why not)."""

    def __init__(self, lib, handle):
        self._lib, self._handle = lib, handle

    @classmethod
    def open(cls, uuid: str | None = None, index: int = 0, library: str = NVML_LIBRARY):
        try:
            lib = ctypes.CDLL(library)
        except OSError as exc:
            return None, f"NVML not available ({exc})"
        try:
            if lib.nvmlInit_v2() != 0:
                return None, "nvmlInit failed"
            handle = ctypes.c_void_p()
            if uuid:
                found = lib.nvmlDeviceGetHandleByUUID(ctypes.c_char_p(uuid.encode()), ctypes.byref(handle))
            else:
                found = 1
            if found != 0 and lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(handle)) != 0:
                return None, "NVML found no GPU"
        except AttributeError as exc:
            return None, f"NVML lacks a function ({exc})"
        return cls(lib, handle), ""

    def _uint(self, fn, *args) -> int | None:
        value = ctypes.c_uint()
        try:
            ok = getattr(self._lib, fn)(self._handle, *args, ctypes.byref(value)) == 0
        except AttributeError:
            return None
        return value.value if ok else None

    def sample(self) -> dict:
        reasons = ctypes.c_ulonglong()
        try:
            got = self._lib.nvmlDeviceGetCurrentClocksThrottleReasons(self._handle, ctypes.byref(reasons)) == 0
        except AttributeError:
            got = False
        power = self._uint("nvmlDeviceGetPowerUsage")
        return {"t": time.monotonic(), "sm_mhz": self._uint("nvmlDeviceGetClockInfo", ctypes.c_uint(NVML_CLOCK_SM)),
                "mem_mhz": self._uint("nvmlDeviceGetClockInfo", ctypes.c_uint(NVML_CLOCK_MEM)),
                "power_w": None if power is None else power / 1000.0,
                "temp_c": self._uint("nvmlDeviceGetTemperature", ctypes.c_uint(NVML_TEMPERATURE_GPU)),
                "reasons": reasons.value if got else 0}

    def driver(self) -> str | None:
        buf = ctypes.create_string_buffer(96)
        try:
            return buf.value.decode() if self._lib.nvmlSystemGetDriverVersion(buf, ctypes.c_uint(96)) == 0 else None
        except AttributeError:
            return None


class RoundMonitor:
    """Reads ``sample()`` every ``period`` seconds in a thread between ``start()`` and ``stop()``;
    ``stop()`` returns ``summarize_samples`` of what it read."""

    def __init__(self, sample, period: float = NVML_PERIOD_S):
        self._sample, self._period = sample, period
        self._samples, self._halt, self._thread = [], threading.Event(), None

    def start(self) -> None:
        self._samples, self._halt = [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                self._samples.append(self._sample())
            except Exception:  # a failed read leaves a gap, not a crash
                pass
            if self._halt.wait(self._period):
                return

    def stop(self) -> dict:
        self._halt.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        return summarize_samples(self._samples)


# =========================================================================== files

def sha256_of(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def git_revision(path: Path) -> str | None:
    """The last commit that touched ``path`` (12 hex digits), "-dirty" when the file differs
    from it; "untracked" for a file in a checkout that git does not track; None outside git."""
    folder = str(Path(path).resolve().parent)
    name = Path(path).resolve().name
    try:
        log = subprocess.run(["git", "-C", folder, "log", "-1", "--format=%h", "--abbrev=12", "--", name],
                             capture_output=True, text=True, timeout=30)
        if log.returncode != 0:
            return None
        if not log.stdout.strip():
            return "untracked"
        status = subprocess.run(["git", "-C", folder, "status", "--porcelain", "--", name],
                                capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return log.stdout.strip() + ("-dirty" if status.stdout.strip() else "")


def check_file(worker: harness.Worker, path: Path, cases: list) -> tuple[str, str]:
    """('' or why the file fails, in one line; the backend it picks) -- the upload rules, the
    server's pre-check where KernelGuard is installed (``harness.kernelguard_precheck``; a file it
    would reject fails), the backend it can run here, then test mode on ``cases`` in its worker."""
    fails = harness.static_problems(path)
    if fails:
        return fails[0], ""
    found = harness.precheck_file(path)
    if found.rejected:
        return f"the server's pre-check would refuse it: {found.summary()}", ""
    status, backend = harness.backend_status(worker)
    if status in ("invalid setting", "cannot run", "broken"):
        return {"invalid setting": "the submission rejects its settings: ", "cannot run": "the submission cannot run "
                "here: ", "broken": ""}[status] + backend, ""
    results = harness.run_test_mode(lambda key, value: None, worker, cases)
    for res in results:
        if not res.ok:
            return f"{res.spec}: {harness.labelled(harness.one_line(res.error))}", backend
    return "", backend


# =========================================================================== report

def _fmt(value, spec=".3f") -> str:
    return "-" if value is None else format(value, spec)


def _interval(row: dict) -> str:
    return "-" if row.get("low") is None else f"[{row['low']:.4f}, {row['high']:.4f}]"


def _over(row: dict) -> str:
    """What the interval is over: "5 sets" or "16 rounds"."""
    return f"{row['n']} sets" if row.get("unit") == "worker set" else f"{row['n']} rounds"


def format_report(record: dict) -> str:
    """The table of a run record (what ``main`` prints; modal_app.py prints it for remote runs)."""
    gpu = record.get("gpu", {})
    rounds = record.get("rounds", [])
    kept = sum(1 for r in rounds if not r.get("excluded"))
    settings = record.get("settings", {})
    lines = [f"ab on {gpu.get('name', '?')} (compute capability {gpu.get('capability', '?')}), "
             f"{settings.get('mode', '?')} mode: {kept} of {len(rounds)} rounds kept, up to "
             f"{settings.get('repeats', '?')} calls per file, shape and round"]
    for f in record.get("files", []):
        state = "PASS" if f.get("passed") else f"FAIL: {f.get('error', '')}"
        lines.append(f"  {f['label']:<8} {f['path']}  sha256 {f['sha256'][:12]}  git {f.get('git') or '-'}  "
                     f"backend {f.get('backend') or '-'}  kernel {f.get('kernel_revision') or 'none'}  "
                     f"bundle: {f.get('bundle') or '-'}  {state}")
        for note in f.get("notes", []):
            lines.append(f"           note: {note}")
    for r in rounds:
        if r.get("excluded"):
            lines.append(f"  round {r['index'] + 1} left out: {r.get('excluded')}")
    sets = settings.get("workers", 1)
    method = (f"{round(100 * LEVEL)}% Student t-interval over {sets} worker sets" if sets and sets > 1 else
              f"{round(100 * LEVEL)}% Student t-interval on the per-round log ratios")
    for cmp in record.get("comparisons", []):
        base, new = cmp["base"], cmp["new"]
        lines += ["", f"{new} vs {base} (ratio {new} / {base}; {method}):",
                  f"  {'shape':<14} {base + ' µs':>12} {new + ' µs':>12} {'ratio':>8} {'interval':>18} "
                  f"{'over':>9}  verdict"]
        for row in cmp["shapes"]:
            lines.append(f"  {row['shape']:<14} {_fmt(row['base_mean_us']):>12} {_fmt(row['new_mean_us']):>12} "
                         f"{_fmt(row['ratio'], '.4f'):>8} {_interval(row):>18} {_over(row):>9}  {short_verdict(row)}")
        geo = cmp["geomean"]
        lines.append(f"  {'geomean':<14} {_fmt(geo['base_geomean_us']):>12} {_fmt(geo['new_geomean_us']):>12} "
                     f"{_fmt(geo['ratio'], '.4f'):>8} {_interval(geo):>18} {_over(geo):>9}  {short_verdict(geo)}")
        lines.append(f"verdict: {new} is {geo['sentence']}" if geo["verdict"] in ("faster", "slower")
                     else f"verdict: {new} vs {base}: {geo['sentence']}")
    for line in record.get("failures", []):
        lines.append(f"FAIL: {line}")
    for line in record.get("impossible_times", []):
        lines.append(f"warning: {line}")
    return "\n".join(lines)


# =========================================================================== the run

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python3 eval.py ab",
        description="Paired A/B timing: each NEW against BASE under the server's timed loop, rounds in "
                    "alternating order, with a 95% interval on the ratio NEW / BASE and a verdict for this GPU.")
    p.add_argument("files", nargs="+", metavar="FILE", help="BASE NEW [NEW ...] (submission files)")
    p.add_argument("--shapes", default="benchmarks", metavar="|".join(harness.SHAPE_SETS) + "|FILE",
                   help="the timed shapes (default %(default)s)")
    p.add_argument("--check-shapes", default="tests", metavar="|".join(harness.SHAPE_SETS) + "|FILE",
                   help="the correctness checks' shapes (default %(default)s: the official test cases)")
    p.add_argument("--mode", default="leaderboard", choices=MODES,
                   help="leaderboard: a fresh, checked input for every timed call (the scored mode; "
                        "default); benchmark: one input per shape and round")
    p.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help="rounds (default %(default)s)")
    p.add_argument("--repeats", type=int, default=DEFAULT_REPEATS,
                   help="timed calls per file, shape and round, at most (default %(default)s); the server's "
                        "stopping rule may end a loop sooner")
    p.add_argument("--workers", type=int, default=DEFAULT_WORKERS, metavar="N",
                   help="fresh worker processes per file N times in the run, the rounds shared out among them "
                        "(default %(default)s): two processes of one file can differ by a steady few tenths of a "
                        "percent (the kit's per-process race and tuning, memory placement), which only fresh "
                        "processes show; the interval is over the worker sets when N >= 2")
    p.add_argument("--time-budget", type=float, metavar="SECONDS",
                   help="start no round after this many seconds of rounds (at least two run)")
    p.add_argument("--json", metavar="PATH", help="write everything (GPU, clocks per round, versions, files, "
                                                  "raw times) as JSON")
    p.add_argument("--timeout", type=float, default=harness.CASE_TIMEOUT_S, metavar="SECONDS",
                   help="seconds one call into a worker may run (default %(default)g)")
    p.add_argument("--new-first", action="store_true",
                   help="the first file is NEW and every later one a BASE it is compared with")
    return p


def _usage_problem(args) -> str:
    if len(args.files) < 2:
        return "ab needs at least two files: BASE NEW [NEW ...]"
    for path in args.files:
        problem = harness.submission_problem(Path(path))
        if problem:
            return problem
    if args.rounds < 2:
        return f"--rounds must be at least 2 (an interval needs two rounds), got {args.rounds}"
    if args.workers < 1:
        return f"--workers must be at least 1, got {args.workers}"
    args.workers = min(args.workers, args.rounds)  # a worker set runs one round at least
    if args.repeats < MIN_REPEATS:
        return f"--repeats must be at least {MIN_REPEATS}, got {args.repeats}"
    if args.time_budget is not None and not args.time_budget > 0:
        return f"--time-budget must be a positive number of seconds, got {args.time_budget:g}"
    if not args.timeout > 0:
        return f"--timeout must be a positive number of seconds, got {args.timeout:g}"
    return harness.writable_file_problem(args.json, "--json", "ab.json")


def labels_for(count: int, new_first: bool) -> tuple[list[str], list[list[str]]]:
    """(a label per file, the [base, new] pairs compared)."""
    if new_first:
        labels = ["NEW"] + (["BASE"] if count == 2 else [f"BASE{i}" for i in range(1, count)])
        return labels, [[b, "NEW"] for b in labels[1:]]
    labels = ["BASE"] + (["NEW"] if count == 2 else [f"NEW{i}" for i in range(1, count)])
    return labels, [["BASE", n] for n in labels[1:]]


def _versions() -> dict:
    out = {"python": platform.python_version()}
    for name in ("torch", "triton"):
        try:
            module = __import__(name)
            out[name] = getattr(module, "__version__", "?")
        except ImportError:
            out[name] = "not installed"
    try:
        import torch
        out["cuda"] = torch.version.cuda
    except ImportError:
        pass
    return out


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    problem = _usage_problem(args)
    cases = {}
    if not problem:
        try:
            cases = {"timed": harness.shape_cases(args.shapes, "benchmark"),
                     "check": harness.shape_cases(args.check_shapes, "test")}
        except (OSError, ValueError) as exc:
            problem = str(exc)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return harness.EXIT_USAGE
    import bundle  # the standard library and harness only
    states = [s.state for s in bundle.warn_if_out_of_sync(*args.files)]  # each file runs as it is
    try:
        return _run(args, cases, states)
    except KeyboardInterrupt:
        print("error: interrupted (Ctrl-C); no result", file=sys.stderr)
        return harness.EXIT_INTERRUPTED


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _run(args, cases: dict, states: list | None = None) -> int:
    labels, pairs = labels_for(len(args.files), args.new_first)
    leaderboard = args.mode == "leaderboard"
    files = []
    guard_missing = not harness.kernelguard_precheck("").installed
    if guard_missing:
        _progress("[ab] the server's pre-check is not run: " + harness.Precheck(installed=False).summary())
    states = states or [None] * len(args.files)
    for label, path, sync in zip(labels, args.files, states, strict=True):
        notes = harness.header_warnings(Path(path))
        if guard_missing:
            notes.append("the server's pre-check was not run: " + harness.Precheck(installed=False).summary())
        files.append({"label": label, "path": path, "sha256": sha256_of(Path(path)), "git": git_revision(Path(path)),
                      "kernel_revision": None, "bundle": sync, "notes": notes, "passed": False, "error": "",
                      "backend": ""})
    workers = _new_workers(files, args)  # set 1 starts in file order
    try:
        return _checked_and_timed(args, cases, files, workers, pairs, leaderboard)
    except BaseException:
        for w in workers.values():
            w.kill()
        raise
    finally:
        for w in workers.values():
            w.close()


def _new_workers(files: list[dict], args) -> dict:
    """{label: a fresh harness.JudgedWorker (its own process, the judge sealed before the file is
    imported: a patch of the timers or the checker is refused, not timed) for that file}."""
    return {f["label"]: harness.JudgedWorker(f["path"], "official", harness.env_flag(harness.ENV_CHECK_INPUTS, True),
                                        lambda s: _progress(f"    ... still running ({s:.0f} s)"),
                                        timeout=args.timeout, ignore_interrupt=True) for f in files}


def _cuda_available() -> bool:
    return harness.cuda_available()  # without importing torch where no CUDA driver is (about 2 s)


def gpu_info() -> tuple[dict, Nvml | None]:
    """({name, capability, uuid, driver, nvml}, the NVML reader or None) of CUDA device 0."""
    import torch
    props = torch.cuda.get_device_properties(0)
    uuid = getattr(props, "uuid", None)
    nvml, why = Nvml.open(f"GPU-{uuid}" if uuid else None)
    gpu = {"name": torch.cuda.get_device_name(0), "capability": "%d.%d" % torch.cuda.get_device_capability(0),
           "uuid": str(uuid) if uuid else None, "driver": nvml.driver() if nvml else None,
           "nvml": "ctypes " + NVML_LIBRARY if nvml else why}
    return gpu, nvml


def _checked_and_timed(args, cases, files, workers, pairs, leaderboard) -> int:
    _progress(f"[ab] checking {len(files)} files on {len(cases['check'])} shapes ({args.check_shapes})")
    for f in files:
        f["error"], f["backend"] = check_file(workers[f["label"]], Path(f["path"]), cases["check"])
        revision = harness.safe_call(workers[f["label"]], harness.submission_kernel_revision)
        f["kernel_revision"] = revision if isinstance(revision, str) else None
        f["passed"] = not f["error"]
        print(f"{f['label']} {f['path']}: " + ("PASS" if f["passed"] else f"FAIL {f['error']}"), flush=True)
    if not _cuda_available():
        print("error: timing needs a CUDA GPU (CUDA events and the L2 clear); the correctness checks above ran "
              "without one", file=sys.stderr)
        return harness.EXIT_USAGE
    ok = {f["label"] for f in files if f["passed"]}
    pairs = [p for p in pairs if p[0] in ok and p[1] in ok]
    gpu, nvml = gpu_info()
    shapes = [shape_key(c.args) for c in cases["timed"]]
    record = {"tool": "python3 eval.py ab", "date": time.strftime("%Y-%m-%d %H:%M:%S"), "gpu": gpu,
              "versions": _versions(), "settings": {"mode": args.mode, "rounds": args.rounds, "repeats": args.repeats,
                                                    "time_budget_s": args.time_budget, "level": LEVEL,
                                                    "shapes": args.shapes, "check_shapes": args.check_shapes,
                                                    "workers": args.workers,
                                                    "method": "Student t-interval over the worker sets' means of "
                                                              "per-round log ratios (over the rounds with one "
                                                              "worker set)"},
              "files": files, "shapes": shapes, "pairs": pairs, "rounds": [], "failures": []}
    record["failures"] = [f"{f['label']} {f['path']}: {f['error']}" for f in files if not f["passed"]]
    if not pairs:
        print("error: nothing to time: a comparison needs BASE and a NEW that both passed", file=sys.stderr)
        _write(args.json, record)
        return harness.EXIT_FAIL
    timed = [f for f in files if f["label"] in {x for p in pairs for x in p}]
    per_case = (harness.LEADERBOARD_CASE if leaderboard else harness.BENCH_CASE)[1]
    monitor = RoundMonitor(nvml.sample) if nvml else None
    t0 = time.monotonic()
    # Worker set w runs rounds starts[w] .. starts[w + 1] - 1, each file in a fresh process.
    starts = [round(w * args.rounds / args.workers) for w in range(args.workers + 1)]
    for index in range(args.rounds):
        if args.time_budget is not None and index >= 2 and time.monotonic() - t0 > args.time_budget:
            _progress(f"[ab] time budget of {args.time_budget:g} s spent after {index} rounds")
            break
        worker_set = max(w for w in range(args.workers) if starts[w] <= index)
        if index == starts[worker_set]:
            # Each set starts its processes, warms them and runs its first round in an order that
            # alternates from set to set: with every set warming BASE first (and so starting BASE's
            # process first: a worker's process is spawned by its first call, and until 2026-11-25
            # the warm-up, in file order, was that call), a 24-set A/A run on an H100 read the
            # second file slower by 0.45% and 0.62% on two shapes, and with the labels swapped
            # (--new-first) the second file was still the slower one (benchmarks/RESULTS.md,
            # "eval.py ab calibration", item 5; 15 sets all started BASE first: NEW +0.20-0.56%).
            # In this order (and with the processes started here, below) the 24-set A/A of kit
            # f0455a2 held 1.0 on every shape (item 8).
            set_order = [timed[i] for i in round_order(len(timed), worker_set)]
            if worker_set:
                _progress(f"[ab] worker set {worker_set + 1}/{args.workers}: a fresh process per file")
                for w in workers.values():
                    w.close()
                workers.clear()
                workers.update(_new_workers(set_order, args))
                for w in workers.values():
                    w.start()
            for f in set_order:
                _progress(f"[ab] warming {f['label']} ({args.mode} warm-up)")
                harness.warm_up(workers[f["label"]], cases["timed"], leaderboard)
        alive = [f for f in timed if f["passed"]]
        order = [alive[i] for i in round_order(len(alive), index - starts[worker_set] + worker_set)]
        entry = {"index": index, "worker_set": worker_set, "order": [f["label"] for f in order],
                 "times": {f["label"]: {} for f in order}}
        if index == starts[worker_set]:
            entry["warm_order"] = [f["label"] for f in set_order]
        r0 = time.monotonic()
        if monitor:
            monitor.start()
        for case, shape in zip(cases["timed"], shapes, strict=True):
            for f in order:
                if not f["passed"]:
                    continue
                out = harness.safe_call(workers[f["label"]], harness.run_benchmark_case, case.args, leaderboard,
                                        args.repeats, per_case)
                if isinstance(out, list):
                    entry["times"][f["label"]][shape] = out
                else:
                    why = harness.labelled(harness.one_line(str(out)))
                    f["passed"], f["error"] = False, f"during round {index + 1}, {case.spec}: {why}"
                    record["failures"].append(f"{f['label']} {f['path']}: {f['error']}")
                    print(f"{f['label']} {f['path']}: FAIL {f['error']}", flush=True)
        entry["telemetry"] = monitor.stop() if monitor else None
        entry["seconds"] = round(time.monotonic() - r0, 3)
        tel = entry["telemetry"] or {}
        if tel.get("throttled"):
            entry["excluded"] = "throttled (" + ", ".join(tel["reasons"]) + ")"
        record["rounds"].append(entry)
        _progress(f"[round {index + 1}/{args.rounds}] {' '.join(entry['order'])}, {entry['seconds']:.1f} s"
                  + (f", SM {tel['sm_mhz'][0]}-{tel['sm_mhz'][1]} MHz" if tel.get("sm_mhz") else "")
                  + (f", {tel['power_w_max']:.0f} W" if tel.get("power_w_max") is not None else "")
                  + (f", {tel['temp_c_max']} C" if tel.get("temp_c_max") is not None else "")
                  + (f"; left out: {entry['excluded']}" if entry.get("excluded") else ""))
    record["seconds_total"] = round(time.monotonic() - t0, 1)  # the rounds, the later worker sets' start
    record["impossible_times"] = impossible_times(record, timed, cases["timed"])
    record["pairs"] = [p for p in pairs if all(f["passed"] for f in files if f["label"] in p)]
    record["comparisons"] = analyze(record)
    print(format_report(record), flush=True)
    _write(args.json, record)
    return harness.EXIT_OK if all(f["passed"] for f in files) else harness.EXIT_FAIL


def impossible_times(record: dict, files: list[dict], cases: list) -> list[str]:
    """One line per file and shape whose mean or median over the kept rounds lies below the
    shape's bytes at the GPU's peak bandwidth (``harness.impossible_time``: the timed loop
    clears the L2 before each call), or one line saying the GPU has no peak on record."""
    gpu = record.get("gpu", {}).get("name", "")
    note = harness.unknown_peak_note(gpu)
    if note:
        return [note]
    kept = [r for r in record["rounds"] if not r.get("excluded")]
    out = []
    for f in files:
        for case in cases:
            shape = shape_key(case.args)
            durations = [d for r in kept for d in r["times"].get(f["label"], {}).get(shape, [])]
            if durations:
                line = harness.impossible_time(case.args["m"], case.args["k"], case.args["l"], gpu,
                                               statistics.fmean(durations) / 1e3, statistics.median(durations) / 1e3)
                if line:
                    out.append(f"{f['label']} {f['path']}: {line}")
    return out


def _write(path: str | None, record: dict) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(record, indent=1) + "\n")
        _progress(f"wrote JSON: {path}")


if __name__ == "__main__":
    sys.exit(main())
