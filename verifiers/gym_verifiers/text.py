"""String answers: exact match, and match after a documented normalization.

`normalize_text` is what "the same answer" means for free-text answers, applied identically to the
response and the reference, in this order:

1. **Scrub**: drop what no reader can see and no answer needs: control characters (NUL included;
   tabs and newlines become spaces), format characters (zero-width spaces and joiners, the BOM, soft
   hyphens, bidirectional overrides) and lone surrogates, so any Python string is safe to compare.
2. **NFKC**: fold compatibility forms (fullwidth `１２`, ligatures `ﬁ`, superscripts, math alphanumerics
   `𝐀`, non-breaking spaces) to their plain equivalents.
3. **Confusables** (on by default): map the Cyrillic and Greek letters that look identical to Latin
   ones (`а`, `е`, `о`, `р`, `с`, `Α`, `Β`, ...) to Latin. Applied to both sides, it only ever merges
   strings a reader cannot tell apart. The table covers the common homoglyphs, not all of Unicode's
   confusables list, whose skeletons also merge strings that merely resemble each other.
4. **Casefold** (full Unicode case folding: `Straße` equals `STRASSE`).
5. **Punctuation**: delete every character of Unicode category P* (`U.S.A.` becomes `USA`, as in
   SQuAD's normalization); note that Unicode files `%`, `#`, `&` and `@` under punctuation too. Symbols
   (categories S*: `$`, `+`, `=`, `°`) are kept: they change meanings.
6. **Whitespace**: collapse runs of any Unicode whitespace to one space and strip the ends.

Scores are 1.0 or 0.0; a list of references accepts any of them. Numbers deserve `numeric`, formulas
`math`: `0.50` and `1/2` are different strings.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

from gym_verifiers.format import MAX_TEXT_CHARS
from gym_verifiers.result import Failure, VerifierResult

__all__ = ["CONFUSABLES", "exact_match", "normalize_text", "normalized_match"]

# Cyrillic and Greek letters drawn like Latin ones, mapped before case folding so capitals count too.
CONFUSABLES: dict[str, str] = {
    **dict(zip("АВЕКМНОРСТХУЅІЈԚԜ", "ABEKMHOPCTXYSIJQW", strict=True)),  # Cyrillic capitals
    **dict(zip("аеорсухѕіјԁһԛԝӏ", "aeopcyxsijdhqwl", strict=True)),  # Cyrillic small letters
    **dict(zip("ΑΒΕΖΗΙΚΜΝΟΡΤΥΧ", "ABEZHIKMNOPTYX", strict=True)),  # Greek capitals
    **dict(zip("οινυ", "oivu", strict=True)),  # Greek small letters
    "ı": "i",  # Latin dotless i
}
_CONFUSABLE_TABLE = str.maketrans(CONFUSABLES)
_WHITESPACE_CONTROLS = frozenset("\t\n\v\f\r\x1c\x1d\x1e\x1f\x85")
_INVISIBLE = frozenset({"Cc", "Cf", "Cs"})  # controls, format characters, lone surrogates
_ASCII_SCRUB = {code: (" " if chr(code) in _WHITESPACE_CONTROLS else None) for code in (*range(0x20), 0x7F)}


def normalize_text(
    text: str, *, confusables: bool = True, punctuation: bool = True, casefold: bool = True
) -> str:
    """Normalize `text` as the module docstring describes; each optional step can be turned off."""
    text = unicodedata.normalize("NFKC", _scrub(text))
    if confusables:
        text = text.translate(_CONFUSABLE_TABLE)
    if casefold:
        text = text.casefold()
    if punctuation:
        text = "".join(ch for ch in text if not unicodedata.category(ch).startswith("P"))
    return " ".join(text.split())


def exact_match(response: str, reference: str | Sequence[str], *, strip: bool = True) -> VerifierResult:
    """1.0 when the response equals a reference character for character (after trimming the ends)."""
    references = _references(reference)
    if not references:
        return VerifierResult.zero("no reference answer", failure=Failure.INVALID_REFERENCE)
    if len(response) > MAX_TEXT_CHARS:
        return VerifierResult.zero(f"response longer than {MAX_TEXT_CHARS} characters", {"exact": 0.0})
    said = response.strip() if strip else response
    hit = any(said == (ref.strip() if strip else ref) for ref in references)
    how = "equals" if hit else "differs from"
    return VerifierResult.binary(hit, f"response {how} the reference", {"exact": float(hit)})


def normalized_match(
    response: str,
    reference: str | Sequence[str],
    *,
    confusables: bool = True,
    punctuation: bool = True,
    casefold: bool = True,
) -> VerifierResult:
    """1.0 when the normalized response equals a normalized reference; `exact` tells whether it needed it."""
    references = _references(reference)
    normalized_refs = [
        normalize_text(r, confusables=confusables, punctuation=punctuation, casefold=casefold)
        for r in references
    ]
    if not any(normalized_refs):
        return VerifierResult.zero(
            "reference is empty after normalization", failure=Failure.INVALID_REFERENCE
        )
    if len(response) > MAX_TEXT_CHARS:
        return VerifierResult.zero(
            f"response longer than {MAX_TEXT_CHARS} characters", {"exact": 0.0, "normalized": 0.0}
        )
    exact = any(response.strip() == r.strip() for r in references)
    said = normalize_text(response, confusables=confusables, punctuation=punctuation, casefold=casefold)
    hit = bool(said) and said in normalized_refs
    components = {"exact": float(exact), "normalized": float(hit)}
    if hit:
        return VerifierResult.binary(
            True, "matches the reference" + ("" if exact else " after normalization"), components
        )
    if not said:
        return VerifierResult.zero("response is empty after normalization", components)
    shown = said if len(said) <= 80 else said[:77] + "..."
    return VerifierResult.zero(f"normalized response {shown!r} matches no reference", components)


def _scrub(text: str) -> str:
    """Remove controls, format characters and lone surrogates; whitespace controls become spaces."""
    if text.isascii():
        return text.translate(_ASCII_SCRUB)
    kept: list[str] = []
    for ch in text:
        if unicodedata.category(ch) not in _INVISIBLE:
            kept.append(ch)
        elif ch in _WHITESPACE_CONTROLS:
            kept.append(" ")
    return "".join(kept)


def _references(reference: str | Sequence[str]) -> list[str]:
    return [reference] if isinstance(reference, str) else [str(r) for r in reference]
