package report

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Env is env.json: the machine and software a run measured.
type Env struct {
	Date     time.Time         `json:"date"`
	LoadAvg  string            `json:"loadavg"`
	Facts    map[string]string `json:"facts"`
	FactKeys []string          `json:"factKeys"` // report order
}

// CollectEnv gathers machine facts; a fact that cannot be read is "unknown".
// extra adds caller-known facts (for example the dockerd under test).
func CollectEnv(extra map[string]string) Env {
	e := Env{Date: time.Now().UTC(), LoadAvg: LoadAvg(), Facts: map[string]string{}}
	add := func(k, v string) {
		v = strings.TrimSpace(v)
		if v == "" {
			v = "unknown"
		}
		if _, ok := e.Facts[k]; !ok {
			e.FactKeys = append(e.FactKeys, k)
		}
		e.Facts[k] = v
	}
	add("CPU", cpuModel())
	add("cores", strconv.Itoa(runtime.NumCPU()))
	add("memory", memTotal())
	add("kernel", firstLine(run("uname", "-r")))
	add("Debian", firstLine(readFile("/etc/debian_version")))
	add("Go", firstLine(run("go", "version")))
	add("docker (server)", firstLine(run("docker", "version", "--format", "{{.Server.Version}} (API {{.Server.APIVersion}})")))
	add("docker CLI", firstLine(run("docker", "version", "--format", "{{.Client.Version}}")))
	add("containerd", firstLine(run("containerd", "--version")))
	add("runc", firstLine(run("runc", "--version")))
	add("systemd", firstLine(run("systemctl", "--version")))
	add("commit", firstLine(run("git", "rev-parse", "--short", "HEAD")))
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		add(k, extra[k])
	}
	return e
}

func run(name string, args ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).Output()
	if err != nil {
		return ""
	}
	return string(out)
}

func readFile(p string) string {
	data, _ := os.ReadFile(p)
	return string(data)
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func memTotal() string {
	for _, l := range strings.Split(readFile("/proc/meminfo"), "\n") {
		if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
