package safetensors

import "testing"

// FuzzParseHeader feeds arbitrary file images to Parse. Parse must never panic, and whatever it
// accepts must be internally consistent: every tensor's data has exactly dtype size x shape
// product bytes, and conversions either succeed or fail with an error.
func FuzzParseHeader(f *testing.F) {
	f.Add(rawFile(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)))
	f.Add(rawFile(`{"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[1,2],"data_offsets":[0,4]},"b":{"dtype":"F16","shape":[],"data_offsets":[4,6]}}`, make([]byte, 6)))
	f.Add(rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, make([]byte, 12)))
	f.Add(rawFile(`{"e":{"dtype":"I64","shape":[0],"data_offsets":[0,0]}}`, nil))
	f.Add(rawFile(`{"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, make([]byte, 4)))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("fuzz", data)
		if err != nil {
			return
		}
		for _, name := range file.Names() {
			tn, err := file.Tensor(name)
			if err != nil {
				t.Fatalf("listed tensor %q not found: %v", name, err)
			}
			if len(tn.Data) != tn.Elements()*tn.DType.Size() {
				t.Fatalf("tensor %q: %d bytes for %s %v", name, len(tn.Data), tn.DType, tn.Shape)
			}
			if v, err := tn.F32(); err == nil && len(v) != tn.Elements() {
				t.Fatalf("tensor %q: F32 gave %d values for %d elements", name, len(v), tn.Elements())
			}
			if v, err := tn.BF16(); err == nil && len(v) != tn.Elements() {
				t.Fatalf("tensor %q: BF16 gave %d values for %d elements", name, len(v), tn.Elements())
			}
		}
	})
}
