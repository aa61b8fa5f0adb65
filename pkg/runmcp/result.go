package runmcp

import (
	"fmt"
	"mime"
	"net/url"
	"path"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roundtable-sandbox/sandbox/pkg/runs"
)

// ArtifactScheme names artifacts in results: sandbox-output:///<path>.
const ArtifactScheme = "sandbox-output"

// result is a finished run as a tool result: a text block (result, exit
// code, duration, stdout, stderr, artifact list), one embedded resource
// per returned artifact, and the status without artifact data as
// structured content. Anything but "ok" is a tool error, a non-zero exit
// included, as the seed's model sees it.
func result(st runs.Status) *mcp.CallToolResult {
	var b strings.Builder
	fmt.Fprintf(&b, "result: %s\n%s\nduration: %.3f s\n", st.Result, describeExit(st), float64(st.DurationMs)/1000)
	if st.FailedSetup > 0 {
		fmt.Fprintf(&b, "setup command %d failed\n", st.FailedSetup)
	}
	if st.Error != "" {
		fmt.Fprintf(&b, "error: %s\n", st.Error)
	}
	// A cut is said before the output, so that nothing reads the rest as
	// the whole output, and again where the stream ends.
	if note := st.CutNote(); note != "" {
		fmt.Fprintf(&b, "output cut: %s\n", note)
	}
	section(&b, "stdout", st.Stdout, runs.Status{StdoutTruncated: st.StdoutTruncated, StdoutDroppedBytes: st.StdoutDroppedBytes}.CutNote())
	section(&b, "stderr", st.Stderr, runs.Status{StderrTruncated: st.StderrTruncated, StderrDroppedBytes: st.StderrDroppedBytes}.CutNote())

	content := []mcp.Content{nil} // the text goes first
	if len(st.Artifacts) > 0 {
		b.WriteString("\nartifacts:\n")
	}
	for _, a := range st.Artifacts {
		if a.Error != "" {
			fmt.Fprintf(&b, "- %s: %s\n", a.Path, a.Error)
			continue
		}
		fmt.Fprintf(&b, "- %s (%d bytes) as %s\n", a.Path, a.Size, artifactURI(a.Path))
		data := a.Data
		if data == nil {
			data = []byte{} // an empty file still has a (empty) blob
		}
		content = append(content, &mcp.EmbeddedResource{Resource: &mcp.ResourceContents{
			URI:      artifactURI(a.Path),
			MIMEType: mimeType(a.Path),
			Blob:     data,
		}})
	}
	content[0] = &mcp.TextContent{Text: b.String()}
	return &mcp.CallToolResult{
		Content:           content,
		StructuredContent: withoutData(st),
		IsError:           st.Result != runs.ResultOK,
	}
}

// section is one output stream, with cut ("" or its CutNote) after it.
func section(b *strings.Builder, name, text, cut string) {
	if text == "" {
		fmt.Fprintf(b, "\n%s: (empty)\n", name)
		return
	}
	fmt.Fprintf(b, "\n%s:\n%s", name, text)
	if !strings.HasSuffix(text, "\n") {
		b.WriteByte('\n')
	}
	if cut != "" {
		fmt.Fprintf(b, "[%s]\n", cut)
	}
}

// artifactURI is the resource URI of an artifact path (relative, under
// /output; the host checked it), each segment escaped.
func artifactURI(p string) string {
	u := url.URL{Scheme: ArtifactScheme, Path: "/" + strings.TrimPrefix(p, "/")}
	return u.String()
}

// mimeType guesses from the extension; unknown is octet-stream.
func mimeType(p string) string {
	if t := mime.TypeByExtension(path.Ext(p)); t != "" {
		return t
	}
	return "application/octet-stream"
}

// withoutData copies st without artifact bytes (they are the resources).
func withoutData(st runs.Status) runs.Status {
	if len(st.Artifacts) == 0 {
		return st
	}
	arts := make([]runs.Artifact, len(st.Artifacts))
	for i, a := range st.Artifacts {
		a.Data = nil
		arts[i] = a
	}
	st.Artifacts = arts
	return st
}
