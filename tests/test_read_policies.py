"""The read ceiling's load policies (benchmarks/timing.py): every policy reads the right bytes
with every launch shape, each compiles to the PTX load it names (sm_90a, sm_100a), and the
ceiling is the fastest (shape, policy) pair with each policy's best beside it."""

import functools
import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import HAS_CUDA, ROOT

from benchmarks import timing

DEVICE = "cuda" if HAS_CUDA else "cpu"


def _policies_here():
    cap = torch.cuda.get_device_capability() if HAS_CUDA else None
    return [p.name for p in timing.read_policies(cap)]


@pytest.mark.parametrize("policy", _policies_here())
def test_every_policy_and_launch_shape_writes_the_xor_of_its_programs_words(policy):
    """On CPU Triton's interpreter runs the kernel (the inline-PTX policies through their plain
    fallback, same indexing); on a GPU the policy's own loads. The word count is no multiple of
    any program's span, so the last program's mask is exercised."""
    nbytes = 3 * 1024 * 8 + 40  # rounded up to 3088 words
    src, out = timing.make_read_buffers(nbytes, 1, device=DEVICE)[0]
    words = src.view(torch.int64).cpu().numpy().view(np.uint64)
    assert words.size == 3088
    for shape in timing.READ_SHAPES:
        block, iters, _ = shape
        span = block * iters
        programs = -(-words.size // span)
        out.fill_(0)
        timing.read_launch((src, out), *shape, policy)
        got = out.view(torch.int64).cpu().numpy().view(np.uint64)[:programs]
        want = np.array([functools.reduce(np.bitwise_xor, words[i * span:(i + 1) * span], np.uint64(0))
                         for i in range(programs)], dtype=np.uint64)
        assert np.array_equal(got, want), (policy, shape)


_PTX_SCRIPT = r"""
import json, re, sys
sys.path.insert(0, sys.argv[1])
from benchmarks import timing
res = {}
for arch in (90, 100):
    for p in timing.READ_POLICIES:
        try:
            ptx = timing.read_kernel_ptx(p.name, arch)
            res[f"{arch} {p.name}"] = sorted(set(re.findall(r"ld\.global[\w.:]*", ptx)))
        except Exception as exc:
            res[f"{arch} {p.name}"] = "refused: " + " | ".join(
                ln for ln in str(exc).splitlines() if "error" in ln)[:300]
print("JSON" + json.dumps(res))
"""


@pytest.fixture(scope="module")
def ptx_loads():
    """{'ARCH POLICY': the ld.global instructions of its PTX, or 'refused: ...'}: compiled in a
    subprocess (Triton's compiler needs TRITON_INTERPRET unset), no GPU needed."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", _PTX_SCRIPT, str(ROOT)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("JSON")), None)
    assert line is not None, proc.stderr[-2000:]
    return json.loads(line[4:])


@pytest.mark.parametrize("arch", [90, 100])
def test_each_policy_compiles_to_the_load_it_names(ptx_loads, arch):
    for p in timing.READ_POLICIES:
        got = ptx_loads[f"{arch} {p.name}"]
        if (arch // 10, arch % 10) < p.min_cc:
            assert isinstance(got, str) and got.startswith("refused"), (p.name, got)
            continue
        assert got == [p.ptx], (arch, p.name, got)


def test_the_policies_are_distinct_loads_and_include_the_asked_forms():
    ptx = [p.ptx for p in timing.READ_POLICIES]
    assert len(set(ptx)) == len(ptx)
    names = {p.name for p in timing.READ_POLICIES}
    assert {"plain", "evict_first", "evict_last", "cs", "cg"} <= names
    assert any("no_allocate" in p.ptx for p in timing.READ_POLICIES)


def test_read_policies_filters_by_compute_capability():
    hopper = {p.name for p in timing.read_policies((9, 0))}
    blackwell = {p.name for p in timing.read_policies((10, 0))}
    assert "no_allocate_l2_evict_first_256" not in hopper
    assert blackwell == {p.name for p in timing.READ_POLICIES}
    assert hopper == blackwell - {"no_allocate_l2_evict_first_256"}


def test_best_read_picks_the_fastest_pair_and_each_policys_best_shape():
    a, b = (1024, 1, 4), (2048, 2, 8)
    times = {(a, "plain"): 30.0, (b, "plain"): 29.0, (a, "cs"): 27.5, (b, "cs"): 28.0,
             (a, "evict_first"): float("nan"), (b, "evict_first"): 27.9}
    res = timing.best_read(times, {"cg": "RuntimeError: refused"})
    assert (res["us"], res["shape"], res["policy"]) == (27.5, a, "cs")
    assert res["by_policy"] == {"plain": {"us": 29.0, "shape": b}, "evict_first": {"us": 27.9, "shape": b},
                                "cs": {"us": 27.5, "shape": a}}
    assert list(res["by_policy"]) == ["plain", "evict_first", "cs"]  # READ_POLICIES order
    assert res["errors"] == {"cg": "RuntimeError: refused"} and res["all"] is times
    assert timing.policy_text(res) == "launch (1024, 1, 4), cs"


def test_best_read_with_nothing_timed_says_why():
    with pytest.raises(RuntimeError, match="no read ceiling.*cg: refused"):
        timing.best_read({((1024, 1, 4), "plain"): math.nan}, {"cg": "refused"})


def test_the_grid_tries_shapes_x_policies_and_drops_a_refused_policy_after_its_first_failure(monkeypatch):
    launched = []

    def fake_launch(buf, block, iters, warps, policy):
        launched.append(((block, iters, warps), policy))
        if policy == "cg":
            raise RuntimeError("ptxas refused\nmore")

    monkeypatch.setattr(timing, "read_launch", fake_launch)
    us = {"plain": 30.0, "cs": 28.0, "cg": 1.0}

    def timer(fn):
        fn("buf")
        shape, policy = launched[-1]
        return us[policy] + shape[0] / 1e4

    shapes = ((1024, 1, 4), (2048, 2, 8))
    res = timing._time_grid(timer, shapes, ("plain", "cs", "cg"))
    assert [p for _, p in launched] == ["plain", "plain", "cs", "cs", "cg"]
    assert res["errors"] == {"cg": "RuntimeError: ptxas refused"}
    assert (res["policy"], res["shape"]) == ("cs", (1024, 1, 4))
    assert res["us"] == pytest.approx(28.1024)
    assert set(res["by_policy"]) == {"plain", "cs"}


def test_ceilings_pass_the_policies_and_shapes_through(monkeypatch):
    seen = []
    monkeypatch.setattr(timing, "_time_grid", lambda timer, shapes, policies: seen.append((shapes, policies)) or {})
    timing.read_ceiling(1000, 2, 5, shapes=((1024, 1, 4),), bufs=["x", "y"], policies=("cs",))
    timing.read_ceiling_server(1000, 5, shapes=((2048, 2, 8),), buf="x", policies=("plain",))
    assert seen == [(((1024, 1, 4),), ("cs",)), (((2048, 2, 8),), ("plain",))]


def test_asm_loads_name_their_outputs_pointer_and_mask():
    text = timing._asm_load(2, "nc.L1::no_allocate")
    assert "setp.ne.b32 p, $3, 0;" in text and "{$0, $1}, [$2];" in text
    hinted = timing._asm_load(4, "L1::no_allocate.L2::cache_hint", "evict_first")
    assert "createpolicy.fractional.L2::evict_first.b64 q, 1.0;" in hinted
    assert re.search(r"\{\$0, \$1, \$2, \$3\}, \[\$4\], q;", hinted) and "$5, 0;" in hinted
