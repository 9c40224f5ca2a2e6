package nflog

import (
	"context"
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/mdlayher/netlink"
)

// Translation is one new conntrack entry whose reply tuple shows a
// destination NAT (a Service's frontend translated to a backend): original
// Src->Dst, and the backend the reply comes from.
type Translation struct {
	Time     time.Time
	Proto    uint8
	Src      netip.AddrPort // client as sent
	Frontend netip.AddrPort // original destination
	Backend  netip.AddrPort // reply tuple's source
	SNAT     netip.AddrPort // reply tuple's destination when it differs from Src (masquerade), else zero
}

// ctnetlink's constants (linux/netfilter/nfnetlink_conntrack.h).
const (
	subsysCT    = 1 // NFNL_SUBSYS_CTNETLINK
	ctMsgNew    = 0 // IPCTNL_MSG_CT_NEW
	grpCTNew    = 1 // NFNLGRP_CONNTRACK_NEW
	ctaOrig     = 1 // CTA_TUPLE_ORIG
	ctaReply    = 2 // CTA_TUPLE_REPLY
	ctaIP       = 1 // CTA_TUPLE_IP
	ctaProto    = 2 // CTA_TUPLE_PROTO
	ctaV4Src    = 1
	ctaV4Dst    = 2
	ctaV6Src    = 3
	ctaV6Dst    = 4
	ctaProtoNum = 1
	ctaSrcPort  = 2
	ctaDstPort  = 3
)

// ListenConntrack subscribes to conntrack NEW events
// (NFNLGRP_CONNTRACK_NEW) in the namespace at netnsPath ("" = the
// caller's) and calls fn for every new entry whose reply source differs
// from the original destination, until ctx ends. lost(0) reports that
// the socket overflowed (ENOBUFS): some events were dropped, count
// unknown (ctnetlink events carry no sequence numbers). ready, if not nil,
// is called once subscribed. The kernel sends events only while
// net.netfilter.nf_conntrack_events is not 0 (its default, 2, sends them
// to any listener).
func ListenConntrack(ctx context.Context, netnsPath string, ready func(), fn func(Translation), lost func(n uint64)) error {
	s, err := open(netnsPath, 1<<(grpCTNew-1))
	if err != nil {
		return err
	}
	defer s.close()
	if ready != nil {
		ready()
	}
	return s.receive(ctx, func(msgs []netlink.Message) {
		now := time.Now()
		for _, m := range msgs {
			if m.Header.Type != netlink.HeaderType(subsysCT<<8|ctMsgNew) || len(m.Data) < 4 {
				continue
			}
			t, ok := parseCT(m.Data[4:])
			if !ok || t.Backend == t.Frontend {
				continue
			}
			t.Time = now
			if fn != nil {
				fn(t)
			}
		}
	}, lost)
}

// tuple is a conntrack tuple: protocol, source and destination.
type tuple struct {
	proto    uint8
	src, dst netip.AddrPort
}

// parseCT reads the original and reply tuples of a ctnetlink message's
// attributes.
func parseCT(b []byte) (Translation, bool) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return Translation{}, false
	}
	ad.ByteOrder = binary.BigEndian
	var orig, reply tuple
	var haveOrig, haveReply bool
	for ad.Next() {
		switch ad.Type() {
		case ctaOrig:
			ad.Nested(func(nad *netlink.AttributeDecoder) error {
				orig, haveOrig = parseTuple(nad), true
				return nil
			})
		case ctaReply:
			ad.Nested(func(nad *netlink.AttributeDecoder) error {
				reply, haveReply = parseTuple(nad), true
				return nil
			})
		}
	}
	if ad.Err() != nil || !haveOrig || !haveReply || !orig.src.Addr().IsValid() || !reply.src.Addr().IsValid() {
		return Translation{}, false
	}
	t := Translation{Proto: orig.proto, Src: orig.src, Frontend: orig.dst, Backend: reply.src}
	if reply.dst != orig.src {
		t.SNAT = reply.dst
	}
	return t, true
}

func parseTuple(ad *netlink.AttributeDecoder) tuple {
	ad.ByteOrder = binary.BigEndian
	var t tuple
	var src, dst netip.Addr
	var sport, dport uint16
	for ad.Next() {
		switch ad.Type() {
		case ctaIP:
			ad.Nested(func(nad *netlink.AttributeDecoder) error {
				for nad.Next() {
					a, ok := netip.AddrFromSlice(nad.Bytes())
					if !ok {
						continue
					}
					switch nad.Type() {
					case ctaV4Src, ctaV6Src:
						src = a
					case ctaV4Dst, ctaV6Dst:
						dst = a
					}
				}
				return nil
			})
		case ctaProto:
			ad.Nested(func(nad *netlink.AttributeDecoder) error {
				nad.ByteOrder = binary.BigEndian
				for nad.Next() {
					switch nad.Type() {
					case ctaProtoNum:
						t.proto = nad.Uint8()
					case ctaSrcPort:
						sport = nad.Uint16()
					case ctaDstPort:
						dport = nad.Uint16()
					}
				}
				return nil
			})
		}
	}
	t.src, t.dst = netip.AddrPortFrom(src, sport), netip.AddrPortFrom(dst, dport)
	return t
}
