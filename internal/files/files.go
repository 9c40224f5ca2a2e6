// Package files holds the few file operations several packages share:
// writing JSON atomically (a temporary file renamed into place), reading
// it back, and reading a user's input file with a short error. It knows
// nothing of labs or policies.
package files

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
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
// place. It creates the directory. It never writes through a symlink
// planted in the directory (results directories may be in /tmp and cnlab
// runs as root): the temporary file has a random name and is created
// exclusively (O_EXCL does not follow links), and the rename replaces a
// link at path itself, not its target.
func WriteAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// Create creates or truncates the file at path for writing, like
// os.Create, but refuses a symlink there (O_NOFOLLOW) instead of writing
// wherever it points.
func Create(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o644)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s is a symbolic link: refusing to write through it", path)
	}
	return f, err
}

// Mkdir makes the directory path (and its parents) and checks that path
// itself is a directory, not a symlink planted in its place.
func Mkdir(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(path, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory (%s): refusing to write into it", path, fi.Mode().Type())
	}
	return nil
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
