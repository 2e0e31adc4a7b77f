#!/usr/bin/env bash
# Install Debian's Chromium for the headless browser tests (tests/browser/) when
# /usr/bin/chromium is missing. Idempotent: a quick no-op when it is installed.
# The tests drive it with Playwright's Python package via executable_path, so no
# browser is ever downloaded by a test tool (`playwright install` is never run).
set -euo pipefail

CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
if [ -x "$CHROMIUM" ]; then
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "[install_browser] $CHROMIUM missing and no apt-get here: browser tests will be skipped" >&2
  exit 0
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO=(sudo -n)
  else
    echo "[install_browser] $CHROMIUM missing, not root and no password-less sudo: browser tests will be skipped" >&2
    exit 0
  fi
fi

echo "[install_browser] installing Debian's chromium with apt-get ..."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# Wait for a dpkg lock held by another apt run rather than fail; bounded network retries.
apt_get=("${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q -y -o Dpkg::Use-Pty=0
         -o DPkg::Lock::Timeout=300 -o Acquire::Retries=3 -o Acquire::http::Timeout=60)
# Install from the package lists on the machine first; when that fails (no lists,
# or stale ones naming files the mirror no longer has), update them and retry.
if ! "${apt_get[@]}" install --no-install-recommends chromium >"$log" 2>&1; then
  "${apt_get[@]}" update >>"$log" 2>&1 || true
  if ! "${apt_get[@]}" install --no-install-recommends chromium >>"$log" 2>&1; then
    tail -n 20 "$log" >&2
    echo "[install_browser] apt-get could not install chromium: browser tests will be skipped" >&2
    exit 0
  fi
fi
"$CHROMIUM" --version || true
echo "[install_browser] done"
