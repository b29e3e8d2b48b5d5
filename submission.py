#!POPCORN leaderboard nvfp4_gemv
#!POPCORN gpu NVIDIA
"""NVFP4 block-scaled batched GEMV: c[:, 0, l] = fp16(sum_k A[:, k, l] * B[0, k, l]).

One entry point, ``custom_kernel(data)``, dispatching to a backend:

* ``scaled_mm``: FP4 ``torch._scaled_mm`` per batch (needs compute capability 10.x). The
  blocked scale vectors are views of ``sfa_permuted`` / ``sfb_permuted`` (no copies).
* ``triton``: one Triton kernel for all L, at the memory-bandwidth limit (any CUDA GPU of
  compute capability >= 8.0; on the CPU only under TRITON_INTERPRET=1, for tests).
* ``torch``: exact dequantise-and-multiply in plain torch; runs anywhere (CPU included).

``NVFP4_GEMV_BACKEND`` = auto | scaled_mm | triton | torch forces one; a forced backend that
cannot run here raises. ``auto`` picks torch on the CPU, triton on CUDA GPUs without FP4
``_scaled_mm``, and on compute capability 10.x the faster of triton and scaled_mm per shape,
timed on the first call with that shape (a few extra launches and one sync, once) and cached.

Inputs ``(a, b, sfa, sfb, sfa_permuted, sfb_permuted, c)``: a [m, k/2, l] e2m1 pairs (low
nibble = even element), b [128, k/2, l] (row 0 used), plain scales sfa/sfb (on the CPU on a
CUDA run, so never read here), permuted scales (32, 4, rows/128, 4, k/64, l) whose memory is
a contiguous (l, rows/128, k/64, 32, 4, 4) array, c [m, 1, l] fp16.
"""

import os

import torch

from task import input_t, output_t

try:
    import triton
    import triton.language as tl
except ImportError:  # the torch backend still works
    triton = None

# --------------------------------------------------------------------------- constants

_BACKENDS = ("auto", "scaled_mm", "triton", "torch")
_ENV = "NVFP4_GEMV_BACKEND"
_FP4 = torch.float4_e2m1fn_x2
_E4M3 = torch.float8_e4m3fn

# e2m1 code -> value (bit 3 is the sign; code 8 is -0.0).
_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)

# torch backend: elements of A decoded at once (bounds its fp32 temporaries to ~64 MiB).
_TORCH_CHUNK = 1 << 24


# --------------------------------------------------------------------------- triton kernel
#
# Grid (M / BLOCK_M, L): one program owns BLOCK_M rows of one batch and walks K in steps of
# BLOCK_G 16-element groups. A is read as uint64 words, one word = one group of 16 e2m1
# values = 8 bytes; a thread holds 4 adjacent groups of each of its rows (two 16-byte loads).
# b row 0 and its scales are loaded per step (tiny, L1/L2 resident) and prepared once per
# step for all the program's rows (Triton spreads that work over the program's threads and
# shares it through shared memory). Scales come from the permuted layout (the plain ones
# live on the CPU, so reading them is no option): scale
# (row i, group j) of a batch sits at byte
#     (i // 128) * G * 128 + (j // 4) * 512 + (i % 32) * 16 + ((i % 128) // 32) * 4 + j % 4
# with G = K / 16 groups per row, so a batch spans M * G bytes.
#
# Every group dot below returns S = 4 * (the exact dot product of a group's 16 e2m1 values
# with b's), an integer held exactly in fp32; the scales are decoded exactly by the e4m3
# conversion, and each group adds S * sfa * (sfb / 4) to an fp32 accumulator (one per row
# and group slot of the tile, summed across the tile at the end: a fixed order, so repeated
# runs are bit-identical).
#
# Three implementations of the group dot, all exact:
# * "dp4a" (GPU, PTX): byte lookups and integer dot products. prmt with a 4-nibble selector
#   is an 8-entry byte table: it turns 4 magnitude codes into the bytes 2|a| (0..12) at once.
#   b is prepared per step as bytes +2|b| and -2|b| and selector bases i + 4 * sign(b_i); a
#   second prmt, whose selectors XOR in a's sign bits, picks +2|b| or -2|b| per byte; dp4a
#   multiplies and adds 4 byte pairs. 12 instructions per 8 values of a.
# * "f16x2" (GPU, PTX): nibbles n and n+4 of a 32-bit word moved by one shift and mask into
#   the two halves of an fp16x2 (the fp16 bits ((c & 7) << 9) of code c are |value| * 2^-14);
#   a's signs XORed into the sign bits of b's fp16x2 pair; fma.rn.f16x2 sums 8 products per
#   half, each partial sum a multiple of 2^-16 below 2^-5, exact in fp16. 19 per 8 values.
# * "tl" (portable; the one Triton's CPU interpreter runs): the same fp16 bit trick per
#   nibble in plain Triton operations, fp32 products and sums.

if triton is not None:
    # e2m1 magnitude code -> 2|value| as a byte; for b also -2|value| (prmt tables).
    _POS_LO, _POS_HI = 0x03020100, 0x0C080604
    _NEG_LO, _NEG_HI = 0xFDFEFF00, 0xF4F8FAFC

    def _ptx_quads(word, pn, xb):
        """PTX for the 8 values of a 32-bit word of a: the bytes 2|a| of each quad (m); the
        selectors i + 4 * (sign a_i xor sign b_i) (x, b's part xb precomputed); the bytes of
        +2|b| or -2|b| picked by them (bs); dp4a into acc."""
        (p0, n0), (p1, n1) = pn
        return (f"and.b32 s, {word}, 0x7777; prmt.b32 m, tlo, thi, s; "
                f"shr.b32 x, {word}, 1; and.b32 x, x, 0x44444444; xor.b32 x, x, {xb}; "
                f"prmt.b32 bs, {p0}, {n0}, x; dp4a.u32.s32 acc, m, bs, acc; "
                f"shr.b32 s, {word}, 16; and.b32 s, s, 0x7777; prmt.b32 m, tlo, thi, s; "
                f"shr.b32 x, x, 16; prmt.b32 bs, {p1}, {n1}, x; dp4a.u32.s32 acc, m, bs, acc;")

    # b group (u64) -> per quad q of 4 values the bytes +2|b| ($2q) and -2|b| ($2q+1), and per
    # 32-bit word w the selector base i + 4 * sign(b_i) for its 8 nibbles ($8 + w).
    _PTX_B_DP4A = tl.constexpr(
        "{ .reg .b32 lo, hi, s, tlo, thi, ulo, uhi; mov.b64 {lo, hi}, $10; "
        f"mov.b32 tlo, {_POS_LO:#x}; mov.b32 thi, {_POS_HI:#x}; mov.b32 ulo, {_NEG_LO:#x}; mov.b32 uhi, {_NEG_HI:#x}; "
        + " ".join(
            f"shr.b32 s, {w}, {16 * h}; and.b32 s, s, 0x7777; "
            f"prmt.b32 ${2 * (2 * i + h)}, tlo, thi, s; prmt.b32 ${2 * (2 * i + h) + 1}, ulo, uhi, s;"
            for i, w in enumerate(("lo", "hi")) for h in range(2))
        + " ".join(f" shr.b32 s, {w}, 1; and.b32 s, s, 0x44444444; or.b32 ${8 + i}, s, 0x32103210;"
                   for i, w in enumerate(("lo", "hi")))
        + " }")

    # a group (u64) . b group -> fp32 of 4 * dot (an integer).
    _PTX_DOT_DP4A = tl.constexpr(
        "{ .reg .b32 lo, hi, s, x, m, bs, acc, tlo, thi; mov.b64 {lo, hi}, $1; "
        f"mov.b32 tlo, {_POS_LO:#x}; mov.b32 thi, {_POS_HI:#x}; mov.b32 acc, 0; "
        + _ptx_quads("lo", (("$2", "$3"), ("$4", "$5")), "$10") + " "
        + _ptx_quads("hi", (("$6", "$7"), ("$8", "$9")), "$11")
        + " cvt.rn.f32.s32 $0, acc; }")

    def _ptx_pair(word, n):
        """PTX putting |a| of nibbles n, n+4 of `word` into t (fp16x2 of value * 2^-14) and
        their signs at bits 15/31 of u."""
        mag = f"shl.b32 t, {word}, {9 - 4 * n};" if n < 3 else f"shr.b32 t, {word}, 3;"
        sign = f"shl.b32 u, {word}, {12 - 4 * n};" if n < 3 else f"mov.b32 u, {word};"
        return f"{mag} and.b32 t, t, 0x0E000E00; {sign} and.b32 u, u, 0x80008000;"

    # b group (u64) -> 8 fp16x2 registers of true values; pair p = 4 * word + n.
    _PTX_B_F16X2 = tl.constexpr(
        "{ .reg .b32 lo, hi, t, u, k; mov.b64 {lo, hi}, $8; mov.b32 k, 0x74007400; "
        + " ".join(_ptx_pair(w, n) + f" or.b32 t, t, u; mul.rn.f16x2 ${4 * i + n}, t, k;"
                   for i, w in enumerate(("lo", "hi")) for n in range(4))
        + " }")

    # a group (u64) . b group (8 fp16x2) -> fp32 of 4 * dot: (sum of the halves) * 2^16.
    _PTX_DOT_F16X2 = tl.constexpr(
        "{ .reg .b32 lo, hi, t, u, acc; .reg .b16 h0, h1; .reg .f32 f0, f1; mov.b64 {lo, hi}, $1; "
        + " ".join(_ptx_pair(w, n) + f" xor.b32 u, u, ${2 + 4 * i + n}; "
                   + ("mul.rn.f16x2 acc, t, u;" if i == 0 and n == 0 else "fma.rn.f16x2 acc, t, u, acc;")
                   for i, w in enumerate(("lo", "hi")) for n in range(4))
        + " mov.b32 {h0, h1}, acc; cvt.f32.f16 f0, h0; cvt.f32.f16 f1, h1; add.f32 f0, f0, f1; "
        "mul.f32 $0, f0, 0f47800000; }")

    @triton.jit
    def _group_dot_dp4a(qa, qb):
        """b's step prepared once per thread ([BLOCK_G] -> 10 registers per group), then the
        group dot per (row, group)."""
        b0, b1, b2, b3, b4, b5, b6, b7, x0, x1 = tl.inline_asm_elementwise(
            _PTX_B_DP4A, "=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,l", [qb], dtype=(tl.int32,) * 10, is_pure=True, pack=1)
        return tl.inline_asm_elementwise(
            _PTX_DOT_DP4A, "=f,l,r,r,r,r,r,r,r,r,r,r",
            [qa, b0[None, :], b1[None, :], b2[None, :], b3[None, :], b4[None, :], b5[None, :],
             b6[None, :], b7[None, :], x0[None, :], x1[None, :]],
            dtype=tl.float32, is_pure=True, pack=1)

    @triton.jit
    def _group_dot_f16x2(qa, qb):
        b0, b1, b2, b3, b4, b5, b6, b7 = tl.inline_asm_elementwise(
            _PTX_B_F16X2, "=r,=r,=r,=r,=r,=r,=r,=r,l", [qb], dtype=(tl.int32,) * 8, is_pure=True, pack=1)
        return tl.inline_asm_elementwise(
            _PTX_DOT_F16X2, "=f,l,r,r,r,r,r,r,r,r",
            [qa, b0[None, :], b1[None, :], b2[None, :], b3[None, :],
             b4[None, :], b5[None, :], b6[None, :], b7[None, :]],
            dtype=tl.float32, is_pure=True, pack=1)

    @triton.jit
    def _e2m1_tl(w, n: tl.constexpr):
        """Nibble n of uint32 words -> fp32 2 * value (fp16 bits = value * 2^-14, times 2^15)."""
        x = w >> (4 * n)
        bits = ((x & 7) << 9) | ((x & 8) << 12)
        return bits.to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32) * 32768.0

    @triton.jit
    def _group_dot_tl(qa, qb):
        a_lo = qa.to(tl.uint32)
        a_hi = (qa >> 32).to(tl.uint32)
        b_lo = qb.to(tl.uint32)
        b_hi = (qb >> 32).to(tl.uint32)
        s = _e2m1_tl(a_lo, 0) * _e2m1_tl(b_lo, 0)[None, :]
        for n in tl.static_range(1, 8):
            s += _e2m1_tl(a_lo, n) * _e2m1_tl(b_lo, n)[None, :]
        for n in tl.static_range(8):
            s += _e2m1_tl(a_hi, n) * _e2m1_tl(b_hi, n)[None, :]
        return s

    @triton.jit
    def _e4m3(s):
        """uint8 e4m3 codes -> fp32 (exact; codes 0x7F/0xFF, NaN, are never inputs)."""
        return s.to(tl.float8e4nv, bitcast=True).to(tl.float32)

    @triton.jit
    def _nvfp4_gemv_kernel(
        a_ptr, b_ptr, sfa_ptr, sfb_ptr, c_ptr,
        n_groups,  # K / 16
        stride_am, stride_al, stride_bl,  # a, b strides in 8-byte words
        sfa_bstride, sfb_bstride,  # bytes per batch of the permuted scales
        stride_cm, stride_cl,  # c strides in elements
        BLOCK_M: tl.constexpr, BLOCK_G: tl.constexpr, STAGES: tl.constexpr, EVEN_G: tl.constexpr,
        DECODE: tl.constexpr, A_EVICT: tl.constexpr,
    ):
        pid_m = tl.program_id(0)
        li = tl.program_id(1).to(tl.int64)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        gs = tl.arange(0, BLOCK_G)
        a_rows = a_ptr.to(tl.pointer_type(tl.uint64)) + li * stride_al + rows[:, None].to(tl.int64) * stride_am
        b_row = b_ptr.to(tl.pointer_type(tl.uint64)) + li * stride_bl
        sa_rows = (sfa_ptr.to(tl.pointer_type(tl.uint8)) + li * sfa_bstride
                   + ((rows // 128) * (n_groups * 128) + (rows % 32) * 16 + ((rows % 128) // 32) * 4)[:, None])
        sb_row = sfb_ptr.to(tl.pointer_type(tl.uint8)) + li * sfb_bstride
        acc = tl.zeros([BLOCK_M, BLOCK_G], dtype=tl.float32)
        for g0 in tl.range(0, n_groups, BLOCK_G, num_stages=STAGES):
            g = g0 + gs
            gp = (g // 4) * 512 + (g % 4)  # scale byte of group g within a batch's row block
            if EVEN_G:
                qa = tl.load(a_rows + g[None, :], eviction_policy=A_EVICT)
                sa = tl.load(sa_rows + gp[None, :], eviction_policy=A_EVICT)
                qb = tl.load(b_row + g, eviction_policy="evict_last")
                sb = tl.load(sb_row + gp, eviction_policy="evict_last")
            else:
                gm = g < n_groups
                qa = tl.load(a_rows + g[None, :], mask=gm[None, :], other=0, eviction_policy=A_EVICT)
                sa = tl.load(sa_rows + gp[None, :], mask=gm[None, :], other=0, eviction_policy=A_EVICT)
                qb = tl.load(b_row + g, mask=gm, other=0, eviction_policy="evict_last")
                sb = tl.load(sb_row + gp, mask=gm, other=0, eviction_policy="evict_last")
            if DECODE == 2:
                s = _group_dot_dp4a(qa, qb)
            elif DECODE == 1:
                s = _group_dot_f16x2(qa, qb)
            elif DECODE == 0:
                s = _group_dot_tl(qa, qb)
            else:  # timing probe only (wrong results): the loads with next to no arithmetic
                s = (qa ^ qb[None, :]).to(tl.uint32).to(tl.float32)
            acc += s * (_e4m3(sa) * (_e4m3(sb) * 0.25)[None, :])
        out = tl.sum(acc, axis=1)
        tl.store(c_ptr + rows * stride_cm + li * stride_cl, out.to(tl.float16))


# --------------------------------------------------------------------------- validation

def _permuted_strides(rb: int, kb: int, l: int) -> tuple:
    """Strides of a (32, 4, rb, 4, kb, l) view of contiguous (l, rb, kb, 32, 4, 4) memory."""
    return (16, 4, kb * 512, 1, 512, rb * kb * 512)


def _check(data) -> tuple:
    """Cheap per-call validation; returns (m, k, l). Raises ValueError/TypeError naming the
    constraint that fails."""
    if len(data) != 7:
        raise ValueError(f"data must be (a, b, sfa, sfb, sfa_permuted, sfb_permuted, c), got {len(data)} items")
    a, b, _, _, sfa_p, sfb_p, c = data
    if a.dtype != _FP4 and a.dtype != torch.uint8:
        raise TypeError(f"a must be float4_e2m1fn_x2 (or its uint8 bytes), got {a.dtype}")
    if b.dtype != a.dtype:
        raise TypeError(f"b must have a's dtype {a.dtype}, got {b.dtype}")
    if sfa_p.dtype != _E4M3 or sfb_p.dtype != _E4M3:
        raise TypeError(f"sfa_permuted/sfb_permuted must be float8_e4m3fn, got {sfa_p.dtype}/{sfb_p.dtype}")
    if c.dtype != torch.float16:
        raise TypeError(f"c must be float16, got {c.dtype}")
    if a.dim() != 3 or b.dim() != 3 or c.dim() != 3:
        raise ValueError(f"a, b, c must be 3-D, got {a.dim()}-D, {b.dim()}-D, {c.dim()}-D")
    m, kh, l = a.shape
    k = 2 * kh
    if m % 128 or m == 0:
        raise ValueError(f"M % 128 == 0 required (M > 0), got M={m}")
    if k % 64 or k == 0:
        raise ValueError(f"K % 64 == 0 required (K > 0), got K={k}")
    if l < 1:
        raise ValueError(f"L >= 1 required, got L={l}")
    nb = b.shape[0]
    if nb % 128 or b.shape[1] != kh or b.shape[2] != l:
        raise ValueError(f"b must be [128*j, K/2, L] = [*, {kh}, {l}], got {tuple(b.shape)}")
    if tuple(c.shape) != (m, 1, l):
        raise ValueError(f"c must be [M, 1, L] = {(m, 1, l)}, got {tuple(c.shape)}")
    if a.stride(1) != 1 or b.stride(1) != 1:
        raise ValueError("a and b must be K-major (stride 1 along K/2)")
    kb = k // 64
    if tuple(sfa_p.shape) != (32, 4, m // 128, 4, kb, l) or sfa_p.stride() != _permuted_strides(m // 128, kb, l):
        raise ValueError(f"sfa_permuted must be a (32, 4, {m // 128}, 4, {kb}, {l}) view of contiguous "
                         f"(L, M/128, K/64, 32, 4, 4) memory; got shape {tuple(sfa_p.shape)} strides {sfa_p.stride()}")
    if tuple(sfb_p.shape) != (32, 4, nb // 128, 4, kb, l) or sfb_p.stride() != _permuted_strides(nb // 128, kb, l):
        raise ValueError(f"sfb_permuted must be a (32, 4, {nb // 128}, 4, {kb}, {l}) view of contiguous "
                         f"(L, N/128, K/64, 32, 4, 4) memory; got shape {tuple(sfb_p.shape)} strides {sfb_p.stride()}")
    dev = a.device
    if b.device != dev or sfa_p.device != dev or sfb_p.device != dev or c.device != dev:
        raise ValueError(f"a, b, sfa_permuted, sfb_permuted, c must share one device; got {a.device}, {b.device}, "
                         f"{sfa_p.device}, {sfb_p.device}, {c.device}")
    return m, k, l


# --------------------------------------------------------------------------- torch backend

_LUT = {}


def _e2m1_lut(device) -> torch.Tensor:
    lut = _LUT.get(device)
    if lut is None:
        lut = _LUT[device] = torch.tensor(_E2M1, dtype=torch.float32, device=device)
    return lut


def _plain_from_permuted(sf_p: torch.Tensor, rows: int, k: int) -> torch.Tensor:
    """(32, 4, rows/128, 4, k/64, l) permuted scales -> [rows, k/16, l] plain (on sf_p's device)."""
    return sf_p.permute(2, 1, 0, 4, 3, 5).reshape(rows, k // 16, sf_p.shape[5])


def _torch_backend(data, m: int, k: int, l: int) -> torch.Tensor:
    """Exact: each 16-element group's dot product is exact in fp32 (multiples of 1/4 below
    2^10), times the exact fp32 product of the two e4m3 scales; the groups sum in float64 and
    the result rounds once to fp16. Reads the permuted scales, so it stays on a's device."""
    a, b, _, _, sfa_p, sfb_p, c = data
    lut = _e2m1_lut(a.device)
    g = k // 16
    sa_all = _plain_from_permuted(sfa_p, m, k)  # [m, g, l] e4m3
    sb_all = _plain_from_permuted(sfb_p[:, :, :1], 128, k)  # row block 0 holds row 0
    a8 = a.view(torch.uint8)
    b8 = b.view(torch.uint8)
    rows = max(1, min(m, _TORCH_CHUNK // k))
    for li in range(l):
        b0 = b8[0, :, li]
        bv = torch.stack((lut[(b0 & 15).long()], lut[(b0 >> 4).long()]), dim=-1).reshape(g, 16)
        sb = sb_all[0, :, li].to(torch.float32)
        for r0 in range(0, m, rows):
            blk = a8[r0:r0 + rows, :, li]
            av = torch.stack((lut[(blk & 15).long()], lut[(blk >> 4).long()]), dim=-1).reshape(-1, g, 16)
            group = (av * bv).sum(dim=-1)  # exact
            terms = group * (sa_all[r0:r0 + rows, :, li].to(torch.float32) * sb)  # exact
            c[r0:r0 + rows, 0, li] = terms.double().sum(dim=-1).to(torch.float16)
    return c


# --------------------------------------------------------------------------- scaled_mm backend

def _blocked(sf_p: torch.Tensor) -> torch.Tensor:
    """Permuted scales -> [l, rows*k/16] blocked vectors: a view (the memory already is the
    cuBLAS blocked order per batch)."""
    return sf_p.permute(5, 2, 4, 0, 1, 3).reshape(sf_p.shape[5], -1)


def _scaled_mm_backend(data, m: int, k: int, l: int) -> torch.Tensor:
    a, b, _, _, sfa_p, sfb_p, _ = data
    if a.dtype != _FP4:
        a, b = a.view(_FP4), b.view(_FP4)
    sa = _blocked(sfa_p)
    sb = _blocked(sfb_p)
    mm = torch._scaled_mm

    def one(i):
        return mm(a[:, :, i], b[:, :, i].transpose(0, 1), sa[i], sb[i], bias=None, out_dtype=torch.float16)[:, 0]

    if l == 1:
        return one(0).view(m, 1, 1)
    if l == 2:
        cols = (one(0), one(1))
    elif l == 4:
        cols = (one(0), one(1), one(2), one(3))
    elif l == 8:
        cols = (one(0), one(1), one(2), one(3), one(4), one(5), one(6), one(7))
    else:
        cols = []
        i = 0
        while i + 4 <= l:
            cols += (one(i), one(i + 1), one(i + 2), one(i + 3))
            i += 4
        while i < l:
            cols.append(one(i))
            i += 1
    return torch.stack(cols, dim=1).view(m, 1, l)


# --------------------------------------------------------------------------- triton backend

_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"

# (M, K, L) -> (BLOCK_M, BLOCK_G, num_warps, num_stages) for the benchmark shapes. Chosen by
# benchmarks/bench_kernel.py --sweep on an H100 80GB HBM3 (2026-11-22, device time, L2 cold;
# the sweeps and their history are in benchmarks/NOTES.md). A thread holds 4 groups (32
# bytes) of each of its rows per step; rows per thread R = BLOCK_M * BLOCK_G / (128 * warps).
_TRITON_CONFIGS = {
    # 29.0-29.5 us (read ceiling 25.5): next best (2, 128, 1) 29.4-29.8, (16, 128, 4) 29.6-29.9;
    # whole rows per program (1, 1024, 4) 33.7; the loads-only probe of this tile: 28.4-28.9.
    (7168, 16384, 1): (8, 128, 2, 1),
    # 49.3-50.4 us (ceiling 46.1): next (16, 32, 1) 50.1-50.9, (8, 64, 1) 50.4-52.2.
    (4096, 7168, 8): (16, 64, 2, 1),
    # 16.4-16.9 us (ceiling 15.1-15.3): next (16, 32, 1) 16.7-17.2, (8, 64, 2) 17.0-17.9.
    (7168, 2048, 4): (16, 64, 2, 1),
}
# Any other shape: R = 4 with 2 warps, the winner on both K = 7168 and K = 2048; num_stages 1
# (Triton's cp.async pipelining of the K loop lost 5-60% in every sweep: it adds shared
# memory traffic and cuts occupancy, while the plain loads already overlap across warps).
_TRITON_DEFAULT = (16, 64, 2, 1)


def _triton_config(m: int, k: int, l: int) -> tuple:
    cfg = _TRITON_CONFIGS.get((m, k, l))
    if cfg is None:
        block_m, block_g, warps, stages = _TRITON_DEFAULT
        g = k // 16
        while block_g > 4 and block_g >= 2 * g:  # no step much wider than a row
            block_g //= 2
        cfg = (block_m, block_g, warps, stages)
    return cfg


# Eviction policy for A and its scales (read once): "evict_first" vs none differed by under
# 1% either way on the H100 (within run-to-run spread); kept as the intent for bigger L2s.
# ".cg" loads were 1-2% slower (and cannot combine with an eviction policy).
_TRITON_EVICT = "evict_first"
_DECODES = {"tl": 0, "f16x2": 1, "dp4a": 2, "loads-only": 3}  # the last: a timing probe, wrong output
# The GPU's group dot: dp4a beat f16x2 by 1-5% (best configs: 29.3 vs 30.9, 49.7 vs 51.5, 16.6
# vs 17.0 us) and tl (fp32 per nibble) by 2x.
_TRITON_DECODE = "dp4a"


# Launch cache. Triton's JIT launch re-derives every argument's specialisation on each call
# (a few µs of Python per call, which the leaderboard's timing includes). After the first
# launch of a key, the compiled kernel is called directly; the key holds everything the
# specialisation depends on (the integer arguments, pointer alignment, constexprs, device).
# The direct path is checked once against the JIT path's output; if it differs or raises
# (another Triton version, say), that key keeps the JIT path.
_TRITON_LAUNCH = {}


def _direct_runner(compiled, grid, args, consts, c):
    """compiled[grid] (Triton's launcher, without the binder), if it reproduces c exactly."""
    try:
        run = compiled[grid]
        scratch = torch.empty_like(c).fill_(float("nan"))
        run(*args[:4], scratch, *args[5:], *consts)
        if torch.equal(scratch, c):
            return run
    except Exception:  # noqa: BLE001 - any failure means: keep the JIT path
        pass
    return None


def _triton_backend(data, m: int, k: int, l: int, decode: str = "") -> torch.Tensor:
    a, b, _, _, sfa_p, sfb_p, c = data
    cfg = _triton_config(m, k, l)
    n_groups = k // 16
    a8 = a.view(torch.uint8)
    b8 = b.view(torch.uint8)
    args = (a8, b8, sfa_p, sfb_p, c, n_groups, a.stride(0) // 8, a.stride(2) // 8, b.stride(2) // 8,
            m * n_groups, b.shape[0] * n_groups, c.stride(0), c.stride(2))
    aligned = (a8.data_ptr() | b8.data_ptr() | sfa_p.data_ptr() | sfb_p.data_ptr() | c.data_ptr()) & 15 == 0
    key = (args[5:], m, l, aligned, cfg, decode, _TRITON_EVICT, a.device)
    run = _TRITON_LAUNCH.get(key)
    if run is not None:
        run(*args, *run.consts)
        return c
    block_m, block_g, warps, stages = cfg
    dec = _DECODES[decode or ("tl" if _INTERPRET else _TRITON_DECODE)]
    consts = (block_m, block_g, stages, n_groups % block_g == 0, dec, _TRITON_EVICT)
    grid = (m // block_m, l, 1)
    compiled = _nvfp4_gemv_kernel[grid](
        *args, BLOCK_M=block_m, BLOCK_G=block_g, STAGES=stages, EVEN_G=consts[3], DECODE=dec,
        A_EVICT=_TRITON_EVICT, num_warps=warps, num_stages=stages)
    if key not in _TRITON_LAUNCH and not _INTERPRET:
        _TRITON_LAUNCH[key] = None  # JIT path unless the direct one proves itself
        run = _direct_runner(compiled, grid, args, consts, c)
        if run is not None:
            run.consts = consts
            _TRITON_LAUNCH[key] = run
    return c


# --------------------------------------------------------------------------- dispatch

def scaled_mm_supported(device) -> tuple:
    """(ok, reason): FP4 ``torch._scaled_mm`` needs CUDA compute capability 10.x (Blackwell)."""
    device = torch.device(device)
    if device.type != "cuda":
        return False, f"FP4 torch._scaled_mm needs a CUDA device, got {device.type}"
    cap = torch.cuda.get_device_capability(device)
    if cap[0] != 10:
        return False, f"FP4 torch._scaled_mm needs compute capability 10.x, this GPU is {cap[0]}.{cap[1]}"
    return True, ""


def triton_supported(device) -> tuple:
    """(ok, reason): Triton on a CUDA GPU of compute capability >= 8.0, or on the CPU under
    Triton's interpreter (TRITON_INTERPRET=1 before import; for tests, slow)."""
    device = torch.device(device)
    if triton is None:
        return False, "triton is not installed"
    if device.type == "cuda":
        cap = torch.cuda.get_device_capability(device)
        if cap < (8, 0):
            return False, f"the triton kernel needs compute capability >= 8.0, this GPU is {cap[0]}.{cap[1]}"
        return True, ""
    if device.type == "cpu" and _INTERPRET:
        return True, ""
    return False, f"the triton kernel needs a CUDA GPU (or TRITON_INTERPRET=1 on the CPU), got {device.type}"


def torch_supported(device) -> tuple:
    return True, ""


_SUPPORT = {"scaled_mm": scaled_mm_supported, "triton": triton_supported, "torch": torch_supported}
_RUN = {"scaled_mm": _scaled_mm_backend, "triton": _triton_backend, "torch": _torch_backend}
_AUTO = {}  # device -> "torch" | "triton" | "fastest"
_FASTEST = {}  # (device, m, k, l) -> backend, measured on first use (Blackwell)


def backend_support(device) -> dict:
    """{backend: (ok, reason)} for this device; never raises for an unsupported backend."""
    return {name: fn(device) for name, fn in _SUPPORT.items()}


def _auto_backend(device) -> str:
    """auto: torch on the CPU; on CUDA the triton kernel, or, where FP4 _scaled_mm also runs
    (compute capability 10.x), "fastest": the faster of the two per shape (see _fastest)."""
    name = _AUTO.get(device)
    if name is None:
        name = "torch"
        if device.type == "cuda" and triton_supported(device)[0]:
            name = "fastest" if scaled_mm_supported(device)[0] else "triton"
        _AUTO[device] = name
    return name


def select_backend(device) -> str:
    """The backend ``custom_kernel`` uses on ``device`` under the current environment
    ("fastest" = measured per shape on first use)."""
    want = os.environ.get(_ENV, "auto").strip().lower() or "auto"
    if want not in _BACKENDS:
        raise ValueError(f"{_ENV}={want!r}: choose one of {', '.join(_BACKENDS)}")
    if want == "auto":
        return _auto_backend(device)
    ok, why = _SUPPORT[want](device)
    if not ok:
        raise RuntimeError(f"{_ENV}={want} cannot run on {device}: {why}")
    return want


def _time_backend(name: str, data, m: int, k: int, l: int, reps: int = 5) -> float:
    """Median device milliseconds of one backend on ``data`` (after one warm-up call)."""
    run = _RUN[name]
    run(data, m, k, l)
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run(data, m, k, l)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[reps // 2]


def _fastest(data, m: int, k: int, l: int) -> str:
    """The faster of triton and scaled_mm for this shape, timed once on the first call with
    the shape and cached for the process (a backend that raises is skipped)."""
    key = (data[0].device, m, k, l)
    name = _FASTEST.get(key)
    if name is None:
        times = {}
        for cand in ("triton", "scaled_mm"):
            try:
                times[cand] = _time_backend(cand, data, m, k, l)
            except Exception:  # e.g. a cuBLAS without FP4 support: not a candidate
                pass
        name = _FASTEST[key] = min(times, key=times.get) if times else "torch"
    return name


def custom_kernel(data: input_t) -> output_t:
    m, k, l = _check(data)
    name = select_backend(data[0].device)
    if name == "fastest":
        name = _fastest(data, m, k, l)
    return _RUN[name](data, m, k, l)
