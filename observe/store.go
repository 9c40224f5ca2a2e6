package observe

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cnlab/cnlab/internal/rundir"
)

// The store of a lab's flows: the recorder appends one JSON object per
// line to current; when it passes MaxFileBytes it becomes previous (the
// one before is removed), so a lab keeps at most twice that: Hubble's
// ring of recent flows, on disk.
const (
	currentFile  = "flows.jsonl"
	previousFile = "flows.1.jsonl"
	// MaxFileBytes bounds one flow file.
	MaxFileBytes = 64 << 20
)

// Dir is the directory of a lab's flow store and recorder.
func Dir(lab string) string { return filepath.Join(rundir.Lab(lab), "observe") }

// Record is one line of the store: a flow, or a lost-events record.
type Record struct {
	Flow *Flow
	Lost *Lost
}

// Writer appends records to a lab's store. It is safe for concurrent use.
type Writer struct {
	mu   sync.Mutex
	dir  string
	f    *os.File
	w    *bufio.Writer
	size int64
	max  int64
}

// NewWriter opens a lab's store for appending.
func NewWriter(lab string) (*Writer, error) { return newWriter(Dir(lab), MaxFileBytes) }

func newWriter(dir string, max int64) (*Writer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	w := &Writer{dir: dir, max: max}
	if err := w.open(); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *Writer) open() error {
	f, err := os.OpenFile(filepath.Join(w.dir, currentFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	w.f, w.w, w.size = f, bufio.NewWriterSize(f, 64<<10), fi.Size()
	return nil
}

// Write appends one record (a *Flow or a *Lost).
func (w *Writer) Write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.size+int64(len(b)) > w.max && w.size > 0 {
		if err := w.rotate(); err != nil {
			return err
		}
	}
	n, err := w.w.Write(b)
	w.size += int64(n)
	return err
}

// rotate makes the current file the previous one.
func (w *Writer) rotate() error {
	if err := w.w.Flush(); err != nil {
		return err
	}
	w.f.Close()
	if err := os.Rename(filepath.Join(w.dir, currentFile), filepath.Join(w.dir, previousFile)); err != nil {
		return err
	}
	return w.open()
}

// Flush writes what is buffered: the recorder flushes at least every
// 100 ms, so a follower sees a flow within that.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Flush()
}

// Close flushes and closes the store.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	err := w.w.Flush()
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// decodeLine reads one line of the store.
func decodeLine(line []byte) (Record, bool) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return Record{}, false
	}
	if bytes.HasPrefix(line, []byte(`{"lost":`)) {
		var l Lost
		if json.Unmarshal(line, &l) != nil {
			return Record{}, false
		}
		return Record{Lost: &l}, true
	}
	var f Flow
	if json.Unmarshal(line, &f) != nil {
		return Record{}, false
	}
	return Record{Flow: &f}, true
}

// Pos is where Read stopped in the current file: Follow goes on from it.
type Pos struct {
	Off  int64
	File os.FileInfo // the current file Read read (nil: none yet)
}

// Read calls fn with every record stored for a lab, oldest first, and
// returns where it stopped (for Follow). A lab that recorded nothing yet
// has no records: no error.
func Read(lab string, fn func(Record) error) (Pos, error) {
	dir := Dir(lab)
	var pos Pos
	for _, name := range []string{previousFile, currentFile} {
		f, err := os.Open(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return pos, err
		}
		fi, _ := f.Stat()
		n, err := scan(f, fn)
		f.Close()
		if err != nil {
			return pos, err
		}
		if name == currentFile {
			pos = Pos{Off: n, File: fi}
		}
	}
	return pos, nil
}

// scan calls fn with every whole line of r and returns the bytes of whole
// lines read.
func scan(r io.Reader, fn func(Record) error) (int64, error) {
	br := bufio.NewReaderSize(r, 256<<10)
	var n int64
	for {
		line, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return n, nil // a partial last line is read again by Follow
		}
		if err != nil {
			return n, err
		}
		n += int64(len(line))
		if rec, ok := decodeLine(line); ok {
			if err := fn(rec); err != nil {
				return n, err
			}
		}
	}
}

// Follow calls fn with every record the lab's recorder writes after pos
// (Read's result), through rotations, until ctx ends or fn returns an
// error. alive is called every poll; an error from it ends Follow (the
// lab went down).
func Follow(ctx context.Context, lab string, pos Pos, alive func() error, fn func(Record) error) error {
	path := filepath.Join(Dir(lab), currentFile)
	var f *os.File
	var fi os.FileInfo
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	open := func(at int64) {
		var err error
		if f, err = os.Open(path); err != nil {
			f = nil
			return
		}
		if fi, err = f.Stat(); err != nil || at > fi.Size() {
			at = 0 // a new file since
		}
		if _, err := f.Seek(at, io.SeekStart); err != nil {
			f.Close()
			f = nil
		}
	}
	open(pos.Off)
	// Rotated since Read: the rest of the file Read read is the previous
	// one now; read it, then the current one from its start.
	if pos.File != nil && (f == nil || !os.SameFile(fi, pos.File)) {
		if pf, err := os.Open(filepath.Join(Dir(lab), previousFile)); err == nil {
			if pfi, err := pf.Stat(); err == nil && os.SameFile(pfi, pos.File) {
				if _, err := pf.Seek(pos.Off, io.SeekStart); err == nil {
					if _, err := scan(pf, fn); err != nil {
						pf.Close()
						return err
					}
				}
			}
			pf.Close()
		}
		if f != nil {
			f.Close()
		}
		open(0)
	}
	var partial []byte
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	drain := func() error {
		br := bufio.NewReaderSize(f, 256<<10)
		for {
			line, err := br.ReadBytes('\n')
			if errors.Is(err, io.EOF) {
				partial = append(partial, line...)
				return nil
			}
			if err != nil {
				return err
			}
			line = append(partial, line...)
			partial = nil
			if rec, ok := decodeLine(line); ok {
				if err := fn(rec); err != nil {
					return err
				}
			}
		}
	}
	for {
		if f != nil {
			if err := drain(); err != nil {
				return err
			}
			// Rotated: the file at path is another one. The writer
			// closed the old one when it rotated: read what it wrote
			// there since, then the new one from its start.
			if now, err := os.Stat(path); err == nil && !os.SameFile(now, fi) {
				if err := drain(); err != nil {
					return err
				}
				f.Close()
				partial = nil
				open(0)
			}
		} else {
			open(0)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if alive != nil {
			if err := alive(); err != nil {
				return err
			}
		}
	}
}

// errStop ends a read early.
var errStop = fmt.Errorf("stop")
