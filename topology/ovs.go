package topology

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/rundir"
	"github.com/vishvananda/netlink"
	vns "github.com/vishvananda/netns"
)

// Open vSwitch in chains (seed 001, figures 5-7). The kernel module is not
// needed: cnlab runs its own ovsdb-server and ovs-vswitchd per lab, inside
// the lab's OvS namespace, with the userspace datapath (datapath_type
// netdev), their files under the lab's run directory. Nothing of the
// system's OvS is used or touched. The daemons live in a namespace of the
// lab, so deleting the lab (Teardown) kills them with its other processes,
// even after a crash.

// Links between the OvS bridges of one segment (seed 001's figure 4).
const (
	SwitchPatch = "patch" // OvS patch ports: one datapath, as if one switch
	SwitchVeth  = "veth"  // a veth pair between two bridges
)

// MaxSwitches bounds the bridges in series on one segment (the seed went
// to 20).
const MaxSwitches = 64

// OVSPackage is the Debian package with the OvS daemons.
const OVSPackage = "openvswitch-switch"

// ovsTools are the programs a lab with OvS needs.
var ovsTools = []string{"ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-appctl"}

// ovsSchema is where Debian installs the database schema.
var ovsSchema = "/usr/share/openvswitch/vswitch.ovsschema"

// OVSNetns names the namespace of a lab's OvS daemons and bridges.
func OVSNetns(lab string) string { return LabNetnsPrefix(lab) + "ovs" }

// ovsDir holds a lab's OvS database, sockets, pid and log files.
func ovsDir(lab string) string { return filepath.Join(rundir.Lab(lab), "ovs") }

// CheckOVS reports whether this machine can run a lab with OvS.
func CheckOVS() error {
	var missing []string
	for _, t := range ovsTools {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("Open vSwitch is not installed (%s missing): apt-get install %s", strings.Join(missing, ", "), OVSPackage)
	}
	if _, err := os.Stat(ovsSchema); err != nil {
		return fmt.Errorf("Open vSwitch's schema %s is missing: reinstall %s", ovsSchema, OVSPackage)
	}
	return nil
}

// ovs drives one lab's daemons.
type ovs struct {
	lab, ns, dir string
}

// env keeps every OvS file of the lab in its directory, away from the
// system's /var/run/openvswitch.
func (o *ovs) env() []string {
	return append(os.Environ(), "OVS_RUNDIR="+o.dir, "OVS_LOGDIR="+o.dir, "OVS_DBDIR="+o.dir, "OVS_SYSCONFDIR="+o.dir)
}

func (o *ovs) run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = o.env()
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := netns.Start(o.ns, cmd); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

func (o *ovs) vsctl(ctx context.Context, args ...string) error {
	return o.run(ctx, "ovs-vsctl", append([]string{"--db=unix:" + filepath.Join(o.dir, "db.sock"), "--timeout=20"}, args...)...)
}

// startOVS creates the lab's OvS namespace and starts its database and
// switch daemons there.
func startOVS(ctx context.Context, lab string) (*ovs, error) {
	if err := CheckOVS(); err != nil {
		return nil, err
	}
	o := &ovs{lab: lab, ns: OVSNetns(lab), dir: ovsDir(lab)}
	if err := os.RemoveAll(o.dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return nil, err
	}
	if err := newNetns(o.ns, false); err != nil {
		return nil, err
	}
	db := filepath.Join(o.dir, "conf.db")
	if err := o.run(ctx, "ovsdb-tool", "create", db, ovsSchema); err != nil {
		return nil, err
	}
	daemon := func(name string) []string {
		return []string{"--pidfile=" + filepath.Join(o.dir, name+".pid"), "--unixctl=" + filepath.Join(o.dir, name+".ctl"),
			"--log-file=" + filepath.Join(o.dir, name+".log"), "--detach", "--no-chdir"}
	}
	if err := o.run(ctx, "ovsdb-server", append([]string{db, "--remote=punix:" + filepath.Join(o.dir, "db.sock")}, daemon("ovsdb-server")...)...); err != nil {
		return nil, err
	}
	if err := o.vsctl(ctx, "--no-wait", "init"); err != nil {
		return nil, err
	}
	if err := o.run(ctx, "ovs-vswitchd", append([]string{"unix:" + filepath.Join(o.dir, "db.sock")}, daemon("ovs-vswitchd")...)...); err != nil {
		return nil, err
	}
	return o, nil
}

// ovsSegment joins a segment's neighbours through the lab's OvS: a veth
// pair from each neighbour to a port of a bridge, and between them
// Switches bridges in series (b<i>x0 ... ), each joined to the next by a
// pair of patch ports or a veth pair. The userspace datapath does not
// complete partial checksums, so transmit checksum offload is turned off
// on both ends of every veth pair.
func (b *builder) ovsSegment(ctx context.Context, o *ovs, i int, sg Segment, lh *netlink.Handle, lfd vns.NsHandle, rh *netlink.Handle, rfd vns.NsHandle,
	open func(string) (*netlink.Handle, vns.NsHandle, error)) error {
	sh, sfd, err := open(o.ns)
	if err != nil {
		return err
	}
	c := b.spec.Chain
	left, right := fmt.Sprintf("s%dl", i), fmt.Sprintf("s%dr", i)
	if err := vethPair(sh, left, lh, lfd, sg.LeftDev, b.spec.MTU, 0); err != nil {
		return err
	}
	if err := vethPair(sh, right, rh, rfd, sg.RightDev, b.spec.MTU, 0); err != nil {
		return err
	}
	offload := []struct{ ns, dev string }{{o.ns, left}, {o.ns, right}, {sg.LeftNetns, sg.LeftDev}, {sg.RightNetns, sg.RightDev}}
	bridge := func(k int) string { return fmt.Sprintf("b%dx%d", i, k) }
	args := []string{}
	add := func(a ...string) { args = append(append(args, "--"), a...) }
	for k := 0; k < c.Switches; k++ {
		add("add-br", bridge(k))
		add("set", "bridge", bridge(k), "datapath_type=netdev")
	}
	add("add-port", bridge(0), left)
	add("add-port", bridge(c.Switches-1), right)
	for k := 0; k+1 < c.Switches; k++ {
		a, z := fmt.Sprintf("p%dx%da", i, k), fmt.Sprintf("p%dx%dz", i, k)
		if c.SwitchLink == SwitchVeth {
			if err := vethPair(sh, a, sh, sfd, z, b.spec.MTU, 0); err != nil {
				return err
			}
			offload = append(offload, struct{ ns, dev string }{o.ns, a}, struct{ ns, dev string }{o.ns, z})
			add("add-port", bridge(k), a)
			add("add-port", bridge(k+1), z)
			continue
		}
		add("add-port", bridge(k), a, "--", "set", "interface", a, "type=patch", "options:peer="+z)
		add("add-port", bridge(k+1), z, "--", "set", "interface", z, "type=patch", "options:peer="+a)
	}
	if err := o.vsctl(ctx, args[1:]...); err != nil {
		return err
	}
	for _, end := range offload {
		if _, err := netns.Run(ctx, end.ns, nil, "ethtool", "-K", end.dev, "tx", "off"); err != nil {
			return err
		}
	}
	return nil
}

// stopOVS stops a lab's OvS daemons, if it has any, before its namespaces
// go: ovs-vswitchd is asked to exit (closing its ports' packet sockets
// itself), then ovsdb-server is terminated, and both are awaited. Killed
// with the namespace instead, a daemon's sockets are released after it
// has left the namespace, and the namespace outlives the teardown's
// check. Daemons that do not stop in time are killed.
func stopOVS(lab string) error {
	dir := ovsDir(lab)
	if _, err := os.Stat(dir); err != nil {
		return nil
	}
	var errs []string
	for _, d := range []string{"ovs-vswitchd", "ovsdb-server"} {
		b, err := os.ReadFile(filepath.Join(dir, d+".pid"))
		if err != nil {
			continue
		}
		var pid int
		if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &pid); err != nil || pid <= 1 {
			continue
		}
		if d == "ovs-vswitchd" {
			cmd := exec.Command("ovs-appctl", "-t", filepath.Join(dir, d+".ctl"), "--timeout=5", "exit", "--cleanup")
			_ = cmd.Run()
		} else {
			_ = syscall.Kill(pid, syscall.SIGTERM)
		}
		if !waitExit(pid, 5*time.Second) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			if !waitExit(pid, 5*time.Second) {
				errs = append(errs, fmt.Sprintf("%s (pid %d) does not exit", d, pid))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("open vswitch of lab %s: %s", lab, strings.Join(errs, "; "))
	}
	return nil
}

// waitExit waits until pid has exited (gone, or a zombie: its files and
// namespaces released).
func waitExit(pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		// The state follows the command's closing parenthesis.
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'Z' {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// removeOVSDir removes a lab's OvS files once its daemons are gone.
// The lab's directory goes too when nothing else is in it (a lab built
// without package lab, whose ledger would live there).
func removeOVSDir(lab string) error {
	if _, err := os.Stat(ovsDir(lab)); err != nil {
		return nil
	}
	if err := os.RemoveAll(ovsDir(lab)); err != nil {
		return err
	}
	_ = os.Remove(rundir.Lab(lab)) // fails, as it should, when not empty
	return nil
}
