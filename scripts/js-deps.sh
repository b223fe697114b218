#!/usr/bin/env bash
# The JavaScript dependencies, each folder pinned by its package.json and package-lock.json
# and installed from npm into it when missing: docs/javascript (the recipes: vitest),
# conformance (the Node clients of the conformance matrix, the MCP SDKs among them; two of
# them the CI subset in tests/tools/test_conformance_subset.py runs) and tests/tools/clients
# (eventsource-parser 3, a test subject of tests/tools/test_e2e_clients.py). Node itself
# comes from the machine (scripts/system-deps.sh installs it when missing).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
command -v npm >/dev/null 2>&1 || { echo "js-deps: npm is missing" >&2; exit 1; }
if [ ! -x "$root/docs/javascript/node_modules/.bin/vitest" ]; then
    echo "js-deps: npm ci in docs/javascript" >&2
    (cd "$root/docs/javascript" && npm ci --no-audit --no-fund --silent >&2)
fi
stamp="$root/conformance/node_modules/.sse-proxy-lock"
if [ ! -f "$stamp" ] || ! cmp -s "$stamp" "$root/conformance/package-lock.json"; then
    echo "js-deps: npm ci in conformance" >&2
    (cd "$root/conformance" && npm ci --no-audit --no-fund --silent >&2)
    cp "$root/conformance/package-lock.json" "$stamp"
fi
clients="$root/tests/tools/clients"
if [ ! -f "$clients/node_modules/.sse-proxy-lock" ] \
    || ! cmp -s "$clients/node_modules/.sse-proxy-lock" "$clients/package-lock.json"; then
    echo "js-deps: npm ci in tests/tools/clients" >&2
    (cd "$clients" && npm ci --no-audit --no-fund --silent >&2)
    cp "$clients/package-lock.json" "$clients/node_modules/.sse-proxy-lock"
fi
