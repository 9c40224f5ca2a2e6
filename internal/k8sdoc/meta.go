package k8sdoc

import (
	"github.com/cnlab/cnlab/labels"
	"gopkg.in/yaml.v3"
)

// Head is what every document has. A family's raw object embeds it
// inline (`yaml:",inline"`) and adds its own top-level fields.
type Head struct {
	APIVersion string    `yaml:"apiVersion"`
	Kind       string    `yaml:"kind"`
	Metadata   Meta      `yaml:"metadata"`
	Status     yaml.Node `yaml:"status"` // output only; ignored
}

// Meta mirrors metadata: field by field, for strict decoding: the fields
// cnlab reads, and those the API server sets, accepted so that exported
// objects apply as they are.
type Meta struct {
	Name        string            `yaml:"name"`
	Namespace   string            `yaml:"namespace"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
	// Set by the API server or by controllers; accepted and ignored.
	UID               yaml.Node `yaml:"uid"`
	ResourceVersion   yaml.Node `yaml:"resourceVersion"`
	Generation        yaml.Node `yaml:"generation"`
	CreationTimestamp yaml.Node `yaml:"creationTimestamp"`
	ManagedFields     yaml.Node `yaml:"managedFields"`
	SelfLink          yaml.Node `yaml:"selfLink"`
	OwnerReferences   yaml.Node `yaml:"ownerReferences"`
	GenerateName      yaml.Node `yaml:"generateName"`
}

// DefaultNamespace is the namespace of a document that names none.
const DefaultNamespace = "default"

// Metadata checks the metadata of a namespaced object of kind, in this
// order: the name is given, checkName (when not nil) accepts it, the
// namespace is a DNS label, the labels are valid. It returns the
// namespace, DefaultNamespace when the document names none, and names the
// document (Named) for the errors that follow.
func (d *Doc) Metadata(kind string, m *Meta, checkName func(string) error) (string, error) {
	if m.Name == "" {
		return "", d.Errorf("metadata.name", "is required")
	}
	if checkName != nil {
		if err := checkName(m.Name); err != nil {
			return "", d.Errorf("metadata.name", "%v", err)
		}
	}
	ns := m.Namespace
	if ns == "" {
		ns = DefaultNamespace
	}
	if err := labels.CheckDNSLabel(ns, 63); err != nil {
		return "", d.Errorf("metadata.namespace", "%v", err)
	}
	if err := labels.CheckSet(m.Labels); err != nil {
		return "", d.Errorf("metadata.labels", "%v", err)
	}
	d.Named(kind + " " + ns + "/" + m.Name)
	return ns, nil
}

// Given reports whether a field declared as a yaml.Node appears in the
// document at all (null and empty values included).
func Given(n *yaml.Node) bool { return n.Kind != 0 }

// Present reports whether an optional field was given a value: not
// absent, not null, not an empty list or string.
func Present(n *yaml.Node) bool {
	if n.Kind == 0 || n.ShortTag() == "!!null" {
		return false
	}
	return !(n.Kind == yaml.SequenceNode && len(n.Content) == 0) && !(n.Kind == yaml.ScalarNode && n.Value == "")
}
