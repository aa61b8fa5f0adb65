package main

import (
	"bufio"
	"os"
	"strings"
	"testing"
)

// TestMatchesDockerfile keeps the engine-free archive and image/Dockerfile in
// step: the same USER and ENTRYPOINT, FROM scratch, and nothing that sets Env.
func TestMatchesDockerfile(t *testing.T) {
	f, err := os.Open("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		inst, arg, _ := strings.Cut(line, " ")
		got[strings.ToUpper(inst)] = arg
	}
	o := struct{ User, Entrypoint string }{"65534:65534", "/sandbox-worker"}
	want := map[string]string{
		"FROM":       "scratch",
		"COPY":       "sandbox-worker " + o.Entrypoint,
		"USER":       o.User,
		"ENTRYPOINT": `["` + o.Entrypoint + `"]`,
	}
	if len(got) != len(want) {
		t.Errorf("Dockerfile instructions %v, want exactly %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("Dockerfile %s %q, archive uses %q", k, got[k], v)
		}
	}
	mainSrc, _ := os.ReadFile("main.go")
	if !strings.Contains(string(mainSrc), `"user", "65534:65534"`) || !strings.Contains(string(mainSrc), `Entrypoint: "/sandbox-worker"`) {
		t.Errorf("mkarchive defaults drifted from the Dockerfile")
	}
}
