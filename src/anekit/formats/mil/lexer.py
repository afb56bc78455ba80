"""MIL text tokens (one compiled master regex) and MilSyntaxError with line, column and a caret excerpt.

Tokens are plain strings; their kind follows from the first character (``"`` string, digit or
sign number, letter identifier, anything else punctuation). A simple tensor type such as
``tensor<fp16, [1, 64, 1, 16]>`` is lexed as one token: it is by far the most common phrase
in real programs, and taking it whole keeps parsing of large programs fast. Positions are
recomputed only when an error is reported.
"""

from __future__ import annotations

import re

from anekit.errors import FormatError

_TOKEN = re.compile(
    r"""\s*(
        tensor<\s*[A-Za-z_]\w*\s*,\s*\[[^\[\]<>(){}";]*\]\s*>      # whole simple tensor type
      | "(?:[^"\\\n]|\\.)*"                                          # string
      | [+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+   # hex float
      | [+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?        # decimal number
      | [+-](?:inf|nan)\b                                            # signed specials
      | [A-Za-z_][A-Za-z0-9_.]*                                      # identifier
      | ->
      | [()\[\]{}<>,=;?]
      | \S                                                           # anything else: an error
    )""",
    re.VERBOSE | re.ASCII,
)

EXCERPT_WIDTH = 100


class MilSyntaxError(FormatError):
    """MIL text that does not parse; carries ``line`` and ``column`` (1-based)."""


def tokenize(text: str) -> list[str]:
    """All tokens of ``text`` (an unknown character becomes its own one-character token)."""
    return _TOKEN.findall(text)


def token_offset(text: str, index: int) -> int:
    """Character offset of token ``index`` (or the end of the text past the last token)."""
    for i, match in enumerate(_TOKEN.finditer(text)):
        if i == index:
            return match.start(1)
    return len(text)


def syntax_error(
    text: str, offset: int, message: str, *, source: str | None = None, hint: str | None = None
) -> MilSyntaxError:
    """A MilSyntaxError at character ``offset`` of ``text``, quoting the line with a caret."""
    line = text.count("\n", 0, offset) + 1
    start = text.rfind("\n", 0, offset) + 1
    end = text.find("\n", offset)
    end = len(text) if end < 0 else end
    column = offset - start + 1
    left = max(start, offset - EXCERPT_WIDTH // 2)
    snippet = text[left : min(end, left + EXCERPT_WIDTH)]
    snippet = "".join(c if c.isprintable() or c == "\t" else "?" for c in snippet)
    caret = "".join("\t" if c == "\t" else " " for c in snippet[: offset - left]) + "^"
    return MilSyntaxError(
        f"{message}\n    {snippet}\n    {caret}",
        where=source,
        line=line,
        column=column,
        hint=hint,
    )
