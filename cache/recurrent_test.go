package cache

import (
	"errors"
	"slices"
	"testing"
)

// fakeForward plays a model's part on a hybrid cache: rows tokens at the current offset, each
// adding its value to every element of the state and shifting it into the one-slot conv window,
// with the states after each row recorded when the cache asks for it.
func fakeForward(t *testing.T, h *Hybrid, kv *KV, rows ...float32) {
	t.Helper()
	base := h.Offset()
	rec := h.Records(len(rows))
	for i, v := range rows {
		for l := range h.Layers {
			for e := range h.State[l] {
				h.State[l][e] += v
			}
			h.Conv[l][0] = v
			if rec && i < len(rows)-1 {
				conv, st := h.Snapshot(i, l)
				copy(conv, h.Conv[l])
				copy(st, h.State[l])
			}
		}
	}
	if err := kv.Advance(len(rows)); err != nil {
		t.Fatal(err)
	}
	h.Committed(base, len(rows), rec)
}

// TestHybridRestoreRow narrates a verify round: a prompt of 2 rows, a verify of 4 rows, of which
// the first 2 are kept (RestoreRow(1)); then an earlier row is still restorable, a later one not.
func TestHybridRestoreRow(t *testing.T) {
	kv := NewKV(1, 16, 2)
	h := NewHybrid(kv, []RecurrentShape{{ConvLen: 1, StateLen: 3}, {ConvLen: 1, StateLen: 2}})
	if CanRewind(h) || !CanRewind(kv) {
		t.Fatalf("CanRewind: hybrid %v, KV %v", CanRewind(h), CanRewind(kv))
	}
	h.EnableSnapshots(4)
	fakeForward(t, h, kv, 1, 2)
	fakeForward(t, h, kv, 10, 20, 30, 40)
	if err := h.RestoreRow(1); err != nil {
		t.Fatal(err)
	}
	// Kept: prompt 1+2, then 10 and 20: offset 4, state 33, conv window 20.
	if h.Offset() != 4 || h.State[0][0] != 33 || h.State[1][1] != 33 || h.Conv[0][0] != 20 {
		t.Fatalf("after RestoreRow(1): offset %d, state %v, conv %v", h.Offset(), h.State, h.Conv)
	}
	if err := h.RestoreRow(2); err == nil {
		t.Error("RestoreRow(2) after the round was cut at row 1 succeeded")
	}
	if err := h.RestoreRow(0); err != nil || h.Offset() != 3 || h.State[0][2] != 13 || h.Conv[1][0] != 10 {
		t.Fatalf("RestoreRow(0): offset %d, state %v, conv %v, err %v", h.Offset(), h.State, h.Conv, err)
	}
	if err := h.Rewind(1); !errors.Is(err, ErrNoRewind) || h.Offset() != 3 {
		t.Errorf("Rewind(1): err %v, offset %d", err, h.Offset())
	}
	if err := h.Rewind(0); err != nil || h.Offset() != 0 || !slices.Equal(h.State[0], []float32{0, 0, 0}) || h.Conv[0][0] != 0 {
		t.Errorf("Rewind(0): err %v, offset %d, state %v", err, h.Offset(), h.State)
	}
}

// TestHybridUnrecorded: a forward deeper than the snapshots, or any forward with them disabled,
// can only be kept whole.
func TestHybridUnrecorded(t *testing.T) {
	kv := NewKV(1, 16, 2)
	h := NewHybrid(kv, []RecurrentShape{{ConvLen: 1, StateLen: 1}})
	fakeForward(t, h, kv, 1, 2, 3)
	if err := h.RestoreRow(0); err == nil {
		t.Error("RestoreRow(0) without snapshots succeeded")
	}
	if err := h.RestoreRow(2); err != nil || h.Offset() != 3 {
		t.Errorf("RestoreRow of the last row: err %v, offset %d", err, h.Offset())
	}
	h.EnableSnapshots(2)
	fakeForward(t, h, kv, 4, 5, 6)
	if err := h.RestoreRow(1); err == nil {
		t.Error("RestoreRow(1) of a 3-row forward with 2 snapshot rows succeeded")
	}
	if h.Offset() != 6 || h.State[0][0] != 21 {
		t.Errorf("failed restores changed the cache: offset %d, state %v", h.Offset(), h.State)
	}
}

// TestHybridCheckpoint: a checkpoint saved after 2 rows survives later forwards and brings the
// cache back to exactly those 2 rows; one past the offset, or of another shape, is refused.
func TestHybridCheckpoint(t *testing.T) {
	kv := NewKV(1, 16, 2)
	h := NewHybrid(kv, []RecurrentShape{{ConvLen: 1, StateLen: 3}, {ConvLen: 1, StateLen: 2}})
	fakeForward(t, h, kv, 1, 2)
	var cp Checkpoint
	h.SaveCheckpoint(&cp)
	fakeForward(t, h, kv, 10, 20, 30)
	if err := h.RestoreCheckpoint(&cp); err != nil {
		t.Fatal(err)
	}
	if h.Offset() != 2 || kv.Offset() != 2 || !slices.Equal(h.State[0], []float32{3, 3, 3}) || h.Conv[1][0] != 2 {
		t.Fatalf("after restore: offset %d, state %v, conv %v", h.Offset(), h.State, h.Conv)
	}
	if err := h.RestoreRow(0); err == nil {
		t.Error("RestoreRow after a checkpoint restore succeeded")
	}
	if err := h.Rewind(0); err != nil {
		t.Fatal(err)
	}
	if err := h.RestoreCheckpoint(&cp); err == nil || h.Offset() != 0 {
		t.Errorf("restore of a checkpoint past the offset: err %v, offset %d", err, h.Offset())
	}
	other := NewHybrid(NewKV(1, 16, 2), []RecurrentShape{{ConvLen: 1, StateLen: 3}})
	fakeForward(t, other, other.KV.(*KV), 1, 2, 3)
	if err := other.RestoreCheckpoint(&cp); err == nil || other.Offset() != 3 {
		t.Errorf("restore of another shape's checkpoint: err %v, offset %d", err, other.Offset())
	}
}

// The memory a hybrid cache's extra states hold: one state is every layer's conv window and
// state, 4 bytes a float; snapshot slots are one state per verify row but the last; a
// checkpoint is one state once saved.
func TestHybridStateBytes(t *testing.T) {
	kv := NewKV(1, 16, 2)
	h := NewHybrid(kv, []RecurrentShape{{ConvLen: 1, StateLen: 3}, {ConvLen: 2, StateLen: 5}})
	if got := h.StateBytes(); got != 4*(1+3+2+5) {
		t.Fatalf("StateBytes %d, want 44", got)
	}
	if h.SnapshotBytes() != 0 {
		t.Fatalf("SnapshotBytes %d before snapshots are enabled", h.SnapshotBytes())
	}
	h.EnableSnapshots(4)
	if got := h.SnapshotBytes(); got != 3*44 {
		t.Fatalf("SnapshotBytes %d for 4 rows, want 3 states (132)", got)
	}
	h.EnableSnapshots(2) // fewer rows keep the slots
	if got := h.SnapshotBytes(); got != 3*44 {
		t.Fatalf("SnapshotBytes %d after asking fewer rows, want the 132 still held", got)
	}
	var cp Checkpoint
	if cp.Bytes() != 0 {
		t.Fatalf("unsaved checkpoint holds %d bytes", cp.Bytes())
	}
	fakeForward(t, h, kv, 1, 2)
	h.SaveCheckpoint(&cp)
	if cp.Bytes() != 44 || cp.Offset() != 2 {
		t.Fatalf("checkpoint at %d holds %d bytes, want 2 and 44", cp.Offset(), cp.Bytes())
	}
}

// While forwards are marked kept whole (a prefill), nothing is recorded, so a short forward
// costs no state copies; RestoreRow can then only keep its last row. Unmarked, recording is back.
func TestHybridKeepAllRecordsNothing(t *testing.T) {
	kv := NewKV(1, 16, 2)
	h := NewHybrid(kv, []RecurrentShape{{ConvLen: 1, StateLen: 2}})
	h.EnableSnapshots(4)
	h.SetKeepAll(true)
	if h.Records(3) {
		t.Fatal("a kept-whole forward records")
	}
	fakeForward(t, h, kv, 1, 2, 3)
	if err := h.RestoreRow(0); err == nil {
		t.Error("RestoreRow(0) of an unrecorded forward succeeded")
	}
	if err := h.RestoreRow(2); err != nil || h.Offset() != 3 {
		t.Errorf("RestoreRow of the last row: %v, offset %d", err, h.Offset())
	}
	h.SetKeepAll(false)
	fakeForward(t, h, kv, 10, 20)
	if err := h.RestoreRow(0); err != nil || h.Offset() != 4 || h.State[0][0] != 16 {
		t.Errorf("after SetKeepAll(false): %v, offset %d, state %v", err, h.Offset(), h.State)
	}
}
