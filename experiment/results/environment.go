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
	Cluster *ClusterInfo `json:"cluster,omitempty"`
	// Reference is this machine's speed on a fixed path when the run
	// began (nil: not measured, as before cnlab measured it, or on a
	// cluster).
	Reference  *ReferenceSpeed `json:"referenceSpeed,omitempty"`
	CapturedAt time.Time       `json:"capturedAt"`
}

// ReferenceSpeed is a machine's speed on one fixed path: one TCP stream
// (iperf3) and tcp-rr 100/200 (cnlab rr) between two network namespaces
// joined by one veth pair, nothing else on the path, client and server on
// CPU 0, in short samples (cnlab doctor; cnlab run, docs/methodology.md
// "Reference speed"). Two runs whose reference speeds differ by more
// than their samples' spread were measured on machines (or days) that
// differ.
type ReferenceSpeed struct {
	StreamGbps    []float64 `json:"streamGbps"` // per sample
	RRP50Us       []float64 `json:"rrP50Us"`    // per sample
	StreamSeconds float64   `json:"streamSampleSeconds"`
	RRSeconds     float64   `json:"rrSampleSeconds"`
	// Seconds is how long the measurement took, namespaces included.
	Seconds    float64   `json:"seconds"`
	MeasuredAt time.Time `json:"measuredAt"`
	// Cached: measured by an earlier run or cnlab doctor on this boot,
	// at MeasuredAt, not for this run.
	Cached bool   `json:"cached,omitempty"`
	Error  string `json:"error,omitempty"`
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
