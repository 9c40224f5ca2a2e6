package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/testutil"
)

// TestApplyGivenTheOtherCommandsKind: policy apply given a Service or an
// EndpointSlice, and service apply given a NetworkPolicy or a
// CiliumNetworkPolicy, refuse it as bad input (exit 2, one line naming
// the file and the document) and say which command applies it. The files
// are refused before the lab is looked at: it does not exist.
func TestApplyGivenTheOtherCommandsKind(t *testing.T) {
	testutil.RequireRoot(t) // apply checks for root before reading its files
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	np := "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: p, namespace: x}\nspec: {podSelector: {}}\n"
	svc := "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: x}\nspec: {selector: {app: web}, ports: [{port: 80}]}\n"
	slice := write("slice.yaml", "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: web-1, namespace: x, labels: {kubernetes.io/service-name: web}}\naddressType: IPv4\nendpoints: [{addresses: [10.0.0.1]}]\n")
	mixed := write("mixed.yaml", np+"---\n"+svc)
	cnp := write("cnp.yaml", "apiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata: {name: c, namespace: x}\nspecs: [{endpointSelector: {}, ingress: [{}]}]\n")
	// A directory is read as kubectl reads one: its files in name order
	// (the first document refused is in the directory's file).
	sub := filepath.Join(dir, "svcs")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	inDir := filepath.Join(sub, "a.yaml")
	if err := os.WriteFile(inDir, []byte(np), 0o644); err != nil {
		t.Fatal(err)
	}
	const lab = "t-kind-nolab"
	for _, c := range []struct {
		args  []string
		stdin string
		want  string
	}{
		{[]string{"policy", "apply", lab, "-f", mixed}, "",
			mixed + `: document 2: kind: "Service" is not supported (NetworkPolicy, CiliumNetworkPolicy, ClusterNetworkPolicy, AdminNetworkPolicy, BaselineAdminNetworkPolicy): apply Service documents with cnlab service apply`},
		{[]string{"policy", "apply", lab, "-f", slice}, "",
			slice + `: document 1: kind: "EndpointSlice" is not supported (NetworkPolicy, CiliumNetworkPolicy, ClusterNetworkPolicy, AdminNetworkPolicy, BaselineAdminNetworkPolicy): apply EndpointSlice documents with cnlab service apply`},
		{[]string{"service", "apply", lab, "-f", mixed}, "",
			mixed + `: document 1: kind: "NetworkPolicy" is not supported (Service, EndpointSlice): apply NetworkPolicy documents with cnlab policy apply`},
		{[]string{"service", "apply", lab, "-f", "-"}, svc + "---\n" + np,
			`<stdin>: document 2: kind: "NetworkPolicy" is not supported (Service, EndpointSlice): apply NetworkPolicy documents with cnlab policy apply`},
		{[]string{"service", "apply", lab, "-f", sub}, "",
			inDir + `: document 1: kind: "NetworkPolicy" is not supported (Service, EndpointSlice): apply NetworkPolicy documents with cnlab policy apply`},
		{[]string{"service", "apply", lab, "-f", cnp}, "",
			cnp + `: document 1: kind: "CiliumNetworkPolicy" is not supported (Service, EndpointSlice): apply CiliumNetworkPolicy documents with cnlab policy apply`},
	} {
		cmd := cnlab(c.args...)
		cmd.Stdin = strings.NewReader(c.stdin)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		_ = cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != 2 || stderr.String() != "cnlab: "+c.want+"\n" || stdout.Len() != 0 {
			t.Errorf("cnlab %s: exit %d\nstdout %q\nstderr %q\nwant exit 2 and stderr %q", strings.Join(c.args, " "), code, stdout.String(), stderr.String(), "cnlab: "+c.want+"\n")
		}
	}
}
