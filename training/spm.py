"""SentencePiece-style (llama.cpp "llama" model) vocabulary and encoder.

Vocabulary layout (same conventions as llama2.c / stories260K GGUF files):
  id 0 <unk> (type 2 UNKNOWN), 1 <s> (type 3 CONTROL), 2 </s> (type 3 CONTROL),
  ids 3..258 byte-fallback tokens <0x00>..<0xFF> (type 6 BYTE),
  then the pieces learned by BPE (type 1 NORMAL, score = -merge rank),
  then the single characters (type 1 NORMAL, scores below every merge).

Encoding is the llama.cpp SPM algorithm: spaces become U+2581 and one is prefixed;
the text is split into UTF-8 characters; repeatedly the adjacent pair whose
concatenation is a vocabulary piece with the highest score is merged (ties: the
leftmost pair); every final symbol that is not a piece is emitted as its bytes'
<0xXX> tokens. Since no piece holds U+2581 anywhere but at its start, no merge
crosses a word start, so words can be encoded independently (and cached).
"""
import heapq
import json

SPACE = "\u2581"
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2
BYTE_BASE = 3
TYPE_NORMAL, TYPE_UNKNOWN, TYPE_CONTROL, TYPE_BYTE = 1, 2, 3, 6


class Vocab:
    def __init__(self, pieces, scores, types):
        self.pieces = pieces
        self.scores = scores
        self.types = types
        self.piece_to_id = {}
        for i, (piece, kind) in enumerate(zip(pieces, types)):
            if kind == TYPE_NORMAL:
                if SPACE in piece[1:]:
                    raise ValueError(f"piece {piece!r} holds an interior word start")
                self.piece_to_id[piece] = i
        self._cache = {}

    @staticmethod
    def load(path):
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return Vocab(data["pieces"], data["scores"], data["types"])

    def save(self, path):
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"pieces": self.pieces, "scores": self.scores,
                       "types": self.types}, f, ensure_ascii=False, indent=0)

    def __len__(self):
        return len(self.pieces)

    def _encode_symbols(self, text):
        symbols = list(text)
        alive = [True] * len(symbols)
        nxt = list(range(1, len(symbols) + 1))
        prv = list(range(-1, len(symbols) - 1))
        heap = []

        def push(left):
            right = nxt[left]
            if right >= len(symbols):
                return
            merged = symbols[left] + symbols[right]
            tid = self.piece_to_id.get(merged)
            if tid is not None:
                heapq.heappush(heap, (-self.scores[tid], left, merged))

        for i in range(len(symbols) - 1):
            push(i)
        while heap:
            _, left, merged = heapq.heappop(heap)
            right = nxt[left] if alive[left] else len(symbols)
            if right >= len(symbols) or symbols[left] + symbols[right] != merged:
                continue  # stale entry
            symbols[left] = merged
            alive[right] = False
            nxt[left] = nxt[right]
            if nxt[right] < len(symbols):
                prv[nxt[right]] = left
            if prv[left] >= 0:
                push(prv[left])
            push(left)
        ids = []
        i = 0
        while i < len(symbols):
            piece = symbols[i]
            tid = self.piece_to_id.get(piece)
            if tid is not None:
                ids.append(tid)
            else:
                ids.extend(BYTE_BASE + b for b in piece.encode("utf-8"))
            i = nxt[i]
        return ids

    def encode(self, text, add_bos=True):
        """Token ids of `text` exactly as llama.cpp's SPM tokenizer gives them."""
        escaped = SPACE + text.replace(" ", SPACE)
        ids = [BOS_ID] if add_bos else []
        start = 0
        for pos in range(1, len(escaped) + 1):
            if pos == len(escaped) or escaped[pos] == SPACE:
                word = escaped[start:pos]
                cached = self._cache.get(word)
                if cached is None:
                    cached = self._encode_symbols(word)
                    if len(self._cache) < 200000:
                        self._cache[word] = cached
                ids.extend(cached)
                start = pos
        return ids

    def encode_uncached(self, text, add_bos=True):
        """The same as encode() without splitting at word starts (for checking)."""
        ids = [BOS_ID] if add_bos else []
        return ids + self._encode_symbols(SPACE + text.replace(" ", SPACE))

    def decode(self, ids):
        out = bytearray()
        for tid in ids:
            kind = self.types[tid]
            if kind == TYPE_BYTE:
                out.append(tid - BYTE_BASE)
            elif kind == TYPE_NORMAL:
                out.extend(self.pieces[tid].replace(SPACE, " ").encode("utf-8"))
        text = out.decode("utf-8", errors="replace")
        return text[1:] if text.startswith(" ") else text
