"""Is a document in the raters' language? A cheap script and function-word check (issue #44).

Every rater the project ships (the fastText classifiers, the Edu head, the Wiki-similarity model, the
default embedder and tokenizer) was built on English text. On a corpus in another language they still
return numbers, and pruning acts on them (64% of a non-English corpus pruned in the bad-input campaign),
so ingest says what share of documents is outside English, and ``data.language=drop`` drops them,
counted as ``outside_language``.

The check, per document, in the spirit of the stop-word language identifiers that predate fastText's
``lid.176`` (no model file, so nothing to download; about 1 s per 10 M characters):

1. **Script.** Under half of its letters in the Latin blocks (Basic Latin to Latin Extended-B and Latin
   Extended Additional): outside (Cyrillic, Greek, CJK, Arabic, ...).
2. **Function words.** Otherwise the document's words are matched against short lists of the most
   frequent function words of English and of 15 other languages written in Latin script (lists drawn
   from each language's most frequent words, with the words that are also common English words taken
   out). It is outside when another language's list matches more words than English's and at least
   ``MIN_VOTES`` of them, and at least ``MIN_SHARE`` of its words. A text with few function words of any language (a menu, a price list, code)
   is not called outside: the check cannot tell, and English boilerplate is the common case.
3. **Accents.** A short text whose function words do not decide (~30 words of Finnish or Slovak) is
   outside (``other``) when at least ``MIN_ACCENTED`` of its letters are accented Latin letters and
   English function words are under ``MAX_ENGLISH_SHARE`` of its words (English prose: 20-45%; an English
   article full of Vietnamese or Arabic names reaches 6% accented letters but keeps its function words).

Measured on the bundled English corpus (16,513 documents): 2 documents are called outside, both real
non-English pages (Chinese text among the Common Crawl samples). On GnuPG's translated help texts
(``tests/data/languages``: German, French, Spanish, Italian, Portuguese, Polish, Romanian, Turkish,
Finnish, Hungarian, Indonesian, Slovak, Russian, Japanese, Chinese) every translated entry is called
outside, and no entry of GnuPG's English original is.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

from curation.data.codepoints import char_table, code_points

RATERS_LANGUAGE = "English"
MIN_VOTES = 3  # another language's function words needed before a Latin-script text is called outside
MIN_SHARE = 0.05  # ... and at least this share of its words (German prose: ~25%; an English menu: < 2%)
MIN_LATIN = 0.5  # share of letters in Latin script below which a text is outside whatever its words
MIN_ACCENTED = 0.03  # share of letters that are accented Latin (ä, ő, ž, ...) ...
MAX_ENGLISH_SHARE = 0.08  # ... with English function words under this share of the words: outside

ENGLISH = frozenset(
    "the of and to a in is that for it as was with be by on not he i this are or his from at which but have "
    "an had they you were their one all we can her has there been if more when will would who so no".split())

# The most frequent function words of each language, less those that are also frequent English words
# ("a", "in", "an", "so", "was", "will", "die", "me", "no", "on", "at", "is", "to", "de" is kept: not English).
OTHERS = {
    "german": "der die das und ist nicht ein eine zu den mit sich des auf für von dem sie es auch wird werden "
              "oder bei nach wenn kann sind nur ich wir ihr einer eines einem diese dieser wie aus noch über "
              "hat haben können muss bitte sie",
    "french": "le la les des et est une du en que qui dans pour pas sur au aux ce cette sont par plus avec "
              "vous nous il elle ou mais être avoir fait peut leur ces",
    "spanish": "el la los las de que y en del se por con para una es su al lo como más pero sus le ha este "
               "esta o ser son está puede usted",
    "italian": "il di che e la per un una non del della sono gli le si con da dei è questo questa come più "
               "essere alla nel anche può ha",
    "portuguese": "o de que e do da em um para é com não uma os no se na por mais as dos como mas foi ao ele "
                  "das ou ser quando muito nos já está também pode você",
    "dutch": "de het een en van dat niet zijn op te voor met als er maar om aan ook bij nog wel naar kan "
             "worden wordt deze dit",
    "swedish": "och att det som en på är av för med till den har inte om ett var jag han men ska kan eller "
               "vi de",
    "danish_norwegian": "og i at det er en til på som med af for ikke der var de et har den jeg kan eller "
                        "skal vil også",
    "polish": "i w nie na się z do to że jest jak o co ale po tak za od jego przez może są lub jeśli oraz "
              "który która które",
    "czech_slovak": "a v se na je že to s z do o jako ale by jsou nebo pro které který která jeho také sa "
                    "je na sú alebo ktoré",
    "romanian": "și în de la cu pe un o că nu se este din sau care mai pentru ca sunt să fi acest această "
                "poate",
    "turkish": "ve bir bu da de için ile olarak daha çok gibi ama olan sonra kadar ne veya şu değil mi var "
               "yok olduğunu",
    "finnish": "ja on ei se että oli hän mutta tai kun niin kuin ovat olla voi jos joka tämä sen myös",
    "hungarian": "a az és hogy nem egy is van meg de ki el ha már csak mint vagy ezt azt lehet kell volt "
                 "ez",
    "indonesian": "yang dan di ini itu dengan untuk tidak dari dalam akan pada juga ke karena ada atau bisa "
                  "oleh anda sudah",
}
# Common English words that other languages' lists hold too ("do", "me", "den", "over"): no vote for either side.
SHARED = frozenset("do me us go up am my man men over hat van den die kind has ha son see far end hand fast "
                   "sale pan ego via".split())
# One-letter words (Czech "v", Polish "w", Portuguese "e") also fill code, tables and initials: no vote.
OTHER_WORDS = {name: frozenset(w for w in words.split() if len(w) > 1) - ENGLISH - SHARED
               for name, words in OTHERS.items()}

_LANGUAGES_OF: dict[str, tuple[str, ...]] = {}
for _name, _lexicon in (("english", ENGLISH), *OTHER_WORDS.items()):
    for _w in _lexicon:
        _LANGUAGES_OF[_w] = (*_LANGUAGES_OF.get(_w, ()), _name)

_WORD = re.compile(r"[^\W\d_]+")
_LETTER = re.compile(r"[^\W\d_]")  # a letter of any script, as curation.data.stats counts them


def language_votes(text: str) -> dict[str, int]:
    """How many of ``text``'s words are function words of English and of each other language
    (``words``: how many words it has)."""
    # each distinct word as written is lowercased once (a word's votes are its lowercase form's, so
    # counting before lowercasing gives the same sums, at ~1/3 of the cost of lowering every occurrence)
    found = _WORD.findall(text)
    votes = dict.fromkeys(("english", *OTHER_WORDS), 0)
    for word, n in Counter(found).items():
        for name in _LANGUAGES_OF.get(word.lower(), ()):
            votes[name] += n
    votes["words"] = len(found)
    return votes


HEAD_CHARS = 20_000  # a document's language is read off its first 20,000 characters: bounded cost per document


def outside_language(text: str) -> str | None:
    """Why ``text`` is outside the raters' language (English): ``"script"``, the other language whose
    function words it holds, or ``"other"`` (accents, no English function words); None when it is English
    or the check cannot tell (no letters, few words). Reads the first ``HEAD_CHARS`` characters."""
    text = text[:HEAD_CHARS]
    codes = code_points(text)
    codes = codes[char_table(_LETTER)[codes]]
    if not len(codes):
        return None
    latin = int(np.count_nonzero((codes < 0x250) | ((codes >= 0x1E00) & (codes < 0x1F00))))
    if latin < MIN_LATIN * len(codes):
        return "script"
    votes = language_votes(text)
    english, words = votes.pop("english"), votes.pop("words")
    best = max(votes, key=votes.__getitem__)
    if votes[best] >= max(MIN_VOTES, MIN_SHARE * words) and votes[best] > english:
        return best
    accented = latin - int(np.count_nonzero(codes < 0x80))
    if accented >= MIN_ACCENTED * len(codes) and english < MAX_ENGLISH_SHARE * words:
        return "other"
    return None
