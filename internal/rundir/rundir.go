// Package rundir says where cnlab keeps its files about running labs: one
// directory per lab under Dir (the lab's ledger, its applied policies, each
// datapath's last applied state). It is a leaf; it creates nothing.
package rundir

import "path/filepath"

// Dir holds one directory per lab. Tests may point it elsewhere.
var Dir = "/run/cnlab"

// Lab returns the directory of a lab.
func Lab(lab string) string { return filepath.Join(Dir, lab) }

// ReferenceSpeed is where the last reference speed of this boot is kept
// (experiment.MeasureReference; /run is emptied at boot).
func ReferenceSpeed() string { return filepath.Join(Dir, "reference-speed.json") }
