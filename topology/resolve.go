package topology

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/input"

	"github.com/cnlab/cnlab/labels"
)

// Defaults and limits of the topology file.
const (
	DefaultMTU         = 1500
	DefaultTransitCIDR = "100.64.0.0/16"
	DefaultChainCIDR   = "10.100.0.0/16"
	DefaultNamespace   = "default"
	MaxLabName         = 24
	vxlanOverhead      = 50
	MetadataNameLabel  = "kubernetes.io/metadata.name"
)

// TransitCIDR6 holds the IPv6 addresses of the links between hosts in a
// lab with IPv6: each is the link's IPv4 address (from transitCIDR) in its
// last 32 bits, so a wire's two families read alike.
var TransitCIDR6 = netip.MustParsePrefix("fd00:ffff::/96")

// vxlanOverhead6 is the VXLAN header over an IPv6 underlay (a lab
// without IPv4).
const vxlanOverhead6 = 70

// reservedNamespaces cannot be Kubernetes namespaces of a lab: their names
// address hosts and chain nodes in `cnlab exec`.
var reservedNamespaces = map[string]bool{"host": true, "hop": true, "sw": true}

// MaxChainLength bounds a chain (each hop is a namespace and two links).
const MaxChainLength = 1000

type resolver struct {
	file string
	raw  *rawFile
	spec *Spec
	errs []*input.Error // every problem found, in the order of the steps
	// Hosts and namespaces the file declares wrongly: what names them is
	// not checked again, so one mistake is reported once.
	badHosts, badNamespaces map[string]bool
}

func (r *resolver) errf(path, format string, args ...any) error {
	return &input.Error{File: r.file, Path: path, Msg: fmt.Sprintf(format, args...)}
}

// add records a problem and goes on.
func (r *resolver) add(err error) {
	var l input.Errors
	var ie *input.Error
	switch {
	case errors.As(err, &l):
		r.errs = append(r.errs, l...)
	case errors.As(err, &ie):
		r.errs = append(r.errs, ie)
	default:
		r.errs = append(r.errs, &input.Error{File: r.file, Msg: err.Error()})
	}
}

// errSkip is an item not checked further because what it names was
// declared wrongly (already reported).
var errSkip = errors.New("skipped")

// each runs check on items 0..n-1, recording every item's first problem
// and going on with the next, as a compiler does.
func (r *resolver) each(n int, check func(i int) error) {
	for i := range n {
		if err := check(i); err != nil && err != errSkip {
			r.add(err)
		}
	}
}

// resolve turns a decoded file into a Spec: the command line's overrides
// first, then one named step per part of the file, in an order where each
// step only reads what the steps before it resolved. It reports every
// problem of the file at once (input.Errors when there are several): a
// step runs unless a step it reads failed, and the hosts, namespaces,
// links and endpoints steps check every item.
func resolve(raw *rawFile, file string, ov Overrides) (*Spec, error) {
	if err := applyOverrides(raw, ov); err != nil {
		return nil, err
	}
	r := &resolver{file: file, raw: raw, spec: &Spec{Source: file, Namespaces: map[string]Namespace{}},
		badHosts: map[string]bool{}, badNamespaces: map[string]bool{}}
	type step struct {
		name  string
		run   func() error
		after []string // the steps whose results it reads
	}
	steps := []step{
		{"header", r.header, nil},
		{"datapath", r.datapath, nil},
		{"chain", r.chain, []string{"header"}},
		{"hosts", r.hosts, []string{"chain"}},
		{"namespaces", r.namespaces, nil},
		{"links", r.links, []string{"header", "chain"}},
		{"routes", r.routes, []string{"hosts", "links"}},
		{"endpoints", r.endpoints, []string{"chain"}},
		{"datapathLimits", r.datapathLimits, []string{"datapath", "hosts", "endpoints"}},
		{"services", r.services, []string{"header", "datapath", "chain", "hosts"}},
		{"observe", r.observe, []string{"chain"}},
		{"l7Proxy", r.l7Proxy, nil},
	}
	failed := map[string]bool{}
next:
	for _, st := range steps {
		for _, a := range st.after {
			if failed[a] {
				failed[st.name] = true
				continue next
			}
		}
		before := len(r.errs)
		err := st.run()
		if err != nil && err != errSkip {
			r.add(err)
		}
		failed[st.name] = err == errSkip || len(r.errs) > before
	}
	if err := input.Join(r.errs); err != nil {
		return nil, err
	}
	return r.spec, nil
}

// applyOverrides writes the command line's overrides into the file's raw
// form, so that resolving checks them like the file's own fields; their
// errors name the flag.
func applyOverrides(raw *rawFile, ov Overrides) error {
	if ov.Name != "" {
		if err := labels.CheckDNSLabel(ov.Name, MaxLabName); err != nil {
			return &input.Error{File: "--name", Msg: err.Error()}
		}
		raw.Name = ov.Name
	}
	if ov.Datapath != "" {
		if _, err := kind.Parse(ov.Datapath); err != nil {
			return &input.Error{File: "--datapath", Msg: err.Error()}
		}
		raw.Datapath = ov.Datapath
	}
	dp := kind.Default
	if raw.Datapath != "" {
		dp = kind.Kind(raw.Datapath) // checked by the datapath step
	}
	if err := ov.Options.Apply(dp, &raw.RawOptions); err != nil {
		return err
	}
	if ov.MTU != 0 {
		raw.MTU = &ov.MTU
	}
	if ov.Proxy != "" {
		if _, err := kind.ParseProxy(ov.Proxy); err != nil {
			return &input.Error{File: "--service-proxy", Msg: err.Error()}
		}
		if raw.Services == nil {
			raw.Services = &rawServices{}
		}
		raw.Services.Proxy = ov.Proxy
	}
	if ov.Observe != "" {
		if err := CheckObserve(ov.Observe); err != nil {
			return &input.Error{File: "--observe", Msg: err.Error()}
		}
		raw.Observe = ov.Observe
	}
	return nil
}

// What a lab records of its flows (observe: in the file, --observe).
const (
	ObserveOff   = "off"   // nothing: no log rules, no recorder
	ObserveDrops = "drops" // every denied packet (rate-limited per flow)
	ObserveAll   = "all"   // drops, and the first packet of every new flow at each verdict point
)

// CheckObserve checks an observe level.
func CheckObserve(level string) error {
	switch level {
	case ObserveOff, ObserveDrops, ObserveAll:
		return nil
	}
	return fmt.Errorf("%q: give off, drops or all", level)
}

// observe resolves observe: (default off); a chain has no datapath to
// observe.
func (r *resolver) observe() error {
	lvl := r.raw.Observe
	if lvl == "" || lvl == ObserveOff {
		return nil // off is the zero value: specs of labs without it compare equal
	}
	if err := CheckObserve(lvl); err != nil {
		return r.errf("observe", "%v", err)
	}
	if r.spec.Chain != nil {
		return r.errf("observe", "a chain has no policy datapath to observe: observe applies to labs with hosts")
	}
	r.spec.Observe = lvl
	return nil
}

// ObserveLevel is the lab's observe level, off when unset.
func (s *Spec) ObserveLevel() string {
	if s.Observe == "" {
		return ObserveOff
	}
	return s.Observe
}

// DefaultServiceCIDR is the range cluster IPs come from when the file
// names none (kubeadm's default).
const DefaultServiceCIDR = "10.96.0.0/16"

// DefaultServiceCIDR6 is the IPv6 range cluster IPs come from in a lab
// with IPv6 whose file names none: a /108, the largest range the
// Kubernetes API server allocates from, outside the pod ranges and
// TransitCIDR6.
const DefaultServiceCIDR6 = "fd00:96::/108"

// services resolves the services: section: its CIDRs, one per family of
// the lab (which no other range of the lab may overlap), and its proxy,
// checked against the datapath.
func (r *resolver) services() error {
	s, raw := r.spec, r.raw.Services
	if raw == nil {
		raw = &rawServices{}
	}
	fams := s.Families()
	var given []string
	path := "services.cidr"
	switch {
	case raw.CIDR != "" && len(raw.CIDRs) > 0:
		return r.errf("services.cidrs", "give cidr or cidrs, not both")
	case raw.CIDR != "":
		given = []string{raw.CIDR}
	case len(raw.CIDRs) > 0:
		given, path = raw.CIDRs, "services.cidrs"
	}
	byFam := map[int]netip.Prefix{}
	for i, c := range given {
		at := path
		if path == "services.cidrs" {
			at = fmt.Sprintf("services.cidrs[%d]", i)
		}
		p, err := parsePrefix(c)
		if err == nil {
			if p.Addr().Is4() {
				err = unicastRange(p)
			} else {
				err = unicastRange6(p)
			}
		}
		if err != nil {
			return r.errf(at, "%v", err)
		}
		fam := Family(p.Addr())
		if _, dup := byFam[fam]; dup {
			return r.errf(at, "%s is a second IPv%d range: give one range per family", p, fam)
		}
		if !s.HasFamily(fam) {
			return r.errf(at, "%s is an IPv%d range, but the lab's pods have %s only (hosts' podCIDRs)", p, fam, familyNames(fams))
		}
		if fam == 4 && p.Bits() > 28 {
			return r.errf(at, "%s is too small: give at least a /28", p)
		}
		if fam == 6 && p.Bits() > 124 {
			return r.errf(at, "%s is too small: give at least a /124", p)
		}
		byFam[fam] = p
	}
	if len(given) > 0 && len(byFam) < len(fams) {
		var missing []string
		for _, f := range fams {
			if _, ok := byFam[f]; !ok {
				missing = append(missing, fmt.Sprintf("IPv%d", f))
			}
		}
		return r.errf(path, "gives no %s range, but the lab's pods have %s: give one range per family (cidrs: [IPv4, IPv6]), or none for the defaults %s and %s", strings.Join(missing, " and "), familyNames(fams), DefaultServiceCIDR, DefaultServiceCIDR6)
	}
	for _, f := range fams {
		if _, ok := byFam[f]; ok {
			continue
		}
		d := DefaultServiceCIDR
		if f == 6 {
			d = DefaultServiceCIDR6
		}
		byFam[f] = netip.MustParsePrefix(d)
	}
	type named struct {
		name string
		p    netip.Prefix
	}
	ranges := []named{{"transitCIDR", s.TransitCIDR}}
	if s.HasFamily(6) {
		ranges = append(ranges, named{"the IPv6 transit range", TransitCIDR6})
	}
	for i, h := range s.Hosts {
		for _, c := range h.PodCIDRs {
			ranges = append(ranges, named{fmt.Sprintf("hosts[%d].podCIDR", i), c})
		}
		if len(h.PodCIDRs) == 0 {
			ranges = append(ranges, named{fmt.Sprintf("hosts[%d].podCIDR", i), h.PodCIDR})
		}
	}
	if s.Chain != nil {
		ranges = append(ranges, named{"chain.cidr", s.Chain.CIDR})
	}
	s.Services.CIDRs = nil
	for _, f := range fams {
		p := byFam[f]
		at := path
		if path == "services.cidrs" {
			at = fmt.Sprintf("services.cidrs[%d]", slices.IndexFunc(given, func(c string) bool { q, _ := parsePrefix(c); return q == p }))
		}
		for _, o := range ranges {
			if o.p.IsValid() && p.Overlaps(o.p) {
				return r.errf(at, "%s overlaps %s %s", p, o.name, o.p)
			}
		}
		s.Services.CIDRs = append(s.Services.CIDRs, p)
	}
	s.Services.CIDR = s.Services.CIDRs[0]
	s.Services.Proxy = kind.DefaultProxy(s.Datapath)
	if raw.Proxy != "" {
		px, err := kind.ParseProxy(raw.Proxy)
		if err != nil {
			return r.errf("services.proxy", "%v", err)
		}
		if why := px.Pairs(s.Datapath); why != "" {
			return r.errf("services.proxy", "%s", why)
		}
		s.Services.Proxy = px
	}
	return nil
}

// header resolves the lab's name, MTU and transit CIDR.
func (r *resolver) header() error {
	raw, s := r.raw, r.spec
	if raw.Name == "" {
		return r.errf("name", "is required (the lab's name, e.g. name: demo)")
	}
	if err := labels.CheckDNSLabel(raw.Name, MaxLabName); err != nil {
		return r.errf("name", "%v", err)
	}
	s.Name = raw.Name
	s.MTU = DefaultMTU
	if raw.MTU != nil {
		s.MTU = *raw.MTU
	}
	if s.MTU < 68 || s.MTU > 65535-vxlanOverhead {
		return r.errf("mtu", "%d is out of range (68 to %d)", s.MTU, 65535-vxlanOverhead)
	}
	tc := raw.TransitCIDR
	if tc == "" {
		tc = DefaultTransitCIDR
	}
	p, err := parsePrefix4(tc)
	if err == nil {
		err = unicastRange(p)
	}
	if err != nil {
		return r.errf("transitCIDR", "%v", err)
	}
	s.TransitCIDR = p
	return nil
}

// datapath resolves the lab's datapath and its options (the chain step
// then replaces it with kind.None for chains).
func (r *resolver) datapath() error {
	s := r.spec
	s.Datapath = kind.Default
	if r.raw.Datapath != "" {
		k, err := kind.Parse(r.raw.Datapath)
		if err != nil {
			return r.errf("datapath", "%v", err)
		}
		s.Datapath = k
	}
	o, err := kind.Resolve(r.file, s.Datapath, r.raw.RawOptions)
	s.Options = o
	return err
}

// datapathLimits checks what the datapath must hold (the eBPF maps'
// endpoints per host), so that a lab that could not be set up is refused
// before anything is built.
func (r *resolver) datapathLimits() error {
	per := map[string]int{}
	for _, ep := range r.spec.Endpoints {
		per[ep.Host]++
	}
	return kind.CheckEndpoints(r.file, r.spec.Datapath, &r.spec.Options, r.hostNames(), per)
}

// familyNames names families: "IPv4", "IPv6", "IPv4 and IPv6".
func familyNames(fams []int) string {
	var names []string
	for _, f := range fams {
		names = append(names, fmt.Sprintf("IPv%d", f))
	}
	return strings.Join(names, " and ")
}
