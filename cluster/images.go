package cluster

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

// Image is one image cnlab builds for its local cluster.
type Image struct {
	Ref string // e.g. "localhost/cnlab-agent:1a2b3c4d5e6f" (tag = first 12 hex of a sha256 over the content)
	Tar string // path of its docker-archive tar
}

// pauseScript is the pause image's entrypoint: it sleeps until SIGTERM or
// SIGINT and, as PID 1, reaps the orphans the kernel hands it (ash's wait
// reaps any child).
const pauseScript = "trap 'exit 0' TERM INT; while :; do sleep 2147483647 & wait $!; done"

// imageFormat is hashed into every tag: bump it when the layout of the
// images changes, so old cached tars are not taken for new ones.
const imageFormat = "cnlab-image 1"

// imageEpoch is every file's mtime in the images, so the tars are reproducible.
var imageEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// imageSources are the host files the images are made of.
type imageSources struct {
	busybox string // Debian busybox-static
	iperf3  string // Debian iperf3
	ping    string // Debian iputils-ping: the ping a lab's endpoints run, whose output the experiments parse
	sh      string // Debian dash: busybox-static's sh runs its own applets before files (ping would be busybox's)
	self    string // the cnlab binary, whose shared libraries go into the agent image
	ldd     string // Debian libc-bin
}

func defaultImageSources() (imageSources, error) {
	self, err := os.Executable()
	if err != nil {
		return imageSources{}, fmt.Errorf("images: finding cnlab's own binary: %w", err)
	}
	return imageSources{busybox: "/bin/busybox", iperf3: "/usr/bin/iperf3", ping: "/bin/ping", sh: "/bin/dash", self: self, ldd: "ldd"}, nil
}

// BuildImages writes (or finds already written, keyed by content) the pause
// image and the agent image into cacheDir and returns them.
func BuildImages(cacheDir string) (pause, agent Image, err error) {
	src, err := defaultImageSources()
	if err != nil {
		return Image{}, Image{}, err
	}
	return buildImages(cacheDir, src)
}

func buildImages(cacheDir string, src imageSources) (pause, agent Image, err error) {
	if err := requireImageInput(src.busybox, "busybox-static"); err != nil {
		return Image{}, Image{}, err
	}
	if err := requireImageInput(src.iperf3, "iperf3"); err != nil {
		return Image{}, Image{}, err
	}
	if err := requireImageInput(src.ping, "iputils-ping"); err != nil {
		return Image{}, Image{}, err
	}
	if err := requireImageInput(src.sh, "dash"); err != nil {
		return Image{}, Image{}, err
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return Image{}, Image{}, fmt.Errorf("images: %w", err)
	}
	pauseSpec := imageSpec{
		name:       "cnlab-pause",
		env:        []string{"PATH=/bin"},
		entrypoint: []string{"/bin/sh", "-c", pauseScript},
	}
	pauseSpec.file("bin/busybox", src.busybox)
	pauseSpec.symlink("bin/sh", "busybox")
	// busybox sh runs no applet without its link (sleep: not found).
	pauseSpec.symlink("bin/sleep", "busybox")
	if pause, err = pauseSpec.write(cacheDir); err != nil {
		return Image{}, Image{}, err
	}

	agentSpec := imageSpec{
		name: "cnlab-agent",
		env:  []string{"PATH=/bin:/usr/bin"},
		cmd:  []string{"/bin/sleep", "infinity"},
	}
	agentSpec.file("bin/busybox", src.busybox)
	applets, err := exec.Command(src.busybox, "--list").Output()
	if err != nil {
		return Image{}, Image{}, fmt.Errorf("images: %s --list: %w", src.busybox, err)
	}
	for _, a := range strings.Fields(string(applets)) {
		if a != "busybox" && a != "ping" && a != "sh" && !strings.Contains(a, "/") {
			agentSpec.symlink("bin/"+a, "busybox")
		}
	}
	agentSpec.file("usr/bin/iperf3", src.iperf3)
	agentSpec.file("bin/ping", src.ping)
	agentSpec.file("bin/sh", src.sh)
	for _, bin := range []string{src.iperf3, src.ping, src.sh, src.self} {
		libs, err := imageSharedLibs(src.ldd, bin)
		if err != nil {
			return Image{}, Image{}, err
		}
		for _, l := range libs {
			agentSpec.file(strings.TrimPrefix(l, "/"), l)
		}
	}
	agentSpec.dir("tmp", 0o1777)
	agentSpec.content("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n")
	agentSpec.content("etc/group", "root:x:0:\n")
	agentSpec.dir("root", 0o700)
	if agent, err = agentSpec.write(cacheDir); err != nil {
		return Image{}, Image{}, err
	}
	return pause, agent, nil
}

// requireImageInput says which Debian package provides a missing input.
func requireImageInput(file, pkg string) error {
	if _, err := os.Stat(file); err != nil {
		return fmt.Errorf("images: %s is missing (install the Debian package %s): %w", file, pkg, err)
	}
	return nil
}

// imageSharedLibs lists the absolute paths ldd names for bin, the dynamic loader
// included; a static binary has none.
func imageSharedLibs(ldd, bin string) ([]string, error) {
	out, err := exec.Command(ldd, bin).CombinedOutput()
	text := string(out)
	if strings.Contains(text, "not a dynamic executable") || strings.Contains(text, "statically linked") {
		return nil, nil
	}
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("images: %s is missing (install the Debian package libc-bin): %w", ldd, err)
		}
		return nil, fmt.Errorf("images: ldd %s: %v: %s", bin, err, strings.TrimSpace(text))
	}
	var libs []string
	for _, line := range strings.Split(text, "\n") {
		// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or
		// "/lib64/ld-linux-x86-64.so.2 (0x...)"; linux-vdso has no path.
		if i := strings.Index(line, "=>"); i >= 0 {
			line = line[i+2:]
		}
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "/") {
			if strings.Contains(line, "not found") {
				return nil, fmt.Errorf("images: ldd %s: %s", bin, strings.TrimSpace(line))
			}
			continue
		}
		libs = append(libs, path.Clean(f[0]))
	}
	return libs, nil
}

// imageEntry is one file of an image's single layer.
type imageEntry struct {
	name string // relative, no leading slash
	typ  byte
	mode int64
	link string // symlink target
	src  string // host file of a regular file (followed if a symlink)
	data []byte // or its content
}

type imageSpec struct {
	name            string
	env, entrypoint []string
	cmd             []string
	entries         map[string]imageEntry
}

func (s *imageSpec) add(e imageEntry) {
	if s.entries == nil {
		s.entries = map[string]imageEntry{}
	}
	for d := path.Dir(e.name); d != "."; d = path.Dir(d) {
		if _, ok := s.entries[d]; !ok {
			s.entries[d] = imageEntry{name: d, typ: tar.TypeDir, mode: 0o755}
		}
	}
	s.entries[e.name] = e
}

func (s *imageSpec) dir(name string, mode int64) {
	s.add(imageEntry{name: name, typ: tar.TypeDir, mode: mode})
}

func (s *imageSpec) file(name, src string) {
	s.add(imageEntry{name: name, typ: tar.TypeReg, src: src})
}

func (s *imageSpec) content(name, data string) {
	s.add(imageEntry{name: name, typ: tar.TypeReg, mode: 0o644, data: []byte(data)})
}

func (s *imageSpec) symlink(name, target string) {
	s.add(imageEntry{name: name, typ: tar.TypeSymlink, mode: 0o777, link: target})
}

// sorted returns the entries by name, so that a directory precedes its
// contents, with each host file's mode filled in.
func (s *imageSpec) sorted() ([]imageEntry, error) {
	es := make([]imageEntry, 0, len(s.entries))
	for _, e := range s.entries {
		if e.src != "" {
			st, err := os.Stat(e.src)
			if err != nil {
				return nil, fmt.Errorf("images: %w", err)
			}
			e.mode = int64(st.Mode().Perm())
		}
		es = append(es, e)
	}
	sort.Slice(es, func(i, j int) bool { return es[i].name < es[j].name })
	return es, nil
}

// runtimeConfig is the "config" part of the image config.
type runtimeConfig struct {
	Env        []string `json:"Env,omitempty"`
	Entrypoint []string `json:"Entrypoint,omitempty"`
	Cmd        []string `json:"Cmd,omitempty"`
}

type imageConfig struct {
	Architecture string        `json:"architecture"`
	OS           string        `json:"os"`
	Created      time.Time     `json:"created"`
	Config       runtimeConfig `json:"config"`
	RootFS       struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
	History []struct {
		Created   time.Time `json:"created"`
		CreatedBy string    `json:"created_by"`
	} `json:"history,omitempty"`
}

type archiveManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// tag hashes everything the image is made of: the layout version, the
// runtime config, and each entry's name, type, mode, link and content.
func (s *imageSpec) tag(es []imageEntry) (string, error) {
	h := sha256.New()
	cfg, _ := json.Marshal(runtimeConfig{Env: s.env, Entrypoint: s.entrypoint, Cmd: s.cmd})
	fmt.Fprintf(h, "%s\n%s\n%s\n", imageFormat, s.name, cfg)
	for _, e := range es {
		fmt.Fprintf(h, "%q %c %o %q ", e.name, e.typ, e.mode, e.link)
		if e.typ == tar.TypeReg {
			c := sha256.Sum256(e.data)
			if e.src != "" {
				f, err := os.Open(e.src)
				if err != nil {
					return "", fmt.Errorf("images: %w", err)
				}
				fh := sha256.New()
				_, err = io.Copy(fh, f)
				f.Close()
				if err != nil {
					return "", fmt.Errorf("images: reading %s: %w", e.src, err)
				}
				fh.Sum(c[:0])
			}
			fmt.Fprintf(h, "%x", c)
		}
		fmt.Fprintln(h)
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

// write writes the image's docker-archive tar into dir unless a tar of the
// same content is there already.
func (s *imageSpec) write(dir string) (Image, error) {
	es, err := s.sorted()
	if err != nil {
		return Image{}, err
	}
	tag, err := s.tag(es)
	if err != nil {
		return Image{}, err
	}
	img := Image{
		Ref: "localhost/" + s.name + ":" + tag,
		Tar: filepath.Join(dir, s.name+"-"+tag+".tar"),
	}
	if st, err := os.Stat(img.Tar); err == nil && st.Mode().IsRegular() {
		return img, nil
	}
	layer, err := imageLayer(es)
	if err != nil {
		return Image{}, err
	}
	diffID := sha256.Sum256(layer)
	var cfg imageConfig
	cfg.Architecture, cfg.OS, cfg.Created = runtime.GOARCH, "linux", imageEpoch
	cfg.Config = runtimeConfig{Env: s.env, Entrypoint: s.entrypoint, Cmd: s.cmd}
	cfg.RootFS.Type = "layers"
	cfg.RootFS.DiffIDs = []string{fmt.Sprintf("sha256:%x", diffID)}
	cfg.History = append(cfg.History, struct {
		Created   time.Time `json:"created"`
		CreatedBy string    `json:"created_by"`
	}{imageEpoch, "cnlab " + imageFormat})
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return Image{}, err
	}
	cfgName := fmt.Sprintf("%x.json", sha256.Sum256(cfgJSON))
	layerName := fmt.Sprintf("%x/layer.tar", diffID)
	manifest, err := json.Marshal([]archiveManifest{{Config: cfgName, RepoTags: []string{img.Ref}, Layers: []string{layerName}}})
	if err != nil {
		return Image{}, err
	}
	err = writeImageAtomic(img.Tar, func(w io.Writer) error {
		tw := tar.NewWriter(w)
		if err := imageTarDir(tw, path.Dir(layerName), 0o755); err != nil {
			return err
		}
		for _, f := range []struct {
			name string
			data []byte
		}{{layerName, layer}, {cfgName, cfgJSON}, {"manifest.json", manifest}} {
			if err := imageTarFile(tw, f.name, 0o644, f.data); err != nil {
				return err
			}
		}
		return tw.Close()
	})
	if err != nil {
		return Image{}, err
	}
	return img, nil
}

// imageLayer is the image's one layer, uncompressed.
func imageLayer(es []imageEntry) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		var err error
		switch e.typ {
		case tar.TypeDir:
			err = imageTarDir(tw, e.name, e.mode)
		case tar.TypeSymlink:
			err = tw.WriteHeader(imageHeader(e.name, tar.TypeSymlink, e.mode, 0, e.link))
		default:
			data := e.data
			if e.src != "" {
				if data, err = os.ReadFile(e.src); err != nil {
					return nil, fmt.Errorf("images: %w", err)
				}
			}
			err = imageTarFile(tw, e.name, e.mode, data)
		}
		if err != nil {
			return nil, fmt.Errorf("images: layer: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func imageHeader(name string, typ byte, mode, size int64, link string) *tar.Header {
	return &tar.Header{Name: name, Typeflag: typ, Mode: mode, Size: size, Linkname: link,
		ModTime: imageEpoch, Uname: "root", Gname: "root", Format: tar.FormatPAX}
}

func imageTarDir(tw *tar.Writer, name string, mode int64) error {
	return tw.WriteHeader(imageHeader(name+"/", tar.TypeDir, mode, 0, ""))
}

func imageTarFile(tw *tar.Writer, name string, mode int64, data []byte) error {
	if err := tw.WriteHeader(imageHeader(name, tar.TypeReg, mode, int64(len(data)), "")); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

// writeImageAtomic writes file through a temporary file in the same directory
// and a rename, so no reader ever sees half of it.
func writeImageAtomic(file string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".tmp-*")
	if err != nil {
		return fmt.Errorf("images: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := write(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("images: writing %s: %w", file, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("images: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("images: %w", err)
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return fmt.Errorf("images: %w", err)
	}
	return nil
}
