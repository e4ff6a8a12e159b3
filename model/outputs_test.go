package model

import (
	"strings"
	"testing"
)

// TestOutputsPrepare: the checks every target's Forward relies on, and the buffers' sizes and reuse.
func TestOutputsPrepare(t *testing.T) {
	o := NewOutputs(10, 3)
	for _, c := range []struct {
		r    Request
		want string
	}{
		{Request{}, "no tokens"},
		{Request{Tokens: []int{1, 10}}, "token 10 outside vocabulary of 10"},
		{Request{Tokens: []int{-1}}, "token -1 outside"},
		{Request{Tokens: []int{1}, Taps: []int{3}}, "tap of layer 3 outside [0, 3)"},
		{Request{Tokens: []int{1}, Taps: []int{1, 1}}, "layer 1 tapped twice"},
		{Request{Tokens: []int{1}, Logits: LogitRows(9)}, "unknown logit rows 9"},
	} {
		if _, err := o.Prepare(c.r, 10, 4); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.r, err, c.want)
		}
	}
	// Three rows, all with logits, taps of layers 2 and 0: TapIdx maps layers to request order.
	res, err := o.Prepare(Request{Tokens: []int{1, 2, 3}, Logits: LogitsAll, Taps: []int{2, 0}}, 10, 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Logits) != 30 || len(res.Taps) != 2 || len(res.Taps[0]) != 12 || len(res.Taps[1]) != 12 {
		t.Fatalf("sizes: logits %d, taps %d", len(res.Logits), len(res.Taps))
	}
	if o.TapIdx[0] != 1 || o.TapIdx[1] != -1 || o.TapIdx[2] != 0 {
		t.Errorf("TapIdx %v, want [1 -1 0]", o.TapIdx)
	}
	// A smaller request reuses the buffers: no allocation, the same backing arrays.
	var small Result
	if allocs := testing.AllocsPerRun(10, func() {
		small, _ = o.Prepare(Request{Tokens: []int{4}, Logits: LogitsLast, Taps: []int{1}}, 10, 4)
	}); allocs != 0 {
		t.Errorf("a smaller request allocated %v times", allocs)
	}
	if &small.Logits[0] != &res.Logits[0] || len(small.Logits) != 10 || len(small.Taps[0]) != 4 {
		t.Errorf("the smaller request did not reuse the buffers")
	}
	if o.TapIdx[1] != 0 || o.TapIdx[0] != -1 || o.TapIdx[2] != -1 {
		t.Errorf("TapIdx %v after the second request, want [-1 0 -1]", o.TapIdx)
	}
}
