"""The judge a submission cannot patch (harness.Seal, harness.JudgedWorker): what the seal takes
before any user code runs, that it names each kind of patch (a module's name, a class's method,
a function's code, a hook, a torch mode, a kernel registered over the dispatcher's) and puts it
back, that the timed loop run through it refuses patched timers and names a torch.Tensor
subclass, and that the judged worker's entry points are its own. In this process, on the tiny
shapes; the end-to-end runs (human mode, protocol mode) are in test_eval_protocol.py, the audit's
in test_audit.py."""

import sys
import threading
import time

import pytest
import torch
from conftest import ROOT, requires_cuda

import harness
import utils

FIXTURES = ROOT / "tests" / "fixtures"
CASE = {"m": 128, "k": 256, "l": 2, "seed": 2222}  # tests/fixtures/tiny.txt's second case


@pytest.fixture
def seal():
    found = harness.Seal()
    yield found
    found.restore()


def _nothing(*args, **kwargs):
    return None


class _Mode(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


PATCHES = {
    "a module's name": (lambda: setattr(time, "perf_counter_ns", _nothing),
                        "time.perf_counter_ns was replaced (a patched timer)"),
    "a class's method": (lambda: setattr(torch.cuda.Event, "elapsed_time", _nothing),
                         "torch.cuda.Event.elapsed_time was replaced (a patched timer)"),
    "a method added": (lambda: setattr(torch.Tensor, "clone", _nothing), "torch.Tensor.clone was added"),
    "a function's code": (lambda: setattr(utils.verbose_allclose, "__code__", _nothing.__code__),
                          "utils.verbose_allclose's code was replaced (a patched checker)"),
    "the kit's harness": (lambda: setattr(harness, "calculate_stats", _nothing),
                          "harness.calculate_stats was replaced (the kit's judge patched)"),
    "a builtin": (lambda: setattr(__builtins__ if isinstance(__builtins__, type(sys)) else sys.modules["builtins"],
                                  "isinstance", _nothing), "builtins.isinstance was replaced"),
    "a profile hook": (lambda: sys.setprofile(_nothing), "a profile function was set (sys.setprofile)"),
    "a thread trace hook": (lambda: threading.settrace(_nothing), "threading.settrace"),
    "a torch function mode": (lambda: _Mode().__enter__(), "a torch function mode was entered"),
}


@pytest.mark.parametrize("what", sorted(PATCHES))
def test_the_seal_names_each_kind_of_patch_and_puts_it_back(seal, what):
    patch, words = PATCHES[what]
    before = (time.perf_counter_ns, torch.cuda.Event.elapsed_time, utils.verbose_allclose.__code__,
              harness.calculate_stats, isinstance, sys.getprofile(), torch._C._len_torch_function_stack())
    assert seal.problems() == []
    patch()
    found = seal.problems(ops=False)
    seal.restore()
    assert any(words in line for line in found), found
    assert seal.problems() == [] and "clone" not in vars(torch.Tensor)
    assert (time.perf_counter_ns, torch.cuda.Event.elapsed_time, utils.verbose_allclose.__code__,
            harness.calculate_stats, isinstance, sys.getprofile(), torch._C._len_torch_function_stack()) == before


def test_the_seal_names_a_kernel_registered_over_the_dispatchers(seal):
    """torch.library over an operator the checker runs (aten::abs): named; the library is removed here."""
    lib = torch.library.Library("aten", "IMPL")  # noqa: TOR901 - the patch under test
    try:
        lib.impl("abs", lambda x: x, "CPU")
        assert any("aten::abs" in line and "torch.library" in line for line in seal.problems())
    finally:
        lib._destroy()
    assert seal.problems() == []


def test_a_patch_taints_the_seal_until_it_is_restored(seal):
    seal.check("x")
    utils.clear_l2_cache, saved = _nothing, utils.clear_l2_cache
    try:
        first = seal.check("after a call")
        utils.clear_l2_cache = saved  # put back by the submission itself: still refused, and named
        assert seal.check("later") == seal.refusal(seal.tainted, "later") and "utils.clear_l2_cache" in first
        assert seal.history == ["after a call: utils.clear_l2_cache was replaced (a patched timer)"]
    finally:
        utils.clear_l2_cache = saved


def _kernel(name):
    return harness.load_submission(FIXTURES / f"{name}.py", name=f"judged_{name}", keep=False).custom_kernel


@pytest.mark.parametrize("fixture, words", [
    ("wrong_patched_timer_hidden", "time.perf_counter_ns was replaced (a patched timer)"),
    ("wrong_patched_checker", "reference.check_implementation was replaced (a patched checker)"),
    ("wrong_lazy_output_hidden", "a subclass of torch.Tensor"),
])
def test_the_sealed_timed_loop_refuses_what_it_cannot_trust(fixture, words):
    """harness.time_calls with a seal taken before the import (what human mode's and ab's workers
    run): a patched timer or checker is refused, a torch.Tensor subclass named; no durations."""
    seal = harness.Seal()
    try:
        kernel = _kernel(fixture)
        got = harness.time_calls(kernel, CASE, True, 3, 1e9, None, seal)
    finally:
        seal.restore()
    assert isinstance(got, str) and words in got, got


def test_the_sealed_timed_loop_times_an_honest_file(seal):
    got = harness.time_calls(_kernel("good_submission"), CASE, True, 3, 1e9, None, seal)
    assert isinstance(got, list) and len(got) == 3 and all(d > 0 for d in got), got


def test_the_judged_worker_runs_only_its_own_entry_points():
    worker = harness.JudgedWorker(None, "official", True)
    with pytest.raises(ValueError, match="not an entry point of the judged worker"):
        worker.call(harness.time_calls)
    assert worker._proc is None  # refused before any process started


def test_what_comes_back_from_a_judged_worker_is_plain_values():
    """A pickle that names a class (what a submission writing to the pipe could send to run code
    in the parent) is refused unread."""
    import io
    import pickle
    with pytest.raises(pickle.UnpicklingError, match="only plain values"):
        harness._PlainUnpickler(io.BytesIO(pickle.dumps(("ok", harness.Stats(1, 1.0, 0.0, 0.0, 1.0, 1.0))))).load()
    assert harness._PlainUnpickler(io.BytesIO(pickle.dumps(("ok", [1.5, (True, "x"), {"a": None}])))).load() == \
        ("ok", [1.5, (True, "x"), {"a": None}])


@requires_cuda
def test_gpu_the_sealed_loop_times_with_cuda_events_through_the_references_it_took(seal):
    """On a GPU the sealed loop records its events with the C functions taken at the seal
    (torch._C._CudaEventBase.record on the current queue, _cuda_synchronize, elapsed_time) and
    clears the L2 with the captured torch.randn: an honest file gets one positive duration per call."""
    import submission
    got = harness.time_calls(submission.custom_kernel, {"m": 7168, "k": 2048, "l": 4, "seed": 1111}, False, 20, 1e9,
                             None, seal)
    assert isinstance(got, list) and len(got) == 20 and all(d > 0 for d in got), got


@requires_cuda
@pytest.mark.parametrize("fixture", ["wrong_patched_timer", "wrong_patched_timer_hidden"])
def test_gpu_human_benchmark_refuses_a_patched_timer(fixture):
    """`eval.py --mode benchmark` (human mode) of a file patching CUDA event timing: one line naming
    the patch, no time printed as a result, exit 112."""
    import subprocess
    proc = subprocess.run([sys.executable, "eval.py", "--submission", str(FIXTURES / f"{fixture}.py"), "--mode",
                           "benchmark"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 112, proc.stderr[-2000:]
    assert "torch.cuda.Event.elapsed_time was replaced (a patched timer)" in proc.stderr, proc.stderr[-2000:]
    assert "µs" not in proc.stdout, proc.stdout


def test_the_seals_own_check_cannot_be_replaced_from_outside(seal):
    """A submission that replaces Seal.check (or swaps its code) to report nothing is found by the
    check the seal took at its start."""
    saved = harness.Seal.check
    try:
        harness.Seal.check = lambda self, *args, **kwargs: ""
        problem = seal.check("after a call")
    finally:
        harness.Seal.check = saved
    assert "harness.Seal.check was replaced (the kit's judge patched)" in problem, problem
