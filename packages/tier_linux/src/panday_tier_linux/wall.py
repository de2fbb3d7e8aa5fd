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

The same program has a second use, ``wall -i``: the init of a command in a library
session's jail (zygote.py spawns it from the same memfd), which mounts the command's
/proc, waits for the seccomp program, drops what the command must not hold and reaps
what it leaves; machine code there spares every command a fork of the zygote's
interpreter (docs/tiers/linux.md, "How a command starts").

Only x86-64 has the program so far; elsewhere, and where the kernel's Landlock is older
than ABI 3 (below it truncate(2) is not ruled) or memfds may not be executed, T2 runs
without the wall and `unavailable_reason` says why (``panday doctor`` shows it); a
session jail's init is then a fork of the zygote's interpreter.
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
    "170e000000000000170e000000000000001000000000000051e5746406000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "000000000000000010000000000000004889e5488b5d004c8d65084d8d74dc08"
    "49c7c5ffffffff4883fb020f8285070000498b7c2408803f2d0f84ab030000e8"
    "470700004989c54883fb060f8265070000498b7c2410e8300700004885c0751d"
    "b8480000004c89efbe02000000ba010000000f054885c00f884d070000498b7c"
    "2418e8040700004889c7b8030000000f0531ff31f6ba01000000b8bc0100000f"
    "054883f8030f8c360700004883ec1048c70424f27f00004889e7be0800000031"
    "d2b8bc0100000f054883c4104885c00f882f0700004989c74983c420498b3424"
    "4885f60f84cd060000e84b020000743ee86a0200004885c00f88170700004889"
    "c3ba02400000beb277000081e100f0000081f9004000000f44d6e89102000048"
    "85c00f88fe0600004983c408ebae4531c0488d35870800004883ec204889e748"
    "8b0e48890f488b4e0848894f08418d4830884f0ec6470f004889fe4150e8fd01"
    "000041584883c4204885c078344889c381e100f0000081f900200000740c4889"
    "dfb8030000000f05eb17ba024000004150e81a02000041584885c00f88850600"
    "0041ffc04183f8037287e8960100004885c00f887f060000b8be0100004c89ff"
    "31f60f054885c00f88780600004c89ffb8030000000f054983c408498b3c2448"
    "85ff0f84ce0500004889fe8a0684c074163c2f740548ffc6ebf1e80201000048"
    "f7d8e9c40600004531ff488d1dbe0700004c89f1488b314885f6741a813e5041"
    "5448750c807e043d7506488d5e05eb064883c108ebde4881ec002000004889e7"
    "488d9424a00f00008a0384c074133c3a740f4839d77378880748ffc748ffc3eb"
    "e74839e77506c6072e48ffc7c6072f48ffc7498b3424488d9424fe1f00008a06"
    "880784c0740d4839d7735348ffc748ffc6ebeb4889e7e86600000048f7d84883"
    "f80d750841bf01000000eb324883f802742c4883f81474264883f81374204883"
    "f874741a4883f86e7414e9fc0500008a0384c074093c3a740548ffc3ebf18a03"
    "84c0740848ffc3e951ffffffb802000000b90d0000004585ff0f45c1e9ca0500"
    "004c89e64c89f2b83b000000570f055f4883f8f87522488d0dcf06000049894c"
    "24f849893c244889cf498d7424f84c89f2b83b0000000f05c366813e2d2d7504"
    "807e0200c3b89d000000bf26000000be0100000031d24531d24531c00f05c3bf"
    "9cffffffba000028004531d2b8010100000f054885c07837504881ec90000000"
    "4889c74889e6b8050000000f058b4c24184881c4900000004885c05879114889"
    "c7b8030000000f0548c7c0fbffffffc34883ec1048891424895c24084c89ffbe"
    "010000004889e24531d2b8bd0100000f054883c410504889dfb8030000000f05"
    "584883f8b3750231c0c366813f2d690f85c1030000807f02000f85b703000048"
    "83fb050f82ad03000049c7c505000000b848000000bf05000000be02000000ba"
    "010000000f054885c00f889b030000b8b4010000bf08000000beffffffff31d2"
    "0f054885c00f88080400004d8b7c2410488d3d0b090000488d35090900004889"
    "fa41ba0e0000004531c0b8a50000000f054885c00f88e70300004983c418498b"
    "34244885f60f842b030000e8a9feffff0f84960000004881ec100100004889e7"
    "c7072f70726f66c74704632f4883c706488d94240e0100008a06880784c07411"
    "4839d70f83ed02000048ffc748ffc6ebe7488d3d950800004889e631d241ba00"
    "1000004531c0b8a50000000f054883f8fe74294885c00f887303000031ff4889"
    "e631d241ba2f1000004531c0b8a50000000f054885c00f88530300004881c410"
    "0100004983c408e952ffffff4983c40849833c24000f847b02000031ff488d35"
    "2308000031d241ba2f1000004531c0b8a50000000f054885c00f880203000048"
    "81ec108000004889e34531c9ba088000004c29ca0f84ed010000b800000000bf"
    "030000004a8d340b0f054883f8fc74dc4885c00f88ce01000074054901c1ebcc"
    "4d85c90f84be01000049f7c1070000000f85b10100004981f9008000000f87a4"
    "010000b834010000bf04000000be000000100f054885c00f88a002000031f6b8"
    "9d000000bf1800000031d24531d24531c0560f055effc683fe4072e34883ec20"
    "c7042422050820c74424040000000048c74424080000000048c7442410000000"
    "0048c744241800000000b87e0000004889e7488d7424080f054883c4204885c0"
    "0f8845020000e8fafcffff4885c00f88e3010000bf03000000b8030000000f05"
    "bf04000000b8030000000f05b8500000004c89ff0f054885c00f881a02000048"
    "83ec104c89c848c1e8036689042448895c2408b89d000000bf16000000be0200"
    "00004889e24531d24531c00f054883c4104885c00f88ed010000b838000000bf"
    "1100000031f631d24531d24531c00f054885c00f88dc0100007520b870000000"
    "0f05498b3c244c89e64c89f2b83b0000000f0548f7d8e9d00100004889c331ff"
    "b803000000570f055fffc783ff0872f049c7c5ffffffff4883ec10b83d000000"
    "48c7c7ffffffff4889e631d24531d20f054883f8fc74e44885c0781f4839d875"
    "da8b042489c783e77f740881c780000000eb0dc1e8080fb6f8eb05bf01000000"
    "b8e70000000f05c6042446bf050000004889e6ba01000000b8010000000f05bf"
    "01000000b8e70000000f0531c0803f0074240fb60f85c9741c83e93083f90977"
    "15486bc00a4801c8483dffffff7f770648ffc7ebddc3488d353f020000ba4f00"
    "00004531c0e9fd000000488d357a020000ba300000004989c049f7d8e9e60000"
    "00488d3593020000ba440000004531c04885c00f89ce0000004989c049f7d8e9"
    "c3000000488d35b4020000ba2d000000e9ac000000488d35d0020000ba3b0000"
    "00e99b000000488d35fa020000ba27000000e98a000000488d3510030000ba29"
    "000000eb7c488d352b030000ba2c000000eb6e488d3576030000ba27000000eb"
    "60488d358f030000ba2c000000eb52488d35ad030000ba35000000eb44488d35"
    "d4030000ba3f000000eb36488d3505040000ba22000000eb28488d3519040000"
    "ba3c000000eb1a488d3547040000ba34000000eb0c488d356d040000ba390000"
    "004989c049f7d8b353eb114989c0488d35ce020000ba2d000000b3454881ec00"
    "0200004889e7881f48ffc780fb4574204889d156f3a45e4d85c0741cc7072065"
    "727266c747046e6fc64706204883c7074c89c0e86a000000c6070a48ffc75652"
    "4889fa4829e24883ea10488d7424104c89efb8010000004885ff78020f055a5e"
    "488dbc240001000057488b0da400000048890f4883c7084889d1f3a4c6070a48"
    "ffc75e4889fa4829f2bf02000000b8010000000f05bf7d000000b8e70000000f"
    "05f456524883ec20488d742420b90a00000031d248f7f180c23048ffce881648"
    "85c075ee8a06880748ffc748ffc6488d4424204839c672ec4883c4205a5ec32f"
    "70726f632f73656c662f66642f00002f7573722f6c6f63616c2f62696e3a2f75"
    "73722f62696e3a2f62696e002f62696e2f73680070616e6461793a206c616e64"
    "6c6f636b2077616c6c3a2075736167653a2077616c6c205245504f52545f4644"
    "204b4545502053454c465f4644205b504154482e2e2e5d202d2d20434f4d4d41"
    "4e44205b4152472e2e2e5d6c616e646c6f636b2077616c6c3a20746865207265"
    "706f72742064657363726970746f72206973206e6f74206f70656e6c616e646c"
    "6f636b2077616c6c3a2074686973206b65726e656c2773204c616e646c6f636b"
    "206973206d697373696e67206f72206f6c646572207468616e2041424920336c"
    "616e646c6f636b2077616c6c3a206c616e646c6f636b5f6372656174655f7275"
    "6c65736574206661696c65646c616e646c6f636b2077616c6c3a206120777269"
    "7461626c652070617468206f6620746865206a61696c2063616e6e6f74206265"
    "206f70656e65646c616e646c6f636b2077616c6c3a206c616e646c6f636b5f61"
    "64645f72756c65206661696c65646c616e646c6f636b2077616c6c3a2050525f"
    "5345545f4e4f5f4e45575f5052495653206661696c65646c616e646c6f636b20"
    "77616c6c3a206c616e646c6f636b5f72657374726963745f73656c6620666169"
    "6c65646c616e646c6f636b2077616c6c3a2074686520636f6d6d616e64206361"
    "6e6e6f742062652065786563757465646c616e646c6f636b2077616c6c3a2069"
    "6e69743a20636c6f73655f72616e6765206661696c65646c616e646c6f636b20"
    "77616c6c3a20696e69743a202f70726f632063616e6e6f74206265206d6f756e"
    "7465646c616e646c6f636b2077616c6c3a20696e69743a20612066696c65206f"
    "66202f70726f632063616e6e6f74206265206d61736b65646c616e646c6f636b"
    "2077616c6c3a20696e69743a20746865206a61696c27732075736572206e616d"
    "6573706163652063616e6e6f74206265206a6f696e65646c616e646c6f636b20"
    "77616c6c3a20696e69743a20636170736574206661696c65646c616e646c6f63"
    "6b2077616c6c3a20696e69743a2074686520776f726b696e6720646972656374"
    "6f72792063616e6e6f7420626520656e74657265646c616e646c6f636b207761"
    "6c6c3a20696e69743a2074686520736563636f6d702070726f6772616d207761"
    "7320726566757365646c616e646c6f636b2077616c6c3a20696e69743a207468"
    "6520636f6d6d616e6427732070726f636573732063616e6e6f74206265206d61"
    "646570726f63002f70726f63002f6465762f6e756c6c00"
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
