"""Drive panday_tier_linux/zygote.py against a real session: a holder bwrap, the zygote,
then commands. Scratch."""

import fcntl, json, os, socket, struct, subprocess, sys, tempfile, time, statistics
from panday_core.policy import FsPolicy, SandboxPolicy
from panday_core.process import data_fd
from panday_tier_linux import zygote as Z
from panday_tier_linux.argv import build_options, jail_env
from panday_tier_linux.host import find_bwrap
from panday_tier_linux.session import open_session

bwrap = find_bwrap()
ws = tempfile.mkdtemp(
    prefix="zyg-ws-",
    dir=sys.argv[1] if len(sys.argv) > 1 and sys.argv[1].startswith("/") else "/var/tmp",
)
policy = SandboxPolicy(fs=FsPolicy(workspace=ws))


def place(fds, first):
    """exec bwrap with `fds` at first, first+1, ..."""
    return (
        "import fcntl,os,sys\nsrc=list(map(int,sys.argv[1].split(',')))\n"
        "tmp=[fcntl.fcntl(s, fcntl.F_DUPFD_CLOEXEC, 200) for s in src]\n"
        f"for i,t in enumerate(tmp): os.dup2(t,{first}+i,inheritable=True)\n"
        "os.execv(sys.argv[2], sys.argv[2:])\n"
    )


with open_session(policy, bwrap=bwrap) as session:
    spec = session.spec
    wsfd = os.open(session.workspace, os.O_PATH | os.O_DIRECTORY)
    opts = build_options(
        spec, cwd=session.workspace, seccomp_fd=4, binds=["--bind-fd", "6", session.workspace]
    )
    info_r, info_w = os.pipe()
    hold_r, hold_w = os.pipe()
    words = b"".join(o.encode() + b"\0" for o in opts + ["--info-fd", "5"])
    fds = [data_fd(words), data_fd(session.program), info_w, wsfd]
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            place(fds, 3),
            ",".join(map(str, fds)),
            bwrap.path,
            "--args",
            "3",
            "--",
            "/bin/sh",
            "-c",
            "echo R; read x",
        ],
        stdin=hold_r,
        stdout=subprocess.PIPE,
        pass_fds=fds,
    )
    assert holder.stdout.read(2) == b"R\n"
    os.close(info_w)
    info = b""
    while b"}" not in info:
        info += os.read(info_r, 4096)
    child = json.loads(info[: info.index(b"}") + 1])["child-pid"]
    ns = [
        os.open(f"/proc/{child}/ns/{n}", os.O_RDONLY)
        for n in ("user", "mnt", "net", "ipc", "uts", "cgroup", "pid")
    ]
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    zfds = [theirs.fileno(), *ns]
    t0 = time.perf_counter()
    zyg = subprocess.Popen(
        [
            sys.executable,
            "-c",
            place(zfds, 3),
            ",".join(map(str, zfds)),
            sys.executable,
            "-I",
            "-S",
            "-B",
            os.environ.get("ZYG", Z.__file__),
        ],
        pass_fds=zfds,
    )
    theirs.close()
    for f in ns:
        os.close(f)
    assert ours.recv(16) == b"R"
    print(f"zygote ready in {(time.perf_counter() - t0) * 1e3:.1f} ms", file=sys.stderr)

    PH = {"binds": [], "setup": [], "run": [], "close": []}

    def run(argv, show=False):
        T0 = time.perf_counter()
        binds = session.roots.command_binds(overlay=None)
        T1 = time.perf_counter()
        prefix = session.workspace.rstrip("/") + "/"
        protect, pfds = [], []
        for option, fd, dest in sorted(binds.ops, key=lambda op: op[2].count("/")):
            if dest.startswith(prefix):
                protect.append(dest[len(prefix) :])
                pfds.append(fd)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        st_r, st_w = os.pipe()
        prog_r, prog_w = os.pipe()
        rep_ours, rep_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        devnull = os.open("/dev/null", os.O_RDONLY)
        req = {
            "argv": argv,
            "env": jail_env(spec),
            "cwd": session.workspace,
            "workspace": session.workspace,
            "protect": protect,
            "proc_masked": list(spec.layout.proc),
            "tmp_bytes": spec.tmp_bytes,
            "under_tmp": [session.workspace] if session.workspace.startswith("/tmp/") else [],
        }
        sent = [devnull, out_w, err_w, rep_theirs.fileno(), prog_r, st_w, wsfd, *pfds]
        ours.sendmsg(
            [json.dumps(req).encode()],
            [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(sent)}i", *sent))],
        )
        for f in (devnull, out_w, err_w, prog_r, st_w):
            os.close(f)
        rep_theirs.close()
        msg, anc, _, _ = rep_ours.recvmsg(4096, socket.CMSG_SPACE(4))
        if not msg.startswith(b"P"):
            raise RuntimeError(msg)
        pidfd = struct.unpack("i", anc[0][2][:4])[0]
        T2 = time.perf_counter()
        # here the host would attach the cgroup and rlimits to the init
        os.write(prog_w, session.program)
        os.close(prog_w)
        out = b""
        err = b""
        while True:
            c = os.read(out_r, 65536)
            if not c:
                break
            out += c
        while True:
            c = os.read(err_r, 65536)
            if not c:
                break
            err += c
        status = b""
        while True:
            c = os.read(st_r, 4096)
            if not c:
                break
            status += c
        T3 = time.perf_counter()
        for f in (out_r, err_r, st_r, pidfd):
            os.close(f)
        rep_ours.close()
        binds.close()
        T4 = time.perf_counter()
        for k, v in zip(PH, (T1 - T0, T2 - T1, T3 - T2, T4 - T3)):
            PH[k].append(v * 1e3)
        return out, err, status

    if len(sys.argv) > 2 and sys.argv[2] == "show":
        for line in sys.argv[3:]:
            out, err, st = run(["/bin/sh", "-c", line])
            print(out.decode(), err.decode(), st.decode())
    else:
        rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 200
        for _ in range(20):
            run(["/bin/true"])
        a, b = [], []
        for _ in range(rounds):
            t = time.perf_counter()
            run(["/bin/true"])
            a.append((time.perf_counter() - t) * 1e3)
            t = time.perf_counter()
            session.run(["/bin/true"])
            b.append((time.perf_counter() - t) * 1e3)
        t = []
        for _ in range(rounds):
            s = time.perf_counter()
            subprocess.run(
                [
                    bwrap.path,
                    "--unshare-all",
                    "--die-with-parent",
                    "--ro-bind",
                    "/",
                    "/",
                    "/bin/true",
                ],
                check=True,
            )
            t.append((time.perf_counter() - s) * 1e3)
        print(
            json.dumps(
                {
                    "load": os.getloadavg()[0],
                    "zygote_ms": round(statistics.median(a), 3),
                    "session_run_ms": round(statistics.median(b), 3),
                    "raw_bwrap_ms": round(statistics.median(t), 3),
                    **{k: round(statistics.median(v), 3) for k, v in PH.items()},
                    "protect": len(run.__defaults__ or ()),
                }
            )
        )
    ours.close()
    zyg.wait(timeout=10)
    os.close(hold_w)
    holder.wait(timeout=10)
