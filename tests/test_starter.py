"""examples/starter_cuda.py, the starter submission.

CPU: the server's upload rules and the import contract; the config table (one entry per
benchmark shape, every entry launchable); eval.py's test mode through the real harness, as the
server runs it; bad input named in one line; the torch fallback against the exact reference;
the kernel source compiled by NVRTC for sm_90a and sm_100a (with its machine code checked where
cuobjdump is found); with g++, the kernel's decode functions built for the host (stand-ins for
three intrinsics) against exact tables over every code pair and random words, and the whole
kernel built for the host (a warp's lanes as coroutines) against the float64 reference for every
config. GPU (marked gpu): every official test and benchmark shape on official and full-range
data against the float64 reference with c poisoned before each call, repeats bit-identical,
every config bit for bit on extreme values, NaN scales, and bad input.
"""

import ast
import dataclasses
import os
import random
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import (
    BENCHMARKS,
    HAS_CUDA,
    OFFICIAL_TESTS,
    ROOT,
    assert_server_test_mode_passes,
    load_file,
    make_input,
    replace_inputs,
)
from tolerances import KERNEL_ATOL, KERNEL_RTOL

import harness
import reference
from nvfp4 import E2M1_VALUES
from utils import verbose_allclose

STARTER = ROOT / "examples" / "starter_cuda.py"
ARCHS = ("sm_90a", "sm_100a")


starter = load_file(STARTER, "starter_cuda")


def gpu(fn):
    return pytest.mark.gpu(pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")(fn))


def _configs():
    return [*starter.CONFIGS.values(), starter.DEFAULT]


# --------------------------------------------------------------------------- the file

def test_upload_rules_and_header():
    raw = STARTER.read_bytes()
    lines = raw.decode().splitlines()
    assert lines[:2] == ["#!POPCORN leaderboard nvfp4_gemv", "#!POPCORN gpu NVIDIA"]
    assert b"stream" not in raw.lower(), "the server rejects any file containing 'stream'"
    assert len(raw) < 1_000_000
    assert harness.static_problems(STARTER) == []


def test_imports_only_torch_numpy_stdlib_and_task():
    allowed = {"torch", "numpy", "task"} | set(sys.stdlib_module_names)
    for node in ast.walk(ast.parse(STARTER.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        for name in names:
            assert name.split(".")[0] in allowed, f"starter_cuda.py imports {name}"


def test_one_frozen_config_per_benchmark_shape_and_every_config_launchable():
    assert set(starter.CONFIGS) == {(m, k, l) for m, k, l, _ in BENCHMARKS}
    for cfg in _configs():
        assert cfg.threads % 32 == 0 and 32 <= cfg.threads <= 1024, cfg
        assert cfg.lanes_per_row in (1, 2, 4, 8, 16, 32), cfg
        assert cfg.rows_per_lane >= 1 and 128 % cfg.rows_per_block == 0, f"{cfg}: must divide every M % 128 == 0"
    with pytest.raises(dataclasses.FrozenInstanceError):
        starter.DEFAULT.threads = 64


# --------------------------------------------------------------------------- through the harness

@pytest.mark.parametrize("dist", ["official", "full-range"])
def test_eval_test_mode_passes_as_the_server_runs_it(tmp_path, dist):
    """The server's layout (its four files beside the starter renamed submission.py), the official
    test cases, ``python eval.py test FILE`` with POPCORN_FD: every case passes."""
    assert_server_test_mode_passes(tmp_path, STARTER, dist)


# --------------------------------------------------------------------------- input checks, fallback

@pytest.mark.parametrize("case, exc, words", [
    ("a_dtype", TypeError, "a and b must be float4_e2m1fn_x2"),
    ("sf_dtype", TypeError, "sfa and sfb must be float8_e4m3fn"),
    ("c_dtype", TypeError, "c must be float16"),
    ("m", ValueError, "M % 128 == 0"),
    ("k", ValueError, "K % 64 == 0"),
    ("c_shape", ValueError, "c has shape"),
    ("device", ValueError, "must be on one device"),
    ("arity", TypeError, "data must be the tuple"),
])
def test_bad_input_raises_one_line_naming_the_constraint(case, exc, words):
    data = make_input(128, 256, 2, 3, "cpu")
    a, b, sfa, sfb, sfa_p, sfb_p, c = data
    bad = {
        "a_dtype": lambda: replace_inputs(data, a=a.view(torch.uint8).to(torch.float16)),
        "sf_dtype": lambda: replace_inputs(data, sfa=sfa.view(torch.uint8)),
        "c_dtype": lambda: replace_inputs(data, c=c.float()),
        "m": lambda: replace_inputs(data, a=a[:64], sfa=sfa[:64], c=c[:64]),
        "k": lambda: replace_inputs(data, a=a[:, :16], b=b[:, :16], sfa=sfa[:, :2], sfb=sfb[:, :2]),
        "c_shape": lambda: replace_inputs(data, c=c[:, :, :1]),
        "device": lambda: replace_inputs(data, c=torch.empty_like(c, device="meta")),
        "arity": lambda: data[:6],
    }[case]()
    with pytest.raises(exc) as info:
        starter.custom_kernel(bad)
    assert words in str(info.value) and "\n" not in str(info.value), str(info.value)


@pytest.mark.parametrize("dist", ["official", "full-range"])
@pytest.mark.parametrize("m, k, l", [(128, 64, 1), (256, 1088, 3), (384, 7168, 2)])
def test_torch_fallback_matches_the_exact_reference(m, k, l, dist):
    data = make_input(m, k, l, m + k + l, "cpu", dist)
    expected = reference.ref_kernel(data[:6] + (data[6].clone(),))
    data[6].fill_(float("nan"))
    out = starter.custom_kernel(data)
    assert out.data_ptr() == data[6].data_ptr()
    reasons = verbose_allclose(out, expected, rtol=KERNEL_RTOL, atol=KERNEL_ATOL)
    assert not reasons, "\n".join(reasons)


def test_the_table_says_which_path_ran(monkeypatch):
    """eval.py's table names what ran (``select_backend``): on a CPU the torch fallback, said to
    be not the CUDA kernel (it once read only "test: cpu (no CUDA)"); on a GPU the kernel."""
    monkeypatch.delenv("NVFP4_GEMV_BACKEND", raising=False)
    cpu = starter.select_backend(torch.device("cpu"))
    assert cpu == "torch fallback (the CUDA kernel did not run: no GPU)"
    assert starter.select_backend(torch.device("cuda", 0)) == "cuda kernel"
    row = harness.CaseResult("m: 128; k: 256; l: 1; seed: 1", {"m": 128, "k": 256, "l": 1, "seed": 1}, True)
    table = harness.format_table(harness.summarize("test", [row]), "cpu (no CUDA)", cpu)
    assert table.splitlines()[0] == f"test: cpu (no CUDA), backend {cpu}"


@pytest.mark.parametrize("value", ["triton", "cuda", "torch"])
def test_a_backend_setting_is_refused_in_one_line(monkeypatch, value):
    """The starter has no backend choice: NVFP4_GEMV_BACKEND (eval.py --backend) other than auto
    is a ValueError naming the variable (human mode: one error line, exit 2), not ignored."""
    monkeypatch.setenv("NVFP4_GEMV_BACKEND", value)
    with pytest.raises(ValueError, match=f"^NVFP4_GEMV_BACKEND={value}: the starter runs its CUDA kernel") as info:
        starter.select_backend(torch.device("cpu"))
    assert "\n" not in str(info.value)
    monkeypatch.setenv("NVFP4_GEMV_BACKEND", "auto")
    assert starter.select_backend(torch.device("cpu")).startswith("torch fallback")


# --------------------------------------------------------------------------- compile gate

def _nvrtc_or_skip():
    try:
        starter.nvrtc()
    except RuntimeError as exc:
        why = f"NVRTC is not installed here ({exc}); the dev extra installs the nvidia-cuda-nvrtc wheel"
        if os.environ.get("CI"):
            pytest.fail(why + " (under CI the gate needs it)")
        pytest.skip(why)


@pytest.mark.parametrize("arch", ARCHS)
def test_kernel_compiles_for_hopper_and_blackwell_with_portable_code(arch, tmp_path):
    """Every config compiles with NVRTC (no GPU needed); where cuobjdump is found, the machine
    code decodes with integer dot products (IDP.4A), uses no e2m1/e4m3 conversion instruction and
    spills nothing to local memory."""
    _nvrtc_or_skip()
    from benchmarks.sass_count import cuobjdump
    dump = cuobjdump()
    for cfg in _configs():
        cubin = starter.compile_cubin(cfg, arch)
        assert cubin[:4] == b"\x7fELF", f"{cfg} on {arch}: not a cubin"
        if not dump:
            continue
        path = tmp_path / "starter.cubin"
        path.write_bytes(cubin)
        sass = subprocess.run([dump, "--dump-sass", str(path)], capture_output=True, text=True, check=True).stdout
        usage = subprocess.run([dump, "--dump-resource-usage", str(path)], capture_output=True, text=True,
                               check=True).stdout
        assert "IDP.4A" in sass, f"{cfg} on {arch}"
        assert "E2M1" not in sass and "E4M3" not in sass, f"{cfg} on {arch}: a format conversion instruction"
        assert "LOCAL:0" in usage and "STACK:0" in usage, f"{cfg} on {arch}: {usage}"


def test_arch_names_the_architecture_specific_targets():
    assert [starter.arch(c) for c in ((9, 0), (10, 0), (8, 9))] == ["sm_90a", "sm_100a", "sm_89"]


# --------------------------------------------------------------------------- the decode, on the host

HOST_SHIMS = r"""
#include <cstdio>
#include <cstring>
#include <cstdint>
#define __device__
#define __forceinline__ inline
// The CUDA intrinsics as the CUDA Math API documents them.
static unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {  // byte n <- byte s<4n+2:4n> of y:x
  unsigned long long in = ((unsigned long long)y << 32) | x;
  unsigned r = 0;
  for (int n = 0; n < 4; ++n) r |= (unsigned)((in >> (8 * ((s >> (4 * n)) & 7))) & 0xFF) << (8 * n);
  return r;
}
static int __dp4a(int a, int b, int c) {  // signed bytes
  for (int n = 0; n < 4; ++n) c += (int)(signed char)(a >> (8 * n)) * (int)(signed char)(b >> (8 * n));
  return c;
}
static float __int_as_float(unsigned x) { float f; std::memcpy(&f, &x, 4); return f; }
"""

HOST_MAIN = r"""
int main() {
  char op;
  unsigned x, y;
  while (std::scanf(" %c %x %x", &op, &x, &y) == 3) {
    if (op == 'd') std::printf("%d\n", dot8(x, prep_b(y), 0));
    else { float f = e4m3(x); unsigned u; std::memcpy(&u, &f, 4); std::printf("%08x\n", u); }
  }
  return 0;
}
"""


def _codes(word: int) -> list:
    return [(word >> (4 * i)) & 15 for i in range(8)]


def test_decode_functions_against_exact_tables(tmp_path):
    """dot8(a word, prep_b(b word)) == 4 x the exact dot product of the 8 e2m1 pairs, for every
    code pair at every nibble position and for random words; e4m3(code) == the e4m3 value bit for
    bit for all 256 codes (NaN for 0x7F and 0xFF)."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if not cxx:
        pytest.skip("no C++ compiler (g++) here to build the decode on the host")
    src = tmp_path / "decode.cpp"
    src.write_text(HOST_SHIMS + starter.DECODE_SRC + HOST_MAIN)
    exe = tmp_path / "decode"
    subprocess.run([cxx, "-std=c++17", "-O1", "-Wno-unknown-pragmas", str(src), "-o", str(exe)], check=True)

    pairs = [(ca << (4 * p), cb << (4 * p)) for p in range(8) for ca in range(16) for cb in range(16)]
    rng = random.Random(11)
    pairs += [(rng.getrandbits(32), rng.getrandbits(32)) for _ in range(20000)]
    lines = [f"d {wa:x} {wb:x}" for wa, wb in pairs] + [f"e {code:x} 0" for code in range(256)]
    out = subprocess.run([str(exe)], input="\n".join(lines) + "\n", capture_output=True, text=True,
                         check=True).stdout.split()
    assert len(out) == len(lines)

    table = np.array(E2M1_VALUES, dtype=np.float64)
    expected = [4 * float(np.dot(table[_codes(wa)], table[_codes(wb)])) for wa, wb in pairs]
    got = [float(int(v)) for v in out[:len(pairs)]]
    wrong = [(hex(wa), hex(wb), g, e) for (wa, wb), g, e in zip(pairs, got, expected, strict=True) if g != e]
    assert not wrong, f"{len(wrong)} wrong dot8 results, first: {wrong[:5]}"

    values = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float().tolist()
    for code, bits in enumerate(out[len(pairs):]):
        got = struct.unpack("<f", int(bits, 16).to_bytes(4, "little"))[0]
        want = values[code]
        if want != want:
            assert got != got, f"e4m3 code {code:#04x}: {got}, not NaN"
        else:
            assert struct.pack("<f", got) == struct.pack("<f", want), f"e4m3 code {code:#04x}: {got} != {want}"


def _expected(data):
    return reference.ref_kernel(data[:6] + (data[6].clone(),))


def _uniform(m, k, l, a_byte, b_byte, sa_code, sb_code, device="cuda"):
    """Every byte of a, b and of each scale tensor (plain and permuted) set to one value."""
    data = make_input(m, k, l, 5, device)
    for i, byte in ((0, a_byte), (1, b_byte), (2, sa_code), (3, sb_code), (4, sa_code), (5, sb_code)):
        data[i].view(torch.uint8).fill_(byte)
    return data


# (a byte, b byte, sfa code, sfb code): sums of equal terms, exact in fp32, so every config must
# give the reference's answer bit for bit (inf where it overflows fp16).
EXTREMES = [
    (0x77, 0x77, 0x01, 0x01),  # 6 x 6 everywhere, both scales 2^-9: the smallest scale product
    (0x77, 0xFF, 0x7E, 0x01),  # 6 x -6, 448 x 2^-9
    (0x77, 0x77, 0x7E, 0x7E),  # the largest values and scales: c overflows fp16 to inf
    (0xF7, 0x77, 0x7E, 0x7E),  # (6, -6) . (6, 6): every pair cancels, 0
]
EXTREME_IDS = ("max-values-min-scales", "signed-max-min", "max-values-max-scales", "cancelling")


# The whole kernel on the host: each warp's 32 lanes as 32 coroutines on one thread (ucontext),
# blocks and warps one after another; a shuffle is a barrier at which each lane hands over to the
# next, so every lane has written its value before any reads one. Only the fp16 conversion's inline
# PTX is replaced. (Lanes as 32 OS threads, a condition variable for the barrier, took 20 of the
# 22 CPU-s of test_whole_kernel_on_the_host_every_config in thread switches.)
HOST_KERNEL_SHIMS = r"""
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <ucontext.h>
#include <vector>
#define __global__
#define __launch_bounds__(n)
#define __restrict__ __restrict
struct uint4 { unsigned x, y, z, w; };
struct D3 { unsigned x, y, z; };
static D3 threadIdx, blockIdx;
static float slots[32];
static ucontext_t lane_ctx[32], main_ctx;
static bool lane_done[32];
static unsigned warp_first = 0;  // threadIdx.x of lane 0 of the warp running
static int lane_now = 0;
static void run_lane(int lane) {  // the calling context is suspended; lane resumes (or starts)
  lane_now = lane;
  threadIdx = {warp_first + lane, 0, 0};
}
static void warp_barrier() {  // this lane waits; the next one runs up to its own barrier
  const int me = lane_now, next = (me + 1) % 32;
  if (lane_done[next]) {
    std::fprintf(stderr, "lane %d finished while lane %d waits at a barrier\n", next, me);
    std::exit(3);
  }
  run_lane(next);
  swapcontext(&lane_ctx[me], &lane_ctx[next]);
  run_lane(me);
}
static float __shfl_xor_sync(unsigned, float v, int o) {
  const unsigned lane = threadIdx.x % 32;
  slots[lane] = v;
  warp_barrier();
  const float r = slots[lane ^ o];
  warp_barrier();
  return r;
}
template <class T> static T __ldg(const T* p) { return *p; }
static unsigned short host_f16(float f) {  // round to nearest even, as cvt.rn.f16.f32
  _Float16 h = (_Float16)f;
  unsigned short u;
  std::memcpy(&u, &h, 2);
  return u;
}
"""

HOST_KERNEL_MAIN = r"""
static std::vector<unsigned char> slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(f), {});
}
static unsigned char *arg_a, *arg_b, *arg_sfa, *arg_sfb, *arg_c;
static long long s[9];
static void lane_main() {
  starter_gemv(arg_a, arg_b, arg_sfa, arg_sfb, (u16*)arg_c, (int)s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7],
               s[8]);
  lane_done[lane_now] = true;  // then back to main_ctx (uc_link)
}
int main(int argc, char** argv) {  // DIR GRID_X GRID_Y and the kernel's 9 scalars
  std::string dir = argv[1];
  unsigned gx = std::stoul(argv[2]), gy = std::stoul(argv[3]);
  for (int i = 0; i < 9; ++i) s[i] = std::stoll(argv[4 + i]);
  auto a = slurp(dir + "/a"), b = slurp(dir + "/b"), sfa = slurp(dir + "/sfa"), sfb = slurp(dir + "/sfb"),
       c = slurp(dir + "/c");
  arg_a = a.data(), arg_b = b.data(), arg_sfa = sfa.data(), arg_sfb = sfb.data(), arg_c = c.data();
  static char stacks[32][1 << 16];
  for (unsigned y = 0; y < gy; ++y)
    for (unsigned x = 0; x < gx; ++x)
      for (unsigned w = 0; w < THREADS / 32; ++w) {
        blockIdx = {x, y, 0};
        warp_first = 32 * w;
        for (int t = 0; t < 32; ++t) {
          getcontext(&lane_ctx[t]);
          lane_ctx[t].uc_stack.ss_sp = stacks[t];
          lane_ctx[t].uc_stack.ss_size = sizeof stacks[t];
          lane_ctx[t].uc_link = &main_ctx;
          makecontext(&lane_ctx[t], lane_main, 0);
          lane_done[t] = false;
        }
        for (int t = 0; t < 32; ++t) {  // lane 0 first; the lanes after it finish from their last barrier
          if (lane_done[t]) continue;
          run_lane(t);
          swapcontext(&main_ctx, &lane_ctx[t]);
        }
      }
  std::ofstream(dir + "/c", std::ios::binary).write((const char*)c.data(), c.size());
  return 0;
}
"""

F16_PTX = 'asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(s * 0.25f));'


def _host_kernel(cxx: str, cfg, tmp_path: Path) -> Path:
    kernel = starter.KERNEL_SRC
    assert kernel.count(F16_PTX) == 1, "the fp16 conversion the host build replaces has changed"
    src = tmp_path / "kernel.cpp"
    src.write_text(HOST_SHIMS + HOST_KERNEL_SHIMS + starter.DECODE_SRC
                   + kernel.replace(F16_PTX, "h = host_f16(s * 0.25f);") + HOST_KERNEL_MAIN)
    exe = tmp_path / f"kernel_{cfg.threads}_{cfg.lanes_per_row}_{cfg.rows_per_lane}"
    defines = [f"-DTHREADS={cfg.threads}", f"-DLANES_PER_ROW={cfg.lanes_per_row}",
               f"-DROWS_PER_LANE={cfg.rows_per_lane}", f"-DROWS_PER_BLOCK={cfg.rows_per_block}"]
    subprocess.run([cxx, "-std=c++20", "-O1", "-fno-strict-aliasing", "-Wno-unknown-pragmas", *defines,
                    str(src), "-o", str(exe)], check=True)
    return exe


def _storage_bytes(t: torch.Tensor) -> bytes:
    assert t.storage_offset() == 0
    return torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage()).numpy().tobytes()


def _host_run(exe: Path, data, tmp_path: Path) -> torch.Tensor:
    """The host-built kernel on ``data`` (its tensors' memory as it is), c poisoned (NaN) first."""
    a, b, sfa, sfb, _, _, c = data
    c.fill_(float("nan"))
    _, grid, scalars = starter.launch_plan(a, b, sfa, sfb, c)
    for name, t in (("a", a), ("b", b), ("sfa", sfa), ("sfb", sfb), ("c", c)):
        (tmp_path / name).write_bytes(_storage_bytes(t))
    subprocess.run([str(exe), str(tmp_path), *map(str, grid), *map(str, scalars)], check=True, timeout=300)
    raw = torch.frombuffer(bytearray((tmp_path / "c").read_bytes()), dtype=torch.float16)
    return raw.as_strided(c.shape, c.stride())


def test_whole_kernel_on_the_host_every_config(tmp_path, monkeypatch):
    """Every config's kernel, built for the host, on generate_input's own memory layouts (plain
    scales, permuted a/b/c views) with c poisoned (NaN): on full-range values the float64
    reference's answer at the kernel tolerance, for K spread unevenly over the lanes of a row; on
    the extreme uniform values of the GPU test below, that answer bit for bit."""
    cxx = shutil.which("g++")
    if not cxx:
        pytest.skip("no g++ here to build the kernel for the host")
    for cfg in dict.fromkeys(_configs()):
        exe = _host_kernel(cxx, cfg, tmp_path)
        monkeypatch.setattr(starter, "DEFAULT", cfg)
        for m, k, l in ((128, 64, 3), (256, 1088, 2), (128, 2048, 1)):
            data = make_input(m, k, l, m + k + cfg.threads, "cpu", "full-range")
            out = _host_run(exe, data, tmp_path)
            reasons = verbose_allclose(out, _expected(data), rtol=KERNEL_RTOL, atol=KERNEL_ATOL)
            assert not reasons, f"{cfg} {m}x{k}x{l}:\n" + "\n".join(reasons)
        for codes in EXTREMES:
            data = _uniform(128, 16384, 2, *codes, device="cpu")
            out, expected = _host_run(exe, data, tmp_path), _expected(data)
            assert torch.equal(out.view(torch.int16), expected.view(torch.int16)), (cfg, codes, out[:2, 0, 0],
                                                                                    expected[:2, 0, 0])


# --------------------------------------------------------------------------- GPU

def _run(data):
    """The starter with c poisoned (NaN) first: an element the kernel does not write fails."""
    data[6].fill_(float("nan"))
    out = starter.custom_kernel(data)
    torch.cuda.synchronize()
    assert out.data_ptr() == data[6].data_ptr(), "the starter writes into c"
    return out.clone()


@gpu
@pytest.mark.parametrize("m, k, l, seed", OFFICIAL_TESTS + BENCHMARKS)
@pytest.mark.parametrize("dist", ["official", "full-range"])
def test_gpu_every_shape_against_the_float64_reference(m, k, l, seed, dist):
    data = make_input(m, k, l, seed, "cuda", dist)
    first = _run(data)
    reasons = verbose_allclose(first, _expected(data), rtol=KERNEL_RTOL, atol=KERNEL_ATOL)
    assert not reasons, "\n".join(reasons)
    again = _run(data)
    assert torch.equal(first.view(torch.int16), again.view(torch.int16)), "repeats differ"


@gpu
@pytest.mark.parametrize("a_byte, b_byte, sa_code, sb_code", EXTREMES, ids=EXTREME_IDS)
def test_gpu_every_config_exact_on_extreme_values(a_byte, b_byte, sa_code, sb_code, monkeypatch):
    """EXTREMES on the GPU: every config gives the reference's answer bit for bit."""
    for cfg in _configs():
        monkeypatch.setattr(starter, "DEFAULT", cfg)
        monkeypatch.setattr(starter, "_LAUNCHES", {})
        for m, k, l in ((128, 1024, 1), (256, 16384, 2)):
            data = _uniform(m, k, l, a_byte, b_byte, sa_code, sb_code)
            out, expected = _run(data), _expected(data)
            assert torch.equal(out.view(torch.int16), expected.view(torch.int16)), (cfg, out[:2, 0, 0],
                                                                                    expected[:2, 0, 0])


@gpu
def test_gpu_nan_scale_gives_nan_in_its_row_only():
    data = make_input(256, 1024, 2, 9, "cuda", "full-range")
    data[2][5, 3, 1] = torch.tensor(0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn)
    out = _run(data)
    assert torch.isnan(out[5, 0, 1])
    reasons = verbose_allclose(out, _expected(data), rtol=KERNEL_RTOL, atol=KERNEL_ATOL)
    assert not reasons, "\n".join(reasons)


@gpu
def test_gpu_bad_layout_and_device_are_named():
    data = make_input(128, 256, 1, 3, "cuda")
    a = data[0]
    store = torch.empty(a.numel() + 16, dtype=torch.uint8, device="cuda")
    shifted = store[8:8 + a.numel()].view(a.shape).view(a.dtype)  # 8 bytes past 16-byte alignment
    with pytest.raises(ValueError, match="a must have unit stride along K and a 16-byte aligned"):
        starter.custom_kernel((shifted,) + data[1:])
    with pytest.raises(ValueError, match="must be on one device"):
        starter.custom_kernel(data[:6] + (data[6].cpu(),))
