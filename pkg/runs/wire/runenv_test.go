package wire

import (
	"errors"
	"strings"
	"testing"
)

const testCA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

func TestRunEnvValidate(t *testing.T) {
	for _, tt := range []struct {
		name string
		e    RunEnv
		ok   bool
	}{
		{"none", RunEnv{}, true},
		{"one", RunEnv{CA: testCA, Env: map[string]string{"GITHUB_TOKEN": "rtsbx_ph_0123"}}, true},
		{"no CA", RunEnv{Env: map[string]string{"GITHUB_TOKEN": "x"}}, false},
		{"bad name", RunEnv{CA: testCA, Env: map[string]string{"1X": "x"}}, false},
		{"name with =", RunEnv{CA: testCA, Env: map[string]string{"A=B": "x"}}, false},
		{"value with a newline", RunEnv{CA: testCA, Env: map[string]string{"A": "x\ny"}}, false},
		{"value with a space", RunEnv{CA: testCA, Env: map[string]string{"A": "x y"}}, false},
		{"too many", RunEnv{CA: testCA, Env: func() map[string]string {
			m := map[string]string{}
			for i := range MaxCredentialedHosts + 1 {
				m["V"+strings.Repeat("A", i)] = "x"
			}
			return m
		}()}, false},
	} {
		err := tt.e.Validate()
		if (err == nil) != tt.ok || err != nil && !errors.Is(err, ErrInvalidJob) {
			t.Errorf("%s: %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

func TestPlaceholdersNeedProxy(t *testing.T) {
	j := Job{Command: "true", UID: 1, GID: 1, MaxOutputBytes: 1, MaxArtifactBytes: 1, MaxArtifactTotalBytes: 1, Placeholders: true}
	if err := j.Validate(); err == nil || !strings.Contains(err.Error(), "placeholders need proxy") {
		t.Errorf("placeholders without proxy: %v", err)
	}
	j.Proxy = true
	if err := j.Validate(); err != nil {
		t.Errorf("placeholders with proxy: %v", err)
	}
}
