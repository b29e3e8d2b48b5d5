"""``python3 eval.py audit [SUBMISSION]``: what the server's harness would disqualify, found before
submitting.

Runs the submission (default ``submission.py``) in this process, on the GPU when there is one
(shapes ``GPU_SHAPES``: one like the benchmarks, one small) and on the CPU otherwise
(``CPU_SHAPES``), under conditions that are adversarial but legal for the harness to create, and
prints one line per check, ``PASS|FAIL|WARN|INFO name: reason``. The exit status is 0 only when no
check fails (WARN and INFO lines never fail).

Before the file's code runs, the judge is sealed (``harness.Seal``: what the checks rely on, from
torch's timers to the kit's checker and this module, taken then); after the import and after
every call the seal is checked: a patch FAILs "judge untouched", naming it, and is put back before
the audit goes on. Every output must be exactly a torch.Tensor and is read through the seal (no
dispatch of the submission's); each call's inputs must come back unwritten and apart from the
output; an output wrong at return and right once the next call ran names the deferred work.

Per shape, on full-range inputs (``quant.fill``), every call with ``c`` poisoned (NaN) first and
its output compared with ``reference.ref_kernel`` at the checker's tolerance
(``reference.RTOL``/``ATOL``, ``utils.verbose_allclose``):

* first call: the right answer;
* same inputs again: the right answer (an output read back from ``c`` fails: it is NaN);
* deterministic: the two calls bit-identical. INFO, not FAIL, when they differ: the server
  checks only the tolerance, and a sum in a varying order (atomics, split K) is legal; a
  difference beyond the tolerance fails the correctness checks anyway;
* in place: new values written into the same tensors between calls -- all inputs; one row of
  ``a`` far from its start; only ``b`` (row 0, the one that counts); only ``sfa`` (one row) and
  only ``sfb`` (row 0), each in the plain and the permuted tensor alike (a submission may read
  either). A result cached by object, by pointer, or by a sample of the values gives the old
  answer;
* fresh tensors holding an earlier call's values: INFO when right (recomputing and a
  value-keyed cache both give the right answer; fine either way), FAIL when wrong;
* tolerance used (once, over the official test cases with their seeds, the inputs that
  ``eval.py --distribution D`` draws for them: a share over 1 is a case eval.py fails): per input distribution
  (``quant.DISTRIBUTIONS``: the server's first), the largest |error| / (atol + rtol |expected|),
  NaN and infinity counted as the checker counts them. Shortcuts exact on the server's data (its
  bytes leave every high nibble zero, its scales are 0-2) can use more of it elsewhere: fp32
  sums one fp16 step off near 1 use about half of it (``tests/fixtures/good_fp32_group_sums.py``
  on full-range data). A scale product formed in fp16 overflows above 65504, which e4m3 scales
  reach (448 x 448), but no distribution of the kit reaches it (full-range keeps sfb <= 0.125
  so that the K = 16384 sums stay finite in fp16): this check cannot see that shortcut. FAIL
  over 1 on the server's data, INFO otherwise;
* output complete on return: right after each call returns, with no synchronisation beyond
  what the server does, a copy of the output is taken on the same device queue (on the CPU: at
  once); it must equal the output once the device is idle and the threads the call started have
  finished. Work left on another queue or thread, which the leaderboard's events would not
  time, fails.

On a GPU, per official benchmark shape, the impossible-time check: the server's benchmark loop
(``harness.time_calls``: the same input every call, the L2 cleared before each) and a FAIL when the
mean or the median lies below the shape's bytes (``harness.gemv_bytes``) at this GPU's peak memory
bandwidth (``harness.PEAK_BANDWIDTH``, from the vendors' datasheets): no output computed from the
call's inputs comes sooner, so such a time means a result kept across calls. A GPU without a peak
on record gets one INFO line; on the CPU the check does not run.

Once per file: the server's static rules (``harness.static_problems``: empty, size, UTF-8, the
forbidden word; FAIL), popcorn-cli's ``#!POPCORN`` header lines (``harness.header_warnings``;
INFO when missing: the server never reads them, popcorn-cli takes ``--leaderboard``/``--gpu``) and
the server's pre-check (``harness.kernelguard_precheck``: KernelGuard 0.3.1, the version
gpu-mode/kernelbot pins, with its default profile, and the newest release installed on the side,
``--install-kernelguard``; FAIL with the matched rules where it would reject the file, WARN where a
rule of critical severity matched at low confidence, INFO with its classification and rules
otherwise, and INFO with the install command where it is not installed). The deployment's own
switch (``KERNELGUARD_ENABLED``), profile and configuration are not public: a file it passes here
may still be refused there.

The file is audited as it is, the one that would be uploaded: the kit's own submission.py whose
copies differ from kernels/ gets one ``warning:`` line first, naming the side that changed
(``bundle.warn_if_out_of_sync``).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import threading
from pathlib import Path

import harness

CPU_SHAPES = ((256, 1024, 2),)
GPU_SHAPES = ((1024, 7168, 4), (256, 1024, 2))  # like 4096x7168x8 (K, several L) at a quarter the size; small
SEED = 4242  # the per-shape checks' inputs (full-range values; any seed serves)
# The tolerance check's seed where a shape comes without one: the official test cases' (shapes.json),
# so that it measures what `eval.py --distribution D` checks on the same cases.
TOLERANCE_SEED = 1111
DISTRIBUTION = "full-range"  # every e2m1 code and a wide range of scales: a changed input changes c
SETTLE_S = 10.0  # how long a thread the call started may run on after it returned
PRECHECK = "pre-check (KernelGuard)"
PRECHECK_NEWEST = "pre-check (KernelGuard, newest)"
DEFERRED = ("; the same tensor held the right answer once the next call had run: this call's work was deferred to a "
            "later call (calls batched or deferred)")
# Timed calls per shape in the impossible-time check, at most: half the server's benchmark loop
# (harness.BENCH_CASE, 200), whose stopping rule may end it sooner; enough for a stable median.
TIMED_REPEATS = 100


@dataclasses.dataclass
class Check:
    status: str  # PASS | FAIL | WARN | INFO (WARN and INFO never fail the audit)
    name: str
    reason: str

    def line(self) -> str:
        return f"{self.status} {self.name}: {self.reason}"


@dataclasses.dataclass
class Call:
    label: str
    out: object = None  # a copy of the output once the device is idle and the call's threads are done
    at_return: object = None  # a copy of it taken right after the call returned
    returned_c: bool = False  # the output is the c it was given
    error: str = ""
    output: object = None  # the tensor returned (exactly a torch.Tensor), read again after the next call
    later: object = None  # a copy of that tensor after the next call returned and settled
    written: tuple = ()  # the inputs whose bytes the call changed
    shared: tuple = ()  # the inputs whose memory the output shares


# --------------------------------------------------------------------------- helpers

def _sync(device) -> None:
    import torch
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _inputs(m: int, k: int, l: int, seed: int, device):
    import quant
    import reference
    return quant.fill(reference.generate_input(m, k, l, seed, device=device), DISTRIBUTION)


def _expected(data):
    """reference.ref_kernel on a copy of the inputs (computed before the call: what the
    submission does to its inputs cannot change it)."""
    import torch

    import reference
    return reference.ref_kernel(tuple(t.clone() for t in data[:6]) + (torch.empty_like(data[6]),))


def _wrong(out, expected) -> str:
    """'' when ``out`` passes the checker against ``expected``, else why not (one line)."""
    import reference
    from utils import verbose_allclose
    reasons = verbose_allclose(out, expected, rtol=reference.RTOL, atol=reference.ATOL, max_print=1)
    return harness.labelled("; ".join(reasons))  # which number is the result, which the expected value


def _same_shape(x, y) -> bool:
    import torch
    return (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.shape == y.shape
            and x.dtype == y.dtype and x.device == y.device)


def _same_bits(x, y) -> bool:
    """Equal values with NaN equal to NaN (same shape, dtype and device)."""
    if not _same_shape(x, y):
        return False
    return bool(((x == y) | (x.isnan() & y.isnan())).all())


def _first_difference(x, y) -> str:
    if not _same_shape(x, y):
        return "the output was not a tensor of the same shape both times"
    differ = ~((x == y) | (x.isnan() & y.isnan()))
    i = tuple(int(v) for v in differ.nonzero()[0])
    return f"c[{', '.join(map(str, i))}] was {float(x[i])!r} at return and {float(y[i])!r} later"


def _storage_span(t) -> tuple[int, int]:
    """[first byte, last byte + 1) of the memory a tensor's storage holds."""
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.data_ptr() + storage.nbytes()


def _overlap(x, y) -> bool:
    (a, b), (c, d) = _storage_span(x), _storage_span(y)
    return a < d and c < b


class _Runner:
    """Calls the submission as the harness does (inputs ready and the device idle first, c
    poisoned) and keeps, of each call, the output as it was on return and once settled, read
    through the seal (``harness.Seal.copy``: exactly a torch.Tensor, no dispatch of the
    submission's); a patch of what the judge relies on fails the call and is put back
    (``harness.Seal.check_and_restore``); which inputs the call wrote and which the output shares
    memory with; and, after each call, the previous call's output read again (work deferred to a
    later call shows there)."""

    def __init__(self, kernel, device, seal):
        self.kernel, self.device, self.seal, self.calls = kernel, device, seal, []

    def __call__(self, label: str, data) -> Call:
        import torch
        call = Call(label)
        self.calls.append(call)
        data[6].fill_(float("nan"))
        inputs = [t.view(torch.uint8).clone() for t in data[:6]]
        _sync(self.device)
        before = set(threading.enumerate())
        try:
            out = self.kernel(data)
        except Exception as exc:  # noqa: BLE001 - the submission's failure is the check's finding
            call.error = harness.one_line(f"custom_kernel raised {type(exc).__name__}: {exc}")
            return call
        # At once: on the GPU this copy is queued behind the call's work on the current queue,
        # with no synchronisation first; on the CPU it is taken now.
        call.at_return = self.seal.copy(out)
        call.error = self.seal.check_and_restore(f"during the call '{label}'", out)
        _sync(self.device)
        for t in set(threading.enumerate()) - before:
            t.join(timeout=SETTLE_S)
        _sync(self.device)
        if len(self.calls) > 1 and self.calls[-2].output is not None:
            self.calls[-2].later = self.seal.copy(self.calls[-2].output)
        call.written = tuple(name for name, t, b in zip(harness.INPUT_NAMES, data[:6], inputs, strict=True)
                             if not torch.equal(t.view(torch.uint8), b))
        if call.error:
            return call
        call.out, call.returned_c, call.output = self.seal.copy(out), out is data[6], out
        if isinstance(out, torch.Tensor):
            call.shared = tuple(name for name, t in zip(harness.INPUT_NAMES, data[:6], strict=True) if _overlap(out, t))
        return call


def _correct(name: str, call: Call, expected, passed: str, failed: str) -> Check:
    if call.error:
        return Check("FAIL", name, call.error)
    wrong = _wrong(call.out, expected)
    return Check("FAIL", name, f"{failed}: {wrong}") if wrong else Check("PASS", name, passed)


# The in-place writes: (name, what it changes). Each copies part of a fresh full-range input set
# into the audited tensors; scales change in the plain and the permuted tensor alike.
IN_PLACE = (
    ("all inputs", "all"),
    ("one row of a far from its start", "a-row"),
    ("b only (row 0)", "b"),
    ("sfa only (one row, plain and permuted)", "sfa-row"),
    ("sfb only (row 0, plain and permuted)", "sfb"),
)


def _write_in_place(data, src, what: str) -> None:
    import torch
    u8 = torch.uint8
    a, b, sfa, sfb, sfa_p, sfb_p, _ = data
    m, _, l = a.shape
    r, li = m - 3, l - 1  # near the end of a's memory (batch-major): far from its start
    if what == "all":
        for dst, s in zip(data[:6], src[:6], strict=True):
            dst.view(u8).copy_(s.view(u8))
    elif what == "a-row":
        a.view(u8)[r, :, li].copy_(src[0].view(u8)[r, :, li])
    elif what == "b":
        b.view(u8)[0].copy_(src[1].view(u8)[0])
    elif what == "sfa-row":
        sfa.view(u8)[r, :, li].copy_(src[2].view(u8)[r, :, li])
        at = (r % 32, (r % 128) // 32, r // 128)
        sfa_p.view(u8)[at][:, :, li].copy_(src[4].view(u8)[at][:, :, li])
    elif what == "sfb":
        sfb.view(u8)[0].copy_(src[3].view(u8)[0])
        sfb_p.view(u8)[0, 0, 0].copy_(src[5].view(u8)[0, 0, 0])
    else:
        raise ValueError(f"unknown in-place write {what!r}")


# --------------------------------------------------------------------------- the checks

def shape_checks(kernel, m: int, k: int, l: int, device, seal=None) -> list[Check]:
    """Every per-shape check on one (m, k, l); ``seal``: the judge's (``harness.Seal``; default a
    fresh one, taken now)."""
    tag = f" [{m}x{k}x{l}]"
    run = _Runner(kernel, device, seal or harness.Seal(extra=("audit",)))
    data = _inputs(m, k, l, SEED, device)
    out = []
    judged = []  # (index in out, call, expected) of each correctness check: the deferral pass below

    def judge(name: str, call: Call, expected, passed: str, failed: str) -> None:
        judged.append((len(out), call, expected))
        out.append(_correct(name, call, expected, passed, failed))

    expected = _expected(data)
    first = run("first call", data)
    judge("first call" + tag, first, expected, "the right answer", "wrong answer")
    first_out = first.out
    # A guess at the cause of a later wrong answer only where the first call was right: a kernel
    # wrong from its first call is wrong, not caching.
    first_right = out[-1].status == "PASS"

    def hint(text: str) -> str:
        return f" ({text})" if first_right else ""

    again = run("same inputs again", data)
    judge("same inputs again, c poisoned" + tag, again, expected, "the right answer with c poisoned (NaN) before the "
          "call", "wrong answer on the same inputs with c poisoned"
          + hint("a stale output: c or a buffer kept from an earlier call returned as it was?"))
    if out[-1].status == "FAIL" or out[-2].status == "FAIL" or not _same_shape(first_out, again.out):
        out.append(Check("INFO", "deterministic" + tag, "not compared: a call failed"))
    elif _same_bits(first_out, again.out):
        out.append(Check("PASS", "deterministic" + tag, "two identical calls gave bit-identical output"))
    else:
        n = int((~((first_out == again.out) | (first_out.isnan() & again.out.isnan()))).sum())
        out.append(Check("INFO", "deterministic" + tag,
                         f"two identical calls differ in {n} element(s): nondeterministic (the server checks "
                         "only the tolerance, so this alone fails nothing)"))

    for i, (label, what) in enumerate(IN_PLACE, 1):
        name = f"in place, {label}" + tag
        before = expected
        _write_in_place(data, _inputs(m, k, l, SEED + i, device), what)
        expected = _expected(data)
        if _same_bits(before, expected):
            out.append(Check("INFO", name, "the new values left the answer unchanged; nothing checked"))
            continue
        call = run(name, data)
        judge(name, call, expected, "the right answer after new values were written into the same tensors",
              "the same tensors with new values gave a wrong answer"
              + hint("a result cached by object, pointer or a sample of the values?"))

    fresh = tuple(t.clone() for t in data)
    call = run("fresh tensors", fresh)
    name = "fresh tensors, earlier values" + tag
    judge(name, call, expected, "", "wrong answer")
    if out[-1].status == "PASS":
        given = "its c" if call.returned_c else "another tensor"
        out[-1] = Check("INFO", name, f"the right answer (returned {given}); recomputed or served from a value-keyed "
                        "cache, both fine")
    for index, call, expected in judged:  # wrong on return, right once a later call ran: deferred work
        if out[index].status == "FAIL" and call.later is not None and not _wrong(call.later, expected):
            out[index] = dataclasses.replace(out[index], reason=out[index].reason + DEFERRED)

    out += _output_checks(run.calls, tag)
    name = "output complete on return" + tag
    late = [c for c in run.calls if not c.error and not _same_bits(c.at_return, c.out)]
    if late:
        out.append(Check("FAIL", name, f"{late[0].label}: {_first_difference(late[0].at_return, late[0].out)}: "
                         "work left on another device queue or thread when custom_kernel returned (the "
                         "leaderboard's events would not time it)"))
    else:
        out.append(Check("PASS", name, f"all {len(run.calls)} outputs were complete when custom_kernel returned "
                         "(copied on the same device queue, no extra synchronisation)"))
    return out


def _output_checks(calls: list[Call], tag: str) -> list[Check]:
    """Of a shape's calls: every output exactly a torch.Tensor (a subclass, a lazy output say, is
    named); the inputs unwritten and apart from the output (an input copied or returned as the
    output, an answer kept in the inputs' spare rows, an input used as scratch)."""
    name = "plain torch.Tensor output" + tag
    kinds = [c for c in calls if "a subclass of torch.Tensor" in c.error]
    out = [Check("FAIL", name, f"{kinds[0].label}: {kinds[0].error}") if kinds else
           Check("PASS", name, f"every output was exactly a torch.Tensor, read through its storage without any "
                               f"dispatch of the submission's ({len(calls)} calls)")]
    name = "inputs untouched, output apart" + tag
    written = [c for c in calls if c.written]
    shared = [c for c in calls if c.shared]
    if written or shared:
        why = ([f"{written[0].label}: custom_kernel wrote into its input(s) {', '.join(written[0].written)} (only c "
                "may be written: an input used as scratch, or an answer kept in an input for a later call)"]
               if written else [])
        why += ([f"{shared[0].label}: the output shares memory with input(s) {', '.join(shared[0].shared)} (an input "
                 "returned or copied as the output)"] if shared else [])
        out.append(Check("FAIL", name, "; ".join(why)))
    else:
        out.append(Check("PASS", name, f"no call wrote into a, b, sfa, sfb or the permuted scales, and no output "
                                       f"shares memory with them ({len(calls)} calls)"))
    return out


def judge_check(seal) -> Check:
    """Whether anything the judge relies on was replaced during the audit (``harness.Seal``:
    after the import and after every call); each finding was put back before the audit went on."""
    name = "judge untouched"
    if seal.history:
        return Check("FAIL", name, "the submission changed what the judge relies on (put back before the audit "
                                   "went on, so the other checks judged it as it is): " + " | ".join(seal.history))
    return Check("PASS", name, f"nothing the judge relies on was replaced after the import or by any call: "
                               f"{seal.count} names of torch, time, builtins and the kit's modules, their functions' "
                               f"code, trace and profile hooks, torch modes, the dispatcher's kernels of "
                               f"{len(harness.SEALED_OPS)} operators")


def tolerance_used(out, expected) -> tuple[float, tuple]:
    """(share, index): the largest |out - expected| / (ATOL + RTOL |expected|) over the elements
    and where it is, as the server's checker counts them: 1.0 is the edge of the tolerance; a NaN
    or infinity that the expected value does not have counts as infinite, one it has as 0."""
    import torch

    import reference
    o, e = out.detach().to("cpu", torch.float64), expected.detach().to("cpu", torch.float64)
    share = (o - e).abs() / (reference.ATOL + reference.RTOL * e.abs())
    same = (o.isnan() & e.isnan()) | (o.isinf() & (o == e))
    share = torch.where(same, torch.zeros_like(share), torch.nan_to_num(share, nan=float("inf")))
    at = int(share.argmax())
    return float(share.flatten()[at]), tuple(int(i) for i in torch.unravel_index(torch.tensor(at), share.shape))


def _case_inputs(m: int, k: int, l: int, seed: int, dist: str, device):
    """A case's inputs on ``device`` as eval.py's worker makes them (``harness.generate_case``:
    the official generator, then ``quant.fill`` for another distribution)."""
    import quant
    import reference
    data = reference.generate_input(m, k, l, seed, device=device)
    return data if dist == "official" else quant.fill(data, dist)


def tolerance_checks(kernel, shapes, device, seal=None) -> list[Check]:
    """Per input distribution (the server's first), the share of the checker's tolerance the
    submission uses at most over ``shapes`` ((m, k, l, seed), or (m, k, l) with the official
    cases' seed ``TOLERANCE_SEED``): the margin before the server sees it. The inputs are those
    ``eval.py --distribution D`` draws for the same cases (``harness.generate_case``), so a share
    over 1 is a case eval.py fails. A share over 1 fails on the server's own data; on the others
    it is reported (the server never draws them). ``seal`` (``harness.Seal``): each call is
    followed by its check (a patch or a torch.Tensor subclass fails the distribution)."""
    import quant
    cases = [tuple(s) if len(s) == 4 else (*s, TOLERANCE_SEED) for s in shapes]
    seeds = sorted({c[3] for c in cases})
    over = f"{len(cases)} case(s) (seed {', '.join(map(str, seeds))}: the inputs eval.py --distribution draws)"
    out = []
    for dist in quant.DISTRIBUTIONS:
        worst, where = 0.0, None
        for m, k, l, seed in cases:
            data = _case_inputs(m, k, l, seed, dist, device)
            expected = _expected(data)
            try:
                got = kernel(tuple(t.clone() for t in data))
            except Exception as exc:  # noqa: BLE001 - reported as a failed check
                why = harness.one_line(f"{m}x{k}x{l}: custom_kernel raised {type(exc).__name__}: {exc}")
                out.append(Check("FAIL", f"tolerance used, {dist}", why))
                break
            judged = seal.check_and_restore(f"tolerance used, {dist}, {m}x{k}x{l}", got) if seal else ""
            if judged:
                out.append(Check("FAIL", f"tolerance used, {dist}", f"{m}x{k}x{l}: {judged}"))
                break
            if not _same_shape(got, expected):
                out.append(Check("FAIL", f"tolerance used, {dist}", f"{m}x{k}x{l}: {_wrong(got, expected)}"))
                break
            share, index = tolerance_used(got, expected)
            if where is None or share > worst:
                worst, where = share, (m, k, l, index)
        else:
            status = "FAIL" if worst > 1 and dist == "official" else "INFO"
            m, k, l, index = where
            if worst == 0:
                reason = f"exact on every element of {over}"
            else:
                beyond = (f" (beyond the tolerance: eval.py --distribution {dist} fails it)" if worst > 1 else "")
                reason = (f"{worst:.1%} of atol + rtol |expected|{beyond} at most over {over}; "
                          f"largest at {m}x{k}x{l}, element {index}")
            out.append(Check(status, f"tolerance used, {dist}", reason))
    return out


def static_checks(path: Path) -> list[Check]:
    """The server's upload rules (FAIL when broken) and popcorn-cli's header lines (INFO when
    missing: the server never reads them)."""
    problems = harness.static_problems(path)
    out = [Check("FAIL", "static rules", "; ".join(problems)) if problems else
           Check("PASS", "static rules", "size, UTF-8 and the forbidden word as the server checks them")]
    warnings = harness.header_warnings(path)
    out.append(Check("INFO", "header lines", "; ".join(warnings)) if warnings else
               Check("PASS", "header lines", "both #!POPCORN lines on top (popcorn-cli reads them)"))
    out.append(precheck_check(path))
    out.append(precheck_check(path, newest=True))
    return out


def precheck_check(path: Path, newest: bool = False) -> Check:
    """The server's pre-check (``harness.kernelguard_precheck``: KernelGuard at the version
    kernelbot pins, default profile; ``newest``: the newest release, installed on the side):
    FAIL naming the matched rules where it would reject the file, WARN where it does not but a
    rule of critical severity matched (a hack pattern matched at low confidence: the server runs
    the file), INFO with its classification and rules otherwise, INFO with the install command
    where it is not installed."""
    found = harness.precheck_file(path, newest)
    status = "FAIL" if found.rejected else "WARN" if found.critical() else "INFO"
    return Check(status, PRECHECK_NEWEST if newest else PRECHECK, found.summary())


def timing_checks(kernel, cases, device_name: str, seal=None) -> list[Check]:
    """Per case (m, k, l, seed), the server's benchmark loop on the GPU (``harness.time_calls``:
    one checked call, then up to ``TIMED_REPEATS`` calls on the same input, the L2 cleared before
    each): FAIL when the mean or the median lies below the shape's bytes at this GPU's peak memory
    bandwidth (``harness.impossible_time``: an output kept across calls), PASS otherwise; one INFO
    line for a GPU without a peak on record."""
    note = harness.unknown_peak_note(device_name)
    if note:
        return [Check("INFO", "impossible time", note)]
    model, bps, _ = harness.peak_bandwidth(device_name)
    out = []
    for m, k, l, seed in cases:
        name = f"impossible time [{m}x{k}x{l}]"
        got = harness.time_calls(kernel, {"m": m, "k": k, "l": l, "seed": seed}, False, TIMED_REPEATS,
                                 harness.BENCH_CASE[1], None, *([seal] if seal else []))
        if seal and seal.tainted:  # refused (got says what was found): the judge put back for what follows
            seal.restore()
        if isinstance(got, str):
            out.append(Check("FAIL", name, f"the timed loop failed: {harness.one_line(got)}"))
            continue
        mean, median = statistics.fmean(got) / 1e3, statistics.median(got) / 1e3
        found = harness.impossible_time(m, k, l, device_name, mean, median)
        floor = harness.floor_us(m, k, l, device_name)
        out.append(Check("FAIL", name, found) if found else Check(
            "PASS", name, f"mean {mean:.3f} µs, median {median:.3f} µs over {len(got)} calls (the server's benchmark "
                          f"loop, the L2 cleared before each) at or above {floor:.3f} µs, "
                          f"{harness.gemv_bytes(m, k, l) / 1e6:.1f} MB at the {model}'s peak of {bps / 1e12:g} TB/s"))
    return out


def audit(path: Path | str, shapes=None, report=None, tolerance_shapes=None, timing_cases=None) -> list[Check]:
    """Every check on the submission file ``path`` (``shapes``: default GPU_SHAPES on a GPU,
    else CPU_SHAPES; ``tolerance_shapes``: default the official test shapes, () for none;
    ``timing_cases``: (m, k, l, seed) for the impossible-time check, default the official
    benchmark cases on a GPU, none on the CPU); ``report(check)`` is called as each one is done."""
    path = Path(path)
    report = report or (lambda check: None)
    done = []

    def add(check):
        done.append(check)
        report(check)

    for check in static_checks(path):
        add(check)
    seal = harness.Seal(extra=("audit",))  # before any of the file's code runs
    try:
        try:
            module = harness.load_submission(path, keep=False)
            kernel = module.custom_kernel
        except Exception as exc:  # noqa: BLE001 - reported as a failed check
            add(Check("FAIL", "import", harness.one_line(f"importing the submission raised {type(exc).__name__}: "
                                                         f"{exc}")))
            return done
        seal.check_and_restore("importing the file")
        _judged_checks(kernel, seal, add, shapes, tolerance_shapes, timing_cases)
    finally:
        seal.restore()  # whatever the file replaced: the process is the kit's again
    return done


def _judged_checks(kernel, seal, add, shapes, tolerance_shapes, timing_cases) -> None:
    """The checks that call the submission, each call followed by the seal's check; then whether
    anything the judge relies on was replaced (``judge_check``)."""
    import torch
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    for m, k, l in shapes or (GPU_SHAPES if cuda else CPU_SHAPES):
        for check in shape_checks(kernel, m, k, l, device, seal):
            add(check)
    if timing_cases is None:
        timing_cases = [(c["m"], c["k"], c["l"], c["seed"]) for c in harness.shape_set("benchmarks")] if cuda else []
    for check in timing_checks(kernel, timing_cases, torch.cuda.get_device_name(), seal) if timing_cases and cuda \
            else []:
        add(check)
    if tolerance_shapes is None:  # the official test cases, with their seeds: what eval.py's test mode runs
        tolerance_shapes = [(c["m"], c["k"], c["l"], c["seed"]) for c in harness.shape_set("tests")]
    for check in tolerance_checks(kernel, tolerance_shapes, device, seal) if tolerance_shapes else []:
        add(check)
    add(judge_check(seal))


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python3 eval.py audit",
        description="Run a submission under adversarial but legal conditions (in-place new values, fresh "
                    "tensors, c poisoned, the output checked as soon as the call returns), with the judge sealed "
                    "against patches, and check the server's static rules. One line per check: "
                    "PASS|FAIL|WARN|INFO name: reason. Exit 0 only when no check fails.")
    p.add_argument("file", nargs="?", metavar="SUBMISSION", help="the file (default: submission.py)")
    p.add_argument("--submission", help="the file, as eval.py takes it (or give it positionally)")
    p.add_argument("--install-kernelguard", action="store_true",
                   help=f"install KernelGuard {harness.KERNELGUARD_NEWEST}, the newest release, on the side "
                        f"({harness.kernelguard_newest_dir()}; ${harness.ENV_KERNELGUARD_NEWEST} to move it) if "
                        "missing, and exit")
    args = p.parse_args(argv)
    if args.install_kernelguard:
        print(f"KernelGuard {harness.KERNELGUARD_NEWEST}: {harness.install_kernelguard_newest()}")
        return harness.EXIT_OK
    if args.file and args.submission and args.file != args.submission:
        print(f"error: two submissions given ({args.file} and --submission {args.submission}); give one",
              file=sys.stderr)
        return harness.EXIT_USAGE
    path = Path(args.file or args.submission or "submission.py")
    problem = harness.submission_problem(path)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return harness.EXIT_USAGE
    import bundle  # the standard library and harness only
    bundle.warn_if_out_of_sync(path)  # the file is audited as it is: the one that would be uploaded
    import torch
    where = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    print(f"auditing {path} on {where}", file=sys.stderr, flush=True)
    checks = audit(path, report=lambda check: print(check.line(), flush=True))
    failed = sum(c.status == "FAIL" for c in checks)
    print(f"{len(checks)} checks: {failed} failed", file=sys.stderr)
    return harness.EXIT_FAIL if failed else harness.EXIT_OK
