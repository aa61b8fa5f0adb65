package rich

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	_ "image/gif" // DecodeConfig only: header and logical screen
	_ "image/jpeg"
	_ "image/png"

	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

// Image bounds beside richproto's (count, bytes, decoded total).
const (
	// MaxImageSide bounds either side of an image (the provider's own).
	MaxImageSide = 8000
	// MaxImageFrames bounds a GIF's or animated WebP's frames, counted
	// by walking its blocks, never decoding them.
	MaxImageFrames = 500
)

var (
	errNotImage      = errors.New("not a PNG, JPEG, WebP or GIF image")
	errImageTooLarge = errors.New("image over the size bounds")
	errImageBad      = errors.New("image header malformed")
)

// imageInfo is what prepareImage learned from an image's headers alone.
type imageInfo struct {
	mediaType     string
	width, height int
	frames        int
	decoded       int64 // width*height*4*frames: what decoding it would take
}

// prepareImage identifies data by its leading bytes (never a declared type)
// and checks its bounds from its headers before anything decodes it:
// at most MaxImageBytes, each side 1 to MaxImageSide, at most
// MaxImageFrames frames, at most MaxDecodedImages decoded.
func prepareImage(data []byte) (imageInfo, error) {
	var info imageInfo
	switch {
	case bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")):
		info.mediaType = "image/png"
	case bytes.HasPrefix(data, []byte("\xff\xd8\xff")):
		info.mediaType = "image/jpeg"
	case bytes.HasPrefix(data, []byte("GIF87a")), bytes.HasPrefix(data, []byte("GIF89a")):
		info.mediaType = "image/gif"
	case len(data) >= 12 && string(data[:4]) == "RIFF" && string(data[8:12]) == "WEBP":
		info.mediaType = "image/webp"
	default:
		return info, errNotImage
	}
	if len(data) > richproto.MaxImageBytes {
		return info, errImageTooLarge
	}
	info.frames = 1
	var err error
	switch info.mediaType {
	case "image/webp":
		info.width, info.height, info.frames, err = webpInfo(data)
	default:
		var cfg image.Config
		cfg, _, err = image.DecodeConfig(bytes.NewReader(data))
		if err != nil {
			err = errImageBad
		}
		info.width, info.height = cfg.Width, cfg.Height
		if err == nil && info.mediaType == "image/gif" {
			info.frames, err = gifFrames(data, info.width, info.height)
		}
	}
	if err != nil {
		return info, err
	}
	if info.width < 1 || info.height < 1 || info.width > MaxImageSide || info.height > MaxImageSide || info.frames < 1 {
		return info, errImageTooLarge
	}
	info.decoded = int64(info.width) * int64(info.height) * 4 * int64(info.frames)
	if info.decoded > richproto.MaxDecodedImages {
		return info, errImageTooLarge
	}
	return info, nil
}

// gifFrames counts a GIF's image descriptors by walking its blocks (sizes
// only, no LZW), refusing more than MaxImageFrames, a frame outside the
// logical screen or a truncated stream.
func gifFrames(data []byte, width, height int) (int, error) {
	if len(data) < 13 {
		return 0, errImageBad
	}
	p := 13
	if data[10]&0x80 != 0 {
		p += 3 << ((data[10] & 7) + 1)
	}
	skipSubBlocks := func() error {
		for {
			if p >= len(data) {
				return errImageBad
			}
			n := int(data[p])
			p++
			if n == 0 {
				return nil
			}
			p += n
		}
	}
	frames := 0
	for {
		if p >= len(data) {
			return 0, errImageBad
		}
		switch data[p] {
		case 0x3b: // trailer
			if frames == 0 {
				return 0, errImageBad
			}
			return frames, nil
		case 0x21: // extension: label, sub-blocks
			p += 2
			if err := skipSubBlocks(); err != nil {
				return 0, err
			}
		case 0x2c: // image descriptor
			if p+10 > len(data) {
				return 0, errImageBad
			}
			d := data[p+1 : p+10]
			x, y := int(binary.LittleEndian.Uint16(d[0:])), int(binary.LittleEndian.Uint16(d[2:]))
			w, h := int(binary.LittleEndian.Uint16(d[4:])), int(binary.LittleEndian.Uint16(d[6:]))
			if x+w > width || y+h > height {
				return 0, errImageBad
			}
			if frames++; frames > MaxImageFrames {
				return 0, errImageTooLarge
			}
			p += 10
			if d[8]&0x80 != 0 {
				p += 3 << ((d[8] & 7) + 1)
			}
			p++ // LZW minimum code size
			if err := skipSubBlocks(); err != nil {
				return 0, err
			}
		default:
			return 0, errImageBad
		}
	}
}

// webpInfo reads a WebP's canvas size from its first chunk (VP8, VP8L or
// VP8X) and, for an animation, counts its ANMF chunks (sizes only).
func webpInfo(data []byte) (w, h, frames int, err error) {
	if len(data) < 20 {
		return 0, 0, 0, errImageBad
	}
	riff := int64(binary.LittleEndian.Uint32(data[4:8]))
	if riff+8 > int64(len(data)) || riff < 12 {
		return 0, 0, 0, errImageBad
	}
	data = data[:riff+8]
	chunk := func(p int) (string, []byte, int, error) {
		if p+8 > len(data) {
			return "", nil, 0, errImageBad
		}
		n := int64(binary.LittleEndian.Uint32(data[p+4 : p+8]))
		end := int64(p) + 8 + n
		if end > int64(len(data)) {
			return "", nil, 0, errImageBad
		}
		return string(data[p : p+4]), data[p+8 : end], int(end + n&1), nil
	}
	fourcc, c, next, err := chunk(12)
	if err != nil {
		return 0, 0, 0, err
	}
	switch fourcc {
	case "VP8 ":
		if len(c) < 10 || c[3] != 0x9d || c[4] != 0x01 || c[5] != 0x2a {
			return 0, 0, 0, errImageBad
		}
		return int(binary.LittleEndian.Uint16(c[6:]) & 0x3fff), int(binary.LittleEndian.Uint16(c[8:]) & 0x3fff), 1, nil
	case "VP8L":
		if len(c) < 5 || c[0] != 0x2f {
			return 0, 0, 0, errImageBad
		}
		b := binary.LittleEndian.Uint32(c[1:])
		return int(b&0x3fff) + 1, int(b>>14&0x3fff) + 1, 1, nil
	case "VP8X":
		if len(c) < 10 {
			return 0, 0, 0, errImageBad
		}
		w = int(uint32(c[4])|uint32(c[5])<<8|uint32(c[6])<<16) + 1
		h = int(uint32(c[7])|uint32(c[8])<<8|uint32(c[9])<<16) + 1
		if c[0]&0x02 == 0 { // not animated
			return w, h, 1, nil
		}
		for p := next; p < len(data); {
			fourcc, _, np, err := chunk(p)
			if err != nil {
				return 0, 0, 0, err
			}
			if fourcc == "ANMF" {
				if frames++; frames > MaxImageFrames {
					return 0, 0, 0, errImageTooLarge
				}
			}
			p = np
		}
		if frames == 0 {
			return 0, 0, 0, errImageBad
		}
		return w, h, frames, nil
	}
	return 0, 0, 0, fmt.Errorf("webp chunk %q: %w", fourcc, errImageBad)
}
