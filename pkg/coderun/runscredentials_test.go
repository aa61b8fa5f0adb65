package coderun_test

import (
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
)

const runsCredExtra = `
egress:
  allow: ["127.0.0.1:8443"]
  credentials:
    - {name: git, host: 127.0.0.1, port: 8443, credential: git-token, header: Authorization, format: "Bearer {}", env: GIT_TOKEN, projects: [demo]}
    - {name: api, host: api.example.com, port: 443, credential: api-key, header: X-Api-Key, format: "{}", clients: [4343]}
runs:
  projects:
    - name: demo
      path: /srv/demo
`

// TestRunCredentials: a run asks for credentialed destinations by name;
// the approval shows exactly those; only after it does the run's policy
// carry them (and nothing else of egress.credentials), and the job points
// git and curl at their hosts. A name the run's project or client may not
// use is refused like an unknown one, and nothing starts.
func TestRunCredentials(t *testing.T) {
	r, rd := newRunRig(t, runsCredExtra, supervise(0))
	p := runs.Params{Project: "demo", Command: "git clone https://127.0.0.1:8443/r.git", Network: true, Credentials: []string{"git"}}
	code, body := apiAs(t, r, clientUID, "POST", "/v1/runs", p)
	if code != http.StatusAccepted {
		t.Fatalf("start: %d %s", code, body)
	}
	var st runs.Status
	must(t, json.Unmarshal(body, &st))
	if st.State != runs.StateAwaitingApproval || !slices.Equal(st.Credentials, []string{"git"}) ||
		st.CredentialVariables["git"] != "GIT_TOKEN" || len(st.CredentialVariables) != 1 {
		t.Fatalf("awaiting approval: %+v, want the credential shown", st)
	}
	// What the admin sees before approving.
	code, body = apiAs(t, r, os.Getuid(), "GET", "/v1/runs/"+st.ID, nil)
	if code != http.StatusOK || !strings.Contains(string(body), `"credentials":["git"],"credentialVariables":{"git":"GIT_TOKEN"}`) {
		t.Errorf("admin view: %d %s", code, body)
	}
	if n := len(r.docker.Policies); n != 0 {
		t.Fatalf("a policy was written before approval")
	}
	if code, body := apiAs(t, r, os.Getuid(), "POST", "/v1/runs/"+st.ID+"/approve", nil); code != http.StatusOK {
		t.Fatalf("approve: %d %s", code, body)
	}
	got := waitRun(t, r, st.ID)
	if got.Result != runs.ResultOK {
		t.Fatalf("run %+v", got)
	}
	pol := r.docker.Policies[0]
	want := []policy.EgressCredential{{Name: "git", Host: "127.0.0.1", Port: 8443, Credential: "git-token", Header: "Authorization", Format: policy.FormatBearer, Env: "GIT_TOKEN"}}
	if pol == nil || pol.Egress == nil || !slices.Equal(pol.Egress.Credentials, want) || pol.Egress.TestRootCA != "" {
		t.Errorf("policy egress: %+v, want exactly %+v", pol.Egress, want)
	}
	if names := pol.CredentialNames(); !slices.Equal(names, []string{"git-token"}) {
		t.Errorf("credset would copy %v, want only git-token", names)
	}
	// git declares env GIT_TOKEN: intercepted; the supervisor fetches its
	// placeholder.
	if job := rd.Jobs[0]; !job.Placeholders {
		t.Errorf("job placeholders %v", job.Placeholders)
	}

	// A network run without credentials carries none.
	st2, err := r.k.Start(runs.Params{Command: "true", Network: true}, clientUID)
	must(t, err)
	apiAs(t, r, os.Getuid(), "POST", "/v1/runs/"+st2.ID+"/approve", nil)
	waitRun(t, r, st2.ID)
	if pol := r.docker.Policies[1]; pol == nil || len(pol.Egress.Credentials) != 0 || len(pol.CredentialNames()) != 0 {
		t.Errorf("a run without credentials got %+v", pol.Egress)
	}

	for _, c := range []struct {
		name string
		uid  int
		p    runs.Params
	}{
		{"another project's", otherUID, runs.Params{Command: "x", Network: true, Credentials: []string{"git"}}},
		{"another client's", clientUID, runs.Params{Project: "demo", Command: "x", Network: true, Credentials: []string{"api"}}},
		{"unknown", clientUID, runs.Params{Command: "x", Network: true, Credentials: []string{"nope"}}},
		{"without network", clientUID, runs.Params{Project: "demo", Command: "x", Credentials: []string{"git"}}},
	} {
		before := len(r.k.Registry().List())
		code, body := apiAs(t, r, c.uid, "POST", "/v1/runs", c.p)
		if code != http.StatusBadRequest || !strings.Contains(string(body), "credentials") {
			t.Errorf("%s: %d %s, want 400 naming credentials", c.name, code, body)
		}
		if n := len(r.k.Registry().List()); n != before {
			t.Errorf("%s: a run was created", c.name)
		}
	}
	// The other client may use its own; api declares no env, so its
	// placeholder is in the default variable (no plain-http route for runs).
	if st, err := r.k.Start(runs.Params{Command: "x", Network: true, Credentials: []string{"api"}}, otherUID); err != nil {
		t.Errorf("client's own credential refused: %v", err)
	} else if st.CredentialVariables["api"] != "API_TOKEN" {
		t.Errorf("credential without env: variables %v, want api in API_TOKEN", st.CredentialVariables)
	}
	r.assertClean(t)
}

// TestCredentialList: GET /v1/credentials lists what a run of the project
// by the caller may ask for, with the variable each placeholder arrives in
// (declared or the default), and never the file that holds the value; a
// bad query is refused, not ignored.
func TestCredentialList(t *testing.T) {
	r, _ := newRunRig(t, runsCredExtra, supervise(0))
	gitC := runs.Credential{Name: "git", Variable: "GIT_TOKEN", Host: "127.0.0.1", Port: 8443}
	apiC := runs.Credential{Name: "api", Variable: "API_TOKEN", Host: "api.example.com", Port: 443}
	for _, tc := range []struct {
		name  string
		uid   int
		query string
		code  int
		want  []runs.Credential
	}{
		{"no project, listed client", otherUID, "", http.StatusOK, []runs.Credential{apiC}},
		{"project and listed client", otherUID, "?project=demo", http.StatusOK, []runs.Credential{gitC, apiC}},
		{"project only", clientUID, "?project=demo", http.StatusOK, []runs.Credential{gitC}},
		{"neither", clientUID, "", http.StatusOK, []runs.Credential{}},
		{"admin asks as its uid", os.Getuid(), "", http.StatusOK, []runs.Credential{}},
		{"undeclared project", clientUID, "?project=other", http.StatusBadRequest, nil},
		{"unknown parameter", clientUID, "?projects=demo", http.StatusBadRequest, nil},
		{"project twice", clientUID, "?project=demo&project=demo", http.StatusBadRequest, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := apiAs(t, r, tc.uid, "GET", "/v1/credentials"+tc.query, nil)
			if code != tc.code {
				t.Fatalf("got %d %s, want %d", code, body, tc.code)
			}
			if tc.want == nil {
				return
			}
			var got runs.CredentialList
			must(t, json.Unmarshal(body, &got))
			if !slices.Equal(got.Credentials, tc.want) {
				t.Errorf("got %+v, want %+v", got.Credentials, tc.want)
			}
			if strings.Contains(string(body), "git-token") || strings.Contains(string(body), "api-key") {
				t.Errorf("the list names a credential file: %s", body)
			}
		})
	}
}
