"""The cuda backend of submission.py.

CPU (CI): the dispatch logic with the build stubbed (a forced backend that cannot build
raises with the compiler's message; auto skips it with one warning and uses the next), and,
where NVRTC is installed (CI installs the pip wheel), a compile of every variant the backend
can launch for sm_90a and sm_100a, with the Blackwell build's machine code checked for the
e2m1 conversion it was written to use. GPU (requires_cuda): every official test shape and
the benchmark shapes, odd L, full-range and gaussian data against the exact reference with
c poisoned, both decodes, every candidate config, plain and permuted scales, bit-identical
repeats, NaN scales, and bad input.
"""

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from conftest import BENCHMARKS, HAS_CUDA, OFFICIAL_TESTS, kernel_backends, make_input, requires_cuda, set_backend
from tolerances import KERNEL_ATOL, KERNEL_RTOL

import reference
import submission
from utils import verbose_allclose


def _gen(m, k, l, seed, dist="official", device="cuda"):
    return make_input(m, k, l, seed, device, dist)


def _expected(data):
    return reference.ref_kernel(data[:6] + (data[6].clone(),))


def _run(data, cfg=None):
    """The cuda backend with c poisoned (NaN): unwritten elements fail the comparison."""
    data[6].fill_(float("nan"))
    out = submission.run_backend("cuda", data, cfg)
    torch.cuda.synchronize()
    return out


def _assert_close(out, data):
    assert out.data_ptr() == data[6].data_ptr(), "the cuda backend writes into c"
    reasons = verbose_allclose(out, _expected(data), rtol=KERNEL_RTOL, atol=KERNEL_ATOL)
    assert not reasons, "\n".join(reasons)


def _cpu_scales(data):
    """The same inputs with the plain scales on the CPU (the kernel then reads the permuted)."""
    return data[:2] + (data[2].cpu(), data[3].cpu()) + data[4:]


# --------------------------------------------------------------------------- CPU: dispatch

def test_forced_cuda_backend_off_gpu_says_why(monkeypatch):
    monkeypatch.setenv("NVFP4_GEMV_BACKEND", "cuda")
    with pytest.raises(RuntimeError, match="NVFP4_GEMV_BACKEND=cuda cannot run on cpu: .*CUDA GPU"):
        submission.select_backend(torch.device("cpu"))


def test_forced_cuda_backend_that_cannot_build_raises_the_compiler_message(monkeypatch):
    """A compile error reaches the caller with NVRTC's log (here: a stub compiler)."""
    def broken(source, arch, defines=None):
        raise submission.CudaBuildError("NVRTC could not compile the cuda backend for sm_90a:\nline 1: error: nope")

    monkeypatch.setattr(submission, "cuda_compile", broken)
    monkeypatch.setattr(submission, "_CUDA_FUNCS", {})
    monkeypatch.setattr(submission, "_CUDA_LAUNCH", {})
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (9, 0))
    with pytest.raises(submission.CudaBuildError, match="error: nope"):
        submission._cuda_function(torch.device("cuda", 0), (32, 1, 8, 4, 0), True, True)


def test_auto_skips_a_backend_that_fails_to_build_with_one_warning(monkeypatch, capsys):
    """The race builds every supported kernel backend first; one whose build raises is
    skipped, said once on stderr, and not tried again for the process; the others race."""
    warmed, raced = [], []

    def fake_warm(name, data, m, k, l):
        warmed.append(name)
        if name == "cuda":
            raise submission.CudaBuildError("NVRTC could not compile: stub")
        return submission._torch_run(data, m, k, l)  # a right answer: passes the first-use check

    def fake_race(names, data, m, k, l):
        raced.append(list(names))
        return {n: 1.0 for n in names}

    monkeypatch.setattr(submission, "_warm_backend", fake_warm)
    monkeypatch.setattr(submission, "_race", fake_race)
    monkeypatch.setattr(submission, "_FASTEST", {})
    monkeypatch.setattr(submission, "_BROKEN", {})
    set_backend(monkeypatch, submission, "cuda", supported=lambda d: (not submission._BROKEN.get("cuda"), "broken"))
    set_backend(monkeypatch, submission, "triton", supported=lambda d: (True, ""))
    set_backend(monkeypatch, submission, "scaled_mm", supported=lambda d: (True, ""))
    d1 = _gen(128, 256, 1, 1, device="cpu")
    d2 = _gen(128, 512, 1, 1, device="cpu")
    assert submission._fastest(d1, 128, 256, 1) == "triton"
    assert submission._fastest(d2, 128, 512, 1) == "triton"
    assert warmed == ["cuda", "triton", "scaled_mm", "triton", "scaled_mm"]
    assert raced == [["triton", "scaled_mm"], ["triton", "scaled_mm"]]
    err = capsys.readouterr().err
    assert err.count("the cuda backend failed here and is skipped") == 1 and "stub" in err


def test_fastest_is_measured_once_per_shape_and_cached(monkeypatch):
    raced = []

    def fake_race(names, data, m, k, l):
        raced.append((tuple(names), k))
        return {"cuda": 1.0, "triton": 2.0, "scaled_mm": 0.5 if k == 256 else 3.0}

    monkeypatch.setattr(submission, "_warm_backend", lambda name, data, *mkl: submission._torch_run(data, *mkl))
    monkeypatch.setattr(submission, "_race", fake_race)
    monkeypatch.setattr(submission, "_FASTEST", {})
    for name in kernel_backends(submission):
        set_backend(monkeypatch, submission, name, supported=lambda d: (True, ""))
    d1 = _gen(128, 256, 1, 1, device="cpu")
    d2 = _gen(128, 512, 1, 1, device="cpu")
    assert submission._fastest(d1, 128, 256, 1) == "scaled_mm"
    assert submission._fastest(d1, 128, 256, 1) == "scaled_mm"
    assert submission._fastest(d2, 128, 512, 1) == "cuda"
    assert raced == [(tuple(kernel_backends(submission)), 256), (tuple(kernel_backends(submission)), 512)]


def test_auto_is_torch_on_cpu_and_a_race_on_cuda(monkeypatch):
    monkeypatch.delenv("NVFP4_GEMV_BACKEND", raising=False)
    assert submission.select_backend(torch.device("cpu")) == "torch"
    assert submission.select_backend(torch.device("cuda", 0)) == "fastest"


def test_pinned_config_and_candidates(monkeypatch):
    monkeypatch.setenv("NVFP4_GEMV_CONFIG", "triton=8,128,2,1;cuda=32,1,8,4,0")
    assert submission._pinned_config("cuda") == submission.CudaConfig(lpr=32, rpt=1, u=8, warps=4, decode="dp4a")
    assert submission._pinned_config("triton") == submission.TritonConfig(block_m=8, block_g=128, warps=2)
    monkeypatch.setenv("NVFP4_GEMV_CONFIG", "triton=block_m=8,block_g=128,warps=2;cuda=lpr=32,rpt=1,u=8,warps=4")
    assert submission._pinned_config("cuda") == submission.CudaConfig(lpr=32, rpt=1, u=8, warps=4)  # decode: the GPU's
    assert submission._pinned_config("triton") == submission.TritonConfig(block_m=8, block_g=128, warps=2)
    for m, k, l, _ in BENCHMARKS + OFFICIAL_TESTS:
        for cap in ((9, 0), (10, 0)):
            cands = submission.BACKENDS["cuda"].candidates(m, k, l, cap)
            assert cands[0] == submission._cuda_default(m, k, l, cap)
            for cfg in cands:
                assert isinstance(cfg, submission.CudaConfig) and cfg.problem() == "", cfg
                assert m % cfg.rows == 0 and cfg.rows <= 128 and cfg.lpr <= max(2, k // 32), cfg
                assert cfg.decode in ("dp4a", "f16x2", "dp4a-sr", "dp4a-sr2") and cfg.fits(m, k), cfg


def test_b200_candidates_hold_the_leaders_geometry_for_each_benchmark_k():
    """On compute capability 10.x the tuner also times the public leaders' threads and rows per
    block for the benchmark shape's K (CUDA_LEADERS); on Hopper it does not."""
    for m, k, l, _ in BENCHMARKS:
        b200 = submission.BACKENDS["cuda"].candidates(m, k, l, (10, 0))
        hopper = submission.BACKENDS["cuda"].candidates(m, k, l, (9, 0))
        leaders = [c.with_decode((10, 0)) for c in submission.CUDA_LEADERS[k]]
        assert leaders and all(c in b200 for c in leaders), (m, k, l)
        assert not any(c.load == "nc_no_allocate" and c in hopper for c in leaders)
        assert len(b200) == len(set(b200))


def _stub_cuda_launches(monkeypatch) -> tuple[list, list]:
    """The cuda backend up to the driver call, on the CPU: a kernel is its name, and a launch
    records what it was built with (``built``: name, grid, threads, scalars, scratch) and the data
    pointers of each call (``launched``)."""
    built, launched = [], []

    class FakeLaunch:
        def __init__(self, fn, grid, threads, scalars, scratch=None, groups=0):
            built.append((fn, grid, threads, scalars, scratch))

        def __call__(self, *ptrs):
            launched.append([p.data_ptr() for p in ptrs])

    monkeypatch.setattr(submission, "_CUDA_LAUNCH", {})
    monkeypatch.setattr(submission, "_CudaLaunch", FakeLaunch)
    monkeypatch.setattr(submission, "_cuda_function", lambda dev, cfg, full, plain, probe=False:
                        submission.cuda_kernel(cfg, full, plain, probe)[0])
    monkeypatch.setattr(torch.cuda, "current_device", lambda: None)
    return built, launched


@pytest.mark.parametrize("cfg", [(32, 1, 8, 4, 0), (16, 2, 4, 2, 1), (8, 4, 2, 4, 0, 2, 1, True),
                                 (32, 2, 4, 4, 0, 1, 4, False), (8, 2, 4, 1, 3, 1, 2, 0, 2, 1, 8),
                                 (32, 1, 1, 1, 2, 1, 2, 0, 0, 0, 1, 2)])
@pytest.mark.parametrize("cpu_scales", [False, True])
def test_cuda_launch_plumbing_with_a_stub_kernel(cfg, cpu_scales, monkeypatch):
    """Everything of the cuda backend up to the driver call, on the CPU: the kernel's name
    and source for the config, the grid, the scalar arguments (plain or permuted scale
    strides) and the five pointers of each call."""
    built, launched = _stub_cuda_launches(monkeypatch)
    m, k, l = 256, 1536, 3
    data = _gen(m, k, l, 1, device="cpu")
    plain = not cpu_scales
    if cpu_scales:  # plain scales elsewhere than a: here, the wrong dtype stands for "unusable"
        data = data[:2] + (data[2].view(torch.uint8), data[3]) + data[4:]
    for _ in range(2):
        submission._cuda_run(data, m, k, l, cfg)
    (name, grid, threads, scalars, scratch), = built
    cfg = submission.CudaConfig.of(cfg)
    decode = cfg.decode.replace("-", "_")
    assert name.startswith(f"nvfp4_gemv_lpr{cfg.lpr}_rpt{cfg.rpt}_u{cfg.u}_w{cfg.warps}_{decode}_v{cfg.v}_{cfg.load}_"
                           f"{cfg.pipe}")
    assert name.endswith(("_full" if (k // 32) % (cfg.lpr * cfg.u) == 0 else "_tail")
                         + ("_plain" if plain else "_permuted"))
    # K split: ks warps per row group, kb blocks (grid z) per row group
    assert grid == (m // cfg.rows, l, cfg.kb) and threads == 32 * cfg.warps * cfg.ks
    if cfg.kb == 1:
        assert scratch is None
    else:  # the blocks' partial sums (l * kb * m floats), one arrival counter per row group, zeroed
        part, cnt = scratch
        assert part.dtype == torch.float32 and part.numel() == l * cfg.kb * m
        assert cnt.dtype == torch.int32 and cnt.numel() == l * m // cfg.rows and not cnt.any()
        assert f"_kb{cfg.kb}_" in name
    a, b, sfa, sfb, sfa_p, sfb_p, c = data
    assert scalars[:4] == (k // 32, a.stride(0), a.stride(2), b.stride(2))
    if plain:
        assert scalars[4:7] == (sfa.stride(0), sfa.stride(2), sfb.stride(2))
        assert launched[0] == [t.data_ptr() for t in (a, b, sfa, sfb, c)]
    else:
        assert scalars[4:7] == (0, m * k // 16, 128 * k // 16)
        assert launched[0] == [t.data_ptr() for t in (a, b, sfa_p, sfb_p, c)]
    assert len(launched) == 2


def _shifted_plain_scales(data, offset):
    """The same inputs with sfa moved to a buffer ``offset`` bytes past an aligned address."""
    sfa = data[2]
    buf = torch.zeros(sfa.numel() + 16, dtype=torch.uint8, device=sfa.device)
    moved = torch.as_strided(buf[offset:].view(sfa.dtype), sfa.shape, sfa.stride())
    moved.copy_(sfa)
    return data[:2] + (moved,) + data[3:]


@pytest.mark.parametrize("offset, plain", [(0, True), (4, True), (2, False)])
def test_plain_scales_are_read_only_when_4_byte_aligned(offset, plain, monkeypatch):
    """Configs with V = 2 read two chunks' scale pairs as one 4-byte word: plain scales 2 bytes
    past a 4-byte boundary would fault, so the cuda backend reads the permuted ones there."""
    monkeypatch.setattr(submission, "_CUDA_LAUNCH", {})
    monkeypatch.setattr(submission, "_CudaLaunch", lambda *args: None)
    monkeypatch.setattr(submission, "_cuda_function", lambda *args: None)
    data = _shifted_plain_scales(_gen(128, 512, 2, 1, device="cpu"), offset)
    assert data[2].data_ptr() % 4 == offset % 4
    _, sfa_index = submission._cuda_prepared(data, 128, 512, 2, (16, 2, 2, 2, 0, 2, 2, 0, 0))
    assert sfa_index == (2 if plain else 4)


def test_config_choice_measured_table_tuner_default_and_pin(monkeypatch):
    """A GPU model in the measured table uses its entry; an unknown one times the candidates on
    a large shape (here a stub tuner) and takes the default on a small one; the pick is cached
    per process; NVFP4_GEMV_CONFIG overrides all of it."""
    tuned = []
    big = (7168, 2048, 4)
    entry = submission.CudaConfig(lpr=8, rpt=1, u=4, warps=2, decode="dp4a-sr2", v=1, pipe="ptxas", minb=16, bsh=True)
    monkeypatch.setitem(submission.CUDA_MEASURED, "NVIDIA H100 80GB HBM3", {big: entry})  # an entry of this kernel
    monkeypatch.setitem(submission._ENTRIES, ("cuda", "NVIDIA H100 80GB HBM3", big),
                        {"kernel": submission.kernel_revision()})
    monkeypatch.setattr(submission, "_CHOSEN", {})
    monkeypatch.setattr(submission, "_tune", lambda name, data, m, k, l, cands: tuned.append((name, m)) or cands[-1])
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (9, 0))
    data = [types.SimpleNamespace(device=torch.device("cuda", 0))]
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "NVIDIA H100 80GB HBM3")
    assert submission.config_for("cuda", data, *big) == entry
    monkeypatch.setattr(submission, "_CHOSEN", {})
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "NVIDIA B200")
    cands = submission.BACKENDS["cuda"].candidates(*big, (9, 0))
    assert submission.config_for("cuda", data, *big) == cands[-1]
    assert submission.config_for("cuda", data, *big) == cands[-1] and tuned == [("cuda", 7168)]
    assert submission.config_for("cuda", data, 128, 256, 1) == submission._cuda_default(128, 256, 1, (9, 0))
    assert tuned == [("cuda", 7168)]  # small shapes are not tuned
    monkeypatch.setattr(submission, "_CHOSEN", {})
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "NVIDIA H100 80GB HBM3")
    monkeypatch.setenv("NVFP4_GEMV_TUNE", "force")  # the table is known, but the candidates are timed
    assert submission.config_for("cuda", data, *big) == cands[-1] and len(tuned) == 2
    monkeypatch.setattr(submission, "_CHOSEN", {})
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "NVIDIA B200")
    monkeypatch.setenv("NVFP4_GEMV_TUNE", "off")  # unknown GPU, nothing timed: the default
    assert submission.config_for("cuda", data, *big) == cands[0] and len(tuned) == 2
    monkeypatch.setenv("NVFP4_GEMV_CONFIG", "cuda=32,1,8,4,0")
    pinned = submission.CudaConfig(lpr=32, rpt=1, u=8, warps=4, decode="dp4a")
    assert submission.config_for("cuda", data, *big) == pinned


def test_cuda_source_never_holds_the_forbidden_word():
    for cfg, full, plain in submission.cuda_compile_variants():
        assert "stream" not in submission.cuda_kernel(cfg, full, plain)[1].lower()


# --------------------------------------------------------------------------- CPU: compile gate

def _nvrtc_or_skip():
    try:
        submission.find_nvrtc()
    except submission.CudaBuildError as exc:
        why = f"NVRTC is not installed here ({str(exc)[:80]}); the dev extra installs the nvidia-cuda-nvrtc wheel"
        if os.environ.get("CI"):
            pytest.fail(why + " (under CI the gate needs it)")
        pytest.skip(why)


def _cuobjdump():
    from benchmarks.sass_count import cuobjdump
    return cuobjdump() or None


def test_shared_cubins_give_back_the_first_compile_and_never_a_failure(shared_cubins):
    """The run's cubin folder (conftest.shared_cubins): after a source's first compile its cubin
    is a file there, and the next call for the same source and arch returns that file (here
    overwritten, to show it is read); another arch compiles anew; a source that does not
    compile raises each time and leaves no file."""
    _nvrtc_or_skip()
    folder = Path(os.environ["KIT_TEST_CUBINS"])
    source = f'extern "C" __global__ void shared_cubins_probe(int *x) {{ x[0] = {os.getpid()}; }}\n'
    before = set(folder.iterdir())
    first = submission.cuda_compile(source, "sm_90a")
    (new,) = set(folder.iterdir()) - before
    assert first[:4] == b"\x7fELF" and new.read_bytes() == first
    new.write_bytes(b"remembered")
    assert submission.cuda_compile(source, "sm_90a") == b"remembered"
    assert submission.cuda_compile(source, "sm_100a")[:4] == b"\x7fELF"
    files = set(folder.iterdir())
    for _ in range(2):
        with pytest.raises(submission.CudaBuildError):
            submission.cuda_compile(source.replace("x[0]", "no_such_name"), "sm_90a")
    assert set(folder.iterdir()) == files


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_every_cuda_variant_compiles(arch, tmp_path, monkeypatch):
    """Every config, layout and tail variant the backend can launch compiles for Hopper and
    Blackwell (NVRTC needs no GPU), as `python3 eval.py compile --all` compiles them
    (cuda_check.compile_set: up to cuda_check.BATCH kernels a program, a program that fails
    compiled kernel by kernel; the check's cache in a folder of this test's, so every kernel is
    compiled for real). On sm_100a the f16x2 decode must use the hardware e2m1 conversion (SASS
    F2FP...E2M1), and the dp4a decode must not."""
    import cuda_check
    _nvrtc_or_skip()
    monkeypatch.setenv(cuda_check.ENV_CACHE, str(tmp_path / "cache"))
    kernels = cuda_check.KitKernels(submission)
    variants = cuda_check.launch_set(kernels, [arch], [], every=True)
    assert len(variants) >= 16 and len(variants) == len(submission.cuda_compile_variants())
    results, _ = cuda_check.compile_set(kernels, variants)
    failed = [f"{kernels.label(v)}: {cuda_check.first_error(r['log']) if r else 'not compiled'}"
              for v, r in zip(variants, results, strict=True) if not (r and r["ok"])]
    assert failed == []
    assert all(r["registers"] for r in results)
    if _cuobjdump():  # the machine code of a few, built as one program and read with one cuobjdump call
        few = [v for v in variants if v.full and v.plain][:4]
        for v, (_, sass) in zip(few, cuda_check.built_together(kernels, few, sass=True), strict=True):
            has_cvt = "E2M1" in sass
            assert has_cvt == (arch == "sm_100a" and v.config.decode == "f16x2"), f"{kernels.label(v)}: E2M1 {has_cvt}"
            assert "IDP.4A" in sass or v.config.decode == "f16x2"


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_load_6_is_one_32_byte_evict_first_load_on_blackwell_and_two_16_byte_ones_elsewhere(arch, tmp_path):
    """Load 6 reads a lane's two adjacent chunks of a with the L2 eviction priority as a qualifier:
    on sm_100a one 32-byte L1-no-allocate, L2-evict-first load (SASS LDG.E.NA.EFL2.256, the
    public leaders' load), elsewhere two 16-byte no-allocate loads (LDG.E.NA.128) and no 32-byte
    one; a config asking it with one chunk per lane is refused by name."""
    _nvrtc_or_skip()
    dump = _cuobjdump()
    if dump is None:
        pytest.skip("no cuobjdump here (Triton's wheel ships one)")
    cfg = submission.CudaConfig(lpr=32, rpt=1, u=2, warps=1, decode="f16x2", load=6, ks=8)
    for full in (True, False):
        name, source = submission.cuda_kernel(cfg, full, True)
        path = tmp_path / f"{name}.cubin"
        path.write_bytes(submission.cuda_compile(source, arch))
        sass = subprocess.run([dump, "--dump-sass", str(path)], capture_output=True, text=True, check=True).stdout
        if arch == "sm_100a":
            assert "LDG.E.NA.EFL2.256" in sass and "LDG.E.NA.128" not in sass, name
        else:
            assert "LDG.E.NA.128" in sass and ".256" not in sass, name
    assert "load no_allocate_l2_evict_first_256 needs v 2" in submission.CudaConfig(32, 1, 2, 1, load=6, v=1).problem()


def test_load_6_falls_back_to_load_0_where_a_is_not_32_byte_aligned(monkeypatch):
    """A 32-byte load (no_allocate_l2_evict_first_256, load 6) needs a 32-byte aligned a: the
    launcher builds nc_no_allocate (load 0: the same values) for an a 16 bytes off, and the 32-byte
    load for an aligned one; the per-call fast path compares
    pointers mod 32, so a call with the other alignment takes the first-call path again."""
    launches, _ = _stub_cuda_launches(monkeypatch)
    m, k, l = 128, 2048, 2
    cfg = submission.CudaConfig(lpr=16, rpt=1, u=4, warps=4, decode="dp4a-sr", load="no_allocate_l2_evict_first_256")
    aligned = _gen(m, k, l, 3, device="cpu")
    store = torch.empty(aligned[0].numel() + 64, dtype=torch.uint8)
    base = (32 - store.data_ptr() % 32) % 32 + 16  # 16 bytes past a 32-byte boundary
    a16 = store[base:base + aligned[0].numel()].view(aligned[0].dtype).view(l, m, k // 2).permute(1, 2, 0)
    a16.copy_(aligned[0])
    assert a16.data_ptr() % 32 == 16 and a16.stride() == aligned[0].stride()
    for data in (aligned, (a16,) + aligned[1:]):
        submission._cuda_run(data, m, k, l, cfg)
    built = [name for name, *_ in launches]
    if aligned[0].data_ptr() % 32 == 0:
        assert "_v2_no_allocate_l2_evict_first_256_a_first_" in built[0], built
        assert "_v2_nc_no_allocate_a_first_" in built[1], built
    else:
        assert all("_v2_nc_no_allocate_a_first_" in name for name in built), built


def test_kernel_names_spell_their_config_and_tell_every_variant_apart():
    variants = submission.cuda_compile_variants()
    names = [submission.cuda_kernel(*v)[0] for v in variants]
    assert len(set(names)) == len(names)
    cfg = submission.CudaConfig(lpr=8, rpt=2, u=4, warps=1, decode="dp4a-sr2", v=1, pipe="ptxas", minb=2, bsh=True,
                                ks=8)
    assert submission.cuda_kernel(cfg, True, True)[0] == \
        "nvfp4_gemv_lpr8_rpt2_u4_w1_dp4a_sr2_v1_l1_evict_first_ptxas_minb2_bsh_ks8_full_plain"
    assert submission.cuda_kernel(cfg._replace(ki=True), True, True)[0] == \
        "nvfp4_gemv_lpr8_rpt2_u4_w1_dp4a_sr2_v1_l1_evict_first_ptxas_minb2_bsh_ks8_ki_full_plain"
    cfg = cfg._replace(bsh=False, ks=1, kb=4, bload=True, gs=0, load=0, pipe="ab_first", minb=0)
    assert submission.cuda_kernel(cfg, False, False, probe=True)[0] == \
        "nvfp4_gemv_lpr8_rpt2_u4_w1_dp4a_sr2_v1_nc_no_allocate_ab_first_kb4_b_evict_last_tail_permuted_probe"
    with pytest.raises(ValueError, match="v must divide u"):
        submission.cuda_kernel(cfg._replace(u=3, v=2), True, True)


def test_the_kernels_enums_are_the_config_types_names():
    """kernels/nvfp4_gemv.cu's enums LoadA, Pipe and DecodeId hold, in order, the names of
    CUDA_LOADS, CUDA_PIPES and the cuda decodes (what cuda_kernel writes as template arguments),
    numbered from 0 as the positional form numbers them."""
    import re

    cu = submission.CUDA_SRC
    for enum, prefix, names in (("LoadA", "LD_", submission.CUDA_LOADS), ("Pipe", "PIPE_", submission.CUDA_PIPES),
                                ("DecodeId", "DEC_", submission._CUDA_DECODES)):
        body = re.search(r"enum " + enum + r" : int \{(.*?)\};", cu, re.S).group(1)
        found = re.findall(r"(\w+) = (\d+)", re.sub(r"//[^\n]*", "", body))
        assert found == [(prefix + n.upper().replace("-", "_"), str(i)) for i, n in enumerate(names)], enum


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_the_kernel_file_compiles_alone(arch):
    """kernels/nvfp4_gemv.cu is C++ a compiler takes as it is: with NVFP4_GEMV_EXAMPLE it
    instantiates one configuration (a bsh tile with K in 8 parts), which NVRTC builds for Hopper and
    Blackwell."""
    _nvrtc_or_skip()
    from conftest import ROOT
    text = (ROOT / "kernels" / "nvfp4_gemv.cu").read_text()
    assert text == submission.CUDA_SRC
    cubin = submission.cuda_compile(text, arch, {"NVFP4_GEMV_EXAMPLE": 1})
    assert cubin[:4] == b"\x7fELF" and b"nvfp4_gemv_example" in cubin


def test_compile_options_and_program_name_stay_those_of_every_build(monkeypatch):
    """Without NVFP4_GEMV_LINEINFO=1 or POPCORN_NCU=1 the options are the kit's own, no line
    information; the profiling variables add -lineinfo and name the program by a file holding
    its text (what ncu --import-source reads). Blackwell's e2m1 conversion is switched on for the
    architecture- and family-specific targets of compute capability 10 and later, not the plain
    ones, which NVRTC refuses it on."""
    assert submission.cuda_options("sm_90a") == ["--gpu-architecture=sm_90a", "-std=c++17", "--use_fast_math",
                                                  "-DHAS_E2M1_CVT=0", "-DHAS_LD256=0"]
    assert submission.cuda_options("sm_100a")[-2:] == ["-DHAS_E2M1_CVT=1", "-DHAS_LD256=1"]
    for arch in ("sm_100a", "sm_103a", "sm_110a", "sm_120a", "sm_121a", "sm_100f", "sm_120f"):  # PTX ISA 9.1, cvt
        assert submission.blackwell_target(arch) and submission.cuda_options(arch)[-2:] == ["-DHAS_E2M1_CVT=1",
                                                                                          "-DHAS_LD256=1"], arch
    for arch in ("sm_90a", "sm_89", "sm_100", "sm_120", "compute_100a"):
        assert not submission.blackwell_target(arch), arch
    for var in ("NVFP4_GEMV_LINEINFO", "POPCORN_NCU"):
        monkeypatch.delenv(var, raising=False)
    assert not submission._profiling()
    monkeypatch.setenv("POPCORN_NCU", "0")
    assert not submission._profiling()
    monkeypatch.setenv("POPCORN_NCU", "1")
    assert submission._profiling()
    monkeypatch.delenv("POPCORN_NCU")
    monkeypatch.setenv("NVFP4_GEMV_LINEINFO", "1")
    assert submission._profiling()


def test_a_profiled_build_carries_the_kernels_source_lines(monkeypatch):
    """Under NVFP4_GEMV_LINEINFO=1 the cubin holds line information naming a file whose text is the
    kernel's source (kernels/nvfp4_gemv.cu's lines, then the wrapper); without it, none."""
    _nvrtc_or_skip()
    cfg = submission.CudaConfig(lpr=8, rpt=2, u=4, warps=1, decode="dp4a-sr2", v=1, pipe="ptxas", minb=2, bsh=True,
                                ks=8)
    name, source = submission.cuda_kernel(cfg, True, True)
    monkeypatch.delenv("POPCORN_NCU", raising=False)
    monkeypatch.delenv("NVFP4_GEMV_LINEINFO", raising=False)
    plain = submission.cuda_compile(source, "sm_90a")
    monkeypatch.setenv("NVFP4_GEMV_LINEINFO", "1")
    profiled = submission.cuda_compile(source, "sm_90a")
    path = submission._source_file(source)
    with open(path) as f:
        assert f.read() == source
    folder, file = os.path.split(path)  # the line table names the folder and the file
    assert folder.encode() in profiled and file.encode() in profiled and b"nvfp4_gemv_sources" not in plain
    assert b".nv_debug_line_sass" in profiled and b".nv_debug_line_sass" not in plain


# --------------------------------------------------------------------------- GPU

gpu = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")


@requires_cuda
@pytest.mark.parametrize("m, k, l, seed", OFFICIAL_TESTS + BENCHMARKS)
@pytest.mark.parametrize("dist", ("official", "full-range"))
def test_gpu_shapes(m, k, l, seed, dist):
    data = _gen(m, k, l, seed, dist)
    _assert_close(_run(data), data)


@requires_cuda
@pytest.mark.parametrize("m, k, l", [(128, 64, 3), (256, 1088, 5), (384, 2112, 3), (128, 192, 1)])
@pytest.mark.parametrize("dist", ("full-range", "gaussian"))
def test_gpu_odd_shapes(m, k, l, dist):
    data = _gen(m, k, l, m + k + l, dist)
    _assert_close(_run(data), data)


@requires_cuda
@pytest.mark.parametrize("m, k, l, seed", BENCHMARKS)
def test_gpu_every_candidate_config_both_decodes(m, k, l, seed):
    data = _gen(m, k, l, seed, "full-range")
    expected = _expected(data)
    for cap in ((9, 0), (10, 0)):
        for cfg in submission.BACKENDS["cuda"].candidates(m, k, l, cap):
            out = _run(data, cfg)
            reasons = verbose_allclose(out, expected, rtol=KERNEL_RTOL, atol=KERNEL_ATOL)
            assert not reasons, f"{cfg}: " + "\n".join(reasons)


@requires_cuda
@pytest.mark.parametrize("m, k, l", [(512, 4096, 2), (7168, 2048, 4)])
def test_gpu_plain_and_permuted_scales_agree_bit_for_bit(m, k, l):
    data = _gen(m, k, l, 3, "full-range")
    plain = _run(data).clone()
    permuted = _run(_cpu_scales(data))
    _assert_close(permuted, data)
    assert torch.equal(plain.view(torch.int16), permuted.view(torch.int16))


@requires_cuda
def test_gpu_plain_scales_off_4_byte_alignment_are_read_right():
    data = _shifted_plain_scales(_gen(256, 1024, 3, 2, "full-range"), 2)
    _assert_close(_run(data), data)


@requires_cuda
def test_gpu_repeats_are_bit_identical():
    data = _gen(4096, 7168, 8, 1, "gaussian")
    first = _run(data).clone()
    for _ in range(3):
        assert torch.equal(_run(data).view(torch.int16), first.view(torch.int16))


@requires_cuda
def test_gpu_nan_scale_gives_nan():
    """NaN in (e4m3 code 0x7F), NaN out: only the rows whose scales hold it."""
    data = _gen(256, 512, 2, 5, "full-range")
    data[2].view(torch.uint8)[7, 3, 1] = 0x7F
    data[4].view(torch.uint8)[7 % 32, (7 % 128) // 32, 0, 3 % 4, 3 // 4, 1] = 0x7F
    for d in (data, _cpu_scales(data)):
        out = _run(d)
        assert torch.isnan(out[7, 0, 1]) and torch.isnan(out).sum() == 1


@requires_cuda
def test_gpu_misaligned_layouts_are_refused_naming_the_constraint():
    data = _gen(128, 256, 1, 1)
    a = data[0].view(torch.uint8)
    padded = torch.zeros(128, 136, 1, dtype=torch.uint8, device="cuda")  # rows of 136 bytes: not 16-aligned
    padded[:, :128] = a
    bad = (padded[:, :128].view(torch.float4_e2m1fn_x2),) + data[1:]
    with pytest.raises(ValueError, match="a's row and batch strides to be multiples of 16"):
        submission.run_backend("cuda", bad)
    out = submission.run_backend("triton", bad)  # 136 is a multiple of 8: the triton kernel reads it
    _assert_close(out, bad)


@requires_cuda
@pytest.mark.parametrize("bad, match", [
    (lambda d: (d[0][:100],) + d[1:], "M % 128"),
    (lambda d: d[:6] + (d[6].float(),), "c must be float16"),
    (lambda d: d[:4] + (d[4].cpu(),) + d[5:], "share one device"),
])
def test_gpu_bad_input_same_errors_as_other_backends(bad, match, monkeypatch):
    data = bad(_gen(128, 256, 1, 1))
    for name in ("cuda", "triton", "torch"):
        monkeypatch.setenv("NVFP4_GEMV_BACKEND", name)
        with pytest.raises((ValueError, TypeError), match=match):
            submission.custom_kernel(data)


@requires_cuda
def test_gpu_auto_picks_a_kernel_backend_and_is_right():
    env = {k: v for k, v in os.environ.items() if k != "NVFP4_GEMV_BACKEND"}
    code = ("import torch, reference, submission; d = reference.generate_input(7168, 2048, 4, 1111);"
            "d[6].fill_(float('nan')); submission.custom_kernel(d);"
            "print(list(submission._FASTEST.values())[0], submission._BROKEN)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=os.path.dirname(submission.__file__), check=True).stdout
    assert out.split()[0] in ("cuda", "triton"), out


# BSH tiles (b prepared once per warp and step through shared memory): lanes per row x chunks
# per lane = 32; with V 1 and 2, PIPE 0 and 1, one to four warps, every decode.
_BSH_TILES = [
    submission.CudaConfig(lpr=8, rpt=2, u=4, warps=2, v=1, pipe=0, minb=10, bsh=1),
    submission.CudaConfig(lpr=8, rpt=1, u=4, warps=2, v=1, pipe=0, minb=16, bsh=1),
    submission.CudaConfig(lpr=4, rpt=1, u=8, warps=2, v=1, pipe=0, minb=12, bsh=1),
    submission.CudaConfig(lpr=8, rpt=2, u=4, warps=2, v=1, pipe=0, minb=8, bsh=1),
    submission.CudaConfig(lpr=16, rpt=2, u=2, warps=2, pipe=0, minb=8, bsh=1),
    submission.CudaConfig(lpr=32, rpt=2, u=1, warps=1, v=1, pipe=0, minb=1, bsh=1),
    submission.CudaConfig(lpr=8, rpt=2, u=4, warps=4, minb=4, bsh=1),
]


@requires_cuda
@pytest.mark.parametrize("decode", ("dp4a", "f16x2", "dp4a-sr", "dp4a-sr2"))
@pytest.mark.parametrize("m, k, l", [(7168, 2048, 4), (256, 1088, 5), (128, 16384, 1)])
def test_gpu_bsh_tiles(m, k, l, decode):
    """Every BSH tile that fits, on full-range data (1088 = 34 chunks: a partial last step)."""
    data = _gen(m, k, l, 7, "full-range")
    expected = _expected(data)
    for tile in _BSH_TILES:
        cfg = tile._replace(decode=decode)
        if not cfg.fits(m, k) and k // 32 >= 32:
            continue
        out = _run(data, cfg)
        reasons = verbose_allclose(out, expected, rtol=KERNEL_RTOL, atol=KERNEL_ATOL)
        assert not reasons, f"{cfg}: " + "\n".join(reasons)
        again = _run(data, cfg).clone()
        assert torch.equal(_run(data, cfg).view(torch.int16), again.view(torch.int16)), f"{cfg}: repeats differ"


# K split across the warps of a block (KS parts, 11th field): BSH tiles of one and two warps and
# a plain tile.
_KS_TILES = [
    submission.CudaConfig(lpr=8, rpt=1, u=4, warps=2, decode="dp4a-sr2", v=1, pipe=0, minb=16, bsh=1),
    submission.CudaConfig(lpr=8, rpt=2, u=4, warps=1, decode="f16x2", v=1, pipe=0, minb=20, bsh=1),
    submission.CudaConfig(lpr=32, rpt=2, u=1, warps=1, decode="dp4a-sr", v=1, pipe=0, minb=1),
]


@requires_cuda
@pytest.mark.parametrize("ki", (False, True), ids=("contiguous", "interleaved"))
@pytest.mark.parametrize("ks", (2, 3, 4))
@pytest.mark.parametrize("m, k, l", [(7168, 2048, 4), (256, 1088, 5), (128, 16384, 1)])
def test_gpu_split_k_tiles(m, k, l, ks, ki):
    """Tiles with K split in KS parts across a block's warps, each part a contiguous range of steps
    or (ki) every KS-th step, on full-range data: right (1088 = 34 chunks: two steps, the last
    partial, so KS 3 and 4 leave parts idle) and bit-identical on repeat."""
    data = _gen(m, k, l, 13, "full-range")
    expected = _expected(data)
    for tile in _KS_TILES:
        cfg = tile._replace(ks=ks, ki=ki)
        if not tile.fits(m, k):  # the tile's shape rules, any number of parts
            continue
        out = _run(data, cfg).clone()
        reasons = verbose_allclose(out, expected, rtol=KERNEL_RTOL, atol=KERNEL_ATOL)
        assert not reasons, f"{cfg}: " + "\n".join(reasons)
        assert torch.equal(out.view(torch.int16), _run(data, cfg).view(torch.int16)), f"{cfg}: repeats differ"


@requires_cuda
@pytest.mark.parametrize("ki", (False, True), ids=("contiguous", "interleaved"))
@pytest.mark.parametrize("kb", (2, 3, 8))
@pytest.mark.parametrize("m, k, l", [(128, 16384, 1), (256, 1088, 5), (384, 7168, 2)])
def test_gpu_split_k_over_blocks(m, k, l, kb, ki):
    """K split over kb blocks per row group (partial sums reduced by the last block to arrive):
    right on full-range data, bit-identical on repeat, and the arrival counters left at zero for
    the next launch (1088 = 34 chunks: kb 3 and 8 leave parts short or idle); with ks too, and
    with the parts' steps interleaved (ki)."""
    data = _gen(m, k, l, 17, "full-range")
    expected = _expected(data)
    for tile in (submission.CudaConfig(lpr=32, rpt=1, u=1, warps=1, decode="dp4a-sr", v=1),
                 submission.CudaConfig(lpr=8, rpt=2, u=2, warps=2, decode="dp4a-sr", v=1, pipe=0, minb=1),
                 submission.CudaConfig(lpr=8, rpt=2, u=4, warps=1, decode="dp4a-sr2", v=1, pipe=0, bsh=1, ks=2)):
        cfg = tile._replace(kb=kb, ki=ki)
        if not cfg.fits(m, k):
            continue
        outs = []
        for _ in range(3):
            data[6].fill_(float("nan"))
            outs.append(_run(data, cfg).clone())
        reasons = verbose_allclose(outs[0], expected, rtol=KERNEL_RTOL, atol=KERNEL_ATOL)
        assert not reasons, f"{cfg}: " + "\n".join(reasons)
        for o in outs[1:]:
            assert torch.equal(outs[0].view(torch.int16), o.view(torch.int16)), f"{cfg}: repeats differ"
        scratch = [r.scratch for key, r in submission._CUDA_LAUNCH.items() if cfg in key]
        assert scratch and all(not cnt.any() for _, cnt in scratch), f"{cfg}: counters not back to zero"


@requires_cuda
@pytest.mark.parametrize("gs", (1, 3, 16))
@pytest.mark.parametrize("m, k, l", [(7168, 2048, 4), (2432, 4608, 2), (256, 1088, 5)])
def test_gpu_grid_stride_gives_the_same_bits_as_a_block_per_row_group(m, k, l, gs):
    """A grid of gs blocks per SM walking the row groups computes each row exactly as one block
    per row group does (the same order of sums): bit-identical outputs, every row written."""
    data = _gen(m, k, l, 19, "full-range")
    expected = _expected(data)
    for tile in (submission.CudaConfig(lpr=8, rpt=1, u=4, warps=2, decode="dp4a-sr2", v=1, pipe=0, minb=16, bsh=1),
                 submission.CudaConfig(lpr=32, rpt=4, u=1, warps=1, decode="dp4a-sr", v=1, pipe=0, minb=1),
                 submission.CudaConfig(lpr=16, rpt=1, u=2, warps=1, decode="dp4a-sr", v=1, pipe=2)):
        if not tile.fits(m, k):
            continue
        ref = _run(data, tile).clone()
        out = _run(data, tile._replace(gs=gs)).clone()
        reasons = verbose_allclose(out, expected, rtol=KERNEL_RTOL, atol=KERNEL_ATOL)
        assert not reasons, f"{tile} gs={gs}: " + "\n".join(reasons)
        assert torch.equal(out.view(torch.int16), ref.view(torch.int16)), f"{tile} gs={gs}"


@requires_cuda
@pytest.mark.parametrize("m, k, l", [(7168, 2048, 4), (128, 16384, 1), (256, 1088, 5)])
def test_gpu_load_6_reads_what_load_0_reads(m, k, l):
    """Load 6 (a's two chunks of a lane in one 32-byte load on sm_100a, two 16-byte loads
    elsewhere) gives the bits load 0 gives, with a 32-byte aligned a and with one 16 bytes off
    (which takes load 0), on full-range data."""
    data = _gen(m, k, l, 23, "full-range")
    expected = _expected(data)
    for tile in (submission.CUDA_LEADERS[16384][0], submission.CUDA_LEADERS[2048][0],
                 submission.CudaConfig(lpr=32, rpt=2, u=4, warps=2, pipe=0, minb=1)):
        cfg = tile._replace(load=6).with_decode(torch.cuda.get_device_capability())
        if not cfg.fits(m, k):
            continue
        ref = _run(data, cfg._replace(load=0)).clone()
        out = _run(data, cfg).clone()
        reasons = verbose_allclose(out, expected, rtol=KERNEL_RTOL, atol=KERNEL_ATOL)
        assert not reasons, f"{cfg}: " + "\n".join(reasons)
        assert torch.equal(out.view(torch.int16), ref.view(torch.int16)), f"{cfg}"
    a = data[0]
    store = torch.empty(a.numel() + 64, dtype=torch.uint8, device=a.device)
    base = (32 - store.data_ptr() % 32) % 32 + 16
    a16 = store[base:base + a.numel()].view(a.dtype).view(l, m, k // 2).permute(1, 2, 0)
    a16.copy_(a)
    shifted = (a16,) + data[1:]
    cfg = submission.CudaConfig(lpr=32, rpt=2, u=4, warps=2, pipe=0, minb=1, load=6).with_decode(
        torch.cuda.get_device_capability())
    if cfg.fits(m, k):
        assert torch.equal(_run(shifted, cfg).clone().view(torch.int16), _run(data, cfg).view(torch.int16))


def _uniform(m, k, l, a_byte, b_byte, sa_code, sb_code):
    """Inputs whose every a byte, b byte and scale is the one given (plain and permuted alike)."""
    data = _gen(m, k, l, 1)
    data[0].view(torch.uint8).fill_(a_byte)
    data[1].view(torch.uint8).fill_(b_byte)
    for i, code in ((2, sa_code), (3, sb_code), (4, sa_code), (5, sb_code)):
        data[i].view(torch.uint8).fill_(code)
    return data


@requires_cuda
@pytest.mark.parametrize("a_byte, b_byte, sa_code, sb_code", [
    (0x77, 0x77, 0x01, 0x01),  # |6 x 6| everywhere, both scales 2^-9: the smallest scale product, 2^-24 after 2^-6
    (0x77, 0xFF, 0x7E, 0x01),  # 6 x -6, 448 x 2^-9
    (0x77, 0x77, 0x7E, 0x7E),  # the largest products and scales: 448^2 * 2^-6 = 3136 in fp16; c overflows to inf
    (0xF7, 0x77, 0x7E, 0x7E),  # (6, -6) . (6, 6): every pair cancels, 0
], ids=("max-values-min-scales", "signed-max-min", "max-values-max-scales", "cancelling"))
@pytest.mark.parametrize("decode", ("f16x2", "dp4a-sr", "dp4a-sr2"))
def test_gpu_worst_case_group_sums_and_scales_are_exact(a_byte, b_byte, sa_code, sb_code, decode):
    """The f16x2 half sums (8 products of 36 = 288) and the fp16 scale products sa * sb * 2^-6 at
    their extremes: every tile's answer is the exact one (inf where the exact one overflows fp16)."""
    for m, k, l in ((128, 1024, 1), (256, 16384, 2)):
        data = _uniform(m, k, l, a_byte, b_byte, sa_code, sb_code)
        expected = _expected(data)
        for cfg in [submission.CudaConfig(lpr=32, rpt=2, u=1, warps=1, decode=decode, v=1, pipe=0, minb=1),
                    submission.CudaConfig(lpr=8, rpt=1, u=4, warps=2, decode=decode, v=1, pipe=0, minb=16, bsh=1)]:
            out = _run(data, cfg)
            assert torch.equal(out.view(torch.int16), expected.view(torch.int16)), (cfg, out[:2, 0, 0],
                                                                                    expected[:2, 0, 0])
