"""Env names that load code: refused in a policy's ``env`` unless ``allow_env_hooks`` lists
them (`panday_core.policy`, and each tier again).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's flag without importing typing (panday run's start-up)
if TYPE_CHECKING:
    from typing import Final


# ------------------------------------------------------------------------ environment
#
# Env names that make a program load or run code of the policy's choosing: refused in a
# policy's ``env`` unless ``allow_env_hooks`` lists them. The env reaches every program the
# command starts (a shell, git, a pager, an interpreter), so a policy -- a plugin's, say --
# that set one of these would run its code in programs that never asked for it.
#
# The guarantee is PARTIAL: a list is never complete. Where the line is drawn: variables
# read implicitly by the dynamic linker and libc, the shells, the language runtimes' module
# search and start-up, git, and the helpers everyday commands start (pager, editor,
# browser, askpass). Left out on purpose, each a choice a build the command starts makes
# for itself, like the workspace's Makefile: PATH (the policy's declared program search,
# shown at consent), toolchain selection and build-tool configuration (CC, CXX, JAVA_HOME,
# GOROOT, CARGO_*, RUSTC_WRAPPER, GOFLAGS, MAKEFLAGS, npm_config_*, PIP_*, UV_*), data files
# libraries parse (TZ, TERMINFO, SSL_CERT_FILE, HOSTALIASES), behaviour switches
# (MALLOC_CHECK_, PYTHONDONTWRITEBYTECODE).

ENV_HOOK_PREFIXES: Final = {
    "LD_": "the dynamic linker: LD_PRELOAD, LD_AUDIT, LD_LIBRARY_PATH load a library of the "
    "policy's choosing into every program",
    "DYLD_": "macOS's dynamic loader: DYLD_INSERT_LIBRARIES and friends, the same",
    "GIT_CONFIG_": "git configuration from the environment (COUNT/KEY_n/VALUE_n, PARAMETERS) "
    "or from a file it names (GLOBAL, SYSTEM); NOSYSTEM drops the system's: core.pager, "
    "core.fsmonitor, aliases run commands on the next git command",
    "BASH_FUNC_": "exported shell functions, defined in every bash the command starts "
    "(a real one needs %% in its name, which env refuses anyway: defence in depth)",
    "LUA_INIT": "LUA_INIT and LUA_INIT_5_x: Lua code every lua interpreter runs first",
    "LUA_PATH": "LUA_PATH and LUA_PATH_5_x: where require finds Lua modules",
    "LUA_CPATH": "LUA_CPATH and LUA_CPATH_5_x: where require finds C modules (libraries)",
    "R_PROFILE": "R_PROFILE and R_PROFILE_USER: R code every R session runs first",
    "R_ENVIRON": "R_ENVIRON and R_ENVIRON_USER: R's start-up environment file (R_PROFILE_USER, "
    "R_LIBS among what it can set)",
    "R_LIBS": "R_LIBS, R_LIBS_USER, R_LIBS_SITE: where library() loads R packages from",
}
"""Name prefixes that are start-up hooks, each with the reason."""

ENV_HOOKS: Final = {
    # shells
    "BASH_ENV": "a script non-interactive bash runs first",
    "ENV": "the same for sh (and interactive dash, ksh)",
    "PROMPT_COMMAND": "a command interactive bash runs before each prompt",
    "PS0": "bash expands $(...) in its prompts (promptvars)",
    "PS1": "bash expands $(...) in its prompts (promptvars)",
    "PS2": "bash expands $(...) in its prompts (promptvars)",
    "PS4": "expanded, $(...) included, before each traced command (set -x, SHELLOPTS)",
    "SHELLOPTS": "shell options every bash starts with (xtrace runs PS4's commands; posix "
    "and others change what bash reads at start-up)",
    "BASHOPTS": "shopt options every bash starts with (extdebug, sourcepath change what it runs)",
    "BASH_LOADABLES_PATH": "where `enable -f` loads builtins (shared libraries) from",
    "ZDOTDIR": "where zsh reads .zshenv and .zshrc from",
    "FPATH": "where zsh and ksh autoload functions from",
    "INPUTRC": "readline's key bindings: a macro bound to Enter types a command",
    "SHELL": "the shell programs start for a command (vim's :!, tmux, script, make's $(shell) "
    "in some tools)",
    "HOME": "where every program reads its start-up files (.bashrc, .gitconfig, .npmrc, "
    ".pythonrc ...); panday points it at the workspace",
    "XDG_CONFIG_HOME": "where programs read their configuration (git's config: core.pager, "
    "core.fsmonitor; fish's conf.d)",
    "XDG_CONFIG_DIRS": "the same, system-wide",
    "XDG_DATA_HOME": "where programs find start-up data that is code (fish's vendor_conf.d, "
    "bash-completion's scripts, systemd user units)",
    "XDG_DATA_DIRS": "the same, system-wide",
    # libc and system libraries
    "GCONV_PATH": "glibc's iconv loads its conversion modules (shared libraries) from there",
    "LOCPATH": "glibc loads locale data from there: not code, but a file every program "
    "parses, GCONV_PATH's sibling in glibc's list of unsafe variables (refused conservatively)",
    "NLSPATH": "where catopen finds message catalogues: format strings of the policy's "
    "choosing in programs that print them",
    "GLIBC_TUNABLES": "glibc's run-time tunables (malloc, hardware capabilities); its parser "
    "was exploitable (CVE-2023-4911)",
    "OPENSSL_CONF": "OpenSSL's configuration, which loads the engines and providers (shared "
    "libraries) it names, in every program using OpenSSL",
    "OPENSSL_ENGINES": "where OpenSSL loads engines (shared libraries) from",
    "OPENSSL_MODULES": "where OpenSSL 3 loads providers (shared libraries) from",
    "KRB5_CONFIG": "libkrb5's configuration, which loads the plugin modules it names",
    "GTK_MODULES": "modules (shared libraries) every GTK program loads",
    "GTK3_MODULES": "the same for GTK 3",
    "GTK_PATH": "where GTK looks for modules and engines",
    "GIO_EXTRA_MODULES": "modules (shared libraries) GIO loads",
    "QT_PLUGIN_PATH": "where Qt loads plugins (shared libraries) from",
    # Python
    "PYTHONPATH": "where every Python finds modules first (sitecustomize, a shadowed stdlib "
    "module)",
    "PYTHONHOME": "the standard library every Python loads",
    "PYTHONSTARTUP": "a file interactive Python runs first",
    "PYTHONUSERBASE": "the user site-packages, whose .pth files every Python runs",
    "PYTHONEXECUTABLE": "sys.executable on macOS framework builds: what multiprocessing and "
    "tools start as 'this Python'",
    "PYTHONPLATLIBDIR": "the standard library's directory name, joined to the prefix (a "
    "../ path leaves it)",
    "PYTHONBREAKPOINT": "a callable breakpoint() imports and calls",
    "PYTHONWARNINGS": "a warning category names a module, which Python imports at start-up",
    "PYTHONPYCACHEPREFIX": "where Python reads compiled bytecode from: a planted .pyc runs "
    "in place of its source",
    # Perl, Ruby, Node, JVM, Tcl, PHP, Julia, editors
    "PERL5LIB": "where every perl finds modules first",
    "PERLLIB": "the same, read when PERL5LIB is unset",
    "PERL5OPT": "command-line switches every perl takes (-M loads a module)",
    "PERL5DB": "the debugger perl -d loads",
    "RUBYLIB": "where every ruby finds libraries first",
    "RUBYOPT": "switches every ruby takes (-r requires a library)",
    "RUBYGEMS_GEMDEPS": "a Gemfile (Ruby code) RubyGems evaluates in every ruby",
    "GEM_HOME": "where RubyGems installs and activates gems from",
    "GEM_PATH": "where RubyGems activates gems from",
    "BUNDLE_GEMFILE": "the Gemfile (Ruby code) bundler evaluates",
    "NODE_OPTIONS": "--require a module in every node process",
    "NODE_PATH": "where node's require finds modules",
    "NODE_REPL_EXTERNAL_MODULE": "a module node runs instead of its REPL",
    "JAVA_TOOL_OPTIONS": "-javaagent in every JVM",
    "JDK_JAVA_OPTIONS": "the same, for the java launcher",
    "_JAVA_OPTIONS": "the same, older spelling",
    "CLASSPATH": "where the JVM loads classes from when no -cp is given",
    "TCLLIBPATH": "where tclsh finds packages",
    "TCL_LIBRARY": "the init.tcl every Tcl interpreter sources",
    "TK_LIBRARY": "the Tk scripts every Tk program sources",
    "PHPRC": "php.ini: auto_prepend_file runs a file before every script, extension loads "
    "a library",
    "PHP_INI_SCAN_DIR": "more ini files, the same",
    "JULIA_DEPOT_PATH": "where julia finds config/startup.jl and packages",
    "JULIA_LOAD_PATH": "where julia's using finds code",
    "EMACSLOADPATH": "where Emacs loads its Lisp (site-start.el) from",
    "VIMINIT": "Ex commands vim runs at start-up (:!cmd among them)",
    "EXINIT": "the same for vi and ex",
    "VIMRUNTIME": "where vim loads its runtime scripts from",
    # git and other version control
    "GIT_CONFIG": "the file `git config` reads and writes",
    "GIT_DIR": "the repository git uses, with its config (core.fsmonitor) and hooks",
    "GIT_COMMON_DIR": "where git reads the repository's config and hooks",
    "GIT_EXEC_PATH": "where git finds its own sub-commands",
    "GIT_TEMPLATE_DIR": "hooks git init and clone copy into a new repository",
    "GIT_SSH": "the program git runs to reach a remote",
    "GIT_SSH_COMMAND": "the command git runs to reach a remote",
    "GIT_PROXY_COMMAND": "the command git runs to connect over git://",
    "GIT_ASKPASS": "the program git runs to ask for a password",
    "SSH_ASKPASS": "the program ssh (and git) runs to ask for a password",
    "SUDO_ASKPASS": "the same for sudo -A",
    "GIT_EXTERNAL_DIFF": "the program git diff runs",
    "GIT_PAGER": "the program git pipes its output to",
    "GIT_EDITOR": "the program git commit and rebase run",
    "GIT_SEQUENCE_EDITOR": "the program git rebase -i runs",
    "GIT_MAN_VIEWER": "the program git help runs",
    "HGRCPATH": "Mercurial's configuration: [hooks] run on the next hg command",
    "JJ_CONFIG": "Jujutsu's configuration: its pager, diff tools, aliases",
    # helpers everyday commands start
    "PAGER": "the program man, git, psql and others pipe their output to",
    "MANPAGER": "the program man pipes its output to",
    "MANOPT": "options man takes (-P names a pager)",
    "LESS": "options every less takes (--lesskey-src names a key file whose #env sets LESSOPEN)",
    "LESSOPEN": "an input preprocessor every less runs on the file it opens",
    "LESSCLOSE": "the same, after it closes it",
    "LESSKEY": "a key file less reads (#env sets LESSOPEN)",
    "LESSKEYIN": "a key source file less reads (the same)",
    "LESSKEY_SYSTEM": "the system-wide key file (the same)",
    "LESSKEYIN_SYSTEM": "the system-wide key source file (the same)",
    "EDITOR": "the editor git, crontab, less's v, sudoedit and others start",
    "VISUAL": "the same, preferred by most",
    "FCEDIT": "the editor the shell's fc starts",
    "SUDO_EDITOR": "the editor sudoedit starts",
    "BROWSER": "the program xdg-open, Python's webbrowser and git web--browse start",
    "RIPGREP_CONFIG_PATH": "a file of rg options (--pre runs a program on every file searched)",
    "FZF_DEFAULT_COMMAND": "the command fzf runs for its input",
    "FZF_DEFAULT_OPTS": "options every fzf takes (--bind 'start:execute(...)', --preview run "
    "commands)",
}
"""Exact names that are start-up hooks, each with the reason (see the comment above)."""


def env_hook_reason(name: str) -> str | None:
    """Why `name` is a start-up hook (refused in ``env`` unless ``allow_env_hooks`` lists it),
    or None when it is not one of the listed names or prefixes."""
    reason = ENV_HOOKS.get(name)
    if reason is not None:
        return reason
    for prefix, why in ENV_HOOK_PREFIXES.items():
        if name.startswith(prefix):
            return why
    return None


def is_env_hook(name: str) -> bool:
    return env_hook_reason(name) is not None
