"""The Landlock wall: a second, independent layer under T2 Linux's writes.

A jail's writes are held by its mounts: a read-only root, the workspace bound writable,
everything else bound read-only. A mistake in that mount plan (a staged path left
writable, a bind over the wrong inode) would therefore be a write outside the workspace
with nothing else in the way. The wall is that something else: every command starts
behind a Landlock ruleset that handles every write right and allows them only beneath
the workspace (when it is writable), the jail's /tmp, its three device files and the
character devices its stdio are (a pseudo-terminal). Whatever the mounts say, nothing
else the jail sees can be written, made, removed, renamed or truncated.

Why a 2 KB machine-code program (``wall_x86_64.S`` beside this module): Landlock
restricts only the thread that asks and what it runs afterwards, and a restricted thread
may not mount. So neither the caller (bwrap must still mount) nor bwrap (which has no
such option) can apply it: the program bwrap execs inside the jail, after the mounts,
must. An interpreter there costs 10-17 ms per command (``python3 -I -S`` measured at
load 17 in session 35); this program makes about a dozen system calls and execs the
command. Its bytes are below, made from the source by ``tools/wall.py``, which a test runs
to assemble the source again and compare; each command gets them in a sealed memfd that
bwrap runs as ``/proc/self/fd/N``: no file on any disk, nothing a jail could rewrite.

Only x86-64 has the program so far; elsewhere, and where the kernel's Landlock is older
than ABI 3 (below it truncate(2) is not ruled) or memfds may not be executed, T2 runs
without the wall and `unavailable_reason` says why (``panday doctor`` shows it).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing's flag without importing typing (panday run's start-up)
if TYPE_CHECKING:
    from collections.abc import Sequence

DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom")
"""The jail's device files (argv.DEVICES), written by ordinary tools (``> /dev/null``)."""
TMP = "/tmp"  # noqa: S108 - the jail's own private tmpfs

_MFD_CLOEXEC = 0x0001
_MFD_ALLOW_SEALING = 0x0002
_MFD_EXEC = 0x0010
"""Linux 6.3's explicit "this memfd may be executed" (older kernels refuse the flag)."""
_F_ADD_SEALS = 1033
_SEALS = 0x1 | 0x2 | 0x4 | 0x8  # SEAL, SHRINK, GROW, WRITE: the bytes are final

WALL_X86_64 = bytes.fromhex(
    "7f454c4602010100000000000000000002003e0001000000b000400000000000"
    "4000000000000000000000000000000000000000400038000200000000000000"
    "0100000005000000000000000000000000004000000000000000400000000000"
    "c008000000000000c008000000000000001000000000000051e5746406000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "000000000000000010000000000000004889e5488b5d004c8d65084d8d74dc08"
    "49c7c5ffffffff4883fb020f825b040000498b7c2408803f2d0f84a6030000e8"
    "1d0400004989c54883fb060f823b040000498b7c2410e8060400004885c0751d"
    "b8480000004c89efbe02000000ba010000000f054885c00f8820040000498b7c"
    "2418e8da0300004889c7b8030000000f0531ff31f6ba01000000b8bc0100000f"
    "054883f8030f8c060400004883ec1048c70424f27f00004889e7be0800000031"
    "d2b8bc0100000f054883c4104885c00f88f80300004989c74983c420498b3c24"
    "4885ff0f84a3030000803f2d750c807f012d7506807f020074414889fee85802"
    "00004885c00f88d00300004889c3ba02400000beb277000081e100f0000081f9"
    "004000000f44d6e87f0200004885c00f88b40300004983c408eba14531c0488d"
    "35ca0400004883ec204889e7488b0e48890f488b4e0848894f08418d4830884f"
    "0ec6470f004889fe4150e8eb01000041584883c4204885c078344889c381e100"
    "f0000081f900200000740c4889dfb8030000000f05eb17ba024000004150e808"
    "02000041584885c00f883b03000041ffc04183f8037287b89d000000bf260000"
    "00be0100000031d24531d24531c00f054885c00f881e030000b8be0100004c89"
    "ff31f60f054885c00f88170300004c89ffb8030000000f054983c408498b3c24"
    "4885ff0f84830200004889fe8a0684c074163c2f740548ffc6ebf1e802010000"
    "48f7d8e9f30200004531ff488d1ded0300004c89f1488b314885f6741a813e50"
    "415448750c807e043d7506488d5e05eb064883c108ebde4881ec002000004889"
    "e7488d9424a00f00008a0384c074133c3a740f4839d77378880748ffc748ffc3"
    "ebe74839e77506c6072e48ffc7c6072f48ffc7498b3424488d9424fe1f00008a"
    "06880784c0740d4839d7735348ffc748ffc6ebeb4889e7e86600000048f7d848"
    "83f80d750841bf01000000eb324883f802742c4883f81474264883f813742048"
    "83f874741a4883f86e7414e92b0200008a0384c074093c3a740548ffc3ebf18a"
    "0384c0740848ffc3e951ffffffb802000000b90d0000004585ff0f45c1e9f901"
    "00004c89e64c89f2b83b000000570f055f4883f8f87522488d0dfe0200004989"
    "4c24f849893c244889cf498d7424f84c89f2b83b0000000f05c3bf9cffffffba"
    "000028004531d2b8010100000f054885c07837504881ec900000004889c74889"
    "e6b8050000000f058b4c24184881c4900000004885c05879114889c7b8030000"
    "000f0548c7c0fbffffffc34883ec1048891424895c24084c89ffbe0100000048"
    "89e24531d2b8bd0100000f054883c410504889dfb8030000000f05584883f8b3"
    "750231c0c366813f2d720f859c000000807f02000f85920000004883fb030f85"
    "88000000498b7c2410e8530000004889c34883ec10b83d00000048c7c7ffffff"
    "ff4889e631d24531d20f054883f8fc74e44885c0781f4839d875da8b042489c7"
    "83e77f740881c780000000eb0dc1e8080fb6f8eb05bf01000000b8e70000000f"
    "0531c0803f0074240fb60f85c9741c83e93083f9097715486bc00a4801c8483d"
    "ffffff7f770648ffc7ebddc3488d35b9010000ba4f0000004531c0eb7a488d35"
    "f7010000ba300000004989c049f7d8eb66488d3513020000ba440000004531c0"
    "4885c079524989c049f7d8eb4a488d353b020000ba2d000000eb36488d355a02"
    "0000ba3b000000eb28488d3587020000ba27000000eb1a488d35a0020000ba29"
    "000000eb0c488d35bb020000ba2c0000004989c049f7d8b353eb114989c0488d"
    "35ce020000ba2d000000b3454881ec000200004889e7881f48ffc780fb457420"
    "4889d156f3a45e4d85c0741cc7072065727266c747046e6fc64706204883c707"
    "4c89c0e86a000000c6070a48ffc756524889fa4829e24883ea10488d7424104c"
    "89efb8010000004885ff78020f055a5e488dbc240001000057488b0da4000000"
    "48890f4883c7084889d1f3a4c6070a48ffc75e4889fa4829f2bf02000000b801"
    "0000000f05bf7d000000b8e70000000f05f456524883ec20488d742420b90a00"
    "000031d248f7f180c23048ffce88164885c075ee8a06880748ffc748ffc6488d"
    "4424204839c672ec4883c4205a5ec32f70726f632f73656c662f66642f00002f"
    "7573722f6c6f63616c2f62696e3a2f7573722f62696e3a2f62696e002f62696e"
    "2f73680070616e6461793a206c616e646c6f636b2077616c6c3a207573616765"
    "3a2077616c6c205245504f52545f4644204b4545502053454c465f4644205b50"
    "4154482e2e2e5d202d2d20434f4d4d414e44205b4152472e2e2e5d6c616e646c"
    "6f636b2077616c6c3a20746865207265706f72742064657363726970746f7220"
    "6973206e6f74206f70656e6c616e646c6f636b2077616c6c3a2074686973206b"
    "65726e656c2773204c616e646c6f636b206973206d697373696e67206f72206f"
    "6c646572207468616e2041424920336c616e646c6f636b2077616c6c3a206c61"
    "6e646c6f636b5f6372656174655f72756c65736574206661696c65646c616e64"
    "6c6f636b2077616c6c3a2061207772697461626c652070617468206f66207468"
    "65206a61696c2063616e6e6f74206265206f70656e65646c616e646c6f636b20"
    "77616c6c3a206c616e646c6f636b5f6164645f72756c65206661696c65646c61"
    "6e646c6f636b2077616c6c3a2050525f5345545f4e4f5f4e45575f5052495653"
    "206661696c65646c616e646c6f636b2077616c6c3a206c616e646c6f636b5f72"
    "657374726963745f73656c66206661696c65646c616e646c6f636b2077616c6c"
    "3a2074686520636f6d6d616e642063616e6e6f74206265206578656375746564"
)


def command(
    *, report_fd: int, keep_report: bool, self_fd: int, writable: Sequence[str]
) -> list[str]:
    """The wall's words in front of the command (descriptor numbers as the jail sees them):
    it reports on `report_fd` (close-on-exec unless `keep_report`, for the egress relay
    that follows it and reports on the same pipe), closes `self_fd` and allows writes
    beneath each of `writable` only."""
    return [
        f"/proc/self/fd/{self_fd}",
        str(report_fd),
        "1" if keep_report else "0",
        str(self_fd),
        *writable,
        "--",
    ]


def writable(workspace: str | None) -> list[str]:
    """Where a command may write: the workspace (None when it is read-only), /tmp and the
    device files."""
    return [*([workspace] if workspace is not None else []), TMP, *DEVICES]


def memfd() -> int:
    """A sealed memfd holding the wall (close-on-exec: only the jail it is given to has it)."""
    flags = _MFD_CLOEXEC | _MFD_ALLOW_SEALING
    try:
        fd = os.memfd_create("panday-wall", flags | _MFD_EXEC)
    except OSError:  # a kernel before 6.3 does not know MFD_EXEC (and executes memfds)
        fd = os.memfd_create("panday-wall", flags)
    try:
        view = memoryview(WALL_X86_64)
        while view:
            view = view[os.write(fd, view) :]
        import fcntl

        fcntl.fcntl(fd, _F_ADD_SEALS, _SEALS)
    except BaseException:
        os.close(fd)
        raise
    return fd


_REASON: list[str | None] = []


def unavailable_reason() -> str | None:
    """Why this host's T2 jails run without the wall (one sentence), None when they have
    it; asked once per process."""
    if not _REASON:
        _REASON.append(_probe())
    return _REASON[0]


def _probe() -> str | None:
    machine = os.uname().machine
    if machine != "x86_64":
        return f"the wall is built for x86-64 only; this host is {machine}"
    from panday_tier_linux.t1 import landlock

    found = landlock.kernel_abi()
    if isinstance(found, str):
        return found
    try:
        with open("/proc/sys/vm/memfd_noexec", "rb") as f:
            noexec = f.read().strip()
    except OSError:
        noexec = b"0"  # before Linux 6.3: every memfd may be executed
    if noexec == b"2":
        return "vm.memfd_noexec = 2 forbids executing a memfd, which is how the wall is run"
    return None
