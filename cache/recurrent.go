package cache

import (
	"errors"
	"fmt"
)

// Rewinder is implemented by a cache that may be unable to rewind to an arbitrary earlier
// offset. A cache without it rewinds anywhere in [0, Offset] (KV does).
type Rewinder interface {
	// CanRewind reports whether Rewind(to) works for every to in [0, Offset].
	CanRewind() bool
}

// CanRewind reports whether c rewinds to any earlier offset: true unless c is a Rewinder that
// says otherwise.
func CanRewind(c Cache) bool {
	if r, ok := c.(Rewinder); ok {
		return r.CanRewind()
	}
	return true
}

// RowSnapshots is what a cache that cannot rewind offers instead: the states after each row of
// its last forward, recorded inside that forward, so a verify of n rows that keeps k+1 of them
// can be cut back to exactly the state decoding those k+1 rows one by one leaves.
type RowSnapshots interface {
	// EnableSnapshots makes every later forward of at most rows rows record the state after each
	// of its rows. It allocates, once per sequence: call it when the sequence starts, with the
	// deepest verify it will run (rows = 1 + the most drafts a round). rows <= 1 disables it.
	EnableSnapshots(rows int)
	// SnapshotRows is the rows EnableSnapshots was given (0 when disabled).
	SnapshotRows() int
	// RestoreRow makes the cache exactly the state after row k (0-based) of the last forward: the
	// offset becomes its first position + k + 1, keys and values past it are dropped, and the
	// recurrent state is the one recorded after row k. It fails, changing nothing, when k is
	// outside the rows of the last forward still held, or that forward was not recorded (it had
	// more rows than SnapshotRows, or snapshots are disabled and k is not its last row).
	RestoreRow(k int) error
	// SetKeepAll says whether the coming forwards will be kept whole (a prompt's prefill), so
	// that they record nothing: a short prefill chunk would otherwise copy the whole state after
	// each of its rows, for nothing. While it is on, RestoreRow goes back only to a forward's
	// last row.
	SetKeepAll(on bool)
}

// ErrNoRewind is returned (wrapped) by the Rewind of a cache that cannot rewind to the offset
// asked for; RowSnapshots.RestoreRow is the way back for a verify round.
var ErrNoRewind = errors.New("cache cannot rewind a recurrent state")

// RecurrentShape is the per-layer state of a recurrent (linear-attention) layer: a causal conv
// window of ConvLen floats and a state of StateLen floats, both float32.
type RecurrentShape struct {
	ConvLen, StateLen int
}

// Hybrid is the cache of a hybrid target (Qwen3.5): a rewindable key/value cache for the
// full-attention layers and, per recurrent layer, a conv window and a state. It lives here,
// beside KV, because what it must guarantee is a cache matter (offsets, what a rollback restores),
// not arithmetic; the model owns the layouts inside Conv and State and fills the snapshot slots.
//
// Invariant: Conv and State are exactly the state after the Offset() committed rows, and so are
// the keys and values of KV below Offset(). A state that has folded a row in cannot drop it, so
// Rewind goes only to the current offset or to 0 (a fresh sequence); a verify round returns
// with RestoreRow. The snapshot design keeps, for each row t but the last of a recorded
// forward, a full copy of every layer's conv window and state (slot t): restoring is one copy
// and never re-runs a row. The last row needs no slot, since its state is the live one, so a
// depth-d verify (d+1 rows) costs d copies of the state per sequence, allocated once.
type Hybrid struct {
	KV     Cache // the full-attention layers' cache (the model says which type)
	Layers []RecurrentShape
	// Conv and State are the live states, one per recurrent layer.
	Conv, State [][]float32

	snapRows          int
	keepAll           bool          // SetKeepAll: forwards record nothing
	snapConv, snapSta [][][]float32 // [slot][layer]
	last              lastForward
}

// lastForward is what RestoreRow may go back into: rows [base, base+rows) of the last forward,
// and whether the states after all but its last held row are in the snapshot slots.
type lastForward struct {
	base, rows int
	recorded   bool
}

// NewHybrid allocates the live recurrent states (zero) next to kv, whose offset the hybrid shares.
func NewHybrid(kv Cache, layers []RecurrentShape) *Hybrid {
	h := &Hybrid{KV: kv, Layers: append([]RecurrentShape(nil), layers...)}
	h.Conv = make([][]float32, len(layers))
	h.State = make([][]float32, len(layers))
	for i, s := range layers {
		h.Conv[i] = make([]float32, s.ConvLen)
		h.State[i] = make([]float32, s.StateLen)
	}
	h.last = lastForward{base: kv.Offset()}
	return h
}

func (h *Hybrid) Offset() int { return h.KV.Offset() }

// CanRewind is false: see Hybrid.
func (h *Hybrid) CanRewind() bool { return false }

// Rewind goes to the current offset (nothing to do) or to 0, which clears every state for a new
// sequence. Any other offset fails with ErrNoRewind and changes nothing.
func (h *Hybrid) Rewind(to int) error {
	switch {
	case to == h.Offset():
		return nil
	case to == 0:
		if err := h.KV.Rewind(0); err != nil {
			return err
		}
		for i := range h.Conv {
			clear(h.Conv[i])
			clear(h.State[i])
		}
		h.last = lastForward{}
		return nil
	}
	return fmt.Errorf("cache: rewind from %d to %d: %w (use RestoreRow after a recorded forward)", h.Offset(), to, ErrNoRewind)
}

// EnableSnapshots allocates rows-1 slots (see Hybrid). Calling it again with no more rows than
// before keeps the slots.
func (h *Hybrid) EnableSnapshots(rows int) {
	if rows <= 1 {
		h.snapRows, h.snapConv, h.snapSta = 0, nil, nil
		h.last.recorded = false
		return
	}
	if rows <= h.snapRows {
		h.snapRows = rows
		return
	}
	for len(h.snapConv) < rows-1 {
		conv := make([][]float32, len(h.Layers))
		sta := make([][]float32, len(h.Layers))
		for i, s := range h.Layers {
			conv[i] = make([]float32, s.ConvLen)
			sta[i] = make([]float32, s.StateLen)
		}
		h.snapConv = append(h.snapConv, conv)
		h.snapSta = append(h.snapSta, sta)
	}
	h.snapRows = rows
}

func (h *Hybrid) SnapshotRows() int { return h.snapRows }

// StateBytes is the memory of one whole recurrent state (every layer's conv window and state):
// what the live state, each snapshot slot and each Checkpoint hold.
func (h *Hybrid) StateBytes() int64 { return StateBytes(h.Layers) }

// SnapshotBytes is the memory the snapshot slots hold: SnapshotRows()-1 states, or more when
// an earlier EnableSnapshots asked for more rows (slots are kept, never shrunk, until disabled).
func (h *Hybrid) SnapshotBytes() int64 { return int64(len(h.snapConv)) * h.StateBytes() }

// StateBytes is the memory of one recurrent state of the given layers, float32.
func StateBytes(layers []RecurrentShape) int64 {
	var n int64
	for _, s := range layers {
		n += int64(s.ConvLen + s.StateLen)
	}
	return 4 * n
}

// Records reports whether a forward of rows rows records per-row snapshots.
func (h *Hybrid) Records(rows int) bool {
	return !h.keepAll && h.snapRows > 1 && rows > 1 && rows <= h.snapRows
}

func (h *Hybrid) SetKeepAll(on bool) { h.keepAll = on }

// Snapshot is slot t's conv window and state of recurrent layer l, for the model to write the
// states after row t of a recording forward into (t < rows-1).
func (h *Hybrid) Snapshot(t, l int) (conv, state []float32) { return h.snapConv[t][l], h.snapSta[t][l] }

// Committed records that a forward of rows rows at the offset base has been committed: the model
// calls it after advancing KV, with recorded as Records(rows) said when the forward began.
func (h *Hybrid) Committed(base, rows int, recorded bool) {
	h.last = lastForward{base: base, rows: rows, recorded: recorded}
}

func (h *Hybrid) RestoreRow(k int) error {
	lf := h.last
	if k < 0 || k >= lf.rows {
		return fmt.Errorf("cache: restore row %d outside the %d rows of the last forward", k, lf.rows)
	}
	if h.Offset() != lf.base+lf.rows {
		return fmt.Errorf("cache: restore row %d: offset %d moved since the last forward ended at %d", k, h.Offset(), lf.base+lf.rows)
	}
	if k == lf.rows-1 {
		return nil // the live state is the one after the last row
	}
	if !lf.recorded {
		return fmt.Errorf("cache: restore row %d of a %d-row forward that recorded no snapshots (snapshot rows %d)", k, lf.rows, h.snapRows)
	}
	if err := h.KV.Rewind(lf.base + k + 1); err != nil {
		return err
	}
	for l := range h.Layers {
		copy(h.Conv[l], h.snapConv[k][l])
		copy(h.State[l], h.snapSta[k][l])
	}
	// Slots below k still hold the states after those rows, so an earlier row can still be
	// restored; slot k and above are no longer rows of this cache.
	h.last.rows = k + 1
	return nil
}

// Checkpoint is a Hybrid's whole recurrent state (every conv window and state) at one offset.
// The keys and values below that offset are not copied: they stay in the rewindable KV, so a
// checkpoint is valid only while the cache's rows below its offset are unchanged since it was
// saved (the caller's bookkeeping; the runner drops checkpoints past any offset it goes below).
// Its memory is one full recurrent state, allocated on the first save and reused after.
type Checkpoint struct {
	offset      int
	conv, state [][]float32
}

// Offset is the number of rows the checkpoint's state has folded in.
func (cp *Checkpoint) Offset() int { return cp.offset }

// Bytes is the memory the checkpoint holds (0 before its first save).
func (cp *Checkpoint) Bytes() int64 {
	var n int
	for l := range cp.conv {
		n += cap(cp.conv[l]) + cap(cp.state[l])
	}
	return 4 * int64(n)
}

// Checkpointer is a cache that cannot rewind but can save its state at the current offset and
// later go back to it.
type Checkpointer interface {
	// SaveCheckpoint makes cp the cache's state at its current offset.
	SaveCheckpoint(cp *Checkpoint)
	// RestoreCheckpoint makes the cache exactly the state after cp.Offset() rows, given that its
	// rows below that offset are the ones cp was saved with. It fails, changing nothing, when
	// cp is past the current offset or shaped for another cache.
	RestoreCheckpoint(cp *Checkpoint) error
}

func (h *Hybrid) SaveCheckpoint(cp *Checkpoint) {
	if len(cp.conv) != len(h.Layers) {
		cp.conv = make([][]float32, len(h.Layers))
		cp.state = make([][]float32, len(h.Layers))
	}
	for l := range h.Layers {
		// Exact sizes (append would round capacity up): a checkpoint holds one state, no more.
		if len(cp.conv[l]) != len(h.Conv[l]) || len(cp.state[l]) != len(h.State[l]) {
			cp.conv[l] = make([]float32, len(h.Conv[l]))
			cp.state[l] = make([]float32, len(h.State[l]))
		}
		copy(cp.conv[l], h.Conv[l])
		copy(cp.state[l], h.State[l])
	}
	cp.offset = h.Offset()
}

func (h *Hybrid) RestoreCheckpoint(cp *Checkpoint) error {
	if cp.offset > h.Offset() {
		return fmt.Errorf("cache: restore a checkpoint at %d past the offset %d", cp.offset, h.Offset())
	}
	if len(cp.conv) != len(h.Layers) {
		return fmt.Errorf("cache: restore a checkpoint of %d recurrent layers into %d", len(cp.conv), len(h.Layers))
	}
	for l, s := range h.Layers {
		if len(cp.conv[l]) != s.ConvLen || len(cp.state[l]) != s.StateLen {
			return fmt.Errorf("cache: restore a checkpoint whose layer %d holds %d+%d floats, want %d+%d", l, len(cp.conv[l]), len(cp.state[l]), s.ConvLen, s.StateLen)
		}
	}
	if err := h.KV.Rewind(cp.offset); err != nil {
		return err
	}
	for l := range h.Layers {
		copy(h.Conv[l], cp.conv[l])
		copy(h.State[l], cp.state[l])
	}
	// The last forward's rows are gone: nothing is left for RestoreRow.
	h.last = lastForward{base: cp.offset}
	return nil
}
