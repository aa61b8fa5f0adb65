package config

import (
	"reflect"
	"strings"
	"testing"
)

// Two public user nkeys (and one seed, which must never be accepted or
// echoed as a box's key).
const (
	testNKeyA = "UBNPNJVB2YTYC3JQVMBICLMRB2BXUUCXGWZXU63HKKDO2Q7XKNWTP62V"
	testNKeyB = "UBNVEPWGV5SHMO76T553PZ4DWRPYC7KC55AHZCRELEENIDHKTXIO5NZO"
	testSeed  = "SUAPJLC2LXUFH5LR2CHRW2L4XTIUBIRNOXZLIICIH7SYPOFP5ZKFFDCJSY"
)

// TestFleetDefaults: off, the local sandbox-nats over TLS, 16 partitions,
// R3, files under /etc/roundtable-sandbox/fleet.
func TestFleetDefaults(t *testing.T) {
	f := validBase(t).Fleet
	want := Fleet{
		URL: "tls://127.0.0.1:4222", Partitions: 16, Replicas: 3,
		TLS:          FleetTLS{CA: FleetDir + "/ca.pem", Cert: FleetDir + "/box.pem", Key: FleetDir + "/box.key"},
		NkeySeedFile: FleetDir + "/box.nkey",
		Server: FleetServer{Listen: "127.0.0.1:4222", ClusterListen: "0.0.0.0:6222", Routes: []string{},
			StoreDir: "/var/lib/sandbox-nats", EncryptionKeyFile: FleetDir + "/jetstream.key", Boxes: []FleetBox{}, Frontends: []FleetBox{}},
	}
	if !reflect.DeepEqual(f, want) {
		t.Errorf("got  %+v\nwant %+v", f, want)
	}
}

const fleetOK = `fleet:
  enabled: true
  box: box-a
  url: tls://10.0.0.1:4222, tls://10.0.0.2:4222
  server:
    routes: [tls://10.0.0.1:6222, tls://10.0.0.2:6222]
    boxes:
      - name: box-a
        nkey: ` + testNKeyA + `
      - name: box-b
        nkey: ` + testNKeyB + `
`

func TestFleetLoads(t *testing.T) {
	c, err := Load(write(t, base+fleetOK))
	if err != nil {
		t.Fatal(err)
	}
	f := c.Fleet
	if !f.Enabled || f.Box != "box-a" || len(f.Server.Boxes) != 2 || f.Server.Boxes[1] != (FleetBox{"box-b", testNKeyB}) {
		t.Errorf("fleet = %+v", f)
	}
	if got, want := f.FleetURLs(), []string{"tls://10.0.0.1:4222", "tls://10.0.0.2:4222"}; !reflect.DeepEqual(got, want) {
		t.Errorf("FleetURLs = %v, want %v", got, want)
	}
}

// TestFleetRefusals: each bad value is refused naming its key as written;
// a seed pasted as a box's key is refused without being echoed.
func TestFleetRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, body, key, want string
	}{
		{"enabled without box", "fleet:\n  enabled: true\n", "fleet.box", "is required when fleet.enabled is true"},
		{"box name", "fleet:\n  box: Box.A\n", "fleet.box", "must match"},
		{"plain nats url", "fleet:\n  url: nats://127.0.0.1:4222\n", "fleet.url", "must be tls://host:port"},
		{"url with password", "fleet:\n  url: tls://u:p@127.0.0.1:4222\n", "fleet.url", "must carry no user or password"},
		{"url without port", "fleet:\n  url: tls://127.0.0.1\n", "fleet.url", "must be host:port"},
		{"empty url", "fleet:\n  url: ' , '\n", "fleet.url", "at least one"},
		{"partitions", "fleet:\n  partitions: 0\n", "fleet.partitions", "must be 1 to 1024"},
		{"replicas", "fleet:\n  replicas: 7\n", "fleet.replicas", "must be 1, 3 or 5"},
		{"even replicas", "fleet:\n  replicas: 2\n", "fleet.replicas", "must be 1, 3 or 5"},
		{"relative ca", "fleet:\n  tls:\n    ca: ca.pem\n", "fleet.tls.ca", "clean absolute path"},
		{"seed file", "fleet:\n  nkeySeedFile: /etc/../seed\n", "fleet.nkeySeedFile", "clean absolute path"},
		{"store dir", "fleet:\n  server:\n    storeDir: /\n", "fleet.server.storeDir", "other than /"},
		{"listen", "fleet:\n  server:\n    listen: 127.0.0.1\n", "fleet.server.listen", "must be host:port"},
		{"cluster port", "fleet:\n  server:\n    clusterListen: 0.0.0.0:70000\n", "fleet.server.clusterListen", "port must be"},
		{"route scheme", "fleet:\n  server:\n    routes: [nats-route://10.0.0.2:6222]\n", "fleet.server.routes[0]", "must be tls://"},
		{"box name in list", "fleet:\n  server:\n    boxes:\n      - name: ''\n        nkey: " + testNKeyA + "\n", "fleet.server.boxes[0].name", "must match"},
		{"box twice", "fleet:\n  server:\n    boxes:\n      - {name: a, nkey: " + testNKeyA + "}\n      - {name: a, nkey: " + testNKeyB + "}\n", "fleet.server.boxes[1].name", "listed twice"},
		{"key twice", "fleet:\n  server:\n    boxes:\n      - {name: a, nkey: " + testNKeyA + "}\n      - {name: b, nkey: " + testNKeyA + "}\n", "fleet.server.boxes[1].nkey", "another box's key"},
		{"seed as key", "fleet:\n  server:\n    boxes:\n      - {name: a, nkey: " + testSeed + "}\n", "fleet.server.boxes[0].nkey", "never the seed"},
		{"frontend with a box's key", "fleet:\n  server:\n    boxes:\n      - {name: a, nkey: " + testNKeyA + "}\n    frontends:\n      - {name: fe, nkey: " + testNKeyA + "}\n", "fleet.server.frontends[0].nkey", "another box's or frontend's key"},
		{"frontend named as a box", "fleet:\n  server:\n    boxes:\n      - {name: a, nkey: " + testNKeyA + "}\n    frontends:\n      - {name: a, nkey: " + testNKeyB + "}\n", "fleet.server.frontends[0].name", "listed twice"},
		{"own box missing", "fleet:\n  enabled: true\n  box: c\n  server:\n    boxes:\n      - {name: a, nkey: " + testNKeyA + "}\n", "fleet.server.boxes", `does not list fleet.box "c"`},
		{"unknown key as written", "fleet:\n  server:\n    Routs: []\n", "fleet.server.Routs", "unknown key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(write(t, base+tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.key+": ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %s: ...%s", err, tc.key, tc.want)
			}
			if strings.Contains(err.Error(), testSeed) {
				t.Errorf("the error echoes a seed: %v", err)
			}
		})
	}
}
