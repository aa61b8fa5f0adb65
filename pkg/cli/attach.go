package cli

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"

	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

// parseAttach reads one --attach URL[,name[,type]]. A URL holding a comma
// must encode it (%2C): the flag's fields are comma-separated. The name
// defaults to the URL path's last segment.
func parseAttach(s string) (richproto.Attachment, error) {
	f := strings.Split(s, ",")
	if len(f) > 3 {
		return richproto.Attachment{}, fmt.Errorf("--attach %q: want URL[,name[,type]] (encode a comma in the URL as %%2C)", s)
	}
	a := richproto.Attachment{URL: f[0]}
	if len(f) > 1 {
		a.Name = f[1]
	}
	if len(f) > 2 {
		a.Type = f[2]
	}
	if a.Name == "" {
		if u, err := url.Parse(a.URL); err == nil {
			if p, err := url.PathUnescape(path.Base(u.EscapedPath())); err == nil && richproto.ValidFileName(p) {
				a.Name = p
			}
		}
		if a.Name == "" {
			return richproto.Attachment{}, fmt.Errorf("--attach %q: the URL names no file; give a name (URL,name)", s)
		}
	}
	err := richproto.ValidAttachments([]richproto.Attachment{a})
	if err != nil {
		return richproto.Attachment{}, fmt.Errorf("--attach %q: %s", s, strings.TrimPrefix(strings.TrimSuffix(err.Error(), ": "+richproto.ErrInvalid.Error()), "attachments[0]."))
	}
	return a, nil
}

func parseAttaches(in []string) ([]richproto.Attachment, error) {
	if len(in) > richproto.MaxAttachments {
		return nil, errors.New("at most 10 --attach")
	}
	var out []richproto.Attachment
	for _, s := range in {
		a, err := parseAttach(s)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}
