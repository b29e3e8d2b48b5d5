from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    name: str
    repo: str
    commit: str
    path: str
    arch: str  # arch e.g. "sm_100a"


ENTRIES: tuple[Entry, ...] = (Entry("gau-nernst-v2h", "gau-nernst/gpu-mode-kernels",
    "aee9cda6b6444f774ce5eaee1ec1a5c84acaa521", "nvidia/nvfp4_gemv/submission_v2h.py", "sm_100a"),)
