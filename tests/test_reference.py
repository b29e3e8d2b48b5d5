"""Foundation: decoding, layouts, exact reference, emulator, input generation, checker.

Every expectation here comes from an independent source: numpy tables built from the
bit-level definitions of e2m1 / e4m3fn, the blocked-layout index formula written out, and
a float64 brute force in numpy.
"""

import ast

import numpy as np
import pytest
import torch
from conftest import ROOT, make_input, requires_cuda
from tolerances import ATOL, FP16_HALF_ULP_REL, FP16_SUBNORMAL_HALF_ULP, RTOL

import reference as R
import utils

# ----------------------------------------------------------------- independent tables


def e2m1_table() -> np.ndarray:
    """Value of each 4-bit e2m1 code from its bits: s | e e | m, bias 1, no inf/NaN."""
    out = np.empty(16, dtype=np.float64)
    for code in range(16):
        s, e, m = code >> 3, (code >> 1) & 3, code & 1
        mag = m * 0.5 if e == 0 else 2.0 ** (e - 1) * (1 + m / 2)
        out[code] = -mag if s else mag
    return out


def e4m3fn_table() -> np.ndarray:
    """Value of each 8-bit e4m3fn code: s | eeee | mmm, bias 7, S.1111.111 is NaN, no inf."""
    out = np.empty(256, dtype=np.float64)
    for code in range(256):
        s, e, m = code >> 7, (code >> 3) & 15, code & 7
        if e == 15 and m == 7:
            out[code] = np.nan
            continue
        mag = (m / 8) * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
        out[code] = -mag if s else mag
    return out


E2M1 = e2m1_table()
E4M3 = e4m3fn_table()


def brute_force_gemv(data) -> np.ndarray:
    """float64 [m, l] exact-product, float64-sum GEMV from raw bytes and numpy tables."""
    a, b, sfa, sfb, _, _, c = data
    a8 = a.view(torch.uint8).cpu().numpy()  # [m, k/2, l]
    b8 = b.view(torch.uint8).cpu().numpy()[0]  # [k/2, l]
    sa = E4M3[sfa.view(torch.uint8).cpu().numpy()]  # [m, k/16, l]
    sb = E4M3[sfb.view(torch.uint8).cpu().numpy()[0]]  # [k/16, l]

    def unpack(bytes_):  # [..., k/2, l] -> [..., k, l], low nibble first
        lo, hi = E2M1[bytes_ & 15], E2M1[bytes_ >> 4]
        return np.stack((lo, hi), axis=-2).reshape(*bytes_.shape[:-2], -1, bytes_.shape[-1])

    av = unpack(a8) * np.repeat(sa, 16, axis=-2)
    bv = unpack(b8) * np.repeat(sb, 16, axis=-2)
    return np.einsum("mkl,kl->ml", av, bv)


def assert_correctly_rounded(out_fp16: torch.Tensor, exact: np.ndarray) -> None:
    """Each fp16 element is within half an fp16 ulp of the exact value (tolerances.py)."""
    got = out_fp16.detach().cpu().to(torch.float64).numpy()
    bound = np.maximum(FP16_HALF_ULP_REL * np.abs(exact), FP16_SUBNORMAL_HALF_ULP) * (1 + 1e-9)
    bad = ~(np.abs(got - exact) <= bound)
    assert not bad.any(), (
        f"{int(bad.sum())} of {bad.size} elements not correctly rounded; first at "
        f"{np.argwhere(bad)[:3].tolist()}: got {got[bad][:3]}, exact {exact[bad][:3]}")


SMALL_SHAPES = [(128, 256, 1), (256, 512, 3), (384, 1024, 2), (128, 2048, 8)]
DISTS = ["official", "full-range"]


def shape_id(s):
    return "m{}-k{}-l{}".format(*s)


# ----------------------------------------------------------------- decoding


def test_e2m1_decode_all_codes():
    codes = torch.arange(16, dtype=torch.uint8)
    got = R.decode_e2m1(codes)[0::2].double().numpy()  # low nibble of bytes 0..15
    np.testing.assert_array_equal(got, E2M1)
    got_hi = R.decode_e2m1(codes << 4)[1::2].double().numpy()
    np.testing.assert_array_equal(got_hi, E2M1)
    # -0.0 keeps its sign
    assert np.signbit(R.decode_e2m1(torch.tensor([8], dtype=torch.uint8))[0].numpy())


def test_e4m3_decode_all_codes():
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    got = R.decode_e4m3(codes).double().numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(E4M3))
    ok = ~np.isnan(E4M3)
    np.testing.assert_array_equal(got[ok], E4M3[ok])
    assert np.isnan(E4M3).sum() == 2  # 0x7F and 0xFF


@pytest.mark.parametrize("byte, lo, hi", [(0x21, 0.5, 1.0), (0x12, 1.0, 0.5), (0xF7, 6.0, -6.0), (0x7F, -6.0, 6.0),
                                          (0x00, 0.0, 0.0), (0x9A, -1.0, -0.5)])
def test_nibble_order_low_first(byte, lo, hi):
    """Element 2i is the LOW nibble of byte i, element 2i+1 the high one."""
    got = R.decode_e2m1(torch.tensor([byte], dtype=torch.uint8)).tolist()
    assert got == [lo, hi]


def test_nibble_order_through_fp4_dtype():
    raw = torch.tensor([[0x21, 0x43]], dtype=torch.uint8)
    assert R.decode_e2m1(raw.view(torch.float4_e2m1fn_x2)).tolist() == [[0.5, 1.0, 1.5, 2.0]]


# ----------------------------------------------------------------- layouts


def blocked_index(i: np.ndarray, j: np.ndarray, cols: int) -> np.ndarray:
    """Position of scale (i, j) in the cuBLAS blocked vector, written out from the spec."""
    return ((i // 128) * (cols // 4) + j // 4) * 512 + (i % 32) * 16 + ((i % 128) // 32) * 4 + j % 4


@pytest.mark.parametrize("rows, cols", [(128, 4), (256, 16), (384, 96), (2432, 288)])
def test_to_blocked_matches_index_formula(rows, cols):
    x = torch.randint(0, 256, (rows, cols), dtype=torch.int32)
    flat = R.to_blocked(x).numpy()
    i, j = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    expected = np.empty(rows * cols, dtype=np.int64)
    expected[blocked_index(i, j, cols).ravel()] = x.numpy().ravel()
    np.testing.assert_array_equal(flat, expected)
    assert torch.equal(R.from_blocked(torch.from_numpy(flat), rows, cols), x)


def test_to_blocked_rejects_unpadded():
    with pytest.raises(ValueError, match="rows % 128"):
        R.to_blocked(torch.zeros(100, 4))


@pytest.mark.parametrize("m", [128, 256, 384, 2432])
@pytest.mark.parametrize("k", [256, 1536, 7168, 16384])
def test_permuted_scales_agree_with_plain_and_to_blocked(m, k):
    data = make_input(m, k, 2, seed=m + k, device="cpu", dist="full-range")
    _, _, sfa, sfb, sfa_p, sfb_p, _ = data
    for plain, perm, rows in ((sfa, sfa_p, m), (sfb, sfb_p, R.N_PADDED)):
        p8, q8 = plain.view(torch.uint8), perm.view(torch.uint8)
        assert perm.shape == (32, 4, rows // 128, 4, k // 64, 2)
        i, j, bb = torch.meshgrid(torch.arange(rows), torch.arange(k // 16), torch.arange(2), indexing="ij")
        assert torch.equal(q8[i % 32, (i % 128) // 32, i // 128, j % 4, j // 4, bb], p8)
        blocked = R.blocked_from_permuted(perm).view(torch.uint8)
        for li in range(2):
            assert torch.equal(blocked[li], R.to_blocked(p8[:, :, li]))


@pytest.mark.parametrize("m, k, l", [(128, 256, 1), (384, 1536, 3)])
def test_permuted_from_plain_gives_the_servers_layout(m, k, l):
    """permuted_from_plain returns the server's layout: a (32, 4, M/128, 4, K/64, L) view of
    contiguous (L, M/128, K/64, 32, 4, 4) memory (what submission.custom_kernel requires),
    holding out[i % 32, (i % 128) // 32, i // 128, j % 4, j // 4, b] = plain[i, j, b]; inputs
    rebuilt with it are accepted and give the reference's answer."""
    import submission
    data = make_input(m, k, l, seed=7, device="cpu", dist="full-range")
    sfa, sfb = data[2], data[3]
    for plain, rows in ((sfa, m), (sfb, R.N_PADDED)):
        perm = R.permuted_from_plain(plain)
        assert perm.shape == (32, 4, rows // 128, 4, k // 64, l)
        assert perm.stride() == submission._permuted_strides(rows // 128, k // 64, l)
        i, j, bb = torch.meshgrid(torch.arange(rows), torch.arange(k // 16), torch.arange(l), indexing="ij")
        assert torch.equal(perm.view(torch.uint8)[i % 32, (i % 128) // 32, i // 128, j % 4, j // 4, bb],
                           plain.view(torch.uint8))
    rebuilt = data[:4] + (R.permuted_from_plain(sfa), R.permuted_from_plain(sfb), data[6].clone().fill_(float("nan")))
    expected = R.ref_kernel(data[:6] + (data[6].clone(),))
    assert torch.equal(submission.custom_kernel(rebuilt).view(torch.int16), expected.view(torch.int16))


# ----------------------------------------------------------------- exact reference


@pytest.mark.parametrize("dist", DISTS)
@pytest.mark.parametrize("shape", SMALL_SHAPES, ids=shape_id)
def test_ref_kernel_matches_float64_brute_force(shape, dist):
    data = make_input(*shape, seed=7, device="cpu", dist=dist)
    exact = brute_force_gemv(data)
    c = data[6]
    c.fill_(float("nan"))  # poison: every element must be written
    out = R.ref_kernel(data)
    assert out is c and out.dtype == torch.float16 and out.shape == (shape[0], 1, shape[2])
    assert_correctly_rounded(out[:, 0, :], exact)


def test_ref_kernel_chunks_rows(monkeypatch):
    """The row-chunked path (used on big shapes) gives the same answer as one chunk."""
    data = make_input(384, 1024, 2, seed=3, device="cpu", dist="full-range")
    whole = R.ref_kernel(tuple(t.clone() for t in data))
    monkeypatch.setattr(R, "_REF_CHUNK_ELEMS", 1024 * 100)  # 100 rows per chunk: 4 chunks
    chunked = R.ref_kernel(tuple(t.clone() for t in data))
    assert torch.equal(whole, chunked)


@pytest.mark.parametrize("dist", DISTS)
@pytest.mark.parametrize("shape", SMALL_SHAPES, ids=shape_id)
def test_emulator_matches_brute_force(shape, dist):
    data = make_input(*shape, seed=11, device="cpu", dist=dist)
    a, b, sfa, sfb, _, _, _ = data
    exact = brute_force_gemv(data)
    for li in range(shape[2]):
        res = R.scaled_mm_fp4_emulated(a[:, :, li], b[:, :, li].transpose(0, 1), R.to_blocked(sfa[:, :, li]),
                                       R.to_blocked(sfb[:, :, li]), bias=None, out_dtype=torch.float16)
        assert res.shape == (shape[0], R.N_PADDED) and res.dtype == torch.float16
        assert_correctly_rounded(res[:, 0], exact[:, li])


def test_emulator_reads_scales_through_the_blocked_layout():
    """Feeding plain (row-major) scales instead of blocked ones must change the answer."""
    a, b, sfa, sfb, _, _, _ = make_input(256, 512, 1, seed=5, device="cpu", dist="full-range")
    args = (a[:, :, 0], b[:, :, 0].transpose(0, 1))
    good = R.scaled_mm_fp4_emulated(*args, R.to_blocked(sfa[:, :, 0]), R.to_blocked(sfb[:, :, 0]))
    wrong = R.scaled_mm_fp4_emulated(*args, sfa[:, :, 0].contiguous().flatten(), R.to_blocked(sfb[:, :, 0]))
    assert not torch.equal(good, wrong)


def test_emulator_rejects_misuse():
    a, b, sfa, sfb, _, _, _ = R.generate_input(128, 256, 1, seed=5, device="cpu")
    sa, sb = R.to_blocked(sfa[:, :, 0]), R.to_blocked(sfb[:, :, 0])
    with pytest.raises(ValueError, match="column-major"):
        row_major_b = b[:, :, 0].view(torch.uint8).t().contiguous().view(torch.float4_e2m1fn_x2)
        R.scaled_mm_fp4_emulated(a[:, :, 0], row_major_b, sa, sb)
    with pytest.raises(TypeError, match="float4_e2m1fn_x2"):
        R.scaled_mm_fp4_emulated(a[:, :, 0].view(torch.uint8), b[:, :, 0].t(), sa, sb)
    with pytest.raises(TypeError, match="float8_e4m3fn"):
        R.scaled_mm_fp4_emulated(a[:, :, 0], b[:, :, 0].t(), sa.float(), sb)


def test_ref_kernel_scaled_mm_with_emulator(monkeypatch):
    """The competition's own formulation gives the exact answer once _scaled_mm is emulated."""
    monkeypatch.setattr(torch, "_scaled_mm", R.scaled_mm_fp4_emulated)
    data = make_input(256, 1536, 3, seed=9, device="cpu", dist="full-range")
    expected = R.ref_kernel(tuple(t.clone() for t in data))
    assert torch.equal(R.ref_kernel_scaled_mm(data), expected)


# ----------------------------------------------------------------- generate_input


@pytest.mark.parametrize("m, k, l", [(128, 256, 1), (256, 1536, 3), (384, 7168, 2)])
def test_generate_input_layout(m, k, l):
    a, b, sfa, sfb, sfa_p, sfb_p, c = R.generate_input(m, k, l, seed=1111, device="cpu")
    fp4, e4m3 = torch.float4_e2m1fn_x2, torch.float8_e4m3fn
    assert (a.shape, a.dtype, a.stride()) == ((m, k // 2, l), fp4, (k // 2, 1, m * k // 2))
    assert (b.shape, b.dtype, b.stride()) == ((128, k // 2, l), fp4, (k // 2, 1, 128 * k // 2))
    assert (sfa.shape, sfa.dtype, sfa.stride()) == ((m, k // 16, l), e4m3, (k // 16, 1, m * k // 16))
    assert (sfb.shape, sfb.dtype) == ((128, k // 16, l), e4m3)
    assert all(t.device == a.device for t in (b, sfa, sfb, sfa_p, sfb_p, c))  # as the server hands them over
    assert sfa_p.shape == (32, 4, m // 128, 4, k // 64, l) and sfa_p.dtype == e4m3
    assert sfb_p.shape == (32, 4, 1, 4, k // 64, l)
    # the blocked tensor's memory is a contiguous (l, m/128, k/64, 32, 4, 4) array
    assert sfa_p.permute(5, 2, 4, 0, 1, 3).is_contiguous()
    assert (c.shape, c.dtype, c.stride()) == ((m, 1, l), torch.float16, (1, 1, m))
    # official value sets: bytes 0..3 (high nibble always 0), scales {0, 1, 2}
    assert set(a.view(torch.uint8).unique().tolist()) <= {0, 1, 2, 3}
    assert set(b.view(torch.uint8).unique().tolist()) <= {0, 1, 2, 3}
    assert set(sfa.float().unique().tolist()) <= {0.0, 1.0, 2.0}
    assert torch.isfinite(c.float()).all()


def test_generate_input_full_range_covers_every_byte():
    a, b, sfa, sfb, *_ = make_input(256, 2048, 2, seed=1, device="cpu", dist="full-range")
    assert a.view(torch.uint8).unique().numel() == 256
    codes = sfa.view(torch.uint8).unique()
    assert codes.min() == 0 and codes.max() == 0x7E and codes.numel() == 0x7F  # no NaN code
    assert sfb.view(torch.uint8).max() <= 0x20


def test_generate_input_deterministic_per_seed():
    def raw(d):
        return [t.view(torch.uint8) if t.element_size() == 1 else t for t in d]

    x = raw(R.generate_input(256, 512, 2, seed=42, device="cpu"))
    y = raw(R.generate_input(256, 512, 2, seed=42, device="cpu"))
    z = raw(R.generate_input(256, 512, 2, seed=43, device="cpu"))
    assert all(torch.equal(p, q) for p, q in zip(x, y, strict=True))
    assert not torch.equal(x[0], z[0])


@pytest.mark.parametrize("bad", [dict(m=100, k=256, l=1), dict(m=128, k=100, l=1), dict(m=128, k=256, l=0)])
def test_generate_input_rejects_bad_shapes(bad):
    with pytest.raises(ValueError, match="m % 128"):
        R.generate_input(**bad, seed=1, device="cpu")


@pytest.mark.parametrize("device", ["cpu", "meta", pytest.param("cuda", marks=requires_cuda)])
def test_generate_input_puts_every_tensor_where_a_lives(device):
    """The plain scales too: the server returns sfa/sfb on the GPU beside a (docs/server.md, "The inputs,
    the checker, the loops"). "meta" stands in for a second device on a CPU-only machine."""
    data = R.generate_input(256, 512, 2, seed=3, device=device)
    assert [t.device.type for t in data] == [device] * 7


def test_generate_input_takes_the_servers_arguments_only():
    """Other value distributions are quant.fill's business, not generate_input's."""
    with pytest.raises(TypeError):
        R.generate_input(128, 256, 1, seed=1, device="cpu", distribution="full-range")


# ----------------------------------------------------------------- module structure


def _imported_modules(name: str) -> set:
    """Top-level module names a repository module imports anywhere in its source (AST)."""
    tree = ast.parse((ROOT / f"{name}.py").read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


def test_reference_and_quant_share_nvfp4_without_importing_each_other():
    """nvfp4 (the format) sits below both; reference (the problem) and quant (data making)
    import it and not each other, and nvfp4 imports neither."""
    ref, quant, fmt = (_imported_modules(n) for n in ("reference", "quant", "nvfp4"))
    assert "nvfp4" in ref and "nvfp4" in quant
    assert "quant" not in ref, ref
    assert "reference" not in quant, quant
    assert not {"reference", "quant"} & fmt, fmt


def test_reference_re_exports_the_format_helpers():
    import nvfp4
    for name in ("SF_VEC_SIZE", "E2M1_VALUES", "ceil_div", "decode_e2m1", "decode_e4m3", "to_blocked",
                 "from_blocked", "blocked_from_permuted", "permuted_from_plain"):
        assert getattr(R, name) is getattr(nvfp4, name), name


def _raw_input(m: int, k: int, l: int, c_l: int | None = None, device: str = "cpu"):
    """Inputs of any shape, valid for the problem or not (generate_input refuses bad shapes)."""
    fp4, e4m3 = torch.float4_e2m1fn_x2, torch.float8_e4m3fn
    kh, kg = k // 2, k // 16
    return (torch.zeros(m, kh, l, dtype=torch.uint8).view(fp4), torch.zeros(128, kh, l, dtype=torch.uint8).view(fp4),
            torch.ones(m, kg, l).to(e4m3), torch.ones(128, kg, l).to(e4m3), None, None,
            torch.zeros(m, 1, l if c_l is None else c_l, dtype=torch.float16, device=device))


@pytest.mark.parametrize("data, error, match", [
    (lambda: _raw_input(200, 256, 1), ValueError, r"M % 128 == 0 required \(M > 0\), got M=200"),
    (lambda: _raw_input(128, 224, 1), ValueError, r"K % 64 == 0 required \(K > 0\), got K=224"),
    (lambda: _raw_input(128, 0, 1), ValueError, r"K % 64 == 0 required \(K > 0\), got K=0"),
    (lambda: _raw_input(128, 256, 2, c_l=3), ValueError, r"c must be \[M, 1, L\] = \(128, 1, 2\), got \(128, 1, 3\)"),
    (lambda: _raw_input(128, 256, 1, device="meta"), ValueError, "must share one device"),
    (lambda: _raw_input(128, 256, 1)[:6] + (torch.zeros(128, 1, 1),), TypeError, "c must be float16"),
    (lambda: (torch.zeros(128, 128, 1),) + _raw_input(128, 256, 1)[1:], TypeError, "float4_e2m1fn_x2"),
    (lambda: _raw_input(128, 256, 1)[:2] + (torch.ones(128, 8, 1).to(torch.float8_e4m3fn),)
     + _raw_input(128, 256, 1)[3:], ValueError, r"sfa must be \[M, K/16, L\]"),
    (lambda: None, TypeError, "data must be .*got NoneType"),
    (lambda: _raw_input(128, 256, 1)[:5], TypeError, "data must be .*got 5 items"),
], ids=["M=200", "K=224", "K=0", "c-wrong-L", "c-on-another-device", "c-dtype", "a-dtype", "sfa-shape", "None",
        "5-items"])
def test_ref_kernel_rejects_bad_input(data, error, match):
    """ref_kernel validates like custom_kernel: bad shapes/dtypes/devices raise an error
    naming the constraint instead of returning numbers or a ZeroDivisionError."""
    with pytest.raises(error, match=match):
        R.ref_kernel(data())


def test_ref_kernel_accepts_uint8_bytes_and_cpu_scales():
    """The layouts ref_kernel supports stay accepted: raw uint8 bytes, and plain scales on the
    CPU (as the server hands them over) next to a, b, c on any device."""
    data = R.generate_input(128, 256, 2, seed=3, device="cpu")
    raw = (data[0].view(torch.uint8), data[1].view(torch.uint8)) + data[2:6] + (data[6].clone(),)
    assert torch.equal(R.ref_kernel(raw), R.ref_kernel(data[:6] + (data[6].clone(),)))


# ----------------------------------------------------------------- checker


@pytest.fixture
def checked():
    data = R.generate_input(256, 1024, 2, seed=2, device="cpu")
    out = R.ref_kernel(tuple(t.clone() for t in data))
    return data, out


def test_check_accepts_reference(checked):
    data, out = checked
    assert R.check_implementation(data, out) == (True, "")


def test_check_accepts_one_ulp(checked):
    data, out = checked
    bumped = out.clone()
    bumped[5, 0, 1] = torch.nextafter(bumped[5, 0, 1], torch.tensor(float("inf"), dtype=torch.float16))
    assert R.check_implementation(data, bumped)[0]


def test_check_rejects_one_perturbed_element(checked):
    data, out = checked
    bad = out.clone()
    x = float(bad[17, 0, 1])
    bad[17, 0, 1] = x + 4 * (ATOL + RTOL * abs(x))
    ok, msg = R.check_implementation(data, bad)
    assert not ok
    assert "1 of 512" in msg and "(17, 0, 1)" in msg


def test_check_rejects_nan(checked):
    data, out = checked
    bad = out.clone()
    bad[3, 0, 0] = float("nan")
    ok, msg = R.check_implementation(data, bad)
    assert not ok and "(3, 0, 0)" in msg and "nan" in msg


@pytest.mark.parametrize("mutate", [lambda o: o.float(), lambda o: o[:, 0, :], lambda o: o.tolist()],
                         ids=["dtype", "shape", "not-a-tensor"])
def test_check_rejects_wrong_type_or_shape(checked, mutate):
    data, out = checked
    ok, msg = R.check_implementation(data, mutate(out))
    assert not ok and msg


def test_verbose_allclose_infinities():
    inf = float("inf")
    e = torch.tensor([inf, -inf, 1.0], dtype=torch.float16)
    assert utils.verbose_allclose(e.clone(), e, rtol=RTOL, atol=ATOL) == []
    r = torch.tensor([-inf, -inf, 1.0], dtype=torch.float16)
    assert "Number of mismatched elements: 1" in utils.verbose_allclose(r, e, rtol=RTOL, atol=ATOL)[0]


def test_set_seed_is_deterministic():
    utils.set_seed(5)
    x = torch.rand(4), np.random.rand(2)
    utils.set_seed(5)
    y = torch.rand(4), np.random.rand(2)
    assert torch.equal(x[0], y[0]) and np.array_equal(x[1], y[1])


# ----------------------------------------------------------------- GPU


@requires_cuda
@pytest.mark.parametrize("dist", DISTS)
def test_ref_kernel_on_gpu_matches_brute_force(dist):
    data = make_input(384, 7168, 3, seed=4, dist=dist)
    assert all(t.is_cuda for t in data)
    exact = brute_force_gemv(data)
    assert_correctly_rounded(R.ref_kernel(data)[:, 0, :], exact)


@requires_cuda
@pytest.mark.parametrize("spec", [(7168, 16384, 1), (4096, 7168, 8), (7168, 2048, 4)], ids=shape_id)
def test_ref_kernel_on_benchmark_shapes_gpu(spec):
    """The reference handles the benchmark shapes on a GPU, agreeing with the CPU run."""
    data = make_input(*spec, seed=1111, dist="full-range")
    gpu = R.ref_kernel(tuple(t.clone() for t in data)).cpu()
    cpu = R.ref_kernel(tuple(t.cpu() for t in data))
    assert torch.isfinite(gpu.float()).all()
    ok, msg = utils.match_reference(None, gpu, reference=lambda _: cpu, rtol=RTOL, atol=ATOL)
    assert ok, msg


@requires_cuda
def test_official_loop_does_not_block_the_host(monkeypatch):
    """With every input on the GPU, ref_kernel_scaled_mm has no copy or sync of its own that
    blocks the host (why benchmarks.compare times it like any other strategy). FP4 _scaled_mm
    needs compute capability 10.x, so it is stubbed: only the loop around it is under test. The
    control: what the loop did when the plain scales were on the CPU (to_blocked, then a copy to
    the GPU) must trip the same detector."""
    def stub(a, b, scale_a, scale_b, bias=None, out_dtype=torch.float16):
        return torch.zeros(a.shape[0], b.shape[1], dtype=out_dtype, device=a.device)

    monkeypatch.setattr(torch, "_scaled_mm", stub)
    data = R.generate_input(256, 512, 2, seed=1, device="cuda")
    cpu_scales = data[2].cpu()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        R.ref_kernel_scaled_mm(data)
        with pytest.raises(RuntimeError, match="synchroniz"):
            R.to_blocked(cpu_scales[:, :, 0]).to("cuda")
    finally:
        torch.cuda.set_sync_debug_mode(0)
