"""Product search that ranks as WebShop's Lucene index does (pyserini ``LuceneSearcher``, BM25).

WebShop searches with pyserini over one text field per product (:func:`document_text`). A plain BM25
(bm25s ``method="lucene"`` with Porter stemming and Lucene's stop words) agrees with it on only ~93% of
top-1 results, because Lucene differs in three places, all reproduced here:

* **Analysis** (Anserini's ``DefaultEnglishAnalyzer``): Lucene's ``StandardTokenizer`` (Unicode word
  boundaries, UAX#29, as its JFlex grammar states them: "3.5oz", "u.s.a" and "a:b" stay whole, hyphens
  split, emoji are tokens, lone symbols are dropped), the possessive filter ("men's" -> "men"), Lucene's
  33 English stop words (bm25s's ``STOPWORDS_EN`` is that list) and Lucene's ``PorterStemmer``. The
  latter is Martin Porter's reference implementation, whose "bli"->"ble" and "logi"->"log" rules and
  untouched 1-2 letter words the original algorithm lacks: NLTK's ``MARTIN_EXTENSIONS`` mode has them,
  PyStemmer's "porter" does not (it conflates "assembly" differently from "assembled", which changed
  the top 10 of 28 of the 52 goal instructions containing such words).
* **Scoring** (Lucene 9 ``BM25Similarity``, k1=0.9, b=0.4, in float32 as Lucene computes it):
  ``idf = ln(1 + (N - n + 0.5) / (n + 0.5))``, ``w = count_in_query * idf``,
  ``score = w - w / (1 + tf / (k1 * (1 - b + b * dl / avgdl)))``. ``dl`` is the document length
  after its lossy one-byte encoding (``SmallFloat.intToByte4``: exact below 24 tokens, then 3 bits of
  mantissa), ``avgdl`` the exact mean. Query terms are summed in double and the total cast to float.
* **Ties** are broken by ASIN, as Anserini sorts equal scores by the document id field.

On the reference queries (``webshop_search.json``) this reproduces Lucene's top-50 lists exactly.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import regex
from bm25s.stopwords import STOPWORDS_EN
from nltk.stem.porter import PorterStemmer
from scipy.sparse import csr_matrix

K1 = np.float32(0.9)
B = np.float32(0.4)
SEARCH_RETURN_N = 50  # WebShop shows the top 50 hits

# ------------------------------------------------------------------------------------------ tokenizer
# Unicode word-break classes, each followed by the Extend/Format/ZWJ marks that attach to it (WB4).
_ATTACHED = r"[\p{WB=Format}\p{WB=Extend}\p{WB=ZWJ}]*"
_ATTACHED_NO_ZWJ = r"[[\p{WB=Format}\p{WB=Extend}]--[\uFE0E\uFE0F]]*"
_LETTER = rf"[\p{{WB=ALetter}}\p{{WB=Hebrew_Letter}}]{_ATTACHED}"
_HEBREW = rf"\p{{WB=Hebrew_Letter}}{_ATTACHED}"
_NUMBER = rf"[\p{{WB=Numeric}}\uFF10-\uFF19]{_ATTACHED}"  # Lucene adds full-width digits
_KATAKANA = rf"\p{{WB=Katakana}}{_ATTACHED}"
_MID_LETTER = rf"[\p{{WB=MidLetter}}\p{{WB=MidNumLet}}\p{{WB=Single_Quote}}]{_ATTACHED}"
_MID_NUMBER = rf"[\p{{WB=MidNum}}\p{{WB=MidNumLet}}\p{{WB=Single_Quote}}]{_ATTACHED}"
_CONNECTOR = rf"\p{{WB=ExtendNumLet}}{_ATTACHED}"
_QUOTE = rf"\p{{WB=Single_Quote}}{_ATTACHED}"
_DOUBLE_QUOTE = rf"\p{{WB=Double_Quote}}{_ATTACHED}"
# Letters and digits joined by the WB5-WB13b rules; connectors (underscore) may lead and trail.
_WORD_CORE = (
    rf"(?:{_KATAKANA}(?:(?:{_CONNECTOR})*{_KATAKANA})*"
    rf"|(?:{_HEBREW}(?:{_QUOTE}|{_DOUBLE_QUOTE}{_HEBREW})"
    rf"|{_NUMBER}(?:(?:(?:{_CONNECTOR})*|{_MID_NUMBER}){_NUMBER})*"
    rf"|{_LETTER}(?:(?:(?:{_CONNECTOR})*|{_MID_LETTER}){_LETTER})*)+)"
)
_WORD = rf"(?:{_CONNECTOR})*{_WORD_CORE}(?:(?:{_CONNECTOR})+{_WORD_CORE})*(?:{_CONNECTOR})*"
# Extended_Pictographic as in Lucene 9's emoji data (Unicode 14). The ``regex`` module's own property
# of that name misses many of these (e.g. U+2605, U+261E), which Lucene indexes as emoji tokens.
_PICTOGRAPHIC_RANGES = (
    "\u00a9\u00ae\u203c\u2049\u2122\u2139\u2194-\u2199\u21a9-\u21aa\u231a-\u231b\u2328\u2388\u23cf"
    "\u23e9-\u23f3\u23f8-\u23fa\u24c2\u25aa-\u25ab\u25b6\u25c0\u25fb-\u25fe\u2600-\u2605\u2607-\u2612"
    "\u2614-\u2685\u2690-\u2705\u2708-\u2712\u2714\u2716\u271d\u2721\u2728\u2733-\u2734\u2744\u2747"
    "\u274c\u274e\u2753-\u2755\u2757\u2763-\u2767\u2795-\u2797\u27a1\u27b0\u27bf\u2934-\u2935"
    "\u2b05-\u2b07\u2b1b-\u2b1c\u2b50\u2b55\u3030\u303d\u3297\u3299"
    "\U0001f000-\U0001f0ff\U0001f10d-\U0001f10f\U0001f12f\U0001f16c-\U0001f171\U0001f17e-\U0001f17f"
    "\U0001f18e\U0001f191-\U0001f19a\U0001f1ad-\U0001f1e5\U0001f201-\U0001f20f\U0001f21a\U0001f22f"
    "\U0001f232-\U0001f23a\U0001f23c-\U0001f23f\U0001f249-\U0001f3fa\U0001f400-\U0001f53d"
    "\U0001f546-\U0001f64f\U0001f680-\U0001f6ff\U0001f774-\U0001f77f\U0001f7d5-\U0001f7ff"
    "\U0001f80c-\U0001f80f\U0001f848-\U0001f84f\U0001f85a-\U0001f85f\U0001f888-\U0001f88f"
    "\U0001f8ae-\U0001f8ff\U0001f90c-\U0001f93a\U0001f93c-\U0001f945\U0001f947-\U0001faff"
    "\U0001fc00-\U0001fffd"
)
_EMOJI_UNIT = (
    rf"(?:\p{{WB=ZWJ}}*[{_PICTOGRAPHIC_RANGES}]{_ATTACHED_NO_ZWJ}\uFE0F?"
    rf"|[\U0001F3FB-\U0001F3FF]{_ATTACHED_NO_ZWJ})"
)
_EMOJI = (
    rf"(?:{_EMOJI_UNIT}(?:\p{{WB=ZWJ}}+{_EMOJI_UNIT})*\p{{WB=ZWJ}}*"
    rf"|[0-9#*]{_ATTACHED_NO_ZWJ}\uFE0F?\u20E3{_ATTACHED_NO_ZWJ}"
    rf"|(?:\p{{WB=Regional_Indicator}}{_ATTACHED}){{2}})"
)
# Runs of South-East Asian script stay whole; each Han or Hiragana character is a token of its own.
_SINGLES = (
    rf"\p{{LB=SA}}(?:{_ATTACHED}\p{{LB=SA}})*{_ATTACHED}"
    rf"|\p{{Script=Han}}{_ATTACHED}|\p{{Script=Hiragana}}{_ATTACHED}"
)
_TOKEN = regex.compile(rf"{_EMOJI}|{_WORD}|{_SINGLES}", flags=regex.VERSION1)
_POSSESSIVE = ("'s", "'S", "\u2019s", "\u2019S", "\uff07s", "\uff07S")

STOP_WORDS = frozenset(STOPWORDS_EN)
_STEMMER = PorterStemmer(mode=PorterStemmer.MARTIN_EXTENSIONS)


def lucene_tokens(text: str) -> list[str]:
    """Lucene's ``StandardTokenizer`` followed by its ``EnglishPossessiveFilter`` (case kept)."""
    tokens = []
    for match in _TOKEN.finditer(text):
        token = match.group()
        tokens.append(token[:-2] if token.endswith(_POSSESSIVE) else token)
    return tokens


@lru_cache(maxsize=1 << 16)
def porter_stem(word: str) -> str:
    """Lucene's ``PorterStemFilter`` (cached: a catalog has ~15k distinct words)."""
    return _STEMMER.stem(word, to_lowercase=False)


def analyze(text: str) -> list[str]:
    """The indexed terms of ``text``: tokenize, lower-case, drop stop words, stem."""
    return [porter_stem(token) for token in lucene_tokens(text.lower()) if token not in STOP_WORDS]


# ------------------------------------------------------------------------------ Lucene's length norm
_NORM_EXACT_BELOW = 24  # SmallFloat.intToByte4 stores lengths below this exactly


def length_to_norm(length: int) -> int:
    """``SmallFloat.intToByte4``: a document length as Lucene's one-byte norm (0-255)."""
    if length < _NORM_EXACT_BELOW:
        return length
    rest = length - _NORM_EXACT_BELOW
    bits = rest.bit_length()
    if bits < 4:
        return _NORM_EXACT_BELOW + rest
    shift = bits - 4
    return _NORM_EXACT_BELOW + (((rest >> shift) & 0x07) | ((shift + 1) << 3))


def norm_to_length(norm: int) -> int:
    """``SmallFloat.byte4ToInt``: the length a norm stands for (the lower end of its bucket)."""
    if norm < _NORM_EXACT_BELOW:
        return norm
    code = norm - _NORM_EXACT_BELOW
    shift = (code >> 3) - 1
    mantissa = code & 0x07
    return _NORM_EXACT_BELOW + (mantissa if shift < 0 else (mantissa | 0x08) << shift)


# ------------------------------------------------------------------------------------------ the index
def document_text(product: dict[str, Any]) -> str:
    """The indexed field, as WebShop's ``convert_product_file_format.py`` builds it."""
    options = ", and ".join(f"{name}: {', '.join(values)}" for name, values in product["options"].items())
    bullets = product["BulletPoints"]
    parts = [product["Title"], product["Description"], bullets[0] if bullets else "", options]
    return " ".join(str(part or "") for part in parts).lower()


class LuceneBM25:
    """A BM25 index over ``documents`` that scores and ranks exactly as Lucene 9 does (module doc)."""

    def __init__(self, documents: Sequence[str], doc_ids: Sequence[str]):
        if len(documents) != len(doc_ids):
            raise ValueError("documents and doc_ids differ in length")
        terms: dict[str, int] = {}
        rows, cols, counts, lengths = [], [], [], []
        for doc, text in enumerate(documents):
            tokens = analyze(text)
            lengths.append(len(tokens))
            for term, count in Counter(tokens).items():
                rows.append(terms.setdefault(term, len(terms)))
                cols.append(doc)
                counts.append(count)
        num_docs = len(documents)
        # Term-major postings: row t lists the documents holding term t, in doc order, with their tf.
        self._postings = csr_matrix(
            (np.asarray(counts, np.float32), (rows, cols)), shape=(len(terms), num_docs), dtype=np.float32
        )
        self._terms = terms
        doc_freq = np.diff(self._postings.indptr)
        self._idf = np.array(
            [math.log(1 + (num_docs - n + 0.5) / (n + 0.5)) for n in doc_freq], dtype=np.float32
        )
        avgdl = np.float32(sum(lengths) / num_docs) if num_docs else np.float32(1)
        inverse_by_norm = np.array(
            [
                np.float32(1) / (K1 * ((np.float32(1) - B) + B * np.float32(norm_to_length(n)) / avgdl))
                for n in range(256)
            ],
            dtype=np.float32,
        )
        self._norm_inverse = inverse_by_norm[[length_to_norm(n) for n in lengths]]
        self._doc_ids = list(doc_ids)
        self._id_rank = np.argsort(np.argsort(np.asarray(self._doc_ids, dtype=object), kind="stable"))

    @property
    def num_docs(self) -> int:
        return len(self._doc_ids)

    def scores(self, query: str) -> np.ndarray:
        """Lucene's float32 score of every document (0 where no query term occurs)."""
        total = np.zeros(self.num_docs, dtype=np.float64)
        for term, count in Counter(analyze(query)).items():
            row = self._terms.get(term)
            if row is None:
                continue
            start, end = self._postings.indptr[row], self._postings.indptr[row + 1]
            docs = self._postings.indices[start:end]
            tf = self._postings.data[start:end]
            weight = np.float32(count) * self._idf[row]
            total[docs] += weight - weight / (np.float32(1) + tf * self._norm_inverse[docs])
        return total.astype(np.float32)

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[int]:
        """Indices of the top ``k`` matching documents: score descending, then doc id ascending."""
        scores = self.scores(query)
        hits = np.flatnonzero(scores > 0)
        order = np.lexsort((self._id_rank[hits], -scores[hits]))
        return hits[order[:k]].tolist()
