// pause: the sandbox container of every pod on the real node of `make cluster
// REAL_NODE=1`. Like kubernetes' build/pause/linux/pause.c: hold the pod's namespaces,
// reap orphaned children (it is PID 1 when the pod shares its PID namespace), and exit
// on SIGINT/SIGTERM. Built here so that nothing is pulled from a registry.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
