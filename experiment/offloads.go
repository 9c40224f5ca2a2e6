package experiment

import (
	"context"
	"sort"
	"strings"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/topology"
)

// clientOffloads reads the offloads of the client's eth0 as the lab was
// built (ethtool -k), before any offloads: value of the matrix.
func clientOffloads(spec *topology.Spec) map[string]string {
	cl, err := spec.Endpoint("default/client")
	if err != nil {
		return nil
	}
	out, err := netns.Run(context.Background(), cl.Netns, nil, "ethtool", "-k", "eth0")
	if err != nil {
		return nil
	}
	return parseEthtoolK(string(out))
}

// setOffloads runs ethtool -K on every interface of every namespace of
// the lab.
func setOffloads(ctx context.Context, spec *topology.Spec, v string) error {
	set, err := parseOffloads(v)
	if err != nil {
		return err
	}
	names, err := topology.Netns(spec.Name)
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, ns := range names {
		h, err := netns.Handle(ns)
		if err != nil {
			return err
		}
		links, err := h.LinkList()
		h.Close()
		if err != nil {
			return err
		}
		for _, l := range links {
			dev := l.Attrs().Name
			if dev == "lo" {
				continue
			}
			argv := []string{"-K", dev}
			for _, k := range sortedKeys(set) {
				argv = append(argv, k, set[k])
			}
			if _, err := netns.Run(ctx, ns, nil, "ethtool", argv...); err != nil {
				return err
			}
		}
	}
	return nil
}

// parseEthtoolK reads `ethtool -k DEV` output into feature: on|off for the
// offloads the matrix can set.
func parseEthtoolK(out string) map[string]string {
	names := map[string]string{"tcp-segmentation-offload": "tso", "generic-segmentation-offload": "gso",
		"generic-receive-offload": "gro", "tx-checksumming": "tx-checksum", "rx-checksumming": "rx-checksum",
		"scatter-gather": "sg"}
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if short, known := names[strings.TrimSpace(k)]; ok && known {
			f := strings.Fields(v)
			if len(f) > 0 {
				m[short] = f[0]
			}
		}
	}
	return m
}
