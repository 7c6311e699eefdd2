//go:build tools

// Package tools records the command this module builds, so `go mod tidy` keeps it:
// metrics-server, which serves metrics.k8s.io for `make cluster METRICS=1`
// (hack/metrics.sh). A module of its own, so that its go.sum never changes hack/kube's
// and invalidates the control plane's cached build.
package tools

import (
	_ "sigs.k8s.io/metrics-server/cmd/metrics-server"
)
