"""The chunker: events in, windows out, with no I/O anywhere in the package.

Owns: ``chat_version(bounds)``, the one string that names everything which shapes stored
windows (scrub rules, layout and payload format, bounds). The index records it; any difference
forces a rebuild, so a window is never mixed with windows made under other rules.

Must not: import anything from ``daemon`` or any I/O library.
"""

from __future__ import annotations

from chunker.fold import Bounds
from chunker.scrub import SCRUB_VERSION
from chunker.windows import CHUNK_VERSION


def chat_version(bounds: Bounds) -> str:
    return f"chat1/scrub{SCRUB_VERSION}/chunk{CHUNK_VERSION}/b{bounds.max_bytes}/g{bounds.max_gap_ms}"
