//go:build tools

// Package tools records the test binary this module builds, so `go mod tidy` keeps
// test/e2e's dependencies.
package tools

import (
	_ "k8s.io/kubernetes/test/e2e"
)
