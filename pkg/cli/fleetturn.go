package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/client"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
)

// fleetTurn runs a turn through the fleet transport with the fleet.* keys
// of the configuration file (a box's, or a copy on the frontend's machine).
func fleetTurn(cmd *cobra.Command, g *globals, channel string, sp apiwire.Speaker, text string) (apiwire.Reply, error) {
	cfg, err := config.Load(g.config)
	if err != nil {
		return apiwire.Reply{}, err
	}
	f := cfg.Fleet
	if !f.Enabled {
		return apiwire.Reply{}, fmt.Errorf("--fleet: fleet.enabled is false in %s", g.config)
	}
	fc, err := client.DialFleet(cmd.Context(), client.FleetOptions{
		URL: f.URL, CAFile: f.TLS.CA, CertFile: f.TLS.Cert, KeyFile: f.TLS.Key, NkeySeedFile: f.NkeySeedFile,
		Name: f.Box + "-cli", Partitions: f.Partitions,
		TurnTimeout: g.timeouts.TurnTimeout, ConnectTimeout: g.timeouts.ConnectTimeout,
	})
	if err != nil {
		return apiwire.Reply{}, err
	}
	defer fc.Close()
	return fc.RunTurn(cmd.Context(), channel, sp, text)
}
