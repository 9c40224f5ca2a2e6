package l7proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/cnlab/cnlab/l7"
)

// BenchmarkProxyRequest is the proxy's cost per keep-alive request on
// loopback, in process (no datapath): one client connection, one rule,
// the request allowed (forwarded to an in-process server) or denied (403).
//
//	go test -run '^$' -bench BenchmarkProxyRequest -count 6 ./l7proxy
func BenchmarkProxyRequest(b *testing.B) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })}
	go srv.Serve(ln)
	defer srv.Close()
	up := ln.Addr().(*net.TCPAddr).AddrPort()
	dir := b.TempDir()
	cfg := Config{Set: "s", Identities: map[netip.Addr]uint32{netip.MustParseAddr("127.0.0.1"): 300},
		Ports: []PortConfig{{Addr: up.Addr(), Port: up.Port(), Peers: []PeerConfig{{Identity: 300, Rules: []l7.Rule{{Method: "GET", Path: "/public"}}}}}}}
	data, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), data, 0o644); err != nil {
		b.Fatal(err)
	}
	p := newProxy(dir)
	if err := p.reload(false); err != nil {
		b.Fatal(err)
	}
	pl, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, p, pl, func(c net.Conn) *connInfo {
			return &connInfo{src: c.RemoteAddr().(*net.TCPAddr).AddrPort(), dst: up}
		})
	}()
	defer func() { cancel(); <-done }()
	for _, c := range []struct {
		name, path string
		status     int
	}{{"allowed", "/public", 200}, {"denied", "/private", 403}} {
		b.Run(c.name, func(b *testing.B) {
			conn, err := net.Dial("tcp4", pl.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			br := bufio.NewReader(conn)
			req := []byte(fmt.Sprintf("GET %s HTTP/1.1\r\nHost: web.example\r\nUser-Agent: bench\r\nX-Token: a\r\n\r\n", c.path))
			b.ResetTimer()
			for b.Loop() {
				if _, err := conn.Write(req); err != nil {
					b.Fatal(err)
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != c.status {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
		})
	}
}
