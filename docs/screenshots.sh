#!/usr/bin/env bash
# Regenerate the screenshots that docs/inspector.md shows, from a fresh temporary home, so
# that no path of the machine that made them appears in them.
#
#   bash docs/screenshots.sh          (from a checkout set up with the README's test command)
#
# Needs Chromium and chromedriver (scripts/system-deps.sh installs them) and the .venv of
# the checkout (PYTHON=... to use another interpreter). Emoji render only when an emoji font
# is installed (Debian: fonts-noto-color-emoji), or found in SCREENSHOT_FONTS=DIR.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$repo/.venv/bin/python}
bin=$(dirname "$py")
chromium=$(command -v chromium || command -v chromium-browser)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

export HOME=$work/home
mkdir -p "$HOME/project" "$work/shots"
if [ -n "${SCREENSHOT_FONTS:-}" ]; then
  cp -r "$SCREENSHOT_FONTS" "$HOME/.fonts"
fi

# 1. The inspector, live: the browser tests save their screenshots.
(cd "$repo" && SSE_PROXY_SCREENSHOTS=$work/shots "$py" -m pytest -q -p no:cacheprovider \
  tests/inspect/test_browser.py -k inspector)
cp "$work/shots/inspector-list.png" "$work/shots/inspector-stream.png" "$repo/docs/"

# 2. A test-client report, as a user gets it: their client, in their project.
cat >"$HOME/project/stream.py" <<'PY'
"""A client with the classic bug: it decodes each read on its own."""

import os
import sys
import urllib.request

request = urllib.request.Request(
    os.environ["SSE_PROXY_STREAM_URL"],
    data=os.environ["SSE_PROXY_STREAM_BODY"].encode(),
    headers={"content-type": "application/json"},
)
pending = ""
with urllib.request.urlopen(request) as response:
    while chunk := response.read1(65536):
        pending += chunk.decode("utf-8", errors="replace")  # the bug
        *frames, pending = pending.split("\n\n")
        for frame in frames:
            data = [line[5:].removeprefix(" ") for line in frame.split("\n") if line.startswith("data:")]
            if data:
                sys.stdout.write("\n".join(data))
PY
cut=$("$py" -c 'from sse_proxy.tools import fixtures
data = fixtures.clean_stream("text", fixtures.SHORT_TOKENS)
print(data.index("\N{FOX FACE}".encode()) + 2)')
status=0
(cd "$HOME/project" && PATH="$bin:$PATH" sse-proxy test-client --dialect text \
  --only "cut:$cut" --html report.html -- python stream.py >/dev/null) || status=$?
if [ "$status" -ne 1 ]; then
  echo "screenshots.sh: expected the buggy client to fail (exit 1), got $status" >&2
  exit 1
fi
"$chromium" --headless --no-sandbox --disable-gpu --disable-background-networking \
  --hide-scrollbars --window-size=1280,1400 --screenshot="$work/shots/report.png" \
  "file://$HOME/project/report.html" 2>/dev/null
cp "$work/shots/report.png" "$repo/docs/report.png"
echo "docs/inspector-list.png docs/inspector-stream.png docs/report.png written"
