"""Named cuda configs on any shapes, each beside the read ceiling of the same run (needs CUDA).

bench_kernel.py times the shapes of shapes.json; this times the shapes a question needs (an M
sweep at a fixed K, say) and the configs it names, in interleaved rounds so that a slow round
shows as such rather than as one config's loss:

    python3 benchmarks/bench_configs.py --grid GRID.json [--sms 92] [--rounds 2] [--json OUT]  # needs CUDA

GRID.json: {"MxKxL": {"name": {CudaConfig field: value, ...}, ...}, ...} (a list of configs
instead of the inner object names each by its text). Every config is checked against the exact
answer (official and full-range data, c poisoned first) before it is timed; a wrong one stops
the command. Per round and shape: the read ceiling (``timing.read_ceiling``: the fastest read of
the same bytes over the load policies), then each config's device time (L2 clean, 8 rotating
input sets, median of 40 calls) and, unless ``--no-probe``, its loads-only probe. ``--sms N``
runs the whole command on a CUDA green context of N SMs (the driver may grant more: the line
``sms`` says how many), 0 the whole GPU. The grid and every config are checked before anything
touches a GPU, so a bad grid fails on any machine, in one line; before them, that the kit's
submission.py holds its sources (``bundle.refuse_if_out_of_sync``: the record names one kernel
revision, and its ``env`` the ``bundle`` state).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if not __package__:  # run as `python3 benchmarks/NAME.py`: kitpath puts the kit's root on sys.path
    import kitpath  # noqa: F401


def parse_shape(text: str) -> tuple:
    """"MxKxL" -> (M, K, L); ValueError naming the text otherwise."""
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"shape {text!r} is not MxKxL with positive integers")
    return tuple(int(p) for p in parts)


def load_grid(path: str) -> dict:
    """{(M, K, L): {name: CudaConfig}} from GRID.json; ValueError (one line naming the file, the
    shape and the config) for a grid that cannot be run: not JSON, a bad shape, a config with
    unknown fields or one the kernel's rules refuse (CudaConfig.problem)."""
    import submission
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"--grid {path}: not a readable JSON file ({type(exc).__name__}: {exc})") from None
    if not isinstance(raw, dict) or not raw:
        raise ValueError(f"--grid {path}: expected a non-empty object of shapes")
    grid = {}
    for shape, cfgs in raw.items():
        try:
            key = parse_shape(shape)
        except ValueError as exc:
            raise ValueError(f"--grid {path}: {exc}") from None
        items = cfgs.items() if isinstance(cfgs, dict) else ((None, c) for c in cfgs)
        named = {}
        for name, fields in items:
            try:
                cfg = submission.CudaConfig(**fields) if isinstance(fields, dict) else submission.CudaConfig.of(fields)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"--grid {path}: {shape} {name or fields}: {exc}") from None
            problem = cfg.problem()
            if problem:
                raise ValueError(f"--grid {path}: {shape} {name or fields}: {problem}")
            named[name or repr(cfg)] = cfg
        if not named:
            raise ValueError(f"--grid {path}: {shape}: no configs")
        grid[key] = named
    return grid


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python3 benchmarks/bench_configs.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--grid", required=True,
                   help="JSON {'MxKxL': {name: {CudaConfig fields}}} (see the top of this file)")
    p.add_argument("--sms", type=int, default=0, help="run on a green context of N SMs (0: the whole GPU)")
    p.add_argument("--rounds", type=int, default=2, help="rounds per shape, each with its own read ceiling (default 2)")
    p.add_argument("--reps", type=int, default=40, help="timed calls per config and round (median; default 40)")
    p.add_argument("--no-probe", action="store_true", help="skip the loads-only probes")
    p.add_argument("--json", help="also write the record (environment, command, every round) to this file")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.reps < 1 or args.sms < 0:
        p.error("--rounds and --reps must be at least 1, --sms at least 0")
    import harness  # no torch at its top
    problem = harness.writable_file_problem(args.json, "--json", "configs.json")
    if problem:
        p.exit(2, f"bench_configs.py: {problem}\n")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    import bundle  # the standard library and harness only
    bundle.refuse_if_out_of_sync(bundle.SUBMISSION, tool="benchmarks/bench_configs.py")
    try:
        grid = load_grid(args.grid)
    except ValueError as exc:
        print(f"bench_configs.py: {exc}", file=sys.stderr)
        return 2
    from benchmarks import timing
    green = None
    if args.sms:  # first, before anything else touches the GPU
        try:
            green = timing.enter_green_context(args.sms)  # noqa: F841 - kept alive for the run
        except RuntimeError as exc:
            print(f"bench_configs.py --sms: {exc}", file=sys.stderr)
            return 3
    import torch
    if not torch.cuda.is_available():
        print("bench_configs.py needs a CUDA GPU; the grid is valid "
              f"({sum(len(c) for c in grid.values())} configs on {len(grid)} shapes)", file=sys.stderr)
        return 2
    import harness
    import reference
    import submission
    from benchmarks import refusals
    from benchmarks.bench_kernel import check, check_cases, env_info

    cap = torch.cuda.get_device_capability()
    (m, k, l), cfgs = next(iter(grid.items()))  # the first config compiled before any GPU work
    name, cfg = next(iter(cfgs.items()))
    problem = refusals.build_problem(submission, cfg.with_decode(cap), submission.cuda_arch(cap))
    if problem:
        print(f"bench_configs.py: {m}x{k}x{l} {name}: {problem}", file=sys.stderr)
        return 2
    sms = timing.context_sm_count()
    info = {**env_info(), "context_sms": sms,
            "command": harness.kit_command(["python3", "benchmarks/bench_configs.py"],
                                           sys.argv[1:] if argv is None else argv, ("--json",))}
    print(json.dumps(info), flush=True)
    print(f"sms {sms}", flush=True)
    record = {"env": info, "shapes": {}}
    for (m, k, l), cfgs in grid.items():
        shape = f"{m}x{k}x{l}"
        for name, cfg in cfgs.items():
            bad = check(lambda d, c=cfg: submission.run_backend("cuda", d, c), check_cases(m, k, l, 7))
            if bad:
                print(f"bench_configs.py: {shape} {name} WRONG: {' | '.join(bad)[:400]}", file=sys.stderr)
                return 1
        nbytes = timing.gemv_bytes(m, k, l)
        sets = [reference.generate_input(m, k, l, 100 + i, device="cuda") for i in range(8)]
        rec = record["shapes"][shape] = {"bytes": nbytes, "ceiling": [], "configs": {
            name: {"cfg": cfg._asdict(), "us": [], "probe_us": []} for name, cfg in cfgs.items()}}
        for r in range(args.rounds):
            ceil = timing.read_ceiling(nbytes, len(sets), args.reps)
            rec["ceiling"].append({"us": ceil["us"], "policy": ceil["policy"]})
            line = f"{shape} round {r + 1}: ceiling {ceil['us']:.2f} us ({ceil['policy']})"
            for name, cfg in cfgs.items():
                us = timing.median(timing.device_times(
                    lambda d, c=cfg: submission.run_backend("cuda", d, c), sets, args.reps))
                c = rec["configs"][name]
                c["us"].append(us)
                line += f" | {name} {us:.2f} {ceil['us'] / us:.3f}"
                if not args.no_probe:
                    pu = timing.median(timing.device_times(
                        lambda d, c=cfg: submission.cuda_probe(d, c), sets, args.reps))
                    c["probe_us"].append(pu)
                    line += f" p{ceil['us'] / pu:.3f}"
            print(line, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
