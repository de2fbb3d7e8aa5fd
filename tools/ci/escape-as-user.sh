#!/usr/bin/env bash
# The T2 Linux escape suite, twice: as root, then as an unprivileged user this script creates.
#
# Run as root from the repository root (`.ci/run` calls it; CI calls it with sudo). Both
# runs must pass; each prints its summary line ("escape suite as ...: N probes passed, ...").
# `--user-only` skips the root run (for a caller that has just run the suite as root, e.g.
# through `uv run nox`, whose `escape` session does exactly that).
#
#   * installs what the probes need when it is missing: bubblewrap, libseccomp, gcc, the
#     system python3 (/usr/bin/python3 runs the probes inside the jail) with venv support;
#   * root run: the workspace's own environment (`uv run`), cgroup ceilings required
#     (PANDAY_ESCAPE_REQUIRE_CGROUPS=1 unless set otherwise);
#   * builds the setuid-root helper the unprivileged run's setuid probe needs (only root can);
#   * unprivileged run: user $ESCAPE_USER (created if missing) gets a copy of the tree and
#     its own environment built with the system python (a root-only interpreter such as
#     pyenv's under /root is not executable by another user), its own uv and uv cache.
#     Ceilings this user cannot hold are asserted to be refused by name.
set -euo pipefail

ESCAPE_USER=${ESCAPE_USER:-panday-escape}
ROOT_RUN=1
JUNIT=""
SELECT=""
while (($#)); do
  case $1 in
    --user-only) ROOT_RUN=0 ;;
    --junit) JUNIT=$2; shift ;;
    # A part of the suite, as pytest arguments split on spaces (a developer checking one
    # probe file as both users: --select "packages/tier_linux/tests/escape/test_x.py").
    --select) SELECT=$2; shift ;;
    *) echo "escape-as-user: unknown argument $1 (known: --user-only, --junit PATH, --select ARGS)" >&2; exit 2 ;;
  esac
  shift
done
SUITE=packages/tier_linux/tests/escape
SYSTEM_PYTHON=${SYSTEM_PYTHON:-/usr/bin/python3}

if [[ $(id -u) -ne 0 ]]; then
  echo "escape-as-user: run as root (it creates a user and a setuid helper)" >&2
  exit 2
fi
if [[ ! -d $SUITE ]]; then
  echo "escape-as-user: run from the repository root ($SUITE not found)" >&2
  exit 2
fi
REPO=$(pwd)

need=()
command -v bwrap >/dev/null || need+=(bubblewrap)
{ /sbin/ldconfig -p 2>/dev/null || ldconfig -p; } | grep -q 'libseccomp\.so\.2' || need+=(libseccomp2)
command -v gcc >/dev/null || need+=(gcc libc6-dev)
[[ -x $SYSTEM_PYTHON ]] || need+=(python3)
"$SYSTEM_PYTHON" -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)
if ((${#need[@]})); then
  echo "escape-as-user: installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

status=0

if ((ROOT_RUN)); then
  echo "=== escape suite as root ==="
  PANDAY_ESCAPE_REQUIRE_CGROUPS=${PANDAY_ESCAPE_REQUIRE_CGROUPS:-1} \
    uv run --frozen pytest ${SELECT:-"$SUITE"} -q -p no:cacheprovider || status=1
fi

# The unprivileged user, its home (the suite plants a canary there) and its copy of the tree.
if ! id "$ESCAPE_USER" >/dev/null 2>&1; then
  useradd --create-home --shell /bin/bash "$ESCAPE_USER"
fi
USER_HOME=$(getent passwd "$ESCAPE_USER" | cut -d: -f6)
# A fresh directory per run (two runs at once must not delete each other's tree), removed
# on exit.
WORK=$(mktemp -d "$USER_HOME/panday-escape.XXXXXX")
chmod 0755 "$WORK"
mkdir -p "$WORK/src" "$WORK/bin"
tar -C "$REPO" --exclude=./.venv --exclude=./.nox --exclude=./.git --exclude='*/__pycache__' \
  --exclude=./.pytest_cache --exclude=./.ruff_cache -cf - . | tar -C "$WORK/src" -xf -

# uv for the user: the binary running this script may sit under root's home.
UV_BIN=$(uv run --no-project --quiet sh -c 'printf %s "$UV"')
cp "$UV_BIN" "$WORK/bin/uv"
chown -R "$ESCAPE_USER:" "$WORK"

# The setuid-root helper: built here, because only root can make a file setuid root.
SUID_DIR=$(mktemp -d /var/tmp/panday-escape-suid.XXXXXX)
chmod 0755 "$SUID_DIR"
gcc -O1 -o "$SUID_DIR/suid-helper" "$SUITE/probes/suid_helper.c"
chmod 4755 "$SUID_DIR/suid-helper"
trap 'rm -rf "$SUID_DIR" "$WORK"' EXIT

# What the user's uv needs to reach the package index as root's does (proxies, CAs).
passthrough=()
for var in SSL_CERT_FILE SSL_CERT_DIR UV_NATIVE_TLS UV_INDEX_URL UV_DEFAULT_INDEX UV_EXTRA_INDEX_URL \
  HTTP_PROXY HTTPS_PROXY NO_PROXY http_proxy https_proxy no_proxy; do
  [[ -n ${!var:-} ]] && passthrough+=("$var=${!var}")
done

echo "=== escape suite as unprivileged user $ESCAPE_USER (uid $(id -u "$ESCAPE_USER")) ==="
runuser -u "$ESCAPE_USER" -- env -i "${passthrough[@]}" \
  HOME="$USER_HOME" \
  PATH="$WORK/bin:/usr/local/bin:/usr/bin:/bin" \
  LANG=C.UTF-8 \
  UV_CACHE_DIR="$USER_HOME/.cache/panday-escape-uv" \
  UV_PYTHON="$SYSTEM_PYTHON" \
  UV_PYTHON_DOWNLOADS=never \
  UV_PROJECT_ENVIRONMENT="$WORK/venv" \
  PANDAY_ESCAPE_SUID_HELPER="$SUID_DIR/suid-helper" \
  PANDAY_ESCAPE_REQUIRE_CGROUPS=0 \
  bash -c 'cd "$1/src" && uv sync --frozen --quiet --no-default-groups --group test && uv run --frozen --no-default-groups --group test pytest $2 -q -ra -p no:cacheprovider --junitxml "$1/junit-user.xml"' \
  _ "$WORK" "${SELECT:-$SUITE}" || status=1

# The unprivileged run's per-probe results, for the run report (`--junit PATH`).
if [[ -n $JUNIT && -f $WORK/junit-user.xml ]]; then
  cp "$WORK/junit-user.xml" "$JUNIT"
fi

if ((status)); then
  echo "escape-as-user: FAILED (see the runs above)" >&2
else
  echo "escape-as-user: both runs passed"
fi
exit "$status"
