package train

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
)

// A checkpoint file is a magic line, a little-endian uint32 header length, a JSON header naming
// the run (config and data sizes, so a resume against other settings is refused), then the
// parameters and AdamW's two moments as little-endian float32. The random state of both trainers
// is a function of (seed, step), so the step in the header is all of it.

// saveCheckpoint writes the checkpoint atomically: an interrupted write leaves the previous one.
func saveCheckpoint(path, magic string, header any, arrays ...[]float32) error {
	h, err := json.Marshal(header)
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	n := 0
	for _, a := range arrays {
		n += len(a)
	}
	buf := make([]byte, 0, len(magic)+4+len(h)+4*n)
	buf = append(buf, magic...)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(h)))
	buf = append(buf, h...)
	for _, a := range arrays {
		for _, v := range a {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
		}
	}
	return writeAtomic(path, buf)
}

// loadCheckpoint reads path into header and, once check accepts the header, into arrays (which
// must have the sizes the run expects). found is false, with no error, when there is no file.
// Errors name the file and what does not fit.
func loadCheckpoint(path, magic, what string, header any, check func() error, arrays ...[]float32) (found bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("resume: %w", err)
	}
	bad := func(why string) (bool, error) { return true, fmt.Errorf("resume %s: %s", path, why) }
	if len(b) < len(magic)+4 || string(b[:len(magic)]) != magic {
		return bad("not a dflash " + what + " checkpoint")
	}
	b = b[len(magic):]
	hl := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	if hl > len(b) {
		return bad("truncated header")
	}
	if err := json.Unmarshal(b[:hl], header); err != nil {
		return bad(err.Error())
	}
	b = b[hl:]
	if err := check(); err != nil {
		return bad(err.Error())
	}
	n := 0
	for _, a := range arrays {
		n += len(a)
	}
	if len(b) != 4*n {
		return bad(fmt.Sprintf("%d bytes of state, want %d", len(b), 4*n))
	}
	for _, a := range arrays {
		for i := range a {
			a[i] = math.Float32frombits(binary.LittleEndian.Uint32(b))
			b = b[4:]
		}
	}
	return true, nil
}
