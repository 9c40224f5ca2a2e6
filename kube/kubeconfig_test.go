package kube

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

// With no kubeconfig the error says the file does not exist and how to
// give one, not that a missing file "has no usable configuration"
// (issue 37).
func TestKubeconfigErrorMissingFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope", "config")
	t.Setenv("KUBECONFIG", missing)
	err := kubeconfigError(Config{}, clientcmd.ErrEmptyConfig)
	if msg := err.Error(); !strings.Contains(msg, missing+" does not exist") || !strings.Contains(msg, "--kubeconfig") ||
		!strings.Contains(msg, "$KUBECONFIG") || strings.Contains(msg, "usable") {
		t.Errorf("missing file: %q", msg)
	}
	// A file that exists but holds nothing usable keeps the old words.
	empty := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", empty)
	if msg := kubeconfigError(Config{}, clientcmd.ErrEmptyConfig).Error(); !strings.Contains(msg, empty+" has no usable configuration") {
		t.Errorf("empty file: %q", msg)
	}
}
