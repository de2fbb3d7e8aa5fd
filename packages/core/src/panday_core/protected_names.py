"""The protected names: what stays read-only inside a writable workspace, and why
(`panday_core.protect.protected_entries` applies them).

An entry is listed when a *common* tool runs code from it on the user's next ordinary
action (``git status`` from a shell prompt, opening the folder in an editor, starting an
agent), without the user running the workspace's code on purpose (anchors: Anthropic's
sandbox-runtime denies writes to a list of such files and directories; OpenAI's Codex keeps
``.git`` read-only inside writable roots). The workspace's own source code is not on the
list: running it is what the user does on purpose. A list is never complete: the
guarantees built on it say "partial".
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing's flag without importing typing (panday run's start-up)
if TYPE_CHECKING:
    from typing import Final, Literal


class Entry:
    """A path inside a writable root that a jail may read but never write or create.

    A plain slotted class rather than a NamedTuple: this module is on `panday run`'s
    start-up path, and NamedTuple needs typing (milliseconds to import).
    """

    __slots__ = ("create", "kind", "rel", "why")

    def __init__(
        self,
        rel: str,
        kind: Literal["dir", "file"],
        why: str,
        create: bool = True,  # noqa: FBT001, FBT002 - the NamedTuple's positional signature
    ) -> None:
        self.rel = rel
        """Relative to the root, without ``..`` or a leading slash."""
        self.kind: Literal["dir", "file"] = kind
        """What stands in for it when it is missing (a read-only empty placeholder, on tiers
        that need one to block creation). A file holds the name as well as a directory
        does, and costs a fraction as much to create and remove (a directory has a data
        block to free); ``.git`` needs a directory, which git treats as absent, where an
        empty ``.git`` file would stop every git command above it."""
        self.why = why
        self.create = create
        """Whether a missing one must not be created either. False only where creating it
        is harmless until something already protected refers to it (say, a hook manager's
        configuration that only a protected git hook would read)."""

    def _fields(self) -> tuple[str, str, str, bool]:
        return (self.rel, self.kind, self.why, self.create)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Entry) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (
            f"Entry(rel={self.rel!r}, kind={self.kind!r}, why={self.why!r}, create={self.create})"
        )


DEFAULT_ENTRIES: Final = (
    Entry(
        ".git",
        "dir",
        "git runs its hooks and the commands its config names (core.fsmonitor, "
        "core.hooksPath, filters, aliases) on the next git command, a shell prompt's "
        "included; the whole directory, so no file git executes is missed",
    ),
    Entry(
        ".gitmodules",
        "file",
        "where the next `git submodule update` fetches code from and checks it out "
        "(only that explicit command reads it: may be created)",
        create=False,
    ),
    Entry(
        ".envrc",
        "file",
        "direnv runs it when a shell enters the directory (a new one needs `direnv allow`: "
        "may be created)",
        create=False,
    ),
    Entry(
        ".vscode",
        "file",
        "VS Code runs tasks on folder open and takes interpreters, terminals and tool paths "
        "from its settings",
    ),
    Entry(".idea", "file", "JetBrains IDEs run configured tools and startup tasks from it"),
    Entry(
        ".devcontainer",
        "file",
        "initializeCommand runs on the host when the folder is opened in a dev container",
    ),
    Entry(".mcp.json", "file", "agents start the MCP servers it lists, as host processes"),
    Entry(".claude", "file", "Claude Code runs the hooks, commands and agents defined in it"),
    Entry(".codex", "file", "Codex reads its configuration and rules from it"),
    Entry(".cursor", "file", "Cursor starts the MCP servers and applies the rules defined in it"),
    Entry(".gemini", "file", "Gemini CLI starts the MCP servers and tools its settings name"),
    Entry(
        ".devcontainer.json",
        "file",
        "the one-file form of .devcontainer: initializeCommand runs on the host when the "
        "folder is opened in a dev container",
    ),
    Entry("opencode.json", "file", "opencode starts the MCP servers (commands) it lists"),
    Entry("opencode.jsonc", "file", "the same, with comments"),
    Entry(".opencode", "file", "opencode loads the plugins (JavaScript) and commands in it"),
    Entry(".roo", "file", "Roo Code starts the MCP servers in .roo/mcp.json, applies its rules"),
    Entry(".zed", "file", "Zed's project settings and tasks: language servers, context servers"),
    Entry(".continue", "file", "Continue starts the MCP servers in .continue/mcpServers"),
    Entry(".kiro", "file", "Kiro starts the MCP servers in .kiro/settings and runs its hooks"),
    Entry(".amazonq", "file", "Amazon Q starts the MCP servers in .amazonq/mcp.json"),
    Entry(
        ".windsurf",
        "file",
        "Windsurf's rules and workflows steer what its agent runs (as .cursor's rules do)",
    ),
    Entry(
        ".npmrc",
        "file",
        "npm reads it for every command, `npm ci --ignore-scripts` too: its git, script-shell "
        "and node-options settings run a program of its choosing",
    ),
    Entry(
        ".yarnrc.yml",
        "file",
        "yarnPath and plugins: every yarn command there, `yarn --version` too, runs the "
        "JavaScript it names",
    ),
    Entry(".yarnrc", "file", "yarn 1's yarn-path: the same"),
    Entry(
        ".hg",
        "file",
        "Mercurial runs the [hooks] of .hg/hgrc on the next hg command, a shell prompt's "
        "included (a file placeholder, which hg treats as absent)",
    ),
    Entry(
        ".jj",
        "file",
        "Jujutsu reads the repository's configuration (pager, diff tools, aliases) from it "
        "(a file placeholder, which jj treats as absent)",
    ),
    Entry(
        ".gitconfig",
        "file",
        "git reads it only through an include.path in the protected .git/config (then it "
        "can set core.fsmonitor): may be created",
        create=False,
    ),
    *(
        Entry(
            name,
            "file",
            "mise runs its hooks, tasks and env._.source when a shell enters the directory "
            "(a new one needs `mise trust`: may be created)",
            create=False,
        )
        for name in ("mise.toml", ".mise.toml", "mise.local.toml", ".mise.local.toml", ".mise")
    ),
    Entry(
        ".ripgreprc",
        "file",
        "rg's --pre runs a program on every file searched, when RIPGREP_CONFIG_PATH names "
        "this file (a new one is inert until it does: may be created)",
        create=False,
    ),
    Entry(
        ".pre-commit-config.yaml",
        "file",
        "an installed pre-commit hook runs the commands it lists on the next commit (the "
        "hook lives in the protected .git: may be created)",
        create=False,
    ),
    Entry(
        ".husky",
        "dir",
        "husky's git hooks, run on the next commit once .git/config points there (protected: "
        "may be created)",
        create=False,
    ),
)
"""Protected in every writable workspace unless ``fs.unprotect`` names them."""

MACOS_HOME_ENTRIES: Final = (
    Entry("Library/LaunchAgents", "dir", "launchd starts the agents it holds at the next login"),
    Entry(
        "Library/Python",
        "dir",
        "the user site-packages of macOS's Pythons: a .pth there runs in every Python",
    ),
    Entry(
        "Library/Preferences",
        "dir",
        "applications' settings, Terminal's and iTerm2's start-up commands among them",
    ),
    Entry(
        "Library/Application Support/Code/User",
        "dir",
        "VS Code's user settings and tasks: terminals, interpreters, tool paths",
    ),
    Entry("Library/Application Support/Cursor/User", "dir", "the same for Cursor"),
    Entry(
        "Library/Application Support/iTerm2",
        "dir",
        "Scripts/AutoLaunch: Python iTerm2 runs when it starts",
    ),
    Entry(
        "Library/Application Support/Claude",
        "dir",
        "claude_desktop_config.json: the MCP servers Claude Desktop starts",
    ),
)
"""Home entries on macOS only (part of `HOME_ENTRIES` there; elsewhere nothing reads them,
and a placeholder would only litter the home)."""

HOME_ENTRIES: Final = (
    # -- what the shell and the login session run
    *(
        Entry(name, "file", "the shell runs it at the next login or new terminal")
        for name in (
            ".profile",
            ".bashrc",
            ".bash_profile",
            ".bash_login",
            ".bash_logout",
            ".zshrc",
            ".zshenv",
            ".zprofile",
            ".zlogin",
            ".zlogout",
            ".xprofile",
            ".xsessionrc",
        )
    ),
    Entry(".bash_aliases", "file", "Debian's and Ubuntu's .bashrc sources it"),
    Entry(".bashrc.d", "dir", "Fedora's .bashrc sources every file in it"),
    Entry(".bash_completion", "file", "bash-completion sources it in every interactive bash"),
    Entry(".oh-my-zsh", "dir", "the framework and plugins .zshrc sources"),
    Entry(".p10k.zsh", "file", "the prompt configuration .zshrc sources"),
    Entry(".fzf.bash", "file", "fzf's key bindings, sourced by .bashrc"),
    Entry(".fzf.zsh", "file", "fzf's key bindings, sourced by .zshrc"),
    Entry(".inputrc", "file", "readline's key bindings: a macro bound to Enter types a command"),
    Entry(".pam_environment", "file", "variables set at login (LD_PRELOAD among them)"),
    Entry(".xinitrc", "file", "startx runs it as the X session"),
    Entry(".xsession", "file", "the display manager runs it as the X session"),
    Entry(
        ".Xresources",
        "file",
        "loaded at X login: terminals take commands and extensions from it (urxvt's perl-lib)",
    ),
    Entry(
        "bin",
        "dir",
        "Debian's and Ubuntu's .profile put it first on PATH: a program there shadows ls, git",
    ),
    Entry(
        ".local",
        "dir",
        "bin (first on PATH), lib (user site-packages: a .pth runs in every Python), share "
        "(systemd user units, fish's vendor_conf.d, bash-completion scripts, editor plugins, "
        "desktop entries, uv's interpreters and tools): the whole directory, so no file run "
        "from it is missed",
    ),
    Entry(
        ".config",
        "dir",
        "autostart entries, systemd user units, fish and git configuration, panday's own policy",
    ),
    # -- who may log in, and keys
    Entry(".ssh", "dir", "authorized_keys and config: who may log in, what ssh runs"),
    Entry(".gnupg", "dir", "keys and the agent's configuration"),
    Entry(".forward", "file", "the mail system runs a |command it names on each delivery"),
    # -- editors, terminals, pagers, downloaders
    Entry(".vimrc", "file", "vim runs it at start-up (:! runs commands)"),
    Entry(".vim", "dir", "plugins vim loads at start-up"),
    Entry(".emacs", "file", "Emacs Lisp that Emacs runs at start-up"),
    Entry(".emacs.d", "dir", "init.el and the packages Emacs loads at start-up"),
    Entry(".tmux.conf", "file", "tmux runs it (run-shell) when its server starts"),
    Entry(".tmux", "dir", "the tmux plugins its configuration loads"),
    Entry(".screenrc", "file", "screen runs its commands at start-up"),
    Entry(".lesskey", "file", "less reads it: its #env section sets LESSOPEN, run on every file"),
    Entry(".lessfilter", "file", "lesspipe runs it on every file less opens"),
    Entry(".selected_editor", "file", "sensible-editor starts the program it names"),
    Entry(
        ".curlrc",
        "file",
        "options curl takes on every call (a proxy, certificate checks off): the next "
        "`curl ... | sh` runs what that proxy serves",
    ),
    Entry(".wgetrc", "file", "the same for wget"),
    # -- version control
    Entry(
        ".gitconfig", "file", "git's user configuration: hooks and commands for every repository"
    ),
    Entry(".hgrc", "file", "Mercurial's user configuration: [hooks] run on the next hg command"),
    Entry(".jjconfig.toml", "file", "Jujutsu's user configuration: pager, diff tools, aliases"),
    Entry(".subversion", "dir", "svn's configuration: diff-cmd, tunnel commands"),
    Entry(
        ".ripgreprc",
        "file",
        "where RIPGREP_CONFIG_PATH usually points: --pre runs a program on every file searched",
    ),
    # -- language runtimes and their package managers
    Entry(".pythonrc.py", "file", "where PYTHONSTARTUP usually points: run by interactive Python"),
    Entry(".pythonrc", "file", "the same, another common name"),
    Entry(".pdbrc", "file", "pdb runs its commands (Python statements) when it starts"),
    Entry(".ipython", "dir", "profile_default/startup/ and ipython_config.py: Python IPython runs"),
    Entry(".jupyter", "dir", "jupyter_*_config.py: Python run when Jupyter starts"),
    Entry(".pip", "dir", "pip.conf (old location): the index the next pip install takes code from"),
    Entry(".condarc", "file", "the channels the next conda install takes code from"),
    Entry(".Rprofile", "file", "R code every R session runs first"),
    Entry(".Renviron", "file", "R's start-up environment (R_PROFILE_USER, R_LIBS)"),
    Entry(".julia/config", "dir", "startup.jl: Julia code every julia runs first"),
    Entry(".irbrc", "file", "Ruby code irb runs at start-up"),
    Entry(".pryrc", "file", "Ruby code pry runs at start-up"),
    Entry(".gemrc", "file", "gem's sources and options: where the next gem install takes code"),
    Entry(".bundle", "dir", "bundler's configuration (mirrors) and plugins, run by bundle"),
    Entry(".npmrc", "file", "npm's configuration: script-shell, node-options, git, prefix"),
    Entry(".yarnrc", "file", "yarn 1's configuration: yarn-path runs a file on every yarn"),
    Entry(".yarnrc.yml", "file", "yarn's configuration: yarnPath and plugins run on every yarn"),
    Entry(".bunfig.toml", "file", "bun's configuration: preload scripts run in every bun"),
    Entry(".node_modules", "dir", "where node's require looks, for every program"),
    Entry(".node_libraries", "dir", "the same"),
    # A package manager's home that holds both its configuration and the code its next
    # build runs is protected whole (a build in the jail then needs CARGO_HOME,
    # GRADLE_USER_HOME or maven.repo.local pointed elsewhere, or fs.unprotect).
    Entry(
        ".cargo",
        "dir",
        "bin (on PATH), env (sourced by .profile), config.toml (rustc-wrapper, runners), and "
        "registry sources whose build.rs the next build runs, unverified",
    ),
    Entry(
        ".m2",
        "dir",
        "settings.xml (mirrors: where plugins come from) and the repository's jars the next "
        "build runs, unverified",
    ),
    Entry(".mavenrc", "file", "shell every mvn sources"),
    Entry(
        ".gradle",
        "dir",
        "init.d and init.gradle (scripts every build runs), gradle.properties (jvmargs: a "
        "-javaagent), and the cached jars the next build runs",
    ),
    Entry(".cache/pre-commit", "dir", "the hook environments the next git commit runs"),
    # -- toolchains: code the next ordinary command runs
    *(
        Entry(name, "dir", what)
        for name, what in (
            (".rustup", "rustup's toolchains: the rustc and cargo the next build runs"),
            (".nvm", "nvm.sh, sourced by .bashrc, and the node versions it puts on PATH"),
            (".pyenv", "pyenv's shims and Python versions, on PATH"),
            (".rbenv", "rbenv's shims and Ruby versions, on PATH"),
            (".sdkman", "sdkman-init.sh, sourced by .bashrc, and its JDKs"),
            (".asdf", "asdf.sh, sourced by .bashrc, and its shims"),
            (".volta", "Volta's shims and node versions, on PATH"),
            (".bun", "bun and its global packages, on PATH"),
            (".deno", "deno and its installed scripts, on PATH"),
            ("go/bin", "the programs go install puts there, on PATH"),
        )
    ),
    # -- cloud, container and infrastructure tools
    Entry(".aws", "dir", "config: credential_process runs a command on the next aws call"),
    Entry(".kube", "dir", "config: an exec credential plugin runs on the next kubectl"),
    Entry(".azure", "dir", "az's configuration and cliextensions (Python it runs)"),
    Entry(".docker", "dir", "the cli-plugins docker runs, credential helpers, contexts"),
    Entry(
        ".terraformrc",
        "file",
        "provider_installation: where terraform's providers (programs it runs) come from",
    ),
    Entry(".terraform.d", "dir", "plugins: providers terraform runs"),
    # -- debuggers and database shells
    Entry(".gdbinit", "file", "gdb runs it at start-up (shell, python)"),
    Entry(".lldbinit", "file", "lldb runs it at start-up (platform shell, script)"),
    Entry(".psqlrc", "file", "psql runs it at start-up (its \\! runs a shell command)"),
    Entry(".sqliterc", "file", "sqlite3 runs it at start-up (.shell runs a command)"),
    Entry(".my.cnf", "file", "mysql's client options: pager, plugin-dir (libraries it loads)"),
    # -- editors' and agents' user configuration
    Entry(".vscode", "dir", "VS Code's extensions (code it runs) and argv.json"),
    Entry(".vscode-server", "dir", "VS Code remote's server and extensions, run on connect"),
    Entry(".cursor", "dir", "Cursor's extensions and user MCP servers (mcp.json)"),
    Entry(".claude", "dir", "Claude Code's user settings: hooks, commands, MCP servers"),
    Entry(".claude.json", "file", "Claude Code's user state: the MCP servers it starts"),
    Entry(".codex", "dir", "Codex's configuration: MCP servers, notify commands"),
    Entry(".gemini", "dir", "Gemini CLI's settings: MCP servers, tools"),
    Entry(".continue", "dir", "Continue's configuration: MCP servers"),
    Entry(".codeium", "dir", "Windsurf's user MCP configuration (windsurf/mcp_config.json)"),
    Entry(".kiro", "dir", "Kiro's user MCP configuration and hooks"),
    *(MACOS_HOME_ENTRIES if sys.platform == "darwin" else ()),
)
"""Protected relative to a home directory that lies inside a writable workspace (only
possible with ``fs.allow_home``): what runs at the next login or new terminal, or in the
next ordinary command (a shell's rc files and what they source, PATH directories and
toolchains, tools' user configuration that names code). A list is never complete, so the
guarantee says partial. Left out on purpose: package caches and stores the next install
or build takes code from (``.cache``'s pip and uv caches, ``.npm``, ``go/pkg/mod``,
``.julia/packages``, ``.gem``, ``.ivy2``, ``.sbt``), which a build in the jail must write,
and files whose writing gains nothing the jail cannot already read (``.netrc``,
``.pypirc``: credentials)."""

OPT_OUT_NAMES: Final = frozenset(
    e.rel for e in (*DEFAULT_ENTRIES, *HOME_ENTRIES, *MACOS_HOME_ENTRIES)
)
"""What ``fs.unprotect`` may name (the macOS home entries on every platform, so one policy
means the same everywhere)."""

MAX_ENTRIES: Final = 256
"""More protected entries than this (a hostile .gitmodules, say) is refused, not truncated."""
