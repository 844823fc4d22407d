"""actorpipe against PyTorch's torch.distributed.pipelining on the same GPT, data and optimizer.

    python bench/peer/compare.py [--actorpipe build/apps/actorpipe] [--repeat N]
                                 [--layers 8 --hidden 256 --heads 4 --seq-len 128 --vocab 256]
                                 [--microbatch-size 4 --microbatches 16 --steps 5]

Runs, interleaved so machine noise hits both sides alike, for each of no-pipeline, 1f1b,
interleaved (2 stages x 2 chunks, loop placement) and zbv (2 stages x 2 chunks, V-shape):
`actorpipe train ... --metrics` and peer_train.py (plain PyTorch: gradient accumulation, or
torch.distributed.pipelining with gloo, one process per rank). One thread per rank on both
sides. tokens/s = sum of tokens / sum of seconds over steps 2..N, from the per-step metrics of
each side (the first step is warm-up). Both train on one uint16 token file written here.

Before timing, it proves the two sides hold the same model: actorpipe trains one step at
lr 1e-30 and saves its parameters, which must equal peer_gpt's name-seeded init; and every
run's first-step loss must agree to 1e-5 relative (exit status 1 if not).

Before the runs, bench/split_costs (from the same build) measures what each schedule can reach
on this model at all: each plan simulated on costs one thread measured, with no second core and
no runtime in them (its last table); the report sets actorpipe's own ratios against it.

The machine may be shared: during every run it counts the CPU time other processes used
(/proc/stat minus the run's own), marks those runs, and takes each cell's median over the
clean repeats when there are any. Progress (each command) goes to stderr, the report to stdout.
"""
import argparse
import json
import os
import platform
import re
import resource
import shlex
import statistics
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, HERE)
import peer_gpt as pg  # noqa: E402

RUNS = ["no-pipeline", "1f1b", "interleaved", "zbv"]
ACTORPIPE_FLAGS = {
    "no-pipeline": ["--no-pipeline"],
    "1f1b": ["--schedule", "1f1b", "--stages", "2"],
    "interleaved": ["--schedule", "interleaved", "--stages", "2", "--chunks", "2"],
    "zbv": ["--schedule", "zbv", "--stages", "2", "--chunks", "2"],  # zbv refuses chunks=1
}
LOSS_RTOL = 1e-5
CLEAN_CPU_S = 2.0  # CPU seconds other processes may use during a run for it to count as clean


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--actorpipe", default=os.path.join(HERE, "..", "..", "build", "apps", "actorpipe"),
                    help="the actorpipe binary [default: build/apps/actorpipe]")
    ap.add_argument("--repeat", type=int, default=1, help="runs per cell; the table shows the median")
    ap.add_argument("--runs", default=",".join(RUNS), help="comma-separated subset of " + ",".join(RUNS))
    pg.add_job_flags(ap)
    ap.add_argument("--attention", choices=["auto", "explicit", "sdpa"], default="sdpa",
                    help="the peer's attention: sdpa (default: what a PyTorch 2 user writes), explicit (matmul + "
                         "masked softmax), auto (what actorpipe's LibTorch runs where its own loops do not serve: 1.x explicit, 2.x sdpa)")
    ap.add_argument("--data-tokens", type=int, default=1 << 18, help="length of the token file written")
    ap.add_argument("--keep", help="keep the token file, metrics and logs in this folder")
    a = ap.parse_args()
    a.runs = [r.strip() for r in a.runs.split(",") if r.strip()]
    if not a.runs:
        ap.error("--runs names no run (choose from %s)" % ", ".join(RUNS))
    for r in a.runs:
        if r not in RUNS:
            ap.error("unknown run '%s' (choose from %s)" % (r, ", ".join(RUNS)))
    # What the token file and both models take: refused here, not as a traceback after the
    # first runs (numpy's "negative dimensions", uint16's "out of bounds").
    for flag, _, _ in pg.JOB_FLAGS:
        name = flag[2:].replace("-", "_")
        if name not in ("lr", "grad_clip", "weight_decay", "seed", "warmup_steps") and getattr(a, name) < 1:
            ap.error("%s must be >= 1, got %s" % (flag, getattr(a, name)))
    if not 2 <= a.vocab <= 65536:
        ap.error("--vocab must be from 2 to 65536 (the token file holds uint16 tokens), got %d" % a.vocab)
    if a.data_tokens < a.seq_len + 1:
        ap.error("--data-tokens must be at least --seq-len + 1 = %d (one sample), got %d" % (a.seq_len + 1, a.data_tokens))
    if a.steps < 2:
        ap.error("--steps must be >= 2 (the first step is not timed)")
    if a.repeat < 1:
        ap.error("--repeat must be >= 1")
    return a


def shared_flags(a):
    """The model, batch and optimizer flags both sides take, spelled the same."""
    out = []
    for flag, kind, _ in pg.JOB_FLAGS:
        value = getattr(a, flag[2:].replace("-", "_"))
        out += [flag, repr(value) if kind is float else str(value)]
    return out


def cpu_seconds():
    """(busy CPU seconds of the whole machine, of which steal; CPU seconds of our finished
    children): their differences over a run tell how much else ran meanwhile. None off Linux."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    hz = os.sysconf("SC_CLK_TCK")
    busy = sum(v) - v[3] - (v[4] if len(v) > 4 else 0)  # all but idle and iowait
    steal = v[7] if len(v) > 7 else 0
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return busy / hz, steal / hz, ru.ru_utime + ru.ru_stime


def run(cmd, log_path):
    """Runs cmd, its output to log_path; returns (output, CPU seconds others used meanwhile)."""
    print("$ " + " ".join(shlex.quote(c) for c in cmd), file=sys.stderr, flush=True)
    before = cpu_seconds()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    after = cpu_seconds()
    with open(log_path, "w") as f:
        f.write(p.stdout)
    if p.returncode != 0:
        sys.exit("compare: command failed (exit %d; logs kept in %s):\n%s\n%s" %
                 (p.returncode, os.path.dirname(log_path), " ".join(cmd), p.stdout[-4000:]))
    other = None
    if before and after:
        other = max(0.0, (after[0] - before[0]) - (after[2] - before[2]))  # steal counts as busy here
    return p.stdout, other


SPLIT_COSTS_MODEL = {"heads": 4, "vocab": 256, "microbatches": 16}  # what bench/split_costs builds
CEILING_SCHEDULES = ("1f1b", "zb-h1", "interleaved", "zbv")  # the rows of split_costs' last table
CEILING_ROW = re.compile(r"^\| (%s) \| [0-9.]+ \| [0-9.]+%% \| ([0-9.]+) \|$" % "|".join(CEILING_SCHEDULES), re.M)
BALANCE_LINE = re.compile(r"the 2 stages' balance, F \+ B of the last / the first: ([0-9.]+)")


def measure_ceilings(a):
    """What each schedule can reach on this model: bench/split_costs (next to the actorpipe binary's
    build) simulates each plan on costs one thread measured, with no second core and no runtime in
    them. Returns ({schedule: x the unpipelined run, "balance": the 2 stages' F + B, last / first},
    None), or (None, why not)."""
    if "no-pipeline" not in a.runs or not any(r in CEILING_SCHEDULES for r in a.runs):
        return None, "they are set against the no-pipeline run and a pipelined one; --runs has not both"
    exe = os.path.join(os.path.dirname(os.path.dirname(a.actorpipe)), "bench", "split_costs")
    if not os.access(exe, os.X_OK):
        return None, "no %s (make build)" % exe
    other = {k: v for k, v in SPLIT_COSTS_MODEL.items() if getattr(a, k) != v}
    if other:
        return None, "split_costs builds %s; this comparison runs %s" % (
            ", ".join("%s %d" % kv for kv in SPLIT_COSTS_MODEL.items()),
            ", ".join("%s %d" % (k, getattr(a, k)) for k in other))
    cmd = [exe, "--layers", str(a.layers), "--hidden", str(a.hidden), "--seq-len", str(a.seq_len),
           "--microbatch-size", str(a.microbatch_size), "--repeat", "9"]
    print("$ " + " ".join(shlex.quote(c) for c in cmd), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rows = {name: float(x) for name, x in CEILING_ROW.findall(p.stdout)}
    if p.returncode != 0 or not rows:
        said = (p.stderr.strip() or p.stdout.strip() or "no output").splitlines()[-1]
        return None, "split_costs failed (exit %d): %s" % (p.returncode, said)
    # Ceilings split_costs itself doubts (one above 2; others' processes using the CPUs while it
    # timed) are not set against the runs.
    doubts = [line for line in p.stdout.splitlines() if line.startswith(("warning:", "note: other processes"))]
    if doubts:
        return None, "split_costs doubted its own: " + doubts[0]
    balance = BALANCE_LINE.search(p.stdout)
    if balance:
        rows["balance"] = float(balance.group(1))
    return rows, None


def read_metrics(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def tokens_per_s(steps):
    """Sum of tokens / sum of seconds over steps 2..N, as bench/gpt_throughput.cpp does."""
    timed = steps[1:]
    return sum(s["tokens_per_s"] * s["seconds"] for s in timed) / sum(s["seconds"] for s in timed)


def read_safetensors(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F32":
            raise ValueError("%s: %s is %s, expected F32" % (path, name, t["dtype"]))
        s, e = t["data_offsets"]
        out[name] = np.frombuffer(b[8 + n + s: 8 + n + e], dtype="<f4").reshape(t["shape"])
    return out


def print_environment():
    print("## What it ran on\n")
    print("- torch %s (peer); from torch.__config__.show():" % torch.__version__)
    for line in torch.__config__.show().splitlines():
        line = line.strip()
        if line.startswith("- "):
            line = line[2:]
        if any(k in line for k in ("BLAS", "MKL", "Math Kernel", "LAPACK", "CPU capability", "OpenMP")):
            if line.startswith("Build settings"):  # one long line: keep the BLAS-related settings
                keep = [kv.strip() for kv in line[len("Build settings: "):].split(",")
                        if any(k in kv for k in ("BLAS", "LAPACK", "MKL", "OPENMP"))]
                line = "build settings: " + ", ".join(keep)
            print("  - " + line)
    cpu = "unknown"
    try:
        lscpu = subprocess.run(["lscpu"], stdout=subprocess.PIPE, text=True).stdout
        fields = dict(l.split(":", 1) for l in lscpu.splitlines() if ":" in l)
        cpu = "%s, %s CPUs" % (fields.get("Model name", "?").strip(), fields.get("CPU(s)", "?").strip())
    except OSError:
        pass
    print("- CPU (lscpu): %s; %s, Python %s" % (cpu, platform.platform(), platform.python_version()))


def check_init(a, work):
    """actorpipe's parameters after one step at lr 1e-30 (its initial values, but for zero-
    initialised biases, which move by ~1e-31) against peer_gpt's name-seeded init."""
    path = os.path.join(work, "init.safetensors")
    out, _ = run([a.actorpipe, "train", "--no-pipeline", "--stages", "1", "--microbatches", "1", "--microbatch-size", "1",
               "--steps", "1", "--lr", "1e-30", "--layers", str(a.layers), "--hidden", str(a.hidden),
               "--heads", str(a.heads), "--seq-len", str(a.seq_len), "--vocab", str(a.vocab), "--seed", str(a.seed),
               "--data-file", os.path.join(work, "tokens.bin"), "--save-final", path],
              os.path.join(work, "init_check.log"))
    theirs = read_safetensors(path)
    cfg = pg.GPTConfig(vocab=a.vocab, seq_len=a.seq_len, hidden=a.hidden, heads=a.heads, layers=a.layers, seed=a.seed)
    ours = {k: v.detach().numpy() for k, v in pg.GPTChunk(cfg, 0, a.layers, True, True).named_parameters()}
    problems, identical, zero_max = [], 0, 0.0
    for name in sorted(set(ours) | set(theirs)):
        if name not in ours or name not in theirs:
            problems.append("%s only on the %s side" % (name, "actorpipe" if name in theirs else "peer"))
            continue
        o, t = ours[name], theirs[name]
        if o.shape != t.shape:
            problems.append("%s: shape %s (peer) vs %s (actorpipe)" % (name, o.shape, t.shape))
        elif not o.any():
            zero_max = max(zero_max, float(np.abs(t).max()))
            if np.abs(t).max() > 1e-25:
                problems.append("%s: zero-initialised but actorpipe has %g" % (name, np.abs(t).max()))
        elif np.array_equal(o, t):
            identical += 1
        else:
            problems.append("%s: max |diff| %g" % (name, np.abs(o - t).max()))
    nonzero = sum(1 for v in ours.values() if v.any())
    report = ["- init: %d of %d non-zero parameter tensors bit-identical (ones and name-seeded normals); "
              "zero-initialised biases within %.1e of zero after actorpipe's lr-1e-30 step" % (identical, nonzero, zero_max)]
    report += ["  - WARNING: init differs: " + p for p in problems]
    return out, report


def main():
    a = parse_args()
    actorpipe = os.path.abspath(a.actorpipe)
    if not os.access(actorpipe, os.X_OK):
        sys.exit("compare: no actorpipe binary at %s (build it: make build)" % actorpipe)
    a.actorpipe = actorpipe
    work = a.keep or tempfile.mkdtemp(prefix="actorpipe_peer_")
    os.makedirs(work, exist_ok=True)
    tokens = os.path.join(work, "tokens.bin")
    n_runs = len(a.runs) * a.repeat
    print("compare: %d actorpipe + %d peer runs, interleaved; progress below, the report at the end" % (n_runs, n_runs),
          file=sys.stderr, flush=True)

    pg.write_markov_token_file(tokens, a.vocab, a.data_tokens, a.seed)
    init_log, init_report = check_init(a, work)
    # actorpipe's attention runs on its own loops where they serve (head size a multiple of 16, a
    # CPU with FMA), else matmul + masked softmax on LibTorch 1.x and the fused SDPA on 2.x
    # (gpt_modules.cpp); the peer runs the fused one unless told otherwise (the same function).
    libtorch = re.search(r"LibTorch (\d+)\.[0-9.]*[0-9]", init_log)
    if a.attention == "auto":
        a.attention = "sdpa" if libtorch and int(libtorch.group(1)) >= 2 else "explicit"

    ceilings, no_ceilings = measure_ceilings(a)

    results = {r: {"actorpipe": [], "peer": []} for r in a.runs}
    summaries = {}
    foreign = []  # (run, side, repeat, CPU seconds used by other processes during it)
    for rep in range(a.repeat):
        for r in a.runs:
            tag = "%s_%d" % (r, rep)
            m_ap = os.path.join(work, "actorpipe_%s.jsonl" % tag)
            _, other = run([a.actorpipe, "train"] + ACTORPIPE_FLAGS[r] + shared_flags(a) +
                           ["--threads-per-stage", "1", "--data-file", tokens, "--metrics", m_ap],
                           os.path.join(work, "actorpipe_%s.log" % tag))
            results[r]["actorpipe"].append(read_metrics(m_ap))
            foreign.append((r, "actorpipe", rep, other))
            m_peer = os.path.join(work, "peer_%s.jsonl" % tag)
            s_peer = os.path.join(work, "peer_%s.json" % tag)
            _, other = run([sys.executable, os.path.join(HERE, "peer_train.py"), "--mode", r] + shared_flags(a) +
                           ["--attention", a.attention, "--data-file", tokens, "--metrics", m_peer, "--summary", s_peer],
                           os.path.join(work, "peer_%s.log" % tag))
            results[r]["peer"].append(read_metrics(m_peer))
            foreign.append((r, "peer", rep, other))
            with open(s_peer) as f:
                summaries[r] = json.load(f)

    # ---- the report ----
    print_environment()
    blas = [l.strip() for l in init_log.splitlines() if "BLAS" in l]
    print("- actorpipe's summary on its BLAS: " + ("; ".join(blas) if blas else "actorpipe did not say"))
    print("- threads: actorpipe --threads-per-stage 1; peer torch.get_num_threads() per rank: " +
          "; ".join("%s %s" % (r, summaries[r]["threads_per_rank"]) for r in a.runs))
    print("- peer schedules (torch.distributed.pipelining, gloo, one process per rank): " +
          "; ".join("%s: %s" % (r, summaries[r]["schedule_class"]) for r in a.runs))
    if (a.hidden // a.heads) % 16 == 0:  # on CPUs with FMA, which every machine here has
        ours = "its own causal attention loops (core/model/attention_kernel)"
    else:
        ours = "fused scaled_dot_product_attention" if libtorch and int(libtorch.group(1)) >= 2 else "matmul + masked softmax"
    print("- attention: peer %s; actorpipe %s (%s)" %
          ("fused scaled_dot_product_attention" if a.attention == "sdpa" else "matmul + masked softmax", ours,
           libtorch.group(0) if libtorch else "LibTorch version: not said, assumed 1.x"))
    print("- GPT %d layers, hidden %d, %d heads, seq %d, vocab %d; %d microbatches x %d sequences; %d steps "
          "(first untimed); data: %d-token uint16 file; %d repeat(s), interleaved" %
          (a.layers, a.hidden, a.heads, a.seq_len, a.vocab, a.microbatches, a.microbatch_size, a.steps,
           a.data_tokens, a.repeat))

    print("\n## Same model?\n")
    for line in init_report:
        print(line)
    print("- losses per step (first repeat):")
    for r in a.runs:
        print("  - %-11s actorpipe %s" % (r, " ".join("%.6f" % s["loss"] for s in results[r]["actorpipe"][0])))
        print("    %-11s peer      %s" % ("", " ".join("%.6f" % s["loss"] for s in results[r]["peer"][0])))
    print("\nfirst-step loss (before any update: model, init and data):\n")
    print("| run | actorpipe | peer | abs diff | relative |")
    print("|---|---|---|---|---|")
    mismatch = False
    for r in a.runs:
        x, y = results[r]["actorpipe"][0][0]["loss"], results[r]["peer"][0][0]["loss"]
        rel = abs(x - y) / abs(x)
        mismatch |= rel > LOSS_RTOL
        print("| %s | %.7f | %.7f | %.2e | %.2e |" % (r, x, y, abs(x - y), rel))
    last = max(abs(results[r]["actorpipe"][0][-1]["loss"] - results[r]["peer"][0][-1]["loss"]) /
               abs(results[r]["actorpipe"][0][-1]["loss"]) for r in a.runs)
    print("\nlast-step loss (after %d AdamW steps): largest relative difference %.2e" % (a.steps - 1, last))
    if mismatch:
        print("\nWARNING: first-step losses differ by more than %g relative: the two sides do not train the "
              "same model/data; the throughput comparison is not like for like." % LOSS_RTOL)
    else:
        print("\nfirst-step losses agree within %g relative on every run: same model, init and data." % LOSS_RTOL)

    print("\n## Throughput (tokens/s over steps 2..%d%s)\n" %
          (a.steps, ", median of %d repeats" % a.repeat if a.repeat > 1 else ""))
    # Per cell: the median over the repeats that had the machine to themselves, or over all of
    # them (marked *) when none did.
    other_of = {(r, side, rep): other for r, side, rep, other in foreign}

    def clean_run(r, side, rep):  # no other process used more than CLEAN_CPU_S during it
        return (other_of[(r, side, rep)] or 0.0) <= CLEAN_CPU_S
    med, marked = {}, False
    for r in a.runs:
        med[r] = {}
        for side in ("actorpipe", "peer"):
            tps = [tokens_per_s(m) for m in results[r][side]]
            clean = [t for rep, t in enumerate(tps) if clean_run(r, side, rep)]
            med[r][side] = statistics.median(clean or tps)
            med[r][side + "*"] = "" if clean else "*"
            marked |= not clean
    def within_repeats(num, den):
        """tokens/s of cell num (run, side) over cell den, per repeat in which both were clean."""
        return [tokens_per_s(x) / tokens_per_s(y) for rep, (x, y) in
                enumerate(zip(results[num[0]][num[1]], results[den[0]][den[1]]))
                if clean_run(num[0], num[1], rep) and clean_run(den[0], den[1], rep)]

    # Each repeat runs actorpipe then the peer, seconds apart: the median of those pairs' ratios
    # is what a machine drifting over minutes moves least.
    paired = {}
    for r in a.runs:
        pairs = within_repeats((r, "actorpipe"), (r, "peer"))
        paired[r] = statistics.median(pairs) if pairs else None
    print("| run | actorpipe tokens/s | peer tokens/s | actorpipe/peer | each repeat's pair |")
    print("|---|---|---|---|---|")
    for r in a.runs:
        x, y = med[r]["actorpipe"], med[r]["peer"]
        print("| %s | %.0f%s | %.0f%s | %.2f | %s |" % (r, x, med[r]["actorpipe*"], y, med[r]["peer*"], x / y,
                                                     "%.2f" % paired[r] if paired[r] is not None else "-"))
    if a.repeat > 1 or marked:
        print("\n(each cell: the median over repeats during which other processes used <= %g CPU-s%s; the last\n"
              "column: the median of actorpipe/peer within each such repeat, the two runs back to back)" %
              (CLEAN_CPU_S, "; * = no such repeat, median over all" if marked else ""))
    print()
    # A side's own ratios: of the cells' medians, and (several repeats) the median of the ratios
    # within each clean repeat, whose two runs are a minute apart rather than spread over the run.
    for side in ("actorpipe", "peer"):
        ratios = []
        for num, den in (("1f1b", "no-pipeline"), ("zbv", "1f1b"), ("interleaved", "1f1b")):
            if num in med and den in med:
                text = "%s / %s %.2f" % (num, den, med[num][side] / med[den][side])
                within = within_repeats((num, side), (den, side))
                if a.repeat > 1 and within:
                    text += " (within a repeat: median %.2f, %.2f-%.2f)" % (
                        statistics.median(within), min(within), max(within))
                ratios.append(text)
        if ratios:
            print("- %s's own ratios: %s" % (side, ", ".join(ratios)))
    if ceilings:
        of = ["%s %.2f of %.3f" % (r, med[r]["actorpipe"] / med["no-pipeline"]["actorpipe"] / ceilings[r], ceilings[r])
              for r in a.runs if r in ceilings and r in CEILING_SCHEDULES]
        print("- actorpipe against what each schedule can reach on this model (x / no-pipeline over the schedule's\n"
              "  ceiling: bench/split_costs, each plan simulated on costs one thread measured before the runs, with\n"
              "  no second core and no runtime in them): " + ", ".join(of))
    else:
        print("- the schedules' ceilings on this model: not measured (%s)" % no_ceilings)
    # A pipeline keeps its slowest rank's pace. 1f1b's two ranks run the same F's and B's, so
    # where their busy times differ beyond what their layers do (split_costs' balance, one thread
    # after the other), one vCPU ran slower than the other during the run.
    # And a step lasts its slower rank's busy time plus what that rank waited: the schedule's
    # bubble, and whatever the runtime adds.
    balance, beyond = [], []
    for r in a.runs:
        per, waits = [], []
        for m in results[r]["actorpipe"]:
            busy = [s.get("busy_seconds") or [] for s in m[1:]]
            if busy and all(len(b) == 2 for b in busy):
                per.append(sum(b[1] for b in busy) / sum(b[0] for b in busy))
                waits += [1e3 * (s["seconds"] - max(b)) for s, b in zip(m[1:], busy)]
        if per:
            balance.append("%s %s" % (r, ", ".join("%.3f" % x for x in per)))
            beyond.append("%s %.0f ms (%.0f-%.0f)" % (r, statistics.median(waits), min(waits), max(waits)))
    if balance:
        alone = (" (1f1b's layers alone, one thread: %.3f)" % ceilings["balance"]) if ceilings and "balance" in ceilings else ""
        print("- actorpipe's rank 1 busy over rank 0 busy, steps 2..%d, each repeat%s: %s" %
              (a.steps, alone, "; ".join(balance)))
        print("- actorpipe's step beyond its slower rank's busy time, median over steps: " + "; ".join(beyond))
    if a.repeat > 1:
        def one(r, side, rep, m):
            return "%.0f%s" % (tokens_per_s(m), "" if clean_run(r, side, rep) else "!")
        print("\nevery repeat (actorpipe / peer; ! = other load during it): " + "; ".join(
            "%s %s" % (r, " / ".join(",".join(one(r, side, rep, m) for rep, m in enumerate(results[r][side]))
                                     for side in ("actorpipe", "peer"))) for r in a.runs))
    noisy = []
    for r in a.runs:
        for side in ("actorpipe", "peer"):
            for m in results[r][side]:
                secs = [s["seconds"] for s in m[1:]]
                if max(secs) > 1.2 * min(secs):
                    noisy.append("%s %s %s s" % (r, side, "/".join("%.2f" % x for x in secs)))
    if noisy:
        print("\nnoisy: step times within one run differ by more than 20%: " + "; ".join(noisy))
    busy = ["%s %s #%d: %.0f CPU-s" % (r, side, rep + 1, other) for r, side, rep, other in foreign
            if not clean_run(r, side, rep)]
    if busy:
        print("\n%s: other processes used the CPUs during these runs (machine busy CPU time minus the run's own, "
              "steal included): %s" % ("WARNING" if marked else "note", "; ".join(busy)))
    elif all(other is not None for _, _, _, other in foreign):
        print("\nno other load: every run had the machine to itself (<= %g CPU-s used by other processes)." %
              CLEAN_CPU_S)
    if a.keep:
        print("\nmetrics and logs kept in %s" % work)
    else:
        import shutil
        shutil.rmtree(work, ignore_errors=True)
    return 1 if mismatch else 0


if __name__ == "__main__":
    sys.exit(main())
