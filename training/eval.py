"""Held-out perplexity of the trained model and of a unigram baseline.

Both are measured over the same tokens: every held-out chapter is read as Opal
reads a text (<s> + tokens of the chapter, verses joined by spaces) and every
token after <s> is predicted once. The model sees windows of at most `context`
tokens: segment k of a chapter holds tokens 1+k*(T-1) .. (k+1)*(T-1) and is
predicted from <s> + the segment itself (shifted). The unigram baseline uses
add-one smoothed token frequencies of the training stream (without <s>).

Usage: python3 eval.py [--checkpoint out/model.pt] [--write-heldout FILE]
"""
import argparse
import json
import math
import os

import torch
import torch.nn.functional as F

import corpus
import data
import spm
from model import Config, Llama

HERE = os.path.dirname(os.path.abspath(__file__))


def load_model(path):
    ckpt = torch.load(path, map_location="cpu")
    model = Llama(Config(**ckpt["config"]))
    model.load_state_dict(ckpt["state"])
    model.eval()
    return model


@torch.no_grad()
def model_nll(model, chapters_ids):
    """Returns (sum of -log p, token count) over all chapters."""
    step = model.cfg.context - 1
    total, count = 0.0, 0
    for ids in chapters_ids:
        body = ids[1:]
        for k in range(0, len(body), step):
            seg = body[k:k + step]
            inp = torch.tensor([[spm.BOS_ID] + seg[:-1]])
            logits = model(inp)[0]
            total += F.cross_entropy(logits, torch.tensor(seg), reduction="sum").item()
            count += len(seg)
    return total, count


def unigram_nll(train_stream, vocab_size, chapters_ids):
    counts = torch.bincount(train_stream[train_stream != spm.BOS_ID], minlength=vocab_size)
    logp = torch.log((counts.double() + 1) / (counts.sum().double() + vocab_size))
    total, count = 0.0, 0
    for ids in chapters_ids:
        total -= logp[torch.tensor(ids[1:])].sum().item()
        count += len(ids) - 1
    return total, count


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", default=os.path.join(HERE, "out", "model.pt"))
    parser.add_argument("--vocab", default=os.path.join(HERE, "out", "vocab.json"))
    parser.add_argument("--write-heldout", help="also write the held-out text to this file")
    parser.add_argument("--chapters", type=int, default=0, help="only the first N held-out chapters")
    args = parser.parse_args()
    torch.set_num_threads(1)
    vocab = spm.Vocab.load(args.vocab)
    train_ch, held_ch = corpus.load_split()
    if args.chapters:
        held_ch = held_ch[:args.chapters]
    if args.write_heldout:
        with open(args.write_heldout, "w", encoding="utf-8") as f:
            f.write(corpus.heldout_text(held_ch))
    held_ids = data.chapter_token_lists(vocab, held_ch)
    train_stream, _ = data.encode_chapters(vocab, train_ch)
    model = load_model(args.checkpoint)
    m_total, m_count = model_nll(model, held_ids)
    u_total, u_count = unigram_nll(train_stream, len(vocab), held_ids)
    assert m_count == u_count
    words = sum(len(" ".join(c).split()) for c in held_ch)
    result = {"heldout_chapters": len(held_ch), "tokens": m_count, "words": words,
              "model_ppl": round(math.exp(m_total / m_count), 3),
              "unigram_ppl": round(math.exp(u_total / u_count), 3),
              "model_nats_per_token": round(m_total / m_count, 4)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
