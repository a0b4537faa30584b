"""The offline extraction harness: deterministic proposals, no network, no model.

It proposes only from the **user's own explicit statements**, and errs on the side of
proposing nothing (a wrong suggestion costs the user a rejection; a missed one costs
nothing — they can still ``/pin`` it). The assistant's messages are never read.

Each user message is split into sentences. A sentence is a candidate only when it
starts (after a filler such as *ok, so, also, btw, from now on*) with one of:

* *remember (that) …*, *please remember …*, *note that …*, *keep in mind (that) …*,
  *don't forget (that) …* — the rest is the body (*remember to …* is a to-do: skipped);
* *I prefer …* (also *I really / always / usually / generally prefer …*) — a preference;
* *my … is / are …* (also *my name's …*) — a fact, unless the subject is a figure of
  speech (*my question is*, *my guess is*, *my point is* …) or a secret (*password, PIN,
  key, token* …), or the value is negated (*my name is not Bob* says nothing certain);
* *call me …* / *I go by …* — a preference, for a name of at most three words
  (*call me back*, *call me at 5*, *call me crazy, but …* are not names).

and it is dropped when it is a question (ends with ``?`` or opens with *do, can,
what, is* …), a hypothetical (*if, suppose, imagine, maybe, might, would, could,
what if, let's say, pretend* …), a joke (*lol, haha, jk*), a quotation (opens with a
quote mark), or is taken back by a later sentence of the same message (*actually,
scratch that*, *never mind*, *forget that*, *just kidding*). A body that the ledger's
screening rejects (a credential) is never proposed, and neither is one that is
already pinned.

Kinds: preferences as above; a remembered statement is a ``constraint`` when it says
*always / never / must / don't / only …*, a ``decision`` when it opens with *we
decided / I decided / we chose / we're going with …*, a ``preference`` when it opens
with *I prefer / I like / I love / I hate …*, else a ``fact``. Confidence is 9,000 for
an explicit *remember*, 8,000 otherwise. Tokens and spend are zero; ``prompt`` is the
exact message the anthropic harness would send.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from consolidation.extraction.digest import DigestMessage
from consolidation.extraction.gate import normalize
from consolidation.extraction.prompt import build_user_message
from consolidation.harnesses.base import HarnessResult
from consolidation.harnesses.extract_base import Extractor
from ledger import screen_body
from ledger.errors import BodyRejected

REMEMBER_CONFIDENCE_BPS = 9_000
STATED_CONFIDENCE_BPS = 8_000
MAX_PROPOSALS = 10

_QUOTES = "\"'\u201c\u2018\u00ab"
_CURLY_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'"})
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|\n+")
_FILLER = re.compile(
    r"^(?:ok(?:ay)?|so|and|also|oh|btw|by the way|fyi|just so you know|for the record|from now on|"
    r"going forward|one more thing|hey|hi|hello|well|right|alright|great|thanks|thank you)\b[,:!]?\s*",
    re.IGNORECASE,
)
_REMEMBER = re.compile(
    r"^(?:please\s+)?(?:remember|note|keep in mind|don't forget|do not forget)\b(?:\s+that\b)?[,:]?\s*(?P<rest>.+)$",
    re.IGNORECASE,
)
_PREFER = re.compile(
    r"^i(?:'d| would)?\s+(?:really\s+|always\s+|usually\s+|generally\s+|strongly\s+)?prefer\s+(?P<rest>.+)$",
    re.IGNORECASE,
)
_MY_IS = re.compile(r"^my\s+(?P<subject>[\w' -]{1,50}?)\s+(?P<verb>is|are)\s+(?P<value>.+)$", re.IGNORECASE)
_MY_NAMES = re.compile(r"^my\s+name's\s+(?P<value>.+)$", re.IGNORECASE)
_CALL_ME = re.compile(r"^(?:please\s+)?(?P<verb>call me|i go by)\s+(?P<name>.+)$", re.IGNORECASE)

_QUESTION_OPENERS = frozenset(
    [
        "what",
        "who",
        "whom",
        "whose",
        "where",
        "when",
        "why",
        "how",
        "which",
        "do",
        "does",
        "did",
        "can",
        "could",
        "would",
        "should",
        "is",
        "are",
        "am",
        "was",
        "were",
        "will",
        "shall",
        "may",
        "might",
        "have",
        "has",
        "had",
        "isn't",
        "aren't",
        "doesn't",
        "didn't",
        "won't",
    ]
)
_HYPOTHETICAL = re.compile(
    r"\b(?:if|suppose|supposing|imagine|hypothetically|what if|pretend|let's say|lets say|say that|in theory|"
    r"would|might|could|maybe|perhaps|wonder|wondering|thinking about|thinking of|considering|planning to|"
    r"someday|one day|wish|i'd|i'll probably)\b",
    re.IGNORECASE,
)
_JOKE = re.compile(r"\b(?:lol|lmao|haha+|jk|just kidding|kidding|joking)\b", re.IGNORECASE)
_RETRACTION = re.compile(
    r"^(?:actually,?\s*)?(?:no,?\s*)?(?:scratch that|never\s?mind|forget (?:that|it|what i said)|just kidding|"
    r"i was (?:kidding|joking)|ignore that|not really|that's not true|that isn't true|wait,? no)\b",
    re.IGNORECASE,
)
_NEGATED_VALUE = re.compile(r"\b(?:not|no longer|never|n't|nothing|none)\b|n't\b", re.IGNORECASE)
_SECRET_WORDS = re.compile(
    r"\b(?:password|passcode|passphrase|pin|pin code|secret|api key|key|token|ssn|social security|"
    r"credit card|card number|cvv|security code|login|credentials?)\b",
    re.IGNORECASE,
)
_FIGURES_OF_SPEECH = frozenset(
    [
        "question",
        "questions",
        "guess",
        "point",
        "problem",
        "issue",
        "concern",
        "bad",
        "pleasure",
        "understanding",
        "thought",
        "thoughts",
        "idea",
        "opinion",
        "hope",
        "worry",
        "fear",
        "answer",
        "request",
        "bet",
        "suggestion",
        "mistake",
        "apologies",
        "apology",
        "sense",
        "feeling",
        "impression",
        "reason",
        "head",
        "brain",
        "day",
        "week",
        "mood",
        "turn",
        "fault",
        "advice",
        "take",
        "gut",
        "plan",
    ]
)
_NOT_NAMES = re.compile(
    r"\b(?:back|later|tomorrow|tonight|soon|when|if|at|on|after|before|crazy|old-fashioned|paranoid|picky|lazy|"
    r"silly|naive|biased|a|an|the|but|maybe|anytime|whenever|now|again|if you)\b|\d",
    re.IGNORECASE,
)
_CONSTRAINT = re.compile(r"\b(?:always|never|must|mustn't|don't|do not|avoid|only|no more than)\b", re.IGNORECASE)
_DECISION = re.compile(
    r"^(?:we|i)\s+(?:decided|chose|agreed|settled on|are going with|'re going with|will use|'ll use)\b"
    r"|^(?:we're|we are) going with\b|^the decision\b",
    re.IGNORECASE,
)
_PREFERENCE = re.compile(
    r"^(?:i\s+(?:really\s+)?(?:prefer|like|love|hate|dislike|enjoy|want)|i'd rather|call me|i go by)\b", re.IGNORECASE
)


_TRAILER = re.compile(
    r",?\s*(?:please\s+)?(?:remember that|remember this|remember it|note that|ok|okay|thanks|thank you|please)"
    r"\s*[.!]*$",
    re.IGNORECASE,
)


_ABBREVIATION = re.compile(r"(?:^|\s)(?:dr|mr|mrs|ms|prof|st|sr|jr|e\.g|i\.e|etc|vs|approx)\.$", re.IGNORECASE)
_REMEMBER_TRAILER = re.compile(r"remember|note|keep in mind", re.IGNORECASE)
_WOULD_PREFER = re.compile(r"^i(?:'d| would)\s+(?:prefer|rather)\b", re.IGNORECASE)


def _sentences(text: str) -> list[str]:
    """Sentences of ``text``; a period after a title or an abbreviation (Dr., e.g.) does not end one."""
    pieces = [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]
    out: list[str] = []
    for piece in pieces:
        if out and _ABBREVIATION.search(out[-1]):
            out[-1] = f"{out[-1]} {piece}"
        else:
            out.append(piece)
    return out


def _strip_filler(sentence: str) -> str:
    previous = None
    while previous != sentence:
        previous = sentence
        sentence = _FILLER.sub("", sentence, count=1).strip()
    return sentence


def _is_question(sentence: str) -> bool:
    words = sentence.lower().split()
    return sentence.rstrip().endswith("?") or (bool(words) and words[0] in _QUESTION_OPENERS)


def _clean(body: str) -> str:
    body = " ".join(body.split()).strip().rstrip(".!;,").strip()
    if body[:2].lower() == "i " or body.lower() == "i":
        body = "I" + body[1:]
    return body[:1].upper() + body[1:]


def _kind_of(statement: str) -> str:
    if _PREFERENCE.search(statement):
        return "preference"
    if _DECISION.search(statement):
        return "decision"
    if _CONSTRAINT.search(statement):
        return "constraint"
    return "fact"


def _candidate(sentence: str) -> tuple[str, str, int] | None:
    """(body, kind, confidence) for one sentence, or None when it is not an explicit statement."""
    if not sentence or sentence[0] in _QUOTES or _is_question(sentence) or _JOKE.search(sentence):
        return None
    if _HYPOTHETICAL.search(_WOULD_PREFER.sub("i prefer", sentence)):
        return None
    remember = _REMEMBER.match(sentence)
    if remember:
        rest = _strip_filler(remember.group("rest"))
        if len(rest.split()) < 2 or rest.lower().startswith(("to ", "this", "it ", "that ")):
            return None
        if _SECRET_WORDS.search(rest):
            return None
        my = _MY_IS.match(rest)
        if my and _NEGATED_VALUE.search(my.group("value")):
            return None
        return _clean(rest), _kind_of(rest), REMEMBER_CONFIDENCE_BPS
    prefer = _PREFER.match(sentence)
    if prefer:
        if len(prefer.group("rest").split()) < 1:
            return None
        return _clean(sentence), "preference", STATED_CONFIDENCE_BPS
    names = _MY_NAMES.match(sentence)
    if names:
        sentence = f"my name is {names.group('value')}"
    my = _MY_IS.match(sentence)
    if my:
        subject, value = my.group("subject"), my.group("value")
        if subject.lower().split()[0] in _FIGURES_OF_SPEECH or subject.lower().split()[-1] in _FIGURES_OF_SPEECH:
            return None
        if _SECRET_WORDS.search(subject) or _NEGATED_VALUE.search(value) or len(value.split()) > 25:
            return None
        return _clean(f"My {subject} {my.group('verb').lower()} {value}"), "fact", STATED_CONFIDENCE_BPS
    call = _CALL_ME.match(sentence)
    if call:
        name = _clean(call.group("name"))
        if not name or not name[0].isalpha() or len(name.split()) > 3 or _NOT_NAMES.search(name):
            return None
        verb = "Call me" if call.group("verb").lower() == "call me" else "I go by"
        return f"{verb} {name}", "preference", STATED_CONFIDENCE_BPS
    return None


def extract_statements(message: DigestMessage) -> list[tuple[str, str, int]]:
    """The explicit statements of one message (none from the assistant), in order, retractions applied."""
    if message.role != "user":
        return []
    found: list[tuple[str, str, int]] = []
    for raw in _sentences(message.text.translate(_CURLY_APOSTROPHES)):
        sentence = _strip_filler(raw)
        trailer = _TRAILER.search(sentence)
        if trailer is not None:
            sentence = sentence[: trailer.start()].strip()
            if _REMEMBER_TRAILER.search(trailer.group(0)) and not _REMEMBER.match(sentence):
                sentence = f"remember that {sentence}"  # "X, remember that." asks to remember X
        if _RETRACTION.match(sentence):
            found.clear()  # "… actually, scratch that": what came before in this message is taken back
            continue
        candidate = _candidate(sentence)
        if candidate is not None:
            found.append(candidate)
    return found


def _screened(body: str) -> bool:
    try:
        screen_body(body)
    except BodyRejected:
        return False
    return True


class OfflineExtractor(Extractor):
    """Deterministic extraction from the user's explicit statements; see the module docstring."""

    name = "offline"

    def propose(self, digest: Sequence[DigestMessage], pinned: Sequence[str]) -> list[dict[str, Any]]:
        """The proposals for ``digest``: at most 10, none already pinned, none a credential."""
        seen = {normalize(b) for b in pinned}
        out: list[dict[str, Any]] = []
        for message in digest:
            for body, kind, confidence in extract_statements(message):
                key = normalize(body)
                if key in seen or not _screened(body):
                    continue
                seen.add(key)
                out.append(
                    {
                        "body": body,
                        "kind": kind,
                        "confidence_bps": confidence,
                        "rationale": "the user stated this explicitly",
                        "source_message_id": message.id,
                    }
                )
        return out[:MAX_PROPOSALS]

    def extract(
        self,
        digest: Sequence[DigestMessage],
        pinned: Sequence[str],
        *,
        model: str,
        max_output_tokens: int,
        wall_clock_cap_s: float,
    ) -> HarnessResult:
        return HarnessResult.free(
            {"proposals": self.propose(digest, pinned)}, prompt=build_user_message(digest, pinned)
        )
