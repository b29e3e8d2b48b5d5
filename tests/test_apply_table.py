"""benchmarks/apply_table.py: a sweep's configs written into kernels/tables.json and copied into
submission.py; and the kernel revision that ties a table entry to the kernel it was measured with.

Recorded sweeps in bench_kernel.py's JSON format (tests/fixtures/sweep-*.json; each says
where its numbers come from) are applied to a copy of the kit (submission.py and kernels/): the
H100 sweep's winners are the H100 entries of today's tables (retired ones among them), which it
makes entries of this kernel again; the B200 one adds a block that config_for then uses on a
device of that name. The ranking rule, the refusals (another kernel revision without a proof,
no sweep, unreadable input, a stale submission.py), wrong rows and probes, a replaced entry, the
dry run and the kernel revision's scope are checked beside. No GPU needed."""

import json
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from conftest import ROOT, module_of

import bundle
import harness
import submission
from benchmarks import apply_table, bench_kernel

FIXTURES = ROOT / "tests" / "fixtures"
H100 = "NVIDIA H100 80GB HBM3"
B200 = "NVIDIA B200"
Cuda, Triton = submission.CudaConfig, submission.TritonConfig
# The B200 fixture's winners (recorded by position: decode 1 is f16x2): on 7168x16384x1 the tie
# rule decides (the fastest under the server's protocol, lpr=32, rpt=4, u=4, warps=8, is slower
# clean than one within 1% of it).
B200_WINNERS = {
    ("cuda", 7168, 16384, 1): Cuda(lpr=32, rpt=2, u=8, warps=2, decode="f16x2", pipe="ptxas", minb=1),
    ("cuda", 4096, 7168, 8): Cuda(lpr=32, rpt=8, u=1, warps=1, decode="f16x2", v=1, pipe="ptxas", minb=1),
    ("cuda", 7168, 2048, 4): Cuda(lpr=32, rpt=4, u=1, warps=1, decode="f16x2", v=1, pipe="ptxas", minb=1),
    ("triton", 7168, 16384, 1): Triton(block_m=8, block_g=128, warps=2),
    ("triton", 4096, 7168, 8): Triton(block_m=16, block_g=32, warps=1),
    ("triton", 7168, 2048, 4): Triton(block_m=16, block_g=64, warps=2),
}


def fixture(name: str, revision: str | None = "current") -> dict:
    """A recorded sweep; its kernel revision set to this checkout's (the recorded one goes
    stale whenever the kernels change), or to ``revision``."""
    results = json.loads((FIXTURES / f"sweep-{name}.json").read_text())
    if revision == "current":
        results["info"]["kernel_revision"] = submission.kernel_revision()
    elif revision is None:
        del results["info"]["kernel_revision"]
    else:
        results["info"]["kernel_revision"] = revision
    return results


def copy_kit(folder: Path) -> Path:
    """submission.py and its sources (kernels/) copied into ``folder``; the submission's path."""
    (folder / "kernels").mkdir(parents=True)
    for path in (ROOT / "kernels").iterdir():
        (folder / "kernels" / path.name).write_text(path.read_text())
    (folder / "submission.py").write_text((ROOT / "submission.py").read_text())
    return folder / "submission.py"


@pytest.fixture
def sub(tmp_path):
    """A copy of the kit to write into: its submission.py."""
    return copy_kit(tmp_path / "kit")


def tables_of(sub: Path) -> dict:
    return json.loads((sub.parent / "kernels" / "tables.json").read_text())


def apply(tmp_path, results: dict, sub, *flags) -> int:
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    return apply_table.main([str(path), "--submission", str(sub), *flags])


def record(cfg, us, server_us, bad=()):
    return {"backend": "cuda", "cfg": list(cfg), "us": us, "server_us": server_us, "ratio": 1.0,
            "server_ratio": 1.0, "bad": list(bad)}


# --------------------------------------------------------------------------- kernel revision


def test_kernel_revision_is_submissions_own_short_hash():
    rev = apply_table.kernel_revision()
    assert re.fullmatch(r"[0-9a-f]{12}", rev)
    assert rev == submission.kernel_revision()
    assert apply_table.kernel_revision(text=(ROOT / "submission.py").read_text()) == rev


# (what, file, old, new): each changes what a measured config means; file "cu" is the kernel's
# source, "py" submission.py.
KERNEL_EDITS = [
    ("cuda source, a #pragma line", "cu", "#pragma unroll\n  for (int j = 0; j < 4; ++j) {\n    u32 v",
     "#pragma unroll 1\n  for (int j = 0; j < 4; ++j) {\n    u32 v"),
    ("cuda source, an operand", "cu", "r.w[j].nb1 = prmt(p1, n1, xh ^ 0x4444u);",
     "r.w[j].nb1 = prmt(p1, n1, xh ^ 0x4445u);"),
    ("cuda wrapper template", "py", "__launch_bounds__({bounds})", "__launch_bounds__({bounds}, 1)"),
    ("cuda parameter list", "py", '"u16* __restrict__ c, int chunks,', '"u16* __restrict__ c, unsigned chunks,'),
    ("cuda config -> template", "py", "cfg.ks, cfg.kb, t[not cfg.bload], t[not cfg.ki]]",
     "cfg.kb, cfg.ks, t[not cfg.bload], t[not cfg.ki]]"),
    ("cuda config default", "py", '    pipe: str = "a_first"  #', '    pipe: str = "ptxas"  #'),
    ("cuda compile option", "py", '"-std=c++17", "--use_fast_math"]', '"-std=c++20", "--use_fast_math"]'),
    ("cuda grid", "py", "return (groups, l, cfg.kb), 32 * cfg.warps * cfg.ks", "return (groups, l, 1), 32 * cfg.warps"),
    ("triton kernel body", "py", "out = tl.sum(acc, axis=1)", "out = tl.sum(acc, axis=1) * 1.0"),
    ("triton helper the kernel reaches", "py", "_POS_LO, _POS_HI = 0x03020100, 0x0C080604",
     "_POS_LO, _POS_HI = 0x03020100, 0x0C080605"),
    ("triton decode", "py", '_TRITON_DECODE = "dp4a"', '_TRITON_DECODE = "f16x2"'),
    ("triton launch", "py", "EVEN_G=n_groups % cfg.block_g == 0", "EVEN_G=False"),
]
NEUTRAL_EDITS = [  # (what, file, old, new): none of these touches a kernel
    ("comment in the cuda source", "cu",
     "// b and its scales are small and read by every row: cached loads (BLOAD false), or (BLOAD true)",
     "// b and its scales: small, read by every row, so cached loads (BLOAD false), or (BLOAD true)"),
    ("layout of the cuda source", "cu", "struct __align__(16) Q { u32 w[4]; };",
     "struct __align__(16) Q {\n    u32 w[4];\n};"),
    ("a kernel's name", "py", 'f"lpr{cfg.lpr}", f"rpt{cfg.rpt}"', 'f"l{cfg.lpr}", f"r{cfg.rpt}"'),
    ("comment in the triton block", "py", "# e2m1 magnitude code -> 2|value| as a byte", "# e2m1 code -> 2|value|"),
    ("docstring of cuda_kernel", "py", "``probe`` the loads-only timing probe. The source",
     "``probe`` the loads-only probe (wrong c). The source"),
    ("docstring of a Triton helper", "py", '"""Nibble n of uint32 words -> fp32 2 * value',
     '"""Nibble n of a uint32 word -> 2 * value'),
    ("comment of a config field", "py", "# rows per lane", "# rows each lane owns"),
    ("another constant", "py", "_TORCH_CHUNK = 1 << 24", "_TORCH_CHUNK = 1 << 23"),
    ("a config type's method", "py", "return f\"triton block_m={self.block_m} must divide M={m}\"",
     "return f\"triton block_m={self.block_m} does not divide M={m}\""),
]


def revision_after(tmp_path, what: str, where: str, old: str, new: str) -> str:
    """The kernel revision of the kit with one edit, bundled."""
    sub = copy_kit(tmp_path / "edited")
    path = sub.parent / "kernels" / "nvfp4_gemv.cu" if where == "cu" else sub
    text = path.read_text()
    assert text.count(old) == 1, f"{what}: the text to edit is not (once) in {path.name}"
    path.write_text(text.replace(old, new))
    return module_of(bundle.bundled(sub.read_text(), sub.parent), "_edited").kernel_revision()


@pytest.mark.parametrize("what, where, old, new", KERNEL_EDITS, ids=[e[0] for e in KERNEL_EDITS])
def test_kernel_revision_follows_what_the_compilers_see(tmp_path, what, where, old, new):
    assert revision_after(tmp_path, what, where, old, new) != submission.kernel_revision()


@pytest.mark.parametrize("what, where, old, new", NEUTRAL_EDITS, ids=[e[0] for e in NEUTRAL_EDITS])
def test_kernel_revision_ignores_comments_layout_names_and_other_code(tmp_path, what, where, old, new):
    assert revision_after(tmp_path, what, where, old, new) == submission.kernel_revision()


def test_kernel_revision_ignores_the_tables(sub):
    tables = tables_of(sub)
    tables["tables"]["triton"][H100].pop()
    (sub.parent / "kernels" / "tables.json").write_text(apply_table.dump_tables(tables))
    text = bundle.bundled(sub.read_text(), sub.parent)
    assert text != sub.read_text() and apply_table.kernel_revision(text=text) == submission.kernel_revision()


def test_kernel_revision_needs_the_submissions_own_function():
    with pytest.raises(ValueError, match="has no kernel_revision"):
        apply_table.kernel_revision(text="import torch\n")


def test_bench_kernel_records_both_revisions(monkeypatch):
    """env_info() (what bench_kernel's JSON starts with) carries the kernel revision that
    apply_table checks, and the checkout's git revision."""
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda d=0: types.SimpleNamespace(multi_processor_count=148, L2_cache_size=126 << 20))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=0: B200)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=0: (10, 0))
    info = bench_kernel.env_info()
    assert info["kernel_revision"] == apply_table.kernel_revision()
    assert info["kit_revision"] == apply_table.kit_revision()


def test_kit_revision_told_by_the_environment(tmp_path, monkeypatch):
    """A copy of the tree whose .git is not its own is told its revision (NVFP4_GEMV_KIT_REVISION)."""
    monkeypatch.setenv(apply_table.ENV_KIT_REVISION, "0123456789ab")
    assert apply_table.kit_revision(tmp_path) == "0123456789ab"


def test_kit_revision(tmp_path, monkeypatch):
    # set on the GPU machines, whose git is not the kit's
    monkeypatch.delenv(apply_table.ENV_KIT_REVISION, raising=False)
    assert apply_table.kit_revision(tmp_path) == "unknown"  # not a git checkout
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "a.txt").write_text("1\n")
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    assert apply_table.kit_revision(tmp_path) == head[:12]
    (tmp_path / "b.txt").write_text("untracked\n")
    assert apply_table.kit_revision(tmp_path) == head[:12]  # untracked files do not count
    (tmp_path / "a.txt").write_text("2\n")
    assert apply_table.kit_revision(tmp_path) == head[:12] + "-dirty"


# --------------------------------------------------------------------------- ranking


def test_rank_server_time_first_clean_time_within_one_percent():
    a = record((1,), 9.5, 10.00)  # the fastest under the server's protocol
    b = record((2,), 9.0, 10.05)  # within 1% of it, faster clean: first
    d = record((3,), 8.0, 10.20)  # faster clean still, but 2% slower under the server's protocol
    wrong = record((4,), 5.0, 6.0, ["full-range: mismatch"])  # fastest of all, but wrong
    probe = {"backend": "cuda", "cfg": [5], "us": 4.0, "ratio": 2.0, "bad": ["probe"]}
    unmeasured = record((6,), float("nan"), float("nan"))
    assert [r["cfg"] for r in apply_table.rank([a, d, wrong, probe, unmeasured, b])] == [[2], [1], [3]]


# --------------------------------------------------------------------------- applying sweeps


def h100_configs(tables: dict) -> dict:
    """{(backend, m, k, l): config} of the H100 entries of kernels/tables.json, retired ones too."""
    out = {}
    for part in ("tables", "retired"):
        for backend, models in tables.get(part, {}).items():
            kind = submission.BACKENDS[backend].config
            for entry in models.get(H100, []):
                out[(backend, *entry["shape"])] = kind.of(entry["config"])
    return out


def test_h100_sweep_of_todays_winners_makes_them_entries_of_this_kernel(tmp_path, sub, capsys):
    """The H100 sweep's winners are today's H100 configs (entries and retired ones); recorded with
    this kernel's revision, it makes each an entry of this revision with its record, and removes
    the retired ones; applied again, nothing changes."""
    results = fixture("h100")
    swept = apply_table.picks(results, apply_table.submission_module(sub.read_text()))
    assert {key: p["ranked"][0]["cfg"] for key, p in swept.items()} == h100_configs(tables_of(sub)), \
        "the fixture's winners are no longer today's H100 configs"
    assert apply(tmp_path, results, sub) == 0
    tables = tables_of(sub)
    assert not any(H100 in models for models in tables.get("retired", {}).values())
    for backend, *shape in swept:
        (entry,) = [e for e in tables["tables"][backend][H100] if e["shape"] == shape]
        assert entry["kernel"] == submission.kernel_revision() and entry["kit"] == "2fa0648"
        assert entry["date"] == "2026-11-26" and entry["sweep"] == "bench_kernel.py --sweep"
    assert bundle.check(sub) == "" and harness.static_problems(sub) == []
    mod = apply_table.submission_module(sub.read_text())
    assert mod.stale_entries() == [] and {(b, *s): c for b, m, s, c, _ in mod.table_entries() if m == H100} == \
        h100_configs(tables_of(sub))
    out = capsys.readouterr().out
    assert out.count(" measured again ") + out.count(": new ") + out.count(": unchanged ") == len(swept), out
    before = sub.read_text()
    assert apply(tmp_path, results, sub) == 0 and sub.read_text() == before
    out = capsys.readouterr().out
    assert out.count(": unchanged ") == len(swept) and "nothing to change" in out


def test_b200_sweep_adds_a_block_that_config_for_uses(tmp_path, sub, monkeypatch, capsys):
    before = sub.read_text()
    assert apply(tmp_path, fixture("b200"), sub) == 0
    text = sub.read_text()
    assert harness.static_problems(sub) == [] and bundle.check(sub) == ""
    tables = apply_table.read_table(text)
    assert tables[B200] == B200_WINNERS  # scaled_mm (no configs) left out
    old = apply_table.read_table(before)
    assert {m: t for m, t in tables.items() if m != B200} == old
    assert all(len(line) <= 120 for line in text.splitlines())  # the project's line length
    entry = next(e for e in tables_of(sub)["tables"]["cuda"][B200] if e["shape"] == [7168, 16384, 1])
    assert entry == {"shape": [7168, 16384, 1], "config": "lpr=32,rpt=2,u=8,warps=2,decode=f16x2,pipe=ptxas,minb=1",
                     "kernel": submission.kernel_revision(), "kit": "0123456789ab", "date": "2026-12-01",
                     "server_us": 11.0, "clean_us": 10.05, "sweep": "bench_kernel.py --sweep"}
    out = capsys.readouterr().out
    runner = Cuda(lpr=32, rpt=4, u=4, warps=8, decode="f16x2", pipe="ptxas", minb=1)
    for said in ("server 11.00 us, clean 10.05 (ceilings 9.90 / 8.80), the best of 8 configs (1 more wrong)",
                 f"next {runner!r} 10.90 / 10.20 (within 1% under the server's protocol, slower clean)",
                 "triton's best 12.10 / 11.30", "cuda's best 11.00 / 10.05",
                 f"cuda 7168x16384x1: new {B200_WINNERS[('cuda', 7168, 16384, 1)]!r}"):
        assert said in out, said

    mod = harness.load_submission(sub, "_b200_submission", keep=False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: B200)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (10, 0))
    monkeypatch.setattr(mod, "_tune", lambda *a: pytest.fail("a measured GPU model is not tuned"))
    monkeypatch.delenv("NVFP4_GEMV_CONFIG", raising=False)
    monkeypatch.delenv("NVFP4_GEMV_TUNE", raising=False)
    data = [types.SimpleNamespace(device=torch.device("cuda", 0))]
    for (backend, m, k, l), cfg in B200_WINNERS.items():
        assert mod.config_for(backend, data, m, k, l) == cfg
    variants = mod.cuda_compile_variants()  # what the compile gate builds now holds the new entries
    for (backend, *_), cfg in B200_WINNERS.items():
        assert backend != "cuda" or (cfg, True, True) in variants
    try:
        mod.find_nvrtc()
    except mod.CudaBuildError:
        pass  # no NVRTC here (tests/test_cuda_backend.py's compile gate says so)
    else:  # and they compile for the B200
        for cfg in (cfg for (backend, *_), cfg in B200_WINNERS.items() if backend == "cuda"):
            assert mod.cuda_compile(mod.cuda_kernel(cfg, True, True)[1], "sm_100a")[:4] == b"\x7fELF"

    assert apply(tmp_path, fixture("b200"), sub) == 0 and sub.read_text() == text  # applying again: no change


def test_a_better_config_replaces_the_entry_and_its_record(tmp_path, sub, capsys):
    """The sweep's winner differs from an entry: that entry alone is replaced (its record with
    it), and the report names the former entry's times in this run."""
    results = fixture("h100")
    assert apply(tmp_path, results, sub) == 0
    entry, better = Cuda.of((8, 1, 4, 1, 3, 1, 2, 0, 4, 1, 7, 1, 0, 0, 1)), Cuda.of((8, 2, 4, 1, 3, 1, 2, 0, 5, 1, 4))
    for r in results["sweeps"]["4096x7168x8 cuda"]:
        if Cuda.of(r["cfg"]).with_decode((9, 0)) == better:
            r.update(us=46.00, server_us=49.00)
    before = tables_of(sub)
    capsys.readouterr()
    assert apply(tmp_path, results, sub) == 0
    after = tables_of(sub)
    assert apply_table.read_table(sub.read_text())[H100][("cuda", 4096, 7168, 8)] == better
    entries = [(part, b, m, i) for part in ("tables", "retired") for b, models in before.get(part, {}).items()
               for m, es in models.items() for i in range(len(es))]
    changed = [k for k in entries if before[k[0]][k[1]][k[2]][k[3]] != after[k[0]][k[1]][k[2]][k[3]]]
    assert changed == [("tables", "cuda", H100, 1)]  # 4096x7168x8 alone, written after 7168x16384x1
    assert after["tables"]["cuda"][H100][1] == {**before["tables"]["cuda"][H100][1], "server_us": 49.0,
                                                "clean_us": 46.0, "config": apply_table.config_text(better)}
    former = next(r for r in results["sweeps"]["4096x7168x8 cuda"] if Cuda.of(r["cfg"]).with_decode((9, 0)) == entry)
    times = f"{former['server_us']:.2f} / {former['us']:.2f}"
    out = capsys.readouterr().out
    assert f"next the former entry {entry!r} {times}" in out and f"{entry!r} -> {better!r}" in out


def test_wrong_rows_and_probes_never_win(tmp_path, sub, capsys):
    """A wrong config (even one with times) and a probe, both faster than everything, are
    skipped; a shape whose every record is wrong keeps what it has."""
    results = fixture("h100")
    recs = results["sweeps"]["7168x16384x1 cuda"]
    recs.append(record((32, 1, 8, 4, 2, 2, 2, 0, 1), 1.0, 1.0, ["official: Number of mismatched elements: 9"]))
    recs.append({**record((32, 1, 8, 4, 2, 2, 2, 0, 1), 2.0, 2.0), "bad": ["probe"]})
    for r in results["sweeps"]["7168x2048x4 triton"]:
        r.update(us=float("nan"), server_us=float("nan"), bad=["full-range: mismatch"])
    retired = h100_configs(tables_of(sub))
    assert apply(tmp_path, results, sub) == 0
    tables = apply_table.read_table(sub.read_text())[H100]
    assert tables[("cuda", 7168, 16384, 1)] == retired[("cuda", 7168, 16384, 1)]
    assert ("triton", 7168, 2048, 4) not in tables  # still retired: nothing to replace it
    assert tables_of(sub)["retired"]["triton"][H100][0]["shape"] == [7168, 2048, 4]
    out = capsys.readouterr().out
    assert "triton 7168x2048x4: no usable record (3 wrong or probes): left as it is" in out


@pytest.mark.parametrize("revision, said", [("0123456789ab", "kernel revision 0123456789ab"),
                                             (None, "no kernel revision")], ids=["other revision", "none recorded"])
def test_another_kernel_revision_is_refused(tmp_path, sub, capsys, revision, said):
    before = sub.read_text()
    assert apply(tmp_path, fixture("b200", revision), sub) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err and "--force" in err and "same_sass.json" in err
    assert sub.read_text() == before
    assert apply(tmp_path, fixture("b200", revision), sub, "--force") == 0
    err = capsys.readouterr().err
    assert err.startswith("warning: ") and said in err and "forced_from" in err
    assert apply_table.read_table(sub.read_text())[B200] == B200_WINNERS
    written = [e for models in tables_of(sub)["tables"].values() for e in models.get(B200, [])]
    assert {(e["kernel"], e["forced_from"]) for e in written} == {(submission.kernel_revision(),
                                                                    revision or "no kernel revision")}


def test_a_revision_proven_to_compile_alike_applies_without_force(tmp_path, sub):
    """A sweep recorded under an older revision that kernels/same_sass.json proves to compile to
    the current revision's SASS, for both backends it writes, applies as it is, and its entries
    keep the revision they were measured with (and count); one proven for one backend only is
    refused."""
    proofs_path = sub.parent / "kernels" / "same_sass.json"
    proofs = json.loads(proofs_path.read_text())
    old = "0123456789ab"
    proofs["proofs"].append({"backend": "cuda", "old": old, "new": submission.kernel_revision(), "compared": "t"})
    proofs_path.write_text(json.dumps(proofs, indent=2) + "\n")
    sub.write_text(bundle.bundled(sub.read_text(), sub.parent))
    assert apply(tmp_path, fixture("b200", old), sub) == 2  # triton has no proof
    proofs["proofs"].append({"backend": "triton", "old": old, "new": submission.kernel_revision(), "compared": "t"})
    proofs_path.write_text(json.dumps(proofs, indent=2) + "\n")
    sub.write_text(bundle.bundled(sub.read_text(), sub.parent))
    assert apply(tmp_path, fixture("b200", old), sub) == 0
    assert apply_table.read_table(sub.read_text())[B200] == B200_WINNERS
    assert {e["kernel"] for models in tables_of(sub)["tables"].values() for e in models.get(B200, [])} == {old}
    assert apply_table.submission_module(sub.read_text()).stale_entries() == []


def test_a_submission_that_is_not_bundled_is_refused(tmp_path, sub, capsys):
    cu = sub.parent / "kernels" / "nvfp4_gemv.cu"
    cu.write_text(cu.read_text() + "// more\n")
    assert apply(tmp_path, fixture("b200"), sub) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not bundled from its sources" in err and "python3 eval.py bundle" in err
    assert "kernels/nvfp4_gemv.cu changed since bundle wrote the copy" in err


def test_an_edited_tables_block_is_refused_as_bundle_refuses_it(tmp_path, sub, capsys):
    """bundle's rule: no text it did not write is overwritten. The tables' copy edited in
    submission.py: apply_table writes nothing, in one line naming the side that changed and both
    ways on; once the edit is written back into kernels/tables.json it applies the sweep."""
    lines = sub.read_text().splitlines(True)
    (block,) = [b for b in bundle.blocks("".join(lines)) if b.path == "kernels/tables.json"]
    at = next(i for i in range(block.first, block.end) if '"about": [' in lines[i])
    lines.insert(at + 1, '    "A note written into the copy.",\n')
    sub.write_text("".join(lines))
    before, tables_before = sub.read_text(), (sub.parent / "kernels" / "tables.json").read_text()
    assert apply(tmp_path, fixture("b200"), sub) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not bundled from its sources, so nothing is written" in err
    assert "the copy was edited in submission.py since bundle wrote it" in err
    assert "--write-back` copies the block into kernels/tables.json" in err and "--force` overwrites it" in err
    assert sub.read_text() == before and (sub.parent / "kernels" / "tables.json").read_text() == tables_before
    assert bundle.main(["--write-back", "--submission", str(sub)]) == 0
    assert apply(tmp_path, fixture("b200"), sub) == 0
    assert "A note written into the copy." in (sub.parent / "kernels" / "tables.json").read_text()
    assert apply_table.read_table(sub.read_text())[B200] == B200_WINNERS and bundle.check(sub) == ""


def test_shipped_proofs_name_revisions_of_12_digits_and_a_backend():
    proofs = json.loads((ROOT / "kernels" / "same_sass.json").read_text())["proofs"]
    assert proofs
    for proof in proofs:
        assert proof["backend"] in submission.BACKENDS and proof["compared"]
        assert re.fullmatch(r"[0-9a-f]{12}", proof["old"]) and re.fullmatch(r"[0-9a-f]{12}", proof["new"])


def test_dry_run_prints_the_diff_and_writes_nothing(tmp_path, sub, capsys):
    before = sub.read_text(), tables_of(sub)
    assert apply(tmp_path, fixture("b200"), sub, "--dry-run") == 0
    assert (sub.read_text(), tables_of(sub)) == before
    out = capsys.readouterr().out
    assert "--- a/kernels/tables.json" in out and "+++ b/kernels/tables.json" in out
    assert any(line.startswith("+") and line.strip("+ ") == f'"{B200}": [' for line in out.splitlines())
    config = apply_table.config_text(B200_WINNERS[("cuda", 7168, 16384, 1)])
    assert any(line.startswith("+") and line.strip("+ ") == f'"config": "{config}",' for line in out.splitlines())


def test_a_new_file_that_fails_its_checks_is_not_written(tmp_path, sub, monkeypatch, capsys):
    monkeypatch.setattr(apply_table, "_fits", lambda mod, key, cfg: key[0] != "triton")
    before = sub.read_text(), tables_of(sub)
    assert apply(tmp_path, fixture("b200"), sub) == 1
    assert (sub.read_text(), tables_of(sub)) == before
    err = capsys.readouterr().err
    assert "nothing written" in err and f"triton config {Triton(8, 128, 2)!r} does not fit 7168x16384x1" in err


def bench_without_sweep():
    results = fixture("b200")
    results["sweeps"] = {}
    return results


@pytest.mark.parametrize("content, said", [
    ("not json", "cannot read"),
    ('{"rows": []}', "not bench_kernel.py's JSON (no info.device)"),
    (json.dumps(bench_without_sweep()), "holds no sweep: run bench_kernel.py with --sweep"),
], ids=["not JSON", "not bench_kernel's", "no sweep"])
def test_unusable_results_are_one_line(tmp_path, sub, capsys, content, said):
    path = tmp_path / "r.json"
    path.write_text(content)
    assert apply_table.main([str(path), "--submission", str(sub)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err


def test_command_line(tmp_path, sub):
    """As a script, from the repository root, in a fresh interpreter (no test setup)."""
    path = tmp_path / "h100.json"
    path.write_text(json.dumps(fixture("h100")))
    run = [sys.executable, "benchmarks/apply_table.py"]
    # the triton ones, and the cuda ones whose entry names an older revision (one proven alike) than the sweep's
    older = sum(e["kernel"] != submission.kernel_revision() for e in tables_of(sub)["tables"]["cuda"][H100])
    proc = subprocess.run([*run, str(path), "--submission", str(sub)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and f"wrote {3 + older} entries" in proc.stdout, proc.stderr
    proc = subprocess.run([*run, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "--dry-run" in proc.stdout and "--force" in proc.stdout


def test_fixtures_are_bench_kernels_format():
    """The recorded sweeps hold what bench_kernel.py writes (keys of main()'s JSON, of each
    sweep record), so the tests above read the real format."""
    for name in ("h100", "b200"):
        results = fixture(name)
        assert set(results) >= {"info", "command", "rows", "sweeps"}
        assert {"device", "capability", "date", "torch", "triton", "kernel_revision"} <= set(results["info"])
        for key, recs in results["sweeps"].items():
            shape, backend = key.split()
            assert re.fullmatch(r"\d+x\d+x\d+", shape)
            for r in recs:
                assert r["backend"] == backend and {"cfg", "us", "ratio", "bad"} <= set(r)
                assert "server_us" in r or r["bad"] == ["probe"]


def test_the_record_names_the_load_policy_of_each_ceiling_where_the_sweep_has_it():
    best = {**record((16, 2, 2, 2), 10.0, 11.0), "server_ratio": 0.9, "ratio": 0.88,
            "server_ceiling_policy": "cs", "ceiling_policy": "plain"}
    text = apply_table.record_text({"ranked": [best], "records": [best]}, {}, None)
    assert text.startswith("server 11.00 us, clean 10.00 (ceilings 9.90 cs / 8.80 plain), the best of 1 configs")


def test_a_submission_alone_is_read_against_the_kits_sources_and_not_written(tmp_path, capsys):
    """A copy of submission.py with no kernels/ beside it: --dry-run reads the kit's sources; a
    run that would write is refused in one line (there is no tables file of its own to write)."""
    alone = tmp_path / "submission.py"
    alone.write_text((ROOT / "submission.py").read_text())
    assert apply(tmp_path, fixture("b200"), alone, "--dry-run") == 0
    assert "+++ b/kernels/tables.json" in capsys.readouterr().out
    assert apply(tmp_path, fixture("b200"), alone) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no kernels/tables.json beside" in err
    assert alone.read_text() == (ROOT / "submission.py").read_text()
