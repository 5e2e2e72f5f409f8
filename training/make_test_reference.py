"""Writes the reference data for tests/engine/test_default_model.cpp, computed with
the PyTorch model (an implementation independent of Opal's engine):

  tests/data/default_model/heldout.txt    one held-out chapter (not seen in training)
  tests/data/default_model/reference.json prompt ids, greedy continuation ids (with the
                                          top-1/top-2 logit margin of each step), top logits at some positions, the
                                          held-out perplexity and the unigram one.

Perplexity protocol (same as eval.py): ids = tokenize(text, BOS); segment k holds
ids[1 + k*(T-1) : 1 + (k+1)*(T-1)] and is predicted from [BOS] + segment[:-1] in a
fresh context, T = 256.

Usage: python3 make_test_reference.py [--chapter 0]
"""
import argparse
import json
import math
import os

import torch

import corpus
import data
import spm
from eval import load_model, model_nll, unigram_nll
from sample import generate

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "data", "default_model")
PROMPT = "And God said"


@torch.no_grad()
def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", default=os.path.join(HERE, "out", "model.pt"))
    parser.add_argument("--vocab", default=os.path.join(HERE, "out", "vocab.json"))
    parser.add_argument("--chapter", type=int, default=0, help="which held-out chapter")
    parser.add_argument("--greedy-tokens", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(1)
    vocab = spm.Vocab.load(args.vocab)
    model = load_model(args.checkpoint)
    train_ch, held_ch = corpus.load_split()
    os.makedirs(OUT, exist_ok=True)

    prompt_ids = vocab.encode(PROMPT)
    out = generate(model, prompt_ids, args.greedy_tokens)
    logits = model(torch.tensor([out]))[0]
    margins = []
    for pos in range(len(prompt_ids) - 1, len(out) - 1):
        top2 = torch.topk(logits[pos], 2).values
        margins.append((top2[0] - top2[1]).item())

    check_ids = vocab.encode("Blessed are the meek: for they shall inherit the earth.")
    check_logits = model(torch.tensor([check_ids]))[0]
    positions = [0, 1, len(check_ids) // 2, len(check_ids) - 1]
    logit_refs = []
    for pos in positions:
        top = torch.topk(check_logits[pos], 8)
        logit_refs.append({"position": pos,
                           "ids": top.indices.tolist(),
                           "values": [round(v, 6) for v in top.values.tolist()],
                           "max_abs": round(check_logits[pos].abs().max().item(), 6)})

    text = " ".join(held_ch[args.chapter])
    with open(os.path.join(OUT, "heldout.txt"), "w", encoding="utf-8") as f:
        f.write(text + "\n")
    ids = vocab.encode(text)
    m_total, m_count = model_nll(model, [ids])
    train_stream, _ = data.encode_chapters(vocab, train_ch)
    u_total, _ = unigram_nll(train_stream, len(vocab), [ids])
    ref = {
        "model": "models/opal-kjv.gguf",
        "prompt": PROMPT, "prompt_ids": prompt_ids,
        "greedy_ids": out[len(prompt_ids):], "greedy_text": vocab.decode(out[1:]),
        "greedy_margins": [round(m, 4) for m in margins],
        "logits_text_ids": check_ids, "logits": logit_refs,
        "heldout_file": "tests/data/default_model/heldout.txt",
        "heldout_tokens": len(ids), "context": model.cfg.context,
        "heldout_ppl": round(math.exp(m_total / m_count), 4),
        "heldout_unigram_ppl": round(math.exp(u_total / m_count), 4),
    }
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    print(json.dumps({k: v for k, v in ref.items() if k != "logits"}))


if __name__ == "__main__":
    main()
