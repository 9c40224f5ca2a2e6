package topology

import (
	"fmt"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/files"
	"github.com/cnlab/cnlab/internal/input"

	"github.com/cnlab/cnlab/internal/yamlx"
	"gopkg.in/yaml.v3"
)

// Load reads and resolves a topology file.
func Load(path string, ov Overrides) (*Spec, error) {
	data, err := files.ReadInput(path)
	if err != nil {
		return nil, &input.Error{File: path, Msg: fmt.Sprintf("cannot read: %v", err)}
	}
	return Parse(data, path, ov)
}

// Overrides replace fields of the file from the command line (--name,
// --datapath, the datapath options, --mtu). Empty fields change nothing.
type Overrides struct {
	Name     string
	Datapath string         // a kind's name, checked when resolving
	Options  kind.Overrides // the datapath's options (--filler, --host-routing, ...)
	MTU      int            // the lab's MTU (0: the file's)
	Proxy    string         // the service proxy's name (--service-proxy; "": the file's)
	Observe  string         // --observe ("": the file's)
}

// Parse decodes a topology document strictly and resolves it. file is used
// in error messages only.
func Parse(data []byte, file string, ov Overrides) (*Spec, error) {
	raw, err := decodeStrict(data, file)
	if err != nil {
		return nil, err
	}
	return resolve(raw, file, ov)
}

// decodeStrict decodes one YAML document into a rawFile, rejecting unknown
// fields, with errors naming the YAML path.
func decodeStrict(data []byte, file string) (*rawFile, error) {
	docs, err := yamlx.Documents(data)
	if err != nil {
		return nil, &input.Error{File: file, Msg: err.Error()}
	}
	switch {
	case len(docs) == 0:
		return nil, &input.Error{File: file, Msg: "empty topology document"}
	case len(docs) > 1:
		return nil, &input.Error{File: file, Msg: "more than one YAML document: a topology file holds exactly one"}
	case docs[0].Kind != yaml.MappingNode:
		return nil, &input.Error{File: file, Msg: "a topology must be a mapping (name:, hosts:, endpoints:, ...)"}
	}
	var raw rawFile
	var errs []*input.Error
	for _, ye := range yamlx.DecodeAll(docs[0], &raw, "") {
		errs = append(errs, &input.Error{File: file, Path: ye.Path, Msg: ye.Msg})
	}
	if err := input.Join(errs); err != nil {
		return nil, err
	}
	return &raw, nil
}
