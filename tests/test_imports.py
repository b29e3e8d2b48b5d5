"""How the kit's modules hang together, read from their syntax trees (tests/kit_imports.py):

* no import circle among them, imports inside functions counted (eval.py, the command line,
  imports harness.py and the subcommands' modules; they import harness.py, not eval.py);
* one loader of a submission file (``harness.load_submission``): no other module builds a module
  from a file;
* few edits of ``sys.path``, each in a known place;
* harness.py's docstring lists every name the other modules take of it, and every name it lists
  exists.
"""

import ast
import re

from kit_imports import (
    ROOT,
    find_cycle,
    import_graph,
    kit_modules,
    names_taken,
    private_reaches,
    state_writes,
)

import eval as ev
import harness

# Where the kit edits sys.path, and why: the loader (the submission's folder, for ``task`` and
# files beside it), benchmarks/kitpath.py (the root, for a script run as python3 benchmarks/NAME.py),
# cute_check.py (a CUTLASS DSL installed with pip --target has no .pth file read), modal_app.py
# (``modal run`` loads it by path: its folder, for harness.py and the benchmarks).
SYS_PATH_EDITS = {"harness.py", "benchmarks/kitpath.py", "cute_check.py", "modal_app.py"}


def test_the_kit_has_no_import_circle():
    graph = import_graph()
    assert find_cycle(graph) == [], " -> ".join(find_cycle(graph))


def test_the_graph_counts_imports_inside_functions_and_sibling_scripts():
    """The graph is the one the test above needs: eval.py imports ab, audit and cuda_check only
    inside main() (cuda_check.py hands a CuTe DSL file to cute_check.py), harness imports the
    submission only in the worker, and a script of benchmarks/ imports kitpath by its bare name."""
    graph = import_graph()
    assert {"ab", "audit", "cuda_check", "harness"} <= graph["eval"] and "cute_check" in graph["cuda_check"]
    assert "submission" in graph["harness"] and "eval" not in graph["harness"]
    assert "eval" not in graph["ab"] | graph["audit"] | graph["cute_check"] | graph["cuda_check"]
    assert "benchmarks.kitpath" in graph["benchmarks.bench_kernel"]
    assert "benchmarks.roofline" in graph["benchmarks.bench_kernel"]
    assert "benchmarks.bench_kernel" not in graph["benchmarks.roofline"]


def test_find_cycle_finds_a_circle_through_several_modules():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []


PROBE = '''
import submission as S
import harness
from benchmarks import timing as t
from quant import _private_helper
from submission import custom_kernel


def f(path):
    sub = harness.load_submission(path)
    S._CUDA_FUNCS[1] = 2
    t._clock = 3
    x = sub._CUDA_SHAPE
    y = getattr(S, "_FASTEST", None)
    S.cuda_driver().function(1)
    table = {}
    table[S.cuda_kernel(1)] = 4
    return harness.one_line(x), S.__file__, y
'''


def test_the_reach_and_write_finders_see_through_any_alias(tmp_path):
    """Any alias: ``import x as y; y._z``, ``from x import _z``, a module bound by a loader
    call, ``getattr(y, "_z")``; a write into another module's state, subscripted or not. Not a
    dunder, not a public name, not a write into a local keyed by a call on a module."""
    path = tmp_path / "probe_tool.py"
    path.write_text(PROBE)
    modules = kit_modules()
    reaches = {(module, name) for _, module, name in private_reaches(path, modules)}
    assert reaches == {("submission", "_CUDA_FUNCS"), ("benchmarks.timing", "_clock"), ("quant", "_private_helper"),
                       ("submission", "_CUDA_SHAPE"), ("submission", "_FASTEST")}
    writes = {(module, name) for _, module, name in state_writes(path, modules)}
    assert writes == {("submission", "_CUDA_FUNCS"), ("benchmarks.timing", "_clock")}


def _calls(tree: ast.AST, name: str) -> list[int]:
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and
            (getattr(n.func, "attr", None) == name or getattr(n.func, "id", None) == name)]


def test_one_loader_builds_a_module_from_a_file():
    """Only harness.load_submission makes a module of a file (spec_from_file_location,
    exec_module); eval.py's worker, audit.py, cute_check.py and benchmarks/ call it (or
    harness.load_tool_submission, which calls it)."""
    builders = {}
    for path in kit_modules().values():
        tree = ast.parse(path.read_text())
        found = _calls(tree, "spec_from_file_location") + _calls(tree, "exec_module")
        if found:
            builders[str(path.relative_to(ROOT))] = found
    assert set(builders) == {"harness.py"}, builders
    callers = {str(p.relative_to(ROOT)) for p in kit_modules().values()
               if any(_calls(ast.parse(p.read_text()), name) for name in ("load_submission", "load_tool_submission"))}
    assert {"harness.py", "audit.py", "cute_check.py", "benchmarks/compile_table.py", "benchmarks/apply_table.py",
            "benchmarks/bench_kernel.py"} <= callers, callers


def test_sys_path_is_edited_in_the_known_places_only():
    """No module inserts into, appends to or assigns sys.path but those of SYS_PATH_EDITS."""
    editors = set()
    for path in kit_modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            target = node.func.value if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else None
            if isinstance(node, (ast.Assign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                target = next((t.value for t in targets if isinstance(t, ast.Subscript)), None)
            if (isinstance(target, ast.Attribute) and target.attr == "path" and isinstance(target.value, ast.Name)
                    and target.value.id == "sys"):
                if not isinstance(node, ast.Call) or node.func.attr in ("insert", "append", "extend", "remove"):
                    editors.add(str(path.relative_to(ROOT)))
    assert editors == SYS_PATH_EDITS


def _listed(path) -> set:
    """The ``names`` of a module docstring's "Public surface" paragraph."""
    text = ast.get_docstring(ast.parse(path.read_text()))
    return set(re.findall(r"``(\w+)``", text.split("Public surface", 1)[1]))


def test_harness_lists_every_name_the_others_take_and_nothing_it_lacks():
    listed = _listed(ROOT / "harness.py")
    taken = names_taken("harness")
    assert not set(taken) - listed, {n: taken[n] for n in set(taken) - listed}
    assert all(hasattr(harness, name) for name in listed), [n for n in listed if not hasattr(harness, n)]
    assert not any(name.startswith("_") for name in listed)
    tree = ast.parse((ROOT / "harness.py").read_text())
    defined = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    defined |= {n.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
                for n in ast.walk(t) if isinstance(n, ast.Name)}
    public = {name for name in defined if not name.startswith("_")}
    assert public == listed, (public - listed, listed - public)  # all of it, and only it, is listed


def test_eval_lists_its_own_surface():
    listed = _listed(ROOT / "eval.py")
    assert listed == {"main", "protocol_main", "human_main", "device_name", "heartbeat_line", "HARNESS_COPIES"}
    assert all(hasattr(ev, name) for name in listed)
    assert names_taken("eval") == {}  # no kit module imports eval.py: it is the command line on top

