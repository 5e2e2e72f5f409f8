"""Reads an exported GGUF back with gguf_io.Reader and runs an independent numpy
forward pass (llama.cpp's llama graph, written from the GGUF side: ne0 = input
dimension, RoPE on adjacent pairs, grouped-query heads), then compares its logits
with the PyTorch checkpoint's and checks the tokenizer metadata round-trips.

Usage: python3 check_gguf.py [--gguf ../models/opal-kjv.gguf] [--checkpoint out/model.pt]
"""
import argparse
import os

import numpy as np
import torch

import gguf_io
import spm
from model import Config, Llama

HERE = os.path.dirname(os.path.abspath(__file__))


def rms_norm(x, weight, eps):
    return x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + eps) * weight


def numpy_forward(reader, ids):
    kv = reader.get
    dim = kv("llama.embedding_length")
    n_head = kv("llama.attention.head_count")
    n_kv = kv("llama.attention.head_count_kv")
    n_rot = kv("llama.rope.dimension_count")
    eps = kv("llama.attention.layer_norm_rms_epsilon")
    base = kv("llama.rope.freq_base") if "llama.rope.freq_base" in reader.kv else 10000.0
    hd = dim // n_head
    t = reader.tensors
    n = len(ids)
    x = t["token_embd.weight"][ids].astype(np.float64)           # [n, dim]
    pos = np.arange(n)[:, None]
    theta = pos * base ** (-np.arange(0, n_rot, 2) / n_rot)       # [n, n_rot/2]
    cos, sin = np.cos(theta), np.sin(theta)

    def rope(m):  # m: [n, heads, hd]
        out = m.copy()
        a, b = m[:, :, 0:n_rot:2], m[:, :, 1:n_rot:2]
        out[:, :, 0:n_rot:2] = a * cos[:, None, :] - b * sin[:, None, :]
        out[:, :, 1:n_rot:2] = a * sin[:, None, :] + b * cos[:, None, :]
        return out

    for layer in range(kv("llama.block_count")):
        p = f"blk.{layer}."
        h = rms_norm(x, t[p + "attn_norm.weight"], eps)
        q = rope((h @ t[p + "attn_q.weight"].T).reshape(n, n_head, hd))
        k = rope((h @ t[p + "attn_k.weight"].T).reshape(n, n_kv, hd))
        v = (h @ t[p + "attn_v.weight"].T).reshape(n, n_kv, hd)
        heads = []
        for head in range(n_head):
            g = head // (n_head // n_kv)
            scores = q[:, head] @ k[:, g].T / np.sqrt(hd)
            scores[np.triu_indices(n, 1)] = -np.inf
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            heads.append((scores / scores.sum(-1, keepdims=True)) @ v[:, g])
        x = x + np.concatenate(heads, axis=1) @ t[p + "attn_output.weight"].T
        h = rms_norm(x, t[p + "ffn_norm.weight"], eps)
        gate = h @ t[p + "ffn_gate.weight"].T
        up = h @ t[p + "ffn_up.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ t[p + "ffn_down.weight"].T
    out_w = t.get("output.weight", t["token_embd.weight"])
    return rms_norm(x, t["output_norm.weight"], eps) @ out_w.T


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gguf", default=os.path.join(HERE, "..", "models", "opal-kjv.gguf"))
    parser.add_argument("--checkpoint", default=os.path.join(HERE, "out", "model.pt"))
    parser.add_argument("--vocab", default=os.path.join(HERE, "out", "vocab.json"))
    args = parser.parse_args()
    reader = gguf_io.Reader(args.gguf)
    vocab = spm.Vocab.load(args.vocab)
    assert reader.get("tokenizer.ggml.tokens") == vocab.pieces
    assert reader.get("tokenizer.ggml.token_type") == vocab.types
    assert np.allclose(reader.get("tokenizer.ggml.scores"), vocab.scores)
    ids = vocab.encode("And God said, Let there be light: and there was light. "
                       "Blessed are the meek: for they shall inherit the earth.")
    ref = numpy_forward(reader, ids)
    ckpt = torch.load(args.checkpoint, map_location="cpu")
    model = Llama(Config(**ckpt["config"]))
    model.load_state_dict(ckpt["state"])
    model.eval()
    with torch.no_grad():
        got = model(torch.tensor([ids]))[0].double().numpy()
    err = np.abs(got - ref).max() / np.abs(ref).max()
    print(f"{len(ids)} tokens; max |torch - numpy(gguf)| / max|logit| = {err:.2e}")
    if err > 1e-4:
        raise SystemExit("logits differ: GGUF layout or model math mismatch")
    print("ok")


if __name__ == "__main__":
    main()
