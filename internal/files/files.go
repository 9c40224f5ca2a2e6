// Package files holds the few file operations several packages share:
// writing JSON atomically (a temporary file renamed into place), reading
// it back, and reading a user's input file with a short error. It knows
// nothing of labs or policies.
package files

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
)

// WriteJSON writes v as JSON to path through a temporary file renamed into
// place, so a reader never sees half a file. It creates the directory.
func WriteJSON(path string, v any, indent bool) error {
	var data []byte
	var err error
	if indent {
		data, err = json.MarshalIndent(v, "", "  ")
	} else {
		data, err = json.Marshal(v)
	}
	if err != nil {
		return err
	}
	return WriteAtomic(path, data)
}

// WriteAtomic writes data to path through a temporary file renamed into
// place. It creates the directory.
func WriteAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ReadJSON decodes the JSON file at path into v. A missing file is
// returned as an error wrapping os.ErrNotExist.
func ReadJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

// ReadInput reads a file the user named. Its error is the bare cause ("no
// such file or directory"), for messages that already name the file.
func ReadInput(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return data, err
}
