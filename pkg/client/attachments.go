package client

import (
	"context"
	"fmt"
	"net/http"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

// RunTurnAttachments runs one guest message with attachments (at most 10;
// a sealed channel refuses them with 400) and waits for the reply. Each
// is a URL the host's broker fetches (through its vetted dialer,
// egress.allow for private addresses), the name the worker stores it under
// and a declared media type (a hint).
func (c *Client) RunTurnAttachments(ctx context.Context, channel string, speaker apiwire.Speaker, text string, attachments []richproto.Attachment) (apiwire.Reply, error) {
	var r apiwire.Reply
	body := apiwire.TurnRequest{Speaker: speaker, Text: text, Attachments: attachments}
	err := c.doBounded(ctx, c.opts.TurnTimeout, maxTurnAnswerBytes, http.MethodPost, channelPath(channel, "turns"), body, &r)
	if err == nil {
		if ferr := checkReplyFiles(r.Files); ferr != nil {
			return r, fmt.Errorf("sandbox-host: POST turns: bad answer: %w", ferr)
		}
	}
	return r, err
}
