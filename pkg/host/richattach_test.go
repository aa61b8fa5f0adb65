package host

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

// TestRichAttachmentsAPI: the turn route takes a rich turn's attachments
// (that they reach the bind as given, and the session policy's egress, is
// pkg/richsession's TestRichAttachmentsReachTheBind); a sealed channel
// refuses them (400, nothing run); an invalid list is refused naming the
// field; the largest valid request fits the body limit.
func TestRichAttachmentsAPI(t *testing.T) {
	r, ctl := richRig(t, "")
	must(t, r.h.state.SetRich("room", "helper"))
	atts := []richproto.Attachment{{URL: "https://example.com/a.png", Name: "a.png", Type: "image/png"}, {URL: "http://10.1.2.3:8080/r.txt", Name: "r.txt"}}
	body := func(text string, as []richproto.Attachment) string {
		b, _ := json.Marshal(apiwire.TurnRequest{Speaker: apiwire.Speaker{ID: "u"}, Text: text, Attachments: as})
		return string(b)
	}
	if code, out := r.api(t, "POST", "/v1/channels/room/turns", body("look", atts)); code != 200 {
		t.Fatalf("rich turn with attachments: %d %.200s", code, out)
	}
	if binds := ctl.BindList(); len(binds) != 1 || len(binds[0].Turn.Attachments) != len(atts) {
		t.Fatalf("bound %+v, want one turn with %d attachments", binds, len(atts))
	}

	// The largest valid request: 100,000 characters escaped to 6 bytes
	// each and ten attachments of the longest fields.
	big := make([]richproto.Attachment, richproto.MaxAttachments)
	for i := range big {
		big[i] = richproto.Attachment{URL: "https://e.com/" + strings.Repeat("\u00e9", (richproto.MaxAttachmentURL-14)/2),
			Name: strings.Repeat("<", richproto.MaxAttachmentName), Type: strings.Repeat("<", richproto.MaxAttachmentType)}
	}
	if code, out := r.api(t, "POST", "/v1/channels/room/turns", body(strings.Repeat("\x01", richproto.MaxTextChars), big)); code != 200 {
		t.Errorf("largest valid rich request: %d %.200s", code, out)
	}

	for name, as := range map[string][]richproto.Attachment{
		"eleven":      append(big, big[0]),
		"file scheme": {{URL: "file:///etc/passwd", Name: "p"}},
		"path name":   {{URL: "https://e.com/", Name: "../x"}},
		"encoded ip":  {{URL: "http://2130706433/x", Name: "x"}},
		"octal ip":    {{URL: "http://0177.0.0.1/x", Name: "x"}},
	} {
		if code, out := r.api(t, "POST", "/v1/channels/room/turns", body("x", as)); code != 400 || !strings.Contains(out, "attachments") {
			t.Errorf("%s: %d %.200s, want 400 naming attachments", name, code, out)
		}
	}
	n := len(ctl.BindList())

	must(t, r.h.state.SetMode("room", ModeOn))
	if code, out := r.api(t, "POST", "/v1/channels/room/turns", body("look", atts)); code != 400 || !strings.Contains(out, "attachments need a rich channel") {
		t.Errorf("sealed channel with attachments: %d %.200s, want 400", code, out)
	}
	if got := len(ctl.BindList()); got != n {
		t.Errorf("refused requests bound %d turns", got-n)
	}
}
