"""Trains the BPE vocabulary (stored as an SPM "llama" vocabulary, see spm.py).

Words are whitespace-separated and prefixed with U+2581; merges never cross a word.
At each step the most frequent adjacent pair is merged (ties: the smaller pair in
string order), so the result is deterministic. Merge k gets score -k, characters
score below all merges, so llama.cpp's highest-score-first merging replays BPE.

Usage: python3 train_tokenizer.py [--vocab-size 2048] [--out out/vocab.json]
"""
import argparse
import collections
import os

import corpus
import spm


def train_bpe(word_counts, n_merges):
    words = [list(w) for w in word_counts]
    counts = list(word_counts.values())
    pair_counts = collections.Counter()
    where = collections.defaultdict(set)
    for wi, sym in enumerate(words):
        for a, b in zip(sym, sym[1:]):
            pair_counts[(a, b)] += counts[wi]
            where[(a, b)].add(wi)
    merges = []
    for _ in range(n_merges):
        if not pair_counts:
            break
        best = min(pair_counts.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        if pair_counts[best] < 2:
            break
        merged = best[0] + best[1]
        merges.append(merged)
        for wi in list(where[best]):
            sym = words[wi]
            c = counts[wi]
            for a, b in zip(sym, sym[1:]):
                pair_counts[(a, b)] -= c
                if pair_counts[(a, b)] <= 0:
                    del pair_counts[(a, b)]
                where[(a, b)].discard(wi)
            out = []
            i = 0
            while i < len(sym):
                if i + 1 < len(sym) and sym[i] == best[0] and sym[i + 1] == best[1]:
                    out.append(merged)
                    i += 2
                else:
                    out.append(sym[i])
                    i += 1
            words[wi] = out
            for a, b in zip(out, out[1:]):
                pair_counts[(a, b)] += c
                where[(a, b)].add(wi)
        where.pop(best, None)
    return merges


def build_vocab(train_chapters, vocab_size):
    word_counts = collections.Counter()
    for chapter in train_chapters:
        for verse in chapter:
            for word in verse.split():
                word_counts[spm.SPACE + word] += 1
    chars = sorted({ch for w in word_counts for ch in w})
    n_fixed = 3 + 256
    n_merges = vocab_size - n_fixed - len(chars)
    merges = train_bpe(word_counts, n_merges)
    pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [spm.TYPE_UNKNOWN, spm.TYPE_CONTROL, spm.TYPE_CONTROL] + [spm.TYPE_BYTE] * 256
    scores = [0.0] * n_fixed
    for rank, piece in enumerate(merges):
        pieces.append(piece)
        types.append(spm.TYPE_NORMAL)
        scores.append(float(-rank))
    for i, ch in enumerate(chars):
        pieces.append(ch)
        types.append(spm.TYPE_NORMAL)
        scores.append(float(-(len(merges) + i)))
    return spm.Vocab(pieces, scores, types)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--vocab-size", type=int, default=2048)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "out", "vocab.json"))
    args = parser.parse_args()
    train, heldout = corpus.load_split()
    vocab = build_vocab(train, args.vocab_size)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    vocab.save(args.out)
    sample = train[0][0]
    ids = vocab.encode(sample)
    assert ids == vocab.encode_uncached(sample)
    assert vocab.decode(ids) == sample
    print(f"vocab {len(vocab)} pieces -> {args.out}")
    print(sample, "->", [vocab.pieces[i] for i in ids])


if __name__ == "__main__":
    main()
