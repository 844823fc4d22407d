"""Trains actorpipe's GPT (peer_gpt.py) with plain PyTorch: unpipelined with gradient
accumulation, or with torch.distributed.pipelining (gloo, CPU, one process per rank).

    peer_train.py --mode {no-pipeline,1f1b,interleaved,zbv} --data-file x.bin --metrics out.jsonl
                  [--stages 2] [--layers 8 --hidden 256 --heads 4 --seq-len 128 --vocab 256]
                  [--microbatch-size 4 --microbatches 16 --steps 5] [--lr 3e-3 --warmup-steps 5 ...]

Every process runs torch.set_num_threads(1). Per step (timed from before the microbatches are
cut to after the optimizer step on every rank, as actorpipe's supervisor does): the schedule,
the tied-embedding gradient sum, the global-norm clip and AdamW. --metrics writes one JSON line
per step in actorpipe's --metrics format (step, loss, lr, grad_norm, seconds, tokens_per_s);
--summary a JSON object with the schedule class and torch.get_num_threads() of every rank.
"""
import argparse
import json
import os
import socket
import sys
import time

import torch

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_gpt as pg  # noqa: E402

SCHEDULES = {  # mode -> (torch.distributed.pipelining class name, chunks per rank, placement)
    "1f1b": ("Schedule1F1B", 1, "loop"),
    "interleaved": ("ScheduleInterleaved1F1B", 2, "loop"),
    "zbv": ("ScheduleZBVZeroBubble", 2, "v"),
}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", required=True, choices=["no-pipeline"] + sorted(SCHEDULES))
    ap.add_argument("--stages", type=int, default=2)
    pg.add_job_flags(ap)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--attention", choices=["explicit", "sdpa"], default="explicit",
                    help="explicit: matmul + masked softmax (actorpipe on LibTorch 1.x); sdpa: the fused "
                         "scaled_dot_product_attention (actorpipe on LibTorch 2.x)")
    ap.add_argument("--data-file", required=True, help="flat little-endian uint16 tokens (.bin)")
    ap.add_argument("--metrics", help="write one JSON line per step (actorpipe's --metrics format)")
    ap.add_argument("--summary", help="write a JSON object: schedule class, threads per rank, torch version")
    ap.add_argument("--quiet", action="store_true", help="no per-step lines")
    return ap.parse_args(argv)


def clip_and_step(opt, a, k, grad_norm):
    """Clips by the global norm, steps AdamW at step k's learning rate, drops the gradients;
    returns that learning rate (actorpipe's supervisor and optimizer, in the same order)."""
    lr = pg.lr_at(k, a.lr, a.warmup_steps, a.steps, a.min_lr_ratio)
    coef = pg.clip_coefficient(grad_norm, a.grad_clip)
    if coef < 1.0:
        opt.scale_grads(coef)
    opt.step(lr)
    opt.zero_grad()
    return lr


def config_of(a):
    return pg.GPTConfig(vocab=a.vocab, seq_len=a.seq_len, hidden=a.hidden, heads=a.heads, layers=a.layers, seed=a.seed,
                        fused_attention=a.attention == "sdpa")


class StepLog:
    """Per-step metrics, printed and written like actorpipe's --metrics lines."""

    def __init__(self, a, label):
        self.a, self.label = a, label
        self.file = open(a.metrics, "w") if a.metrics else None

    def __call__(self, step, loss, lr, grad_norm, seconds):
        a = self.a
        tokens = float(a.microbatches) * a.microbatch_size * a.seq_len
        m = {"step": step, "loss": loss, "lr": lr, "grad_norm": grad_norm, "seconds": seconds,
             "tokens_per_s": tokens / seconds if seconds > 0 else 0.0}
        if self.file:
            self.file.write(json.dumps(m) + "\n")
            self.file.flush()
        if not a.quiet:
            print("peer %s step %d/%d loss %.6f lr %.2e grad_norm %.4f tokens/s %.0f" %
                  (self.label, step + 1, a.steps, loss, lr, grad_norm, m["tokens_per_s"]), flush=True)

    def close(self):
        if self.file:
            self.file.close()


def write_summary(a, schedule_class, threads):
    if not a.summary:
        return
    with open(a.summary, "w") as f:
        json.dump({"mode": a.mode, "schedule_class": schedule_class, "threads_per_rank": threads,
                   "torch": torch.__version__, "attention": a.attention}, f)


# ---- (a) unpipelined: one process, gradient accumulation (actorpipe --no-pipeline) --------

def train_unpipelined(a):
    torch.set_num_threads(1)
    cfg = config_of(a)
    data = pg.TokenFile(a.data_file, a.vocab)
    model = pg.GPTChunk(cfg, 0, a.layers, first=True, last=True)
    opt = pg.AdamW(model.parameters(), weight_decay=a.weight_decay)
    M, B = a.microbatches, a.microbatch_size
    log = StepLog(a, "no-pipeline")
    write_summary(a, "none (one process, gradient accumulation)", [torch.get_num_threads()])
    for k in range(a.steps):
        t0 = time.perf_counter()
        loss_sum = 0.0
        for m in range(M):
            x, y = data.batch(k, m * B, B, a.seq_len)
            loss = pg.lm_loss(model(x), y)
            loss_sum += loss.item()
            (loss * (1.0 / M)).backward()
        grad_norm = opt.grad_sq_sum() ** 0.5
        lr = clip_and_step(opt, a, k, grad_norm)
        log(k, loss_sum / M, lr, grad_norm, time.perf_counter() - t0)
    log.close()


# ---- (b) torch.distributed.pipelining, one process per rank ------------------------------

def rank_main(rank, a, port):
    import torch.distributed as dist
    from torch.distributed import pipelining as pp

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    P = a.stages
    dist.init_process_group("gloo", rank=rank, world_size=P)
    try:
        class_name, V, placement = SCHEDULES[a.mode]
        S = P * V
        cfg = config_of(a)
        ranges = pg.layer_ranges(pg.distribute_layers(a.layers, P, V))
        mine = pg.virtual_stages_of_rank(rank, P, V, placement)
        chunks = {v: pg.GPTChunk(cfg, ranges[v][0], ranges[v][1], first=v == 0, last=v == S - 1) for v in mine}
        stages = [pp.PipelineStage(chunks[v], v, S, torch.device("cpu")) for v in mine]
        M, B = a.microbatches, a.microbatch_size

        unscaled = []  # per-microbatch losses, in the order the loss function ran

        def loss_fn(logits, targets):
            # actorpipe: the last stage reports the loss and backpropagates loss * (1/M)
            loss = pg.lm_loss(logits, targets)
            unscaled.append(loss.item())
            return loss * (1.0 / M)

        cls = getattr(pp, class_name)
        sched = cls(stages[0] if V == 1 else stages, M, loss_fn=loss_fn, scale_grads=False)

        holds_first, holds_last = 0 in chunks, S - 1 in chunks
        first_tied = chunks[0].tok_emb.weight if holds_first else None
        copy_tied = chunks[S - 1].head_copy() if holds_last else None
        last_rank = next(r for r in range(P) if S - 1 in pg.virtual_stages_of_rank(r, P, V, placement))
        # The tied pair's gradient sum crosses ranks unless rank 0 also holds the last stage.
        tie_group = None
        if last_rank != 0:
            tie_group = dist.new_group([0, last_rank]) if P > 2 else dist.group.WORLD

        params = [p for v in mine for p in chunks[v].parameters()]
        opt = pg.AdamW(params, weight_decay=a.weight_decay)
        threads = [0] * P
        dist.all_gather_object(threads, torch.get_num_threads())
        if rank == 0:
            write_summary(a, cls.__name__, threads)
        data = pg.TokenFile(a.data_file, a.vocab)
        log = StepLog(a, a.mode) if rank == 0 else None

        dist.barrier()
        for k in range(a.steps):
            t0 = time.perf_counter()
            unscaled.clear()
            kwargs = {"return_outputs": False}
            args = ()
            if holds_first or holds_last:
                x, y = data.batch(k, 0, M * B, a.seq_len)  # row m*B + b is sample b of microbatch m
                if holds_first:
                    args = (x,)
                if holds_last:
                    kwargs.update(target=y, losses=[])
            sched.step(*args, **kwargs)

            # Tied embedding: both copies get first + copy (actorpipe's sum_tied_gradients).
            if holds_first and holds_last:
                with torch.no_grad():
                    s = first_tied.grad + copy_tied.grad
                    first_tied.grad, copy_tied.grad = s, s.clone()
            elif tie_group is not None and (holds_first or holds_last):
                dist.all_reduce((first_tied if holds_first else copy_tied).grad, group=tie_group)

            # Global norm: squared sums per virtual stage (the copy left out), added in
            # virtual-stage order as actorpipe's supervisor does; the mean loss rides along.
            parts = torch.zeros(S + 1, dtype=torch.float64)
            for v in mine:
                skip = [copy_tied] if copy_tied is not None and v == S - 1 else []
                parts[v] = pg.grad_sq_sum(chunks[v].parameters(), skip)
            if holds_last:
                # The first step's metadata inference calls loss_fn once more, before the microbatches.
                parts[S] = sum(unscaled[-M:]) / M
            dist.all_reduce(parts)
            total = 0.0
            for v in range(S):
                total += parts[v].item()
            grad_norm = total ** 0.5
            lr = clip_and_step(opt, a, k, grad_norm)
            dist.barrier()  # the step ends when every rank's optimizer is done
            if log:
                log(k, parts[S].item(), lr, grad_norm, time.perf_counter() - t0)
        if log:
            log.close()
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None):
    a = parse_args(argv)
    if a.steps < 1:
        sys.exit("peer_train: --steps must be >= 1")
    if a.mode == "no-pipeline":
        train_unpipelined(a)
    else:
        import torch.multiprocessing as mp
        mp.spawn(rank_main, args=(a, free_port()), nprocs=a.stages, join=True)


if __name__ == "__main__":
    main()
