package lab

import (
	"context"
	"net/netip"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/nflog"
	"github.com/cnlab/cnlab/observe"
)

// netfilter listens on every host's NFLOG group, where the iptables and
// nftables datapaths' log rules send what the observe level asks for.
func (r *recorder) netfilter(ctx context.Context, run func(string, func(context.Context, func()) error) <-chan struct{}) []<-chan struct{} {
	var readies []<-chan struct{}
	dp := string(r.spec.Datapath)
	for _, h := range r.spec.Hosts {
		host := h.Name
		path := netns.Path(h.Netns)
		readies = append(readies, run("nflog on "+host, func(ctx context.Context, ready func()) error {
			return nflog.Listen(ctx, path, observe.NFLOGGroup, ready, func(p nflog.Packet) {
				pre, ok := observe.ParsePrefix(p.Prefix)
				if !ok {
					return
				}
				f := &observe.Flow{Time: p.Time.UTC(), Host: host, Datapath: dp, Verdict: pre.Verdict, Direction: pre.Direction,
					Hook: "FORWARD", TCPFlags: observe.TCPFlagNames(p.TCPFlags)}
				f.SetAddrs(p.Src, p.Dst, p.Proto)
				nfReason(f, pre, r.namer.Load())
				r.emit(f)
			}, func(n uint64) { r.lost(host, "nflog", n) })
		}))
	}
	return readies
}

// nfReason sets a netfilter flow's type, reason and rule from its log
// prefix.
func nfReason(f *observe.Flow, pre observe.Prefix, n *observe.Namer) {
	switch pre.Verdict {
	case observe.Dropped:
		f.Type = observe.TypeDrop
	default:
		f.Type = observe.TypeTrace
	}
	switch pre.ID {
	case "invalid":
		f.Reason = "invalid"
	case "l7":
		f.Reason = "l7-port-not-proxied"
	case "-":
		switch {
		case pre.Verdict == observe.Dropped:
			f.Reason = observe.ReasonPolicyDenied // the model names the isolating policy
		case pre.Verdict == observe.Redirected:
			f.Reason = observe.ReasonToProxy
		case pre.Direction == "":
			f.Reason = observe.ReasonNotIsolated
			f.Direction = "ingress"
		default:
			f.Reason = observe.ReasonPolicyAllowed
		}
	default:
		f.Origin = n.OriginOf(pre.ID)
		switch pre.Verdict {
		case observe.Dropped:
			f.Reason = observe.ReasonPolicyDenied
		case observe.Redirected:
			f.Reason = observe.ReasonToProxy
		default:
			f.Reason = observe.ReasonPolicyAllowed
		}
	}
}

// services follows conntrack's new entries on every host when the lab's
// Service proxy is netfilter's: a translated flow per new connection to
// a Service's frontend.
func (r *recorder) services(ctx context.Context, run func(string, func(context.Context, func()) error) <-chan struct{}) []<-chan struct{} {
	if px := r.spec.Services.Proxy; px != kind.ProxyIPTables && px != kind.ProxyNFTables {
		return nil
	}
	var readies []<-chan struct{}
	for _, h := range r.spec.Hosts {
		host := h.Name
		path := netns.Path(h.Netns)
		readies = append(readies, run("conntrack on "+host, func(ctx context.Context, ready func()) error {
			return nflog.ListenConntrack(ctx, path, ready, func(t nflog.Translation) {
				svc := r.frontend(t.Frontend, t.Proto)
				if svc == "" {
					return // not a Service's (an L7 redirect, a masquerade alone)
				}
				f := &observe.Flow{Time: t.Time.UTC(), Host: host, Verdict: observe.Translated, Type: observe.TypeService,
					Reason: observe.ReasonService, Hook: "conntrack", Service: svc, Frontend: t.Frontend.String()}
				f.SetAddrs(t.Src, t.Frontend, t.Proto)
				n := r.namer.Load()
				if b := n.Endpoint(t.Backend.Addr().String()); b != "" {
					f.Backend = b
				} else {
					f.Backend = t.Backend.String()
				}
				r.emit(f)
			}, func(n uint64) { r.lost(host, "conntrack", n) })
		}))
	}
	return readies
}

// frontend names the Service of a frontend address (cluster IP or a
// host's node port), "" if none: the lab's stored Services, read again
// when an address is unknown (a Service applied since).
func (r *recorder) frontend(ap netip.AddrPort, proto uint8) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.frontends[ap]; ok {
		return s
	}
	_, res, err := ResolvedServices(r.lab)
	if err != nil || res == nil || res.Table == nil {
		return ""
	}
	r.frontends = map[netip.AddrPort]string{}
	for _, fe := range res.Table.Frontends {
		r.frontends[netip.AddrPortFrom(fe.VIP, fe.Port)] = fe.Service
		if fe.NodePort != 0 {
			for _, h := range r.spec.Hosts {
				r.frontends[netip.AddrPortFrom(h.Gateway, fe.NodePort)] = fe.Service
			}
		}
	}
	s, ok := r.frontends[ap]
	if !ok {
		r.frontends[ap] = "" // not a frontend: do not read again for it
	}
	return s
}
