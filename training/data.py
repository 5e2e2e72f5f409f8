"""Token streams for training and evaluation.

Each chapter becomes <s> + tokens(verses joined by single spaces) + </s>; the
training stream is the concatenation of the training chapters. A training window
starts at a verse start s and is [<s>] + stream[s : s+T-1] with targets
stream[s : s+T], so every window looks like a prompt Opal would see: BOS, then text.
"""
import torch

import spm


def encode_chapters(vocab, chapters):
    """Returns (stream LongTensor, verse_start positions LongTensor)."""
    stream, starts = [], []
    for verses in chapters:
        stream.append(spm.BOS_ID)
        for verse in verses:
            starts.append(len(stream))
            stream.extend(vocab.encode(verse, add_bos=False))
        stream.append(spm.EOS_ID)
    return torch.tensor(stream, dtype=torch.long), torch.tensor(starts, dtype=torch.long)


def chapter_token_lists(vocab, chapters):
    """For evaluation: one [<s>] + tokens list per chapter (the text as Opal reads it)."""
    return [vocab.encode(" ".join(verses), add_bos=True) for verses in chapters]


def window_batch(stream, starts, context):
    """Builds (inputs, targets) [len(starts), context] for the given verse starts."""
    inputs = torch.empty((len(starts), context), dtype=torch.long)
    targets = torch.empty((len(starts), context), dtype=torch.long)
    limit = len(stream) - context
    for row, s in enumerate(starts.tolist()):
        s = min(s, limit)
        inputs[row, 0] = spm.BOS_ID
        inputs[row, 1:] = stream[s:s + context - 1]
        targets[row] = stream[s:s + context]
    return inputs, targets
