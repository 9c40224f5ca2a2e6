package testutil

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cnlab/cnlab/internal/netns"
)

// EchoServer accepts TCP connections inside a namespace and echoes what it
// reads. Close stops it.
type EchoServer struct {
	ln net.Listener
	wg sync.WaitGroup
}

// ListenEcho starts an EchoServer on addr:port inside the named namespace;
// each connection lasts at most 10 s.
func ListenEcho(ns string, addr netip.AddrPort) (*EchoServer, error) {
	return ListenEchoFor(ns, addr, 10*time.Second)
}

// ListenEchoFor is ListenEcho with connections that last at most limit.
func ListenEchoFor(ns string, addr netip.AddrPort, limit time.Duration) (*EchoServer, error) {
	var ln net.Listener
	err := netns.Do(ns, func() error {
		var err error
		ln, err = net.Listen("tcp", addr.String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen in %s: %w", ns, err)
	}
	s := &EchoServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(limit))
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return s, nil
}

// Close stops the server and waits for its connections to end.
func (s *EchoServer) Close() {
	s.ln.Close()
	s.wg.Wait()
}

// ExchangeTCP connects from inside the named namespace to dst, sends n
// random bytes and checks that the same bytes come back.
func ExchangeTCP(ctx context.Context, ns string, dst netip.AddrPort, n int) error {
	var c net.Conn
	err := netns.Do(ns, func() error {
		d := net.Dialer{Timeout: 3 * time.Second}
		var err error
		c, err = d.DialContext(ctx, "tcp", dst.String())
		return err
	})
	if err != nil {
		return fmt.Errorf("connect from %s to %s: %w", ns, dst, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	msg := make([]byte, n)
	_, _ = rand.Read(msg)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(msg)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		errc <- err
	}()
	got, err := io.ReadAll(c)
	if werr := <-errc; werr != nil {
		return fmt.Errorf("send from %s to %s: %w", ns, dst, werr)
	}
	if err != nil {
		return fmt.Errorf("receive from %s at %s: %w", dst, ns, err)
	}
	if !bytes.Equal(got, msg) {
		return fmt.Errorf("%s -> %s: sent %d bytes, got %d different bytes back", ns, dst, len(msg), len(got))
	}
	return nil
}

// Peer is an endpoint of a lab as CheckAllPairs sees it.
type Peer struct {
	ID    string
	Netns string
	IP    netip.Addr
}

// CheckAllPairs starts an echo server in every endpoint and has every
// endpoint exchange TCP data with every other one, in both directions.
func CheckAllPairs(t *testing.T, peers []Peer) {
	t.Helper()
	const port = 7777
	for _, ep := range peers {
		srv, err := ListenEcho(ep.Netns, netip.AddrPortFrom(ep.IP, port))
		if err != nil {
			t.Fatal(err)
		}
		// A listening socket keeps its namespace alive: close it before
		// the lab goes down, or teardown rightly reports the namespace held.
		defer srv.Close()
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(peers)*len(peers))
	for _, a := range peers {
		for _, b := range peers {
			if a.ID == b.ID {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := ExchangeTCP(context.Background(), a.Netns, netip.AddrPortFrom(b.IP, port), 256<<10); err != nil {
					errs <- fmt.Errorf("%s -> %s: %w", a.ID, b.ID, err)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

var matchSet = regexp.MustCompile(`--match-set (\S+) `)

// IPSets returns, for a namespace, the cnlab ipsets its iptables rules
// name (listed by the save tool, iptables-legacy-save or
// iptables-nft-save), those its kernel holds, both sorted, and the number
// of rules that match a set.
func IPSets(ctx context.Context, ns, save string) (named, held []string, rules int, err error) {
	listing, err := netns.Run(ctx, ns, nil, save, "-t", "filter")
	if err != nil {
		return nil, nil, 0, err
	}
	for _, m := range matchSet.FindAllStringSubmatch(string(listing), -1) {
		rules++
		if !slices.Contains(named, m[1]) {
			named = append(named, m[1])
		}
	}
	out, err := netns.Run(ctx, ns, nil, "ipset", "list", "-n")
	if err != nil {
		return nil, nil, 0, err
	}
	for _, n := range strings.Fields(string(out)) {
		if strings.HasPrefix(n, "cnlab-") {
			held = append(held, n)
		}
	}
	slices.Sort(named)
	slices.Sort(held)
	return named, held, rules, nil
}
