#!/usr/bin/env bash
# The npm package as a user gets it: `npm pack`, then `npm install -g
# --prefix` into a clean prefix, then that `berth`: --help, `berth up` (a
# whole cluster, containers included), `berth agent list`, `berth agent ps`
# without --socket (the agent of `berth up`), `berth deploy` of an endpoint,
# a call to it with curl, `berth deployment list --json`, Ctrl-C. Too slow
# for `npm test` (the install compiles better-sqlite3 and node-pty when no
# prebuilt binary can be fetched); run it as root after changing the build
# or the package's files (docs/install.md, "Checking the package").
# Usage: bash scripts/check-pack.sh [--python-rootfs DIR] [--keep]
#   --python-rootfs DIR  berth up's default image from this rootfs (default: the
#                        test cache's, /var/cache/berth-test/rootfs-bookworm-python3,
#                        when present; else berth up builds one with debootstrap)
#   --keep               leave the work directory (prefix, logs) for a look
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

rootfs=/var/cache/berth-test/rootfs-bookworm-python3
keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --python-rootfs) rootfs="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    *) echo "check-pack: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "check-pack: run as root (berth up's agent runs containers)" >&2; exit 2; }

work="$(mktemp -d /tmp/berth-check-pack-XXXXXX)"
prefix="$work/prefix"
mkdir -p "$work/home" "$work/app"
net="bp$((RANDOM % 1000))"
third=$((RANDOM % 200 + 20))
up_pid=""

step() { printf '\n== %s (%ss)\n' "$1" "$SECONDS"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

cleanup() {
  local rc=$?
  if [ -n "$up_pid" ]; then
    # Runner containers first, through the agent (as test/helpers/berth-up.ts does), then Ctrl-C.
    for id in $(berth agent ps --all --json 2>/dev/null | python3 -c 'import json,sys; [print(c["id"]) for c in json.load(sys.stdin)]' 2>/dev/null); do
      berth agent stop --rm --grace 1 "$id" >/dev/null 2>&1 || true
    done
    kill -INT -- "-$up_pid" 2>/dev/null || true
    for _ in $(seq 60); do kill -0 -- "-$up_pid" 2>/dev/null || break; sleep 1; done
    kill -KILL -- "-$up_pid" 2>/dev/null || true
  fi
  (cd "$repo" && node --import tsx --input-type=module -e "
    import { cleanupNetworkByPrefix } from './agent/network/index.ts';
    import { resolveAgentOptions } from './agent/options.ts';
    await cleanupNetworkByPrefix(resolveAgentOptions({ networkPrefix: '$net' }).network);") || true
  if [ "$rc" != 0 ] && [ -f "$work/up.log" ]; then echo "--- berth up's output:"; tail -50 "$work/up.log"; fi
  if [ "$keep" = 1 ]; then echo "kept $work"; else rm -rf "$work"; fi
  if [ "$rc" = 0 ]; then echo "check-pack: OK (${SECONDS}s)"; else echo "check-pack: FAILED (exit $rc)" >&2; fi
}
trap cleanup EXIT

step "npm pack (builds the bundle)"
npm pack --pack-destination "$work" >"$work/pack.log"
tgz="$(ls "$work"/berth-*.tgz)"
ls -l "$tgz"

step "npm install -g --prefix $prefix"
npm install -g --prefix "$prefix" --no-audit --no-fund "$tgz"
export PATH="$prefix/bin:$PATH"
# From here on a fresh home: the cluster's profile and config are this check's own.
# (npm above kept the real one: its cache and node-gyp's headers live there.)
export HOME="$work/home" SERVICE_TOKEN="" BERTH_URL="" BERTH_PROFILE="" BERTH_CONFIG="" BERTH_AGENT_SOCKET=""
[ "$(command -v berth)" = "$prefix/bin/berth" ] || { echo "berth is not the installed one: $(command -v berth)" >&2; exit 1; }

step "berth --help"
start=$(date +%s%N)
berth --help >"$work/help.txt"
echo "berth --help: $((($(date +%s%N) - start) / 1000000)) ms (one run; bench/cli measures it properly)"
grep -q "^Usage: berth" "$work/help.txt"
berth --version

step "berth up"
rootfs_args=()
[ -e "$rootfs/usr/bin/python3" ] && rootfs_args=(--python-rootfs "$rootfs")
setsid berth up --data-dir "$work/data" --port "$(free_port)" --nats-port "$(free_port)" \
  --grpc-port "$(free_port)" --network-prefix "$net" --subnet4 "10.$third.0.0/24" \
  --subnet6 "fd00:b17:$third::/64" "${rootfs_args[@]}" >"$work/up.log" 2>&1 &
up_pid=$!
for _ in $(seq 600); do
  grep -q "Press Ctrl-C to stop." "$work/up.log" 2>/dev/null && break
  kill -0 "$up_pid" 2>/dev/null || { echo "berth up exited" >&2; exit 1; }
  sleep 1
done
grep -q "Press Ctrl-C to stop." "$work/up.log" || { echo "berth up was not ready in 10 minutes" >&2; exit 1; }
grep -E "URL:|agent:" "$work/up.log"
url="$(sed -n 's/^ *URL: *//p' "$work/up.log" | head -1)"
token="$(sed -n 's/^ *admin token: *//p' "$work/up.log" | head -1)"

step "berth agent list / berth agent ps (no --socket)"
berth agent list
berth agent ps --all

step "berth deploy app.py:hello"
cat >"$work/app/app.py" <<'EOF'
from berth import endpoint

@endpoint(cpu=0.5, memory=128)
def hello(name: str):
    return {"hello": name}
EOF
(cd "$work/app" && berth deploy app.py:hello) | tee "$work/deploy.txt"
answer="$(curl -sS --fail-with-body --max-time 300 -X POST "$url/endpoint/hello" \
  -H "Authorization: Bearer $token" -H "Content-Type: application/json" -d '{"name": "pack"}')"
echo "curl: $answer"
[ "$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["hello"])' "$answer")" = pack ]
berth deployment list --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d and d[0]["name"] == "hello", d; print(len(d), "deployment(s)")'
