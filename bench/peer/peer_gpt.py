"""actorpipe's GPT, data and optimizer re-implemented in PyTorch, for the peer benchmark.

Mirrors core/model/gpt_modules.cpp (modules, global parameter names, name-seeded init),
core/data/token_file.cpp + microbatch.cpp (which tokens a sample reads), core/optim/ (AdamW,
LR schedule, clip coefficient) and core/partition.cpp (blocks per virtual stage), so both
sides train the same numbers and a first-step loss comparison proves it.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MASK64 = (1 << 64) - 1

# The model, batch and optimizer flags of both scripts, with actorpipe's spelling and the
# benchmark's defaults: (flag, type, default).
JOB_FLAGS = [
    ("--layers", int, 8), ("--hidden", int, 256), ("--heads", int, 4), ("--seq-len", int, 128),
    ("--vocab", int, 256), ("--microbatch-size", int, 4), ("--microbatches", int, 16), ("--steps", int, 5),
    ("--lr", float, 3e-3), ("--warmup-steps", int, 5), ("--grad-clip", float, 1.0),
    ("--weight-decay", float, 0.1), ("--seed", int, 1234),
]


def add_job_flags(parser):
    for flag, kind, default in JOB_FLAGS:
        parser.add_argument(flag, type=kind, default=default)


# ---- seeds (gpt_modules.cpp, core/data/splitmix64.hpp) ----------------------------------

def splitmix64(x):
    z = (x + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def parameter_seed(seed, global_name):
    """FNV-1a over the name's bytes, mixed with the model seed (gpt_modules.cpp parameter_seed)."""
    h = 0xCBF29CE484222325
    for c in global_name.encode():
        h ^= c
        h = (h * 0x100000001B3) & MASK64
    return splitmix64((seed ^ splitmix64(h)) & MASK64)


class GPTConfig:
    def __init__(self, vocab=256, seq_len=128, hidden=256, heads=4, layers=8, init_std=0.02, seed=1234,
                 fused_attention=False):
        self.vocab, self.seq_len, self.hidden, self.heads, self.layers = vocab, seq_len, hidden, heads, layers
        self.init_std, self.seed = init_std, seed
        self.fused_attention = fused_attention  # not part of actorpipe's gpt_config: see causal_attention


def init_parameter(cfg, global_name, shape):
    """A parameter's initial value from its global name alone (gpt_modules.cpp init_parameter)."""
    module = global_name[: global_name.rfind(".")] if "." in global_name else ""
    leaf = module[module.rfind(".") + 1:]
    if global_name.endswith(".bias"):
        return torch.zeros(shape, dtype=torch.float32)
    if leaf.startswith("ln"):
        return torch.ones(shape, dtype=torch.float32)
    std = cfg.init_std
    if global_name.endswith(".proj.weight"):
        std /= math.sqrt(2.0 * cfg.layers)
    g = torch.Generator().manual_seed(parameter_seed(cfg.seed, global_name))
    return torch.normal(0.0, std, tuple(shape), generator=g, dtype=torch.float32)


# ---- modules: nn.Module attribute paths give the global names ----------------------------

class _Weight(nn.Module):
    """A bare parameter holder, so its name is '<attr>.weight' like actorpipe's."""

    def __init__(self, value):
        super().__init__()
        self.weight = nn.Parameter(value)


class _LayerNorm(nn.Module):
    def __init__(self, cfg, name):
        super().__init__()
        self.weight = nn.Parameter(init_parameter(cfg, name + ".weight", (cfg.hidden,)))
        self.bias = nn.Parameter(init_parameter(cfg, name + ".bias", (cfg.hidden,)))

    def forward(self, x):
        return F.layer_norm(x, (self.weight.shape[0],), self.weight, self.bias, 1e-5)


class _Linear(nn.Module):
    def __init__(self, cfg, name, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(init_parameter(cfg, name + ".weight", (n_out, n_in)))
        self.bias = nn.Parameter(init_parameter(cfg, name + ".bias", (n_out,)))

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


def causal_attention(qkv, heads, fused=False):
    """gpt_modules.cpp causal_attention over qkv [B, S, 3H] -> [B, S, H]. fused=False: matmul +
    masked softmax (what actorpipe runs on LibTorch 1.x); fused=True: scaled_dot_product_attention
    with is_causal (what it runs on LibTorch 2.x). Same scale 1/sqrt(d) and mask either way."""
    b, s, h3 = qkv.shape
    h = h3 // 3
    d = h // heads
    q, k, v = (t.view(b, s, heads, d).transpose(1, 2) for t in qkv.split(h, -1))
    if fused:
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.0, is_causal=True)
    else:
        att = q.matmul(k.transpose(-2, -1)) * (1.0 / math.sqrt(float(d)))
        future = torch.ones(s, s, dtype=torch.bool).triu(1)
        out = att.masked_fill(future, float("-inf")).softmax(-1).matmul(v)
    return out.transpose(1, 2).contiguous().view(b, s, h)


class _Attention(nn.Module):
    def __init__(self, cfg, prefix):
        super().__init__()
        self.heads, self.fused = cfg.heads, cfg.fused_attention
        self.qkv = _Linear(cfg, prefix + ".qkv", cfg.hidden, 3 * cfg.hidden)
        self.proj = _Linear(cfg, prefix + ".proj", cfg.hidden, cfg.hidden)

    def forward(self, x):
        return self.proj(causal_attention(self.qkv(x), self.heads, self.fused))


class _MLP(nn.Module):
    def __init__(self, cfg, prefix):
        super().__init__()
        self.fc = _Linear(cfg, prefix + ".fc", cfg.hidden, 4 * cfg.hidden)
        self.proj = _Linear(cfg, prefix + ".proj", 4 * cfg.hidden, cfg.hidden)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    """Pre-LN block: x + attn(ln1(x)), then + mlp(ln2(x))."""

    def __init__(self, cfg, index):
        super().__init__()
        p = "blocks.%d" % index
        self.ln1 = _LayerNorm(cfg, p + ".ln1")
        self.attn = _Attention(cfg, p + ".attn")
        self.ln2 = _LayerNorm(cfg, p + ".ln2")
        self.mlp = _MLP(cfg, p + ".mlp")

    def forward(self, x):
        h = x + self.attn(self.ln1(x))
        return h + self.mlp(self.ln2(h))


class GPTChunk(nn.Module):
    """One virtual stage: embeddings if first, blocks [begin, end), ln_f + tied head if last.

    A last stage that is not also first holds its own copy of the token embedding under the
    same global name 'tok_emb.weight' (actorpipe's head copy); its gradient must be summed with
    the first stage's after every step (see sum_tied_gradients in peer_train.py). Outputs
    hidden states, or logits [B, S, vocab] on the last stage (the loss is the caller's).
    """

    def __init__(self, cfg, block_begin, block_end, first, last):
        super().__init__()
        self.first, self.last = first, last
        if first or last:
            self.tok_emb = _Weight(init_parameter(cfg, "tok_emb.weight", (cfg.vocab, cfg.hidden)))
        if first:
            self.pos_emb = _Weight(init_parameter(cfg, "pos_emb.weight", (cfg.seq_len, cfg.hidden)))
        self.blocks = nn.ModuleDict({str(i): Block(cfg, i) for i in range(block_begin, block_end)})
        if last:
            self.ln_f = _LayerNorm(cfg, "ln_f")

    def forward(self, x):
        if self.first:
            x = F.embedding(x, self.tok_emb.weight) + self.pos_emb.weight[: x.shape[1]]
        for block in self.blocks.values():
            x = block(x)
        if self.last:
            x = self.ln_f(x).matmul(self.tok_emb.weight.t())
        return x

    def head_copy(self):
        """The tied copy's parameter when this chunk is last but not first, else None."""
        return self.tok_emb.weight if self.last and not self.first else None


def lm_loss(logits, targets):
    """Mean token cross-entropy (gpt_head::loss)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


# ---- partition (core/partition.cpp distribute_layers) + placement -----------------------

def distribute_layers(num_layers, stages, chunks=1):
    parts = stages * chunks
    if num_layers < parts:
        raise ValueError("layers=%d cannot be split over stages*chunks=%d virtual stages" % (num_layers, parts))
    q, rem = divmod(num_layers, parts)
    counts = [q] * parts
    first_extra = parts // 2 - rem // 2
    for i in range(rem):
        counts[first_extra + i] += 1
    return counts


def layer_ranges(counts):
    out, start = [], 0
    for c in counts:
        out.append((start, start + c))
        start += c
    return out


def virtual_stages_of_rank(rank, ranks, chunks, placement):
    """Virtual stages a rank holds, in chunk order: 'loop' v = chunk*P + rank (interleaved),
    'v' chunk 0 down the ranks, chunk 1 back up (ZB-V)."""
    if placement == "loop":
        return [c * ranks + rank for c in range(chunks)]
    if placement == "v":
        assert chunks == 2
        return [rank, 2 * ranks - 1 - rank]
    raise ValueError(placement)


# ---- data (core/data/token_file.cpp + microbatch.cpp) -----------------------------------

class TokenFile:
    """Flat little-endian uint16 tokens. Sample `index` of step `step` is the seq_len + 1
    tokens at splitmix64(splitmix64(step) ^ index) % (n - seq_len)."""

    def __init__(self, path, vocab):
        self.tokens = np.fromfile(path, dtype="<u2")
        if self.tokens.size and int(self.tokens.max()) >= vocab:
            raise ValueError("%s holds a token >= vocab %d" % (path, vocab))

    def rows(self, step, first_index, count, seq_len):
        """[count, seq_len + 1] int64: samples first_index .. first_index + count - 1."""
        span = self.tokens.size - seq_len
        out = np.empty((count, seq_len + 1), dtype=np.int64)
        for b in range(count):
            off = splitmix64(splitmix64(step) ^ (first_index + b)) % span
            out[b] = self.tokens[off: off + seq_len + 1]
        return torch.from_numpy(out)

    def batch(self, step, first_index, count, seq_len):
        """(inputs, targets), int64 [count, seq_len] each: a row and the row shifted by one."""
        r = self.rows(step, first_index, count, seq_len)
        return r[:, :seq_len].contiguous(), r[:, 1:].contiguous()


def write_markov_token_file(path, vocab, n_tokens, seed, successors=6):
    """A seeded sparse Markov corpus (like actorpipe's synthetic one: each token has a few
    successors with Dirichlet(1) probabilities, (t + 1) mod vocab among them) so the loss falls."""
    rng = np.random.default_rng(seed)
    k = min(successors, vocab)
    succ = np.empty((vocab, k), dtype=np.int64)
    for t in range(vocab):
        others = rng.permutation(np.delete(np.arange(vocab), (t + 1) % vocab))[: k - 1]
        succ[t] = np.concatenate([[(t + 1) % vocab], others])
    cdf = np.cumsum(rng.dirichlet(np.ones(k), size=vocab), axis=1)
    cdf[:, -1] = 1.0
    u = rng.random(n_tokens)
    out = np.empty(n_tokens, dtype="<u2")
    t = int(rng.integers(vocab))
    for i in range(n_tokens):
        t = int(succ[t, int(np.searchsorted(cdf[t], u[i], side="right"))])
        out[i] = t
    out.tofile(path)


# ---- optimizer (core/optim/optimizer.cpp, lr_schedule.cpp) ------------------------------

def lr_at(step, base_lr, warmup_steps, total_steps, min_ratio=0.1):
    if step < warmup_steps:
        return base_lr * (float(step) + 1) / warmup_steps
    decay_steps = total_steps - 1 - warmup_steps
    if decay_steps <= 0:
        return base_lr
    progress = float(step - warmup_steps) / decay_steps
    return base_lr * (1.0 - (1.0 - min_ratio) * progress)


def clip_coefficient(global_norm, max_norm):
    if max_norm <= 0:
        return 1.0
    return min(1.0, max_norm / (global_norm + 1e-6))


@torch.no_grad()
def grad_sq_sum(params, skip=()):
    """Sum of squared gradient entries in float64, parameter by parameter in order; a missing
    gradient counts as zero and parameters in `skip` (the tied copy) are left out."""
    total = 0.0
    for p in params:
        if p.grad is None or any(p is s for s in skip):
            continue
        total += p.grad.to(torch.float64).pow(2).sum().item()
    return total


class AdamW:
    """actorpipe's shard_optimizer, op for op: decoupled decay on dim >= 2 parameters only,
    bias correction per parameter, denominator sqrt(v / (1 - b2^t)) + eps."""

    def __init__(self, params, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1):
        self.params = list(params)
        self.b1, self.b2, self.eps, self.wd = beta1, beta2, eps, weight_decay
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]
        self.t = [0] * len(self.params)

    def grad_sq_sum(self, skip=()):
        return grad_sq_sum(self.params, skip)

    @torch.no_grad()
    def scale_grads(self, factor):
        for p in self.params:
            if p.grad is not None:
                p.grad.mul_(factor)

    @torch.no_grad()
    def step(self, lr):
        for i, p in enumerate(self.params):
            g = p.grad
            if g is None:
                continue
            self.t[i] += 1
            if p.dim() >= 2 and self.wd != 0:
                p.mul_(1.0 - lr * self.wd)
            self.m[i].mul_(self.b1).add_(g, alpha=1.0 - self.b1)
            self.v[i].mul_(self.b2).addcmul_(g, g, value=1.0 - self.b2)
            bias1 = 1.0 - self.b1 ** self.t[i]
            bias2 = 1.0 - self.b2 ** self.t[i]
            denom = (self.v[i] / bias2).sqrt_().add_(self.eps)
            p.addcdiv_(self.m[i], denom, value=-lr / bias1)

    def zero_grad(self):
        for p in self.params:
            p.grad = None
