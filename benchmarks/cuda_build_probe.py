"""How to build the cuda backend: NVRTC through ctypes (what submission.py does) against
torch.utils.cpp_extension.load_inline, measured (needs a CUDA GPU, nvcc and ninja for the
second). Prints compile time (cold: a fresh build folder), host cost per launch, and device
time of the same kernel launched both ways (they must agree), beside a bare Triton launch.

Usage: python3 benchmarks/cuda_build_probe.py [--skip-load-inline]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

if not __package__:  # run as `python3 benchmarks/NAME.py`: kitpath puts the kit's root on sys.path
    import kitpath  # noqa: F401

import harness  # noqa: E402  the CUDA question, asked without torch where no driver is

# torch, the submission and what imports them are imported once the GPU is there (main):
# --help and the refusal on a machine without one import none of them.
CFG_FIELDS = {"lpr": 32, "rpt": 1, "u": 8, "warps": 4, "decode": "dp4a"}  # the config built both ways
SHAPE = (7168, 16384, 1)


def load_inline_module(build_dir: str, cfg):
    """The same kernel source (``cfg``), built as a torch extension with a C++ launcher."""
    import torch
    from torch.utils.cpp_extension import load_inline

    import submission
    name, source = submission.cuda_kernel(cfg, True, True)
    launcher = f"""
#include <torch/extension.h>
void launch(torch::Tensor a, torch::Tensor b, torch::Tensor sfa, torch::Tensor sfb, torch::Tensor c,
            int64_t chunks, int64_t a_rs, int64_t a_bs, int64_t b_bs, int64_t sfa_rs, int64_t sfa_bs,
            int64_t sfb_bs, int64_t c_rs, int64_t c_bs, int64_t gx, int64_t gy, int64_t threads) {{
  {name}<<<dim3(gx, gy), threads>>>((const unsigned char*)a.data_ptr(), (const unsigned char*)b.data_ptr(),
      (const unsigned char*)sfa.data_ptr(), (const unsigned char*)sfb.data_ptr(), (u16*)c.data_ptr(),
      (int)chunks, a_rs, a_bs, b_bs, sfa_rs, sfa_bs, sfb_bs, c_rs, c_bs, 0u);
}}
"""
    cap = torch.cuda.get_device_capability()
    flags = [f"-gencode=arch=compute_{cap[0]}{cap[1]}a,code=sm_{cap[0]}{cap[1]}a", "-std=c++17",
             "-DHAS_E2M1_CVT=0"]
    return load_inline("nvfp4_probe", cpp_sources="void launch(torch::Tensor a, torch::Tensor b, torch::Tensor sfa, "
                       "torch::Tensor sfb, torch::Tensor c, int64_t chunks, int64_t a_rs, int64_t a_bs, int64_t b_bs, "
                       "int64_t sfa_rs, int64_t sfa_bs, int64_t sfb_bs, int64_t c_rs, int64_t c_bs, int64_t gx, "
                       "int64_t gy, int64_t threads);",
                       cuda_sources=source + launcher, functions=["launch"], extra_cuda_cflags=flags,
                       build_directory=build_dir, verbose=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 benchmarks/cuda_build_probe.py", description=__doc__.split("Usage:")[0])
    ap.add_argument("--skip-load-inline", action="store_true", help="time NVRTC only")
    args = ap.parse_args(argv)
    if not harness.cuda_available():
        print("cuda_build_probe.py needs a CUDA GPU (it launches the kernel both ways); this machine has none",
              file=sys.stderr)
        return 2
    import torch

    import reference
    import submission
    from benchmarks import refusals, timing
    base = submission.CudaConfig(**CFG_FIELDS)
    problem = refusals.build_problem(submission, base, submission.cuda_arch(torch.cuda.get_device_capability()))
    if problem:  # before anything is printed or launched
        print(f"cuda_build_probe.py: {problem}", file=sys.stderr)
        return 2
    m, k, l = SHAPE
    data = reference.generate_input(m, k, l, 1, device="cuda")
    submission.check_inputs(data)
    print(f"NVRTC {submission.nvrtc_version()} from {submission.nvrtc_candidates()[0]}")
    compile_s = []
    for cfg in (base, base._replace(rpt=2, u=4), base._replace(u=4, warps=8)):
        name, source = submission.cuda_kernel(cfg, True, True)
        t0 = time.perf_counter()
        submission.cuda_compile(source, submission.cuda_arch(torch.cuda.get_device_capability()))
        compile_s.append(time.perf_counter() - t0)
    print("NVRTC compile, s per config: " + ", ".join(f"{s:.3f}" for s in compile_s))
    nvrtc = lambda d: submission.run_backend("cuda", d, base)  # noqa: E731
    nvrtc(data)
    torch.cuda.synchronize()
    expected = data[6].clone()
    a, b, sfa, sfb, _, _, c = data
    os.environ.pop("NVFP4_GEMV_BACKEND", None)
    submission.custom_kernel(data)  # first call: checks, race, fast path registered
    small = reference.generate_input(128, 256, 1, 1, device="cuda")
    submission.custom_kernel(small)
    print(f"host us/call on 128x256x1 (device work ~2 us, so the host sets the pace): custom_kernel "
          f"{min(timing.host_cost(submission.custom_kernel, small) for _ in range(3)):.2f}, bare Triton launch "
          f"{min(timing.bare_launch_host_cost() for _ in range(3)):.2f}")
    print(f"host us/call: run_backend path {timing.host_cost(nvrtc, data):.2f}, "
          f"custom_kernel (fast path) {timing.host_cost(submission.custom_kernel, data):.2f}, "
          f"bare Triton launch {timing.bare_launch_host_cost():.2f}")
    sets = [reference.generate_input(m, k, l, 1 + i, device="cuda") for i in range(8)]
    print(f"device us (NVRTC build): {timing.median(timing.device_times(nvrtc, sets)):.2f}")
    if args.skip_load_inline:
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 4))
        t0 = time.perf_counter()
        try:
            mod = load_inline_module(tmp, base)
        except Exception as exc:  # report, don't hide: the comparison is the point
            print(f"load_inline failed after {time.perf_counter() - t0:.1f} s: {type(exc).__name__}: {str(exc)[:500]}")
            return 1
        print(f"load_inline build (cold, MAX_JOBS={os.environ['MAX_JOBS']}): {time.perf_counter() - t0:.1f} s")
        rs = (data[2].stride(0), data[2].stride(2), data[3].stride(2))
        grid = (m // base.rows, l)

        def ext(d):
            a, b, sfa, sfb, _, _, c = d
            mod.launch(a, b, sfa, sfb, c, k // 32, a.stride(0), a.stride(2), b.stride(2), *rs, c.stride(0),
                       c.stride(2), grid[0], grid[1], 32 * base.warps)
            return c

        data[6].fill_(float("nan"))
        ext(data)
        torch.cuda.synchronize()
        print(f"load_inline output equals the NVRTC build's: {torch.equal(data[6], expected)}")
        print(f"host us/call: load_inline launch {timing.host_cost(ext, data):.2f}")
        print(f"device us (load_inline build): {timing.median(timing.device_times(ext, sets)):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
