"""benchmarks/apply_table.py: a sweep's configs written into submission.py's measured table.

Recorded sweeps in bench_kernel.py's JSON format (tests/fixtures/sweep-*.json; each says
where its numbers come from) are applied to a copy of submission.py: the H100 sweep, whose
winners are today's H100 entries, must leave the file as it is; the B200 one adds a block
that _config_for then uses on a device of that name. The ranking rule, the refusals (another
kernel revision, no sweep, unreadable input), wrong rows and probes, a replaced entry, the
dry run and the kernel revision's scope are checked beside. No GPU needed."""

import difflib
import json
import re
import subprocess
import sys
import types

import pytest
import torch
from conftest import ROOT

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
    ("cuda", 7168, 16384, 1): Cuda(lpr=32, rpt=2, u=8, warps=2, decode="f16x2", pipe=0, minb=1),
    ("cuda", 4096, 7168, 8): Cuda(lpr=32, rpt=8, u=1, warps=1, decode="f16x2", v=1, pipe=0, minb=1),
    ("cuda", 7168, 2048, 4): Cuda(lpr=32, rpt=4, u=1, warps=1, decode="f16x2", v=1, pipe=0, minb=1),
    ("triton", 7168, 16384, 1): Triton(block_m=8, block_g=128, warps=2),
    ("triton", 4096, 7168, 8): Triton(block_m=16, block_g=32, warps=1),
    ("triton", 7168, 2048, 4): Triton(block_m=16, block_g=64, warps=2),
}


def fixture(name: str, revision: str | None = "current") -> dict:
    """A recorded sweep; its kernel revision set to this checkout's (the recorded one goes
    stale whenever the kernels change), or to ``revision``."""
    results = json.loads((FIXTURES / f"sweep-{name}.json").read_text())
    if revision == "current":
        results["info"]["kernel_revision"] = apply_table.kernel_revision()
    elif revision is None:
        del results["info"]["kernel_revision"]
    else:
        results["info"]["kernel_revision"] = revision
    return results


@pytest.fixture
def sub(tmp_path):
    """A copy of submission.py to write into."""
    path = tmp_path / "submission.py"
    path.write_text((ROOT / "submission.py").read_text())
    return path


def apply(tmp_path, results: dict, sub, *flags) -> int:
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    return apply_table.main([str(path), "--submission", str(sub), *flags])


def record(cfg, us, server_us, bad=()):
    return {"backend": "cuda", "cfg": list(cfg), "us": us, "server_us": server_us, "ratio": 1.0,
            "server_ratio": 1.0, "bad": list(bad)}


# --------------------------------------------------------------------------- kernel revision


def test_kernel_revision_is_a_short_stable_hash():
    rev = apply_table.kernel_revision()
    assert re.fullmatch(r"[0-9a-f]{12}", rev)
    assert apply_table.kernel_revision(text=(ROOT / "submission.py").read_text()) == rev


KERNEL_EDITS = [  # (what, old, new): each changes what a measured config means
    ("cuda source, a #pragma line", "#pragma unroll\n", "#pragma unroll 1\n"),
    ("cuda source, an operand", "0x88888888u, vh = shr_hi<16>(v)", "0x88888888u, vh = shr_hi<15>(v)"),
    ("cuda wrapper template", "__launch_bounds__({bounds})", "__launch_bounds__({bounds}, 1)"),
    ("cuda config default", "    pipe: int = 1  #", "    pipe: int = 0  #"),
    ("triton kernel body", "out = tl.sum(acc, axis=1)", "out = tl.sum(acc, axis=1) * 1.0"),
    ("triton helper the kernel reaches", "_POS_LO, _POS_HI = 0x03020100, 0x0C080604",
     "_POS_LO, _POS_HI = 0x03020100, 0x0C080605"),
    ("triton decode", '_TRITON_DECODE = "dp4a"', '_TRITON_DECODE = "f16x2"'),
    ("triton launch", "EVEN_G=n_groups % cfg.block_g == 0", "EVEN_G=False"),
]
NEUTRAL_EDITS = [  # (what, old, new): none of these touches a kernel
    ("comment in the triton block", "# e2m1 magnitude code -> 2|value| as a byte", "# e2m1 code -> 2|value|"),
    ("docstring of cuda_kernel", "``probe`` the loads-only timing probe.", "``probe`` the loads-only probe (wrong c)."),
    ("comment in the cuda source", "// b and its scales are small and read by every row: cached loads (BLOAD 0), or",
     "// b and its scales: small, read by every row, so cached loads (BLOAD 0), or"),
    ("docstring of a Triton helper", '"""Nibble n of uint32 words -> fp32 2 * value',
     '"""Nibble n of a uint32 word -> 2 * value'),
    ("comment of a config field", "# rows per lane", "# rows each lane owns"),
    ("the measured table", "(7168, 2048, 4): TritonConfig(block_m=16, block_g=64, warps=2),",
     "(7168, 2048, 4): TritonConfig(block_m=16, block_g=32, warps=1),"),
    ("another constant", "_TORCH_CHUNK = 1 << 24", "_TORCH_CHUNK = 1 << 23"),
    ("a config type's method", "return f\"triton block_m={self.block_m} must divide M={m}\"",
     "return f\"triton block_m={self.block_m} does not divide M={m}\""),
]


@pytest.mark.parametrize("what, old, new", KERNEL_EDITS, ids=[e[0] for e in KERNEL_EDITS])
def test_kernel_revision_follows_the_kernel_sources(what, old, new):
    text = (ROOT / "submission.py").read_text()
    assert old in text, f"{what}: the text to edit is gone from submission.py"
    assert apply_table.kernel_revision(text=text.replace(old, new, 1)) != apply_table.kernel_revision(text=text)


@pytest.mark.parametrize("what, old, new", NEUTRAL_EDITS, ids=[e[0] for e in NEUTRAL_EDITS])
def test_kernel_revision_ignores_comments_tables_and_other_code(what, old, new):
    text = (ROOT / "submission.py").read_text()
    assert old in text, f"{what}: the text to edit is gone from submission.py"
    assert apply_table.kernel_revision(text=text.replace(old, new, 1)) == apply_table.kernel_revision(text=text)


def test_kernel_revision_names_what_is_missing():
    with pytest.raises(ValueError, match="cuda_kernel"):
        apply_table.kernel_revision(text="_CUDA_SRC = ''\n")


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


def test_kit_revision(tmp_path):
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


def test_h100_sweep_of_todays_winners_reproduces_todays_table(tmp_path, sub, capsys):
    results = fixture("h100")
    swept = apply_table.picks(results, apply_table.submission_module(sub.read_text()))
    table = apply_table.read_table(sub.read_text())[H100]
    assert {key: p["ranked"][0]["cfg"] for key, p in swept.items()} == table, \
        "the fixture's winners are no longer today's H100 entries"
    before = sub.read_text()
    assert apply(tmp_path, results, sub) == 0
    assert sub.read_text() == before
    out = capsys.readouterr().out
    assert out.count(": unchanged ") == len(table) and "nothing to change" in out


def test_b200_sweep_adds_a_block_that_config_for_uses(tmp_path, sub, monkeypatch, capsys):
    before = sub.read_text()
    assert apply(tmp_path, fixture("b200"), sub) == 0
    text = sub.read_text()
    assert harness.static_problems(sub) == []
    tables = apply_table.read_table(text)
    assert tables[B200] == B200_WINNERS  # scaled_mm (no configs) left out
    old = apply_table.read_table(before)
    assert {m: t for m, t in tables.items() if m != B200} == old
    assert all(len(line) <= 120 for line in text.splitlines())  # the project's line length
    new_lines = [line for line in text.splitlines() if line not in before.splitlines()]
    comments = [line.strip() for line in new_lines if line.strip().startswith("#")]
    assert len(comments) == len(B200_WINNERS), comments  # one line per entry, naming its record
    assert ("# server 11.00 us, clean 10.05: sweep of 2026-12-01, kit 0123456789ab, kernel "
            f"{apply_table.kernel_revision()}") in comments
    out = capsys.readouterr().out
    runner = Cuda(lpr=32, rpt=4, u=4, warps=8, decode="f16x2", pipe=0, minb=1)
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


def test_a_better_config_replaces_the_entry_and_its_comment(tmp_path, sub, capsys):
    """The sweep's winner differs from an entry: that entry and its comment are replaced (the
    comment names the former entry's times in this run); every other line stays."""
    results = fixture("h100")
    entry, better = (8, 2, 4, 1, 3, 1, 2, 0, 2, 1, 8), (8, 2, 4, 1, 3, 1, 2, 0, 5, 1, 4)  # as recorded
    for r in results["sweeps"]["4096x7168x8 cuda"]:
        if r["cfg"] == list(better):
            r.update(us=47.90, server_us=50.00)
    entry, better = Cuda.of(entry), Cuda.of(better)
    before = sub.read_text().splitlines()
    assert apply(tmp_path, results, sub) == 0
    after = sub.read_text().splitlines()
    assert apply_table.read_table("\n".join(after))[H100][("cuda", 4096, 7168, 8)] == better
    (change,) = [op for op in difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes()
                 if op[0] != "equal"]
    removed, added = before[change[1]:change[2]], after[change[3]:change[4]]

    def code(lines):
        return " ".join(line.strip() for line in lines if not line.strip().startswith("#"))

    assert code(removed) == f"(4096, 7168, 8): {entry!r},"
    assert removed[0].strip().startswith("#") and code(added) == f"(4096, 7168, 8): {better!r},"
    (comment,) = [line.strip() for line in added if line.strip().startswith("#")]
    assert comment.startswith("# server 50.00 us, clean 47.90: sweep of ")
    former = next(r for r in results["sweeps"]["4096x7168x8 cuda"] if Cuda.of(r["cfg"]) == entry)
    times = f"{former['server_us']:.2f} / {former['us']:.2f}"
    out = capsys.readouterr().out
    assert f"next the former entry {entry!r} {times}" in out and f"{entry!r} -> {better!r}" in out


def test_wrong_rows_and_probes_never_win(tmp_path, sub, capsys):
    """A wrong config (even one with times) and a probe, both faster than everything, are
    skipped; a shape whose every record is wrong keeps its entry."""
    results = fixture("h100")
    recs = results["sweeps"]["7168x16384x1 cuda"]
    recs.append(record((32, 1, 8, 4, 2, 2, 2, 0, 1), 1.0, 1.0, ["official: Number of mismatched elements: 9"]))
    recs.append({**record((32, 1, 8, 4, 2, 2, 2, 0, 1), 2.0, 2.0), "bad": ["probe"]})
    for r in results["sweeps"]["7168x2048x4 triton"]:
        r.update(us=float("nan"), server_us=float("nan"), bad=["full-range: mismatch"])
    before = sub.read_text()
    assert apply(tmp_path, results, sub) == 0
    assert sub.read_text() == before
    out = capsys.readouterr().out
    assert f"cuda 7168x16384x1: unchanged {Cuda.of((8, 2, 4, 1, 3, 1, 2, 0, 2, 1, 8))!r}" in out
    assert "triton 7168x2048x4: no usable record (3 wrong or probes): left as it is" in out


@pytest.mark.parametrize("revision, said", [("0123456789ab", "kernel revision 0123456789ab"),
                                             (None, "no kernel revision")], ids=["other revision", "none recorded"])
def test_another_kernel_revision_is_refused(tmp_path, sub, capsys, revision, said):
    before = sub.read_text()
    assert apply(tmp_path, fixture("b200", revision), sub) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err and "--force" in err
    assert sub.read_text() == before
    assert apply(tmp_path, fixture("b200", revision), sub, "--force") == 0
    err = capsys.readouterr().err
    assert err.startswith("warning: ") and said in err
    assert apply_table.read_table(sub.read_text())[B200] == B200_WINNERS


def test_a_revision_of_the_same_sass_applies_without_force(tmp_path, sub, monkeypatch, capsys):
    """A sweep recorded under an older revision that SAME_SASS lists as compiling to the current
    revision's SASS applies as it is; one not listed is refused."""
    monkeypatch.setattr(apply_table, "SAME_SASS", {apply_table.kernel_revision(): ("0123456789ab",)})
    assert apply(tmp_path, fixture("b200", "0123456789ab"), sub) == 0
    assert apply_table.read_table(sub.read_text())[B200] == B200_WINNERS
    assert apply(tmp_path, fixture("b200", "ba9876543210"), sub) == 2


def test_shipped_same_sass_names_revisions_of_12_digits():
    for current, old in apply_table.SAME_SASS.items():
        assert re.fullmatch(r"[0-9a-f]{12}", current) and all(re.fullmatch(r"[0-9a-f]{12}", o) for o in old)


def test_dry_run_prints_the_diff_and_writes_nothing(tmp_path, sub, capsys):
    before = sub.read_text()
    assert apply(tmp_path, fixture("b200"), sub, "--dry-run") == 0
    assert sub.read_text() == before
    out = capsys.readouterr().out
    assert "--- a/submission.py" in out and "+++ b/submission.py" in out
    assert '+    "NVIDIA B200": {  # bench_kernel.py --sweep of 2026-12-01' in out
    assert f"+        (7168, 16384, 1): {B200_WINNERS[('cuda', 7168, 16384, 1)]!r}," in out


def test_a_new_file_that_fails_its_checks_is_not_written(tmp_path, sub, monkeypatch, capsys):
    monkeypatch.setattr(apply_table, "_fits", lambda mod, key, cfg: key[0] != "triton")
    before = sub.read_text()
    assert apply(tmp_path, fixture("b200"), sub) == 1
    assert sub.read_text() == before
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
    proc = subprocess.run([*run, str(path), "--submission", str(sub)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and "nothing to change" in proc.stdout, proc.stderr
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
