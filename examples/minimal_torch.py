#!POPCORN leaderboard nvfp4_gemv
#!POPCORN gpu NVIDIA
"""The smallest correct submission: plain PyTorch, no kernel of its own (the contract: docs/contract.md).

c[i, 0, l] = sum over j of a[i, j, l] * sfa[i, j // 16, l] * b[0, j, l] * sfb[0, j // 16, l], where a and b
hold two e2m1 values per byte (element 2n in the low nibble of byte n) and sfa, sfb are e4m3 scales.
"""
import torch

from task import input_t, output_t

# The 16 e2m1 codes: sign bit 3, then 2 exponent bits and 1 mantissa bit.
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def decode(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """[rows, K/2, L] e2m1 pairs and [rows, K/16, L] e4m3 scales -> [rows, K, L] float32 values."""
    table = torch.tensor(E2M1, device=packed.device)
    codes = packed.view(torch.uint8).long()
    values = torch.stack((table[codes & 15], table[codes >> 4]), dim=2).flatten(1, 2)
    return values * scales.float().repeat_interleave(16, dim=1)


def custom_kernel(data: input_t) -> output_t:
    a, b, sfa, sfb, _sfa_permuted, _sfb_permuted, c = data
    products = decode(a, sfa) * decode(b[:1], sfb[:1])  # row 0 of b is the vector; the rest is padding
    c[:, 0, :] = products.sum(dim=1).to(torch.float16)
    return c
