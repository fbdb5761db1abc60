"""SSH compression after login (``zlib@openssh.com``): fewer bytes, so fewer round trips.

A run's traffic is text: the lock's command line carries the host programs (~38 KB of Python
and shell), the host answers with the files the
run reads (the SGLang model file is 29 KB), and a change run sends the new bytes, the saved
copy and the journal records. On a fresh TCP connection the sender may have only 10 segments
(~14 KB) unacknowledged, and the window doubles once per round trip: a 38 KB burst costs one
round trip more than a 14 KB one on a real link (`bench/window.py`), which loopback never
shows. zlib brings those bursts to a third (the lock's exec goes out as ~12.5 KB),
under the initial window, for ~1 ms of CPU per 100 KB.

Only the delayed method is offered: compression starts after authentication, as OpenSSH
has done since 7.4 (sshd's default ``Compression yes`` offers nothing else), so nothing an
unauthenticated peer sends is decompressed. A server that offers no compression is used
without it, as before. ``compression: false`` in the inventory offers none (a link where
CPU matters more than bytes).

What compression changes for security (attack review, issue 17): paramiko compresses each
packet on its own (``Z_FULL_FLUSH``), so a packet's length can reveal only how its own content
compresses; a file that mixes a secret with text someone else controls, rendered and written
by one step, is the case where that is conceivable (CRIME-style), and ``compression: false``
is the answer for such a host. The sudo password travels in a packet of its own. And a
compromised host can send a packet that inflates ~1000-fold in the workstation's memory; it can
already send unbounded data in a channel, so this adds no new kind of harm.
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
