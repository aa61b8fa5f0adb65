package rich

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

func pngOf(t testing.TB, w, h int) []byte {
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, w, h))); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// pngHeader is a PNG whose IHDR claims w x h (valid CRC) and nothing else
// of use: a decompression bomb's header.
func pngHeader(w, h uint32) []byte {
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], w)
	binary.BigEndian.PutUint32(ihdr[4:], h)
	ihdr[8], ihdr[9] = 8, 6 // 8-bit RGBA
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	chunk := func(typ string, data []byte) {
		binary.Write(&b, binary.BigEndian, uint32(len(data)))
		b.WriteString(typ)
		b.Write(data)
		binary.Write(&b, binary.BigEndian, crc32.ChecksumIEEE(append([]byte(typ), data...)))
	}
	chunk("IHDR", ihdr)
	chunk("IDAT", []byte{0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01})
	chunk("IEND", nil)
	return b.Bytes()
}

// gifFramesOf is a w x h GIF of n frames written block by block (one
// image descriptor and a two-byte LZW stream each).
func gifFramesOf(w, h, n int) []byte {
	var b bytes.Buffer
	b.WriteString("GIF89a")
	binary.Write(&b, binary.LittleEndian, uint16(w))
	binary.Write(&b, binary.LittleEndian, uint16(h))
	b.Write([]byte{0x80, 0, 0}) // global color table of 2
	b.Write([]byte{0, 0, 0, 255, 255, 255})
	for i := 0; i < n; i++ {
		b.Write([]byte{0x21, 0xf9, 4, 0, 0, 0, 0, 0}) // graphic control extension
		b.WriteByte(0x2c)
		binary.Write(&b, binary.LittleEndian, [4]uint16{0, 0, uint16(w), uint16(h)})
		b.WriteByte(0)
		b.Write([]byte{2, 2, 0x4c, 0x01, 0})
	}
	b.WriteByte(0x3b)
	return b.Bytes()
}

func webpOf(fourcc string, chunk []byte, extra ...[]byte) []byte {
	var body bytes.Buffer
	body.WriteString("WEBP")
	put := func(cc string, d []byte) {
		body.WriteString(cc)
		binary.Write(&body, binary.LittleEndian, uint32(len(d)))
		body.Write(d)
		if len(d)%2 == 1 {
			body.WriteByte(0)
		}
	}
	put(fourcc, chunk)
	for _, e := range extra {
		put("ANMF", e)
	}
	var b bytes.Buffer
	b.WriteString("RIFF")
	binary.Write(&b, binary.LittleEndian, uint32(body.Len()))
	b.Write(body.Bytes())
	return b.Bytes()
}

func vp8x(w, h int, animated bool) []byte {
	c := make([]byte, 10)
	if animated {
		c[0] = 0x02
	}
	w, h = w-1, h-1
	c[4], c[5], c[6] = byte(w), byte(w>>8), byte(w>>16)
	c[7], c[8], c[9] = byte(h), byte(h>>8), byte(h>>16)
	return c
}

func TestPrepareImage(t *testing.T) {
	var jb bytes.Buffer
	jpeg.Encode(&jb, image.NewRGBA(image.Rect(0, 0, 30, 20)), nil)
	var gb bytes.Buffer
	gif.Encode(&gb, image.NewPaletted(image.Rect(0, 0, 5, 4), color.Palette{color.Black, color.White}), nil)
	vp8l := []byte{0x2f, 0, 0, 0, 0}
	binary.LittleEndian.PutUint32(vp8l[1:], uint32(99)|uint32(49)<<14) // 100 x 50
	vp8 := []byte{0, 0, 0, 0x9d, 0x01, 0x2a, 64, 0, 32, 0}             // 64 x 32
	anim := make([][]byte, 3)
	for i := range anim {
		anim[i] = make([]byte, 16)
	}
	tooMany := make([][]byte, MaxImageFrames+1)
	for i := range tooMany {
		tooMany[i] = []byte{}
	}
	for _, c := range []struct {
		name      string
		data      []byte
		mediaType string
		w, h, n   int
		err       error
	}{
		{"png", pngOf(t, 40, 30), "image/png", 40, 30, 1, nil},
		{"jpeg", jb.Bytes(), "image/jpeg", 30, 20, 1, nil},
		{"gif", gb.Bytes(), "image/gif", 5, 4, 1, nil},
		{"gif 3 frames", gifFramesOf(8, 8, 3), "image/gif", 8, 8, 3, nil},
		{"webp vp8", webpOf("VP8 ", vp8), "image/webp", 64, 32, 1, nil},
		{"webp vp8l", webpOf("VP8L", vp8l), "image/webp", 100, 50, 1, nil},
		{"webp vp8x", webpOf("VP8X", vp8x(300, 200, false)), "image/webp", 300, 200, 1, nil},
		{"webp animated", webpOf("VP8X", vp8x(10, 10, true), anim...), "image/webp", 10, 10, 3, nil},
		// Refusals, each before anything decodes the pixels.
		{"png 60000x60000", pngHeader(60000, 60000), "", 0, 0, 0, errImageTooLarge},
		{"png 4000x4000 (64 MiB decoded is the limit)", pngHeader(4097, 4096), "", 0, 0, 0, errImageTooLarge},
		{"png zero", pngHeader(0, 5), "", 0, 0, 0, errImageBad},
		{"gif 10000 frames", gifFramesOf(1, 1, 10_000), "", 0, 0, 0, errImageTooLarge},
		{"gif 500 frames of 100x100 (20 MB decoded)", gifFramesOf(100, 100, 500), "image/gif", 100, 100, 500, nil},
		{"gif 400 frames of 300x300 (144 MB decoded)", gifFramesOf(300, 300, 400), "", 0, 0, 0, errImageTooLarge},
		{"gif truncated", gifFramesOf(8, 8, 3)[:60], "", 0, 0, 0, errImageBad},
		{"gif frame outside the screen", func() []byte { g := gifFramesOf(8, 8, 1); g[len(g)-12] = 9; return g }(), "", 0, 0, 0, errImageBad},
		{"webp 16M canvas", webpOf("VP8X", vp8x(1<<24, 1<<24, false)), "", 0, 0, 0, errImageTooLarge},
		{"webp 501 frames", webpOf("VP8X", vp8x(2, 2, true), tooMany...), "", 0, 0, 0, errImageTooLarge},
		{"webp bad riff size", func() []byte { w := webpOf("VP8L", vp8l); w[4] = 0xff; return w }(), "", 0, 0, 0, errImageBad},
		{"webp unknown chunk", webpOf("ABCD", vp8), "", 0, 0, 0, errImageBad},
		{"over 20 MiB", append(pngOf(t, 2, 2), make([]byte, richproto.MaxImageBytes)...), "", 0, 0, 0, errImageTooLarge},
		{"bmp", []byte("BM\x00\x00\x00\x00"), "", 0, 0, 0, errNotImage},
		{"text", []byte("hello"), "", 0, 0, 0, errNotImage},
	} {
		info, err := prepareImage(c.data)
		if c.err != nil {
			if !errors.Is(err, c.err) {
				t.Errorf("%s: got %v, want %v", c.name, err, c.err)
			}
			continue
		}
		if err != nil || info.mediaType != c.mediaType || info.width != c.w || info.height != c.h || info.frames != c.n {
			t.Errorf("%s: got %+v %v, want %s %dx%d %d frames", c.name, info, err, c.mediaType, c.w, c.h, c.n)
		}
	}
}

// FuzzPrepareImage: any bytes give an error or an image within every bound.
func FuzzPrepareImage(f *testing.F) {
	f.Add(pngOf(f, 3, 3))
	f.Add(pngHeader(60000, 60000))
	f.Add(gifFramesOf(4, 4, 2))
	f.Add(webpOf("VP8X", vp8x(10, 10, true), make([]byte, 4), make([]byte, 3)))
	f.Add(webpOf("VP8L", []byte{0x2f, 1, 2, 3, 4}))
	f.Add(webpOf("VP8 ", []byte{0, 0, 0, 0x9d, 0x01, 0x2a, 64, 0, 32, 0}))
	f.Fuzz(func(t *testing.T, data []byte) {
		info, err := prepareImage(data)
		if err != nil {
			return
		}
		if info.width < 1 || info.height < 1 || info.width > MaxImageSide || info.height > MaxImageSide ||
			info.frames < 1 || info.frames > MaxImageFrames || info.decoded > richproto.MaxDecodedImages || len(data) > richproto.MaxImageBytes {
			t.Fatalf("accepted out of bounds: %+v", info)
		}
	})
}

// BenchmarkPrepareImage: header checks of the hostile images (no pixel is
// decoded): the refusal of a 10,000-frame GIF stops at frame 501.
func BenchmarkPrepareImage(b *testing.B) {
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"png-60000x60000", pngHeader(60000, 60000)},
		{"gif-10000-frames", gifFramesOf(1, 1, 10_000)},
		{"gif-500-frames", gifFramesOf(100, 100, 500)},
		{"png-1000x1000", pngOf(b, 1000, 1000)},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				prepareImage(c.data)
			}
		})
	}
}
