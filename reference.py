"""Reference side of the nvfp4_gemv problem: input generation, exact answers, checker.

Mirrors the roles of the server's ``reference.py`` (``generate_input``, ``ref_kernel``,
``check_implementation``) and adds what a kit needs off Blackwell:

* ``ref_kernel`` is exact on any device (CPU, H100/H200): it decodes e2m1/e4m3 by table,
  forms every product exactly and sums in float64, then rounds once to fp16.
* ``ref_kernel_scaled_mm`` is the competition's own formulation (``torch._scaled_mm`` per
  batch), usable only where FP4 ``_scaled_mm`` runs (compute capability 10.x).
* ``scaled_mm_fp4_emulated`` is a drop-in stand-in for FP4 ``torch._scaled_mm`` so that
  code written for it can be tested on CPU and Hopper.

Layouts (NVFP4, as the server builds them):
  a   [m, k/2, l]  float4_e2m1fn_x2, K-major, batch outermost in memory. Byte i of a row
                   holds element 2i in its LOW nibble and element 2i+1 in its HIGH nibble.
  b   [128, k/2, l] the same for the vector, padded to 128 rows; only row 0 matters.
  sfa [m, k/16, l] float8_e4m3fn, one scale per 16 consecutive K elements. On a CUDA
                   run the server hands these plain scales over as CPU tensors (the
                   official generator calls ``.cpu()``), and so does ``generate_input``.
  sfa_permuted     the same scales in the cuBLAS/CUTLASS blocked layout, shape
                   (32, 4, m/128, 4, k/64, l): scale (i, j, batch) sits at
                   [i % 32, (i % 128) // 32, i // 128, j % 4, j // 4, batch]. Its memory is a
                   contiguous (l, m/128, k/64, 32, 4, 4) tensor, i.e. per batch exactly the
                   vector ``to_blocked`` produces.
  c   [m, 1, l]    float16 output.
"""

from __future__ import annotations

import torch

from task import input_t, output_t
from utils import make_match_reference

SF_VEC_SIZE = 16  # e2m1 values per e4m3 scale, along K
N_PADDED = 128  # rows of b / sfb as the server pads them for _scaled_mm

# Official tolerances of the competition checker (reference.py of the server).
RTOL = 1e-3
ATOL = 1e-3

# e2m1 code -> value. Bits: sign(3) exponent(2..1) mantissa(0); codes 0..7 are the
# magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 and bit 3 negates (code 8 is -0.0).
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
               -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)

# Rows of A (and K scale columns) a chunk of ref_kernel decodes at once: bounds its
# float64 temporaries to ~128 MiB whatever the shape.
_REF_CHUNK_ELEMS = 1 << 24


def ceil_div(a: int, b: int) -> int:
    return (a + b - 1) // b


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


# --------------------------------------------------------------------------- decoding

def decode_e2m1(packed: torch.Tensor) -> torch.Tensor:
    """Unpack e2m1 pairs: [..., n] bytes (uint8 or float4_e2m1fn_x2) -> [..., 2n] float32."""
    u8 = packed.view(torch.uint8) if packed.dtype != torch.uint8 else packed
    lut = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=u8.device)
    lo = lut[(u8 & 0x0F).long()]
    hi = lut[(u8 >> 4).long()]
    return torch.stack((lo, hi), dim=-1).flatten(-2)


def decode_e4m3(scales: torch.Tensor) -> torch.Tensor:
    """float8_e4m3fn (or its uint8 bytes) -> float32; exact (every e4m3 value is a float32)."""
    if scales.dtype == torch.uint8:
        scales = scales.view(torch.float8_e4m3fn)
    return scales.to(torch.float32)


# --------------------------------------------------------------------------- layouts

def to_blocked(scales: torch.Tensor) -> torch.Tensor:
    """Plain [rows, cols] scales -> flat cuBLAS blocked vector (rows % 128 == 0, cols % 4 == 0).

    Order of the result: (row block, col block, row % 32, (row % 128) // 32, col % 4).
    """
    rows, cols = scales.shape
    if rows % 128 or cols % 4:
        raise ValueError(f"to_blocked needs rows % 128 == 0 and cols % 4 == 0, got {rows}x{cols}")
    return scales.reshape(rows // 128, 4, 32, cols // 4, 4).permute(0, 3, 2, 1, 4).flatten()


def from_blocked(flat: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Inverse of ``to_blocked``: flat blocked vector -> plain [rows, cols] (a copy)."""
    if flat.numel() != rows * cols:
        raise ValueError(f"blocked scale vector has {flat.numel()} elements, expected {rows}*{cols}")
    return flat.reshape(rows // 128, cols // 4, 32, 4, 4).permute(0, 3, 2, 1, 4).reshape(rows, cols)


def blocked_from_permuted(sf_permuted: torch.Tensor) -> torch.Tensor:
    """(32, 4, mn/128, 4, k/64, l) permuted scales -> [l, mn*k/16] blocked vectors (a view
    when the tensor has the server's strides)."""
    l = sf_permuted.shape[5]
    return sf_permuted.permute(5, 2, 4, 0, 1, 3).reshape(l, -1)


# --------------------------------------------------------------------------- input

def _scale_tensors(l: int, mn: int, sf_k: int, device: torch.device):
    """Plain [mn, sf_k, l] scales and the same values in the blocked (permuted) layout.

    RNG use matches the official generator: one int8 randint of the plain shape, then one
    of the blocked shape (its values are overwritten, but the call advances the generator).
    """
    plain = torch.randint(0, 3, (l, mn, sf_k), dtype=torch.int8, device=device)
    plain = plain.to(torch.float8_e4m3fn).permute(1, 2, 0)
    blocked_shape = (l, ceil_div(mn, 128), ceil_div(sf_k, 4), 32, 4, 4)
    blocked = torch.randint(0, 3, blocked_shape, dtype=torch.int8, device=device)
    blocked = blocked.to(torch.float8_e4m3fn).permute(3, 4, 1, 5, 2, 0)
    blocked.copy_(_permuted_from_plain(plain, device))
    return plain, blocked


def _permuted_from_plain(plain: torch.Tensor, device: torch.device) -> torch.Tensor:
    """[mn, sf_k, l] plain scales -> a (32, 4, mn/128, 4, sf_k/4, l) view holding
    out[i % 32, (i % 128) // 32, i // 128, j % 4, j // 4, b] = plain[i, j, b]."""
    mn, sf_k, l = plain.shape
    src = plain.to(device).permute(2, 0, 1).reshape(l, mn // 128, 4, 32, sf_k // 4, 4)
    # src dims (b, i//128, (i%128)//32, i%32, j//4, j%4) -> (i%32, (i%128)//32, i//128, j%4, j//4, b)
    return src.permute(3, 2, 1, 5, 4, 0)


def _full_range_values(data):
    """Replace the official values in place: every byte value 0..255 for ``a``/``b`` (both
    nibbles, both signs, -0), scales spanning the e4m3 codes. ``sfa`` draws from every
    non-negative finite code (0, subnormals, normals up to 448); ``sfb`` from codes 0..0x20
    (0 to 0.125), which keeps the K = 16384 sums ~10 sigma under the fp16 maximum."""
    a, b, sfa, sfb, sfa_p, sfb_p, _ = data
    for t in (a, b):
        t.view(torch.uint8).copy_(torch.randint(0, 256, t.shape, dtype=torch.uint8, device=t.device))
    for plain, permuted, top in ((sfa, sfa_p, 0x7E), (sfb, sfb_p, 0x20)):
        codes = torch.randint(0, top + 1, plain.shape, dtype=torch.uint8)
        plain.view(torch.uint8).copy_(codes)
        permuted.view(torch.uint8).copy_(_permuted_from_plain(codes, permuted.device))


def _gaussian_values(data):
    """Quantized N(0,1) weights and activations: ``quant.fill_gaussian``."""
    import quant  # lazy: quant imports this module

    quant.fill_gaussian(data)


def _outlier_values(data):
    """``gaussian`` with rare large blocks (1/256 of blocks: a x100, b x10): ``quant.fill_outliers``."""
    import quant  # lazy: quant imports this module

    quant.fill_outliers(data)


DISTRIBUTIONS = {
    "official": None,  # the server's randint data, untouched
    "full-range": _full_range_values,
    "gaussian": _gaussian_values,
    "outliers": _outlier_values,
}


def generate_input(m: int, k: int, l: int, seed: int, device: str | torch.device | None = None,
                   distribution: str = "official"):
    """The official inputs ``(a, b, sfa, sfb, sfa_permuted, sfb_permuted, c)``.

    Same RNG calls in the same order as the server's generator, so the same seed gives the
    same tensors on the same device. ``device`` defaults to CUDA when available. As on the
    server, the plain scales ``sfa``/``sfb`` are returned on the CPU. ``distribution``
    (a key of ``DISTRIBUTIONS``) replaces the values after the official draw, keeping every
    shape, stride, dtype and device: "official" (default) leaves them as the server makes them.
    """
    if m % 128 or k % 64 or l < 1:
        raise ValueError(f"generate_input needs m % 128 == 0, k % 64 == 0, l >= 1; got m={m} k={k} l={l}")
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"unknown distribution {distribution!r}; choose from {sorted(DISTRIBUTIONS)}")
    device = torch.device(device) if device is not None else default_device()
    torch.manual_seed(seed)
    a = torch.randint(0, 4, (l, m, k // 2), dtype=torch.uint8, device=device).permute(1, 2, 0)
    b = torch.randint(0, 4, (l, N_PADDED, k // 2), dtype=torch.uint8, device=device).permute(1, 2, 0)
    c = torch.randn((l, m, 1), dtype=torch.float16, device=device).permute(1, 2, 0)
    sf_k = k // SF_VEC_SIZE
    sfa, sfa_permuted = _scale_tensors(l, m, sf_k, device)
    sfb, sfb_permuted = _scale_tensors(l, N_PADDED, sf_k, device)
    data = (a.view(torch.float4_e2m1fn_x2), b.view(torch.float4_e2m1fn_x2),
            sfa.cpu(), sfb.cpu(), sfa_permuted, sfb_permuted, c)
    fill = DISTRIBUTIONS[distribution]
    if fill is not None:
        fill(data)
    return data


# --------------------------------------------------------------------------- exact reference

def _scaled_rows(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """[r, k/2] packed e2m1 and [r, k/16] e4m3 -> [r, k] float64 of value * scale (exact)."""
    vals = decode_e2m1(packed)
    sc = decode_e4m3(scales.to(packed.device)).repeat_interleave(SF_VEC_SIZE, dim=-1)
    return (vals * sc).to(torch.float64)  # e2m1 x e4m3 needs 7 significant bits: exact in fp32


def _validate(data) -> None:
    """What ``ref_kernel`` reads, checked with submission.py's ``_check`` messages: a ValueError
    or TypeError naming the constraint (dtype, M % 128, K % 64, shapes, device). The plain
    scales may live on the CPU (as the server hands them over) or on a's device."""
    if not isinstance(data, (tuple, list)) or len(data) != 7:
        what = f"{len(data)} items" if isinstance(data, (tuple, list)) else type(data).__name__
        raise TypeError(f"data must be (a, b, sfa, sfb, sfa_permuted, sfb_permuted, c), got {what}")
    a, b, sfa, sfb, _, _, c = data
    if not all(isinstance(t, torch.Tensor) for t in (a, b, sfa, sfb, c)):
        raise TypeError("a, b, sfa, sfb, c must be tensors")
    fp4, e4m3 = torch.float4_e2m1fn_x2, torch.float8_e4m3fn
    if a.dtype not in (fp4, torch.uint8) or b.dtype != a.dtype:
        raise TypeError(f"a and b must be float4_e2m1fn_x2 (or its uint8 bytes), got {a.dtype}/{b.dtype}")
    if sfa.dtype not in (e4m3, torch.uint8) or sfb.dtype not in (e4m3, torch.uint8):
        raise TypeError(f"sfa/sfb must be float8_e4m3fn, got {sfa.dtype}/{sfb.dtype}")
    if c.dtype != torch.float16:
        raise TypeError(f"c must be float16, got {c.dtype}")
    if any(t.dim() != 3 for t in (a, b, sfa, sfb, c)):
        raise ValueError(f"a, b, sfa, sfb, c must be 3-D, got {a.dim()}-D, {b.dim()}-D, {sfa.dim()}-D, "
                         f"{sfb.dim()}-D, {c.dim()}-D")
    m, kh, l = a.shape
    k = 2 * kh
    if m % 128 or m == 0:
        raise ValueError(f"M % 128 == 0 required (M > 0), got M={m}")
    if k % 64 or k == 0:
        raise ValueError(f"K % 64 == 0 required (K > 0), got K={k}")
    if l < 1:
        raise ValueError(f"L >= 1 required, got L={l}")
    nb, kg = b.shape[0], k // SF_VEC_SIZE
    if nb % 128 or nb == 0 or tuple(b.shape[1:]) != (kh, l):
        raise ValueError(f"b must be [128*j, K/2, L] = [*, {kh}, {l}], got {tuple(b.shape)}")
    if tuple(sfa.shape) != (m, kg, l):
        raise ValueError(f"sfa must be [M, K/16, L] = {(m, kg, l)}, got {tuple(sfa.shape)}")
    if tuple(sfb.shape) != (nb, kg, l):
        raise ValueError(f"sfb must be [rows of b, K/16, L] = {(nb, kg, l)}, got {tuple(sfb.shape)}")
    if tuple(c.shape) != (m, 1, l):
        raise ValueError(f"c must be [M, 1, L] = {(m, 1, l)}, got {tuple(c.shape)}")
    if b.device != a.device or c.device != a.device:
        raise ValueError(f"a, b, c must share one device; got {a.device}, {b.device}, {c.device}")
    if any(s.device not in (a.device, torch.device("cpu")) for s in (sfa, sfb)):
        raise ValueError(f"sfa/sfb must be on a's device ({a.device}) or the CPU; got {sfa.device}, {sfb.device}")


def ref_kernel(data: input_t) -> output_t:
    """Exact NVFP4 GEMV on any device: c[:, 0, l] = fp16(sum_k A*sfa * b0*sfb), summed in float64.

    Each product is exact; the float64 sum over K carries a relative error below 1e-12,
    so the result is the correctly rounded fp16 value except in vanishingly rare ties.
    Bad input raises ``_validate``'s error naming the constraint.
    """
    _validate(data)
    a, b, sfa, sfb, _, _, c = data
    m, _, l = c.shape
    k = a.shape[1] * 2
    rows = max(1, min(m, _REF_CHUNK_ELEMS // k))
    for li in range(l):
        vec = _scaled_rows(b[0:1, :, li], sfb[0:1, :, li])[0]
        for r0 in range(0, m, rows):
            mat = _scaled_rows(a[r0:r0 + rows, :, li], sfa[r0:r0 + rows, :, li])
            c[r0:r0 + rows, 0, li] = (mat @ vec).to(torch.float16)
    return c


def ref_kernel_scaled_mm(data: input_t) -> output_t:
    """The competition's reference: FP4 ``torch._scaled_mm`` per batch (compute capability 10.x)."""
    a, b, sfa, sfb, _, _, c = data
    for li in range(c.shape[2]):
        scale_a = to_blocked(sfa[:, :, li]).to(a.device)
        scale_b = to_blocked(sfb[:, :, li]).to(a.device)
        res = torch._scaled_mm(a[:, :, li], b[:, :, li].transpose(0, 1), scale_a, scale_b,
                               bias=None, out_dtype=torch.float16)
        c[:, 0, li] = res[:, 0]
    return c


def scaled_mm_fp4_emulated(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor,
                           scale_b: torch.Tensor, bias: torch.Tensor | None = None,
                           out_dtype: torch.dtype = torch.float16, **_ignored) -> torch.Tensor:
    """Exact stand-in for FP4 ``torch._scaled_mm(a, b, scale_a, scale_b, bias, out_dtype)``.

    a: [M, K/2] fp4 row-major; b: [K/2, N] fp4 column-major (the transpose of an [N, K/2]
    tensor); scale_a / scale_b: flat e4m3 vectors in the blocked layout of ``to_blocked``
    for the [M, K/16] and [N, K/16] scales. Scales are decoded through the layout itself.
    Returns [M, N] in ``out_dtype``: the exact sum rounded once.
    """
    fp4 = torch.float4_e2m1fn_x2
    if a.dtype != fp4 or b.dtype != fp4:
        raise TypeError(f"scaled_mm_fp4_emulated expects float4_e2m1fn_x2 operands, got {a.dtype}, {b.dtype}")
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"shape mismatch: a {tuple(a.shape)} @ b {tuple(b.shape)}")
    if a.stride(1) != 1 or b.stride(0) != 1:
        raise ValueError("a must be row-major and b column-major (pass b as an [N, K/2] tensor's .t())")
    for s in (scale_a, scale_b):
        if s.dtype != torch.float8_e4m3fn or s.dim() != 1:
            raise TypeError(f"scales must be flat float8_e4m3fn vectors, got {s.dtype} {tuple(s.shape)}")
    m, kh = a.shape
    n = b.shape[1]
    sf_k = kh * 2 // SF_VEC_SIZE
    sa = from_blocked(scale_a, ceil_div(m, 128) * 128, ceil_div(sf_k, 4) * 4)[:m, :sf_k]
    sb = from_blocked(scale_b, ceil_div(n, 128) * 128, ceil_div(sf_k, 4) * 4)[:n, :sf_k]
    out = _scaled_rows(a, sa) @ _scaled_rows(b.t(), sb).t()
    if bias is not None:
        out = out + bias.to(torch.float64)
    return out.to(out_dtype)


check_implementation = make_match_reference(ref_kernel, rtol=RTOL, atol=ATOL)
