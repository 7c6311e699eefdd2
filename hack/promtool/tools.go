//go:build tools

// Package tools records the command this module builds, so `go mod tidy` keeps it:
// promtool, which checks and tests manifests/monitoring/'s alerts (hack/promtool.sh).
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
