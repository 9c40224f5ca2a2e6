// Command cnlab is a container-network datapath lab: it builds container
// networks out of network namespaces, enforces traffic policies through
// interchangeable datapaths and measures what each costs.
package main

import (
	"context"
	"github.com/cnlab/cnlab/internal/daemon"
	"github.com/cnlab/cnlab/internal/nsforward"
	"os"
	"os/signal"
	"syscall"

	"github.com/cnlab/cnlab/l7proxy"
)

func main() {
	// cnlab runs itself again as a host's L7 proxy (l7proxy.Push).
	l7proxy.MaybeRun()
	// ... and as a local cluster's API forwarder (cluster up).
	nsforward.MaybeRun()
	// ... and as a lab's flow recorder (lab.SetObserve).
	daemon.MaybeRun()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first Ctrl-C the command cleans up; a second one
		// kills it the default way.
		<-ctx.Done()
		stop()
	}()
	stopProfile := startCPUProfile()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stopProfile()
	stop()
	os.Exit(exitCode(err, os.Stderr))
}
