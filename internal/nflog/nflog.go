// Package nflog reads the kernel's netfilter log (nfnetlink_log, the target
// of iptables' NFLOG and nftables' `log group` rules) and conntrack's event
// socket (ctnetlink's NEW events, for Service translations), in the network
// namespace a lab's host lives in. It is pure Go over netlink: no libnetfilter
// library, no conntrack or ulogd program.
//
// Listen binds one NFLOG group with its own socket (copying the first 128
// bytes of each packet, headers only), numbers the packets (NFULA_SEQ) to
// count those the kernel failed to deliver, and unbinds the group when it
// returns. ListenConntrack reports new conntrack entries whose reply comes
// from another address than the original destination: a DNAT, as
// kube-proxy-style Services do.
//
// Losses go to a lost callback: lost(n) with n > 0 is a counted gap in the
// log's sequence numbers; lost(0) means the socket overflowed (ENOBUFS) and
// some messages were dropped, count unknown. For NFLOG a lost(0) is normally
// followed by the counted gap once the next packet arrives.
package nflog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Packet is one packet logged to an NFLOG group.
type Packet struct {
	Time     time.Time      // NFULA_TIMESTAMP if present, else receive time
	Prefix   string         // NFULA_PREFIX (NUL trimmed)
	Src, Dst netip.AddrPort // addresses, and TCP/UDP ports (0 for other protocols and non-first fragments)
	Proto    uint8
	TCPFlags uint8 // byte 13 of the TCP header, 0 otherwise
	Len      int   // IP total length
	// InDev and OutDev name the interfaces (NFULA_IFINDEX_INDEV/OUTDEV)
	// in the listener's namespace; "" when absent or unknown.
	InDev, OutDev string
}

// nfnetlink_log's constants (linux/netfilter/nfnetlink_log.h).
const (
	subsysULOG     = 4 // NFNL_SUBSYS_ULOG
	msgPacket      = 0 // NFULNL_MSG_PACKET
	msgConfig      = 1 // NFULNL_MSG_CONFIG
	cfgCmd         = 1 // NFULA_CFG_CMD
	cfgMode        = 2 // NFULA_CFG_MODE
	cfgTimeout     = 4 // NFULA_CFG_TIMEOUT, in 1/100 s
	cfgQThresh     = 5 // NFULA_CFG_QTHRESH
	cfgFlags       = 6 // NFULA_CFG_FLAGS
	cmdBind        = 1 // NFULNL_CFG_CMD_BIND
	cmdUnbind      = 2 // NFULNL_CFG_CMD_UNBIND
	cmdPFBind      = 3 // NFULNL_CFG_CMD_PF_BIND
	copyPacket     = 2 // NFULNL_COPY_PACKET
	flagSeq        = 1 // NFULNL_CFG_F_SEQ
	attrTimestamp  = 3 // NFULA_TIMESTAMP
	attrInDev      = 4 // NFULA_IFINDEX_INDEV
	attrOutDev     = 5 // NFULA_IFINDEX_OUTDEV
	attrPayload    = 9 // NFULA_PAYLOAD
	attrPrefix     = 10
	attrSeq        = 12
	copyRange      = 128 // bytes of each packet copied: its headers
	flushTimeout   = 2   // 20 ms: a logged packet reaches fn within it
	queueThreshold = 64  // or as soon as this many are batched
)

// Listen binds NFLOG group `group` in the network namespace at netnsPath
// ("" = the caller's) and calls fn for each packet until ctx ends, then
// unbinds the group. lost is called with the number of packets the kernel
// could not deliver: n > 0 for a gap in the sequence numbers, 0 when the
// socket overflowed (ENOBUFS) and the count is unknown; the gap is counted
// when the next packet arrives. ready, if not nil, is called once the group
// is bound. fn and lost are called from Listen's goroutine. Listen returns
// nil when ctx ends, or the error that stopped it (EBUSY: another socket
// has the group).
func Listen(ctx context.Context, netnsPath string, group uint16, ready func(), fn func(Packet), lost func(n uint64)) error {
	s, err := open(netnsPath, 0)
	if err != nil {
		return err
	}
	defer s.close()
	l := &listener{s: s, fn: fn, lost: lost}
	// Only needed by kernels before 3.17, where it makes nfnetlink_log
	// AF_INET's logger; a no-op (or EEXIST) elsewhere.
	_ = l.config(unix.AF_INET, 0, cmdPFBind, nil)
	mode := make([]byte, 6) // struct nfulnl_msg_config_mode
	binary.BigEndian.PutUint32(mode, copyRange)
	mode[4] = copyPacket
	ae := netlink.NewAttributeEncoder()
	ae.ByteOrder = binary.BigEndian
	ae.Bytes(cfgMode, mode)
	ae.Uint32(cfgTimeout, flushTimeout)
	ae.Uint32(cfgQThresh, queueThreshold)
	ae.Uint16(cfgFlags, flagSeq)
	if err := l.config(unix.AF_UNSPEC, group, cmdBind, ae); err != nil {
		return fmt.Errorf("bind nflog group %d: %w", group, err)
	}
	defer func() {
		// Sent without waiting for its ack: the kernel handles it inside
		// the send, and the socket's close would release the group anyway.
		_, _ = s.c.Send(configMsg(unix.AF_UNSPEC, group, cmdUnbind, nil, 0))
	}()
	if ready != nil {
		ready()
	}
	return s.receive(ctx, l.handle, lost)
}

type listener struct {
	s       *sock
	fn      func(Packet)
	lost    func(uint64)
	seq     uint32
	seqSeen bool
}

func configMsg(family uint8, group uint16, cmd uint8, ae *netlink.AttributeEncoder, flags netlink.HeaderFlags) netlink.Message {
	enc := netlink.NewAttributeEncoder()
	enc.Bytes(cfgCmd, []byte{cmd})
	b, _ := enc.Encode()
	if ae != nil {
		more, _ := ae.Encode()
		b = append(b, more...)
	}
	return netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(subsysULOG<<8 | msgConfig), Flags: netlink.Request | flags},
		Data:   append(nfgenmsg(family, group), b...),
	}
}

// config sends a config command and waits for its ack. Packets that
// arrive meanwhile (a busy group starts logging before the ack is queued)
// are handled, not dropped.
func (l *listener) config(family uint8, group uint16, cmd uint8, ae *netlink.AttributeEncoder) error {
	req, err := l.s.c.Send(configMsg(family, group, cmd, ae, netlink.Acknowledge))
	if err != nil {
		return err
	}
	for {
		msgs, err := l.s.c.Receive() // an error ack comes back as err
		if errors.Is(err, unix.ENOBUFS) {
			if l.lost != nil {
				l.lost(0)
			}
			continue
		}
		if err != nil {
			return err
		}
		for i, m := range msgs {
			if m.Header.Type == netlink.Error && m.Header.Sequence == req.Header.Sequence {
				l.handle(append(msgs[:i:i], msgs[i+1:]...))
				return nil
			}
		}
		l.handle(msgs)
	}
}

func (l *listener) handle(msgs []netlink.Message) {
	now := time.Now()
	for _, m := range msgs {
		if m.Header.Type != netlink.HeaderType(subsysULOG<<8|msgPacket) || len(m.Data) < 4 {
			continue
		}
		p, seq, hasSeq := l.parse(m.Data, now)
		if hasSeq {
			if l.seqSeen && seq != l.seq+1 && l.lost != nil {
				l.lost(uint64(seq - l.seq - 1))
			}
			l.seq, l.seqSeen = seq, true
		}
		if l.fn != nil {
			l.fn(p)
		}
	}
}

// parse decodes one NFULNL_MSG_PACKET (nfgenmsg and attributes).
func (l *listener) parse(b []byte, now time.Time) (p Packet, seq uint32, hasSeq bool) {
	p.Time = now
	ad, err := netlink.NewAttributeDecoder(b[4:])
	if err != nil {
		return p, 0, false
	}
	ad.ByteOrder = binary.BigEndian
	for ad.Next() {
		switch ad.Type() {
		case attrTimestamp:
			if v := ad.Bytes(); len(v) == 16 {
				sec, usec := binary.BigEndian.Uint64(v), binary.BigEndian.Uint64(v[8:])
				p.Time = time.Unix(int64(sec), int64(usec)*1000)
			}
		case attrPrefix:
			p.Prefix = trimNUL(ad.Bytes())
		case attrInDev:
			p.InDev = l.s.ifname(ad.Uint32())
		case attrOutDev:
			p.OutDev = l.s.ifname(ad.Uint32())
		case attrSeq:
			seq, hasSeq = ad.Uint32(), true
		case attrPayload:
			parseIP(ad.Bytes(), &p)
		}
	}
	return p, seq, hasSeq
}

func trimNUL(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// parseIP fills the addresses, ports, protocol, TCP flags and length from
// the start of an IPv4 or IPv6 packet (IPv6 extension headers are not
// walked: such packets get no ports).
func parseIP(b []byte, p *Packet) {
	if len(b) < 1 {
		return
	}
	var src, dst netip.Addr
	var l4 []byte
	switch b[0] >> 4 {
	case 4:
		ihl := int(b[0]&0x0f) * 4
		if len(b) < 20 || ihl < 20 {
			return
		}
		p.Len = int(binary.BigEndian.Uint16(b[2:]))
		p.Proto = b[9]
		src, dst = netip.AddrFrom4([4]byte(b[12:16])), netip.AddrFrom4([4]byte(b[16:20]))
		if binary.BigEndian.Uint16(b[6:])&0x1fff == 0 && len(b) > ihl { // first fragment
			l4 = b[ihl:]
		}
	case 6:
		if len(b) < 40 {
			return
		}
		p.Len = 40 + int(binary.BigEndian.Uint16(b[4:]))
		p.Proto = b[6]
		src, dst = netip.AddrFrom16([16]byte(b[8:24])), netip.AddrFrom16([16]byte(b[24:40]))
		l4 = b[40:]
	default:
		return
	}
	var sport, dport uint16
	switch p.Proto {
	case unix.IPPROTO_TCP, unix.IPPROTO_UDP, unix.IPPROTO_SCTP, unix.IPPROTO_UDPLITE:
		if len(l4) >= 4 {
			sport, dport = binary.BigEndian.Uint16(l4), binary.BigEndian.Uint16(l4[2:])
		}
		if p.Proto == unix.IPPROTO_TCP && len(l4) >= 14 {
			p.TCPFlags = l4[13]
		}
	}
	p.Src, p.Dst = netip.AddrPortFrom(src, sport), netip.AddrPortFrom(dst, dport)
}
