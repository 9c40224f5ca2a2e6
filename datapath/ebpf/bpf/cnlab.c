// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// cnlab's eBPF datapath: label-identity policy and Service translation,
// loaded once per host (load.go, attach.go) and attached with tcx and
// cgroup links pinned under /sys/fs/bpf/cnlab/LAB/HOST/links.
//
//   cnlab_from_ep       tcx ingress of each endpoint's host-side veth:
//                       what the endpoint sends (its egress). A front (ARP
//                       and other L3, parse, source check, Service
//                       translation) and two paths, global functions the
//                       verifier checks on their own: from_ep_remote
//                       (another host, the world, or the bridge of legacy
//                       host routing) and from_ep_local (an endpoint of this
//                       host: both sides judged, then bpf_redirect_peer or
//                       the L7 proxy).
//   cnlab_to_ep         tcx egress of each endpoint's host-side veth: what
//                       the host's stack or bridge delivers to the endpoint
//                       (its ingress).
//   cnlab_from_wire     tcx ingress of the host's wire and VXLAN devices:
//                       replies of masqueraded node-port connections, and
//                       connections from other hosts to an L7 port; the
//                       rest passes untouched.
//   cnlab_connect4      cgroup connect4 and connect6 at the root of the
//   cnlab_connect6      cgroup v2 hierarchy, with ebpf.connectHook or
//                       ebpf.socketLB: socket-level Service translation,
//                       and the connect hook's verdict on a TCP connect().
//   cnlab_sendmsg4      cgroup sendmsg4, recvmsg4 and getpeername4 (and
//   cnlab_recvmsg4      their IPv6 programs), with ebpf.socketLB:
//   cnlab_getpeername4  socket-level translation of UDP datagrams, their
//                       answers, and the peer a socket names.
//
// policy_verdict, from_ep_remote and from_ep_local are global functions
// (noinline, verified once each); everything else is inlined. The host
// routing mode is a load-time constant (host_routing_bpf), not a map read.
//
// A new flow costs, per side, an ipcache lookup (LPM trie: address -> peer
// key) and a policy lookup on peer, direction, protocol and port (a hash
// map of exact entries, then an LPM trie of the others on a miss) with the
// peer's key, and another with the wildcard peer where the endpoint has
// wildcard entries, whatever the number of policies and of their tiers
// (each value carries its decision's precedence: policy_val); an established flow
// costs one conntrack lookup. Policy maps are
// double-buffered: user space fills generation 1-g while packets use g, and
// one word in the config map switches every endpoint of the host at once.
//
// The rules for what is not an IPv4 policy decision are explicit and
// documented in docs/ebpf.md: ARP must name the endpoint as its sender,
// and is then answered (bpf host routing) or passed to the bridge
// (legacy); IPv6 is judged as IPv4 is, on a path of its own (from_ep6,
// to_ep6: its own ipcache, conntrack and fragment maps, the same policy
// maps), its neighbour discovery checked as ARP is; other L3 protocols
// are dropped, malformed headers are dropped, a non-first fragment
// passes only if its first fragment passed at the same enforcement point.

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char __license[] SEC("license") = "Dual MIT/GPL";

// From linux/if_arp.h, which drags in libc headers.
#define ARPOP_REQUEST 1
#define ARPOP_REPLY 2
#define ARPHRD_ETHER 1

struct arphdr {
	__be16 ar_hrd;
	__be16 ar_pro;
	__u8 ar_hln;
	__u8 ar_pln;
	__be16 ar_op;
};

// The constants user space shares are enums, so that bpf2go emits them
// for Go (-type in datapath/ebpf/gen.go): Go uses the generated names and
// never copies a value.

// Directions at an endpoint, numbered as the policy model numbers them.
enum dir {
	DIR_INGRESS = 0,
	DIR_EGRESS = 1,
};

// Verdict reasons; below R_FIRST_DROP a packet passes, from it on it is
// dropped. They index the per-endpoint counters, R_MAX per endpoint and
// direction. datapath/ebpf/reasons.go names each one (its test fails on a
// reason it does not name).
enum reason {
	R_ALLOW_POLICY = 1,     // new flow allowed by a policy entry
	R_ALLOW_UNENFORCED = 2, // new flow, direction not isolated
	R_ALLOW_CT = 3,         // established or reply (conntrack)
	R_ALLOW_RELATED = 4,    // ICMP error about a tracked flow
	R_ALLOW_FRAG = 5,       // later fragment of an allowed datagram
	R_ARP_REPLIED = 6,      // ARP request answered by the program
	R_ARP_PASSED = 7,       // ARP passed unchecked (legacy, or to the host)
	R_ALLOW_PROXY = 8,      // new flow allowed at L3/L4 to an L7 port: handed to the L7 proxy
	R_ALLOW_FROM_PROXY = 9, // sent by the host's L7 proxy (its mark), for a connection it was handed
	R_FIRST_DROP = 16,      // is_drop: this and every reason after it
	R_DROP_DENY = 16,       // a deny entry decided
	R_DROP_DEFAULT = 17,    // isolated direction, no allow entry matched
	R_DROP_MALFORMED = 18,  // truncated or invalid headers
	R_DROP_FRAG = 19,       // fragment whose first fragment was not seen
	R_DROP_IPV6 = 20,       // IPv6 of an endpoint without an IPv6 address, or that the program cannot parse (AH, too many extension headers)
	R_DROP_L3 = 21,         // other ethertypes, other ARP
	R_DROP_SPOOF = 22,      // source address is not the endpoint's
	R_DROP_UNKNOWN = 23,    // interface or destination unknown to the maps
	R_DROP_SVC_REJECT = 24, // new connection to a Service without backends: rejected (ICMP port unreachable)
	R_DROP_SVC_NO_LOCAL = 25, // internalTrafficPolicy Local, no backend on this host: dropped
	R_DROP_SVC_NO_PORT = 26,  // masquerade: no free source port to the backend found
	R_DROP_NO_PROXY = 27,     // for the L7 proxy, which does not listen: dropped
	R_DROP_NOT_PROXIED = 28,  // a connection for the L7 proxy that came around it (or a packet of one)
	R_DROP_SVC_TOO_BIG = 29,  // masqueraded, DF, larger than the way's MTU: answered with fragmentation needed
	R_DROP_INVALID = 30,      // a new TCP flow that does not begin as a connection does (conntrack's "invalid")
	R_MAX = 32,
};

// Bits of config.flags.
enum config_flag {
	// Recorded by Setup for describe and for its check that pinned maps
	// were made with the lab's options; the programs read the load-time
	// constant host_routing_bpf instead.
	FLAG_HOST_ROUTING_BPF = 1,
	FLAG_CONNECT_HOOK = 2, // the connect hook judges TCP connects against policy
	FLAG_L7 = 4,           // some endpoint of the host has (or had) an L7 port (set by apply, never cleared)
};

// The L7 proxy (l7proxy): a connection to an endpoint's L7 port is
// assigned to the proxy's socket (bpf_sk_assign) and marked MARK_TO_PROXY,
// which a policy rule of the host routes to its local table (ip rule
// fwmark MARK_TO_PROXY/MARK_MASK lookup L7_TABLE; local 0.0.0.0/0 dev lo
// in L7_TABLE); what the proxy sends carries MARK_FROM_PROXY (SO_MARK).
enum l7 {
	L7_PROXY_PORT = 15001, // l7proxy.Port
	L7_TABLE = 2004,
	MARK_MASK = 0xf00,
	MARK_TO_PROXY = 0x200,
	MARK_FROM_PROXY = 0xa00, // l7proxy.Mark
};

// Bits of cnlab_enforce: the isolated directions of an endpoint, and the
// directions in which its policy has entries for any peer (key 0):
// without them the programs skip the wildcard lookup. An egress bit is
// its ingress bit shifted by DIR_EGRESS (policy_verdict shifts by dir).
enum isolation {
	ISO_INGRESS = 1,
	ISO_EGRESS = 2,
	WILD_INGRESS = 4,
	WILD_EGRESS = 8,
};

// What cnlab monitor asks the programs to report (monitor.level).
enum monitor_level {
	MONITOR_OFF = 0,
	MONITOR_DROPS = 1,
	MONITOR_ALL = 2,
	// Drops (rate-limited as MONITOR_ALL's) and every new flow's verdict
	// (is_new_flow), each once, not rate-limited; no established,
	// related or fragment packet.
	MONITOR_FLOWS = 3,
};

// Where an event was decided (event.at).
enum event_at {
	AT_TC = 0,      // a tc program, on a packet
	AT_CONNECT = 1, // the connect hook, before any packet
};

// The peer key and identity of addresses the ipcache does not know.
enum identity {
	WORLD_IDENTITY = 2,
	FIRST_CIDR_IDENTITY = 1 << 24, // policy.FirstCIDRIdentity: below it, endpoints
};

// Bits of svc_config.flags (written by the ebpf service proxy).
enum svc_config_flag {
	SVC_ON = 1,     // the host has Services: look up translations
	SVC_SOCKET = 2, // and translate at the socket too (ebpf.socketLB)
	SVC_NODEPORTS = 4, // some frontends are node ports: look up NODEPORT_MIN-MAX on any address
};

// The node port range (service.NodePortMin, NodePortMax).
enum nodeport_range {
	NODEPORT_MIN = 30000,
	NODEPORT_MAX = 32767,
};

// Bits of svc_val.flags.
enum svc_flag {
	SVC_DROP = 1, // no backend for this host's clients: drop, do not reject
	SVC_MASQ = 2, // masquerade new connections to svc_config.masq (a node port, externalTrafficPolicy Cluster)
};

// Kinds of cnlab_nat entries (nat_key.dir).
enum nat_dir {
	NAT_FWD = 0, // client -> service: the tuple to write instead
	NAT_REV = 1, // backend -> client (as it leaves the backend): the tuple the client must see
};

// What a policy map value's decision does (policy_val.act).
enum policy_act {
	ACT_NONE = 0,  // no decision (below_act: no non-Admin entry covers the key)
	ACT_ALLOW = 1,
	ACT_PROXY = 2, // allow, and new connections go to the L7 proxy (an L7 port)
	ACT_DENY = 3,
	ACT_PASS = 4,  // an Admin-tier Pass: the first non-Admin decision decides
};

// Precedences of the tiers' decisions (policy_val.prec): an Admin-tier
// entry's is its rank, below PREC_NP_DENY.
enum policy_prec {
	PREC_NP_DENY = 1 << 30,           // a NetworkPolicy-tier deny
	PREC_NP_ALLOW = (1 << 30) + 1,    // a NetworkPolicy-tier allow
	PREC_BASELINE = (1 << 30) + 2,    // + rank: a Baseline-tier entry
	PREC_DEFAULT = 0xfffffffe,        // the allow of a direction not isolated (an L7 port's, proxied)
	PREC_NONE = 0xffffffff,
};

// The rule of a verdict no policy entry decided (event.rule).
enum rule_ref {
	NO_RULE = 0xffffffff,
};

// What a rule decided (rule_key.verdict).
enum rule_verdict {
	RV_ALLOW = 1, // an allow (to the L7 proxy too)
	RV_DENY = 2,
	RV_PASS = 3, // an Admin Pass that nothing below decided: the default did
};

// What the programs ask policy_verdict to count in cnlab_rule_counters
// (query.count).
enum rule_count_mode {
	RC_NONE = 0, // a look ahead: the packet's verdict is taken again elsewhere
	RC_ALL = 1,
	RC_DROPS = 2, // the connect hook: an allowed connect's SYN is counted by tc
};

struct config {
	__u32 gen;    // active policy generation, 0 or 1
	__u32 flags;  // enum config_flag
	__u32 max_ep; // stride of the per-generation arrays
	__u32 policy_size; // max_entries of every policy map (checked by user space)
	// The host's bridge: legacy host routing hands packets for the L7
	// proxy up to the host's stack through it.
	__u32 bridge_ifindex;
	__u8 bridge_mac[6];
	__u16 pad;
};

// Load-time constants (.rodata), set by load.go from the lab's options
// before the programs are loaded: fixed for a lab's life, so the verifier
// knows their values and drops the branches they rule out, and no packet
// reads them from a map.

// bpf host routing (1) or legacy (0): ebpf.hostRouting.
volatile const __u32 host_routing_bpf = 0;

// Written by `cnlab monitor` only (the config by apply only), so neither
// overwrites the other's fields.
struct monitor {
	__u32 level; // enum monitor_level
	__u32 pad;
	__u64 until; // lease (ktime ns): no events after it
};

struct endpoint {
	__u32 index;    // slot in the per-endpoint arrays
	__u32 identity; // security identity
	__u32 ip;       // network order (255.255.255.255: none, an IPv6-only lab)
	__u32 ifindex;  // host-side veth
	__u8 mac[6];    // endpoint's eth0
	__u8 lxc_mac[6];// host-side veth
	__u32 ip6[4];   // its IPv6 address, all zero: none
};

struct ipcache_key {
	__u32 prefixlen;
	__u32 ip; // network order
};

struct ipcache6_key {
	__u32 prefixlen;
	__u32 ip[4];
};

struct peer {
	__u32 key;      // the peer as policy keys name it
	__u32 identity; // its security identity (for events)
};

struct policy_key {
	__u32 prefixlen; // 40: any protocol, 48: any port, up to 64: port prefix
	__u32 peer;      // peer key, 0 for any peer
	__u8 dir;
	__u8 proto;
	__u16 port; // network order, so port ranges are prefixes
};

// A policy map value: the decision of the entries covering its key, in
// the precedence order of the tiers (docs/ebpf.md, "Policy tiers"): the
// entry of lowest precedence among every entry of the peer and direction
// whose prefix contains the key's (its own and the shorter ones), and the
// lowest among those not of the Admin tier, which decides after an Admin
// Pass. Precedence: Admin entries their rank (below PREC_NP_DENY), then
// the NetworkPolicy tier's denies, its allows, the Baseline tier's
// entries in order, the default allow of a direction not isolated last.
struct policy_val {
	__u32 prec;       // the first decision's precedence
	__u32 rule;       // its rule, for events
	__u32 below_prec; // the first non-Admin decision's precedence, PREC_NONE: none
	__u32 below_rule;
	__u8 act;         // enum policy_act of the first decision
	__u8 below_act;   // of the first non-Admin one
	__u8 pad[2];
};

struct ct_key {
	__u32 saddr, daddr;
	__u16 sport, dport;
	__u8 proto;
	__u8 scope; // 0: host-local path (both sides checked), 1 + dir at ep
	__u16 ep;
};

struct ct_val {
	__u64 expires;
	__u32 flags;
	__u32 pad;
};

#define CT_CLOSING 1 // RST seen
#define CT_FIN 2     // FIN seen
#define CT_PROXY 4   // the flow goes to the L7 proxy

// The IPv6 path's conntrack and fragment keys (cnlab_ct6, cnlab_frag6):
// IPv4's with 16-byte addresses (and the fragment header's 32-bit id).
struct ct6_key {
	__u32 saddr[4], daddr[4];
	__u16 sport, dport;
	__u8 proto;
	__u8 scope;
	__u16 ep;
};

struct frag6_key {
	__u32 saddr[4], daddr[4];
	__u32 id;
	__u8 proto;
	__u8 scope;
	__u16 ep;
};

struct frag_key {
	__u32 saddr, daddr;
	__u16 id;
	__u8 proto;
	__u8 scope;
	__u16 ep;
	__u16 pad;
};

struct frag_val {
	__u16 sport, dport;
	__u64 expires;
};

struct counter {
	__u64 packets;
	__u64 bytes;
};

// A key of cnlab_rule_counters: the rule (RuleRef of its origin), the
// slot of the endpoint whose policy it is (gen*max_ep + index), the
// direction and what the rule decided. Laid out as struct policy_key,
// whose place in a query it takes once the lookups are done (no stack of
// its own in policy_verdict, on the programs' deepest chain of calls).
struct rule_key {
	__u32 rule;
	__u32 slot;
	__u8 dir;
	__u8 verdict; // enum rule_verdict
	__u16 pad;
};

struct event {
	__u64 time;
	__u32 saddr, daddr;
	__u16 sport, dport;
	__u8 proto;
	__u8 dir;    // direction at the endpoint that decided
	__u8 reason;
	__u8 at;     // enum event_at
	__u32 ep;    // endpoint slot that decided
	__u32 src_identity, dst_identity;
	__u32 len;
	__u32 rule;
	__u8 tcpflags; // the TCP header's flags byte (0 for other protocols)
	__u8 pad[3];
};

// An event of the IPv6 path: e's addresses are 0, these are the
// packet's (a record of this size in cnlab_events is an event6).
struct event6 {
	struct event e;
	__u32 saddr[4], daddr[4];
};

struct flow6_key {
	__u32 saddr[4], daddr[4];
	__u16 sport, dport;
	__u8 proto, reason;
	__u16 pad;
};

// The service proxy's settings for a host (cnlab_svc_config[0]).
struct svc_config {
	__u32 flags;   // enum svc_config_flag
	__u32 hairpin; // source a hairpin connection is given (the host's bridge address), network order
	__u32 net;     // service CIDR (network order) and its mask: only these addresses are looked up
	__u32 mask;
	__u32 masq;    // source of masqueraded connections: an unused address of the host's pod CIDR
	__u32 pad;
};

// A frontend: a Service's cluster IP, port and protocol.
struct svc_key {
	__u32 vip;   // network order
	__u16 port;  // network order
	__u8 proto;
	__u8 pad;
};

// What a frontend balances over: count backends at backend_key
// {id, half, 0..count-1}. User space writes a new set into the half not
// in use and then swaps this value whole, so a new connection sees the
// old backends or the new ones, never a mix.
struct svc_val {
	__u32 id;       // the frontend's number, unique on the host
	__u16 count;    // backends this host's clients may reach; 0: reject (or drop, SVC_DROP)
	__u8 half;      // which half of the backend slots is in use
	__u8 flags;     // enum svc_flag
	__u32 affinity; // ClientIP affinity timeout in seconds, 0 for none
	__u32 pad;
};

struct backend_key {
	__u32 id;
	__u16 slot;
	__u8 half;
	__u8 pad;
};

struct backend {
	__u32 ip;   // network order
	__u16 port; // network order
	__u16 pad;
};

struct affinity_key {
	__u32 client; // network order
	__u32 id;
};

struct affinity_val {
	__u64 last; // ktime of the client's last new connection
	struct backend b;
	__u32 slot; // where b was: still there, it is still a backend
	__u32 pad;
};

// A translated flow, as a tuple seen on the wire (ports network order).
struct nat_key {
	__u32 saddr, daddr;
	__u16 sport, dport;
	__u8 proto;
	__u8 dir; // enum nat_dir
	__u16 pad;
};

struct nat_val {
	struct ct_val ct; // lifetime, as the policy conntrack's
	__u32 saddr, daddr; // the tuple to write instead (network order)
	__u16 sport, dport;
};

// A translated datagram's later fragments carry no ports, so no
// cnlab_nat entry can be found for them: its first fragment, once
// translated, leaves the addresses it was given under its addresses on
// the wire and IP id, and the later ones get the same.
struct svc_frag_key {
	__u32 saddr, daddr; // as the first fragment came (network order)
	__u16 id;
	__u8 proto;
	__u8 pad;
};

struct svc_frag_val {
	__u64 expires;
	__u32 saddr, daddr; // as it left
	__u8 kind, hairpin, snat; // its struct xlate's
	__u8 pad[5];
};

// Socket-level translation: a socket's frontend and the backend it was
// given (key addr/port the frontend for cnlab_sock_fwd, the backend for
// cnlab_sock_rev; network order).
struct sock_key {
	__u64 cookie; // bpf_get_socket_cookie
	__u32 addr;
	__u16 port;
	__u8 proto;
	__u8 pad;
};

struct flow_key {
	__u32 saddr, daddr;
	__u16 sport, dport;
	__u8 proto, reason;
	__u16 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct config);
} cnlab_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct monitor);
} cnlab_monitor SEC(".maps");

// Endpoints of this host by host-side ifindex, and by address.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct endpoint);
} cnlab_lxc SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct endpoint);
} cnlab_local SEC(".maps");

// ipcache per generation.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 2);
	__type(key, __u32);
	__array(values, struct {
		__uint(type, BPF_MAP_TYPE_LPM_TRIE);
		__uint(max_entries, 1);
		__uint(map_flags, BPF_F_NO_PREALLOC);
		__uint(key_size, sizeof(struct ipcache_key));
		__uint(value_size, sizeof(struct peer));
	});
} cnlab_ipcache SEC(".maps");

// The IPv6 ipcache per generation (values as cnlab_ipcache's).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 2);
	__type(key, __u32);
	__array(values, struct {
		__uint(type, BPF_MAP_TYPE_LPM_TRIE);
		__uint(max_entries, 1);
		__uint(map_flags, BPF_F_NO_PREALLOC);
		__uint(key_size, sizeof(struct ipcache6_key));
		__uint(value_size, sizeof(struct peer));
	});
} cnlab_ipcache6 SEC(".maps");

// Endpoints of this host by IPv6 address.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct ipcache6_key); // prefixlen 128
	__type(value, struct endpoint);
} cnlab_local6 SEC(".maps");

// Policy map of each endpoint, per generation: slot gen*max_ep + index.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__array(values, struct {
		__uint(type, BPF_MAP_TYPE_LPM_TRIE);
		__uint(max_entries, 1);
		__uint(map_flags, BPF_F_NO_PREALLOC);
		__uint(key_size, sizeof(struct policy_key));
		__uint(value_size, sizeof(struct policy_val));
	});
} cnlab_policy SEC(".maps");

// The exact entries of each endpoint's policy (a protocol and a single
// port: prefixlen 64), per generation, in a hash map: one lookup whatever
// their number. The LPM map above then holds only the entries with a
// shorter prefix (ranges, any port, any protocol), and exists only once
// there have been some. An exact entry is the longest prefix that matches its
// own key, so a hit here is what the LPM holding both would answer.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__array(values, struct {
		__uint(type, BPF_MAP_TYPE_HASH);
		__uint(max_entries, 1);
		__uint(map_flags, BPF_F_NO_PREALLOC);
		__type(key, struct policy_key);
		__type(value, struct policy_val);
	});
} cnlab_policy_exact SEC(".maps");

// Isolation of each endpoint per generation: bit 0 ingress, bit 1 egress.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u32);
} cnlab_enforce SEC(".maps");

// Endpoints of this host by network namespace cookie, for the connect hook.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct endpoint);
} cnlab_sockep SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct ct_key);
	__type(value, struct ct_val);
} cnlab_ct SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct frag_key);
	__type(value, struct frag_val);
} cnlab_frag SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct ct6_key);
	__type(value, struct ct_val);
} cnlab_ct6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct frag6_key);
	__type(value, struct frag_val);
} cnlab_frag6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct flow6_key);
	__type(value, __u64);
} cnlab_evlimit6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct svc_frag_key);
	__type(value, struct svc_frag_val);
} cnlab_svc_frag SEC(".maps");

// Packets and bytes per endpoint, direction and reason:
// slot (index*2 + dir)*R_MAX + reason.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 4096 * 2 * R_MAX);
	__type(key, __u32);
	__type(value, struct counter);
} cnlab_counters SEC(".maps");

// Packets and bytes per policy rule, endpoint slot, direction and
// verdict: counted where a policy decision is taken (a new flow's first
// packet, a dropped packet), never for established traffic. Allocated per
// key when first counted.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 16384);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct rule_key);
	__type(value, struct counter);
} cnlab_rule_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 18);
} cnlab_events SEC(".maps");

// Events a full cnlab_events could not take (cnlab_lost[0], per CPU).
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} cnlab_lost SEC(".maps");

// Last event time per flow and reason: at most one event per second each.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct flow_key);
	__type(value, __u64);
} cnlab_evlimit SEC(".maps");

// The service proxy's maps (empty unless services.proxy is ebpf).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct svc_config);
} cnlab_svc_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct svc_key);
	__type(value, struct svc_val);
} cnlab_svc SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 20);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct backend_key);
	__type(value, struct backend);
} cnlab_backends SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct affinity_key);
	__type(value, struct affinity_val);
} cnlab_affinity SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct nat_key);
	__type(value, struct nat_val);
} cnlab_nat SEC(".maps");

// With socket-level translation: the backend an unconnected UDP socket
// sends a frontend's datagrams to, and the frontend a socket's backend
// stands for (for getpeername and recvmsg).
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct sock_key);
	__type(value, struct backend);
} cnlab_sock_fwd SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct sock_key);
	__type(value, struct backend);
} cnlab_sock_rev SEC(".maps");

// The same for TCP sockets, apart: a connection churn (nothing removes a
// closed socket's entry) must not evict a UDP socket's.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct sock_key);
	__type(value, struct backend);
} cnlab_sock_rev_tcp SEC(".maps");

// Keep the types user space reads in BTF, for bpf2go.
const struct event *unused_event __attribute__((unused));
const struct event6 *unused_event6 __attribute__((unused));
const struct ipcache6_key *unused_ipk6 __attribute__((unused));
const struct ct6_key *unused_ct6 __attribute__((unused));
const struct counter *unused_counter __attribute__((unused));
const struct ipcache_key *unused_ipk __attribute__((unused));
const struct policy_key *unused_pk __attribute__((unused));
const struct policy_val *unused_pv __attribute__((unused));
const struct peer *unused_peer __attribute__((unused));
const enum dir *unused_dir __attribute__((unused));
const enum reason *unused_reason __attribute__((unused));
const enum config_flag *unused_config_flag __attribute__((unused));
const enum isolation *unused_isolation __attribute__((unused));
const enum monitor_level *unused_monitor_level __attribute__((unused));
const enum event_at *unused_event_at __attribute__((unused));
const enum identity *unused_identity __attribute__((unused));
const enum rule_ref *unused_rule_ref __attribute__((unused));
const enum rule_verdict *unused_rule_verdict __attribute__((unused));
const struct rule_key *unused_rule_key __attribute__((unused));
const enum svc_config_flag *unused_svc_config_flag __attribute__((unused));
const enum svc_flag *unused_svc_flag __attribute__((unused));
const enum nat_dir *unused_nat_dir __attribute__((unused));
const enum nodeport_range *unused_nodeport_range __attribute__((unused));
const enum l7 *unused_l7 __attribute__((unused));
const enum policy_act *unused_policy_act __attribute__((unused));
const enum policy_prec *unused_policy_prec __attribute__((unused));

#define NSEC 1000000000ULL
// Lifetimes as Linux conntrack's defaults: established 5 days, 120 s
// after a FIN (the other side may still answer a half-closed connection),
// 10 s after a RST.
#define LIFE_TCP (432000 * NSEC)
#define LIFE_FIN (120 * NSEC)
#define LIFE_CLOSING (10 * NSEC)
#define LIFE_OTHER (60 * NSEC)
#define LIFE_FRAG (30 * NSEC)

#define TCP_FIN 0x01
#define TCP_SYN 0x02
#define TCP_RST 0x04
#define TCP_ACK 0x10

// What an ICMP message is to conntrack (pkt.icmp). Linux conntrack's
// reply tuple of an echo has the reply type: a request is only ever
// tracked forward and a reply only as the answer to a request, so a peer
// cannot ping an endpoint that pings it with the same id. Other ICMP is
// never tracked: an error is related to a flow or decided by policy.
enum icmp_role {
	ICMP_NONE = 0, // not ICMP
	ICMP_REQUEST = 1,
	ICMP_REPLY = 2,
	ICMP_OTHER = 3,
};

struct pkt {
	__u32 saddr, daddr;
	__u16 sport, dport; // host order
	__u8 proto;
	__u8 tcpflags;
	__u8 frag;    // 0 whole, 1 first fragment, 2 later fragment
	__u8 icmp_err; // an ICMP error carrying the tuple below
	__u16 ipid;
	__u8 icmp;     // enum icmp_role
	__u8 ihl;      // IPv4 header length in bytes
	__u8 proxied;  // for the L7 proxy: its flow's conntrack entry or the ingress verdict says so
	// inner tuple of an ICMP error, as the quoted packet was sent
	__u32 in_saddr, in_daddr;
	__u16 in_sport, in_dport;
	__u8 in_proto;
};

// config copies the config for one program run: every lookup of the run
// (ipcache, policy, isolation, both sides of a host-local flow) uses the
// same generation even if user space switches it meanwhile. Peer keys are
// not stable across generations, so mixing them could allow a flow that
// both generations deny.
static __always_inline int config(struct config *out)
{
	__u32 zero = 0;
	struct config *c = bpf_map_lookup_elem(&cnlab_config, &zero);
	if (!c)
		return -1;
	__builtin_memcpy(out, c, sizeof(*out));
	return 0;
}

static __always_inline void count(__u32 index, __u8 dir, __u8 reason, __u32 len)
{
	__u32 slot = (index * 2 + dir) * R_MAX + reason;
	struct counter *c = bpf_map_lookup_elem(&cnlab_counters, &slot);
	if (c) {
		c->packets++;
		c->bytes += len;
	}
}

static __always_inline int is_drop(__u8 reason) { return reason >= R_FIRST_DROP; }

// is_new_flow: the verdict of a new flow's first packet that lets it
// through (a drop is any packet's).
static __always_inline int is_new_flow(__u8 reason)
{
	return reason == R_ALLOW_POLICY || reason == R_ALLOW_UNENFORCED || reason == R_ALLOW_PROXY;
}

// The first value of a key of cnlab_rule_counters (no stack for it).
volatile const struct counter rule_counter_zero = {};

// rule_count counts a packet a rule decided in cnlab_rule_counters under
// key k, filled in by the caller.
static __always_inline void rule_count(struct rule_key *k, __u32 len)
{
	struct counter *c = bpf_map_lookup_elem(&cnlab_rule_counters, k);
	if (!c) {
		bpf_map_update_elem(&cnlab_rule_counters, k, (void *)&rule_counter_zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&cnlab_rule_counters, k);
		if (!c)
			return;
	}
	c->packets++;
	c->bytes += len;
}

// New-flow events that wait before one wakes the reader (emit).
#define EVENT_BATCH 64

static __always_inline void emit(struct config *cfg, __u32 len, struct pkt *p, __u8 at,
				 __u32 ep, __u8 dir, __u8 reason, __u32 src_id, __u32 dst_id, __u32 rule)
{
	__u32 zero = 0;
	struct monitor *m = bpf_map_lookup_elem(&cnlab_monitor, &zero);
	if (!m || m->level == MONITOR_OFF)
		return;
	if (m->level == MONITOR_DROPS && !is_drop(reason))
		return; // before reading the clock: a drops-only monitor costs allowed packets nothing more
	int limit = 1;
	if (m->level == MONITOR_FLOWS && !is_drop(reason)) {
		if (!is_new_flow(reason))
			return;
		limit = 0; // each new flow once: its tuple is new
	}
	__u64 now = bpf_ktime_get_ns();
	if (now > m->until)
		return;
	if (limit) {
		struct flow_key fk = {.saddr = p->saddr, .daddr = p->daddr, .sport = p->sport,
				      .dport = p->dport, .proto = p->proto, .reason = reason};
		__u64 *last = bpf_map_lookup_elem(&cnlab_evlimit, &fk);
		if (last && now - *last < NSEC)
			return;
		bpf_map_update_elem(&cnlab_evlimit, &fk, &now, BPF_ANY);
	}
	struct event *e = bpf_ringbuf_reserve(&cnlab_events, sizeof(*e), 0);
	if (!e) {
		__u64 *lost = bpf_map_lookup_elem(&cnlab_lost, &zero);
		if (lost)
			*lost += 1;
		return;
	}
	e->time = now;
	e->saddr = p->saddr;
	e->daddr = p->daddr;
	e->sport = p->sport;
	e->dport = p->dport;
	e->proto = p->proto;
	e->dir = dir;
	e->reason = reason;
	e->at = at;
	e->ep = ep;
	e->src_identity = src_id;
	e->dst_identity = dst_id;
	e->len = len;
	e->rule = rule;
	e->tcpflags = p->proto == IPPROTO_TCP ? p->tcpflags : 0;
	e->pad[0] = e->pad[1] = e->pad[2] = 0;
	// A new flow's event (there may be thousands a second) wakes the
	// reader only once a batch waits (the monitor also looks every
	// eventPoll, monitor.go): a wakeup per event cost a microsecond a SYN. Other
	// events are few: each wakes the reader, if it waits.
	__u64 wake = 0;
	if (!limit && bpf_ringbuf_query(&cnlab_events, BPF_RB_AVAIL_DATA) < EVENT_BATCH * (sizeof(*e) + 8))
		wake = BPF_RB_NO_WAKEUP;
	bpf_ringbuf_submit(e, wake);
}

// parse_l4 reads the ports (and TCP flags) of the L4 header at off.
static __always_inline int parse_l4(struct __sk_buff *skb, __u32 off, __u8 proto,
				    __u16 *sport, __u16 *dport, __u8 *flags)
{
	__u16 ports[2];
	switch (proto) {
	case IPPROTO_TCP: {
		__u8 h[14];
		if (bpf_skb_load_bytes(skb, off, h, sizeof(h)) < 0)
			return -1;
		if ((h[12] >> 4) < 5)
			return -1; // data offset below the minimum header
		*sport = (h[0] << 8) | h[1];
		*dport = (h[2] << 8) | h[3];
		*flags = h[13];
		return 0;
	}
	case IPPROTO_UDP: {
		__u16 u[4];
		if (bpf_skb_load_bytes(skb, off, u, sizeof(u)) < 0)
			return -1;
		if (bpf_ntohs(u[2]) < 8)
			return -1; // a length shorter than the header (netfilter: invalid)
		*sport = bpf_ntohs(u[0]);
		*dport = bpf_ntohs(u[1]);
		return 0;
	}
	case IPPROTO_SCTP:
		if (bpf_skb_load_bytes(skb, off, ports, sizeof(ports)) < 0)
			return -1;
		*sport = bpf_ntohs(ports[0]);
		*dport = bpf_ntohs(ports[1]);
		return 0;
	}
	*sport = 0;
	*dport = 0;
	return 0;
}

// quoted_ports reads the ports of the packet an ICMP error quotes, or
// the id of a quoted echo. Only the first 8 bytes of the quoted L4
// header are sure to be there (RFC 792; many routers quote no more), so
// nothing past them is read: not the TCP flags parse_l4 wants.
static __always_inline int quoted_ports(struct __sk_buff *skb, __u32 off, __u8 proto,
					__u16 *sport, __u16 *dport)
{
	__u8 h[8];
	*sport = 0;
	*dport = 0;
	switch (proto) {
	case IPPROTO_TCP:
	case IPPROTO_UDP:
	case IPPROTO_SCTP:
		if (bpf_skb_load_bytes(skb, off, h, 4) < 0)
			return -1;
		*sport = (h[0] << 8) | h[1];
		*dport = (h[2] << 8) | h[3];
		return 0;
	case IPPROTO_ICMP:
		if (bpf_skb_load_bytes(skb, off, h, 8) < 0)
			return -1;
		if (h[0] == 0 || h[0] == 8) { // as parse tracks echoes: the id is the "port"
			*sport = (h[4] << 8) | h[5];
			*dport = *sport;
		}
		return 0;
	}
	return 0;
}

// parse reads an IPv4 packet's tuple; it returns 0 or a drop reason.
static __always_inline int parse(struct __sk_buff *skb, struct pkt *p)
{
	struct iphdr ip;
	if (bpf_skb_load_bytes(skb, ETH_HLEN, &ip, sizeof(ip)) < 0)
		return R_DROP_MALFORMED;
	if (ip.version != 4 || ip.ihl < 5)
		return R_DROP_MALFORMED;
	__u32 hl = ip.ihl * 4;
	p->ihl = hl;
	__u16 tot = bpf_ntohs(ip.tot_len);
	if (tot != 0 && tot < hl)
		return R_DROP_MALFORMED;
	p->saddr = ip.saddr;
	p->daddr = ip.daddr;
	p->proto = ip.protocol;
	p->ipid = bpf_ntohs(ip.id);
	__u16 fo = bpf_ntohs(ip.frag_off);
	if (fo & 0x1fff) {
		p->frag = 2; // no L4 header here: ports come from the first fragment
		return 0;
	}
	if (fo & 0x2000)
		p->frag = 1;
	__u32 off = ETH_HLEN + hl;
	if (parse_l4(skb, off, p->proto, &p->sport, &p->dport, &p->tcpflags) < 0)
		return R_DROP_MALFORMED;
	if (p->proto == IPPROTO_ICMP) {
		__u8 h[8];
		if (bpf_skb_load_bytes(skb, off, h, sizeof(h)) < 0)
			return R_DROP_MALFORMED;
		__u8 type = h[0];
		p->icmp = ICMP_OTHER;
		if (type == 0 || type == 8) { // echo reply / request: the id is the "port"
			__u16 id = (h[4] << 8) | h[5];
			p->sport = id;
			p->dport = id;
			p->icmp = type == 8 ? ICMP_REQUEST : ICMP_REPLY;
		} else if (type == 3 || type == 11 || type == 12) {
			struct iphdr in;
			if (bpf_skb_load_bytes(skb, off + 8, &in, sizeof(in)) == 0 && in.version == 4 &&
			    in.ihl >= 5 &&
			    quoted_ports(skb, off + 8 + in.ihl * 4, in.protocol, &p->in_sport, &p->in_dport) == 0) {
				p->icmp_err = 1;
				p->in_saddr = in.saddr;
				p->in_daddr = in.daddr;
				p->in_proto = in.protocol;
			}
		}
	}
	return 0;
}

// peer_of resolves an address to its peer key through the ipcache of a
// generation; addresses the ipcache does not know are the world.
static __always_inline struct peer peer_of(__u32 gen, __u32 ip)
{
	struct peer out = {.key = WORLD_IDENTITY, .identity = WORLD_IDENTITY};
	void *ipc = bpf_map_lookup_elem(&cnlab_ipcache, &gen);
	if (!ipc)
		return out;
	struct ipcache_key k = {.prefixlen = 32, .ip = ip};
	struct peer *v = bpf_map_lookup_elem(ipc, &k);
	if (v)
		out = *v;
	return out;
}

// related_path reports whether an ICMP error travels back along the flow
// it quotes, as Linux conntrack requires (nf_conntrack_inet_error): its
// outer destination is the quoted packet's source. Its outer source must
// be the quoted packet's destination, or a router on the way, which is
// never an endpoint of the lab: an endpoint (this host's or another's)
// cannot vouch for a flow between two other parties. Without this an
// endpoint could quote any tracked flow, its own or its victim's, to send
// ICMP where policy denies it.
static __always_inline int related_path(__u32 gen, struct pkt *p)
{
	if (p->daddr != p->in_saddr)
		return 0;
	if (p->saddr == p->in_daddr)
		return 1;
	__u32 id = peer_of(gen, p->saddr).identity;
	return id == WORLD_IDENTITY || id >= FIRST_CIDR_IDENTITY;
}

static __always_inline struct ct_val *ct_get(struct ct_key *k, __u64 now)
{
	struct ct_val *v = bpf_map_lookup_elem(&cnlab_ct, k);
	if (v && v->expires < now) {
		bpf_map_delete_elem(&cnlab_ct, k);
		return 0;
	}
	return v;
}

static __always_inline void ct_touch(struct ct_val *v, __u8 proto, __u8 tcpflags, __u64 now)
{
	if (proto == IPPROTO_TCP && (tcpflags & TCP_RST))
		v->flags |= CT_CLOSING;
	if (proto == IPPROTO_TCP && (tcpflags & TCP_FIN))
		v->flags |= CT_FIN;
	__u64 life = LIFE_OTHER;
	if (v->flags & CT_CLOSING)
		life = LIFE_CLOSING;
	else if (v->flags & CT_FIN)
		life = LIFE_FIN;
	else if (proto == IPPROTO_TCP)
		life = LIFE_TCP;
	// Write at most once a second per entry: a hot flow does not bounce
	// the cache line between CPUs on every packet. A shorter life (after
	// FIN or RST) is written at once.
	if (v->expires < now + life - NSEC || v->expires > now + life)
		v->expires = now + life;
}

// ct_lookup returns R_ALLOW_CT or R_ALLOW_RELATED for a packet of a
// tracked flow at an enforcement point, 0 for a new flow. scope is 0 for
// the host-local path, else 1 + dir.
static __always_inline int ct_lookup(__u32 gen, struct pkt *p, __u8 scope, __u8 rscope, __u16 ep, __u64 now)
{
	struct ct_key k = {.saddr = p->saddr, .daddr = p->daddr, .sport = p->sport,
			   .dport = p->dport, .proto = p->proto, .scope = scope, .ep = ep};
	struct ct_val *v;
	// A SYN opens a new connection: it is checked against policy even
	// when an old entry with the same tuple lingers.
	int syn = p->proto == IPPROTO_TCP && (p->tcpflags & (TCP_SYN | TCP_ACK)) == TCP_SYN;
	// An echo request is tracked forward only, a reply backward only,
	// other ICMP not at all (enum icmp_role).
	int fwd = p->icmp == ICMP_NONE || p->icmp == ICMP_REQUEST;
	int rev = p->icmp == ICMP_NONE || p->icmp == ICMP_REPLY;
	if (!syn && fwd) {
		v = ct_get(&k, now);
		if (v) {
			ct_touch(v, p->proto, p->tcpflags, now);
			p->proxied = (v->flags & CT_PROXY) != 0;
			return R_ALLOW_CT;
		}
	}
	if (!syn && rev) {
		struct ct_key r = {.saddr = p->daddr, .daddr = p->saddr, .sport = p->dport,
				   .dport = p->sport, .proto = p->proto, .scope = rscope, .ep = ep};
		v = ct_get(&r, now);
		// A flow for the L7 proxy is answered by the proxy (marked,
		// let through by cnlab_to_ep), never by the endpoint the
		// client asked for: its answer would come around the proxy.
		if (v && !(v->flags & CT_PROXY)) {
			ct_touch(v, p->proto, p->tcpflags, now);
			return R_ALLOW_CT;
		}
	}
	if (p->icmp_err && related_path(gen, p)) {
		// The quoted packet went the other way: it belongs to a flow
		// opened in the opposite direction, or is a reply of ours.
		struct ct_key q = {.saddr = p->in_saddr, .daddr = p->in_daddr, .sport = p->in_sport,
				   .dport = p->in_dport, .proto = p->in_proto, .scope = rscope, .ep = ep};
		if (ct_get(&q, now))
			return R_ALLOW_RELATED;
		struct ct_key q2 = {.saddr = p->in_daddr, .daddr = p->in_saddr, .sport = p->in_dport,
				    .dport = p->in_sport, .proto = p->in_proto, .scope = scope, .ep = ep};
		if (ct_get(&q2, now))
			return R_ALLOW_RELATED;
	}
	return 0;
}

static __always_inline void ct_create(struct pkt *p, __u8 scope, __u16 ep, __u64 now)
{
	if (p->icmp != ICMP_NONE && p->icmp != ICMP_REQUEST)
		return; // a reply or an error opens no flow
	struct ct_key k = {.saddr = p->saddr, .daddr = p->daddr, .sport = p->sport,
			   .dport = p->dport, .proto = p->proto, .scope = scope, .ep = ep};
	struct ct_val v = {.flags = p->proxied ? CT_PROXY : 0};
	ct_touch(&v, p->proto, p->tcpflags, now);
	bpf_map_update_elem(&cnlab_ct, &k, &v, BPF_ANY);
}

static __always_inline struct policy_val *policy_lookup(void *exact, void *lpm, struct policy_key *k)
{
	struct policy_val *v = 0;
	if (exact)
		v = bpf_map_lookup_elem(exact, k);
	if (!v && lpm)
		v = bpf_map_lookup_elem(lpm, k);
	return v;
}

// A policy question and its answer, for policy_verdict. The question
// begins with the key of the peer's lookup, which policy_verdict hands to
// the maps as it is (then with the wildcard peer): no copy on its stack,
// which the verifier's limit for the deepest chain of calls (512 bytes,
// cnlab_from_ep -> from_ep_local -> policy_verdict) leaves no room for.
_Static_assert(sizeof(struct rule_key) == sizeof(struct policy_key), "rule_key takes policy_key's place");

struct query {
	struct policy_key k; // prefixlen 64, the remote peer's key, dir, proto, port (network order)
	__u32 slot;   // gen*max_ep + the endpoint's index
	__u32 rule;   // out: the deciding entry's rule, or NO_RULE
	__u8 proxied; // out: an allow to an L7 port
	__u8 count;   // enum rule_count_mode
	__u8 pad[2];
	__u32 len;    // the packet's, for cnlab_rule_counters
	__u32 pad2;   // whole 8-byte words
};

// policy_verdict is a global function: the verifier checks it once, not
// at each of the places the programs ask for a verdict (inlined, they
// took cnlab_from_ep near the verifier's budget of instructions).
__attribute__((noinline)) int policy_verdict(struct query *q)
{
	if (!q)
		return R_DROP_UNKNOWN;
	__u32 *enf = bpf_map_lookup_elem(&cnlab_enforce, &q->slot);
	if (!enf)
		return R_DROP_UNKNOWN; // a slot out of range (of every per-slot map): fail closed
	__u8 dir = q->k.dir;
	__u32 bits = *enf >> dir; // ISO_INGRESS and WILD_INGRESS, or the egress bits, at 1 and 4
	void *exact = bpf_map_lookup_elem(&cnlab_policy_exact, &q->slot);
	void *lpm = bpf_map_lookup_elem(&cnlab_policy, &q->slot);
	struct policy_val *a, *b = 0;
	q->rule = NO_RULE;
	q->proxied = 0;
	q->k.prefixlen = 64;
	a = policy_lookup(exact, lpm, &q->k);
	if (bits & WILD_INGRESS) {
		q->k.peer = 0;
		b = policy_lookup(exact, lpm, &q->k);
	}
	// The first decision in precedence order of the two lookups (the
	// peer's on a tie); after an Admin Pass, the first non-Admin one.
	__u32 prec = PREC_NONE, rule = NO_RULE;
	__u8 act = ACT_NONE;
	if (a) {
		prec = a->prec;
		rule = a->rule;
		act = a->act;
	}
	if (b && b->prec < prec) {
		prec = b->prec;
		rule = b->rule;
		act = b->act;
	}
	if (act == ACT_PASS) {
		// Nothing below: the default decides, and the event names the
		// Pass that handed it down.
		act = ACT_NONE;
		prec = PREC_NONE;
		if (a && a->below_prec < prec) {
			prec = a->below_prec;
			rule = a->below_rule;
			act = a->below_act;
		}
		if (b && b->below_prec < prec) {
			rule = b->below_rule;
			act = b->below_act;
		}
	}
	q->rule = rule;
	int r = R_ALLOW_UNENFORCED;
	__u8 rv = RV_PASS;
	if (act == ACT_DENY) {
		r = R_DROP_DENY;
		rv = RV_DENY;
	} else if (act == ACT_ALLOW || act == ACT_PROXY) {
		q->proxied = dir == DIR_INGRESS && act == ACT_PROXY;
		r = R_ALLOW_POLICY;
		rv = RV_ALLOW;
	} else if (bits & ISO_INGRESS) {
		r = R_DROP_DEFAULT;
	}
	if (rule != NO_RULE && (q->count == RC_ALL || (q->count == RC_DROPS && is_drop(r)))) {
		struct rule_key *k = (struct rule_key *)&q->k; // the lookups are done
		k->rule = rule;
		k->slot = q->slot;
		k->dir = dir;
		k->verdict = rv;
		k->pad = 0;
		rule_count(k, q->len);
	}
	return r;
}

// verdict decides a new flow of endpoint index (this host's), in
// direction dir, against the remote peer: the lookups are the peer's own
// entries and, where the endpoint has any, the wildcard-peer entries, and
// the decision of lower precedence wins (with the NetworkPolicy tier
// alone: deny wins). An allowed ingress flow to an L7 port sets
// p->proxied (user space marks every allow decision of such a port that
// is not the Admin tier's, so whichever lookup wins says so).
static __always_inline int verdict_of(struct config *cfg, __u32 index, __u8 dir, __u32 peer, __u8 proto,
				      __u8 tcpflags, __u16 dport, __u8 *proxied, __u32 *rule, __u8 count, __u32 len)
{
	// A new TCP flow begins with a SYN, or with an ACK picking up a
	// connection whose entry went; any other set of SYN, ACK, FIN and RST
	// (SYN+FIN, a RST or a FIN without a connection, no flag at all) is
	// dropped before policy, as netfilter's conntrack finds it invalid, so
	// that every datapath gives such a packet the same verdict.
	if (proto == IPPROTO_TCP) {
		__u8 f = tcpflags & (TCP_SYN | TCP_ACK | TCP_FIN | TCP_RST);
		if (f != TCP_SYN && f != TCP_ACK) {
			*rule = NO_RULE;
			*proxied = 0;
			return R_DROP_INVALID;
		}
	}
	struct query q = {.k = {.peer = peer, .dir = dir, .proto = proto, .port = bpf_htons(dport)},
			  .slot = cfg->gen * cfg->max_ep + index, .count = count, .len = len};
	int r = policy_verdict(&q);
	*rule = q.rule;
	*proxied = q.proxied;
	return r;
}

static __always_inline int verdict(struct config *cfg, __u32 index, __u8 dir, __u32 peer,
				   struct pkt *p, __u32 *rule, __u8 count, __u32 len)
{
	return verdict_of(cfg, index, dir, peer, p->proto, p->tcpflags, p->dport, &p->proxied, rule, count, len);
}

// fragment handles a later fragment: it passes where the first passed.
static __always_inline int fragment(struct pkt *p, __u8 scope, __u16 ep, __u64 now)
{
	struct frag_key fk = {.saddr = p->saddr, .daddr = p->daddr, .id = p->ipid,
			      .proto = p->proto, .scope = scope, .ep = ep};
	struct frag_val *fv = bpf_map_lookup_elem(&cnlab_frag, &fk);
	if (!fv || fv->expires < now)
		return R_DROP_FRAG;
	p->sport = fv->sport;
	p->dport = fv->dport;
	return R_ALLOW_FRAG;
}

static __always_inline void first_fragment(struct pkt *p, __u8 scope, __u16 ep, __u64 now)
{
	struct frag_key fk = {.saddr = p->saddr, .daddr = p->daddr, .id = p->ipid,
			      .proto = p->proto, .scope = scope, .ep = ep};
	struct frag_val fv = {.sport = p->sport, .dport = p->dport, .expires = now + LIFE_FRAG};
	bpf_map_update_elem(&cnlab_frag, &fk, &fv, BPF_ANY);
}

// side enforces one endpoint's direction for a packet (conntrack, then
// policy for a new flow) and returns the reason.
static __always_inline int side(struct config *cfg, struct endpoint *ep, __u8 dir, struct pkt *p,
				__u64 now, __u32 *peer_id, __u32 *rule, __u32 len)
{
	__u8 scope = 1 + dir, rscope = 1 + !dir;
	__u16 idx = ep->index;
	*rule = NO_RULE;
	if (p->frag == 2)
		return fragment(p, scope, idx, now);
	int r = ct_lookup(cfg->gen, p, scope, rscope, idx, now);
	if (!r) {
		struct peer peer = peer_of(cfg->gen, dir == DIR_EGRESS ? p->daddr : p->saddr);
		*peer_id = peer.identity;
		r = verdict(cfg, ep->index, dir, peer.key, p, rule, RC_ALL, len);
		if (is_drop(r))
			return r;
		// The verdict sends the connection to the L7 proxy, but it is
		// here instead, on its way to the endpoint: it came around the
		// proxy (a path that does not hand over, or a switch of policy
		// between two programs). As the netfilter datapaths' ingress
		// chains drop new connections to L7 ports not redirected.
		if (dir == DIR_INGRESS && p->proxied)
			return R_DROP_NOT_PROXIED;
		ct_create(p, scope, idx, now);
	} else if (dir == DIR_INGRESS && p->proxied) {
		return R_DROP_NOT_PROXIED; // a packet of a flow the proxy speaks for
	}
	// Whatever let the first fragment through (policy, or conntrack for
	// a fragmented reply), the rest of its datagram follows it.
	if (p->frag == 1)
		first_fragment(p, scope, idx, now);
	return r;
}

// deliver hands an IPv4 packet straight to an endpoint of this host: its
// Ethernet header as the host-side veth would send it, then into the
// endpoint's namespace with bpf_redirect_peer (from a tc ingress hook).
static __always_inline int deliver_as(struct __sk_buff *skb, struct endpoint *ep, __u16 proto)
{
	struct ethhdr eth;
	__builtin_memcpy(eth.h_dest, ep->mac, 6);
	__builtin_memcpy(eth.h_source, ep->lxc_mac, 6);
	eth.h_proto = bpf_htons(proto);
	if (bpf_skb_store_bytes(skb, 0, &eth, sizeof(eth), 0) < 0)
		return TC_ACT_SHOT;
	return bpf_redirect_peer(ep->ifindex, 0);
}

static __always_inline int deliver(struct __sk_buff *skb, struct endpoint *ep)
{
	return deliver_as(skb, ep, ETH_P_IP);
}

// enum tcp_state (include/net/tcp_states.h)
#define TCP_TIME_WAIT 6
#define TCP_LISTEN 10

// to_proxy hands a TCP packet of a flow for the L7 proxy to the proxy's
// socket, from a tc ingress hook: the connection's own socket when the
// proxy has one for the packet's tuple (it accepted it transparently, so
// its local address is the endpoint's), else the proxy's listener. The
// mark sends it to the host's local table: the destination is not one of
// the host's addresses. Returns TC_ACT_OK, or -1 when the proxy does not
// listen (the caller drops).
//
// The proxy closes first (a client without keep-alive), so its side of a
// finished connection would linger in TIME_WAIT, and a client may reuse
// its port on a new connection. Its SYN could go neither to the listener
// (the kernel drops a SYN whose request socket has the tuple of a socket
// in the hash) nor to the TIME_WAIT socket (which, taking it as a new
// connection, looks for a listener on the endpoint's own address and
// port: there is none). So the host keeps no TIME_WAIT socket
// (net.ipv4.tcp_max_tw_buckets 0 in its namespace, set with the L7
// routing); a packet that still meets one is left to the stack.
static __always_inline int to_proxy(struct __sk_buff *skb, struct pkt *p)
{
	struct bpf_sock_tuple t = {};
	t.ipv4.saddr = p->saddr;
	t.ipv4.daddr = p->daddr;
	t.ipv4.sport = bpf_htons(p->sport);
	t.ipv4.dport = bpf_htons(p->dport);
	struct bpf_sock *sk = bpf_skc_lookup_tcp(skb, &t, sizeof(t.ipv4), BPF_F_CURRENT_NETNS, 0);
	if (sk && sk->state == TCP_TIME_WAIT) {
		bpf_sk_release(sk);
		goto mark;
	}
	if (sk && sk->state == TCP_LISTEN) {
		// A listener on the endpoint's own address and port: none of
		// the proxy's.
		bpf_sk_release(sk);
		sk = 0;
	}
	if (!sk) {
		struct bpf_sock_tuple l = {};
		l.ipv4.dport = bpf_htons(L7_PROXY_PORT);
		sk = bpf_skc_lookup_tcp(skb, &l, sizeof(l.ipv4), BPF_F_CURRENT_NETNS, 0);
		if (!sk)
			return -1;
		if (sk->state != TCP_LISTEN) {
			bpf_sk_release(sk);
			return -1;
		}
	}
	long err = bpf_sk_assign(skb, sk, 0);
	bpf_sk_release(sk);
	if (err)
		return -1;
mark:
	skb->mark = MARK_TO_PROXY;
	bpf_skb_change_type(skb, 0); // PACKET_HOST
	return TC_ACT_OK;
}

// proxy_drop accounts a packet for the L7 proxy that could not be handed
// to it (counted first with the verdict that sent it there).
static __always_inline int proxy_drop(struct config *cfg, struct __sk_buff *skb, struct pkt *p,
				      struct endpoint *dst, __u32 src_id)
{
	count(dst->index, DIR_INGRESS, R_DROP_NO_PROXY, skb->len);
	emit(cfg, skb->len, p, AT_TC, dst->index, DIR_INGRESS, R_DROP_NO_PROXY, src_id, dst->identity, NO_RULE);
	return TC_ACT_SHOT;
}

// ---- Services (the ebpf service proxy) ----
//
// A new connection from an endpoint to a Service's address is translated
// by the client's program, before policy: the backend is picked (ClientIP
// affinity, else at random), the flow's two cnlab_nat entries are written
// once policy has allowed it, and every later packet is rewritten from
// them. Policy is judged on the real tuple, client to backend, as the
// netfilter proxies have it judged after DNAT. Replies are translated back
// where they first meet a program that knows the flow: the backend's own
// program on the client's host (host-local), else the client's cnlab_to_ep.
// A hairpin (the client is the backend) is given the host's bridge address
// as its source, as kube-proxy masquerades it.

// What happens to one packet's addresses: the tuple it carries when it
// came (o_*) and the one it leaves with, ports in network order.
struct xlate {
	__u8 kind;    // 0 none, XL_FWD, XL_REV
	__u8 fresh;   // a new flow: create its entries once policy allows it
	__u8 hairpin; // the client is the backend
	__u8 snat;    // the source on the wire is not the client's (hairpin, masquerade)
	__u32 id, affinity, slot;
	__u32 o_saddr, o_daddr;
	__u16 o_sport, o_dport;
	__u32 saddr, daddr;
	__u16 sport, dport;
};

#define XL_FWD 1
#define XL_REV 2

static __always_inline struct nat_val *nat_get(struct nat_key *k, __u64 now)
{
	struct nat_val *v = bpf_map_lookup_elem(&cnlab_nat, k);
	if (v && v->ct.expires < now) {
		bpf_map_delete_elem(&cnlab_nat, k);
		return 0;
	}
	return v;
}

// pick chooses a new connection's backend: the client's affinity backend
// while it is recent and still in its slot, else one at random.
static __always_inline int pick(struct svc_val *s, __u32 client, __u64 now, struct backend *out, __u32 *slot)
{
	struct backend_key bk = {.id = s->id, .half = s->half};
	struct backend *b;
	if (s->affinity) {
		struct affinity_key ak = {.client = client, .id = s->id};
		struct affinity_val *a = bpf_map_lookup_elem(&cnlab_affinity, &ak);
		if (a && now - a->last < (__u64)s->affinity * NSEC && a->slot < s->count) {
			bk.slot = a->slot;
			b = bpf_map_lookup_elem(&cnlab_backends, &bk);
			if (b && b->ip == a->b.ip && b->port == a->b.port) {
				*out = *b;
				*slot = bk.slot;
				return 0;
			}
		}
	}
	bk.slot = bpf_get_prandom_u32() % s->count;
	b = bpf_map_lookup_elem(&cnlab_backends, &bk);
	if (!b)
		return -1;
	*out = *b;
	*slot = bk.slot;
	return 0;
}

// xl_set makes x write the tuple a translation entry names.
static __always_inline void xl_set(struct xlate *x, struct nat_val *v)
{
	x->saddr = v->saddr;
	x->daddr = v->daddr;
	x->sport = v->sport;
	x->dport = v->dport;
}

// svc_reply records the packet's tuple in x and, when the packet is a
// reply of a translated flow (a backend answering), sets x to the tuple
// its client must see and returns the flow's reverse entry.
static __always_inline struct nat_val *svc_reply(struct pkt *p, struct xlate *x, __u64 now)
{
	x->o_saddr = p->saddr;
	x->o_daddr = p->daddr;
	x->o_sport = bpf_htons(p->sport);
	x->o_dport = bpf_htons(p->dport);
	struct nat_key k = {.saddr = p->saddr, .daddr = p->daddr, .sport = x->o_sport,
			    .dport = x->o_dport, .proto = p->proto, .dir = NAT_REV};
	struct nat_val *v = nat_get(&k, now);
	if (!v)
		return 0;
	__u64 was = v->ct.expires;
	ct_touch(&v->ct, p->proto, p->tcpflags, now);
	x->kind = XL_REV;
	xl_set(x, v);
	if (v->ct.expires != was) {
		// And its forward entry (the client's tuple), as above.
		struct nat_key fk = {.saddr = v->daddr, .daddr = v->saddr, .sport = v->dport,
				     .dport = v->sport, .proto = p->proto, .dir = NAT_FWD};
		struct nat_val *f = bpf_map_lookup_elem(&cnlab_nat, &fk);
		if (f && f->ct.expires < v->ct.expires)
			f->ct.expires = v->ct.expires;
	}
	return v;
}

static __always_inline int translatable(struct pkt *p)
{
	return (p->proto == IPPROTO_TCP || p->proto == IPPROTO_UDP) && p->frag != 2;
}

// svc_frag finds a later fragment of a translated datagram (it has no
// ports to find a cnlab_nat entry by) from what its first fragment left
// in cnlab_svc_frag: x is set as the first fragment's was, and p's
// destination is the real one, as svc_from_ep and svc_reply set it.
static __always_inline void svc_frag(struct pkt *p, struct xlate *x, __u64 now)
{
	if (p->proto != IPPROTO_TCP && p->proto != IPPROTO_UDP)
		return;
	struct svc_frag_key k = {.saddr = p->saddr, .daddr = p->daddr, .id = p->ipid, .proto = p->proto};
	struct svc_frag_val *v = bpf_map_lookup_elem(&cnlab_svc_frag, &k);
	if (!v || v->expires < now)
		return;
	x->kind = v->kind;
	x->hairpin = v->hairpin;
	x->snat = v->snat;
	x->o_saddr = p->saddr;
	x->o_daddr = p->daddr;
	x->saddr = v->saddr;
	x->daddr = v->daddr;
	p->daddr = v->daddr;
}

// svc_icmp_unmasq finds an ICMP error sent to an address a flow was
// masqueraded to (the host's masquerade address, or its bridge address
// for a hairpin) about that flow, and sets p to what it is about: an
// error to the flow's client quoting what the client sent its backend
// (its own address and port), as the policy's conntrack entries have the
// flow. It returns 1 if so. svc_icmp then writes it so.
static __always_inline int svc_icmp_unmasq(struct svc_config *sc, struct pkt *p, __u64 now)
{
	if (!p->icmp_err || (p->daddr != sc->masq && p->daddr != sc->hairpin) || p->daddr != p->in_saddr ||
	    (p->in_proto != IPPROTO_TCP && p->in_proto != IPPROTO_UDP))
		return 0;
	struct nat_key k = {.saddr = p->in_daddr, .daddr = p->in_saddr, .sport = bpf_htons(p->in_dport),
			    .dport = bpf_htons(p->in_sport), .proto = p->in_proto, .dir = NAT_REV};
	struct nat_val *v = nat_get(&k, now);
	if (!v || v->daddr == p->in_saddr)
		return 0;
	p->daddr = v->daddr;
	p->in_saddr = v->daddr;
	p->in_sport = bpf_ntohs(v->dport);
	return 1;
}

// svc_from_ep finds what a packet an endpoint sends is to the service
// proxy: a reply of a translated flow (a backend answering), a packet to a
// frontend (translated to a backend), or neither. It sets p to the real
// tuple, which policy judges, and x to what is written on the wire; it
// returns 0, or a reason to stop the packet.
static __always_inline int svc_from_ep(struct svc_config *sc, struct pkt *p, struct xlate *x, __u64 now)
{
	if (p->frag == 2) {
		svc_frag(p, x, now);
		return 0;
	}
	if (!translatable(p))
		return 0;
	struct nat_val *v = svc_reply(p, x, now);
	if (v) {
		x->hairpin = v->daddr == p->saddr;
		x->snat = v->daddr != p->daddr;
		// Judged as backend to client: a masquerade undone.
		p->daddr = v->daddr;
		p->dport = bpf_ntohs(v->dport);
		return 0;
	}
	// Cluster IPs, and with node ports any address in the node port range.
	if ((p->daddr & sc->mask) != sc->net &&
	    !((sc->flags & SVC_NODEPORTS) && p->dport >= NODEPORT_MIN && p->dport <= NODEPORT_MAX))
		return 0;
	struct svc_key sk = {.vip = p->daddr, .port = x->o_dport, .proto = p->proto};
	struct svc_val *s = bpf_map_lookup_elem(&cnlab_svc, &sk);
	if (!s)
		return 0;
	struct nat_key k = {.saddr = p->saddr, .daddr = p->daddr, .sport = x->o_sport,
			    .dport = x->o_dport, .proto = p->proto, .dir = NAT_FWD};
	v = nat_get(&k, now);
	int syn = p->proto == IPPROTO_TCP && (p->tcpflags & (TCP_SYN | TCP_ACK)) == TCP_SYN;
	if (v && !(syn && (v->ct.flags & (CT_CLOSING | CT_FIN)))) {
		__u64 was = v->ct.expires;
		ct_touch(&v->ct, p->proto, p->tcpflags, now);
		xl_set(x, v);
		if (v->ct.expires != was) {
			// The flow lives on in both directions: its reverse entry
			// too (at most once a second, as ct_touch writes).
			struct nat_key rk = {.saddr = v->daddr, .daddr = v->saddr, .sport = v->dport,
					     .dport = v->sport, .proto = p->proto, .dir = NAT_REV};
			struct nat_val *r = bpf_map_lookup_elem(&cnlab_nat, &rk);
			if (r && r->ct.expires < v->ct.expires)
				r->ct.expires = v->ct.expires;
		}
	} else {
		// A new flow (or one whose entries were evicted).
		if (!s->count)
			return s->flags & SVC_DROP ? R_DROP_SVC_NO_LOCAL : R_DROP_SVC_REJECT;
		struct backend b;
		if (pick(s, p->saddr, now, &b, &x->slot) < 0) {
			// The frontend switched to its other half between our read
			// of it and of the slot (its old slots go right after the
			// switch): read it again.
			s = bpf_map_lookup_elem(&cnlab_svc, &sk);
			if (!s || !s->count)
				return s && (s->flags & SVC_DROP) ? R_DROP_SVC_NO_LOCAL : R_DROP_SVC_REJECT;
			if (pick(s, p->saddr, now, &b, &x->slot) < 0)
				return R_DROP_UNKNOWN; // a slot below the count is always written first
		}
		x->fresh = 1;
		x->id = s->id;
		x->affinity = s->affinity;
		x->daddr = b.ip;
		x->dport = b.port;
		x->sport = x->o_sport;
		x->saddr = p->saddr;
		if (b.ip == p->saddr) {
			x->saddr = sc->hairpin;
		} else if (s->flags & SVC_MASQ) {
			// Masqueraded: the source port is the client's unless a
			// live flow to this backend has it (clients in other
			// namespaces pick their ports apart); then a free one.
			x->saddr = sc->masq;
			struct nat_key rk = {.saddr = b.ip, .daddr = sc->masq, .sport = b.port,
					     .dport = x->o_sport, .proto = p->proto, .dir = NAT_REV};
			int free = 0;
#pragma unroll
			for (int i = 0; i < 8; i++) {
				struct nat_val *o = bpf_map_lookup_elem(&cnlab_nat, &rk);
				if (!o || o->ct.expires < now) {
					free = 1;
					break;
				}
				rk.dport = bpf_htons(32768 + bpf_get_prandom_u32() % 28232);
			}
			if (!free)
				return R_DROP_SVC_NO_PORT;
			x->sport = rk.dport;
		}
	}
	x->kind = XL_FWD;
	x->hairpin = x->daddr == p->saddr;
	x->snat = x->saddr != p->saddr;
	p->daddr = x->daddr;
	p->dport = bpf_ntohs(x->dport);
	return 0;
}

// svc_to_ep finds a reply of a translated flow delivered to its client.
static __always_inline void svc_to_ep(struct pkt *p, struct xlate *x, __u64 now)
{
	if (p->frag == 2)
		svc_frag(p, x, now);
	else if (translatable(p))
		svc_reply(p, x, now);
}

// svc_commit records a new translated flow, once policy allowed it: the
// reverse entry first, so no reply can come before it exists.
static __always_inline void svc_commit(struct xlate *x, struct pkt *p, __u64 now)
{
	struct nat_val v = {};
	ct_touch(&v.ct, p->proto, p->tcpflags, now);
	struct nat_key rk = {.saddr = x->daddr, .daddr = x->saddr, .sport = x->dport,
			     .dport = x->sport, .proto = p->proto, .dir = NAT_REV};
	v.saddr = x->o_daddr;
	v.daddr = x->o_saddr;
	v.sport = x->o_dport;
	v.dport = x->o_sport;
	bpf_map_update_elem(&cnlab_nat, &rk, &v, BPF_ANY);
	struct nat_key fk = {.saddr = x->o_saddr, .daddr = x->o_daddr, .sport = x->o_sport,
			     .dport = x->o_dport, .proto = p->proto, .dir = NAT_FWD};
	v.saddr = x->saddr;
	v.daddr = x->daddr;
	v.sport = x->sport;
	v.dport = x->dport;
	bpf_map_update_elem(&cnlab_nat, &fk, &v, BPF_ANY);
	if (x->affinity) {
		struct affinity_key ak = {.client = x->o_saddr, .id = x->id};
		struct affinity_val av = {.last = now, .b = {.ip = x->daddr, .port = x->dport}, .slot = x->slot};
		bpf_map_update_elem(&cnlab_affinity, &ak, &av, BPF_ANY);
	}
}

static __always_inline int set_addr(struct __sk_buff *skb, __u32 csum, __u32 off, __u32 from, __u32 to, __u64 f)
{
	if (from == to)
		return 0;
	if (bpf_l4_csum_replace(skb, csum, from, to, f | BPF_F_PSEUDO_HDR | 4) < 0 ||
	    bpf_l3_csum_replace(skb, ETH_HLEN + 10, from, to, 4) < 0)
		return -1;
	return bpf_skb_store_bytes(skb, off, &to, 4, 0);
}

static __always_inline int set_port(struct __sk_buff *skb, __u32 csum, __u32 off, __u16 from, __u16 to, __u64 f)
{
	if (from == to)
		return 0;
	if (bpf_l4_csum_replace(skb, csum, from, to, f | 2) < 0)
		return -1;
	return bpf_skb_store_bytes(skb, off, &to, 2, 0);
}

static __always_inline int set_ip(struct __sk_buff *skb, __u32 off, __u32 from, __u32 to)
{
	if (from == to)
		return 0;
	if (bpf_l3_csum_replace(skb, ETH_HLEN + 10, from, to, 4) < 0)
		return -1;
	return bpf_skb_store_bytes(skb, off, &to, 4, 0);
}

// xlate_write rewrites the packet's addresses and ports as x says, with
// the IPv4 and TCP/UDP checksums (a UDP checksum of 0 stays 0). A first
// fragment leaves its new addresses for the later ones (svc_frag), which
// have no L4 header: only their addresses are rewritten (the L4 checksum,
// in the first fragment, covers the whole datagram).
static __always_inline int xlate_write(struct __sk_buff *skb, struct pkt *p, struct xlate *x, __u64 now)
{
	if (p->frag == 2)
		return set_ip(skb, ETH_HLEN + 12, x->o_saddr, x->saddr) < 0 ||
		       set_ip(skb, ETH_HLEN + 16, x->o_daddr, x->daddr) < 0 ? -1 : 0;
	if (p->frag == 1) {
		struct svc_frag_key k = {.saddr = x->o_saddr, .daddr = x->o_daddr, .id = p->ipid, .proto = p->proto};
		struct svc_frag_val v = {.expires = now + LIFE_FRAG, .saddr = x->saddr, .daddr = x->daddr,
					 .kind = x->kind, .hairpin = x->hairpin, .snat = x->snat};
		bpf_map_update_elem(&cnlab_svc_frag, &k, &v, BPF_ANY);
	}
	__u32 l4 = ETH_HLEN + p->ihl;
	__u32 csum = l4 + (p->proto == IPPROTO_TCP ? 16 : 6);
	__u64 f = p->proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	if (set_addr(skb, csum, ETH_HLEN + 12, x->o_saddr, x->saddr, f) < 0 ||
	    set_addr(skb, csum, ETH_HLEN + 16, x->o_daddr, x->daddr, f) < 0 ||
	    set_port(skb, csum, l4, x->o_sport, x->sport, f) < 0 ||
	    set_port(skb, csum, l4 + 2, x->o_dport, x->dport, f) < 0)
		return -1;
	return 0;
}

// set_quoted rewrites a field of the packet an ICMP error quotes, with the
// ICMP checksum (which covers it; there is no pseudo-header).
static __always_inline int set_quoted(struct __sk_buff *skb, __u32 csum, __u32 off, __u32 from, __u32 to, __u32 size)
{
	if (from == to)
		return 0;
	if (bpf_l4_csum_replace(skb, csum, from, to, size) < 0)
		return -1;
	return bpf_skb_store_bytes(skb, off, &to, size, 0);
}

// svc_icmp translates an ICMP error about a translated flow on its way to
// the flow's client (p's destination), as netfilter's NAT does for
// related packets: it quotes the packet the client sent as the client
// sent it (from its own address and port, to the Service's address and
// port: not the backend's, not a masquerade address), it goes to the
// client and, when the backend itself sent it, comes from the Service's
// address; otherwise the client's socket would never see it (a UDP client
// would time out instead of getting ECONNREFUSED, a path MTU would be
// lost). The quoted tuple is read from the packet; the flow's reverse
// cnlab_nat entry names what it was. The inner IPv4 checksum and the ICMP
// checksum are updated; the quoted L4 checksum is not (no receiver checks
// it).
static __always_inline int svc_icmp(struct __sk_buff *skb, struct pkt *p, __u64 now)
{
	if (!p->icmp_err || p->daddr != p->in_saddr ||
	    (p->in_proto != IPPROTO_TCP && p->in_proto != IPPROTO_UDP))
		return 0;
	__u32 icmp = ETH_HLEN + p->ihl, in = icmp + 8, csum = icmp + 2;
	struct iphdr ih;
	__u16 ports[2];
	__u32 odst;
	if (bpf_skb_load_bytes(skb, in, &ih, sizeof(ih)) < 0)
		return -1;
	__u32 in_l4 = in + ih.ihl * 4;
	if (bpf_skb_load_bytes(skb, in_l4, ports, sizeof(ports)) < 0 ||
	    bpf_skb_load_bytes(skb, ETH_HLEN + 16, &odst, 4) < 0)
		return -1;
	struct nat_key k = {.saddr = ih.daddr, .daddr = ih.saddr, .sport = ports[1],
			    .dport = ports[0], .proto = ih.protocol, .dir = NAT_REV};
	struct nat_val *v = nat_get(&k, now);
	if (!v || v->daddr != p->daddr)
		return 0;
	// The flow as its client has it: client:cport to vip:vport.
	__u32 vip = v->saddr, client = v->daddr;
	__u16 vport = v->sport, cport = v->dport, old_ck, new_ck;
	if (bpf_skb_load_bytes(skb, in + 10, &old_ck, 2) < 0 ||
	    (ih.daddr != vip && bpf_l3_csum_replace(skb, in + 10, ih.daddr, vip, 4) < 0) ||
	    (ih.saddr != client && bpf_l3_csum_replace(skb, in + 10, ih.saddr, client, 4) < 0) ||
	    bpf_skb_load_bytes(skb, in + 10, &new_ck, 2) < 0 ||
	    set_quoted(skb, csum, in + 10, old_ck, new_ck, 2) < 0 ||
	    set_quoted(skb, csum, in + 16, ih.daddr, vip, 4) < 0 ||
	    set_quoted(skb, csum, in + 12, ih.saddr, client, 4) < 0 ||
	    set_quoted(skb, csum, in_l4 + 2, ports[1], vport, 2) < 0 ||
	    set_quoted(skb, csum, in_l4, ports[0], cport, 2) < 0)
		return -1;
	// Outside: to the client, and from the Service when the backend sent it.
	if (set_ip(skb, ETH_HLEN + 16, odst, client) < 0 ||
	    (p->saddr == ih.daddr && set_ip(skb, ETH_HLEN + 12, ih.daddr, vip) < 0))
		return -1;
	return 0;
}

static __always_inline __u16 csum_fold(__s64 c)
{
	__u32 s = (__u32)c;
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

// icmp_back answers the packet with an ICMP destination unreachable of
// the given code (and next-hop MTU) from saddr, sent straight back into
// the sender's namespace. The packet becomes the answer: its IPv4 header
// and first 8 bytes of L4 are quoted, as it was sent.
static __always_inline int icmp_back(struct __sk_buff *skb, struct endpoint *ep, struct pkt *p, __u32 saddr,
				     __u8 code, __u16 mtu)
{
	struct {
		struct iphdr ip;
		__u8 icmp[8];
		__u8 quote[28]; // the packet's IPv4 header and 8 bytes of L4
	} r = {};
	if (p->ihl != 20 || bpf_skb_load_bytes(skb, ETH_HLEN, r.quote, sizeof(r.quote)) < 0)
		return TC_ACT_SHOT;
	r.ip.version = 4;
	r.ip.ihl = 5;
	r.ip.tos = 0xc0;
	r.ip.tot_len = bpf_htons(sizeof(r));
	r.ip.ttl = 64;
	r.ip.protocol = IPPROTO_ICMP;
	r.ip.saddr = saddr;
	__builtin_memcpy(&r.ip.daddr, &r.quote[12], 4); // the sender
	r.ip.check = csum_fold(bpf_csum_diff(0, 0, (__be32 *)&r.ip, sizeof(r.ip), 0));
	r.icmp[0] = 3; // destination unreachable
	r.icmp[1] = code;
	r.icmp[6] = mtu >> 8;
	r.icmp[7] = mtu;
	__u16 c = csum_fold(bpf_csum_diff(0, 0, (__be32 *)r.icmp, sizeof(r.icmp) + sizeof(r.quote), 0));
	__builtin_memcpy(&r.icmp[2], &c, 2);
	if (bpf_skb_change_tail(skb, ETH_HLEN + sizeof(r), 0) < 0 ||
	    bpf_skb_store_bytes(skb, ETH_HLEN, &r, sizeof(r), 0) < 0)
		return TC_ACT_SHOT;
	return deliver(skb, ep);
}

// reject answers a new connection to a Service without backends with an
// ICMP port unreachable from the Service's address, as kube-proxy's
// REJECT does: the client's connect() fails at once with ECONNREFUSED.
static __always_inline int reject(struct __sk_buff *skb, struct endpoint *ep, struct pkt *p)
{
	return icmp_back(skb, ep, p, p->daddr, 3, 0);
}

#define AF_INET 2

// too_big reports whether a masqueraded packet that may not be
// fragmented (DF) is larger than the MTU of the device its route leaves
// by (for a GSO packet: one of its segments), and that MTU: the host's
// stack would answer it with "fragmentation needed" to the masquerade
// address, which no one has, so path MTU discovery would fail through
// the node port.
static __always_inline int too_big(struct __sk_buff *skb, struct xlate *x, __u16 *mtu)
{
	__u16 frag_off;
	if (bpf_skb_load_bytes(skb, ETH_HLEN + 6, &frag_off, 2) < 0 || !(frag_off & bpf_htons(0x4000)))
		return 0;
	struct bpf_fib_lookup fl = {.family = AF_INET, .ifindex = skb->ifindex, .ipv4_src = x->saddr,
				    .ipv4_dst = x->daddr};
	// Without a length, the lookup checks the packet against the
	// device's MTU itself (FRAG_NEEDED), with some slack: the exact
	// check is bpf_check_mtu's, on the device it found.
	long rc = bpf_fib_lookup(skb, &fl, sizeof(fl), 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH && rc != BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return 0;
	__u32 len = 0;
	rc = bpf_check_mtu(skb, fl.ifindex, &len, 0, BPF_MTU_CHK_SEGS);
	if (rc != BPF_MTU_CHK_RET_FRAG_NEEDED && rc != BPF_MTU_CHK_RET_SEGS_TOOBIG)
		return 0;
	*mtu = len;
	return 1;
}

static __always_inline struct svc_config *svc_config(void)
{
	__u32 zero = 0;
	struct svc_config *sc = bpf_map_lookup_elem(&cnlab_svc_config, &zero);
	return sc && (sc->flags & SVC_ON) ? sc : 0;
}

static __always_inline int mac_eq(const __u8 *a, const __u8 *b)
{
	__u8 d = 0;
#pragma unroll
	for (int i = 0; i < 6; i++)
		d |= a[i] ^ b[i];
	return d == 0;
}

// arp checks that an endpoint's ARP names the endpoint as its sender
// (sender MAC and Ethernet source its MAC, sender IP its address or
// 0.0.0.0 for a probe): with legacy host routing the bridge carries it to
// the other endpoints, whose caches (and the bridge's forwarding table)
// would learn a forged sender; with bpf host routing a reply reaches the
// host's neighbour table. With bpf host routing it then answers a request
// with the host-side MAC, whatever address it asks for (every destination
// is routed through the host), and sends the reply back out of the
// host-side veth.
static __always_inline int arp(struct __sk_buff *skb, struct endpoint *ep, struct config *cfg)
{
	struct {
		struct arphdr h;
		__u8 sha[6];
		__u32 sip;
		__u8 tha[6];
		__u32 tip;
	} __attribute__((packed)) a;
	__u8 src[8];
	if (bpf_skb_load_bytes(skb, ETH_HLEN, &a, sizeof(a)) < 0 ||
	    bpf_skb_load_bytes(skb, 6, src, 6) < 0) {
		count(ep->index, DIR_EGRESS, R_DROP_MALFORMED, skb->len);
		return TC_ACT_SHOT;
	}
	if (!mac_eq(src, ep->mac) || !mac_eq(a.sha, ep->mac) || (a.sip != ep->ip && a.sip != 0)) {
		count(ep->index, DIR_EGRESS, R_DROP_SPOOF, skb->len);
		return TC_ACT_SHOT;
	}
	if (!host_routing_bpf) {
		// Legacy: the bridge carries the checked ARP, but for the
		// masquerade address of node ports, which no one on the bridge
		// has: answered here, so that a backend's reply to it reaches
		// this program (and is translated back) like any other.
		struct svc_config *sc = svc_config();
		if (!sc || !(sc->flags & SVC_NODEPORTS) || a.tip != sc->masq || a.h.ar_op != bpf_htons(ARPOP_REQUEST)) {
			count(ep->index, DIR_EGRESS, R_ARP_PASSED, skb->len);
			return TC_ACT_OK;
		}
	}
	if (a.h.ar_op == bpf_htons(ARPOP_REPLY)) {
		count(ep->index, DIR_EGRESS, R_ARP_PASSED, skb->len);
		return TC_ACT_OK; // the endpoint answering the host
	}
	if (a.h.ar_op != bpf_htons(ARPOP_REQUEST) || a.h.ar_hrd != bpf_htons(ARPHRD_ETHER) ||
	    a.h.ar_pro != bpf_htons(ETH_P_IP) || a.tip == ep->ip) {
		count(ep->index, DIR_EGRESS, R_DROP_L3, skb->len);
		return TC_ACT_SHOT; // duplicate address detection and the like
	}
	__u32 tip = a.tip;
	a.h.ar_op = bpf_htons(ARPOP_REPLY);
	__builtin_memcpy(a.tha, a.sha, 6);
	a.tip = a.sip;
	__builtin_memcpy(a.sha, ep->lxc_mac, 6);
	a.sip = tip;
	struct ethhdr eth;
	__builtin_memcpy(eth.h_dest, a.tha, 6);
	__builtin_memcpy(eth.h_source, ep->lxc_mac, 6);
	eth.h_proto = bpf_htons(ETH_P_ARP);
	if (bpf_skb_store_bytes(skb, 0, &eth, sizeof(eth), 0) < 0 ||
	    bpf_skb_store_bytes(skb, ETH_HLEN, &a, sizeof(a), 0) < 0) {
		count(ep->index, DIR_EGRESS, R_DROP_MALFORMED, skb->len);
		return TC_ACT_SHOT;
	}
	count(ep->index, DIR_EGRESS, R_ARP_REPLIED, skb->len);
	return bpf_redirect(skb->ifindex, 0);
}

int from_ep6(struct __sk_buff *skb, struct endpoint *src);
int to_ep6(struct __sk_buff *skb, struct endpoint *dst);

// l3 sorts out what is not IPv4: it returns -1 for IPv4, else the tc
// action (IPv6 takes its own path, from_ep6 or to_ep6).
static __always_inline int l3(struct __sk_buff *skb, struct endpoint *ep, struct config *cfg, __u8 dir)
{
	__u16 proto = skb->protocol;
	// The kernel strips a frame's outer VLAN tag before tc: an endpoint
	// speaks untagged IPv4 and ARP only, as on the netfilter datapaths.
	if (dir == DIR_EGRESS && skb->vlan_present) {
		count(ep->index, dir, R_DROP_L3, skb->len);
		return TC_ACT_SHOT;
	}
	if ((proto == bpf_htons(ETH_P_IP) || proto == bpf_htons(ETH_P_ARP)) && ep->ip == 0xffffffff) {
		count(ep->index, dir, R_DROP_L3, skb->len); // an IPv6-only endpoint
		return TC_ACT_SHOT;
	}
	if (proto == bpf_htons(ETH_P_IP))
		return -1;
	if (proto == bpf_htons(ETH_P_ARP)) {
		if (dir == DIR_EGRESS)
			return arp(skb, ep, cfg);
		count(ep->index, dir, R_ARP_PASSED, skb->len);
		return TC_ACT_OK; // ARP from the host or the bridge to the endpoint
	}
	if (proto == bpf_htons(ETH_P_IPV6))
		return dir == DIR_EGRESS ? from_ep6(skb, ep) : to_ep6(skb, ep);
	count(ep->index, dir, R_DROP_L3, skb->len);
	return TC_ACT_SHOT;
}

static __always_inline int finish(struct config *cfg, struct __sk_buff *skb, struct pkt *p, __u32 index,
				  __u8 dir, int r, __u32 src_id, __u32 dst_id, __u32 rule)
{
	count(index, dir, r, skb->len);
	emit(cfg, skb->len, p, AT_TC, index, dir, r, src_id, dst_id, rule);
	return is_drop(r) ? TC_ACT_SHOT : TC_ACT_OK;
}

// legacy_l7 finds, with legacy host routing, a connection from an
// endpoint to an L7 port of an endpoint of the same host: the bridge
// would carry it to the destination's veth, whose program sees it on
// egress, where it cannot be handed to the proxy. The connection is then
// taken as a host-local one (both sides judged by the source's program,
// as with bpf host routing): its first packet when the destination's
// ingress sends it to the proxy, the others when its conntrack entry
// says so. It returns the destination, or 0 to go on as before.
static __always_inline struct endpoint *legacy_l7(struct config *cfg, struct endpoint *src, struct pkt *p, __u64 now)
{
	struct endpoint *dst = bpf_map_lookup_elem(&cnlab_local, &p->daddr);
	if (!dst)
		return 0;
	if ((p->tcpflags & (TCP_SYN | TCP_ACK)) != TCP_SYN) {
		struct ct_key k = {.saddr = p->saddr, .daddr = p->daddr, .sport = p->sport,
				   .dport = p->dport, .proto = p->proto};
		struct ct_val *v = ct_get(&k, now);
		return v && (v->flags & CT_PROXY) ? dst : 0;
	}
	__u32 rule;
	struct pkt q = *p;
	verdict(cfg, dst->index, DIR_INGRESS, peer_of(cfg->gen, p->saddr).key, &q, &rule, RC_NONE, 0);
	return q.proxied ? dst : 0;
}

// ---- IPv6 ----
//
// IPv6 takes a path of its own after the ethertype check (l3): from_ep6
// and to_ep6, global functions the verifier checks on their own, so the
// IPv4 path is what it was, instruction for instruction. The path keeps
// its own ipcache (cnlab_ipcache6), endpoints by address (cnlab_local6),
// conntrack (cnlab_ct6), fragments (cnlab_frag6) and event rate limit
// (cnlab_evlimit6), and asks the same policy maps (policy_verdict): a
// policy key names a peer, whatever its family. The service proxy's IPv6
// frontends are translated on it ("IPv6 Services" below), and the L7
// proxy takes IPv6 connections as IPv4 ones (to_proxy6, on the proxy's
// IPv6 listener); the connect hook judges IPv6 connects with its maps
// (cnlab_connect6). Not on this path: the IPv4 path's "fragmentation
// needed" for masqueraded packets.

#define NEXTHDR_HOP 0
#define NEXTHDR_ROUTING 43
#define NEXTHDR_FRAGMENT 44
#define NEXTHDR_AUTH 51
#define NEXTHDR_DEST 60
#define IPPROTO_ICMP6 58
#define EXTHDR_MAX 4 // extension headers skipped before the upper layer

// ICMPv6 types (RFC 4443, 4861, 2710, 3810).
#define ICMP6_DST_UNREACH 1
#define ICMP6_PKT_TOOBIG 2
#define ICMP6_TIME_EXCEEDED 3
#define ICMP6_PARAM_PROB 4
#define ICMP6_ECHO_REQUEST 128
#define ICMP6_ECHO_REPLY 129
#define ICMP6_MLD_QUERY 130
#define ICMP6_MLD_REPORT 131
#define ICMP6_MLD_DONE 132
#define ND_ROUTER_SOLICIT 133
#define ND_ROUTER_ADVERT 134
#define ND_NEIGHBOR_SOLICIT 135
#define ND_NEIGHBOR_ADVERT 136
#define ND_REDIRECT 137
#define ICMP6_MLD2_REPORT 143

struct ip6h {
	__u8 vtc; // version and the traffic class's high bits
	__u8 flow[3];
	__be16 plen;
	__u8 nxt;
	__u8 hlim;
	__u32 saddr[4], daddr[4];
};

struct pkt6 {
	__u32 saddr[4], daddr[4];
	__u16 sport, dport; // host order
	__u8 proto;
	__u8 tcpflags;
	__u8 frag;     // 0 whole, 1 first fragment, 2 later fragment
	__u8 icmp_err; // an ICMPv6 error carrying the tuple below
	__u32 fragid;
	__u8 icmp;     // enum icmp_role
	__u8 type;     // the ICMPv6 type
	__u8 proxied;
	__u8 hlim;     // the hop limit
	__u32 l4;      // offset of the upper-layer header
	__u32 in_saddr[4], in_daddr[4];
	__u16 in_sport, in_dport;
	__u8 in_proto;
	__u8 frag_nxt; // the fragment header's next header: the same in every fragment of a datagram
	__u8 pad2[2];
};

// The IPv6 path's working memory, one per CPU (cnlab_scratch6): called
// from cnlab_from_ep and cnlab_to_ep, whose frames the verifier counts
// with theirs against the 512 bytes of a chain of calls, from_ep6 and
// to_ep6 keep their packet and map keys here rather than on the stack.
// A tc program runs to its end on its CPU (tc ingress in softirq, egress
// with bottom halves off), so no other run shares it meanwhile.
struct scratch6 {
	struct config cfg;
	struct pkt6 p;
	struct ct6_key ct;
	struct frag6_key frag;
	struct flow6_key flow;
	struct ipcache6_key ipk;
	struct bpf_sock_tuple tuple; // to_proxy6's lookups
	struct {
		struct ip6h ip;
		__u8 icmp[8];
		__u32 target[4];
		__u8 opt[8]; // target link-layer address
	} na;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch6);
} cnlab_scratch6 SEC(".maps");

static __always_inline int ip6_eq(const __u32 *a, const __u32 *b)
{
	return ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3])) == 0;
}

static __always_inline int ip6_zero(const __u32 *a) { return (a[0] | a[1] | a[2] | a[3]) == 0; }

static __always_inline void ip6_cp(__u32 *d, const __u32 *s)
{
	d[0] = s[0];
	d[1] = s[1];
	d[2] = s[2];
	d[3] = s[3];
}

// quoted_ports6 reads the ports (or echo id) of the packet an ICMPv6
// error quotes (its fixed header only: a quote with extension headers
// is taken for what it says its next header is, without ports).
static __always_inline int quoted_ports6(struct __sk_buff *skb, __u32 off, __u8 proto, __u16 *sport, __u16 *dport)
{
	__u8 h[8];
	*sport = 0;
	*dport = 0;
	switch (proto) {
	case IPPROTO_TCP:
	case IPPROTO_UDP:
	case IPPROTO_SCTP:
		if (bpf_skb_load_bytes(skb, off, h, 4) < 0)
			return -1;
		*sport = (h[0] << 8) | h[1];
		*dport = (h[2] << 8) | h[3];
		return 0;
	case IPPROTO_ICMP6:
		if (bpf_skb_load_bytes(skb, off, h, 8) < 0)
			return -1;
		if (h[0] == ICMP6_ECHO_REQUEST || h[0] == ICMP6_ECHO_REPLY) {
			*sport = (h[4] << 8) | h[5];
			*dport = *sport;
		}
		return 0;
	}
	return 0;
}

// parse6 reads an IPv6 packet's tuple past the usual extension headers
// (hop-by-hop, routing, fragment, destination options; at most
// EXTHDR_MAX of them); it returns 0 or a drop reason.
static __always_inline int parse6(struct __sk_buff *skb, struct pkt6 *p)
{
	struct ip6h ip;
	if (bpf_skb_load_bytes(skb, ETH_HLEN, &ip, sizeof(ip)) < 0)
		return R_DROP_MALFORMED;
	if ((ip.vtc >> 4) != 6)
		return R_DROP_MALFORMED;
	ip6_cp(p->saddr, ip.saddr);
	ip6_cp(p->daddr, ip.daddr);
	p->hlim = ip.hlim;
	__u8 nxt = ip.nxt;
	__u32 off = ETH_HLEN + sizeof(ip);
#pragma unroll
	for (int i = 0; i < EXTHDR_MAX; i++) {
		if (nxt != NEXTHDR_HOP && nxt != NEXTHDR_ROUTING && nxt != NEXTHDR_FRAGMENT && nxt != NEXTHDR_DEST)
			break;
		__u8 h[8];
		if (bpf_skb_load_bytes(skb, off, h, sizeof(h)) < 0)
			return R_DROP_MALFORMED;
		if (nxt == NEXTHDR_FRAGMENT) {
			__u16 fo = ((h[2] << 8) | h[3]) & 0xfff8;
			p->fragid = (h[4] << 24) | (h[5] << 16) | (h[6] << 8) | h[7];
			p->frag_nxt = h[0];
			if (fo) {
				p->proto = h[0];
				p->frag = 2; // no upper-layer header here: ports come from the first fragment
				return 0;
			}
			if (h[3] & 1)
				p->frag = 1;
			off += 8;
		} else {
			off += (h[1] + 1) * 8;
		}
		nxt = h[0];
	}
	if (nxt == NEXTHDR_HOP || nxt == NEXTHDR_ROUTING || nxt == NEXTHDR_FRAGMENT || nxt == NEXTHDR_DEST ||
	    nxt == NEXTHDR_AUTH)
		return R_DROP_IPV6; // more extension headers than the program reads, or AH
	p->proto = nxt;
	p->l4 = off;
	if (parse_l4(skb, off, nxt, &p->sport, &p->dport, &p->tcpflags) < 0)
		return R_DROP_MALFORMED;
	if (nxt == IPPROTO_ICMP6) {
		__u8 h[8];
		if (bpf_skb_load_bytes(skb, off, h, sizeof(h)) < 0)
			return R_DROP_MALFORMED;
		__u8 type = h[0];
		p->type = type;
		p->icmp = ICMP_OTHER;
		if (type == ICMP6_ECHO_REQUEST || type == ICMP6_ECHO_REPLY) {
			__u16 id = (h[4] << 8) | h[5];
			p->sport = id;
			p->dport = id;
			p->icmp = type == ICMP6_ECHO_REQUEST ? ICMP_REQUEST : ICMP_REPLY;
		} else if (type >= ICMP6_DST_UNREACH && type <= ICMP6_PARAM_PROB) {
			struct ip6h in;
			if (bpf_skb_load_bytes(skb, off + 8, &in, sizeof(in)) == 0 && (in.vtc >> 4) == 6 &&
			    quoted_ports6(skb, off + 8 + sizeof(in), in.nxt, &p->in_sport, &p->in_dport) == 0) {
				p->icmp_err = 1;
				ip6_cp(p->in_saddr, in.saddr);
				ip6_cp(p->in_daddr, in.daddr);
				p->in_proto = in.nxt;
			}
		}
	}
	return 0;
}

static __always_inline struct peer peer_of6(__u32 gen, const __u32 *ip, struct ipcache6_key *k)
{
	struct peer out = {.key = WORLD_IDENTITY, .identity = WORLD_IDENTITY};
	void *ipc = bpf_map_lookup_elem(&cnlab_ipcache6, &gen);
	if (!ipc)
		return out;
	k->prefixlen = 128;
	ip6_cp(k->ip, ip);
	struct peer *v = bpf_map_lookup_elem(ipc, k);
	if (v)
		out = *v;
	return out;
}

// related_path6 is related_path for IPv6.
static __always_inline int related_path6(__u32 gen, struct pkt6 *p, struct ipcache6_key *ik)
{
	if (!ip6_eq(p->daddr, p->in_saddr))
		return 0;
	if (ip6_eq(p->saddr, p->in_daddr))
		return 1;
	__u32 id = peer_of6(gen, p->saddr, ik).identity;
	return id == WORLD_IDENTITY || id >= FIRST_CIDR_IDENTITY;
}

static __always_inline struct ct_val *ct6_get(struct ct6_key *k, __u64 now)
{
	struct ct_val *v = bpf_map_lookup_elem(&cnlab_ct6, k);
	if (v && v->expires < now) {
		bpf_map_delete_elem(&cnlab_ct6, k);
		return 0;
	}
	return v;
}

static __always_inline void ct6_fill(struct ct6_key *k, const __u32 *s, const __u32 *d, __u16 sport, __u16 dport,
				     __u8 proto, __u8 scope, __u16 ep)
{
	ip6_cp(k->saddr, s);
	ip6_cp(k->daddr, d);
	k->sport = sport;
	k->dport = dport;
	k->proto = proto;
	k->scope = scope;
	k->ep = ep;
}

// ct_lookup6 is ct_lookup for IPv6.
static __always_inline int ct_lookup6(__u32 gen, struct scratch6 *s, __u8 scope, __u8 rscope, __u16 ep, __u64 now)
{
	struct pkt6 *p = &s->p;
	struct ct6_key *k = &s->ct;
	struct ct_val *v;
	int syn = p->proto == IPPROTO_TCP && (p->tcpflags & (TCP_SYN | TCP_ACK)) == TCP_SYN;
	int fwd = p->icmp == ICMP_NONE || p->icmp == ICMP_REQUEST;
	int rev = p->icmp == ICMP_NONE || p->icmp == ICMP_REPLY;
	if (!syn && fwd) {
		ct6_fill(k, p->saddr, p->daddr, p->sport, p->dport, p->proto, scope, ep);
		v = ct6_get(k, now);
		if (v) {
			ct_touch(v, p->proto, p->tcpflags, now);
			p->proxied = (v->flags & CT_PROXY) != 0;
			return R_ALLOW_CT;
		}
	}
	if (!syn && rev) {
		ct6_fill(k, p->daddr, p->saddr, p->dport, p->sport, p->proto, rscope, ep);
		v = ct6_get(k, now);
		if (v && !(v->flags & CT_PROXY)) {
			ct_touch(v, p->proto, p->tcpflags, now);
			return R_ALLOW_CT;
		}
	}
	if (p->icmp_err && related_path6(gen, p, &s->ipk)) {
		ct6_fill(k, p->in_saddr, p->in_daddr, p->in_sport, p->in_dport, p->in_proto, rscope, ep);
		if (ct6_get(k, now))
			return R_ALLOW_RELATED;
		ct6_fill(k, p->in_daddr, p->in_saddr, p->in_dport, p->in_sport, p->in_proto, scope, ep);
		if (ct6_get(k, now))
			return R_ALLOW_RELATED;
	}
	return 0;
}

static __always_inline void ct_create6(struct scratch6 *s, __u8 scope, __u16 ep, __u64 now)
{
	struct pkt6 *p = &s->p;
	if (p->icmp != ICMP_NONE && p->icmp != ICMP_REQUEST)
		return;
	ct6_fill(&s->ct, p->saddr, p->daddr, p->sport, p->dport, p->proto, scope, ep);
	struct ct_val v = {.flags = p->proxied ? CT_PROXY : 0};
	ct_touch(&v, p->proto, p->tcpflags, now);
	bpf_map_update_elem(&cnlab_ct6, &s->ct, &v, BPF_ANY);
}

static __always_inline void frag6_fill(struct frag6_key *k, struct pkt6 *p, __u8 scope, __u16 ep)
{
	ip6_cp(k->saddr, p->saddr);
	ip6_cp(k->daddr, p->daddr);
	k->id = p->fragid;
	// Not p->proto: a first fragment's is its upper layer's, past any
	// extension header after the fragment header (destination options,
	// routing), which a later fragment cannot see.
	k->proto = p->frag_nxt;
	k->scope = scope;
	k->ep = ep;
}

static __always_inline int fragment6(struct scratch6 *s, __u8 scope, __u16 ep, __u64 now)
{
	struct pkt6 *p = &s->p;
	frag6_fill(&s->frag, p, scope, ep);
	struct frag_val *fv = bpf_map_lookup_elem(&cnlab_frag6, &s->frag);
	if (!fv || fv->expires < now)
		return R_DROP_FRAG;
	p->sport = fv->sport;
	p->dport = fv->dport;
	return R_ALLOW_FRAG;
}

static __always_inline void first_fragment6(struct scratch6 *s, __u8 scope, __u16 ep, __u64 now)
{
	struct pkt6 *p = &s->p;
	frag6_fill(&s->frag, p, scope, ep);
	struct frag_val fv = {.sport = p->sport, .dport = p->dport, .expires = now + LIFE_FRAG};
	bpf_map_update_elem(&cnlab_frag6, &s->frag, &fv, BPF_ANY);
}

// emit6_at is emit6 for the packet p (or connect6's attempt, at
// AT_CONNECT), with fk the rate limit's key to fill.
static __always_inline void emit6_at(struct pkt6 *p, struct flow6_key *fk, __u32 len, __u8 at, __u32 ep, __u8 dir,
				     __u8 reason, __u32 src_id, __u32 dst_id, __u32 rule)
{
	__u32 zero = 0;
	struct monitor *m = bpf_map_lookup_elem(&cnlab_monitor, &zero);
	if (!m || m->level == MONITOR_OFF)
		return;
	if (m->level == MONITOR_DROPS && !is_drop(reason))
		return;
	int limit = 1;
	if (m->level == MONITOR_FLOWS && !is_drop(reason)) {
		if (!is_new_flow(reason))
			return;
		limit = 0;
	}
	__u64 now = bpf_ktime_get_ns();
	if (now > m->until)
		return;
	if (limit) {
		fk->sport = p->sport;
		fk->dport = p->dport;
		fk->proto = p->proto;
		fk->reason = reason;
		fk->pad = 0;
		ip6_cp(fk->saddr, p->saddr);
		ip6_cp(fk->daddr, p->daddr);
		__u64 *last = bpf_map_lookup_elem(&cnlab_evlimit6, fk);
		if (last && now - *last < NSEC)
			return;
		bpf_map_update_elem(&cnlab_evlimit6, fk, &now, BPF_ANY);
	}
	struct event6 *e6 = bpf_ringbuf_reserve(&cnlab_events, sizeof(*e6), 0);
	if (!e6) {
		__u64 *lost = bpf_map_lookup_elem(&cnlab_lost, &zero);
		if (lost)
			*lost += 1;
		return;
	}
	struct event *e = &e6->e;
	e->time = now;
	e->saddr = 0;
	e->daddr = 0;
	e->sport = p->sport;
	e->dport = p->dport;
	e->proto = p->proto;
	e->dir = dir;
	e->reason = reason;
	e->at = at;
	e->ep = ep;
	e->src_identity = src_id;
	e->dst_identity = dst_id;
	e->len = len;
	e->rule = rule;
	e->tcpflags = p->proto == IPPROTO_TCP ? p->tcpflags : 0;
	e->pad[0] = e->pad[1] = e->pad[2] = 0;
	ip6_cp(e6->saddr, p->saddr);
	ip6_cp(e6->daddr, p->daddr);
	__u64 wake = 0;
	if (!limit && bpf_ringbuf_query(&cnlab_events, BPF_RB_AVAIL_DATA) < EVENT_BATCH * (sizeof(*e6) + 8))
		wake = BPF_RB_NO_WAKEUP;
	bpf_ringbuf_submit(e6, wake);
}

static __always_inline void emit6(struct scratch6 *s, __u32 len, __u32 ep, __u8 dir, __u8 reason,
				  __u32 src_id, __u32 dst_id, __u32 rule)
{
	emit6_at(&s->p, &s->flow, len, AT_TC, ep, dir, reason, src_id, dst_id, rule);
}

static __always_inline int finish6(struct scratch6 *s, struct __sk_buff *skb, __u32 index,
				   __u8 dir, int r, __u32 src_id, __u32 dst_id, __u32 rule)
{
	count(index, dir, r, skb->len);
	emit6(s, skb->len, index, dir, r, src_id, dst_id, rule);
	return is_drop(r) ? TC_ACT_SHOT : TC_ACT_OK;
}

// side6 is side for IPv6: one endpoint's direction, conntrack then policy.
static __always_inline int side6(struct scratch6 *s, struct endpoint *ep, __u8 dir, __u64 now,
				 __u32 *peer_id, __u32 *rule, __u32 len)
{
	struct config *cfg = &s->cfg;
	struct pkt6 *p = &s->p;
	__u8 scope = 1 + dir, rscope = 1 + !dir;
	__u16 idx = ep->index;
	*rule = NO_RULE;
	if (p->frag == 2)
		return fragment6(s, scope, idx, now);
	int r = ct_lookup6(cfg->gen, s, scope, rscope, idx, now);
	if (!r) {
		struct peer peer = peer_of6(cfg->gen, dir == DIR_EGRESS ? p->daddr : p->saddr, &s->ipk);
		*peer_id = peer.identity;
		r = verdict_of(cfg, ep->index, dir, peer.key, p->proto, p->tcpflags, p->dport, &p->proxied, rule,
			       RC_ALL, len);
		if (is_drop(r))
			return r;
		// For the L7 proxy, but here instead: it came around the
		// proxy (as side).
		if (dir == DIR_INGRESS && p->proxied)
			return R_DROP_NOT_PROXIED;
		ct_create6(s, scope, idx, now);
	} else if (dir == DIR_INGRESS && p->proxied) {
		return R_DROP_NOT_PROXIED;
	}
	if (p->frag == 1)
		first_fragment6(s, scope, idx, now);
	return r;
}

// ---- IPv6 Services (the ebpf service proxy over IPv6) ----
//
// The IPv4 service proxy's design on the IPv6 path, with maps of its own
// (cnlab_svc6_config, cnlab_svc6, cnlab_backends6, cnlab_nat6,
// cnlab_affinity6, cnlab_svc_frag6): from_ep6 translates a new connection
// to a frontend before policy (which judges the real tuple), replies are
// translated back where they first meet a program that knows the flow
// (from_ep6 of a backend on the client's host, to_ep6 of the client, or
// from_wire6 for a masqueraded node port's reply from another host). A
// frontend's number is unique among the host's IPv6 frontends; its values
// are struct svc_val as IPv4's. The work is done in global functions
// (svc6_front, svc6_out, svc6_in, reject6, from_wire6), each verified on
// its own, with its keys in a per-CPU scratch (cnlab_svc6_scratch).

// The service proxy's IPv6 settings for a host (cnlab_svc6_config[0]).
struct svc6_config {
	__u32 flags;      // enum svc_config_flag
	__u32 pad;
	__u32 hairpin[4]; // the host's IPv6 bridge address
	__u32 net[4];     // the IPv6 service CIDR and its mask
	__u32 mask[4];
	__u32 masq[4];    // masquerade source: an unused address of the host's IPv6 pod prefix
};

struct svc6_key {
	__u32 vip[4];
	__u16 port; // network order
	__u8 proto;
	__u8 pad;
};

struct backend6 {
	__u32 ip[4];
	__u16 port; // network order
	__u16 pad;
};

struct affinity6_key {
	__u32 client[4];
	__u32 id;
};

struct affinity6_val {
	__u64 last;
	struct backend6 b;
	__u32 slot;
	__u32 pad;
};

struct nat6_key {
	__u32 saddr[4], daddr[4];
	__u16 sport, dport;
	__u8 proto;
	__u8 dir; // enum nat_dir
	__u16 pad;
};

struct nat6_val {
	struct ct_val ct;
	__u32 saddr[4], daddr[4];
	__u16 sport, dport;
	__u32 pad;
};

struct svc_frag6_key {
	__u32 saddr[4], daddr[4];
	__u32 id;
	__u8 proto;
	__u8 pad[3];
};

struct svc_frag6_val {
	__u64 expires;
	__u32 saddr[4], daddr[4];
	__u8 kind, hairpin, snat;
	__u8 pad[5];
};

struct xlate6 {
	__u8 kind, fresh, hairpin, snat;
	__u32 id, affinity, slot;
	__u32 o_saddr[4], o_daddr[4];
	__u16 o_sport, o_dport;
	__u32 saddr[4], daddr[4];
	__u16 sport, dport;
};

struct svc6_scratch {
	struct xlate6 x;
	struct nat6_key k;
	struct nat6_key k2;
	struct nat6_val v;
	struct svc6_key sk;
	struct affinity6_key ak;
	struct affinity6_val av;
	struct svc_frag6_key fk;
	struct svc_frag6_val fv;
	struct backend6 b;
	struct {
		struct ip6h ip;
		__u8 icmp[8];
		__u8 quote[48]; // the packet's IPv6 header and 8 bytes of what follows
	} r;
	// svc_icmp6: an ICMPv6 error's quote (IPv6 header and ports) and
	// outer addresses, as they came and as they leave; the quote's offset.
	struct {
		struct ip6h ip;
		__u16 ports[2];
	} q, nq;
	struct {
		__u32 s[4], d[4];
	} o, no;
	__u32 in;
	__u32 peer_id, rule; // from_wire6's verdict, for from_wire6_out
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct svc6_config);
} cnlab_svc6_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct svc6_key);
	__type(value, struct svc_val);
} cnlab_svc6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 20);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct backend_key);
	__type(value, struct backend6);
} cnlab_backends6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct affinity6_key);
	__type(value, struct affinity6_val);
} cnlab_affinity6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct nat6_key);
	__type(value, struct nat6_val);
} cnlab_nat6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct svc_frag6_key);
	__type(value, struct svc_frag6_val);
} cnlab_svc_frag6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct svc6_scratch);
} cnlab_svc6_scratch SEC(".maps");

static __always_inline struct svc6_config *svc6_config(void)
{
	__u32 zero = 0;
	struct svc6_config *sc = bpf_map_lookup_elem(&cnlab_svc6_config, &zero);
	return sc && (sc->flags & SVC_ON) ? sc : 0;
}

static __always_inline struct svc6_scratch *svc6_scratch(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&cnlab_svc6_scratch, &zero);
}

static __always_inline struct nat6_val *nat6_get(struct nat6_key *k, __u64 now)
{
	struct nat6_val *v = bpf_map_lookup_elem(&cnlab_nat6, k);
	if (v && v->ct.expires < now) {
		bpf_map_delete_elem(&cnlab_nat6, k);
		return 0;
	}
	return v;
}

static __always_inline void nat6_fill(struct nat6_key *k, const __u32 *s, const __u32 *d, __u16 sport, __u16 dport,
				      __u8 proto, __u8 dir)
{
	ip6_cp(k->saddr, s);
	ip6_cp(k->daddr, d);
	k->sport = sport;
	k->dport = dport;
	k->proto = proto;
	k->dir = dir;
	k->pad = 0;
}

static __always_inline int in_net6(struct svc6_config *sc, const __u32 *a)
{
	return (((a[0] & sc->mask[0]) ^ sc->net[0]) | ((a[1] & sc->mask[1]) ^ sc->net[1]) |
		((a[2] & sc->mask[2]) ^ sc->net[2]) | ((a[3] & sc->mask[3]) ^ sc->net[3])) == 0;
}

// pick6 is pick for IPv6: the backend goes to out (ak: room for the
// affinity key).
static __always_inline int pick6(struct affinity6_key *ak, struct backend6 *out, struct svc_val *s,
				 const __u32 *client, __u64 now, __u32 *slot)
{
	struct backend_key bk = {.id = s->id, .half = s->half};
	struct backend6 *b;
	if (s->affinity) {
		ip6_cp(ak->client, client);
		ak->id = s->id;
		struct affinity6_val *a = bpf_map_lookup_elem(&cnlab_affinity6, ak);
		if (a && now - a->last < (__u64)s->affinity * NSEC && a->slot < s->count) {
			bk.slot = a->slot;
			b = bpf_map_lookup_elem(&cnlab_backends6, &bk);
			if (b && ip6_eq(b->ip, a->b.ip) && b->port == a->b.port) {
				*out = *b;
				*slot = bk.slot;
				return 0;
			}
		}
	}
	bk.slot = bpf_get_prandom_u32() % s->count;
	b = bpf_map_lookup_elem(&cnlab_backends6, &bk);
	if (!b)
		return -1;
	*out = *b;
	*slot = bk.slot;
	return 0;
}

static __always_inline void xl6_set(struct xlate6 *x, struct nat6_val *v)
{
	ip6_cp(x->saddr, v->saddr);
	ip6_cp(x->daddr, v->daddr);
	x->sport = v->sport;
	x->dport = v->dport;
}

// svc_reply6 is svc_reply for IPv6.
static __always_inline struct nat6_val *svc_reply6(struct svc6_scratch *ss, struct pkt6 *p, __u64 now)
{
	struct xlate6 *x = &ss->x;
	ip6_cp(x->o_saddr, p->saddr);
	ip6_cp(x->o_daddr, p->daddr);
	x->o_sport = bpf_htons(p->sport);
	x->o_dport = bpf_htons(p->dport);
	nat6_fill(&ss->k, p->saddr, p->daddr, x->o_sport, x->o_dport, p->proto, NAT_REV);
	struct nat6_val *v = nat6_get(&ss->k, now);
	if (!v)
		return 0;
	__u64 was = v->ct.expires;
	ct_touch(&v->ct, p->proto, p->tcpflags, now);
	x->kind = XL_REV;
	xl6_set(x, v);
	if (v->ct.expires != was) {
		nat6_fill(&ss->k2, v->daddr, v->saddr, v->dport, v->sport, p->proto, NAT_FWD);
		struct nat6_val *f = bpf_map_lookup_elem(&cnlab_nat6, &ss->k2);
		if (f && f->ct.expires < v->ct.expires)
			f->ct.expires = v->ct.expires;
	}
	return v;
}

static __always_inline int translatable6(struct pkt6 *p)
{
	return (p->proto == IPPROTO_TCP || p->proto == IPPROTO_UDP) && p->frag != 2;
}

// svc_frag6 is svc_frag for IPv6 (by the Fragment header's id).
// Keyed on the Fragment header's next header (as frag6_fill), which
// every fragment carries: only a translated TCP/UDP first fragment
// records one (xlate_write6).
static __always_inline void svc_frag6(struct svc6_scratch *ss, struct pkt6 *p, __u64 now)
{
	struct xlate6 *x = &ss->x;
	ip6_cp(ss->fk.saddr, p->saddr);
	ip6_cp(ss->fk.daddr, p->daddr);
	ss->fk.id = p->fragid;
	ss->fk.proto = p->frag_nxt;
	ss->fk.pad[0] = ss->fk.pad[1] = ss->fk.pad[2] = 0;
	struct svc_frag6_val *v = bpf_map_lookup_elem(&cnlab_svc_frag6, &ss->fk);
	if (!v || v->expires < now)
		return;
	x->kind = v->kind;
	x->hairpin = v->hairpin;
	x->snat = v->snat;
	ip6_cp(x->o_saddr, p->saddr);
	ip6_cp(x->o_daddr, p->daddr);
	ip6_cp(x->saddr, v->saddr);
	ip6_cp(x->daddr, v->daddr);
	ip6_cp(p->daddr, v->daddr);
}

// svc_icmp_unmasq6 is svc_icmp_unmasq for IPv6.
static __always_inline int svc_icmp_unmasq6(struct svc6_config *sc, struct svc6_scratch *ss, struct pkt6 *p, __u64 now)
{
	if (!p->icmp_err || (!ip6_eq(p->daddr, sc->masq) && !ip6_eq(p->daddr, sc->hairpin)) ||
	    !ip6_eq(p->daddr, p->in_saddr) || (p->in_proto != IPPROTO_TCP && p->in_proto != IPPROTO_UDP))
		return 0;
	nat6_fill(&ss->k, p->in_daddr, p->in_saddr, bpf_htons(p->in_dport), bpf_htons(p->in_sport), p->in_proto,
		  NAT_REV);
	struct nat6_val *v = nat6_get(&ss->k, now);
	if (!v || ip6_eq(v->daddr, p->in_saddr))
		return 0;
	ip6_cp(p->daddr, v->daddr);
	ip6_cp(p->in_saddr, v->daddr);
	p->in_sport = bpf_ntohs(v->dport);
	return 1;
}

// svc_from_ep6 is svc_from_ep for IPv6: p becomes the real tuple, ss->x
// what is written on the wire.
static __always_inline int svc_from_ep6(struct svc6_config *sc, struct svc6_scratch *ss, struct pkt6 *p, __u64 now)
{
	struct xlate6 *x = &ss->x;
	if (p->frag == 2) {
		svc_frag6(ss, p, now);
		return 0;
	}
	if (!translatable6(p))
		return 0;
	struct nat6_val *v = svc_reply6(ss, p, now);
	if (v) {
		x->hairpin = ip6_eq(v->daddr, p->saddr);
		x->snat = !ip6_eq(v->daddr, p->daddr);
		ip6_cp(p->daddr, v->daddr);
		p->dport = bpf_ntohs(v->dport);
		return 0;
	}
	if (!in_net6(sc, p->daddr) &&
	    !((sc->flags & SVC_NODEPORTS) && p->dport >= NODEPORT_MIN && p->dport <= NODEPORT_MAX))
		return 0;
	ip6_cp(ss->sk.vip, p->daddr);
	ss->sk.port = x->o_dport;
	ss->sk.proto = p->proto;
	ss->sk.pad = 0;
	struct svc_val *s = bpf_map_lookup_elem(&cnlab_svc6, &ss->sk);
	if (!s)
		return 0;
	nat6_fill(&ss->k, p->saddr, p->daddr, x->o_sport, x->o_dport, p->proto, NAT_FWD);
	v = nat6_get(&ss->k, now);
	int syn = p->proto == IPPROTO_TCP && (p->tcpflags & (TCP_SYN | TCP_ACK)) == TCP_SYN;
	if (v && !(syn && (v->ct.flags & (CT_CLOSING | CT_FIN)))) {
		__u64 was = v->ct.expires;
		ct_touch(&v->ct, p->proto, p->tcpflags, now);
		xl6_set(x, v);
		if (v->ct.expires != was) {
			nat6_fill(&ss->k2, v->daddr, v->saddr, v->dport, v->sport, p->proto, NAT_REV);
			struct nat6_val *r = bpf_map_lookup_elem(&cnlab_nat6, &ss->k2);
			if (r && r->ct.expires < v->ct.expires)
				r->ct.expires = v->ct.expires;
		}
	} else {
		if (!s->count)
			return s->flags & SVC_DROP ? R_DROP_SVC_NO_LOCAL : R_DROP_SVC_REJECT;
		if (pick6(&ss->ak, &ss->b, s, p->saddr, now, &x->slot) < 0) {
			s = bpf_map_lookup_elem(&cnlab_svc6, &ss->sk);
			if (!s || !s->count)
				return s && (s->flags & SVC_DROP) ? R_DROP_SVC_NO_LOCAL : R_DROP_SVC_REJECT;
			if (pick6(&ss->ak, &ss->b, s, p->saddr, now, &x->slot) < 0)
				return R_DROP_UNKNOWN;
		}
		x->fresh = 1;
		x->id = s->id;
		x->affinity = s->affinity;
		ip6_cp(x->daddr, ss->b.ip);
		x->dport = ss->b.port;
		x->sport = x->o_sport;
		ip6_cp(x->saddr, p->saddr);
		if (ip6_eq(ss->b.ip, p->saddr)) {
			ip6_cp(x->saddr, sc->hairpin);
		} else if (s->flags & SVC_MASQ) {
			ip6_cp(x->saddr, sc->masq);
			nat6_fill(&ss->k2, ss->b.ip, sc->masq, ss->b.port, x->o_sport, p->proto, NAT_REV);
			int free = 0;
#pragma unroll
			for (int i = 0; i < 8; i++) {
				struct nat6_val *o = bpf_map_lookup_elem(&cnlab_nat6, &ss->k2);
				if (!o || o->ct.expires < now) {
					free = 1;
					break;
				}
				ss->k2.dport = bpf_htons(32768 + bpf_get_prandom_u32() % 28232);
			}
			if (!free)
				return R_DROP_SVC_NO_PORT;
			x->sport = ss->k2.dport;
		}
	}
	x->kind = XL_FWD;
	x->hairpin = ip6_eq(x->daddr, p->saddr);
	x->snat = !ip6_eq(x->saddr, p->saddr);
	ip6_cp(p->daddr, x->daddr);
	p->dport = bpf_ntohs(x->dport);
	return 0;
}

// svc6_front looks up what a packet an endpoint sends is to the IPv6
// service proxy (svc_from_ep6, then an ICMPv6 error to a masquerade
// address): 0, or a reason to stop it. ss->x must be zero.
__attribute__((noinline)) int svc6_front(struct scratch6 *s, struct svc6_scratch *ss)
{
	struct svc6_config *sc = svc6_config();
	if (!s || !ss || !sc)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	int r = svc_from_ep6(sc, ss, &s->p, now);
	if (r)
		return r;
	if (!ss->x.kind && svc_icmp_unmasq6(sc, ss, &s->p, now))
		ss->x.snat = 1;
	return 0;
}

// svc_commit6 is svc_commit for IPv6.
static __always_inline void svc_commit6(struct svc6_scratch *ss, struct pkt6 *p, __u64 now)
{
	struct xlate6 *x = &ss->x;
	struct nat6_val *v = &ss->v;
	__builtin_memset(v, 0, sizeof(*v));
	ct_touch(&v->ct, p->proto, p->tcpflags, now);
	nat6_fill(&ss->k, x->daddr, x->saddr, x->dport, x->sport, p->proto, NAT_REV);
	ip6_cp(v->saddr, x->o_daddr);
	ip6_cp(v->daddr, x->o_saddr);
	v->sport = x->o_dport;
	v->dport = x->o_sport;
	bpf_map_update_elem(&cnlab_nat6, &ss->k, v, BPF_ANY);
	nat6_fill(&ss->k, x->o_saddr, x->o_daddr, x->o_sport, x->o_dport, p->proto, NAT_FWD);
	ip6_cp(v->saddr, x->saddr);
	ip6_cp(v->daddr, x->daddr);
	v->sport = x->sport;
	v->dport = x->dport;
	bpf_map_update_elem(&cnlab_nat6, &ss->k, v, BPF_ANY);
	if (x->affinity) {
		ip6_cp(ss->ak.client, x->o_saddr);
		ss->ak.id = x->id;
		__builtin_memset(&ss->av, 0, sizeof(ss->av));
		ss->av.last = now;
		ip6_cp(ss->av.b.ip, x->daddr);
		ss->av.b.port = x->dport;
		ss->av.slot = x->slot;
		bpf_map_update_elem(&cnlab_affinity6, &ss->ak, &ss->av, BPF_ANY);
	}
}

// set_addr6 rewrites an IPv6 address at off and, with csum, the checksum
// there (flags f: BPF_F_PSEUDO_HDR when its pseudo-header covers the
// address, as a TCP/UDP or ICMPv6 checksum the outer addresses).
static __always_inline int set_addr6(struct __sk_buff *skb, __u32 csum, __u32 off, __u32 *from, __u32 *to, __u64 f)
{
	if (ip6_eq(from, to))
		return 0;
	if (csum) {
		__s64 d = bpf_csum_diff(from, 16, to, 16, 0);
		if (bpf_l4_csum_replace(skb, csum, 0, d, f) < 0)
			return -1;
	}
	return bpf_skb_store_bytes(skb, off, to, 16, 0);
}

// xlate_write6 is xlate_write for IPv6 (no IP header checksum; the
// TCP/UDP checksum's pseudo-header covers both addresses).
static __always_inline int xlate_write6(struct __sk_buff *skb, struct svc6_scratch *ss, struct pkt6 *p, __u64 now)
{
	struct xlate6 *x = &ss->x;
	if (p->frag == 2)
		return set_addr6(skb, 0, ETH_HLEN + 8, x->o_saddr, x->saddr, 0) < 0 ||
		       set_addr6(skb, 0, ETH_HLEN + 24, x->o_daddr, x->daddr, 0) < 0 ? -1 : 0;
	if (p->frag == 1) {
		ip6_cp(ss->fk.saddr, x->o_saddr);
		ip6_cp(ss->fk.daddr, x->o_daddr);
		ss->fk.id = p->fragid;
		ss->fk.proto = p->frag_nxt; // not p->proto: svc_frag6
		ss->fk.pad[0] = ss->fk.pad[1] = ss->fk.pad[2] = 0;
		__builtin_memset(&ss->fv, 0, sizeof(ss->fv));
		ss->fv.expires = now + LIFE_FRAG;
		ip6_cp(ss->fv.saddr, x->saddr);
		ip6_cp(ss->fv.daddr, x->daddr);
		ss->fv.kind = x->kind;
		ss->fv.hairpin = x->hairpin;
		ss->fv.snat = x->snat;
		bpf_map_update_elem(&cnlab_svc_frag6, &ss->fk, &ss->fv, BPF_ANY);
	}
	__u32 l4 = p->l4;
	__u32 csum = l4 + (p->proto == IPPROTO_TCP ? 16 : 6);
	__u64 f = p->proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	if (set_addr6(skb, csum, ETH_HLEN + 8, x->o_saddr, x->saddr, f | BPF_F_PSEUDO_HDR) < 0 ||
	    set_addr6(skb, csum, ETH_HLEN + 24, x->o_daddr, x->daddr, f | BPF_F_PSEUDO_HDR) < 0 ||
	    set_port(skb, csum, l4, x->o_sport, x->sport, f) < 0 ||
	    set_port(skb, csum, l4 + 2, x->o_dport, x->dport, f) < 0)
		return -1;
	return 0;
}

// svc6_out writes a translated packet policy allowed: a new flow's
// entries first (svc_commit6), then its tuple. 0, or -1 (drop).
__attribute__((noinline)) int svc6_out(struct __sk_buff *skb, struct scratch6 *s, struct svc6_scratch *ss)
{
	if (!s || !ss)
		return -1;
	__u64 now = bpf_ktime_get_ns();
	if (ss->x.kind == XL_FWD && ss->x.fresh)
		svc_commit6(ss, &s->p, now);
	return xlate_write6(skb, ss, &s->p, now);
}

// svc6_in finds a reply of a translated flow delivered to its client
// (to_ep6, from_wire6): ss->x is set to write it.
__attribute__((noinline)) int svc6_in(struct scratch6 *s, struct svc6_scratch *ss)
{
	if (!s || !ss)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	struct pkt6 *p = &s->p;
	if (p->frag == 2)
		svc_frag6(ss, p, now);
	else if (translatable6(p))
		svc_reply6(ss, p, now);
	return 0;
}

// svc_icmp6 is svc_icmp for IPv6: an ICMPv6 error about a translated
// flow, on its way to the flow's client, quotes what the client sent (its
// address and port, the Service's address and port), goes to the client
// and, when the backend sent it, comes from the Service's address. The
// ICMPv6 checksum covers the quote and, through its pseudo-header, the
// outer addresses. The quote must follow the fixed header at once (no
// extension header), as parse6 reads it.
__attribute__((noinline)) int svc_icmp6(struct __sk_buff *skb, struct scratch6 *s, struct svc6_scratch *ss)
{
	if (!s || !ss)
		return -1;
	struct pkt6 *p = &s->p;
	if (!p->icmp_err || !ip6_eq(p->daddr, p->in_saddr) ||
	    (p->in_proto != IPPROTO_TCP && p->in_proto != IPPROTO_UDP))
		return 0;
	// Whole headers are read, changed in ss and written back, with one
	// checksum difference each: few values live across calls (the
	// verifier's stack of three frames).
	ss->in = p->l4 + 8;
	if (bpf_skb_load_bytes(skb, ss->in, &ss->q, sizeof(ss->q)) < 0 ||
	    bpf_skb_load_bytes(skb, ETH_HLEN + 8, &ss->o, sizeof(ss->o)) < 0)
		return -1;
	nat6_fill(&ss->k, ss->q.ip.daddr, ss->q.ip.saddr, ss->q.ports[1], ss->q.ports[0], p->in_proto, NAT_REV);
	struct nat6_val *v = nat6_get(&ss->k, bpf_ktime_get_ns());
	if (!v || !ip6_eq(v->daddr, p->daddr))
		return 0;
	// The flow as its client has it: client:cport to vip:vport; to the
	// client, and from the Service when the backend sent it.
	ss->nq = ss->q;
	ip6_cp(ss->nq.ip.saddr, v->daddr);
	ip6_cp(ss->nq.ip.daddr, v->saddr);
	ss->nq.ports[0] = v->dport;
	ss->nq.ports[1] = v->sport;
	ss->no = ss->o;
	ip6_cp(ss->no.d, v->daddr);
	if (ip6_eq(ss->o.s, ss->q.ip.daddr))
		ip6_cp(ss->no.s, v->saddr);
	__s64 d = bpf_csum_diff((__be32 *)&ss->q, sizeof(ss->q), (__be32 *)&ss->nq, sizeof(ss->nq), 0);
	if (bpf_l4_csum_replace(skb, ss->in - 6, 0, d, 0) < 0)
		return -1;
	d = bpf_csum_diff((__be32 *)&ss->o, sizeof(ss->o), (__be32 *)&ss->no, sizeof(ss->no), 0);
	if (bpf_l4_csum_replace(skb, ss->in - 6, 0, d, BPF_F_PSEUDO_HDR) < 0 ||
	    bpf_skb_store_bytes(skb, ss->in, &ss->nq, sizeof(ss->nq), 0) < 0 ||
	    bpf_skb_store_bytes(skb, ETH_HLEN + 8, &ss->no, sizeof(ss->no), 0) < 0)
		return -1;
	return 0;
}

// reject6 answers a new connection to an IPv6 Service without backends
// with an ICMPv6 port unreachable from the Service's address, sent
// straight back into the sender's namespace (reject for IPv6). The
// packet becomes the answer: it quotes its IPv6 header and 8 bytes.
__attribute__((noinline)) int reject6(struct __sk_buff *skb, struct endpoint *ep, struct svc6_scratch *ss)
{
	if (!ep || !ss)
		return TC_ACT_SHOT;
	__builtin_memset(&ss->r, 0, sizeof(ss->r));
	if (bpf_skb_load_bytes(skb, ETH_HLEN, ss->r.quote, sizeof(ss->r.quote)) < 0)
		return TC_ACT_SHOT;
	ss->r.ip.vtc = 0x60;
	ss->r.ip.plen = bpf_htons(8 + sizeof(ss->r.quote));
	ss->r.ip.nxt = IPPROTO_ICMP6;
	ss->r.ip.hlim = 64;
	__builtin_memcpy(ss->r.ip.saddr, &ss->r.quote[24], 16); // the Service
	__builtin_memcpy(ss->r.ip.daddr, &ss->r.quote[8], 16);  // the sender
	ss->r.icmp[0] = ICMP6_DST_UNREACH;
	ss->r.icmp[1] = 4; // port unreachable
	__u32 pseudo[2] = {bpf_htonl(8 + sizeof(ss->r.quote)), bpf_htonl(IPPROTO_ICMP6)};
	__s64 c = bpf_csum_diff(0, 0, ss->r.ip.saddr, 32, 0);
	c = bpf_csum_diff(0, 0, pseudo, sizeof(pseudo), c);
	c = bpf_csum_diff(0, 0, (__be32 *)ss->r.icmp, 8 + sizeof(ss->r.quote), c);
	__u16 ck = csum_fold(c);
	__builtin_memcpy(&ss->r.icmp[2], &ck, 2);
	if (bpf_skb_change_tail(skb, ETH_HLEN + sizeof(ss->r), 0) < 0 ||
	    bpf_skb_store_bytes(skb, ETH_HLEN, &ss->r, sizeof(ss->r), 0) < 0)
		return TC_ACT_SHOT;
	return deliver_as(skb, ep, ETH_P_IPV6);
}

// svc6_masq reports whether a is the host's IPv6 masquerade address (with
// node ports): legacy host routing answers a solicitation for it (arp).
static __always_inline int svc6_masq(const __u32 *a)
{
	struct svc6_config *sc = svc6_config();
	return sc && (sc->flags & SVC_NODEPORTS) && ip6_eq(a, sc->masq);
}

static __always_inline struct svc6_scratch *svc6_on(void)
{
	return svc6_config() ? svc6_scratch() : 0;
}

// svc6_write writes a packet of a translated flow that policy allowed
// (nothing for others): 0, or -1 (drop).
static __always_inline int svc6_write(struct __sk_buff *skb, struct scratch6 *s)
{
	struct svc6_scratch *ss = svc6_on();
	return ss && ss->x.kind ? svc6_out(skb, s, ss) : 0;
}

// svc6_local writes a packet of a translated flow (and an ICMPv6 error
// about one) that both sides allowed on the host-local path, before it is
// put into the destination's namespace (or handed to the L7 proxy): 0, or
// -1 (drop).
static __always_inline int svc6_local(struct __sk_buff *skb, struct scratch6 *s, int r)
{
	if (svc6_write(skb, s) < 0)
		return -1;
	struct svc6_scratch *ss = svc6_on();
	if (ss && r == R_ALLOW_RELATED && svc_icmp6(skb, s, ss) < 0)
		return -1;
	return 0;
}

// from_wire6 is cnlab_from_wire for IPv6: the answers of masqueraded
// IPv6 node-port connections (to the host's IPv6 masquerade address) are
// translated back (from_wire6), judged at the client's ingress and handed
// to it (from_wire6_out). It returns -1 for a packet that passes
// untouched, else the reason; the scratch holds the rest. Two functions,
// so that svc_icmp6 is called from a small frame.
__attribute__((noinline)) int from_wire6(struct __sk_buff *skb)
{
	struct svc6_config *sc = svc6_config();
	if (!sc || !(sc->flags & SVC_NODEPORTS))
		return -1;
	__u32 zero = 0;
	struct scratch6 *s = bpf_map_lookup_elem(&cnlab_scratch6, &zero);
	struct svc6_scratch *ss = svc6_scratch();
	if (!s || !ss || config(&s->cfg))
		return -1;
	struct pkt6 *p = &s->p;
	__builtin_memset(p, 0, sizeof(*p));
	if (parse6(skb, p) || !ip6_eq(p->daddr, sc->masq))
		return -1;
	__builtin_memset(&ss->x, 0, sizeof(ss->x));
	__u64 now = bpf_ktime_get_ns();
	if (p->frag == 2) {
		svc_frag6(ss, p, now);
	} else if (translatable6(p)) {
		if (svc_reply6(ss, p, now)) {
			ip6_cp(p->daddr, ss->x.daddr);
			p->dport = bpf_ntohs(ss->x.dport);
		}
	} else {
		svc_icmp_unmasq6(sc, ss, p, now);
	}
	if (ip6_eq(p->daddr, sc->masq))
		return -1;
	s->ipk.prefixlen = 128;
	ip6_cp(s->ipk.ip, p->daddr);
	struct endpoint *dst = bpf_map_lookup_elem(&cnlab_local6, &s->ipk);
	if (!dst)
		return -1;
	ss->peer_id = 0;
	ss->rule = NO_RULE;
	int r = side6(s, dst, DIR_INGRESS, now, &ss->peer_id, &ss->rule, skb->len);
	if (!is_drop(r) && ss->x.kind && xlate_write6(skb, ss, p, now) < 0)
		r = R_DROP_MALFORMED;
	return r;
}

__attribute__((noinline)) int from_wire6_out(struct __sk_buff *skb, int r)
{
	__u32 zero = 0;
	struct scratch6 *s = bpf_map_lookup_elem(&cnlab_scratch6, &zero);
	struct svc6_scratch *ss = svc6_scratch();
	if (!s || !ss)
		return TC_ACT_SHOT;
	// The destination from_wire6 found, from the packet's (side6 may
	// have left the source's address in s->ipk, looking up its identity).
	s->ipk.prefixlen = 128;
	ip6_cp(s->ipk.ip, s->p.daddr);
	struct endpoint *dst = bpf_map_lookup_elem(&cnlab_local6, &s->ipk);
	if (!dst)
		return TC_ACT_SHOT;
	if (r == R_ALLOW_RELATED && svc_icmp6(skb, s, ss) < 0)
		r = R_DROP_MALFORMED;
	if (!ss->x.kind && r != R_ALLOW_RELATED && !is_drop(r))
		r = R_DROP_UNKNOWN; // an error policy let in that no flow here is about
	if (finish6(s, skb, dst->index, DIR_INGRESS, r, ss->peer_id, dst->identity, ss->rule) != TC_ACT_OK)
		return TC_ACT_SHOT;
	return deliver_as(skb, dst, ETH_P_IPV6);
}

// is_ndp: neighbour and router discovery and multicast listener
// messages, which policy does not judge (as ARP): only at the hop limit
// they are sent with on their link (255; MLD's 1), which a packet a host
// routed no longer has, so none carries data past the policy from or to
// another host.
static __always_inline int is_ndp(struct pkt6 *p)
{
	if (p->proto != IPPROTO_ICMP6 || p->frag)
		return 0;
	__u8 t = p->type;
	if (t >= ND_ROUTER_SOLICIT && t <= ND_REDIRECT)
		return p->hlim == 255;
	return (t >= ICMP6_MLD_QUERY && t <= ICMP6_MLD_DONE) || t == ICMP6_MLD2_REPORT ? p->hlim == 1 : 0;
}

// on_link: an endpoint's neighbour discovery goes to a link-scope
// multicast group (ff02::/16), a link-local address (fe80::/10: the host
// solicits from its bridge's) or an address of its own /64 (its host's
// pod prefix, which no other host's shares: the gateway, the host's
// endpoints). The hop limit alone does not tell at the sender, where the
// host has not routed the packet yet: elsewhere it meets the egress
// policy.
static __always_inline int on_link(struct pkt6 *p, struct endpoint *ep)
{
	__u32 w = bpf_ntohl(p->daddr[0]);
	if ((w >> 16) == 0xff02 || (w & 0xffc00000) == 0xfe800000)
		return 1;
	return p->daddr[0] == ep->ip6[0] && p->daddr[1] == ep->ip6[1];
}

// ndp_answer answers an endpoint's neighbour solicitation with the
// host-side MAC (bpf host routing: every destination is routed through
// the host, as for ARP): a solicited neighbour advertisement for the
// target, with its target link-layer address, sent back out of the
// host-side veth. The packet becomes the answer.
__attribute__((noinline)) int ndp_answer(struct __sk_buff *skb, struct endpoint *ep)
{
	__u32 zero = 0;
	struct scratch6 *s = bpf_map_lookup_elem(&cnlab_scratch6, &zero);
	if (!ep || !s)
		return TC_ACT_SHOT;
	__builtin_memset(&s->na, 0, sizeof(s->na));
	typeof(s->na) *rp = &s->na;
#define r (*rp)
	if (bpf_skb_load_bytes(skb, ETH_HLEN + sizeof(struct ip6h) + 8, r.target, 16) < 0 ||
	    bpf_skb_load_bytes(skb, ETH_HLEN + 8, r.ip.daddr, 16) < 0) // the solicitation's source
		return TC_ACT_SHOT;
	r.ip.vtc = 0x60;
	r.ip.plen = bpf_htons(32);
	r.ip.nxt = IPPROTO_ICMP6;
	r.ip.hlim = 255;
	ip6_cp(r.ip.saddr, r.target);
	r.icmp[0] = ND_NEIGHBOR_ADVERT;
	r.icmp[4] = 0xe0; // router, solicited, override
	r.opt[0] = 2;     // target link-layer address
	r.opt[1] = 1;
	__builtin_memcpy(&r.opt[2], ep->lxc_mac, 6);
	__u32 pseudo[2] = {bpf_htonl(32), bpf_htonl(IPPROTO_ICMP6)};
	__s64 c = bpf_csum_diff(0, 0, r.ip.saddr, 32, 0);
	c = bpf_csum_diff(0, 0, pseudo, sizeof(pseudo), c);
	c = bpf_csum_diff(0, 0, (__be32 *)r.icmp, 32, c);
	__u16 ck = csum_fold(c);
	__builtin_memcpy(&r.icmp[2], &ck, 2);
	struct ethhdr eth;
	__builtin_memcpy(eth.h_dest, ep->mac, 6);
	__builtin_memcpy(eth.h_source, ep->lxc_mac, 6);
	eth.h_proto = bpf_htons(ETH_P_IPV6);
	if (bpf_skb_change_tail(skb, ETH_HLEN + sizeof(r), 0) < 0 || bpf_skb_store_bytes(skb, 0, &eth, sizeof(eth), 0) < 0 ||
	    bpf_skb_store_bytes(skb, ETH_HLEN, &r, sizeof(r), 0) < 0)
		return TC_ACT_SHOT;
#undef r
	return bpf_redirect(skb->ifindex, 0);
}

// ndp checks an endpoint's neighbour discovery as arp checks its ARP:
// the source is the endpoint's address (or :: for duplicate address
// detection and router or multicast listener messages), an advertisement
// names the endpoint's own address as its target, and a link-layer
// address option the endpoint's MAC. Router advertisements and redirects
// are a router's: an endpoint is none (dropped as spoofed). With bpf
// host routing a solicitation is answered by the program (ndp_answer),
// but for the endpoint's own address (duplicate address detection:
// dropped, so the address stays the endpoint's); with legacy host
// routing the checked message goes on to the bridge.
static __always_inline int ndp(struct __sk_buff *skb, struct endpoint *ep, struct pkt6 *p)
{
	__u8 t = p->type;
	int from_none = ip6_zero(p->saddr);
	int reason = R_ARP_PASSED;
	if (!from_none && !ip6_eq(p->saddr, ep->ip6))
		reason = R_DROP_SPOOF;
	else if (t == ND_ROUTER_ADVERT || t == ND_REDIRECT)
		reason = R_DROP_SPOOF;
	else if (t == ND_NEIGHBOR_SOLICIT || t == ND_NEIGHBOR_ADVERT) {
		struct {
			__u32 target[4];
			__u8 opt[8];
		} m;
		__u32 tl = skb->len - p->l4 >= 32 ? 24 : 16; // the first option, if any
		if (p->l4 != ETH_HLEN + sizeof(struct ip6h) || // no extension header before NDP
		    bpf_skb_load_bytes(skb, p->l4 + 8, &m, sizeof(m.target)) < 0 ||
		    (tl == 24 && bpf_skb_load_bytes(skb, p->l4 + 24, m.opt, sizeof(m.opt)) < 0))
			reason = R_DROP_MALFORMED;
		else if (tl == 24 && (m.opt[0] == 1 || m.opt[0] == 2) && (from_none || !mac_eq(&m.opt[2], ep->mac)))
			reason = R_DROP_SPOOF; // a link-layer address not the endpoint's (none from ::)
		else if (t == ND_NEIGHBOR_ADVERT && (from_none || !ip6_eq(m.target, ep->ip6)))
			reason = R_DROP_SPOOF; // advertising another's address
		else if (t == ND_NEIGHBOR_SOLICIT && (host_routing_bpf || svc6_masq(m.target))) {
			if (from_none || ip6_eq(m.target, ep->ip6))
				reason = R_DROP_L3; // duplicate address detection: no one else has it
			else
				reason = R_ARP_REPLIED;
		}
	}
	count(ep->index, DIR_EGRESS, reason, skb->len);
	if (reason == R_ARP_REPLIED)
		return ndp_answer(skb, ep);
	return is_drop(reason) ? TC_ACT_SHOT : TC_ACT_OK;
}

// ---- The L7 proxy over IPv6 ----
//
// As over IPv4 (to_proxy, legacy_l7, cnlab_to_ep's MARK_FROM_PROXY,
// l7_from_wire): a connection to an L7 port is assigned to the proxy's
// IPv6 socket and marked MARK_TO_PROXY (ip -6 rule fwmark ... lookup
// L7_TABLE; local ::/0 dev lo in L7_TABLE); what the proxy sends carries
// MARK_FROM_PROXY. The socket tuple is in the scratch: the stack of the
// IPv6 path's chain of calls has no room for it.

// to_proxy6 is to_proxy for the IPv6 packet in s.
static __always_inline int to_proxy6(struct __sk_buff *skb, struct scratch6 *s)
{
	struct pkt6 *p = &s->p;
	struct bpf_sock_tuple *t = &s->tuple;
	__builtin_memset(t, 0, sizeof(*t));
	ip6_cp(t->ipv6.saddr, p->saddr);
	ip6_cp(t->ipv6.daddr, p->daddr);
	t->ipv6.sport = bpf_htons(p->sport);
	t->ipv6.dport = bpf_htons(p->dport);
	struct bpf_sock *sk = bpf_skc_lookup_tcp(skb, t, sizeof(t->ipv6), BPF_F_CURRENT_NETNS, 0);
	if (sk && sk->state == TCP_TIME_WAIT) {
		bpf_sk_release(sk);
		goto mark;
	}
	if (sk && sk->state == TCP_LISTEN) {
		bpf_sk_release(sk);
		sk = 0;
	}
	if (!sk) {
		__builtin_memset(t, 0, sizeof(*t));
		t->ipv6.dport = bpf_htons(L7_PROXY_PORT);
		sk = bpf_skc_lookup_tcp(skb, t, sizeof(t->ipv6), BPF_F_CURRENT_NETNS, 0);
		if (!sk)
			return -1;
		if (sk->state != TCP_LISTEN) {
			bpf_sk_release(sk);
			return -1;
		}
	}
	long err = bpf_sk_assign(skb, sk, 0);
	bpf_sk_release(sk);
	if (err)
		return -1;
mark:
	skb->mark = MARK_TO_PROXY;
	bpf_skb_change_type(skb, 0); // PACKET_HOST
	return TC_ACT_OK;
}

// proxy6 hands a packet of a host-local flow for the L7 proxy to it
// (from_ep_local's hand-over): with legacy host routing, as received by
// the bridge device, addressed to it.
static __always_inline int proxy6(struct __sk_buff *skb, struct scratch6 *s, struct endpoint *src,
				  struct endpoint *dst)
{
	if (host_routing_bpf) {
		if (to_proxy6(skb, s) == TC_ACT_OK)
			return TC_ACT_OK;
	} else {
		if (bpf_skb_store_bytes(skb, 0, s->cfg.bridge_mac, 6, 0) < 0)
			return TC_ACT_SHOT;
		if (to_proxy6(skb, s) == TC_ACT_OK)
			return bpf_redirect(s->cfg.bridge_ifindex, BPF_F_INGRESS);
	}
	return finish6(s, skb, dst->index, DIR_INGRESS, R_DROP_NO_PROXY, src->identity, dst->identity, NO_RULE);
}

// legacy_l7_6 is legacy_l7 for IPv6: with legacy host routing, a
// connection from an endpoint to an L7 port of an endpoint of this host
// is taken as a host-local one. It returns the destination, or 0.
static __always_inline struct endpoint *legacy_l7_6(struct scratch6 *s, __u64 now)
{
	struct pkt6 *p = &s->p;
	s->ipk.prefixlen = 128;
	ip6_cp(s->ipk.ip, p->daddr);
	struct endpoint *dst = bpf_map_lookup_elem(&cnlab_local6, &s->ipk);
	if (!dst)
		return 0;
	if ((p->tcpflags & (TCP_SYN | TCP_ACK)) != TCP_SYN) {
		ct6_fill(&s->ct, p->saddr, p->daddr, p->sport, p->dport, p->proto, 0, 0);
		struct ct_val *v = ct6_get(&s->ct, now);
		return v && (v->flags & CT_PROXY) ? dst : 0;
	}
	__u32 rule;
	__u8 proxied = 0;
	verdict_of(&s->cfg, dst->index, DIR_INGRESS, peer_of6(s->cfg.gen, p->saddr, &s->ipk).key, p->proto,
		   p->tcpflags, p->dport, &proxied, &rule, RC_NONE, 0);
	return proxied ? dst : 0;
}

// from_proxy6 is cnlab_to_ep's MARK_FROM_PROXY for IPv6: the proxy's
// answers to a client it was handed, and its connections to the server
// (from the host's address), which get an entry for the server's answers.
static __always_inline int from_proxy6(struct __sk_buff *skb, struct scratch6 *s, struct endpoint *dst, __u64 now)
{
	struct pkt6 *p = &s->p;
	if (p->frag != 2) {
		s->ipk.prefixlen = 128;
		ip6_cp(s->ipk.ip, p->saddr);
		if (!bpf_map_lookup_elem(&cnlab_local6, &s->ipk) &&
		    !ct_lookup6(s->cfg.gen, s, 1 + DIR_INGRESS, 1 + DIR_EGRESS, dst->index, now))
			ct_create6(s, 1 + DIR_INGRESS, dst->index, now);
	}
	return finish6(s, skb, dst->index, DIR_INGRESS, R_ALLOW_FROM_PROXY, 0, dst->identity, NO_RULE);
}

// l7_from_wire6 is l7_from_wire for IPv6 (cnlab_from_wire): a connection
// from another host to an L7 port of an endpoint of this host goes to
// the proxy; everything else passes untouched.
__attribute__((noinline)) int l7_from_wire6(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct scratch6 *s = bpf_map_lookup_elem(&cnlab_scratch6, &zero);
	if (!s || config(&s->cfg) || !(s->cfg.flags & FLAG_L7))
		return TC_ACT_OK;
	struct pkt6 *p = &s->p;
	__builtin_memset(p, 0, sizeof(*p));
	if (parse6(skb, p) || p->proto != IPPROTO_TCP || p->frag)
		return TC_ACT_OK;
	s->ipk.prefixlen = 128;
	ip6_cp(s->ipk.ip, p->daddr);
	struct endpoint *dst = bpf_map_lookup_elem(&cnlab_local6, &s->ipk);
	if (!dst)
		return TC_ACT_OK;
	struct config *cfg = &s->cfg;
	__u64 now = bpf_ktime_get_ns();
	__u8 scope = 1 + DIR_INGRESS;
	__u32 rule = NO_RULE, peer_id = 0;
	int r;
	if ((p->tcpflags & (TCP_SYN | TCP_ACK)) != TCP_SYN) {
		ct6_fill(&s->ct, p->saddr, p->daddr, p->sport, p->dport, p->proto, scope, dst->index);
		struct ct_val *v = ct6_get(&s->ct, now);
		if (!v || !(v->flags & CT_PROXY))
			return TC_ACT_OK;
		ct_touch(v, p->proto, p->tcpflags, now);
		p->proxied = 1;
		r = R_ALLOW_CT;
	} else {
		struct peer peer = peer_of6(cfg->gen, p->saddr, &s->ipk);
		peer_id = peer.identity;
		// A look ahead, as l7_from_wire's.
		verdict_of(cfg, dst->index, DIR_INGRESS, peer.key, p->proto, p->tcpflags, p->dport, &p->proxied, &rule,
			   RC_NONE, 0);
		if (!p->proxied)
			return TC_ACT_OK;
		if (rule != NO_RULE) {
			struct rule_key k = {.rule = rule, .slot = cfg->gen * cfg->max_ep + dst->index,
					     .dir = DIR_INGRESS, .verdict = RV_ALLOW};
			rule_count(&k, skb->len);
		}
		ct_create6(s, scope, dst->index, now);
		r = R_ALLOW_PROXY;
	}
	finish6(s, skb, dst->index, DIR_INGRESS, r, peer_id, dst->identity, rule);
	if (to_proxy6(skb, s) != TC_ACT_OK)
		return finish6(s, skb, dst->index, DIR_INGRESS, R_DROP_NO_PROXY, peer_id, dst->identity, NO_RULE);
	return TC_ACT_OK;
}

// from_ep6 is cnlab_from_ep for an IPv6 packet: source checks, then the
// sender's egress for a remote destination, or (bpf host routing) both
// sides for an endpoint of this host, delivered with bpf_redirect_peer.
__attribute__((noinline)) int from_ep6(struct __sk_buff *skb, struct endpoint *src)
{
	__u32 zero = 0;
	struct scratch6 *s = bpf_map_lookup_elem(&cnlab_scratch6, &zero);
	if (!src || !s || config(&s->cfg))
		return TC_ACT_SHOT;
	struct config *cfg = &s->cfg;
	struct pkt6 *p = &s->p;
	__builtin_memset(p, 0, sizeof(*p));
	__u32 rule = NO_RULE, peer_id = 0;
	int r = ip6_zero(src->ip6) ? R_DROP_IPV6 : parse6(skb, p);
	if (r)
		return finish6(s, skb, src->index, DIR_EGRESS, r, src->identity, 0, NO_RULE);
	__u8 mac[8];
	if (bpf_skb_load_bytes(skb, 6, mac, 6) < 0 || !mac_eq(mac, src->mac))
		return finish6(s, skb, src->index, DIR_EGRESS, R_DROP_SPOOF, src->identity, 0, NO_RULE);
	if (is_ndp(p) && on_link(p, src))
		return ndp(skb, src, p);
	if (!ip6_eq(p->saddr, src->ip6))
		return finish6(s, skb, src->index, DIR_EGRESS, R_DROP_SPOOF, src->identity, 0, NO_RULE);
	__u64 now = bpf_ktime_get_ns();
	// The service proxy's scratch is looked up again where it is used
	// (svc6_on), rather than kept: the verifier's stack of three frames.
	struct svc6_scratch *ss = svc6_on();
	if (ss) {
		__builtin_memset(&ss->x, 0, sizeof(ss->x));
		r = svc6_front(s, ss);
		if (r == R_DROP_SVC_REJECT) {
			count(src->index, DIR_EGRESS, r, skb->len);
			emit6(s, skb->len, src->index, DIR_EGRESS, r, src->identity, 0, NO_RULE);
			return reject6(skb, src, svc6_scratch());
		}
		if (r)
			return finish6(s, skb, src->index, DIR_EGRESS, r, src->identity, 0, NO_RULE);
	}
	struct endpoint *dst = 0;
	// As the IPv4 front: a masqueraded flow goes straight to a local
	// destination in either host routing; with legacy host routing a
	// reply bridged to a client of this host is translated by its to_ep6.
	s->ipk.prefixlen = 128;
	ip6_cp(s->ipk.ip, p->daddr);
	if (host_routing_bpf || (ss && (ss->x.hairpin || ss->x.snat)))
		dst = bpf_map_lookup_elem(&cnlab_local6, &s->ipk);
	else if (ss && ss->x.kind == XL_REV && bpf_map_lookup_elem(&cnlab_local6, &s->ipk))
		ss->x.kind = 0;
	if (!dst && !host_routing_bpf && (cfg->flags & FLAG_L7) && p->proto == IPPROTO_TCP && !p->frag &&
	    !(ss && ss->x.kind == XL_REV))
		dst = legacy_l7_6(s, now);
	if (!dst) {
		r = side6(s, src, DIR_EGRESS, now, &peer_id, &rule, skb->len);
		if (!is_drop(r) && svc6_write(skb, s) < 0)
			r = R_DROP_MALFORMED;
		return finish6(s, skb, src->index, DIR_EGRESS, r, src->identity, peer_id, rule);
	}
	// Host-local: both sides here, one conntrack entry (scope 0).
	if (p->frag == 2) {
		r = fragment6(s, 0, 0, now);
	} else {
		r = ct_lookup6(cfg->gen, s, 0, 0, 0, now);
		if (!r) {
			__u32 gen = cfg->gen;
			__u32 dkey = peer_of6(gen, p->daddr, &s->ipk).key;
			r = verdict_of(cfg, src->index, DIR_EGRESS, dkey, p->proto, p->tcpflags, p->dport, &p->proxied,
				       &rule, RC_ALL, skb->len);
			if (is_drop(r))
				return finish6(s, skb, src->index, DIR_EGRESS, r, src->identity, dst->identity, rule);
			count(src->index, DIR_EGRESS, r, skb->len);
			__u32 skey = peer_of6(gen, p->saddr, &s->ipk).key;
			r = verdict_of(cfg, dst->index, DIR_INGRESS, skey, p->proto, p->tcpflags, p->dport, &p->proxied,
				       &rule, RC_ALL, skb->len);
			if (is_drop(r))
				return finish6(s, skb, dst->index, DIR_INGRESS, r, src->identity, dst->identity, rule);
			ct_create6(s, 0, 0, now);
			if (p->frag == 1)
				first_fragment6(s, 0, 0, now);
			if (p->proxied)
				r = R_ALLOW_PROXY;
			finish6(s, skb, dst->index, DIR_INGRESS, r, src->identity, dst->identity, rule);
			if (svc6_local(skb, s, r) < 0)
				return TC_ACT_SHOT;
			if (p->proxied)
				return proxy6(skb, s, src, dst);
			return deliver_as(skb, dst, ETH_P_IPV6);
		}
		if (p->frag == 1)
			first_fragment6(s, 0, 0, now);
	}
	if (is_drop(r))
		return finish6(s, skb, src->index, DIR_EGRESS, r, src->identity, dst->identity, rule);
	count(src->index, DIR_EGRESS, r, skb->len);
	finish6(s, skb, dst->index, DIR_INGRESS, r, src->identity, dst->identity, rule);
	if (svc6_local(skb, s, r) < 0)
		return TC_ACT_SHOT;
	if (p->proxied)
		return proxy6(skb, s, src, dst);
	return deliver_as(skb, dst, ETH_P_IPV6);
}

// to_ep6 is cnlab_to_ep for an IPv6 packet: neighbour discovery passes
// (the sender's program checked it, or the host sent it), anything else
// must be for the endpoint's own address and is judged at its ingress.
__attribute__((noinline)) int to_ep6(struct __sk_buff *skb, struct endpoint *dst)
{
	__u32 zero = 0;
	struct scratch6 *s = bpf_map_lookup_elem(&cnlab_scratch6, &zero);
	if (!dst || !s || config(&s->cfg))
		return TC_ACT_SHOT;
	struct pkt6 *p = &s->p;
	__builtin_memset(p, 0, sizeof(*p));
	__u32 rule = NO_RULE, peer_id = 0;
	int r = ip6_zero(dst->ip6) ? R_DROP_IPV6 : parse6(skb, p);
	if (r)
		return finish6(s, skb, dst->index, DIR_INGRESS, r, 0, dst->identity, rule);
	if (is_ndp(p)) {
		count(dst->index, DIR_INGRESS, R_ARP_PASSED, skb->len);
		return TC_ACT_OK;
	}
	if (!ip6_eq(p->daddr, dst->ip6))
		return finish6(s, skb, dst->index, DIR_INGRESS, R_DROP_UNKNOWN, 0, dst->identity, rule);
	__u64 now = bpf_ktime_get_ns();
	struct svc6_scratch *ss = svc6_on();
	if (ss) {
		__builtin_memset(&ss->x, 0, sizeof(ss->x));
		svc6_in(s, ss);
	}
	if ((skb->mark & MARK_MASK) == MARK_FROM_PROXY) {
		// As cnlab_to_ep: the proxy's answer to a client is translated
		// back like any reply of the flow.
		if (svc6_write(skb, s) < 0)
			return finish6(s, skb, dst->index, DIR_INGRESS, R_DROP_MALFORMED, 0, dst->identity, rule);
		return from_proxy6(skb, s, dst, now);
	}
	r = side6(s, dst, DIR_INGRESS, now, &peer_id, &rule, skb->len);
	if (!is_drop(r) && svc6_write(skb, s) < 0)
		r = R_DROP_MALFORMED;
	ss = svc6_on();
	if (r == R_ALLOW_RELATED && ss && svc_icmp6(skb, s, ss) < 0)
		r = R_DROP_MALFORMED;
	return finish6(s, skb, dst->index, DIR_INGRESS, r, peer_id, dst->identity, rule);
}

// ---- cnlab_from_ep ----
//
// cnlab_from_ep is a front and two paths. The front sorts out ARP and
// other L3 protocols, parses, checks the source and looks up a Service's
// translation; it then hands the packet to the path its destination
// takes: from_ep_remote (another host, the world, or with legacy host
// routing the bridge) or from_ep_local (an endpoint of this host, both
// sides judged here). The paths are global functions: the verifier checks
// each once, on its own, instead of once for every state the front can
// reach them in, so each can grow (observability, policy tiers, IPv6)
// without multiplying the front's states (docs/ebpf.md, "Programs").

// What the front found out about a packet, for its path.
struct from_ep {
	struct config cfg; // this run's snapshot of the config
	struct pkt p;
	struct xlate x;
	__u64 now;
	__u8 svc; // the host has Services (svc_config())
	__u8 pad[7];
};

// from_ep_remote enforces the sending endpoint's egress for a packet to a
// remote destination (or with legacy host routing, the bridge), which the
// host's stack or bridge then carries.
__attribute__((noinline)) int from_ep_remote(struct __sk_buff *skb, struct from_ep *f, struct endpoint *src)
{
	if (!f || !src)
		return TC_ACT_SHOT;
	struct pkt *p = &f->p;
	struct xlate *x = &f->x;
	__u32 rule = NO_RULE, peer_id = 0; // 0: not looked up (conntrack paths)
	int r = side(&f->cfg, src, DIR_EGRESS, p, f->now, &peer_id, &rule, skb->len);
	__u16 mtu;
	if (!is_drop(r) && x->kind == XL_FWD && x->snat && !p->frag && too_big(skb, x, &mtu)) {
		// Answered here, as the host's stack would answer it, from
		// the address the client sent it to, quoting what it sent.
		finish(&f->cfg, skb, p, src->index, DIR_EGRESS, R_DROP_SVC_TOO_BIG, src->identity, peer_id, rule);
		return icmp_back(skb, src, p, x->o_daddr, 4, mtu);
	}
	if (!is_drop(r) && x->kind) {
		if (x->fresh)
			svc_commit(x, p, f->now);
		if (xlate_write(skb, p, x, f->now) < 0)
			r = R_DROP_MALFORMED;
	}
	return finish(&f->cfg, skb, p, src->index, DIR_EGRESS, r, src->identity, peer_id, rule);
}

// from_ep_local judges a packet to an endpoint of this host on both
// sides (the source's egress, the destination's ingress) and puts it
// straight into the destination's namespace, or hands it to the L7 proxy.
__attribute__((noinline)) int from_ep_local(struct __sk_buff *skb, struct from_ep *f, struct endpoint *src,
					    struct endpoint *dst)
{
	if (!f || !src || !dst)
		return TC_ACT_SHOT;
	struct config *cfg = &f->cfg;
	struct pkt *p = &f->p;
	struct xlate *x = &f->x;
	__u64 now = f->now;
	__u32 rule = NO_RULE;
	int r;
	if (p->frag == 2) {
		r = fragment(p, 0, 0, now);
	} else {
		r = ct_lookup(cfg->gen, p, 0, 0, 0, now);
		if (!r) {
			__u32 gen = cfg->gen;
			struct peer sp = peer_of(gen, p->saddr), dp = peer_of(gen, p->daddr);
			r = verdict(cfg, src->index, DIR_EGRESS, dp.key, p, &rule, RC_ALL, skb->len);
			if (is_drop(r))
				return finish(cfg, skb, p, src->index, DIR_EGRESS, r, src->identity, dst->identity, rule);
			count(src->index, DIR_EGRESS, r, skb->len);
			r = verdict(cfg, dst->index, DIR_INGRESS, sp.key, p, &rule, RC_ALL, skb->len);
			if (is_drop(r))
				return finish(cfg, skb, p, dst->index, DIR_INGRESS, r, src->identity, dst->identity, rule);
			ct_create(p, 0, 0, now);
			if (p->frag == 1)
				first_fragment(p, 0, 0, now);
			if (p->proxied)
				r = R_ALLOW_PROXY;
			finish(cfg, skb, p, dst->index, DIR_INGRESS, r, src->identity, dst->identity, rule);
			goto redirect;
		}
		// Passed by conntrack: the rest of a fragmented datagram follows.
		if (p->frag == 1)
			first_fragment(p, 0, 0, now);
	}
	if (is_drop(r))
		return finish(cfg, skb, p, src->index, DIR_EGRESS, r, src->identity, dst->identity, rule);
	count(src->index, DIR_EGRESS, r, skb->len);
	finish(cfg, skb, p, dst->index, DIR_INGRESS, r, src->identity, dst->identity, rule);
redirect:
	if (x->kind) {
		if (x->fresh)
			svc_commit(x, p, now);
		if (xlate_write(skb, p, x, now) < 0)
			return TC_ACT_SHOT;
	}
	if (r == R_ALLOW_RELATED && f->svc && svc_icmp(skb, p, now) < 0)
		return TC_ACT_SHOT;
	if (p->proxied) {
		if (host_routing_bpf) {
			if (to_proxy(skb, p) == TC_ACT_OK)
				return TC_ACT_OK;
		} else {
			// Legacy host routing: the veth is a port of the bridge,
			// which would take the packet (and br_netfilter drop its
			// socket): it enters the host's stack as received by the
			// bridge device itself, addressed to it.
			if (bpf_skb_store_bytes(skb, 0, cfg->bridge_mac, 6, 0) < 0)
				return TC_ACT_SHOT;
			if (to_proxy(skb, p) == TC_ACT_OK)
				return bpf_redirect(cfg->bridge_ifindex, BPF_F_INGRESS);
		}
		return proxy_drop(cfg, skb, p, dst, src->identity);
	}
	return deliver(skb, dst);
}

SEC("tc")
int cnlab_from_ep(struct __sk_buff *skb)
{
	struct from_ep f = {};
	struct config *cfg = &f.cfg;
	struct pkt *p = &f.p;
	struct xlate *x = &f.x;
	__u32 ifindex = skb->ifindex;
	struct endpoint *src = bpf_map_lookup_elem(&cnlab_lxc, &ifindex);
	if (config(cfg) || !src)
		return TC_ACT_SHOT; // never attached without its entry
	int act = l3(skb, src, cfg, DIR_EGRESS);
	if (act >= 0)
		return act;
	int r = parse(skb, p);
	if (r)
		return finish(cfg, skb, p, src->index, DIR_EGRESS, r, src->identity, 0, NO_RULE);
	// The source address must be the endpoint's, and so must the source
	// MAC: on the bridge of legacy host routing a forged one would move
	// another endpoint's MAC to this port in the forwarding table.
	__u8 mac[8];
	if (p->saddr != src->ip || bpf_skb_load_bytes(skb, 6, mac, 6) < 0 || !mac_eq(mac, src->mac))
		return finish(cfg, skb, p, src->index, DIR_EGRESS, R_DROP_SPOOF, src->identity, 0, NO_RULE);
	__u64 now = bpf_ktime_get_ns();
	f.now = now;
	struct svc_config *sc = svc_config();
	if (sc) {
		f.svc = 1;
		r = svc_from_ep(sc, p, x, now);
		if (r == R_DROP_SVC_REJECT) {
			count(src->index, DIR_EGRESS, r, skb->len);
			emit(cfg, skb->len, p, AT_TC, src->index, DIR_EGRESS, r, src->identity, 0, NO_RULE);
			return reject(skb, src, p);
		}
		if (r)
			return finish(cfg, skb, p, src->index, DIR_EGRESS, r, src->identity, 0, NO_RULE);
		// An ICMP error to a masquerade address (a hairpin's, or a node
		// port's backend on this host answering) about its flow goes
		// to the flow's client, here: svc_icmp writes it so.
		if (!x->kind && svc_icmp_unmasq(sc, p, now))
			x->snat = 1;
	}
	struct endpoint *dst = 0;
	// A masqueraded flow (its source on the wire is not the client's)
	// goes straight to a local destination in either host routing, both
	// sides judged here on the real tuple: the host's stack would take a
	// reply for its own, and its policy entries are the host-local path's.
	if (host_routing_bpf || x->hairpin || x->snat)
		dst = bpf_map_lookup_elem(&cnlab_local, &p->daddr);
	else if (x->kind == XL_REV && bpf_map_lookup_elem(&cnlab_local, &p->daddr))
		// Legacy host routing, a reply bridged to a client of this
		// host: its cnlab_to_ep translates it, where the flow's policy
		// entries expect the real tuple.
		x->kind = 0;
	if (!dst && !host_routing_bpf && (cfg->flags & FLAG_L7) && p->proto == IPPROTO_TCP && !p->frag && x->kind != XL_REV)
		dst = legacy_l7(cfg, src, p, now);
	if (!dst)
		return from_ep_remote(skb, &f, src);
	return from_ep_local(skb, &f, src, dst);
}

SEC("tc")
int cnlab_to_ep(struct __sk_buff *skb)
{
	struct config snap, *cfg = &snap;
	__u32 ifindex = skb->ifindex;
	struct endpoint *dst = bpf_map_lookup_elem(&cnlab_lxc, &ifindex);
	if (config(cfg) || !dst)
		return TC_ACT_SHOT;
	int act = l3(skb, dst, cfg, DIR_INGRESS);
	if (act >= 0)
		return act;
	struct pkt p = {};
	__u32 rule = NO_RULE, peer_id = 0; // 0: not looked up (conntrack paths)
	int r = parse(skb, &p);
	if (r)
		return finish(cfg, skb, &p, dst->index, DIR_INGRESS, r, 0, dst->identity, rule);
	// Only the endpoint's own address: with legacy host routing the bridge
	// delivers by MAC, so a frame sent to this endpoint's MAC could carry
	// another endpoint's address and be judged against the wrong policy.
	if (p.daddr != dst->ip)
		return finish(cfg, skb, &p, dst->index, DIR_INGRESS, R_DROP_UNKNOWN, 0, dst->identity, rule);
	__u64 now = bpf_ktime_get_ns();
	struct xlate x = {};
	int svc = svc_config() != 0;
	if (svc)
		svc_to_ep(&p, &x, now);
	if ((skb->mark & MARK_MASK) == MARK_FROM_PROXY) {
		// The host's L7 proxy: its answers to a client it was handed
		// (sourced from the server's address) and its connections to
		// the server it passes a request to (from the host's). Marks are
		// the host's own (crossing a namespace clears them), and the
		// proxy only speaks for connections the datapath gave it. An
		// upstream connection gets an entry, which lets the server's
		// answers through its egress; an answer to a client needs none
		// (the client's own entry carries what it sends back).
		if (p.frag != 2 && !bpf_map_lookup_elem(&cnlab_local, &p.saddr) &&
		    !ct_lookup(cfg->gen, &p, 1 + DIR_INGRESS, 1 + DIR_EGRESS, dst->index, now))
			ct_create(&p, 1 + DIR_INGRESS, dst->index, now);
		r = R_ALLOW_FROM_PROXY;
	} else {
		r = side(cfg, dst, DIR_INGRESS, &p, now, &peer_id, &rule, skb->len);
	}
	if (!is_drop(r) && x.kind && xlate_write(skb, &p, &x, now) < 0)
		r = R_DROP_MALFORMED;
	if (r == R_ALLOW_RELATED && svc && svc_icmp(skb, &p, now) < 0)
		r = R_DROP_MALFORMED;
	return finish(cfg, skb, &p, dst->index, DIR_INGRESS, r, peer_id, dst->identity, rule);
}

// cnlab_from_wire (tcx ingress of a host's wire and VXLAN devices, with
// node ports) takes back the replies of masqueraded node-port
// connections: a client of this host reached a node port's backend on
// another host with this host's masquerade address as its source, and
// the backend's answer comes back here, to an address that is no one's.
// It is translated back (to the node address and port the client used),
// judged at the client's ingress as any reply, and handed straight to
// the client. Everything else passes untouched.
//
// With L7 ports on the host (FLAG_L7) it also hands the connections from
// other hosts to an endpoint's L7 port to the L7 proxy: the packet is
// judged at the endpoint's ingress here, where bpf_sk_assign works (the
// endpoint's own program sees it on egress of its veth, too late).
// Everything else goes on to that program, which judges it as before.
static __always_inline int l7_from_wire(struct __sk_buff *skb, struct config *cfg, struct pkt *p)
{
	if (p->proto != IPPROTO_TCP || p->frag)
		return -1;
	struct endpoint *dst = bpf_map_lookup_elem(&cnlab_local, &p->daddr);
	if (!dst)
		return -1;
	__u64 now = bpf_ktime_get_ns();
	__u8 scope = 1 + DIR_INGRESS;
	__u32 rule = NO_RULE, peer_id = 0;
	int r;
	if ((p->tcpflags & (TCP_SYN | TCP_ACK)) != TCP_SYN) {
		struct ct_key k = {.saddr = p->saddr, .daddr = p->daddr, .sport = p->sport,
				   .dport = p->dport, .proto = p->proto, .scope = scope, .ep = dst->index};
		struct ct_val *v = ct_get(&k, now);
		if (!v || !(v->flags & CT_PROXY))
			return -1;
		ct_touch(v, p->proto, p->tcpflags, now);
		p->proxied = 1;
		r = R_ALLOW_CT;
	} else {
		struct peer peer = peer_of(cfg->gen, p->saddr);
		peer_id = peer.identity;
		// A look ahead: what is not for the proxy the endpoint's
		// program decides (and counts) again.
		r = verdict(cfg, dst->index, DIR_INGRESS, peer.key, p, &rule, RC_NONE, 0);
		if (!p->proxied)
			return -1; // denied, or not for the proxy: the endpoint's program decides
		if (rule != NO_RULE) {
			struct rule_key k = {.rule = rule, .slot = cfg->gen * cfg->max_ep + dst->index,
					     .dir = DIR_INGRESS, .verdict = RV_ALLOW};
			rule_count(&k, skb->len);
		}
		ct_create(p, scope, dst->index, now);
		r = R_ALLOW_PROXY;
	}
	finish(cfg, skb, p, dst->index, DIR_INGRESS, r, peer_id, dst->identity, rule);
	if (to_proxy(skb, p) != TC_ACT_OK)
		return proxy_drop(cfg, skb, p, dst, peer_id);
	return TC_ACT_OK;
}

SEC("tc")
int cnlab_from_wire(struct __sk_buff *skb)
{
	struct config snap, *cfg = &snap;
	if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		// A node port's masqueraded answer (to the masquerade address,
		// no endpoint's), else the L7 proxy's connections from other
		// hosts (to an endpoint).
		int r6 = from_wire6(skb);
		if (r6 >= 0)
			return from_wire6_out(skb, r6);
		return l7_from_wire6(skb);
	}
	struct svc_config *sc = svc_config();
	int nodeports = sc && (sc->flags & SVC_NODEPORTS);
	if (skb->protocol != bpf_htons(ETH_P_IP) || config(cfg) || (!nodeports && !(cfg->flags & FLAG_L7)))
		return TC_ACT_OK;
	struct pkt p = {};
	if (parse(skb, &p))
		return TC_ACT_OK;
	if (cfg->flags & FLAG_L7) {
		int act = l7_from_wire(skb, cfg, &p);
		if (act >= 0)
			return act;
	}
	if (!nodeports || p.daddr != sc->masq)
		return TC_ACT_OK;
	__u64 now = bpf_ktime_get_ns();
	struct xlate x = {};
	if (p.frag == 2) {
		svc_frag(&p, &x, now); // a later fragment of an answer
	} else if (translatable(&p)) {
		if (svc_reply(&p, &x, now)) {
			p.daddr = x.daddr;
			p.dport = bpf_ntohs(x.dport);
		}
	} else {
		svc_icmp_unmasq(sc, &p, now); // an error about a masqueraded flow
	}
	if (p.daddr == sc->masq)
		return TC_ACT_OK; // none of these
	struct endpoint *dst = bpf_map_lookup_elem(&cnlab_local, &p.daddr);
	if (!dst)
		return TC_ACT_OK;
	__u32 rule = NO_RULE, peer_id = 0;
	int r = side(cfg, dst, DIR_INGRESS, &p, now, &peer_id, &rule, skb->len);
	if (!is_drop(r) && x.kind && xlate_write(skb, &p, &x, now) < 0)
		r = R_DROP_MALFORMED;
	if (r == R_ALLOW_RELATED && svc_icmp(skb, &p, now) < 0)
		r = R_DROP_MALFORMED;
	if (!x.kind && r != R_ALLOW_RELATED && !is_drop(r))
		r = R_DROP_UNKNOWN; // an error policy let in that no flow here is about
	if (finish(cfg, skb, &p, dst->index, DIR_INGRESS, r, peer_id, dst->identity, rule) != TC_ACT_OK)
		return TC_ACT_SHOT;
	return deliver(skb, dst);
}

#define ECONNREFUSED 111

// sock_xlate is socket-level translation (ebpf.socketLB, as Cilium's
// socket LB): a connect() or a UDP sendmsg() from one of this host's
// endpoints to a frontend gets a backend's address instead, so no packet
// of the flow is ever rewritten and policy judges the backend as for any
// packet. It returns 0, or -1 to refuse (a frontend without backends).
static __always_inline int sock_xlate(struct bpf_sock_addr *ctx, struct endpoint *src, __u8 proto)
{
	struct svc_config *sc = svc_config();
	if (!sc || !(sc->flags & SVC_SOCKET))
		return 0;
	__u32 daddr = ctx->user_ip4;
	__u16 dport = (__u16)ctx->user_port;
	if ((daddr & sc->mask) != sc->net)
		return 0;
	struct svc_key sk = {.vip = daddr, .port = dport, .proto = proto};
	struct svc_val *s = bpf_map_lookup_elem(&cnlab_svc, &sk);
	if (!s)
		return 0;
	__u64 cookie = bpf_get_socket_cookie(ctx);
	struct sock_key fk = {.cookie = cookie, .addr = daddr, .port = dport, .proto = proto};
	struct backend b;
	struct backend *have = 0;
	if (proto == IPPROTO_UDP)
		have = bpf_map_lookup_elem(&cnlab_sock_fwd, &fk);
	if (have) {
		b = *have;
	} else {
		if (!s->count)
			return -1;
		__u64 now = bpf_ktime_get_ns();
		__u32 slot;
		if (pick(s, src->ip, now, &b, &slot) < 0)
			return -1;
		if (s->affinity) {
			struct affinity_key ak = {.client = src->ip, .id = s->id};
			struct affinity_val av = {.last = now, .b = b, .slot = slot};
			bpf_map_update_elem(&cnlab_affinity, &ak, &av, BPF_ANY);
		}
		if (proto == IPPROTO_UDP)
			bpf_map_update_elem(&cnlab_sock_fwd, &fk, &b, BPF_ANY);
	}
	struct sock_key rk = {.cookie = cookie, .addr = b.ip, .port = b.port, .proto = proto};
	struct backend orig = {.ip = daddr, .port = dport};
	bpf_map_update_elem(proto == IPPROTO_TCP ? (void *)&cnlab_sock_rev_tcp : (void *)&cnlab_sock_rev, &rk, &orig, BPF_ANY);
	ctx->user_ip4 = b.ip;
	ctx->user_port = b.port;
	return 0;
}

// sock_endpoint returns the endpoint of this host a socket lives in.
static __always_inline struct endpoint *sock_endpoint(struct bpf_sock_addr *ctx)
{
	__u64 cookie = bpf_get_netns_cookie(ctx);
	return bpf_map_lookup_elem(&cnlab_sockep, &cookie);
}

// connect_policy4 is the connect hook's verdict on a TCP connect() from
// src to the IPv4 address daddr (network order) and ctx's port: 1 to let
// it go on, 0 (with ECONNREFUSED) to refuse it. It is connect4's, and
// connect6's for an IPv4-mapped destination, which leaves as IPv4.
static __always_inline int connect_policy4(struct bpf_sock_addr *ctx, struct config *cfg, struct endpoint *src,
					   __u32 daddr)
{
	// Loopback, the unspecified address (Linux connects it to
	// loopback) and the endpoint's own address never reach the tc
	// programs: not a policy decision here either.
	if (daddr == 0 || (bpf_ntohl(daddr) >> 24) == 127 || daddr == src->ip)
		return 1;
	// A Service's address not translated here is judged after
	// translation, by the tc programs: its own address is no policy peer.
	struct svc_config *sc = svc_config();
	if (sc && (daddr & sc->mask) == sc->net)
		return 1;
	__u16 dport = bpf_ntohs(ctx->user_port);
	if (sc && (sc->flags & SVC_NODEPORTS) && dport >= NODEPORT_MIN && dport <= NODEPORT_MAX) {
		// So is a node port of a host.
		struct svc_key nk = {.vip = daddr, .port = (__u16)ctx->user_port, .proto = IPPROTO_TCP};
		if (bpf_map_lookup_elem(&cnlab_svc, &nk))
			return 1;
	}
	struct pkt p = {.saddr = src->ip, .daddr = daddr, .proto = IPPROTO_TCP,
			.dport = bpf_ntohs(ctx->user_port), .tcpflags = TCP_SYN};
	__u32 rule = NO_RULE;
	__u32 gen = cfg->gen;
	struct peer dp = peer_of(gen, p.daddr);
	int r = verdict(cfg, src->index, DIR_EGRESS, dp.key, &p, &rule, RC_DROPS, 0);
	__u32 index = src->index;
	__u8 dir = DIR_EGRESS;
	struct endpoint *dst = bpf_map_lookup_elem(&cnlab_local, &p.daddr);
	if (!is_drop(r) && dst) {
		struct peer sp = peer_of(gen, p.saddr);
		r = verdict(cfg, dst->index, DIR_INGRESS, sp.key, &p, &rule, RC_DROPS, 0);
		index = dst->index;
		dir = DIR_INGRESS;
	}
	if (!is_drop(r))
		return 1;
	count(index, dir, r, 0);
	emit(cfg, 0, &p, AT_CONNECT, index, dir, r, src->identity, dst ? dst->identity : dp.identity, rule);
	bpf_set_retval(-ECONNREFUSED);
	return 0;
}

// cnlab_connect4 is attached to the root cgroup for the connect hook
// (ebpf.connectHook) or socket-level translation (ebpf.socketLB), or
// both. It first translates a connect to a frontend (refusing one without
// backends with ECONNREFUSED), then, with the connect hook, decides a TCP
// connect() made inside one of this host's endpoints before any packet
// leaves, against the same policy maps (the endpoint's egress, and the
// destination's ingress when the destination lives on this host). A
// denied connect fails at once with ECONNREFUSED instead of timing out on
// dropped SYNs.
SEC("cgroup/connect4")
int cnlab_connect4(struct bpf_sock_addr *ctx)
{
	if (ctx->protocol != IPPROTO_TCP && ctx->protocol != IPPROTO_UDP)
		return 1;
	struct endpoint *src = sock_endpoint(ctx);
	struct config snap, *cfg = &snap;
	if (!src || config(cfg))
		return 1; // not one of our endpoints: not our business
	__u32 vip = ctx->user_ip4;
	__u16 vport = bpf_ntohs(ctx->user_port);
	if (sock_xlate(ctx, src, ctx->protocol) < 0) {
		struct pkt p = {.saddr = src->ip, .daddr = vip, .proto = ctx->protocol, .dport = vport};
		count(src->index, DIR_EGRESS, R_DROP_SVC_REJECT, 0);
		emit(cfg, 0, &p, AT_CONNECT, src->index, DIR_EGRESS, R_DROP_SVC_REJECT, src->identity, 0, NO_RULE);
		bpf_set_retval(-ECONNREFUSED);
		return 0;
	}
	if (!(cfg->flags & FLAG_CONNECT_HOOK) || ctx->protocol != IPPROTO_TCP)
		return 1;
	return connect_policy4(ctx, cfg, src, ctx->user_ip4);
}

// cnlab_sendmsg4: socket-level translation of an unconnected UDP
// socket's datagram to a frontend; a socket keeps its backend
// (cnlab_sock_fwd) until the proxy forgets it (the backend removed).
SEC("cgroup/sendmsg4")
int cnlab_sendmsg4(struct bpf_sock_addr *ctx)
{
	if (ctx->protocol != IPPROTO_UDP)
		return 1;
	struct endpoint *src = sock_endpoint(ctx);
	if (!src)
		return 1;
	if (sock_xlate(ctx, src, IPPROTO_UDP) < 0) {
		count(src->index, DIR_EGRESS, R_DROP_SVC_REJECT, 0);
		bpf_set_retval(-ECONNREFUSED);
		return 0;
	}
	return 1;
}

// restore gives back the frontend a socket's backend stands for.
static __always_inline void restore(struct bpf_sock_addr *ctx, __u8 proto)
{
	struct svc_config *sc = svc_config();
	if (!sc || !(sc->flags & SVC_SOCKET))
		return;
	struct sock_key rk = {.cookie = bpf_get_socket_cookie(ctx), .addr = ctx->user_ip4,
			      .port = (__u16)ctx->user_port, .proto = proto};
	struct backend *o = bpf_map_lookup_elem(proto == IPPROTO_TCP ? (void *)&cnlab_sock_rev_tcp : (void *)&cnlab_sock_rev, &rk);
	if (o) {
		ctx->user_ip4 = o->ip;
		ctx->user_port = o->port;
	}
}

// cnlab_recvmsg4: a UDP datagram from a socket's backend is seen as
// coming from the frontend the socket sent to.
SEC("cgroup/recvmsg4")
int cnlab_recvmsg4(struct bpf_sock_addr *ctx)
{
	restore(ctx, IPPROTO_UDP);
	return 1;
}

// cnlab_getpeername4: a socket connected to a frontend names the
// frontend as its peer, not the backend.
SEC("cgroup/getpeername4")
int cnlab_getpeername4(struct bpf_sock_addr *ctx)
{
	restore(ctx, ctx->protocol);
	return 1;
}

// ---- Socket-level translation over IPv6 ----
//
// connect6, sendmsg6, recvmsg6 and getpeername6 are connect4's and the
// others' for IPv6 frontends (connect6 also makes the connect hook's
// policy decision over IPv6). Their keys live on the stack, not in
// cnlab_svc6_scratch: a tc program may run on this CPU in the middle of a
// socket hook (a softirq) and use the scratch.

struct sock6_key {
	__u64 cookie;
	__u32 addr[4];
	__u16 port;
	__u8 proto;
	__u8 pad;
	__u32 pad2;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct sock6_key);
	__type(value, struct backend6);
} cnlab_sock6_fwd SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct sock6_key);
	__type(value, struct backend6);
} cnlab_sock6_rev SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct sock6_key);
	__type(value, struct backend6);
} cnlab_sock6_rev_tcp SEC(".maps");

// sock_xlate6 is sock_xlate for an IPv6 socket.
static __always_inline int sock_xlate6(struct bpf_sock_addr *ctx, struct endpoint *src, __u8 proto)
{
	struct svc6_config *sc = svc6_config();
	if (!sc || !(sc->flags & SVC_SOCKET))
		return 0;
	struct svc6_key sk = {.port = (__u16)ctx->user_port, .proto = proto};
	sk.vip[0] = ctx->user_ip6[0];
	sk.vip[1] = ctx->user_ip6[1];
	sk.vip[2] = ctx->user_ip6[2];
	sk.vip[3] = ctx->user_ip6[3];
	if (!in_net6(sc, sk.vip))
		return 0;
	struct svc_val *s = bpf_map_lookup_elem(&cnlab_svc6, &sk);
	if (!s)
		return 0;
	__u64 cookie = bpf_get_socket_cookie(ctx);
	struct sock6_key fk = {.cookie = cookie, .port = sk.port, .proto = proto};
	ip6_cp(fk.addr, sk.vip);
	struct backend6 b = {};
	struct backend6 *have = 0;
	if (proto == IPPROTO_UDP)
		have = bpf_map_lookup_elem(&cnlab_sock6_fwd, &fk);
	if (have) {
		b = *have;
	} else {
		if (!s->count)
			return -1;
		__u64 now = bpf_ktime_get_ns();
		__u32 slot;
		struct affinity6_key ak = {};
		if (pick6(&ak, &b, s, src->ip6, now, &slot) < 0)
			return -1;
		if (s->affinity) {
			struct affinity6_val av = {.last = now, .b = b, .slot = slot};
			bpf_map_update_elem(&cnlab_affinity6, &ak, &av, BPF_ANY);
		}
		if (proto == IPPROTO_UDP)
			bpf_map_update_elem(&cnlab_sock6_fwd, &fk, &b, BPF_ANY);
	}
	struct sock6_key rk = {.cookie = cookie, .port = b.port, .proto = proto};
	ip6_cp(rk.addr, b.ip);
	struct backend6 orig = {.port = sk.port};
	ip6_cp(orig.ip, sk.vip);
	bpf_map_update_elem(proto == IPPROTO_TCP ? (void *)&cnlab_sock6_rev_tcp : (void *)&cnlab_sock6_rev, &rk, &orig, BPF_ANY);
	ctx->user_ip6[0] = b.ip[0];
	ctx->user_ip6[1] = b.ip[1];
	ctx->user_ip6[2] = b.ip[2];
	ctx->user_ip6[3] = b.ip[3];
	ctx->user_port = b.port;
	return 0;
}

// v4mapped reports whether an IPv6 address is IPv4-mapped (::ffff:a.b.c.d).
static __always_inline int v4mapped(const __u32 *a)
{
	return (a[0] | a[1]) == 0 && a[2] == bpf_htonl(0xffff);
}

// connect_policy6 is connect_policy4 for the IPv6 destination of ctx
// (after socket-level translation): the same verdict with the IPv6
// path's maps (cnlab_ipcache6 for the peers, cnlab_local6 for a
// destination on this host) and the IPv6 service settings. p and fk are
// the caller's, for the event (the socket hooks keep their keys on their
// own stack: a tc program may use the scratch maps in the middle of one).
static __always_inline int connect_policy6(struct bpf_sock_addr *ctx, struct config *cfg, struct endpoint *src,
					   struct pkt6 *p, struct flow6_key *fk)
{
	p->daddr[0] = ctx->user_ip6[0];
	p->daddr[1] = ctx->user_ip6[1];
	p->daddr[2] = ctx->user_ip6[2];
	p->daddr[3] = ctx->user_ip6[3];
	// Loopback (::1, and ::, which Linux connects to as ::1) and the
	// endpoint's own address never reach the tc programs.
	if ((p->daddr[0] | p->daddr[1] | p->daddr[2]) == 0 && (p->daddr[3] == 0 || p->daddr[3] == bpf_htonl(1)))
		return 1;
	if (ip6_eq(p->daddr, src->ip6))
		return 1;
	// The IPv6 service CIDR and node ports are judged after
	// translation, by the tc programs, as IPv4's.
	struct svc6_config *sc = svc6_config();
	if (sc && in_net6(sc, p->daddr))
		return 1;
	if (sc && (sc->flags & SVC_NODEPORTS) && p->dport >= NODEPORT_MIN && p->dport <= NODEPORT_MAX) {
		struct svc6_key nk = {.port = (__u16)ctx->user_port, .proto = IPPROTO_TCP};
		ip6_cp(nk.vip, p->daddr);
		if (bpf_map_lookup_elem(&cnlab_svc6, &nk))
			return 1;
	}
	ip6_cp(p->saddr, src->ip6);
	__u32 rule = NO_RULE;
	__u32 gen = cfg->gen;
	struct ipcache6_key ik;
	struct peer dp = peer_of6(gen, p->daddr, &ik);
	int r = verdict_of(cfg, src->index, DIR_EGRESS, dp.key, IPPROTO_TCP, TCP_SYN, p->dport, &p->proxied, &rule,
			   RC_DROPS, 0);
	__u32 index = src->index;
	__u8 dir = DIR_EGRESS;
	ik.prefixlen = 128;
	ip6_cp(ik.ip, p->daddr);
	struct endpoint *dst = bpf_map_lookup_elem(&cnlab_local6, &ik);
	if (!is_drop(r) && dst) {
		struct peer sp = peer_of6(gen, p->saddr, &ik);
		r = verdict_of(cfg, dst->index, DIR_INGRESS, sp.key, IPPROTO_TCP, TCP_SYN, p->dport, &p->proxied,
			       &rule, RC_DROPS, 0);
		index = dst->index;
		dir = DIR_INGRESS;
	}
	if (!is_drop(r))
		return 1;
	count(index, dir, r, 0);
	emit6_at(p, fk, 0, AT_CONNECT, index, dir, r, src->identity, dst ? dst->identity : dp.identity, rule);
	bpf_set_retval(-ECONNREFUSED);
	return 0;
}

// cnlab_connect6 is connect4 for an IPv6 socket: socket-level
// translation of a connect() to an IPv6 frontend (refused with
// ECONNREFUSED when it has no backends), then, with the connect hook, the
// verdict on a TCP connect() (connect_policy6). A destination
// IPv4-mapped (::ffff:a.b.c.d) on an IPv6 socket leaves as IPv4, without
// connect4 (the kernel calls the IPv4 connect itself): it is judged as
// connect4 judges its IPv4 address, and never translated here (the tc
// programs translate a Service's, as for any socket without socket LB).
SEC("cgroup/connect6")
int cnlab_connect6(struct bpf_sock_addr *ctx)
{
	if (ctx->protocol != IPPROTO_TCP && ctx->protocol != IPPROTO_UDP)
		return 1;
	struct endpoint *src = sock_endpoint(ctx);
	struct config snap, *cfg = &snap;
	if (!src || config(cfg))
		return 1;
	int hook = (cfg->flags & FLAG_CONNECT_HOOK) && ctx->protocol == IPPROTO_TCP;
	__u32 d[4] = {ctx->user_ip6[0], ctx->user_ip6[1], ctx->user_ip6[2], ctx->user_ip6[3]};
	if (v4mapped(d)) {
		if (!hook || src->ip == 0xffffffff)
			return 1; // an endpoint without IPv4: nothing to judge (l3 drops what it sends)
		return connect_policy4(ctx, cfg, src, d[3]);
	}
	if (ip6_zero(src->ip6))
		return 1;
	// Its keys on the stack, as sock_xlate6's.
	struct pkt6 p = {.proto = ctx->protocol};
	struct flow6_key fk;
	if (sock_xlate6(ctx, src, ctx->protocol) < 0) {
		p.dport = bpf_ntohs((__u16)ctx->user_port);
		ip6_cp(p.saddr, src->ip6);
		ip6_cp(p.daddr, d);
		count(src->index, DIR_EGRESS, R_DROP_SVC_REJECT, 0);
		emit6_at(&p, &fk, 0, AT_CONNECT, src->index, DIR_EGRESS, R_DROP_SVC_REJECT, src->identity, 0, NO_RULE);
		bpf_set_retval(-ECONNREFUSED);
		return 0;
	}
	if (!hook)
		return 1;
	p.dport = bpf_ntohs((__u16)ctx->user_port);
	p.tcpflags = TCP_SYN;
	return connect_policy6(ctx, cfg, src, &p, &fk);
}

// cnlab_sendmsg6: an unconnected IPv6 UDP socket's datagram to a frontend.
SEC("cgroup/sendmsg6")
int cnlab_sendmsg6(struct bpf_sock_addr *ctx)
{
	if (ctx->protocol != IPPROTO_UDP)
		return 1;
	struct endpoint *src = sock_endpoint(ctx);
	if (!src || ip6_zero(src->ip6))
		return 1;
	if (sock_xlate6(ctx, src, IPPROTO_UDP) < 0) {
		count(src->index, DIR_EGRESS, R_DROP_SVC_REJECT, 0);
		bpf_set_retval(-ECONNREFUSED);
		return 0;
	}
	return 1;
}

// restore6 is restore for an IPv6 socket.
static __always_inline void restore6(struct bpf_sock_addr *ctx, __u8 proto)
{
	struct svc6_config *sc = svc6_config();
	if (!sc || !(sc->flags & SVC_SOCKET))
		return;
	struct sock6_key rk = {.cookie = bpf_get_socket_cookie(ctx), .port = (__u16)ctx->user_port, .proto = proto};
	rk.addr[0] = ctx->user_ip6[0];
	rk.addr[1] = ctx->user_ip6[1];
	rk.addr[2] = ctx->user_ip6[2];
	rk.addr[3] = ctx->user_ip6[3];
	struct backend6 *o = bpf_map_lookup_elem(proto == IPPROTO_TCP ? (void *)&cnlab_sock6_rev_tcp : (void *)&cnlab_sock6_rev, &rk);
	if (o) {
		ctx->user_ip6[0] = o->ip[0];
		ctx->user_ip6[1] = o->ip[1];
		ctx->user_ip6[2] = o->ip[2];
		ctx->user_ip6[3] = o->ip[3];
		ctx->user_port = o->port;
	}
}

SEC("cgroup/recvmsg6")
int cnlab_recvmsg6(struct bpf_sock_addr *ctx)
{
	restore6(ctx, IPPROTO_UDP);
	return 1;
}

SEC("cgroup/getpeername6")
int cnlab_getpeername6(struct bpf_sock_addr *ctx)
{
	restore6(ctx, ctx->protocol);
	return 1;
}
