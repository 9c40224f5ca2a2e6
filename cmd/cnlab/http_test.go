package main

import (
	"bufio"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"
)

// TestHTTPBadInput: bad flags of cnlab http exit with 2 and one line
// naming the flag.
func TestHTTPBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"http", "bogus"}, `unknown http command "bogus" (server, client)`},
		{[]string{"http", "client"}, "--url: give the server's URL"},
		{[]string{"http", "client", "--url", "ftp://x/"}, `--url "ftp://x/": want http://host[:port]/path`},
		{[]string{"http", "client", "--url", "http://x/", "--mode", "old"}, `--mode "old": one of keepalive, new`},
		{[]string{"http", "client", "--url", "http://x/", "--header", "NoColon"}, `--header "NoColon": want "Key: value"`},
		{[]string{"http", "client", "--url", "http://x/", "--concurrency", "0"}, "--concurrency 0: 1 to 10000"},
		{[]string{"http", "client", "--url", "http://x/", "--duration", "0s"}, "--duration: must be positive unless a number of requests is given"},
		{[]string{"http", "client", "--url", "http://x/", "--timeout", "0s"}, "--timeout must be positive"},
		{[]string{"http", "client", "--url", "http://x/", "--expect", "42"}, "--expect 42: a status from 100 to 599"},
		{[]string{"http", "client", "--url", "http://x/", "-o", "yaml"}, `unknown output format "yaml"`},
		{[]string{"http", "server", "--status", "99"}, "--status 99: 200 to 599"},
		{[]string{"http", "server", "--listen", "80"}, `--listen "80": want host:port or :port`},
		{[]string{"http", "server", "extra"}, `unknown command "extra"`},
	} {
		_, stderr, code := runCLI(t, tc.args...)
		if code != exitBadInput || !strings.Contains(stderr, tc.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("cnlab %s: exit %d, stderr %q; want 2 and one line containing %q", strings.Join(tc.args, " "), code, stderr, tc.want)
		}
	}
}

// TestHTTPServerClient runs cnlab http server and client as processes on
// loopback: the client exits with 0 when every status is expected, with 1
// (saying so on stderr) when one is not.
func TestHTTPServerClient(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	srv := cnlab("http", "server", "--listen", addr, "--name", "web", "--status", "403")
	stderr, err := srv.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Process.Kill()
		srv.Wait()
	})
	line, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil || !strings.Contains(line, `http server "web" on `+addr) {
		t.Fatalf("server said %q (%v)", line, err)
	}
	url := "http://" + addr + "/deny?x=1"

	out, errs, code := runCLI(t, "http", "client", "--url", url, "--requests", "50", "--expect", "200,403", "-o", "json")
	var r struct {
		Requests    uint64            `json:"requests"`
		Statuses    map[string]uint64 `json:"statuses"`
		Connections uint64            `json:"connections"`
	}
	if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil || r.Requests != 50 || r.Statuses["403"] != 50 || r.Connections != 1 {
		t.Errorf("expected 403s: exit %d, %+v (%v), stderr %q", code, r, err, errs)
	}

	out, errs, code = runCLI(t, "http", "client", "--url", url, "--duration", "200ms", "--mode", "new", "--concurrency", "2")
	if code != exitFail || !strings.Contains(out, "new x2: ") || !strings.Contains(out, "statuses: 403: ") ||
		!strings.Contains(errs, " unexpected (statuses 403: ") || !strings.HasSuffix(errs, "expected [200])\n") {
		t.Errorf("unexpected 403s: exit %d, stdout %q, stderr %q", code, out, errs)
	}

	srv.Process.Kill()
	srv.Wait()
	start := time.Now()
	_, errs, code = runCLI(t, "http", "client", "--url", url, "--requests", "3")
	if code != exitFail || !strings.Contains(errs, "statuses error: 3") || time.Since(start) > 5*time.Second {
		t.Errorf("server gone: exit %d, stderr %q", code, errs)
	}
}
