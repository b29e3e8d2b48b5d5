"""The kit's sources copied into the upload file: ``python3 eval.py bundle [--check | --write-back] [--force] [--no-compile]``.

submission.py is the one file the server takes (it may import nothing of the kit), so it
carries copies of the kit's source files, each in a marked block:

    # >>> bundle kernels/nvfp4_gemv.cu sha256=0123456789abcdef (any words after the hash)
    CUDA_SRC = r\"\"\"
    ... the file, line for line ...
    \"\"\"[1:]
    # <<< bundle

The variable's value is the file's text, and submission.py runs that copy: nothing of kernels/
is read when it runs. The marker's ``sha256=`` records the first 16 hex digits of the sha256 of
the copy bundle last wrote (its lines, each ended by a newline: the text of the file it copied),
so that this file, and any copy of it, tells which side changed since then. A block is

* in sync: the copy is the file (a missing or stale hash in its marker is then just rewritten);
* source edited: the copy is what bundle wrote and the file changed (the usual case);
* block edited: the file is what bundle copied and the copy changed;
* both edited: neither is what bundle wrote;
* unknown: the copy differs from the file and its marker records no hash.

``python3 eval.py bundle`` writes the copies of edited sources and the markers' hashes, and leaves
the rest of submission.py as it is. Bundle never overwrites text it did not write: where a block
was edited (or its side is unknown) it writes nothing and exits 1, with one line naming the file,
the side that changed and the two ways on: ``--write-back`` copies each edited block (or one of
unknown side) into its source file (the edit kept; where the source changed too, only with
``--force``), ``--force`` overwrites the copies from their files (the edit dropped); where both
sides changed, the line also says how to keep both (a merge by hand: where the two texts are and
the ``diff`` command that shows how they differ). ``--check`` writes nothing and exits 1 with
one line naming the first difference (the file and its line, the line of submission.py, the
side that changed, the command that mends it) or a marker whose hash is missing or stale. A file
that a raw string cannot hold as it is (three double quotes, no newline at the end) or that the
server would refuse (the forbidden word) is refused, saying why; so is such a block written
back.

One function, ``state``, says how a submission file stands; ``kit_state`` asks it of the kit's
own submission.py only (any other path is "not the kit's file": it is not compared with
kernels/). eval.py (test and timing modes), eval.py ab and eval.py audit run the file as it is, the
file that would be uploaded, after one warning line where it differs (``warn_if_out_of_sync``), and
eval.py's records name its state; the tools that write records (benchmarks/bench_kernel.py,
benchmarks/bench_configs.py, benchmarks/apply_table.py, benchmarks/ab_calibration.py) refuse it
in one line (``refuse_if_out_of_sync``), and .ci/gpu-run refuses to start where ``--check`` fails.

Exit status: 0 done (or, with --check, every copy matches its file and its marker's hash), 1 a
copy differs (--check) or a block was edited and nothing was written, 2 bad arguments, or the
blocks or their files cannot be read or bundled (one line saying why).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

import harness  # the server's upload rules (standard library only at the top)

ROOT = Path(__file__).resolve().parent
SUBMISSION = ROOT / "submission.py"
COMMAND = "python3 eval.py bundle"
HASH_DIGITS = 16  # hex digits of the sha256 a marker records
COMPILE_TIMEOUT_S = 900  # the compile check before writing (the default set: about 10 s of CPU, 2026-12-07)
_OPEN = re.compile(r"^# >>> bundle (\S+)")
_RECORDED = re.compile(r"^ sha256=(\S*)")  # right after the path
_CLOSE = "# <<< bundle"
_HEAD = re.compile(r'^[A-Za-z_]\w* = r"""$')
_TAIL = '"""[1:]'

IN_SYNC = "in sync"
SOURCE_EDITED = "source edited"
BLOCK_EDITED = "block edited"
BOTH_EDITED = "both edited"
UNKNOWN = "unknown"
NOT_KIT = "not the kit's file"
STATES = (IN_SYNC, SOURCE_EDITED, BLOCK_EDITED, BOTH_EDITED, UNKNOWN, NOT_KIT)


class BundleError(ValueError):
    """The blocks or their files cannot be read or bundled (message: one line saying why)."""


class Block(NamedTuple):
    """One marked block of submission.py: the source file it copies (relative to the kit's root),
    its line numbers (0-based: the marker, the first and the last line of the copy, which is
    ``lines[first:end]``) and the hash its marker records (None: none, or not 16 hex digits)."""
    path: str
    marker: int
    first: int
    end: int
    recorded: str | None = None


class BlockState(NamedTuple):
    """A block, its state (one of ``STATES``), its copy's lines and its file's."""
    block: Block
    state: str
    have: list
    want: list


class Sync(NamedTuple):
    """How a submission file stands: ``state`` (one of ``STATES``; of several blocks out of sync,
    the one state they share, else "both edited" where each side changed somewhere, else
    "unknown") and ``why``, '' when in sync or not the kit's file, else one line: the first
    block out of sync (an edited block before an edited source), the side that changed and the
    command that mends it."""
    state: str
    why: str


def digest(lines: list) -> str:
    """What a marker records of a copy: the first 16 hex digits of the sha256 of its lines, each
    ended by a newline (the text of the file it copies)."""
    return hashlib.sha256("".join(f"{line}\n" for line in lines).encode()).hexdigest()[:HASH_DIGITS]


def _recorded(rest: str) -> str | None:
    match = _RECORDED.match(rest)
    value = match.group(1) if match else ""
    return value if re.fullmatch(f"[0-9a-f]{{{HASH_DIGITS}}}", value) else None


def marker_line(line: str, path: str, value: str) -> str:
    """A block's marker ``line`` recording ``value`` (the hash of the path, replacing any it
    records); the words after it are kept."""
    head = f"# >>> bundle {path}"
    rest = line[len(head):]
    match = _RECORDED.match(rest)
    return f"{head} sha256={value}{rest[match.end():] if match else rest}"


def blocks(text: str, name: str = "submission.py") -> list[Block]:
    """The marked blocks of a submission's text, in order; raises BundleError for a malformed one."""
    lines = text.splitlines()
    out = []
    i = 0
    while i < len(lines):
        match = _OPEN.match(lines[i])
        if not match:
            if lines[i].startswith(_CLOSE):
                raise BundleError(f"{name} line {i + 1}: '{_CLOSE}' without a '# >>> bundle PATH' line before it")
            i += 1
            continue
        if i + 1 >= len(lines) or not _HEAD.match(lines[i + 1]):
            raise BundleError(f'{name} line {i + 2}: a bundle block starts with NAME = r""" after its marker')
        end = next((j for j in range(i + 2, len(lines)) if lines[j] == _TAIL), None)
        if end is None or end + 1 >= len(lines) or lines[end + 1] != _CLOSE:
            raise BundleError(f"{name} line {i + 1}: the block of {match.group(1)} does not end with the lines "
                              f"'{_TAIL}' and '{_CLOSE}'")
        out.append(Block(match.group(1), i, i + 2, end, _recorded(lines[i][match.end():])))
        i = end + 2
    return out


def _os_why(exc: Exception) -> str:
    if isinstance(exc, FileNotFoundError):
        return "no such file"
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    return getattr(exc, "strerror", None) or str(exc)


def _text_problem(path: str, text: str) -> str:
    """'' when a block can hold ``text`` as it is and the server would take the file that holds
    it, else why not, in one line."""
    if '"""' in text:
        return f'{path} holds three double quotes ("""), which would end its copy early'
    if text and not text.endswith("\n"):
        return f"{path} does not end with a newline"
    for number, line in enumerate(text.splitlines(), 1):
        if harness.FORBIDDEN_WORD in line.lower():
            return (f"{path} line {number} holds the word {harness.FORBIDDEN_WORD!r} (any case): the server would "
                    "refuse the upload file that copies it")
    return ""


def source_lines(path: str, root: Path = ROOT, named_at: int | None = None, name: str = "submission.py") -> list[str]:
    """The lines of a block's source file; raises BundleError where a raw string cannot hold it as it
    is, or where the server would refuse the file that holds it."""
    where = f" (named at {name} line {named_at + 1})" if named_at is not None else ""
    try:
        text = (root / path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BundleError(f"{path}{where} cannot be read: {_os_why(exc)}") from None
    problem = _text_problem(path, text)
    if problem:
        raise BundleError(problem)
    return text.splitlines()


def _state(have: list, want: list, recorded: str | None) -> str:
    if have == want:
        return IN_SYNC
    if recorded is None:
        return UNKNOWN
    if digest(have) == recorded:
        return SOURCE_EDITED
    if digest(want) == recorded:
        return BLOCK_EDITED
    return BOTH_EDITED


def block_states(text: str, root: Path = ROOT, name: str = "submission.py") -> list[BlockState]:
    """Every block of ``text`` with its state, its copy's lines and its file's (the files beside
    the submission, under ``root``); raises BundleError where they cannot be read."""
    found = blocks(text, name)
    if not found:
        raise BundleError(f"{name} has no '# >>> bundle PATH' block")
    lines = text.splitlines()
    out = []
    for block in found:
        want = source_lines(block.path, root, block.marker, name)
        have = lines[block.first:block.end]
        out.append(BlockState(block, _state(have, want, block.recorded), have, want))
    return out


def _difference(item: BlockState, name: str) -> str:
    """Where a copy first differs from its file, in words."""
    block, have, want = item.block, item.have, item.want
    for i, (a, b) in enumerate(zip(have, want, strict=False)):
        if a != b:
            return f"{block.path} line {i + 1} differs from its copy in {name} (line {block.first + i + 1})"
    n = min(len(have), len(want))
    more = "more" if len(want) > len(have) else "fewer"
    return (f"{block.path} has {more} lines than its copy in {name} (from line {n + 1}, {name} line "
            f"{block.first + n + 1})")


def _side(item: BlockState, name: str) -> str:
    return {SOURCE_EDITED: f"{item.block.path} changed since bundle wrote the copy",
            BLOCK_EDITED: f"the copy was edited in {name} since bundle wrote it",
            BOTH_EDITED: f"both {item.block.path} and the copy changed since bundle wrote it",
            UNKNOWN: "the marker records no hash, so which side changed is unknown"}[item.state]


def _ways(item: BlockState, name: str, suffix: str) -> str:
    """The commands that mend a block out of sync (``suffix``: ' --submission PATH' for a file
    other than the kit's); where both sides changed, also how to keep both edits by hand."""
    command, path, block = COMMAND + suffix, item.block.path, item.block
    if item.state == SOURCE_EDITED:
        return f"run `{command}`"
    if item.state == BOTH_EDITED:
        lines = f"{block.first + 1}-{block.end}"
        return (f"to keep both edits, merge them by hand into one side (the copy is {name} lines {lines}, the file "
                f"{path}; `diff <(sed -n '{lines.replace('-', ',')}p' {name}) {path}` shows how they differ), then "
                f"`{command} --write-back --force` copies the block into {path} (merged into the copy) or "
                f"`{command} --force` overwrites the block from {path} (merged into the file); without the merge, "
                "either loses the other side's edit")
    return f"`{command} --write-back` copies the block into {path}, `{command} --force` overwrites it from {path}"


def _line(item: BlockState, name: str, suffix: str) -> str:
    return f"{_difference(item, name)}: {_side(item, name)}; {_ways(item, name, suffix)}"


def _combined(states: set) -> str:
    if len(states) == 1:
        return next(iter(states))
    if states <= {SOURCE_EDITED, BLOCK_EDITED, BOTH_EDITED}:
        return BOTH_EDITED
    return UNKNOWN


def describe(text: str, root: Path = ROOT, name: str = "submission.py", suffix: str = "") -> Sync:
    """How the blocks of ``text`` stand against their files under ``root`` (``suffix``: see
    ``_ways``); raises BundleError where they cannot be read."""
    out = [item for item in block_states(text, root, name) if item.state != IN_SYNC]
    if not out:
        return Sync(IN_SYNC, "")
    first = min(out, key=lambda item: item.state == SOURCE_EDITED)  # an edited block before an edited source
    return Sync(_combined({item.state for item in out}), _line(first, name, suffix))


def _is_kit(path) -> bool:
    try:
        return Path(path).resolve() == SUBMISSION.resolve()
    except OSError:
        return False


def _suffix(path, given: str | None = None) -> str:
    return "" if _is_kit(path) else f" --submission {given or path}"


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BundleError(f"{path}: {_os_why(exc)}") from None


def state(path: Path | str, root: Path | None = None) -> Sync:
    """How the submission file at ``path`` stands against the sources beside it (the paths of its
    blocks are relative to its folder, or to ``root``); a file or block that cannot be read is
    "unknown", saying why."""
    path = Path(path)
    try:
        return describe(_read(path), root or path.resolve().parent, path.name, _suffix(path))
    except BundleError as exc:
        return Sync(UNKNOWN, str(exc))


def kit_state(path: Path | str) -> Sync:
    """``state`` of the kit's own submission.py; "not the kit's file" for any other path."""
    return state(path) if _is_kit(path) else Sync(NOT_KIT, "")


def warn_if_out_of_sync(*paths) -> list[Sync]:
    """One ``warning:`` line on stderr for each of ``paths`` that is the kit's own submission.py
    and differs from its sources (it runs as it is: its copies are the file that would be
    uploaded); the states of ``paths``, in order."""
    found = [kit_state(path) for path in paths]
    for item in found:
        if item.why:
            print(f"warning: the kit's submission.py runs its own copies, which differ from its sources: {item.why}",
                  file=sys.stderr, flush=True)
    return found


def refuse_if_out_of_sync(*paths, tool: str) -> None:
    """Exit (status 2, one line on stderr) where one of ``paths`` is the kit's own submission.py
    and differs from its sources: ``tool`` writes records, each of which names one kernel."""
    for path in paths:
        item = kit_state(path)
        if item.why:
            print(f"error: {tool} writes records of the kit's submission.py only while its copies match their "
                  f"sources, and they differ: {item.why}", file=sys.stderr)
            raise SystemExit(2)


def _marker_problem(text: str, name: str, suffix: str) -> str:
    lines = text.splitlines()
    for block in blocks(text, name):
        if block.recorded != digest(lines[block.first:block.end]):
            what = "no hash" if block.recorded is None else "a stale hash"
            return (f"{name} line {block.marker + 1}: the marker of {block.path} records {what} of its copy: run "
                    f"`{COMMAND + suffix}` (it rewrites the marker)")
    return ""


def check_problem(text: str, root: Path = ROOT, name: str = "submission.py", suffix: str = "") -> str:
    """'' when every block of ``text`` is its file and its marker records its hash (what
    ``--check`` passes), else the first thing that is not so, in one line; raises BundleError
    where the blocks or their files cannot be read."""
    return describe(text, root, name, suffix).why or _marker_problem(text, name, suffix)


def check(path: Path | str = SUBMISSION) -> str:
    """``check_problem`` of the submission file at ``path`` (the paths of its blocks are relative
    to its folder): '' when it passes, else why not, in one line."""
    path = Path(path)
    try:
        return check_problem(_read(path), path.resolve().parent, path.name, _suffix(path))
    except BundleError as exc:
        return str(exc)


def first_difference(text: str, root: Path = ROOT, name: str = "submission.py") -> str:
    """'' when every block of ``text`` copies its file as it is, else the first difference, in one
    line (with the side that changed and the command that mends it)."""
    if not blocks(text, name):
        return f"{name} has no '# >>> bundle PATH' block"
    return describe(text, root, name).why


def bundled(text: str, root: Path = ROOT, name: str = "submission.py") -> str:
    """``text`` with every block's copy rewritten from its file and its marker recording the
    copy's hash (what ``--force`` writes)."""
    lines = text.splitlines()
    for item in reversed(block_states(text, root, name)):
        block = item.block
        lines[block.first:block.end] = item.want
        lines[block.marker] = marker_line(lines[block.marker], block.path, digest(item.want))
    return "\n".join(lines) + "\n"


def compile_refusal(new: str, name: str = "submission.py", suffix: str = "", sources: list = ()) -> str:
    """'' where the cuda kernel of ``new`` (the text about to be written) compiles for sm_90a and
    sm_100a, or where there is no compiler here (one line on stderr says so), else the refusal:
    a line naming the target, the config and NVRTC's first error, the flag that writes it anyway,
    then NVRTC's lines. The check is cuda_check.py's ``--status`` (what eval.py's header shows),
    in a process of its own: bundle stays free of torch; its answer is kept for the file written."""
    script = ROOT / "cuda_check.py"
    if not script.is_file():  # not the kit's layout: nothing to compile with
        return ""
    with tempfile.TemporaryDirectory(prefix="nvfp4_bundle_") as tmp:
        staged = Path(tmp) / "submission.py"
        staged.write_text(new, encoding="utf-8")
        proc = subprocess.run([sys.executable, str(script), "--status", str(staged)], cwd=ROOT,
                              capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
    found = [ln for ln in proc.stdout.splitlines() if ln.startswith("CUDA_CHECK ")]
    tail = " | ".join((proc.stderr or "").strip().splitlines()[-2:]) or f"exit {proc.returncode}"
    status = json.loads(found[-1][len("CUDA_CHECK "):]) if found else {"kind": "unknown", "error": tail}
    if status.get("missing") or status.get("error"):
        why = status.get("missing") or f"the check gave no answer: {status['error']}"
        print(f"note: {name}: the kernel was not compiled before writing ({why[:300]})", file=sys.stderr)
        return ""
    if status.get("kind") is None or status.get("compiles"):
        return ""
    first, what = status["failures"][0], " and ".join(sources) or "its cuda kernel"
    return "\n".join([f"error: {name}: nothing written: {what} does not compile for {first['arch']} "
                      f"({first['config']}; {status['failed']}): {first['error']}; `python3 eval.py compile` shows "
                      f"every error, `{COMMAND + suffix} --no-compile` writes it anyway", *status.get("log", [])])


def _plan(states: list[BlockState], write_back: bool, force: bool) -> tuple[dict, BlockState | None]:
    """({index: "copy" (file -> block) | "back" (block -> file) | "keep"}, the first block refused
    or None)."""
    actions = {}
    for i, item in enumerate(states):
        if item.state == IN_SYNC:
            actions[i] = "keep"
        elif item.state == SOURCE_EDITED:
            actions[i] = "copy"
        elif write_back and (force or item.state != BOTH_EDITED):
            actions[i] = "back"
        elif force and not write_back:
            actions[i] = "copy"
        else:
            return actions, item
    return actions, None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog=COMMAND, description="The kit's sources (kernels/) copied into submission.py, each into a block whose "
        "marker records the hash of the copy written: a block edited in submission.py is not overwritten, but "
        "refused in one line saying the ways on (--write-back, --force; where the file changed too, how to merge "
        "the two by hand).")
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 with the first difference when a copy differs from its file or a "
                         "marker's hash is missing or stale")
    ap.add_argument("--write-back", action="store_true",
                    help="copy each block edited in the submission (or of unknown side) into its source file (where "
                         "the source changed too, only with --force); blocks whose source changed are written from it "
                         "as usual")
    ap.add_argument("--force", action="store_true",
                    help="overwrite blocks edited in the submission from their files (with --write-back: write "
                         "blocks back even where their source changed too)")
    ap.add_argument("--no-compile", action="store_true",
                    help="write without compiling first (by default a kernel that does not compile for sm_90a and "
                         "sm_100a is not written: python3 eval.py compile)")
    ap.add_argument("--submission", default=str(SUBMISSION), metavar="PATH",
                    help="the file whose blocks are written or checked, from the sources beside it (default: the "
                         "kit's submission.py)")
    args = ap.parse_args(argv)
    if args.check and (args.write_back or args.force):
        print("error: --check writes nothing: give it without --write-back and --force", file=sys.stderr)
        return 2
    path = Path(args.submission)
    root, name, suffix = path.resolve().parent, path.name, _suffix(path, args.submission)
    try:
        text = _read(path)
        if args.check:
            why = check_problem(text, root, name, suffix)
            if why:
                print(f"error: {why}", file=sys.stderr)
                return 1
            print(f"{name}: its {len(blocks(text, name))} bundled copies match their files")
            return 0
        states = block_states(text, root, name)
        actions, refused = _plan(states, args.write_back, args.force)
        if refused is not None:
            print(f"error: {name}: nothing written: {_line(refused, name, suffix)}", file=sys.stderr)
            return 1
        for i, item in enumerate(states):
            problem = _text_problem(item.block.path, "".join(f"{x}\n" for x in item.have))
            if actions[i] == "back" and problem:
                raise BundleError(f"the copy in {name} cannot be written back: {problem}")
    except BundleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    lines = text.splitlines()
    copied, back, hashed, written_back = [], [], [], []
    for i, item in reversed(list(enumerate(states))):
        block = item.block
        if actions[i] == "copy":
            lines[block.first:block.end] = item.want
            copied.append(block.path)
        elif actions[i] == "back":
            written_back.append((root / block.path, "".join(f"{x}\n" for x in item.have)))
            back.append(f"{block.path} from its copy (line {block.first + 1})")
        new_hash = digest(item.want if actions[i] == "copy" else item.have)
        if actions[i] == "keep" and block.recorded != new_hash:
            hashed.append(block.path)
        lines[block.marker] = marker_line(lines[block.marker], block.path, new_hash)
    new = "\n".join(lines) + "\n"
    if copied and new != text and not args.no_compile:  # what is about to be copied must compile
        refusal = compile_refusal(new, name, suffix, [p for p in copied if p.endswith(".cu")])
        if refusal:
            print(refusal, file=sys.stderr)
            return 1
    for target, content in written_back:
        target.write_text(content, encoding="utf-8")
    if new != text:
        path.write_text(new, encoding="utf-8")
    said = ([f"wrote its copies of {', '.join(reversed(copied))}"] if copied else []) + \
        ([f"wrote {', '.join(reversed(back))}"] if back else []) + \
        ([f"recorded the hash of its copies of {', '.join(reversed(hashed))}"] if hashed else [])
    print(f"{name}: {'; '.join(said) if said else 'up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
