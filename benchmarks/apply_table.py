"""Write the configs a sweep measured into submission.py's per-GPU-model tables (``<BACKEND>_MEASURED``).

    python3 benchmarks/apply_table.py RESULTS.json              # write the entries
    python3 benchmarks/apply_table.py RESULTS.json --dry-run    # print the table's diff instead

RESULTS.json is the JSON of ``benchmarks/bench_kernel.py --sweep --json PATH`` (or of
``modal run modal_app.py --job sweep``, the same format): ``info`` (the GPU model in
``info.device``, the date, the kernel revision), ``command``, ``rows`` and ``sweeps``, one list
of records {backend, cfg, us, server_us, ratio, server_ratio, bad} per "MxKxL backend".

For each (backend, shape) of the sweeps the wrong configs and the cuda kernel's loads-only
probes are left out, and the rest ranked by the rule the tables' comments state: the lowest
time under the server's protocol (``server_us``: what the leaderboard times) wins, and where
several lie within 1% of it, the lowest clean device time (``us``, L2 cold by rotation) among
them. The winner becomes the entry of that GPU model in its backend's table
(``CUDA_MEASURED``, ``TRITON_MEASURED``: ``<BACKEND>_MEASURED``; a new block for a model the
table does not know; an entry that is already the winner is left as it is, comment included),
written in the config's canonical form with a one-line comment (its times and the sweep's
provenance); the report printed names the runner-up, the other backend's best and the entry
it replaces, for benchmarks/RESULTS.md. Configs recorded by position (the form before configs
had names) are read through the config type's ``of``.

The sweep must come from the same kernels: ``kernel_revision()`` hashes what the compiled
kernels depend on (``KERNEL_NAMES``: the CUDA source with its comments removed, the wrapper
template, the Triton kernel and the helpers it reaches, the launch choices and the config
fields' defaults; Python compared by its syntax tree without docstrings, so comments and
docstrings do not count), bench_kernel.py records it in ``info.kernel_revision``, and a sweep of
another revision is refused (``--force`` applies it anyway, with a warning) unless
``SAME_SASS`` lists the recorded revision as compiling to the same SASS as the current one.
Before anything is written, the new file is checked: the server's upload rules
(``harness.static_problems``), that it imports, that its tables hold exactly the intended
entries and that each config can run its shape.

Exit status: 0 done (or nothing to change), 1 the new file failed its checks (nothing
written), 2 the results cannot be applied (one line saying why).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import hashlib
import json
import math
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

if not __package__:  # run as `python3 benchmarks/NAME.py`: kitpath puts the kit's root on sys.path
    import kitpath  # noqa: F401

import harness  # noqa: E402  the upload rules and the loader (no torch at the top)

ROOT = Path(__file__).resolve().parent.parent
SUBMISSION = ROOT / "submission.py"
TABLE_SUFFIX = "_MEASURED"  # a backend's table: <BACKEND>_MEASURED = {GPU model: {(m, k, l): config}}
# Where server-protocol times lie within this fraction of the fastest, the clean time decides
# (the rule of the table's entries of 2026-11-25: both times drift by ~1% between runs).
TIE = 0.01
BACKEND_ORDER = ("cuda", "triton")  # order of the backends in the report
COMMENT_WIDTH = 116  # columns of a written line, indentation included (the project's limit is 120)
# What the kernel revision hashes: top-level definitions of submission.py by name (for a class,
# its fields only), and every top-level function decorated as a Triton kernel (``*jit``) with
# the top-level definitions it reaches.
KERNEL_NAMES = ("CUDA_SRC", "_CUDA_PARAMS", "_CUDA_ARGS", "_CUDA_DECODE_ID", "cuda_kernel", "triton_launch",
                "_TRITON_EVICT", "_TRITON_DECODE")
CONFIG_TYPES = ("CudaConfig", "TritonConfig")
# Kernel revisions recorded under the scheme of kit 2bc31c0 and before (the texts hashed with
# their docstrings and CUDA comments) whose kernels compile to the same SASS as a revision of
# this scheme: benchmarks/sass_dump.py on both files, every config of the tables and candidate
# lists, sm_90a and sm_100a, and every Triton variant, cc 90 and cc 100, no difference
# (2026-11-25, NVRTC 13.0, Triton 3.9.0). A sweep recording one of them applies to that revision.
# 7753f77595f0 is kit 2bc31c0's (which RESULTS.md records as compiling to the same SASS as the
# measured a37528e63d50 on the four configs it compared).
SAME_SASS = {"c94ac60702f4": ("7753f77595f0",)}


class Refused(Exception):
    """The results cannot be applied (message: one line saying why)."""


# ----------------------------------------------------------------------------- revisions

def _strip_docstrings(node: ast.AST) -> ast.AST:
    for inner in ast.walk(node):
        body = getattr(inner, "body", None)
        if (isinstance(inner, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            inner.body = body[1:] or [ast.Pass()]
    return node


def _strip_c_comments(source: str) -> str:
    """CUDA source without its comments and blank lines, each line's spacing normalised."""
    source = re.sub(r"/\*.*?\*/", " ", source, flags=re.S)
    lines = (re.sub(r"//.*", "", ln) for ln in source.splitlines())
    return "\n".join(" ".join(ln.split()) for ln in lines if ln.strip())


def _names_of(node: ast.stmt) -> set:
    """The names a top-level statement defines."""
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {n.id for tgt in node.targets for n in ast.walk(tgt) if isinstance(n, ast.Name)}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    return set()


def _is_jit(node: ast.stmt) -> bool:
    return isinstance(node, ast.FunctionDef) and any(
        (d.id if isinstance(d, ast.Name) else d.attr if isinstance(d, ast.Attribute) else "").endswith("jit")
        for d in node.decorator_list)


def _normalised(node: ast.stmt) -> str:
    if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str) and "\n" in node.value.value):
        return f"{ast.unparse(node.targets[0])} = <<{_strip_c_comments(node.value.value)}>>"
    if isinstance(node, ast.ClassDef):  # a config type: its fields and their defaults
        return "\n".join(ast.unparse(s) for s in node.body if isinstance(s, ast.AnnAssign))
    return ast.unparse(_strip_docstrings(node))


def _kernel_texts(text: str) -> dict:
    """{name: normalised text} of what the compiled kernels of a submission's text depend on."""
    body = ast.parse(text).body
    defs = {}
    for node in body:
        for name in _names_of(node):
            defs[name] = node
    found = {name: defs[name] for name in (*KERNEL_NAMES, *CONFIG_TYPES) if name in defs}
    missing = [n for n in (*KERNEL_NAMES, *CONFIG_TYPES) if n not in found]
    todo = [node for node in body if _is_jit(node)]
    if not todo:
        missing.append("a Triton kernel (a top-level @jit function)")
    if missing:
        raise ValueError(f"no top-level {', '.join(missing)} found")
    while todo:  # the Triton kernels and every top-level definition they reach
        node = todo.pop()
        for name in _names_of(node):
            if name in found and found[name] is not node:
                continue
            found[name] = node
        for ref in {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}:
            if ref in defs and ref not in found and isinstance(defs[ref], (ast.Assign, ast.FunctionDef)):
                todo.append(defs[ref])
    return {name: _normalised(node) for name, node in found.items()}


def kernel_revision(path: Path | str = SUBMISSION, text: str | None = None) -> str:
    """The first 12 hex digits of the sha256 of what the compiled kernels of a submission file
    (or of ``text``) depend on: what a measured config means. Comments and docstrings do not count."""
    texts = _kernel_texts(Path(path).read_text() if text is None else text)
    digest = hashlib.sha256()
    for name in sorted(texts):
        digest.update(f"{name}\n{texts[name]}\n\0".encode())
    return digest.hexdigest()[:12]


def kit_revision(root: Path | str = ROOT) -> str:
    """The git commit of the checkout at ``root`` (12 hex digits), with "-dirty" when tracked
    files differ from it; "unknown" where ``root`` is not a git checkout (or git is missing)."""
    root = Path(root)
    if not (root / ".git").exists():
        return "unknown"
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=60)
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if head.returncode or status.returncode:
        return "unknown"
    return head.stdout.strip() + ("-dirty" if status.stdout.strip() else "")


# ----------------------------------------------------------------------------- ranking

def usable(record: dict) -> bool:
    """A sweep record that may win: right (no ``bad``: wrong configs and probes carry one), a
    config, and both times measured."""
    times = (record.get("us"), record.get("server_us"))
    return (not record.get("bad") and record.get("cfg") is not None
            and all(isinstance(t, (int, float)) and math.isfinite(t) and t > 0 for t in times))


def rank(records: list) -> list:
    """The usable records, best first: repeatedly, of those left, the ones within ``TIE`` of
    the lowest server-protocol time, and of these the lowest clean time."""
    left = [r for r in records if usable(r)]
    out = []
    while left:
        fastest = min(r["server_us"] for r in left)
        best = min((r for r in left if r["server_us"] <= fastest * (1 + TIE)), key=lambda r: (r["us"], r["server_us"]))
        out.append(best)
        left.remove(best)
    return out


def cfg_text(cfg) -> str:
    return repr(cfg) if hasattr(cfg, "_fields") else "(" + ", ".join(str(x) for x in cfg) + ")"


def times_text(record: dict) -> str:
    return f"{record['server_us']:.2f} / {record['us']:.2f}"


# ----------------------------------------------------------------------------- results

def load_results(path: Path | str) -> dict:
    """bench_kernel.py's JSON, checked for what this script reads."""
    try:
        results = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise Refused(f"cannot read {path}: {exc}") from None
    if not isinstance(results, dict) or not isinstance(results.get("info"), dict) or "device" not in results["info"]:
        raise Refused(f"{path} is not bench_kernel.py's JSON (no info.device)")
    if not results.get("sweeps") or not any(results["sweeps"].values()):
        raise Refused(f"{path} holds no sweep: run bench_kernel.py with --sweep")
    return results


def check_revision(results: dict, current: str, force: bool) -> str | None:
    """None if the sweep's kernel revision is ``current`` (or compiles to its SASS: ``SAME_SASS``);
    else a warning (``force``) or Refused."""
    recorded = results["info"].get("kernel_revision")
    if recorded == current or recorded in SAME_SASS.get(current, ()):
        return None
    what = f"kernel revision {recorded}" if recorded else "no kernel revision"
    message = (f"the sweep records {what}, this submission.py is kernel revision {current}: its configs were "
               "measured on another kernel source")
    if not force:
        raise Refused(message + " (--force applies them anyway)")
    return "warning: " + message + "; applied anyway (--force)"


def picks(results: dict, mod) -> dict:
    """{(backend, m, k, l): {"ranked": [records], "records": [all records], "skipped": n}}
    of every swept (backend, shape) with a config to write (backends without configs, such as
    scaled_mm, are left out); each record's config read by the backend's config type of the
    submission module ``mod`` (a positional record too)."""
    out = {}
    for key, records in results["sweeps"].items():
        shape, backend = key.split()
        m, k, l = (int(x) for x in shape.split("x"))
        kind = getattr(mod.BACKENDS.get(backend), "config", None)
        if kind is None or all(r.get("cfg") is None for r in records):
            continue
        records = [dict(r, cfg=None if r.get("cfg") is None else kind.of(r["cfg"])) for r in records]
        ranked = rank(records)
        out[(backend, m, k, l)] = {"ranked": ranked, "records": records, "skipped": len(records) - len(ranked)}
    return out


def _order(key: tuple) -> tuple:
    backend = key[0]
    return (BACKEND_ORDER.index(backend) if backend in BACKEND_ORDER else len(BACKEND_ORDER), backend)


# ----------------------------------------------------------------------------- the tables' text

_MODULES = {}  # text -> its module


def submission_module(text: str):
    """The module of a submission's text (imported from a temporary file, once per text)."""
    if text not in _MODULES:
        with tempfile.TemporaryDirectory(prefix="apply_table_") as tmp:
            path = Path(tmp) / "submission.py"
            path.write_text(text)
            _MODULES[text] = harness.load_submission(path, f"_table_submission_{len(_MODULES)}", keep=False)
    return _MODULES[text]


def _assigned(tree: ast.Module, name: str):
    """The value node of the top-level assignment to ``name``, or None."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.value
    return None


def table_name(backend: str) -> str:
    return backend.upper() + TABLE_SUFFIX


def read_table(text: str) -> dict:
    """{GPU model: {(backend, m, k, l): config}} of every backend table of a submission's text."""
    out = {}
    for name, backend in submission_module(text).BACKENDS.items():
        for model, entries in (backend.measured or {}).items():
            out.setdefault(model, {}).update({(name, *shape): cfg for shape, cfg in entries.items()})
    return out


def _wrapped(text: str, indent: str, width: int = COMMENT_WIDTH) -> list:
    """``text`` (one line of code) broken after commas to fit ``width``, continuation lines
    aligned after the first opening parenthesis of a config (``Name(``)."""
    line = indent + text
    if len(line) <= width:
        return [line]
    at = re.search(r"[A-Za-z]+\(", line).end()
    out, cur = [], line[:at]
    for part in re.split(r"(?<=, )", line[at:]):
        if len(cur) + len(part.rstrip()) > width and cur.strip():
            out.append(cur.rstrip())
            cur = " " * at
        cur += part
    return out + [cur]


def _comment_lines(text: str, indent: str) -> list:
    wrapped = textwrap.wrap(text, COMMENT_WIDTH - len(indent) - 2, break_long_words=False, break_on_hyphens=False)
    return [indent + "# " + line for line in wrapped]


def entry_comment(pick: dict, info: dict) -> str:
    """The one-line comment of a written entry: its times and the sweep's provenance."""
    best = pick["ranked"][0]
    return (f"server {best['server_us']:.2f} us, clean {best['us']:.2f}: sweep of {info.get('date', '?')}, "
            f"kit {info.get('kit_revision') or 'unknown'}, kernel {info.get('kernel_revision', 'unknown')}")


def record_text(pick: dict, others: dict, former) -> str:
    """What the report says of a written entry, for the record: times (server / clean) and
    ceilings of the winner, the runner-up, the other backends' best, the entry it replaces."""
    ranked = pick["ranked"]
    best = ranked[0]
    head = f"server {best['server_us']:.2f} us, clean {best['us']:.2f}"
    if best.get("server_ratio") and best.get("ratio"):
        sp, cp = (f" {best[k]}" if best.get(k) else "" for k in ("server_ceiling_policy", "ceiling_policy"))
        head += (f" (ceilings {best['server_ratio'] * best['server_us']:.2f}{sp} / "
                 f"{best['ratio'] * best['us']:.2f}{cp})")
    wrong = sum(1 for r in pick["records"] if r.get("bad") and r["bad"] != ["probe"])
    parts = [head + f", the best of {len(ranked)} configs" + (f" ({wrong} more wrong)" if wrong else "")]
    if len(ranked) > 1:
        runner = ranked[1]
        parts.append(("next the former entry " if runner["cfg"] == former else "next ")
                     + f"{cfg_text(runner['cfg'])} {times_text(runner)}"
                     + (" (within 1% under the server's protocol, slower clean)"
                        if runner["server_us"] < best["server_us"] else ""))
    for backend, other in sorted(others.items()):
        parts.append(f"{backend}'s best {times_text(other)}")
    if former is not None and (len(ranked) < 2 or ranked[1]["cfg"] != former):
        parts.append(f"the former entry {cfg_text(former)} " + former_text(former, pick))
    return "; ".join(parts)


def former_text(former, pick: dict) -> str:
    """How the entry being replaced did in this sweep."""
    for i, r in enumerate(pick["ranked"]):
        if r["cfg"] == former:
            return f"{times_text(r)} in the same run (rank {i + 1})"
    if any(r["cfg"] == former for r in pick["records"]):
        return "was wrong or unmeasured in this run"
    return "was not swept"


def _entry_lines(indent: str, key: tuple, cfg) -> list:
    """``(7168, 16384, 1): CudaConfig(lpr=32, ...),`` as the tables write entries."""
    return _wrapped(f"({', '.join(map(str, key[1:]))}): {cfg_text(cfg)},", indent)


def plan(text: str, results: dict) -> tuple:
    """(new text, report lines, {key: config} written) of applying ``results`` to a
    submission's ``text``."""
    info = results["info"]
    model = info["device"]
    mod = submission_module(text)
    swept = picks(results, mod)
    tree = ast.parse(text)
    lines = text.splitlines()
    current = read_table(text).get(model, {})
    best_of = {key: p["ranked"][0] for key, p in swept.items() if p["ranked"]}
    report = [f"{model}: sweep of {info.get('date', '?')}, kit {info.get('kit_revision') or 'unknown'}, "
              f"kernel {info.get('kernel_revision', 'unknown')}"]
    written, new_entries, edits = {}, {}, []  # edits: (start, end, lines), 0-based, end exclusive
    for key in sorted(swept, key=_order):  # backends in table order, shapes in the sweep's
        pick = swept[key]
        label = f"  {key[0]} {'x'.join(map(str, key[1:]))}"
        if not pick["ranked"]:
            report.append(f"{label}: no usable record ({pick['skipped']} wrong or probes): left as it is")
            continue
        best = pick["ranked"][0]
        cfg = best["cfg"]
        former = current.get(key)
        if former == cfg:
            report.append(f"{label}: unchanged {cfg_text(cfg)}, the best of {len(pick['ranked'])} "
                          f"({times_text(best)} us)")
            continue
        others = {b: r for (b, *shape), r in best_of.items() if tuple(shape) == key[1:] and b != key[0]}
        written[key] = cfg
        said = record_text(pick, others, former)
        if former is None:
            report.append(f"{label}: new {cfg_text(cfg)}: {said}")
            new_entries.setdefault(key[0], []).append(key)
            continue
        report.append(f"{label}: {cfg_text(former)} -> {cfg_text(cfg)}: {said}")
        block = _model_block(tree, key[0], model)
        knode = next(kn for kn in block.keys if ast.literal_eval(kn) == tuple(key[1:]))
        vnode = block.values[block.keys.index(knode)]
        start = knode.lineno - 1
        while start > 0 and lines[start - 1].strip().startswith("#"):
            start -= 1
        indent = lines[knode.lineno - 1][:knode.col_offset]
        edits.append((start, vnode.end_lineno, _comment_lines(entry_comment(pick, info), indent)
                      + _entry_lines(indent, key, cfg)))
    for backend, keys in new_entries.items():
        table_node = _table_node(tree, backend)
        block = _model_block(tree, backend, model)
        if block is not None:
            indent = lines[block.keys[0].lineno - 1][:block.keys[0].col_offset] if block.keys else " " * 8
            at = block.end_lineno - 1
            body = []
            for key in keys:
                body += _comment_lines(entry_comment(swept[key], info), indent)
                body += _entry_lines(indent, key, written[key])
            edits.append((at, at, body))
            continue
        outer = lines[table_node.keys[0].lineno - 1][:table_node.keys[0].col_offset] if table_node.keys else " " * 4
        inner = outer + " " * 4
        body = [f"{outer}{json.dumps(model)}: {{  # bench_kernel.py --sweep of {info.get('date', '?')}"]
        for key in keys:
            body += _comment_lines(entry_comment(swept[key], info), inner) + _entry_lines(inner, key, written[key])
        body.append(f"{outer}}},")
        edits.append((table_node.end_lineno - 1, table_node.end_lineno - 1, body))
    new_lines = list(lines)
    for start, end, repl in sorted(edits, key=lambda e: (e[0], e[1] > e[0]), reverse=True):
        new_lines[start:end] = repl
    new_text = "\n".join(new_lines) + ("\n" if text.endswith("\n") else "")
    return new_text, report, written


def _table_node(tree: ast.Module, backend: str) -> ast.Dict:
    node = _assigned(tree, table_name(backend))
    if not isinstance(node, ast.Dict):
        raise Refused(f"submission.py has no {table_name(backend)} = {{...}} table")
    return node


def _model_block(tree: ast.Module, backend: str, model: str):
    """The ``{(m, k, l): config}`` node of ``model`` in ``backend``'s table, or None."""
    table = _table_node(tree, backend)
    for k, v in zip(table.keys, table.values, strict=True):
        if isinstance(k, ast.Constant) and k.value == model and isinstance(v, ast.Dict):
            return v
    return None


# ----------------------------------------------------------------------------- checks

def _fits(mod, key: tuple, cfg) -> bool:
    """Whether ``cfg`` can run its shape: its type's ``problem()`` and ``shape_problem(m, k)``."""
    backend, m, k, l = key
    return not (cfg.problem() or cfg.shape_problem(m, k))


def verify(old_text: str, new_text: str, model: str, written: dict) -> list:
    """What is wrong with the new text (empty: nothing): the server's upload rules, the import,
    the tables (exactly the old ones with the written entries), the configs' fit, the kernel
    revision (the edit must not touch the kernels)."""
    problems = []
    expected = read_table(old_text)
    expected.setdefault(model, {}).update(written)
    with tempfile.TemporaryDirectory(prefix="apply_table_") as tmp:
        path = Path(tmp) / "submission.py"
        path.write_text(new_text)
        problems += harness.static_problems(path)
    try:
        table = read_table(new_text)
    except Exception as exc:  # noqa: BLE001 - any import failure is the finding
        return problems + [f"the new submission.py does not import: {type(exc).__name__}: {exc}"]
    if table != expected:
        problems.append("the new tables are not the old ones with the written entries")
    problems += [f"{key[0]} config {cfg_text(cfg)} does not fit {'x'.join(map(str, key[1:]))}"
                 for key, cfg in written.items() if not _fits(None, key, cfg)]
    if kernel_revision(text=new_text) != kernel_revision(text=old_text):
        problems.append("the edit changed the kernel revision")
    return problems


# ----------------------------------------------------------------------------- main

def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python3 benchmarks/apply_table.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("results", metavar="RESULTS.json", help="the JSON of bench_kernel.py --sweep --json")
    ap.add_argument("--dry-run", action="store_true", help="print the diff of submission.py instead of writing it")
    ap.add_argument("--force", action="store_true",
                    help="apply a sweep of another kernel revision (or one that records none), with a warning")
    ap.add_argument("--submission", metavar="PATH", default=str(SUBMISSION),
                    help="the file whose table is written (default: this kit's submission.py)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    path = Path(args.submission)
    try:
        old = path.read_text()
        results = load_results(args.results)
        warning = check_revision(results, kernel_revision(text=old), args.force)
        new, report, written = plan(old, results)
    except (Refused, OSError, ValueError, TypeError, SyntaxError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if warning:
        print(warning, file=sys.stderr)
    print("\n".join(report))
    if new == old:
        print(f"{path}: nothing to change")
        return 0
    problems = verify(old, new, results["info"]["device"], written)
    if problems:
        print(f"error: the new {path.name} fails its checks, nothing written: " + "; ".join(problems), file=sys.stderr)
        return 1
    if args.dry_run:
        sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                                   f"a/{path.name}", f"b/{path.name}"))
        return 0
    path.write_text(new)
    print(f"wrote {len(written)} entries of {results['info']['device']} into {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
