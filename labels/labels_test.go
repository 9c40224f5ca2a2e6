package labels

import (
	"strings"
	"testing"
)

func TestChecks(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		ok   bool
	}{
		{"dns ok", CheckDNSLabel("web-1", 63), true},
		{"dns upper", CheckDNSLabel("Web", 63), false},
		{"dns dash end", CheckDNSLabel("web-", 63), false},
		{"dns dot", CheckDNSLabel("a.b", 63), false},
		{"dns long", CheckDNSLabel("abcdef", 5), false},
		{"dns empty", CheckDNSLabel("", 5), false},
		{"key plain", CheckKey("app"), true},
		{"key prefixed", CheckKey("kubernetes.io/metadata.name"), true},
		{"key underscores", CheckKey("my_key.v1"), true},
		{"key empty prefix", CheckKey("/app"), false},
		{"key bad prefix", CheckKey("Example.com/app"), false},
		{"key two slashes", CheckKey("a/b/c"), false},
		{"key space", CheckKey("a b"), false},
		{"key long", CheckKey(strings.Repeat("a", 64)), false},
		{"key 63", CheckKey(strings.Repeat("a", 63)), true},
		{"value empty", CheckValue(""), true},
		{"value ok", CheckValue("v1.2_beta-3"), true},
		{"value dash start", CheckValue("-x"), false},
		{"port ok", CheckPortName("http-alt"), true},
		{"port digits only", CheckPortName("8080"), false},
		{"port double dash", CheckPortName("a--b"), false},
		{"port long", CheckPortName("abcdefghijklmnop"), false},
		{"port upper", CheckPortName("HTTP"), false},
	} {
		if (tc.err == nil) != tc.ok {
			t.Errorf("%s: err=%v, want ok=%v", tc.name, tc.err, tc.ok)
		}
	}
}

func TestSetAndString(t *testing.T) {
	set := map[string]string{"b": "2", "a": "1"}
	if err := CheckSet(set); err != nil {
		t.Error(err)
	}
	if s := String(set); s != "a=1,b=2" {
		t.Errorf("String = %q", s)
	}
	if err := CheckSet(map[string]string{"ok": "v", "bad key": "v"}); err == nil {
		t.Error("bad key accepted")
	}
}
