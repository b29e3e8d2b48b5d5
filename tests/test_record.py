"""The measurement record and its citations: benchmarks/RESULTS.md (the current state),
benchmarks/NOTES.md (by topic) and benchmarks/history/ (one file per dated run).

One citation form, used by code comments, docs and the record itself:

    benchmarks/RESULTS.md, "Table entries"
    benchmarks/NOTES.md, "Loads" and "Pipelining"
    benchmarks/history/2026-11-25-h100-f0455a2.md
    benchmarks/history/2026-11-25-h100-fc2fcbc-21e5205.md, "eval.py ab calibration"

the file's path from the repository root, then a comma, a space and the heading's text in double
quotes as it stands after the #s (letter case and line breaks aside: a citation may wrap across
comment lines); more headings of the same file joined by "and" or commas; a history file alone
cites the whole run. In Markdown the path may be the text of a link to the file. The finder also
reads the forms older comments use (``RESULTS.md ("Table entries")``, ``[RESULTS.md](RESULTS.md),
"eval.py ab calibration"``, a path without ``benchmarks/``), so those are checked too; write new
ones in the form above.
"""

import re
from pathlib import Path

import pytest
from conftest import ROOT
from test_readme import repo_files

BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "RESULTS.md"
NOTES = BENCH / "NOTES.md"
HISTORY = BENCH / "history"
RESULTS_MAX_LINES = 300
# Text files whose comments or prose may cite the record (logs and data are not read).
SUFFIXES = (".py", ".md", ".cu", ".cuh", ".sh", ".toml", ".txt", ".yml", ".yaml")
# A run file's name: date, the GPUs it ran on, the kit revision (or first-last revisions).
_GPU = r"(?:h100|h200|b200)"
HISTORY_NAME = re.compile(rf"^(\d{{4}}-\d{{2}}-\d{{2}})-{_GPU}(?:-{_GPU})*-[0-9a-f]{{7}}(?:-[0-9a-f]{{7}})*\.md$")

_PATH = r"(?:benchmarks/)?(?:RESULTS|NOTES)\.md|(?:benchmarks/)?history/[\w.-]+\.md"
_QUOTED = r'"[^"]{1,300}"'
CITATION = re.compile(
    rf"(?<![\w/.-])(?P<path>{_PATH})`?(?:\]\([^)\s]*\))?"       # the path, maybe a link's text
    rf"(?P<tail>\s*[,(]?\s*{_QUOTED}(?:\s*(?:,|and)\s*{_QUOTED})*)?")
# Where a line of code or prose starts once its indentation and comment or list marker are gone.
_LINE_START = re.compile(r"^\s*(?:#+|//+|/?\*+|>|-)?\s*")


def norm(heading: str) -> str:
    return " ".join(heading.split()).casefold()


def headings(path: Path) -> list[str]:
    """The headings of a Markdown file (outside code fences), as written after the #s."""
    out, fence = [], False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and (hit := re.match(r"^#{1,6} (.+?)\s*#*\s*$", line)):
            out.append(hit.group(1))
    return out


def resolve(cited: str) -> Path:
    """The file a cited path names: from the root with ``benchmarks/``, else under benchmarks/."""
    return ROOT / cited if cited.startswith("benchmarks/") else BENCH / cited


def citations(text: str) -> list[tuple[int, str, list[str]]]:
    """(line, cited path, cited headings) of every citation of the record in ``text``. Lines are
    joined without their comment and list markers first, so a citation may wrap."""
    pieces, starts, at = [], [], 0
    for line in text.splitlines():
        piece = line[_LINE_START.match(line).end():]
        starts.append(at)
        pieces.append(piece)
        at += len(piece) + 1
    flat = " ".join(pieces)
    out = []
    for hit in CITATION.finditer(flat):
        line = sum(1 for s in starts if s <= hit.start())
        cited = [" ".join(q.split()) for q in re.findall(r'"([^"]+)"', hit.group("tail") or "")]
        out.append((line, hit.group("path"), cited))
    return out


def problems(name: str, text: str) -> list[str]:
    """What is wrong with the citations in ``text`` (of the file ``name``): a cited file that
    does not exist, or a cited heading that is not one of its headings."""
    found = []
    for line, cited, wanted in citations(text):
        path = resolve(cited)
        if not path.is_file():
            found.append(f"{name}:{line}: {cited}: no such file")
            continue
        have = {norm(h) for h in headings(path)}
        found += [f'{name}:{line}: {cited}, "{h}": no such heading' for h in wanted if norm(h) not in have]
    return found


def cited_files() -> list[str]:
    """The kit's text files, as a clone has them (this file aside: its examples are checked below)."""
    names = repo_files(ROOT)
    if names is None:
        names = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts]
    return [n for n in names if n.endswith(SUFFIXES) and n != "tests/test_record.py"]


@pytest.mark.parametrize("text, expected", [
    ('(benchmarks/NOTES.md, "Build").', [("benchmarks/NOTES.md", ["Build"])]),
    ('benchmarks/NOTES.md, "Loads" and "Pipelining"). A', [("benchmarks/NOTES.md", ["Loads", "Pipelining"])]),
    ('# Each entry names its record in benchmarks/RESULTS.md ("Table entries").',
     [("benchmarks/RESULTS.md", ["Table entries"])]),
    ('(benchmarks/RESULTS.md, "Small\n# shapes"), while', [("benchmarks/RESULTS.md", ["Small shapes"])]),
    ('the slower one (benchmarks/RESULTS.md,\n    # "eval.py ab calibration", item 5; 15 sets',
     [("benchmarks/RESULTS.md", ["eval.py ab calibration"])]),
    ('[RESULTS.md](RESULTS.md), "eval.py ab calibration"; `eval.py ab`',
     [("RESULTS.md", ["eval.py ab calibration"])]),
    ("in [RESULTS.md](RESULTS.md) (\"The leaders' sm_100a code beside the kit's\") and",
     [("RESULTS.md", ["The leaders' sm_100a code beside the kit's"])]),
    ('benchmarks/NOTES.md ("The server\'s protocol",\n   "Loads issued first") records',
     [("benchmarks/NOTES.md", ["The server's protocol", "Loads issued first"])]),
    ('lost the same way, RESULTS.md "revisions 774ec7c-6f87461"). Reverted.',
     [("RESULTS.md", ["revisions 774ec7c-6f87461"])]),
    ("// benchmarks/history/2026-11-25-h100-f0455a2.md.", [("benchmarks/history/2026-11-25-h100-f0455a2.md", [])]),
    ('[benchmarks/history/](history/README.md). What', [("history/README.md", [])]),
    ("the numbers in `benchmarks/RESULTS.md`); what was tried", [("benchmarks/RESULTS.md", [])]),
    ("--md OUT/RESULTS.md --json out.json, results/ab-calibration-h100.md", []),
])
def test_the_finder_reads_each_citation_style(text, expected):
    assert [(path, cited) for _, path, cited in citations(text)] == expected


def test_the_docstring_examples_and_a_missing_heading():
    """The examples of the canonical form above resolve; a heading or file that is not there
    is reported with the file and line of its citation."""
    assert problems("doc", __doc__) == []
    bad = 'x\nbenchmarks/RESULTS.md, "No such heading"\nbenchmarks/history/1999-01-01-h100-0000000.md'
    assert problems("f.py", bad) == ['f.py:2: benchmarks/RESULTS.md, "No such heading": no such heading',
                                     "f.py:3: benchmarks/history/1999-01-01-h100-0000000.md: no such file"]


def test_every_cited_heading_exists():
    """Every citation of RESULTS.md, NOTES.md or a history file in the kit's code, docs and
    record names a file that exists and headings that file has."""
    found = []
    for name in cited_files():
        found += problems(name, (ROOT / name).read_text(errors="replace"))
    assert found == [], "\n".join(found)


def test_results_is_the_current_state_and_short():
    """RESULTS.md holds the current state only: at most RESULTS_MAX_LINES lines, its first
    section the current state; the history lives in benchmarks/history/."""
    lines = RESULTS.read_text().splitlines()
    assert len(lines) <= RESULTS_MAX_LINES, f"RESULTS.md has {len(lines)} lines"
    assert headings(RESULTS)[:2] == ["Kernel benchmark results", "Current state"]


@pytest.mark.parametrize("path", [RESULTS, NOTES, *sorted(HISTORY.glob("*.md"))], ids=lambda p: p.name)
def test_headings_of_the_record_are_unique(path):
    """A quoted heading names one section of its file."""
    seen = [norm(h) for h in headings(path)]
    assert sorted({h for h in seen if seen.count(h) > 1}) == []


def test_every_history_file_is_listed_newest_first():
    """benchmarks/history/README.md lists every run file once, newest date first; every file is
    named date-GPU(s)-revision(s)."""
    runs = sorted(p.name for p in HISTORY.glob("*.md") if p.name != "README.md")
    assert runs, "benchmarks/history/ holds no run"
    assert [n for n in runs if not HISTORY_NAME.match(n)] == []
    listed = re.findall(r"^\|[^\n]*\]\(([^)]+\.md)\) \|$", (HISTORY / "README.md").read_text(), re.M)
    assert sorted(listed) == runs
    dates = [HISTORY_NAME.match(n).group(1) for n in listed]
    assert dates == sorted(dates, reverse=True)


def test_the_record_names_no_heading_without_its_file():
    """A quoted heading followed by "above" or "below" in the record is a reference the finder
    cannot check: the record cites by file and heading instead."""
    found = []
    for path in [RESULTS, NOTES, *sorted(HISTORY.glob("*.md"))]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            found += [f"{path.name}:{number}: {m}" for m in re.findall(r'"[^"]+"\s+(?:above|below)\b', line)]
    assert found == []
