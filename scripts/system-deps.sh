#!/usr/bin/env bash
# System packages the test suite needs besides Python ones, installed when missing:
# promtool (Debian's prometheus package) for the alerting rules' unit tests in deploy/,
# Chromium and its driver for the browser tests in tests/inspect/ and for test-client
# --browser chromium, Firefox ESR for test-client --browser firefox, node and npm for the
# JavaScript clients and recipes, curl (a real client sending Expect: 100-continue in
# tests/server/test_expect.py), nginx (a control gateway of test-gateway's tests and of the
# gateway matrix, tests/tools/test_testgateway.py). A missing one is
# installed with apt-get (as root, or with sudo); when that is impossible this fails
# loudly: the tests that need them are never skipped.
set -euo pipefail
apt_install() {
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "system-deps: apt-get is not available; install $* by hand, then run again" >&2
        exit 1
    fi
    echo "system-deps: installing $* (apt-get)" >&2
    export DEBIAN_FRONTEND=noninteractive
    if ! { $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends "$@"; } >&2; then
        echo "system-deps: apt-get could not install $*; failing" >&2
        exit 1
    fi
}
command -v promtool >/dev/null 2>&1 || apt_install prometheus
# node and npm for the JavaScript clients and recipes (tests/tools/test_javascript.py)
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    apt_install nodejs npm
fi
command -v curl >/dev/null 2>&1 || apt_install curl
# nginx-light (Debian's smallest nginx, in /usr/sbin): the tests run their own, in the
# foreground on free ports, whatever daemon the package starts
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || apt_install nginx-light
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    apt_install chromium chromium-driver
fi
# Firefox ESR: test-client --browser firefox drives it over WebDriver BiDi (no geckodriver)
command -v firefox-esr >/dev/null 2>&1 || command -v firefox >/dev/null 2>&1 || apt_install firefox-esr
command -v promtool >/dev/null 2>&1 || { echo "system-deps: promtool still missing" >&2; exit 1; }
command -v firefox-esr >/dev/null 2>&1 || command -v firefox >/dev/null 2>&1 || { echo "system-deps: firefox still missing" >&2; exit 1; }
command -v chromedriver >/dev/null 2>&1 || { echo "system-deps: chromedriver still missing" >&2; exit 1; }
command -v node >/dev/null 2>&1 || { echo "system-deps: node still missing" >&2; exit 1; }
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || { echo "system-deps: nginx still missing" >&2; exit 1; }
# the JavaScript recipes' own npm dependencies (vitest, pinned), into docs/javascript
bash "$(dirname "$0")/js-deps.sh"
