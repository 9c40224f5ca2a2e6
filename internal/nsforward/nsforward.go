// Package nsforward is a local cluster's API forwarder: the apiserver
// listens in the first node's network namespace, which the host cannot
// route to (cnlab adds no route or address to the host's). A process of
// cnlab's own binary (or of a test binary: testutil.Main calls MaybeRun)
// listens on the host's 127.0.0.1 and connects each client inside that
// namespace: a socket keeps the namespace it was created in. The
// kubeconfig handed to users names the host side.
package nsforward

import (
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"sync"
	"time"

	vns "github.com/vishvananda/netns"

	"github.com/cnlab/cnlab/internal/netns"
)

const (
	// Env holds the cluster's name in the forwarder's environment: the
	// marker cluster down finds it by.
	Env              = "CNLAB_CLUSTER_FORWARD"
	forwardListenEnv = "CNLAB_CLUSTER_FORWARD_LISTEN"
	forwardNetnsEnv  = "CNLAB_CLUSTER_FORWARD_NETNS"
	forwardToEnv     = "CNLAB_CLUSTER_FORWARD_TO"
)

// MaybeRun turns this process into a cluster's API forwarder when
// cluster up started it as one, and never returns then. The cnlab
// binary's main and testutil.Main call it first.
func MaybeRun() {
	name := os.Getenv(Env)
	if name == "" {
		return
	}
	err := forward(os.Getenv(forwardListenEnv), os.Getenv(forwardNetnsEnv), os.Getenv(forwardToEnv))
	log.Printf("cluster %s: forwarder: %v", name, err)
	os.Exit(1)
}

// Environ returns the environment that makes this binary the forwarder of
// cluster name: listen (host side) to to inside the namespace nsName.
func Environ(name, listen, nsName, to string) []string {
	return append(os.Environ(),
		Env+"="+name,
		forwardListenEnv+"="+listen,
		forwardNetnsEnv+"="+nsName,
		forwardToEnv+"="+to)
}

func forward(listen, nsName, to string) error {
	if listen == "" || nsName == "" || to == "" {
		return fmt.Errorf("forwarder: listen %q, netns %q, to %q: all three are needed", listen, nsName, to)
	}
	ns, err := netns.Open(nsName)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	log.Printf("forwarding %s to %s in netns %s", listen, to, nsName)
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go relay(c, ns, to)
	}
}

func relay(c net.Conn, ns vns.NsHandle, to string) {
	defer c.Close()
	var up net.Conn
	err := netns.DoHandle(ns, func() error {
		var err error
		up, err = net.DialTimeout("tcp", to, 5*time.Second)
		return err
	})
	if err != nil {
		log.Printf("dial %s: %v", to, err)
		return
	}
	defer up.Close()
	var wg sync.WaitGroup
	half := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}
	wg.Add(2)
	go half(up, c)
	go half(c, up)
	wg.Wait()
}
