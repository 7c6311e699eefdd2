#!/usr/bin/env bash
# Regenerate tests/unit/plugins/dynamic_resources/testdata from upstream's own test
# tables (issue 28): k8s.io/dynamic-resource-allocation's shared allocator table
# (structured/internal/allocatortesting), run against its "incubating" allocator (the
# one kube-scheduler v1.37 uses by default), and the DRA CEL table (cel/compile_test.go).
# Each case's inputs and upstream's actual result are written as JSON; upstream's test
# asserts that result equals its expectation, so a case only lands here when it passed.
#
#   hack/dra-oracle.sh        # needs Go and the module in the cache (hack/build.sh puts it there)
#
# Works on a throwaway copy of the module in a temp dir; nothing of upstream is kept
# but the JSON. Offline: the test-only modules whose pinned versions the cache lacks are
# replaced by the cached ones (gomega, testify).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out="$here/../tests/unit/plugins/dynamic_resources/testdata"
modcache=$(go env GOMODCACHE)
src="$modcache/k8s.io/dynamic-resource-allocation@v0.37.1"
[[ -d $src ]] || { echo "dra-oracle: $src is missing; run hack/build.sh first" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp"; rm -rf "$tmp"' EXIT
cp -r "$src" "$tmp/mod" && chmod -R u+w "$tmp/mod"
cd "$tmp/mod"
cached() { ls "$modcache/$1" 2>/dev/null | sed -n "s/^$2@//p" | sort -V | tail -1; }
go mod edit -replace "github.com/onsi/gomega=github.com/onsi/gomega@$(cached github.com/onsi gomega)"
go mod edit -replace "github.com/stretchr/testify=github.com/stretchr/testify@$(cached github.com/stretchr testify)"

# The allocator table: one JSON line per case, from a hook called right after Allocate.
t=structured/internal/allocatortesting
grep -q 'g.Expect(results).To(gomega.ConsistOf(tc.expectResults...))' $t/allocator_testing.go
sed -i 's|^\(\t*\)g.Expect(results).To(gomega.ConsistOf(tc.expectResults...))|\1oracleDump(name, tc, results, err)\n&|' $t/allocator_testing.go
cat > $t/oracle_dump.go <<'GO'
package allocatortesting

import (
	"encoding/json"
	"os"
	"sort"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
)

var oracleMu sync.Mutex

func oracleDump(name string, tc AllocatorTestCase, results []resourceapi.AllocationResult, err error) {
	oracleMu.Lock()
	defer oracleMu.Unlock()
	var allocated, shared []string
	for _, d := range tc.allocatedDevices {
		allocated = append(allocated, d.String())
	}
	for d := range tc.allocatedSharedDeviceIDs {
		shared = append(shared, d.String())
	}
	sort.Strings(shared)
	capacity := map[string]map[string]string{}
	for id, cc := range tc.allocatedCapacityDevices {
		m := map[string]string{}
		for n, q := range cc {
			m[string(n)] = q.String()
		}
		capacity[id.String()] = m
	}
	var claims []*resourceapi.ResourceClaim
	for _, c := range tc.claimsToAllocate {
		claims = append(claims, c.ResourceClaim)
	}
	var features []string
	for f := range tc.features.Set() {
		features = append(features, f)
	}
	sort.Strings(features)
	var node *v1.Node = tc.node
	if node == nil {
		node = nodeForOracle()
	}
	errText := ""
	if err != nil {
		errText = err.Error()
	}
	b, jerr := json.Marshal(map[string]any{
		"name": name, "features": features, "classes": tc.classes, "claims": claims,
		"slices": tc.slices, "node": node, "allocatedDevices": allocated,
		"allocatedShared": shared, "aggregatedCapacity": capacity, "results": results,
		"error": errText, "hasError": err != nil,
		"expectNumAllocateOne": tc.expectNumAllocateOneInvocations,
	})
	if jerr != nil {
		panic(jerr)
	}
	f, ferr := os.OpenFile(os.Getenv("DRA_ORACLE_OUT"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if ferr != nil {
		panic(ferr)
	}
	defer f.Close()
	_, _ = f.Write(append(b, '\n'))
}

func nodeForOracle() *v1.Node { return node(node1, region1) }
GO

# The CEL table: all cases in one JSON array.
cat > cel/zz_oracle_dump_test.go <<'GO'
package cel

import (
	"encoding/json"
	"os"
	"sort"
	"testing"
)

func TestOracleDump(t *testing.T) {
	var out []map[string]any
	for name, tc := range testcases {
		rec := map[string]any{
			"name": name, "expression": tc.expression, "driver": tc.driver,
			"allowMultipleAllocations": tc.allowMultipleAllocations,
			"attributes": tc.attributes, "capacity": tc.capacity,
			"expectCompileError": tc.expectCompileError,
			"expectMatchError": tc.expectMatchError, "expectMatch": tc.expectMatch,
		}
		if tc.features != nil {
			rec["features"] = tc.features
		}
		if tc.envType != nil {
			rec["envType"] = string(*tc.envType)
		}
		out = append(out, rec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i]["name"].(string) < out[j]["name"].(string) })
	b, err := json.MarshalIndent(out, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(os.Getenv("DRA_ORACLE_OUT"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}
GO
export GOFLAGS=-mod=mod GOPROXY=off
rm -f "$tmp/allocator.jsonl"
DRA_ORACLE_OUT="$tmp/allocator.jsonl" go test ./structured/internal/incubating/ -run '^TestAllocator$' -count=1
DRA_ORACLE_OUT="$tmp/cel.json" go test ./cel/ -run '^TestOracleDump$' -count=1
sort "$tmp/allocator.jsonl" > "$out/allocator_cases.jsonl"
cp "$tmp/cel.json" "$out/cel_cases.json"
echo "dra-oracle: $(wc -l < "$out/allocator_cases.jsonl") allocator cases, cel cases in $out" >&2
