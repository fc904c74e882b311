"""Closed word classes of English route instructions, used by the rule-based landmark parser.

Landmark phrases are open-class words (nouns, adjectives); what delimits them is closed-class: articles,
prepositions, pronouns, conjunctions, auxiliaries, a few adverbs and the imperative verbs of driving.
Those, plus the nouns that name directions, distances and counts (never landmarks, by the labelling
conventions in ``tests/data/README.md``), are listed here.
"""

from __future__ import annotations

ARTICLES = frozenset({"a", "an", "the"})
DEMONSTRATIVES = frozenset({"this", "these", "those"})
NUMBERS = frozenset({
    "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    "twenty", "thirty", "forty", "fifty", "sixty", "hundred", "several", "few", "couple",
})
# Words that open a noun phrase.
DETERMINERS = ARTICLES | DEMONSTRATIVES | frozenset({"another", "some"}) | (NUMBERS - {"one"})
# Ordinals and sequence adjectives right after a determiner ("the first intersection") are counts,
# not part of the landmark.
ORDINALS = frozenset({
    "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth",
    "next", "last", "final", "following", "1st", "2nd", "3rd", "4th", "5th",
})
PRONOUNS = frozenset({
    "i", "you", "he", "she", "it", "we", "they", "me", "him", "her", "us", "them", "its", "their",
    "your", "my", "our", "his", "yourself", "itself", "there", "here", "that", "which", "who",
    "what", "where", "whose", "whom", "everything", "something", "anything",
})
SUBJECT_PRONOUNS = frozenset({"it", "which", "they", "that", "this", "these", "those", "he", "she"})
PREPOSITIONS = frozenset({
    "of", "to", "toward", "towards", "at", "in", "on", "by", "near", "beside", "besides", "behind",
    "past", "beyond", "under", "underneath", "beneath", "over", "above", "through", "across", "along",
    "around", "between", "into", "onto", "from", "with", "without", "for", "about", "against", "up",
    "down", "off", "out", "inside", "outside", "opposite", "via", "within", "alongside", "next",
    "close", "like", "than", "until", "till", "after", "before", "per",
})
CONJUNCTIONS = frozenset({
    "and", "or", "but", "nor", "so", "then", "once", "when", "whenever", "while", "if", "unless",
    "because", "as", "since", "though", "although", "until", "till", "after", "before", "where",
    "which", "that", "whereas",
})
AUXILIARIES = frozenset({
    "is", "are", "was", "were", "be", "been", "being", "am", "will", "would", "shall", "should",
    "could", "may", "might", "must", "do", "does", "did", "have", "has", "had", "don't", "doesn't",
    "won't", "can't", "isn't", "aren't", "it's", "there's", "you'll", "you're", "let's", "'s", "not",
    "never", "dont",
})
ADVERBS = frozenset({
    "then", "there", "here", "again", "back", "straight", "ahead", "forward", "forwards", "backward",
    "around", "also", "just", "only", "still", "now", "first", "finally", "eventually", "immediately",
    "carefully", "slowly", "quickly", "about", "approximately", "roughly", "almost", "nearly", "very",
    "too", "away", "along", "further", "farther", "onward", "onwards", "afterwards", "later", "soon",
    "right", "left", "all", "even", "exactly",
})
# Imperative and finite verbs that never start or continue a landmark phrase. Verbs that are also
# nouns inside landmark names ("stop sign", "car park", "turn lane", "drive-through") are NOT listed.
VERBS = frozenset({
    "go", "goes", "going", "went", "gone", "keep", "keeps", "keeping", "look", "looks", "looking",
    "find", "finds", "finding", "see", "sees", "seeing", "continue", "continues", "continuing",
    "follow", "follows", "following", "pass", "passes", "passing", "passed", "reach", "reaches",
    "reaching", "head", "heads", "heading", "take", "takes", "taking", "get", "gets", "getting",
    "move", "moves", "moving", "come", "comes", "coming", "drive", "drives", "driving", "proceed",
    "proceeds", "turns", "turning", "stops", "stopping", "parks", "parked", "ends", "ending", "finish",
    "finishes", "finishing", "arrive", "arrives", "arriving", "lies", "sits", "stands", "leads",
    "bends", "curves", "splits", "meets", "starts", "begin", "begins", "start", "starting", "avoid",
    "make", "makes", "walk", "walks", "walking", "travel", "travels", "navigate", "cross", "crosses",
    "wait", "waits", "enter", "enters", "exit", "exits", "leave", "leaves", "locate", "spot", "visit",
    "end", "halt", "circle", "loop", "pull", "bear", "veer", "swing", "approach", "approaching", "use",
})
# Heads that name directions, counts, time or the robot itself: never a landmark.
NON_LANDMARK_HEADS = frozenset({
    "left", "right", "way", "one", "ones", "while", "bit", "moment", "time", "times", "direction",
    "directions", "distance", "speed", "pace", "turn", "turns", "u-turn", "robot", "destination",
    "goal", "route", "end", "side", "sides", "middle", "front", "back", "top", "bottom", "edge", "rest",
    "other", "same", "north", "south", "east", "west", "trip", "journey", "start", "it", "there",
})
# Units of distance and time: not a landmark when counted or alone ("three blocks", "a few meters"),
# but part of one when modified ("a parking meter", "the stone steps", "a front yard").
UNIT_HEADS = frozenset({
    "block", "blocks", "meter", "meters", "metre", "metres", "m", "km", "kilometer", "kilometers",
    "kilometre", "kilometres", "feet", "foot", "ft", "yard", "yards", "yd", "mile", "miles", "step",
    "steps", "minute", "minutes", "min", "mins", "second", "seconds", "sec", "secs", "hour", "hours",
})
# Heads that only name where something is ("the far side of X"): the landmark is X.
PARTITIVE_HEADS = frozenset({
    "side", "end", "edge", "front", "back", "middle", "top", "bottom", "rest", "base",
})
# "a couple of benches": the landmark is the benches ("a row of bicycles" stays whole: a row is visible).
QUANTITY_HEADS = frozenset({"couple", "lot", "lots", "number", "handful", "pair", "few"})
# Route nouns that, bare after "take" ("take the path between ..."), choose a way, not a landmark.
ROUTE_NOUNS = frozenset({"path", "road", "street", "route", "trail", "lane", "exit", "fork", "turn", "way"})
ROUTE_CHOICE_VERBS = frozenset({"take", "takes", "taking", "choose", "use"})
# Prepositions that, right after a landmark, attach a locating or describing phrase to it
# ("a bench near the oak tree", "a statue of a horse"); multi-word ones as tuples.
ATTACH_PREPS = (
    ("in", "front", "of"), ("on", "top", "of"), ("across", "from"), ("next", "to"), ("close", "to"),
    ("opposite", "to"), ("of",), ("with",), ("near",), ("beside",), ("behind",), ("by",), ("at",),
    ("on",), ("in",), ("under",), ("beneath",), ("underneath",), ("opposite",), ("between",),
    ("across",), ("along",), ("above",), ("over",), ("outside",), ("inside",), ("alongside",),
)
# Attachments after which a bare noun phrase (no article) may follow: "a row of bicycles".
BARE_ATTACH = frozenset({"of", "with"})
# Words after which a bare noun phrase is a landmark ("go past bleachers", "look for parked cars").
BARE_TRIGGERS = frozenset({
    "past", "to", "toward", "towards", "at", "near", "beside", "by", "for", "reach", "find", "see",
    "pass", "passing", "under", "through", "behind", "between", "along", "around", "into", "onto", "on",
})
NEGATIONS = frozenset({"don't", "dont", "not", "never", "avoid", "avoiding", "without", "doesn't",
                       "won't", "shouldn't", "mustn't", "instead"})
BE_VERBS = frozenset({"is", "are", "was", "were", "'s", "it's", "lies", "lie", "sits", "sit", "stands",
                      "stand", "comes", "come", "located", "situated", "parked", "found"})


def is_number(word: str | None) -> bool:
    """A count word or numeral ("three", "12")."""
    return word is not None and (word in NUMBERS or (word.isdigit() and len(word) <= 5))


def is_determiner(word: str) -> bool:
    """A word that opens a noun phrase: article, demonstrative, "another"/"some", count or numeral."""
    return word in DETERMINERS or (word.isdigit() and len(word) <= 5)
