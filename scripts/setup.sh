#!/usr/bin/env bash
# Create ./.venv (if missing) and install txnsim with its test tools into it. Idempotent:
# reinstalls only when pyproject.toml, the set of top-level packages (an editable install maps
# the packages that existed when it was made) or what setup.py compiles changed. Then the tools
# some tests drive from outside Python, each only when missing: chromium, kcat, the Node.js clients.
set -euo pipefail
cd "$(dirname "$0")/.."
# setup.py compiles the three per-record walks (the nodes' framing check, every reader's record decoding, the
# producer's record encoding) with mypyc when a C compiler is present (without one they run interpreted,
# slower); install gcc (as root) only when no compiler is there.
if ! command -v cc >/dev/null 2>&1 && ! command -v gcc >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get install -y -qq gcc >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq gcc; }
  else
    echo "note: no C compiler (apt-get install gcc as root); record framing and decoding will run interpreted" >&2
  fi
fi
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.txnsim-installed
compiled_sources="partitions/framing.py proto/record_decoding.py proto/record_encoding.py"
wanted="$(cat pyproject.toml setup.py $compiled_sources; ls -d */__init__.py 2>/dev/null | sort)"
# proto.compiled runs a module's source, not its build, once the source is newer (an edit, a checkout):
# rebuild then too, even if its content is what was built
stale_build=""
for source in $compiled_sources; do
  for built in "${source%.py}".*.so; do
    if [ -e "$built" ] && [ "$source" -nt "$built" ]; then stale_build=1; fi
  done
done
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$wanted" ] || [ -n "$stale_build" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet --config-settings editable_mode=lenient -e '.[test]'
  printf '%s' "$wanted" > "$stamp"
fi
# The web view's browser tests drive Debian's headless chromium; install it (as root) only when missing.
if ! command -v chromedriver >/dev/null 2>&1 || ! { command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; }; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq chromium chromium-driver; }
  else
    echo "note: chromium and chromium-driver are missing (apt-get install chromium chromium-driver as root); the web view's browser tests will be skipped" >&2
  fi
fi
# The kcat tests drive Debian's kcat (librdkafka's command-line client); install it (as root) only when missing.
if ! command -v kcat >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get install -y -qq kcat >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq kcat; }
  else
    echo "note: kcat is missing (apt-get install kcat as root); the kcat tests will be skipped" >&2
  fi
fi
# Replicated clusters keep their controller's state in ZooKeeper (Debian's zookeeper package, 3.8, run on
# the Java already here); install it (as root) only when missing.
if [ ! -f /usr/share/java/zookeeper.jar ] && [ -z "${ZOOKEEPER_HOME:-}" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get install -y -qq zookeeper >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq zookeeper; }
  else
    echo "note: ZooKeeper is missing (apt-get install zookeeper as root, or set ZOOKEEPER_HOME); the ZooKeeper tests will be skipped" >&2
  fi
fi
# Hosts of their own on one machine: a replicated cluster's nodes can run in Linux network namespaces
# (iproute2's `ip netns`), whose links are cut with nftables (Debian's nftables package); install it (as root)
# only when missing. Without root or nft those tests skip and say why.
if ! command -v nft >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get install -y -qq nftables >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq nftables; }
  else
    echo "note: nft is missing (apt-get install nftables as root); the network-partition tests will be skipped" >&2
  fi
fi
# The Node.js client tests run KafkaJS and RocketMQ's Node.js client, pinned by tests/clients/node/package-lock.json:
# npm ci there only when the lock changed since the last install (its copy in node_modules is the stamp).
# --ignore-scripts: the one install script (protobufjs's postinstall) only warns about version schemes.
node_dir=tests/clients/node
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  node_stamp=$node_dir/node_modules/.txnsim-installed
  if ! cmp -s "$node_dir/package-lock.json" "$node_stamp"; then
    (cd "$node_dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
    cp "$node_dir/package-lock.json" "$node_stamp"
  fi
else
  echo "note: node and npm are missing (Node.js 20); the KafkaJS and RocketMQ Node.js client tests will be skipped" >&2
fi
