package datapath

import (
	"fmt"
	"net"

	"github.com/cnlab/cnlab/internal/netns"
)

// LinkMAC returns the MAC address of dev in the namespace ns.
func LinkMAC(ns, dev string) (net.HardwareAddr, error) {
	h, err := netns.Handle(ns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	l, err := h.LinkByName(dev)
	if err != nil {
		return nil, fmt.Errorf("find %s in %s: %w", dev, ns, err)
	}
	return l.Attrs().HardwareAddr, nil
}
