"""bundle.py: the kit's sources (kernels/) copied into the upload file, the hash each block's marker
records of what bundle wrote, and what the tools do with a submission.py whose copies differ.

``python3 eval.py bundle --check`` passes on the repository (so CI, which runs this file, fails
on a submission.py whose copies differ from kernels/ or whose markers lack their hashes), fails in
one line naming the file, the line and the side that changed, and ``python3 eval.py bundle``
mends a source edit; bundle never overwrites a block edited in submission.py (README's loop:
``--write-back`` moves the edit into its file, ``--force`` drops it); the file runs its own copy
and the kernel revision hashes that copy; eval.py, eval.py ab and eval.py audit run the kit's
file as it is after one warning line, and eval.py's record names its kernel revision and bundle
state; the tools that write records refuse it. No GPU needed."""

import hashlib
import json
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
TINY = ROOT / "tests" / "fixtures" / "tiny.txt"


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


def edit_block(sub: Path, old: str, new: str) -> None:
    """Replace ``old`` by ``new`` in the copy of the kernel in ``sub`` (the line is in that block only)."""
    lines = sub.read_text().splitlines(True)
    (block,) = [b for b in bundle.blocks("".join(lines)) if b.path == CU]
    at = [i for i in range(block.first, block.end) if old in lines[i]]
    assert len(at) == 1, old
    lines[at[0]] = lines[at[0]].replace(old, new)
    sub.write_text("".join(lines))


def line_of(path: Path, line: str) -> int:
    return path.read_text().splitlines().index(line) + 1


def marker_hash(sub: Path, path: str = CU) -> str | None:
    return next(b.recorded for b in bundle.blocks(sub.read_text()) if b.path == path)


def sha16(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def run(*args, cwd=ROOT):
    """``python3 eval.py bundle ARGS --no-compile``: the copies, hashes and refusals are this file's; whether
    bundle compiles what it copies, tests/test_cuda_check.py's (a compile of an edited kernel's every launch
    is seconds of CPU)."""
    return subprocess.run([sys.executable, "eval.py", "bundle", *map(str, args), "--no-compile"], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_the_repositorys_submission_holds_its_sources():
    """What CI checks: every bundled copy in submission.py is its file, line for line, and its
    marker records the hash of that copy (the first 16 hex digits of the file's sha256)."""
    proc = run("--check")
    assert proc.returncode == 0, proc.stderr
    assert "bundled copies match their files" in proc.stdout
    found = bundle.blocks((ROOT / "submission.py").read_text())
    assert {b.path for b in found} == {CU, "kernels/tables.json", "kernels/same_sass.json"}
    assert all(b.recorded == sha16(ROOT / b.path) for b in found), found
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
    assert f"{CU} changed since bundle wrote the copy" in proc.stderr
    assert f"run `python3 eval.py bundle --submission {kit / 'submission.py'}`" in proc.stderr
    proc = run("--submission", kit / "submission.py")
    assert proc.returncode == 0 and proc.stdout == f"submission.py: wrote its copies of {CU}\n", proc.stderr
    assert run("--check", "--submission", kit / "submission.py").returncode == 0
    assert run("--submission", kit / "submission.py").stdout.strip() == "submission.py: up to date"
    text = (kit / "submission.py").read_text()
    assert CODE_LINE.replace("512", "511") in text and CODE_LINE not in text
    assert marker_hash(kit / "submission.py") == sha16(cu)  # the marker records what bundle wrote
    assert kit_eval.static_problems(kit / "submission.py") == []  # still an upload the server takes


def test_check_names_a_source_longer_or_shorter_than_its_copy(kit):
    cu = kit / CU
    cu.write_text(cu.read_text() + "// one more line\n")
    assert bundle.check(kit / "submission.py").startswith(f"{CU} has more lines than its copy in submission.py")
    cu.write_text("".join(cu.read_text().splitlines(True)[:-2]))
    assert bundle.check(kit / "submission.py").startswith(f"{CU} has fewer lines than its copy in submission.py")


def test_readmes_loop_edit_the_source_and_bundle_an_edited_block_is_refused_then_written_back_or_dropped(kit):
    """README's loop in a copy of the kit: a kernel edit goes into the .cu, then bundle, and the
    check passes. An edit of the block itself is refused in one line naming the file, the side
    that changed and both ways on, and nothing is written; --write-back moves the edit into the
    .cu (the check then passes), and --force overwrites a block edit from the .cu."""
    sub, cu = kit / "submission.py", kit / CU
    edit(cu, CODE_LINE, CODE_LINE.replace("512", "511"))  # 1. the kernel edit, where README says it goes
    assert run("--submission", sub).returncode == 0
    assert run("--check", "--submission", sub).returncode == 0 and CODE_LINE.replace("512", "511") in sub.read_text()

    edit_block(sub, "* 2;", "* 2;  // my edit")  # 2. an edit of the copy in submission.py
    before, cu_before = sub.read_text(), cu.read_text()
    proc = run("--submission", sub)
    assert proc.returncode == 1 and proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
    command = f"python3 eval.py bundle --submission {sub}"
    assert proc.stderr.startswith("error: submission.py: nothing written: ")
    assert "the copy was edited in submission.py since bundle wrote it" in proc.stderr
    assert f"`{command} --write-back` copies the block into {CU}" in proc.stderr
    assert f"`{command} --force` overwrites it from {CU}" in proc.stderr
    assert sub.read_text() == before and cu.read_text() == cu_before  # nothing written
    proc = run("--check", "--submission", sub)
    assert proc.returncode == 1 and "the copy was edited in submission.py" in proc.stderr and "--write-back" in \
        proc.stderr

    proc = run("--write-back", "--submission", sub)  # 3. keep the edit: it moves into the .cu
    assert proc.returncode == 0 and proc.stdout.startswith(f"submission.py: wrote {CU} from its copy"), proc.stderr
    assert "* 2;  // my edit" in cu.read_text() and run("--check", "--submission", sub).returncode == 0
    assert marker_hash(sub) == sha16(cu)
    assert [ln for ln in sub.read_text().splitlines() if not ln.startswith("# >>> bundle")] == \
        [ln for ln in before.splitlines() if not ln.startswith("# >>> bundle")]  # only a marker changed

    edit_block(sub, "* 2;  // my edit", "* 2;  // another edit")  # 4. drop an edit: --force
    proc = run("--force", "--submission", sub)
    assert proc.returncode == 0 and proc.stdout == f"submission.py: wrote its copies of {CU}\n", proc.stderr
    assert "another edit" not in sub.read_text() and "* 2;  // my edit" in sub.read_text()
    assert run("--check", "--submission", sub).returncode == 0


def test_both_sides_edited_is_refused_and_write_back_then_needs_force(kit):
    sub, cu = kit / "submission.py", kit / CU
    edit_block(sub, CODE_LINE, CODE_LINE.replace("512", "510"))
    edit(cu, COMMENT_LINE, COMMENT_LINE.replace("exactly", "exact"))
    assert bundle.state(sub).state == bundle.BOTH_EDITED
    for args in ([], ["--write-back"]):
        proc = run(*args, "--submission", sub)
        assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
        assert f"both {CU} and the copy changed since bundle wrote it" in proc.stderr
        assert "--write-back --force` copies the block into" in proc.stderr and "--force` overwrites the block" in \
            proc.stderr
        # how to keep both: where the two texts are, and a diff of exactly the copy against the file
        (block,) = [b for b in bundle.blocks(sub.read_text()) if b.path == CU]
        span = f"{block.first + 1}-{block.end}"
        assert f"to keep both edits, merge them by hand into one side (the copy is submission.py lines {span}, " \
               f"the file {CU}; `diff <(sed -n '{span.replace('-', ',')}p' submission.py) {CU}` shows how they " \
               "differ)" in proc.stderr, proc.stderr
    shown = subprocess.run(["bash", "-c", f"diff <(sed -n '{block.first + 1},{block.end}p' submission.py) {CU}"],
                           cwd=kit, capture_output=True, text=True)
    assert proc.returncode == 1 and [ln for ln in shown.stdout.splitlines() if ln[:2] in ("< ", "> ")] == [
        f"< {COMMENT_LINE}", f"> {COMMENT_LINE.replace('exactly', 'exact')}",  # the file's edit, then the copy's
        f"< {CODE_LINE.replace('512', '510')}", f"> {CODE_LINE}"], shown.stdout
    proc = run("--write-back", "--force", "--submission", sub)
    assert proc.returncode == 0, proc.stderr
    assert CODE_LINE.replace("512", "510") in cu.read_text() and COMMENT_LINE in cu.read_text()
    assert run("--check", "--submission", sub).returncode == 0


def test_a_block_without_a_hash_is_rewritten_when_in_sync_and_refused_when_it_differs(kit):
    """No hash recorded (a file from before the hashes): in sync, bundle only records the hash;
    differing, which side changed is unknown and bundle refuses."""
    sub = kit / "submission.py"
    sub.write_text(sub.read_text().replace(f" sha256={marker_hash(sub)}", ""))
    assert marker_hash(sub) is None and bundle.state(sub).state == bundle.IN_SYNC
    proc = run("--check", "--submission", sub)
    assert proc.returncode == 1 and f"the marker of {CU} records no hash of its copy" in proc.stderr
    proc = run("--submission", sub)
    assert proc.returncode == 0 and proc.stdout == f"submission.py: recorded the hash of its copies of {CU}\n"
    assert marker_hash(sub) == sha16(kit / CU)
    sub.write_text(sub.read_text().replace(f" sha256={marker_hash(sub)}", ""))
    edit(kit / CU, CODE_LINE, CODE_LINE.replace("512", "511"))
    assert bundle.state(sub).state == bundle.UNKNOWN
    proc = run("--submission", sub)
    assert proc.returncode == 1 and "the marker records no hash, so which side changed is unknown" in proc.stderr
    assert "--write-back" in proc.stderr and "--force" in proc.stderr


def test_a_stale_hash_is_named_by_check_and_rewritten_by_bundle(kit):
    sub = kit / "submission.py"
    sub.write_text(sub.read_text().replace(f"sha256={marker_hash(sub)}", "sha256=0123456789abcdef"))
    assert bundle.state(sub).state == bundle.IN_SYNC  # the copy is the file: only the marker is off
    assert f"the marker of {CU} records a stale hash of its copy" in bundle.check(sub)
    assert run("--submission", sub).returncode == 0 and marker_hash(sub) == sha16(kit / CU)


def test_the_file_runs_its_own_copy_and_the_kernel_revision_hashes_it(kit):
    """submission.py reads nothing of kernels/: alone in a folder, an edit of its copy of the
    kernel is what it holds and what its kernel revision hashes."""
    sub = kit / "submission.py"
    edit_block(sub, CODE_LINE, CODE_LINE.replace("512", "511"))
    mod = module_of(sub.read_text(), "_bundle_own_copy")  # imported from a folder without kernels/
    assert not (Path(mod.__file__).parent / "kernels").exists()
    assert CODE_LINE.replace("512", "511") in mod.CUDA_SRC and mod.CUDA_SRC != submission.CUDA_SRC
    assert mod.kernel_revision() != submission.kernel_revision()


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


def test_a_block_the_server_would_refuse_is_not_written_back(kit):
    sub = kit / "submission.py"
    edit_block(sub, CODE_LINE, CODE_LINE + "  // " + "STR" + "EAM")
    proc = run("--write-back", "--submission", sub)
    assert proc.returncode == 2 and "cannot be written back" in proc.stderr and "would refuse" in proc.stderr
    assert (kit / CU).read_text() == (ROOT / CU).read_text()


@pytest.mark.parametrize("text, said", [
    ("x = 1\n", "no '# >>> bundle PATH' block"),
    ("# >>> bundle kernels/a.cu\nX = 1\n", 'starts with NAME = r"""'),
    ('# >>> bundle kernels/a.cu\nX = r"""\nint x;\n"""\n', "does not end with the lines"),
    ("# <<< bundle\n", "without a '# >>> bundle PATH' line"),
], ids=["none", "no assignment", "no end", "stray end"])
def test_malformed_blocks_are_one_line(text, said):
    with pytest.raises(bundle.BundleError, match=said.replace("(", r"\(").replace("*", r"\*")):
        bundle.bundled(text, ROOT)


def test_a_file_given_by_path_is_named_in_each_error(tmp_path):
    """--submission FILE: a file without blocks is named as FILE, a missing one in one line (no errno)."""
    other = tmp_path / "other.py"
    other.write_text("x = 1\n")
    for args in ([], ["--check"]):
        proc = run(*args, "--submission", other)
        assert proc.returncode in (1, 2) and proc.stderr == "error: other.py has no '# >>> bundle PATH' block\n"
    for args in ([], ["--check"]):
        proc = run(*args, "--submission", "nonexistent.py")
        assert proc.returncode == 2 and proc.stderr == "error: nonexistent.py: no such file\n", proc.stderr
    proc = run("--check", "--force")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--check writes nothing" in proc.stderr


# --------------------------------------------------------------------------- the tools


@pytest.fixture
def edited_kit(kit, monkeypatch):
    """The copy of the kit as the kit (``bundle.SUBMISSION``), its kernel's copy edited in submission.py."""
    monkeypatch.setattr(bundle, "SUBMISSION", kit / "submission.py")
    assert bundle.kit_state(kit / "submission.py") == (bundle.IN_SYNC, "")
    edit_block(kit / "submission.py", CODE_LINE, CODE_LINE.replace("512", "511"))
    return kit / "submission.py"


def test_states_of_the_kits_file_and_of_other_files(edited_kit):
    found = bundle.kit_state(edited_kit)
    assert found.state == bundle.BLOCK_EDITED and "the copy was edited in submission.py" in found.why
    assert "python3 eval.py bundle --write-back" in found.why  # the kit's own file: no --submission
    other = edited_kit.parent / "renamed_submission.py"  # a name of no stdlib module
    other.write_text(edited_kit.read_text())
    assert bundle.kit_state(other) == (bundle.NOT_KIT, "")  # another path is not compared with kernels/
    assert bundle.state(other).state == bundle.BLOCK_EDITED  # though it carries the hashes too


def test_eval_runs_the_kits_file_as_it_is_after_one_warning_and_records_its_kernel(edited_kit, tmp_path, capsys,
                                                                                   monkeypatch):
    """eval.py test mode on the kit's submission.py with its kernel's copy edited: one warning line
    naming the side that changed, the file tested as it is (its own kernel revision in the table's
    first line and the record), and ``bundle`` says which side changed. (The header's compile line
    is left out here: tests/test_cuda_check.py.)"""
    import cuda_check
    monkeypatch.setattr(cuda_check, "header_check", lambda path: None)
    out = tmp_path / "out.json"
    assert kit_eval.main([str(edited_kit), "--shapes", str(TINY), "--json", str(out)]) == 0
    captured = capsys.readouterr()
    warned = [ln for ln in captured.err.splitlines() if ln.startswith("warning:")]
    assert len(warned) == 1 and "the copy was edited in submission.py" in warned[0], captured.err
    assert "--write-back" in warned[0] and "--force" in warned[0]
    record = json.loads(out.read_text())
    revision = module_of(edited_kit.read_text(), "_bundle_edited").kernel_revision()
    assert record["kernel_revision"] == revision != submission.kernel_revision()
    assert record["bundle"] == "block edited" and record["passed"] is True
    assert captured.out.splitlines()[0].endswith(f", kernel {revision}, bundle: block edited")
    assert captured.out.rstrip().splitlines()[-1] == "test: PASS"


def test_ab_and_audit_warn_and_run_the_file_as_it_is(edited_kit, monkeypatch, capsys):
    import ab
    import audit

    seen = {}

    def run_stand_in(args, cases, states=None):  # what ab would time, and the files' states it would record
        seen["states"] = states
        return 0

    monkeypatch.setattr(ab, "_run", run_stand_in)
    monkeypatch.setattr(audit, "audit", lambda path, report: [])  # the checks themselves: tests/test_audit.py
    other = edited_kit.parent / "renamed_submission.py"
    other.write_text(edited_kit.read_text())
    assert ab.main([str(other), str(edited_kit)]) == 0
    assert seen["states"] == [bundle.NOT_KIT, bundle.BLOCK_EDITED]
    ab_err = capsys.readouterr().err
    assert audit.main([str(edited_kit)]) == 0
    for err in (ab_err, capsys.readouterr().err):
        warned = [ln for ln in err.splitlines() if ln.startswith("warning:")]
        assert len(warned) == 1 and "the copy was edited in submission.py" in warned[0], err


def test_ab_names_each_files_kernel_and_bundle_state():
    import ab

    record = {"gpu": {"name": "G", "capability": "9.0"}, "settings": {}, "rounds": [], "files": [
        {"label": "BASE", "path": "a.py", "sha256": "0" * 64, "kernel_revision": "385b667cc3d1", "bundle": "in sync",
         "passed": True}]}
    assert "kernel 385b667cc3d1  bundle: in sync  PASS" in ab.format_report(record)


def test_the_tools_that_write_records_refuse_the_kits_file_out_of_sync(edited_kit, tmp_path, monkeypatch, capsys):
    """bench_kernel.py, bench_configs.py and ab_calibration.py stop in one line naming the side
    that changed before any work (apply_table.py: tests/test_apply_table.py; .ci/gpu-run:
    tests/test_parts.py)."""
    from benchmarks import ab_calibration, bench_configs, bench_kernel

    monkeypatch.setattr(bench_kernel, "submission", bench_kernel.submission)  # restored after the test
    grid, out = tmp_path / "grid.json", tmp_path / "calibration"
    grid.write_text(json.dumps({"128x256x1": {"a": {"lpr": 8, "rpt": 2, "u": 4, "warps": 1}}}))
    for name, call in (("benchmarks/bench_kernel.py", lambda: bench_kernel.main(["--submission", str(edited_kit)])),
                       ("benchmarks/bench_configs.py", lambda: bench_configs.main(["--grid", str(grid)])),
                       ("benchmarks/ab_calibration.py",
                        lambda: ab_calibration.main(["--out", str(out), "--submission", str(edited_kit)]))):
        with pytest.raises(SystemExit) as exc:
            call()
        err = capsys.readouterr().err
        assert exc.value.code == 2 and err.count("\n") == 1, err
        assert err.startswith(f"error: {name} writes records of the kit's submission.py only while its copies "
                              "match their sources") and "the copy was edited in submission.py" in err
    assert not out.exists()
