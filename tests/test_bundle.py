"""bundle.py: the kit's sources (kernels/) copied into the upload file, and the commands that
refuse a stale copy.

``python3 eval.py bundle --check`` passes on the repository (so CI, which runs this file, fails
on a submission.py whose copies differ from kernels/), fails in one line naming the file and the
line after an edit of a source, and ``python3 eval.py bundle`` makes it pass again; the kernel
revision ignores a comment edit of the .cu file and follows a code edit; the timing commands
refuse the kit's own submission.py while it is stale, and time a file given by another path as it
is. No GPU needed."""

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, module_of

import bundle
import eval as kit_eval
import submission

CU = "kernels/nvfp4_gemv.cu"
CODE_LINE = "  return (i64)(ch >> 1) * 512 + (ch & 1) * 2;"  # scale_col: a line of code of the kernel
COMMENT_LINE = "// Two e4m3 codes (bytes 0 and 1 of v) -> floats, exactly: e4m3 is a subset of fp16, and the"


@pytest.fixture
def kit(tmp_path):
    """A copy of submission.py and its sources (kernels/) to edit."""
    (tmp_path / "kernels").mkdir()
    for path in (ROOT / "kernels").iterdir():
        (tmp_path / "kernels" / path.name).write_text(path.read_text())
    (tmp_path / "submission.py").write_text((ROOT / "submission.py").read_text())
    return tmp_path


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))


def line_of(path: Path, line: str) -> int:
    return path.read_text().splitlines().index(line) + 1


def run(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "eval.py", "bundle", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def test_the_repositorys_submission_holds_its_sources():
    """What CI checks: every bundled copy in submission.py is its file, line for line."""
    proc = run("--check")
    assert proc.returncode == 0, proc.stderr
    assert "bundled copies match their files" in proc.stdout
    assert {b.path for b in bundle.blocks((ROOT / "submission.py").read_text())} == {
        CU, "kernels/tables.json", "kernels/same_sass.json"}
    assert submission.CUDA_SRC == (ROOT / CU).read_text()


def test_check_fails_after_a_source_edit_naming_the_line_and_bundle_mends_it(kit):
    cu = kit / CU
    at = line_of(cu, CODE_LINE)
    edit(cu, CODE_LINE, CODE_LINE.replace("512", "511"))
    proc = run("--check", "--submission", kit / "submission.py")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1, proc.stderr
    copy_at = (kit / "submission.py").read_text().splitlines().index(CODE_LINE) + 1
    assert f"{CU} line {at} differs from its copy in submission.py (line {copy_at})" in proc.stderr
    assert "python3 eval.py bundle" in proc.stderr
    proc = run("--submission", kit / "submission.py")
    assert proc.returncode == 0 and proc.stdout == f"submission.py: wrote its copies of {CU}\n", proc.stderr
    assert run("--check", "--submission", kit / "submission.py").returncode == 0
    assert run("--submission", kit / "submission.py").stdout.strip() == "submission.py: up to date"
    text = (kit / "submission.py").read_text()
    assert CODE_LINE.replace("512", "511") in text and CODE_LINE not in text
    assert kit_eval.static_problems(kit / "submission.py") == []  # still an upload the server takes


def test_check_names_a_source_longer_or_shorter_than_its_copy(kit):
    cu = kit / CU
    cu.write_text(cu.read_text() + "// one more line\n")
    assert bundle.check(kit / "submission.py").startswith(f"{CU} has more lines than its copy in submission.py")
    cu.write_text("".join(cu.read_text().splitlines(True)[:-2]))
    assert bundle.check(kit / "submission.py").startswith(f"{CU} has fewer lines than its copy in submission.py")


def test_a_comment_edit_keeps_the_kernel_revision_and_a_code_edit_moves_it(kit):
    cu = kit / CU
    edit(cu, COMMENT_LINE, COMMENT_LINE.replace("exactly", "exact"))
    edit(cu, "  const int bx = blockIdx.x;\n  gemv_body<",
         "  const int bx = blockIdx.x;  // the row group\n  gemv_body<")
    commented = bundle.bundled((kit / "submission.py").read_text(), kit)
    assert commented != (ROOT / "submission.py").read_text()
    assert module_of(commented, "_bundle_comment").kernel_revision() == submission.kernel_revision()
    edit(cu, CODE_LINE, CODE_LINE.replace("512", "511"))
    coded = bundle.bundled((kit / "submission.py").read_text(), kit)
    assert module_of(coded, "_bundle_code").kernel_revision() != submission.kernel_revision()


@pytest.mark.parametrize("content, said", [
    ('x = """\n', 'holds three double quotes'),
    ("int x;", "does not end with a newline"),
    ("// " + "STR" + "EAM here\n", "would refuse the upload file"),
], ids=["quotes", "no newline", "forbidden word"])
def test_a_source_that_cannot_be_copied_is_refused_saying_why(kit, content, said):
    (kit / CU).write_text(content)
    proc = run("--submission", kit / "submission.py")
    assert proc.returncode == 2 and said in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert (kit / "submission.py").read_text() == (ROOT / "submission.py").read_text()  # nothing written


@pytest.mark.parametrize("text, said", [
    ("x = 1\n", "no '# >>> bundle PATH' block"),
    ("# >>> bundle kernels/a.cu\nX = 1\n", 'starts with NAME = r"""'),
    ('# >>> bundle kernels/a.cu\nX = r"""\nint x;\n"""\n', "does not end with the lines"),
    ("# <<< bundle\n", "without a '# >>> bundle PATH' line"),
], ids=["none", "no assignment", "no end", "stray end"])
def test_malformed_blocks_are_one_line(text, said):
    with pytest.raises(bundle.BundleError, match=said.replace("(", r"\(").replace("*", r"\*")):
        bundle.bundled(text, ROOT)


def test_the_timing_commands_refuse_the_kits_stale_submission_and_time_other_files(kit, monkeypatch, capsys):
    """eval.py (human mode), eval.py ab, eval.py audit and bench_kernel.py stop in one line naming
    `python3 eval.py bundle` before timing the kit's own submission.py while it is stale (here
    the kit is the copy, its kernel edited); a file given by another path is not checked."""
    import ab
    import audit
    from benchmarks import bench_kernel

    monkeypatch.setattr(bundle, "SUBMISSION", kit / "submission.py")
    assert bundle.stale_problem(kit / "submission.py") == ""
    edit(kit / CU, CODE_LINE, CODE_LINE.replace("512", "511"))
    stale = kit / "submission.py"
    why = bundle.stale_problem(stale)
    assert why.startswith("the kit's submission.py is stale (") and "run `python3 eval.py bundle` first" in why
    other = kit / "renamed_submission.py"  # a name of no stdlib module
    other.write_text(stale.read_text())
    assert bundle.stale_problem(other) == "" and bundle.stale_problem(ROOT / "submission.py") == ""
    for call in (lambda: kit_eval.main([str(stale), "--shapes", "tests"]), lambda: ab.main([str(other), str(stale)]),
                 lambda: audit.main([str(stale)]), lambda: bench_kernel.main(["--submission", str(stale)])):
        with pytest.raises(SystemExit) as exc:
            call()
        err = capsys.readouterr().err
        assert exc.value.code == 2 and err.strip().splitlines()[-1] == f"error: {why}", err
