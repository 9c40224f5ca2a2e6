package l7proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"time"
)

// Follow calls fn with every access log entry the proxies of the given
// hosts write from now on (the lines already written are skipped), until
// ctx ends or fn returns an error. A host whose proxy starts later is
// picked up when its log appears.
func Follow(ctx context.Context, lab string, hosts []string, fn func(host string, e LogEntry) error) error {
	type tail struct {
		f   *os.File
		r   *bufio.Reader
		buf []byte
	}
	tails := map[string]*tail{}
	defer func() {
		for _, t := range tails {
			t.f.Close()
		}
	}()
	open := func(host string, atEnd bool) {
		f, err := os.Open(AccessLog(lab, host))
		if err != nil {
			return
		}
		if atEnd {
			if _, err := f.Seek(0, io.SeekEnd); err != nil {
				f.Close()
				return
			}
		}
		tails[host] = &tail{f: f, r: bufio.NewReader(f)}
	}
	for _, h := range hosts {
		open(h, true)
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, h := range hosts {
			t := tails[h]
			if t == nil {
				open(h, false) // a log that appears now is new from its start
				if t = tails[h]; t == nil {
					continue
				}
			}
			for {
				line, err := t.r.ReadBytes('\n')
				if errors.Is(err, io.EOF) {
					t.buf = append(t.buf, line...) // a partial line: the rest comes later
					break
				}
				if err != nil {
					return err
				}
				line = append(t.buf, line...)
				t.buf = nil
				var e LogEntry
				if json.Unmarshal(line, &e) != nil {
					continue
				}
				if err := fn(h, e); err != nil {
					return err
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
