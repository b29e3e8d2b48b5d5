#!POPCORN leaderboard nvfp4_gemv
#!POPCORN gpu NVIDIA
"""NVFP4 block-scaled batched GEMV: c[:, 0, l] = fp16(sum_k A[:, k, l] * B[0, k, l]).

One entry point, ``custom_kernel(data)``, dispatching to a backend:

* ``scaled_mm``: FP4 ``torch._scaled_mm`` per batch (needs compute capability 10.x). The
  blocked scale vectors are views of ``sfa_permuted`` / ``sfb_permuted`` (no copies).
* ``triton``: not built yet (slot kept for the portable kernel).
* ``torch``: exact dequantise-and-multiply in plain torch; runs anywhere (CPU included).

``NVFP4_GEMV_BACKEND`` = auto | scaled_mm | triton | torch forces one; a forced backend that
cannot run here raises. ``auto`` picks torch on CPU and triton (when built) on CUDA.

Inputs ``(a, b, sfa, sfb, sfa_permuted, sfb_permuted, c)``: a [m, k/2, l] e2m1 pairs (low
nibble = even element), b [128, k/2, l] (row 0 used), plain scales sfa/sfb (on the CPU on a
CUDA run, so never read here), permuted scales (32, 4, rows/128, 4, k/64, l) whose memory is
a contiguous (l, rows/128, k/64, 32, 4, 4) array, c [m, 1, l] fp16.
"""

import os

import torch

from task import input_t, output_t

# --------------------------------------------------------------------------- constants

_BACKENDS = ("auto", "scaled_mm", "triton", "torch")
_ENV = "NVFP4_GEMV_BACKEND"
_FP4 = torch.float4_e2m1fn_x2
_E4M3 = torch.float8_e4m3fn

# e2m1 code -> value (bit 3 is the sign; code 8 is -0.0).
_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)

# torch backend: elements of A decoded at once (bounds its fp32 temporaries to ~64 MiB).
_TORCH_CHUNK = 1 << 24


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
    return False, "the triton backend is not built yet"


def torch_supported(device) -> tuple:
    return True, ""


_SUPPORT = {"scaled_mm": scaled_mm_supported, "triton": triton_supported, "torch": torch_supported}
_RUN = {"scaled_mm": _scaled_mm_backend, "torch": _torch_backend}
_AUTO = {}  # device -> backend chosen by auto


def backend_support(device) -> dict:
    """{backend: (ok, reason)} for this device; never raises for an unsupported backend."""
    return {name: fn(device) for name, fn in _SUPPORT.items()}


def _auto_backend(device) -> str:
    name = _AUTO.get(device)
    if name is None:
        name = "torch"
        if device.type == "cuda" and triton_supported(device)[0]:
            name = "triton"
        _AUTO[device] = name
    return name


def select_backend(device) -> str:
    """The backend ``custom_kernel`` uses on ``device`` under the current environment."""
    want = os.environ.get(_ENV, "auto").strip().lower() or "auto"
    if want not in _BACKENDS:
        raise ValueError(f"{_ENV}={want!r}: choose one of {', '.join(_BACKENDS)}")
    if want == "auto":
        return _auto_backend(device)
    ok, why = _SUPPORT[want](device)
    if not ok:
        raise RuntimeError(f"{_ENV}={want} cannot run on {device}: {why}")
    return want


def custom_kernel(data: input_t) -> output_t:
    m, k, l = _check(data)
    return _RUN[select_backend(data[0].device)](data, m, k, l)
