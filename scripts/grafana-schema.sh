#!/usr/bin/env bash
# Vendor Grafana's own dashboard schema into tests/data/grafana/ as JSON Schema, so the
# dashboard in grafana/ is checked against it without a Grafana server
# (tests/unit/test_grafana_dashboard.py; the source and why: tests/data/grafana/README.md).
#
# Grafana generates TypeScript types for its dashboard JSON model and its panels' options
# from its CUE kinds and publishes them in the npm package @grafana/schema;
# ts-json-schema-generator turns those types into JSON Schema. Needs node and npm.
set -euo pipefail

GRAFANA_SCHEMA_VERSION=13.2.3
GENERATOR_VERSION=2.4.0

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$repo/tests/data/grafana"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
cd "$work"
npm install --silent --no-audit --no-fund \
  "@grafana/schema@$GRAFANA_SCHEMA_VERSION" "ts-json-schema-generator@$GENERATOR_VERSION"

gen() {  # <types file under dist/types/raw/> <type> <output file>
  node_modules/.bin/ts-json-schema-generator --no-type-check \
    --path "node_modules/@grafana/schema/dist/types/raw/$1" --type "$2" -o "$out/$3"
}
gen dashboard/x/types.gen.d.ts Dashboard dashboard.schema.json
gen composable/timeseries/panelcfg/x/types.gen.d.ts Options timeseries-options.schema.json
gen composable/timeseries/panelcfg/x/types.gen.d.ts FieldConfig timeseries-fieldconfig.schema.json
gen composable/stat/panelcfg/x/types.gen.d.ts Options stat-options.schema.json
echo "wrote $out/*.schema.json from @grafana/schema $GRAFANA_SCHEMA_VERSION"
