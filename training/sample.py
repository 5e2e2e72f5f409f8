"""Generates text from the PyTorch checkpoint (reference for Opal's output).

Greedy by default; --temperature T --top-k K --seed S for sampling.
Usage: python3 sample.py "And God said" [--tokens 60] [--ids]
"""
import argparse
import os

import torch

import spm
from eval import load_model

HERE = os.path.dirname(os.path.abspath(__file__))


@torch.no_grad()
def generate(model, ids, n_tokens, temperature=0.0, top_k=0, generator=None):
    out = list(ids)
    for _ in range(n_tokens):
        logits = model(torch.tensor([out[-model.cfg.context:]]))[0, -1]
        if temperature <= 0:
            nxt = int(torch.argmax(logits))
        else:
            logits = logits / temperature
            if top_k:
                kth = torch.topk(logits, top_k).values[-1]
                logits[logits < kth] = -float("inf")
            nxt = int(torch.multinomial(torch.softmax(logits, -1), 1, generator=generator))
        out.append(nxt)
        if nxt == spm.EOS_ID:
            break
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("prompts", nargs="+")
    parser.add_argument("--checkpoint", default=os.path.join(HERE, "out", "model.pt"))
    parser.add_argument("--vocab", default=os.path.join(HERE, "out", "vocab.json"))
    parser.add_argument("--tokens", type=int, default=60)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ids", action="store_true", help="print token ids too")
    args = parser.parse_args()
    torch.set_num_threads(1)
    vocab = spm.Vocab.load(args.vocab)
    model = load_model(args.checkpoint)
    gen = torch.Generator().manual_seed(args.seed)
    for prompt in args.prompts:
        ids = vocab.encode(prompt)
        out = generate(model, ids, args.tokens, args.temperature, args.top_k, gen)
        print(repr(prompt), "->", vocab.decode(out[1:]))
        if args.ids:
            print("prompt ids:", ids)
            print("generated ids:", out[len(ids):])


if __name__ == "__main__":
    main()
