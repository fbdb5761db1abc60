"""SSH compression after login (``zlib@openssh.com``): fewer bytes, so fewer round trips.

A run's traffic is text: the lock's command line carries the host programs (~36 KB of Python
and shell), the host answers with the files read (the SGLang model file is 29 KB), a change
run sends the new bytes, the saved copy and journal records. A fresh TCP connection may have
only 10 segments (~14 KB) in flight, doubling once per round trip, so a 36 KB burst costs one
round trip more than a 14 KB one on a real link (`bench/window.py`; loopback never shows it).
zlib brings the lock's exec to ~11.5 KB, under that window, for ~1 ms of CPU per 100 KB.

Only the delayed method is offered (as OpenSSH since 7.4): nothing an unauthenticated peer
sends is decompressed. A server offering no compression is used without it;
``compression: false`` in the inventory offers none.

Security (attack review, issue 17): paramiko compresses each packet on its own
(``Z_FULL_FLUSH``), so a length can only reveal how that packet's content compresses — a
CRIME-style risk only for a file that mixes a secret with text someone else controls, for
which ``compression: false`` is the answer; the sudo password travels in a packet of its own.
A compromised host's packet may inflate ~1000-fold, but it can already send unbounded data in
a channel.
"""

from __future__ import annotations

from typing import Any

import paramiko

from deploy import ablation

#: What a transport offers when compression is on: delayed zlib, else none.
DELAYED = ("zlib@openssh.com", "none")
OFF = ("none",)
_MADE: dict[Any, Any] = {}


def compressing(cls: type[paramiko.Transport]) -> type[paramiko.Transport]:
    """``cls`` whose `use_compression` offers only delayed zlib (or nothing).

    paramiko's own offers pre-authentication ``zlib`` as well, and ``SSHClient.connect``
    calls it after the transport factory (``compress=`` of the connect), so the choice is
    made here, on the class, where that call cannot undo it.
    """

    made = _MADE.get(cls)
    if made is None:

        class Compressing(cls):  # type: ignore[misc]  # untyped paramiko
            def use_compression(self, compress: bool = True) -> None:
                on = compress and not ablation.off("compression")
                self.get_security_options().compression = DELAYED if on else OFF

        Compressing.__name__ = Compressing.__qualname__ = f"Compressing{cls.__name__}"
        made = _MADE.setdefault(cls, Compressing)
    return made  # type: ignore[no-any-return]
