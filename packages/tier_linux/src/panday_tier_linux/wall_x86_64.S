# panday's Landlock wall for T2 Linux (x86-64): the whole executable, headers included.
#
#   wall REPORT_FD KEEP SELF_FD [PATH...] -- COMMAND [ARG...]
#
# bwrap execs it inside the jail, after its mounts and seccomp, before the command. It
#  1. closes SELF_FD (the sealed memfd it was exec'd from) and, unless KEEP is 1 (the
#     egress relay comes next and reports on the same pipe), marks REPORT_FD close-on-exec;
#  2. makes a Landlock ruleset that handles every *write* right of ABI 3 (write, truncate,
#     make and remove entries of every kind, link and rename across directories) and
#     allows them beneath each PATH (a directory: all but device nodes; a file: write and
#     truncate), and beneath the character devices its stdio (fds 0-2) are, so a pseudo-
#     terminal it was given can be reopened; everything else the jail can see is
#     read-only to the command whatever the mounts say;
#  3. sets no_new_privs (bwrap did already) and restricts itself, then closes the ruleset;
#  4. runs COMMAND as execvp(3) would (the PATH of its environment, /bin/sh for a file
#     the kernel cannot execute).
# A failure before the exec writes "S<message>" to REPORT_FD (every message starts with
# "landlock wall: "), one line to stderr, and exits 125; a failed exec writes "E<errno>"
# instead. Nothing of COMMAND ran then. Why machine code and not a script: wall.py.
#
#   wall -i CWD [MASK...] -- WALL_PATH [WALL_ARG...]
#
# The other use of this program: the init of a command in a session jail (zygote.py),
# pid 1 of the command's new pid namespace, spawned by the zygote in the command's new
# mount namespace with every capability of the jail's outer user namespace, and these
# descriptors: 0-2 the command's stdio, 3 the seccomp program's pipe, 4 the jail's inner
# user namespace, 5 the setup pipe, 6 and 7 what the command gets there (the report pipe,
# the wall's memfd). It
#  1. marks 5 close-on-exec and closes every descriptor above 7;
#  2. mounts a /proc for its pid namespace, masks each /proc/MASK that exists with a bind
#     of /dev/null (read-only, nosuid, nodev, noexec), and makes /proc read-only;
#  3. reads the seccomp program to its end (the session writes it once it has moved us
#     into the command's cgroup and set its rlimits; an empty one, or none: nothing runs);
#  4. joins the inner user namespace (no further user namespaces), drops every capability
#     from the bounding set and every set, sets no_new_privs, changes to CWD and takes
#     the seccomp program;
#  5. forks: the child takes a new session and execs WALL_PATH (this program, as the wall,
#     with the command's environment); the parent closes its copies of 0-2, 6 and 7 and
#     waits for its children (whatever the command leaves is re-parented to it) until the
#     command ends, then exits with the command's code, or 128 + the signal that ended it.
# A failure writes "S<message>" (or "E<errno>" for the exec) to 5 instead of a report
# pipe, one line to stderr, and exits 125; no program: "F", exit 1. Why machine code and
# not the zygote's interpreter: a fork of that interpreter copies its page tables, writes
# about a megabyte of its pages and takes a quarter of a millisecond to end, on every
# command; this is spawned and ends in microseconds.
#
# panday_tier_linux/wall.py holds the bytes GNU as and objcopy make of this file;
# `python tools/wall.py --check` (run by the tests) assembles it again and compares them.

        .intel_syntax noprefix
        .set BASE, 0x400000
        .set SYS_READ, 0
        .set SYS_WRITE, 1
        .set SYS_CLOSE, 3
        .set SYS_FSTAT, 5
        .set SYS_CLONE, 56
        .set SYS_EXECVE, 59
        .set SYS_WAIT4, 61
        .set SYS_FCNTL, 72
        .set SYS_CHDIR, 80
        .set SYS_SETSID, 112
        .set SYS_CAPSET, 126
        .set SYS_PRCTL, 157
        .set SYS_MOUNT, 165
        .set SYS_EXIT_GROUP, 231
        .set SYS_OPENAT, 257
        .set SYS_SETNS, 308
        .set SYS_CLOSE_RANGE, 436
        .set SYS_CREATE_RULESET, 444
        .set SYS_ADD_RULE, 445
        .set SYS_RESTRICT_SELF, 446
        .set HANDLED, 0x7ff2    # WRITE_FILE, REMOVE_*, MAKE_* (all nine), REFER, TRUNCATE
        .set DIR_RIGHTS, 0x77b2 # HANDLED without MAKE_CHAR and MAKE_BLOCK
        .set FILE_RIGHTS, 0x4002 # WRITE_FILE and TRUNCATE
        .set SETUP_FAILED, 125
        .set MS_PROC, 0xe               # MS_NOSUID | MS_NODEV | MS_NOEXEC
        .set MS_BIND, 0x1000
        .set MS_RO_AGAIN, 0x102f        # MS_BIND | MS_REMOUNT | MS_RDONLY | MS_PROC
        .set PROGRAM_MAX, 32768         # BPF_MAXINSNS instructions of 8 bytes

        .text
ehdr:   .byte 0x7f, 0x45, 0x4c, 0x46, 2, 1, 1, 0   # ELF, 64-bit, little-endian, SysV
        .quad 0
        .short 2, 0x3e                              # ET_EXEC, x86-64
        .long 1
        .quad BASE + _start - ehdr                  # entry
        .quad phdr - ehdr                           # program headers
        .quad 0                                     # no section headers
        .long 0
        .short 64, 56, 2, 0, 0, 0
phdr:   .long 1, 5                                  # PT_LOAD, read + execute
        .quad 0, BASE, BASE
        .quad end - ehdr, end - ehdr
        .quad 0x1000
        .long 0x6474e551, 6                         # PT_GNU_STACK, read + write only
        .quad 0, 0, 0, 0, 0, 16

_start:
        mov rbp, rsp
        mov rbx, [rbp]                  # argc
        lea r12, [rbp + 8]              # argv
        lea r14, [r12 + rbx*8 + 8]      # envp
        mov r13, -1                     # no report pipe known yet
        cmp rbx, 2
        jb usage
        mov rdi, [r12 + 8]
        cmp byte ptr [rdi], 0x2d        # "-i": a session jail's init
        je init
        call number
        mov r13, rax                    # known first: every later failure is reported
        cmp rbx, 6                      # wall REPORT KEEP SELF -- COMMAND
        jb usage
        mov rdi, [r12 + 16]
        call number
        test rax, rax
        jnz 1f
        mov eax, SYS_FCNTL              # fcntl(REPORT, F_SETFD, FD_CLOEXEC)
        mov rdi, r13
        mov esi, 2
        mov edx, 1
        syscall
        test rax, rax
        js report_fd_bad
1:      mov rdi, [r12 + 24]
        call number
        mov rdi, rax
        mov eax, SYS_CLOSE
        syscall

        # Landlock's ABI: 3 or later, else refuse (below 3 truncate(2) is not ruled)
        xor edi, edi
        xor esi, esi
        mov edx, 1                      # LANDLOCK_CREATE_RULESET_VERSION
        mov eax, SYS_CREATE_RULESET
        syscall
        cmp rax, 3
        jl no_landlock
        sub rsp, 16
        mov qword ptr [rsp], HANDLED    # struct landlock_ruleset_attr, fs rights only
        mov rdi, rsp
        mov esi, 8
        xor edx, edx
        mov eax, SYS_CREATE_RULESET
        syscall
        add rsp, 16
        test rax, rax
        js ruleset_failed
        mov r15, rax

        add r12, 32                     # the first PATH
paths:  mov rsi, [r12]
        test rsi, rsi
        jz usage                        # no "--"
        call dashes
        je stdio
        call hold                       # rax = fd or -errno, ecx = st_mode
        test rax, rax
        js path_failed
        mov rbx, rax
        mov edx, FILE_RIGHTS
        mov esi, DIR_RIGHTS
        and ecx, 0xf000
        cmp ecx, 0x4000                 # S_IFDIR
        cmove edx, esi
        call allow                      # rbx = fd, rdx = rights; closes rbx
        test rax, rax
        js rule_failed
        add r12, 8
        jmp paths

        # stdio on a character device (a pseudo-terminal): reopening it stays possible
stdio:  xor r8d, r8d
3:      lea rsi, [rip + fd_path]
        sub rsp, 32
        mov rdi, rsp
        mov rcx, [rsi]
        mov [rdi], rcx
        mov rcx, [rsi + 8]
        mov [rdi + 8], rcx              # "/proc/self/fd/" + digit + NUL
        lea ecx, [r8 + 0x30]
        mov [rdi + 14], cl
        mov byte ptr [rdi + 15], 0
        mov rsi, rdi
        push r8
        call hold
        pop r8
        add rsp, 32
        test rax, rax
        js 4f                           # not open: nothing to allow
        mov rbx, rax
        and ecx, 0xf000
        cmp ecx, 0x2000                 # S_IFCHR
        je 5f
        mov rdi, rbx                    # a pipe, a file, a directory: nothing
        mov eax, SYS_CLOSE
        syscall
        jmp 4f
5:      mov edx, FILE_RIGHTS
        push r8
        call allow
        pop r8
        test rax, rax
        js rule_failed
4:      inc r8d
        cmp r8d, 3
        jb 3b

        call nnp
        test rax, rax
        js nnp_failed
        mov eax, SYS_RESTRICT_SELF
        mov rdi, r15
        xor esi, esi
        syscall
        test rax, rax
        js restrict_failed
        mov rdi, r15
        mov eax, SYS_CLOSE
        syscall

        # execvp: the command's argv starts after "--"
        add r12, 8
        mov rdi, [r12]
        test rdi, rdi
        jz usage
        mov rsi, rdi
6:      mov al, [rsi]
        test al, al
        jz search
        cmp al, 0x2f                    # a slash: no search
        je direct
        inc rsi
        jmp 6b
direct: call try                        # rdi = path; returns -errno
        neg rax
        jmp exec_failed

search: xor r15d, r15d                  # r15: some candidate was EACCES
        lea rbx, [rip + default_path]
        mov rcx, r14
7:      mov rsi, [rcx]
        test rsi, rsi
        jz 8f
        cmp dword ptr [rsi], 0x48544150 # "PATH="
        jne 9f
        cmp byte ptr [rsi + 4], 0x3d
        jne 9f
        lea rbx, [rsi + 5]
        jmp 8f
9:      add rcx, 8
        jmp 7b
8:      sub rsp, 8192                   # candidate buffer
next:   mov rdi, rsp                    # copy one PATH entry
        lea rdx, [rsp + 4000]
10:     mov al, [rbx]
        test al, al
        jz 11f
        cmp al, 0x3a                    # ':'
        je 11f
        cmp rdi, rdx
        jae 12f                         # too long: skip this entry
        mov [rdi], al
        inc rdi
        inc rbx
        jmp 10b
11:     cmp rdi, rsp                    # an empty entry is the current directory
        jne 13f
        mov byte ptr [rdi], 0x2e
        inc rdi
13:     mov byte ptr [rdi], 0x2f
        inc rdi
        mov rsi, [r12]                  # append the name
        lea rdx, [rsp + 8190]
14:     mov al, [rsi]
        mov [rdi], al
        test al, al
        jz 15f
        cmp rdi, rdx
        jae 16f                         # too long
        inc rdi
        inc rsi
        jmp 14b
15:     mov rdi, rsp
        call try
        neg rax
        cmp rax, 13                     # EACCES: remember, go on
        jne 17f
        mov r15d, 1
        jmp 16f
17:     cmp rax, 2                      # ENOENT
        je 16f
        cmp rax, 20                     # ENOTDIR
        je 16f
        cmp rax, 19                     # ENODEV
        je 16f
        cmp rax, 116                    # ESTALE
        je 16f
        cmp rax, 110                    # ETIMEDOUT
        je 16f
        jmp exec_failed
12:     mov al, [rbx]                   # skip the rest of an entry too long to try
        test al, al
        jz 16f
        cmp al, 0x3a
        je 16f
        inc rbx
        jmp 12b
16:     mov al, [rbx]
        test al, al
        jz 18f
        inc rbx                         # past ':'
        jmp next
18:     mov eax, 2                      # ENOENT, or EACCES if a candidate said so
        mov ecx, 13
        test r15d, r15d
        cmovnz eax, ecx
        jmp exec_failed

# try(rdi = path): execve with argv at r12, envp at r14; a file the kernel cannot run
# (ENOEXEC) is run by /bin/sh as execvp does. Returns -errno.
try:    mov rsi, r12
        mov rdx, r14
        mov eax, SYS_EXECVE
        push rdi
        syscall
        pop rdi
        cmp rax, -8                     # ENOEXEC
        jne 19f
        lea rcx, [rip + shell]          # argv[-1] is the "--" slot: sh PATH ARG...
        mov [r12 - 8], rcx
        mov [r12], rdi
        mov rdi, rcx
        lea rsi, [r12 - 8]
        mov rdx, r14
        mov eax, SYS_EXECVE
        syscall
19:     ret

# dashes(rsi = string): ZF set when it is "--"
dashes: cmp word ptr [rsi], 0x2d2d
        jne 1f
        cmp byte ptr [rsi + 2], 0
1:      ret

# nnp(): prctl(PR_SET_NO_NEW_PRIVS, 1); rax = 0 or -errno
nnp:    mov eax, SYS_PRCTL
        mov edi, 38
        mov esi, 1
        xor edx, edx
        xor r10d, r10d
        xor r8d, r8d
        syscall
        ret

# hold(rsi = path): rax = an O_PATH descriptor (or -errno), ecx = its st_mode
hold:   mov edi, -100                   # AT_FDCWD
        mov edx, 0x280000               # O_PATH | O_CLOEXEC
        xor r10d, r10d
        mov eax, SYS_OPENAT
        syscall
        test rax, rax
        js 20f
        push rax
        sub rsp, 144                    # struct stat
        mov rdi, rax
        mov rsi, rsp
        mov eax, SYS_FSTAT
        syscall
        mov ecx, [rsp + 24]             # st_mode
        add rsp, 144
        test rax, rax
        pop rax
        jns 20f
        mov rdi, rax
        mov eax, SYS_CLOSE
        syscall
        mov rax, -5                     # EIO: an fstat that fails is not trusted
20:     ret

# allow(rbx = fd, rdx = rights): landlock_add_rule beneath it, then close it. Returns
# 0 or -errno (a descriptor Landlock does not rule, EBADFD, is no failure: nothing to add).
allow:  sub rsp, 16
        mov [rsp], rdx                  # struct landlock_path_beneath_attr (packed)
        mov [rsp + 8], ebx
        mov rdi, r15
        mov esi, 1                      # LANDLOCK_RULE_PATH_BENEATH
        mov rdx, rsp
        xor r10d, r10d
        mov eax, SYS_ADD_RULE
        syscall
        add rsp, 16
        push rax
        mov rdi, rbx
        mov eax, SYS_CLOSE
        syscall
        pop rax
        cmp rax, -77                    # EBADFD
        jne 21f
        xor eax, eax
21:     ret

# wall -i CWD [MASK...] -- WALL_PATH [WALL_ARG...]: a session jail's init (see the top)
init:   cmp word ptr [rdi], 0x692d      # "-i"
        jne usage
        cmp byte ptr [rdi + 2], 0
        jne usage
        cmp rbx, 5                      # wall -i CWD -- WALL_PATH
        jb usage
        mov r13, 5                      # failures are said on the setup pipe
        mov eax, SYS_FCNTL              # fcntl(5, F_SETFD, FD_CLOEXEC)
        mov edi, 5
        mov esi, 2
        mov edx, 1
        syscall
        test rax, rax
        js report_fd_bad
        mov eax, SYS_CLOSE_RANGE        # close_range(8, ~0, 0)
        mov edi, 8
        mov esi, -1
        xor edx, edx
        syscall
        test rax, rax
        js fds_failed
        mov r15, [r12 + 16]             # CWD
        lea rdi, [rip + s_proc]         # mount("proc", "/proc", "proc", MS_PROC, NULL)
        lea rsi, [rip + s_proc_dir]
        mov rdx, rdi
        mov r10d, MS_PROC
        xor r8d, r8d
        mov eax, SYS_MOUNT
        syscall
        test rax, rax
        js proc_failed
        add r12, 24                     # the first MASK
masks:  mov rsi, [r12]
        test rsi, rsi
        jz usage                        # no "--"
        call dashes
        je masked
        sub rsp, 272                    # "/proc/" MASK
        mov rdi, rsp
        mov dword ptr [rdi], 0x6f72702f # "/pro"
        mov word ptr [rdi + 4], 0x2f63  # "c/"
        add rdi, 6
        lea rdx, [rsp + 270]
41:     mov al, [rsi]
        mov [rdi], al
        test al, al
        jz 42f
        cmp rdi, rdx
        jae usage                       # too long to be a file of /proc
        inc rdi
        inc rsi
        jmp 41b
42:     lea rdi, [rip + s_null]         # mount("/dev/null", path, NULL, MS_BIND, NULL)
        mov rsi, rsp
        xor edx, edx
        mov r10d, MS_BIND
        xor r8d, r8d
        mov eax, SYS_MOUNT
        syscall
        cmp rax, -2                     # ENOENT: this kernel has no such file
        je 43f
        test rax, rax
        js mask_failed
        xor edi, edi                    # its flags: read-only, no device, nothing to run
        mov rsi, rsp
        xor edx, edx
        mov r10d, MS_RO_AGAIN
        xor r8d, r8d
        mov eax, SYS_MOUNT
        syscall
        test rax, rax
        js mask_failed
43:     add rsp, 272
        add r12, 8
        jmp masks
masked: add r12, 8                      # WALL_PATH, then its arguments
        cmp qword ptr [r12], 0
        je usage
        xor edi, edi                    # /proc read-only
        lea rsi, [rip + s_proc_dir]
        xor edx, edx
        mov r10d, MS_RO_AGAIN
        xor r8d, r8d
        mov eax, SYS_MOUNT
        syscall
        test rax, rax
        js proc_failed

        sub rsp, PROGRAM_MAX + 16       # the seccomp program, read to its end
        mov rbx, rsp
        xor r9d, r9d
44:     mov edx, PROGRAM_MAX + 8
        sub rdx, r9
        jz no_program                   # longer than any program
        mov eax, SYS_READ
        mov edi, 3
        lea rsi, [rbx + r9]
        syscall
        cmp rax, -4                     # EINTR: again
        je 44b
        test rax, rax
        js no_program
        jz 45f
        add r9, rax
        jmp 44b
45:     test r9, r9                     # none (the session died or refused): nothing runs
        jz no_program
        test r9, 7
        jnz no_program
        cmp r9, PROGRAM_MAX
        ja no_program

        mov eax, SYS_SETNS              # setns(4, CLONE_NEWUSER): the inner user namespace
        mov edi, 4
        mov esi, 0x10000000
        syscall
        test rax, rax
        js userns_failed
        xor esi, esi                    # the bounding set: every capability (EINVAL past
46:     mov eax, SYS_PRCTL              # the kernel's last one)
        mov edi, 24                     # PR_CAPBSET_DROP
        xor edx, edx
        xor r10d, r10d
        xor r8d, r8d
        push rsi
        syscall
        pop rsi
        inc esi
        cmp esi, 64
        jb 46b
        sub rsp, 32                     # capset: version 3, this process, every set empty
        mov dword ptr [rsp], 0x20080522
        mov dword ptr [rsp + 4], 0
        mov qword ptr [rsp + 8], 0
        mov qword ptr [rsp + 16], 0
        mov qword ptr [rsp + 24], 0
        mov eax, SYS_CAPSET
        mov rdi, rsp
        lea rsi, [rsp + 8]
        syscall
        add rsp, 32
        test rax, rax
        js caps_failed
        call nnp
        test rax, rax
        js nnp_failed
        mov edi, 3
        mov eax, SYS_CLOSE
        syscall
        mov edi, 4
        mov eax, SYS_CLOSE
        syscall
        mov eax, SYS_CHDIR
        mov rdi, r15
        syscall
        test rax, rax
        js cwd_failed
        sub rsp, 16                     # struct sock_fprog
        mov rax, r9
        shr rax, 3
        mov word ptr [rsp], ax
        mov [rsp + 8], rbx
        mov eax, SYS_PRCTL              # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        mov edi, 22
        mov esi, 2
        mov rdx, rsp
        xor r10d, r10d
        xor r8d, r8d
        syscall
        add rsp, 16
        test rax, rax
        js seccomp_failed

        mov eax, SYS_CLONE              # a child, as fork(2): clone(SIGCHLD)
        mov edi, 17
        xor esi, esi
        xor edx, edx
        xor r10d, r10d
        xor r8d, r8d
        syscall
        test rax, rax
        js fork_failed
        jnz 47f
        mov eax, SYS_SETSID             # the child: a session of its own, then the wall
        syscall
        mov rdi, [r12]
        mov rsi, r12
        mov rdx, r14
        mov eax, SYS_EXECVE
        syscall
        neg rax
        jmp exec_failed
47:     mov rbx, rax                    # the command
        xor edi, edi                    # our copies of its descriptors: its pipes end
48:     mov eax, SYS_CLOSE              # with it
        push rdi
        syscall
        pop rdi
        inc edi
        cmp edi, 8
        jb 48b
        mov r13, -1
        sub rsp, 16
30:     mov eax, SYS_WAIT4              # wait4(-1, &status, 0, NULL)
        mov rdi, -1
        mov rsi, rsp
        xor edx, edx
        xor r10d, r10d
        syscall
        cmp rax, -4                     # EINTR: again
        je 30b
        test rax, rax
        js 32f                          # no child left: cannot be, the command is one
        cmp rax, rbx
        jne 30b                         # an orphan of the command's: reaped
        mov eax, dword ptr [rsp]
        mov edi, eax
        and edi, 0x7f                   # the signal that ended it, or 0
        jz 31f
        add edi, 128
        jmp 33f
31:     shr eax, 8                      # its exit code
        movzx edi, al
        jmp 33f
32:     mov edi, 1
33:     mov eax, SYS_EXIT_GROUP
        syscall

no_program:                             # "F": nothing was to run (no message)
        mov byte ptr [rsp], 0x46
        mov edi, 5
        mov rsi, rsp
        mov edx, 1
        mov eax, SYS_WRITE
        syscall
        mov edi, 1
        mov eax, SYS_EXIT_GROUP
        syscall

# number(rdi = decimal string): rax; anything else is a usage error
number: xor eax, eax
        cmp byte ptr [rdi], 0
        je usage
22:     movzx ecx, byte ptr [rdi]
        test ecx, ecx
        jz 23f
        sub ecx, 0x30
        cmp ecx, 9
        ja usage
        imul rax, rax, 10
        add rax, rcx
        cmp rax, 0x7fffffff
        ja usage
        inc rdi
        jmp 22b
23:     ret

# Failures: rsi = message, edx = its length, r8 = errno (0: none)
usage:          lea rsi, [rip + m_usage]
                mov edx, m_usage_end - m_usage
                xor r8d, r8d
                jmp setup_failed
report_fd_bad:  lea rsi, [rip + m_report]
                mov edx, m_report_end - m_report
                mov r8, rax
                neg r8
                jmp setup_failed
no_landlock:    lea rsi, [rip + m_abi]
                mov edx, m_abi_end - m_abi
                xor r8d, r8d
                test rax, rax
                jns setup_failed
                mov r8, rax
                neg r8
                jmp setup_failed
ruleset_failed: lea rsi, [rip + m_ruleset]
                mov edx, m_ruleset_end - m_ruleset
                jmp with_errno
path_failed:    lea rsi, [rip + m_path]
                mov edx, m_path_end - m_path
                jmp with_errno
rule_failed:    lea rsi, [rip + m_rule]
                mov edx, m_rule_end - m_rule
                jmp with_errno
nnp_failed:     lea rsi, [rip + m_nnp]
                mov edx, m_nnp_end - m_nnp
                jmp with_errno
restrict_failed:
                lea rsi, [rip + m_restrict]
                mov edx, m_restrict_end - m_restrict
                jmp with_errno
fds_failed:     lea rsi, [rip + m_fds]
                mov edx, m_fds_end - m_fds
                jmp with_errno
proc_failed:    lea rsi, [rip + m_proc]
                mov edx, m_proc_end - m_proc
                jmp with_errno
mask_failed:    lea rsi, [rip + m_mask]
                mov edx, m_mask_end - m_mask
                jmp with_errno
userns_failed:  lea rsi, [rip + m_userns]
                mov edx, m_userns_end - m_userns
                jmp with_errno
caps_failed:    lea rsi, [rip + m_caps]
                mov edx, m_caps_end - m_caps
                jmp with_errno
cwd_failed:     lea rsi, [rip + m_cwd]
                mov edx, m_cwd_end - m_cwd
                jmp with_errno
seccomp_failed: lea rsi, [rip + m_seccomp]
                mov edx, m_seccomp_end - m_seccomp
                jmp with_errno
fork_failed:    lea rsi, [rip + m_fork]
                mov edx, m_fork_end - m_fork
with_errno:     mov r8, rax
                neg r8
setup_failed:   mov bl, 0x53            # 'S'
                jmp report
exec_failed:    mov r8, rax             # errno
                lea rsi, [rip + m_exec]
                mov edx, m_exec_end - m_exec
                mov bl, 0x45            # 'E'

# report: to REPORT_FD "S<message> (errno N)\n" or "E<N>\n"; to stderr one line; exit 125
report: sub rsp, 512
        mov rdi, rsp
        mov [rdi], bl
        inc rdi
        cmp bl, 0x45
        je 24f
        mov rcx, rdx                    # the message
        push rsi
        rep movsb
        pop rsi
        test r8, r8
        jz 25f
        mov dword ptr [rdi], 0x72726520 # " errno "
        mov word ptr [rdi + 4], 0x6f6e
        mov byte ptr [rdi + 6], 0x20
        add rdi, 7
24:     mov rax, r8
        call decimal
25:     mov byte ptr [rdi], 0x0a
        inc rdi
        push rsi
        push rdx
        mov rdx, rdi
        sub rdx, rsp
        sub rdx, 16                     # the two pushes
        lea rsi, [rsp + 16]
        mov rdi, r13
        mov eax, SYS_WRITE
        test rdi, rdi
        js 26f
        syscall
26:     pop rdx
        pop rsi
        lea rdi, [rsp + 256]            # stderr: "panday: <message>\n"
        push rdi
        mov rcx, [rip + m_prefix]
        mov [rdi], rcx                  # "panday: " (8 bytes)
        add rdi, 8
        mov rcx, rdx
        rep movsb
        mov byte ptr [rdi], 0x0a
        inc rdi
        pop rsi
        mov rdx, rdi
        sub rdx, rsi
        mov edi, 2
        mov eax, SYS_WRITE
        syscall
        mov edi, SETUP_FAILED
        mov eax, SYS_EXIT_GROUP
        syscall
        hlt

# decimal(rax) written at rdi, rdi advanced past it
decimal:
        push rsi
        push rdx
        sub rsp, 32
        lea rsi, [rsp + 32]
        mov ecx, 10
27:     xor edx, edx
        div rcx
        add dl, 0x30
        dec rsi
        mov [rsi], dl
        test rax, rax
        jnz 27b
28:     mov al, [rsi]
        mov [rdi], al
        inc rdi
        inc rsi
        lea rax, [rsp + 32]
        cmp rsi, rax
        jb 28b
        add rsp, 32
        pop rdx
        pop rsi
        ret

fd_path:        .ascii "/proc/self/fd/\0\0"
default_path:   .asciz "/usr/local/bin:/usr/bin:/bin"
shell:          .asciz "/bin/sh"
m_prefix:       .ascii "panday: "
m_usage:        .ascii "landlock wall: usage: wall REPORT_FD KEEP SELF_FD [PATH...] -- COMMAND [ARG...]"
m_usage_end:
m_report:       .ascii "landlock wall: the report descriptor is not open"
m_report_end:
m_abi:          .ascii "landlock wall: this kernel's Landlock is missing or older than ABI 3"
m_abi_end:
m_ruleset:      .ascii "landlock wall: landlock_create_ruleset failed"
m_ruleset_end:
m_path:         .ascii "landlock wall: a writable path of the jail cannot be opened"
m_path_end:
m_rule:         .ascii "landlock wall: landlock_add_rule failed"
m_rule_end:
m_nnp:          .ascii "landlock wall: PR_SET_NO_NEW_PRIVS failed"
m_nnp_end:
m_restrict:     .ascii "landlock wall: landlock_restrict_self failed"
m_restrict_end:
m_exec:         .ascii "landlock wall: the command cannot be executed"
m_exec_end:
m_fds:          .ascii "landlock wall: init: close_range failed"
m_fds_end:
m_proc:         .ascii "landlock wall: init: /proc cannot be mounted"
m_proc_end:
m_mask:         .ascii "landlock wall: init: a file of /proc cannot be masked"
m_mask_end:
m_userns:       .ascii "landlock wall: init: the jail's user namespace cannot be joined"
m_userns_end:
m_caps:         .ascii "landlock wall: init: capset failed"
m_caps_end:
m_cwd:          .ascii "landlock wall: init: the working directory cannot be entered"
m_cwd_end:
m_seccomp:      .ascii "landlock wall: init: the seccomp program was refused"
m_seccomp_end:
m_fork:         .ascii "landlock wall: init: the command's process cannot be made"
m_fork_end:
s_proc:         .asciz "proc"
s_proc_dir:     .asciz "/proc"
s_null:         .asciz "/dev/null"
end:
