// Package kubemeta holds the raw form of a Kubernetes object's metadata,
// shared by the parsers of policies and Services: the fields cnlab reads,
// and those the API server sets, accepted so that exported objects apply
// as they are. It is pure data: no I/O.
package kubemeta

import "gopkg.in/yaml.v3"

// Meta mirrors metadata: field by field, for strict decoding.
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
