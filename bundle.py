"""The kit's sources copied into the upload file: ``python3 eval.py bundle [--check]``.

submission.py is the one file the server takes (it may import nothing of the kit), so it
carries copies of the kit's source files, each in a marked block:

    # >>> bundle kernels/nvfp4_gemv.cu (any words after the path)
    CUDA_SRC = r\"\"\"
    ... the file, line for line ...
    \"\"\"[1:]
    # <<< bundle

The variable's value is the file's text. ``python3 eval.py bundle`` rewrites every block from its
file (the lines between the assignment and the closing quotes; the rest of submission.py is
left as it is), ``python3 eval.py bundle --check`` writes nothing and exits 1 with one line
naming the first difference (the file and its line, the line of submission.py) when a copy and
its file disagree. The files are the sources: edit them, then bundle. A file that a raw string
cannot hold as it is (three double quotes, no newline at the end) or that the server would
refuse (the forbidden word) is refused, saying why.

``refuse_if_stale(path, ...)``: what the timing commands (eval.py, eval.py ab, eval.py audit,
benchmarks/bench_kernel.py) call before they time the kit's own submission.py: where it is
stale they exit with one line naming the command that fixes it. A submission given by any
other path is timed as it is.

Exit status: 0 done (or, with --check, every copy matches its file), 1 a copy differs (--check),
2 the blocks or their files cannot be read or bundled (one line saying why).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import NamedTuple

import harness  # the server's upload rules (standard library only at the top)

ROOT = Path(__file__).resolve().parent
SUBMISSION = ROOT / "submission.py"
COMMAND = "python3 eval.py bundle"
_OPEN = re.compile(r"^# >>> bundle (\S+)")
_CLOSE = "# <<< bundle"
_HEAD = re.compile(r'^[A-Za-z_]\w* = r"""$')
_TAIL = '"""[1:]'


class BundleError(ValueError):
    """The blocks or their files cannot be read or bundled (message: one line saying why)."""


class Block(NamedTuple):
    """One marked block of submission.py: the source file it copies (relative to the kit's root)
    and its line numbers (0-based): the marker, the first and the last line of the copy (the
    copy is ``lines[first:end]``)."""
    path: str
    marker: int
    first: int
    end: int


def blocks(text: str) -> list[Block]:
    """The marked blocks of a submission's text, in order; raises BundleError for a malformed one."""
    lines = text.splitlines()
    out = []
    i = 0
    while i < len(lines):
        match = _OPEN.match(lines[i])
        if not match:
            if lines[i].startswith(_CLOSE):
                raise BundleError(f"line {i + 1}: '{_CLOSE}' without a '# >>> bundle PATH' line before it")
            i += 1
            continue
        if i + 1 >= len(lines) or not _HEAD.match(lines[i + 1]):
            raise BundleError(f'line {i + 2}: a bundle block starts with NAME = r""" after its marker')
        end = next((j for j in range(i + 2, len(lines)) if lines[j] == _TAIL), None)
        if end is None or end + 1 >= len(lines) or lines[end + 1] != _CLOSE:
            raise BundleError(f"line {i + 1}: the block of {match.group(1)} does not end with the lines "
                              f"'{_TAIL}' and '{_CLOSE}'")
        out.append(Block(match.group(1), i, i + 2, end))
        i = end + 2
    return out


def source_lines(path: str, root: Path = ROOT, named_at: int | None = None) -> list[str]:
    """The lines of a block's source file; raises BundleError where a raw string cannot hold it as it
    is, or where the server would refuse the file that holds it."""
    where = f" (named at submission.py line {named_at + 1})" if named_at is not None else ""
    try:
        text = (root / path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BundleError(f"{path}{where} cannot be read: {exc}") from None
    if '"""' in text:
        raise BundleError(f'{path} holds three double quotes ("""), which would end its copy early')
    if text and not text.endswith("\n"):
        raise BundleError(f"{path} does not end with a newline")
    for number, line in enumerate(text.splitlines(), 1):
        if harness.FORBIDDEN_WORD in line.lower():
            raise BundleError(f"{path} line {number} holds the word {harness.FORBIDDEN_WORD!r} (any case): the "
                              "server would refuse the upload file that copies it")
    return text.splitlines()


def bundled(text: str, root: Path = ROOT) -> str:
    """``text`` with every block's copy rewritten from its file."""
    lines = text.splitlines()
    found = blocks(text)
    if not found:
        raise BundleError("submission.py has no '# >>> bundle PATH' block")
    for block in reversed(found):
        lines[block.first:block.end] = source_lines(block.path, root, block.marker)
    return "\n".join(lines) + "\n"


def first_difference(text: str, root: Path = ROOT, name: str = "submission.py") -> str:
    """'' when every block of ``text`` copies its file as it is, else the first difference, in one line."""
    found = blocks(text)
    if not found:
        return f"{name} has no '# >>> bundle PATH' block"
    lines = text.splitlines()
    for block in found:
        want = source_lines(block.path, root, block.marker)
        have = lines[block.first:block.end]
        for i, (a, b) in enumerate(zip(have, want, strict=False)):
            if a != b:
                return (f"{block.path} line {i + 1} differs from its copy in {name} (line {block.first + i + 1}): "
                        f"run `{COMMAND}`")
        if len(have) != len(want):
            n = min(len(have), len(want))
            more = "more" if len(want) > len(have) else "fewer"
            return (f"{block.path} has {more} lines than its copy in {name} (from line {n + 1}, {name} line "
                    f"{block.first + n + 1}): run `{COMMAND}`")
    return ""


def check(path: Path | str = SUBMISSION) -> str:
    """'' when the submission file at ``path`` matches its sources (the paths of its blocks are
    relative to its folder), else why not, in one line."""
    path = Path(path)
    try:
        return first_difference(path.read_text(encoding="utf-8"), path.resolve().parent, path.name)
    except (OSError, UnicodeDecodeError) as exc:
        return f"{path} cannot be read: {exc}"
    except BundleError as exc:
        return f"{path.name}: {exc}"


def stale_problem(*paths) -> str:
    """'' unless one of ``paths`` is the kit's own submission.py and its copies differ from the
    kit's sources; then why, in one line naming the command that fixes it."""
    for path in paths:
        try:
            own = Path(path).resolve() == SUBMISSION.resolve()
        except OSError:
            own = False
        if own:
            why = check(path)
            if why:
                return (f"the kit's submission.py is stale ({why.replace(f': run `{COMMAND}`', '')}): "
                        f"run `{COMMAND}` first (a copy of the file, given by its path, is timed as it is)")
    return ""


def refuse_if_stale(*paths) -> None:
    """Exit (status 2, one line on stderr) where one of ``paths`` is the kit's own submission.py
    and it is stale; return otherwise."""
    why = stale_problem(*paths)
    if why:
        print(f"error: {why}", file=sys.stderr)
        raise SystemExit(2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 with the first difference when a copy differs from its file")
    ap.add_argument("--submission", default=str(SUBMISSION), metavar="PATH",
                    help="the file whose blocks are written or checked, from the sources beside it (default: the "
                         "kit's submission.py)")
    args = ap.parse_args(argv)
    path = Path(args.submission)
    root = path.resolve().parent
    try:
        text = path.read_text(encoding="utf-8")
        if args.check:
            why = first_difference(text, root, path.name)
            if why:
                print(f"error: {why}", file=sys.stderr)
                return 1
            print(f"{path.name}: its {len(blocks(text))} bundled copies match their files")
            return 0
        new = bundled(text, root)
        lines = text.splitlines()
        changed = [b.path for b in blocks(text) if lines[b.first:b.end] != source_lines(b.path, root)]
    except (OSError, UnicodeDecodeError, BundleError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if new == text:
        print(f"{path.name}: up to date")
        return 0
    path.write_text(new, encoding="utf-8")
    print(f"{path.name}: wrote its copies of {', '.join(changed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
