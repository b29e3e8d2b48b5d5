"""Write the configs a sweep measured into submission.py's per-GPU-model table (``_MEASURED``).

    python3 benchmarks/apply_table.py RESULTS.json              # write the entries
    python3 benchmarks/apply_table.py RESULTS.json --dry-run    # print the table's diff instead

RESULTS.json is the JSON of ``benchmarks/bench_kernel.py --sweep --json PATH`` (or of
``modal run modal_app.py --job sweep``, the same format): ``info`` (the GPU model in
``info.device``, the date, the kernel revision), ``command``, ``rows`` and ``sweeps``, one list
of records {backend, cfg, us, server_us, ratio, server_ratio, bad} per "MxKxL backend".

For each (backend, shape) of the sweeps the wrong configs and the cuda kernel's loads-only
probes are left out, and the rest ranked by the rule the table's comments state: the lowest
time under the server's protocol (``server_us``: what the leaderboard times) wins, and where
several lie within 1% of it, the lowest clean device time (``us``, L2 cold by rotation) among
them. The winner becomes the entry of that GPU model (a new block for a model the table does
not know; an entry that is already the winner is left as it is, comment included), with a
comment giving its times and read ceilings (server and clean), the runner-up, the other
backend's best, the entry it replaces, the sweep's date and the kit and kernel revisions.

The sweep must come from the same kernel source: ``kernel_revision()`` hashes the kernel
texts of submission.py (``_CUDA_SRC``, the cuda kernel's wrapper template, the Triton kernel
block and the constants that pick its variant; comment lines aside), bench_kernel.py records
it in ``info.kernel_revision``, and a sweep of another revision is refused (``--force``
applies it anyway, with a warning). Before anything is written, the new file is checked: the
server's upload rules (``eval.static_problems``), that it imports, that its table holds
exactly the intended entries and that each config fits its shape.

Exit status: 0 done (or nothing to change), 1 the new file failed its checks (nothing
written), 2 the results cannot be applied (one line saying why).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import hashlib
import importlib.util
import json
import math
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # eval.py (the upload rules) and task.py (which a submission imports)
    sys.path.insert(0, str(ROOT))
SUBMISSION = ROOT / "submission.py"
TABLE = "_MEASURED"
# Where server-protocol times lie within this fraction of the fastest, the clean time decides
# (the rule of the table's entries of 2026-11-25: both times drift by ~1% between runs).
TIE = 0.01
BACKEND_ORDER = ("cuda", "triton")  # order of the entries within a GPU model's block
COMMENT_WIDTH = 104  # columns of a written comment line, indentation included
# The texts whose hash is the kernel revision: top-level assignments and functions of
# submission.py by name, and the top-level block that defines the Triton kernel.
KERNEL_NAMES = ("_CUDA_SRC", "_CUDA_PARAMS", "_CUDA_ARGS", "_CUDA_SHAPE", "cuda_kernel",
                "_TRITON_EVICT", "_DECODES", "_TRITON_DECODE", "_TRITON_PLAIN")
TRITON_KERNEL = "_nvfp4_gemv_kernel"


class Refused(Exception):
    """The results cannot be applied (message: one line saying why)."""


# ----------------------------------------------------------------------------- revisions

def _defined_names(node: ast.stmt) -> set:
    """Names a top-level statement defines, nested blocks (if/try) included."""
    names = set()
    for sub in ast.walk(node):
        if isinstance(sub, (ast.FunctionDef, ast.ClassDef)):
            names.add(sub.name)
        elif isinstance(sub, ast.Assign):
            names.update(t.id for t in sub.targets if isinstance(t, ast.Name))
    return names


def _kernel_texts(text: str) -> dict:
    """{name: source text} of the kernel sources of a submission's text."""
    lines = text.splitlines()
    found = {}
    for node in ast.parse(text).body:
        segment = lines[node.lineno - 1:node.end_lineno]
        if isinstance(node, ast.Assign):
            own = {t.id for t in node.targets if isinstance(t, ast.Name)}
        else:
            own = {node.name} if isinstance(node, ast.FunctionDef) else set()
        for name in own & set(KERNEL_NAMES):
            found[name] = segment
        if TRITON_KERNEL in _defined_names(node):
            found[TRITON_KERNEL] = segment
    missing = [n for n in (*KERNEL_NAMES, TRITON_KERNEL) if n not in found]
    if missing:
        raise ValueError(f"no top-level {', '.join(missing)} found")
    # Python comment lines do not count; the CUDA source is a string, whose '#' lines
    # (#pragma, #define) are code.
    return {name: "\n".join(ln for ln in seg if name == "_CUDA_SRC" or not ln.strip().startswith("#"))
            for name, seg in found.items()}


def kernel_revision(path: Path | str = SUBMISSION, text: str | None = None) -> str:
    """The first 12 hex digits of the sha256 of the kernel sources of a submission file (or of
    ``text``): what a measured config means. Comment lines of the Python parts do not count."""
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


_GLUE = "\x00"  # holds a config's fields together while a comment is wrapped


def cfg_text(cfg, glue: str = " ") -> str:
    return "(" + f",{glue}".join(str(x) for x in cfg) + ")"


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
    """None if the sweep's kernel revision is ``current``; else a warning (``force``) or Refused."""
    recorded = results["info"].get("kernel_revision")
    if recorded == current:
        return None
    what = f"kernel revision {recorded}" if recorded else "no kernel revision"
    message = (f"the sweep records {what}, this submission.py is kernel revision {current}: its configs were "
               "measured on another kernel source")
    if not force:
        raise Refused(message + " (--force applies them anyway)")
    return "warning: " + message + "; applied anyway (--force)"


def _normalized(backend: str, cfg, cuda_shape: tuple) -> tuple:
    """A config as the table holds it: cuda configs with all nine fields (five-field ones take
    the kernel's default (V, LOAD, PIPE, MINB), as cuda_kernel does)."""
    cfg = tuple(cfg)
    if backend == "cuda" and 5 <= len(cfg) < 9:
        cfg += tuple(cuda_shape)[len(cfg) - 5:]
    return cfg


def picks(results: dict, cuda_shape: tuple) -> dict:
    """{(backend, m, k, l): {"ranked": [records], "records": [all records], "skipped": n}}
    of every swept (backend, shape) with a config to write (backends without configs, such as
    scaled_mm, are left out)."""
    out = {}
    for key, records in results["sweeps"].items():
        shape, backend = key.split()
        m, k, l = (int(x) for x in shape.split("x"))
        records = [dict(r, cfg=None if r.get("cfg") is None else _normalized(backend, r["cfg"], cuda_shape))
                   for r in records]
        if all(r["cfg"] is None for r in records):
            continue
        ranked = rank(records)
        out[(backend, m, k, l)] = {"ranked": ranked, "records": records, "skipped": len(records) - len(ranked)}
    return out


def _order(key: tuple) -> tuple:
    backend = key[0]
    return (BACKEND_ORDER.index(backend) if backend in BACKEND_ORDER else len(BACKEND_ORDER), backend)


# ----------------------------------------------------------------------------- the table's text

def _assigned(tree: ast.Module, name: str):
    """The value node of the top-level assignment to ``name``, or None."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.value
    return None


def _table_node(tree: ast.Module) -> ast.Dict:
    node = _assigned(tree, TABLE)
    if not isinstance(node, ast.Dict):
        raise Refused(f"submission.py has no {TABLE} = {{...}} table")
    return node


def read_table(text: str) -> dict:
    """The table of a submission's text, as a dict (without importing it)."""
    return ast.literal_eval(_table_node(ast.parse(text)))


def _cuda_shape(text: str) -> tuple:
    node = _assigned(ast.parse(text), "_CUDA_SHAPE")
    if node is None:
        raise Refused("submission.py has no _CUDA_SHAPE")
    return tuple(ast.literal_eval(node))


def _comment_lines(text: str, indent: str) -> list:
    """``text`` as comment lines, wrapped between words (never inside a config)."""
    wrapped = textwrap.wrap(text, COMMENT_WIDTH - len(indent) - 2, break_long_words=False, break_on_hyphens=False)
    return [indent + "# " + line.replace(_GLUE, " ") for line in wrapped]


def entry_comment(pick: dict, others: dict, former, info: dict) -> str:
    """The comment of a written entry: times (server / clean) and ceilings of the winner, the
    runner-up, the other backends' best, the entry it replaces, the sweep's provenance."""
    ranked = pick["ranked"]
    best = ranked[0]
    head = f"server {best['server_us']:.2f} us, clean {best['us']:.2f}"
    if best.get("server_ratio") and best.get("ratio"):
        head += (f" (ceilings {best['server_ratio'] * best['server_us']:.2f} / "
                 f"{best['ratio'] * best['us']:.2f})")
    wrong = sum(1 for r in pick["records"] if r.get("bad") and r["bad"] != ["probe"])
    parts = [head + f", the best of {len(ranked)} configs" + (f" ({wrong} more wrong)" if wrong else "")]
    if len(ranked) > 1:
        runner = ranked[1]
        parts.append(("next the former entry " if runner["cfg"] == former else "next ")
                     + f"{cfg_text(runner['cfg'], _GLUE)} {times_text(runner)}"
                     + (" (within 1% under the server's protocol, slower clean)"
                        if runner["server_us"] < best["server_us"] else ""))
    for backend, other in sorted(others.items()):
        parts.append(f"{backend}'s best {times_text(other)}")
    if former is not None and (len(ranked) < 2 or ranked[1]["cfg"] != former):
        parts.append(f"the former entry {cfg_text(former, _GLUE)} " + former_text(former, pick))
    kit = info.get("kit_revision") or "unknown"
    return ("; ".join(parts) + f". bench_kernel.py --sweep of {info.get('date', 'an unknown date')}, kit {kit}, "
            f"kernel revision {info.get('kernel_revision', 'unknown')}.")


def former_text(former: tuple, pick: dict) -> str:
    """How the entry being replaced did in this sweep."""
    for i, r in enumerate(pick["ranked"]):
        if r["cfg"] == former:
            return f"{times_text(r)} in the same run (rank {i + 1})"
    if any(r["cfg"] == former for r in pick["records"]):
        return "was wrong or unmeasured in this run"
    return "was not swept"


def _entry_line(indent: str, key: tuple, cfg: tuple) -> str:
    """``("cuda", 7168, 16384, 1): (32, 2, 8, 2, 2, 2, 2, 0, 1),`` as the table writes entries."""
    return f"{indent}({json.dumps(key[0])}, {', '.join(map(str, key[1:]))}): {cfg_text(cfg)},"


def plan(text: str, results: dict) -> tuple:
    """(new text, report lines, {key: config} written) of applying ``results`` to a
    submission's ``text``."""
    info = results["info"]
    model = info["device"]
    cuda_shape = _cuda_shape(text)
    swept = picks(results, cuda_shape)
    tree = ast.parse(text)
    table_node = _table_node(tree)
    lines = text.splitlines()
    block = None
    for k, v in zip(table_node.keys, table_node.values, strict=True):
        if isinstance(k, ast.Constant) and k.value == model and isinstance(v, ast.Dict):
            block = v
    current = ast.literal_eval(block) if block is not None else {}
    best_of = {key: p["ranked"][0] for key, p in swept.items() if p["ranked"]}
    report = [f"{model}: sweep of {info.get('date', '?')}, kit {info.get('kit_revision') or 'unknown'}, "
              f"kernel {info.get('kernel_revision', 'unknown')}"]
    written, new_entries, edits = {}, [], []  # edits: (start, end, lines), 0-based, end exclusive
    for key in sorted(swept, key=_order):  # backends in table order, shapes in the sweep's
        pick = swept[key]
        label = f"  {key[0]} {'x'.join(map(str, key[1:]))}"
        if not pick["ranked"]:
            report.append(f"{label}: no usable record ({pick['skipped']} wrong or probes): left as it is")
            continue
        best = pick["ranked"][0]
        cfg = best["cfg"]
        former = current.get(key)
        former = None if former is None else _normalized(key[0], former, cuda_shape)
        if former == cfg:
            report.append(f"{label}: unchanged {cfg_text(cfg)}, the best of {len(pick['ranked'])} "
                          f"({times_text(best)} us)")
            continue
        others = {b: r for (b, *shape), r in best_of.items() if tuple(shape) == key[1:] and b != key[0]}
        comment = entry_comment(pick, others, former, info)
        written[key] = cfg
        if former is None:
            report.append(f"{label}: new {cfg_text(cfg)} ({times_text(best)} us)")
            new_entries.append((key, comment))
            continue
        report.append(f"{label}: {cfg_text(former)} -> {cfg_text(cfg)} ({times_text(best)} us; the former "
                      f"{former_text(former, pick)})")
        knode = next(kn for kn in block.keys if ast.literal_eval(kn) == key)
        vnode = block.values[block.keys.index(knode)]
        start = knode.lineno - 1
        while start > 0 and lines[start - 1].strip().startswith("#"):
            start -= 1
        indent = lines[knode.lineno - 1][:knode.col_offset]
        edits.append((start, vnode.end_lineno, _comment_lines(comment, indent) + [_entry_line(indent, key, cfg)]))
    if new_entries and block is not None:
        indent = lines[block.keys[0].lineno - 1][:block.keys[0].col_offset] if block.keys else " " * 8
        for key, comment in new_entries:
            same = [v.end_lineno for kn, v in zip(block.keys, block.values, strict=True)
                    if ast.literal_eval(kn)[0] == key[0]]
            at = max(same) if same else block.end_lineno - 1
            edits.append((at, at, _comment_lines(comment, indent) + [_entry_line(indent, key, written[key])]))
    elif new_entries:
        outer = lines[table_node.keys[0].lineno - 1][:table_node.keys[0].col_offset] if table_node.keys else " " * 4
        inner = outer + " " * 4
        body = [f"{outer}{json.dumps(model)}: {{  # bench_kernel.py --sweep of {info.get('date', '?')}"]
        for key, comment in new_entries:
            body += _comment_lines(comment, inner) + [_entry_line(inner, key, written[key])]
        body.append(f"{outer}}},")
        edits.append((table_node.end_lineno - 1, table_node.end_lineno - 1, body))
    new_lines = list(lines)
    for start, end, repl in sorted(edits, key=lambda e: (e[0], e[1] > e[0]), reverse=True):
        new_lines[start:end] = repl
    new_text = "\n".join(new_lines) + ("\n" if text.endswith("\n") else "")
    return new_text, report, written


# ----------------------------------------------------------------------------- checks

def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _fits(mod, key: tuple, cfg: tuple) -> bool:
    backend, m, k, l = key
    if backend == "cuda":
        return mod._cuda_fits(cfg, m, k) and cfg[0] in (2, 4, 8, 16, 32)
    if backend == "triton":
        return len(cfg) == 4 and m % cfg[0] == 0 and all(x >= 1 for x in cfg)
    return True


def verify(old_text: str, new_text: str, model: str, written: dict) -> list:
    """What is wrong with the new text (empty: nothing): the server's upload rules, the import,
    the table (exactly the old one with the written entries), the configs' fit, the kernel
    revision (the edit must not touch the kernels)."""
    import eval as kit_eval  # the upload rules, from the kit's harness

    problems = []
    expected = read_table(old_text)
    expected.setdefault(model, {}).update(written)
    with tempfile.TemporaryDirectory(prefix="apply_table_") as tmp:
        path = Path(tmp) / "submission.py"
        path.write_text(new_text)
        problems += kit_eval.static_problems(path)
        try:
            mod = _load(path, "_applied_submission")
        except Exception as exc:  # noqa: BLE001 - any import failure is the finding
            return problems + [f"the new submission.py does not import: {type(exc).__name__}: {exc}"]
    table = getattr(mod, TABLE, None)
    if table != expected:
        problems.append(f"the new {TABLE} is not the old table with the written entries")
    problems += [f"{key[0]} config {cfg_text(cfg)} does not fit {'x'.join(map(str, key[1:]))}"
                 for key, cfg in written.items() if not _fits(mod, key, cfg)]
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
    except (Refused, OSError, ValueError, SyntaxError) as exc:
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
