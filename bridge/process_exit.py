"""Leave a command-line process without the interpreter's final garbage collections."""

from __future__ import annotations

import gc


def skip_final_collections() -> None:
    """Call last, just before a command-line entry point exits.

    At shutdown Python runs full garbage collections over everything still alive: with torch and
    Megatron-Core imported that is ~280,000 objects. In the conversion's export process the time from the
    end of its work to the exit was 1.2 s, and 0.4 s with this call, for memory the OS takes back anyway. gc.freeze() puts the live objects out of the collector's reach; reference counting
    still frees them, files still close and atexit handlers still run. Not for library code: an
    application that goes on after a conversion keeps its collector."""
    gc.freeze()
