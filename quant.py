"""NVFP4 quantizer for the kit (harness side; ``submission.py`` never needs it).

``quantize_nvfp4(x, global_scale=None)`` turns real values into the problem's NVFP4 tensors and
``dequantize_nvfp4`` decodes them again. ``fill(data, distribution)`` replaces the values of
``reference.generate_input``'s official inputs with another distribution (``DISTRIBUTIONS``).

Format (per 16 consecutive values along K, one block):
  scale   s = e4m3(amax / 6 / g): the e4m3 value nearest to the exact quotient, ties to the
          even mantissa, saturating at 448. A block with amax > 0 whose quotient rounds to 0
          (amax / 6 / g <= 2**-10) gets the smallest subnormal 2**-9 instead; an all-zero block
          gets scale 0 (and codes 0). ``g`` is the optional per-tensor fp32 global scale (1 when
          not given).
  values  code = e2m1(x / (s * g)): the nearest of 0, 0.5, 1, 1.5, 2, 3, 4, 6 in magnitude,
          magnitudes beyond 6 saturate to 6. A tie goes to the code whose mantissa bit (bit 0)
          is 0, i.e. 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4. The sign bit
          (bit 3) is x's sign bit, so a negative value that rounds to zero gives -0 (code 8).
  decode  x ~= e2m1(code) * e4m3(s) * g.
  packing two codes per byte: element 2i in the LOW nibble, 2i+1 in the HIGH nibble.

Every rounding decision is made on exact quantities (float64 holds amax / (6 g) to far better
than the e4m3 midpoint spacing, and the e2m1 decision compares |x| with the exact thresholds
``t * s * g``), so the result is the correctly rounded one and is identical on CPU and CUDA.

Global scale convention (NVIDIA's two-level NVFP4): one positive finite fp32 ``g`` per tensor,
stored scales are ``e4m3(amax / 6 / g)`` and values decode as ``e2m1 * e4m3 * g``. A usual
choice is ``g = x.abs().max() / (6 * 448)`` (``global_scale_for``), which puts the largest
block scale at the top of the e4m3 range. The problem's kernels take no global scale, so the
distributions below do not use one.

Layouts (``quantize_nvfp4`` returns ``NVFP4(data, scales, scales_blocked)``, all on x's device):
  2-D x [rows, K]  ->  data [rows, K/2] float4_e2m1fn_x2 (contiguous), scales [rows, K/16]
                       float8_e4m3fn (contiguous), scales_blocked: the flat vector
                       ``nvfp4.to_blocked`` makes of the scales zero-padded to a multiple of
                       128 rows and 4 columns, i.e. what FP4 ``torch._scaled_mm`` takes.
  3-D x [l, m, K]  ->  batch FIRST in the input (the memory order of the problem's tensors);
                       the outputs are exactly ``generate_input``'s layouts: data [m, K/2, l]
                       (a permuted view of a contiguous [l, m, K/2]), scales [m, K/16, l]
                       (a view of a contiguous [l, m, K/16]) and scales_blocked
                       (32, 4, ceil(m/128), 4, ceil(K/64), l) (a view of a contiguous
                       (l, m/128, K/64, 32, 4, 4)), with zero padding when m % 128 or K % 64.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from nvfp4 import SF_VEC_SIZE, ceil_div, decode_e2m1, decode_e4m3, permuted_from_plain, to_blocked

E2M1_MAX = 6.0
E4M3_MAX = 448.0
E4M3_MIN_SUBNORMAL = 2.0 ** -9

# Midpoints between consecutive e2m1 magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6, and whether a value
# exactly on the midpoint goes UP (to the upper code) under ties-to-even: the upper code of
# midpoint i is i + 1, which is even (mantissa bit 0) for odd i.
_E2M1_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
_TIE_GOES_UP = (False, True, False, True, False, True, False)

_INPUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# Elements quantized per chunk: bounds the float64 temporaries to ~64 MiB whatever the shape.
_CHUNK_ELEMS = 1 << 23

# Outlier distribution: each 16-value block of a (weights) is, independently with probability
# 1/256, multiplied by 100 before quantization; each block of b (activations) likewise by 10.
# Both large at once would put 1e3 * (a 16-term N(0,1) dot) into one output: kept below fp16's
# 65504 with a wide margin (see ``fill_outliers``).
OUTLIER_RATE = 1.0 / 256
OUTLIER_A_FACTOR = 100.0
OUTLIER_B_FACTOR = 10.0


class NVFP4(NamedTuple):
    data: torch.Tensor  # packed e2m1 pairs, float4_e2m1fn_x2
    scales: torch.Tensor  # plain e4m3 scales, one per 16 values along K
    scales_blocked: torch.Tensor  # the same scales in the cuBLAS/CUTLASS blocked layout


def _check_global_scale(global_scale) -> float:
    if global_scale is None:
        return 1.0
    if isinstance(global_scale, torch.Tensor):
        if global_scale.numel() != 1:
            raise ValueError(f"global_scale must be a scalar, got a tensor of shape {tuple(global_scale.shape)}")
        global_scale = global_scale.item()
    g = float(torch.tensor(float(global_scale), dtype=torch.float32))  # an fp32 value
    if not (g > 0.0 and g != float("inf")):
        raise ValueError(f"global_scale must be a positive finite fp32 number, got {global_scale!r}")
    return g


def global_scale_for(x: torch.Tensor) -> float:
    """The usual per-tensor global scale: amax(|x|) / (6 * 448) as an fp32 number (1.0 for x == 0)."""
    amax = float(x.detach().abs().max().to(torch.float32))
    if amax == 0:
        return 1.0
    return _check_global_scale(max(amax / (E2M1_MAX * E4M3_MAX), torch.finfo(torch.float32).tiny))


def _round_to_e4m3(v: torch.Tensor) -> torch.Tensor:
    """float64 v >= 0 -> the nearest e4m3 value (float64), ties to even mantissa, saturating at 448."""
    _, exp = torch.frexp(v)  # v = mant * 2**exp with mant in [0.5, 1): v's binade is 2**(exp - 1)
    e = (exp.to(torch.int64) - 1).clamp(min=-6)  # e4m3 normals start at 2**-6; below it a fixed step
    quantum = ((e - 3 + 1023) << 52).view(torch.float64)  # 2**(e - 3): 3 mantissa bits, built exactly
    r = torch.round(v / quantum) * quantum  # v / quantum is exact (power of 2); round() is half-to-even
    return r.clamp(max=E4M3_MAX)


def _quantize_rows(x: torch.Tensor, g: float) -> tuple[torch.Tensor, torch.Tensor]:
    """[r, K] real values -> ([r, K/2] uint8 packed codes, [r, K/16] uint8 e4m3 scale bytes)."""
    r, k = x.shape
    blocks = x.reshape(r, k // SF_VEC_SIZE, SF_VEC_SIZE).to(torch.float64)  # exact for the input dtypes
    mag = blocks.abs()
    amax = mag.amax(dim=-1)
    s = _round_to_e4m3(amax / (E2M1_MAX * g))  # 6 * g is exact in float64; one rounding in the quotient
    s = torch.where((s == 0) & (amax > 0), torch.full_like(s, E4M3_MIN_SUBNORMAL), s)
    # Decision thresholds t * s * g: exact in float64 (3 + 4 + 24 significant bits).
    denom = torch.where(s == 0, torch.ones_like(s), s * g).unsqueeze(-1)  # all-zero block: codes 0
    code = torch.zeros(mag.shape, dtype=torch.uint8, device=x.device)
    for t, up in zip(_E2M1_MIDPOINTS, _TIE_GOES_UP, strict=True):
        thr = denom * t
        code += (mag >= thr) if up else (mag > thr)
    code |= torch.signbit(blocks).to(torch.uint8) << 3
    code = code.reshape(r, k)
    packed = code[:, 0::2] | (code[:, 1::2] << 4)
    scale_bytes = s.to(torch.float32).to(torch.float8_e4m3fn).view(torch.uint8)  # exact: s is an e4m3 value
    return packed, scale_bytes


def _validate(x: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"quantize_nvfp4 expects a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _INPUT_DTYPES:
        raise TypeError(f"quantize_nvfp4 expects float32, bfloat16 or float16 input, got {x.dtype}")
    if x.dim() not in (2, 3):
        raise ValueError(f"quantize_nvfp4 expects a 2-D [rows, K] or 3-D [l, m, K] tensor, got {x.dim()}-D "
                         f"shape {tuple(x.shape)}")
    if any(d == 0 for d in x.shape):
        raise ValueError(f"quantize_nvfp4 needs a non-empty tensor, got shape {tuple(x.shape)}")
    k = x.shape[-1]
    if k % SF_VEC_SIZE:
        raise ValueError(f"quantize_nvfp4 needs K (the last dimension) to be a multiple of {SF_VEC_SIZE}, got K={k}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError("quantize_nvfp4 input contains NaN or infinity")


def quantize_nvfp4(x: torch.Tensor, global_scale: float | torch.Tensor | None = None) -> NVFP4:
    """Quantize x (2-D [rows, K] or 3-D [l, m, K]; float32/bfloat16/float16; K % 16 == 0) to NVFP4.

    Returns ``NVFP4(data, scales, scales_blocked)`` in the layouts described in the module
    docstring (3-D: exactly ``generate_input``'s ``a``/``sfa``/``sfa_permuted`` layouts). With
    ``global_scale`` g, stored scales are e4m3(amax / 6 / g) and values decode as e2m1 * e4m3 * g.
    """
    _validate(x)
    g = _check_global_scale(global_scale)
    x = x.detach()
    batched = x.dim() == 3
    l, m, k = x.shape if batched else (1, *x.shape)
    sf_k = k // SF_VEC_SIZE
    flat = x.reshape(l * m, k)
    packed = torch.empty((l * m, k // 2), dtype=torch.uint8, device=x.device)
    scales = torch.empty((l * m, sf_k), dtype=torch.uint8, device=x.device)
    step = max(1, _CHUNK_ELEMS // k)
    for r0 in range(0, l * m, step):
        packed[r0:r0 + step], scales[r0:r0 + step] = _quantize_rows(flat[r0:r0 + step], g)

    # Zero-padded plain scales for the blocked layout (cuBLAS reads whole 128 x 4 tiles).
    mp, kp = ceil_div(m, 128) * 128, ceil_div(sf_k, 4) * 4
    padded = torch.zeros((l, mp, kp), dtype=torch.uint8, device=x.device)
    padded[:, :m, :sf_k] = scales.view(l, m, sf_k)
    fp4, e4m3 = torch.float4_e2m1fn_x2, torch.float8_e4m3fn
    if not batched:
        blocked = to_blocked(padded[0]).view(e4m3)
        return NVFP4(packed.view(fp4), scales.view(e4m3), blocked)
    blocked = torch.empty((l, mp // 128, kp // 4, 32, 4, 4), dtype=torch.uint8, device=x.device)
    blocked = blocked.permute(3, 4, 1, 5, 2, 0)  # generate_input's (32, 4, m/128, 4, k/64, l) strides
    blocked.copy_(permuted_from_plain(padded.permute(1, 2, 0)))
    return NVFP4(packed.view(l, m, k // 2).permute(1, 2, 0).view(fp4),
                 scales.view(l, m, sf_k).permute(1, 2, 0).view(e4m3),
                 blocked.view(e4m3))


def dequantize_nvfp4(data: torch.Tensor, scales: torch.Tensor,
                     global_scale: float | torch.Tensor | None = None) -> torch.Tensor:
    """Inverse of ``quantize_nvfp4``: float32 values e2m1 * e4m3 * g on data's device.

    2-D data [rows, K/2] with scales [rows, K/16] -> [rows, K]; 3-D data [m, K/2, l] with scales
    [m, K/16, l] (generate_input's layouts) -> [l, m, K] (batch first, like quantize's input).
    Without a global scale every result is exact; with one, e2m1 * e4m3 (exact) is multiplied
    by g in fp32 (one rounding).
    """
    if data.dim() not in (2, 3) or scales.dim() != data.dim():
        raise ValueError(f"dequantize_nvfp4 expects 2-D or 3-D data and scales of the same rank, got "
                         f"{tuple(data.shape)} and {tuple(scales.shape)}")
    k = data.shape[1] * 2
    expected = list(data.shape)
    expected[1] = k // SF_VEC_SIZE
    if list(scales.shape) != expected or k % SF_VEC_SIZE:
        raise ValueError(f"scales of shape {tuple(scales.shape)} do not fit data of shape {tuple(data.shape)} "
                         f"(expected {tuple(expected)})")
    g = _check_global_scale(global_scale)
    if data.dim() == 3:
        data, scales = data.permute(2, 0, 1), scales.permute(2, 0, 1)  # [l, m, ...]
    vals = decode_e2m1(data)
    sc = decode_e4m3(scales.to(data.device)).repeat_interleave(SF_VEC_SIZE, dim=-1)
    out = vals * sc
    return out * g if global_scale is not None else out


# --------------------------------------------------------------------------- distributions
# Each fill overwrites the values of generate_input's official inputs in place, keeping every
# shape, stride, dtype and device, and draws from the global RNG as generate_input left it: so
# ``fill(generate_input(m, k, l, seed), name)`` is reproducible per seed (on one device).

def fill_full_range(data) -> None:
    """``full-range``: every byte value 0..255 for ``a``/``b`` (both nibbles, both signs, -0),
    scales spanning the e4m3 codes. ``sfa`` draws from every non-negative finite code (0,
    subnormals, normals up to 448); ``sfb`` from codes 0..0x20 (0 to 0.125), which keeps the
    K = 16384 sums ~10 sigma under the fp16 maximum. The scale codes are drawn on the CPU
    generator whatever the device (so a seed gives the same values as before the plain scales
    moved to a's device), then written to the plain and the permuted scales where each lives."""
    a, b, sfa, sfb, sfa_p, sfb_p, _ = data
    for t in (a, b):
        t.view(torch.uint8).copy_(torch.randint(0, 256, t.shape, dtype=torch.uint8, device=t.device))
    for plain, permuted, top in ((sfa, sfa_p, 0x7E), (sfb, sfb_p, 0x20)):
        codes = torch.randint(0, top + 1, plain.shape, dtype=torch.uint8)
        plain.view(torch.uint8).copy_(codes)
        permuted.view(torch.uint8).copy_(permuted_from_plain(codes, permuted.device))


def _fill_quantized(data, outliers: bool) -> None:
    """Overwrite a, b and their scales (plain and permuted) in place with quantized N(0,1) draws.

    Draws on a's device from the global RNG (which generate_input has seeded): a's values
    [l, m, k], then (outliers only) a's block mask, then the same for all 128 rows of b.
    """
    a, b, sfa, sfb, sfa_p, sfb_p, _ = data
    _, kh, l = a.shape
    k = kh * 2
    for q, plain, permuted, factor in ((a, sfa, sfa_p, OUTLIER_A_FACTOR), (b, sfb, sfb_p, OUTLIER_B_FACTOR)):
        rows = q.shape[0]
        x = torch.randn((l, rows, k), dtype=torch.float32, device=q.device)
        if outliers:
            hit = torch.rand((l, rows, k // SF_VEC_SIZE), device=q.device) < OUTLIER_RATE
            mult = torch.where(hit, torch.full_like(hit, factor, dtype=torch.float32), 1.0)
            x.view(l, rows, k // SF_VEC_SIZE, SF_VEC_SIZE).mul_(mult.unsqueeze(-1))
        res = quantize_nvfp4(x)
        q.view(torch.uint8).copy_(res.data.view(torch.uint8))
        plain.view(torch.uint8).copy_(res.scales.view(torch.uint8))
        permuted.view(torch.uint8).copy_(res.scales_blocked.view(torch.uint8))


def fill_gaussian(data) -> None:
    """``gaussian``: a (all m rows) and b (all 128 rows) are N(0,1) draws quantized with
    ``quantize_nvfp4`` (no global scale); c is left as generated. Outputs ~ N(0, k): std 128
    at k = 16384, far inside fp16."""
    _fill_quantized(data, outliers=False)


def fill_outliers(data) -> None:
    """``outliers``: like ``gaussian``, but each 16-value block of a is multiplied by
    ``OUTLIER_A_FACTOR`` (100) and each block of b by ``OUTLIER_B_FACTOR`` (10), independently
    with probability ``OUTLIER_RATE`` (1/256), before quantization. Block scales then span
    ~0.25..70 in a. Magnitude: at k = 16384 a row holds ~4 large blocks of a and b ~4 of its
    own, each adding ~100 * (16-term N(0,1) dot, std 4); where an a and a b block coincide
    (~1 row in 64) 1000 * that dot. Measured max |c| over seeds 0..7: 20992 (7168 x 16384 x 1),
    16120 (4096 x 7168 x 8), 13784 (7168 x 2048 x 4). Overflow needs one 16-term dot above
    ~62 (15 sigma): Chernoff bound (1 - t^2)^-8 e^(-62 t) < 1e-18 per coincidence."""
    _fill_quantized(data, outliers=True)


DISTRIBUTIONS = {
    "official": None,  # the server's randint data, untouched
    "full-range": fill_full_range,
    "gaussian": fill_gaussian,
    "outliers": fill_outliers,
}


def fill(data, distribution: str):
    """Overwrite the values of ``reference.generate_input``'s inputs with ``distribution`` (a key
    of ``DISTRIBUTIONS``; "official" leaves them as they are) in place, keeping every shape,
    stride, dtype and device, and return ``data``. Call it right after ``generate_input``: it
    continues that seed's RNG stream."""
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"unknown distribution {distribution!r}; choose from {', '.join(DISTRIBUTIONS)}")
    if not isinstance(data, (tuple, list)) or len(data) != 7:
        raise ValueError("fill needs generate_input's 7 tensors (a, b, sfa, sfb, sfa_permuted, sfb_permuted, c)")
    body = DISTRIBUTIONS[distribution]
    if body is not None:
        body(data)
    return data
