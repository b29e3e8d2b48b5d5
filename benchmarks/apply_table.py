"""Write the configs a sweep measured into the tables (kernels/tables.json), then copy them into
submission.py (``python3 eval.py bundle``).

    python3 benchmarks/apply_table.py RESULTS.json              # write the entries
    python3 benchmarks/apply_table.py RESULTS.json --dry-run    # print the tables' diff instead

RESULTS.json is the JSON of ``benchmarks/bench_kernel.py --sweep --json PATH`` (or of
``modal run modal_app.py --job sweep``, the same format): ``info`` (the GPU model in
``info.device``, the date, the kernel revision, the kit revision), ``command``, ``rows`` and
``sweeps``, one list of records {backend, cfg, us, server_us, ratio, server_ratio, bad} per
"MxKxL backend".

For each (backend, shape) of the sweeps the wrong configs and the cuda kernel's loads-only
probes are left out, and the rest ranked by the tables' rule: the lowest time under the
server's protocol (``server_us``: what the leaderboard times) wins, and where several lie within
1% of it, the lowest clean device time (``us``, L2 cold by rotation) among them. The winner
becomes the entry of that GPU model in its backend's table (a new block for a model the table
does not know; an entry already holding the winner, measured with this kernel, is left as it
is), with its record: the kernel revision the sweep recorded, the kit revision, the date and both
times. An entry retired from the tables for the same backend, model and shape is removed (the
new measurement replaces it). The report printed names the runner-up, the other backend's best
and the entry it replaces, for benchmarks/RESULTS.md. Configs recorded by position (the form
before configs had names) are read through the config type's ``of``.

The sweep must come from the same kernels: ``kernel_revision()`` (submission.py's own function:
a hash of what the compilers see) is what bench_kernel.py records in ``info.kernel_revision``,
and a sweep of another revision is refused (``--force`` applies it anyway, with a warning, its entries
naming the current revision and the sweep's as ``forced_from``) unless
kernels/same_sass.json proves, for every backend it writes, that the recorded revision compiles
to the same SASS as the current one (``submission.same_sass``). Before anything is written, the
new submission.py (the tables copied in) is checked: the server's upload rules
(``harness.static_problems``), that it imports, that its tables hold exactly the intended entries,
that each config can run its shape, that the kernel revision did not move and that no written
entry is stale. A submission.py whose copies differ from their sources is refused first, in one
line naming the side that changed and the ``python3 eval.py bundle`` command that mends it
(``bundle.state``): like bundle, this never overwrites text it did not write, and its tables name
one kernel revision.

Exit status: 0 done (or nothing to change), 1 the new file failed its checks (nothing
written), 2 the results cannot be applied (one line saying why).
"""

from __future__ import annotations

import argparse
import copy
import difflib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

if not __package__:  # run as `python3 benchmarks/NAME.py`: kitpath puts the kit's root on sys.path
    import kitpath  # noqa: F401

import harness  # noqa: E402  the upload rules and the loader (no torch at the top)

ROOT = Path(__file__).resolve().parent.parent
SUBMISSION = ROOT / "submission.py"
TABLES = Path("kernels") / "tables.json"  # beside the submission file
# Where server-protocol times lie within this fraction of the fastest, the clean time decides
# (the rule of the table's entries of 2026-11-25: both times drift by ~1% between runs).
TIE = 0.01
BACKEND_ORDER = ("cuda", "triton")  # order of the backends in the report
ENV_KIT_REVISION = "NVFP4_GEMV_KIT_REVISION"


class Refused(Exception):
    """The results cannot be applied (message: one line saying why)."""


# ----------------------------------------------------------------------------- revisions

def kernel_revision(path: Path | str = SUBMISSION, text: str | None = None) -> str:
    """The kernel revision of a submission file (or of ``text``): its own ``kernel_revision()``,
    the hash of what the compilers see (comments and layout do not count)."""
    mod = submission_module(Path(path).read_text() if text is None else text)
    if not hasattr(mod, "kernel_revision"):
        raise ValueError("the submission has no kernel_revision() (a file from before kernel revisions were "
                         "submission.py's own)")
    return mod.kernel_revision()


def kit_revision(root: Path | str = ROOT) -> str:
    """The git commit of the checkout at ``root`` (12 hex digits), with "-dirty" when tracked
    files differ from it; "unknown" where ``root`` is not a git checkout (or git is missing).
    ``NVFP4_GEMV_KIT_REVISION`` overrides it: a copy of the tree whose .git is not the tree's own
    (a remote GPU machine's copy of a working tree) is told its revision by whoever made it."""
    if os.environ.get(ENV_KIT_REVISION):
        return os.environ[ENV_KIT_REVISION]
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


def check_revision(results: dict, mod, backends, force: bool) -> str | None:
    """None if the sweep's kernel revision is the submission module ``mod``'s own, or one that
    kernels/same_sass.json proves equal to it for every backend in ``backends``; else a warning
    (``force``) or Refused."""
    recorded = results["info"].get("kernel_revision")
    current = mod.kernel_revision()
    if recorded and all(mod.same_sass(b, recorded) for b in backends):
        return None
    what = f"kernel revision {recorded}" if recorded else "no kernel revision"
    message = (f"the sweep records {what}, this submission.py is kernel revision {current}: its configs were "
               "measured on another kernel (kernels/same_sass.json proves no SASS identity for "
               f"{', '.join(sorted(backends)) or 'it'})")
    if not force:
        raise Refused(message + " (--force applies them anyway)")
    return ("warning: " + message + f"; applied anyway (--force): the entries name {current}, the sweep's revision "
            "kept as their forced_from")


def picks(results: dict, mod) -> dict:
    """{(backend, m, k, l): {"ranked": [records], "records": [all records], "skipped": n}}
    of every swept (backend, shape) with a config to write (backends without configs, such as
    scaled_mm, are left out); each record's config read by the backend's config type of the
    submission module ``mod`` (a positional record too). A config that names no decode ran with the
    GPU's default one (its type's ``with_decode`` at the sweep's compute capability), and is written so."""
    out = {}
    capability = tuple(results.get("info", {}).get("capability") or ())
    for key, records in results["sweeps"].items():
        shape, backend = key.split()
        m, k, l = (int(x) for x in shape.split("x"))
        kind = getattr(mod.BACKENDS.get(backend), "config", None)
        if kind is None or all(r.get("cfg") is None for r in records):
            continue

        def read(cfg, kind=kind):
            cfg = kind.of(cfg)
            if capability and getattr(cfg, "decode", "") is None and hasattr(cfg, "with_decode"):
                cfg = cfg.with_decode(capability)
            return cfg

        records = [dict(r, cfg=None if r.get("cfg") is None else read(r["cfg"])) for r in records]
        ranked = rank(records)
        out[(backend, m, k, l)] = {"ranked": ranked, "records": records, "skipped": len(records) - len(ranked)}
    return out


def _order(key: tuple) -> tuple:
    backend = key[0]
    return (BACKEND_ORDER.index(backend) if backend in BACKEND_ORDER else len(BACKEND_ORDER), backend)


# ----------------------------------------------------------------------------- the tables

_MODULES = {}  # text -> its module


def submission_module(text: str):
    """The module of a submission's text (imported from a temporary file, once per text)."""
    if text not in _MODULES:
        with tempfile.TemporaryDirectory(prefix="apply_table_") as tmp:
            path = Path(tmp) / "submission.py"
            path.write_text(text)
            _MODULES[text] = harness.load_submission(path, f"_table_submission_{len(_MODULES)}", keep=False)
    return _MODULES[text]


def read_table(text: str) -> dict:
    """{GPU model: {(backend, m, k, l): config}} of every backend table of a submission's text."""
    out = {}
    for name, backend in submission_module(text).BACKENDS.items():
        for model, entries in (backend.measured or {}).items():
            out.setdefault(model, {}).update({(name, *shape): cfg for shape, cfg in entries.items()})
    return out


def config_text(cfg) -> str:
    """A config as the tables write it: its canonical form's fields, ``name=value`` (what
    NVFP4_GEMV_CONFIG and the config types' ``parse`` take)."""
    inner = repr(cfg)[len(type(cfg).__name__) + 1:-1]
    return inner.replace(" ", "").replace('"', "")


def dump_tables(tables: dict) -> str:
    """kernels/tables.json's text: two-space indents, number lists on one line."""
    text = json.dumps(tables, indent=2, ensure_ascii=False)
    return re.sub(r"\[\s+([-\d.,\s]+?)\s+\]", lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]",
                  text) + "\n"


def entry_record(key: tuple, cfg, pick: dict, info: dict, forced: str | None = None) -> dict:
    """A written entry: the shape, the config, the kernel revision the sweep recorded, the kit
    revision, the date, both times of the winner. ``forced`` (--force): the current revision,
    which the entry then names, the sweep's kept as ``forced_from``."""
    best = pick["ranked"][0]
    entry = {"shape": list(key[1:]), "config": config_text(cfg), "kernel": forced or info.get("kernel_revision"),
             "kit": info.get("kit_revision") or "unknown", "date": info.get("date", "?"),
             "server_us": round(best["server_us"], 2), "clean_us": round(best["us"], 2),
             "sweep": "bench_kernel.py --sweep"}
    if forced:
        entry["forced_from"] = info.get("kernel_revision") or "no kernel revision"
    return entry


def plan(tables: dict, mod, results: dict, forced: str | None = None) -> tuple:
    """(new tables, report lines, {key: config} written) of applying ``results`` to the tables
    (kernels/tables.json's content) of the submission module ``mod``; ``forced``: see
    ``entry_record``."""
    info = results["info"]
    model = info["device"]
    new = copy.deepcopy(tables)
    swept = picks(results, mod)
    best_of = {key: p["ranked"][0] for key, p in swept.items() if p["ranked"]}
    report = [f"{model}: sweep of {info.get('date', '?')}, kit {info.get('kit_revision') or 'unknown'}, "
              f"kernel {info.get('kernel_revision', 'unknown')}"]
    written = {}
    for key in sorted(swept, key=_order):  # backends in table order, shapes in the sweep's
        pick = swept[key]
        backend, shape = key[0], list(key[1:])
        label = f"  {backend} {'x'.join(map(str, shape))}"
        if not pick["ranked"]:
            report.append(f"{label}: no usable record ({pick['skipped']} wrong or probes): left as it is")
            continue
        cfg = pick["ranked"][0]["cfg"]
        entries = new.setdefault("tables", {}).setdefault(backend, {}).setdefault(model, [])
        at = next((i for i, e in enumerate(entries) if e["shape"] == shape), None)
        former = None if at is None else type(cfg).of(entries[at]["config"])
        if former == cfg and entries[at].get("kernel") == (forced or info.get("kernel_revision")):
            report.append(f"{label}: unchanged {cfg_text(cfg)}, the best of {len(pick['ranked'])} "
                          f"({times_text(pick['ranked'][0])} us)")
            continue
        others = {b: r for (b, *s), r in best_of.items() if s == shape and b != backend}
        record = entry_record(key, cfg, pick, info, forced)
        written[key] = cfg
        said = record_text(pick, others, former)
        if at is None:
            entries.append(record)
            report.append(f"{label}: new {cfg_text(cfg)}: {said}")
        else:
            entries[at] = record
            what = "measured again" if former == cfg else f"{cfg_text(former)} ->"
            report.append(f"{label}: {what} {cfg_text(cfg)}: {said}")
        retired = new.get("retired", {}).get(backend, {}).get(model, [])
        if any(e["shape"] == shape for e in retired):
            retired[:] = [e for e in retired if e["shape"] != shape]
            report.append(f"{label}: its retired entry removed (this measurement replaces it)")
            if not retired:
                del new["retired"][backend][model]
    return new, report, written


# ----------------------------------------------------------------------------- checks

def _fits(mod, key: tuple, cfg) -> bool:
    """Whether ``cfg`` can run its shape: its type's ``problem()`` and ``shape_problem(m, k)``."""
    backend, m, k, l = key
    return not (cfg.problem() or cfg.shape_problem(m, k))


def verify(old_text: str, new_text: str, model: str, written: dict) -> list:
    """What is wrong with the new submission text (empty: nothing): the server's upload rules, the
    import, the tables (exactly the old ones with the written entries), the configs' fit, the
    kernel revision (the edit must not touch the kernels), no written entry stale."""
    problems = []
    expected = read_table(old_text)
    expected.setdefault(model, {}).update(written)
    with tempfile.TemporaryDirectory(prefix="apply_table_") as tmp:
        path = Path(tmp) / "submission.py"
        path.write_text(new_text)
        problems += harness.static_problems(path)
    try:
        table = read_table(new_text)
        mod = submission_module(new_text)
    except Exception as exc:  # noqa: BLE001 - any import failure is the finding
        return problems + [f"the new submission.py does not import: {type(exc).__name__}: {exc}"]
    if table != expected:
        problems.append("the new tables are not the old ones with the written entries")
    problems += [f"{key[0]} config {cfg_text(cfg)} does not fit {'x'.join(map(str, key[1:]))}"
                 for key, cfg in written.items() if not _fits(None, key, cfg)]
    if kernel_revision(text=new_text) != kernel_revision(text=old_text):
        problems.append("the edit changed the kernel revision")
    stale = [s for s in mod.stale_entries() if s[1] == model and (s[0], *s[2]) in written]
    problems += [f"the written entry {b} {'x'.join(map(str, s))} would be stale (kernel {r})" for b, _, s, r in stale]
    return problems


# ----------------------------------------------------------------------------- main

def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python3 benchmarks/apply_table.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("results", metavar="RESULTS.json", help="the JSON of bench_kernel.py --sweep --json")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the diff of kernels/tables.json instead of writing it")
    ap.add_argument("--force", action="store_true",
                    help="apply a sweep of another kernel revision (or one that records none), with a warning")
    ap.add_argument("--submission", metavar="PATH", default=str(SUBMISSION),
                    help="the submission file whose tables are written: the tables are kernels/tables.json beside "
                         "it, copied into it by its bundle blocks (default: this kit's submission.py; a file with no "
                         "kernels/ beside it is read against the kit's, with --dry-run only)")
    return ap


def main(argv: list[str] | None = None) -> int:
    import bundle

    args = build_parser().parse_args(argv)
    path = Path(args.submission)
    root = path.resolve().parent
    if not (root / TABLES).is_file():  # a copy of the kit's file alone: its sources are the kit's (read only)
        root = ROOT
    tables_path = root / TABLES
    try:
        if root != path.resolve().parent and not args.dry_run:
            raise Refused(f"no {TABLES} beside {path} to write (copy the kit's kernels/ folder beside it; "
                          "--dry-run reads the kit's)")
        try:
            old = path.read_text()
        except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
            raise Refused(f"--submission {path}: cannot read it ({type(exc).__name__}: {exc})") from None
        sync = bundle.state(path, root)  # bundle's rule: no text it did not write is overwritten
        if sync.state != bundle.IN_SYNC:
            raise Refused(f"{path.name} is not bundled from its sources, so nothing is written: {sync.why}")
        old_tables_text = tables_path.read_text()
        tables = json.loads(old_tables_text)
        results = load_results(args.results)
        try:
            mod = submission_module(old)
        except Exception as exc:  # noqa: BLE001 - the file's own code failed: one line naming it
            raise Refused(harness.one_line(f"--submission {path} does not import: {type(exc).__name__}: {exc}")) \
                from None
        swept = {key[0] for key in picks(results, mod)}
        warning = check_revision(results, mod, swept, args.force)
        new_tables, report, written = plan(tables, mod, results, mod.kernel_revision() if warning else None)
        new_tables_text = dump_tables(new_tables)
    except (Refused, OSError, ValueError, TypeError, SyntaxError, bundle.BundleError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if warning:
        print(warning, file=sys.stderr)
    print("\n".join(report))
    if new_tables_text == old_tables_text:
        print(f"{tables_path}: nothing to change")
        return 0
    with tempfile.TemporaryDirectory(prefix="apply_table_") as tmp:
        staged = Path(tmp)
        for source in {b.path for b in bundle.blocks(old)}:
            (staged / source).parent.mkdir(parents=True, exist_ok=True)
            (staged / source).write_text((root / source).read_text())
        (staged / TABLES).write_text(new_tables_text)
        new = bundle.bundled(old, staged)
    problems = verify(old, new, results["info"]["device"], written)
    if problems:
        print(f"error: the new {path.name} fails its checks, nothing written: " + "; ".join(problems), file=sys.stderr)
        return 1
    if args.dry_run:
        sys.stdout.writelines(difflib.unified_diff(old_tables_text.splitlines(True), new_tables_text.splitlines(True),
                                                   f"a/{TABLES}", f"b/{TABLES}"))
        return 0
    tables_path.write_text(new_tables_text)
    path.write_text(new)
    print(f"wrote {len(written)} entries of {results['info']['device']} into {tables_path} (and its copy in {path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
