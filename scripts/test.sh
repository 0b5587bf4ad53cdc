#!/usr/bin/env bash
# The whole suite: types, lint, node:test files, then the Python SDK's tests.
# Both test steps run even when the first fails, and the failures are
# repeated at the end, so the tail of a long log names what broke.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== typecheck"; npx tsc --noEmit -p tsconfig.json
echo "== lint"; npx biome lint .
mapfile -t files < <(find test shared coordinator agent cli -name '*.test.ts' -not -path '*/node_modules/*' | sort)
log="$(mktemp -t berth-node-tests.XXXXXX)"
trap 'rm -f "$log"' EXIT
echo "== node tests (${#files[@]} files)"
node_status=0
node --import tsx --test --test-concurrency="${BERTH_TEST_CONCURRENCY:-3}" --test-timeout=600000 "${files[@]}" 2>&1 |
  tee "$log" || node_status=$?
echo "== python sdk tests"
python_status=0
python3 -m unittest discover -s sdk/python/tests -t sdk/python -v || python_status=$?
if [ "$node_status" -ne 0 ]; then
  echo "== failed node tests (exit $node_status)"
  # Each failing test with the start of its TAP diagnostics.
  grep -n -A 24 -E '^[[:space:]]*not ok ' "$log" | head -n 400 || true
fi
[ "$python_status" -eq 0 ] || echo "== python sdk tests failed (exit $python_status)"
[ "$node_status" -eq 0 ] && [ "$python_status" -eq 0 ]
