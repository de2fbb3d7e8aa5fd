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
#   wall -r PID
#
# The other use of this program: the init of a command in a session jail (zygote.py)
# execs it once it has spawned the command, its child PID. It waits for its children
# (whatever the command leaves is re-parented to it, pid 1) until PID ends, then exits
# with PID's code, or 128 + the signal that ended it. Why: the init is a fork of the
# zygote's interpreter, and the end of a process that size costs about 0.2 ms more than
# this one's, on every command.
#
# panday_tier_linux/wall.py holds the bytes GNU as and objcopy make of this file;
# `python tools/wall.py --check` (run by the tests) assembles it again and compares them.

        .intel_syntax noprefix
        .set BASE, 0x400000
        .set SYS_WRITE, 1
        .set SYS_CLOSE, 3
        .set SYS_FSTAT, 5
        .set SYS_EXECVE, 59
        .set SYS_WAIT4, 61
        .set SYS_FCNTL, 72
        .set SYS_PRCTL, 157
        .set SYS_EXIT_GROUP, 231
        .set SYS_OPENAT, 257
        .set SYS_CREATE_RULESET, 444
        .set SYS_ADD_RULE, 445
        .set SYS_RESTRICT_SELF, 446
        .set HANDLED, 0x7ff2    # WRITE_FILE, REMOVE_*, MAKE_* (all nine), REFER, TRUNCATE
        .set DIR_RIGHTS, 0x77b2 # HANDLED without MAKE_CHAR and MAKE_BLOCK
        .set FILE_RIGHTS, 0x4002 # WRITE_FILE and TRUNCATE
        .set SETUP_FAILED, 125

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
        cmp byte ptr [rdi], 0x2d        # "-r": the reaper
        je reap
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
paths:  mov rdi, [r12]
        test rdi, rdi
        jz usage                        # no "--"
        cmp byte ptr [rdi], 0x2d
        jne 2f
        cmp byte ptr [rdi + 1], 0x2d
        jne 2f
        cmp byte ptr [rdi + 2], 0
        je stdio
2:      mov rsi, rdi
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

        mov eax, SYS_PRCTL              # PR_SET_NO_NEW_PRIVS
        mov edi, 38
        mov esi, 1
        xor edx, edx
        xor r10d, r10d
        xor r8d, r8d
        syscall
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

# number(rdi = decimal string): rax; anything else is a usage error
# wall -r PID: wait for children until PID ends; exit with its code (128 + its signal)
reap:   cmp word ptr [rdi], 0x722d      # "-r"
        jne usage
        cmp byte ptr [rdi + 2], 0
        jne usage
        cmp rbx, 3
        jne usage
        mov rdi, [r12 + 16]
        call number
        mov rbx, rax                    # PID
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
        js 32f                          # no child left, and PID was none of them
        cmp rax, rbx
        jne 30b                         # an orphan of the command's: reaped
        mov eax, dword ptr [rsp]
        mov edi, eax
        and edi, 0x7f                   # the signal that ended PID, or 0
        jz 31f
        add edi, 128
        jmp 33f
31:     shr eax, 8                      # its exit code
        movzx edi, al
        jmp 33f
32:     mov edi, 1
33:     mov eax, SYS_EXIT_GROUP
        syscall

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
end:
