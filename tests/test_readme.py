"""The docs' commands work as printed: every command line of the ```bash blocks of README.md
and of the pages it sends detail to (``DOCS``) is run from the root of a fresh copy of the
repository (no GPU needed for the suite), so the docs cannot drift from the kit.

* A command that needs a CUDA GPU ends in the comment ``# needs CUDA``. Without CUDA it must
  refuse cleanly: exit 2, one line on stderr saying it needs a CUDA GPU, nothing on stdout.
  On a CUDA machine these are not run here (``.ci/gpu-run`` runs the GPU commands there).
* Every other command must exit 0.
* A few commands are not run at all, each for the reason in ``NOT_RUN``.
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import HAS_CUDA, ROOT

import cute_check
import harness

README = ROOT / "README.md"
# Every page whose ```bash blocks are run here, README first; commands run from the repository root.
DOCS = ["README.md", "docs/setup.md", "docs/submission.md", "docs/eval.md", "docs/modal.md", "docs/cute.md",
        "docs/server.md", "docs/contract.md", "benchmarks/README.md"]
CUDA_MARK = "# needs CUDA"
NOT_RUN = {  # command prefix -> why this test does not run it
    "python3 -m pip install": "installs packages (network; the suite already runs in an installed environment)",
    "python3 -m pytest": "the test suite itself, this test included (CI runs it)",
    "modal ": "talks to Modal's cloud (network and a Modal token)",
    "popcorn-cli ": "submits to the competition server, or with --local to Modal's cloud (network and an account)",
}
TIMEOUT_S = 300
# Outside a git checkout (an unpacked archive): what the copy leaves out, the folders .gitignore names.
COPY_IGNORE = shutil.ignore_patterns(".git", "__pycache__", ".pytest_cache", ".ruff_cache", "*.egg-info", "build",
                                     ".venv", "venv")
CUDA_WORDS = re.compile(r"needs? a CUDA GPU")
# Commands on the CuTe DSL example need the DSL (the `cute` extra; CI installs it, the GPU machines lack it).
CUTE_EXAMPLE = "examples/cute_gemv.py"


def readme_commands(text: str) -> list[tuple[int, str, str]]:
    """(line number, command, trailing comment) of every command line in the ```bash blocks;
    blank lines and comment lines are not commands."""
    out, in_bash = [], False
    for number, line in enumerate(text.splitlines(), 1):
        fence = line.strip()
        if fence.startswith("```"):
            in_bash = not in_bash and fence == "```bash"
            continue
        if not in_bash or not fence or fence.startswith("#"):
            continue
        hit = re.search(r"\s(#.*)$", line)
        command, comment = (line[:hit.start()], hit.group(1)) if hit else (line, "")
        out.append((number, command.strip(), comment.strip()))
    return out


README_COMMANDS = readme_commands(README.read_text())
# (page, line number, command, trailing comment) of every page of DOCS.
COMMANDS = [(doc, number, command, comment) for doc in DOCS
            for number, command, comment in readme_commands((ROOT / doc).read_text())]


def not_run_reason(command: str) -> str:
    return next((why for prefix, why in NOT_RUN.items() if command.startswith(prefix)), "")


def repo_files(root: Path) -> list[str] | None:
    """The files a fresh clone of ``root`` would have: what git tracks, plus new files git does
    not ignore (relative paths, existing ones only); None when ``root`` is not a git checkout.
    A virtual environment, caches and results git ignores are never copied."""
    try:
        proc = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                              cwd=root, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    return sorted({name for name in proc.stdout.split("\0") if name and (root / name).is_file()})


def copy_repo(root: Path, dest: Path) -> Path:
    """``root`` as a fresh clone has it, at ``dest`` (``repo_files``; outside git, everything but
    ``COPY_IGNORE``)."""
    names = repo_files(root)
    if names is None:
        shutil.copytree(root, dest, ignore=COPY_IGNORE)
        return dest
    for name in names:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, dest / name)
    return dest


RAN = []  # docs' commands run so far (test_readme_writes_only_what_git_ignores checks their output)


@pytest.fixture(scope="module")
def repo_copy(tmp_path_factory):
    """The repository as a fresh clone has it, so commands that write files (out.json,
    log.txt) leave the tree alone."""
    dest = copy_repo(ROOT, tmp_path_factory.mktemp("readme") / "repo")
    return dest, set(repo_files(dest) or []) or {str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()}


def test_readme_has_the_commands_this_test_expects():
    """The parser finds the blocks: the CPU commands, the marked GPU ones and the skipped ones
    (README's own, and every page's: a NOT_RUN entry no page uses is stale)."""
    commands = [c for _, c, _ in README_COMMANDS]
    assert "python3 eval.py" in commands
    assert sum(CUDA_MARK in comment for _, _, comment in README_COMMANDS) >= 4
    every = [c for _, _, c, _ in COMMANDS]
    assert all(any(c.startswith(prefix) for c in every) for prefix in NOT_RUN), "a NOT_RUN entry is stale"
    assert all(any(d == doc for d, *_ in COMMANDS) for doc in ("README.md", "docs/eval.md", "benchmarks/README.md"))


def test_docs_lists_every_page_of_docs():
    """A page added under docs/ has its commands run too."""
    on_disk = {str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")}
    assert on_disk <= set(DOCS), sorted(on_disk - set(DOCS))
    assert all((ROOT / doc).is_file() for doc in DOCS)


def test_readme_puts_the_cpu_install_first():
    """A CPU user reading top to bottom installs the CPU build of torch before the project
    (the other way round, pip pulls a CUDA build of torch and its nvidia wheels)."""
    commands = [c for _, c, _ in README_COMMANDS]
    cpu_torch = next(i for i, c in enumerate(commands) if "download.pytorch.org/whl/cpu" in c)
    project = next(i for i, c in enumerate(commands) if c.startswith("python3 -m pip install -e"))
    assert cpu_torch < project


# Words of the place the kit was built, not of the kit (spelled in two pieces so that this
# file does not match itself).
FOREIGN_WORDS = re.compile("(?i:device " + "tool|nvidia-h100" + "-x1|files" + "_at)|\\$" + "OUT\\b")
OWN_TEXT = ("*.py", "*.md", "*.json", "*.toml", ".ci/*")


def test_the_kit_speaks_of_itself_only():
    """Docs, code and scripts say what a user needs ("needs a CUDA GPU", "on a CUDA machine"),
    not the tools of the place the kit was built. Logs kept as results are quoted, not checked."""
    found = []
    for pattern in OWN_TEXT:
        for path in ROOT.glob(pattern) if pattern.startswith(".") else ROOT.rglob(pattern):
            rel = path.relative_to(ROOT)
            if any(part.startswith(".") and part != ".ci" for part in rel.parts) or "results" in rel.parts:
                continue
            text = path.read_text(errors="replace")
            found += [f"{rel}: {hit!r}" for hit in FOREIGN_WORDS.findall(text)]
    assert not found, found


# Words of how the kit was made -- its work items, working sessions, the search index its
# sources were read in -- which a reader of the kit cannot look up: shipped files name runs by
# date and git revision and sources by repository, path and commit instead.
BUILD_WORDS = re.compile(r"(?i)\bsessions?\b|\bissues? #?\d+(?![\d%]|\.\d)|\bissue's\b|\b[\w-]+-issue\b"
                         r"|-backend issue\b|\bthe (?:search )?index\b|\bindex used here\b"
                         r"|\bstored (?:files|versions?|revisions?)\b")


@pytest.mark.parametrize("text, found", [
    ("measured in the fourth session", True), ("Read in the index: x", True), ("as issue 5 specified", True),
    ("from issue 11, which", True), ("Against the issue's targets", True), ("the cuda-backend issue", True),
    ("(the inputs-issue measurement)", True), ("in stored files whose repository", True),
    ("of the next session", True), ("Sessions", True),
    ("issue 11.", True),
    ("the SMs issue ~2.6 instructions", False), ("issue active %", False), ("issues a load", False),
    ("it issues 46% more instructions", False), ("dp4a-sr issues 5.7% fewer", False),
    ("https://github.com/gpu-mode/popcorn-cli/issues/12", False), ("--index-url https://x", False),
    ("(index of the sfa tensor it reads)", False), ("split index major", False), ("PyTorch's cu130 index", False),
], ids=lambda v: v if isinstance(v, str) else None)
def test_build_words_pattern(text, found):
    assert bool(BUILD_WORDS.search(text)) == found


def shipped_text_files() -> list[str]:
    """What the kit ships, as a clone has it, outside tests/: its code, docs and scripts
    (logs kept as results quote other tools' output and are not checked)."""
    names = repo_files(ROOT)
    if names is None:
        names = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts]
    return [n for n in names if not n.startswith("tests/") and not n.endswith((".log", ".png"))]


def test_shipped_files_speak_of_runs_and_sources_not_of_how_the_kit_was_made():
    """No sessions, issue numbers or search index in README, the pages of DOCS,
    benchmarks/RESULTS.md, NOTES.md, submission.py (the file people submit), modal_app.py or any
    other shipped file."""
    found = []
    shipped = shipped_text_files()
    assert set(DOCS) <= set(shipped), sorted(set(DOCS) - set(shipped))
    for name in shipped:
        for number, line in enumerate((ROOT / name).read_text(errors="replace").splitlines(), 1):
            found += [f"{name}:{number}: {hit.group(0)!r}" for hit in BUILD_WORDS.finditer(line)]
    assert found == [], "\n".join(found)


def test_readme_benchmark_table_agrees_with_its_geomean():
    """The README's eval.py table: each row's SOL is shapes.json's, its % of SOL is SOL / mean,
    and the geomean stated under it is the geomean of the rows (they once disagreed)."""
    text = README.read_text()
    rows = re.findall(r"^\| (\d+) \| (\d+) \| (\d+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+)% \|$", text, re.M)
    sol = harness.sol_lookup()
    assert [(int(m), int(k), int(l)) for m, k, l, *_ in rows] == list(sol)
    for m, k, l, mean, s, pct in rows:
        assert float(s) == sol[(int(m), int(k), int(l))]
        assert f"{100 * float(s) / float(mean):.1f}" == pct
    stated = re.search(r"geomean of means: ([\d.]+) µs \(the leaderboard's score\)", text)
    assert stated and f"{harness.geomean(float(r[3]) for r in rows):.3f}" == stated.group(1)


def test_readme_names_the_servers_upload_rules():
    """The word the server rejects is spelled out in README (which is never submitted), with
    the size limit and the header lines eval.py checks."""
    text = " ".join(README.read_text().split())
    assert f"the word `{harness.FORBIDDEN_WORD}`" in text
    assert f"{harness.MAX_SUBMISSION_BYTES:,} bytes" in text
    assert all(f"`{header}`" in text for header in harness.REQUIRED_HEADERS)


def test_readme_flags_match_the_kit():
    """The choices README lists for eval.py are the kit's own."""
    text = " ".join(README.read_text().split())
    assert f"--shapes {'|'.join(harness.SHAPE_SETS)}|FILE" in text
    assert f"--distribution {'|'.join(harness.distributions())}" in text


@pytest.mark.parametrize("doc, number, command, comment", COMMANDS,
                         ids=[f"{d}:L{n}: {c}" for d, n, c, _ in COMMANDS])
def test_readme_command(repo_copy, doc, number, command, comment):
    repo_copy = repo_copy[0]
    why = not_run_reason(command)
    if why:
        pytest.skip(f"not run: {why}")
    if CUTE_EXAMPLE in command and not cute_check.dsl_installed():
        pytest.skip("needs nvidia-cutlass-dsl, not installed here: pip install -e '.[cute]'")
    needs_cuda = CUDA_MARK in comment
    if needs_cuda and HAS_CUDA:
        pytest.skip("needs CUDA: .ci/gpu-run runs the GPU commands on a CUDA machine")
    # A new user's shell: none of the test session's variables (TRITON_INTERPRET, POPCORN_*).
    env = {k: v for k, v in os.environ.items()
           if k not in ("TRITON_INTERPRET", "POPCORN_FD", "POPCORN_SEED") and not k.startswith("NVFP4_")}
    proc = subprocess.run(["bash", "-c", command], cwd=repo_copy, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    RAN.append(command)
    said = f"{doc} line {number}: {command}\nexit {proc.returncode}\nstdout:\n{proc.stdout[-2000:]}\n" \
           f"stderr:\n{proc.stderr[-3000:]}"
    if needs_cuda:
        assert proc.returncode == 2, said
        assert proc.stdout == "" and proc.stderr.count("\n") <= 1 and proc.stderr.strip(), said
        assert CUDA_WORDS.search(proc.stderr), said
    else:
        assert proc.returncode == 0, said + ("\n(a command that needs CUDA must end in '# needs CUDA')"
                                             if CUDA_WORDS.search(proc.stderr) else "")


def test_readme_writes_only_what_git_ignores(repo_copy):
    """Every file the docs' commands wrote in the copy (out.json, log.txt, ...) is one
    .gitignore covers, so running them in a clone leaves ``git status`` clean. Runs after the
    commands above (pytest keeps a module's order)."""
    if not RAN:
        pytest.skip("no docs command ran before this test (run the whole module)")
    if repo_files(ROOT) is None:
        pytest.skip("not a git checkout")
    dest, before = repo_copy
    written = sorted(str(p.relative_to(dest)) for p in dest.rglob("*")
                     if p.is_file() and str(p.relative_to(dest)) not in before
                     and "__pycache__" not in p.parts)
    proc = subprocess.run(["git", "check-ignore", "--no-index", "--stdin"], cwd=ROOT, input="\n".join(written),
                          capture_output=True, text=True)
    ignored = set(proc.stdout.split())
    assert [name for name in written if name not in ignored] == [], f"written by {RAN}"


@pytest.mark.parametrize("name", [".venv/bin/python", "venv/lib/x.py", "out.json", "log.txt"])
def test_gitignore_covers_what_users_make_in_the_clone(name):
    """A virtual environment inside the clone (the natural place) and the README's output files."""
    if repo_files(ROOT) is None:
        pytest.skip("not a git checkout")
    proc = subprocess.run(["git", "check-ignore", "--no-index", "-q", name], cwd=ROOT)
    assert proc.returncode == 0, f"{name} is not ignored by .gitignore"


def test_repo_copy_leaves_out_what_git_ignores(tmp_path):
    """A virtual environment inside the clone is not copied (it was 4.3 GB a run); tracked and
    new files are; outside git, the fallback leaves out the same folders."""
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / ".gitignore").write_text(".venv/\n")
    (src / "pkg" / "a.py").write_text("tracked\n")
    (src / "new.txt").write_text("untracked, not ignored\n")
    (src / ".venv" / "lib").mkdir(parents=True)
    (src / ".venv" / "lib" / "big.so").write_text("ignored\n")
    fallback = copy_repo(src, tmp_path / "fallback")
    assert (fallback / "pkg" / "a.py").exists() and not (fallback / ".venv").exists()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q"], cwd=src, check=True)
    subprocess.run([*git, "add", ".gitignore", "pkg/a.py"], cwd=src, check=True)
    subprocess.run([*git, "commit", "-qm", "x"], cwd=src, check=True)
    assert repo_files(src) == [".gitignore", "new.txt", "pkg/a.py"]
    dest = copy_repo(src, tmp_path / "dest")
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()) == \
        [".gitignore", "new.txt", "pkg/a.py"]


def test_installed_modules_import_only_installed_modules():
    """``pip install .`` (not editable) installs the py-modules of pyproject.toml: every kit
    module those import (reference imports nvfp4, ...) must be among them, or the installed
    reference.py cannot import."""
    import ast
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11+")
    installed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["py-modules"]
    kit = {p.stem for p in ROOT.glob("*.py")}
    missing = {}
    for name in installed:
        tree = ast.parse((ROOT / f"{name}.py").read_text())
        imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        if imported & kit - set(installed):
            missing[name] = sorted(imported & kit - set(installed))
    assert missing == {}, f"imported but not installed: {missing}"


FIRST_SCREEN = 40  # lines: what a reader sees before scrolling


def test_readme_first_screen_says_what_how_what_not_and_where():
    """The first screen says what the kit is, how to start (install, eval.py, pytest), what it
    does not do (no B200 run, popcorn-cli and Modal installed apart, the closed leaderboard) and
    where the problem statement is."""
    head = " ".join("\n".join(README.read_text().splitlines()[:FIRST_SCREEN]).split())
    for needed in ("A kit for the GPU MODE `nvfp4_gemv` problem", "python3 -m pip install -e", "python3 eval.py",
                   "python3 -m pytest", "Nothing in it has run on a B200", "popcorn-cli and Modal are separate",
                   "closed on 2025-11-29", "problems/nvidia/nvfp4_gemv/task.yml"):
        assert needed in head, needed


def test_readme_first_screen_says_where_each_edit_goes():
    """"Start here", on the first screen, says where an edit goes: a kernel edit into the .cu, then
    compile (no GPU needed) and bundle; a new backend as a block of submission.py ending in
    register(...); from scratch, one of the two examples; and that eval.py checks submission.py, the
    file uploaded."""
    head = "\n".join(README.read_text().splitlines()[:FIRST_SCREEN])
    start = " ".join(head.split("## Start here", 1)[1].split("\n## ", 1)[0].split())
    for needed in ("a kernel edit: `kernels/nvfp4_gemv.cu`, then `python3 eval.py compile`",
                   "then `python3 eval.py bundle`",
                   "a new backend: a block of `submission.py` that ends in `register(...)`",
                   "`examples/minimal_torch.py` or `examples/starter_cuda.py`", "`submission.py`, the file uploaded",
                   "ends in `test: PASS`"):
        assert needed in start, needed


def test_readme_says_every_way_eval_py_ends():
    """Start here names each way `python3 eval.py` ends: its verdict (exit 0 or 112), one `error:
    ...; no case ran` line where no case can run (exit 112; eval.py's own lines:
    tests/test_eval_units.py, tests/test_eval_protocol.py) and the limit of a case (--timeout, at
    the harness's default); the flags list names --timeout too."""
    text = README.read_text()
    start = " ".join(text.split("## Start here", 1)[1].split("\n## ", 1)[0].split())
    for needed in ("ends in `test: PASS` or `test: FAIL` (exit 0 or 112)", "or in `error: ...; no case ran` (exit 112)",
                   "a syntax error, no `custom_kernel`, a file the server refuses",
                   f"`--timeout` bounds a case ({harness.CASE_TIMEOUT_S:g} s)"):
        assert needed in start, needed
    assert f"`--timeout SECONDS` (one case; default {harness.CASE_TIMEOUT_S:g})" in " ".join(text.split())


def test_the_files_table_and_the_messages_agree_on_bundles_flags(capsys):
    """The Files table's row for bundle.py, eval.py's help and bundle's own refusals name the same
    flags, each one bundle takes; README says that a comment-only kernel edit keeps the kernel
    revision (tests/test_bundle.py checks that it does)."""
    import bundle
    import eval as ev
    _help(bundle.main, ["--help"])
    takes = set(re.findall(r"--[a-z][a-z-]+", capsys.readouterr().out)) - {"--help"}
    (row,) = [line for line in README.read_text().splitlines() if line.startswith("| `bundle.py` |")]
    usage = "python3 eval.py bundle [--check | --write-back] [--force] [--no-compile]"
    assert "`" + usage.replace("|", "\\|") + "`" in row  # a pipe in a table cell is escaped
    _help(ev.main, ["--help"])
    assert usage in " ".join(capsys.readouterr().out.split())
    states = [bundle.BlockState(bundle.Block("kernels/nvfp4_gemv.cu", 10, 12, 20), state, [], [])
              for state in (bundle.SOURCE_EDITED, bundle.BLOCK_EDITED, bundle.BOTH_EDITED, bundle.UNKNOWN)]
    said = set(re.findall(r"--[a-z][a-z-]+", " ".join(bundle._ways(item, "submission.py", "") for item in states)))
    assert said == {"--write-back", "--force"} and said | {"--check", "--no-compile"} == set(re.findall(r"--[a-z][a-z-]+", usage))
    assert set(re.findall(r"--[a-z][a-z-]+", usage)) == takes - {"--submission"}
    text = " ".join(README.read_text().split())
    assert "An edit of the kernel's comments or layout only keeps its kernel revision" in text


def files_table() -> list[str]:
    """The first column of README's Files table (``### Files``), backticks removed."""
    section = README.read_text().split("### Files", 1)[1].split("\n## ", 1)[0]
    return [line.split("|")[1].strip().strip("`") for line in section.splitlines()
            if line.startswith("| `")]


def test_the_files_table_names_every_module_at_the_root():
    """Every Python file at the repository's root has its row (ab.py had none)."""
    rows = files_table()
    assert "ab.py" in rows
    assert sorted(p.name for p in ROOT.glob("*.py") if p.name not in rows) == []


# A command written with `python` rather than `python3`: `python eval.py`, `python -m x`, `python x.py`.
PLAIN_PYTHON = re.compile(r"(?<![\w.-])python (?:-m |-c |[\w./-]+\.py\b)")
# The one such command the docs quote: the server's own (kernelbot's run_eval.py runs `python`).
SERVERS_COMMAND = "runs `python eval.py MODE TESTFILE`"


def _help(main, argv) -> None:
    """``main(argv)`` with ``--help`` in argv: argparse prints the help and exits 0."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 0


def test_docs_and_help_texts_write_python3(capsys):
    """The docs' pages and the help texts of eval.py (its subcommands too) and the benchmark
    commands write every command with python3 (they once mixed python and python3); only the
    server's own command line, quoted as the server's, keeps `python`."""
    found = {}
    for doc in DOCS:
        text = re.sub(r"\s+", " ", (ROOT / doc).read_text()).replace(SERVERS_COMMAND, "")
        found[doc] = PLAIN_PYTHON.findall(text)
    import eval as ev
    from benchmarks import bench_kernel, compare, floor
    for sub in ("", "audit", "ab", "compile", "bundle", "profile"):
        _help(ev.main, [sub, "--help"] if sub else ["--help"])
        found[f"eval.py {sub} --help"] = PLAIN_PYTHON.findall(capsys.readouterr().out)
    _help(compare.parse_args, ["--help"])
    found["compare --help"] = PLAIN_PYTHON.findall(capsys.readouterr().out)
    for name, parser in (("bench_kernel", bench_kernel.build_parser()), ("floor", floor.build_parser())):
        found[f"{name} --help"] = PLAIN_PYTHON.findall(parser.format_help())
    assert {k: v for k, v in found.items() if v} == {}


def test_the_benchmark_commands_all_take_the_shape_sets():
    """benchmarks/README.md's first block has three commands and says "All three take
    --shapes tests|benchmarks|all and --help": each of them does."""
    from benchmarks import bench_kernel, compare, floor
    page = (ROOT / "benchmarks" / "README.md").read_text()
    assert "All three take `--shapes tests|benchmarks|all` and `--help`." in page
    block = page.split("```bash\n", 1)[1].split("```", 1)[0]
    assert [line.split()[1:3] for line in block.splitlines()] == [
        ["benchmarks/bench_kernel.py", "#"], ["-m", "benchmarks.compare"], ["benchmarks/floor.py", "--json"]]
    for parser in (bench_kernel.build_parser(), floor.build_parser()):
        assert "--shapes {tests,benchmarks,all}" in parser.format_help()
    for name in harness.SHAPE_SETS:
        assert compare.parse_args(["--shapes", name]).shapes == floor.build_parser().parse_args(
            ["--shapes", name]).shapes == name


TABLE_ROW_CHARS = 220  # README's tables are an overview (the cuda row was once 1,059 characters)


def test_readme_table_rows_are_short():
    """Detail lives in the pages of DOCS; README's table rows stay short (the backend table's
    cuda row included)."""
    long_rows = [line[:60] for line in README.read_text().splitlines()
                 if line.startswith("|") and len(line) > TABLE_ROW_CHARS]
    assert long_rows == []
    assert any(line.startswith("| `cuda` |") for line in README.read_text().splitlines())


def github_anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation but '-' and '_' dropped,
    spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_github_anchor():
    assert github_anchor("Time it on a B200: `modal_app.py`") == "time-it-on-a-b200-modal_apppy"
    assert github_anchor("Before you submit: `python3 eval.py audit`") == "before-you-submit-python3-evalpy-audit"


def test_docs_links_reach_their_files_and_headings():
    """Every relative link of the pages of DOCS names a file of the kit, and its #anchor a
    heading of that file."""
    broken = []
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)\s]+)\)", (ROOT / doc).read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = ((ROOT / doc).parent / path).resolve() if path else ROOT / doc
            if not dest.exists():
                broken.append(f"{doc}: {target}")
            elif anchor and dest.suffix == ".md":
                headings = {github_anchor(h) for h in re.findall(r"^#+ (.*)$", dest.read_text(), re.M)}
                if anchor not in headings:
                    broken.append(f"{doc}: {target}")
    assert broken == []
