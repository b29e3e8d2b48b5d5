"""``python3 eval.py compile`` on the cuda kernel (cuda_check.py), without a GPU: what it compiles
(what each GPU may launch on the official shapes), that an error only one target's ``#if`` or one
candidate's template reaches is found, what it prints (NVRTC's lines, the target and the config
on a failure; registers and the K loop's SASS per 16 B beside HEAD's on success), its cache,
bundle's refusal, and the README's edit loop (compile, bundle, eval.py's header) on a copy of the
kit with a broken and then a correct kernel. NVRTC and Triton's cuobjdump; a few configs each.

Results are cached per kernel source (the user's cache folder, as the commands use it: a repeat of
the suite compiles nothing it compiled before); the tests that say what is compiled use a folder of
their own."""

import json
import re
import subprocess
import types
from pathlib import Path

import pytest
import torch
from conftest import BENCHMARKS, HAS_CUDA, OFFICIAL_TESTS, ROOT

import bundle
import cuda_check
import eval as kit_eval
import submission

TINY_ONE = ROOT / "tests" / "fixtures" / "tiny_one.txt"  # 128x256x1: one config per target
SHAPES = [(m, k, l) for m, k, l, _ in BENCHMARKS + OFFICIAL_TESTS]
AFTER_TYPEDEFS = "typedef long long i64;\n"
BROKEN = "int broken( {\n"  # the edit of the report that started the check: a syntax error
ARCH_ONLY = ("  u32 d;\n#if HAS_E2M1_CVT\n", "  u32 d;\n#if HAS_E2M1_CVT\n  d = undefined_on_blackwell;\n")
# A correct edit that changes the f16x2 decode's K loop (one instruction more in the source; ptxas's count
# of the loop moves): what the table shows beside HEAD's.
ACC_RETURN = "  return acc + fma_h<1, 1>(h1, s, fma_h<0, 1>(h1, s, 0.f));\n"
ACC_EDITED = ("  acc += fma_h<1, 1>(h1, s, fma_h<0, 1>(h1, s, 0.f));\n"
              '  asm volatile("add.f32 %0, %0, 0f00000000;" : "+f"(acc));\n  return acc;\n')


def _nvrtc_or_skip():
    try:
        submission.find_nvrtc()
    except submission.CudaBuildError as exc:
        pytest.skip(f"NVRTC is not installed here ({str(exc)[:80]}); the dev extra installs it")


def _edited(old: str, new: str, text: str = submission.CUDA_SRC) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def _line_of(text: str, line: str) -> int:
    return text.splitlines().index(line.rstrip("\n")) + 1


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    """A cache folder of this test's: what it compiles, it compiles for real."""
    monkeypatch.setenv(cuda_check.ENV_CACHE, str(tmp_path / "cache"))
    return tmp_path / "cache"


# --------------------------------------------------------------------------- what is compiled

def _launched(monkeypatch, model: str, capability: tuple) -> set:
    """Every config submission.config_for may launch on a first call with each official shape on a
    GPU of that model (no pin, NVFP4_GEMV_TUNE=auto): its pick, and every candidate it would time."""
    seen = set()

    def tune(name, data, m, k, l, cands):
        seen.update(cands)
        return cands[0]

    monkeypatch.setattr(submission, "_CHOSEN", {})
    monkeypatch.setattr(submission, "_tune", tune)
    monkeypatch.delenv("NVFP4_GEMV_CONFIG", raising=False)
    monkeypatch.delenv("NVFP4_GEMV_TUNE", raising=False)
    monkeypatch.delenv("POPCORN_NCU", raising=False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: model)
    data = [types.SimpleNamespace(device=torch.device("cuda", 0))]
    for m, k, l in SHAPES:
        seen.add(submission.config_for("cuda", data, m, k, l))
    return seen


def test_the_default_set_is_what_each_gpu_may_launch_on_the_official_shapes(monkeypatch):
    """sm_100a: every config a B200 (no table names it) may launch on a first call with an official
    shape, the tuner's candidates included; sm_90a: the H100's and the H200's table picks and the
    defaults; the plain scales (the server's layout); --all: every variant the backend knows."""
    kernels = cuda_check.KitKernels(submission)
    found = {arch: cuda_check.launch_set(kernels, [arch], SHAPES) for arch in cuda_check.DEFAULT_ARCHS}
    assert {v.config for v in found["sm_100a"]} == _launched(monkeypatch, "NVIDIA B200", (10, 0))
    hopper = {v.config for v in found["sm_90a"]}
    for model in ("NVIDIA H100 80GB HBM3", "NVIDIA H200"):
        picks = _launched(monkeypatch, model, (9, 0))
        assert picks <= hopper, picks - hopper
    assert {submission.cuda_default(m, k, l, (9, 0)) for m, k, l in SHAPES} <= hopper
    for arch, variants in found.items():
        assert variants and all(v.plain and v.arch == arch for v in variants)
    every = cuda_check.launch_set(kernels, ["sm_90a"], SHAPES, every=True)
    assert len(every) == len(submission.cuda_compile_variants())


# --------------------------------------------------------------------------- an error anywhere is found

def test_an_error_only_one_targets_if_reaches_is_found_with_nvrtcs_line(own_cache, shared_cubins):
    """An error inside ``#if HAS_E2M1_CVT`` (Blackwell only): sm_90a compiles, sm_100a fails; the
    report names the target, the config and the .cu line NVRTC names, with NVRTC's own lines."""
    _nvrtc_or_skip()
    text = _edited(*ARCH_ONLY)
    kernels = cuda_check.KitKernels(submission, kernel_text=text)
    variants = cuda_check.launch_set(kernels, cuda_check.DEFAULT_ARCHS, [(128, 256, 1)])
    assert [v.arch for v in variants] == ["sm_90a", "sm_100a"]
    results, _ = cuda_check.compile_set(kernels, variants)
    assert results[0]["ok"] and not results[1]["ok"]
    line = _line_of(text, "  d = undefined_on_blackwell;")
    assert f'nvfp4_gemv.cu({line}): error: identifier "undefined_on_blackwell" is undefined' in results[1]["log"]
    report = cuda_check.failure_report(kernels, "kernels/nvfp4_gemv.cu", variants, results)
    assert report[0] == (f"error: kernels/nvfp4_gemv.cu does not compile for sm_100a ({kernels.label(variants[1])}); "
                         f"{kernels.compiler()} says:")
    assert report[1:1 + len(results[1]["log"])] == results[1]["log"]
    # the same kernel as submission.py's copy: the report says which line of the file NVRTC's line is
    copy = cuda_check.KitKernels(submission, kernel_text=text, block_line=1000)
    assert f"(line {line} of the kernel is submission.py line {1000 + line})" in \
        cuda_check.failure_report(copy, "submission.py", variants, results)


def test_an_error_only_one_candidates_template_reaches_is_found(own_cache, shared_cubins):
    """A static_assert that only the public leader's geometry for K = 7168 trips (32-byte loads,
    K in 7 parts, a B200 tuner candidate): the first kernel of the target compiles, the check goes on
    and finds it; the config is in the default set."""
    _nvrtc_or_skip()
    guard = "  constexpr int RS = 32 / LPR;          // rows side by side in a warp\n"
    text = _edited(guard, '  static_assert(!(LOAD == LD_NO_ALLOCATE_L2_EVICT_FIRST_256 && KS == 7), "seven parts");\n'
                   + guard)
    kernels = cuda_check.KitKernels(submission, kernel_text=text)
    leader = submission.CUDA_LEADERS[7168][0].with_decode((10, 0))
    default = cuda_check.launch_set(kernels, ["sm_100a"], SHAPES)
    assert cuda_check.Variant(leader, True, True, "sm_100a") in default
    others = [v for v in default[1:] if v.config != leader][:2]
    variants = [default[0], cuda_check.Variant(leader, True, True, "sm_100a"), *others]
    firsts = []
    results, _ = cuda_check.compile_set(kernels, variants, on_first=firsts.append)
    assert results[0]["ok"] and len(firsts) == 1
    # the other three were one program, which failed: each compiled alone, the leader's log its own
    assert not results[1]["ok"] and "static assertion failed" in cuda_check.first_error(results[1]["log"])
    assert all(res["ok"] and res["registers"] for res in results[2:])


# --------------------------------------------------------------------------- the table and the cache

# A tile that spills (stack above 0 on both targets, minb 16), a ring (its shared memory), a plain tile.
USAGE_CONFIGS = [submission.CudaConfig(lpr=4, rpt=2, u=8, warps=1, decode="dp4a-sr2", v=1, pipe="ptxas", minb=16,
                                       bsh=True),
                 submission.ring_config(7168, 7168, *submission.RING_FAMILIES[1]),
                 submission.CudaConfig(lpr=32, rpt=2, u=1, warps=1, decode="f16x2", v=1, pipe="ptxas", minb=1)]


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("cfg", USAGE_CONFIGS, ids=["spills", "ring", "tile"])
def test_the_cubins_own_record_gives_what_cuobjdump_prints(cfg, arch, shared_cubins):
    """cubin_usage reads registers, stack and static shared memory from the cubin's ELF: the figures
    cuobjdump -res-usage prints for the same cubin (a spilling tile's stack, a ring's shared memory)."""
    _nvrtc_or_skip()
    if not cuda_check.cuobjdump():
        pytest.skip("no cuobjdump here (Triton's wheel ships one)")
    cubin = submission.cuda_compile(submission.cuda_kernel(cfg, True, True)[1], arch)
    printed = cuda_check.resource_usage(cuda_check.dump(cubin, "-res-usage"))
    assert cuda_check.cubin_usage(cubin) == {key: printed[key] for key in ("registers", "stack", "shared")}
    assert cuda_check.cubin_usage(cubin[:64]) == cuda_check.cubin_usage(b"not an ELF file") == {}


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_kernels_built_as_one_program_give_what_each_gives_alone(arch, tmp_path, monkeypatch, shared_cubins):
    """build_many (one NVRTC program, one cuobjdump call) keeps, for each kernel, the registers,
    stack, shared memory and SASS count that build gives it compiled alone: a spilling tile, a plain
    tile, a masked tail and the permuted scales; a ring beside them is compiled in a program of its
    own (with it in the program, the others' static shared memory grows)."""
    _nvrtc_or_skip()
    kernels = cuda_check.KitKernels(submission)
    variants = [cuda_check.Variant(cfg, True, True, arch) for cfg in USAGE_CONFIGS]
    variants += [cuda_check.Variant(USAGE_CONFIGS[2], False, True, arch),
                 cuda_check.Variant(USAGE_CONFIGS[0], True, False, arch)]
    count = cuda_check.sass_target(arch)
    monkeypatch.setenv(cuda_check.ENV_CACHE, str(tmp_path / "together"))
    together = cuda_check.build_many(kernels, variants, count)
    monkeypatch.setenv(cuda_check.ENV_CACHE, str(tmp_path / "alone"))
    alone = [cuda_check.build(kernels, v, count) for v in variants]
    assert together == alone and all(res["ok"] and res["registers"] for res in alone)
    assert all(res["sass"] for res in alone) == count
    assert [kernels.alone(v) for v in variants] == [False, True, False, False, False]
    assert kernels.together(variants) is None
    source, names = kernels.together(variants[:1] + variants[2:])
    usages = cuda_check.cubin_usages(submission.cuda_compile(source, arch))
    assert sorted(usages) == sorted(names)
    assert [usages[name] for name in names] == [{key: res[key] for key in ("registers", "stack", "shared")}
                                                for res in alone[:1] + alone[2:]]


def test_the_table_shows_each_figure_beside_heads_as_a_difference():
    kernels = cuda_check.KitKernels(submission)
    cfg = submission.CudaConfig(lpr=8, rpt=2, u=4, warps=1, decode="f16x2", v=1, pipe="ptxas", minb=20, bsh=True)
    variants = [cuda_check.Variant(cfg, True, True, "sm_100a"), cuda_check.Variant(cfg, False, True, "sm_90a")]
    mine = [{"ok": True, "registers": 93, "stack": 0, "shared": 3200, "sass": 51.25},
            {"ok": True, "registers": 90, "stack": 8, "shared": 2176, "sass": None}]
    head = [{"ok": True, "registers": 91, "stack": 0, "shared": 3200, "sass": 47.75}, None]
    lines = cuda_check.table(kernels, variants, mine, head)
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]
    assert cells[0] == ["target", "config", "registers", "spilled B", "shared B", "SASS per 16 B"]
    assert cells[2] == ["sm_100a", kernels.label(variants[0]), "93 (+2)", "0", "3200", "51.25 (+3.5)"]
    assert cells[3] == ["sm_90a", kernels.label(variants[1]), "90", "8", "2176", "-"]  # HEAD lacks it: no difference
    assert kernels.label(variants[1]).endswith(", tail")
    said = cuda_check.differences(variants, mine, head)
    assert said == ("SASS per 16 B on sm_100a +3.5 (1 of 1 kernels); registers +2 (1 of 1 kernels); "
                    "spilled bytes the same; shared memory the same")


def test_the_cache_keeps_each_kernel_and_an_edit_compiles_for_real(own_cache, shared_cubins):
    """The same source, target and options: compiled once; an edit (a comment is enough: NVRTC sees
    it) compiles anew; a failure is kept with NVRTC's log; a kernel kept without its SASS count (what
    bundle's check keeps) is compiled again where the count is asked for, then kept with it."""
    _nvrtc_or_skip()
    calls = []
    module = types.SimpleNamespace(**{name: getattr(submission, name) for name in cuda_check.KIT_NEEDS},
                                   cuda_options=submission.cuda_options)
    module.cuda_compile = lambda source, arch: calls.append(arch) or submission.cuda_compile(source, arch)
    variant = cuda_check.Variant(submission.cuda_default(128, 256, 1, (9, 0)), True, True, "sm_90a")
    first = cuda_check.build(cuda_check.KitKernels(module), variant, count_sass=False)
    assert first["ok"] and first["registers"] > 0 and calls == ["sm_90a"]
    assert cuda_check.build(cuda_check.KitKernels(module), variant, count_sass=False) == first and len(calls) == 1
    commented = cuda_check.KitKernels(module, kernel_text=submission.CUDA_SRC + "// a comment\n")
    assert cuda_check.build(commented, variant, count_sass=False)["ok"] and len(calls) == 2
    broken = cuda_check.KitKernels(module, kernel_text=_edited(AFTER_TYPEDEFS, AFTER_TYPEDEFS + BROKEN))
    failed = cuda_check.build(broken, variant, count_sass=False)
    assert not failed["ok"] and len(calls) == 3 and cuda_check.build(broken, variant, count_sass=False) == failed
    assert len(calls) == 3 and len(list((own_cache / "kernels").glob("*.json"))) == 3
    blackwell = variant._replace(config=submission.cuda_default(128, 256, 1, (10, 0)), arch="sm_100a")
    plain = cuda_check.build(cuda_check.KitKernels(module), blackwell, count_sass=False)
    assert plain["ok"] and plain["registers"] and plain["sass"] is None and len(calls) == 4
    counted = cuda_check.build(cuda_check.KitKernels(module), blackwell, count_sass=True)
    assert counted["sass"] > 0 and counted["loop"] > 0 and len(calls) == 5
    assert cuda_check.build(cuda_check.KitKernels(module), blackwell, count_sass=False) == counted and len(calls) == 5


# --------------------------------------------------------------------------- the command line

@pytest.mark.parametrize("args, words", [
    (["--arch", "hopper"], "--arch takes NVRTC targets like sm_100a or sm_90a, got hopper"),
    (["--all", "--shapes", "tests"], "give --all or --shapes, not both"),
    (["--shapes", "nope"], "--shapes must be one of tests, benchmarks, all or a test file"),
    (["{tmp}/none.py"], "not found; python3 eval.py compile takes a submission file carrying a CUDA kernel"),
    (["{root}/examples/minimal_torch.py"], "no CUDA kernel this check knows"),
], ids=["arch", "all and shapes", "shapes", "missing file", "no kernel"])
def test_bad_arguments_are_one_line_and_exit_2(args, words, tmp_path, capsys):
    argv = [a.replace("{tmp}", str(tmp_path)).replace("{root}", str(ROOT)) for a in args]
    assert kit_eval.main(["compile", *argv]) == cuda_check.EXIT_USAGE
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("error: ") and words in err, err


def test_the_starter_compiles_for_both_targets(capsys):
    """A file built like examples/starter_cuda.py: the config each shape launches, for sm_90a and
    sm_100a; its rows name the starter's Config."""
    _nvrtc_or_skip()
    assert cuda_check.main([str(ROOT / "examples" / "starter_cuda.py"), "--shapes", str(TINY_ONE)]) == 0
    out = capsys.readouterr().out
    assert "starter_cuda.py: compiles for sm_90a (1 kernels) and sm_100a (1 kernels)" in out
    assert re.search(r"\| sm_100a +\| Config\(threads=128, lanes_per_row=8, rows_per_lane=2\) +\| \d+", out), out


def test_bundle_refuses_with_the_flag_named_and_writes_where_nvrtc_is_missing(monkeypatch, capsys):
    """bundle's side of the check (its answer stubbed: the real one in the README's loop below): a
    kernel that does not compile is refused naming the target, the config, NVRTC's first error and
    --no-compile, then NVRTC's lines; where NVRTC is missing one line says so and the text is written."""
    answers = {}

    def status(cmd, **kwargs):
        return types.SimpleNamespace(returncode=0, stderr="", stdout="CUDA_CHECK " + json.dumps(answers["now"]))

    monkeypatch.setattr(bundle.subprocess, "run", status)
    answers["now"] = {"kind": "kit", "compiles": False, "archs": {"sm_90a": 13, "sm_100a": 38},
                      "failed": "1 of 51 kernels", "log": ["x.cu(3): error: no", "1 error detected"],
                      "failures": [{"arch": "sm_100a", "config": "lpr=8", "error": "x.cu(3): error: no"}]}
    refusal = bundle.compile_refusal("text\n", "submission.py", "", ["kernels/nvfp4_gemv.cu"])
    assert refusal.splitlines() == [
        "error: submission.py: nothing written: kernels/nvfp4_gemv.cu does not compile for sm_100a (lpr=8; 1 of 51 "
        "kernels): x.cu(3): error: no; `python3 eval.py compile` shows every error, `python3 eval.py bundle "
        "--no-compile` writes it anyway", "x.cu(3): error: no", "1 error detected"]
    answers["now"] = {"kind": "kit", "missing": "NVRTC (libnvrtc.so) not found"}
    assert bundle.compile_refusal("text\n") == ""
    err = capsys.readouterr().err
    assert err == "note: submission.py: the kernel was not compiled before writing (NVRTC (libnvrtc.so) not found)\n"


# --------------------------------------------------------------------------- the README's loop

def _git(folder: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=kit", "-c", "user.email=kit@example.com", *args], cwd=folder, check=True,
                   capture_output=True, timeout=60)


@pytest.fixture
def kit_copy(tmp_path, monkeypatch):
    """submission.py and kernels/ in a git checkout of their own (its HEAD: the kit's files), taken
    as the kit's (bundle.SUBMISSION), the working folder."""
    (tmp_path / "kernels").mkdir()
    for path in (ROOT / "kernels").iterdir():
        (tmp_path / "kernels" / path.name).write_text(path.read_text())
    (tmp_path / "submission.py").write_text((ROOT / "submission.py").read_text())
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "the kit")
    monkeypatch.setattr(bundle, "SUBMISSION", tmp_path / "submission.py")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.skipif(HAS_CUDA, reason="eval.py's compile lines are for a machine without a GPU (on one the cuda "
                                      "backend builds its kernels itself)")
def test_the_readmes_loop_with_a_broken_then_a_correct_kernel(kit_copy, capsys):
    """kernels/nvfp4_gemv.cu edited, then `python3 eval.py compile`, `python3 eval.py bundle`,
    `python3 eval.py` (no GPU), as the README's edit loop says. A syntax error: compile names the
    .cu line, the target and the config and exits 1; bundle writes nothing; eval.py's header says
    that kernels/ as bundle would copy them do not compile. A correct edit: compile shows the
    kernel's figures beside HEAD's (the sm_100a K loop's SASS per 16 B moves), bundle writes it,
    the header says it compiles."""
    _nvrtc_or_skip()
    cu, sub = kit_copy / "kernels" / "nvfp4_gemv.cu", kit_copy / "submission.py"
    original, before = cu.read_text(), sub.read_bytes()
    cu.write_text(_edited(AFTER_TYPEDEFS, AFTER_TYPEDEFS + BROKEN, original))
    line = _line_of(cu.read_text(), BROKEN)

    assert kit_eval.main(["compile"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert re.search(r"^error: kernels/nvfp4_gemv\.cu does not compile for sm_(90|100)a \(lpr=", err, re.M), err
    assert f"nvfp4_gemv.cu({line}): error: " in err and "int broken( {" in err

    assert kit_eval.main(["bundle"]) == 1
    out, err = capsys.readouterr()
    assert err.startswith("error: submission.py: nothing written: kernels/nvfp4_gemv.cu does not compile for sm_")
    assert "--no-compile" in err and f"nvfp4_gemv.cu({line}): error: " in err and sub.read_bytes() == before

    assert kit_eval.main(["--shapes", str(TINY_ONE)]) == 0
    head = capsys.readouterr().out.rstrip().splitlines()
    assert head[0].endswith(", bundle: source edited") and head[-1] == "test: PASS"
    assert head[1].startswith("cuda kernel: compiles for sm_90a and sm_100a")  # the file that runs: the old copy
    assert head[2].startswith("kernels/nvfp4_gemv.cu as bundle would copy it: does not compile for sm_")
    assert f"nvfp4_gemv.cu({line}): error: " in head[2]

    cu.write_text(_edited(ACC_RETURN, ACC_EDITED, original))
    assert kit_eval.main(["compile", "--shapes", str(TINY_ONE)]) == 0
    out = capsys.readouterr().out
    rows = {ln.split("|")[1].strip(): [c.strip() for c in ln.strip().strip("|").split("|")]
            for ln in out.splitlines() if ln.startswith("| sm_")}
    variant = cuda_check.Variant(submission.cuda_default(128, 256, 1, (10, 0)), True, True, "sm_100a")
    now, then = (cuda_check.build(cuda_check.KitKernels(submission, kernel_text=text), variant, True)
                 for text in (cu.read_text(), original))  # the figures the check keeps (no new compile)
    assert now["sass"] != then["sass"] and then["registers"]
    sign, step = "+" if now["sass"] > then["sass"] else "-", abs(now["sass"] - then["sass"])
    assert rows["sm_100a"][5] == f"{cuda_check._number(now['sass'])} ({sign}{cuda_check._number(step)})"
    assert rows["sm_100a"][2].split()[0] == str(now["registers"]) and rows["sm_90a"][5] == "-"
    assert re.search(r"^beside HEAD \(\w+\): .*SASS per 16 B on sm_100a [+-]", out, re.M), out

    assert kit_eval.main(["bundle"]) == 0
    assert capsys.readouterr().out == "submission.py: wrote its copies of kernels/nvfp4_gemv.cu\n"
    assert ACC_EDITED in sub.read_text()
    assert kit_eval.main(["--shapes", str(TINY_ONE)]) == 0
    head = capsys.readouterr().out.rstrip().splitlines()
    assert head[0].endswith(", bundle: in sync") and head[1].startswith("cuda kernel: compiles for sm_90a and sm_100a")
    assert not head[2].startswith("kernels/")
