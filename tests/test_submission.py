"""submission.py: the contract (header, forbidden word, size, stand-alone import), dispatch,
validation, and the scaled_mm / torch backends against the exact reference on the CPU.

The scaled_mm backend runs with ``torch._scaled_mm`` replaced by the reference's exact
emulator; a recording wrapper checks it receives exactly what the real call would.
"""

import json
import os
import re
import subprocess
import sys

import pytest
import torch
from conftest import BENCHMARKS, HAS_CUDA, OFFICIAL_TESTS, ROOT, make_input, replace_inputs, requires_cuda
from tolerances import ATOL, EXACT, RTOL

import reference
import submission
from utils import verbose_allclose

L_VALUES = (1, 2, 3, 4, 5, 7, 8, 9, 16)
DISTS = ("official", "full-range")


def _expected(data):
    c = data[6].clone()
    return reference.ref_kernel(data[:6] + (c,))


def _run_poisoned(fn, data):
    """Poison c with NaN, run, return the output (unwritten elements stay NaN and fail)."""
    data[6].fill_(float("nan"))
    return fn(data)


def _assert_matches(out, data, rtol=RTOL, atol=ATOL):
    c = data[6]
    assert out.shape == c.shape and out.dtype == c.dtype and out.device == c.device
    expected = _expected(data)
    reasons = verbose_allclose(out, expected, rtol=rtol, atol=atol)
    assert not reasons, "\n".join(reasons)


@pytest.fixture
def emulated_scaled_mm(monkeypatch):
    """torch._scaled_mm -> the exact emulator, recording every call's arguments."""
    calls = []

    def fake(a, b, scale_a, scale_b, bias=None, out_dtype=torch.float16, **kw):
        calls.append((a, b, scale_a, scale_b, bias, out_dtype))
        return reference.scaled_mm_fp4_emulated(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype)

    monkeypatch.setattr(torch, "_scaled_mm", fake)
    return calls


def _scaled_mm(data):
    return submission._scaled_mm_run(data, *submission.check_inputs(data))


def _torch(data):
    return submission._torch_run(data, *submission.check_inputs(data))


# --------------------------------------------------------------------------- the file itself

def test_header_forbidden_word_and_size():
    raw = (ROOT / "submission.py").read_bytes()
    lines = raw.decode().splitlines()
    assert lines[0] == "#!POPCORN leaderboard nvfp4_gemv"
    assert lines[1] == "#!POPCORN gpu NVIDIA"
    assert b"stream" not in raw.lower(), "the server rejects any file containing 'stream'"
    assert len(raw) < 1_000_000


def test_imports_only_allowed_modules():
    import ast

    tree = ast.parse((ROOT / "submission.py").read_text())
    # the contract: torch, triton, numpy, the standard library and the server's task module
    allowed = {"torch", "triton", "numpy", "task"} | set(sys.stdlib_module_names)
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        for n in names:
            assert n.split(".")[0] in allowed, f"submission.py imports {n}"


STANDALONE_TASK = '''\
from typing import TypeVar
import torch
input_t = TypeVar("input_t", bound=tuple)
output_t = TypeVar("output_t", bound=torch.Tensor)
'''

STANDALONE_RUN = '''\
import sys
sys.path.insert(0, sys.argv[1])
import torch
import submission
assert "reference" not in sys.modules and "utils" not in sys.modules
t = torch.load(sys.argv[2])
fp4 = torch.float4_e2m1fn_x2
data = (t["a"].view(fp4), t["b"].view(fp4), t["sfa"], t["sfb"], t["sfa_p"], t["sfb_p"], t["c"])
out = submission.custom_kernel(data)
torch.save({"out": out.contiguous(), "backend": submission.select_backend(data[0].device)}, sys.argv[3])
'''


@pytest.mark.parametrize("dist", DISTS)
def test_standalone_copy_runs_in_fresh_interpreter(tmp_path, dist):
    """submission.py alone + a minimal task.py in an empty folder, imported by a fresh
    interpreter that cannot see this repository."""
    folder = tmp_path / "server"
    folder.mkdir()
    (folder / "submission.py").write_bytes((ROOT / "submission.py").read_bytes())
    (folder / "task.py").write_text(STANDALONE_TASK)
    data = make_input(256, 512, 3, 7, "cpu", dist)
    a, b, sfa, sfb, sfa_p, sfb_p, c = data
    c.fill_(float("nan"))
    torch.save({"a": a.view(torch.uint8), "b": b.view(torch.uint8), "sfa": sfa, "sfb": sfb,
                "sfa_p": sfa_p, "sfb_p": sfb_p, "c": c}, tmp_path / "in.pt")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NVFP4_GEMV_BACKEND")}
    proc = subprocess.run([sys.executable, "-I", "-c", STANDALONE_RUN, str(folder), str(tmp_path / "in.pt"),
                           str(tmp_path / "out.pt")], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = torch.load(tmp_path / "out.pt")
    _assert_matches(res["out"], data)


# --------------------------------------------------------------------------- validation

@pytest.mark.parametrize("case, exc, words", [
    ("a_dtype", TypeError, "a must be float4"),
    ("sf_dtype", TypeError, "float8_e4m3fn"),
    ("c_dtype", TypeError, "c must be float16"),
    ("m", ValueError, "M % 128"),
    ("k", ValueError, "K % 64"),
    ("c_shape", ValueError, "c must be [M, 1, L]"),
    ("b_shape", ValueError, "b must be"),
    ("sfa_layout", ValueError, "sfa_permuted must be"),
    ("device", ValueError, "share one device"),
    ("sfa_plain_dtype", TypeError, "sfa must be float8_e4m3fn, got torch.uint8"),
    ("sfb_plain_dtype", TypeError, "sfb must be float8_e4m3fn"),
    ("sfa_plain_shape", ValueError, "sfa must be [M, K/16, L] = (128, 8, 2), got (128, 8, 1)"),
    ("sfb_plain_shape", ValueError, "sfb must be [N, K/16, L] = (128, 8, 2), got (64, 8, 2)"),
    ("sfa_plain_device", ValueError, "sfa must be on a's device cpu (or the CPU), got meta"),
    ("arity", TypeError, "data must be the tuple"),
    ("none", TypeError, "data must be the tuple"),
    ("not_tensors", TypeError, "7 torch tensors"),
])
def test_validation_names_the_constraint(case, exc, words, monkeypatch):
    monkeypatch.setattr(submission, "_FAST", {})  # the first call with a layout: the full checks
    data = make_input(128, 128, 2, 3, "cpu")
    a, b, sfa, sfb, sfa_p, sfb_p, c = data
    bad = {
        "a_dtype": lambda: replace_inputs(data, a=a.view(torch.uint8).to(torch.int16)),
        "sf_dtype": lambda: replace_inputs(data, sfa_p=sfa_p.view(torch.uint8)),
        "c_dtype": lambda: replace_inputs(data, c=c.float()),
        "m": lambda: replace_inputs(data, a=a[:100], c=c[:100]),
        "k": lambda: replace_inputs(data, a=a[:, :16], b=b[:, :16]),
        "c_shape": lambda: replace_inputs(data, c=c[:64]),
        "b_shape": lambda: replace_inputs(data, b=b[:, :32]),
        "sfa_layout": lambda: replace_inputs(data, sfa_p=sfa_p.contiguous()),
        "device": lambda: replace_inputs(data, c=torch.empty(c.shape, dtype=c.dtype, device="meta")),
        # the plain scales, which the backend here (torch) does not read: checked all the same
        "sfa_plain_dtype": lambda: replace_inputs(data, sfa=sfa.view(torch.uint8)),
        "sfb_plain_dtype": lambda: replace_inputs(data, sfb=sfb.to(torch.float16)),
        "sfa_plain_shape": lambda: replace_inputs(data, sfa=sfa[:, :, :1]),
        "sfb_plain_shape": lambda: replace_inputs(data, sfb=sfb[:64]),
        "sfa_plain_device": lambda: replace_inputs(data, sfa=torch.empty(sfa.shape, dtype=sfa.dtype, device="meta")),
        "arity": lambda: data[:6],
        "none": lambda: None,
        "not_tensors": lambda: data[:6] + (None,),
    }[case]()
    with pytest.raises(exc, match=re.escape(words)):
        submission.custom_kernel(bad)


# --------------------------------------------------------------------------- dispatch

def test_auto_on_cpu_is_torch(monkeypatch):
    monkeypatch.delenv("NVFP4_GEMV_BACKEND", raising=False)
    assert submission.select_backend(torch.device("cpu")) == "torch"


def test_unknown_backend_name_raises(monkeypatch):
    monkeypatch.setenv("NVFP4_GEMV_BACKEND", "cutlass")
    with pytest.raises(ValueError, match="NVFP4_GEMV_BACKEND='cutlass' is not a backend: choose one of "
                                         "auto, cuda, triton, scaled_mm, torch"):
        submission.select_backend(torch.device("cpu"))


@pytest.mark.parametrize("variable, value, words", [
    ("NVFP4_GEMV_CONFIG", "triton=abc", "'abc': a config is integers by position or name=value pairs"),
    ("NVFP4_GEMV_CONFIG", "triton=1,2", "'triton=1,2': triton takes 4 numbers"),
    ("NVFP4_GEMV_CONFIG", "triton=3,100,2,1", "must be powers of two"),
    ("NVFP4_GEMV_CONFIG", "garbage", "'garbage' is not cuda=... or triton=..."),
    ("NVFP4_GEMV_CONFIG", "scaled_mm=1", "'scaled_mm=1' is not cuda="),
    ("NVFP4_GEMV_CONFIG", "cuda=32,2,1", "cuda takes 5 to 17 numbers"),
    ("NVFP4_GEMV_CONFIG", "cuda=3,2,1,1,2", "lpr (lanes per row) must be 2, 4, 8, 16 or 32"),
    ("NVFP4_GEMV_CONFIG", "cuda=32,2,1,1,2,2", "v must divide u"),
    ("NVFP4_GEMV_CONFIG", "cuda=32,2,2,1,3,1,2,0,1,1", "bsh needs lpr * u = 32"),
    ("NVFP4_GEMV_CONFIG", "cuda=8,2,4,8,3,1,2,0,1,1,8", "warps * ks must be at most 32"),
    ("NVFP4_GEMV_CONFIG", "cuda=lpr=8,rpt=2,u=4,warps=1,decode=dp4a-sr3", "decode must be one of dp4a, f16x2"),
    ("NVFP4_GEMV_CONFIG", "cuda=lpr=8,rpt=2,u=4", "'lpr=8,rpt=2,u=4': warps missing"),
    ("NVFP4_GEMV_CONFIG", "cuda=lpr=8,rpt=2,u=4,warps=1,lanes=2", "no field 'lanes' (fields: lpr, rpt, u, warps"),
    ("NVFP4_GEMV_CONFIG", "cuda=8,rpt=2,u=4,warps=1", "name every field once one is named"),
    ("NVFP4_GEMV_CONFIG", "triton=block_m=16,block_g=64,warps=2,decode=dp4a-sr", "decode one of tl, f16x2, dp4a"),
    ("NVFP4_GEMV_TUNE", "bogus", "NVFP4_GEMV_TUNE='bogus': choose one of auto, force, off"),
], ids=["triton=abc", "triton=1,2", "triton=3,100,2,1", "garbage", "scaled_mm=1", "cuda short", "cuda LPR 3",
        "cuda V 2 U 1", "cuda BSH LPR*U 64", "cuda WARPS*KS 64", "cuda decode name", "cuda named, warps missing",
        "cuda unknown field", "cuda mixed", "triton decode name", "tune bogus"])
def test_bad_settings_are_one_line_before_any_work(monkeypatch, variable, value, words):
    """A setting the kernels cannot use raises one ValueError naming the variable, from
    select_backend (what eval.py asks before any case) and from custom_kernel before any
    compiling; none is silently ignored."""
    monkeypatch.delenv("NVFP4_GEMV_BACKEND", raising=False)
    monkeypatch.setenv(variable, value)
    monkeypatch.setattr(submission, "_FAST", {})
    for call in (lambda: submission.select_backend(torch.device("cpu")),
                 lambda: submission.custom_kernel(make_input(128, 128, 1, 3, "cpu"))):
        with pytest.raises(ValueError) as info:
            call()
        assert words in str(info.value) and "\n" not in str(info.value)
        assert str(info.value).startswith(variable)


def test_good_settings_parse(monkeypatch):
    """Spaces and empty parts are fine; every config the kit itself launches would be accepted."""
    monkeypatch.setenv("NVFP4_GEMV_CONFIG", " triton=16,64,2,1 ; cuda=32,2,1,1,2,1,2,0,1; ")
    positional = submission._pinned_configs()
    assert positional == {"triton": submission.TritonConfig(block_m=16, block_g=64, warps=2, stages=1),
                          "cuda": submission.CudaConfig(lpr=32, rpt=2, u=1, warps=1, decode="dp4a-sr", v=1, load=2,
                                                        pipe=0, minb=1)}
    monkeypatch.setenv("NVFP4_GEMV_CONFIG", "triton=block_m=16, block_g=64, warps=2;"
                       "cuda=lpr=32,rpt=2,u=1,warps=1,decode=dp4a-sr,v=1,pipe=0,minb=1")
    assert submission._pinned_configs() == positional  # the same configs by their fields' names
    for cfg, _, _ in submission.cuda_compile_variants():
        assert cfg.problem() == "", cfg
        assert submission.CudaConfig.parse(repr(cfg)[len("CudaConfig("):-1].replace(" ", "").replace('"', "")) == cfg
    for name, backend in submission.BACKENDS.items():
        for table in (backend.measured or {}).values():
            for cfg in table.values():
                assert isinstance(cfg, backend.config) and cfg.problem() == "", (name, cfg)
    for value, mode in (("", "auto"), ("FORCE", "force"), (" off ", "off")):
        monkeypatch.setenv("NVFP4_GEMV_TUNE", value)
        assert submission._tune_mode() == mode


CUDA_BASE = submission.CudaConfig(lpr=8, rpt=2, u=4, warps=1, decode="dp4a-sr2")
CUDA_BROKEN = [  # (fields that break exactly one rule of CUDA_BASE, that rule's words)
    (dict(lpr=3), "lpr (lanes per row) must be 2, 4, 8, 16 or 32"),
    (dict(rpt=0), "rpt (rows per lane) must be an integer >= 1"),
    (dict(u=0), "u (chunks of a row per lane and step) must be an integer >= 1"),
    (dict(warps=33), "warps must be an integer in 1..32"),
    (dict(decode="dp4a-sr3"), "decode must be one of dp4a, f16x2, dp4a-sr, dp4a-sr2"),
    (dict(v=3), "v (adjacent chunks per lane) must be 1 or 2"),
    (dict(u=3), "v must divide u"),
    (dict(load="fast"), "load must be one of nc_no_allocate, plain, l1_evict_first, cs"),
    (dict(load="no_allocate_l2_evict_first_256", v=1), "load no_allocate_l2_evict_first_256 needs v 2"),
    (dict(pipe="eager"), "pipe must be one of ptxas, a_first, ab_first"),
    (dict(minb=-1), "minb must be an integer >= 0"),
    (dict(bsh=2), "bsh must be a bool"),
    (dict(bsh=True, lpr=4), "bsh needs lpr * u = 32"),
    (dict(bsh=True, pipe="ab_first"), "pipe ab_first needs bsh False"),
    (dict(ks=0), "ks must be an integer >= 1"),
    (dict(warps=8, ks=8), "warps * ks must be at most 32"),
    (dict(kb=65), "kb must be an integer in 1..64"),
    (dict(bload=2), "bload must be a bool"),
    (dict(gs=33), "gs must be an integer in 0..32"),
    (dict(gs=2, kb=2), "gs > 0 needs ks = kb = 1"),
    (dict(ki=2, ks=2), "ki must be a bool"),
    (dict(ki=True), "ki (interleaved K parts) needs K split in parts: ks * kb > 1"),
    (dict(ring=17), "ring must be an integer in 0..16"),
    (dict(ring=2, lpr=32, v=1, minb=1), "ring > 0 takes lpr 32, v 1, pipe ptxas"),
    (dict(ring=2, lpr=32, v=1, pipe="ptxas"), "ring > 0 needs minb in 1..8"),
    (dict(pw=2), "pw must be an integer in 0..8, and 0 without a ring"),
    (dict(ring=2, lpr=32, v=1, pipe="ptxas", minb=1, warps=30, pw=4), "ring > 0 needs warps * ks + pw <= 32 warps"),
    (dict(ring=2, lpr=32, v=1, pipe="ptxas", minb=1, rpt=9), "ring > 0 needs rpt <= 8"),
]


@pytest.mark.parametrize("fields, rule", CUDA_BROKEN, ids=[r.split(" must")[0].split(" needs")[0] + str(i)
                                                           for i, (_, r) in enumerate(CUDA_BROKEN)])
def test_a_cuda_config_that_breaks_a_rule_is_told_that_rule(fields, rule):
    """problem() names the one rule a config breaks (and the config), in one line."""
    cfg = CUDA_BASE._replace(**fields)
    problem = cfg.problem()
    assert problem == f"cuda config {cfg!r}: " + next(r for _, r in submission._CUDA_RULES if r.startswith(rule))
    assert CUDA_BASE.problem() == ""


def test_every_cuda_rule_has_its_case():
    assert len(submission._CUDA_RULES) == len(CUDA_BROKEN)
    for _, rule in submission._CUDA_RULES:
        assert any(rule.startswith(words) for _, words in CUDA_BROKEN), rule


def test_loads_pipes_and_bools_by_number_are_the_named_config():
    """Load and pipe by number (their place in CUDA_LOADS, CUDA_PIPES) and bsh / bload as 0 / 1,
    the forms configs were recorded in, give the config with the names and bools: equal, the
    same hash and repr, by construction, _replace, of() and parse()."""
    named = submission.CudaConfig(lpr=8, rpt=2, u=4, warps=1, decode="dp4a-sr2", v=1, load="nc_no_allocate",
                                  pipe="ptxas", minb=2, bsh=True, ks=8, bload=True)
    numbered = submission.CudaConfig(8, 2, 4, 1, "dp4a-sr2", 1, 0, 0, 2, 1, 8, 1, 1)
    assert named == numbered and hash(named) == hash(numbered) and repr(named) == repr(numbered)
    assert (named.load, named.pipe, named.bsh, named.bload) == ("nc_no_allocate", "ptxas", True, True)
    assert named.positional() == (8, 2, 4, 1, 3, 1, 0, 0, 2, 1, 8, 1, 1, 0, 0, 0, 0)
    assert named._replace(ki=1).ki is True and named._replace(ki=1).positional()[14] == 1
    assert submission.CudaConfig.of(named.positional()) == named
    assert named._replace(load=6, pipe=2, bsh=0).load == "no_allocate_l2_evict_first_256"
    assert named._replace(load=6, pipe=2, bsh=0)[7:10] == ("ab_first", 2, False)
    assert submission.CudaConfig.parse("8,2,4,1,3,1,0,0,2,1,8,1,1") == named
    assert submission.CudaConfig.parse("lpr=8,rpt=2,u=4,warps=1,decode=dp4a-sr2,v=1,load=0,pipe=0,minb=2,"
                                       "bsh=1,ks=8,bload=1") == named
    assert submission.CudaConfig.parse(repr(named)[len("CudaConfig("):-1].replace(" ", "").replace('"', "")) == named
    assert repr(named) == ('CudaConfig(lpr=8, rpt=2, u=4, warps=1, decode="dp4a-sr2", v=1, load="nc_no_allocate", '
                           'pipe="ptxas", minb=2, bsh=True, ks=8, bload=True)')


# --------------------------------------------------------------------------- the tables' kernel revision

def _tables_module(name: str, tables: dict, proofs: list | None = None):
    """submission.py with its copy of kernels/tables.json (and of the proofs) replaced, imported
    as a module of its own from a file of its own."""
    import json
    import tempfile

    import bundle

    lines = (ROOT / "submission.py").read_text().splitlines()
    same_sass = json.loads((ROOT / "kernels" / "same_sass.json").read_text())
    if proofs is not None:
        same_sass["proofs"] += proofs
    for block in reversed(bundle.blocks("\n".join(lines))):
        content = {"kernels/tables.json": tables, "kernels/same_sass.json": same_sass}.get(block.path)
        if content is not None:
            lines[block.first:block.end] = json.dumps(content, indent=2).splitlines()
    path = os.path.join(tempfile.mkdtemp(prefix="nvfp4_tables_"), f"{name}.py")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_no_shipped_table_entry_is_stale():
    """Every entry of kernels/tables.json names the kernel revision it was measured with, and
    that is this kernel's or one kernels/same_sass.json proves equal to it: a stale entry fails
    here (re-measure it, prove its SASS equal with benchmarks/sass_dump.py, or retire it)."""
    assert submission.stale_entries() == []
    entries = submission.table_entries()
    for name, model, shape, _, record in entries:
        assert re.fullmatch(r"[0-9a-f]{12}", record["kernel"] or ""), (name, model, shape)
        assert record["kit"] and re.fullmatch(r"\d{4}-\d{2}-\d{2}", record["date"]), (name, model, shape)
        assert submission.same_sass(name, record["kernel"])
    assert re.fullmatch(r"[0-9a-f]{12}", submission.kernel_revision())


STALE = "0123456789ab"  # a kernel revision no proof links to this one


def _planted(tables: dict, model: str, shape: list, config: str) -> dict:
    entry = {"shape": shape, "config": config, "kernel": STALE, "kit": "0000000", "date": "2026-11-26",
             "server_us": 1.0, "clean_us": 1.0, "sweep": "planted"}
    tables.setdefault("tables", {}).setdefault("cuda", {}).setdefault(model, []).append(entry)
    return tables


def test_a_stale_entry_is_ignored_with_one_warning_and_its_shape_untabled(monkeypatch, capsys):
    """Entries measured with another kernel (no proof links their revision to this one) are not
    used: the first lookup of one says so once on stderr, naming every stale entry, and the shape
    goes to the tuner as on a GPU no table names; later lookups say nothing more. A proof in
    kernels/same_sass.json that the revision compiles alike makes the same entry count."""
    import json
    import types

    model = "NVIDIA H100 80GB HBM3"
    tables = json.loads((ROOT / "kernels" / "tables.json").read_text())
    for shape in ([7168, 2048, 4], [4096, 7168, 8]):
        tables["tables"].get("cuda", {}).get(model, [])[:] = [
            e for e in tables["tables"].get("cuda", {}).get(model, []) if e["shape"] != shape]
        _planted(tables, model, shape, "lpr=32,rpt=1,u=2,warps=1,decode=dp4a-sr")
    planted = submission.CudaConfig(lpr=32, rpt=1, u=2, warps=1, decode="dp4a-sr")
    stale = _tables_module("_stale_tables", tables)
    assert {(b, m, s) for b, m, s, r in stale.stale_entries() if r == STALE} == {
        ("cuda", model, (7168, 2048, 4)), ("cuda", model, (4096, 7168, 8))}
    tuned = []
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: model)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (9, 0))
    monkeypatch.delenv("NVFP4_GEMV_CONFIG", raising=False)
    monkeypatch.delenv("NVFP4_GEMV_TUNE", raising=False)
    data = [types.SimpleNamespace(device=torch.device("cuda", 0))]
    monkeypatch.setattr(stale, "_tune", lambda name, data, m, k, l, cands: tuned.append((m, k, l)) or cands[-1])
    capsys.readouterr()
    for shape in ((7168, 2048, 4), (4096, 7168, 8)):
        assert stale.config_for("cuda", data, *shape) != planted
    assert tuned == [(7168, 2048, 4), (4096, 7168, 8)]  # untabled: the tuner decided
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("nvfp4_gemv: 2 table entries measured with another kernel"), err
    assert f"cuda {model} 7168x2048x4 (kernel {STALE})" in err[0]
    assert f"(revision {submission.kernel_revision()})" in err[0]

    proven = _tables_module("_proven_tables", tables, [
        {"backend": "cuda", "old": STALE, "new": submission.kernel_revision(), "compared": "planted"}])
    monkeypatch.setattr(proven, "_tune", lambda *a: pytest.fail("a proven entry is not tuned"))
    assert proven.stale_entries() == [] and proven.config_for("cuda", data, 7168, 2048, 4) == planted
    assert capsys.readouterr().err == ""


def test_pinned_triton_block_must_divide_m(monkeypatch):
    monkeypatch.setenv("NVFP4_GEMV_CONFIG", "triton=256,64,2,1")
    with pytest.raises(ValueError, match="triton block_m=256 must divide M=128"):
        submission.config_for("triton", make_input(128, 128, 1, 3, "cpu"), 128, 128, 1)


def test_forced_backend_that_cannot_run_raises(monkeypatch):
    monkeypatch.setenv("NVFP4_GEMV_BACKEND", "scaled_mm")
    data = make_input(128, 128, 1, 3, "cpu")
    with pytest.raises(RuntimeError, match="scaled_mm cannot run on cpu.*compute capability|CUDA"):
        submission.custom_kernel(data)


def test_support_report_never_raises():
    rep = submission.backend_support(torch.device("cpu"))
    assert set(rep) == {"cuda", "scaled_mm", "triton", "torch"}
    assert rep["torch"][0] and not rep["scaled_mm"][0] and rep["scaled_mm"][1]
    assert not rep["cuda"][0] and "CUDA GPU" in rep["cuda"][1]


def test_auto_never_picks_an_unsupported_backend():
    dev = torch.device("cuda" if HAS_CUDA else "cpu")
    name = submission.select_backend(dev)
    assert name == "fastest" if HAS_CUDA else submission.backend_support(dev)[name][0]


def test_forced_torch_runs(monkeypatch):
    monkeypatch.setenv("NVFP4_GEMV_BACKEND", "torch")
    data = make_input(256, 256, 2, 5, "cpu")
    out = _run_poisoned(submission.custom_kernel, data)
    _assert_matches(out, data, rtol=EXACT, atol=EXACT)


# --------------------------------------------------------------------------- torch backend

@pytest.mark.parametrize("dist", DISTS)
@pytest.mark.parametrize("m, k, l, seed", OFFICIAL_TESTS)
def test_torch_backend_official_shapes(m, k, l, seed, dist):
    data = make_input(m, k, l, seed, "cpu", dist)
    # exact: exact group sums, exact scale products, float64 sum, one rounding (as ref_kernel)
    _assert_matches(_run_poisoned(_torch, data), data, rtol=EXACT, atol=EXACT)


@pytest.mark.parametrize("dist", DISTS)
@pytest.mark.parametrize("l", L_VALUES)
def test_torch_backend_batches(l, dist):
    data = make_input(256, 320, l, 100 + l, "cpu", dist)
    _assert_matches(_run_poisoned(_torch, data), data, rtol=EXACT, atol=EXACT)


# --------------------------------------------------------------------------- scaled_mm backend

@pytest.mark.parametrize("dist", DISTS)
@pytest.mark.parametrize("m, k, l, seed", OFFICIAL_TESTS)
def test_scaled_mm_backend_official_shapes(m, k, l, seed, dist, emulated_scaled_mm):
    data = make_input(m, k, l, seed, "cpu", dist)
    # the emulator is exact, so this is the same exact value ref_kernel gives
    _assert_matches(_run_poisoned(_scaled_mm, data), data, rtol=EXACT, atol=EXACT)
    assert len(emulated_scaled_mm) == l


@pytest.mark.parametrize("dist", DISTS)
@pytest.mark.parametrize("l", L_VALUES)
def test_scaled_mm_backend_batches(l, dist, emulated_scaled_mm):
    data = make_input(128, 192, l, 200 + l, "cpu", dist)
    _assert_matches(_run_poisoned(_scaled_mm, data), data, rtol=EXACT, atol=EXACT)
    assert len(emulated_scaled_mm) == l


@pytest.mark.parametrize("l", (1, 3, 8))
def test_scaled_mm_receives_the_real_calls_arguments(l, emulated_scaled_mm):
    """Scale vectors equal to_blocked of the plain scales (bit for bit); a is the batch slice,
    b the transposed padded slice; fp16 out, no bias."""
    m, k = 256, 512
    data = make_input(m, k, l, 11, "cpu", "full-range")
    a, b, sfa, sfb, *_ = data
    _scaled_mm(data)
    assert len(emulated_scaled_mm) == l
    for i, (ca, cb, sa, sb, bias, out_dtype) in enumerate(emulated_scaled_mm):
        assert ca.dtype == torch.float4_e2m1fn_x2 and cb.dtype == torch.float4_e2m1fn_x2
        assert torch.equal(ca.view(torch.uint8), a[:, :, i].view(torch.uint8))
        assert cb.shape == (k // 2, 128) and cb.stride(0) == 1
        assert torch.equal(cb.view(torch.uint8), b[:, :, i].transpose(0, 1).view(torch.uint8))
        assert sa.dtype == torch.float8_e4m3fn and sa.dim() == 1
        assert torch.equal(sa.view(torch.uint8), reference.to_blocked(sfa[:, :, i]).view(torch.uint8))
        assert torch.equal(sb.view(torch.uint8), reference.to_blocked(sfb[:, :, i]).view(torch.uint8))
        assert bias is None and out_dtype == torch.float16


def test_scaled_mm_scale_vectors_are_views_not_copies():
    data = make_input(256, 512, 2, 4, "cpu")
    sfa_p = data[4]
    blocked = submission._blocked(sfa_p)
    assert blocked.data_ptr() == sfa_p.data_ptr() and blocked.is_contiguous()


# --------------------------------------------------------------------------- GPU

@requires_cuda
def test_gpu_scaled_mm_reported_unsupported_off_blackwell():
    dev = torch.device("cuda")
    ok, why = submission.backend_support(dev)["scaled_mm"]
    if torch.cuda.get_device_capability()[0] == 10:
        pytest.skip("Blackwell: FP4 _scaled_mm is supported here")
    assert not ok and "10.x" in why


@requires_cuda
@pytest.mark.parametrize("m, k, l, seed", BENCHMARKS)
def test_gpu_auto_backend_benchmark_shapes(m, k, l, seed, monkeypatch):
    monkeypatch.delenv("NVFP4_GEMV_BACKEND", raising=False)
    data = make_input(m, k, l, seed, "cuda")
    out = _run_poisoned(submission.custom_kernel, data)
    _assert_matches(out, data)


# --------------------------------------------------------------------------- layouts and NaN

def _row_padded(data, pad: int):
    """The same values with a's rows padded by ``pad`` bytes (a valid torch layout)."""
    a = data[0].view(torch.uint8)
    m, kh, l = a.shape
    base = torch.zeros(l, m, kh + pad, dtype=torch.uint8, device=a.device)
    base[:, :, :kh] = a.permute(2, 0, 1)
    padded = base.permute(1, 2, 0)[:, :kh, :]
    return (padded.view(torch.float4_e2m1fn_x2),) + data[1:]


@pytest.mark.parametrize("name, pad, ok", [("triton", 4, False), ("triton", 8, True), ("cuda", 8, False),
                                           ("torch", 4, True)])
def test_layouts_a_kernel_cannot_read_are_refused(name, pad, ok, monkeypatch):
    """An a whose rows are padded by 4 bytes is a valid tensor the triton kernel (8-byte words)
    cannot read: refused naming the constraint, never wrong numbers; 8 bytes is fine for it but
    not for the cuda kernel (16-byte loads); the torch backend reads anything."""
    data = _row_padded(make_input(128, 256, 2, 3, "cpu", "full-range"), pad)
    problem = submission._layout_problem(name, data)
    assert (problem == "") == ok, problem
    if not ok:
        assert "multiples of" in problem and name in problem
        if name == "triton" and submission.triton is not None and not HAS_CUDA:
            monkeypatch.setenv("NVFP4_GEMV_BACKEND", name)
            with pytest.raises(ValueError, match="row and batch strides to be multiples of 8 bytes"):
                submission.custom_kernel(data)
    elif name == "torch":
        _assert_matches(_run_poisoned(lambda d: submission.run_backend(name, d), data), data)


def _nan_scale(data, row: int, group: int, batch: int):
    """Scale (row, group, batch) of a set to the e4m3 NaN code 0x7F, plain and permuted."""
    data[2].view(torch.uint8)[row, group, batch] = 0x7F
    data[4].view(torch.uint8)[row % 32, (row % 128) // 32, row // 128, group % 4, group // 4, batch] = 0x7F
    return data


@pytest.mark.parametrize("name", ["torch", "triton"])
def test_nan_scale_gives_nan_in_that_row_only(name):
    """NaN in, NaN out (what the server's cuBLAS path gives), on every backend; before, the
    triton kernel under the interpreter read 0x7F as 480."""
    if name == "triton" and not submission.triton_supported(torch.device("cuda" if HAS_CUDA else "cpu"))[0]:
        pytest.skip("triton cannot run here")
    data = _nan_scale(make_input(128, 256, 2, 5, "cuda" if HAS_CUDA else "cpu", "full-range"), 7, 3, 1)
    expected = _expected(data)
    assert torch.isnan(expected[7, 0, 1]) and int(torch.isnan(expected).sum()) == 1
    out = _run_poisoned(lambda d: submission.run_backend(name, d), data)
    assert torch.isnan(out[7, 0, 1]) and int(torch.isnan(out).sum()) == 1


def test_fast_path_rechecks_a_changed_layout(monkeypatch):
    """After a first call, a call with the same layout takes the per-call fast path (and is
    still right); one whose other tensors changed layout is checked again in full (a c of the
    wrong shape raises instead of being written out of bounds); a changed NVFP4_GEMV_BACKEND
    is honoured."""
    monkeypatch.setattr(submission, "_FAST", {})
    monkeypatch.setenv("NVFP4_GEMV_BACKEND", "torch")
    data = make_input(256, 256, 2, 5, "cpu", "full-range")
    _assert_matches(_run_poisoned(submission.custom_kernel, data), data)
    assert len(submission._FAST) == 1
    again = make_input(256, 256, 2, 6, "cpu", "full-range")
    _assert_matches(_run_poisoned(submission.custom_kernel, again), again)
    wrong_c = again[:6] + (torch.empty(256, 1, 3, dtype=torch.float16),)
    with pytest.raises(ValueError, match=r"c must be \[M, 1, L\]"):
        submission.custom_kernel(wrong_c)
    monkeypatch.setenv("NVFP4_GEMV_BACKEND", "scaled_mm")
    with pytest.raises(RuntimeError, match="NVFP4_GEMV_BACKEND=scaled_mm cannot run"):
        submission.custom_kernel(again)


# ---- under a profiler (POPCORN_NCU): the first call launches only the kept kernel

@pytest.mark.parametrize("value, expected", [(None, False), ("", False), ("0", False), ("1", True), ("yes", True)],
                         ids=["unset", "empty", "zero", "one", "other"])
def test_profiling_follows_popcorn_ncu(monkeypatch, value, expected):
    """kernelbot sets POPCORN_NCU=1 for its profile runs; unset, empty or 0 is no profile."""
    if value is None:
        monkeypatch.delenv(submission.ENV_PROFILE, raising=False)
    else:
        monkeypatch.setenv(submission.ENV_PROFILE, value)
    assert submission.profiling() is expected
    if expected:
        assert submission._verify_policy() == ""  # no check: it would launch the exact backend's kernels


def test_a_profiled_first_call_races_nothing(monkeypatch):
    """With POPCORN_NCU set, picking the backend times, warms and checks nothing: the registry's first
    racing backend that can run these inputs is kept."""
    monkeypatch.setenv(submission.ENV_PROFILE, "1")
    data = make_input(128, 256, 1, 5, device="cpu")
    m, k, l = submission.check_inputs(data)
    key = submission._fastest_key(data, m, k, l)
    monkeypatch.delitem(submission._FASTEST, key, raising=False)

    def forbidden(*args, **kwargs):
        raise AssertionError("a profiled first call raced, warmed or checked a backend")

    for name in ("_race", "_warm_backend", "_verify", "_tune"):
        monkeypatch.setattr(submission, name, forbidden)
    expected = next((n for n, b in submission.BACKENDS.items() if b.races and b.supported(data[0].device)[0]
                     and not submission._layout_problem(n, data)), submission._exact_backend().name)
    assert submission._fastest(data, m, k, l) == expected
    submission._FASTEST.pop(key, None)


_PROFILED_CALL = """
import json, sys, torch
sys.path.insert(0, {root!r})
import reference, submission
data = reference.generate_input(7168, 2048, 4, 7, device="cuda")
torch.cuda.synchronize()
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
    submission.custom_kernel(data)
    torch.cuda.synchronize()
names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
print(json.dumps({{"kernels": names, "configs": submission.profile_configs()}}))
"""


@requires_cuda
def test_gpu_a_profiled_first_call_launches_one_kernel(tmp_path):
    """In a fresh process with POPCORN_NCU=1 the first call of a shape launches one kernel (the
    one later calls launch: no race, tuning or reference), and profile_configs() names its config."""
    env = {**os.environ, submission.ENV_PROFILE: "1"}
    env.pop(submission.ENV_BACKEND, None)
    proc = subprocess.run([sys.executable, "-c", _PROFILED_CALL.format(root=str(ROOT))], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    kernels = [n for n in out["kernels"] if "memset" not in n.lower() and "memcpy" not in n.lower()]
    assert len(kernels) == 1, kernels
    assert any(kernels[0].startswith(name) for name in out["configs"]), (kernels, out["configs"])
