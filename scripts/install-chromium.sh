#!/usr/bin/env bash
# Installs Debian's Chromium for the browser tests when it is missing. Playwright drives this binary
# (executable_path=shutil.which("chromium")); we never download a browser build of Playwright's own.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then
  SUDO=sudo
else
  SUDO=
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
command -v chromium
