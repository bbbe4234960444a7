"""Text answers scored as the OCR and VQA fields read them: exact match, character and word error rates, and BLEU
fitted to the references' length, with the notes that say which to read for short answers."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Each answer and its references are compared after this normalisation, and nothing more: whitespace around the
# text stripped and every run of whitespace inside it made one space. Case, punctuation and accents count, as they
# do in OCR ("Chariot" for "CHARIOT" is 6 characters wrong).
NORMALISATION = "whitespace stripped at the ends and collapsed to one space; case and punctuation kept"
# Error rates: lower is better, so a bound on them is a --max.
LOWER_IS_BETTER = frozenset({"CER", "WER"})
TEXT_METRICS = ("ExactMatch", "CER", "WER", "BLEU")
MAX_NGRAM = 4  # BLEU-4, the usual BLEU, for references of four words or more


def normalise(text: str) -> str:
    return " ".join(text.split())


def edit_distance(a: Sequence, b: Sequence) -> int:
    """Levenshtein distance: the fewest insertions, deletions and substitutions that turn `a` into `b`."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, start=1):
        current = [i]
        for j, y in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def bleu_weights(references: Sequence[str]) -> list[float]:
    """Uniform weights over n-grams up to n = the words of the shortest reference, at most 4: BLEU multiplies the
    precisions of every order up to n, so an answer of fewer words than n has none of the longest and scores 0,
    right or wrong ("CHARIOT" against "CHARIOT" is 0 under BLEU-4 and 1 under BLEU-1)."""
    n = max(1, min(MAX_NGRAM, *(len(r.split()) for r in references)))
    return [1.0 / n] * n


@dataclass(frozen=True)
class TextScore:
    """One answer against its references: exact or not, character and word edits to the nearest reference with
    that reference's length, and BLEU as valor-lite computes it (a Metric, with its weights)."""

    exact: bool
    char_edits: int
    chars: int
    word_edits: int
    words: int
    bleu: Any

    @property
    def cer(self) -> float:
        return self.char_edits / self.chars

    @property
    def wer(self) -> float:
        return self.word_edits / self.words


def _nearest(said: Sequence, references: Sequence[Sequence]) -> tuple[int, int]:
    """Edits to the reference nearest `said` (fewest edits per reference item), and that reference's length."""
    return min(((edit_distance(said, r), len(r)) for r in references), key=lambda e: (e[0] / e[1], e[1]))


def text_score(answer: str, references: Sequence[str], prompt: str = "") -> TextScore:
    """`answer` scored against `references` (non-empty strings): see NORMALISATION and bleu_weights."""
    from valor_lite.text_generation import Context, Evaluator, QueryResponse

    said, truths = normalise(answer), [normalise(r) for r in references]
    char_edits, chars = _nearest(said, truths)
    word_edits, words = _nearest(said.split(), [t.split() for t in truths])
    response = QueryResponse(query=prompt, response=said, context=Context(groundtruth=truths))
    with warnings.catch_warnings():
        # nltk warns of every answer sharing no n-gram of some order with its references, which makes its BLEU 0;
        # the report says so once, for all such answers, instead.
        warnings.simplefilter("ignore", UserWarning)
        bleu = Evaluator.compute_sentence_bleu(response, weights=bleu_weights(truths))
    return TextScore(said in truths, char_edits, chars, word_edits, words, bleu)


def text_notes(rows: Sequence[dict]) -> list[str]:
    """How to read the text metrics, for the report and the terminal."""
    orders = sorted({len(row["BLEU_weights"]) for row in rows})
    zero = sum(row["BLEU"] == 0.0 and not row["ExactMatch"] for row in rows)
    notes = [
        "For short answers (OCR lines, yes/no, counts, a few words) read ExactMatch and CER; BLEU and WER are made for"
        " sentences such as captions, and one wrong word in a short answer takes most of them.",
        f"ExactMatch, CER and WER compare each answer with its nearest reference, {NORMALISATION}. CER is the"
        " characters inserted, deleted or substituted over the reference's characters, WER the same in words, both"
        " summed over every answer; lower is better (bound them with --max), and an answer longer than its"
        " reference can take them above 1.",
        "BLEU counts n-grams up to n = the words of the shortest reference, at most 4, with equal weights (here n = "
        f"{', '.join(map(str, orders))}), so an exact answer scores 1 however short; it is the mean of the answers'"
        " BLEU.",
    ]
    if zero:
        one = zero == 1
        notes.append(
            f"{zero} answer{'' if one else 's'} share{'s' if one else ''} no n-gram of some order up to n with the"
            f" references, so BLEU is 0 for {'it' if one else 'them'} (BLEU multiplies the precision of each order)."
        )
    return notes
