"""A llama-architecture transformer whose math is exactly llama.cpp's llama graph.

  x = token_embd[ids]
  per block:  h = rmsnorm(x) * attn_norm
              q, k, v = Wq h, Wk h, Wv h       (n_head q heads, n_head_kv k/v heads)
              q, k = rope(q), rope(k)          adjacent pairs (x[2i], x[2i+1]) rotated by
                                               pos * base^(-2i/head_dim)  (GGML "normal" mode)
              x += Wo softmax(q k^T / sqrt(head_dim) + causal) v
                                               (q head h reads k/v head h // (n_head/n_head_kv))
              h = rmsnorm(x) * ffn_norm
              x += Wdown(silu(Wgate h) * Wup h)
  logits = Woutput (rmsnorm(x) * output_norm)
rmsnorm(x) = x / sqrt(mean(x^2) + eps). nn.Linear weights are [out, in] row-major,
which is GGUF's [ne0 = in, ne1 = out] layout, so they export without transposes.
"""
import dataclasses
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclasses.dataclass
class Config:
    vocab_size: int = 2048
    dim: int = 256
    n_layers: int = 6
    n_heads: int = 8
    n_kv_heads: int = 4
    ffn_dim: int = 688
    context: int = 256
    rope_base: float = 10000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self):
        return self.dim // self.n_heads


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(cfg, length, device=None):
    half = cfg.head_dim // 2
    inv_freq = cfg.rope_base ** (-torch.arange(half, dtype=torch.float64) * 2 / cfg.head_dim)
    angles = torch.arange(length, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return angles.cos().float().to(device), angles.sin().float().to(device)


def apply_rope(x, cos, sin):
    """x: [batch, heads, time, head_dim]; rotates pairs (x[2i], x[2i+1])."""
    even, odd = x[..., 0::2], x[..., 1::2]
    rot_even = even * cos - odd * sin
    rot_odd = even * sin + odd * cos
    return torch.stack((rot_even, rot_odd), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        hd = cfg.head_dim
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * hd, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)
        self.wo = nn.Linear(cfg.n_heads * hd, cfg.dim, bias=False)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.w_gate = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w_up = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w_down = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)

    def forward(self, x, cos, sin, mask):
        cfg = self.cfg
        b, t, _ = x.shape
        hd = cfg.head_dim
        h = self.attn_norm(x)
        q = self.wq(h).view(b, t, cfg.n_heads, hd).transpose(1, 2)
        k = self.wk(h).view(b, t, cfg.n_kv_heads, hd).transpose(1, 2)
        v = self.wv(h).view(b, t, cfg.n_kv_heads, hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        group = cfg.n_heads // cfg.n_kv_heads
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd) + mask
        y = F.softmax(att, dim=-1) @ v
        x = x + self.wo(y.transpose(1, 2).reshape(b, t, cfg.n_heads * hd))
        h = self.ffn_norm(x)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_embd = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.output_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        self.apply(self._init)
        for block in self.blocks:  # scaled residual projections (GPT-2 style)
            std = 0.02 / math.sqrt(2 * cfg.n_layers)
            nn.init.normal_(block.wo.weight, std=std)
            nn.init.normal_(block.w_down.weight, std=std)

    @staticmethod
    def _init(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)

    def forward(self, ids):
        t = ids.shape[1]
        cos, sin = rope_tables(self.cfg, t, ids.device)
        mask = torch.full((t, t), float("-inf"), device=ids.device).triu(1)
        x = self.tok_embd(ids)
        for block in self.blocks:
            x = block(x, cos, sin, mask)
        return self.output(self.output_norm(x))

    def n_params(self):
        return sum(p.numel() for p in self.parameters())
