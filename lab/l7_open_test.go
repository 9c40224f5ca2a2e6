package lab

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/probe"
)

// TestL7OpenConnections checks, on every datapath, from x/c (x/a's host)
// and x/b (the other host) to x/a, what the proxy does with a request
// beyond judging it:
//   - target: the request-target the rules judged is the one the server
//     receives, byte for byte (a target holding a byte Go's URL encoder
//     escapes was decoded and escaped again: %2e%2e%2f became ../), or the
//     proxy refuses it with 400 and the server receives nothing;
//   - half-close: a client that sends an allowed request and then shuts
//     its side down (HTTP/1.0 clients, nc -N) gets its answer;
//   - rejudge: a keep-alive connection opened under "GET /public" is
//     judged by the rules of each later change: a port that is no longer
//     an L7 port closes it when L3/L4 no longer allows it, and passes its
//     requests when L3/L4 does (the model's verdict for a new connection).
func TestL7OpenConnections(t *testing.T) {
	for _, dp := range datapaths() {
		t.Run(dp, func(t *testing.T) {
			spec, srv := publicLab(t, "t-l7o-"+shortName(dp), dp)
			ctx := context.Background()
			dst, err := spec.Endpoint("x/a")
			if err != nil {
				t.Fatal(err)
			}
			addr := netip.AddrPortFrom(dst.IP, scenarios.L7Port)
			apply := func(t *testing.T, y string) *policy.Model {
				t.Helper()
				pols, err := policy.Parse([]byte(y), "open.yaml")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := Replace(ctx, spec.Name, pols); err != nil {
					t.Fatal(err)
				}
				m, err := policy.NewModel(spec, pols)
				if err != nil {
					t.Fatal(err)
				}
				return m
			}
			head := "apiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata: {name: web, namespace: x}\nspec:\n  endpointSelector:\n    matchLabels: {app: web}\n  ingress:\n"
			l7 := func(path string) string {
				return head + "  - fromEndpoints:\n    - {}\n    toPorts:\n    - ports:\n      - {port: \"80\", protocol: TCP}\n      rules:\n        http:\n        - {method: GET, path: \"" + path + "\"}\n"
			}
			froms := []string{"x/c", "x/b"}

			t.Run("target", func(t *testing.T) {
				apply(t, l7(`/public/[^/.]*`))
				targets := []string{
					"/public/%2e%2e%2fprivate%2fx{%2f%2e%2e",
					"/public/%2E%2E%2Fprivate%2Fx|",
					"/public/a%2fb\"c",
					"/public/x^%5C",
					"/public/\xc3\xa9%2f%2e%2e",
					"/public/plain",
				}
				for _, from := range froms {
					src, _ := spec.Endpoint(from)
					for _, target := range targets {
						status, body, err := rawHTTP(src.Netns, addr, "GET "+target+" HTTP/1.1\r\nHost: web\r\nConnection: close\r\n\r\n", false)
						want := fmt.Sprintf("%s GET %s\n", dst.ID(), target)
						switch {
						case err != nil:
							t.Errorf("%s GET %q: %v", from, target, err)
						case status == 200 && body != want:
							t.Errorf("%s GET %q: the rules judged %q, the server received %q", from, target, target, strings.TrimSpace(body))
						case status != 200 && status != 400:
							t.Errorf("%s GET %q: status %d %q, want 200 with the target unchanged or 400", from, target, status, body)
						}
					}
				}
			})

			t.Run("half-close", func(t *testing.T) {
				apply(t, l7("/public"))
				for _, from := range froms {
					src, _ := spec.Endpoint(from)
					for _, proto := range []string{"HTTP/1.1", "HTTP/1.0"} {
						status, body, err := rawHTTP(src.Netns, addr, "GET /public "+proto+"\r\nHost: web\r\n\r\n", true)
						if err != nil || status != 200 || body != dst.ID()+" GET /public\n" {
							t.Errorf("%s GET /public %s, then shutdown(SHUT_WR): status %d %q %v, want 200 from the server", from, proto, status, body, err)
						}
					}
				}
			})

			t.Run("rejudge", func(t *testing.T) {
				// After "GET /public from x", on the same connection:
				// nobody on port 80 (x allowed on 81 only); an L3/L4 allow
				// of namespace y only; an L3/L4 allow of namespace x.
				changes := []struct{ name, yaml string }{
					{"nobody on port 80", head + "  - fromEndpoints:\n    - {}\n    toPorts:\n    - ports:\n      - {port: \"81\", protocol: TCP}\n"},
					{"L3/L4 allow of y", head + "  - fromEndpoints:\n    - matchLabels: {k8s:io.kubernetes.pod.namespace: y}\n"},
					{"L3/L4 allow of x", head + "  - fromEndpoints:\n    - {}\n"},
					{"GET /other", l7("/other")},
				}
				for _, ch := range changes {
					for _, from := range froms {
						src, _ := spec.Endpoint(from)
						apply(t, l7("/public"))
						c, br, err := dialIn(src.Netns, addr)
						if err != nil {
							t.Fatalf("%s: %v", from, err)
						}
						if status, _, err := roundTrip(c, br, "GET /public HTTP/1.1\r\nHost: web\r\n\r\n"); status != 200 {
							c.Close()
							t.Fatalf("%s GET /public before the change: %d %v", from, status, err)
						}
						m := apply(t, ch.yaml)
						nonce := probe.Nonce()
						status, body, err := roundTrip(c, br, "GET /private HTTP/1.1\r\nHost: web\r\nX-Cnlab-Probe: "+nonce+"\r\n\r\n")
						c.Close()
						want := m.HTTPVerdict(src, dst, scenarios.L7Port, probe.HTTPRequest{Method: "GET", Path: "/private"}.Model(addr.String())).Status
						reached := srv.Received(nonce) != ""
						switch {
						case want == 200 && (status != 200 || !reached):
							t.Errorf("%s, then %q: GET /private on the open connection: %d %q %v (server reached %v), want 200 as on a new connection", from, ch.name, status, body, err, reached)
						case want == 403 && (status != 403 || reached):
							t.Errorf("%s, then %q: GET /private on the open connection: %d %q %v (server reached %v), want 403", from, ch.name, status, body, err, reached)
						case want == 0 && (status != 0 || reached):
							t.Errorf("%s, then %q: GET /private on the open connection: %d %q (server reached %v), want the connection closed (L3/L4 denies it now)", from, ch.name, status, body, reached)
						}
					}
				}
			})
		})
	}
}

// dialIn opens a TCP connection from namespace ns.
func dialIn(ns string, dst netip.AddrPort) (net.Conn, *bufio.Reader, error) {
	var c net.Conn
	err := netns.Do(ns, func() error {
		var err error
		c, err = net.DialTimeout("tcp4", dst.String(), 2*time.Second)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return c, bufio.NewReader(c), nil
}

// roundTrip writes one raw request and reads its answer: status 0 when
// the connection ends without one.
func roundTrip(c net.Conn, br *bufio.Reader, req string) (int, string, error) {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		return 0, "", err
	}
	method, _, _ := strings.Cut(req, " ")
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// rawHTTP sends one raw request on a new connection from ns, shutting the
// connection's sending side down after it when halfClose, and returns
// the answer.
func rawHTTP(ns string, dst netip.AddrPort, req string, halfClose bool) (int, string, error) {
	c, br, err := dialIn(ns, dst)
	if err != nil {
		return 0, "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		return 0, "", err
	}
	if halfClose {
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			return 0, "", err
		}
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}
