// Package proxy defines what a service proxy does — prepare a lab's hosts
// and make each host translate new connections to a Service's address into
// connections to one of its backends, as service.Table says — and the
// Descriptor that binds a proxy kind (datapath/kind.Proxy) to an
// implementation. Proxies consume the service Table only: they never read
// Service YAML. Each host translates the connections its own endpoints
// open (a ClusterIP is translated on the client's host) and those that
// reach its node ports.
package proxy

import (
	"context"
	"fmt"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/service"
	"github.com/cnlab/cnlab/topology"
)

// Proxy balances a lab's Services.
type Proxy interface {
	// Setup prepares every host of the lab (its base chains or table,
	// sysctls); idempotent.
	Setup(ctx context.Context, lab *topology.Spec) error
	// Apply makes every host translate as t says, changing only what
	// differs from the previous Apply, in one atomic transaction per host:
	// a new connection sees either the old frontends or the new ones.
	// Connections already established keep their backend.
	Apply(ctx context.Context, lab *topology.Spec, t *service.Table) error
	// Describe returns the proxy's kernel state, per host name.
	Describe(ctx context.Context, lab *topology.Spec) (map[string]string, error)
}

// Descriptor binds a proxy kind to its implementation.
type Descriptor struct {
	Kind kind.Proxy
	New  func() Proxy
	// StateKind names the proxy's per-host state files
	// (change.StatePath), apart from any policy datapath's.
	StateKind kind.Kind
	// IPv4Only: the proxy serves IPv4 cluster IPs only; a Service with an
	// IPv6 family is refused (CheckFamilies) rather than left unserved.
	IPv4Only bool
}

// CheckFamilies refuses a table with an IPv6 frontend for a proxy that
// serves IPv4 only, naming the first such Service.
func CheckFamilies(d Descriptor, t *service.Table) error {
	if !d.IPv4Only || t == nil {
		return nil
	}
	for _, f := range t.Frontends {
		if f.Family() == 6 {
			return fmt.Errorf("Service %s has an IPv6 cluster IP (%s), but the %s service proxy serves IPv4 only: give the Service ipFamilies: [IPv4] and ipFamilyPolicy: SingleStack (the default on a lab whose primary family is IPv4)", f.Service, f.VIP, d.Kind)
		}
	}
	return nil
}
