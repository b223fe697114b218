#!/usr/bin/env bash
# The JavaScript recipes' own dependencies (docs/javascript: vitest, pinned in its
# package.json and package-lock.json), installed from npm into that folder when missing.
# Node itself comes from the machine (scripts/system-deps.sh installs it when missing).
set -euo pipefail
cd "$(dirname "$0")/../docs/javascript"
if [ -x node_modules/.bin/vitest ]; then
    exit 0
fi
command -v npm >/dev/null 2>&1 || { echo "js-deps: npm is missing" >&2; exit 1; }
echo "js-deps: npm ci in docs/javascript" >&2
npm ci --no-audit --no-fund --silent >&2
