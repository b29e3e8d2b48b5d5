"""Run one backend and config on one benchmark shape a few times: the process to put under a
profiler (needs a CUDA GPU), e.g. on a machine where Nsight Compute reads counters:

    ncu --clock-control none --kernel-name regex:nvfp4 --launch-skip 3 --launch-count 1 \\
        --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis \\
        python3 benchmarks/profile_one.py --shape 4096x7168x8 --backend cuda --config 16,4,2,2,2

``--backend read`` runs the read ceiling's kernel instead (benchmarks/timing.py: a streaming
read of the shape's bytes, launch shape 1024 x 1 iteration x 4 warps, the one that won every
ceiling on the H100 and H200 in the kept logs; its loads by ``--read-policy``, a name of
timing.READ_POLICIES, default evict_first: the read's only loads before it had policies), to
profile beside the kernel (``--kernel-name regex:_read_kernel``). ``--sms N`` runs on a green context of N SMs (the
SM-pressure point of benchmarks/bench_kernel.py --sms). ``--server-l2`` clears the L2 before
every call as the leaderboard's harness does (utils.clear_l2_cache: the L2 is left full of dirty
lines); profile it with ``--cache-control none --replay-mode application`` so that every pass
sees that state rather than ncu's flushed cache or the previous pass's lines.
"""

from __future__ import annotations

import argparse
import sys

if not __package__:  # run as `python3 benchmarks/NAME.py`: kitpath puts the kit's root on sys.path
    import kitpath  # noqa: F401

import harness  # noqa: E402  the CUDA question, asked without torch where no driver is
from benchmarks import timing  # noqa: E402  the read kernel and its policies (torch: where it times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 benchmarks/profile_one.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="4096x7168x8", help="MxKxL")
    ap.add_argument("--backend", default="cuda", help="cuda, triton, or read (the read ceiling's kernel)")
    ap.add_argument("--read-policy", default=None, choices=list(timing.POLICY),
                    help="load policy of --backend read (timing.READ_POLICIES; default evict_first)")
    ap.add_argument("--config", default="", help="comma-separated config (default: the backend's pick)")
    ap.add_argument("--calls", type=int, default=6, help="calls to make")
    ap.add_argument("--sms", type=int, default=0, help="run on a green context of this many SMs (0: all)")
    ap.add_argument("--server-l2", action="store_true", help="clear the L2 before every call, as the server does")
    args = ap.parse_args(argv)
    parts = args.shape.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        ap.error(f"--shape {args.shape!r}: expected MxKxL, three positive integers (e.g. 4096x7168x8)")
    if args.calls < 1 or args.sms < 0:
        ap.error("--calls must be at least 1, --sms at least 0")
    if args.backend == "read" and args.config:
        ap.error(f"--config {args.config}: the read kernel takes no config (--read-policy picks its loads)")
    if args.backend != "read" and args.read_policy:
        ap.error(f"--read-policy {args.read_policy} goes with --backend read (the {args.backend} backend's loads "
                 "are its config's)")
    if args.sms:
        try:
            green = timing.enter_green_context(args.sms)  # noqa: F841 - kept alive for the run
        except RuntimeError as exc:
            print(f"profile_one.py --sms: {exc}", file=sys.stderr)
            return 2
    if not harness.cuda_available():
        print("profile_one.py needs a CUDA GPU; this machine has none", file=sys.stderr)
        return 2
    import torch

    import reference
    import submission
    from benchmarks import refusals
    from utils import clear_l2_cache
    m, k, l = (int(x) for x in parts)
    if args.backend == "read":
        buf = timing.make_read_buffers(timing.gemv_bytes(m, k, l), 1)[0]
        policy = args.read_policy or "evict_first"
        call = lambda: timing.read_launch(buf, 1024, 1, 4, policy)  # noqa: E731
    else:
        backend = submission.BACKENDS.get(args.backend)
        if backend is None:
            print(f"profile_one.py: --backend {args.backend}: not a backend of submission.py (one of "
                  f"{', '.join(submission.BACKENDS)}, or read)", file=sys.stderr)
            return 2
        cfg = None
        if args.config:  # fields by name or by position (the backend's config type reads it)
            try:
                cfg = backend.config.of(args.config) if backend.config else None
            except (TypeError, ValueError) as exc:
                print(f"profile_one.py: --config {args.config}: {exc}", file=sys.stderr)
                return 2
            if cfg is None:
                why = f"the {args.backend} backend takes no config"
            else:  # the rules of the config type (cuda's and triton's have both)
                why = cfg.problem() or cfg.shape_problem(m, k)
            if why:
                print(f"profile_one.py: --config {args.config}: {why}", file=sys.stderr)
                return 2
        if args.backend == "cuda":  # the kernel built before any launch: one that does not compile is one line
            cap = torch.cuda.get_device_capability()
            cfg_built = (cfg or submission.cuda_default(m, k, l, cap)).with_decode(cap)
            problem = refusals.build_problem(submission, cfg_built, submission.cuda_arch(cap))
            if problem:
                print(f"profile_one.py: {problem}", file=sys.stderr)
                return 2
        data = reference.generate_input(m, k, l, 1, device="cuda")
        call = lambda: submission.run_backend(args.backend, data, cfg)  # noqa: E731
    for _ in range(args.calls):
        if args.server_l2:
            torch.cuda.synchronize()
            clear_l2_cache()
        call()
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
