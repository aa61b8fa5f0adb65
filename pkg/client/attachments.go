package client

import (
	"context"
	"fmt"
	"net/http"
)

// Attachment is one file of a rich channel's turn: a URL the host's broker
// fetches (through its vetted dialer, egress.allow for private addresses),
// the name the worker stores it under and a declared media type (a hint).
type Attachment struct {
	URL  string `json:"url"`
	Name string `json:"name"`
	Type string `json:"type,omitempty"`
}

// RunTurnAttachments runs one guest message with attachments (at most 10;
// a sealed channel refuses them with 400) and waits for the reply.
func (c *Client) RunTurnAttachments(ctx context.Context, channel string, speaker Speaker, text string, attachments []Attachment) (Reply, error) {
	var r Reply
	body := map[string]any{"speaker": speaker, "text": text}
	if len(attachments) > 0 {
		body["attachments"] = attachments
	}
	err := c.doBounded(ctx, c.opts.TurnTimeout, maxTurnAnswerBytes, http.MethodPost, channelPath(channel, "turns"), body, &r)
	if err == nil {
		if ferr := checkReplyFiles(r.Files); ferr != nil {
			return r, fmt.Errorf("sandbox-host: POST turns: bad answer: %w", ferr)
		}
	}
	return r, err
}
