package service

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/yaml"

	"github.com/cnlab/cnlab/internal/yamlx"
)

// TestExamplesDecodeIntoKubernetesTypes checks that every document cnlab
// accepts (the test files and the shipped examples) also decodes strictly
// into the real Kubernetes types: cnlab takes nothing a cluster would
// refuse as unknown.
func TestExamplesDecodeIntoKubernetesTypes(t *testing.T) {
	for _, path := range goodFiles(t) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		docs, err := yamlx.Documents(data)
		if err != nil {
			t.Fatal(err)
		}
		svcs, sls, err := Parse(data, path)
		if err != nil {
			t.Fatal(err)
		}
		if len(docs) != len(svcs)+len(sls) {
			t.Fatalf("%s: %d documents, %d parsed", path, len(docs), len(svcs)+len(sls))
		}
		for _, d := range append(svcsRaw(svcs), slicesRaw(sls)...) {
			var head struct{ Kind string }
			if err := yaml.Unmarshal([]byte(d), &head); err != nil {
				t.Fatal(err)
			}
			var into any = &corev1.Service{}
			if head.Kind == KindEndpointSlice {
				into = &discoveryv1.EndpointSlice{}
			}
			if err := yaml.UnmarshalStrict([]byte(d), into); err != nil {
				t.Errorf("%s: a %s cnlab accepts does not decode strictly into the Kubernetes type: %v\n%s", path, head.Kind, err, d)
			}
			js, _ := json.Marshal(into)
			if bytes.Equal(js, []byte("{}")) {
				t.Errorf("%s: decoded to nothing", path)
			}
		}
	}
}

func svcsRaw(s []*Service) []string {
	var out []string
	for _, x := range s {
		out = append(out, x.Raw)
	}
	return out
}

func slicesRaw(s []*Slice) []string {
	var out []string
	for _, x := range s {
		out = append(out, x.Raw)
	}
	return out
}
