#!POPCORN leaderboard nvfp4_gemv
#!POPCORN gpu NVIDIA
"""NVFP4 batched GEMV written in the CUTLASS Python DSL (CuTe DSL): the kit's worked example of
the CuteDSL route. Not tuned: it is written to be read and to give the same bits on every GPU.

c[i, 0, l] = fp16( sum_k a[i, k, l] * sfa[i, k // 16, l] * b[0, k, l] * sfb[0, k // 16, l] )

One code path on every GPU. The kernel decodes e2m1 and e4m3 with integer operations only (no
FP4/FP8 conversion instruction, which Hopper lacks for e2m1), so the code an H100 runs is the
code a B200 runs:

* e2m1 code ``s e1 e0 m``: twice its magnitude is nibble ``code & 7`` of ``E2M1_X2``
  (0, 1, 2, 3, 4, 6, 8, 12); bit 3 negates.
* e4m3 code ``s eeee mmm``: ``mant * 2**(ee - 10)`` with ``mant = mmm + 8`` and ``ee = eeee``
  for a normal number, ``mant = mmm`` and ``ee = 1`` for a subnormal one (0x7F, NaN: see below).
* per 16-value block: ``q = (sum of 16 products of doubled values) * mant_a * mant_b``, an
  integer with |q| <= 16 * 144 * 225 < 2**24, and the block's exact value is
  ``q * 2**(ee_a + ee_b - 22)``: ``float(q) * float(1 << (ee_a + ee_b)) * 2**-22``, two
  multiplications by powers of two (the exponent sum is in 2..30), exact in fp32. Every
  block's contribution is therefore exact; only the fp32 accumulation rounds.
* order of the fp32 sum, the same on every run: warp ``w`` of a block owns row
  ``block * ROWS_PER_BLOCK + w``; lane ``j`` adds blocks ``j, j + 32, j + 64, ...`` in order
  into its accumulator (starting at +0.0), then the 32 accumulators are summed by a butterfly
  (lane ``j`` adds lane ``j ^ 16``, then ``j ^ 8``, ``4``, ``2``, ``1``), and lane 0 writes
  fp16(acc), rounded to nearest even.
* a NaN scale (code 0x7F or 0xFF) in a row's blocks makes that output NaN, as in the exact
  reference.

Inputs read: ``a``, ``b`` (row 0 of its 128 rows), the plain scales ``sfa``/``sfb`` (on a's
device) and ``c``, through pointers and runtime strides; ``sfa_permuted``/``sfb_permuted`` are
not read. One compiled kernel serves every shape (M, K, L and the strides are runtime
arguments); it is compiled on the first call (or by ``compile_for``) for the GPU's
architecture, or for ``CUTE_DSL_ARCH`` when that is set.

Without CUDA (a CPU tensor), ``custom_kernel`` computes the same sums in the same order with
torch (``_torch_same_order``), so a CPU run checks the arithmetic (not the CuTe code, which
needs a GPU); on a GPU the kernel's output equals that function's bit for bit.

``compile_for(m, k, l)`` compiles the kernel without a GPU (the kit's ``eval.py compile`` calls
it for each benchmark shape); it returns the compiled function.
"""

import cutlass
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import make_ptr

from task import input_t, output_t

# Rows per thread block, one warp each. Not tuned (no timing chose it): 4 warps, 128 threads.
ROWS_PER_BLOCK = 4
WARP = 32
E2M1_X2 = 0xC8643210  # nibble c (c = 0..7): twice the magnitude of e2m1 code c
NAN_CODE = 0x7F  # e4m3fn: exponent and mantissa all ones (either sign) is NaN
POW2_BIAS = 22  # 2 * 10 (e4m3 decode) + 2 (e2m1 doubled twice)


@cute.jit
def _e2m1_x2(code: cutlass.Uint32) -> cutlass.Int32:
    """Twice the value of the e2m1 code in the low 4 bits of ``code``, as a signed integer."""
    mag = cutlass.Int32((cutlass.Uint32(E2M1_X2) >> ((code & 7) * 4)) & 15)
    neg = cutlass.Int32((code >> 3) & 1)
    return (mag ^ (0 - neg)) + neg  # two's complement negation when neg == 1


@cute.jit
def _dot16(wa0: cutlass.Uint32, wa1: cutlass.Uint32, wb0: cutlass.Uint32, wb1: cutlass.Uint32) -> cutlass.Int32:
    """Sum of the 16 products of doubled e2m1 values packed in two words of a and two of b."""
    s = cutlass.Int32(0)
    for n in cutlass.range_constexpr(8):
        s = s + _e2m1_x2((wa0 >> (4 * n)) & 15) * _e2m1_x2((wb0 >> (4 * n)) & 15)
    for n in cutlass.range_constexpr(8):
        s = s + _e2m1_x2((wa1 >> (4 * n)) & 15) * _e2m1_x2((wb1 >> (4 * n)) & 15)
    return s


@cute.kernel
def _gemv_kernel(mA: cute.Tensor, mB: cute.Tensor, mSA: cute.Tensor, mSB: cute.Tensor, mC: cute.Tensor,
                 m: cutlass.Int32, nblk: cutlass.Int32):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, bidy, _ = cute.arch.block_idx()
    lane = tidx % WARP
    row = bidx * ROWS_PER_BLOCK + tidx // WARP
    acc = cutlass.Float32(0.0)
    nan_seen = cutlass.Int32(0)
    if row < m:
        for blk in range(lane, nblk, WARP):
            s = _dot16(cutlass.Uint32(mA[row, 2 * blk, bidy]), cutlass.Uint32(mA[row, 2 * blk + 1, bidy]),
                       cutlass.Uint32(mB[0, 2 * blk, bidy]), cutlass.Uint32(mB[0, 2 * blk + 1, bidy]))
            ca = cutlass.Int32(mSA[row, blk, bidy]) & 255  # the mask: the DSL widens Uint8 with a sign extension
            cb = cutlass.Int32(mSB[0, blk, bidy]) & 255
            ea = (ca >> 3) & 15
            eb = (cb >> 3) & 15
            norm_a = cutlass.Int32(ea != 0)
            norm_b = cutlass.Int32(eb != 0)
            mant_a = (ca & 7) | (norm_a << 3)
            mant_b = (cb & 7) | (norm_b << 3)
            shift = ea + eb + (1 - norm_a) + (1 - norm_b)  # ee_a + ee_b, 2..30
            q = s * mant_a * mant_b
            neg = ((ca ^ cb) >> 7) & 1
            q = (q ^ (0 - neg)) + neg
            nan_seen = nan_seen | ((((ca & NAN_CODE) + 1) >> 7) & 1) | ((((cb & NAN_CODE) + 1) >> 7) & 1)
            pow2 = cutlass.Float32(cutlass.Int32(1) << shift)
            acc = acc + cutlass.Float32(q) * pow2 * cutlass.Float32(2.0 ** -POW2_BIAS)
        if nan_seen != 0:
            acc = cutlass.Float32(float("nan"))
    for i in cutlass.range_constexpr(5):
        acc = acc + cute.arch.shuffle_sync_bfly(acc, offset=16 >> i)
    if row < m:
        if lane == 0:
            mC[row, 0, bidy] = acc.to(cutlass.Float16)


@cute.jit
def _gemv(pa: cute.Pointer, pb: cute.Pointer, psa: cute.Pointer, psb: cute.Pointer, pc: cute.Pointer,
          m: cutlass.Int32, k: cutlass.Int32, l: cutlass.Int32,
          a_row: cutlass.Int32, a_bat: cutlass.Int32, b_bat: cutlass.Int32,
          sa_row: cutlass.Int32, sa_bat: cutlass.Int32, sb_bat: cutlass.Int32,
          c_row: cutlass.Int32, c_bat: cutlass.Int32):
    """Host side: tensors over the pointers (strides in elements of each pointer's type: 32-bit
    words of a and b, scale bytes, fp16 outputs), then one launch of (M / ROWS_PER_BLOCK, L)
    blocks on the default queue."""
    words = k // 8
    nblk = k // 16
    a = cute.make_tensor(pa, cute.make_layout((m, words, l), stride=(a_row, 1, a_bat)))
    b = cute.make_tensor(pb, cute.make_layout((1, words, l), stride=(0, 1, b_bat)))
    sa = cute.make_tensor(psa, cute.make_layout((m, nblk, l), stride=(sa_row, 1, sa_bat)))
    sb = cute.make_tensor(psb, cute.make_layout((1, nblk, l), stride=(0, 1, sb_bat)))
    c = cute.make_tensor(pc, cute.make_layout((m, 1, l), stride=(c_row, 1, c_bat)))
    _gemv_kernel(a, b, sa, sb, c, m, nblk).launch(
        grid=((m + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK, l, 1), block=(ROWS_PER_BLOCK * WARP, 1, 1))


_COMPILED = []  # [compiled _gemv] once compiled (one for every shape)


def _ptrs(addrs=(0, 0, 0, 0, 0)):
    gmem = cute.AddressSpace.gmem
    types = (cutlass.Uint32, cutlass.Uint32, cutlass.Uint8, cutlass.Uint8, cutlass.Float16)
    aligns = (4, 4, 1, 1, 2)
    return [make_ptr(t, int(p), gmem, assumed_align=al) for t, p, al in zip(types, addrs, aligns, strict=True)]


def compile_for(m: int, k: int, l: int):
    """The compiled kernel (compiled once; M, K, L are runtime arguments, so any shape serves).
    Needs no GPU when ``CUTE_DSL_ARCH`` names the target (e.g. sm_100a)."""
    if not _COMPILED:
        _COMPILED.append(cute.compile(_gemv, *_ptrs(), m, k, l, k // 2, m * k // 2 // 4, 128 * k // 2 // 4,
                                      k // 16, m * k // 16, 128 * k // 16, 1, m))
    return _COMPILED[0]


# --------------------------------------------------------------------------- host side

def _check(data) -> tuple:
    """(m, k, l) of valid inputs; TypeError/ValueError naming the constraint otherwise."""
    if not isinstance(data, (tuple, list)) or len(data) != 7 or not all(isinstance(x, torch.Tensor) for x in data):
        raise TypeError("data must be the 7 tensors (a, b, sfa, sfb, sfa_permuted, sfb_permuted, c)")
    a, b, sfa, sfb, _, _, c = data
    if a.dtype not in (torch.float4_e2m1fn_x2, torch.uint8) or b.dtype != a.dtype:
        raise TypeError(f"a and b must be float4_e2m1fn_x2 (or uint8 bytes), got {a.dtype}, {b.dtype}")
    if sfa.dtype != torch.float8_e4m3fn or sfb.dtype != torch.float8_e4m3fn or c.dtype != torch.float16:
        raise TypeError(f"sfa, sfb must be float8_e4m3fn and c float16, got {sfa.dtype}, {sfb.dtype}, {c.dtype}")
    if a.dim() != 3:
        raise ValueError(f"a must be [M, K/2, L], got {tuple(a.shape)}")
    m, kh, l = a.shape
    k = 2 * kh
    if m == 0 or k == 0 or l == 0 or k % 64:
        raise ValueError(f"M, L > 0 and K % 64 == 0 required, got M={m} K={k} L={l}")
    if b.dim() != 3 or b.shape[0] < 1 or tuple(b.shape[1:]) != (kh, l):
        raise ValueError(f"b must be [N, K/2, L] = [N, {kh}, {l}], got {tuple(b.shape)}")
    if tuple(sfa.shape) != (m, k // 16, l) or sfb.dim() != 3 or tuple(sfb.shape[1:]) != (k // 16, l):
        raise ValueError(f"sfa must be [M, K/16, L] = {(m, k // 16, l)} and sfb [N, K/16, L], "
                         f"got {tuple(sfa.shape)}, {tuple(sfb.shape)}")
    if tuple(c.shape) != (m, 1, l):
        raise ValueError(f"c must be [M, 1, L] = {(m, 1, l)}, got {tuple(c.shape)}")
    if any(t.device != a.device for t in (b, sfa, sfb, c)):
        raise ValueError(f"a, b, sfa, sfb, c must share one device, got {a.device}, {b.device}, {sfa.device}, "
                         f"{sfb.device}, {c.device}")
    return m, k, l


def _launch_args(data, m: int, k: int, l: int) -> tuple:
    """Pointers and strides for ``_gemv``; ValueError when the memory layout does not fit it."""
    a, b, sfa, sfb, _, _, c = data
    if a.stride(1) != 1 or b.stride(1) != 1 or sfa.stride(1) != 1 or sfb.stride(1) != 1:
        raise ValueError("a, b, sfa, sfb must be K-major (stride 1 along K)")
    ab_bytes = (a.stride(0), a.stride(2), b.stride(2), a.data_ptr(), b.data_ptr())
    if any(x % 4 for x in ab_bytes):
        raise ValueError("a and b must start on 4-byte boundaries with row and batch strides multiples of 4 bytes")
    if max(t.untyped_storage().nbytes() for t in (a, sfa, c)) >= 2 ** 31:
        raise ValueError("each of a, sfa, c must span less than 2 GiB (the kernel indexes with 32-bit integers)")
    ptrs = _ptrs((a.data_ptr(), b.data_ptr(), sfa.data_ptr(), sfb.data_ptr(), c.data_ptr()))
    return (*ptrs, m, k, l, a.stride(0) // 4, a.stride(2) // 4, b.stride(2) // 4,
            sfa.stride(0), sfa.stride(2), sfb.stride(2), c.stride(0), c.stride(2))


def _e4m3_parts(code: torch.Tensor) -> tuple:
    """(mant, ee) of e4m3 codes (int64): |value| = mant * 2**(ee - 10), as the kernel decodes."""
    e = (code >> 3) & 15
    norm = (e != 0).to(torch.int64)
    return (code & 7) | (norm << 3), e + (1 - norm)


def _torch_same_order(data, m: int, k: int, l: int) -> torch.Tensor:
    """The kernel's arithmetic in torch (any device): the same exact block values, summed in
    fp32 in the kernel's order. Writes c and returns it."""
    a, b, sfa, sfb, _, _, c = data
    table = torch.tensor([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=torch.int32,
                         device=a.device)
    nblk = k // 16
    lanes = -(-nblk // WARP) * WARP
    vb = b[0].view(torch.uint8).to(torch.int32)  # [K/2, L]
    vb = torch.stack((table[vb & 15], table[vb >> 4]), dim=1).reshape(k, l)
    cb = sfb[0].view(torch.uint8).to(torch.int64)  # [K/16, L]
    step = max(1, (1 << 22) // k)  # rows per chunk: ~16 MiB of int32 values
    for r0 in range(0, m, step):
        r1 = min(m, r0 + step)
        va = a[r0:r1].view(torch.uint8).to(torch.int32)  # [rows, K/2, L]
        va = torch.stack((table[va & 15], table[va >> 4]), dim=2).reshape(r1 - r0, k, l)
        s = (va * vb).reshape(r1 - r0, nblk, 16, l).sum(dim=2, dtype=torch.int64)  # [rows, nblk, L]
        ca = sfa[r0:r1].view(torch.uint8).to(torch.int64)
        (mant_a, ee_a), (mant_b, ee_b) = _e4m3_parts(ca), _e4m3_parts(cb)
        q = s * mant_a * mant_b
        q = torch.where(((ca ^ cb) >> 7) & 1 == 1, -q, q)
        shift = ee_a + ee_b
        nan = ((ca & NAN_CODE) == NAN_CODE) | ((cb & NAN_CODE) == NAN_CODE)
        block = q.to(torch.float32) * (1 << shift).to(torch.float32) * (2.0 ** -POW2_BIAS)  # exact
        block = torch.nn.functional.pad(block, (0, 0, 0, lanes - nblk))  # +0.0 where a lane has no block
        block = block.reshape(r1 - r0, lanes // WARP, WARP, l)
        acc = torch.zeros((r1 - r0, WARP, l), dtype=torch.float32, device=a.device)
        for t in range(lanes // WARP):
            acc = acc + block[:, t]
        acc = torch.where(nan.any(dim=1, keepdim=True), torch.tensor(float("nan"), device=a.device), acc)
        lane = torch.arange(WARP, device=a.device)
        for i in range(5):
            acc = acc + acc[:, lane ^ (16 >> i)]
        c[r0:r1, 0, :] = acc[:, 0, :].to(torch.float16)
    return c


def custom_kernel(data: input_t) -> output_t:
    m, k, l = _check(data)
    c = data[6]
    if not c.is_cuda:
        return _torch_same_order(data, m, k, l)
    compile_for(m, k, l)(*_launch_args(data, m, k, l))
    return c
