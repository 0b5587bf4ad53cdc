#!/usr/bin/env bash
# The whole suite: types, lint, node:test files, then the Python SDK's tests.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== typecheck"; npx tsc --noEmit -p tsconfig.json
echo "== lint"; npx biome lint .
mapfile -t files < <(find test shared coordinator agent cli -name '*.test.ts' -not -path '*/node_modules/*' | sort)
echo "== node tests (${#files[@]} files)"
node --import tsx --test --test-concurrency="${BERTH_TEST_CONCURRENCY:-3}" --test-timeout=600000 "${files[@]}"
echo "== python sdk tests"
python3 -m unittest discover -s sdk/python/tests -t sdk/python -v
