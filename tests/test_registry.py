"""The design of submission.py, shown by editing it as a contributor would (on the CPU):

* a backend is one block plus its ``register(...)`` line: a toy backend appended to the file's
  text is listed, selectable by NVFP4_GEMV_BACKEND, raced by auto, verified on first use (a
  wrong one dropped), and served by the per-call fast path, with no other edit;
* a tuning parameter of the cuda kernel is a field of ``CudaConfig`` and a template parameter
  of the kernel (``gemv_body`` in kernels/nvfp4_gemv.cu, and its instantiation in
  ``cuda_kernel``): with those edits and ``python3 eval.py bundle``, no other, a config names it
  (by field name or position), the tables and candidates keep their meaning, and the kernel's
  name and source carry it;
* one registry: the backend lists of eval.py, bench_kernel.py and compare.py come from it,
  and the shared machinery names no backend.
"""

import ast
import re
import sys

import pytest
import torch
from conftest import ROOT, make_input, module_of
from kit_imports import kit_modules, private_reaches, state_writes

import reference
import submission

TEXT = (ROOT / "submission.py").read_text()

TOY_BLOCK = '''

# =========================================================================== backend: toy

class ToyConfig(NamedTuple):
    """The toy backend's one parameter."""
    scale: int = 1  # 1: right; anything else: c times this (wrong)

    def problem(self) -> str:
        return "" if self.scale >= 1 else f"toy needs scale >= 1, got {self.scale}"

    def shape_problem(self, m: int, k: int) -> str:
        return ""

    @classmethod
    def of(cls, value):
        return value if isinstance(value, cls) else cls.parse(value) if isinstance(value, str) else cls(*value)

    @classmethod
    def parse(cls, text: str):
        return _parse_config(cls, text)


TOY_CALLS = []  # (how, config) of every toy run: "run" (the backend) or "fast" (its direct launch)


def _toy_run(data, m, k, l, cfg=None):
    cfg = config_for("toy", data, m, k, l) if cfg is None else cfg
    TOY_CALLS.append(("run", cfg))
    c = _torch_run(data, m, k, l)
    return c.mul_(cfg.scale) if cfg.scale != 1 else c


def _toy_fast(data, m, k, l):
    cfg = config_for("toy", data, m, k, l)

    def launch(a, b, sfa_p, sfb_p, c):
        TOY_CALLS.append(("fast", cfg))
        _torch_run((a, b, None, None, sfa_p, sfb_p, c), m, k, l)

    return 4, launch, False  # reads the permuted scales, takes the tensors


register(Backend("toy", lambda device: (True, ""), _toy_run, config=ToyConfig,
                 candidates=lambda m, k, l, capability: [ToyConfig()], measured={}, fast=_toy_fast))
'''


@pytest.fixture
def toy(monkeypatch):
    for var in ("NVFP4_GEMV_BACKEND", "NVFP4_GEMV_VERIFY", "NVFP4_GEMV_TUNE", "NVFP4_GEMV_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    return module_of(TEXT + TOY_BLOCK, "_toy_submission")


def _exact(data):
    return reference.ref_kernel(data[:6] + (data[6].clone(),))


def test_a_toy_backend_is_listed_and_selectable(toy, monkeypatch):
    assert list(toy.BACKENDS)[-1] == "toy" and toy.backend_support(torch.device("cpu"))["toy"] == (True, "")
    with pytest.raises(ValueError, match="choose one of auto, cuda, triton, scaled_mm, torch, toy"):
        monkeypatch.setenv("NVFP4_GEMV_BACKEND", "toys")
        toy.select_backend(torch.device("cpu"))
    monkeypatch.setenv("NVFP4_GEMV_BACKEND", "toy")
    assert toy.select_backend(torch.device("cpu")) == "toy"
    data = make_input(128, 256, 2, 1, "cpu")
    assert torch.equal(toy.custom_kernel(data), _exact(data))
    assert toy.TOY_CALLS == [("run", toy.ToyConfig())]
    monkeypatch.setenv("NVFP4_GEMV_CONFIG", "toy=scale=3")  # its config, by name, through the shared parser
    assert toy.config_for("toy", data, 128, 256, 2) == toy.ToyConfig(scale=3)
    monkeypatch.setenv("NVFP4_GEMV_CONFIG", "toy=scale=0")
    with pytest.raises(ValueError, match="toy needs scale >= 1"):
        toy.select_backend(torch.device("cpu"))


def test_a_toy_backend_is_served_by_the_fast_path(toy, monkeypatch):
    """After the first call with a layout, later calls go to the toy's direct launch: no checks,
    no dispatch (the first-call path would fail the test)."""
    monkeypatch.setenv("NVFP4_GEMV_BACKEND", "toy")
    data = make_input(128, 256, 2, 2, "cpu")
    toy.custom_kernel(data)
    monkeypatch.setattr(toy, "_first_call_path", lambda d: pytest.fail("the fast path was not taken"))
    again = make_input(128, 256, 2, 3, "cpu")
    out = toy.custom_kernel(again)
    assert out is again[6] and torch.equal(out, _exact(again))
    assert [how for how, _ in toy.TOY_CALLS] == ["run", "fast"]


def test_a_toy_backend_is_raced_and_verified_on_first_use(toy, monkeypatch, capsys):
    """auto on a (stub) GPU: the toy is warmed, checked against the exact answer and raced with
    the others that run here; the fastest wins. A wrong toy (its config scales c) is dropped with
    one line on stderr, even when it would be the fastest."""
    monkeypatch.setattr(toy, "select_backend", lambda device: "fastest")
    monkeypatch.setattr(toy, "_gpu_model", lambda device: "stub GPU")
    raced = []

    def race(names, data, m, k, l):
        raced.append(list(names))
        return {n: (0.0 if n == "toy" else 1.0) for n in names}

    monkeypatch.setattr(toy, "_race", race)
    for name in ("cuda", "triton", "scaled_mm"):  # only the toy runs here, and the exact torch backend
        monkeypatch.setitem(toy.BACKENDS, name, toy.BACKENDS[name]._replace(supported=lambda d: (False, "no")))
    data = make_input(128, 256, 1, 4, "cpu", "full-range")
    assert torch.equal(toy.custom_kernel(data), _exact(data))
    assert list(toy._FASTEST.values()) == ["toy"] and raced == []  # the only candidate: no race needed
    monkeypatch.setitem(toy.BACKENDS, "triton", toy.BACKENDS["triton"]._replace(
        supported=lambda d: (True, ""), run=lambda data, m, k, l, cfg=None: toy._torch_run(data, m, k, l)))
    monkeypatch.setattr(toy, "_FASTEST", {})
    monkeypatch.setattr(toy, "_FAST", {})
    data = make_input(128, 256, 2, 5, "cpu", "full-range")
    toy.custom_kernel(data)
    assert raced == [["triton", "toy"]] and list(toy._FASTEST.values()) == ["toy"]
    monkeypatch.setattr(toy, "_FASTEST", {})
    monkeypatch.setattr(toy, "_FAST", {})
    monkeypatch.setenv("NVFP4_GEMV_CONFIG", "toy=2")
    data = make_input(128, 512, 2, 6, "cpu", "full-range")
    out = toy.custom_kernel(data)
    assert torch.equal(out, _exact(data)) and list(toy._FASTEST.values()) == ["triton"]
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "wrong result" in ln]
    assert len(lines) == 1 and "the toy backend (config ToyConfig(scale=2))" in lines[0], lines


def test_a_new_cuda_tuning_parameter_takes_the_config_type_and_the_kernel_template(tmp_path):
    """A field ``toy`` added to CudaConfig's fields, a template parameter TOY of gemv_body in
    kernels/nvfp4_gemv.cu, and its argument where cuda_kernel instantiates the template (and
    names the kernel), then ``python3 eval.py bundle``: nothing else. A config then names it by
    field name or position; configs without it (every table entry, family and candidate) mean
    what they meant and their kernels keep their names; the kernel revision moves (the code the
    compiler sees changed)."""
    import bundle

    py_edits = [  # (what, old, new): the whole edit of submission.py
        ("the config type", "    ks: int = 1  # K split",
         "    toy: int = 0  # a new tuning parameter\n    ks: int = 1  # K split"),
        ("the instantiation's arguments",
         "t[not probe], t[not cfg.bsh], cfg.ks, cfg.kb, t[not cfg.bload], t[not cfg.ki]]",
         "t[not probe], t[not cfg.bsh], cfg.ks, cfg.kb, t[not cfg.bload], t[not cfg.ki], cfg.toy]"),
        ("the instantiation's name", '+ ["gs"] * (cfg.gs > 0)',
         '+ ["gs"] * (cfg.gs > 0) + [f"toy{cfg.toy}"] * (cfg.toy != 0)'),
    ]
    cu_edits = [  # (what, old, new): the whole edit of kernels/nvfp4_gemv.cu
        ("the kernel template", "bool PROBE, bool BSH, int KS, int KB, bool BLOAD, bool KINT>",
         "bool PROBE, bool BSH, int KS, int KB, bool BLOAD, bool KINT, int TOY = 0>"),
        ("the kernel template's use", "  constexpr int RS = 32 / LPR;", "  constexpr int RS = 32 / LPR + 0 * TOY;"),
    ]
    text, cu = TEXT, (ROOT / "kernels" / "nvfp4_gemv.cu").read_text()
    for what, old, new in py_edits:
        assert text.count(old) == 1, what
        text = text.replace(old, new)
    for what, old, new in cu_edits:
        assert cu.count(old) == 1, what
        cu = cu.replace(old, new)
    for path in (ROOT / "kernels").iterdir():  # the kit's sources, the kernel edited, then bundled
        (tmp_path / "kernels").mkdir(exist_ok=True)
        (tmp_path / "kernels" / path.name).write_text(cu if path.name == "nvfp4_gemv.cu" else path.read_text())
    text = bundle.bundled(text, tmp_path)
    assert bundle.first_difference(text, tmp_path) == ""
    mod = module_of(text, "_toy_field_submission")
    cfg = mod.CudaConfig.parse("lpr=8,rpt=2,u=4,warps=1,decode=dp4a-sr2,toy=3")
    assert cfg.toy == 3 and repr(cfg) == 'CudaConfig(lpr=8, rpt=2, u=4, warps=1, decode="dp4a-sr2", toy=3)'
    assert mod.CudaConfig.parse(repr(cfg)[len("CudaConfig("):-1].replace(" ", "").replace('"', "")) == cfg
    assert mod.CudaConfig.of([8, 2, 4, 1, 3]) == cfg._replace(toy=0)  # the positional form still loads
    name, source = mod.cuda_kernel(cfg, True, True)
    assert "_toy3_" in name and ", 3>(a, b," in source
    for old_cfg, full, plain in submission.cuda_compile_variants():  # every config the kit launches
        new_cfg = mod.CudaConfig(**old_cfg._asdict())
        assert new_cfg.toy == 0 and mod.cuda_kernel(new_cfg, full, plain)[0] == submission.cuda_kernel(
            old_cfg, full, plain)[0]
    for new_table, old_table in ((mod.CUDA_MEASURED, submission.CUDA_MEASURED),
                                 (mod._CUDA_RETIRED, submission._CUDA_RETIRED)):
        assert {k: [tuple(c) for c in t.values()] for k, t in new_table.items()} == {
            k: [c[:10] + (0,) + c[10:] for c in t.values()] for k, t in old_table.items()}
    assert mod.kernel_revision() != submission.kernel_revision()
    try:
        mod.find_nvrtc()
    except mod.CudaBuildError:
        return  # no NVRTC here: the compile is left to tests/test_cuda_backend.py's gate
    assert mod.cuda_compile(source, "sm_90a")[:4] == b"\x7fELF"


RULE = "# " + "=" * 75 + " "  # the line that opens a part of submission.py


def _shared_machinery(text: str) -> str:
    return text[text.index(RULE + "shared machinery"):]


def test_the_shared_machinery_names_no_backend():
    """Below the backend blocks, no string or name of a backend (a branch on one would be one)."""
    shared = _shared_machinery(TEXT)
    names = [n for n in submission.BACKENDS]
    tree = ast.parse(shared)
    device_types = {id(c) for node in ast.walk(tree) if isinstance(node, ast.Compare)  # device.type == "cuda"
                    and any(isinstance(x, ast.Attribute) and x.attr == "type" for x in (node.left, *node.comparators))
                    for c in (node.left, *node.comparators)}
    strings = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and id(node) not in device_types}
    assert not strings & set(names), strings & set(names)
    assert not re.search(r"\b_(cuda|triton|scaled_mm|torch)_\w+\(", shared)
    entry = TEXT[TEXT.index("def custom_kernel("):TEXT.index(RULE + "the backend record")]
    assert not any(f'"{n}"' in entry for n in names)


def test_the_tools_list_the_registrys_backends():
    from benchmarks import bench_options, compare
    assert [s.key for s in compare.STRATEGIES if s.backend is not None and s.key != "graph"] == [
        n for n, b in submission.BACKENDS.items() if b.races]
    # eval.py --backend takes any name: the submission's registry says which exist (select_backend)
    assert not re.search(r'add_argument\("--backend",[^)]*choices', (ROOT / "eval.py").read_text())
    help_text = next(a.help for a in bench_options.build_parser()._actions if "--backends" in a.option_strings)
    assert "registry" in help_text
    assert "torch" not in sys.modules["benchmarks.bench_options"].__dict__


# sass_dump.py reads the field defaults of positional configs from files written before configs had
# names: such a file has no public name for them.
OLD_FILE_REACHES = {("benchmarks/sass_dump.py", "submission", "_CUDA_SHAPE")}


def test_the_public_surface_is_listed_and_the_tools_keep_to_it():
    """Every name the module docstring lists as public exists; no kit module or tool (the top-level
    files and benchmarks/) reaches a leading-underscore name of another kit module or writes
    into another module's state, whatever it calls the module (``import submission as S``,
    ``from x import _z``, a module bound by a loader call: tests/kit_imports.py reads the syntax
    trees). The exception is the set above, with its reason."""
    surface = TEXT.split("Public surface", 1)[1].split('"""', 1)[0]
    listed = re.findall(r"``(\w+)``", surface)
    assert len(listed) >= 25 and all(hasattr(submission, name) for name in listed), listed
    reaches, writes = set(), set()
    for path in kit_modules().values():
        where = str(path.relative_to(ROOT))
        reaches |= {(where, module, name) for _, module, name in private_reaches(path)}
        writes |= {(where, module, name) for _, module, name in state_writes(path)}
    assert reaches - OLD_FILE_REACHES == set(), sorted(reaches - OLD_FILE_REACHES)
    assert writes == set(), sorted(writes)
