package nftables

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"

	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/internal/fault"
	"github.com/cnlab/cnlab/proxy"
	"github.com/cnlab/cnlab/service"
	"github.com/cnlab/cnlab/topology"
)

// A change of a few Services among many costs what changes, not the
// whole table: ApplyChange renders only the frontends that differ between
// the table last applied and the new one, sends their difference (a
// delta) to each host as one netlink batch, and appends the delta to a
// log next to the host's state file instead of writing the whole state
// (at 10,000 Services, render, diff, state load and save and nft's own
// read-back took 300-1,000 ms, BENCHMARKS.md). The log is written under
// the same dirty mark as the state; Apply folds it into the state file
// before it reads it, or drops it with a state it does not trust.

// delta is a change of a host's table (and of its hostState): chains set
// to their rules or deleted, map elements set or deleted, sets created or
// deleted, UDP frontends replaced or gone. It is the log's record.
type delta struct {
	Chains  map[string][]string          `json:"chains,omitempty"`
	DelCh   []string                     `json:"delChains,omitempty"`
	Maps    map[string]map[string]string `json:"maps,omitempty"`
	DelEl   map[string][]string          `json:"delElements,omitempty"`
	Sets    []string                     `json:"sets,omitempty"`
	DelSets []string                     `json:"delSets,omitempty"`
	UDP     []proxy.UDPFrontend          `json:"udp,omitempty"`
	DelUDP  []proxy.UDPFrontend          `json:"delUdp,omitempty"`
}

// diffStates is the delta from have to want, two renders of a few
// frontends (their fixed chains are the same and drop out).
func diffStates(have, want *hostState) *delta {
	d := &delta{Chains: map[string][]string{}, Maps: map[string]map[string]string{}, DelEl: map[string][]string{}}
	for _, name := range sorted(want.Chains) {
		if old, ok := have.Chains[name]; !ok || !slices.Equal(old, want.Chains[name]) {
			d.Chains[name] = want.Chains[name]
		}
	}
	for _, name := range sorted(have.Chains) {
		if _, ok := want.Chains[name]; !ok {
			d.DelCh = append(d.DelCh, name)
		}
	}
	for _, m := range maps {
		h, w := have.Maps[m.name], want.Maps[m.name]
		for _, k := range sorted(h) {
			if v, ok := w[k]; !ok || v != h[k] {
				d.DelEl[m.name] = append(d.DelEl[m.name], k)
			}
		}
		for _, k := range sorted(w) {
			if v, ok := h[k]; !ok || v != w[k] {
				if d.Maps[m.name] == nil {
					d.Maps[m.name] = map[string]string{}
				}
				d.Maps[m.name][k] = w[k]
			}
		}
	}
	for _, s := range want.Sets {
		if !slices.Contains(have.Sets, s) {
			d.Sets = append(d.Sets, s)
		}
	}
	for _, s := range have.Sets {
		if !slices.Contains(want.Sets, s) {
			d.DelSets = append(d.DelSets, s)
		}
	}
	d.DelUDP, d.UDP = have.UDP, want.UDP
	return d
}

func (d *delta) empty() bool {
	if len(d.Chains) > 0 || len(d.DelCh) > 0 || len(d.Sets) > 0 || len(d.DelSets) > 0 || len(d.UDP) > 0 || len(d.DelUDP) > 0 {
		return false
	}
	for _, m := range d.Maps {
		if len(m) > 0 {
			return false
		}
	}
	for _, k := range d.DelEl {
		if len(k) > 0 {
			return false
		}
	}
	return true
}

// apply brings st to what it is after d. Each step sets or deletes, so a
// delta applied twice leaves what it left once (a log folded again after
// a crash).
func (d *delta) apply(st *hostState) {
	for _, name := range d.DelCh {
		delete(st.Chains, name)
	}
	for name, rules := range d.Chains {
		st.Chains[name] = rules
	}
	for m, keys := range d.DelEl {
		for _, k := range keys {
			delete(st.Maps[m], k)
		}
	}
	for m, els := range d.Maps {
		if st.Maps[m] == nil {
			st.Maps[m] = map[string]string{}
		}
		for k, v := range els {
			st.Maps[m][k] = v
		}
	}
	st.Sets = slices.DeleteFunc(st.Sets, func(s string) bool { return slices.Contains(d.DelSets, s) || slices.Contains(d.Sets, s) })
	st.Sets = append(st.Sets, d.Sets...)
	slices.Sort(st.Sets)
	same := func(list []proxy.UDPFrontend) func(proxy.UDPFrontend) bool {
		return func(u proxy.UDPFrontend) bool {
			return slices.ContainsFunc(list, func(x proxy.UDPFrontend) bool {
				return x.VIP == u.VIP && x.Port == u.Port && x.NodePort == u.NodePort
			})
		}
	}
	if len(d.DelUDP) > 0 || len(d.UDP) > 0 {
		st.UDP = slices.DeleteFunc(st.UDP, same(d.DelUDP))
		st.UDP = slices.DeleteFunc(st.UDP, same(d.UDP))
		st.UDP = append(st.UDP, d.UDP...)
	}
}

// reverse is the delta that undoes d on the state it applied to (before:
// the rendered old frontends, after: the new).
func reverse(before, after *hostState) *delta { return diffStates(after, before) }

// batch sends d in one netlink transaction, in diffScript's order.
func (d *delta) batch() (*batch, error) {
	b, err := newBatch()
	if err != nil {
		return nil, err
	}
	for _, s := range d.Sets {
		if err := b.addSet(s); err != nil {
			return nil, err
		}
	}
	names := sorted(d.Chains)
	for _, name := range names {
		b.addChain(name) // creates it, or leaves it as it is
		b.flushChain(name)
	}
	for _, name := range names {
		for _, r := range d.Chains[name] {
			if err := b.addRule(name, r); err != nil {
				return nil, err
			}
		}
	}
	for _, m := range maps {
		if keys := d.DelEl[m.name]; len(keys) > 0 {
			if err := b.setElements(m.name, keys, nil, false); err != nil {
				return nil, err
			}
		}
		if els := d.Maps[m.name]; len(els) > 0 {
			if err := b.setElements(m.name, sorted(els), els, true); err != nil {
				return nil, err
			}
		}
	}
	for _, name := range d.DelCh {
		b.flushChain(name)
	}
	for _, name := range d.DelCh {
		b.delChain(name)
	}
	for _, s := range d.DelSets {
		b.delSet(s)
	}
	return b, nil
}

// logPath is the delta log next to a host's state file.
func logPath(statePath string) string { return statePath + ".log" }

// appendLog appends d to the host's log.
func appendLog(path string, d *delta) error {
	data, err := json.Marshal(d)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(logPath(path), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(append(data, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// foldLog brings a host's state file up to date with its log and removes
// the log: before Apply reads the state. A host marked dirty is rebuilt
// whatever its files say, so its log just goes; a log that cannot be
// read takes the state file with it (the host is rebuilt).
func foldLog(path string) error {
	data, err := os.ReadFile(logPath(path))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	drop := func() error {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return os.Remove(logPath(path))
	}
	if err != nil || change.Dirty(path) {
		return drop()
	}
	var st hostState
	if err := change.LoadState(path, &st); err != nil || st.Chains == nil {
		return drop()
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, len(data)+1)
	for sc.Scan() {
		var d delta
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			return drop()
		}
		d.apply(&st)
	}
	if err := change.SaveState(path, st); err != nil {
		return drop()
	}
	// Removed after the state is saved: a crash between leaves a log
	// already in the state, and folding it again changes nothing.
	return os.Remove(logPath(path))
}

// compactLog says when ApplyChange folds a host's log into its state
// file: once the log outgrows it (and 64 KiB). A test folds at every change.
var compactLog = func(logSize, stateSize int64) bool { return logSize > max(stateSize, 1<<16) }

// memo is what this process last wrote to a lab's hosts: the start of
// the next change, trusted only for the table it was written for, and per
// host only while the host's files are those it wrote.
type memo struct {
	table *service.Table
	set   string
	hosts map[string]*hostMemo
}

type hostMemo struct {
	st        hostState
	state     os.FileInfo // the state file as written
	log       os.FileInfo // the log as last appended (nil: none)
	logLength int64
}

// memos are the tables this process last applied, per lab.
var memos change.Memos[*memo]

func takeMemo(lab string) *memo { return memos.Take(lab) }

func keepMemo(lab string, m *memo) { memos.Keep(lab, m) }

// unchanged reports whether a host's files are still those the memo
// wrote for set: clean, recording set, the state file and log as written.
func (hm *hostMemo) unchanged(path, set string) bool {
	if hm == nil || hm.state == nil {
		return false
	}
	hs := change.ReadHost(path)
	if hs.Dirty || len(hs.Sets) != 1 || hs.Sets[0] != set {
		return false
	}
	same := func(p string, was os.FileInfo) bool {
		fi, err := os.Stat(p)
		if was == nil {
			return errors.Is(err, os.ErrNotExist)
		}
		return err == nil && os.SameFile(fi, was) && fi.ModTime().Equal(was.ModTime()) && fi.Size() == was.Size()
	}
	return same(path, hm.state) && same(logPath(path), hm.log)
}

// keepAfterApply keeps what a whole Apply wrote.
func keepAfterApply(lab *topology.Spec, t *service.Table, set string, wants map[string]*hostState) {
	m := &memo{table: t, set: set, hosts: map[string]*hostMemo{}}
	for _, h := range lab.Hosts {
		w := wants[h.Name]
		if w == nil {
			return
		}
		fi, err := os.Stat(change.StatePath(lab.Name, StateKind, h.Name))
		if err != nil {
			return
		}
		m.hosts[h.Name] = &hostMemo{st: *w, state: fi}
	}
	keepMemo(lab.Name, m)
}

// sameFrontend reports whether two frontends render the same on every
// host.
func sameFrontend(a, b *service.Frontend) bool {
	if a.Service != b.Service || a.PortName != b.PortName || a.Port != b.Port || a.NodePort != b.NodePort || a.VIP != b.VIP ||
		a.Protocol != b.Protocol || a.Affinity != b.Affinity || a.InternalLocal != b.InternalLocal ||
		a.ExternalLocal != b.ExternalLocal || a.Key() != b.Key() {
		return false
	}
	return slices.Equal(a.Backends, b.Backends)
}

// ApplyChange is Apply for a change from the table from, which the caller
// last applied, to t. Where this process wrote from to every host and each
// host's files are still those it wrote, only the frontends between the
// tables' longest common head and tail are rendered, and each host gets
// their difference as one netlink batch and in its log; otherwise, or if
// the netlink path cannot express the change, it is Apply. The dirty
// marks, fault points and rollback are Apply's (change.ApplyHosts).
func (p nftables) ApplyChange(ctx context.Context, lab *topology.Spec, from, t *service.Table) error {
	if len(lab.Hosts) == 0 {
		return change.ErrNoHosts
	}
	m := takeMemo(lab.Name)
	// The netlink path writes the ip table only: a lab with IPv6 takes
	// Apply (both tables, one nft -f transaction per host).
	ok := m != nil && from != nil && m.table == from && !lab.HasFamily(6)
	for i := 0; ok && i < len(lab.Hosts); i++ {
		h := lab.Hosts[i].Name
		ok = m.hosts[h].unchanged(change.StatePath(lab.Name, StateKind, h), m.set)
	}
	if !ok {
		return p.Apply(ctx, lab, t)
	}
	digest := make(chan string, 1)
	go func() { digest <- proxy.Digest(t) }()
	a, b := from.Frontends, t.Frontends
	head, tail := proxy.ChangedRange(a, b, sameFrontend)
	if 2*(len(a)+len(b)-2*(head+tail)) > len(b)+len(a) && len(a)+len(b) > 64 {
		// Most frontends of many change: Apply is no slower. (A small
		// table goes by the change all the same: the lab's tests run
		// this path.)
		<-digest
		return p.Apply(ctx, lab, t)
	}
	removed := &service.Table{Frontends: a[head : len(a)-tail]}
	added := &service.Table{Frontends: b[head : len(b)-tail]}
	type hostChange struct {
		h             *topology.Host
		path          string
		before, after hostState
		d             *delta
		b             *batch
	}
	var changes []hostChange
	for i := range lab.Hosts {
		h := &lab.Hosts[i]
		hc := hostChange{h: h, path: change.StatePath(lab.Name, StateKind, h.Name),
			before: Render(removed, h.Name), after: Render(added, h.Name)}
		hc.d = diffStates(&hc.before, &hc.after)
		// What the delta creates must not be held by another frontend.
		st := m.hosts[h.Name].st
		fits := true
		for name := range hc.d.Chains {
			_, mine := hc.before.Chains[name]
			if _, held := st.Chains[name]; held && !mine {
				fits = false
			}
		}
		for mp, els := range hc.d.Maps {
			for k := range els {
				_, mine := hc.before.Maps[mp][k]
				if _, held := st.Maps[mp][k]; held && !mine {
					fits = false
				}
			}
		}
		for _, s := range hc.d.Sets {
			if slices.Contains(st.Sets, s) {
				fits = false
			}
		}
		var err error
		if fits {
			hc.b, err = hc.d.batch()
		}
		if !fits || err != nil {
			if err != nil {
				slog.Debug("nftables: change applied whole", "host", h.Name, "err", err)
			}
			<-digest
			return p.Apply(ctx, lab, t)
		}
		changes = append(changes, hc)
	}
	set := <-digest
	// send loads a host's batch, with the fault point of change.Load.
	send := func(hc *hostChange, bt *batch) error {
		if err := fault.At(fault.AtomicLoad, hc.h.Name); err != nil {
			return err
		}
		return bt.send(hc.h.Netns)
	}
	// save appends a delta to the host's log and notes the log as written;
	// a log grown past the state file is folded into it (the memo's state
	// written whole), so that it costs at most what Apply's save does,
	// spread over the changes.
	save := func(hc *hostChange, d *delta, st string) error {
		hm := m.hosts[hc.h.Name]
		err := appendLog(hc.path, d)
		if err == nil {
			hm.log, err = os.Stat(logPath(hc.path))
		}
		if err == nil && compactLog(hm.log.Size(), hm.state.Size()) {
			if err = change.SaveState(hc.path, hm.st); err == nil {
				err = os.Remove(logPath(hc.path))
			}
			if err == nil {
				hm.log = nil
				hm.state, err = os.Stat(hc.path)
			}
		}
		if err == nil {
			err = change.RecordSet(hc.path, st)
		}
		if err != nil {
			hm.state = nil // not to be trusted by the next change
		}
		return err
	}
	var applied []*hostChange
	restore := func(hc *hostChange) error {
		if err := change.MarkDirty(hc.path, m.set); err != nil {
			return fmt.Errorf("roll back %s: %w", hc.h.Name, err)
		}
		back := reverse(&hc.before, &hc.after)
		bt, err := back.batch()
		if err == nil {
			err = bt.send(hc.h.Netns)
		}
		if err != nil {
			return fmt.Errorf("roll back %s: %w", hc.h.Name, err)
		}
		hm := m.hosts[hc.h.Name]
		back.apply(&hm.st)
		if err := save(hc, back, m.set); err != nil {
			return fmt.Errorf("roll back %s: %w (it is left marked for rebuild)", hc.h.Name, err)
		}
		flushStale(hc.h, back)
		return change.ClearDirty(hc.path)
	}
	rollback := func(cause error) error { return change.RollBack(cause, applied, restore) }
	for i := range changes {
		hc := &changes[i]
		if err := change.MarkDirty(hc.path, set); err != nil {
			return rollback(fmt.Errorf("host %s: mark datapath state: %w", hc.h.Name, err))
		}
		err := fault.At(fault.Dirty, hc.h.Name)
		if err == nil {
			err = send(hc, hc.b)
		}
		if err != nil {
			// The batch is one transaction: nothing of it committed, the
			// host holds what its files say; unless its acknowledgements
			// were lost, and the host, left marked, is rebuilt next.
			if ctx.Err() == nil && !errors.Is(err, errOutcomeUnknown) {
				_ = change.ClearDirty(hc.path)
			}
			return rollback(fmt.Errorf("host %s: %w", hc.h.Name, err))
		}
		change.KernelChanged(hc.h.Name)
		hc.d.apply(&m.hosts[hc.h.Name].st)
		applied = append(applied, hc)
		if err := save(hc, hc.d, set); err != nil {
			return rollback(fmt.Errorf("host %s: save datapath state: %w", hc.h.Name, err))
		}
		_ = fault.At(fault.Saved, hc.h.Name)
		flushStale(hc.h, hc.d)
		_ = change.ClearDirty(hc.path)
		change.HostDone(hc.h.Name)
	}
	m.table, m.set = t, set
	keepMemo(lab.Name, m)
	return nil
}

// flushStale deletes the UDP flows a delta leaves pointing at a backend
// gone, as Apply does.
func flushStale(h *topology.Host, d *delta) {
	if stale := proxy.StaleUDP(d.DelUDP, d.UDP); len(stale) > 0 {
		if _, err := proxy.FlushUDP(h.Netns, stale); err != nil {
			slog.Warn("stale UDP flows kept", "host", h.Name, "err", err)
		}
	}
}
