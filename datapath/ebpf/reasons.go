package ebpf

import "fmt"

// Verdict reasons, as numbered in bpf/cnlab.c (enum reason). Below
// firstDrop a packet passes; from it on, it is dropped.
const (
	reasonAllowPolicy     = 1
	reasonAllowUnenforced = 2
	reasonAllowCT         = 3
	reasonAllowRelated    = 4
	reasonAllowFrag       = 5
	reasonARPReplied      = 6
	reasonARPPassed       = 7
	firstDrop             = 16
	reasonDropDeny        = 16
	reasonDropDefault     = 17
	reasonDropMalformed   = 18
	reasonDropFrag        = 19
	reasonDropIPv6        = 20
	reasonDropL3          = 21
	reasonDropSpoof       = 22
	reasonDropUnknown     = 23
)

var reasonNames = map[uint8]string{
	reasonAllowPolicy:     "policy-allow",
	reasonAllowUnenforced: "not-isolated",
	reasonAllowCT:         "established",
	reasonAllowRelated:    "related",
	reasonAllowFrag:       "fragment",
	reasonARPReplied:      "arp-replied",
	reasonARPPassed:       "arp-passed",
	reasonDropDeny:        "policy-deny",
	reasonDropDefault:     "policy-default-deny",
	reasonDropMalformed:   "malformed",
	reasonDropFrag:        "fragment-no-first",
	reasonDropIPv6:        "ipv6",
	reasonDropL3:          "unsupported-l3",
	reasonDropSpoof:       "spoofed-source",
	reasonDropUnknown:     "unknown-endpoint",
}

func reasonName(r uint8) string {
	if n, ok := reasonNames[r]; ok {
		return n
	}
	return fmt.Sprintf("reason-%d", r)
}

// isDrop reports whether a reason drops the packet.
func isDrop(r uint8) bool { return r >= firstDrop }
