"""Text normalisation shared by parsing, fencing and the injection detector."""

from __future__ import annotations

import re
import unicodedata

# zero-width and bidi control characters that can hide or split tokens such as "[[90]]"
_INVISIBLE = re.compile("[\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff]")


def strip_invisible(text: str) -> str:
    return _INVISIBLE.sub("", text)


def normalise(text: str) -> str:
    """NFKC (full-width digits and brackets become ASCII) without invisible characters."""
    return strip_invisible(unicodedata.normalize("NFKC", text))
