package ebpf

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"syscall"

	"github.com/cilium/ebpf"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/internal/fault"
	"github.com/cnlab/cnlab/internal/files"
	"github.com/cnlab/cnlab/proxy"
	"github.com/cnlab/cnlab/service"
	"github.com/cnlab/cnlab/topology"
)

// svcMemo is what this process last wrote to a lab's hosts, kept so that
// the next change neither reads the state files back nor renders and
// encodes every frontend again: at 10,000 Services those took most of a
// change (BENCHMARKS.md). It is trusted only for the table it was written
// for, and per host only while the host's files are those it wrote.
type svcMemo struct {
	table *service.Table
	set   string // proxy.Digest(table)
	nodes map[string][]netip.Addr
	hosts map[string]*svcHostMemo
}

// svcHostMemo is one host's state as last written, with its state file
// encoded record by record so that a change patches a few records.
type svcHostMemo struct {
	st   svcState // entries with their Backends
	udp  map[cnlabSvcKey]proxy.UDPFrontend
	enc  []byte              // base64 of the frontend records, svcRecordB64 bytes each
	at   map[cnlabSvcKey]int // a frontend's record number in enc
	keys []cnlabSvcKey       // record number → frontend
	used map[uint32]bool     // frontend numbers in use
	file os.FileInfo         // of the state file as written (nil: write it whole)
	// Since the file was written: the records changed in place, and how
	// many records it holds.
	touched []int
	saved   int
	low     int    // the fewest records held since (those past it were replaced)
	udpJSON []byte // the file's "udp" member (nil: to encode)
}

// A record of svcRecord (27) bytes is 36 characters of base64 with no
// padding: records are encoded one by one and concatenated.
const svcRecordB64 = svcRecord / 3 * 4

// svcMemos are the tables this process last applied, per lab.
var svcMemos change.Memos[*svcMemo]

func takeMemo(lab string) *svcMemo { return svcMemos.Take(lab) }

func keepMemo(lab string, m *svcMemo) { svcMemos.Keep(lab, m) }

// appendRecord appends the state-file record of one frontend, base64.
func appendRecord(dst []byte, k cnlabSvcKey, e *svcEntry) []byte {
	var raw [svcRecord]byte
	b := binary.LittleEndian.AppendUint32(raw[:0], k.Vip)
	b = binary.LittleEndian.AppendUint16(b, k.Port)
	b = append(b, k.Proto)
	return base64.StdEncoding.AppendEncode(dst, appendEntry(b, e))
}

// appendEntry appends a frontend's entry to its state-file record, after
// the key (svcEntryBytes bytes; readEntry reads it back).
func appendEntry(b []byte, e *svcEntry) []byte {
	b = binary.LittleEndian.AppendUint32(b, e.ID)
	b = append(b, e.Half)
	var flags byte
	if e.Drop {
		flags |= 1
	}
	if e.Masq {
		flags |= 2
	}
	b = append(b, flags)
	b = binary.LittleEndian.AppendUint32(b, e.Affinity)
	b = binary.LittleEndian.AppendUint16(b, e.Count)
	return binary.LittleEndian.AppendUint64(b, e.Sum)
}

// svcEntryBytes is the length of a record's entry (appendEntry).
const svcEntryBytes = 4 + 1 + 1 + 4 + 2 + 8

// readEntry reads what appendEntry wrote at the start of r.
func readEntry(r []byte, e *svcEntry) {
	e.ID = binary.LittleEndian.Uint32(r)
	e.Half = r[4]
	e.Drop = r[5]&1 != 0
	e.Masq = r[5]&2 != 0
	e.Affinity = binary.LittleEndian.Uint32(r[6:])
	e.Count = binary.LittleEndian.Uint16(r[10:])
	e.Sum = binary.LittleEndian.Uint64(r[12:])
}

func udpKey(u proxy.UDPFrontend) cnlabSvcKey {
	return cnlabSvcKey{Vip: ip4(u.VIP), Port: htons(u.Port), Proto: 17}
}

// newHostMemo is the memo of a host whose state st was just written.
func newHostMemo(st svcState) *svcHostMemo {
	hm := &svcHostMemo{st: st, udp: map[cnlabSvcKey]proxy.UDPFrontend{}, at: make(map[cnlabSvcKey]int, len(st.Frontends)),
		used: make(map[uint32]bool, len(st.Frontends))}
	hm.enc = make([]byte, 0, len(st.Frontends)*svcRecordB64)
	for k, e := range st.Frontends {
		hm.at[k] = len(hm.keys)
		hm.keys = append(hm.keys, k)
		hm.enc = appendRecord(hm.enc, k, e)
		hm.used[e.ID] = true
	}
	for _, u := range st.UDP {
		hm.udp[udpKey(u)] = u
	}
	return hm
}

// set records frontend k as e (nil: gone) in the memo.
func (hm *svcHostMemo) set(k cnlabSvcKey, e *svcEntry) {
	i, ok := hm.at[k]
	switch {
	case e != nil && ok:
		copy(hm.enc[i*svcRecordB64:], appendRecord(nil, k, e))
		hm.touched = append(hm.touched, i)
	case e != nil:
		hm.at[k] = len(hm.keys)
		hm.keys = append(hm.keys, k)
		hm.enc = appendRecord(hm.enc, k, e)
	case ok:
		last := len(hm.keys) - 1
		if i != last {
			copy(hm.enc[i*svcRecordB64:(i+1)*svcRecordB64], hm.enc[last*svcRecordB64:])
			hm.keys[i] = hm.keys[last]
			hm.at[hm.keys[i]] = i
			hm.touched = append(hm.touched, i)
		}
		hm.keys = hm.keys[:last]
		hm.enc = hm.enc[:last*svcRecordB64]
		hm.low = min(hm.low, last)
		delete(hm.at, k)
	}
	if e != nil {
		hm.st.Frontends[k] = e
	} else {
		delete(hm.st.Frontends, k)
	}
}

// The state file is what json.Marshal(svcState) writes: this head, the
// records, then svcFileTail's.
const svcFileHead = `{"frontends":"`

// tail is what follows the records in the state file.
func (hm *svcHostMemo) tail() ([]byte, error) {
	if hm.udpJSON == nil && len(hm.st.UDP) > 0 {
		udp, err := json.Marshal(hm.st.UDP)
		if err != nil {
			return nil, err
		}
		hm.udpJSON = append([]byte(`,"udp":`), udp...)
	}
	return append(append([]byte{'"'}, hm.udpJSON...), '}'), nil
}

// save writes the host's state file from the memo and notes its identity.
// The file the memo wrote last is patched in place, the records changed
// since and what follows the first of them that moved: the host is marked
// dirty meanwhile (a crash in between leaves the mark, and the next apply
// rebuilds the host), so the file need not be replaced whole.
func (hm *svcHostMemo) save(path string) error {
	tail, err := hm.tail()
	if err != nil {
		return err
	}
	n := len(hm.keys)
	if hm.file != nil {
		err = hm.patch(path, n, tail)
	} else {
		err = files.WriteAtomic(path, slices.Concat([]byte(svcFileHead), hm.enc, tail))
	}
	if err == nil {
		hm.file, err = os.Stat(path)
	}
	if err != nil {
		hm.file = nil
		return err
	}
	hm.saved, hm.low, hm.touched = n, n, hm.touched[:0]
	return nil
}

func (hm *svcHostMemo) patch(path string, n int, tail []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	keep := min(n, hm.saved, hm.low) // records at their place in the file
	for _, i := range hm.touched {
		if i < keep {
			if _, err = f.WriteAt(hm.enc[i*svcRecordB64:(i+1)*svcRecordB64], int64(len(svcFileHead)+i*svcRecordB64)); err != nil {
				break
			}
		}
	}
	if err == nil {
		off := int64(len(svcFileHead) + keep*svcRecordB64)
		if _, err = f.WriteAt(append(slices.Clip(hm.enc[keep*svcRecordB64:]), tail...), off); err == nil {
			err = f.Truncate(off + int64((n-keep)*svcRecordB64+len(tail)))
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// unchanged reports whether a host's files are still those the memo
// wrote for set: clean, recording set, the state file the one written.
func (hm *svcHostMemo) unchanged(path, set string) bool {
	if hm == nil || hm.file == nil {
		return false
	}
	hs := change.ReadHost(path)
	if hs.Dirty || len(hs.Sets) != 1 || hs.Sets[0] != set {
		return false
	}
	fi, err := os.Stat(path)
	return err == nil && os.SameFile(fi, hm.file) && fi.ModTime().Equal(hm.file.ModTime()) && fi.Size() == hm.file.Size()
}

// memoAfterApply keeps what a whole Apply wrote (its hosts' states).
func memoAfterApply(lab *topology.Spec, t *service.Table, set string, nodes map[string][]netip.Addr, wants map[string]*svcState) {
	m := &svcMemo{table: t, set: set, nodes: nodes, hosts: map[string]*svcHostMemo{}}
	for _, h := range lab.Hosts {
		w := wants[h.Name]
		if w == nil {
			return
		}
		hm := newHostMemo(*w)
		hm.saved, hm.low = len(hm.keys), len(hm.keys)
		var err error
		if hm.file, err = os.Stat(change.StatePath(lab.Name, ServiceStateKind, h.Name)); err != nil {
			return
		}
		m.hosts[h.Name] = hm
	}
	keepMemo(lab.Name, m)
}

// sameFrontend reports whether two frontends give every host the same
// map entries: the names of the Service, its port and the backends'
// endpoints are not in the maps (they are in the set's digest).
func sameFrontend(a, b *service.Frontend) bool {
	if a.Port != b.Port || a.NodePort != b.NodePort || a.VIP != b.VIP || a.Protocol != b.Protocol || a.Affinity != b.Affinity ||
		a.InternalLocal != b.InternalLocal || a.ExternalLocal != b.ExternalLocal || len(a.Backends) != len(b.Backends) {
		return false
	}
	for i := range a.Backends {
		x, y := &a.Backends[i], &b.Backends[i]
		if x.Port != y.Port || x.IP != y.IP || x.Host != y.Host {
			return false
		}
	}
	return true
}

// ApplyChange is Apply for a change from the table from, which the caller
// last applied, to t. Where this process wrote from to every host and each
// host's files are still those it wrote (clean, recording from's set, the
// same state file), only the frontends between the tables' longest common
// head and tail are rendered, written and patched into the state files;
// otherwise it is Apply. The steps per host, their order, the dirty marks,
// the fault points and the rollback are Apply's (change.ApplyHosts).
func (p ServiceProxy) ApplyChange(ctx context.Context, lab *topology.Spec, from, t *service.Table) error {
	if len(lab.Hosts) == 0 {
		return datapath.ErrNoHosts
	}
	if lab.HasFamily(6) {
		// IPv6 frontends are written by the whole apply only.
		return p.Apply(ctx, lab, t)
	}
	memo := takeMemo(lab.Name)
	nodes := nodeAddresses(lab)
	ok := memo != nil && from != nil && memo.table == from && maps.EqualFunc(memo.nodes, nodes, slices.Equal[[]netip.Addr])
	for i := 0; ok && i < len(lab.Hosts); i++ {
		h := lab.Hosts[i].Name
		ok = memo.hosts[h].unchanged(change.StatePath(lab.Name, ServiceStateKind, h), memo.set)
	}
	if !ok {
		return p.Apply(ctx, lab, t)
	}
	if err := checkTable(t, nodes); err != nil {
		keepMemo(lab.Name, memo) // nothing changed
		return err
	}
	// The digest (milliseconds at 10,000 Services) runs beside the diff.
	digest := make(chan string, 1)
	go func() { digest <- proxy.Digest(t) }()
	set := ""
	// The frontends that differ: between the longest common head and tail.
	a, b := from.Frontends, t.Frontends
	head, tail := proxy.ChangedRange(a, b, sameFrontend)
	if 2*(len(a)+len(b)-2*(head+tail)) > len(b)+len(a) {
		// Most frontends change (a first apply): Apply is no slower.
		<-digest
		return p.Apply(ctx, lab, t)
	}
	removed := &service.Table{Frontends: a[head : len(a)-tail]}
	added := &service.Table{Frontends: b[head : len(b)-tail]}
	var applied []svcUndo
	// restore puts a host back: its maps, its memo, its files.
	restore := func(d svcUndo) error {
		hm := memo.hosts[d.h.Name]
		if err := change.MarkDirty(d.path, memo.set); err != nil {
			return fmt.Errorf("roll back %s: %w", d.h.Name, err)
		}
		if _, err := writeChange(lab, d.h, hm, d.undo, d.udp); err != nil {
			return fmt.Errorf("roll back %s: %w", d.h.Name, err)
		}
		err := hm.save(d.path)
		if err == nil {
			err = change.RecordSet(d.path, memo.set)
		}
		if err != nil {
			return fmt.Errorf("roll back %s: %w (it is left marked for rebuild)", d.h.Name, err)
		}
		return change.ClearDirty(d.path)
	}
	rollback := func(cause error) error { return change.RollBack(cause, applied, restore) }
	for i := range lab.Hosts {
		h := &lab.Hosts[i]
		hm := memo.hosts[h.Name]
		path := change.StatePath(lab.Name, ServiceStateKind, h.Name)
		// What the host should have for the changed frontends.
		want := renderServices(added, h.Name, nodes)
		change_ := make(map[cnlabSvcKey]*svcEntry, len(want.Frontends))
		for k := range renderServices(removed, h.Name, nodes).Frontends {
			change_[k] = nil
		}
		maps.Copy(change_, want.Frontends)
		if set == "" {
			set = <-digest
		}
		if err := change.MarkDirty(path, set); err != nil {
			return rollback(fmt.Errorf("host %s: mark datapath state: %w", h.Name, err))
		}
		err := fault.At(fault.Dirty, h.Name)
		var d svcUndo
		if err == nil {
			d, err = writeChange(lab, h, hm, change_, want.UDP)
			d.h, d.path = h, path
		}
		if err != nil {
			// As Apply: some frontends may have switched, the host is
			// rebuilt by the next apply.
			if !errors.Is(err, errNoWrite) {
				_ = os.Remove(path)
			}
			if ctx.Err() == nil {
				_ = change.ClearDirty(path)
			}
			return rollback(fmt.Errorf("host %s: %w", h.Name, err))
		}
		change.KernelChanged(h.Name)
		err = hm.save(path)
		if err == nil {
			err = change.RecordSet(path, set)
		}
		applied = append(applied, d)
		if err != nil {
			return rollback(fmt.Errorf("host %s: save datapath state: %w", h.Name, err))
		}
		_ = fault.At(fault.Saved, h.Name)
		_ = change.ClearDirty(path)
		change.HostDone(h.Name)
	}
	memo.table, memo.set = t, set
	keepMemo(lab.Name, memo)
	return nil
}

// errNoWrite: a change failed before its first map write.
var errNoWrite = errors.New("no map written")

// svcUndo is what undoes a change on a host: the frontends it touched as
// they were (nil: none), and their UDP frontends.
type svcUndo struct {
	h    *topology.Host
	path string
	undo map[cnlabSvcKey]*svcEntry
	udp  []proxy.UDPFrontend
}

// writeChange brings the frontends of change (nil: to be deleted) to what
// it says on a host whose maps and state are hm's, and patches hm: the
// memo's writeServices for a few frontends. udp are the UDP frontends the
// change leaves (their backends; none: deleted). It returns what undoes
// the change.
func writeChange(lab *topology.Spec, h *topology.Host, hm *svcHostMemo,
	change_ map[cnlabSvcKey]*svcEntry, udp []proxy.UDPFrontend) (done svcUndo, err error) {
	m, err := openSvcMaps(lab.Name, h.Name)
	if err != nil {
		return done, errors.Join(errNoWrite, err)
	}
	defer m.Close()
	if err := fault.At(fault.AtomicLoad, h.Name); err != nil {
		return done, errors.Join(errNoWrite, err)
	}
	// What undoes it: the frontends as they were, their UDP flows.
	done.undo = make(map[cnlabSvcKey]*svcEntry, len(change_))
	var haveUDP []proxy.UDPFrontend
	for k := range change_ {
		done.undo[k] = hm.st.Frontends[k]
		if u, ok := hm.udp[k]; ok {
			haveUDP = append(haveUDP, u)
			done.udp = append(done.udp, u)
		}
	}
	for k, w := range change_ {
		if w != nil && int(w.Count) != len(w.Backends) {
			return done, errors.Join(errNoWrite, fmt.Errorf("frontend %s: its backends are not known", svcKeyString(k)))
		}
	}
	// The frontends after the change: the service config's flags.
	n, nodePorts := len(hm.st.Frontends), false
	for k, w := range change_ {
		_, had := hm.st.Frontends[k]
		switch {
		case had && w == nil:
			n--
		case !had && w != nil:
			n++
		}
	}
	cidr := lab.Services.CIDR
	outside := func(k cnlabSvcKey) bool { return !cidr.IsValid() || !cidr.Contains(addrOf(k.Vip)) }
	for k, w := range change_ {
		if w != nil && outside(k) {
			nodePorts = true
			break
		}
	}
	if !nodePorts && n > 0 {
		for k := range hm.st.Frontends {
			if _, touched := change_[k]; !touched && outside(k) {
				nodePorts = true
				break
			}
		}
	}
	masq, err := service.MasqAddress(lab, h)
	if err != nil {
		return done, errors.Join(errNoWrite, err)
	}
	cfg := cnlabSvcConfig{Hairpin: ip4(h.Gateway), Masq: ip4(masq)}
	if cidr.IsValid() {
		cfg.Net = ip4(cidr.Masked().Addr())
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], ^uint32(0)<<(32-cidr.Bits()))
		cfg.Mask = ip4(netip.AddrFrom4(b))
	}
	if n > 0 {
		cfg.Flags = uint32(cnlabSvcConfigFlagSVC_ON)
		if lab.EBPF.SocketLB {
			cfg.Flags |= uint32(cnlabSvcConfigFlagSVC_SOCKET)
		}
		if nodePorts {
			cfg.Flags |= uint32(cnlabSvcConfigFlagSVC_NODEPORTS)
		}
	}
	var cur cnlabSvcConfig
	cfgChanged := m.config.Lookup(uint32(0), &cur) != nil || cur != cfg
	if cfgChanged && cfg.Flags != 0 {
		if err := m.config.Put(uint32(0), cfg); err != nil {
			return done, errors.Join(errNoWrite, fmt.Errorf("service config: %w", err))
		}
	}
	next := uint32(1)
	newID := func() uint32 {
		for hm.used[next] {
			next++
		}
		hm.used[next] = true
		return next
	}
	var adds []cnlabSvcKey
	for key, w := range change_ {
		old := hm.st.Frontends[key]
		switch {
		case w == nil:
			continue
		case old == nil:
			adds = append(adds, key)
			continue
		case old.same(w):
			w.ID, w.Half = old.ID, old.Half
			hm.set(key, w)
			continue
		}
		if err := switchFrontend(m, key, w, old); err != nil {
			return done, err
		}
		hm.set(key, w)
	}
	slices.SortFunc(adds, func(a, b cnlabSvcKey) int {
		return cmp.Or(addrOf(a.Vip).Compare(addrOf(b.Vip)), cmp.Compare(htons(a.Port), htons(b.Port)), cmp.Compare(a.Proto, b.Proto))
	})
	for _, key := range adds {
		w := change_[key]
		w.ID, w.Half = newID(), 0
		if err := switchFrontend(m, key, w, nil); err != nil {
			return done, err
		}
		hm.set(key, w)
	}
	for key, w := range change_ {
		old := hm.st.Frontends[key]
		if w != nil || old == nil {
			continue
		}
		if err := m.svc.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return done, fmt.Errorf("frontend %s: %w", svcKeyString(key), err)
		}
		if err := deleteBackends(m, old.ID, old.Half, int(old.Count)); err != nil {
			return done, fmt.Errorf("frontend %s: backends: %w", svcKeyString(key), err)
		}
		delete(hm.used, old.ID)
		hm.set(key, nil)
	}
	if cfgChanged && cfg.Flags == 0 {
		if err := m.config.Put(uint32(0), cfg); err != nil {
			return done, fmt.Errorf("service config: %w", err)
		}
	}
	// The UDP frontends the change leaves.
	var wantUDP []proxy.UDPFrontend
	for k := range change_ {
		delete(hm.udp, k)
	}
	for _, u := range udp {
		if k := udpKey(u); change_[k] != nil {
			wantUDP = append(wantUDP, u)
			hm.udp[k] = u
		}
	}
	if len(haveUDP) > 0 || len(wantUDP) > 0 {
		hm.udpJSON = nil
		hm.st.UDP = slices.SortedFunc(maps.Values(hm.udp), func(a, b proxy.UDPFrontend) int {
			return cmp.Or(a.VIP.Compare(b.VIP), cmp.Compare(a.Port, b.Port))
		})
	}
	if err := forgetUDP(m, proxy.StaleUDP(haveUDP, wantUDP)); err != nil {
		return done, fmt.Errorf("stale UDP flows: %w", err)
	}
	return done, nil
}
