package nftables

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	nft "github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/cnlab/cnlab/internal/netns"
)

// The netlink path sends a change (a delta) as one nf_tables batch, which
// the kernel commits whole or not at all, as nft -f does, without nft's
// cost: nft reads the whole table back before every transaction (70-80 ms
// at 10,000 Services, 400 with four backends each, BENCHMARKS.md). The
// batch is built by github.com/google/nftables and sent on our own socket,
// with one fix (fixAnonymousKeys). Rules are the ones render writes,
// translated form by form: a rule of another form is errUnsupported, and
// the change is then applied whole by nft -f.

// errUnsupported: a rule or element the netlink path does not translate.
var errUnsupported = errors.New("not translated to netlink")

var svcTable = &nft.Table{Family: nft.TableFamilyIPv4, Name: "cnlab-svc"}

// batch collects the messages of one transaction.
type batch struct {
	c    *nft.Conn
	msgs []netlink.Message
	sets map[string]*nft.Set // affinity sets created in this batch
}

func newBatch() (*batch, error) {
	b := &batch{sets: map[string]*nft.Set{}}
	// The library writes to a test socket that records the messages and
	// acknowledges each: they are sent by send, once fixed.
	ack := []netlink.Message{{Header: netlink.Header{Type: netlink.Error}, Data: make([]byte, 4)}}
	c, err := nft.New()
	if err != nil {
		return nil, err
	}
	c.TestDial = func(req []netlink.Message) ([]netlink.Message, error) {
		b.msgs = append(b.msgs, req...)
		return ack, nil
	}
	b.c = c
	return b, nil
}

func chainRef(name string) *nft.Chain { return &nft.Chain{Table: svcTable, Name: name} }

// mapRef is one of the proxy's named maps.
func mapRef(name string) (*nft.Set, error) {
	switch name {
	case "service-ips", "no-endpoint-services":
		return &nft.Set{Table: svcTable, Name: name, IsMap: true, Concatenation: true}, nil
	case "service-nodeports", "no-endpoint-nodeports":
		return &nft.Set{Table: svcTable, Name: name, IsMap: true, Concatenation: true}, nil
	}
	return nil, fmt.Errorf("map %s: %w", name, errUnsupported)
}

// addSet creates an affinity set (type ipv4_addr; flags dynamic,timeout).
func (b *batch) addSet(name string) error {
	s := &nft.Set{Table: svcTable, Name: name, KeyType: nft.TypeIPAddr, Dynamic: true, HasTimeout: true}
	if err := b.c.AddSet(s, nil); err != nil {
		return err
	}
	b.sets[name] = s
	return nil
}

func (b *batch) delSet(name string) { b.c.DelSet(&nft.Set{Table: svcTable, Name: name}) }

// setRef names a set for a lookup or dynset: its id too when this batch
// creates it.
func (b *batch) setRef(name string) (string, uint32) {
	if s, ok := b.sets[name]; ok {
		return s.Name, s.ID
	}
	return name, 0
}

func (b *batch) addChain(name string)   { b.c.AddChain(chainRef(name)) }
func (b *batch) flushChain(name string) { b.c.FlushChain(chainRef(name)) }
func (b *batch) delChain(name string)   { b.c.DelChain(chainRef(name)) }

// addRule appends a rule, in render's syntax, to a chain.
func (b *batch) addRule(chain, rule string) error {
	exprs, err := b.ruleExprs(rule)
	if err != nil {
		return fmt.Errorf("rule %q: %w", rule, err)
	}
	b.c.AddRule(&nft.Rule{Table: svcTable, Chain: chainRef(chain), Exprs: exprs})
	return nil
}

var protocols = map[string]byte{"tcp": unix.IPPROTO_TCP, "udp": unix.IPPROTO_UDP, "sctp": unix.IPPROTO_SCTP}

func saddr() *expr.Payload {
	return &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4}
}

// verdict parses "goto X", "jump X", "drop", "accept", "return".
func verdict(f []string) (*expr.Verdict, error) {
	switch {
	case len(f) == 2 && f[0] == "goto":
		return &expr.Verdict{Kind: expr.VerdictGoto, Chain: f[1]}, nil
	case len(f) == 2 && f[0] == "jump":
		return &expr.Verdict{Kind: expr.VerdictJump, Chain: f[1]}, nil
	case len(f) == 1 && f[0] == "drop":
		return &expr.Verdict{Kind: expr.VerdictDrop}, nil
	case len(f) == 1 && f[0] == "accept":
		return &expr.Verdict{Kind: expr.VerdictAccept}, nil
	case len(f) == 1 && f[0] == "return":
		return &expr.Verdict{Kind: expr.VerdictReturn}, nil
	}
	return nil, fmt.Errorf("verdict %q: %w", strings.Join(f, " "), errUnsupported)
}

func addr4(s string) ([]byte, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return nil, fmt.Errorf("address %q: %w", s, errUnsupported)
	}
	b := a.As4()
	return b[:], nil
}

// ruleExprs translates the forms of rule render writes in the chains of
// frontends (balance, and the external chains).
func (b *batch) ruleExprs(rule string) ([]expr.Any, error) {
	f := strings.Fields(rule)
	switch {
	case len(f) >= 1 && len(f) <= 2 && (f[0] == "goto" || f[0] == "jump"):
		// goto X / jump X
		v, err := verdict(f)
		if err != nil {
			return nil, err
		}
		return []expr.Any{v}, nil
	case len(f) == 5 && f[0] == "ip" && f[1] == "saddr" && strings.HasPrefix(f[2], "@"):
		// ip saddr @set goto X
		v, err := verdict(f[3:])
		if err != nil {
			return nil, err
		}
		name, id := b.setRef(f[2][1:])
		return []expr.Any{saddr(), &expr.Lookup{SourceRegister: 1, SetName: name, SetID: id}, v}, nil
	case len(f) == 5 && f[0] == "ip" && f[1] == "saddr":
		// ip saddr A jump X
		a, err := addr4(f[2])
		if err != nil {
			return nil, err
		}
		v, err := verdict(f[3:])
		if err != nil {
			return nil, err
		}
		return []expr.Any{saddr(), &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a}, v}, nil
	case len(f) == 6 && f[0] == "meta" && f[1] == "l4proto" && f[3] == "dnat" && f[4] == "to":
		// meta l4proto P dnat to A:port
		p, ok := protocols[f[2]]
		ap, err := netip.ParseAddrPort(f[5])
		if !ok || err != nil || !ap.Addr().Is4() {
			return nil, errUnsupported
		}
		a := ap.Addr().As4()
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
			&expr.Immediate{Register: 1, Data: a[:]},
			&expr.Immediate{Register: 2, Data: binary.BigEndian.AppendUint16(nil, ap.Port())},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2, Specified: true},
		}, nil
	case len(f) == 8 && f[0] == "update" && strings.HasPrefix(f[1], "@") && f[2] == "{" && f[3] == "ip" && f[4] == "saddr" &&
		f[5] == "timeout" && strings.HasSuffix(f[6], "s") && f[7] == "}":
		// update @set { ip saddr timeout Ns }
		secs, err := strconv.Atoi(strings.TrimSuffix(f[6], "s"))
		if err != nil {
			return nil, errUnsupported
		}
		name, id := b.setRef(f[1][1:])
		return []expr.Any{saddr(), &expr.Dynset{SrcRegKey: 1, SetName: name, SetID: id, Operation: unix.NFT_DYNSET_OP_UPDATE,
			Timeout: time.Duration(secs) * time.Second}}, nil
	case len(f) >= 9 && f[0] == "numgen" && f[1] == "random" && f[2] == "mod" && f[4] == "vmap" && f[5] == "{" && f[len(f)-1] == "}":
		// numgen random mod N vmap { 0 : goto a, 1 : goto b }
		n, err := strconv.Atoi(f[3])
		if err != nil || n < 1 {
			return nil, errUnsupported
		}
		var els []nft.SetElement
		for _, e := range strings.Split(strings.Join(f[6:len(f)-1], " "), ", ") {
			ef := strings.Fields(e)
			if len(ef) < 3 || ef[1] != ":" {
				return nil, errUnsupported
			}
			k, err := strconv.ParseUint(ef[0], 10, 32)
			if err != nil {
				return nil, errUnsupported
			}
			v, err := verdict(ef[2:])
			if err != nil {
				return nil, err
			}
			els = append(els, nft.SetElement{Key: binary.NativeEndian.AppendUint32(nil, uint32(k)), VerdictData: v})
		}
		s := &nft.Set{Table: svcTable, Anonymous: true, Constant: true, IsMap: true, KeyType: nft.TypeInteger, DataType: nft.TypeVerdict}
		if err := b.c.AddSet(s, els); err != nil {
			return nil, err
		}
		return []expr.Any{
			&expr.Numgen{Register: 1, Modulus: uint32(n), Type: unix.NFT_NG_RANDOM},
			&expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID, DestRegister: 0, IsDestRegSet: true},
		}, nil
	}
	return nil, errUnsupported
}

// elementKey encodes a map key in render's syntax: "A . proto . port"
// (service-ips, no-endpoint-services) or "proto . port" (the node port
// maps), each field padded to 4 bytes as in a concatenation.
func elementKey(k string) ([]byte, error) {
	f := strings.Split(k, " . ")
	var out []byte
	if len(f) == 3 {
		a, err := addr4(f[0])
		if err != nil {
			return nil, err
		}
		out = append(out, a...)
		f = f[1:]
	}
	if len(f) != 2 {
		return nil, fmt.Errorf("key %q: %w", k, errUnsupported)
	}
	p, ok := protocols[f[0]]
	port, err := strconv.ParseUint(f[1], 10, 16)
	if !ok || err != nil {
		return nil, fmt.Errorf("key %q: %w", k, errUnsupported)
	}
	out = append(out, p, 0, 0, 0)
	out = binary.BigEndian.AppendUint16(out, uint16(port))
	return append(out, 0, 0), nil
}

// setElements adds (verdicts non-nil) or deletes elements of a map.
func (b *batch) setElements(mapName string, keys []string, verdicts map[string]string, add bool) error {
	m, err := mapRef(mapName)
	if err != nil {
		return err
	}
	els := make([]nft.SetElement, 0, len(keys))
	for _, k := range keys {
		key, err := elementKey(k)
		if err != nil {
			return err
		}
		e := nft.SetElement{Key: key}
		if add {
			if e.VerdictData, err = verdict(strings.Fields(verdicts[k])); err != nil {
				return err
			}
		}
		els = append(els, e)
	}
	// One message per elementsPerMessage elements: the library writes a
	// message's elements into one nested attribute, whose length is 16
	// bits (more than 64 KiB of them would be cut short). The messages
	// stay in the one batch, so the change is as atomic as before.
	for len(els) > 0 {
		n := min(len(els), elementsPerMessage)
		var err error
		if add {
			err = b.c.SetAddElements(m, els[:n])
		} else {
			err = b.c.SetDeleteElements(m, els[:n])
		}
		if err != nil {
			return err
		}
		els = els[n:]
	}
	return nil
}

// elementsPerMessage bounds a map's elements in one message: an element
// (key, verdict and a chain name of at most 256 bytes) takes less than
// 320 bytes, so 200 fit an attribute's 64 KiB.
const elementsPerMessage = 200

// messages flushes the library's buffer into b.msgs: the batch with its
// begin and end, fixed.
func (b *batch) messages() ([]netlink.Message, error) {
	b.msgs = b.msgs[:0]
	if err := b.c.Flush(); err != nil {
		return nil, err
	}
	fixAnonymousKeys(b.msgs)
	return b.msgs, nil
}

const newSet = netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWSET)

// fixAnonymousKeys makes the anonymous sets (numgen's maps) say that their
// keys are in host byte order, as nft does: github.com/google/nftables
// v0.3.0 always records big endian for them (upstream PR #355), so nft
// list printed numgen's key 1 as 16777216. The kernel matches either way;
// only the user data nft reads back differs.
func fixAnonymousKeys(msgs []netlink.Message) {
	for i := range msgs {
		m := &msgs[i]
		if m.Header.Type != newSet || len(m.Data) < 4 {
			continue
		}
		attrs, err := netlink.UnmarshalAttributes(m.Data[4:])
		if err != nil {
			continue
		}
		anon := false
		for _, a := range attrs {
			if a.Type == unix.NFTA_SET_FLAGS && len(a.Data) == 4 && binary.BigEndian.Uint32(a.Data)&unix.NFT_SET_ANONYMOUS != 0 {
				anon = true
			}
		}
		if !anon {
			continue
		}
		for j := range attrs {
			if attrs[j].Type == unix.NFTA_SET_USERDATA {
				attrs[j].Data = userdata.AppendUint32(nil, userdata.NFTNL_UDATA_SET_KEYBYTEORDER, 1)
			}
		}
		data, err := netlink.MarshalAttributes(attrs)
		if err != nil {
			continue
		}
		m.Data = append(m.Data[:4:4], data...)
	}
}

// send commits the batch in a namespace: nil when the kernel took it all.
// An error wrapping errOutcomeUnknown says the kernel may have committed
// it (its acknowledgements were lost): the host's files cannot be trusted.
func (b *batch) send(nsName string) error {
	msgs, err := b.messages()
	if err != nil || len(msgs) == 0 {
		return err // nothing to send: the host's table does not change
	}
	ns, err := netns.Open(nsName)
	if err != nil {
		return err
	}
	defer ns.Close()
	conn, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: int(ns)})
	if err != nil {
		return err
	}
	defer conn.Close()
	want, size := 0, 0
	for _, m := range msgs {
		if m.Header.Flags&netlink.Acknowledge != 0 {
			want++
		}
		size += nlmsgAlign(headerLen + len(m.Data))
	}
	// Acknowledgements of success carry no copy of the message.
	if err := conn.SetOption(netlink.CapAcknowledge, true); err != nil {
		return err
	}
	if err := sizeBuffers(conn, size, want); err != nil {
		return err
	}
	if _, err := conn.SendMessages(msgs); err != nil {
		return err
	}
	if err := conn.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return err
	}
	// One acknowledgement per message; the first error aborts the batch
	// (the kernel commits none of it).
	for got := 0; got < want; {
		replies, err := conn.Receive()
		if err != nil {
			if errors.Is(err, unix.ENOBUFS) {
				return fmt.Errorf("%w: %w", errOutcomeUnknown, err)
			}
			return err
		}
		for _, r := range replies {
			if r.Header.Type == netlink.Error {
				got++
			}
		}
	}
	return nil
}

// errOutcomeUnknown: acknowledgements of a batch were lost (the receive
// buffer overflowed), so whether the kernel committed it is unknown.
var errOutcomeUnknown = errors.New("batch outcome unknown")

const headerLen = 16 // struct nlmsghdr

func nlmsgAlign(n int) int { return (n + 3) &^ 3 }

// ackSize is what one acknowledgement takes of a socket's receive buffer
// (the skb's truesize, some 700 bytes for a 36-byte message), as nft
// counts it (mnl_batch_talk: 1,024 bytes a command).
const ackSize = 1024

// sizeBuffers makes the socket's buffers hold a batch of size bytes and
// its acks acknowledgements. The kernel takes the whole batch in one
// sendmsg, which fails with EMSGSIZE beyond the send buffer, and queues
// every acknowledgement before that call returns, dropping those beyond
// the receive buffer (recvmsg then fails with ENOBUFS): at the default
// 208 KiB a change of about 170 Services of one backend exceeds the
// first, of about 40 the second. As nft does, the buffers are raised
// with SO_SNDBUFFORCE and SO_RCVBUFFORCE (root: past net.core.wmem_max
// and rmem_max), or SO_SNDBUF and SO_RCVBUF up to those limits without
// CAP_NET_ADMIN. The kernel doubles the value set, for its own overhead.
func sizeBuffers(conn *netlink.Conn, size, acks int) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	grow := func(opt, force, need int) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			cur, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, opt)
			if err != nil {
				serr = err
				return
			}
			if cur >= 2*need {
				return
			}
			if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, force, need); errors.Is(serr, unix.EPERM) {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, opt, need)
			}
		})
		if err == nil {
			err = serr
		}
		return err
	}
	if err := grow(unix.SO_SNDBUF, unix.SO_SNDBUFFORCE, size+4096); err != nil {
		return fmt.Errorf("send buffer for %d bytes: %w", size, err)
	}
	if err := grow(unix.SO_RCVBUF, unix.SO_RCVBUFFORCE, acks*ackSize); err != nil {
		return fmt.Errorf("receive buffer for %d acknowledgements: %w", acks, err)
	}
	return nil
}
