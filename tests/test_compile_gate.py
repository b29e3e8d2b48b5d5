"""Blackwell compile gate: every Triton kernel of submission.py, in every variant the kit can
launch (configs, decodes, EVEN_G), compiles for cc 90 and cc 100 on this machine -- no GPU --
with the installed Triton and with the server's (benchmarks/compile_table.py; both compile at
once, each in its own process without TRITON_INTERPRET).

The server's Triton lives outside the project's environment (``compile_table.server_triton_dir()``;
`.ci/run` installs it with ``python3 benchmarks/compile_table.py --install-server-triton``).
Where it is missing, its test fails under CI (the ``CI`` environment variable set, as CI sets
it) and skips elsewhere, with the command that installs it.
"""

import os
import re
import textwrap

import pytest
from conftest import BENCHMARKS, ROOT

import submission
from benchmarks import compile_table as ct

_SERVER_VERSION = {}


def server_triton():
    """(folder, None) where the server's Triton is installed, else (None, why)."""
    if not _SERVER_VERSION:
        path = ct.server_triton_dir()
        _SERVER_VERSION["v"] = (path, ct.triton_version_at(path))
    path, version = _SERVER_VERSION["v"]
    if version == ct.SERVER_TRITON:
        return path, None
    found = "nothing" if version is None else f"triton {version}"
    return None, (f"the server's Triton {ct.SERVER_TRITON} is not installed at {path} (found {found} there); "
                  "install it with `python3 benchmarks/compile_table.py --install-server-triton`")


@pytest.fixture(scope="module")
def compiled():
    """{"installed": result, "server": result or None}, both compiled in parallel."""
    server, _ = server_triton()
    workers = {"installed": ct.Worker(None), "server": ct.Worker(server) if server else None}
    return {name: w.result() if w else None for name, w in workers.items()}


def assert_gate_passes(result):
    assert ct.failures(result) == []
    assert result["kernels"]
    for v in result["variants"]:
        rows = [r for r in result["rows"] if r["kernel"] == v["kernel"] and r["source"] == v["source"]
                and r["constexprs"].items() <= v["constexprs"].items()
                and (r["num_warps"], r["num_stages"]) == (v["num_warps"], v["num_stages"])]
        assert sorted(r["arch"] for r in rows) == sorted(ct.ARCHS), v
    for r in result["rows"]:
        assert r["regs"] > 0 and r["spill_stores"] is not None and r["shared"] is not None, r


def test_installed_triton_compiles_every_variant_for_hopper_and_blackwell(compiled):
    import triton
    result = compiled["installed"]
    assert result["triton"] == triton.__version__
    assert_gate_passes(result)


def test_server_triton_compiles_every_variant_for_hopper_and_blackwell(compiled):
    _, why = server_triton()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"{why} (under CI the gate needs it: .ci/run installs it before the tests)")
        pytest.skip(why)
    result = compiled["server"]
    assert result["triton"] == ct.SERVER_TRITON
    assert result["triton_file"].startswith(str(ct.server_triton_dir()))
    assert_gate_passes(result)


def test_variants_cover_what_the_kit_launches(compiled):
    """Every decode the kit ships (the timing probe aside), both EVEN_G values, and the config
    of every benchmark shape, for every kernel of submission.py."""
    variants = compiled["installed"]["variants"]
    consts = [v["constexprs"] for v in variants]
    shipped = {cfg.decode for m, k, l, _ in BENCHMARKS for cfg in submission.triton_configs(m, k, l)}
    assert ct.PROBE_DECODE not in shipped and shipped == {"tl", "f16x2", "dp4a"}
    assert {c["DECODE"] for c in consts} == shipped
    assert {c["EVEN_G"] for c in consts} == {True, False}
    launched = {(v["constexprs"]["BLOCK_M"], v["constexprs"]["BLOCK_G"], v["num_warps"], v["num_stages"])
                for v in variants}
    for m, k, l, _ in BENCHMARKS:
        for cfg in submission.triton_configs(m, k, l):
            assert (cfg.block_m, cfg.block_g, cfg.warps, cfg.stages) in launched, (m, k, l, cfg)
        for table in (t for t in submission.TRITON_MEASURED.values() if (m, k, l) in t):
            assert table[(m, k, l)] in submission.triton_configs(m, k, l) or \
                table[(m, k, l)]._replace(decode="dp4a") in submission.triton_configs(m, k, l)
    assert {v["constexprs"]["PLAIN"] for v in variants} == {True, False}
    assert set(compiled["installed"]["kernels"]) == {name for name in vars(submission) if name.endswith("_kernel")
                                                     and hasattr(getattr(submission, name), "arg_names")}


def test_server_triton_is_the_modal_images_pin():
    pins = re.findall(r'"triton==([0-9.]+)"', (ROOT / "modal_app.py").read_text())
    assert pins == [ct.SERVER_TRITON]


BROKEN = textwrap.dedent('''
    import triton
    import triton.language as tl


    @triton.jit
    def _ok_kernel(x_ptr, n, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) + 1, mask=i < n)


    @triton.jit
    def _bad_kernel(x_ptr, n, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        tl.store(x_ptr + i, tl.no_such_function(i))


    @triton.jit
    def _orphan_kernel(x_ptr):
        tl.store(x_ptr, 1.0)


    def triton_compile_variants():
        sig = {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
        return [{"kernel": name, "signature": sig, "constexprs": {"BLOCK": 64}, "attrs": {"x_ptr": "D"},
                 "num_warps": 2, "num_stages": 1} for name in ("_ok_kernel", "_bad_kernel")]
''')


def test_a_kernel_that_does_not_compile_fails_the_gate(tmp_path):
    """Through the triton_compile_variants() contract: the good kernel compiles for both archs,
    the broken one is reported per arch, a kernel without variants is reported."""
    path = tmp_path / "submission.py"
    path.write_text(BROKEN)
    result = ct.Worker(None, path).result()
    ok = [r for r in result["rows"] if r["kernel"] == "_ok_kernel"]
    assert [r["arch"] for r in ok] == list(ct.ARCHS) and all(r["error"] is None and r["regs"] > 0 for r in ok)
    problems = ct.failures(result)
    assert len(problems) == 1 + len(ct.ARCHS), problems
    assert "kernel _orphan_kernel has no compile variant" in problems
    for arch in ct.ARCHS:
        assert any(f"_bad_kernel cc {arch}" in p and "no_such_function" in p for p in problems), problems
    assert "_bad_kernel" in ct.markdown(result) and "ERROR" in ct.markdown(result)


# --------------------------------------------------------------------------- the command line

def test_cli_refuses_a_bad_submission_or_out_before_compiling(tmp_path, capsys):
    """A missing or broken --submission and an --out that cannot be written: one line, exit 2,
    before any compiling (they were raw tracebacks, the last after a minute of compiling)."""
    broken = tmp_path / "broken.py"
    broken.write_text("def custom_kernel(data):\n    return (\n")
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    for argv, words in ((["--submission", str(tmp_path / "missing.py")], "not found"),
                        (["--submission", str(broken)], "does not import: SyntaxError"),
                        (["--out", str(tmp_path)], "is a folder"),
                        (["--out", str(a_file / "table.md")], "is a file, not a folder")):
        assert ct.main(["--installed-only", *argv]) == 2, argv
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1, (argv, captured)
        assert captured.err.startswith("error: ") and words in captured.err, (argv, captured.err)


def test_cli_prints_a_summary_and_writes_the_table(compiled, tmp_path, monkeypatch, capsys):
    """A normal run prints a few summary lines (not the ~200-line table) and writes the table."""
    monkeypatch.setattr(ct, "gate", lambda sub, server: [compiled["installed"]])
    monkeypatch.setattr(ct, "load_submission", lambda path: submission)
    rows = [{"config": (32, 2, 1, 1, 2, 1, 2, 0, 1), "arch": arch, "regs": 40, "stack": 0, "shared": 0,
             "local": 0} for arch in ct.CUDA_ARCHS]
    monkeypatch.setattr(ct, "cuda_rows", lambda sub: rows)
    monkeypatch.setattr(submission, "nvrtc_version", lambda: (13, 0))
    out = tmp_path / "deep" / "table.md"
    assert ct.main(["--installed-only", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) <= 6, lines
    assert lines[0].startswith(f"Triton {compiled['installed']['triton']}: ") and "0 errors" in lines[0]
    assert lines[1] == "cuda backend: 2 compiles; registers 40-40; 0 with a stack (spilled registers)"
    assert lines[-1] == f"the table: {out}"
    table = out.read_text()
    assert table.count("\n| ") >= len(compiled["installed"]["rows"]) // len(ct.ARCHS)


def _section_rows(text: str, heading: str) -> list:
    """The table lines (``| ...``) of the section of ``text`` under ``heading``, up to the next heading."""
    lines = text.split(heading + "\n", 1)[1].split("\n## ", 1)[0].splitlines() if heading + "\n" in text else []
    return [line for line in lines if line.startswith("| ")]


def test_the_shipped_compile_table_is_current(compiled):
    """benchmarks/results/compile-table.md holds the rows a compile run gives now: for each Triton
    version compiled here the same variants with the same registers, spills and shared memory
    (what the gate just compiled), and in the cuda section one row per config and arch that
    the cuda backend can launch. If this fails, rerun ``python3 benchmarks/compile_table.py``."""
    shipped = ct.OUT_MD.read_text()
    recorded = re.findall(r"^## Triton (\S+)$", shipped, re.M)
    if os.environ.get("CI"):
        assert compiled["installed"]["triton"] in recorded, (compiled["installed"]["triton"], recorded)
    for result in (r for r in compiled.values() if r):
        if result["triton"] not in recorded:
            # The table records the Triton versions CI compiles with (the project's and the
            # server's); a machine with another one (the GPU machines' 3.6) has nothing to compare.
            continue
        rows = [line for line in ct.markdown(result).splitlines() if line.startswith("| ")]
        assert _section_rows(shipped, f"## Triton {result['triton']}") == rows, result["triton"]
    cuda = {line.split(" | ")[0][2:] + " | " + line.split(" | ")[1]
            for line in _section_rows(shipped, shipped[shipped.index("## CUDA backend"):].split("\n")[0])[1:]}
    want = {f"{cfg!r} | {arch}" for cfg, full, plain in submission.cuda_compile_variants() if full and plain
            for arch in ct.CUDA_ARCHS}
    assert cuda == want
