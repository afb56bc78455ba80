"""Text from a model on the report page: HTML-escaped, and every invisible control
character made visible.

Names come from the model file, so they are the file author's text. ``html.escape`` stops
markup; it does not stop a bidi override (U+202E), an isolate (U+2066..U+2069), a
zero-width joiner or a control character from reordering or hiding what the reader sees
(a node called ``gpj.exe`` that shows as ``exe.jpg``). Such characters are shown as
``<U+202E>``, in the text, never interpreted.
"""

from __future__ import annotations

import html
import unicodedata

# Unicode categories that print nothing of their own: controls, format characters (bidi
# marks, overrides and isolates, zero-width spaces and joiners), line and paragraph
# separators, surrogates and unassigned or private code points
_INVISIBLE = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})
_KEEP = frozenset("\t\n")


def escape(text: object) -> str:
    """``text`` as HTML text or attribute value: markup escaped (quotes included) and
    invisible characters written as ``<U+XXXX>``."""
    value = str(text)
    if any(ch not in _KEEP and unicodedata.category(ch) in _INVISIBLE for ch in value):
        value = "".join(
            f"<U+{ord(ch):04X}>" if ch not in _KEEP and unicodedata.category(ch) in _INVISIBLE
            else ch
            for ch in value
        )
    return html.escape(value, quote=True)
