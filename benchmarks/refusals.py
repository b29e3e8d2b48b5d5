"""What the tools of this folder share to refuse bad input in one line, exit 2, before any long
work (importable without torch: a tool's refusal on a machine without a GPU imports none).

* ``build_line(exc, cfg, arch)``: a ``CudaBuildError`` in one line: the config and the arch that
  failed, then NVRTC's first error line (it names the line of the kernel's source,
  ``nvfp4_gemv.cu(N)``) and how many errors its log counts; a failure without a compiler log (no
  NVRTC here) as its message, on one line.
* ``compile_failure(exc)``: whether a ``CudaBuildError`` is the compiler refusing the source (its
  log names a line of it), not NVRTC missing or failing to start.
* ``build_problem(sub, cfg, arch)``: '' when the cuda kernel of ``cfg`` (whole steps, plain
  scales) of the submission module ``sub`` compiles for ``arch``, else ``build_line``'s line
  (NVRTC, no GPU: 0.19-0.45 s a config of the kit's kernel, 0.024-0.031 s a source with
  ``int broken( {`` after its typedefs; NVRTC 13.0 on the 2-core CPU machine, 2026-12-07, three
  configs for sm_90a and sm_100a). What a tool compiles first, so that a kernel that does not
  compile stops it at its first config, before anything else, with nothing printed but that
  line. ``first_build_problem(sub, builds)``: the
  same for the first config of each arch among ``builds`` ((config, arch) pairs in the order the
  tool compiles them): an error under one arch's switch is found as soon as a syntax error.
* ``cuda_buildable(sub)``: whether ``sub`` carries the kit's cuda backend (``CUDA_NEEDS``) and
  NVRTC is here to build it.
* ``gpu_build_problem(sub)``: ``build_problem`` of the config ``sub``'s cuda backend runs first
  on this GPU (``cuda_default`` of the first benchmark shape) for this GPU's arch: the GPU
  tools' check after their CUDA check ('' for a submission without the kit's cuda backend, or
  where NVRTC is missing: the backend then cannot run here, which the tools say as before).
* ``source_problem(path, option)``: '' when ``path`` is a file whose text parses as Python (no
  import, no torch: checked before a tool's CUDA check), else why not in one line naming
  ``option``; whether it imports is the loader's question (``harness.load_tool_submission``).
* ``folder_problem(path, option)``: '' when ``path`` can be made or written as an output folder,
  else why not in one line (the files' rule is ``harness.writable_file_problem``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

if not __package__:  # run as `python3 benchmarks/NAME.py`: kitpath puts the kit's root on sys.path
    import kitpath  # noqa: F401

from harness import one_line  # noqa: E402  (no torch at its top)

CUDA_NEEDS = ("cuda_kernel", "cuda_compile", "cuda_arch", "cuda_default", "find_nvrtc", "CudaConfig",
              "CudaBuildError")
_ERROR = re.compile(r"^\S+\(\d+\): (?:catastrophic )?error\b.*$", re.M)  # NVRTC: FILE(LINE): error: TEXT
_COUNT = re.compile(r"^(\d+) errors? detected", re.M)
_ARCH = re.compile(r"\bfor (sm_\w+)")  # submission.cuda_compile's message names the arch


def compile_failure(exc: BaseException) -> bool:
    return bool(_ERROR.search(str(exc)))


def build_line(exc: BaseException, cfg=None, arch: str = "") -> str:
    """One line of a failed build of ``cfg`` (a config, a name, or None: not known) for ``arch``
    ('': the arch the message names)."""
    text = str(exc)
    arch = arch or next(iter(_ARCH.findall(text)), "")
    what = "the cuda kernel" if cfg is None else cfg if isinstance(cfg, str) else repr(cfg)
    what += f" for {arch}" if arch else ""
    first = _ERROR.search(text)
    if first is None:
        return f"{what}: {one_line(text)}"
    count = _COUNT.search(text)
    more = f" ({count.group(1)} errors in NVRTC's log)" if count and count.group(1) != "1" else ""
    return f"{what} does not compile: {first.group(0).strip()}{more}"


def build_problem(sub, cfg, arch: str) -> str:
    try:
        sub.cuda_compile(sub.cuda_kernel(cfg, True, True)[1], arch)
    except getattr(sub, "CudaBuildError", RuntimeError) as exc:  # the kit's is a RuntimeError
        return build_line(exc, cfg, arch)
    return ""


def first_build_problem(sub, builds) -> str:
    firsts = {}
    for cfg, arch in builds:
        firsts.setdefault(arch, cfg)
    return next(filter(None, (build_problem(sub, cfg, arch) for arch, cfg in firsts.items())), "")


def cuda_buildable(sub) -> bool:
    if not all(hasattr(sub, name) for name in CUDA_NEEDS):
        return False
    try:
        sub.find_nvrtc()
    except Exception:  # noqa: BLE001 - no NVRTC here: nothing to build with
        return False
    return True


def gpu_build_problem(sub) -> str:
    if not cuda_buildable(sub):
        return ""
    import torch
    capability = torch.cuda.get_device_capability()
    m, k, l = getattr(sub, "TUNED_SHAPES", ((7168, 16384, 1),))[0]
    return build_problem(sub, sub.cuda_default(m, k, l, capability), sub.cuda_arch(capability))


def source_problem(path: str | Path, option: str = "--submission") -> str:
    if not Path(path).is_file():
        return f"{option} {path} not found (or not a file)"
    try:
        compile(Path(path).read_bytes(), str(path), "exec")
    except (SyntaxError, ValueError) as exc:  # ValueError: null bytes, before Python 3.12
        return one_line(f"{option} {path} does not import: {type(exc).__name__}: {exc}")
    return ""


def folder_problem(path: str | None, option: str) -> str:
    if not path:
        return ""
    target = Path(path)
    if target.exists() and not target.is_dir():
        return f"{option} {path} is a file, not a folder"
    folder = target
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        return f"{option} {path}: {folder} is a file, not a folder"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{option} {path}: no permission to write there"
    return ""
