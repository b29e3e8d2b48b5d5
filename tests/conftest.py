"""Shared test setup.

On a machine without CUDA, Triton kernels run in Triton's interpreter: the variable must be
set before any ``@triton.jit`` function is created, hence here, before tests import modules.
"""

import json
import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The official shapes as (m, k, l, seed) tuples, from the kit's single source.
_SHAPES = json.loads((ROOT / "shapes.json").read_text())
OFFICIAL_TESTS = [(t["m"], t["k"], t["l"], t["seed"]) for t in _SHAPES["tests"]]
BENCHMARKS = [(t["m"], t["k"], t["l"], t["seed"]) for t in _SHAPES["benchmarks"]]

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

requires_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")


def progress(config: pytest.Config, message: str) -> None:
    """A line on the terminal now, past pytest's output capture, for a step that takes longer
    than ~10 s (a module fixture running many subprocesses) -- only with ``-s`` (capture off),
    so that the progress dots of a plain run stay on one line."""
    if config.getoption("capture") != "no":
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None:
        return
    if capture is None:
        reporter.write_line(message)
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(message)


def make_input(m: int, k: int, l: int, seed: int, device=None, dist: str = "official"):
    """The inputs of one case: ``reference.generate_input`` (official values; device None: CUDA
    when available), then ``quant.fill`` with ``dist`` (a key of ``quant.DISTRIBUTIONS``)."""
    import quant
    import reference
    return quant.fill(reference.generate_input(m, k, l, seed, device=device), dist)


def replace_inputs(data, **new):
    """``data`` (a, b, sfa, sfb, sfa_p, sfb_p, c) with the tensors named in ``new`` replaced: the
    bad-input tests' one way of building a broken input tuple."""
    names = ("a", "b", "sfa", "sfb", "sfa_p", "sfb_p", "c")
    return tuple(new.get(n, t) for n, t in zip(names, data, strict=True))


# The kit's own top-level modules: a test that loads one of them anew (compile_table.load_submission
# and bench_kernel.py install a fresh ``submission`` module, as their command lines need) must not
# hand the next test another module object than the one its file imported.
KIT_MODULES = ("submission", "eval", "audit", "reference", "utils", "task", "quant", "nvfp4")


@pytest.fixture(autouse=True)
def _kit_modules_as_found():
    """Each test leaves sys.modules' entries of the kit's modules as it found them (the
    suite's result then does not depend on the order of its tests)."""
    before = {name: sys.modules.get(name) for name in KIT_MODULES}
    yield
    for name, module in before.items():
        if module is not None and sys.modules.get(name) is not module:
            sys.modules[name] = module


@pytest.fixture
def device() -> torch.device:
    return torch.device("cuda" if HAS_CUDA else "cpu")


def set_backend(monkeypatch, sub, name: str, **fields) -> None:
    """For one test, backend ``name`` of ``sub``'s registry with ``fields`` of its record replaced
    (e.g. ``run=stub``, ``supported=lambda device: (True, "")``)."""
    monkeypatch.setitem(sub.BACKENDS, name, sub.BACKENDS[name]._replace(**fields))


def kernel_backends(sub) -> list:
    """The backends of ``sub``'s registry that auto races on a GPU, in their order."""
    return [name for name, b in sub.BACKENDS.items() if b.races]
