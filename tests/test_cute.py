"""The CuteDSL route: ``eval.py compile`` on a CuTe DSL file (cute_check.py) and the example examples/cute_gemv.py.

Compile checks need the DSL (``pip install -e ".[cute]"``; skipped with that reason without it);
the example's CPU path needs it too (the file imports ``cutlass``). GPU tests compare the CuTe
kernel with the example's torch path bit for bit."""

import subprocess
import sys

import pytest
import torch
from conftest import BENCHMARKS, HAS_CUDA, OFFICIAL_TESTS, ROOT, load_file, make_input, requires_cuda
from tolerances import ATOL, RTOL

import cute_check
import nvfp4
import reference

EXAMPLE = ROOT / "examples" / "cute_gemv.py"
BAD = ROOT / "tests" / "fixtures" / "cute_bad_fp4_convert.py"

HAS_DSL = cute_check.dsl_installed()
requires_dsl = pytest.mark.skipif(not HAS_DSL, reason="nvidia-cutlass-dsl not installed: pip install -e '.[cute]'")


def _compile(path, *args):
    return subprocess.run([sys.executable, "eval.py", "compile", str(path), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def example():
    if not HAS_DSL:
        pytest.skip("nvidia-cutlass-dsl not installed: pip install -e '.[cute]'")
    return load_file(EXAMPLE, "cute_gemv_example")


# --------------------------------------------------------------------------- the check itself

@pytest.mark.parametrize("text, cute", [
    ("import cutlass\n", True),
    ("import cutlass.cute as cute\n", True),
    ("x = 1\nfrom cutlass.cute.runtime import make_ptr\n", True),
    ("import torch\n# import cutlass someday\n", False),
    ("import cutlassy\n", False),
    ("s = 'import cutlass'\n", False),
])
def test_a_cute_submission_is_one_that_imports_cutlass(text, cute):
    assert cute_check.is_cute_source(text) is cute


def test_a_submission_with_neither_cute_nor_cuda_gets_one_line_and_exit_2():
    """A file that imports no cutlass goes to the cuda kernel's check (cuda_check.py); one with no
    CUDA kernel either is one line, exit 2."""
    path = ROOT / "examples" / "minimal_torch.py"
    proc = _compile(path)
    assert proc.returncode == cute_check.EXIT_USAGE and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"error: {path}: no CUDA kernel this check knows (neither submission.py's cuda_kernel nor the starter's "
        "compile_cubin) and no CuTe DSL import: nothing to compile"]


@pytest.mark.parametrize("args, needle", [
    (["--arch", "hopper"], "--arch takes names like sm_100a"),
    (["--shapes", "nope"], "--shapes must be one of tests, benchmarks, all or a test file"),
    (["--shapes", "_comment"], "--shapes must be one of tests, benchmarks, all or a test file"),
])
def test_bad_arguments_are_one_line_and_exit_2(args, needle):
    proc = _compile(EXAMPLE, *args)
    assert proc.returncode == cute_check.EXIT_USAGE
    assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_shapes_take_eval_pys_words_and_files():
    """--shapes as eval.py takes it: tests, benchmarks, all (never shapes.json's _comment), a file."""
    import harness
    for name in harness.SHAPE_SETS:
        assert cute_check.load_shapes(name) == [(c["m"], c["k"], c["l"]) for c in harness.shape_set(name)]
    assert cute_check.load_shapes(str(ROOT / "tests" / "fixtures" / "tiny.txt")) == [(128, 256, 1), (128, 256, 2)]


def test_a_folder_or_a_missing_file_says_what_compile_wants(tmp_path):
    for path, words in ((tmp_path, "is a folder, not a submission file"), (tmp_path / "none.py", "not found")):
        proc = _compile(path)
        assert proc.returncode == cute_check.EXIT_USAGE and proc.stdout == ""
        assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and words in proc.stderr
        assert "eval.py compile takes a submission file carrying a CUDA kernel" in proc.stderr


def test_one_line_keeps_the_first_error_line_of_a_chained_dsl_message():
    inner = RuntimeError("Failure while executing pass pipeline:\nerror: unknown: ptxas failed; error   : "
                         "Instruction 'x' not supported\n  line 2; error : again\n%1 = llvm.add")
    outer = ValueError("ICE banner")
    outer.cause = inner
    line = cute_check.one_line(outer)
    assert line == ("ValueError: error: unknown: ptxas failed; error : Instruction 'x' not supported "
                    "(+1 more error lines)")


@requires_dsl
def test_the_example_compiles_for_blackwell_and_hopper_without_a_gpu():
    proc = _compile(EXAMPLE, "--arch", "sm_100a", "--arch", "sm_90a")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith(f"{EXAMPLE}: nvidia-cutlass-dsl ")
    shapes = [f"{m}x{k}x{l}:" for m, k, l, _ in BENCHMARKS]
    for arch in ("sm_100a", "sm_90a"):
        mine = [ln for ln in lines if f"[{arch}]" in ln]
        assert [ln.split()[2] for ln in mine] == shapes
        assert all(ln.split()[3] == "compiled:" for ln in mine), mine
        assert "1 function(s) compiled" in mine[0]


@requires_dsl
def test_the_known_bad_fixture_fails_on_hopper_with_the_dsls_message():
    proc = _compile(BAD, "--arch", "sm_100a", "--arch", "sm_90a")
    assert proc.returncode == cute_check.EXIT_FAIL, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    blackwell = [ln for ln in lines if "[sm_100a]" in ln]
    hopper = [ln for ln in lines if "[sm_90a]" in ln]
    assert len(blackwell) == len(hopper) == len(BENCHMARKS)
    assert all(" compiled: " in ln and "via custom_kernel" in ln and "1 launch(es) skipped" in ln for ln in blackwell)
    assert all(" FAIL " in ln and "not supported on .target 'sm_90a'" in ln for ln in hopper), hopper


@requires_dsl
def test_a_submission_that_compiles_nothing_fails(tmp_path):
    path = tmp_path / "lazy.py"
    path.write_text("import cutlass  # noqa: F401\n\ndef custom_kernel(data):\n    return data[6]\n")
    proc = _compile(path)
    assert proc.returncode == cute_check.EXIT_FAIL
    assert "FAIL nothing was compiled" in proc.stdout


@requires_dsl
def test_a_submission_that_does_not_import_fails_in_one_line(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("import cutlass  # noqa: F401\nraise ImportError('no such helper')\n")
    proc = _compile(path, "--arch", "sm_90a")
    assert proc.returncode == cute_check.EXIT_FAIL
    assert proc.stdout.strip().splitlines()[-1] == (
        "broken.py [sm_90a] FAIL the submission does not import: ImportError: no such helper")


@requires_dsl
def test_an_arch_the_dsl_does_not_take_is_one_line_before_anything_compiles(capsys):
    """--arch sm_999 (the right form, no such GPU): the first child checks every --arch against
    the installed DSL's list before importing the submission; one line naming the list, exit 2,
    no compile line (not one FAIL KeyError per shape)."""
    assert cute_check.main([str(EXAMPLE), "--arch", "sm_90a", "--arch", "sm_999"]) == cute_check.EXIT_USAGE
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1, out + err
    assert err.startswith("error: --arch sm_999: nvidia-cutlass-dsl ") and " compiles for " in err
    assert "sm_90a" in err and "sm_100a" in err


DSL_INSTALL = 'python3 -m pip install -e ".[cute]"'


def test_a_cute_submission_without_the_dsl_says_how_to_install_it(monkeypatch, capsys):
    """The worker's import of a CuTe DSL submission where ``import cutlass`` fails: one line with
    the install command, no traceback."""
    import harness
    monkeypatch.setitem(sys.modules, "cutlass", None)  # import cutlass raises ModuleNotFoundError
    monkeypatch.delitem(sys.modules, "submission", raising=False)
    monkeypatch.setitem(harness._worker_config, "submission", str(EXAMPLE))
    problem = harness.submission_import_problem()
    assert problem.startswith("importing the submission raised ModuleNotFoundError: ")
    assert problem.endswith(f"it uses the CUTLASS DSL, which is not installed here: {DSL_INSTALL}")
    assert "\n" not in problem and capsys.readouterr().err == ""


def test_human_mode_without_the_dsl_is_one_line_with_the_install_command(monkeypatch, capfd):
    """``eval.py --submission examples/cute_gemv.py`` where the DSL is not on the path (the worker
    inherits this process's sys.path, here without the DSL's folder): one error line naming the
    install command, exit 112, no traceback, no case run."""
    import importlib.machinery

    import eval as ev
    import harness
    hidden = [p for p in sys.path if "nvidia_cutlass_dsl" not in p]
    if importlib.machinery.PathFinder.find_spec("cutlass", hidden) is not None:
        pytest.skip("the CUTLASS DSL is importable from a folder this test cannot leave out")
    monkeypatch.setattr(sys, "path", hidden)
    assert ev.human_main(["--submission", str(EXAMPLE)]) == harness.EXIT_FAIL
    out, err = capfd.readouterr()
    assert out == "" and len(err.splitlines()) == 1, err
    assert err.startswith(f"error: {EXAMPLE}: importing the submission raised ModuleNotFoundError: ")
    assert f"not installed here: {DSL_INSTALL}; no case ran" in err


# --------------------------------------------------------------------------- the example's arithmetic

def test_the_e2m1_nibble_table_is_twice_the_e2m1_values(example):
    doubled = [(example.E2M1_X2 >> (4 * c)) & 15 for c in range(8)]
    assert doubled == [2 * v for v in nvfp4.E2M1_VALUES[:8]]


def test_the_e4m3_integer_decode_matches_torch_for_every_finite_code(example):
    codes = torch.arange(256, dtype=torch.int64)
    mant, ee = example._e4m3_parts(codes)
    value = mant.double() * torch.pow(2.0, (ee - 10).double())
    value = torch.where(codes >= 128, -value, value)
    exact = codes.to(torch.uint8).view(torch.float8_e4m3fn).double()
    finite = (codes & 0x7F) != example.NAN_CODE
    assert torch.equal(value[finite], exact[finite])
    assert exact[~finite].isnan().all()
    assert int((ee[finite] + ee[finite]).max()) <= 30 and int(ee.min()) >= 1  # the kernel's shift range


@pytest.mark.parametrize("dist", ["full-range", "gaussian", "official"])
@pytest.mark.parametrize("m, k, l", [(128, 256, 1), (256, 1536, 2), (128, 7168, 1)])
def test_the_example_on_cpu_is_within_the_checkers_tolerance(example, m, k, l, dist):
    data = make_input(m, k, l, 7, device="cpu", dist=dist)
    expected = reference.ref_kernel(tuple(t.clone() for t in data)).float()
    got = example.custom_kernel(data).float()
    assert torch.allclose(got, expected, rtol=RTOL, atol=ATOL, equal_nan=True)


def test_a_nan_scale_makes_its_row_nan_and_only_that_row(example):
    data = make_input(128, 512, 2, 3, device="cpu", dist="full-range")
    data[2].view(torch.uint8)[5, 7, 1] = 0x7F  # sfa row 5, block 7, batch 1
    got = example.custom_kernel(data)
    assert got[5, 0, 1].isnan()
    assert not got[:, :, 0].isnan().any() and int(got.isnan().sum()) == 1


def test_bad_input_is_one_clear_error(example):
    data = list(make_input(128, 256, 1, 1, device="cpu"))
    data[6] = data[6].float()
    with pytest.raises(TypeError, match="c float16"):
        example.custom_kernel(tuple(data))


# --------------------------------------------------------------------------- on a GPU

@requires_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("case", OFFICIAL_TESTS[:3] + BENCHMARKS, ids=lambda c: "x".join(map(str, c[:3])))
def test_gpu_the_cute_kernel_equals_its_torch_order_bit_for_bit(example, case):
    m, k, l, seed = case
    data = make_input(m, k, l, seed, device="cuda", dist="full-range")
    data[2].view(torch.uint8)[3, 1, 0] = 0x7F  # one NaN scale: row 3 of batch 0 is NaN
    c_kernel = example.custom_kernel(tuple(t.clone() for t in data)).clone()
    torch.cuda.synchronize()
    c_torch = example._torch_same_order(tuple(t.clone() for t in data), m, k, l)
    same = (c_kernel.view(torch.int16) == c_torch.view(torch.int16)) | (c_kernel.isnan() & c_torch.isnan())
    assert bool(same.all()), f"{int((~same).sum())} outputs differ"
    expected = reference.ref_kernel(tuple(t.clone() for t in data)).float()
    assert torch.allclose(c_kernel.float(), expected, rtol=RTOL, atol=ATOL, equal_nan=True)


@pytest.mark.skipif(HAS_CUDA, reason="runs where there is no GPU")
def test_without_a_gpu_the_example_takes_its_torch_path(example):
    data = make_input(128, 256, 1, 1, device="cpu")
    assert example.custom_kernel(data) is data[6]
