"""Shared GPU timing helpers for the kit's benchmark scripts.

* ``device_times``: device time of one call per input set, L2 cold by rotation: the calls
  cycle through ``len(sets)`` input sets whose bytes together exceed the L2 several times,
  each call bracketed by its own pair of CUDA events, launched back to back (no host sync in
  between), so what is timed is the device work of that call.
* ``read_ceiling``: the same protocol around a read of N bytes per set (16-byte loads, a
  reduction, one word written per program): the bandwidth ceiling a memory-bound kernel moving
  N bytes can hope for, measured in the same run. Every launch shape of READ_SHAPES is tried
  with every load policy of READ_POLICIES (plain, evict_first, evict_last, .cs, .cg, L1
  no-allocate forms) and the fastest pair kept; the result names the shape and the policy and
  gives each policy's best (``best_read``).
* ``harness_times``: the competition protocol per call: synchronize, clear the L2 (the
  server's 4 GiB write), event, ``fn(data)``, event, synchronize. Host time of the Python call
  counts here, as it does on the leaderboard (in practice it hides behind the clear's
  milliseconds of device work). The clear leaves the L2 full of dirty lines: their write-back
  shares the DRAM with the timed call, which ``device_times`` (clean rotation) does not see.
* ``read_ceiling_server``: the read ceiling under that protocol, over the same shapes x policies.
* ``bare_launch_floor``: the harness protocol around the launch of an empty Triton kernel:
  the smallest time that protocol can report for any one-launch Triton kernel.
* ``host_cost``: host (CPU) microseconds per call of a function, no synchronisation;
  ``host_cost_beside_bare`` alternates it with a bare Triton launch's and gives both medians.

All times are microseconds. Medians unless named otherwise.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Callable, NamedTuple, Sequence

if __name__ == "__main__":  # run as a script: say what to run instead, before importing triton
    import sys
    _asked = bool({"-h", "--help"} & set(sys.argv[1:]))
    print(__doc__.split("\n\n")[0] + "\n\nA module, not a command: benchmarks/bench_kernel.py and "
          "benchmarks/compare.py import it. Run\n    python3 benchmarks/bench_kernel.py --help\n"
          "    python3 -m benchmarks.compare --help", file=sys.stdout if _asked else sys.stderr)
    sys.exit(0 if _asked else 2)

if not __package__:  # run as `python3 benchmarks/NAME.py`: kitpath puts the kit's root on sys.path
    import kitpath  # noqa: F401

# torch (and utils, which imports it) is imported in the functions that time on the GPU: a tool
# that imports this module for its definitions (policies, byte counts, best_read) answers --help
# and refuses on a machine without a CUDA GPU without it. Triton defines the kernels below.
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


def gemv_bytes(m: int, k: int, l: int) -> int:
    """Bytes a GEMV must move: a, sfa, b row 0, sfb row 0 (all batches) and c."""
    return m * k // 2 * l + m * k // 16 * l + k // 2 * l + k // 16 * l + 2 * m * l


class HostBound(RuntimeError):
    """``device_times`` could not queue every call while the GPU was held: the host, not the
    device, set the pace, so device times would include host time."""


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def device_times(fn: Callable, sets: Sequence, reps: int = 40, warmup: int = 3) -> list[float]:
    """Device microseconds of ``fn(sets[i % len(sets)])`` for ``reps`` calls (after ``warmup``
    rounds over all sets), events per call, no sync between calls.

    The GPU is first held busy by a spin kernel long enough for the host to queue every call,
    so the calls run back to back on the device and the events time device work, not the
    host's launch rate (a Python launch can take longer than these kernels run)."""
    import torch
    for _ in range(warmup):
        for s in sets:
            fn(s)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for s in sets:
        fn(s)
    torch.cuda.synchronize()
    host_per_call = (time.perf_counter() - t0) / len(sets)
    hold_s = max(0.02, 4 * reps * (host_per_call + 20e-6))
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    # A host stall while queuing (seen once on the H100 on 2026-11-25: 40 read-ceiling calls
    # took 20.0 ms, 25x the measured launch time) voids that round, not the run: the round is
    # repeated with twice the hold, and only HOLD_TRIES failures in a row raise.
    for _ in range(HOLD_TRIES):
        torch.cuda._sleep(int(hold_s * clock_hz()))
        t0 = time.perf_counter()
        for i in range(reps):
            s = sets[i % len(sets)]
            ev[i][0].record()
            fn(s)
            ev[i][1].record()
        queued_s = time.perf_counter() - t0
        torch.cuda.synchronize()
        if queued_s <= hold_s * 0.9:
            return [a.elapsed_time(b) * 1e3 for a, b in ev]
        hold_s *= 2
    raise HostBound(f"host queued {reps} calls in {queued_s * 1e3:.1f} ms, longer than the "
                    f"{hold_s / 2 * 1e3:.1f} ms hold ({HOLD_TRIES} tries, the hold doubled each time): "
                    "device times would include host time")


HOLD_TRIES = 3


_CLOCK = {}


def clock_hz() -> float:
    """SM clock for torch.cuda._sleep's cycle count: measured once (a spin of known cycles)."""
    import torch
    if "hz" not in _CLOCK:
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cycles = 20_000_000
        a.record()
        torch.cuda._sleep(cycles)
        b.record()
        torch.cuda.synchronize()
        _CLOCK["hz"] = cycles / (a.elapsed_time(b) * 1e-3)
    return _CLOCK["hz"]


# --------------------------------------------------------------------------- read ceiling
# The read is timed with several load policies (the cache qualifiers of its loads), and the
# fastest is the ceiling: after the server's L2 clear the L2 is full of dirty lines, and which
# loads cost least there is not which cost least with a clean L2 (on the H100 plain loads lose
# 11-13% there to `.cs` / `L1::evict_first`, kit 2bc31c0, 2026-11-25), so a ceiling read with
# one policy is unfair to a kernel that loads with another.


class ReadPolicy(NamedTuple):
    """One load policy of the read kernel. Triton's own forms: ``cache_modifier`` and
    ``eviction_policy`` of ``tl.load`` (Triton 3.6 and 3.9 emit, on sm_90a and sm_100a: '' ->
    ``ld.global``, ``.cg`` -> ``ld.global.cg``, evict_first / evict_last ->
    ``ld.global.L1::evict_first.L2::cache_hint`` with a ``createpolicy.fractional.L2::evict_first``
    policy (likewise evict_last); a modifier and a policy together are refused by ptxas). Forms
    Triton's ``tl.load`` has no words for (L1 no-allocate; ``.cs``, which Triton 3.6 refuses) are
    inline PTX: ``asm`` loads ``vec`` consecutive words from its pointer ($N: the pointer, $N+1:
    the mask as an int), outputs $0..."""
    name: str
    cache_modifier: str = ""
    eviction_policy: str = ""
    asm: str = ""
    vec: int = 1  # words (8 bytes) per asm load: 2 = 16-byte loads (as tl.load's), 4 = 32-byte (sm_100a)
    min_cc: tuple = (0, 0)  # the lowest compute capability whose ptxas takes the load
    ptx: str = ""  # the load instruction the policy emits (checked by tests/test_read_policies.py)


def _asm_load(vec: int, qualifiers: str, policy: str = "") -> str:
    """Inline PTX: ``vec`` 8-byte words from [$vec] into $0..$vec-1, zeros where the mask
    ($vec+1) is 0; ``policy`` names an L2 ``createpolicy`` for an ``L2::cache_hint`` operand."""
    outs = ", ".join(f"${i}" for i in range(vec))
    zero = " ".join(f"mov.b64 ${i}, 0;" for i in range(vec))
    make = f" .reg .b64 q; createpolicy.fractional.L2::{policy}.b64 q, 1.0;" if policy else ""
    hint = ", q" if policy else ""
    return (f"{{ .reg .pred p;{make} setp.ne.b32 p, ${vec + 1}, 0; {zero} "
            f"@p ld.global.{qualifiers}.v{vec}.b64 {{{outs}}}, [${vec}]{hint}; }}")


READ_POLICIES = (
    ReadPolicy("plain", ptx="ld.global.v2.b64"),
    ReadPolicy("evict_first", eviction_policy="evict_first", ptx="ld.global.L1::evict_first.L2::cache_hint.v2.b64"),
    ReadPolicy("evict_last", eviction_policy="evict_last", ptx="ld.global.L1::evict_last.L2::cache_hint.v2.b64"),
    # inline PTX: Triton 3.6's tl.load refuses cache_modifier ".cs" (3.9 takes it)
    ReadPolicy("cs", asm=_asm_load(2, "cs"), vec=2, ptx="ld.global.cs.v2.b64"),
    ReadPolicy("cg", cache_modifier=".cg", ptx="ld.global.cg.v2.b64"),
    # the cuda kernel's LOAD 0 (`ld.global.nc.L1::no_allocate`)
    ReadPolicy("nc_no_allocate", asm=_asm_load(2, "nc.L1::no_allocate"), vec=2,
               ptx="ld.global.nc.L1::no_allocate.v2.b64"),
    # the public B200 leaders' `L1::no_allocate.L2::evict_first` in the form 16-byte loads can
    # take (the L2 priority as a cache_hint operand: ptxas takes the qualifier on 32-byte loads only)
    ReadPolicy("no_allocate_l2_evict_first", asm=_asm_load(2, "L1::no_allocate.L2::cache_hint", "evict_first"),
               vec=2, ptx="ld.global.L1::no_allocate.L2::cache_hint.v2.b64"),
    # the leaders' form itself: 32-byte loads, sm_100a and later (SASS LDG.E.NA.EFL2.256)
    ReadPolicy("no_allocate_l2_evict_first_256", asm=_asm_load(4, "L1::no_allocate.L2::evict_first"), vec=4,
               min_cc=(10, 0), ptx="ld.global.L1::no_allocate.L2::evict_first.v4.b64"),
)
POLICY = {p.name: p for p in READ_POLICIES}


def read_policies(capability: tuple | None = None) -> tuple:
    """The policies this GPU's ptxas takes (all of them for ``capability`` None)."""
    return tuple(p for p in READ_POLICIES if capability is None or tuple(capability) >= p.min_cc)


@triton.jit
def _read_kernel(src, out, n_words, BLOCK: tl.constexpr, ITERS: tl.constexpr, CM: tl.constexpr,
                 EP: tl.constexpr, ASM: tl.constexpr, VEC: tl.constexpr):
    """Each program reads ITERS * BLOCK consecutive uint64 words (16-byte loads by pairs, or
    VEC words per inline-PTX load ASM) and writes one word: their xor (keeps the loads alive).
    ASM '' with VEC > 1 loads the same words with plain tl.load (Triton's interpreter, which
    runs no PTX)."""
    pid = tl.program_id(0)
    base = pid.to(tl.int64) * (BLOCK * ITERS)
    if VEC == 1:
        offs = tl.arange(0, BLOCK)
        acc = tl.zeros([BLOCK], dtype=tl.uint64)
        for i in tl.static_range(ITERS):
            idx = base + i * BLOCK + offs
            acc ^= tl.load(src + idx, mask=idx < n_words, other=0, cache_modifier=CM, eviction_policy=EP)
    else:
        offs = VEC * tl.arange(0, BLOCK // VEC)
        acc = tl.zeros([BLOCK // VEC], dtype=tl.uint64)
        for i in tl.static_range(ITERS):
            idx = base + i * BLOCK + offs
            acc ^= _load_words(src + idx, idx < n_words, ASM, VEC)
    tl.store(out + pid, tl.reduce(acc, 0, _xor))


@triton.jit
def _load_words(ptr, mask, ASM: tl.constexpr, VEC: tl.constexpr):
    """The xor of the VEC words at each ``ptr`` (n_words is a multiple of 16, so a word group
    is all in or all out)."""
    if ASM == "":
        acc = tl.load(ptr, mask=mask, other=0)
        for j in tl.static_range(1, VEC):
            acc ^= tl.load(ptr + j, mask=mask, other=0)
    elif VEC == 2:
        w0, w1 = tl.inline_asm_elementwise(ASM, "=l,=l,l,r", [ptr, mask.to(tl.int32)],
                                           dtype=(tl.uint64, tl.uint64), is_pure=True, pack=1)
        acc = w0 ^ w1
    else:
        w0, w1, w2, w3 = tl.inline_asm_elementwise(ASM, "=l,=l,=l,=l,l,r", [ptr, mask.to(tl.int32)],
                                                   dtype=(tl.uint64, tl.uint64, tl.uint64, tl.uint64),
                                                   is_pure=True, pack=1)
        acc = w0 ^ w1 ^ w2 ^ w3
    return acc


@triton.jit
def _xor(a, b):
    return a ^ b


# (BLOCK words, ITERS, warps). Six shapes before the load policies came; the four kept are the
# two that won every ceiling in the kept logs ((1024, 1, 4) on all three benchmark shapes,
# (4096, 1, 8) on 7168x16384x1 once: benchmarks/results/gpu-run-h100.log at commit 3a21cf2) and one longer
# stretch per warp count. Dropped, to keep shapes x policies near four times the old cost:
# (1024, 8, 4) and (2048, 4, 8), the longest stretches per program, never seen winning.
READ_SHAPES = ((1024, 1, 4), (1024, 4, 4), (2048, 2, 8), (4096, 1, 8))


def make_read_buffers(nbytes: int, n_sets: int, device="cuda") -> list:
    """``n_sets`` buffers of ``nbytes`` random bytes (rounded up to a multiple of 128 bytes, so
    that the bounds mask stays vectorisable), as uint64 words, plus an output buffer each."""
    import torch
    words = (nbytes + 127) // 128 * 16
    bufs = []
    for _ in range(n_sets):
        src = torch.randint(0, 2 ** 62, (words,), dtype=torch.int64, device=device).view(torch.uint64)
        out = torch.empty(triton.cdiv(words, 1024), dtype=torch.uint64, device=device)
        bufs.append((src, out))
    return bufs


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def read_launch(buf, block: int, iters: int, warps: int, policy: str = "plain") -> None:
    """One read of ``buf`` (src, out) with launch shape (block, iters, warps) and load
    ``policy`` (a name of READ_POLICIES)."""
    src, out = buf
    n = src.numel()
    p = POLICY[policy]
    _read_kernel[(triton.cdiv(n, block * iters),)](
        src, out, n, BLOCK=block, ITERS=iters, CM=p.cache_modifier, EP=p.eviction_policy,
        ASM="" if _interpreting() else p.asm, VEC=p.vec, num_warps=warps)


def best_read(times: dict, errors: dict | None = None) -> dict:
    """The ceiling of per-(shape, policy) median µs ``times`` ({(shape, policy): µs}; nan or
    missing where a combination could not be timed): {"us", "shape", "policy" of the fastest,
    "by_policy": {policy: {"us", "shape"}} (each policy's fastest shape, in READ_POLICIES
    order), "all": times, "errors": errors}. Raises RuntimeError when nothing was timed."""
    ok = {key: us for key, us in times.items() if us == us and us > 0}
    if not ok:
        raise RuntimeError("no read ceiling: no launch shape and load policy could be timed"
                           + (f" ({'; '.join(f'{k}: {v}' for k, v in (errors or {}).items())})" if errors else ""))
    best = min(ok, key=ok.get)
    by_policy = {}
    order = [p.name for p in READ_POLICIES] + sorted({pol for _, pol in ok} - set(POLICY))
    for pol in order:
        mine = {shape: us for (shape, q), us in ok.items() if q == pol}
        if mine:
            shape = min(mine, key=mine.get)
            by_policy[pol] = {"us": mine[shape], "shape": shape}
    return {"us": ok[best], "shape": best[0], "policy": best[1], "by_policy": by_policy, "all": times,
            "errors": dict(errors or {})}


def _policies_here(policies) -> tuple:
    if policies is not None:
        return tuple(policies)
    import torch
    return tuple(p.name for p in read_policies(torch.cuda.get_device_capability()))


def _time_grid(timer: Callable, shapes, policies) -> dict:
    """best_read over shapes x policies, ``timer(launch)`` -> median µs; a policy that does not
    build or run here is recorded in "errors" (its first failure) and not tried again."""
    times, errors = {}, {}
    for pol in _policies_here(policies):
        for shape in shapes:
            if pol in errors:
                break
            try:
                times[(tuple(shape), pol)] = timer(lambda b, s=tuple(shape), q=pol: read_launch(b, *s, q))
            except Exception as exc:  # noqa: BLE001 - a refused policy is a note, not the end of the run
                errors[pol] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    return best_read(times, errors)


def read_ceiling(nbytes: int, n_sets: int = 8, reps: int = 40, shapes=READ_SHAPES, bufs=None,
                 policies=None) -> dict:
    """Fastest median device time (µs) of reading ``nbytes`` per call over rotating sets, over
    launch shapes x load policies (``policies`` None: every one of READ_POLICIES this GPU takes).
    Returns best_read's dict: {"us", "shape", "policy", "by_policy", "all", "errors"}."""
    bufs = bufs or make_read_buffers(nbytes, n_sets)
    return _time_grid(lambda fn: median(device_times(fn, bufs, reps)), shapes, policies)


def read_ceiling_server(nbytes: int, reps: int = 20, shapes=READ_SHAPES, buf=None, policies=None) -> dict:
    """The read ceiling under the leaderboard's protocol (``harness_times``: the server's L2
    clear before each call leaves the L2 full of dirty lines, whose write-back competes with
    the read): fastest median µs over launch shapes x load policies. Returns best_read's dict."""
    buf = buf or make_read_buffers(nbytes, 1)[0]
    return _time_grid(lambda fn: median(harness_times(fn, buf, reps)), shapes, policies)


def read_kernel_ptx(policy: str, arch: int, shape=READ_SHAPES[0]) -> str:
    """The PTX of the read kernel with ``policy`` and launch ``shape`` compiled for ``cuda:arch``
    (90: sm_90a, 100: sm_100a) without a GPU; TRITON_INTERPRET must be unset. Raises what
    Triton or ptxas raise (a policy the target's ptxas refuses)."""
    from triton.backends.compiler import GPUTarget
    if _interpreting():
        raise RuntimeError("TRITON_INTERPRET=1: the read kernel is an interpreter function here")
    p = POLICY[policy]
    block, iters, warps = shape
    sig = {"src": "*u64", "out": "*u64", "n_words": "i32", "BLOCK": "constexpr", "ITERS": "constexpr",
           "CM": "constexpr", "EP": "constexpr", "ASM": "constexpr", "VEC": "constexpr"}
    consts = {"BLOCK": block, "ITERS": iters, "CM": p.cache_modifier, "EP": p.eviction_policy, "ASM": p.asm,
              "VEC": p.vec}
    div16 = [["tt.divisibility", 16]]
    src = triton.compiler.ASTSource(fn=_read_kernel, signature=sig, constexprs=consts,
                                    attrs={(0,): div16, (1,): div16, (2,): div16})
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": warps}).asm["ptx"]


def policy_text(res: dict) -> str:
    """'launch (1024, 1, 4), cs' for a ceiling of best_read."""
    return f"launch {tuple(res['shape'])}, {res['policy']}"


# --------------------------------------------------------------------------- harness protocol

def harness_call(fn: Callable, data) -> float:
    """µs of one ``fn(data)`` under the leaderboard's protocol: sync, clear L2, event, fn(data),
    event, sync."""
    import torch

    from utils import clear_l2_cache
    torch.cuda.synchronize()
    clear_l2_cache()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn(data)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3


def harness_times(fn: Callable, data, reps: int = 20, warmup: int = 2) -> list[float]:
    """``harness_call`` ``reps`` times, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn(data)
    return [harness_call(fn, data) for _ in range(reps)]


@triton.jit
def empty_kernel(x):
    pass


def bare_launch_floor(reps: int = 20) -> list[float]:
    """Harness-protocol times of launching an empty Triton kernel (one pointer argument)."""
    import torch
    x = torch.empty(1, device="cuda")
    return harness_times(lambda _: empty_kernel[(1,)](x), None, reps)


def host_cost(fn: Callable, arg, calls: int = 200) -> float:
    """Host microseconds per ``fn(arg)`` call (no synchronisation; device work queues up)."""
    import torch
    fn(arg)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(arg)
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6


def bare_launch_host_cost(calls: int = 200) -> float:
    import torch
    x = torch.empty(1, device="cuda")
    return host_cost(lambda _: empty_kernel[(1,)](x), None, calls)


def host_cost_beside_bare(fn: Callable, arg, calls: int = 200, rounds: int = 7) -> tuple:
    """(host us per ``fn(arg)`` call, host us per bare Triton launch): medians over ``rounds``
    alternating rounds of ``calls`` each. One round of each, back to back, moved by up to 5 us
    between two runs of the same code on the same H100 (10.2-19.9 against 15.0-17.6 on
    2026-11-25): the CPU's state drifts, so the two are measured in turns."""
    own, bare = [], []
    for _ in range(rounds):
        own.append(host_cost(fn, arg, calls))
        bare.append(bare_launch_host_cost(calls))
    return median(own), median(bare)


# --------------------------------------------------------------------------- SM pressure
# A green context restricts a process to N of the GPU's SMs (torch.cuda.green_contexts, CUDA 12.8+).
# Set before anything else touches the GPU, it becomes the current CUDA context and its default
# queue torch's current one: torch's kernels, Triton's launches and the cuda backend's driver
# launches (the current context's default queue) then all run on those N SMs. Two checks, both
# recorded: the SM count the driver reports for the current context (cuCtxGetDevResource), and
# the time of a compute-bound kernel launched through each path, which must scale as 1 / N.

def context_sm_count() -> int:
    """SMs of the current CUDA context as the driver reports them (a green context's share, or
    the whole GPU); 0 where the driver cannot say. Call after the GPU is in use."""
    import ctypes
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        ctx = ctypes.c_void_p()
        if lib.cuCtxGetCurrent(ctypes.byref(ctx)) or not ctx.value:
            return 0
        # CUdevResource: a 4-byte type, 92 bytes of padding, then the SM resource, whose first
        # field is smCount (cuda.h of CUDA 12.4+); the buffer is larger than the struct.
        buf = (ctypes.c_ubyte * 512)()
        if lib.cuCtxGetDevResource(ctx, buf, 1):  # 1 = CU_DEV_RESOURCE_TYPE_SM
            return 0
        return int.from_bytes(bytes(buf[96:100]), "little")
    except (OSError, AttributeError):
        return 0


def enter_green_context(num_sms: int):
    """Make a green context of ``num_sms`` SMs current in this (fresh) process. Returns it (keep
    a reference), or raises RuntimeError saying why there is none (torch without green contexts,
    a driver or GPU that refuses one)."""
    import torch
    try:
        from torch.cuda import green_contexts
    except ImportError as exc:
        raise RuntimeError(f"this torch ({torch.__version__}) has no torch.cuda.green_contexts") from exc
    if not getattr(green_contexts, "SUPPORTED", True):
        raise RuntimeError(f"this torch ({torch.__version__}) was built without green context support")
    try:
        ctx = green_contexts.GreenContext.create(num_sms, 0)
        enter = getattr(ctx, "set_context", None) or ctx.make_current
        enter()
    except Exception as exc:  # noqa: BLE001 - the driver's or torch's refusal, said in one line
        raise RuntimeError(f"no green context of {num_sms} SMs here: {type(exc).__name__}: "
                           f"{str(exc).splitlines()[0] if str(exc) else ''}") from exc
    return ctx


@triton.jit
def _spin_kernel(out, ITERS: tl.constexpr):
    """Compute-bound: a dependent fp32 chain per thread, one store (keeps it alive)."""
    x = tl.program_id(0).to(tl.float32) + tl.arange(0, 1024).to(tl.float32)
    for _ in range(ITERS):
        x = x * 0.999 + 0.5
    tl.store(out + tl.program_id(0) * 1024 + tl.arange(0, 1024), x)


_SPIN_CUDA_SRC = r"""
extern "C" __global__ void spin(float* out, int iters) {
  float x = threadIdx.x + blockIdx.x;
  for (int i = 0; i < iters; ++i) x = fmaf(x, 0.999f, 0.5f);
  out[blockIdx.x * blockDim.x + threadIdx.x] = x;
}
"""
SPIN_ITERS = 4096


def launch_scaling(submission, blocks_per_sm: int = 8) -> dict:
    """{"triton": µs, "cuda": µs}: device time of the same compute-bound kernel (1024-thread
    blocks, blocks_per_sm x the device's SM count of them, so at most two per SM at a time: time
    proportional to 1 / SMs) launched through Triton and through the cuda backend's path (NVRTC
    cubin, cuLaunchKernel on the current context's default queue). Median of 5."""
    import ctypes

    import torch
    dev = torch.device("cuda")
    grid = blocks_per_sm * torch.cuda.get_device_properties(dev).multi_processor_count
    out = torch.empty(grid * 1024, dtype=torch.float32, device=dev)
    res = {"triton": median(device_times(lambda _: _spin_kernel[(grid,)](out, ITERS=SPIN_ITERS, num_warps=32),
                                          [None], 5, warmup=1))}
    try:
        arch = submission.cuda_arch(torch.cuda.get_device_capability(dev))
        fn = submission.cuda_driver().function(submission.cuda_compile(_SPIN_CUDA_SRC, arch), "spin", dev)
        ptr, iters = ctypes.c_void_p(out.data_ptr()), ctypes.c_int(SPIN_ITERS)
        params = (ctypes.c_void_p * 2)(ctypes.addressof(ptr), ctypes.addressof(iters))
        u = ctypes.c_uint
        launch = submission.cuda_driver().launch

        def run(_):
            if launch(fn, u(grid), u(1), u(1), u(1024), u(1), u(1), u(0), None, params, None):
                raise RuntimeError("spin launch failed")

        res["cuda"] = median(device_times(run, [None], 5, warmup=1))
    except Exception as exc:  # noqa: BLE001 - no NVRTC here: the triton path alone
        res["cuda_error"] = f"{type(exc).__name__}: {exc}"
    return res
