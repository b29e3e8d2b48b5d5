"""The NVFP4 format, as the problem uses it: value tables, decoders and scale layouts.

The one module below ``reference.py`` (the problem) and ``quant.py`` (data making): both
import it, neither imports the other. Plain torch, any device.

Format:
  e2m1    4-bit values, two per byte: byte i of a row holds element 2i in its LOW nibble and
          element 2i+1 in its HIGH nibble. Code bits: sign(3) exponent(2..1) mantissa(0);
          codes 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6 and bit 3 negates (code 8 is -0.0).
  e4m3    one ``float8_e4m3fn`` scale per ``SF_VEC_SIZE`` (16) consecutive values along K.

Scale layouts:
  plain     [rows, K/16] (per batch), K-major.
  blocked   the cuBLAS/CUTLASS vector FP4 ``torch._scaled_mm`` takes (``to_blocked``): for
            rows % 128 == 0 and cols % 4 == 0, ordered by (row block of 128, col block of 4,
            row % 32, (row % 128) // 32, col % 4).
  permuted  the problem's ``sfa_permuted``/``sfb_permuted``: shape (32, 4, rows/128, 4, K/64, l),
            scale (i, j, batch) at [i % 32, (i % 128) // 32, i // 128, j % 4, j // 4, batch]. Its
            memory is a contiguous (l, rows/128, K/64, 32, 4, 4) tensor, i.e. per batch exactly
            the blocked vector (``blocked_from_permuted``, ``permuted_from_plain``).
"""

from __future__ import annotations

import torch

SF_VEC_SIZE = 16  # e2m1 values per e4m3 scale, along K

# e2m1 code -> value (see the module docstring for the bits).
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
               -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def ceil_div(a: int, b: int) -> int:
    return (a + b - 1) // b


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


def permuted_from_plain(plain: torch.Tensor, device: str | torch.device | None = None) -> torch.Tensor:
    """[mn, sf_k, l] plain scales (mn % 128 == 0, sf_k % 4 == 0) -> the server's permuted
    scales on ``device`` (default: plain's): a (32, 4, mn/128, 4, sf_k/4, l) view of new,
    contiguous (l, mn/128, sf_k/4, 32, 4, 4) memory (per batch exactly ``to_blocked``), holding
    out[i % 32, (i % 128) // 32, i // 128, j % 4, j // 4, b] = plain[i, j, b]."""
    mn, sf_k, l = plain.shape
    if mn % 128 or sf_k % 4:
        raise ValueError(f"permuted_from_plain needs rows % 128 == 0 and K/16 % 4 == 0, got {mn}x{sf_k}")
    src = plain.to(device if device is not None else plain.device)
    # dims (b, i//128, (i%128)//32, i%32, j//4, j%4)
    src = src.permute(2, 0, 1).reshape(l, mn // 128, 4, 32, sf_k // 4, 4)
    # memory in the server's order (b, i//128, j//4, i%32, (i%128)//32, j%4) ...
    memory = src.permute(0, 1, 4, 3, 2, 5).contiguous()
    # ... viewed as (i%32, (i%128)//32, i//128, j%4, j//4, b)
    return memory.permute(3, 4, 1, 5, 2, 0)
