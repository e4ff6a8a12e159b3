package splitmix

import "testing"

// TestReferenceValues: the first outputs of SplitMix64 from state 0 are the published reference
// sequence (Vigna's splitmix64.c), so every former copy of the generator keeps its numbers.
func TestReferenceValues(t *testing.T) {
	want := []uint64{0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f}
	var s Stream
	for i, w := range want {
		if got := s.Next(); got != w {
			t.Fatalf("output %d: got %#x, want %#x", i, got, w)
		}
	}
}

// TestMixIsOneStep: Mix(x) is the output of a stream at state x.
func TestMixIsOneStep(t *testing.T) {
	for _, x := range []uint64{0, 1, 42, 1 << 63} {
		s := Stream{State: x}
		if got, want := Mix(x), s.Next(); got != want {
			t.Fatalf("Mix(%d) = %#x, stream gives %#x", x, got, want)
		}
	}
}

func TestFloat64InUnitInterval(t *testing.T) {
	s := Stream{State: 7}
	for i := 0; i < 10000; i++ {
		if f := s.Float64(); f < 0 || f >= 1 {
			t.Fatalf("draw %d = %v outside [0, 1)", i, f)
		}
	}
}
