"""examples/minimal_torch.py, the smallest submission, and docs/contract.md, the contract on one page.

The example: the upload rules and headers, its imports, its length, eval.py's test mode through the
real harness as the server runs it (the path tests/test_starter.py takes), the exact reference on
full-range data, and that it writes ``c`` and returns it. The page: every input of task.py in
order, with shapes and dtypes that ``generate_input`` makes, the upload rules, headers, modes and
tolerance that eval.py and reference.py carry, the server revision of docs/server.md, and the
README's link to it.
"""

import ast
import re
import sys

import pytest
import torch
from conftest import OFFICIAL_TESTS, ROOT, assert_server_test_mode_passes, load_file, make_input

import harness
import reference
from utils import verbose_allclose

EXAMPLE = ROOT / "examples" / "minimal_torch.py"
PAGE = ROOT / "docs" / "contract.md"
TEXT = PAGE.read_text()


minimal = load_file(EXAMPLE, "minimal_torch")


# --------------------------------------------------------------------------- the example

def test_example_keeps_the_upload_rules_and_the_headers():
    raw = EXAMPLE.read_bytes()
    assert raw.decode().splitlines()[:2] == list(harness.REQUIRED_HEADERS)
    assert harness.static_problems(EXAMPLE) == []
    assert harness.header_warnings(EXAMPLE) == []


def test_example_imports_only_torch_the_stdlib_and_task():
    allowed = {"torch", "task"} | set(sys.stdlib_module_names)
    for node in ast.walk(ast.parse(EXAMPLE.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        for name in names:
            assert name.split(".")[0] in allowed, f"minimal_torch.py imports {name}"


def test_example_is_about_30_lines_and_the_page_says_how_many():
    lines = len(EXAMPLE.read_text().splitlines())
    assert lines <= 35
    assert f"({lines} lines)" in TEXT


@pytest.mark.parametrize("m, k, l, seed", [t for t in OFFICIAL_TESTS if t[0] * t[1] * t[2] <= 512 * 4096 * 2])
@pytest.mark.parametrize("dist", ["official", "full-range"])
def test_example_matches_the_exact_reference_and_returns_c(m, k, l, seed, dist):
    data = make_input(m, k, l, seed, device="cpu", dist=dist)
    expected = reference.ref_kernel(tuple(t.clone() for t in data))
    given = tuple(t.clone() for t in data)
    given[6].fill_(float("nan"))  # c poisoned: every element must be written
    out = minimal.custom_kernel(given)
    assert out is given[6], "the example writes c and returns it"
    assert verbose_allclose(out, expected, rtol=reference.RTOL, atol=reference.ATOL) == []
    for before, after in zip(data[:6], given[:6], strict=True):
        assert torch.equal(before.view(torch.uint8), after.view(torch.uint8)), "an input other than c changed"


def test_eval_test_mode_passes_the_example_as_the_server_runs_it(tmp_path):
    """The server's layout (its four files beside the example renamed submission.py), the official
    test cases, ``python eval.py test FILE`` with POPCORN_FD: every case passes."""
    assert_server_test_mode_passes(tmp_path, EXAMPLE)


# --------------------------------------------------------------------------- the page

def task_inputs() -> list[str]:
    """The input names in task.py's comment above ``input_t``: ``# (a, b, ..., c)``."""
    hit = re.search(r"^# \(([a-z_, ]+)\)\s*\ninput_t", (ROOT / "task.py").read_text(), re.M)
    assert hit, "task.py no longer names the inputs in a comment above input_t"
    return [name.strip() for name in hit[1].split(",")]


def page_table() -> list[list[str]]:
    """The rows of the page's input table: [name, shape, dtype, what]."""
    rows = []
    for line in TEXT.splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 4:
            rows.append(cells)
    return rows


def test_the_page_names_every_input_of_task_py_in_order():
    names = task_inputs()
    assert len(names) == 7
    assert "`(" + ", ".join(names) + ")`" in TEXT
    assert [row[0] for row in page_table()] == names


def test_the_page_gives_the_shapes_and_dtypes_generate_input_makes():
    m, k, l = 256, 128, 3
    data = reference.generate_input(m, k, l, 1, device="cpu")
    for (name, shape, dtype, _), tensor in zip(page_table(), data, strict=True):
        expr = shape.replace("M", str(m)).replace("K", str(k)).replace("L", str(l)).replace("/", "//")
        assert tuple(eval(expr)) == tuple(tensor.shape), name  # noqa: S307  (the page's own shape text)
        assert getattr(torch, dtype) == tensor.dtype, name


def test_the_page_states_the_rules_eval_py_and_reference_py_carry():
    assert f"`{harness.FORBIDDEN_WORD}`" in TEXT
    assert f"over {harness.MAX_SUBMISSION_BYTES:,} bytes" in TEXT
    for header in harness.REQUIRED_HEADERS:
        assert f"`{header}`" in TEXT
    assert reference.RTOL == reference.ATOL == 1e-3 and "rtol =\n  atol = 1e-3" in TEXT
    for mode in harness.MODES:
        assert f"- **{mode}**" in TEXT, f"the page does not describe mode {mode}"
    for name in harness.SERVER_FILES:
        assert f"`{name}`" in TEXT


def test_the_page_cites_the_server_revision_the_kit_mirrors():
    server = (ROOT / "docs" / "server.md").read_text()
    head = re.search(r"Read at the head ([0-9a-f]{40})", server)
    assert head and head[1] in TEXT


def test_readme_links_the_page():
    assert "(docs/contract.md)" in (ROOT / "README.md").read_text()
