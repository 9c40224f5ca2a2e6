// Package registry lists the service proxy implementations of this build,
// one descriptor each, and is the one place that constructs a proxy from
// its kind. The list is explicit (no init-time registration), and a test
// checks that every proxy kind of datapath/kind but none has exactly one
// implementation here.
package registry

import (
	"errors"
	"fmt"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/proxy"
	proxyebpf "github.com/cnlab/cnlab/proxy/ebpf"
	"github.com/cnlab/cnlab/proxy/iptables"
	"github.com/cnlab/cnlab/proxy/nftables"
	"github.com/cnlab/cnlab/service"
)

// ErrNone is returned for proxy none: the lab serves no Services.
var ErrNone = errors.New("the lab has no service proxy (services.proxy: none)")

// descriptors returns the implementations, in kind.Proxies' order.
func descriptors() []proxy.Descriptor {
	return []proxy.Descriptor{iptables.Descriptor, nftables.Descriptor, proxyebpf.Descriptor}
}

// New returns a proxy of kind p.
func New(p kind.Proxy) (proxy.Proxy, error) {
	for _, d := range descriptors() {
		if d.Kind == p {
			return d.New(), nil
		}
	}
	if p == kind.ProxyNone {
		return nil, ErrNone
	}
	return nil, fmt.Errorf("unknown service proxy %q (supported: %s)", p, kind.ProxyNames())
}

// CheckFamilies refuses a table proxy p cannot serve: an IPv6 frontend
// for a proxy that serves IPv4 only (proxy.CheckFamilies).
func CheckFamilies(p kind.Proxy, t *service.Table) error {
	for _, d := range descriptors() {
		if d.Kind == p {
			return proxy.CheckFamilies(d, t)
		}
	}
	return nil
}

// StateKind returns the name of proxy p's per-host state files
// (change.StatePath); false for none or an unknown kind.
func StateKind(p kind.Proxy) (kind.Kind, bool) {
	for _, d := range descriptors() {
		if d.Kind == p {
			return d.StateKind, true
		}
	}
	return "", false
}
