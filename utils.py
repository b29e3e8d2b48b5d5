"""Helpers the server's ``utils.py`` provides to ``reference.py`` and ``eval.py``, written here.

Same names and roles: ``set_seed``, ``get_device``, ``verbose_allclose``,
``verbose_allequal``, ``match_reference``, ``make_match_reference``,
``DeterministicContext``, ``clear_l2_cache``.
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch


def set_seed(seed: int = 42) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def get_device(use_cuda: bool = True) -> torch.device:
    if use_cuda and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def _first_indices(mask: torch.Tensor, max_print: int) -> list[tuple[int, ...]]:
    idx = torch.nonzero(mask)[:max_print]
    return [tuple(int(v) for v in row) for row in idx.tolist()]


def verbose_allclose(received: torch.Tensor, expected: torch.Tensor, rtol: float = 1e-5,
                     atol: float = 1e-8, max_print: int = 5) -> list[str]:
    """Reasons why ``received`` is not close to ``expected`` (empty list when it is).

    Element-wise |received - expected| <= atol + rtol * |expected|; a NaN or infinity
    must match exactly (NaN never passes against a finite value). The message names
    the number of mismatches and the first ``max_print`` indices with both values.
    """
    if not isinstance(received, torch.Tensor):
        return [f"output is a {type(received).__name__}, expected a torch.Tensor"]
    if received.shape != expected.shape:
        return [f"SIZE MISMATCH: received shape {tuple(received.shape)}, expected {tuple(expected.shape)}"]
    if received.dtype != expected.dtype:
        return [f"DTYPE MISMATCH: received {received.dtype}, expected {expected.dtype}"]
    r = received.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    diff = (r - e).abs()
    tol_bad = diff > (atol + rtol * e.abs())
    nan_bad = torch.isnan(r) ^ torch.isnan(e)
    inf_bad = (torch.isposinf(r) ^ torch.isposinf(e)) | (torch.isneginf(r) ^ torch.isneginf(e))
    bad = tol_bad | nan_bad | inf_bad
    n_bad = int(bad.sum())
    if n_bad == 0:
        return []
    lines = [f"Number of mismatched elements: {n_bad} of {bad.numel()}"]
    for i in _first_indices(bad, max_print):
        lines.append(f"ERROR at {i}: {r[i].item()!r} {e[i].item()!r}")
    if n_bad > max_print:
        lines.append(f"... and {n_bad - max_print} more mismatched elements.")
    return lines


def verbose_allequal(received: torch.Tensor, expected: torch.Tensor, max_print: int = 5) -> list[str]:
    """Reasons why the tensors are not bitwise equal in value (empty list when they are)."""
    return verbose_allclose(received, expected, rtol=0.0, atol=0.0, max_print=max_print)


def match_reference(data, output, reference, rtol: float = 1e-5, atol: float = 1e-8) -> tuple[bool, str]:
    """Run ``reference(data)`` and compare ``output`` with it: (passed, message)."""
    expected = reference(data)
    reasons = verbose_allclose(output, expected, rtol=rtol, atol=atol)
    if reasons:
        return False, "mismatch found! custom implementation doesn't match reference: " + " ".join(reasons)
    return True, ""


def make_match_reference(reference, **kwargs):
    def wrapped(data, output):
        return match_reference(data, output, reference=reference, **kwargs)
    return wrapped


class DeterministicContext:
    """Deterministic algorithms and no TF32 inside the block; restores the previous state."""

    def __enter__(self):
        self._tf32 = torch.backends.cudnn.allow_tf32
        self._det = torch.backends.cudnn.deterministic
        self._cublas = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.deterministic = True
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
        torch.use_deterministic_algorithms(True)
        return self

    def __exit__(self, *exc):
        torch.backends.cudnn.allow_tf32 = self._tf32
        torch.backends.cudnn.deterministic = self._det
        torch.use_deterministic_algorithms(False)
        if self._cublas is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = self._cublas
        return False


def clear_l2_cache(nbytes: int = 1 << 32) -> None:
    """Evict the GPU's L2 by writing a fresh ``nbytes`` buffer (default 4 GiB of float32
    ``randn``, as the server's benchmark loop does; far above any L2: 50 MB H100, 60 MB
    H200, 126 MB B200). No-op without CUDA."""
    if not torch.cuda.is_available():
        return
    dummy = torch.randn(nbytes // 4, dtype=torch.float32, device="cuda")
    del dummy
