"""Extracts the King James Bible text from Debian's bible-kjv package and splits it.

The text comes from `bible` (package bible-kjv, data in bible-kjv-text); see DATA.md
for source and licence. Output: a list of chapters, each a list of verse strings
(verse numbers and chapter headings removed, whitespace collapsed).

Split: chapter number i (0-based, canonical order Genesis..Revelation) is held out
when i % HOLDOUT_EVERY == HOLDOUT_PHASE -- deterministic, about 5 % of the text.
"""
import os
import re
import subprocess

HOLDOUT_EVERY = 20
HOLDOUT_PHASE = 10
_HEADER = re.compile(r"^[1-3]?\s?[A-Z][A-Za-z ]+ \d+$")
_VERSE = re.compile(r"^\s+(\d+)\s+(.*)$")


def read_bible_text():
    """Returns the raw output of the `bible` program for the whole KJV."""
    try:
        out = subprocess.run(["bible", "-l100000", "gen1:1-rev22:21"], check=True,
                             capture_output=True, text=True).stdout
    except FileNotFoundError as exc:
        raise SystemExit("`bible` not found: run training/setup.sh "
                         "(apt-get install bible-kjv)") from exc
    return out


def parse_chapters(raw):
    """Parses `bible` output into [(heading, [verse, ...]), ...]."""
    chapters = []
    for line in raw.splitlines():
        if not line.strip():
            continue
        match = _VERSE.match(line)
        if match:
            if not chapters:
                raise ValueError(f"verse before any chapter heading: {line!r}")
            chapters[-1][1].append(" ".join(match.group(2).split()))
        elif _HEADER.match(line.strip()):
            chapters.append((line.strip(), []))
        else:
            raise ValueError(f"unexpected line in bible output: {line!r}")
    return chapters


def load_split(cache_dir=None):
    """Returns (train_chapters, heldout_chapters), each a list of verse lists."""
    chapters = parse_chapters(read_bible_text())
    if len(chapters) != 1189:
        raise ValueError(f"expected 1189 KJV chapters, got {len(chapters)}")
    train, heldout = [], []
    for index, (_, verses) in enumerate(chapters):
        (heldout if index % HOLDOUT_EVERY == HOLDOUT_PHASE else train).append(verses)
    return train, heldout


def heldout_text(heldout):
    """The held-out text as Opal sees it: one chapter per line, verses joined by spaces."""
    return "\n".join(" ".join(ch) for ch in heldout) + "\n"


if __name__ == "__main__":
    train, heldout = load_split()
    n_train = sum(len(c) for c in train)
    n_held = sum(len(c) for c in heldout)
    words = sum(len(v.split()) for c in train for v in c)
    print(f"train: {len(train)} chapters, {n_train} verses, {words} words; "
          f"held out: {len(heldout)} chapters, {n_held} verses")
    print(train[0][0])
