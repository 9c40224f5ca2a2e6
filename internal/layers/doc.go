// Package layers holds the check that no package of cnlab imports one
// above it: the ordered list of layers (layers_test.go), which
// docs/design.md's package table follows row by row. It has no code.
package layers
