package cluster

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cnlab/cnlab/internal/testutil"
)

// imageTestSources are the default sources when busybox-static and iperf3 are
// installed; the test is skipped (failed under CI) otherwise.
func imageTestSources(t *testing.T) imageSources {
	t.Helper()
	src, err := defaultImageSources()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct{ file, pkg string }{{src.busybox, "busybox-static"}, {src.iperf3, "iperf3"}, {src.ping, "iputils-ping"}, {src.sh, "dash"}} {
		if _, err := os.Stat(f.file); err != nil {
			msg := fmt.Sprintf("needs %s (Debian package %s)", f.file, f.pkg)
			if testutil.InCI() {
				t.Fatal(msg)
			}
			t.Skip("skipping: " + msg)
		}
	}
	testutil.RequireTool(t, "ldd", "libc-bin")
	return src
}

// readImageArchive returns the files of a docker-archive tar by name.
func readImageArchive(t *testing.T, file string) map[string][]byte {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = data
	}
	return files
}

// parseImageArchive checks an archive's manifest and config and returns the
// config and the headers of its layer by name.
func parseImageArchive(t *testing.T, img Image) (imageConfig, map[string]*tar.Header) {
	t.Helper()
	files := readImageArchive(t, img.Tar)
	var m []archiveManifest
	if err := json.Unmarshal(files["manifest.json"], &m); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	if len(m) != 1 || len(m[0].Layers) != 1 || len(m[0].RepoTags) != 1 || m[0].RepoTags[0] != img.Ref {
		t.Fatalf("manifest = %+v, want one image %s with one layer", m, img.Ref)
	}
	cfgJSON, ok := files[m[0].Config]
	if !ok {
		t.Fatalf("config %s not in the archive", m[0].Config)
	}
	if want := fmt.Sprintf("%x.json", sha256.Sum256(cfgJSON)); m[0].Config != want {
		t.Errorf("config named %s, want %s", m[0].Config, want)
	}
	var cfg imageConfig
	if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
		t.Fatalf("config: %v", err)
	}
	layer, ok := files[m[0].Layers[0]]
	if !ok {
		t.Fatalf("layer %s not in the archive", m[0].Layers[0])
	}
	if cfg.Architecture != "amd64" || cfg.OS != "linux" || cfg.RootFS.Type != "layers" ||
		len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != fmt.Sprintf("sha256:%x", sha256.Sum256(layer)) {
		t.Errorf("config = %s, want amd64/linux and the layer's diff_id", cfgJSON)
	}
	hs := map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(layer))
	prev := ""
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(imageEpoch) {
			t.Errorf("%s: uid %d gid %d mtime %v, want 0 0 %v", h.Name, h.Uid, h.Gid, h.ModTime, imageEpoch)
		}
		name := strings.TrimSuffix(h.Name, "/")
		if name <= prev {
			t.Errorf("layer entries not sorted: %s after %s", name, prev)
		}
		prev = name
		hs[name] = h
	}
	return cfg, hs
}

func wantImageEntry(t *testing.T, hs map[string]*tar.Header, name string, typ byte, mode int64, link string) {
	t.Helper()
	h, ok := hs[name]
	if !ok {
		t.Errorf("%s missing from the layer", name)
		return
	}
	if h.Typeflag != typ || h.Mode != mode || h.Linkname != link {
		t.Errorf("%s: type %c mode %o link %q, want %c %o %q", name, h.Typeflag, h.Mode, h.Linkname, typ, mode, link)
	}
}

func TestImagesLayout(t *testing.T) {
	src := imageTestSources(t)
	dir := t.TempDir()
	pause, agent, err := buildImages(dir, src)
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range []Image{pause, agent} {
		if !strings.HasPrefix(img.Ref, "localhost/cnlab-") || len(img.Ref[strings.LastIndex(img.Ref, ":")+1:]) != 12 {
			t.Errorf("ref %q, want localhost/cnlab-NAME:<12 hex>", img.Ref)
		}
	}

	cfg, hs := parseImageArchive(t, pause)
	if got := strings.Join(cfg.Config.Entrypoint, "|"); got != "/bin/sh|-c|"+pauseScript {
		t.Errorf("pause entrypoint %q", got)
	}
	wantImageEntry(t, hs, "bin", tar.TypeDir, 0o755, "")
	wantImageEntry(t, hs, "bin/busybox", tar.TypeReg, 0o755, "")
	wantImageEntry(t, hs, "bin/sh", tar.TypeSymlink, 0o777, "busybox")
	wantImageEntry(t, hs, "bin/sleep", tar.TypeSymlink, 0o777, "busybox")

	cfg, hs = parseImageArchive(t, agent)
	if got := strings.Join(cfg.Config.Cmd, " "); got != "/bin/sleep infinity" {
		t.Errorf("agent cmd %q", got)
	}
	if got := strings.Join(cfg.Config.Env, " "); got != "PATH=/bin:/usr/bin" {
		t.Errorf("agent env %q", got)
	}
	wantImageEntry(t, hs, "tmp", tar.TypeDir, 0o1777, "")
	wantImageEntry(t, hs, "etc/passwd", tar.TypeReg, 0o644, "")
	wantImageEntry(t, hs, "etc/group", tar.TypeReg, 0o644, "")
	wantImageEntry(t, hs, "usr/bin/iperf3", tar.TypeReg, 0o755, "")
	wantImageEntry(t, hs, "bin/ping", tar.TypeReg, 0o755, "") // iputils', not busybox's: its output is what experiments parse
	wantImageEntry(t, hs, "bin/sh", tar.TypeReg, 0o755, "")   // dash: busybox's sh would run its own ping
	for _, a := range []string{"head", "cat", "kill", "mkdir", "sleep"} {
		wantImageEntry(t, hs, "bin/"+a, tar.TypeSymlink, 0o777, "busybox")
	}
	libs, err := imageSharedLibs(src.ldd, src.iperf3)
	if err != nil || len(libs) == 0 {
		t.Fatalf("ldd %s: %v, %v", src.iperf3, libs, err)
	}
	for _, l := range libs {
		if h, ok := hs[strings.TrimPrefix(l, "/")]; !ok || h.Typeflag != tar.TypeReg {
			t.Errorf("%s: not a regular file in the agent layer", l)
		}
	}
}

func TestImagesSelfLibs(t *testing.T) {
	src := imageTestSources(t)
	src.self = "/bin/ls" // dynamically linked, like cnlab
	libs, err := imageSharedLibs(src.ldd, src.self)
	if err != nil || len(libs) == 0 {
		t.Skipf("skipping: ldd /bin/ls gives %v, %v", libs, err)
	}
	_, agent, err := buildImages(t.TempDir(), src)
	if err != nil {
		t.Fatal(err)
	}
	_, hs := parseImageArchive(t, agent)
	for _, l := range libs {
		if h, ok := hs[strings.TrimPrefix(l, "/")]; !ok || h.Typeflag != tar.TypeReg {
			t.Errorf("%s (a library of the cnlab binary) is not a regular file in the agent layer", l)
		}
	}
}

func TestImagesStableTag(t *testing.T) {
	src := imageTestSources(t)
	d1, d2 := t.TempDir(), t.TempDir()
	p1, a1, err := buildImages(d1, src)
	if err != nil {
		t.Fatal(err)
	}
	p2, a2, err := buildImages(d2, src)
	if err != nil {
		t.Fatal(err)
	}
	if p1.Ref != p2.Ref || a1.Ref != a2.Ref {
		t.Errorf("same inputs, different refs: %s %s vs %s %s", p1.Ref, a1.Ref, p2.Ref, a2.Ref)
	}
	for _, pair := range [][2]Image{{p1, p2}, {a1, a2}} {
		b1, _ := os.ReadFile(pair[0].Tar)
		b2, _ := os.ReadFile(pair[1].Tar)
		if !bytes.Equal(b1, b2) {
			t.Errorf("%s: the two tars differ", pair[0].Ref)
		}
	}
	// Cached: the same tar is returned and not rewritten.
	st1, _ := os.Stat(a1.Tar)
	_, a3, err := buildImages(d1, src)
	if err != nil || a3 != a1 {
		t.Fatalf("second build: %v, %v, want %v", a3, err, a1)
	}
	if st3, _ := os.Stat(a3.Tar); !os.SameFile(st1, st3) {
		t.Errorf("cached tar was rewritten")
	}
	// Other content, other tag.
	other := filepath.Join(t.TempDir(), "iperf3")
	data, err := os.ReadFile(src.iperf3)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, append(data, 0), 0o755); err != nil {
		t.Fatal(err)
	}
	src.iperf3 = other
	p4, a4, err := buildImages(d1, src)
	if err != nil {
		t.Fatal(err)
	}
	if p4.Ref != p1.Ref || a4.Ref == a1.Ref {
		t.Errorf("changed iperf3: pause %s (was %s), agent %s (was %s); want pause same, agent new", p4.Ref, p1.Ref, a4.Ref, a1.Ref)
	}
	entries, _ := os.ReadDir(d1)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("temporary file %s left in the cache", e.Name())
		}
	}
}

func TestImagesMissingInput(t *testing.T) {
	src := imageTestSources(t)
	for _, c := range []struct {
		set  func(*imageSources)
		want string
	}{
		{func(s *imageSources) { s.busybox = "/nonexistent/busybox" }, "/nonexistent/busybox is missing (install the Debian package busybox-static)"},
		{func(s *imageSources) { s.iperf3 = "/nonexistent/iperf3" }, "/nonexistent/iperf3 is missing (install the Debian package iperf3)"},
		{func(s *imageSources) { s.ping = "/nonexistent/ping" }, "/nonexistent/ping is missing (install the Debian package iputils-ping)"},
		{func(s *imageSources) { s.sh = "/nonexistent/dash" }, "/nonexistent/dash is missing (install the Debian package dash)"},
		{func(s *imageSources) { s.ldd = "/nonexistent/ldd" }, "/nonexistent/ldd is missing (install the Debian package libc-bin)"},
	} {
		s := src
		c.set(&s)
		dir := t.TempDir()
		_, _, err := buildImages(dir, s)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want it to say %q", err, c.want)
		}
	}
}

// TestImagesContainerd imports both images into a private containerd, runs
// the agent image with the cnlab binary bind-mounted into it, and checks
// that the pause image stops at once on SIGTERM.
func TestImagesContainerd(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "containerd", "containerd")
	testutil.RequireTool(t, "ctr", "containerd")
	testutil.RequireTool(t, "runc", "runc")
	src := imageTestSources(t)

	// cnlab itself, built from this tree: its libraries must be in the image.
	cnlab := filepath.Join(t.TempDir(), "cnlab")
	if out, err := exec.Command("go", "build", "-o", cnlab, "../cmd/cnlab").CombinedOutput(); err != nil {
		t.Fatalf("go build cnlab: %v\n%s", err, out)
	}
	src.self = cnlab
	pause, agent, err := buildImages(t.TempDir(), src)
	if err != nil {
		t.Fatal(err)
	}

	ctrd := startImageContainerd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ctr := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", ctrd.sock, "-n", "cnlabtest"}, args...)...).CombinedOutput()
		return string(out), err
	}
	for _, img := range []Image{pause, agent} {
		if out, err := ctr("images", "import", img.Tar); err != nil {
			t.Fatalf("ctr images import %s: %v\n%s", img.Tar, err, out)
		}
	}
	// runc state, stdio fifos and cgroups (none: "") away from the host's.
	runFlags := []string{"--runc-root", filepath.Join(ctrd.dir, "runc"), "--fifo-dir", filepath.Join(ctrd.dir, "fifo"), "--cgroup", ""}
	out, err := ctr(append(append([]string{"run", "--rm", "--net-host"}, runFlags...),
		"--mount", "type=bind,src="+cnlab+",dst=/cnlab,options=rbind:ro",
		agent.Ref, "cnlabtest-agent", "/bin/sh", "-c",
		"iperf3 --version && ping -c1 127.0.0.1 && head -c5 /etc/passwd && echo && cat /etc/group && kill -0 $$ && mkdir /tmp/x && /cnlab version")...)
	t.Logf("agent:\n%s", out)
	if err != nil {
		t.Fatalf("running the agent image: %v", err)
	}
	for _, want := range []string{"iperf 3", "icmp_seq=1 ", "1 received", "root:", "root:x:0:"} {
		if !strings.Contains(out, want) {
			t.Errorf("agent output lacks %q", want)
		}
	}

	if out, err := ctr(append(append([]string{"run", "-d"}, runFlags...), pause.Ref, "cnlabtest-pause")...); err != nil {
		t.Fatalf("running the pause image: %v\n%s", err, out)
	}
	time.Sleep(300 * time.Millisecond) // let the shell set its trap
	// As PID 1 it must reap the orphans the kernel hands it.
	var initPID int
	out, _ = ctr("task", "ls")
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "cnlabtest-pause" {
			fmt.Sscanf(f[1], "%d", &initPID)
		}
	}
	if initPID == 0 {
		t.Fatalf("no pid of the pause task in:\n%s", out)
	}
	execs := time.Now()
	for i := 0; i < 10; i++ {
		if out, err := ctr(append([]string{"task", "exec", "--exec-id", fmt.Sprintf("orphan%d", i), "--fifo-dir", filepath.Join(ctrd.dir, "fifo")},
			"cnlabtest-pause", "/bin/sh", "-c", "sleep 3 </dev/null >/dev/null 2>&1 & exit 0")...); err != nil {
			t.Fatalf("ctr task exec: %v\n%s", err, out)
		}
	}
	t.Logf("10 orphans made in %v", time.Since(execs))
	if n, _ := imageTestChildren(initPID); n != 11 { // the long sleep and the orphans
		t.Errorf("the pause image's PID 1 has %d children right after 10 orphans were made, want 11", n)
	}
	// The orphans exit 3 s after they were made: PID 1 must have reaped
	// them all 10 s after the last was made (no zombie left).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		n, zombies := imageTestChildren(initPID)
		if n == 1 && zombies == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the pause image's PID 1 has %d children, %d of them zombies, 7 s after its 10 orphans exited; want 1 and 0", n, zombies)
			break
		}
	}
	start := time.Now()
	if out, err := ctr("task", "kill", "-s", "TERM", "cnlabtest-pause"); err != nil {
		t.Fatalf("ctr task kill: %v\n%s", err, out)
	}
	stopped := false
	for time.Since(start) < 2*time.Second {
		out, _ := ctr("task", "ls")
		if !strings.Contains(out, "cnlabtest-pause") || strings.Contains(out, "STOPPED") {
			stopped = true
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("pause stopped after %v", time.Since(start))
	if !stopped {
		t.Errorf("pause did not stop within 2 s of SIGTERM")
		ctr("task", "kill", "-s", "KILL", "cnlabtest-pause")
		time.Sleep(500 * time.Millisecond)
	}
	ctr("task", "delete", "cnlabtest-pause")
	if out, err := ctr("containers", "delete", "cnlabtest-pause"); err != nil {
		t.Errorf("ctr containers delete: %v\n%s", err, out)
	}
}

// imageTestChildren counts the children of a process, and those of them that are
// zombies.
func imageTestChildren(pid int) (n, zombies int) {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, _ := os.ReadFile(p)
		// pid (comm) state ppid ...
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) >= 2 && f[1] == fmt.Sprint(pid) {
			n++
			if f[0] == "Z" {
				zombies++
			}
		}
	}
	return n, zombies
}

type imageContainerd struct {
	dir, sock string
}

// startImageContainerd starts a containerd of the test's own (root, state and
// socket in a directory under /run) and registers its teardown: kill its
// shims and itself, unmount what is left under its directory, remove the
// shim sockets it made in /run/containerd/s and the directory.
func startImageContainerd(t *testing.T) imageContainerd {
	t.Helper()
	dir, err := os.MkdirTemp("/run", "cnlabimg-")
	if err != nil {
		t.Fatal(err)
	}
	c := imageContainerd{dir: dir, sock: filepath.Join(dir, "c.sock")}
	shimSockets := func() map[string]bool {
		m := map[string]bool{}
		es, _ := os.ReadDir("/run/containerd/s")
		for _, e := range es {
			m[e.Name()] = true
		}
		return m
	}
	_, runDirExisted := os.Stat("/run/containerd")
	before := shimSockets()
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.sock, c.sock+".ttrpc", filepath.Join(dir, "opt"))
	cfgFile := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("containerd", "--config", cfgFile)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Shims of this containerd name its socket in their command line.
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			b, _ := os.ReadFile(p)
			if bytes.Contains(b, []byte(c.sock)) && !strings.HasPrefix(string(b), "containerd\x00") {
				var pid int
				fmt.Sscanf(strings.TrimPrefix(p, "/proc/"), "%d", &pid)
				if pid != cmd.Process.Pid {
					if proc, err := os.FindProcess(pid); err == nil {
						proc.Kill()
					}
				}
			}
		}
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logf.Close()
		mounts, _ := os.ReadFile("/proc/self/mountinfo")
		var under []string
		for _, line := range strings.Split(string(mounts), "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
				under = append(under, f[4])
			}
		}
		for i := len(under) - 1; i >= 0; i-- {
			if err := exec.Command("umount", "-l", under[i]).Run(); err != nil {
				t.Errorf("umount %s: %v", under[i], err)
			}
		}
		for s := range shimSockets() {
			if !before[s] {
				os.Remove(filepath.Join("/run/containerd/s", s))
			}
		}
		for _, id := range []string{"cnlabtest-agent", "cnlabtest-pause"} {
			cgs, _ := filepath.Glob("/sys/fs/cgroup/*/" + id)
			for _, cg := range cgs {
				os.Remove(cg)
			}
		}
		if runDirExisted != nil { // /run/containerd is ours: remove what is empty
			os.Remove("/run/containerd/s")
			os.Remove("/run/containerd/fifo")
			os.Remove("/run/containerd")
		}
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(dir, "containerd.log")); err == nil {
				t.Logf("containerd log:\n%s", b)
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("removing %s: %v", dir, err)
		}
	})
	for i := 0; i < 100; i++ {
		if _, err := os.Stat(c.sock); err == nil {
			return c
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("containerd did not create %s in 5 s", c.sock)
	return c
}
