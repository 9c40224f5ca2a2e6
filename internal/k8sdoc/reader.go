package k8sdoc

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cnlab/cnlab/internal/input"
	"github.com/cnlab/cnlab/internal/yamlx"
	"gopkg.in/yaml.v3"
)

// Decoder turns one document of a kind, strictly decoded into the
// family's raw object R, into its value T. It names the document
// (Doc.Metadata or Doc.Named) as soon as it knows its name, so that later
// errors say which object they are about.
type Decoder[R, T any] func(d *Doc, obj *R) (T, error)

// Config is what a family gives its reader.
type Config[R, T any] struct {
	Family *Family
	// Decoders has one entry per kind of the family, and no other.
	Decoders map[string]Decoder[R, T]
	// NotMapping is the message for a document that is not a mapping.
	NotMapping string
	// Refused maps a kind that is not the family's to why it is
	// refused, instead of "not supported".
	Refused map[string]string
}

// Reader reads the documents of one family.
type Reader[R, T any] struct{ c Config[R, T] }

// NewReader returns the reader of c.Family. It panics when c.Decoders and
// the family's kinds differ, a mistake in the program that every test of
// the family's package catches.
func NewReader[R, T any](c Config[R, T]) *Reader[R, T] {
	for _, k := range c.Family.Kinds {
		if c.Decoders[k.Kind] == nil {
			panic(fmt.Sprintf("k8sdoc: no decoder for %s, a kind of %s", k.Kind, c.Family.Command))
		}
	}
	for k := range c.Decoders {
		if _, ok := c.Family.Lookup(k); !ok {
			panic(fmt.Sprintf("k8sdoc: a decoder for %s, not a kind of %s", k, c.Family.Command))
		}
	}
	return &Reader[R, T]{c: c}
}

// Item is one decoded document and where it came from.
type Item[T any] struct {
	Value T
	Origin
}

// Origin is where a document came from, and its text as stored.
type Origin struct {
	Source string // "file#N"
	File   string
	Index  int // the document's position in the file, from 1
	// Raw is the document encoded again, without its comments: what
	// stores it (Encode), read back as the same document.
	Raw string
	Ref string // "Kind namespace/name", as the decoder named it
}

// Read decodes and validates every document of data, in order; file names
// it in errors. Empty documents are skipped; a file with none, a document
// that is not a mapping, of a kind the family does not have, or given
// twice (same kind, namespace and name) is refused. Every error is an
// *input.Error, or input.Errors (one per document) when several documents
// are refused.
func (r *Reader[R, T]) Read(data []byte, file string) ([]Item[T], error) {
	docs, err := yamlx.Documents(data)
	if err != nil {
		return nil, &input.Error{File: file, Msg: err.Error()}
	}
	if len(docs) == 0 {
		return nil, &input.Error{File: file, Msg: fmt.Sprintf("no %s documents", r.c.Family.Noun)}
	}
	out := make([]Item[T], 0, len(docs))
	seen := map[string]int{}
	// Every document is checked, and the first problem of each reported
	// (input.Errors when several documents have one), as a compiler
	// lists every error of a file.
	var errs []*input.Error
	fail := func(err error) {
		var ie *input.Error
		if !errors.As(err, &ie) {
			ie = &input.Error{File: file, Msg: err.Error()}
		}
		errs = append(errs, ie)
	}
	for i, node := range docs {
		d := &Doc{File: file, Index: i + 1}
		v, err := r.document(d, node)
		if err != nil {
			fail(err)
			continue
		}
		raw, err := encode(node)
		if err != nil {
			fail(d.Errorf("", "cannot encode the document again: %v", err))
			continue
		}
		if j, dup := seen[d.ref]; dup {
			fail(d.Errorf("metadata.name", "%s is defined twice in this file (also document %d)", d.ref, j))
			continue
		}
		seen[d.ref] = i + 1
		out = append(out, Item[T]{Value: v, Origin: Origin{Source: fmt.Sprintf("%s#%d", file, i+1), File: file, Index: i + 1, Raw: raw, Ref: d.ref}})
	}
	if err := input.Join(errs); err != nil {
		return nil, err
	}
	return out, nil
}

func (r *Reader[R, T]) document(d *Doc, node *yaml.Node) (T, error) {
	var zero T
	f := r.c.Family
	if node.Kind != yaml.MappingNode {
		return zero, d.Errorf("", "%s", r.c.NotMapping)
	}
	// apiVersion and kind first, leniently: which fields are allowed
	// depends on the kind. The strict decoding below checks them too.
	var head struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
	}
	_ = node.Decode(&head)
	if strings.HasSuffix(head.Kind, "List") {
		return zero, d.Errorf("kind", "%s is not supported: give its items as separate documents (separated by ---)", head.Kind)
	}
	if why, ok := r.c.Refused[head.Kind]; ok {
		return zero, d.Errorf("kind", "%s", why)
	}
	if other := f.applier(head.Kind); other != nil {
		return zero, d.Errorf("kind", "%q is not supported (%s): apply %s documents with %s", head.Kind, strings.Join(f.Names(), ", "), head.Kind, other.Command)
	}
	var obj R
	if err := d.Decode(node, &obj, ""); err != nil {
		return zero, err
	}
	k, ok := f.Lookup(head.Kind)
	if !ok {
		if head.Kind == "" {
			return zero, d.Errorf("kind", "is required (%s)", f.oneOf())
		}
		return zero, d.Errorf("kind", "%q is not supported (%s)", head.Kind, strings.Join(f.Names(), ", "))
	}
	if head.APIVersion != k.APIVersion {
		return zero, d.Errorf("apiVersion", "%q is not the apiVersion of %s (want %s)", head.APIVersion, k.Kind, k.APIVersion)
	}
	v, err := r.c.Decoders[k.Kind](d, &obj)
	if err != nil {
		return zero, err
	}
	if d.ref == "" {
		return zero, d.Errorf("", "internal error: the %s decoder did not name the document", k.Kind)
	}
	return v, nil
}

// Doc is the document being read, for its errors.
type Doc struct {
	File  string
	Index int    // from 1
	ref   string // "Kind namespace/name", once named
}

// Named names the document in the errors that follow, and for the
// duplicates check: ref is "NetworkPolicy x/web" (Metadata names a
// namespaced object so), or "Kind name" for a cluster-scoped one.
func (d *Doc) Named(ref string) { d.ref = ref }

// Errorf returns an input.Error about the document at a YAML path ("" for
// the whole document).
func (d *Doc) Errorf(path, format string, args ...any) error {
	doc := fmt.Sprintf("document %d", d.Index)
	if d.ref != "" {
		doc += " (" + d.ref + ")"
	}
	return &input.Error{File: d.File, Doc: doc, Path: path, Msg: fmt.Sprintf(format, args...)}
}

// Wrap turns an error of yamlx (a path and a problem) into an error about
// the document.
func (d *Doc) Wrap(err error) error {
	var ye *yamlx.Error
	if errors.As(err, &ye) {
		return d.Errorf(ye.Path, "%s", ye.Msg)
	}
	return d.Errorf("", "%v", err)
}

// Decode decodes node (at path base) strictly into out, as yamlx.Decode,
// with errors about the document.
func (d *Doc) Decode(node *yaml.Node, out any, base string) error {
	if err := yamlx.Decode(node, out, base); err != nil {
		return d.Wrap(err)
	}
	return nil
}

// encode is the text that stores one document: the node encoded again,
// without its comments. Slicing the file's text instead pairs pieces with
// documents wrongly when a file has directives, content on a "---" line or
// a null document; yaml.v3's comment placement does not always survive a
// round trip, and comments mean nothing to cnlab.
func encode(doc *yaml.Node) (string, error) {
	normalize(doc)
	raw, err := yaml.Marshal(doc)
	return string(raw), err
}

// normalize drops comments and spells an empty null ("{ingress}", "a:")
// as null: yaml.v3 encodes it as an empty quoted string in flow style,
// which reads back as a string.
func normalize(n *yaml.Node) {
	n.HeadComment, n.LineComment, n.FootComment = "", "", ""
	if n.Kind == yaml.ScalarNode && n.Value == "" && n.ShortTag() == "!!null" {
		n.Value = "null"
	}
	for _, c := range n.Content {
		normalize(c)
	}
}

// Encode is the text that stores a set of documents: each Raw text
// followed by a "---" line. Read reads it back as the same documents.
func Encode(raws ...string) []byte {
	var b strings.Builder
	for _, r := range raws {
		b.WriteString(r)
		b.WriteString("---\n")
	}
	return []byte(b.String())
}

// Once refuses an object given twice in one command (in two files):
// which one is meant would depend on the order of the files.
type Once map[string]string

// Add records ref, defined at where (a file, or a file#document) in file,
// or refuses it when it was added before.
func (o Once) Add(ref, where, file string) error {
	if other, dup := o[ref]; dup {
		return &input.Error{File: file, Msg: fmt.Sprintf("%s is also defined in %s: give it once", ref, other)}
	}
	o[ref] = where
	return nil
}
