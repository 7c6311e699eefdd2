// Command etcd is etcd's own server main, built as a module of ours: `go install
// go.etcd.io/etcd/server/v3` fails on the replace directives of etcd's go.mod.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
