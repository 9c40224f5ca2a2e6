package ebpf

import "fmt"

// reasonNames names the verdict reasons of bpf/cnlab.c (enum reason, whose
// constants bpf2go generates); TestReasonNames fails on a reason without a
// name here.
var reasonNames = map[cnlabReason]string{
	cnlabReasonR_ALLOW_POLICY:      "policy-allow",
	cnlabReasonR_ALLOW_UNENFORCED:  "not-isolated",
	cnlabReasonR_ALLOW_CT:          "established",
	cnlabReasonR_ALLOW_RELATED:     "related",
	cnlabReasonR_ALLOW_FRAG:        "fragment",
	cnlabReasonR_ARP_REPLIED:       "arp-replied",
	cnlabReasonR_ARP_PASSED:        "arp-passed",
	cnlabReasonR_ALLOW_PROXY:       "to-l7-proxy",
	cnlabReasonR_ALLOW_FROM_PROXY:  "from-l7-proxy",
	cnlabReasonR_DROP_DENY:         "policy-deny",
	cnlabReasonR_DROP_DEFAULT:      "policy-default-deny",
	cnlabReasonR_DROP_MALFORMED:    "malformed",
	cnlabReasonR_DROP_FRAG:         "fragment-no-first",
	cnlabReasonR_DROP_IPV6:         "ipv6",
	cnlabReasonR_DROP_L3:           "unsupported-l3",
	cnlabReasonR_DROP_SPOOF:        "spoofed-source",
	cnlabReasonR_DROP_UNKNOWN:      "unknown-endpoint",
	cnlabReasonR_DROP_SVC_REJECT:   "service-no-backend",
	cnlabReasonR_DROP_SVC_NO_LOCAL: "service-no-local-backend",
	cnlabReasonR_DROP_SVC_NO_PORT:  "masquerade-no-free-port",
	cnlabReasonR_DROP_NO_PROXY:     "l7-proxy-not-listening",
	cnlabReasonR_DROP_NOT_PROXIED:  "l7-port-not-proxied",
	cnlabReasonR_DROP_SVC_TOO_BIG:  "masquerade-frag-needed",
	cnlabReasonR_DROP_INVALID:      "invalid",
}

func reasonName(r cnlabReason) string {
	if n, ok := reasonNames[r]; ok {
		return n
	}
	return fmt.Sprintf("reason-%d", r)
}

// isDrop reports whether a reason drops the packet.
func isDrop(r cnlabReason) bool { return r >= cnlabReasonR_FIRST_DROP }
