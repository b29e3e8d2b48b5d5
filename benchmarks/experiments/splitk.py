"""Split-K / persistent-grid experiment (needs a CUDA GPU; result: no gain, NOTES.md).

Runs against the experimental submission.py of commit 73a9ed8 (its kernel
takes SPLIT, SPLIT_MAJOR, PERSIST and reads submission._TRITON_SPLITS); the kernel that ships
has none of it. To re-run: `git show 73a9ed8:submission.py > submission.py` on a
scratch checkout. Variants: K split across programs (partial fp32 row sums to a workspace
cached per shape; an acq_rel arrival counter per row block; the last program to arrive sums
the partials in fixed order 0..SPLIT-1, writes c and resets the counter: one launch,
bit-identical repeats) and a grid-stride persistent loop, each timed against the current
config in the same process, interleaved over several rounds (device time, L2 cold, 8 sets).

    python3 benchmarks/experiments/splitk.py [--rounds 5] [--only "7168,16384,1;4096,7168,8"]
"""

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import reference  # noqa: E402
import submission  # noqa: E402
from benchmarks import timing  # noqa: E402
from benchmarks.bench_kernel import N_SETS, check, check_cases, gemv_bytes  # noqa: E402

# shape -> [(label, (BLOCK_M, BLOCK_G, warps, stages), split)]; the first is the current config
VARIANTS = {  # label, (BLOCK_M, BLOCK_G, warps, stages), (split, split-major grid, persistent programs per SM)
    (7168, 16384, 1): [("current", (8, 128, 2, 1), (1, False, 0)), ("1-trip loop", (8, 128, 2, 1), (1, False, 8)),
                       ("s2", (8, 128, 2, 1), (2, False, 0)), ("s4", (8, 128, 2, 1), (4, False, 0)),
                       ("s4 16x64x2", (16, 64, 2, 1), (4, False, 0)), ("s4 16x64x2 major", (16, 64, 2, 1), (4, True, 0)),
                       ("s8 16x64x2", (16, 64, 2, 1), (8, False, 0)), ("s8 16x64x2 major", (16, 64, 2, 1), (8, True, 0)),
                       ("s2 major", (8, 128, 2, 1), (2, True, 0)),
                       ("persist 4/SM", (8, 128, 2, 1), (1, False, 4)), ("persist 6/SM", (8, 128, 2, 1), (1, False, 6)),
                       ("persist 2x128x1 16/SM", (2, 128, 1, 1), (1, False, 16)),
                       ("persist s4 16x64x2 12/SM", (16, 64, 2, 1), (4, True, 12))],
    (4096, 7168, 8): [("current", (16, 64, 2, 1), (1, False, 0)), ("1-trip loop", (16, 64, 2, 1), (1, False, 8)),
                      ("persist 1/SM", (16, 64, 2, 1), (1, False, 1)), ("persist 1.5/SM", (16, 64, 2, 1), (1, False, 1.5)),
                      ("current", (16, 64, 2, 1), (1, False, 0)), ("1-trip loop", (16, 64, 2, 1), (1, False, 8))],
    "unused": [("current", (16, 64, 2, 1), (1, False, 0)), ("s2", (16, 64, 2, 1), (2, False, 0)),
                      ("persist 8/SM", (16, 64, 2, 1), (1, False, 8))],
    (7168, 2048, 4): [("current", (16, 64, 2, 1), (1, False, 0)), ("s2", (16, 64, 2, 1), (2, False, 0)),
                      ("persist 8/SM", (16, 64, 2, 1), (1, False, 8))],
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--json", default="")
    ap.add_argument("--only", default="", help="m,k,l of one shape")
    args = ap.parse_args()
    args.only = [tuple(int(x) for x in o.split(",")) for o in args.only.split(";")] if args.only else []
    print(torch.cuda.get_device_name(0), torch.__version__, submission.triton.__version__, flush=True)
    out = {}
    for shape_key, variants in VARIANTS.items():
        if shape_key == "unused" or (args.only and shape_key not in args.only):
            continue
        m, k, l = shape_key
        shape = f"{m}x{k}x{l}"
        sets = [reference.generate_input(m, k, l, 1000 + i, device="cuda") for i in range(N_SETS)]
        cases = check_cases(m, k, l, 7)
        fns = {}
        for label, cfg, split in variants:
            def fn(d, cfg=cfg, split=split):
                submission._TRITON_CONFIGS[(m, k, l)] = cfg
                submission._TRITON_SPLITS[(m, k, l)] = split
                return submission._triton_backend(d, m, k, l)
            try:
                bad = check(fn, cases)
                d = cases[1][1]
                first = fn(d).clone()
                same = all(torch.equal(fn(d), first) for _ in range(20))
            except Exception as e:  # noqa: BLE001
                bad, same = [f"{type(e).__name__}: {str(e)[:300]}"], False
            print(f"{shape} {label} cfg={cfg} variant={split}: correct={not bad} bit-identical x20={same} {bad}",
                  flush=True)
            if not bad and same:
                fns[label] = fn
        res = {label: [] for label in fns}
        res["ceiling"] = []
        nbytes = gemv_bytes(m, k, l)
        for r in range(args.rounds):
            res["ceiling"].append(timing.read_ceiling(nbytes, N_SETS, args.reps)["us"])
            for label, fn in fns.items():
                for attempt in range(4):  # the hold can be short for the first calls: retry
                    try:
                        res[label].append(timing.median(timing.device_times(fn, sets, args.reps)))
                        break
                    except RuntimeError as e:
                        print("retry:", e, flush=True)
        ceil = min(res["ceiling"])
        for label, ts in res.items():
            print(f"{shape} {label:14s} " + " ".join(f"{t:6.2f}" for t in ts)
                  + f"  median {timing.median(ts):6.2f} us  ceiling/kernel {ceil / timing.median(ts):.3f}", flush=True)
        out[shape] = res
        submission._TRITON_SPLITS.pop((m, k, l), None)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
