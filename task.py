"""Types of the nvfp4_gemv problem, as the competition server defines them.

The server places its own copy of this module beside a submission; a submission
may import it (and nothing else of this kit).
"""

from typing import TypedDict, TypeVar

import torch

# (a, b, sfa, sfb, sfa_permuted, sfb_permuted, c)
input_t = TypeVar(
    "input_t",
    bound=tuple[
        torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
        torch.Tensor, torch.Tensor, torch.Tensor,
    ],
)
output_t = TypeVar("output_t", bound=torch.Tensor)


class TestSpec(TypedDict):
    m: int
    k: int
    l: int
    seed: int
