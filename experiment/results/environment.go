package results

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/cnlab/cnlab/internal/files"
)

// Environment is environment.json: the machine a run was measured on.
type Environment struct {
	Hostname      string            `json:"hostname"`
	Kernel        string            `json:"kernel"` // uname -r
	KernelVersion string            `json:"kernelVersion"`
	Arch          string            `json:"arch"`
	CPUModel      string            `json:"cpuModel"`
	Cores         int               `json:"cores"`
	MemoryBytes   uint64            `json:"memoryBytes"`
	Virtualized   string            `json:"virtualized,omitempty"` // the hypervisor CPU flag, if any
	Cnlab         string            `json:"cnlab"`                 // commit
	Go            string            `json:"go"`
	Tools         map[string]string `json:"tools"`   // first line of each tool's --version
	Sysctls       map[string]string `json:"sysctls"` // the ones that change results
	CPUGovernor   string            `json:"cpuGovernor,omitempty"`
	DefaultMTU    int               `json:"defaultMTU"`
	// Offloads are the lab interfaces' offload settings as built (ethtool
	// -k of the first lab's client eth0), before any offloads: value of
	// the matrix.
	Offloads map[string]string `json:"offloads,omitempty"`
	// Cluster describes the cluster a kubernetes run measured (its CNI,
	// kube-proxy mode and nodes' system info); the rest of this file is
	// then the machine cnlab ran on.
	Cluster    *ClusterInfo `json:"cluster,omitempty"`
	CapturedAt time.Time    `json:"capturedAt"`
}

// LoadEnvironment reads a results directory's environment.json.
func LoadEnvironment(dir string) (*Environment, error) {
	var e Environment
	if err := files.ReadJSON(filepath.Join(dir, "environment.json"), &e); err != nil {
		return nil, err
	}
	return &e, nil
}

// Write saves environment.json into dir, atomically.
func (e *Environment) Write(dir string) error {
	if err := files.WriteJSON(filepath.Join(dir, "environment.json"), e, true); err != nil {
		return fmt.Errorf("write environment: %w", err)
	}
	return nil
}
