package topology

import (
	"fmt"
	"time"
)

// L7Limits bound what the L7 proxy of a lab's host spends on one client,
// so that a slow or hostile client costs bounded memory and never delays
// another's requests (topology key l7Proxy; docs/l7.md, "Limits"). The
// proxy (package l7proxy, whose Limits has the same fields) enforces
// them; zero fields are its defaults (l7proxy.DefaultLimits).
type L7Limits struct {
	// MaxHeaderBytes bounds a request's line and header: beyond it the
	// proxy answers 431 and closes the connection.
	MaxHeaderBytes int `json:"maxHeaderBytes,omitempty"`
	// MaxHeaders bounds a request's header lines (431 beyond).
	MaxHeaders int `json:"maxHeaders,omitempty"`
	// HeaderTimeout is the time a request's head may take to arrive from
	// its first byte (a slowloris client): the connection closes after it.
	HeaderTimeout time.Duration `json:"headerTimeout,omitempty"`
	// IdleTimeout closes a keep-alive connection with no request for
	// that long.
	IdleTimeout time.Duration `json:"idleTimeout,omitempty"`
	// WriteTimeout closes a connection whose client has not taken an
	// answer for that long (a client that does not read).
	WriteTimeout time.Duration `json:"writeTimeout,omitempty"`
	// MaxConnections bounds the client connections open at once: one
	// beyond it is closed as soon as it is accepted.
	MaxConnections int `json:"maxConnections,omitempty"`
	// Threads is how many threads run the proxy's Go code at once
	// (GOMAXPROCS).
	Threads int `json:"threads,omitempty"`
}

// rawL7Proxy is the file's l7Proxy: durations as Go writes them ("30s").
type rawL7Proxy struct {
	MaxHeaderBytes int    `yaml:"maxHeaderBytes"`
	MaxHeaders     int    `yaml:"maxHeaders"`
	HeaderTimeout  string `yaml:"headerTimeout"`
	IdleTimeout    string `yaml:"idleTimeout"`
	WriteTimeout   string `yaml:"writeTimeout"`
	MaxConnections int    `yaml:"maxConnections"`
	Threads        int    `yaml:"threads"`
}

// Bounds of the l7Proxy fields.
const (
	minHeaderBytes = 1 << 10
	maxHeaderBytes = 16 << 20
	maxHeaderLines = 10000
	maxL7Conns     = 1 << 20
)

// l7Proxy resolves l7Proxy: (the proxy's limits; default none set).
func (r *resolver) l7Proxy() error {
	raw := r.raw.L7Proxy
	if raw == nil {
		return nil
	}
	var l L7Limits
	ints := []struct {
		field  string
		v      int
		lo, hi int
		out    *int
	}{
		{"maxHeaderBytes", raw.MaxHeaderBytes, minHeaderBytes, maxHeaderBytes, &l.MaxHeaderBytes},
		{"maxHeaders", raw.MaxHeaders, 1, maxHeaderLines, &l.MaxHeaders},
		{"maxConnections", raw.MaxConnections, 1, maxL7Conns, &l.MaxConnections},
		{"threads", raw.Threads, 1, 256, &l.Threads},
	}
	for _, f := range ints {
		if f.v == 0 {
			continue
		}
		if f.v < f.lo || f.v > f.hi {
			return r.errf("l7Proxy."+f.field, "%d: give %d to %d", f.v, f.lo, f.hi)
		}
		*f.out = f.v
	}
	durs := []struct {
		field string
		v     string
		out   *time.Duration
	}{
		{"headerTimeout", raw.HeaderTimeout, &l.HeaderTimeout},
		{"idleTimeout", raw.IdleTimeout, &l.IdleTimeout},
		{"writeTimeout", raw.WriteTimeout, &l.WriteTimeout},
	}
	for _, f := range durs {
		if f.v == "" {
			continue
		}
		d, err := time.ParseDuration(f.v)
		if err != nil || d < 10*time.Millisecond || d > 24*time.Hour {
			return r.errf("l7Proxy."+f.field, "%q: give a duration from 10ms to 24h, such as 30s", f.v)
		}
		*f.out = d
	}
	if r.spec.Chain != nil {
		return r.errf("l7Proxy", "a chain has no L7 proxy: l7Proxy applies to labs with hosts")
	}
	r.spec.L7Proxy = l
	return nil
}

// String renders limits for messages.
func (l L7Limits) String() string {
	return fmt.Sprintf("maxHeaderBytes %d, maxHeaders %d, headerTimeout %s, idleTimeout %s, writeTimeout %s, maxConnections %d",
		l.MaxHeaderBytes, l.MaxHeaders, l.HeaderTimeout, l.IdleTimeout, l.WriteTimeout, l.MaxConnections)
}
