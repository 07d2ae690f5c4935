#!/usr/bin/env bash
# Install the Debian packages the test suite needs to build and run, only those missing:
#   libmariadb-dev, pkg-config  to build mysqlclient from source
#   faketime                    for tests that shift the clock of a subprocess
#   chromium, chromium-driver   headless browser and its WebDriver for tests/operator/browser (Selenium is told to
#                               use /usr/bin/chromedriver and never downloads one)
#   pgbouncer                   the sql-pgbouncer row: PostgreSQL through PgBouncer in transaction pooling
#                               (tests/support/pgbouncer.py starts its own; the package's service is not used)
# Quiet when nothing is missing or the install succeeds; prints apt's output when it fails.
set -euo pipefail

PACKAGES=(libmariadb-dev pkg-config faketime chromium chromium-driver pgbouncer)

missing=()
for pkg in "${PACKAGES[@]}"; do
    if ! dpkg -s "$pkg" 2>/dev/null | grep -q '^Status: install ok installed'; then
        missing+=("$pkg")
    fi
done
((${#missing[@]})) || exit 0

if [[ $(id -u) -eq 0 ]]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo -n)
else
    echo "system-deps.sh: missing Debian packages: ${missing[*]} (run as root: apt-get install ${missing[*]})" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
apt_install() { "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null >>"$log" 2>&1; }

# Try with the package lists as they are; refresh them only when that fails.
if ! apt_install; then
    if ! { "${SUDO[@]}" apt-get update -q </dev/null >>"$log" 2>&1 && apt_install; }; then
        cat "$log" >&2
        echo "system-deps.sh: could not install: ${missing[*]}" >&2
        exit 1
    fi
fi
