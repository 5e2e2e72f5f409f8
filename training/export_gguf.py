"""Exports a trained checkpoint and its vocabulary as a llama-architecture GGUF file.

Metadata keys, token types, special ids and tensor names follow the llama.cpp
conventions as found in stories260K.gguf (llama2.c export), plus
llama.rope.freq_base and tokenizer.ggml.add_bos_token/add_eos_token, minus the
separator/padding ids (stories260K stores 0xFFFFFFFF = "none"; absent means the same). Weights are F32;
nn.Linear [out, in] row-major is GGUF [ne0 = in, ne1 = out], so no transposes. RoPE
is trained in GGML's adjacent-pair ("normal") layout, so Q/K need no permutation.

Usage: python3 export_gguf.py [--checkpoint out/model.pt] [--out ../models/opal-kjv.gguf]
"""
import argparse
import os

import numpy as np
import torch

import gguf_io as g
import spm

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL_NAME = "opal-kjv"

# opal-kjv is a base model, not a chat model: its "chat" continues the text.
# The template joins the conversation into one running text (a system prompt
# first, on its own line), so `opal chat` and `opal serve` let it continue
# whatever the user wrote. It is plain Jinja; llama.cpp reads it too.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}{{ message['content'] | trim }}{{ '\\n' }}"
    "{%- else -%}{%- if not loop.first and messages[loop.index0 - 1]['role'] != 'system' -%}{{ ' ' }}{%- endif -%}"
    "{{ message['content'] | trim }}{%- endif -%}"
    "{%- endfor -%}"
)


def metadata(cfg, vocab):
    return [
        ("tokenizer.ggml.tokens", g.ARRAY, (g.STRING, vocab.pieces)),
        ("tokenizer.ggml.scores", g.ARRAY, (g.FLOAT32, [float(s) for s in vocab.scores])),
        ("tokenizer.ggml.token_type", g.ARRAY, (g.INT32, [int(t) for t in vocab.types])),
        ("tokenizer.ggml.model", g.STRING, "llama"),
        ("general.architecture", g.STRING, "llama"),
        ("general.name", g.STRING, MODEL_NAME),
        ("tokenizer.ggml.unknown_token_id", g.UINT32, spm.UNK_ID),
        ("tokenizer.ggml.bos_token_id", g.UINT32, spm.BOS_ID),
        ("tokenizer.ggml.eos_token_id", g.UINT32, spm.EOS_ID),
        ("tokenizer.ggml.add_bos_token", g.BOOL, True),
        ("tokenizer.ggml.add_eos_token", g.BOOL, False),
        ("tokenizer.chat_template", g.STRING, CHAT_TEMPLATE),
        ("llama.context_length", g.UINT32, cfg["context"]),
        ("llama.embedding_length", g.UINT32, cfg["dim"]),
        ("llama.feed_forward_length", g.UINT32, cfg["ffn_dim"]),
        ("llama.attention.head_count", g.UINT32, cfg["n_heads"]),
        ("llama.attention.head_count_kv", g.UINT32, cfg["n_kv_heads"]),
        ("llama.block_count", g.UINT32, cfg["n_layers"]),
        ("llama.rope.dimension_count", g.UINT32, cfg["dim"] // cfg["n_heads"]),
        ("llama.rope.freq_base", g.FLOAT32, float(cfg["rope_base"])),
        ("llama.attention.layer_norm_rms_epsilon", g.FLOAT32, float(cfg["norm_eps"])),
    ]


def tensors(cfg, state):
    def w(name):
        return state[name].detach().to(torch.float32).numpy()

    out = [("token_embd.weight", w("tok_embd.weight")),
           ("output_norm.weight", w("output_norm.weight")),
           ("output.weight", w("output.weight"))]
    for i in range(cfg["n_layers"]):
        p = f"blocks.{i}."
        out += [(f"blk.{i}.attn_q.weight", w(p + "wq.weight")),
                (f"blk.{i}.attn_k.weight", w(p + "wk.weight")),
                (f"blk.{i}.attn_v.weight", w(p + "wv.weight")),
                (f"blk.{i}.attn_output.weight", w(p + "wo.weight")),
                (f"blk.{i}.attn_norm.weight", w(p + "attn_norm.weight")),
                (f"blk.{i}.ffn_gate.weight", w(p + "w_gate.weight")),
                (f"blk.{i}.ffn_down.weight", w(p + "w_down.weight")),
                (f"blk.{i}.ffn_up.weight", w(p + "w_up.weight")),
                (f"blk.{i}.ffn_norm.weight", w(p + "ffn_norm.weight"))]
    return [(name, np.ascontiguousarray(a, dtype=np.float32)) for name, a in out]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", default=os.path.join(HERE, "out", "model.pt"))
    parser.add_argument("--vocab", default=os.path.join(HERE, "out", "vocab.json"))
    parser.add_argument("--out", default=os.path.join(HERE, "..", "models", "opal-kjv.gguf"))
    args = parser.parse_args()
    ckpt = torch.load(args.checkpoint, map_location="cpu")
    cfg = ckpt["config"]
    vocab = spm.Vocab.load(args.vocab)
    if len(vocab) != cfg["vocab_size"]:
        raise SystemExit(f"vocab has {len(vocab)} pieces, model expects {cfg['vocab_size']}")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    g.write(args.out, metadata(cfg, vocab), tensors(cfg, ckpt["state"]))
    size = os.path.getsize(args.out)
    if size > 16 * 1024 * 1024:
        raise SystemExit(f"{args.out} is {size} bytes, over the 16 MiB limit")
    print(f"wrote {args.out}: {size} bytes (step {ckpt['step']}, seed {ckpt['seed']})")


if __name__ == "__main__":
    main()
