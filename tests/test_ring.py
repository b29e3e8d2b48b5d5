"""The cuda backend's persistent bulk-copy ring (CudaConfig ring > 0; kernels/nvfp4_gemv.cu,
``ring_body``).

CPU: the config rules and shape rules, the kernel's name and wrapper, the shared memory it is
launched with (``ring_smem``) against the kernel's own layout, the most batches one block's share
touches against a brute force, the work partition (every stage of every unit copied once and
consumed once, by the warp it was copied for) as the kernel's index arithmetic does it, and a
compile for sm_90a and sm_100a of every decode. GPU: every decode on full-range data with c
poisoned; more blocks than units (empty blocks); shares that do not divide, and that span
batches; the eligibility rules with their fallback to a register tile; identical bits on repeat
and across grids (another number of blocks per SM).
"""

import pytest
import torch
from conftest import make_input, requires_cuda
from tolerances import KERNEL_ATOL, KERNEL_RTOL

import reference
import submission
from utils import verbose_allclose

Cfg = submission.CudaConfig
_RING = dict(lpr=32, v=1, pipe="ptxas", minb=1)

# One ring config per K the tests use: (M, K, L) -> config.
RINGS = {
    16384: Cfg(rpt=1, u=8, warps=8, ks=2, ring=2, pw=4, decode="dp4a-sr2", **_RING),  # a row in 2 stages, 2 warps
    7168: Cfg(rpt=1, u=7, warps=16, ring=2, pw=3, decode="dp4a-sr2", **_RING),  # a whole row per stage
    2048: Cfg(rpt=2, u=2, warps=16, ring=4, decode="dp4a-sr2", **_RING),  # two whole rows, warps feed themselves
    1024: Cfg(rpt=4, u=1, warps=4, ring=3, pw=1, decode="dp4a-sr2", **_RING),  # four whole rows per stage
}


# --------------------------------------------------------------------------- CPU: rules

def test_ring_configs_take_the_ring_rules():
    for cfg in RINGS.values():
        assert cfg.problem() == "", cfg
    base = RINGS[16384]
    for bad, words in [(dict(lpr=8), "lpr 32"), (dict(v=2), "v 1"), (dict(bload=True), "defaults"),
                       (dict(kb=2), "defaults"), (dict(ki=True), "defaults"), (dict(minb=0), "minb in 1..8"),
                       (dict(warps=15), "warps <= 14"), (dict(ks=4), "+ pw <= 32 warps"),
                       (dict(warps=29, ks=1), "+ pw <= 32 warps"), (dict(pw=9), "pw must be"),
                       (dict(rpt=9), "rpt <= 8"), (dict(ring=17), "0..16")]:
        assert words in base._replace(**bad).problem(), bad


@pytest.mark.parametrize("k, cfg, words", [
    (16384, RINGS[16384]._replace(ks=4), "multiple of ks = 4"),  # 2 stages a row, 4 warps on it
    (7168, RINGS[16384], "must divide K/32 = 224"),
    (4096, RINGS[2048], "whole rows"),
])
def test_ring_shape_rules_name_the_constraint(k, cfg, words):
    assert words in cfg.shape_problem(128, k)
    assert not cfg.fits(128, k)


def test_ring_fits_its_shapes_and_counts_units_of_rpt_rows():
    for k, cfg in RINGS.items():
        assert cfg.fits(128, k) and cfg.rows == cfg.rpt
    assert "rows per block must divide M=130" in RINGS[1024].shape_problem(130, 1024)


def test_ring_kernel_name_and_wrapper():
    name, source = submission.cuda_kernel(RINGS[16384], True, True)
    assert name == "nvfp4_gemv_ring2_rpt1_u8_w8_ks2_pw4_dp4a_sr2_minb1"
    assert "__launch_bounds__(640, 1)" in source  # 8 teams x 2 warps + 4 producer warps
    assert "ring_body<1, 8, 8, 2, 2, 4, DEC_DP4A_SR2, false>(" in source and source.rstrip().endswith("}")
    assert submission.cuda_kernel(RINGS[16384], True, True, probe=True)[0].endswith("_probe")
    for full, plain in ((False, True), (True, False)):
        with pytest.raises(ValueError, match="full and plain only"):
            submission.cuda_kernel(RINGS[16384], full, plain)


def test_ring_grid_and_threads_without_a_device():
    assert submission.cuda_grid(RINGS[2048], 7168, 4, None) == ((7168 // 2 * 4, 1, 1), 32 * 16)


# --------------------------------------------------------------------------- CPU: layout and partition

def _layout(cfg, k, batches):
    """The kernel's RingLayout, written out: (B0, the end of b's region)."""
    slots, warps, stage = cfg.warps * cfg.ks * cfg.ring, cfg.warps * cfg.ks, cfg.rpt * 32 * cfg.u
    bars = 2 * slots * 8
    red = -(-(bars + 2 * warps * cfg.rpt * 4) // 128) * 128 - bars
    s0 = bars + red + slots * 16 * stage
    b0 = -(-(s0 + slots * 2 * stage) // 128) * 128
    words = {"dp4a": 5, "f16x2": 4, "dp4a-sr": 4, "dp4a-sr2": 2}[cfg.decode]
    return b0, b0 + batches * (k // 32) * (16 * words + 4)


@pytest.mark.parametrize("decode", ["dp4a", "f16x2", "dp4a-sr", "dp4a-sr2"])
@pytest.mark.parametrize("k", sorted(RINGS))
@pytest.mark.parametrize("batches", [1, 2, 3])
def test_ring_smem_is_the_kernels_layout(k, decode, batches):
    cfg = RINGS[k]._replace(decode=decode)
    b0, end = _layout(cfg, k, batches)
    assert submission.ring_smem(cfg, k, batches) == end
    assert b0 % 128 == 0


def _brute_batches(units, groups, blocks):
    most = 0
    for i in range(blocks):
        rows = [u // groups for u in range(units * i // blocks, units * (i + 1) // blocks)]
        most = max(most, len(set(rows)))
    return most


@pytest.mark.parametrize("units, groups, blocks", [(128, 128, 132), (7168, 7168, 132), (32768, 4096, 132),
                                                   (768, 384, 132), (768, 384, 96), (12, 3, 5), (5, 1, 7)])
def testring_batches_per_block_against_a_brute_force(units, groups, blocks):
    assert submission.ring_batches(units, groups, blocks) == _brute_batches(units, groups, blocks)


def _partition(units, blocks, teams, ks, spu, ring, producers):
    """The kernel's index arithmetic in Python: per block, the producer's copies in issue order
    and each consumer warp's stages in consumption order, as (warp, slot, use, unit, stage)."""
    copies, consumed = [], []
    for blk in range(blocks):
        ubeg, uend = units * blk // blocks, units * (blk + 1) // blocks
        n = uend - ubeg
        if n <= 0:
            continue
        spw = spu // ks
        rounds = -(-n // teams) * spw
        for p in range(producers):
            for t in range(rounds):
                j, q = divmod(t, spw)
                for w in range(p, teams * ks, producers):
                    unit = w // ks + j * teams
                    if unit >= n:
                        break
                    copies.append((blk, w, t % ring, t // ring, ubeg + unit, w % ks + ks * q))
        for w in range(teams * ks):
            t = 0
            for unit in range(w // ks, n, teams):
                for q in range(spw):
                    consumed.append((blk, w, t % ring, t // ring, ubeg + unit, w % ks + ks * q))
                    t += 1
    return copies, consumed


@pytest.mark.parametrize("units, blocks, teams, ks, spu", [(7168, 132, 8, 2, 2), (128, 132, 16, 1, 1),
                                                          (768, 96, 4, 2, 4), (37, 5, 3, 3, 6), (3, 7, 2, 1, 1)])
@pytest.mark.parametrize("producers", [1, 3])
def test_ring_partition_copies_each_stage_once_for_the_warp_that_reads_it(units, blocks, teams, ks, spu, producers):
    copies, consumed = _partition(units, blocks, teams, ks, spu, 3, producers)
    assert sorted(copies) == sorted(consumed)  # the same stages, each in the same warp's slot and use
    stages = sorted((unit, stage) for *_, unit, stage in copies)
    assert stages == [(u, s) for u in range(units) for s in range(spu)]  # every stage of every unit once
    per_warp = {}
    for blk, w, slot, use, *_ in copies:  # a warp's slots are filled in order: uses 0, 1, ... of each
        per_warp.setdefault((blk, w, slot), []).append(use)
    assert all(uses == list(range(len(uses))) for uses in per_warp.values())


# --------------------------------------------------------------------------- CPU: compile

def _nvrtc_or_skip():
    try:
        submission.find_nvrtc()
    except submission.CudaBuildError as exc:
        pytest.skip(f"no NVRTC here: {exc}")


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_ring_compiles_for_hopper_and_blackwell_every_decode(arch, shared_cubins):
    _nvrtc_or_skip()
    for decode in ("dp4a", "f16x2", "dp4a-sr", "dp4a-sr2"):
        for probe in (False, True):
            name, source = submission.cuda_kernel(RINGS[16384]._replace(decode=decode), True, True, probe)
            assert submission.cuda_compile(source, arch), name


# --------------------------------------------------------------------------- GPU

def _run(data, cfg):
    data[6].fill_(float("nan"))  # unwritten elements fail the comparison
    out = submission.run_backend("cuda", data, cfg)
    torch.cuda.synchronize()
    return out


def _check(data, cfg, what=""):
    out = _run(data, cfg).clone()
    expected = reference.ref_kernel(data[:6] + (data[6].clone(),))
    reasons = verbose_allclose(out, expected, rtol=KERNEL_RTOL, atol=KERNEL_ATOL)
    assert not reasons, f"{cfg} {what}: " + "\n".join(reasons)
    return out


def _ring_ran(cfg, m, l):
    """Whether the last launches of these inputs ran a ring kernel (not the fallback tile)."""
    return any(key[4].ring for key in submission._CUDA_LAUNCH if key[1:3] == (m, l) and key[4] == cfg)


@requires_cuda
@pytest.mark.parametrize("decode", ["dp4a", "f16x2", "dp4a-sr", "dp4a-sr2"])
@pytest.mark.parametrize("m, k, l", [(7168, 16384, 1), (4096, 7168, 8), (7168, 2048, 4), (256, 1024, 3)])
def test_gpu_ring_every_decode_full_range(m, k, l, decode):
    """Right on full-range data (all 256 byte values) with c poisoned, and the same bits on repeat,
    with producer warps and with consumer warps feeding themselves;
    4096x7168x8 and 7168x2048x4 on 132 SMs: shares that do not divide and span batches."""
    data = make_input(m, k, l, 21, "cuda", "full-range")
    for pw in (RINGS[k].pw, 0 if RINGS[k].pw else 2):  # producer warps, and warps that feed themselves
        cfg = RINGS[k]._replace(decode=decode, pw=pw)
        out = _check(data, cfg)
        assert _ring_ran(cfg, m, l)
        assert torch.equal(out.view(torch.int16), _run(data, cfg).view(torch.int16)), f"{cfg}: repeats differ"


@requires_cuda
@pytest.mark.parametrize("m, k, l", [(384, 7168, 2), (128, 16384, 1), (1152, 2048, 5)])
def test_gpu_ring_shares_across_batches_and_official_data(m, k, l):
    """384x7168x2: a block's rows span the two batches (one b each); 128x16384x1: fewer units than
    SMs; official and full-range data."""
    for dist in ("official", "full-range"):
        _check(make_input(m, k, l, 5, "cuda", dist), RINGS[k], dist)


@requires_cuda
def test_gpu_ring_empty_blocks_do_not_strand_the_producer():
    """More blocks than units (a launch built by hand: 40 blocks for 16 units): the empty blocks
    return, the others write every row."""
    m, k, l = 128, 1024, 1
    cfg = RINGS[k]
    data = make_input(m, k, l, 9, "cuda", "full-range")
    a, b, sfa, sfb, _, _, c = data
    fn = submission._cuda_function(a.device, cfg, True, True)
    scalars = (k // 32, a.stride(0), a.stride(2), b.stride(2), sfa.stride(0), sfa.stride(2), sfb.stride(2),
               c.stride(0), c.stride(2))
    units = m // cfg.rpt * l
    smem = submission.ring_smem(cfg, k, 1)
    threads = submission._ring_threads(cfg)
    assert submission.cuda_driver().blocks_per_sm(fn, threads, smem) >= 1
    launch = submission._CudaLaunch(fn, (units + 24, 1, 1), threads, scalars, None,
                                    m // cfg.rpt, smem, l)
    c.fill_(float("nan"))
    launch(a, b, sfa, sfb, c)
    torch.cuda.synchronize()
    expected = reference.ref_kernel(data[:6] + (data[6].clone(),))
    reasons = verbose_allclose(c, expected, rtol=KERNEL_RTOL, atol=KERNEL_ATOL)
    assert not reasons, "\n".join(reasons)


@requires_cuda
@pytest.mark.parametrize("m, k, l", [(7168, 2048, 4), (384, 7168, 2)])
def test_gpu_ring_same_bits_across_grids(m, k, l):
    """minb 1 and 2 (another number of blocks, so other shares and batches per block): the same
    bits, a row's sum not depending on which block or warp read it."""
    data = make_input(m, k, l, 3, "cuda", "full-range")
    one = _check(data, RINGS[k])
    two = _check(data, RINGS[k]._replace(minb=2))
    assert torch.equal(one.view(torch.int16), two.view(torch.int16))


@requires_cuda
def test_gpu_ring_falls_back_to_a_register_tile_where_it_cannot_read_the_inputs():
    """Plain scales on the CPU, or 4 bytes off 16-byte alignment: the ring's copies cannot read
    them, so the launch takes the shape's default register tile, and is right."""
    m, k, l = 384, 7168, 2
    data = make_input(m, k, l, 7, "cuda", "full-range")
    cfg = RINGS[k]
    cpu = data[:2] + (data[2].cpu(), data[3].cpu()) + data[4:]
    assert "plain scales" in submission._ring_problem(cpu, cfg, m, k)
    _check(cpu, cfg, "plain scales on the CPU")
    store = torch.empty(data[2].numel() + 16, dtype=torch.uint8, device="cuda")
    shifted = store[4:4 + data[2].numel()].view(data[2].dtype).view(l, m, k // 16).permute(1, 2, 0)
    shifted.copy_(data[2])
    moved = data[:2] + (shifted,) + data[3:]
    assert "16-byte aligned" in submission._ring_problem(moved, cfg, m, k)
    _check(moved, cfg, "scales off 16-byte alignment")
