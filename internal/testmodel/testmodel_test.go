package testmodel

import (
	"testing"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/model"
)

// TestTinyQwen35: the hybrid test target decodes, its cache says it cannot rewind and offers
// per-row snapshots, which tests of the snapshot verify path rely on.
func TestTinyQwen35(t *testing.T) {
	m := TinyQwen35(t)
	c := m.NewCache(32)
	if cache.CanRewind(c) {
		t.Fatal("hybrid cache says it can rewind")
	}
	s, ok := c.(cache.RowSnapshots)
	if !ok {
		t.Fatalf("%T offers no row snapshots", c)
	}
	s.EnableSnapshots(4)
	if _, err := m.Forward(c, model.Request{Tokens: []int{1, 2, 3, 4}, Logits: model.LogitsAll}); err != nil {
		t.Fatal(err)
	}
	if err := s.RestoreRow(1); err != nil || c.Offset() != 2 {
		t.Fatalf("RestoreRow(1): offset %d, err %v", c.Offset(), err)
	}
}
