package sandboxtest

import (
	"context"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/client"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet/fleettest"
)

// FleetClient is a frontend on no box of cluster c (one partition).
func FleetClient(t *testing.T, c *fleettest.Cluster) *client.FleetClient {
	t.Helper()
	fc, err := client.DialFleet(context.Background(), client.FleetOptions{Conn: c.Connect("frontend"), Partitions: 1})
	Must(t, err)
	return fc
}
