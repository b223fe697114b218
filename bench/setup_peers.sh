#!/usr/bin/env bash
# Install the peer proxies of bench/bench_proxy.py (mitmproxy, LiteLLM's proxy), each into its
# own venv under bench/.peers-venv/ (git-ignored). They are heavy and pin conflicting versions
# of the same libraries (pyOpenSSL/cryptography), so they share neither the project's venv nor
# each other's; the bench finds bench/.peers-venv/{mitmproxy,litellm}/bin/{mitmdump,litellm}.
#   bash bench/setup_peers.sh            # or: python -m bench.bench_proxy --setup-peers
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="${PEERS_VENV:-$here/.peers-venv}"
python="${PYTHON:-python3}"
install() {  # install <venv name> <pip requirement...>
    local venv="$root/$1"
    shift
    [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q "$@"
}
# Each on its own: one failing to install must not cost the other.
install mitmproxy mitmproxy || echo "setup_peers: mitmproxy did not install" >&2
install litellm 'litellm[proxy]' || echo "setup_peers: litellm[proxy] did not install" >&2
ls "$root"/*/bin/mitmdump "$root"/*/bin/litellm 2>/dev/null || true
