package hosttool

import (
	"errors"
	"strings"
	"testing"
)

func TestSplitPrivate(t *testing.T) {
	long := strings.Repeat("p", MaxPrincipalChars+1)
	cases := []struct {
		name, out, principal string
		wantResult, wantTo   string
		wantErr              bool
	}{
		{"public text", "hello", "alice", `"hello"`, "", false},
		{"public object", `{"a":1}`, "alice", `{"a":1}`, "", false},
		{"public object without principal", `{"result":2}`, "", `{"result":2}`, "", false},
		{"private", `{"privateTo":"alice","result":{"x":1}}`, "alice", `{"x":1}`, "alice", false},
		{"private spaced", " {\"result\" : \"s\", \"privateTo\":\"alice\"}\n", "alice", `"s"`, "alice", false},
		{"another principal", `{"privateTo":"bob","result":1}`, "alice", "", "", true},
		{"no principal bound", `{"privateTo":"alice","result":1}`, "", "", "", true},
		{"empty privateTo", `{"privateTo":"","result":1}`, "", "", "", true},
		{"null privateTo", `{"privateTo":null,"result":1}`, "alice", "", "", true},
		{"number privateTo", `{"privateTo":7,"result":1}`, "alice", "", "", true},
		{"array privateTo", `{"privateTo":["alice"],"result":1}`, "alice", "", "", true},
		{"no result", `{"privateTo":"alice"}`, "alice", "", "", true},
		{"extra member", `{"privateTo":"alice","result":1,"note":"x"}`, "alice", "", "", true},
		{"duplicate privateTo", `{"privateTo":"bob","privateTo":"alice","result":1}`, "alice", "", "", true},
		{"duplicate result", `{"privateTo":"alice","result":1,"result":2}`, "alice", "", "", true},
		{"escaped key", `{"private\u0054o":"bob","result":1}`, "alice", "", "", true},
		{"control character", "{\"privateTo\":\"ali\\u0000ce\",\"result\":1}", "ali\x00ce", "", "", true},
		{"format character", "{\"privateTo\":\"ali\\u200bce\",\"result\":1}", "ali\u200bce", "", "", true},
		{"trailing space", `{"privateTo":"alice ","result":1}`, "alice ", "", "", true},
		{"over long", `{"privateTo":"` + long + `","result":1}`, long, "", "", true},
		{"lone surrogate", `{"privateTo":"\ud800","result":1}`, "\ufffd", "", "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, to, err := SplitPrivate([]byte(c.out), c.principal)
			if c.wantErr {
				if !errors.Is(err, ErrFailed) || res != nil || to != "" {
					t.Fatalf("got (%s, %q, %v), want ErrFailed and nothing", res, to, err)
				}
				return
			}
			if err != nil || string(res) != c.wantResult || to != c.wantTo {
				t.Fatalf("got (%s, %q, %v), want (%s, %q, nil)", res, to, err, c.wantResult, c.wantTo)
			}
		})
	}
}

func FuzzSplitPrivate(f *testing.F) {
	f.Add([]byte(`{"privateTo":"alice","result":1}`), "alice")
	f.Add([]byte(`{"privateTo":"alice","privateTo":"bob","result":1}`), "bob")
	f.Fuzz(func(t *testing.T, out []byte, principal string) {
		res, to, err := SplitPrivate(out, principal)
		if err != nil {
			return
		}
		if to != "" && to != principal {
			t.Fatalf("privateTo %q differs from the principal %q", to, principal)
		}
		if len(res) == 0 {
			t.Fatal("empty result")
		}
	})
}
