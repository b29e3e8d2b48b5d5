"""Reference side of the nvfp4_gemv problem: input generation, exact answers, checker.

Mirrors the roles of the server's ``reference.py`` (``generate_input``, ``ref_kernel``,
``check_implementation``) and adds what a kit needs off Blackwell:

* ``generate_input`` makes the official inputs ``(a, b, sfa, sfb, sfa_permuted, sfb_permuted, c)``
  with the server's RNG calls in the server's order, all seven on one device.
* ``ref_kernel`` is exact on any device (CPU, H100/H200): it decodes e2m1/e4m3 by table,
  forms every product exactly and sums in float64, then rounds once to fp16.
* ``ref_kernel_scaled_mm`` is the competition's own formulation (``torch._scaled_mm`` per
  batch), usable only where FP4 ``_scaled_mm`` runs (compute capability 10.x).
* ``scaled_mm_fp4_emulated`` is a drop-in stand-in for FP4 ``torch._scaled_mm`` so that
  code written for it can be tested on CPU and Hopper.

The format and the scale layouts (nibble order, blocked and permuted scales) are described and
implemented in ``nvfp4.py``; its helpers are re-exported here (``reference.to_blocked`` etc.).
What the server hands over -- device, dtype, shape and strides of each input, value ranges,
tolerances -- and the server revision it comes from are recorded once, in docs/server.md. Other
value distributions: ``quant.fill``.
"""

from __future__ import annotations

import torch

from nvfp4 import (  # noqa: F401  (E2M1_VALUES, blocked_from_permuted: re-exported)
    E2M1_VALUES,
    SF_VEC_SIZE,
    blocked_from_permuted,
    ceil_div,
    decode_e2m1,
    decode_e4m3,
    from_blocked,
    permuted_from_plain,
    to_blocked,
)
from task import input_t, output_t
from utils import make_match_reference

N_PADDED = 128  # rows of b / sfb as the server pads them for _scaled_mm

# Official tolerances of the competition checker (reference.py of the server).
RTOL = 1e-3
ATOL = 1e-3

# Rows of A (and K scale columns) a chunk of ref_kernel decodes at once: bounds its
# float64 temporaries to ~128 MiB whatever the shape.
_REF_CHUNK_ELEMS = 1 << 24


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


# --------------------------------------------------------------------------- input

def _scale_tensors(l: int, mn: int, sf_k: int, device: torch.device):
    """Plain [mn, sf_k, l] scales and the same values in the permuted layout, both on ``device``.

    RNG use matches the official generator: one int8 randint of the plain shape, then one
    of the blocked shape (its values are overwritten, but the call advances the generator).
    """
    plain = torch.randint(0, 3, (l, mn, sf_k), dtype=torch.int8, device=device)
    plain = plain.to(torch.float8_e4m3fn).permute(1, 2, 0)
    blocked_shape = (l, ceil_div(mn, 128), ceil_div(sf_k, 4), 32, 4, 4)
    blocked = torch.randint(0, 3, blocked_shape, dtype=torch.int8, device=device)
    blocked = blocked.to(torch.float8_e4m3fn).permute(3, 4, 1, 5, 2, 0)
    blocked.copy_(permuted_from_plain(plain))
    return plain, blocked


def generate_input(m: int, k: int, l: int, seed: int, device: str | torch.device | None = None):
    """The official inputs ``(a, b, sfa, sfb, sfa_permuted, sfb_permuted, c)``, all on ``device``.

    Same RNG calls in the same order as the server's generator, so the same seed gives the
    same tensors on the same device; as on the server, the plain scales ``sfa``/``sfb`` live
    where ``a`` lives. ``device`` defaults to CUDA when available. For other values (full-range,
    gaussian, outliers) pass the result to ``quant.fill``.
    """
    if m % 128 or k % 64 or l < 1:
        raise ValueError(f"generate_input needs m % 128 == 0, k % 64 == 0, l >= 1; got m={m} k={k} l={l}")
    device = torch.device(device) if device is not None else default_device()
    torch.manual_seed(seed)
    a = torch.randint(0, 4, (l, m, k // 2), dtype=torch.uint8, device=device).permute(1, 2, 0)
    b = torch.randint(0, 4, (l, N_PADDED, k // 2), dtype=torch.uint8, device=device).permute(1, 2, 0)
    c = torch.randn((l, m, 1), dtype=torch.float16, device=device).permute(1, 2, 0)
    sf_k = k // SF_VEC_SIZE
    sfa, sfa_permuted = _scale_tensors(l, m, sf_k, device)
    sfb, sfb_permuted = _scale_tensors(l, N_PADDED, sf_k, device)
    return (a.view(torch.float4_e2m1fn_x2), b.view(torch.float4_e2m1fn_x2),
            sfa, sfb, sfa_permuted, sfb_permuted, c)


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
    """The competition's reference: FP4 ``torch._scaled_mm`` per batch (compute capability 10.x),
    on the inputs as ``generate_input`` makes them (plain scales on a's device)."""
    a, b, sfa, sfb, _, _, c = data
    for li in range(c.shape[2]):
        scale_a = to_blocked(sfa[:, :, li])
        scale_b = to_blocked(sfb[:, :, li])
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
