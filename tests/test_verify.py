"""Verified first use (submission.py): every candidate that auto dispatch or the tuner would pick
by its time is first checked against the exact torch backend on the first call's inputs.

CPU: auto is the torch backend there, so the race (``_fastest``) and the tuner (``_tune``) are
driven directly, or through ``custom_kernel`` with ``select_backend`` answering "fastest", with
stub backends: a sabotaged candidate (wrong values, NaN, unwritten c) that would win on time is
never picked, the right answer comes back in c, and one stderr line names the backend, the
config, the GPU model and the first bad element. GPU: a sabotaged cuda config (with
NVFP4_GEMV_TUNE=force) and a sabotaged triton backend on a benchmark shape, through
``custom_kernel``; a forced sabotaged backend raises under NVFP4_GEMV_VERIFY=1.
"""

import re

import pytest
import torch
from conftest import BENCHMARKS, kernel_backends, make_input, requires_cuda, set_backend
from tolerances import ATOL, RTOL

import reference
import submission
from utils import verbose_allclose

SHAPE = (256, 512, 2)  # CPU: small enough for the exact torch backend to be instant
GPU_SHAPE = (4096, 7168, 8)  # a benchmark shape
assert GPU_SHAPE in [b[:3] for b in BENCHMARKS]
GPU_NAME = "NVIDIA B200 (stub)"  # what the stub GPU model reports on the CPU


@pytest.fixture(autouse=True)
def fresh_caches(monkeypatch):
    """Every per-process decision of submission.py starts empty, and no variable of the
    caller's shell steers the dispatch."""
    for name in ("_FAST", "_FASTEST", "_CHOSEN", "_BROKEN", "_WRONG", "_EXACT"):
        monkeypatch.setattr(submission, name, {})
    monkeypatch.setattr(submission, "_VERIFIED", set())
    for var in ("NVFP4_GEMV_BACKEND", "NVFP4_GEMV_VERIFY", "NVFP4_GEMV_TUNE", "NVFP4_GEMV_CONFIG"):
        monkeypatch.delenv(var, raising=False)


def _expected(data):
    return reference.ref_kernel(data[:6] + (data[6].clone(),))


def _assert_right(out, data):
    reasons = verbose_allclose(out, _expected(data), rtol=RTOL, atol=ATOL)
    assert not reasons, "\n".join(reasons)


def _exact_backend(data, m, k, l, cfg=None, probe=False):
    return submission._torch_run(data, m, k, l)


def _wrong(data, m, k, l, cfg=None, probe=False):
    """Right everywhere but one element far from the start (a partial-tile bug)."""
    c = submission._torch_run(data, m, k, l)
    c[m - 3, 0, l - 1] = c[m - 3, 0, l - 1].abs() * 2 + 1  # off by more than |c| + 1
    return c


def _nan(data, m, k, l, cfg=None, probe=False):
    c = submission._torch_run(data, m, k, l)
    c[5, 0, 0] = float("nan")
    return c


def _unwritten(data, m, k, l, cfg=None, probe=False):
    return data[6]  # writes nothing: only the poisoned c tells


SABOTAGE = {"wrong": (_wrong, r"c\[253, 0, 1\]"), "nan": (_nan, r"c\[5, 0, 0\] = nan"),
            "unwritten": (_unwritten, r"c\[0, 0, 0\] = nan")}


@pytest.fixture
def stub_gpu(monkeypatch):
    """The three kernel backends 'run here' (on the CPU), and the GPU model is a stub's."""
    for name in kernel_backends(submission):
        set_backend(monkeypatch, submission, name, supported=lambda d: (True, ""))
    monkeypatch.setattr(submission, "_gpu_model", lambda device: GPU_NAME)


def _race_favouring(order):
    """A stub race: the backends in ``order`` are fastest first; records who raced."""
    raced = []

    def race(names, data, m, k, l):
        raced.append(list(names))
        return {n: float(order.index(n)) for n in names}

    return race, raced


# --------------------------------------------------------------------------- CPU: the race

@pytest.mark.parametrize("how", SABOTAGE)
def test_race_never_picks_a_wrong_faster_backend(how, stub_gpu, monkeypatch, capsys):
    """triton is sabotaged and would win on time; cuda (run before it: c then holds a right
    answer) and scaled_mm are right: scaled_mm is picked, through custom_kernel the right answer
    comes back in c, and one stderr line says what was dropped."""
    bad, where = SABOTAGE[how]
    set_backend(monkeypatch, submission, "cuda", run=_exact_backend)
    set_backend(monkeypatch, submission, "triton", run=bad)
    set_backend(monkeypatch, submission, "scaled_mm", run=_exact_backend)
    race, raced = _race_favouring(["triton", "scaled_mm", "cuda"])
    monkeypatch.setattr(submission, "_race", race)
    monkeypatch.setattr(submission, "select_backend", lambda device: "fastest")
    data = make_input(*SHAPE, 5, "cpu", "full-range")
    out = submission.custom_kernel(data)
    assert list(submission._FASTEST.values()) == ["scaled_mm"]
    assert raced == [["cuda", "scaled_mm"]]
    _assert_right(out, data)
    assert out is data[6]
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "wrong result" in ln]
    assert len(lines) == 1, lines
    cfg = submission._triton_default(*SHAPE)
    assert f"the triton backend (config {cfg})" in lines[0] and GPU_NAME in lines[0]
    assert "256x512x2" in lines[0] and re.search(where, lines[0]), lines[0]
    assert list(submission._WRONG) == [(GPU_NAME, "triton", cfg)]


def test_every_kernel_backend_wrong_falls_back_to_torch(stub_gpu, monkeypatch, capsys):
    for name, bad in zip(kernel_backends(submission), (_wrong, _nan, _unwritten), strict=True):
        set_backend(monkeypatch, submission, name, run=bad)
    race, raced = _race_favouring(list(kernel_backends(submission)))
    monkeypatch.setattr(submission, "_race", race)
    monkeypatch.setattr(submission, "select_backend", lambda device: "fastest")
    data = make_input(*SHAPE, 6, "cpu", "full-range")
    out = submission.custom_kernel(data)
    assert list(submission._FASTEST.values()) == ["torch"] and raced == []
    _assert_right(out, data)
    err = capsys.readouterr().err
    assert all(f"the {n} backend" in err for n in kernel_backends(submission))
    assert err.count("wrong result") == 3


def test_a_wrong_config_is_said_once_per_process(stub_gpu, monkeypatch, capsys):
    """The same (backend, config) wrong again on another shape: dropped again, said once."""
    set_backend(monkeypatch, submission, "cuda", run=_wrong)
    set_backend(monkeypatch, submission, "triton", run=_exact_backend)
    monkeypatch.setattr(submission, "_layout_problem", lambda name, data: "" if name != "scaled_mm" else "no")
    monkeypatch.setattr(submission, "_race", _race_favouring(["cuda", "triton"])[0])
    monkeypatch.setattr(submission, "config_for", lambda name, *a: (1, 2, 3))
    for seed in (1, 2):
        data = make_input(*SHAPE, seed, "cpu")
        assert submission._fastest(data, *SHAPE) == "triton"
    assert capsys.readouterr().err.count("wrong result") == 1


def test_exact_answer_is_computed_once_per_first_call_into_scratch(stub_gpu, monkeypatch):
    """One exact answer per first call, shared by the race's and the tuner's candidates, never
    written into the caller's c; dropped once the call is over."""
    exact_calls = []
    real = submission._torch_run

    def counting(data, m, k, l, cfg=None):
        exact_calls.append(data[6])
        return real(data, m, k, l)

    set_backend(monkeypatch, submission, "torch", run=counting)
    for name in kernel_backends(submission):
        set_backend(monkeypatch, submission, name, run=lambda data, m, k, l, cfg=None: real(data, m, k, l))
    monkeypatch.setattr(submission, "_race", _race_favouring(list(kernel_backends(submission)))[0])
    monkeypatch.setattr(submission, "_cold_times", lambda fns, device: [float(i) for i in range(len(fns))])
    data = make_input(*SHAPE, 7, "cpu")

    def warm_with_tune(name, d, m, k, l):
        if name == "cuda":  # as _config_for does on an unknown GPU: the tuner, inside the race
            submission._tune(name, d, m, k, l, [(1,), (2,), (3,)])
        return submission.BACKENDS[name].run(d, m, k, l)

    monkeypatch.setattr(submission, "_warm_backend", warm_with_tune)
    assert submission._fastest(data, *SHAPE) == "cuda"
    assert len(exact_calls) == 1 and exact_calls[0] is not data[6]
    assert submission._EXACT == {}


# --------------------------------------------------------------------------- CPU: the tuner

@pytest.mark.parametrize("how", SABOTAGE)
def test_tuner_never_picks_a_wrong_faster_config(how, stub_gpu, monkeypatch, capsys):
    """Config (1,) is sabotaged and timed fastest; (2,) (run before it: c then holds a right
    answer) and (3,) are right: (3,), the faster of the two, is picked, and a later tune skips
    (1,) without running it."""
    bad, where = SABOTAGE[how]
    ran = []

    def backend(data, m, k, l, cfg=None, probe=False):
        ran.append(cfg)
        return (bad if cfg == (1,) else _exact_backend)(data, m, k, l)

    set_backend(monkeypatch, submission, "cuda", run=backend)
    speed = {(1,): 0.0, (3,): 1.0, (2,): 2.0}

    def cold_times(fns, device):
        out = []
        for fn in fns:
            fn()
            out.append(speed[ran[-1]])
        return out

    monkeypatch.setattr(submission, "_cold_times", cold_times)
    data = make_input(*SHAPE, 8, "cpu", "full-range")
    assert submission._tune("cuda", data, *SHAPE, [(2,), (1,), (3,)]) == (3,)
    assert ran == [(2,), (1,), (3,), (2,), (3,)]  # each run once, then the right ones timed
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the cuda backend (config (1,))" in err[0] and GPU_NAME in err[0]
    assert re.search(where, err[0]), err[0]
    ran.clear()
    assert submission._tune("cuda", data, *SHAPE, [(2,), (1,), (3,)]) == (3,)
    assert ran == [(2,), (3,), (2,), (3,)] and capsys.readouterr().err == ""


def test_tuner_with_every_config_wrong_raises_and_the_race_skips_the_backend(stub_gpu, monkeypatch, capsys):
    set_backend(monkeypatch, submission, "cuda", run=_wrong)
    monkeypatch.setattr(submission, "_cold_times", lambda fns, device: [0.0] * len(fns))
    data = make_input(*SHAPE, 9, "cpu")
    with pytest.raises(RuntimeError, match="no config of the cuda backend gave the right answer for 256x512x2"):
        submission._tune("cuda", data, *SHAPE, [(1,), (2,)])
    assert capsys.readouterr().err.count("wrong result") == 2


# --------------------------------------------------------------------------- CPU: forced backends

@pytest.fixture
def sabotaged_forced_triton(monkeypatch):
    if not submission.triton_supported(torch.device("cpu"))[0]:
        pytest.skip("triton cannot run on this CPU (needs TRITON_INTERPRET=1 and triton)")
    set_backend(monkeypatch, submission, "triton", run=_wrong)
    monkeypatch.setattr(submission, "_gpu_model", lambda device: GPU_NAME)
    monkeypatch.setenv("NVFP4_GEMV_BACKEND", "triton")


def test_forced_backend_is_not_checked_by_default(sabotaged_forced_triton):
    """A forced backend is what one benchmarks or debugs: its output is returned as it is."""
    data = make_input(*SHAPE, 10, "cpu", "full-range")
    out = submission.custom_kernel(data)
    assert verbose_allclose(out, _expected(data), rtol=RTOL, atol=ATOL)  # the sabotage got through


def test_forced_backend_under_verify_raises_naming_where(sabotaged_forced_triton, monkeypatch):
    monkeypatch.setenv("NVFP4_GEMV_VERIFY", "1")
    data = make_input(*SHAPE, 11, "cpu", "full-range")
    with pytest.raises(RuntimeError) as info:
        submission.custom_kernel(data)
    text = str(info.value)
    assert "the triton backend" in text and GPU_NAME in text and "c[253, 0, 1]" in text
    assert "NVFP4_GEMV_VERIFY=1" in text and "\n" not in text


def test_forced_right_backend_under_verify_is_checked_once(monkeypatch):
    if not submission.triton_supported(torch.device("cpu"))[0]:
        pytest.skip("triton cannot run on this CPU (needs TRITON_INTERPRET=1 and triton)")
    calls = []

    def counted(data, m, k, l, cfg=None):
        calls.append(1)
        return _exact_backend(data, m, k, l)

    set_backend(monkeypatch, submission, "triton", run=counted)
    monkeypatch.setattr(submission, "_exact", lambda *a: calls.append("exact") or _expected(a[0]))
    monkeypatch.setenv("NVFP4_GEMV_BACKEND", "triton")
    monkeypatch.setenv("NVFP4_GEMV_VERIFY", "1")
    data = make_input(*SHAPE, 12, "cpu", "full-range")
    _assert_right(submission.custom_kernel(data), data)
    again = make_input(*SHAPE, 13, "cpu", "full-range")
    _assert_right(submission.custom_kernel(again), again)
    assert calls == [1, "exact", 1]


def test_verify_off_lets_auto_pick_by_time_alone(stub_gpu, monkeypatch):
    monkeypatch.setenv("NVFP4_GEMV_VERIFY", "0")
    set_backend(monkeypatch, submission, "cuda", run=_wrong)
    set_backend(monkeypatch, submission, "triton", run=_exact_backend)
    monkeypatch.setattr(submission, "_race", _race_favouring(["cuda", "triton", "scaled_mm"])[0])
    assert submission._fastest(make_input(*SHAPE, 14, "cpu"), *SHAPE) == "cuda"


def test_bad_verify_value_names_the_choices(stub_gpu, monkeypatch):
    monkeypatch.setenv("NVFP4_GEMV_VERIFY", "yes")
    with pytest.raises(ValueError, match=r"NVFP4_GEMV_VERIFY='yes': choose 1 .*0 .*unset"):
        submission._fastest(make_input(*SHAPE, 15, "cpu"), *SHAPE)


# --------------------------------------------------------------------------- CPU: fast path, checker

def test_later_calls_take_the_fast_path_unchecked(stub_gpu, monkeypatch):
    """Only the first call with a shape is checked: later calls with the same layout (new
    tensors, new values) never reach the exact backend."""
    set_backend(monkeypatch, submission, "triton", run=_exact_backend)
    monkeypatch.setattr(submission, "_layout_problem", lambda name, data: "" if name == "triton" else "no")
    monkeypatch.setattr(submission, "select_backend", lambda device: "fastest")
    data = make_input(*SHAPE, 16, "cpu")
    submission.custom_kernel(data)
    monkeypatch.setattr(submission, "_exact", lambda *a: pytest.fail("checked on a later call"))
    monkeypatch.setattr(submission, "_fastest", lambda *a: pytest.fail("raced on a later call"))
    later = make_input(*SHAPE, 17, "cpu", "full-range")
    _assert_right(submission.custom_kernel(later), later)


@pytest.mark.parametrize("got, want, bad", [
    ((1.0, 2.0), (1.0, 2.0), ""),
    ((1.0, 2.002), (1.0, 2.0), ""),  # |d| = 0.002 <= 1e-3 + 1e-3 * 2
    ((1.0, 2.0), (1.0, 1.99), "c[1] = 2.0, exact 1.990234375"),
    ((float("nan"), 2.0), (1.0, 2.0), "c[0] = nan, exact 1.0"),
    ((float("nan"), 2.0), (float("nan"), 2.0), ""),  # NaN where the exact answer is NaN
    ((1.0, 2.0), (float("nan"), 2.0), "c[0] = 1.0, exact nan"),
    ((float("inf"), 2.0), (float("inf"), 2.0), ""),
    ((1.0, float("-inf")), (1.0, 2.0), "c[1] = -inf, exact 2.0"),
    ((float("inf"), 2.0), (float("-inf"), 2.0), "c[0] = inf, exact -inf"),
], ids=["equal", "within", "outside", "nan", "nan-both", "finite-for-nan", "inf-both", "inf", "inf-sign"])
def test_mismatch_is_the_servers_check(got, want, bad):
    f16 = torch.float16
    assert submission._mismatch(torch.tensor(got, dtype=f16), torch.tensor(want, dtype=f16)) == bad


def test_mismatch_names_a_wrong_container():
    want = torch.zeros(4, 1, 2, dtype=torch.float16)
    assert "expected (4, 1, 2)" in submission._mismatch(want.float(), want)
    assert "NoneType" in submission._mismatch(None, want)


# --------------------------------------------------------------------------- GPU

def _garbage(data, m, k, l, cfg=None, probe=False):
    """Fast and wrong: one fill of c instead of the kernel (would win any race)."""
    return data[6].fill_(7.0)


def _gpu_first_call(data, capsys):
    data[6].fill_(float("nan"))
    out = submission.custom_kernel(data)
    torch.cuda.synchronize()
    _assert_right(out, data)
    return [ln for ln in capsys.readouterr().err.splitlines() if "wrong result" in ln]


@requires_cuda
@pytest.mark.parametrize("tune", ["auto", "force"])
def test_gpu_sabotaged_triton_backend_is_never_picked(tune, monkeypatch, capsys):
    monkeypatch.setenv("NVFP4_GEMV_TUNE", tune)
    set_backend(monkeypatch, submission, "triton", run=_garbage)
    data = make_input(*GPU_SHAPE, 21, "cuda", "full-range")
    lines = _gpu_first_call(data, capsys)
    assert list(submission._FASTEST.values())[0] != "triton"
    assert lines and all("the triton backend" in ln for ln in lines), lines  # one per config tuned
    assert all(torch.cuda.get_device_name() in ln and "c[0, 0, 0] = 7.0" in ln for ln in lines), lines


@requires_cuda
@pytest.mark.parametrize("tune", ["auto", "force"])
def test_gpu_sabotaged_cuda_config_is_never_picked(tune, monkeypatch, capsys):
    """auto: the cuda backend's config for this shape (the table's or the default) writes
    garbage; force: the tuner's first candidate does, and would be the fastest."""
    if not submission.cuda_supported(torch.device("cuda"))[0]:
        pytest.skip("the cuda backend cannot run here")
    monkeypatch.setenv("NVFP4_GEMV_TUNE", tune)
    real = submission.BACKENDS["cuda"].run
    m, k, l = GPU_SHAPE
    cap = torch.cuda.get_device_capability()
    if tune == "force":
        target = submission.BACKENDS["cuda"].candidates(m, k, l, cap)[0]
    else:
        known = submission.CUDA_MEASURED.get(torch.cuda.get_device_name(), {}).get((m, k, l))
        target = known or submission.BACKENDS["cuda"].candidates(m, k, l, cap)[0]

    def sabotaged(data, m, k, l, cfg=None, probe=False):
        if (cfg or submission.config_for("cuda", data, m, k, l)) == target:
            return _garbage(data, m, k, l)
        return real(data, m, k, l, cfg, probe)

    set_backend(monkeypatch, submission, "cuda", run=sabotaged)
    data = make_input(*GPU_SHAPE, 22, "cuda", "full-range")
    lines = _gpu_first_call(data, capsys)
    assert len(lines) == 1 and f"the cuda backend (config {target})" in lines[0], lines
    assert torch.cuda.get_device_name() in lines[0] and "c[0, 0, 0] = 7.0" in lines[0]
    assert submission._CHOSEN[(data[0].device, "cuda", m, k, l)] != target or \
        list(submission._FASTEST.values())[0] != "cuda"


@requires_cuda
@pytest.mark.parametrize("name", ["cuda", "triton"])
def test_gpu_forced_sabotaged_backend_under_verify_raises(name, monkeypatch):
    if not submission.backend_support(torch.device("cuda"))[name][0]:
        pytest.skip(f"the {name} backend cannot run here")
    monkeypatch.setenv("NVFP4_GEMV_BACKEND", name)
    monkeypatch.setenv("NVFP4_GEMV_VERIFY", "1")
    set_backend(monkeypatch, submission, name, run=_garbage)
    with pytest.raises(RuntimeError, match=rf"the {name} backend .*{re.escape(torch.cuda.get_device_name())}"
                                           r".*c\[0, 0, 0\] = 7\.0"):
        submission.custom_kernel(make_input(*GPU_SHAPE, 23, "cuda"))


@requires_cuda
@pytest.mark.parametrize("m, k, l, seed", BENCHMARKS)
def test_gpu_every_candidate_of_the_kit_passes_its_check_here(m, k, l, seed, monkeypatch, capsys):
    """With the tuner forced, every config and backend the kit could pick on this GPU is checked
    on the benchmark shapes: none may be dropped (a wrong kernel on this GPU fails here)."""
    monkeypatch.setenv("NVFP4_GEMV_TUNE", "force")
    assert _gpu_first_call(make_input(m, k, l, seed, "cuda", "full-range"), capsys) == []
    assert submission._WRONG == {} and submission._BROKEN == {}
