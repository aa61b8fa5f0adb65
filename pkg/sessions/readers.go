package sessions

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// MaxReaderBytes bounds a reader key (a principal id of at most 256
// characters, or the worker's key of a turn without one).
const MaxReaderBytes = 1024

// ReaderRecord is a readers entry's object: the turn, its reader (the
// key private exchanges are private to) and whether a private memory
// prompt block was part of the turn (it taints the turn's record).
type ReaderRecord struct {
	Turn          string `json:"turn"`
	Reader        string `json:"reader"`
	PrivateMemory bool   `json:"privateMemory,omitempty"`
}

// ReadersJSON encodes r for a readers entry.
func ReadersJSON(r ReaderRecord) json.RawMessage {
	b, _ := json.Marshal(r)
	return b
}

// decodeReaders decodes a readers object strictly.
func decodeReaders(raw json.RawMessage) (ReaderRecord, error) {
	var r ReaderRecord
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return r, errors.New("readers object malformed")
	}
	if r.Turn == "" || len(r.Turn) > MaxIDBytes || len(r.Reader) > MaxReaderBytes || !utf8.ValidString(r.Reader) {
		return r, fmt.Errorf("readers needs a turn of 1 to %d bytes and a reader of at most %d bytes of UTF-8", MaxIDBytes, MaxReaderBytes)
	}
	return r, nil
}

// lastReaders is the last readers entry of entries, nil when none.
func lastReaders(entries []Entry) *Entry {
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].Type == TypeReaders {
			e := entries[i]
			return &e
		}
	}
	return nil
}
