//go:build tools

// Package tools records the commands this module builds, so `go mod tidy` keeps them.
// The kubelet of `make cluster REAL_NODE=1` (hack/node.sh); a module of its own, so that
// its go.sum never changes hack/kube's and invalidates the control plane's cached build.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kubelet"
)
