// Package k8sdoc is the one reader of the Kubernetes documents cnlab
// applies: multi-document YAML, each document dispatched on its kind
// through a table its family (policies, Services) gives, decoded strictly
// (an unknown field is an error naming its YAML path; aliases are
// refused, by yamlx), with errors that name the file, the document and
// the path. It knows which cnlab command applies each kind (Families), so
// a document given to the wrong command is sent to the right one.
//
// It is pure logic: no I/O, no knowledge of a lab. A family package
// (policy, service) declares its kinds' decoders explicitly, with
// NewReader; nothing registers itself at init.
package k8sdoc
