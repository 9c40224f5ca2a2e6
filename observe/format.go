package observe

import (
	"fmt"
	"strings"
)

// Line renders a flow as one compact line of text, as hubble observe's:
//
//	18:30:01.123456 host0 DROPPED    x/a:41234 -> y/b:80 tcp SYN policy-denied, ingress of y/b [NetworkPolicy y/deny-all spec.ingress]
func Line(f *Flow) string {
	end := func(id, ip string, port uint16) string {
		if id == "" {
			id = ip
		}
		if port == 0 && f.Protocol != "tcp" && f.Protocol != "udp" {
			return id
		}
		return fmt.Sprintf("%s:%d", id, port)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-6s %-10s %s -> %s %s", f.Time.Local().Format("15:04:05.000000"), f.Host, strings.ToUpper(f.Verdict),
		end(f.From, f.SrcIP, f.SrcPort), end(f.To, f.DstIP, f.DstPort), f.Protocol)
	if f.TCPFlags != "" {
		b.WriteString(" " + f.TCPFlags)
	}
	if f.HTTP != nil {
		fmt.Fprintf(&b, " %s %s", f.HTTP.Method, f.HTTP.Path)
		if f.HTTP.Status != 0 {
			fmt.Fprintf(&b, " %d", f.HTTP.Status)
		}
	}
	if f.Reason != "" {
		b.WriteString(" " + f.Reason)
	}
	if f.Service != "" {
		fmt.Fprintf(&b, ", service %s (%s) -> %s", f.Service, f.Frontend, f.Backend)
	}
	if f.Direction != "" && f.Endpoint != "" {
		fmt.Fprintf(&b, ", %s of %s", f.Direction, f.Endpoint)
	}
	if f.Hook != "" {
		fmt.Fprintf(&b, " at %s", f.Hook)
	}
	if f.Policy != nil {
		fmt.Fprintf(&b, " [%s", f.Policy.String())
		if f.Policy.Tier != "" {
			fmt.Fprintf(&b, " (%s", f.Policy.Tier)
			if f.Policy.Priority != nil {
				fmt.Fprintf(&b, ", priority %d", *f.Policy.Priority)
			}
			if f.Policy.Action != "" {
				fmt.Fprintf(&b, ", %s", f.Policy.Action)
			}
			b.WriteString(")")
		}
		b.WriteString("]")
	}
	return b.String()
}

// LostLine renders a lost-events record.
func LostLine(l *Lost) string {
	where := l.Source
	if l.Host != "" {
		where += " on " + l.Host
	}
	return fmt.Sprintf("%s LOST %d events (%s)", l.Time.Local().Format("15:04:05.000000"), l.Lost, strings.TrimSpace(where))
}
