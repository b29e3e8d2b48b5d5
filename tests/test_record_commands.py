"""Every command recorded under benchmarks/ runs from the kit: the ``command`` of each JSON record
(benchmarks/, and the fixture copied from one of its records), the "Command" lines of the Markdown
and CSV records of benchmarks/results/, and the commands quoted in the run history and
benchmarks/RESULTS.md. Run from the kit's root, each names only files the kit ships (the script,
its grid, submission or other input) or that an earlier command of the same page wrote, and writes
its outputs to paths relative to the root; a capitalised placeholder (``GRID``, ``OUT/bench.json``,
``NAME-1.json``) stands for a file the text around it names. And the tools that write records
name their commands that way (``harness.kit_command``)."""

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT

import harness

OUTPUT_OPTIONS = {"--json", "--md", "--plot", "--out", "--csv", "-o"}  # what the kit's tools write to
SUFFIXES = (".json", ".py", ".md", ".png", ".csv", ".txt", ".log", ".ncu-rep")
PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*(?:[-.].*)?")  # a path part: GRID, GRID.json, OUT, SWEEP1.json, NAME-1.json
RECORD_FIXTURES = ("tests/fixtures/sweep-h100.json",)  # fixtures that are copies of records (sweep-b200: made up)
QUOTED = re.compile(r"`((?:python3?|bash) [^`]+)`")
COMMAND_LINE = re.compile(r"Command \([^)]*\):\s*`?((?:python3?|bash) [^`\n]+?)`?(?:\s\s|\s\(|$)", re.M)


def kit_files(under: str) -> list[Path]:
    """The kit's files under ``under``: the tracked ones in a git checkout, else those on disk."""
    try:
        names = subprocess.run(["git", "ls-files", under], cwd=ROOT, capture_output=True, text=True,
                               check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        names = []
    return [ROOT / n for n in names] if names else [p for p in (ROOT / under).rglob("*") if p.is_file()]


def json_commands(value, where: str = ""):
    """(where, command) of every string under a key named "command", at any depth."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "command" and isinstance(item, str):
                yield f"{where}/command", item
            else:
                yield from json_commands(item, f"{where}/{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from json_commands(item, f"{where}[{i}]")


def is_record_page(rel: str) -> bool:
    """A page of records: benchmarks/results/, the run history, benchmarks/RESULTS.md (not the
    method pages, README.md and NOTES.md, whose commands are examples)."""
    return rel.startswith(("benchmarks/results/", "benchmarks/history/")) or rel == 'benchmarks/RESULTS.md'


def recorded_commands() -> list[tuple[str, list[str]]]:
    """(file, [its commands, in order]) for every file under benchmarks/ (and the record fixtures)
    that records commands."""
    out = []
    for path in kit_files("benchmarks") + [ROOT / f for f in RECORD_FIXTURES]:
        rel = path.relative_to(ROOT).as_posix()
        if path.suffix == ".json":
            found = [cmd for _, cmd in json_commands(json.loads(path.read_text()))]
        elif path.suffix in (".md", ".csv") and is_record_page(rel):
            text = path.read_text()
            hits = [(m.start(), m.group(1)) for m in COMMAND_LINE.finditer(text)]
            hits += [(m.start(), " ".join(m.group(1).split())) for m in QUOTED.finditer(text)]
            found = list(dict.fromkeys(cmd for _, cmd in sorted(hits)))
        else:
            continue
        if found:
            out.append((rel, found))
    return out


def looks_like_a_file(value: str) -> bool:
    """A file suffix, or a folder in it (not a fraction such as --part's 1/5)."""
    return value.endswith(SUFFIXES) or ("/" in value and re.search("[a-z]", value) is not None)


def command_files(command: str) -> tuple[str, list[tuple[str, bool]]]:
    """(the script, [(a file it names, whether it writes it)]) of ``command``: the script run
    (``python3 SCRIPT`` or ``python -m benchmarks.NAME``; '' for a module not of the kit), the values
    of the output options, and every other argument that looks like a path, as inputs."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    if len(words) > 2 and words[1] == "-m":
        script = words[2].replace(".", "/") + ".py" if words[2].startswith("benchmarks.") else ""
        words = words[3:]
    else:
        script, words = (words[1] if len(words) > 1 else ""), words[2:]
    files, output_next = [], False
    for word in words:
        option, eq, value = word.partition("=") if word.startswith("--") else (word, "", "")
        output = output_next or bool(eq and option in OUTPUT_OPTIONS)
        value = value if eq else word
        output_next = not eq and word in OUTPUT_OPTIONS
        if value and not value.startswith(("-", "[")) and (looks_like_a_file(value) or output):
            files.append((value, output))
    return script, files


def placeholder(path: str) -> bool:
    return any(PLACEHOLDER.fullmatch(part) for part in Path(path).parts)


def command_problems(command: str, written: set = frozenset()) -> list[str]:
    """What in ``command`` does not run from the kit's root: a path that is absolute or leaves the
    kit, an input (script, grid, submission, record) the kit does not ship and no command before
    it wrote (``written``)."""
    script, files = command_files(command)
    problems = []
    if script and looks_like_a_file(script) and not (ROOT / script).exists():
        problems.append(f"{script}: not in the kit")
    for value, output in files:
        if value.startswith(("/", "~")) or ".." in Path(value).parts:
            problems.append(f"{value}: outside the kit (name files by their path in the kit)")
        elif not (output or placeholder(value) or (ROOT / value).exists() or value in written):
            problems.append(f"{value}: not in the kit")
    return problems


def test_every_recorded_command_names_only_the_kit_s_files():
    pages = recorded_commands()
    assert sum(len(c) for _, c in pages) > 60, pages  # the records are found (JSON, Markdown, CSV)
    bad = {}
    for where, commands in pages:
        written = set()
        for command in commands:
            problems = command_problems(command, written)
            if problems:
                bad[f"{where}: {command}"] = problems
            written |= {value for value, output in command_files(command)[1] if output}
    assert not bad, json.dumps(bad, indent=1)


@pytest.mark.parametrize("command, problem", [
    ("python3 benchmarks/bench_kernel.py --grid .exp/grid11.json --json out.json", ".exp/grid11.json: not in the kit"),
    ("python3 benchmarks/bench_kernel.py --json /root/out/s96-1.json", "/root/out/s96-1.json: outside the kit"),
    ("python3 benchmarks/floor.py --json=../floor.json", "../floor.json: outside the kit"),
    ("python3 benchmarks/gone.py", "benchmarks/gone.py: not in the kit"),
    ("python -m benchmarks.gone --out OUT", "benchmarks/gone.py: not in the kit"),
    ("python3 benchmarks/bench_kernel.py --submission /tmp/x/sub_ki.py", "/tmp/x/sub_ki.py: outside the kit"),
])
def test_the_check_finds_what_does_not_run_from_the_kit(command, problem):
    found = command_problems(command)
    assert len(found) == 1 and found[0].startswith(problem), found


def test_the_check_passes_shipped_inputs_relative_outputs_and_placeholders():
    assert command_problems("python3 benchmarks/bench_kernel.py --shapes benchmarks --sweep --grid "
                            "benchmarks/grids/2026-11-26-96sms/kb.json --json benchmarks/results/new.json "
                            "--md x.md") == []
    assert command_problems("python3 benchmarks/bench_kernel.py --grid GRID.json --json OUT/sweep.json") == []
    assert command_problems("python -m benchmarks.compare --out benchmarks/results") == []
    assert command_problems("bash .ci/gpu-run OUT --part 1/5") == []


def test_the_tools_name_their_commands_from_the_kit_s_root(tmp_path, monkeypatch):
    """harness.kit_command: a file inside the kit by its path there, from any folder; an output
    outside the kit by its name alone; an input outside it absolute (that record would not run
    from the kit: the check above says so); other arguments as given."""
    monkeypatch.chdir(ROOT / "benchmarks")
    grid = tmp_path / "grid.json"
    grid.write_text("{}")
    command = harness.kit_command(["python3", "benchmarks/bench_kernel.py"],
                                  ["--shapes", "benchmarks", "--sms", "92", "--grid", "grids/2026-11-26-96sms/kb.json",
                                   "--json", str(tmp_path / "s96-1.json"), "--md=results/new.md"],
                                  ("--json", "--md"))
    assert command == ("python3 benchmarks/bench_kernel.py --shapes benchmarks --sms 92 --grid "
                       "benchmarks/grids/2026-11-26-96sms/kb.json --json s96-1.json --md=benchmarks/results/new.md")
    assert command_problems(command) == []
    outside = harness.kit_command(["python3", "benchmarks/bench_kernel.py"], ["--grid", str(grid)], ("--json",))
    assert outside.endswith(f"--grid {grid.resolve()}")
    assert command_problems(outside) == [f"{grid.resolve()}: outside the kit (name files by their path in the kit)"]


def test_the_shipped_grids_are_the_configs_their_records_swept():
    """Each grid of benchmarks/grids/2026-11-26-96sms/ holds, per shape, the cuda configs its records'
    sweeps timed (loads-only probes left out), in their order."""
    checked = 0
    for path in sorted((ROOT / "benchmarks" / "results" / "2026-11-26-96sms").glob("*.json")):
        record = json.loads(path.read_text())
        grid_arg = re.search(r"--grid (\S+)", record["command"])
        if not grid_arg:
            continue
        grid = json.loads((ROOT / grid_arg.group(1)).read_text())
        for point in record.get("points") or [record]:
            for key, entries in point["sweeps"].items():
                shape, backend = key.split()
                if backend == "cuda":
                    swept = [e["cfg"] for e in entries if not (e.get("bad") and e["bad"][0] == "probe")]
                    assert grid[shape] == swept, (path.name, shape)
                    checked += 1
    assert checked >= 48
