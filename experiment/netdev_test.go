package experiment

import "testing"

func TestParseNetDev(t *testing.T) {
	data := []byte(`Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 5635013 1537    0    0    0     0          0         0 5635013 1537    0    0    0     0       0          0
  eth0: 1500000    1000    0    0    0     0          0         0        0       0    0    0    0     0       0          0
  eth1:    3000       2    0    0    0     0          0         0        0       0    0    0    0     0       0          0
`)
	p, b, ok := parseNetDev(data)
	if !ok || p != 1002 || b != 1503000 {
		t.Fatalf("parseNetDev = %v packets, %v bytes, %v; want 1002, 1503000, true (lo left out)", p, b, ok)
	}
	if _, _, ok := parseNetDev([]byte("garbage\n")); ok {
		t.Fatal("parseNetDev of garbage: ok")
	}
}
