"""quant.py: the NVFP4 quantizer and the input distributions (``quant.fill``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import BENCHMARKS, make_input, requires_cuda, set_backend
from tolerances import EXACT, FP16_OUTPUT_HEADROOM, KERNEL_ATOL, KERNEL_RTOL, NVFP4_GAUSSIAN_SQNR_MIN_DB

import nvfp4
import quant as Q
import reference as R
from utils import verbose_allclose

E2M1 = np.array(R.E2M1_VALUES, dtype=np.float64)  # code -> value, 16 entries
# Every non-negative finite e4m3 value, indexed by its code (0x00..0x7E).
E4M3 = R.decode_e4m3(torch.arange(0, 0x7F, dtype=torch.uint8)).double().numpy()
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
FP16_MAX = 65504.0


# --------------------------------------------------------------------------- helpers

def _nearest_even(table: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Index of the table entry nearest to each target; among equally near entries the even
    index (mantissa bit 0 for both the e2m1 and the e4m3 code tables). Brute force."""
    dist = np.abs(table[None, :] - target.reshape(-1, 1))
    best = dist == dist.min(axis=1, keepdims=True)
    odd = (np.arange(table.size) & 1).astype(np.int64)
    idx = np.argmin(np.where(best, odd, 2), axis=1)  # first nearest even entry, else first nearest
    return idx.reshape(target.shape)


def numpy_quantize(x: np.ndarray, g: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Independent brute-force NVFP4: [r, K] float64 -> (codes [r, K] over the 16-entry e2m1
    table, scale codes [r, K/16] over the e4m3 table). Nearest-value searches, float64."""
    r, k = x.shape
    blocks = x.reshape(r, k // 16, 16)
    amax = np.abs(blocks).max(axis=-1)
    # Clipping keeps float64 distances meaningful for huge inputs; it changes no nearest value.
    sc = _nearest_even(E4M3, np.minimum(amax / 6.0 / g, 2 * 448.0))
    sc = np.where((sc == 0) & (amax > 0), 1, sc)  # code 1 = 2**-9, the smallest subnormal
    s = E4M3[sc][..., None] * g
    q = np.where(s > 0, blocks / np.where(s > 0, s, 1.0), 0.0)
    codes = _nearest_even(E2M1, np.clip(q, -12.0, 12.0))  # 16 entries, signs included
    return codes.reshape(r, k), sc


def codes_of(res: Q.NVFP4) -> np.ndarray:
    """Unpacked e2m1 codes of a 2-D result: [r, K] (element 2i = low nibble of byte i)."""
    u8 = res.data.view(torch.uint8).cpu().numpy()
    return np.stack((u8 & 0xF, u8 >> 4), axis=-1).reshape(u8.shape[0], -1)


def decode64(res: Q.NVFP4, g: float = 1.0) -> np.ndarray:
    """Exact float64 values e2m1 * e4m3 * g of a 2-D result."""
    s = R.decode_e4m3(res.scales.cpu()).double().numpy()
    return E2M1[codes_of(res)] * np.repeat(s, 16, axis=1) * g


def sqnr_db(x: np.ndarray, y: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(x * x) / np.sum((x - y) ** 2)))


def wide_range(rows: int, k: int, seed: int, dtype: torch.dtype) -> torch.Tensor:
    """N(0,1) blocks scaled by 2**e per block (e over the dtype's range), with all-zero blocks,
    blocks of a single tiny value and sign-mixed small values mixed in."""
    gen = torch.Generator().manual_seed(seed)
    lo, hi = {torch.float32: (-140, 120), torch.bfloat16: (-130, 120), torch.float16: (-24, 13)}[dtype]
    x = torch.randn(rows, k // 16, 16, generator=gen, dtype=torch.float64)
    e = torch.randint(lo, hi, (rows, k // 16, 1), generator=gen).double()
    x = x * torch.exp2(e)
    x[:, 0] = 0.0  # all-zero blocks (incl. -0.0 below)
    x[:, 1] = -0.0
    x[:, 2] = 0.0
    x[:, 2, 5] = torch.finfo(dtype).tiny  # non-zero block far below 6 * 2**-9
    return x.reshape(rows, k).to(dtype)


# --------------------------------------------------------------------------- round trip

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("g", [None, 0.25, 0.37])
def test_round_trip_exact_on_representable_values(dtype, g):
    """Values e2m1 * s (* g) with each block's amax exactly 6 * s come back bit for bit:
    same codes, same scales, same values."""
    gen = torch.Generator().manual_seed(1)
    rows, k = 64, 256
    nb = k // 16
    codes = torch.randint(0, 16, (rows, k), generator=gen, dtype=torch.uint8)
    blk = codes.view(rows, nb, 16)
    pos = torch.randint(0, 16, (rows, nb, 1), generator=gen)
    blk.scatter_(2, pos, torch.randint(0, 2, (rows, nb, 1), generator=gen, dtype=torch.uint8) * 8 + 7)  # +-6
    sc = torch.randint(1, 0x7F, (rows, nb), generator=gen, dtype=torch.uint8)  # every non-zero e4m3 code
    gg = 1.0 if g is None else float(torch.tensor(g, dtype=torch.float32))  # g as fp32 sees it
    vals = torch.tensor(R.E2M1_VALUES, dtype=torch.float64)[codes.long()]
    s = torch.from_numpy(E4M3)[sc.long()]
    exact = vals * s.repeat_interleave(16, dim=1) * gg  # float64: exact
    x = exact.to(dtype)  # exact too when g is a power of 2 (<= 6 significant bits, in range)

    res = Q.quantize_nvfp4(x, global_scale=g)
    assert torch.equal(res.scales.view(torch.uint8), sc)
    # -0.0 stays -0.0 (code 8), so codes agree everywhere.
    assert np.array_equal(codes_of(res), codes.numpy())
    back = Q.dequantize_nvfp4(res.data, res.scales, global_scale=g)
    assert back.dtype == torch.float32
    assert torch.equal(back, exact.float())  # e2m1 * e4m3 exact, times g: one fp32 rounding
    if g != 0.37:
        assert torch.equal(back, x.float())


def test_dequantize_is_exact_and_3d_round_trip():
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(3, 256, 128, generator=gen)
    res = Q.quantize_nvfp4(x)
    back = Q.dequantize_nvfp4(res.data, res.scales)  # 3-D: [m, K/2, l] -> [l, m, K]
    assert back.shape == x.shape
    for li in range(3):
        r2 = Q.quantize_nvfp4(x[li])
        assert torch.equal(back[li], Q.dequantize_nvfp4(r2.data, r2.scales))
        assert np.array_equal(decode64(r2), back[li].double().numpy())
    # re-quantizing dequantized values is a fixed point
    again = Q.quantize_nvfp4(back)
    assert torch.equal(again.data.view(torch.uint8), res.data.view(torch.uint8))
    assert torch.equal(again.scales.view(torch.uint8), res.scales.view(torch.uint8))


# --------------------------------------------------------------------------- rounding

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("g", [None, "auto", 1e-3])
def test_error_within_half_a_step(dtype, g):
    """Every element lands on the nearest point of its block's grid: |x - deq| <= step / 2 *
    s * g, the step being the e2m1 spacing (0.5, 1, 2) where |x| / (s g) lies; beyond 6 * s * g
    (saturated scale) deq is +-6 s g. Scales equal the brute-force nearest e4m3 of amax/6/g;
    all-zero blocks have scale 0 and decode to 0; no non-zero block has scale 0."""
    x = wide_range(96, 512, seed=3, dtype=dtype)
    gg = Q.global_scale_for(x) if g == "auto" else (1.0 if g is None else g)
    gg = float(torch.tensor(gg, dtype=torch.float32))  # g as the quantizer sees it: products exact below
    res = Q.quantize_nvfp4(x, global_scale=None if g is None else gg)
    xd = x.double().numpy()
    deq = decode64(res, gg)  # exact float64
    s = np.repeat(R.decode_e4m3(res.scales).double().numpy(), 16, axis=1) * gg
    err = np.abs(xd - deq)
    safe_s = np.where(s > 0, s, 1.0)
    q = np.abs(xd) / safe_s
    step = np.where(q < 2, 0.5, np.where(q < 4, 1.0, 2.0))
    sat = q > 6
    assert np.all(err[~sat] <= step[~sat] / 2 * s[~sat] + EXACT)
    assert np.array_equal(deq[sat], np.sign(xd[sat]) * 6 * s[sat])
    assert np.array_equal(np.signbit(deq), np.signbit(xd))  # the sign bit is x's, -0 included

    _, sc_np = numpy_quantize(xd, gg)
    assert np.array_equal(res.scales.view(torch.uint8).numpy(), sc_np)
    amax = np.abs(xd).reshape(96, -1, 16).max(axis=-1)
    sb = res.scales.view(torch.uint8).numpy()
    assert np.all((sb == 0) == (amax == 0))  # scale 0 exactly for all-zero blocks
    assert np.all(deq[:, :32] == 0)  # zero blocks decode to 0
    if g is None:
        assert np.all(sb[:, 2] == 0x01)  # the tiny block (amax/6 << 2**-10) gets 2**-9, not 0
        assert np.all(deq[:, 32:48] == 0)  # ... and its values round to 0
        assert sb.max() == 0x7E  # the huge blocks saturate at 448


def test_ties_go_to_even():
    """Values exactly halfway between two e2m1 magnitudes go to the even code (mantissa bit 0);
    the same for scales halfway between two e4m3 values."""
    mids = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]
    want = [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0]
    for s in (1.0, 0.375, 2.0 ** -9, 448.0):
        row = [6.0] + mids + [-m for m in mids] + [0.0]  # 16 values, amax 6 -> scale s exactly
        x = torch.tensor([row], dtype=torch.float64) * s
        res = Q.quantize_nvfp4(x.float())
        assert R.decode_e4m3(res.scales).item() == s
        got = Q.dequantize_nvfp4(res.data, res.scales)[0].double() / s
        assert got.tolist() == [6.0] + want + [-w for w in want] + [0.0]
    # Scale ties: amax / 6 halfway between e4m3 neighbours.
    for amax_over_6, scale in ((1.0625, 1.0), (1.1875, 1.25), (7 * 2.0 ** -10, 4 * 2.0 ** -9),
                               (2.0 ** -10, 2.0 ** -9), (464.0, 448.0), (3 * 2.0 ** -10, 2.0 ** -8)):
        x = torch.zeros(1, 16)
        x[0, 3] = 6 * amax_over_6
        res = Q.quantize_nvfp4(x)
        assert R.decode_e4m3(res.scales).item() == scale, amax_over_6


def test_sqnr_on_gaussian_matches_brute_force():
    """N(0,1), 512 x 4096: the quantizer gives exactly the brute-force numpy quantizer's codes
    and scales, hence its SQNR. Measured (seed 4): 20.44 dB for both; with the per-tensor
    global scale amax / 2688, 20.43 dB for both."""
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(512, 4096, generator=gen)
    xd = x.double().numpy()
    for g in (None, Q.global_scale_for(x)):
        gg = 1.0 if g is None else g
        res = Q.quantize_nvfp4(x, global_scale=g)
        codes_np, sc_np = numpy_quantize(xd, gg)
        brute = E2M1[codes_np] * np.repeat(E4M3[sc_np], 16, axis=1) * gg
        ours = decode64(res, gg)
        assert np.array_equal(ours, brute)
        assert np.array_equal(res.scales.view(torch.uint8).numpy(), sc_np)
        s_ours, s_brute = sqnr_db(xd, ours), sqnr_db(xd, brute)
        assert s_ours >= s_brute
        assert s_ours >= NVFP4_GAUSSIAN_SQNR_MIN_DB


# --------------------------------------------------------------------------- layouts

@pytest.mark.parametrize("m,k,l", [(256, 512, 3), (128, 64, 1), (384, 1024, 2)])
def test_3d_layouts_are_generate_inputs(m, k, l):
    """[l, m, K] input -> a / sfa / sfa_permuted with generate_input's shapes, strides and
    dtypes; the permuted scales are per batch exactly to_blocked of the plain ones."""
    official = R.generate_input(m, k, l, seed=1, device="cpu")
    res = Q.quantize_nvfp4(torch.randn(l, m, k))
    for got, want in zip(res, (official[0], official[2], official[4]), strict=True):
        assert got.shape == want.shape and got.stride() == want.stride() and got.dtype == want.dtype
    blocked = R.blocked_from_permuted(res.scales_blocked)
    for li in range(l):
        assert torch.equal(blocked[li].view(torch.uint8), R.to_blocked(res.scales[:, :, li]).view(torch.uint8))
        assert torch.equal(res.scales_blocked.view(torch.uint8),
                           nvfp4.permuted_from_plain(res.scales.view(torch.uint8)))


def test_padded_blocked_scales():
    """rows % 128 and (K/16) % 4 need not be 0: the blocked scales are zero-padded tiles."""
    x = torch.randn(200, 48) + 1.0
    res = Q.quantize_nvfp4(x)
    assert res.scales.shape == (200, 3) and res.scales_blocked.shape == (256 * 4,)
    plain = R.from_blocked(res.scales_blocked.view(torch.uint8), 256, 4)
    assert torch.equal(plain[:200, :3], res.scales.view(torch.uint8))
    assert int(plain[200:].sum()) == 0 and int(plain[:, 3:].sum()) == 0
    res3 = Q.quantize_nvfp4(x.reshape(2, 100, 48))
    assert res3.scales_blocked.shape == (32, 4, 1, 4, 1, 2)
    for li in range(2):
        plain = R.from_blocked(R.blocked_from_permuted(res3.scales_blocked)[li].view(torch.uint8), 128, 4)
        assert torch.equal(plain[:100, :3], res.scales.view(torch.uint8)[li * 100:(li + 1) * 100])
        assert int(plain[100:].sum()) == 0 and int(plain[:, 3:].sum()) == 0


def test_2d_outputs_feed_scaled_mm():
    """2-D results are what FP4 _scaled_mm takes: the emulator on them equals the float64
    product of the dequantized operands, rounded once."""
    gen = torch.Generator().manual_seed(5)
    qa = Q.quantize_nvfp4(torch.randn(130, 256, generator=gen))
    qb = Q.quantize_nvfp4(torch.randn(8, 256, generator=gen))
    out = R.scaled_mm_fp4_emulated(qa.data, qb.data.t(), qa.scales_blocked, qb.scales_blocked)
    want = (Q.dequantize_nvfp4(qa.data, qa.scales).double() @ Q.dequantize_nvfp4(qb.data, qb.scales).double().t())
    assert torch.equal(out, want.half())


# --------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("x,g,exc,match", [
    (torch.randn(4, 40), None, ValueError, "multiple of 16"),
    (torch.randn(4, 32).double(), None, TypeError, "float32, bfloat16 or float16"),
    (torch.ones(4, 32, dtype=torch.int32), None, TypeError, "float32, bfloat16 or float16"),
    (torch.randn(64), None, ValueError, "2-D"),
    (torch.randn(2, 2, 2, 32), None, ValueError, "2-D"),
    (torch.randn(0, 32), None, ValueError, "non-empty"),
    (torch.full((2, 32), float("nan")), None, ValueError, "NaN or infinity"),
    (torch.full((2, 32), float("inf")), None, ValueError, "NaN or infinity"),
    (torch.randn(2, 32), 0.0, ValueError, "global_scale"),
    (torch.randn(2, 32), -1.0, ValueError, "global_scale"),
    (torch.randn(2, 32), float("nan"), ValueError, "global_scale"),
    (torch.randn(2, 32), 1e39, ValueError, "global_scale"),  # inf in fp32
    (torch.randn(2, 32), torch.ones(2), ValueError, "global_scale"),
    ([[1.0] * 16], None, TypeError, "torch.Tensor"),
])
def test_bad_input_is_rejected(x, g, exc, match):
    with pytest.raises(exc, match=match):
        Q.quantize_nvfp4(x, global_scale=g)


def test_dequantize_rejects_mismatched_scales():
    res = Q.quantize_nvfp4(torch.randn(4, 64))
    with pytest.raises(ValueError, match="do not fit"):
        Q.dequantize_nvfp4(res.data, res.scales[:, :2])
    with pytest.raises(ValueError, match="same rank"):
        Q.dequantize_nvfp4(res.data, res.scales[None])


# --------------------------------------------------------------------------- GPU

@requires_cuda
@pytest.mark.parametrize("g", [None, 0.37])
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_matches_cpu_bit_for_bit(dtype, g):
    for x in (wide_range(512, 1024, seed=6, dtype=dtype), torch.randn(3, 384, 2048).to(dtype)):
        cpu = Q.quantize_nvfp4(x, global_scale=g)
        gpu = Q.quantize_nvfp4(x.cuda(), global_scale=g)
        for a, b in zip(cpu, gpu, strict=True):
            assert b.device.type == "cuda" and a.shape == b.shape and a.stride() == b.stride()
            assert torch.equal(a.view(torch.uint8), b.view(torch.uint8).cpu())
        assert torch.equal(Q.dequantize_nvfp4(gpu.data, gpu.scales, g).cpu(),
                           Q.dequantize_nvfp4(cpu.data, cpu.scales, g))


# --------------------------------------------------------------------------- distributions

@pytest.mark.parametrize("dist", sorted(Q.DISTRIBUTIONS))
@pytest.mark.parametrize("m,k,l", [(128, 16384, 1), (256, 7168, 2), (128, 2048, 4)])
def test_distribution_keeps_layouts_and_gives_finite_outputs(dist, m, k, l):
    """Every distribution keeps each official tensor's shape, stride, dtype and device, keeps
    the permuted scales equal to to_blocked of the plain ones, and gives finite outputs well
    inside fp16 at benchmark K."""
    official = R.generate_input(m, k, l, seed=1111, device="cpu")
    data = make_input(m, k, l, seed=1111, device="cpu", dist=dist)
    for got, want in zip(data, official, strict=True):
        assert (got.shape, got.stride(), got.dtype, got.device) == (want.shape, want.stride(), want.dtype,
                                                                    want.device)
    _, _, sfa, sfb, sfa_p, sfb_p, _ = data
    for plain, perm in ((sfa, sfa_p), (sfb, sfb_p)):
        blocked = R.blocked_from_permuted(perm).view(torch.uint8)
        for li in range(l):
            assert torch.equal(blocked[li], R.to_blocked(plain[:, :, li]).view(torch.uint8))
    c = R.ref_kernel(data)
    assert torch.isfinite(c).all()
    if dist in ("gaussian", "outliers"):
        assert float(c.abs().max()) * FP16_OUTPUT_HEADROOM <= FP16_MAX


def test_fill_official_leaves_the_data_alone_and_returns_it():
    data = R.generate_input(128, 256, 2, seed=4, device="cpu")
    before = [t.clone() for t in data]
    assert Q.fill(data, "official") is data
    assert all(torch.equal(t.view(torch.uint8), u.view(torch.uint8)) if t.element_size() == 1 else torch.equal(t, u)
               for t, u in zip(data, before, strict=True))


def test_fill_rejects_unknown_distribution_naming_the_choices():
    data = R.generate_input(128, 256, 1, seed=1, device="cpu")
    with pytest.raises(ValueError, match="unknown distribution 'nope'; choose from official, full-range, "
                                         "gaussian, outliers"):
        Q.fill(data, "nope")
    with pytest.raises(ValueError, match="7 tensors"):
        Q.fill(data[:6], "full-range")


@pytest.mark.parametrize("dist", ["full-range", "gaussian", "outliers"])
def test_fill_writes_plain_and_permuted_scales_where_each_lives(dist, device):
    """Inputs built by hand may keep the plain scales on the CPU while the rest is on the GPU:
    each tensor stays where it is and the permuted scales still hold the plain ones."""
    data = list(R.generate_input(256, 512, 2, seed=6, device=device))
    data[2], data[3] = data[2].cpu(), data[3].cpu()
    Q.fill(data, dist)
    assert [t.device.type for t in data] == [device.type, device.type, "cpu", "cpu"] + [device.type] * 3
    for plain, perm in ((data[2], data[4]), (data[3], data[5])):
        assert torch.equal(perm.view(torch.uint8).cpu(), nvfp4.permuted_from_plain(plain.view(torch.uint8)))


@pytest.mark.parametrize("dist", ["gaussian", "outliers"])
def test_quantized_distributions_look_like_model_data(dist):
    data = make_input(256, 4096, 2, seed=3, device="cpu", dist=dist)
    again = make_input(256, 4096, 2, seed=3, device="cpu", dist=dist)
    for t, u in zip(data, again, strict=True):
        assert torch.equal(t.view(torch.uint8) if t.element_size() == 1 else t,
                           u.view(torch.uint8) if u.element_size() == 1 else u)  # reproducible
    a, b, sfa, sfb, *_ = data
    for q, sf in ((a, sfa), (b, sfb)):
        u8 = q.view(torch.uint8)
        assert int((u8 >> 4).max()) == 15 and int((u8 & 7).max()) == 7  # high nibbles, signs, 6.0
        assert int((sf.view(torch.uint8) == 0).sum()) == 0  # N(0,1) blocks: never all zero
        vals = R.decode_e2m1(q.permute(2, 0, 1)) * R.decode_e4m3(sf.permute(2, 0, 1)).repeat_interleave(16, -1)
        assert 0.8 < float(vals.std()) < (1.2 if dist == "gaussian" else 10)
    scales = R.decode_e4m3(sfa)
    ratio = float(scales.max() / scales.median())
    assert (ratio > 50) if dist == "outliers" else (ratio < 5)
    if dist == "outliers":  # about 1/256 of a's blocks carry the x100 factor
        frac = float((scales > 10).double().mean())
        assert 0.5 / 256 < frac < 2 / 256


# --------------------------------------------------------------------------- custom_kernel backends
#
# Every backend of submission.custom_kernel, forced through NVFP4_GEMV_BACKEND, against
# ref_kernel on every distribution, c poisoned with NaN before each call. torch and the
# emulated scaled_mm are exact (bit-for-bit equal to ref_kernel); triton accumulates in fp32.

BACKEND_TOL = {"torch": (EXACT, EXACT), "scaled_mm": (EXACT, EXACT), "triton": (KERNEL_RTOL, KERNEL_ATOL)}


@pytest.fixture
def run_backend(monkeypatch):
    """run(name, data) -> custom_kernel's output with the backend forced, c poisoned first.
    scaled_mm off Blackwell: torch._scaled_mm is the exact emulator and the support check is
    waived, so the real dispatch path runs."""
    submission = pytest.importorskip("submission")

    def run(name, data):
        device = data[0].device
        if name == "scaled_mm" and device.type == "cpu":
            monkeypatch.setattr(torch, "_scaled_mm", R.scaled_mm_fp4_emulated)
            set_backend(monkeypatch, submission, "scaled_mm", supported=lambda dev: (True, ""))
        ok, why = submission.backend_support(device)[name]
        if not ok:
            pytest.skip(f"backend {name} cannot run here: {why}")
        monkeypatch.setenv("NVFP4_GEMV_BACKEND", name)
        assert submission.select_backend(device) == name
        data[6].fill_(float("nan"))
        return submission.custom_kernel(data)

    return run


def _check_backend(run_backend, name, data):
    expected = R.ref_kernel(data[:6] + (data[6].clone(),))
    assert torch.isfinite(expected).all()
    out = run_backend(name, data)
    assert out.shape == expected.shape and out.dtype == torch.float16 and out.device == expected.device
    rtol, atol = BACKEND_TOL[name]
    reasons = verbose_allclose(out, expected, rtol=rtol, atol=atol)
    assert not reasons, f"{name}: " + "\n".join(reasons)


@pytest.mark.parametrize("dist", sorted(Q.DISTRIBUTIONS))
@pytest.mark.parametrize("name", ["torch", "scaled_mm"])
@pytest.mark.parametrize("m,k,l", [(128, 256, 1), (256, 1536, 3), (128, 16384, 1)])
def test_exact_backends_match_reference_on_every_distribution(run_backend, name, dist, m, k, l):
    _check_backend(run_backend, name, make_input(m, k, l, seed=21, device="cpu", dist=dist))


@pytest.mark.parametrize("dist", sorted(Q.DISTRIBUTIONS))
@pytest.mark.parametrize("m,k,l", [(128, 256, 1), (256, 512, 3)])
def test_triton_backend_matches_reference_on_every_distribution(run_backend, dist, m, k, l):
    """On the CPU this runs Triton's interpreter (TRITON_INTERPRET=1, set by conftest): small shapes."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    _check_backend(run_backend, "triton", make_input(m, k, l, seed=22, device=device, dist=dist))


@requires_cuda
@pytest.mark.parametrize("dist", ["gaussian", "outliers"])
@pytest.mark.parametrize("name", ["triton", "torch", "scaled_mm"])
@pytest.mark.parametrize("m,k,l,seed", BENCHMARKS)
def test_gpu_backends_benchmark_shapes_quantized_data(run_backend, name, dist, m, k, l, seed):
    """scaled_mm runs only on Blackwell (skipped with the reason elsewhere)."""
    _check_backend(run_backend, name, make_input(m, k, l, seed, "cuda", dist))
