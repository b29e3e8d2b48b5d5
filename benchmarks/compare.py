"""Every nvfp4_gemv strategy side by side on the current GPU, against the bandwidth ceiling.

    python3 -m benchmarks.compare                      # the benchmark shapes of shapes.json
    python3 -m benchmarks.compare --shapes all         # ... and the official test shapes
    python3 -m benchmarks.compare --shape 512x4096x2 --reps 40 --out /tmp/cmp

Strategies: the registry ``STRATEGIES`` (a key, a label and what it runs, each; ``--help``
lists them from it): the streaming-read ceiling, the kernel backends of submission.py, the official
loop, dequantise + cuBLAS, an fp16 GEMV on pre-dequantised weights, CUDA-graph replay.

Per strategy and shape: the output of the first input set is checked against
``reference.ref_kernel`` (exact) with the official tolerances, its output buffer poisoned
with NaN first; a strategy that fails (or raises) is reported as failed and not timed. Then

* device time: ``timing.device_times`` over rotating input sets (L2 cold where the sets
  together exceed the L2; ``--sets`` and the L2 size decide how many), one event pair per
  call, median; the GPU is held by a spin while the host queues the calls, so the events
  see device work, not launch gaps.
* harness time: ``timing.harness_times``, the leaderboard's protocol (sync, 4 GiB L2 clear,
  event, call, event, sync) on the first input set: host cost included. Median.
* ratios: ceiling / time (1 = at the measured bandwidth ceiling) and triton / time (> 1 =
  faster than the triton backend), for both times; geometric means over shapes
  (``harness.geomean``: none when any shape is missing).

Progress goes to stderr; the tables go to stdout last. Files (``--out``, default
``benchmarks/results/``; names stable per device): ``compare-<device>.csv``, ``.md``,
``.png`` (bar chart, log scale, ceiling marked); a non-default shape set adds a suffix.
Fp16 matmuls run with ``torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction
= False`` (fp32 accumulation throughout), so that cuBLAS's split-K cannot fail the check.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import datetime
import json
import math
import os
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Callable

if not __package__:  # run as `python3 benchmarks/NAME.py`: kitpath puts the kit's root on sys.path
    import kitpath  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent

import torch  # noqa: E402

import harness  # noqa: E402  geomean, fmt, shape sets
import nvfp4  # noqa: E402
import quant  # noqa: E402
import reference  # noqa: E402
import submission  # noqa: E402
from benchmarks import refusals, timing  # noqa: E402
from benchmarks.timing import gemv_bytes  # noqa: E402
from utils import verbose_allclose  # noqa: E402

RESULTS_DIR = ROOT / "benchmarks" / "results"
ENV_BACKEND = "NVFP4_GEMV_BACKEND"
DEFAULT_SETS = 8
MAX_SETS = 64
DEFAULT_REPS = 40  # device-time calls per strategy and shape (median of these)
DEFAULT_HARNESS_REPS = 20
MIN_QUEUED_REPS = 20  # device-time calls of the retry when the first queue blocked the host


def log(msg: str) -> None:
    print(f"[compare] {msg}", file=sys.stderr, flush=True)


def one_line(text, limit: int = 400) -> str:
    s = harness.one_line(text)
    return s if len(s) <= limit else s[:limit - 3] + "..."


# =========================================================================== shapes

def shape_name(m: int, k: int, l: int) -> str:
    return f"{m}x{k}x{l}"


def parse_shape(text: str) -> dict:
    hit = re.fullmatch(r"\s*(\d+)x(\d+)x(\d+)\s*", text)
    if not hit:
        raise argparse.ArgumentTypeError(f"shape must look like MxKxL (e.g. 512x4096x2), got {text!r}")
    m, k, l = (int(x) for x in hit.groups())
    if m % 128 or k % 64 or l < 1:
        raise argparse.ArgumentTypeError(f"shape {text}: needs M % 128 == 0, K % 64 == 0, L >= 1")
    return {"m": m, "k": k, "l": l, "seed": 1111}


def pick_shapes(choice: str, custom: list | None = None) -> list[dict]:
    """``--shape`` values if given, else the named set of shapes.json (``harness.SHAPE_SETS``)."""
    return list(custom) if custom else harness.shape_set(choice)


def n_sets_for(nbytes: int, l2_bytes: int, minimum: int = DEFAULT_SETS, maximum: int = MAX_SETS) -> int:
    """Input sets to rotate: at least ``minimum``, enough for 3x the L2 when that fits under ``maximum``."""
    need = math.ceil(3 * l2_bytes / nbytes) if l2_bytes and nbytes else minimum
    return max(minimum, min(maximum, need))


# =========================================================================== strategies

@contextlib.contextmanager
def backend_env(name: str | None):
    """``NVFP4_GEMV_BACKEND=name`` inside the block (``custom_kernel`` reads it on every call)."""
    if name is None:
        yield
        return
    old = os.environ.get(ENV_BACKEND)
    os.environ[ENV_BACKEND] = name
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(ENV_BACKEND, None)
        else:
            os.environ[ENV_BACKEND] = old


_PAIR_LUT = {}


def pair_lut(device) -> torch.Tensor:
    """[256, 2] fp16: byte -> (value of its low nibble, value of its high nibble)."""
    device = torch.device(device)
    lut = _PAIR_LUT.get(device)
    if lut is None:
        v = torch.tensor(nvfp4.E2M1_VALUES, dtype=torch.float16)
        codes = torch.arange(256)
        lut = _PAIR_LUT[device] = torch.stack((v[codes & 15], v[codes >> 4]), dim=1).to(device)
    return lut


def dequant_fp16(q: torch.Tensor, sf: torch.Tensor) -> torch.Tensor:
    """[rows, k/2, l] e2m1 pairs and [l, rows, k/16] e4m3 scales -> [l, rows, k] fp16 (exact)."""
    rows, kh, l = q.shape
    u8 = q.view(torch.uint8).permute(2, 0, 1).reshape(-1).int()
    vals = pair_lut(q.device).index_select(0, u8).view(l, rows, kh // 8, 16)
    return (vals * sf.to(torch.float16).unsqueeze(-1)).view(l, rows, 2 * kh)


def dequant_operands(data) -> tuple[torch.Tensor, torch.Tensor]:
    """(A [l, m, k] fp16, b0 [l, k, 1] fp16) from the device-resident inputs (permuted scales)."""
    a, b, _, _, sfa_p, sfb_p, _ = data
    m, kh, l = a.shape
    k = 2 * kh
    sa = sfa_p.permute(5, 2, 1, 0, 4, 3).reshape(l, m, k // 16)
    sb = sfb_p[0, 0, 0].permute(2, 1, 0).reshape(l, 1, k // 16)  # row 0 of b's scales
    return dequant_fp16(a, sa), dequant_fp16(b[0:1], sb).transpose(1, 2)


@dataclasses.dataclass
class Strategy:
    """One way to compute the GEMV. ``prepare(sets)`` builds one state per input set (untimed);
    ``call(state)`` is the timed call and returns the output; ``data(state)`` is the input
    tuple whose ``c`` the check poisons; ``requires`` names what the device must have."""
    key: str
    label: str
    what: str
    requires: tuple = ("cuda",)
    backend: str | None = None  # NVFP4_GEMV_BACKEND while it is prepared, checked and timed
    call: Callable | None = None
    prepare: Callable = None  # default: the input sets themselves
    data: Callable = None  # default: the state is the input tuple

    def __post_init__(self):
        self.prepare = self.prepare or list
        self.data = self.data or _same


def _same(x):
    return x


def _custom_kernel(data):
    return submission.custom_kernel(data)


def _dequant_mm(data):
    a16, b16 = dequant_operands(data)
    return torch.matmul(a16, b16).permute(1, 2, 0)


def _prepare_fp16(sets):
    return [(*dequant_operands(d), d) for d in sets]


def _fp16_gemv(state):
    return torch.matmul(state[0], state[1]).permute(1, 2, 0)


def _prepare_graphs(sets):
    """One CUDA graph per input set around custom_kernel (triton backend, already compiled)."""
    states = []
    for d in sets:
        submission.custom_kernel(d)  # compile / warm outside the capture
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = submission.custom_kernel(d)
        states.append((g, out, d))
    torch.cuda.synchronize()
    return states


def _replay(state):
    state[0].replay()
    return state[1]


# ``official``: timed like the others; should it ever block the host, its device time is
# reported as missing (timing.HostBound) and the harness time stays. ``dequant_mm``: the
# permuted scales reordered on the GPU, a 256-entry fp16 pair table indexed by byte, times the
# fp16 scale: exact, since e2m1 x e4m3 has <= 6 significant bits and |value| <= 6 * 448; then
# cuBLAS with fp32 accumulation. ``fp16_gemv`` moves ~3.6x the bytes of the others.
# What each of the kit's backends needs of the device, by the requirement names below (a
# backend the registry gains later needs a CUDA GPU until it says more), and what it is.
_BACKEND_NEEDS = {"cuda": "cuda_kernel", "triton": "triton", "scaled_mm": "fp4_scaled_mm"}
_BACKEND_WHAT = {"cuda": " (hand-written kernel, NVRTC)", "scaled_mm": " (FP4 torch._scaled_mm per batch)"}


def backend_strategies() -> list:
    """One strategy per backend of submission.py's registry that auto races, in its order."""
    return [Strategy(name, f"{name} backend" if name != "scaled_mm" else "_scaled_mm backend",
                     f"submission.custom_kernel, NVFP4_GEMV_BACKEND={name}{_BACKEND_WHAT.get(name, '')}",
                     requires=("cuda", _BACKEND_NEEDS.get(name, "cuda")), backend=name, call=_custom_kernel)
            for name, b in submission.BACKENDS.items() if b.races]


STRATEGIES = [
    Strategy("ceiling", "ceiling: streaming read",
             "read of a + sfa + b row 0 + sfb row 0 + c (timing.read_ceiling kernel), the fastest launch "
             "shape x load policy (device and harness time each their own)",
             requires=("cuda", "triton")),
    *backend_strategies(),
    Strategy("official", "official loop (server's reference)",
             "reference.ref_kernel_scaled_mm: per batch to_blocked of the plain GPU scales, _scaled_mm",
             requires=("cuda", "fp4_scaled_mm"), call=reference.ref_kernel_scaled_mm),
    Strategy("dequant_mm", "dequant + fp16 cuBLAS",
             "each call: dequantise a and b row 0 to fp16, torch.matmul", call=_dequant_mm),
    Strategy("fp16_gemv", "fp16 GEMV (pre-dequantised)",
             "torch.matmul on a, b row 0 dequantised to fp16 once, untimed", call=_fp16_gemv,
             prepare=_prepare_fp16, data=lambda s: s[2]),
    Strategy("graph", "CUDA graph replay (triton)",
             "custom_kernel (triton) captured per input set into torch.cuda.CUDAGraph; timed: replay()",
             requires=("cuda", "triton"), backend="triton", call=_replay, prepare=_prepare_graphs,
             data=lambda s: s[2]),
]
KEYS = [s.key for s in STRATEGIES]
LABELS = {s.key: s.label for s in STRATEGIES}


def current_capability() -> tuple | None:
    """(major, minor) of the current CUDA device, or None without CUDA."""
    return tuple(torch.cuda.get_device_capability()) if torch.cuda.is_available() else None


def requirement_reasons(capability: tuple | None, has_triton: bool | None = None) -> dict:
    """{requirement: "" when met, else why not} for a device of this capability (None: no CUDA)."""
    has_triton = (submission.triton is not None) if has_triton is None else has_triton
    if capability is None:
        none = "needs a CUDA GPU (CUDA events, L2-cold timing); this machine has none"
        return {"cuda": none, "triton": none, "cuda_kernel": none,
                "fp4_scaled_mm": "needs a CUDA GPU of compute capability 10.x (FP4 torch._scaled_mm); "
                                 "this machine has none"}
    sm = f"sm_{capability[0]}{capability[1]}"
    out = {"cuda": "", "triton": "", "fp4_scaled_mm": "", "cuda_kernel": ""}
    if tuple(capability) < (8, 9):
        out["cuda_kernel"] = f"n/a on {sm}: the cuda kernel needs compute capability >= 8.9"
    if not has_triton:
        out["triton"] = "triton is not installed"
    elif tuple(capability) < (8, 0):
        out["triton"] = f"n/a on {sm}: the triton kernels need compute capability >= 8.0"
    if capability[0] != 10:
        out["fp4_scaled_mm"] = f"n/a on {sm}: FP4 torch._scaled_mm needs compute capability 10.x"
    return out


def registry(capability: tuple | None = ..., has_triton: bool | None = None) -> list[dict]:
    """Every strategy, in order, with ``available`` and ``reason`` for the given device
    (default: the current one; None: no CUDA)."""
    capability = current_capability() if capability is ... else capability
    reasons = requirement_reasons(capability, has_triton)
    out = []
    for s in STRATEGIES:
        why = next((reasons[r] for r in s.requires if reasons[r]), "")
        out.append({"key": s.key, "label": s.label, "what": s.what, "strategy": s,
                    "available": not why, "reason": why})
    return out


# =========================================================================== correctness gate

def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def expected_output(data) -> torch.Tensor:
    """reference.ref_kernel on the inputs, written into a clone of c (data is left alone)."""
    return reference.ref_kernel(tuple(data[:6]) + (data[6].clone(),))


def gate(strategy: Strategy, state, expected: torch.Tensor) -> tuple[bool, str]:
    """Run the strategy once on ``state`` (c poisoned with NaN first) and compare its output
    with ``expected`` at the official tolerances: (passed, one-line reason)."""
    try:
        with backend_env(strategy.backend):
            strategy.data(state)[6].fill_(float("nan"))
            out = strategy.call(state)
            _sync()
        reasons = verbose_allclose(out, expected, rtol=reference.RTOL, atol=reference.ATOL)
    except Exception as exc:  # a strategy that raises fails; the run goes on
        return False, one_line(f"{type(exc).__name__}: {exc}")
    if reasons:
        return False, one_line("wrong output: " + " ".join(reasons))
    return True, ""


# =========================================================================== timing

class CudaTimer:
    """Device and harness times (µs) with timing.py's helpers. ``measure(fn, states)`` and
    ``ceiling(nbytes, n_sets)`` return {device_us, harness_us, device_runs, harness_runs, note}."""

    def __init__(self, reps: int = DEFAULT_REPS, harness_reps: int = DEFAULT_HARNESS_REPS, warmup: int = 2):
        self.reps, self.harness_reps, self.warmup = reps, harness_reps, max(1, warmup)

    def device(self, fn: Callable, states: list) -> list[float]:
        """timing.device_times (the GPU held by a spin while the host queues every call); a
        strategy that blocks the host on the GPU (its queueing outlasts the hold) raises timing.HostBound.
        Many launches per call can also fill CUDA's launch queue (~1000 entries) and block the
        host: so a second try queues at most 20 calls."""
        tries = [self.reps] + ([MIN_QUEUED_REPS] if self.reps > MIN_QUEUED_REPS else [])
        for i, reps in enumerate(tries):
            try:
                return timing.device_times(fn, states, reps, self.warmup)
            except timing.HostBound as exc:
                if i == len(tries) - 1:
                    raise
                log(f"  device time: {one_line(exc)}; again with {tries[i + 1]} calls")

    def harness(self, fn: Callable, state) -> list[float]:
        return timing.harness_times(fn, state, self.harness_reps, warmup=2)

    def measure(self, fn: Callable, states: list) -> dict:
        note = ""
        try:
            dev = self.device(fn, states)
        except timing.HostBound as exc:
            dev, note = [], f"no device time: it blocks the host on the GPU ({one_line(exc)})"
        har = self.harness(fn, states[0])
        return {"device_us": timing.median(dev) if dev else None, "harness_us": timing.median(har),
                "device_runs": len(dev), "harness_runs": len(har), "note": note}

    def ceiling(self, nbytes: int, n_sets: int) -> dict:
        """timing.read_ceiling (device time: the fastest launch shape x load policy), then
        timing.read_ceiling_server (harness time: the fastest pair again under that protocol,
        where the L2 the clear leaves dirty changes which loads cost least). ``detail`` names
        both winners' launch and policy."""
        bufs = timing.make_read_buffers(nbytes, n_sets)
        res = timing.read_ceiling(nbytes, n_sets, self.reps, bufs=bufs)
        har = timing.read_ceiling_server(nbytes, self.harness_reps, buf=bufs[0])
        return {"device_us": res["us"], "harness_us": har["us"], "device_runs": self.reps,
                "harness_runs": self.harness_reps, "note": "",
                "detail": f"device: {timing.policy_text(res)}; harness: {timing.policy_text(har)}"}


@dataclasses.dataclass
class Row:
    """One (shape, strategy) result. status: ok | failed | n/a."""
    shape: str
    m: int
    k: int
    l: int
    strategy: str
    status: str
    reason: str = ""
    bytes: int = 0
    sets: int = 0
    device_us: float | None = None
    harness_us: float | None = None
    device_runs: int = 0
    harness_runs: int = 0
    ceiling_over_device: float | None = None
    ceiling_over_harness: float | None = None
    triton_over_device: float | None = None
    triton_over_harness: float | None = None
    note: str = ""  # e.g. why an ok row has no device time
    detail: str = ""  # the read ceiling's launch shape and load policy (device; harness)

    @property
    def device_gbps(self) -> float | None:
        return self.bytes / self.device_us / 1e3 if self.device_us else None


def measure_shape(shape: dict, entries: list[dict], timer, sets: list, n_sets: int) -> list[Row]:
    """Check then time every registry entry on one shape; never raises for a strategy.
    ``timer``: a CudaTimer (or any object with its ``measure`` and ``ceiling``)."""
    m, k, l = shape["m"], shape["k"], shape["l"]
    name, nbytes = shape_name(m, k, l), gemv_bytes(m, k, l)
    base = {"shape": name, "m": m, "k": k, "l": l, "bytes": nbytes, "sets": n_sets}
    rows = []
    expected = None
    for e in entries:
        s: Strategy = e["strategy"]
        if not e["available"]:
            rows.append(Row(**base, strategy=s.key, status="n/a", reason=e["reason"]))
            log(f"{name} {s.key}: n/a ({e['reason']})")
            continue
        t0 = time.perf_counter()
        states = None
        try:
            if s.key == "ceiling":
                res = timer.ceiling(nbytes, n_sets)
            else:
                if expected is None:
                    expected = expected_output(sets[0])
                with backend_env(s.backend):
                    states = s.prepare(sets)
                    ok, why = gate(s, states[0], expected)
                    if not ok:
                        rows.append(Row(**base, strategy=s.key, status="failed", reason=why))
                        log(f"{name} {s.key}: FAILED the check: {why}")
                        continue
                    res = timer.measure(s.call, states)
        except Exception as exc:
            why = one_line(f"{type(exc).__name__}: {exc}")
            traceback.print_exc(file=sys.stderr)
            rows.append(Row(**base, strategy=s.key, status="failed", reason=why))
            log(f"{name} {s.key}: FAILED: {why}")
            continue
        finally:
            del states
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        row = Row(**base, strategy=s.key, status="ok", device_us=res["device_us"], harness_us=res["harness_us"],
                  device_runs=res["device_runs"], harness_runs=res["harness_runs"], note=res.get("note", ""),
                  detail=res.get("detail", ""))
        rows.append(row)
        detail = f" [{res['detail']}]" if res.get("detail") else ""
        note = f"; {row.note}" if row.note else ""
        log(f"{name} {s.key}: device {harness.fmt(row.device_us, '.2f')} µs, harness {row.harness_us:.2f} µs{detail} "
            f"({time.perf_counter() - t0:.1f} s){note}")
    return derive(rows)


# =========================================================================== derived numbers

def _ratio(num, den):
    return num / den if num and den else None


def derive(rows: list[Row]) -> list[Row]:
    """Fill the ratios to the ceiling (ceiling / time) and to triton (triton / time) per shape."""
    by_shape = {}
    for r in rows:
        by_shape.setdefault(r.shape, {})[r.strategy] = r
    for r in rows:
        group = by_shape[r.shape]
        ceil, tri = group.get("ceiling"), group.get("triton")
        ok = r.status == "ok"
        r.ceiling_over_device = _ratio(ceil.device_us, r.device_us) if ceil and ok else None
        r.ceiling_over_harness = _ratio(ceil.harness_us, r.harness_us) if ceil and ok else None
        r.triton_over_device = _ratio(tri.device_us, r.device_us) if tri and ok else None
        r.triton_over_harness = _ratio(tri.harness_us, r.harness_us) if tri and ok else None
    return rows


GEO_FIELDS = ("device_us", "harness_us", "ceiling_over_device", "ceiling_over_harness",
              "triton_over_device", "triton_over_harness")


def geomeans(rows: list[Row]) -> dict:
    """{strategy: {field: geometric mean over shapes, None when any shape lacks it}}."""
    out = {}
    for key in _strategy_order(rows):
        mine = [r for r in rows if r.strategy == key]
        out[key] = {f: harness.geomean(getattr(r, f) for r in mine) for f in GEO_FIELDS}
    return out


def _strategy_order(rows: list[Row]) -> list[str]:
    present = []
    for r in rows:
        if r.strategy not in present:
            present.append(r.strategy)
    return [k for k in KEYS if k in present] + [k for k in present if k not in KEYS]


def _shape_order(rows: list[Row]) -> list[str]:
    out = []
    for r in rows:
        if r.shape not in out:
            out.append(r.shape)
    return out


# =========================================================================== writers

CSV_FIELDS = ("shape", "m", "k", "l", "strategy", "label", "status", "reason", "bytes", "sets",
              "device_us", "harness_us", "device_runs", "harness_runs", "device_gbps",
              "ceiling_over_device", "ceiling_over_harness", "triton_over_device", "triton_over_harness", "note",
              "detail")


def header_lines(meta: dict) -> list[str]:
    cap = meta.get("capability")
    cap_s = f"compute capability {cap[0]}.{cap[1]}" if cap else "no CUDA"
    hw = f"{cap_s}, {meta.get('sms', '?')} SMs, L2 {meta.get('l2_mb', 0):.0f} MB"
    return [f"Device: {meta.get('device', '?')} ({hw})",
            f"Date: {meta.get('date', '?')}",
            f"Versions: torch {meta.get('torch', '?')}, triton {meta.get('triton', '?')}, "
            f"python {meta.get('python', '?')}",
            f"Command (repository root): {meta.get('command', '?')}",
            f"Inputs: distribution {meta.get('distribution', 'official')}; device time = median of "
            f"{meta.get('reps', '?')} calls over rotating input sets, harness time = median of "
            f"{meta.get('harness_reps', '?')} calls (leaderboard protocol)"]


def _value(v):
    return "" if v is None else (f"{v:.6g}" if isinstance(v, float) else v)


def write_csv(path: Path, meta: dict, rows: list[Row], geo: dict) -> Path:
    """One row per (shape, strategy), then one 'geomean' row per strategy; '#' lines first
    hold the header (read with e.g. pandas.read_csv(path, comment='#'))."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        for line in header_lines(meta):
            f.write(f"# {line}\n")
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in rows:
            d = dataclasses.asdict(r)
            d.update(label=LABELS.get(r.strategy, r.strategy), device_gbps=r.device_gbps)
            w.writerow({k: _value(d.get(k)) for k in CSV_FIELDS})
        for key, g in geo.items():
            w.writerow({k: _value(v) for k, v in
                        {"shape": "geomean", "strategy": key, "label": LABELS.get(key, key), **g}.items()
                        if k in CSV_FIELDS})
    return path


def _cell(r: Row | None, time_field: str, ratio_field: str) -> str:
    if r is None:
        return ""
    if r.status == "n/a":
        return "n/a"
    if r.status != "ok":
        return "FAILED"
    if getattr(r, time_field) is None:
        return "host-blocking" if r.note else "-"
    return f"{harness.fmt(getattr(r, time_field), '.2f')} ({harness.fmt(getattr(r, ratio_field), '.2f')})"


def table_lines(rows: list[Row], geo: dict, kind: str = "device") -> list[str]:
    """Markdown table: one line per strategy, one column per shape: 'µs (ceiling / time)',
    then the geomeans of time, of ceiling / time and of triton / time."""
    shapes, keys = _shape_order(rows), _strategy_order(rows)
    cells = {(r.shape, r.strategy): r for r in rows}
    t_field, c_field, tr_field = f"{kind}_us", f"ceiling_over_{kind}", f"triton_over_{kind}"
    head = (["strategy"] + [f"{s} µs (ceiling/time)" for s in shapes]
            + ["geomean µs", "geomean ceiling/time", "geomean triton/time"])
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, key in enumerate(keys, 1):
        g = geo.get(key, {})
        line = ([f"{i}. {LABELS.get(key, key)}"] + [_cell(cells.get((s, key)), t_field, c_field) for s in shapes]
                + [harness.fmt(g.get(t_field), ".2f"), harness.fmt(g.get(c_field), ".3f"),
                   harness.fmt(g.get(tr_field), ".3f")])
        out.append("| " + " | ".join(line) + " |")
    return out


def notes_lines(rows: list[Row]) -> list[str]:
    """Why each n/a or failed cell is so (one line per distinct reason)."""
    out, seen = [], set()
    for r in rows:
        why = r.note if r.status == "ok" else r.reason
        if not why or (r.strategy, why) in seen:
            continue
        seen.add((r.strategy, why))
        where = "" if r.status == "n/a" else f" on {r.shape}"
        out.append(f"- {LABELS.get(r.strategy, r.strategy)}: {r.status}{where}: {why}")
    return out


def format_report(meta: dict, rows: list[Row], geo: dict, png_name: str | None = None) -> str:
    lines = ["# nvfp4_gemv: strategies compared", ""]
    lines += [f"{x}  " for x in header_lines(meta)] + [""]
    lines += ["## Device time (kernel only, L2 cold, rotating input sets): µs (ceiling / time)", ""]
    lines += table_lines(rows, geo, "device") + [""]
    lines += ["## Harness time (leaderboard protocol: sync, L2 clear, event, call, event, sync): "
              "µs (ceiling / time)", ""]
    lines += table_lines(rows, geo, "harness") + [""]
    lines += ["ceiling / time: 1 = at the streaming-read ceiling measured in the same run. "
              "triton / time: > 1 = faster than the triton backend. Geomeans over shapes "
              "('-' when a shape is missing).", ""]
    lines += [f"- read ceiling on {r.shape}: {r.detail}" for r in rows if r.strategy == "ceiling" and r.detail]
    lines += [""] if any(r.strategy == "ceiling" and r.detail for r in rows) else []
    notes = notes_lines(rows)
    if notes:
        lines += ["Not timed (or only partly):", ""] + notes + [""]
    lines += ["Strategies:", ""] + [f"{i}. {s.label}: {s.what}" for i, s in enumerate(STRATEGIES, 1)] + [""]
    if meta.get("notes"):
        lines += [f"- {n}" for n in meta["notes"]] + [""]
    if png_name:
        lines += [f"![bar chart]({png_name})", ""]
    return "\n".join(lines)


def write_markdown(path: Path, meta: dict, rows: list[Row], geo: dict, png_name: str | None = None) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(format_report(meta, rows, geo, png_name))
    return path


def write_plot(path: Path, meta: dict, rows: list[Row]) -> Path:
    """Grouped bars per shape (device time above, harness time below), log scale, the
    ceiling of each shape a dashed line across its group, bars labelled ceiling / time.
    Strategies with no timing at all are named in the legend only. Matplotlib is imported
    here only."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    shapes = _shape_order(rows)
    cells = {(r.shape, r.strategy): r for r in rows}
    others = [k for k in _strategy_order(rows) if k != "ceiling"]
    timed = [k for k in others if any(r.status == "ok" for r in rows if r.strategy == k)]
    colors = {k: plt.get_cmap("tab10").colors[i % 10] for i, k in enumerate(others)}
    width = 0.8 / max(1, len(timed))
    fig, axes = plt.subplots(2, 1, figsize=(max(8.0, 1.2 * len(shapes) * max(1, len(timed)) / 2 + 3), 9.5),
                             squeeze=False)
    for ax, kind in zip(axes[:, 0], ("device", "harness"), strict=True):
        field, plotted, top = f"{kind}_us", False, 0.0
        for j, key in enumerate(timed):
            for i, s in enumerate(shapes):
                r = cells.get((s, key))
                if r is None or r.status != "ok" or not getattr(r, field):
                    continue
                x, y = i - 0.4 + (j + 0.5) * width, getattr(r, field)
                ax.bar(x, y, width * 0.92, color=colors[key])
                plotted, top = True, max(top, y)
                ratio = getattr(r, f"ceiling_over_{kind}")
                if ratio:
                    ax.annotate(f"{ratio:.2f}", (x, y), ha="center", va="bottom", fontsize=6, rotation=90,
                                xytext=(0, 2), textcoords="offset points")
        for i, s in enumerate(shapes):
            c = cells.get((s, "ceiling"))
            if c is not None and c.status == "ok" and getattr(c, field):
                ax.hlines(getattr(c, field), i - 0.45, i + 0.45, colors="black", linestyles="dashed", zorder=5)
                plotted, top = True, max(top, getattr(c, field))
        if plotted:
            ax.set_yscale("log")
            ax.set_ylim(top=top * 4)  # room for the labels
        else:
            ax.text(0.5, 0.5, "no timings", transform=ax.transAxes, ha="center")
        ax.set_xticks(range(len(shapes)))
        ax.set_xticklabels(shapes)
        ax.set_xlim(-0.55, len(shapes) - 0.45)
        ax.set_ylabel(f"{kind} time, µs (log)")
        ax.set_title(("device time (kernel only, L2 cold)" if kind == "device" else
                      "harness time (leaderboard protocol)") + "; bar labels: ceiling / time", fontsize=9)
        ax.grid(axis="y", which="both", alpha=0.3)
    handles = [Line2D([], [], color="black", linestyle="dashed", label=LABELS["ceiling"])]
    for key in others:
        if key in timed:
            handles.append(Patch(color=colors[key], label=LABELS.get(key, key)))
        else:
            status = {r.status for r in rows if r.strategy == key}
            handles.append(Patch(facecolor="none", edgecolor="grey",
                                 label=f"{LABELS.get(key, key)}: {'/'.join(sorted(status))}"))
    fig.legend(handles=handles, loc="lower center", ncol=2, fontsize=8, frameon=False)
    fig.suptitle(f"nvfp4_gemv strategies: {meta.get('device', '?')}, {meta.get('date', '')}", fontsize=10)
    fig.tight_layout(rect=(0, 0.13, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def device_slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown"


def write_results(out_dir: Path, stem: str, meta: dict, rows: list[Row]) -> dict:
    """CSV, markdown and PNG under out_dir; a plot that cannot be drawn is reported, not fatal."""
    out_dir = Path(out_dir)
    geo = geomeans(rows)
    paths = {"csv": write_csv(out_dir / f"{stem}.csv", meta, rows, geo)}
    png = out_dir / f"{stem}.png"
    try:
        paths["png"] = write_plot(png, meta, rows)
    except Exception as exc:  # e.g. matplotlib missing: the tables still count
        log(f"plot not written: {type(exc).__name__}: {exc}")
    paths["md"] = write_markdown(out_dir / f"{stem}.md", meta, rows, geo,
                                 png.name if "png" in paths else None)
    return paths


# =========================================================================== main

def environment(argv: list[str]) -> dict:
    import platform

    import triton
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
            "command": harness.kit_command(["python3", "-m", "benchmarks.compare"], argv, ("--out",))}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        meta.update(device=torch.cuda.get_device_name(0), capability=list(torch.cuda.get_device_capability(0)),
                    sms=p.multi_processor_count, l2_mb=getattr(p, "L2_cache_size", 0) / 1e6)
    else:
        meta.update(device="cpu (no CUDA)", capability=None, sms=0, l2_mb=0.0)
    return meta


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python3 -m benchmarks.compare", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="strategies (--strategies):\n" + "\n".join(
                                    f"  {s.key:<11} {s.what}" for s in STRATEGIES))
    p.add_argument("--shapes", choices=harness.SHAPE_SETS, default=None,
                   help="shapes.json set: benchmarks (default), tests (the official correctness cases), or all")
    p.add_argument("--shape", type=parse_shape, action="append", metavar="MxKxL",
                   help="a shape of your own instead (repeatable; seed 1111)")
    p.add_argument("--strategies", default=",".join(KEYS),
                   help=f"comma-separated subset of {','.join(KEYS)} (default: all)")
    p.add_argument("--reps", type=int, default=DEFAULT_REPS,
                   help="device-time calls per strategy and shape (median; default %(default)s)")
    p.add_argument("--harness-reps", type=int, default=DEFAULT_HARNESS_REPS,
                   help="harness-protocol calls per strategy and shape (median; default %(default)s)")
    p.add_argument("--sets", type=int, default=DEFAULT_SETS,
                   help="minimum rotating input sets per shape; more for small shapes, so that they "
                        f"exceed 3x the L2 (at most {MAX_SETS}; default %(default)s)")
    p.add_argument("--distribution", default="official", choices=list(quant.DISTRIBUTIONS),
                   help="input values: quant.fill on generate_input's (default %(default)s)")
    p.add_argument("--out", type=Path, default=RESULTS_DIR, help="output folder (default benchmarks/results)")
    p.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = p.parse_args(argv)
    unknown = [k for k in args.strategies.split(",") if k and k not in KEYS]
    if unknown:
        p.error(f"unknown strategies {unknown}; choose from {KEYS}")
    if args.reps < 1 or args.harness_reps < 1 or args.sets < 1:
        p.error("--reps, --harness-reps and --sets must be >= 1")
    if args.shape and args.shapes:
        p.error(f"--shapes {args.shapes} and --shape: --shape's shapes replace the set (give one or the other)")
    args.shapes = args.shapes or "benchmarks"
    problem = (refusals.folder_problem(str(args.out), "--out")
               or harness.writable_file_problem(args.json and str(args.json), "--json", "compare.json"))
    if problem:
        p.exit(2, f"error: {problem}\n")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    wanted = [k for k in args.strategies.split(",") if k]
    entries = [e for e in registry() if e["key"] in wanted]
    if not torch.cuda.is_available():
        by_reason = {}
        for e in entries:
            by_reason.setdefault(e["reason"], []).append(e["key"])
        print("benchmarks.compare needs a CUDA GPU; every strategy is unavailable here: "
              + "; ".join(f"{', '.join(keys)}: {why}" for why, keys in by_reason.items()), file=sys.stderr)
        return 2
    problem = refusals.gpu_build_problem(submission) if "cuda" in wanted else ""
    if problem:  # the cuda strategy would only fail: one line, before any timing
        print(f"benchmarks.compare: {problem}", file=sys.stderr)
        return 2
    meta = environment(argv)
    meta.update(distribution=args.distribution, reps=args.reps, harness_reps=args.harness_reps,
                notes=["fp16 matmuls ran with torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction"
                       " = False (fp32 accumulation)",
                       "device times (timing.device_times): the GPU is held by a spin while the host queues "
                       "every timed call, so host launch cost is not in them",
                       "input sets per shape: in the CSV's 'sets' column; a shape whose sets fit in the L2 "
                       "is not L2 cold in device time (harness time always clears the L2)"])
    shapes = pick_shapes(args.shapes, args.shape)
    stem = "compare-" + device_slug(meta["device"]) + ("" if args.shape is None and args.shapes == "benchmarks"
                                                       else "-" + ("custom" if args.shape else args.shapes))
    log(f"{meta['device']} (cc {meta['capability']}), {len(shapes)} shape(s), strategies {wanted}")
    for e in entries:
        if not e["available"]:
            log(f"{e['key']}: unavailable: {e['reason']}")
    timer = CudaTimer(args.reps, args.harness_reps)
    l2 = int(meta["l2_mb"] * 1e6)
    saved_rpr = torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    rows: list[Row] = []
    t_start = time.perf_counter()
    try:
        for s in shapes:
            m, k, l = s["m"], s["k"], s["l"]
            nbytes = gemv_bytes(m, k, l)
            n_sets = n_sets_for(nbytes, l2, args.sets)
            log(f"== {shape_name(m, k, l)}: {nbytes / 1e6:.2f} MB per call, {n_sets} input sets")
            try:
                sets = [quant.fill(reference.generate_input(m, k, l, s.get("seed", 1111) + i, device="cuda"),
                                   args.distribution) for i in range(n_sets)]
                torch.cuda.synchronize()
            except Exception as exc:  # e.g. out of memory: every strategy of this shape fails
                why = one_line(f"generate_input: {type(exc).__name__}: {exc}")
                log(f"{shape_name(m, k, l)}: {why}")
                rows += derive([Row(shape_name(m, k, l), m, k, l, e["key"], "failed" if e["available"] else "n/a",
                                    why if e["available"] else e["reason"], nbytes, n_sets) for e in entries])
                continue
            rows += measure_shape(s, entries, timer, sets, n_sets)
            del sets
            torch.cuda.empty_cache()
    finally:
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = saved_rpr
    log(f"measured in {time.perf_counter() - t_start:.0f} s")
    paths = write_results(args.out, stem, meta, rows)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"meta": meta, "rows": [dataclasses.asdict(r) for r in rows],
                                         "geomeans": geomeans(rows)}, indent=1))
        paths["json"] = args.json
    for kind, p in paths.items():
        p = Path(p).resolve()  # named from the repository root where inside it: a log names no folder of the machine
        log(f"wrote {kind}: {p.relative_to(ROOT) if p.is_relative_to(ROOT) else p}")
    print(format_report(meta, rows, geomeans(rows)))
    return 1 if any(r.status == "failed" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
