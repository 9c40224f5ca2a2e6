package change

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cnlab/cnlab/internal/files"
)

// Record is what a change writes before it stages anything: the command,
// its pid, what it creates, updates and deletes, and the digests of the
// stored set before and after. Left behind by a killed change, it tells
// status what died; the next change overwrites it.
type Record struct {
	Op      string    `json:"op"` // apply, replace or delete
	Pid     int       `json:"pid"`
	Started time.Time `json:"started"`
	From    string    `json:"from"` // digest of the stored set before ("" unreadable)
	To      string    `json:"to"`   // digest of the set it stores
	Created []string  `json:"created,omitempty"`
	Updated []string  `json:"updated,omitempty"`
	Deleted []string  `json:"deleted,omitempty"`
}

// Store is what a lab keeps of one kind of thing a change replaces whole
// (its policies; its Services and their allocations): the stored files,
// each staged beside itself (FILE.new) and committed by a rename, in the
// order listed, and the record of the change. A change records itself,
// stages every file, has the hosts apply it, commits, and ends (the record
// goes). Killed before its commit, the stored files are those from before
// the change; killed after, those it stores. A commit of several files
// killed between two renames is finished by the next change (Repair) and
// read as committed meanwhile (Path).
type Store struct {
	What   string   // what it stores, for errors: "policies"
	Record string   // the change record (change.json)
	Files  []string // the stored files, in the order staged and committed
}

// Staged is where the ith file is staged.
func (s Store) Staged(i int) string { return s.Files[i] + ".new" }

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// partial reports a commit cut between two renames: the first file is
// committed (its staged copy is gone: staging writes it first, the cleanup
// removes it last) and a later one is still staged.
func (s Store) partial() bool {
	if exists(s.Staged(0)) {
		return false
	}
	for i := 1; i < len(s.Files); i++ {
		if exists(s.Staged(i)) {
			return true
		}
	}
	return false
}

// Path is the file to read for the ith stored file: the stored one, or
// its staged copy when a commit was cut before renaming it.
func (s Store) Path(i int) string {
	if i > 0 && s.partial() && exists(s.Staged(i)) {
		return s.Staged(i)
	}
	return s.Files[i]
}

// Begin records a change and stages its files, data[i] for Files[i] (in
// that order: a staged file always has its record). Files left staged by
// an earlier change go first.
func (s Store) Begin(rec *Record, data ...[]byte) error {
	if err := files.WriteJSON(s.Record, rec, true); err != nil {
		return fmt.Errorf("record the change of %s: %w", s.What, err)
	}
	if err := s.unstage(); err != nil {
		return err
	}
	for i, d := range data {
		if err := files.WriteAtomic(s.Staged(i), d); err != nil {
			return fmt.Errorf("store %s: %w", s.What, err)
		}
	}
	return nil
}

// Commit makes the staged files the stored ones, renaming each in turn.
func (s Store) Commit() error { return s.commit(false) }

// commit renames the staged files in turn; with left, only those left
// staged by a commit cut half-way.
func (s Store) commit(left bool) error {
	for i := range s.Files {
		if left && !exists(s.Staged(i)) {
			continue
		}
		if err := os.Rename(s.Staged(i), s.Files[i]); err != nil {
			return fmt.Errorf("store %s: %w", s.What, err)
		}
	}
	return nil
}

// Repair finishes a commit cut between two renames, under the lab's lock
// before a change reads the store: every host took that change already.
func (s Store) Repair() error {
	if !s.partial() {
		return nil
	}
	return s.commit(true)
}

// unstage removes the staged files, the last first (so that a cleanup cut
// half-way is never taken for a commit cut half-way).
func (s Store) unstage() error {
	var errs []error
	for i := len(s.Files) - 1; i >= 0; i-- {
		if err := os.Remove(s.Staged(i)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// End is the cleanup of a change, done or failed: its staged files (if
// not committed) and its record go.
func (s Store) End() error {
	err := s.unstage()
	if rerr := os.Remove(s.Record); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	return err
}

// ReadRecord reads the record a change left, or nil.
func (s Store) ReadRecord() *Record {
	var rec Record
	if files.ReadJSON(s.Record, &rec) != nil {
		return nil
	}
	return &rec
}

// Where a change was killed, as Killed says.
const (
	// KilledBeforeStaged: recorded, its set not yet staged; nothing changed.
	KilledBeforeStaged = "before-staged"
	// KilledStaged: between staged and committed; the store holds the set
	// from before the change, hosts may hold either.
	KilledStaged = "staged"
	// KilledCommitted: between committed and cleanup; the store holds the
	// change's set, and so does every host.
	KilledCommitted = "committed"
)

// Killed says where the change that left rec died (no process holds the
// lab's lock), from the store's files and stored, the digest of the stored
// set ("" unreadable).
func (s Store) Killed(rec *Record, stored string) string {
	switch {
	case s.partial():
		return KilledCommitted
	case exists(s.Staged(0)):
		return KilledStaged
	case stored != "" && stored == rec.To:
		return KilledCommitted
	}
	return KilledBeforeStaged
}
